"""Renderers: one module per output format, and the registry the CLI's ``--format`` comes from.

A renderer is a function ``Report -> str | bytes`` in its own module, imported only when its
format is asked for (plotly and weasyprint are slow to import). Adding a format is one module
plus one :data:`RENDERERS` entry. :func:`write_reports` is the one owner of report files: the
whole set is rendered into a temporary folder inside ``--out`` and moved into place in one step,
under a lock on the folder (:mod:`profreport.fileio`), so a failing renderer, Ctrl-C or a second
run writing to the same folder never leaves a half-written report or a mix of two runs' files.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from profreport.errors import MissingToolError, UsageError
from profreport.fileio import folder_lock, staging_folder, swap_in

if TYPE_CHECKING:  # the results module is only needed once there is a report to render
    from profreport.reports.analysis.results import Report


@dataclass(frozen=True)
class Renderer:
    """One output format: its ``--format`` name, file name, and the function that renders it."""

    name: str
    file_name: str
    #: ``module:function`` of the renderer, a function ``Report -> str`` (or ``bytes`` if binary).
    entry_point: str
    binary: bool = False
    #: Whether the format is written when ``--format`` is not given.
    default: bool = True
    description: str = ""
    #: Modules the format needs that the base install leaves out, and the extra that adds them.
    needs: tuple[str, ...] = ()
    extra: str | None = None

    def missing(self) -> list[str]:
        """The modules of :attr:`needs` that are not installed."""
        return [name for name in self.needs if importlib.util.find_spec(name) is None]

    def render(self, report: Report) -> str | bytes:
        """The report in this format (the renderer's module is imported here, on first use)."""
        module, function = self.entry_point.split(":")
        return getattr(importlib.import_module(module), function)(report)


def require_renderers(formats: Sequence[str]) -> None:
    """MissingToolError naming the extra to install when a chosen format's modules are absent
    (checked before any analysis, so a long parse is not wasted)."""
    for name in dict.fromkeys(formats):
        renderer = RENDERERS.get(name)
        missing = renderer.missing() if renderer is not None else []
        if missing:
            raise MissingToolError.for_extra(f"--format {name}", missing, str(renderer.extra))


RENDERERS: dict[str, Renderer] = {r.name: r for r in (
    Renderer("html", "report.html", "profreport.reports.render.html:render_html",
             description="self-contained page, works offline"),
    Renderer("pdf", "report.pdf", "profreport.reports.render.pdf:render_pdf", binary=True,
             default=False, description="A4 pages with static charts",
             needs=("weasyprint", "kaleido"), extra="pdf"),
    Renderer("md", "report.md", "profreport.reports.render.markdown:render_markdown",
             description="for pasting into an issue"),
    Renderer("json", "report.json", "profreport.reports.render.json:render_json",
             description="schema profreport/1, for scripts"),
)}
DEFAULT_FORMATS = tuple(name for name, renderer in RENDERERS.items() if renderer.default)


def write_reports(report: Report, out_dir: Path, formats: Sequence[str],
                  on_wait: Callable[[str], None] | None = None) -> list[Path]:
    """Render ``report`` in each of ``formats`` and put the set into ``out_dir`` at once,
    replacing the previous set (report files of formats not asked for are removed); returns the
    written paths. ``on_wait`` hears one line if another run holds the folder."""
    unknown = [name for name in formats if name not in RENDERERS]
    if unknown:
        raise UsageError(f"unknown report format {', '.join(unknown)}; "
                         f"choose from {', '.join(RENDERERS)}")
    require_renderers(formats)
    out_dir = Path(out_dir)
    chosen = [RENDERERS[name] for name in dict.fromkeys(formats)]
    with staging_folder(out_dir) as staging:
        for renderer in chosen:
            content = renderer.render(report)
            mode = "wb" if isinstance(content, bytes) else "w"
            with open(staging / renderer.file_name, mode,
                      encoding=None if mode == "wb" else "utf-8") as handle:
                handle.write(content)
        names = [renderer.file_name for renderer in chosen]
        stale = [r.file_name for r in RENDERERS.values() if r.file_name not in names]
        with folder_lock(out_dir, on_wait):
            return swap_in(staging, out_dir, names, stale)
