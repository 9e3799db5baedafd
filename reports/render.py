"""The one owner of report files: writes every requested format into the output folder.

Each file is written to a temporary name beside its target and renamed only when complete
(:mod:`profreport.fileio`), so a failing renderer or an interrupt never leaves a half-written
report; files of formats that were written before the failure stay, complete.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from profreport.errors import UsageError
from profreport.fileio import write_bytes, write_text
from profreport.reports.results import Report

#: File name of each output format.
FILE_NAMES = {"html": "report.html", "pdf": "report.pdf", "md": "report.md",
              "json": "report.json"}


def _html(report: Report) -> str:
    """The HTML report (imported late: plotly is only loaded when HTML is asked for)."""
    from profreport.reports.html import render_html

    return render_html(report)


def _pdf(report: Report) -> bytes:
    """The PDF report (imported late: weasyprint is slow to import)."""
    from profreport.reports.pdf import render_pdf

    return render_pdf(report)


def _markdown(report: Report) -> str:
    """The Markdown report."""
    from profreport.reports.markdown import render_markdown

    return render_markdown(report)


def _json(report: Report) -> str:
    """The JSON report (``profreport/1``)."""
    from profreport.reports.json_report import render_json

    return render_json(report)


RENDERERS: dict[str, Callable[[Report], str | bytes]] = {
    "html": _html, "pdf": _pdf, "md": _markdown, "json": _json,
}


def write_reports(report: Report, out_dir: Path, formats: Sequence[str]) -> list[Path]:
    """Render ``report`` in each of ``formats`` into ``out_dir``; returns the written paths."""
    unknown = [name for name in formats if name not in RENDERERS]
    if unknown:
        raise UsageError(f"unknown report format {', '.join(unknown)}; "
                         f"choose from {', '.join(RENDERERS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in dict.fromkeys(formats):
        content = RENDERERS[name](report)
        target = out_dir / FILE_NAMES[name]
        if isinstance(content, bytes):
            written.append(write_bytes(target, content))
        else:
            written.append(write_text(target, content))
    return written
