"""What a name holds is read from its assignment first; its name tells only where none does."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

from profreport import pysource
from profreport.inputs import shown_source

sys.path.insert(0, str(Path(__file__).parent))
from conftest import loop_named_only, loop_origin  # noqa: E402


def test_an_assignment_wins_over_a_name_that_says_it_holds_a_loader() -> None:
    """``train_loader = open(path)`` then ``for line in train_loader:``, or ``val_loaders =
    [open(a), open(b)]`` then ``zip(*val_loaders)``: the name said DataLoader before the
    assignment was read, so a loop over files was taken for the DataLoader loop and its time
    for the DataLoader wait. The assignment shown wins; the name tells only where none is shown
    (a parameter), or the one shown calls a function whose result the source does not show."""
    shown = {"train_loader": "open(path)", "val_loaders": "[open(a), open(b)]",
             "test_loader": "build_loader(cfg)", "it": "iter(test_loader)",
             "loader_it": "iter(train_loader)", "dl": "DataLoader(ds, batch_size=8)",
             "cfg": "yaml.load(f)"}.get
    assert not pysource.is_dataloader_loop_line("    for line in train_loader:", shown)
    assert not pysource.is_dataloader_loop_line("    for a, b in zip(*val_loaders):", shown)
    assert pysource.dataloader_origin("enumerate(train_loader)", shown) == ("open(path)", False)
    assert pysource.dataloader_origin("zip(train_loader, dl)", shown) == (
        "zip(train_loader, dl), train_loader = open(path), dl = DataLoader(ds, batch_size=8)",
        True)
    # An iterator named for a loader, assigned the iterator of a file: no DataLoader.
    assert pysource.dataloader_origin("loader_it", shown) == (
        "iter(train_loader), train_loader = open(path)", False)
    # A factory whose result is not shown: the name is the evidence, and says so.
    assert pysource.dataloader_origin("it", shown) == (
        "iter(test_loader), test_loader = build_loader(cfg)", True)
    assert pysource.named_only("it", shown)
    assert pysource.named_only("param_loader", shown)
    assert not pysource.named_only("iter(dl)", shown)
    # No name saying so: a call whose result is not shown is none, as before.
    assert pysource.dataloader_origin("cfg", shown) == ("yaml.load(f)", False)


def test_a_parameter_hides_what_an_enclosing_scope_assigns_the_same_name() -> None:
    """A function's parameter is what its caller passes, not the module's name of the same
    spelling: ``dl = DataLoader(ds)`` at module level and ``def fit(dl): for x in dl:`` read
    the module's DataLoader into the parameter."""
    source = ["dl = DataLoader(ds)", "train_loader = open(path)", "",
              "def fit(dl, train_loader):", "    for x in dl:", "        pass",
              "    for y in train_loader:", "        pass", "",
              "def other():", "    for x in dl:", "        pass"]
    scopes = pysource.SourceScopes(source)
    assert scopes.assigned(4, 5, "dl") is None
    assert scopes.assigned(4, 7, "train_loader") is None
    assert scopes.assigned(10, 11, "dl") == "DataLoader(ds)"
    assert pysource.is_dataloader_loop_line(source[6], lambda name: scopes.assigned(4, 7, name))
    assert not pysource.is_dataloader_loop_line(source[4],
                                                lambda name: scopes.assigned(4, 5, name))


COMPREHENDED = """\
import torch
from torch.utils.data import DataLoader


def fit(model, sets, splits):
    loaders = [DataLoader(ds, batch_size=64, num_workers=4) for ds in sets]
    by_split = {k: DataLoader(v, batch_size=64, num_workers=4) for k, v in splits.items()}
    files = [open(a) for a in ("a.txt", "b.txt")]
    for x, y in loaders[0]:
        model(x)
    for x, y in by_split["train"]:
        model(x)
    for dl in loaders:
        for x, y in dl:
            model(x)
    for i, dl in enumerate(by_split.values()):
        for x, y in dl:
            model(x)
    for name, dl in by_split.items():
        for x, y in dl:
            model(x)
    for f in files:
        for line in f:
            model(line)
    for batch in loaders[1]:
        for sample in batch:
            model(sample)
"""


def test_a_comprehension_of_dataloaders_is_followed_to_its_items() -> None:
    """``loaders = [DataLoader(ds, batch_size=64) for ds in sets]`` then ``for x, y in
    loaders[0]:``, ``by_split = {k: DataLoader(v) for k, v in splits.items()}`` then ``for x,
    y in by_split["train"]:``, or ``for dl in loaders: for x, y in dl:``: each loop iterates
    over a DataLoader, but a subscript was never followed, nor a ``for`` target, and a
    comprehension never read, so none was a DataLoader loop (unknown); the item of a list of
    files, or of a batch, stays none."""
    source = COMPREHENDED.splitlines()
    scopes = pysource.SourceScopes(source)

    def loops(lineno: int) -> bool:
        """Whether the line at ``lineno`` loops over a DataLoader, as the parser reads it."""
        return pysource.is_dataloader_loop_line(
            source[lineno - 1], lambda name: scopes.assigned(5, lineno, name))

    assert [n for n in range(1, len(source) + 1) if loops(n)] == [9, 11, 14, 17, 20, 25]
    assert [n for n in range(1, len(source) + 1) if pysource.is_loop_line(source[n - 1])] == [
        9, 11, 13, 14, 16, 17, 19, 20, 22, 23, 25, 26]
    assert scopes.assigned(5, 14, "dl") == "next(iter(loaders))"
    assert scopes.assigned(5, 20, "dl") == "next(iter(by_split.values()))"
    assert not pysource.named_only("dl", lambda name: scopes.assigned(5, 14, name))
    # The knobs of DataLoader calls in comprehensions are read, as any call's.
    assert scopes.loader_calls == [
        (6, {"batch_size": 64, "num_workers": 4, "pin_memory": False}),
        (7, {"batch_size": 64, "num_workers": 4, "pin_memory": False})]
    # A key the dict literal does not hold, an index past the list: not shown.
    shown = {"named": '{"train": DataLoader(a)}', "pair": "[DataLoader(a), DataLoader(b)]"}.get
    assert pysource.dataloader_origin('named["test"]', shown)[1] is None
    assert pysource.dataloader_origin('named["values"]', shown)[1] is None  # no such key
    assert pysource.dataloader_origin("pair[-1]", shown)[1] is True
    assert pysource.dataloader_origin("pair[2]", shown)[1] is None


FACTORIES = """\
from torch.utils.data import DataLoader


def make_loaders(cfg):
    train_set, val_set = build(cfg)
    train = DataLoader(train_set, batch_size=cfg.bs, shuffle=True, num_workers=4)
    val = DataLoader(val_set, batch_size=256)
    return train, val


def get_loader(split):
    if split == "train":
        return DataLoader(ds_train, batch_size=32, shuffle=True)
    return DataLoader(ds_val, batch_size=32)


def passthrough(loader):
    return loader


def opened(path):
    return open(path)


def main(cfg, files):
    tl, vl = make_loaders(cfg)
    for x, y in tl:
        pass
    dl = get_loader("train")
    for x, y in dl:
        pass
    same = passthrough(files)
    for x in same:
        pass
    train_loader = opened("a.txt")
    for line in train_loader:
        pass
"""


def test_a_loader_a_function_of_the_file_returns_is_followed_into_it() -> None:
    """``tl, vl = make_loaders(cfg)`` or ``dl = get_loader("train")``, from functions the same
    file defines that return DataLoaders, then ``for x, y in tl:``: the tuple target was not
    bound and the call's result not read, so ``tl`` was unknown and ``dl`` no DataLoader (a
    call), both loops left to hit counts; ``train_loader = opened(path)`` (returning a file)
    was one by its name. What the function returns is read in its own scope; one returning
    its parameter shows nothing."""
    source = FACTORIES.splitlines()
    scopes = pysource.SourceScopes(source)
    main = source.index("def main(cfg, files):") + 1

    def origin(lineno: int) -> tuple[str | None, bool | None]:
        """dataloader_origin of the loop at ``lineno``."""
        return loop_origin(source, scopes, main, lineno)

    assert origin(main + 2) == (
        "make_loaders(cfg)[0], make_loaders() = (DataLoader(build(cfg)[0], batch_size=cfg.bs, "
        "shuffle=True, num_workers=4), DataLoader(build(cfg)[1], batch_size=256))", True)
    assert origin(main + 5) == (
        "get_loader('train'), get_loader() = DataLoader(ds_val, batch_size=32) if ... else "
        "DataLoader(ds_train, batch_size=32, shuffle=True)", True)
    assert origin(main + 8) == ("passthrough(files)", False)
    assert origin(main + 11) == ("opened('a.txt'), opened() = open(path)", False)
    assert not pysource.named_only("tl", lambda name: scopes.assigned(main, main + 2, name))
    assert scopes.returned("passthrough") is None and scopes.returned("absent") is None


TRAINER = """\
from torch.utils.data import DataLoader


class Trainer:
    def __init__(self, model, train_set, val_loader, cfg):
        self.model = model
        self.train_dl = DataLoader(train_set, batch_size=cfg.bs, num_workers=2)
        self.val_loader = val_loader
        self.test_loader = open(cfg.path)
        self.extra = None

    def setup(self):
        self.extra = DataLoader(self.model.ds, batch_size=8)

    def fit(self):
        for x, y in self.train_dl:
            self.model(x)
        for x, y in self.val_loader:
            self.model(x)
        for line in self.test_loader:
            pass
        for x in self.extra:
            pass
"""


def test_an_attribute_is_what_the_methods_of_its_class_assign_it() -> None:
    """``self.train_dl = DataLoader(...)`` in ``__init__``, then ``for x, y in self.train_dl:``
    in ``fit()``: the attribute was judged by its name alone (``train_dl`` says nothing:
    unknown), and ``self.test_loader = open(path)`` was a DataLoader by its name. What the
    class's methods assign the attribute is read in their scopes (a None placeholder left
    out); one assigned a parameter (``self.val_loader = val_loader``) is left to its name."""
    source = TRAINER.splitlines()
    scopes = pysource.SourceScopes(source)
    fit = source.index("    def fit(self):") + 1

    def origin(lineno: int) -> tuple[str | None, bool | None]:
        """dataloader_origin of the loop at ``lineno``."""
        return loop_origin(source, scopes, fit, lineno)

    assert origin(fit + 1) == ("DataLoader(train_set, batch_size=cfg.bs, num_workers=2)", True)
    assert origin(fit + 3) == ("self.val_loader", True)
    assert pysource.named_only("self.val_loader", lambda name: scopes.assigned(fit, 18, name))
    assert origin(fit + 5) == ("open(cfg.path)", False)
    assert origin(fit + 7) == ("DataLoader(self.model.ds, batch_size=8)", True)


NESTED = """\
from torch.utils.data import DataLoader


def main(cfg):
    def make_loader(split):
        ds = build(cfg, split)
        return DataLoader(ds, batch_size=32, num_workers=4, pin_memory=True)

    def make_files():
        return open(cfg.path)

    dl = make_loader("train")
    for x, y in dl:
        pass
    train_loader = make_files()
    for line in train_loader:
        pass

    def evaluate():
        for x, y in make_loader("val"):
            pass
    evaluate()


def other(make_loader):
    for x, y in make_loader("train"):
        pass
    for x, y in helper():
        pass


def helper():
    def make_loader():
        return DataLoader(ds_test)
    return open("log.txt")
"""


def test_a_factory_nested_in_a_function_is_followed_into_it() -> None:
    """``def make_loader(split): return DataLoader(...)`` defined inside ``main()``, then ``dl =
    make_loader("train")``, ``for x, y in dl:``: only a function the module defines was
    followed, so the call's result was not shown and ``dl`` read as no DataLoader (a call, no
    name saying so), and ``train_loader = make_files()`` (returning a file) as one by its name.
    A nested function is read where its name is seen: in the function defining it and the
    functions nested there (``evaluate()``), not elsewhere (a parameter of that name in
    ``other()``, a factory nested in ``helper()``)."""
    source = NESTED.splitlines()
    scopes = pysource.SourceScopes(source)
    main = source.index("def main(cfg):") + 1
    made = ("make_loader() = DataLoader(build(cfg, split), batch_size=32, num_workers=4, "
            "pin_memory=True)")

    def origin(first: int, lineno: int) -> tuple[str | None, bool | None]:
        """dataloader_origin of the loop at ``lineno`` of the function starting at ``first``."""
        return loop_origin(source, scopes, first, lineno)

    assert origin(main, main + 9) == (f"make_loader('train'), {made}", True)
    assert not pysource.named_only("dl", lambda name: scopes.assigned(main, main + 9, name))
    assert origin(main, main + 12) == ("make_files(), make_files() = open(cfg.path)", False)
    evaluate = source.index("    def evaluate():") + 1
    assert origin(evaluate, evaluate + 1) == (f"make_loader('val'), {made}", True)
    other = source.index("def other(make_loader):") + 1
    assert origin(other, other + 1) == ("make_loader('train')", False)
    assert origin(other, other + 3) == ("helper(), helper() = open('log.txt')", False)
    assert scopes.returned("make_loader") is None


METHODS = """\
from torch.utils.data import DataLoader


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.loader = self.build_loader("train")
        self.log = self.open_log()

    def build_loader(self, split):
        ds = make_dataset(self.cfg, split)
        return DataLoader(ds, batch_size=self.cfg.bs, num_workers=8, pin_memory=True)

    def open_log(self):
        return open(self.cfg.log)

    def fit(self):
        for x, y in self.loader:
            pass
        for x, y in self.build_loader("val"):
            pass
        val_loader = self.open_log()
        for line in val_loader:
            pass
        for x, y in self.inherited_loader():
            pass
        for line in self.log:
            pass


def build_loader(split):
    return open(split)
"""


def test_a_loader_a_method_returns_is_followed_into_it() -> None:
    """``self.loader = self.build_loader("train")`` in ``__init__``, or ``for x, y in
    self.build_loader("val"):``, where the class's ``build_loader`` returns a DataLoader: a
    method call's result was never read, so the first loop was a DataLoader loop by its name
    alone (evidence ``name``), the second none (a call, no name saying so), and ``val_loader =
    self.open_log()`` (returning a file) one by its name. A method is what the class of the
    calling method defines (never the module's function of the same name); one it does not
    define (inherited) shows nothing."""
    source = METHODS.splitlines()
    scopes = pysource.SourceScopes(source)
    fit = source.index("    def fit(self):") + 1
    built = ("self.build_loader() = DataLoader(make_dataset(self.cfg, split), "
             "batch_size=self.cfg.bs, num_workers=8, pin_memory=True)")

    def origin(lineno: int) -> tuple[str | None, bool | None]:
        """dataloader_origin of the loop at ``lineno``."""
        return loop_origin(source, scopes, fit, lineno)

    assert origin(fit + 1) == (f"self.build_loader('train'), {built}", True)
    assert not pysource.named_only("self.loader",
                                   lambda name: scopes.assigned(fit, fit + 1, name))
    assert origin(fit + 3) == (f"self.build_loader('val'), {built}", True)
    assert origin(fit + 6) == ("self.open_log(), self.open_log() = open(self.cfg.log)", False)
    assert origin(fit + 8) == ("self.inherited_loader()", False)
    assert origin(fit + 10) == ("self.open_log(), self.open_log() = open(self.cfg.log)", False)
    assert scopes.returned("build_loader") == "open(split)"


IMPORTING = """\
import data
from data import make_loader, open_log
from loaders.build import build_loaders
from absent import make_loader as absent_loader
from ..outside import make_loader as outside_loader
from linked import make_loader as linked_loader
from cyc_a import make_loader as ring


def _loader(cfg, shuffle):
    return open(cfg.path)


def main(cfg):
    dl = make_loader(cfg)
    for x, y in dl:
        pass
    for x, y in data.make_loader(cfg):
        pass
    train_loader = open_log(cfg)
    for line in train_loader:
        pass
    train, val = build_loaders(cfg)
    for x, y in train:
        pass
    test_loader = absent_loader(cfg)
    for x, y in test_loader:
        pass
    val_loader = outside_loader(cfg)
    for x, y in val_loader:
        pass
    eval_loader = linked_loader(cfg)
    for x, y in eval_loader:
        pass
    ring_loader = ring(cfg)
    for x, y in ring_loader:
        pass
"""

#: The modules of the project IMPORTING reads, beside it; each would leave a file ``ran``
#: if it were run.
PROJECT = {
    "data.py": "import pathlib\npathlib.Path(__file__).with_name('ran').touch()\n"
               "from torch.utils.data import DataLoader\n\n\n"
               "def make_loader(cfg):\n    return _loader(cfg, shuffle=True)\n\n\n"
               "def _loader(cfg, shuffle):\n"
               "    return DataLoader(dataset(cfg), batch_size=cfg.bs, shuffle=shuffle,\n"
               "                      num_workers=6, pin_memory=True)\n\n\n"
               "def open_log(cfg):\n    return open(cfg.log)\n",
    "loaders/__init__.py": "",
    "loaders/build.py": "from .common import pair\n\n\n"
                        "def build_loaders(cfg):\n    return pair(cfg)\n",
    "loaders/common.py": "from torch.utils.data import DataLoader\n\n\n"
                         "def pair(cfg):\n"
                         "    train = DataLoader(cfg.train, batch_size=64, num_workers=2)\n"
                         "    return train, DataLoader(cfg.val, batch_size=64)\n",
    "cyc_a.py": "from cyc_b import make_loader\n",
    "cyc_b.py": "from cyc_a import make_loader\n",
}


def test_a_factory_imported_from_a_module_beside_the_script_is_followed_into_it(
        tmp_path: Path) -> None:
    """``from data import make_loader`` (or ``import data``, ``data.make_loader(cfg)``), where
    the project's data.py returns a DataLoader: an imported name's call was never followed, so
    ``dl = make_loader(cfg)`` read as no DataLoader (a call, no name saying so), ``train_loader
    = open_log(cfg)`` (a file) as one by its name and ``train, val = build_loaders(cfg)``
    unknown. The module's file is found where Python would look beside the script (a package's
    module, a relative import from it) and read as text, never run; what its function returns
    is read there (its own ``_loader``, not the script's). A module not shown (absent, outside
    the project folder, through a link leading out of it, a cycle of imports) leaves the name
    to tell, as before, and named_only says so."""
    project = tmp_path / "project"
    for name, text in PROJECT.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    outside = "def make_loader(cfg):\n    return open('/etc/passwd')\n"
    (tmp_path / "outside.py").write_text(outside)
    (project / "linked.py").symlink_to(tmp_path / "outside.py")
    script = project / "train.py"
    script.write_text(IMPORTING)
    source = IMPORTING.splitlines()
    scopes = pysource.SourceScopes(source, script, pysource.ModuleSources(
        partial(shown_source, roots=[project], owner=script)))
    main = source.index("def main(cfg):") + 1

    def origin(lineno: int) -> tuple[str | None, bool | None]:
        """dataloader_origin of the loop at ``lineno``."""
        return loop_origin(source, scopes, main, lineno)

    named = partial(loop_named_only, source, scopes, main)
    made = ("DataLoader(dataset(cfg), batch_size=cfg.bs, shuffle=shuffle, num_workers=6, "
            "pin_memory=True)")
    assert origin(main + 2) == (f"make_loader(cfg), make_loader() = {made}", True)
    assert not named(main + 2)
    assert origin(main + 4) == (f"data.make_loader(cfg), data.make_loader() = {made}", True)
    assert origin(main + 7) == ("open_log(cfg), open_log() = open(cfg.log)", False)
    assert origin(main + 10) == (
        "build_loaders(cfg)[0], build_loaders() = (DataLoader(cfg.train, batch_size=64, "
        "num_workers=2), DataLoader(cfg.val, batch_size=64))", True)
    assert not named(main + 10)
    for lineno, call in ((main + 13, "absent_loader"), (main + 16, "outside_loader"),
                         (main + 19, "linked_loader"), (main + 22, "ring")):
        assert origin(lineno) == (f"{call}(cfg)", True), call
        assert named(lineno), call
    assert not (project / "ran").exists()
    # Without the project's modules an import shows nothing, as before.
    alone = pysource.SourceScopes(source)
    assert pysource.dataloader_origin(
        "dl", lambda name: alone.assigned(main, main + 2, name)) == ("make_loader(cfg)", False)


def test_what_an_imported_function_returns_is_shown_up_to_a_size(tmp_path: Path) -> None:
    """A module whose functions each return 30 calls of the next, the last 30 DataLoaders:
    what the first returns, each call replaced by what it returns, is 30^4 calls (12 MB
    written back, a hostile file's product). It passes _CLOSED_CHARS, so it is not shown: the
    call's result is unknown, as where the module is not shown at all."""
    def returning(name: str, call: str) -> str:
        """A function ``name`` returning a tuple of 30 calls ``call``."""
        return f"def {name}(x):\n    return ({', '.join([call] * 30)})\n\n\n"

    (tmp_path / "data.py").write_text(
        returning("make_loader", "f(x)") + returning("f", "g(x)") + returning("g", "h(x)")
        + returning("h", "DataLoader(x)"))
    script = tmp_path / "train.py"
    script.write_text("from data import make_loader, h\n")
    scopes = pysource.SourceScopes(script.read_text().splitlines(), script,
                                   pysource.ModuleSources(partial(shown_source,
                                                                  roots=[tmp_path])))
    assert scopes.module_assigned(2, "make_loader()") is None
    assert scopes.module_assigned(2, "h()") == f"({', '.join(['DataLoader(x)'] * 30)})"


#: A script looping over loaders a module beside it binds at module level.
VARIABLES = """\
import data
from data import train_loader, val_loader, test_loader, log_loader, eval_loader
from cyc_a import ring_loader


def main(model):
    for x, y in train_loader:
        pass
    for x, y in data.val_loader:
        pass
    for x, y in test_loader:
        pass
    for line in log_loader:
        pass
    for x, y in eval_loader:
        pass
    for x, y in ring_loader:
        pass
"""

#: The modules VARIABLES imports; each would leave a file ``ran`` if it were run.
VARIABLE_MODULES = {
    "data.py": "import pathlib\npathlib.Path(__file__).with_name('ran').touch()\n"
               "from torch.utils.data import DataLoader\n"
               "from loaders import test_loader\n\n"
               "train_set = Folder('train')\n"
               "train_loader = DataLoader(train_set, batch_size=8, num_workers=2)\n"
               "loaders = {'val': DataLoader(Folder('val'), batch_size=16)}\n"
               "val_loader = loaders['val']\n"
               "log_loader = open('log.txt')\n\n\n"
               "def make(split):\n    return DataLoader(Folder(split))\n\n\n"
               "eval_loader = make('eval')\n",
    "loaders.py": "from torch.utils.data import DataLoader\n\n"
                  "test_loader = DataLoader(Folder('test'), batch_size=4)\n",
    "cyc_a.py": "from cyc_b import ring_loader\n",
    "cyc_b.py": "from cyc_a import ring_loader\n",
}


def test_a_loader_imported_as_a_module_variable_is_followed_into_its_module(
        tmp_path: Path) -> None:
    """``from data import train_loader`` (or ``import data``, ``data.val_loader``), data.py
    beside the script binding it at module level: the import was no assignment, so each
    loop was a DataLoader loop by its name alone (named_only), ``log_loader`` (a file)
    too. What the module binds is now read in its file (never run), its names read there
    (``train_set``, ``loaders['val']``), its calls of its own functions closed there
    (``make('eval')``), a name it imports in turn followed (loaders.py); a cycle of imports
    shows nothing and the name tells, as before."""
    for name, text in VARIABLE_MODULES.items():
        (tmp_path / name).write_text(text)
    script = tmp_path / "train.py"
    script.write_text(VARIABLES)
    source = VARIABLES.splitlines()
    scopes = pysource.SourceScopes(source, script, pysource.ModuleSources(
        partial(shown_source, roots=[tmp_path], owner=script)))
    main = source.index("def main(model):") + 1

    named = partial(loop_named_only, source, scopes, main)
    assert loop_origin(source, scopes, main, main + 1) == (
        "DataLoader(Folder('train'), batch_size=8, num_workers=2)", True)
    assert loop_origin(source, scopes, main, main + 3) == (
        "{'val': DataLoader(Folder('val'), batch_size=16)}['val']", True)
    assert loop_origin(source, scopes, main, main + 5) == (
        "DataLoader(Folder('test'), batch_size=4)", True)
    assert loop_origin(source, scopes, main, main + 7) == ("open('log.txt')", False)
    assert loop_origin(source, scopes, main, main + 9) == ("DataLoader(Folder(split))", True)
    assert not any(named(main + offset) for offset in (1, 3, 5, 9))
    assert loop_origin(source, scopes, main, main + 11) == ("ring_loader", True)
    assert named(main + 11)
    assert not (tmp_path / "ran").exists()
