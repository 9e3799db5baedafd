"""The import graph follows the data flow: no loops, no arrow against the flow, lazy imports
(inside functions) included. Read statically from the source, so nothing is imported to check.

runner -> artifacts + manifest -> parsers -> tables -> analysis -> results -> renderers; the
command line (``cli``, ``commands``, ``__main__``) sits on top and may import every layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Source folder of each package (pyproject's package-dir).
FOLDERS = {"profreport": "core", "profreport.runner": "runner",
           "profreport.parsers": "parsers", "profreport.reports": "reports"}
#: Core modules that sit on top of every layer: the command line and the grader (which runs
#: the whole analysis on each submission).
TOP = frozenset({"profreport.cli", "profreport.commands", "profreport.__main__"})
TOP_PACKAGES = ("profreport.grade",)


def module_files() -> dict[str, Path]:
    """Every profreport module and its file."""
    out: dict[str, Path] = {}
    for package, folder in FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((package, *parts))] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The profreport modules ``name`` imports anywhere in its file (``from a import b`` counts
    as ``a.b`` when that is a module, else ``a``)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                      for alias in node.names}
    return {module for module in found if module in known and module != name}


def graph() -> dict[str, set[str]]:
    """Module -> the profreport modules it imports."""
    files = module_files()
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def layer(module: str) -> str:
    """The layer a module belongs to."""
    if module in TOP or module.startswith(TOP_PACKAGES):
        return "top"
    for prefix in ("profreport.reports.analysis.results", "profreport.reports.analysis",
                   "profreport.reports.render", "profreport.parsers", "profreport.runner"):
        if module == prefix or module.startswith(prefix + "."):
            return prefix.rsplit(".", 1)[-1]
    return "core"


#: Which layers each layer may import (itself always).
ALLOWED = {
    "core": {"core"},
    "parsers": {"core"},
    "results": {"core"},
    "analysis": {"core", "parsers", "results"},
    "render": {"core", "results"},
    "runner": {"core"},
    "top": {"core", "parsers", "results", "analysis", "render", "runner"},
}


def test_no_arrow_against_the_flow() -> None:
    """Every import stays inside what its layer may use."""
    wrong = sorted(f"{src} -> {dst}" for src, targets in graph().items() for dst in targets
                   if layer(dst) != layer(src) and layer(dst) not in ALLOWED[layer(src)])
    assert wrong == []


def test_no_import_loops() -> None:
    """No module reaches itself through its imports (depth-first search for a back edge)."""
    edges = graph()
    state: dict[str, int] = {}
    loops: list[str] = []

    def visit(module: str, path: list[str]) -> None:
        """Walk from ``module``; a module still on the path closes a loop."""
        state[module] = 1
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                loops.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert loops == []


def test_the_graph_is_read() -> None:
    """The reader sees real edges (a test of the test: an empty graph would pass the others)."""
    edges = graph()
    assert "profreport.concepts" in edges["profreport.parsers.kineto"]
    assert "profreport.reports.analysis.results" in edges["profreport.reports.render.json"]
    assert layer("profreport.reports.analysis.gpu") == "analysis"
    assert layer("profreport.units") == "core"
