"""Renderers: one module per output format, and the registry the CLI's ``--format`` comes from.

A renderer is a function ``Report -> str | bytes`` in its own module, imported only when its
format is asked for (plotly and weasyprint are slow to import). Adding a format is one module
plus one :data:`RENDERERS` entry. :func:`write_reports` is the one owner of report files: each is
written to a temporary name beside its target and renamed when complete
(:mod:`profreport.fileio`), so a failing renderer or an interrupt never leaves a half-written
report.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from profreport.errors import MissingToolError, UsageError
from profreport.fileio import write_bytes, write_text

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


def write_reports(report: Report, out_dir: Path, formats: Sequence[str]) -> list[Path]:
    """Render ``report`` in each of ``formats`` into ``out_dir``; returns the written paths."""
    unknown = [name for name in formats if name not in RENDERERS]
    if unknown:
        raise UsageError(f"unknown report format {', '.join(unknown)}; "
                         f"choose from {', '.join(RENDERERS)}")
    require_renderers(formats)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in dict.fromkeys(formats):
        renderer = RENDERERS[name]
        content = renderer.render(report)
        target = out_dir / renderer.file_name
        if isinstance(content, bytes):
            written.append(write_bytes(target, content))
        else:
            written.append(write_text(target, content))
    return written
