"""Names from inputs are neutralised once for display: controls, NUL and bidi overrides made
visible, long names elided, the JSON report keeping every name whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profreport.commands import run_summary
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.results import Report
from profreport.reports.render.html import render_html
from profreport.reports.render.json import render_json
from profreport.reports.render.markdown import render_markdown

#: A kernel name that reads backwards (U+202E), hides a NUL, starts an escape sequence and a tag.
TRICK = "gemm\u202e\x00\x1b[2J<b>\u2066evil\u2069"
#: Near the parsers' name limit: kept whole, shown elided.
LONG = "K" * 60_000


def trace_with_names(tiny_trace: Path, kernel: str, op: str) -> Path:
    """The tiny trace with its kernel and its CPU operator renamed."""
    data = json.loads(tiny_trace.read_text(encoding="utf-8"))
    for event in data["traceEvents"]:
        if event["cat"] == "kernel":
            event["name"] = kernel
        elif event["name"] == "aten::mm":
            event["name"] = op
    path = tiny_trace.with_name("names.pt.trace.json")
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture
def hostile_report(tiny_trace: Path) -> Report:
    """The report of a trace whose kernel is :data:`TRICK` and whose op is :data:`LONG`-ish."""
    path = trace_with_names(tiny_trace, TRICK, "aten::mm" + LONG)
    report = analyze_paths([path], AnalyzeOptions())
    assert report.runs[0].metrics.top_kernels[0].name == TRICK
    return report


@pytest.mark.parametrize("render", [render_html, render_markdown])
def test_controls_and_bidi_never_reach_the_page(hostile_report: Report, render) -> None:
    page = render(hostile_report)
    for raw in ("\u202e", "\x00", "\x1b", "\u2066", "\u2069"):
        assert raw not in page
    assert "\\u202e" in page and "\\x1b" in page


def test_html_shows_escapes_inside_escaped_text(hostile_report: Report) -> None:
    page = render_html(hostile_report)
    assert "gemm\\u202e\\x00\\x1b[2J&lt;b&gt;\\u2066evil\\u2069" in page
    assert "&lt;b&gt;" in page


def test_long_names_are_elided_in_pages_and_whole_in_json(hostile_report: Report) -> None:
    html_page, md_page = render_html(hostile_report), render_markdown(hostile_report)
    assert "K" * 3000 not in html_page  # tooltips stop at 2,000 characters
    assert "…[60,008 chars]…" in html_page and "…\\[60,008 chars\\]…" in md_page
    assert max(len(line) for line in md_page.splitlines()) < 400
    data = json.loads(render_json(hostile_report))
    names = [op["name"] for op in data["runs"][0]["top_ops"]]
    assert "aten::mm" + LONG in names
    assert TRICK in [k["name"] for k in data["runs"][0]["top_kernels"]]


def test_terminal_summary_is_neutralised(hostile_report: Report) -> None:
    lines = run_summary(hostile_report.runs[0])
    text = "\n".join(lines)
    assert "\u202e" not in text and "\x1b" not in text and "\x00" not in text
    assert max(len(line) for line in lines) < 200
    assert any("gemm\\u202e\\x00\\x1b[2J<b>" in line for line in lines)


def test_run_name_from_a_file_name_is_neutralised(tiny_trace: Path) -> None:
    path = trace_with_names(tiny_trace, "k", "aten::mm")
    hostile = path.with_name("run\u202eevil.pt.trace.json")
    path.rename(hostile)
    report = analyze_paths([hostile], AnalyzeOptions())
    assert report.runs[0].name == "run\u202eevil"
    html_page, md_page = render_html(report), render_markdown(report)
    assert "\u202e" not in html_page and "run\\u202eevil" in html_page
    assert "\u202e" not in md_page and "run\\\\u202eevil" in md_page  # Markdown escapes "\\"
