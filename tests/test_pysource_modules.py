"""What a module of the project binds is followed into its file, however it is imported."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

from profreport import pysource
from profreport.runner.script_scan import imported_modules

sys.path.insert(0, str(Path(__file__).parent))
from conftest import loop_named_only, loop_origin, project_scopes  # noqa: E402

#: A script importing a regular package's module and a namespace package's (no __init__.py),
#: each by its dotted name.
DOTTED = """\
import pkg.data
import nspkg.loaders


def main(cfg):
    for x, y in pkg.data.train_loader:
        pass
    dl = nspkg.loaders.val_loader
    for x, y in dl:
        pass
    for x, y in pkg.data.make_loader(cfg):
        pass
    for line in pkg.data.log_loader:
        pass
"""

#: The modules DOTTED imports.
DOTTED_PROJECT = {
    "train.py": DOTTED,
    "pkg/__init__.py": "",
    "pkg/data.py": "from torch.utils.data import DataLoader\n\n"
                   "train_loader = DataLoader(Folder('train'), batch_size=8)\n"
                   "log_loader = open('log.txt')\n\n\n"
                   "def make_loader(cfg):\n    return DataLoader(cfg.test, num_workers=3)\n",
    "nspkg/loaders.py": "from torch.utils.data import DataLoader\n\n"
                        "val_loader = DataLoader(Folder('val'), batch_size=16)\n",
}


def test_a_module_imported_by_its_dotted_name_is_followed_into_its_package(
        tmp_path: Path) -> None:
    """``import pkg.data`` then ``pkg.data.train_loader`` (a regular package) or ``import
    nspkg.loaders`` then ``nspkg.loaders.val_loader`` (a namespace package, no __init__.py):
    an attribute of an attribute was no name a module binds, so each loop was a DataLoader
    loop by its name alone and ``pkg.data.log_loader`` (a file) one too; and the modules the
    runner copies beside the script held ``pkg/__init__.py`` alone, not the module ``import
    pkg.data`` loads."""
    scopes = project_scopes(tmp_path, DOTTED_PROJECT, "train.py")
    source = DOTTED.splitlines()
    main = source.index("def main(cfg):") + 1

    named = partial(loop_named_only, source, scopes, main)
    assert loop_origin(source, scopes, main, main + 1) == (
        "DataLoader(Folder('train'), batch_size=8)", True)
    assert loop_origin(source, scopes, main, main + 4) == (
        "nspkg.loaders.val_loader, nspkg.loaders.val_loader = DataLoader(Folder('val'), "
        "batch_size=16)", True)
    assert loop_origin(source, scopes, main, main + 6) == (
        "pkg.data.make_loader(cfg), pkg.data.make_loader() = DataLoader(cfg.test, "
        "num_workers=3)", True)
    assert loop_origin(source, scopes, main, main + 8) == ("open('log.txt')", False)
    assert not any(named(main + offset) for offset in (1, 4, 6))
    assert sorted(imported_modules(tmp_path / "train.py")) == [
        Path("nspkg/loaders.py"), Path("pkg/__init__.py"), Path("pkg/data.py")]


def chain(prefix: str, length: int) -> dict[str, str]:
    """Modules ``{prefix}1`` .. ``{prefix}{length}``, each importing ``make_loader`` and
    ``train_loader`` from the next, the last defining them."""
    modules = {f"{prefix}{place}.py": f"from {prefix}{place + 1} import make_loader, "
               "train_loader\n" for place in range(1, length)}
    modules[f"{prefix}{length}.py"] = (
        "from torch.utils.data import DataLoader\n\n"
        "train_loader = DataLoader(Folder('train'), batch_size=4)\n\n\n"
        "def make_loader(cfg):\n    return _build(cfg)\n\n\n"
        "def _build(cfg):\n    return DataLoader(cfg, num_workers=2)\n")
    return modules


#: A script importing from a chain of MODULE_HOPS modules, one a module longer, and a ring.
CHAINED = """\
from near1 import make_loader, train_loader
from far1 import make_loader as far_loader, train_loader as far_train_loader
from ring1 import make_loader as ring_loader, train_loader as ring_train_loader


def main(cfg):
    for x, y in make_loader(cfg):
        pass
    for x, y in train_loader:
        pass
    for x, y in far_loader(cfg):
        pass
    for x, y in far_train_loader:
        pass
    for x, y in ring_loader(cfg):
        pass
    for x, y in ring_train_loader:
        pass
"""


def test_a_chain_of_imports_is_followed_up_to_module_hops(tmp_path: Path) -> None:
    """``from near1 import make_loader`` where near1 imports it from near2 and so on, the last
    of MODULE_HOPS modules defining it: a factory was followed two modules deep only (its
    module's calls counted with the modules crossed), and a module-level loader through as
    many modules as the chain held. Now both are followed through MODULE_HOPS modules, no
    further (the name tells, as where the module is not shown), and a ring of imports shows
    nothing."""
    hops = pysource.MODULE_HOPS
    ring = {f"ring{place}.py": f"from ring{place % 3 + 1} import make_loader, train_loader\n"
            for place in range(1, 4)}
    files = {"train.py": CHAINED, **chain("near", hops), **chain("far", hops + 1), **ring}
    scopes = project_scopes(tmp_path, files, "train.py")
    source = CHAINED.splitlines()
    main = source.index("def main(cfg):") + 1
    made = "DataLoader(cfg, num_workers=2)"
    assert loop_origin(source, scopes, main, main + 1) == (
        f"make_loader(cfg), make_loader() = {made}", True)
    assert loop_origin(source, scopes, main, main + 3) == (
        "DataLoader(Folder('train'), batch_size=4)", True)
    assert loop_origin(source, scopes, main, main + 5) == ("far_loader(cfg)", False)
    assert loop_origin(source, scopes, main, main + 7) == ("far_train_loader", True)
    assert loop_origin(source, scopes, main, main + 9) == ("ring_loader(cfg)", False)
    assert loop_origin(source, scopes, main, main + 11) == ("ring_train_loader", True)
