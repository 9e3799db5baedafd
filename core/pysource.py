"""What a Python source shows about a training loop, read from its syntax (never run).

The .lprof parser reads the profiled sources and the runner reads a user's script with these:
which line loops over a DataLoader, which only counts passes, which fetches a batch and from
what iterator, what a name is assigned, the knobs a ``DataLoader(...)`` call gives, and which
line waits for the GPU.
"""

from __future__ import annotations

import ast
import builtins
import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import NamedTuple, TypeGuard

# The words of one identifier (never a whole expression, ``yaml.load(f, Loader=...)``): its
# snake_case parts and camelCase humps, digits left out (``valLoader_2`` -> val, Loader).
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")
# A word that names a DataLoader: one ending in ``loader`` (``loader``, ``trainloader`` as the
# PyTorch tutorials write it, ``dataloader``). Not ``dl``: ``self.dl`` may hold anything, and
# what it holds is read from its assignment, where the source shows it.
_LOADER_WORD = re.compile(r"^[a-z]*loader$")
# English words ending in ``loader`` that name what moves files or code, never a loader of
# batches: ``downloader`` (``MediaIoBaseDownload``'s, a dataset's), ``uploader``, a server's
# ``reloader``, ``unloader``, ``bootloader``, Java's ``classloader``. Real DataLoader names join
# any word before ``loader`` (``trainloader``, ``valloader``, torchreid's ``queryloader`` and
# ``galleryloader``), so those words are left out one by one rather than the others listed;
# ``preloader`` stays a loader (what preloads batches hands them on).
_NOT_LOADER_WORDS = frozenset({"downloader", "uploader", "reloader", "unloader", "bootloader",
                               "classloader"})
# A last word that makes a loader's name its iterator's (``loader_it``, ``train_loader_iter``).
_ITERATOR_WORDS = frozenset({"it", "iter", "iterator"})
# Calls that iterate over their first argument and hand its items on: ``iter``, ``enumerate``
# and tqdm's progress bar (``for b in tqdm(train_loader):``).
_ITERATION_WRAPPERS = frozenset({"iter", "enumerate", "tqdm"})
# Calls that iterate over all their arguments together, each pass taking an item of every one:
# ``for (xs, ys), (xt, _) in zip(source_loader, target_loader):`` fetches from both loaders.
_TOGETHER = frozenset({"zip"})
# Builtins a ``for`` may wrap around range() or a literal and still fetch nothing per pass.
_PASS_WRAPPERS = frozenset({"enumerate", "reversed"})
# A source line that opens a loop statement (Python's syntax, whatever it iterates over).
_LOOP_LINE = re.compile(r"^\s*(?:(?:async\s+)?for\b.+\bin\b.*|while\b.*):\s*(?:#.*)?$")
# A source line that makes the CPU wait for the GPU: it reads a GPU value on the host
# (``loss.item()``, PyTorch 0.3's ``loss.data[0]``, ``.cpu()``, ``.numpy()``, ``.tolist()``) or
# synchronizes outright (``torch.cuda.synchronize()``). line_profiler charges such a line with
# all the GPU work queued before it, so its time is the GPU's, not its own.
_SYNC_POINT_LINE = re.compile(
    r"\.(?:item|cpu|numpy|tolist|synchronize)\(\s*\)|\.data\[\s*0\s*\]")


#: What reading a shown source's syntax may raise: not Python, or nested deeper than the parser
#: or ast.unparse recurses (a 1,000-term sum a hostile file holds), or past memory.
_UNREADABLE_SYNTAX = (SyntaxError, ValueError, RecursionError, MemoryError)


def _parsed(text: str, mode: str = "exec") -> ast.AST | None:
    """``text`` parsed (never run); None when it does not parse (_UNREADABLE_SYNTAX)."""
    try:
        return ast.parse(text, mode=mode)
    except _UNREADABLE_SYNTAX:
        return None


def _written(node: ast.AST) -> str | None:
    """A parsed expression written back as source; None when too deep to write back."""
    try:
        return ast.unparse(node)
    except _UNREADABLE_SYNTAX:
        return None


def _statement(source: str) -> ast.stmt | None:
    """The one statement a source line holds, parsed alone (a loop header given an empty
    body); None when the line is not a whole statement (a continued expression)."""
    code = source.strip()
    for text in (code, code + "\n pass"):
        tree = _parsed(text)
        if isinstance(tree, ast.Module):
            return tree.body[0] if len(tree.body) == 1 else None
    return None


def _fetches_nothing(node: ast.expr) -> bool:
    """Whether iterating over ``node`` fetches nothing per pass: ``range(...)`` or a literal
    (``[0.1, 0.01]``), bare or in ``enumerate``/``reversed``."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set | ast.Dict | ast.Constant):
        return True
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
        return False
    return node.func.id == "range" or (
        node.func.id in _PASS_WRAPPERS and _fetches_nothing(node.args[0]))


def counts_passes(source: str | None) -> bool:
    """Whether a source line opens a loop whose header fetches nothing: a ``for`` over
    ``range(...)`` or a literal, or a ``while`` whose test calls nothing (``while True:``,
    ``while step < steps:``). Such a header only counts the passes, and whatever a pass trains
    on is fetched in its body."""
    node = _statement(source) if source else None
    if isinstance(node, ast.While):
        return not any(isinstance(part, ast.Call | ast.Await) for part in ast.walk(node.test))
    return isinstance(node, ast.For | ast.AsyncFor) and _fetches_nothing(node.iter)


def opens_no_loop(source: str | None) -> bool:
    """Whether a source line is a whole statement that opens no loop (``time.sleep(0.001)``): it
    is no loop header, whatever its hit counts. False for a line that is no whole statement,
    which may open a loop written over several lines (``for i, (x, y) in enumerate(``)."""
    node = _statement(source) if source else None
    return node is not None and not isinstance(node, ast.For | ast.AsyncFor | ast.While)


def fetched_iterator(source: str | None) -> str | None:
    """The iterator a source line takes its next item from (``next(it)``, ``it.__next__()``),
    as written; None when the line takes none."""
    node = _statement(source) if source else None
    for call in ast.walk(node) if node is not None else ():
        if not isinstance(call, ast.Call):
            continue
        if isinstance(call.func, ast.Name) and call.func.id == "next" and call.args:
            return _written(call.args[0])
        if isinstance(call.func, ast.Attribute) and call.func.attr == "__next__":
            return _written(call.func.value)
    return None


#: How a ``for`` statement's target is written as an expression of what it iterates over: an
#: item of it (``for dl in loaders:``, ``dl`` is ``next(iter(loaders))``), or a value of a
#: dict's ``items()`` (``for name, dl in loaders.items():``). An assignment is the value itself.
_ITEM, _VALUE, _ITSELF = "next(iter({}))", "next(iter({}.values()))", "{}"


def _bindings(node: ast.AST) -> list[tuple[ast.expr, ast.expr | None, str]]:
    """The (target, value, form) triples a node binds, ``form`` writing the value bound from
    the one written: ``dl = DataLoader(ds)``, annotated ``dl: DataLoader = DataLoader(ds)`` or
    ``(dl := DataLoader(ds))`` the value itself, a ``for`` target an item of what it iterates
    over (_loop_bindings); none for another node."""
    if isinstance(node, ast.Assign):
        return [bound for target in node.targets for bound in _unpacked(target, node.value)]
    if isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
        return [(node.target, node.value, _ITSELF)]
    if isinstance(node, ast.For | ast.AsyncFor):
        return _loop_bindings(node.target, node.iter)
    return []


def _unpacked(target: ast.expr, value: ast.expr) -> list[tuple[ast.expr, ast.expr | None, str]]:
    """What an assignment to ``target`` binds: the value itself to a name, and to each name of
    a tuple or list target the value's item at its place (``train_loader, val_loader =
    make_loaders(cfg)``: ``make_loaders(cfg)[0]``); the names of a starred or nested target
    to what the source does not show."""
    if not isinstance(target, ast.Tuple | ast.List):
        return [(target, value, _ITSELF)]
    starred = any(isinstance(element, ast.Starred) for element in target.elts)
    bound: list[tuple[ast.expr, ast.expr | None, str]] = []
    for place, element in enumerate(target.elts):
        if isinstance(element, ast.Name | ast.Attribute) and not starred:
            bound.append((element, value, f"({{}})[{place}]"))
        else:
            bound += [(name, None, _ITSELF) for name in ast.walk(element)
                      if isinstance(name, ast.Name)]
    return bound


def _loop_bindings(target: ast.expr, iterable: ast.expr
                   ) -> list[tuple[ast.expr, ast.expr | None, str]]:
    """What a ``for`` target binds: an item of what it iterates over (``for dl in loaders:``),
    of ``enumerate``'s argument (``for i, dl in enumerate(loaders):``), of each of ``zip``'s,
    or a value of a dict's ``items()``; each other name it binds (``x`` and ``y`` of ``for x, y
    in dl:``) is bound to what the source does not show (value None)."""
    pairs: list[tuple[ast.expr, ast.expr]] = []
    elements = target.elts if isinstance(target, ast.Tuple) else []
    call = iterable if isinstance(iterable, ast.Call) and not any(
        isinstance(arg, ast.Starred) for arg in iterable.args) else None
    called = _name_of(call.func) if call is not None else None
    if isinstance(target, ast.Name):
        return [(target, iterable, _ITEM)]
    if call is not None and called == "enumerate" and len(elements) == 2 and call.args:
        pairs = [(elements[1], call.args[0])]
    elif call is not None and called == "zip" and len(elements) == len(call.args):
        pairs = list(zip(elements, call.args, strict=True))
    elif call is not None and called == "items" and len(elements) == 2 and not call.args \
            and isinstance(call.func, ast.Attribute):
        return [(elements[0], None, _ITEM), (elements[1], call.func.value, _VALUE)]
    bound = [(name, value, _ITEM) for name, value in pairs if isinstance(name, ast.Name)]
    shown = {id(name) for name, _, _ in bound}
    return bound + [(name, None, _ITEM) for name in ast.walk(target)
                    if isinstance(name, ast.Name) and id(name) not in shown]


def assigned_value(source: str | None, target: str) -> str | None:
    """The expression a source line assigns to ``target`` (``it = iter(train_loader)``), as
    written; None when it assigns nothing to it, or binds it to what it does not show."""
    node = _statement(source) if source else None
    for bound, value, form in _bindings(node) if node is not None else ():
        written = _written(value) if value is not None else None
        if _written(bound) == target:
            return _formed(form, written)
    return None


def _formed(form: str, written: str | None) -> str | None:
    """The value a _bindings form makes of the expression written, as ast.unparse writes it
    (``make_loaders(cfg)[0]``; the item itself of a tuple or list literal, ``model`` of ``(model,
    None)[0]``); None for no expression."""
    tree = _parsed(form.format(written), mode="eval") if written is not None else None
    node = tree.body if isinstance(tree, ast.Expression) else None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Tuple | ast.List):
        items, _ = _elements(node.value, node.slice)
        node = items[0] if items and len(items) == 1 and not isinstance(
            node.slice, ast.Slice) else node
    return _written(node) if node is not None else None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)

#: The DataLoader arguments read from a ``DataLoader(...)`` call a source shows: each one's place
#: among torch.utils.data.DataLoader's positional parameters and PyTorch's default for it.
LOADER_CALL_KNOBS: dict[str, tuple[int, object]] = {
    "batch_size": (1, 1), "num_workers": (5, 0), "pin_memory": (7, False)}
#: A worker count or batch size read from a source above this is no setting any machine runs
#: (a hostile or mistyped literal): not known, rather than thousands of digits in a note.
LOADER_CALL_INT_LIMIT = 1 << 20
#: PyTorch's DataLoader prefetch_factor with workers when the script sets none (without workers
#: it is None: the DataLoader refuses any other value then).
LOADER_PREFETCH_DEFAULT = 2
#: The fewest of each integer knob a DataLoader is built with: it raises on a negative worker
#: count, and its BatchSampler on a batch size below 1 (``batch_size=0``).
LOADER_CALL_INT_LOWEST = {"batch_size": 1, "num_workers": 0}
#: The place of ``batch_sampler`` among DataLoader's positional parameters. A batch sampler
#: yields whole batches: DataLoader then sets its batch_size to None, and raises when the call
#: also gives a batch_size other than 1.
BATCH_SAMPLER_PLACE = 4


def default_prefetch_factor(num_workers: int) -> int | None:
    """The prefetch_factor a DataLoader with ``num_workers`` workers has when the script sets
    none: LOADER_PREFETCH_DEFAULT batches per worker, None without workers."""
    return LOADER_PREFETCH_DEFAULT if num_workers > 0 else None


def _name_of(node: ast.AST) -> str | None:
    """The identifier a name or attribute ends with: ``dl`` of ``dl``, ``DataLoader`` of
    ``torch.utils.data.DataLoader``; None for another node."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _is_loader_call(node: ast.AST) -> bool:
    """Whether a node calls ``DataLoader`` (by that name, or as ``torch.utils.data.DataLoader``)."""
    return isinstance(node, ast.Call) and _name_of(node.func) == "DataLoader"


def _iterated(node: ast.expr) -> ast.expr:
    """What an expression iterates over, out of _ITERATION_WRAPPERS: ``dl`` of ``dl``, of
    ``enumerate(dl)`` and of ``tqdm(iter(dl))``."""
    while isinstance(node, ast.Call) and node.args and _name_of(node.func) in _ITERATION_WRAPPERS \
            and not isinstance(node.args[0], ast.Starred):
        node = node.args[0]
    return node


def _is_dataloader(node: ast.expr, many: bool = False) -> bool:
    """Whether an expression's syntax shows a DataLoader or an iterator of one: a
    ``DataLoader(...)`` call, or a name that says it holds one (_names_a_loader:
    ``train_loader``, ``self.loader_it``), bare or in _ITERATION_WRAPPERS
    (``iter(train_loader)``), or among the arguments of a _TOGETHER call
    (``zip(source_loader, target_loader)``, or several, ``zip(*val_loaders)``: ``many``). Never
    from a word anywhere in it: ``yaml.load(f, Loader=yaml.SafeLoader)`` and
    ``my_loader_config()`` are no DataLoader."""
    node = _iterated(node)
    name = _name_of(node)
    return _is_loader_call(node) or (name is not None and _names_a_loader(name, many)) \
        or any(_is_dataloader(arg, starred) for arg, starred in _together(node))


def _names_a_loader(name: str, many: bool = False) -> bool:
    """Whether an identifier says it holds a DataLoader or an iterator of one: its last word
    (_WORD) names one (_LOADER_WORD: ``train_loader``, ``trainloader``, ``valLoader``; none of
    _NOT_LOADER_WORDS, ``self.downloader``), or is an iterator word after one (``loader_it``,
    ``loader_iter``); with ``many``, the last word is that word's plural (``val_loaders``). A
    word after it makes it something else: ``self.loader_cfg``, ``loader_config``,
    ``num_loader_workers``."""
    words = [word.lower() for word in _WORD.findall(name)]
    if not many and len(words) > 1 and words[-1] in _ITERATOR_WORDS:
        words.pop()
    last = words[-1] if words else ""
    if many:
        last = last.removesuffix("s") if last.endswith("s") else ""
    return _LOADER_WORD.match(last) is not None and last not in _NOT_LOADER_WORDS


def _together(node: ast.expr) -> list[tuple[ast.expr, bool]]:
    """The arguments a _TOGETHER call iterates over, each with whether it is starred (a
    collection of iterables): ``a`` and ``b`` of ``zip(a, b)``, ``ls`` of ``zip(*ls)``; none for
    another node."""
    if isinstance(node, ast.Call) and _name_of(node.func) in _TOGETHER:
        return [(arg.value, True) if isinstance(arg, ast.Starred) else (arg, False)
                for arg in node.args]
    return []


def loader_call_knobs(call: ast.Call) -> dict[str, object]:
    """The LOADER_CALL_KNOBS a ``DataLoader(...)`` call gives, read as torch.utils.data.DataLoader
    reads its arguments, with ast.literal_eval of literal arguments only (nothing is
    evaluated): PyTorch's default for one it leaves out, and batch_size None, as DataLoader
    sets it, beside a batch sampler (keyword or positional: BATCH_SAMPLER_PLACE) or given as
    ``batch_size=None`` (no automatic batching). One given as an expression or a literal of
    another type, out of LOADER_CALL_INT_LOWEST..LOADER_CALL_INT_LIMIT, that ``*args`` or
    ``**kwargs`` may give, or that DataLoader would refuse (a batch_size other than 1 beside a
    batch sampler) is not known and left out."""
    given: dict[str, ast.expr] = {kw.arg: kw.value for kw in call.keywords if kw.arg}
    unpacked = any(kw.arg is None for kw in call.keywords)
    starred = any(isinstance(arg, ast.Starred) for arg in call.args)
    positional = [] if starred else call.args

    def argument(name: str, place: int) -> ast.expr | None:
        """The argument the call gives for parameter ``name`` at ``place``, if it shows one."""
        return given.get(name, positional[place] if place < len(positional) else None)

    knobs: dict[str, object] = {}
    for name, (place, default) in LOADER_CALL_KNOBS.items():
        node = argument(name, place)
        if node is None:
            if not (unpacked or starred):
                knobs[name] = default
            continue
        try:
            value = ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if (value is None and name == "batch_size") or (
                type(value) is type(default)  # a bool is no worker count, a string no flag
                and (not isinstance(value, int) or LOADER_CALL_INT_LOWEST.get(name, 0) <= value
                     <= LOADER_CALL_INT_LIMIT)):
            knobs[name] = value
    sampler = argument("batch_sampler", BATCH_SAMPLER_PLACE)
    if sampler is not None and not (isinstance(sampler, ast.Constant) and sampler.value is None):
        if knobs.get("batch_size") == 1:  # left out, or the 1 DataLoader accepts beside one
            knobs["batch_size"] = None
        else:
            knobs.pop("batch_size", None)
    return knobs


#: Where an expression is written in a source: its first line, column (in UTF-8 bytes, as
#: the ast records it), last line and end column.
_Span = tuple[int, int, int, int]
#: Where the value a name is bound to is written (None: not shown), and the _bindings form
#: that makes the bound value of it.
_Binding = tuple[_Span | None, str]


def _span(node: ast.expr | None) -> _Span | None:
    """Where an expression is written in its source; None for no expression."""
    if node is None:
        return None
    return (node.lineno, node.col_offset, node.end_lineno or node.lineno,
            node.end_col_offset or node.col_offset)


class _Import(NamedTuple):
    """What an import binds a name to: a module or a name in one, as a dotted path
    (``data.make_loader`` of ``from data import make_loader``, ``data`` of ``import data``),
    and its level (the leading dots of a relative import)."""

    dotted: str
    level: int


def _imports(node: ast.AST) -> list[tuple[str, _Import, _Import]]:
    """The names an import statement binds, what each is, and the module each loads (``import
    pkg.data`` binds ``pkg`` and loads ``pkg.data``, ``import pkg.data as d`` binds ``d`` to
    ``pkg.data``); none for another node, nor for ``from m import *``."""
    if isinstance(node, ast.Import):
        return [(alias.asname or alias.name.partition(".")[0],
                 _Import(alias.name if alias.asname else alias.name.partition(".")[0], 0),
                 _Import(alias.name, 0)) for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        named = [(alias.asname or alias.name,
                  _Import(".".join(filter(None, (node.module, alias.name))), node.level))
                 for alias in node.names if alias.name != "*"]
        return [(name, imported, imported) for name, imported in named]
    return []


@dataclass(frozen=True)
class _Class:
    """A class the source shows: the scopes of the file that defines it, its scope there, and
    the modules crossed to reach that file (MODULE_HOPS), which is no part of which class it
    is."""

    scopes: SourceScopes
    scope: int
    hops: int = field(compare=False)


def _merged(orders: list[list[_Class | str]]) -> list[_Class | str] | None:
    """The C3 merge of a class's bases' orders, as Python computes a method resolution order:
    each time the first head that is in no order's tail; None where none is (Python refuses
    such bases)."""
    merged: list[_Class | str] = []
    orders = [order for order in orders if order]
    while orders:
        heads = [order[0] for order in orders
                 if not any(order[0] in other[1:] for other in orders)]
        if not heads:
            return None
        merged.append(heads[0])
        orders = [rest for rest in (order[1:] if order[0] == heads[0] else order
                                    for order in orders) if rest]
    return merged


def _joined(values: list[str | None]) -> str | None:
    """Values shown as one expression: ``(a) if ... else (b)`` when they differ, a None
    value left out (a loop over it would raise); None without one, when one is not shown
    (None), or when they are only None."""
    if None in values:
        return None
    alternatives = [f"({value})" for value in dict.fromkeys(values) if value != "None"]
    tree = _parsed(" if ... else ".join(alternatives), mode="eval") if alternatives else None
    return _written(tree.body) if isinstance(tree, ast.Expression) else None


def _is_static(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a method is a ``@staticmethod``, whose first parameter is no receiver."""
    return any(_name_of(decorator) == "staticmethod" for decorator in function.decorator_list)


#: Reads the source file at a path an import names, as text (never imported nor run): its
#: lines, or None where it may not be shown (absent, outside the project's folders, no
#: regular Python file).
SourceReader = Callable[[Path], "list[str] | None"]


class ModuleSources:
    """The modules of a project that its shown sources import, found where Python would look
    for them beside the importing file and read as text with ``read``, each parsed once."""

    def __init__(self, read: SourceReader) -> None:
        self._read = read
        self._scopes: dict[Path, SourceScopes | None] = {}
        #: The modules an import was followed into (not a folder only tried as a package), by
        #: path, in the order first followed.
        self.followed: dict[Path, SourceScopes] = {}

    def at(self, path: Path) -> SourceScopes | None:
        """The scopes of the source file at ``path``; None where it is not read."""
        if path not in self._scopes:
            lines = self._read(path)
            self._scopes[path] = SourceScopes(lines, path, self) if lines is not None else None
        return self._scopes[path]

    def imported(self, importer: Path, module: str, level: int) -> SourceScopes | None:
        """The scopes of the module an import in the file at ``importer`` names (dotted,
        ``level`` leading dots): a relative one from the importer's package (its folder, one
        folder up per dot past the first), an absolute one from the importer's folder, else
        from the folder above each package around it (a folder with an ``__init__.py``); a
        package's ``__init__.py`` before a module's file. None where none is read."""
        parts = module.split(".") if module else []
        folders = [importer.parent, *importer.parent.parents]
        if level > len(folders):
            return None  # above the file system's root: Python refuses it too
        folder = folders[max(level - 1, 0)]
        while True:
            for path in (folder.joinpath(*parts, "__init__.py"),
                         *([folder.joinpath(*parts[:-1], parts[-1] + ".py")] if parts else [])):
                found = self.at(path)
                if found is not None:
                    return self.followed.setdefault(path, found)
            if level or folder.parent == folder or self.at(folder / "__init__.py") is None:
                return None
            folder = folder.parent

    def reached(self, source: SourceScopes) -> list[Path]:
        """The files of the modules ``source`` imports, and those they import in turn, that
        are read (imported): each import's module, else the module the name it imports is in
        (``from data import make_loader``: data.py), in the order first reached."""
        found: dict[Path, None] = {}
        todo = [source]
        while todo:
            scopes = todo.pop()
            for imported in scopes.imports() if scopes._path is not None else ():
                holder = imported.dotted.rpartition(".")[0]
                for module in dict.fromkeys((imported.dotted, holder)):
                    reached = self.imported(scopes._path, module, imported.level) \
                        if module or imported.level else None
                    if reached is None:
                        continue
                    if reached._path is not None and reached._path not in found:
                        found[reached._path] = None
                        todo.append(reached)
                    break
        return list(found)


class SourceScopes:
    """The scopes of one source file, parsed once, and where each binds a name: kept as line
    and column spans, not as the syntax tree (a shown source may be 8 MiB, whose tree takes
    gigabytes), each bound expression written back only when asked for."""

    def __init__(self, source: list[str], path: Path | None = None,
                 modules: ModuleSources | None = None) -> None:
        self._source = source
        #: The file's path and the modules of its project, where the modules it imports are
        #: read from (ModuleSources); without them an import shows nothing.
        self._path, self._modules = path, modules
        self._functions: dict[int, int] = {}  # a function's first line -> its scope
        self._outer: dict[int, int | None] = {0: None}  # scope -> the scope around it
        self._classes: set[int] = set()
        self._bound: dict[int, dict[str, list[tuple[int, _Binding]]]] = {}
        self._parameters: dict[int, set[str]] = {}  # a function's scope -> its parameters
        self._returns: dict[int, list[tuple[int, _Span]]] = {}  # scope -> what it returns
        #: A scope -> the functions it defines (by their scope) and the names it imports.
        self._defined: dict[int, dict[str, int | _Import]] = {}
        self._firsts: dict[int, int] = {}  # a function's scope -> its first line
        self._ends: dict[int, int] = {}  # a function's first line -> its last line
        self._receivers: dict[int, str] = {}  # a method's scope -> its first parameter (self)
        #: A class's scope -> each attribute its methods assign on their receiver
        #: (``self.train_dl = DataLoader(ds)``): the line, the binding, the method's scope.
        self._attributes: dict[int, dict[str, list[tuple[int, _Binding, int]]]] = {}
        #: What each function returns as another file reads it, by scope, depth and module hops
        #: (_closed).
        self._closings: dict[tuple[int, int, int], str | None] = {}
        #: The module-level names whose value another file reads now (_once).
        self._exporting: set[str] = set()
        #: The modules the file's imports load (``pkg.data`` of ``import pkg.data``).
        self._loads: list[_Import] = []
        #: A class's scope -> its bases as written (``Base``, ``nn.Module``), ``object`` left out.
        self._bases: dict[int, list[str]] = {}
        #: A class's method resolution order, by its scope, module hops and depth (_linearized).
        self._mros: dict[tuple[int, int, int], list[_Class | str] | None] = {}
        #: Each ``DataLoader(...)`` call of the file: its line and loader_call_knobs, by line.
        self.loader_calls: list[tuple[int, dict[str, object]]] = []
        #: The header of each loop written over several lines (by its first line) as one
        #: line: see loop_header.
        self.loop_headers: dict[int, str] = {}
        tree = _parsed("\n".join(source))
        #: Whether the file parses whole (else no scope is known and nothing is bound).
        self.parsed = tree is not None
        todo = [(child, 0) for child in ast.iter_child_nodes(tree)] if tree is not None else []
        while todo:
            node, scope = todo.pop()
            for target, value, form in _bindings(node):
                if isinstance(target, ast.Name):
                    self._bound.setdefault(scope, {}).setdefault(target.id, []).append(
                        (node.lineno, (_span(value), form)))
                elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and self._receivers.get(scope) == target.value.id:
                    self._attributes.setdefault(self._outer[scope] or 0, {}).setdefault(
                        target.attr, []).append((node.lineno, (_span(value), form), scope))
            for name, imported, loaded in _imports(node):
                self._defined.setdefault(scope, {})[name] = imported
                self._loads.append(loaded)
            if isinstance(node, ast.Return) and node.value is not None:
                self._returns.setdefault(scope, []).append((node.lineno, _span(node.value)))
            if _is_loader_call(node):
                self.loader_calls.append((node.lineno, loader_call_knobs(node)))  # type: ignore[arg-type]
            header = loop_header(node)
            if header is not None:
                self.loop_headers[node.lineno] = header
            if isinstance(node, _SCOPES):
                inner = len(self._outer)
                self._outer[inner] = scope
                if isinstance(node, ast.ClassDef):
                    self._classes.add(inner)
                    self._bases[inner] = [written for written in (
                        _dotted(base) or _written(base) or "" for base in node.bases)
                        if written != "object"]
                    self._defined.setdefault(scope, {})[node.name] = inner
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                    self._parameters[inner] = _parameters(node.args)
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    self._functions[first] = inner
                    self._firsts[inner] = first
                    self._ends[first] = node.end_lineno or node.lineno
                    arguments = [*node.args.posonlyargs, *node.args.args]
                    if scope in self._classes and arguments and not _is_static(node):
                        self._receivers[inner] = arguments[0].arg
                    self._defined.setdefault(scope, {})[node.name] = inner
                scope = inner
            todo += [(child, scope) for child in ast.iter_child_nodes(node)]
        self.loader_calls.sort(key=lambda call: call[0])
        for names in self._bound.values():
            for spans in names.values():
                spans.sort()

    def function_end(self, first_lineno: int) -> int | None:
        """The last line of the function whose definition starts at ``first_lineno`` (its first
        decorator's line, as line_profiler records it); None where none starts there."""
        return self._ends.get(first_lineno)

    def assigned(self, first_lineno: int, lineno: int, name: str, hops: int = 0) -> str | None:
        """What the source gives ``name`` at line ``lineno`` of the function whose definition
        starts at ``first_lineno``: the function's last assignment to it before that line, else
        the enclosing scopes' (enclosing_assignment); None when none does, or the source does
        not parse or defines no function there, or ``name`` is a parameter of it (what the
        caller passes is not shown here). ``f()`` asks what the function ``f`` seen there
        returns, ``self.f()`` what the method ``f`` of its class returns (_called);
        ``self.train_dl`` what its class's methods assign it (attribute), ``dm.train_dl`` what
        those of the class ``dm`` holds an instance of do (_instance_value). ``hops``: the
        modules crossed to read this file (MODULE_HOPS)."""
        function = self._functions.get(first_lineno)
        if function is None:
            return None
        if name.endswith("()"):
            return self._called(function, lineno, name[:-2], hops)
        receiver, _, attribute = name.partition(".")
        if attribute and "." not in attribute and self._receivers.get(function) == receiver:
            return self.attribute(function, lineno, attribute, hops)
        bound = self._last_before(function, lineno, name)
        if bound is None and name in self._parameters.get(function, ()):
            return None
        if bound:
            return self._text(bound)
        return self.enclosing_assignment(first_lineno, name) \
            or self._instance_value(function, lineno, name, hops) \
            or self._import_value(function, name, hops)

    def imports(self) -> list[_Import]:
        """What each import of the file, in any of its scopes, loads."""
        return list(self._loads)

    def module_assigned(self, lineno: int, name: str, hops: int = 0) -> str | None:
        """What the module's own code last assigns to ``name`` before line ``lineno``, else
        what an instance it holds is assigned (_instance_value) or what a module it imports it
        from binds (_import_value); None when none does or the source does not parse; ``f()``,
        as for assigned."""
        if name.endswith("()"):
            return self._called(0, lineno, name[:-2], hops)
        bound = self._last_before(0, lineno, name)
        return self._text(bound) if bound else (
            self._instance_value(0, lineno, name, hops) or self._import_value(0, name, hops))

    def _value_at(self, scope: int, lineno: int, name: str, hops: int) -> str | None:
        """What ``name`` holds at ``lineno`` of ``scope`` (a function's, else the module's):
        assigned, module_assigned."""
        if scope in self._firsts:
            return self.assigned(self._firsts[scope], lineno, name, hops)
        return self.module_assigned(lineno, name, hops)

    def _module_named(self, imported: _Import, rest: str, hops: int
                      ) -> tuple[SourceScopes, str] | None:
        """The module an import names with the attributes after it but the last, and that last
        name (``data.make`` after ``import data``: data.py and ``make``; ``pkg.data.make`` after
        ``import pkg.data``: pkg/data.py), found where Python would look
        (ModuleSources.imported); None where it is not shown, or ``hops`` modules were crossed
        already (MODULE_HOPS)."""
        module, _, name = ".".join(filter(None, (imported.dotted, rest))).rpartition(".")
        if self._modules is None or self._path is None or hops >= MODULE_HOPS \
                or not (module or imported.level):
            return None
        found = self._modules.imported(self._path, module, imported.level)
        return (found, name) if found is not None else None

    def _import_value(self, scope: int, name: str, hops: int) -> str | None:
        """What a name imported where ``scope`` sees it holds (``train_loader`` after ``from
        data import train_loader``, ``data.train_loader`` after ``import data``,
        ``pkg.data.train_loader`` after ``import pkg.data``): what the module the import names
        binds it to at module level, read in that module's file (exported_value); None for a
        name not imported there, or a value not shown."""
        head, _, rest = name.partition(".")
        imported = self._defined_at(scope, head)
        found = self._module_named(imported, rest, hops) if isinstance(imported, _Import) \
            else None
        return found[0].exported_value(found[1], hops + 1) if found is not None else None

    def _once(self, name: str, read: Callable[[], str | None]) -> str | None:
        """``read()`` of the module-level ``name`` for another file; None while it is being
        read already (a cycle of imports: ``from b import f`` in a.py, ``from a import f`` in
        b.py)."""
        if name in self._exporting:
            return None
        self._exporting.add(name)
        try:
            return read()
        finally:
            self._exporting.discard(name)

    def exported_value(self, name: str, hops: int = 0) -> str | None:
        """What the module's own code last binds ``name`` to at module level (``train_loader =
        DataLoader(ds)``), as another file that imports it reads it, ``hops`` modules away:
        its names read in this module's scope (_resolved), its calls of what this module
        defines or imports closed here (_closed_calls); for a name it only imports, what the
        module it names binds (_import_value). None where it binds no such value or does not
        show it, or in a cycle of imports (_once)."""
        return self._once(name, partial(self._exporting_value, name, hops))

    def _exporting_value(self, name: str, hops: int) -> str | None:
        """exported_value, read."""
        bound = self._bound.get(0, {}).get(name)
        if not bound:
            return self._import_value(0, name, hops)
        line, binding = bound[-1]
        text = self._text(binding)
        resolved = self._resolved(None, line, text, hops) if text is not None else None
        return self._closed_calls(resolved, 0, 0, hops) if resolved is not None else None

    def returned(self, function: str) -> str | None:
        """What the function the module defines as ``function`` returns (_returned_by)."""
        return self._called(0, len(self._source) + 1, function, 0)

    def _called(self, scope: int, lineno: int, function: str, hops: int) -> str | None:
        """What a call of ``function`` made at ``lineno`` of ``scope`` returns: the function of
        that name defined there or in the nearest scope around it (_defined_at: a factory
        nested in ``main()``, the module's), or for ``self.build_loader``, ``cls.make`` or
        ``self.data.make_loader``, the method of that name that the class of the instance
        before it finds (_instance, _method_value), or one a module it imports defines
        (``make_loader`` after ``from data import make_loader``, ``data.make_loader`` after
        ``import data``: _imported_call); None where none is."""
        holder, _, method = function.rpartition(".")
        instance = self._instance(scope, lineno, holder, hops) if holder else None
        if instance is not None:
            return instance.scopes._method_value(instance, method, holder)
        head, _, rest = function.partition(".")
        defined = self._defined_at(scope, head)
        if isinstance(defined, _Import):
            return self._imported_call(defined, rest, hops)
        return self._returned_by(defined, hops) if self._is_function(defined) and not rest \
            else None

    def _is_function(self, defined: int | _Import | None) -> TypeGuard[int]:
        """Whether what _defined_at found is a function's scope (not a class's, an import)."""
        return isinstance(defined, int) and defined not in self._classes

    def _instance(self, scope: int, lineno: int, written: str, hops: int) -> _Class | None:
        """The class whose instance ``written`` holds at ``lineno`` of ``scope``: the receiver's
        class, of a method (``self``, or ``cls`` in a classmethod), or the class a call
        assigned it makes (``self.data = DataModule(cfg)``, ``dm = DataModule(cfg)``), one this
        file defines or imports (_class_named); None where the source does not show one, or
        ``written`` passes _FOLLOWED attributes (each read as an instance in turn)."""
        if written == self._receivers.get(scope):
            return _Class(self, self._outer[scope] or 0, hops)
        if written.count(".") >= _FOLLOWED:
            return None
        value = self._value_at(scope, lineno, written, hops)
        tree = _parsed(value, mode="eval") if value is not None else None
        call = tree.body if isinstance(tree, ast.Expression) else None
        dotted = _dotted(call.func) if isinstance(call, ast.Call) else None
        return self._class_named(scope, dotted, hops) if dotted is not None else None

    def _class_named(self, scope: int, dotted: str, hops: int) -> _Class | None:
        """The class a dotted name seen from ``scope`` names: one this file defines, or one a
        module it imports defines or imports in turn (``from base import Base``, ``import
        models`` then ``models.Base``); None where the source does not show one."""
        head, _, rest = dotted.partition(".")
        defined = self._defined_at(scope, head)
        if isinstance(defined, _Import):
            found = self._module_named(defined, rest, hops)
            return found[0]._class_named(0, found[1], hops + 1) if found is not None else None
        return _Class(self, defined, hops) if isinstance(defined, int) \
            and defined in self._classes and not rest else None

    def _linearized(self, cls: _Class, depth: int = 0) -> list[_Class | str] | None:
        """The method resolution order of a class of this file, as Python computes it (C3,
        _merged): the class, then its bases', a base the source does not show kept as written
        (its own bases unknown); None where Python would refuse it (bases in no consistent
        order, a class among its own bases), or past _CLASS_DEPTH bases of bases (``depth``:
        how many this class is below the one asked about)."""
        key = (cls.scope, cls.hops, depth)
        if key not in self._mros:
            self._mros[key] = None  # a class among its own bases, while it is read
            self._mros[key] = self._linearizing(cls, depth) if depth < _CLASS_DEPTH else None
        return self._mros[key]

    def _linearizing(self, cls: _Class, depth: int) -> list[_Class | str] | None:
        """_linearized, computed."""
        around = self._outer[cls.scope] or 0
        bases = [self._class_named(around, written, cls.hops) or written
                 for written in self._bases.get(cls.scope, [])]
        orders = [base.scopes._linearized(base, depth + 1) if isinstance(base, _Class)
                  else [base] for base in bases]
        if any(order is None for order in orders):
            return None
        return _merged([[cls], *[order for order in orders if order is not None], bases])

    def _method_value(self, cls: _Class, method: str, written: str) -> str | None:
        """What the method ``method`` that the order of class ``cls`` (of this file) finds first
        returns, called on ``written`` (_as_called_on); None where a base the source does not
        show comes first, or no class defines it."""
        for entry in self._linearized(cls) or []:
            if isinstance(entry, str):
                return None
            owner = entry.scopes
            defined = owner._defined.get(entry.scope, {}).get(method)
            if defined is None and method not in owner._bound.get(entry.scope, {}):
                continue
            if not owner._is_function(defined):
                return None
            text = owner._closed(defined, 0, entry.hops) if entry.hops \
                else owner._returned_by(defined, 0)
            return owner._as_called_on(text, defined, written)
        return None

    def _as_called_on(self, text: str | None, method: int, written: str) -> str | None:
        """A value the method of scope ``method`` shows, as its caller reads it: the method's
        receiver written as the caller writes the instance (``self.data.train_dl`` of
        ``self.train_dl`` for ``self.data.make_loader()``)."""
        receiver = self._receivers.get(method)
        if receiver is None or receiver == written or text is None:
            return text
        tree, instance = _parsed(text, mode="eval"), _parsed(written, mode="eval")
        if not isinstance(tree, ast.Expression) or instance is None:
            return None
        return _written(_Replaced({receiver: instance}).visit(tree.body))

    def _imported_call(self, imported: _Import, rest: str, hops: int) -> str | None:
        """What a call of an imported name returns, ``rest`` the attributes after it (``make``
        of ``data.make`` after ``import data``), ``hops`` modules away: what the module the
        import names defines under the last name (_module_named, exported), read in its own
        file; None when that file is not shown (absent, refused, outside the project), past
        MODULE_HOPS modules or in a cycle of imports."""
        found = self._module_named(imported, rest, hops)
        return found[0].exported(found[1], hops + 1) if found is not None else None

    def exported(self, function: str, hops: int = 0) -> str | None:
        """What the module's function ``function`` returns as another file reads it, ``hops``
        modules away (_closed), or, for a name it imports, what the module it names shows;
        None where it is no function of the module's, what it returns is not shown, or in a
        cycle of imports (_once)."""
        return self._once(function, partial(self._exporting_call, function, hops))

    def _exporting_call(self, function: str, hops: int) -> str | None:
        """exported, read."""
        defined = self._defined_at(0, function)
        if isinstance(defined, _Import):
            return self._imported_call(defined, "", hops)
        return self._closed(defined, 0, hops) if self._is_function(defined) else None

    def _closed(self, function: int, depth: int, hops: int) -> str | None:
        """What the function of scope ``function`` returns (_returned_by), each call in it whose
        value is followed (a call it returns, _reached) of a function seen there (defined or
        imported, _defined_at) replaced by what that returns, closed so in turn (``depth``
        calls deep): read here, where those names mean what this file defines, not where the
        value is followed. None where one is not shown, or the value written back passes
        _CLOSED_CHARS; each function closed once per depth and module hops."""
        key = (function, depth, hops)
        if key not in self._closings:
            self._closings[key] = None  # a call of itself, while it is closed
            self._closings[key] = self._closing(function, depth, hops)
        return self._closings[key]

    def _closing(self, function: int, depth: int, hops: int) -> str | None:
        """_closed, computed."""
        text = self._returned_by(function, hops)
        return self._closed_calls(text, function, depth, hops) if text is not None else None

    def _closed_calls(self, text: str, scope: int, depth: int, hops: int) -> str | None:
        """``text``, read in ``scope``, with each call whose value is followed (_reached) of a
        function seen there replaced by what it returns, closed (_closed, _imported_call);
        None where one is not shown, or the value written back passes _CLOSED_CHARS."""
        tree = _parsed(text, mode="eval")
        if not isinstance(tree, ast.Expression):
            return None
        values: dict[int, ast.AST] = {}
        size = len(text or "")
        for call in _reached(tree.body):
            given = _given_name(call) if isinstance(call, ast.Call) else None
            head, _, rest = given[:-2].partition(".") if given and given.endswith("()") \
                else ("", "", "")
            defined = self._defined_at(scope, head) if head else None
            if defined is None or (isinstance(defined, int) and defined in self._classes):
                continue
            value = None
            if isinstance(defined, _Import):
                value = self._imported_call(defined, rest, hops)
            elif not rest and depth < _FOLLOWED:
                value = self._closed(defined, depth + 1, hops)
            parsed = _parsed(value, mode="eval") if value is not None else None
            size += len(value or "")
            if not isinstance(parsed, ast.Expression) or size > _CLOSED_CHARS:
                return None
            values[id(call)] = parsed.body
        return _written(_Replaced({}, values).visit(tree.body)) if values else text

    def _defined_at(self, scope: int, name: str) -> int | _Import | None:
        """The function or class ``name`` names at ``scope`` (its scope) or the import it
        names: the one that scope defines or imports, else the nearest scope around it (a
        class body is no scope of its methods' code); None where none does, or a parameter or
        assignment of that name comes first."""
        at: int | None = scope
        while at is not None:
            if at not in self._classes:
                defined = self._defined.get(at, {}).get(name)
                if defined is not None:
                    return defined
                if name in self._parameters.get(at, ()) or name in self._bound.get(at, {}):
                    return None
            at = self._outer[at]
        return None

    def _returned_by(self, function: int, hops: int) -> str | None:
        """What the function of scope ``function`` returns, its names read in its own scope
        (``loader = DataLoader(ds)``, ``return loader``: ``DataLoader(ds)``); several values
        written as alternatives (``a if ... else b``). None when it returns nothing, or what a
        name it returns holds is not shown there (a parameter)."""
        values = [self._read_in(function, line, (span, _ITSELF), hops)
                  for line, span in self._returns.get(function, [])]
        return _joined(values)

    def attribute(self, method: int, lineno: int, attribute: str, hops: int = 0) -> str | None:
        """What a method's receiver holds as ``attribute`` at ``lineno`` (``self.train_dl``): the
        method's own last assignment to it before that line, else what the other methods of
        its class, and of the bases its method resolution order shows, assign it
        (_instance_attribute). None when none does, or one assigns what its method does not
        show."""
        cls = self._outer[method] or 0
        assigned = self._attributes.get(cls, {}).get(attribute, [])
        own = [bound for line, bound, scope in assigned if scope == method and line < lineno]
        if own:
            return self._text(own[-1])
        return self._instance_attribute(_Class(self, cls, hops), attribute,
                                        self._receivers.get(method, ""), (self, method))

    def _instance_value(self, scope: int, lineno: int, name: str, hops: int) -> str | None:
        """What an attribute of an instance of a class the source shows holds (``dm.train_dl``
        after ``dm = DataModule(cfg)``, ``self.data.train_dl`` after ``self.data =
        DataModule(cfg)``): _instance_attribute; None for another name."""
        holder, _, attribute = name.rpartition(".")
        instance = self._instance(scope, lineno, holder, hops) if holder else None
        return self._instance_attribute(instance, attribute, holder, None) \
            if instance is not None else None

    @staticmethod
    def _instance_attribute(cls: _Class, attribute: str, written: str,
                            skip: tuple[SourceScopes, int] | None) -> str | None:
        """What the methods of class ``cls`` and of the bases its order shows (a base not shown
        assigns nothing shown) assign their receiver as ``attribute``, but method ``skip``'s,
        each read in its method's scope, as the instance ``written`` holds it (_assigned_on),
        as alternatives; an assignment of None is left out (a loop over it would raise). None
        when none does, or one is not shown."""
        values: list[str | None] = []
        for entry in cls.scopes._linearized(cls) or []:
            if isinstance(entry, _Class):
                values += entry.scopes._assigned_on(entry, attribute, written, skip)
        return _joined(values)

    def _assigned_on(self, cls: _Class, attribute: str, written: str,
                     skip: tuple[SourceScopes, int] | None) -> list[str | None]:
        """The values the methods of class ``cls`` of this file, but ``skip``, assign their
        receiver as ``attribute``, each read in its method's scope (_read_in), closed here when
        read for another file (``hops``), and as the instance ``written`` holds it
        (_as_called_on); None for one not shown."""
        values: list[str | None] = []
        for line, bound, method in self._attributes.get(cls.scope, {}).get(attribute, []):
            if skip != (self, method):
                value = self._read_in(method, line, bound, cls.hops)
                if value is not None and cls.hops:
                    value = self._closed_calls(value, method, 0, cls.hops)
                values.append(self._as_called_on(value, method, written))
        return values

    def _read_in(self, function: int, line: int, bound: _Binding, hops: int) -> str | None:
        """The value bound at ``line`` of the function of scope ``function``, read in its scope
        (_resolved); None where it is not shown."""
        text = self._text(bound)
        return self._resolved(self._firsts[function], line, text, hops) if text is not None \
            else None

    def _resolved(self, first_lineno: int | None, lineno: int, text: str, hops: int = 0
                  ) -> str | None:
        """``text``, bound at ``lineno`` of the function starting at ``first_lineno`` (None:
        of the module's own code), with each name its scopes assign replaced by its value
        (_FOLLOWED times at most); None when a name whose value would be followed (_reached)
        is not shown there, or the values put in would pass _CLOSED_CHARS."""
        tree = _parsed(text, mode="eval")
        node = tree.body if isinstance(tree, ast.Expression) else None
        assigned = partial(self.module_assigned, hops=hops) if first_lineno is None else partial(
            self.assigned, first_lineno, hops=hops)
        for _ in range(_FOLLOWED):
            found = [name.id for name in ast.walk(node) if isinstance(name, ast.Name)] \
                if node else []
            names = {name: assigned(lineno, name) for name in found}
            values = {name: _parsed(value, mode="eval") for name, value in names.items() if value}
            if node is None or not values:
                break
            if sum(len(names[name] or "") for name in found) > _CLOSED_CHARS:
                return None
            try:
                node = _Replaced(values).visit(node)
            except _UNREADABLE_SYNTAX:  # nested deeper than the visit recurses
                return None
        function = 0 if first_lineno is None else self._functions[first_lineno]
        local = self._parameters.get(function, set()) | set(self._bound.get(function, {}))
        if node is None or any(isinstance(name, ast.Name) and name.id in local
                               for name in _reached(node)):
            return None
        return _written(node)

    def _last_before(self, scope: int, lineno: int, name: str) -> _Binding | None:
        """Where ``scope`` last binds ``name`` on a line before ``lineno``; None if nowhere."""
        before = [bound for line, bound in self._bound.get(scope, {}).get(name, [])
                  if line < lineno]
        return before[-1] if before else None

    def enclosing_assignment(self, first_lineno: int, name: str) -> str | None:
        """What the scopes around the function whose definition starts at ``first_lineno``
        (its decorator's line, as line_profiler records it) assign to ``name``: its enclosing
        functions', innermost first, then the module's, the last assignment of the nearest
        scope (``dl = DataLoader(ds)`` in ``main()`` around a nested ``run()``); None when
        none does, an enclosing function takes it as a parameter first, or the source does not
        parse."""
        function = self._functions.get(first_lineno)
        scope = self._outer[function] if function is not None else None
        while scope is not None:
            spans = [] if scope in self._classes else self._bound.get(scope, {}).get(name, [])
            if spans:  # a class body is no scope of its methods
                return self._text(spans[-1][1])
            if name in self._parameters.get(scope, ()):
                return None
            scope = self._outer[scope]
        return None

    def _text(self, bound: _Binding) -> str | None:
        """The value a binding gives, the expression written at its span put in its form, as
        ast.unparse writes it; None when it does not parse alone or is not shown."""
        span, form = bound
        if span is None:
            return None
        first, column, last, end = span
        lines = [line.encode() for line in self._source[first - 1:last]]
        lines[-1] = lines[-1][:end]
        lines[0] = lines[0][column:]
        tree = _parsed(b"\n".join(lines).decode(errors="replace"), mode="eval")
        return _formed(form, _written(tree.body) if isinstance(tree, ast.Expression) else None)


class _Replaced(ast.NodeTransformer):
    """Each name of an expression replaced by the parsed value given for it, and each call
    given (by its node's id) by the expression given for it."""

    def __init__(self, values: dict[str, ast.AST | None],
                 calls: dict[int, ast.AST] | None = None) -> None:
        self.values = values
        self.calls = calls or {}

    def visit_Name(self, node: ast.Name) -> ast.AST:  # noqa: N802 (ast's spelling)
        value = self.values.get(node.id)
        return value.body if isinstance(value, ast.Expression) else node

    def visit_Call(self, node: ast.Call) -> ast.AST:  # noqa: N802 (ast's spelling)
        return self.calls.get(id(node)) or self.generic_visit(node)


def _reached(node: ast.expr) -> list[ast.expr]:
    """The names and calls whose values reading an expression follows (_followed): the one
    it iterates over, a tuple's or list's items, an alternative's (``a if c else b``)."""
    node = _iterated(node)
    if isinstance(node, ast.Name | ast.Call):
        return [node]
    if isinstance(node, ast.Tuple | ast.List):
        return [name for element in node.elts for name in _reached(element)]
    if isinstance(node, ast.IfExp):
        return _reached(node.body) + _reached(node.orelse)
    if isinstance(node, ast.Subscript):
        return _reached(node.value)
    return []


def _parameters(arguments: ast.arguments) -> set[str]:
    """The names a function's parameters bind (``*args`` and ``**kwargs`` too)."""
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
             *(arg for arg in (arguments.vararg, arguments.kwarg) if arg is not None)]
    return {arg.arg for arg in every}


def loop_header(node: ast.AST) -> str | None:
    """A loop statement's header written back on one line, for a header the source writes over
    several (``for i, (x, y) in enumerate(train_loader,`` then ``start=1):``), whose first line
    alone is no statement: ``for i, (x, y) in enumerate(train_loader, start=1):``. None for
    another node, a header on one line, or one too deep to write back."""
    if isinstance(node, ast.For | ast.AsyncFor):
        ends, parts = node.iter.end_lineno, (node.target, node.iter)
    elif isinstance(node, ast.While):
        ends, parts = node.test.end_lineno, (node.test,)
    else:
        return None
    if ends is None or ends <= node.lineno:
        return None
    written = [_written(part) for part in parts]
    if None in written:
        return None
    if isinstance(node, ast.While):
        return f"while {written[0]}:"
    return f"{'async ' if isinstance(node, ast.AsyncFor) else ''}for {written[0]} in {written[1]}:"


def iterates_dataloader(loop: ast.For | ast.AsyncFor, assigned: Callable[[str], str | None]
                        ) -> bool:
    """Whether a ``for`` statement iterates over a DataLoader as the source shows it
    (dataloader_origin of what it iterates over, ``assigned`` telling what a name was last
    given): ``for x, y in train_loader:``, ``for b in tqdm(DataLoader(ds)):``, or over a name
    given one, ``dl = DataLoader(ds)`` then ``for i, (x, y) in enumerate(dl):``; not over
    ``range(len(train_loader))``, which fetches nothing, nor over ``cfg = yaml.load(f,
    Loader=yaml.SafeLoader)``."""
    iterable = _written(loop.iter)
    return iterable is not None and dataloader_origin(iterable, assigned)[1] is True


def loop_iterable(source: str | None) -> str | None:
    """What a ``for`` line iterates over, as written (``enumerate(train_loader)``); None for
    another line."""
    node = _statement(source) if source else None
    return _written(node.iter) if isinstance(node, ast.For | ast.AsyncFor) else None


def is_dataloader_loop_line(source: str | None, assigned: Callable[[str], str | None]
                            ) -> bool:
    """Whether a source line is a ``for`` over a DataLoader (iterates_dataloader)."""
    node = _statement(source) if source else None
    return isinstance(node, ast.For | ast.AsyncFor) and iterates_dataloader(node, assigned)


def loader_evidence(expression: str) -> bool | None:
    """What an expression's syntax says of it holding a DataLoader or an iterator of one: True
    (_is_dataloader), None when it only names what another line gives (a name, attribute or
    item, bare or in _ITERATION_WRAPPERS: it may hold one), False for anything else, whose value
    the expression itself shows (``model.parameters()``, ``iter([1, 2])``, ``yaml.load(f)``).
    None for one that does not parse."""
    tree = _parsed(expression, mode="eval")
    return _evidence(tree.body) if isinstance(tree, ast.Expression) else None


def _evidence(node: ast.expr) -> bool | None:
    """loader_evidence of a parsed expression; of a _TOGETHER call, None when no argument is a
    DataLoader but one may hold one (``zip(dl, labels)``)."""
    node = _iterated(node)
    if _is_dataloader(node):
        return True
    if _together(node):
        return None if any(_evidence(arg) is None for arg, _ in _together(node)) else False
    return None if isinstance(node, ast.Name | ast.Attribute | ast.Subscript) else False


def dataloader_origin(expression: str, assigned: Callable[[str], str | None]
                      ) -> tuple[str | None, bool | None]:
    """What an iterable or iterator expression holds as the source shows it, and whether that
    is a DataLoader or an iterator of one.

    What ``assigned`` gives the name it iterates over (its last assignment before the line)
    wins over what the name says (``train_loader = open(path)`` holds no DataLoader), followed
    while it only names another (_FOLLOWED): ``iter(dl), dl = DataLoader(ds)`` for ``it`` after
    ``dl = DataLoader(ds)``, ``it = iter(dl)``. The expression's own syntax tells where no
    assignment is shown (``iter(train_loader)`` of a parameter, ``model.parameters()``), or where
    the one shown calls a function whose result the source does not show (``train_loader =
    build_loader(cfg)``): then a name that says it holds a DataLoader is the evidence
    (named_only). A _TOGETHER call's arguments are each followed so (_together_origin):
    ``zip(a, b), a = DataLoader(ds), b = DataLoader(aux)``, and the items of a starred one's
    list or tuple literal: ``zip(*loaders), loaders = [DataLoader(a), DataLoader(b)]``. An item
    is read from the collection a name was assigned (_item: ``loaders[0]``, a ``for`` target),
    a call of a function the file defines from what it returns (SourceScopes.assigned: the
    function of that name seen where it is called, a module's or a nested one, or one a
    module of the project beside the file defines and it imports: ModuleSources; a name such
    a module binds at module level and it imports from what that module binds: exported_value), an
    attribute of a method's receiver from what its class's methods, and its bases', assign it
    (SourceScopes.attribute), a call of a method on it (``self.build_loader()``) from what that
    method of its class or of the first base that defines it returns, and so too an attribute
    or method of an instance a name or attribute was assigned (``self.data =
    DataModule(cfg)``). The verdict is None when the source does not show it (a
    parameter, an attribute no method shown assigns), and so is the origin when no
    assignment is shown.
    """
    if _together_texts(expression, assigned)[0]:
        return _together_origin(expression, assigned)
    origin, verdict = _name_origin(expression, assigned)
    if origin is not None and origin != expression and _together_texts(origin, assigned)[0]:
        return _together_origin(origin, assigned)
    return origin, verdict


def named_only(expression: str, assigned: Callable[[str], str | None]) -> bool:
    """Whether dataloader_origin takes ``expression`` for a DataLoader on a name alone: no
    ``DataLoader(...)`` call is written in it nor in what ``assigned`` gives the names in it,
    followed as far (``for x, y in train_loader:`` of a parameter, or after ``train_loader =
    build_loader(cfg)``)."""
    return dataloader_origin(expression, assigned)[1] is True \
        and not _shows_loader_call(expression, assigned, _FOLLOWED)


def _shows_loader_call(expression: str, assigned: Callable[[str], str | None], depth: int
                       ) -> bool:
    """Whether a ``DataLoader(...)`` call is written in ``expression``, or in what ``assigned``
    gives a name or call in it (_given_name), ``depth`` assignments deep."""
    tree = _parsed(expression, mode="eval")
    nodes = list(ast.walk(tree)) if tree is not None else []
    if any(_is_loader_call(node) for node in nodes):
        return True
    given = {_given_name(node) for node in nodes if isinstance(node, ast.expr)}
    values = {assigned(name) for name in given if name is not None} if depth else set()
    return any(_shows_loader_call(value, assigned, depth - 1) for value in values if value)


#: Characters of what a function another file imports returns, written back, that are shown:
#: a factory's value is a few DataLoader calls (under 1 KiB), while the calls of a hostile
#: file, each replaced by what it returns _FOLLOWED deep, could grow as their product.
_CLOSED_CHARS = 1 << 16
#: Module files crossed at most from the file read to the one that shows a value (a re-export
#: through a package's ``__init__.py`` is one): real projects reach their factory in a few
#: (train.py -> pkg/__init__.py -> pkg/data.py -> pkg/loaders.py); each crossing reads a file
#: of up to 8 MiB, and the Python stack grows with every one.
MODULE_HOPS = 8
#: Classes a method resolution order is read through at most, each a base of the one before:
#: a project's own hierarchy is a few deep, a hostile file's chain of thousands of classes
#: would pass Python's recursion limit.
_CLASS_DEPTH = 16
#: Assignments followed at most from one expression (``a = b``, ``b = c``...): a name assigned
#: an expression of itself (``a = zip(a, b)``, ``x = x[0]``) is not followed for ever.
_FOLLOWED = 4
#: Python's builtins: a call of one (``open(path)``, ``dict(workers=2)``) shows what it gives,
#: never a DataLoader, where another function's result is not shown (see _told).
_BUILTINS = frozenset(dir(builtins))


def _name_origin(expression: str, assigned: Callable[[str], str | None]
                 ) -> tuple[str | None, bool | None]:
    """dataloader_origin, a _TOGETHER call's arguments left unfollowed (an argument assigned
    a zip of itself, ``a = zip(a, b)``, would be followed for ever). A call whose result the
    source does not show, and no name saying it holds a DataLoader, is none, as written."""
    tree = _parsed(expression, mode="eval")
    if not isinstance(tree, ast.Expression):
        return None, None
    shown, verdict, called = _followed(tree.body, assigned, _FOLLOWED)
    if verdict is None and called:
        verdict = False  # a call whose result the source does not show, and no name says
    if not shown:
        return (expression if verdict is not None else None), verdict
    texts = [f"{name} = {value}" for name, value in shown]
    if _given_name(_iterated(tree.body)) == shown[0][0] and not shown[0][0].endswith("()"):
        texts[0] = shown[0][1]
    else:
        texts.insert(0, expression)
    return ", ".join(texts), verdict


def _followed(node: ast.expr, assigned: Callable[[str], str | None], depth: int
              ) -> tuple[list[tuple[str, str]], bool | None, bool]:
    """What an expression holds as the assignments ``assigned`` gives show it: the (name,
    value) pairs followed, whether it is a DataLoader (None: not shown), and whether that is
    unknown because the last value is a call whose result the source does not show (_told). A
    name's assignment wins over its name; the name tells only where no assignment is shown,
    or the one shown does not tell."""
    node = _iterated(node)
    item = _item_of(node)
    if item is not None:
        return _item(*item, assigned, depth)
    if isinstance(node, ast.IfExp):  # alternatives: a DataLoader when both are
        if depth <= 0:
            return [], None, False
        body, orelse = (_followed(part, assigned, depth - 1) for part in (node.body,
                                                                          node.orelse))
        return (list(dict.fromkeys(body[0] + orelse[0])),
                body[1] if body[1] == orelse[1] else None, body[2] and orelse[2])
    name = _given_name(node)
    value = assigned(name) if name is not None and depth > 0 else None
    tree = _parsed(value, mode="eval") if value is not None else None
    if name is None or not isinstance(tree, ast.Expression):
        told = _told(node)
        return [], told, told is None and _evidence(node) is False
    shown, verdict, called = _followed(tree.body, assigned, depth - 1)
    if verdict is None and isinstance(node, ast.Name | ast.Attribute) \
            and _names_a_loader(str(_name_of(node))):
        verdict = True
    return [(name, str(value)), *shown], verdict, called


def _given_name(node: ast.expr) -> str | None:
    """The name ``assigned`` is asked what a plain name, an attribute or a call's result holds:
    ``dl`` of ``dl``, ``self.train_dl`` of ``self.train_dl`` (what the class's methods assign
    it, SourceScopes.attribute), ``pkg.data.train_loader`` of itself (a dotted name),
    ``make_loader()`` of ``make_loader(cfg)`` (a call of a
    function by its name, not DataLoader nor a builtin: what the function of that name
    returns), ``self.build_loader()`` of ``self.build_loader(cfg)`` and ``data.make()`` of
    ``data.make(cfg)`` (a call of a method of a name, or of a module's function: what it
    returns); None else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return _dotted(node)
    called = node.func if isinstance(node, ast.Call) and not _is_loader_call(node) else None
    if isinstance(called, ast.Name) and called.id not in _BUILTINS:
        return f"{called.id}()"
    dotted = _dotted(called) if isinstance(called, ast.Attribute) else None
    return f"{dotted}()" if dotted is not None else None


def _dotted(node: ast.expr) -> str | None:
    """A name and the attributes after it as written (``pkg.data.make_loader``); None for
    another expression (``loaders[0].make``)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


#: What an item of a collection is taken from: the one a subscript names (its key or index,
#: ``loaders[0]``, ``loaders["train"]``), or any it yields when iterated (_ITERATED: a dict's
#: keys) or any of its values (_VALUES: ``loaders.values()``, or a subscript not written as a
#: literal).
class _Taken(enum.Enum):
    """Which items of a collection an expression may take, where no subscript names one."""

    ITERATED = "iterated"
    VALUES = "values"


_ITERATED, _VALUES = _Taken.ITERATED, _Taken.VALUES
_Key = ast.expr | _Taken


def _item_of(node: ast.expr) -> tuple[ast.expr, _Key] | None:
    """The collection and key an expression takes an item of: ``loaders`` and ``0`` of
    ``loaders[0]``, ``loaders`` iterated of ``next(iter(loaders))`` (a ``for`` target, see
    _bindings), values of ``loaders.values()``; None for another expression."""
    if isinstance(node, ast.Subscript):
        return node.value, node.slice
    if isinstance(node, ast.Call) and _name_of(node.func) == "next" and node.args \
            and isinstance(node.func, ast.Name):
        collection = node.args[0]
        if isinstance(collection, ast.Call) and _name_of(collection.func) == "iter" \
                and len(collection.args) == 1:
            collection = collection.args[0]
        if isinstance(collection, ast.Call) and isinstance(collection.func, ast.Attribute) \
                and collection.func.attr == "values" and not collection.args:
            return collection.func.value, _VALUES
        return collection, _ITERATED
    return None


def _item(collection: ast.expr, key: _Key, assigned: Callable[[str], str | None], depth: int
          ) -> tuple[list[tuple[str, str]], bool | None, bool]:
    """_followed of an item of ``collection`` (_item_of): the items of the list, tuple, set or
    dict literal or comprehension that a name was assigned (``loaders = [DataLoader(ds,
    batch_size=8) for ds in sets]``, then ``loaders[0]``, or ``for dl in loaders:``), the one
    a literal key or index names, else all alike (a DataLoader when every one is, none when
    every one is shown to be something else, else unknown). An item of a DataLoader is a
    batch, none; of a name no line shown assigns, a DataLoader when the name's plural says
    so (``val_loaders[0]``), none when the name says it is one (a batch)."""
    if isinstance(collection, ast.IfExp) and depth > 0:  # alternatives: alike, else unknown
        body, orelse = (_item(part, key, assigned, depth - 1) for part in (collection.body,
                                                                         collection.orelse))
        return (list(dict.fromkeys(body[0] + orelse[0])),
                body[1] if body[1] == orelse[1] else None, body[2] and orelse[2])
    given = _given_name(collection)
    if given is not None:
        value = assigned(given) if depth > 0 else None
        tree = _parsed(value, mode="eval") if value is not None else None
        if isinstance(tree, ast.Expression):
            shown, verdict, called = _item(tree.body, key, assigned, depth - 1)
            return [(given, str(value)), *shown], verdict, called
    if isinstance(collection, ast.Name):
        named = True if _names_a_loader(collection.id, many=True) else None
        return [], False if _names_a_loader(collection.id) else named, False
    elements, local = _elements(collection, key)
    if elements is None:
        verdict = _followed(collection, assigned, depth - 1)[1] if depth > 0 else None
        return [], False if verdict is True else None, False  # a DataLoader's item: a batch

    def inside(name: str) -> str | None:
        """What ``assigned`` gives a name the collection's comprehension does not bind."""
        return None if name in local else assigned(name)

    followed = [_followed(element, inside, depth - 1) for element in elements]
    verdicts = {verdict for _, verdict, _ in followed}
    shown = [pair for pairs, _, _ in followed for pair in pairs]
    verdict = verdicts.pop() if len(verdicts) == 1 else None
    return list(dict.fromkeys(shown)), verdict, len(followed) == 1 and followed[0][2]


def _elements(collection: ast.expr, key: _Key) -> tuple[list[ast.expr] | None, set[str]]:
    """The expressions an item of a literal or comprehension ``collection`` may be at ``key``
    (_item_of), and the names its comprehension binds (its element's own, not the scope's);
    None for another collection (a call, a name)."""
    if isinstance(collection, ast.List | ast.Tuple | ast.Set):
        items = list(collection.elts)
        if any(isinstance(item, ast.Starred) for item in items):
            return None, set()
        index = key.value if isinstance(key, ast.Constant) else None
        if isinstance(index, int) and not isinstance(index, bool):
            return (items[index:][:1] if -len(items) <= index < len(items) else []), set()
        return items, set()
    if isinstance(collection, ast.Dict):
        if key == _ITERATED:
            return [k for k in collection.keys if k is not None], set()
        if not isinstance(key, ast.Constant):  # any value: .values(), a key not written
            return list(collection.values), set()
        return [value for k, value in zip(collection.keys, collection.values, strict=True)
                if isinstance(k, ast.Constant) and k.value == key.value], set()
    if isinstance(collection, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
        local = {name.id for generator in collection.generators
                 for name in ast.walk(generator.target) if isinstance(name, ast.Name)}
        if isinstance(collection, ast.DictComp):
            return [collection.key if key == _ITERATED else collection.value], local
        return [collection.elt], local
    return None, set()


def _told(node: ast.expr) -> bool | None:
    """loader_evidence of a parsed expression no assignment is followed from, but None for a
    call whose result the source does not show (``build_loader(cfg)``, ``yaml.load(f)``: not
    a DataLoader call, a _TOGETHER call nor a builtin's)."""
    verdict = _evidence(node)
    node = _iterated(node)
    if verdict is False and isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in _BUILTINS):
        return None
    return verdict


def _together_texts(expression: str, assigned: Callable[[str], str | None]
                    ) -> tuple[list[str], list[str]]:
    """The iterables a _TOGETHER call an expression iterates over (out of
    _ITERATION_WRAPPERS) takes, as written, and the assignments that show them: ``a`` and ``b``
    of ``enumerate(zip(a, b))``; for a starred name, the items of the list or tuple literal
    ``assigned`` gives it (_spread: ``zip(*loaders)`` after ``loaders = [DataLoader(a),
    DataLoader(b)]``) and that assignment. Neither for another expression, nor when a starred
    argument's items are not shown (``zip(*pairs)``, a parameter)."""
    tree = _parsed(expression, mode="eval")
    together = _together(_iterated(tree.body)) if isinstance(tree, ast.Expression) else []
    nodes: list[ast.expr] = []
    shown: list[str] = []
    for arg, starred in together:
        spread = _spread(arg, assigned) if starred else ([arg], None)
        if spread is None:
            return [], []
        nodes += spread[0]
        shown += [spread[1]] if spread[1] is not None else []
    texts = [_written(node) for node in nodes]
    return ([text for text in texts if text is not None], shown) if None not in texts \
        else ([], [])


def _spread(node: ast.expr, assigned: Callable[[str], str | None]
            ) -> tuple[list[ast.expr], str] | None:
    """The items a starred _TOGETHER argument spreads into, and the assignment that shows
    them: of a name ``assigned`` gives a list or tuple literal without starred items,
    ``loaders = [DataLoader(a), DataLoader(b)]``, or a comprehension whose element is read
    without the names it binds (``[DataLoader(ds) for ds in sets]``: its element stands for
    every item); None for another argument or value (a call, a literal spreading another
    collection)."""
    value = assigned(node.id) if isinstance(node, ast.Name) else None
    tree = _parsed(value, mode="eval") if value is not None else None
    literal = tree.body if isinstance(tree, ast.Expression) else None
    if isinstance(literal, ast.List | ast.Tuple | ast.ListComp | ast.GeneratorExp):
        items, local = _elements(literal, _ITERATED)
        reads_local = any(isinstance(name, ast.Name) and name.id in local
                          for item in items or () for name in ast.walk(item))
        if items is not None and (not reads_local or all(map(_is_loader_call, items))):
            return items, f"{_written(node)} = {value}"
    return None


def _together_origin(expression: str, assigned: Callable[[str], str | None]
                     ) -> tuple[str | None, bool | None]:
    """dataloader_origin of a _TOGETHER call whose syntax does not tell: each argument's
    origin (a name followed as _name_origin follows one, a starred one's items so too),
    ``zip(a, b), a = DataLoader(ds), b = DataLoader(aux)``. A DataLoader when one argument is
    (each pass fetches from it), none when every one is something else, else unknown; the
    origin None when no argument's assignment is shown."""
    texts, spread = _together_texts(expression, assigned)
    origins = [(text, *_name_origin(text, assigned)) for text in texts]
    verdicts = [verdict for _, _, verdict in origins]
    verdict = True if True in verdicts else None if None in verdicts else False
    shown = spread + [f"{text} = {origin}" for text, origin, _ in origins
                      if origin is not None and origin != text]
    if not shown:
        return (expression if verdict is not None else None), verdict
    return ", ".join([expression, *shown]), verdict


def is_loop_line(source: str | None) -> bool:
    """Whether a source line opens a ``for`` or ``while`` loop."""
    return bool(source) and _LOOP_LINE.match(source) is not None


def is_sync_point_line(source: str | None) -> bool:
    """Whether a source line waits for the GPU (reads a GPU value on the host, synchronizes)."""
    code = (source or "").split("#", 1)[0]
    return _SYNC_POINT_LINE.search(code) is not None
