"""The Markdown report, for pasting into a GitHub, GitLab or Jira comment: no HTML at all.

Every value the template prints passes through :func:`escape_markdown` (jinja2's ``finalize``
hook), so a kernel name cannot add markup, open an HTML tag or break a table row.
"""

from __future__ import annotations

import re
from functools import cache

import jinja2

from profreport.reports.analysis.results import BREAKDOWN_PARTS, Report
from profreport.reports.render.html import build_run_views, templates_environment

TEMPLATE = "report.md.j2"
#: Longest kernel or op name a Markdown table shows (comments have no horizontal scroll).
NAME_LIMIT = 120
#: Rows of the slowest-lines table: a comment shows the lines that matter, not the listing.
SLOWEST_LINES = 5
#: Rows of the top-kernel and top-operator tables (the HTML report lists more).
TOP_ROWS = 5
#: Width in characters of the longest trial bar.
BAR_WIDTH = 20

# CommonMark lets a backslash escape any ASCII punctuation; these are the characters that can
# start emphasis, an HTML tag or entity, a link, a code span, a table cell, strikethrough, or a
# GitHub issue reference (``#12``).
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|~&])")
_LINE_BREAKS = re.compile(r"[\r\n\t\v\f]+")


def escape_markdown(value: object) -> str:
    """``value`` as literal Markdown text on one line (None prints as nothing)."""
    if value is None:
        return ""
    text = _LINE_BREAKS.sub(" ", str(value))
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


@cache
def _markdown_environment() -> jinja2.Environment:
    """The (cached) environment of the Markdown template: no autoescape, Markdown finalize."""
    return templates_environment(autoescape=False, finalize=escape_markdown,
                                 trim_blocks=True, lstrip_blocks=True)


def render_markdown(report: Report) -> str:
    """The Markdown report."""
    context = {"report": report, "parts": BREAKDOWN_PARTS, "name_limit": NAME_LIMIT,
               "runs": build_run_views(report, with_charts=False), "line_limit": SLOWEST_LINES,
               "top_limit": TOP_ROWS,
               "bar_width": BAR_WIDTH}
    return _markdown_environment().get_template(TEMPLATE).render(context)
