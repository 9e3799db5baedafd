"""What a user's training script does, read from its syntax tree without importing or running it.

The runner needs to know, before the first launch, whether the script drives torch.profiler
itself (then it is not wrapped a second time), where it writes its traces, whether it decorates
functions with kernprof's bare ``@profile``, and how it spells its command-line options.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from profreport import pysource
from profreport.inputs import shown_source
from profreport.text import python_lines

#: Calls that mean the script records its own torch.profiler traces.
PROFILER_CALLS = frozenset({"torch.profiler.profile", "torch.autograd.profiler.profile",
                            "torch.profiler.tensorboard_trace_handler"})
#: Calls whose first argument names where a trace is written (a folder, or a file).
TRACE_DIR_CALLS = frozenset({"torch.profiler.tensorboard_trace_handler"})
TRACE_FILE_METHODS = frozenset({"export_chrome_trace"})


@dataclass(frozen=True)
class ScriptFacts:
    """What the syntax tree of one script says (empty facts when it does not parse)."""

    #: The script calls torch.profiler (profile or tensorboard_trace_handler) itself.
    drives_torch_profiler: bool = False
    #: Folders (as written, relative to the working directory) the script's traces go to.
    trace_dirs: tuple[str, ...] = ()
    #: A function carries kernprof's bare ``@profile`` decorator.
    has_profile_decorator: bool = False
    #: Line of a top-level ``for`` over a DataLoader (loader_loop_line; no line profile there).
    module_level_loader_line: int | None = None
    #: Option strings the script's argparse knows (``--num-workers``...).
    options: tuple[str, ...] = ()
    #: Why the facts are empty, when the script could not be read or parsed.
    unreadable: str | None = None


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted name it stands for, from every import in the script."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def dotted_name(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """``tp.profile`` -> ``torch.profiler.profile`` through the import aliases; None for a call
    on anything but a (dotted) name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    root = aliases.get(node.id, node.id)
    return ".".join([root, *reversed(parts)])


def first_string_argument(call: ast.Call, keyword: str) -> str | None:
    """The first positional argument, or the ``keyword`` one, when it is a string literal."""
    candidates = [*call.args[:1], *(kw.value for kw in call.keywords if kw.arg == keyword)]
    for value in candidates:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
    return None


def profiler_facts(tree: ast.Module) -> tuple[bool, tuple[str, ...]]:
    """Whether the script calls torch.profiler, and the trace folders written as literals."""
    aliases = import_aliases(tree)
    drives, folders = False, []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = dotted_name(node.func, aliases)
        if name in PROFILER_CALLS:
            drives = True
        if name in TRACE_DIR_CALLS:
            folder = first_string_argument(node, "dir_name")
            folders += [folder] if folder else []
        if isinstance(node.func, ast.Attribute) and node.func.attr in TRACE_FILE_METHODS:
            path = first_string_argument(node, "path")
            folders += [str(Path(path).parent)] if path else []
    return drives, tuple(dict.fromkeys(folders))


def has_bare_profile_decorator(tree: ast.Module) -> bool:
    """Whether some function is decorated with the bare name ``profile`` (kernprof's builtin),
    and the script does not bind ``profile`` itself (then ``@profile`` is the script's own)."""
    aliases = import_aliases(tree)
    if "profile" in aliases:
        return False
    return any(isinstance(decorator, ast.Name) and decorator.id == "profile"
               for node in ast.walk(tree)
               if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
               for decorator in node.decorator_list)


def loader_loop_line(tree: ast.Module, lines: list[str], path: Path) -> int | None:
    """Line number of a top-level ``for`` loop over a DataLoader, by the rule the .lprof parser
    reads a loop with (pysource.iterates_dataloader): ``for x, y in train_loader:``, or over a
    name the module assigns one before the loop (``dl = DataLoader(ds)``, ``for b in dl:``),
    the modules it imports read from the script's folder (``path``'s) alone; else None."""
    scopes = pysource.SourceScopes(lines, path, pysource.ModuleSources(
        partial(shown_source, roots=[path.parent], owner=path)))
    for node in tree.body:
        if isinstance(node, ast.For | ast.AsyncFor) and pysource.iterates_dataloader(
                node, partial(scopes.module_assigned, node.lineno)):
            return node.lineno
    return None


def imported_modules(script: Path) -> list[Path]:
    """The modules beside ``script`` that it imports, and those they import in turn, as paths
    relative to its folder, each package's ``__init__.py`` between them and it too: found as
    the report follows them (pysource.ModuleSources.reached), read as text from the script's
    folder alone (never imported nor run; nothing outside it, nor a link leading out)."""
    script = script.absolute()
    read = partial(shown_source, roots=[script.parent], owner=script)
    lines = read(script)
    if lines is None:
        return []
    modules = pysource.ModuleSources(read)
    found = modules.reached(pysource.SourceScopes(lines, script, modules))
    relative = [path.relative_to(script.parent) for path in found
                if path.is_relative_to(script.parent) and path != script]
    packages = [package / "__init__.py" for path in relative for package in path.parents
                if package != Path()
                and read(script.parent / package / "__init__.py") is not None]
    return list(dict.fromkeys([*relative, *packages]))


def argparse_options(tree: ast.Module) -> tuple[str, ...]:
    """Every ``--option`` string passed to an ``add_argument`` call."""
    options = [arg.value for node in ast.walk(tree)
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr == "add_argument"
               for arg in node.args
               if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
               and arg.value.startswith("--")]
    return tuple(dict.fromkeys(options))


def scan_script(path: Path) -> ScriptFacts:
    """The facts of the script at ``path``; empty facts saying why when it cannot be parsed."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError) as exc:
        return ScriptFacts(unreadable=f"{path}: cannot be read as Python ({exc})")
    drives, folders = profiler_facts(tree)
    return ScriptFacts(drives_torch_profiler=drives, trace_dirs=folders,
                       has_profile_decorator=has_bare_profile_decorator(tree),
                       module_level_loader_line=loader_loop_line(
                           tree, python_lines(source), path.absolute()),
                       options=argparse_options(tree))


def option_for(key: str, options: tuple[str, ...]) -> str:
    """How the script spells option ``key`` (``num_workers`` -> ``--num-workers`` when its
    argparse says so), else ``--key`` as given."""
    wanted = key.replace("-", "_").lstrip("_")
    for option in options:
        if option[2:].replace("-", "_") == wanted:
            return option
    return f"--{key}"
