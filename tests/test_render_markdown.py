"""The Markdown report: real figures from the corpus, and no markup from hostile names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.render.markdown import escape_markdown, render_markdown

pytestmark = pytest.mark.corpus

# An HTML tag or comment opener that Markdown would pass through (not backslash-escaped).
_RAW_TAG = re.compile(r"(?<!\\)<[A-Za-z/!?]")
# A table cell separator that is not escaped.
_CELL = re.compile(r"(?<!\\)\|")


def tables(text: str) -> list[list[str]]:
    """Each Markdown table of ``text`` as its list of lines."""
    found: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append(current)
            current = []
    return found


def test_markdown_of_the_pair(corpus: Path) -> None:
    """Verdicts, the 1.25x speedup and consistent tables for the two ResNet-50 traces."""
    report = analyze_paths([corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz",
                            corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz"],
                           AnalyzeOptions())
    text = render_markdown(report)
    assert "**Verdict: Waiting for data (DataLoader-bound).**" in text
    assert "| 1.39× (±11%) |" in text  # median step windows, beyond their robust noise band
    assert r"| resnet50\_num\_workers\_4 | 126.6 ms median |" in text  # the statistic named
    # The 69.3 ms of fetches (40% of the 174.9 ms step) less the 10.0 ms the GPU computes in them.
    assert "| DataLoader wait | 59.3 ms |" in text
    found = tables(text)
    assert len(found) >= 6
    for table in found:
        widths = {len(_CELL.findall(line)) for line in table}
        assert len(widths) == 1, table
        assert re.fullmatch(r"\|(?:-+:?\|)+", table[1])
    assert not _RAW_TAG.search(text)


def test_hostile_names_are_escaped(hostile_kineto_trace: Path,
                                   hostile_names: tuple[str, str]) -> None:
    """A kernel named <script> and an op named <img onerror> stay literal text in their cells."""
    report = analyze_paths([hostile_kineto_trace], AnalyzeOptions())
    text = render_markdown(report)
    for name in hostile_names:
        assert name not in text
        assert escape_markdown(name) in text
    assert r"| 1 | \<script\>alert(1)\</script\> |" in text  # the busiest kernel, in its cell
    assert not _RAW_TAG.search(text)
    for table in tables(text):
        assert len({len(_CELL.findall(line)) for line in table}) == 1


def test_escape_markdown_neutralises_markup() -> None:
    """Pipes, tags, code spans, emphasis, links and line breaks become literal text."""
    assert escape_markdown("a|b <i>`c`*d*_e_[f](g)\nh") == \
        r"a\|b \<i\>\`c\`\*d\*\_e\_\[f\](g) h"
    assert escape_markdown(None) == ""
