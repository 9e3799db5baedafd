"""The student's pages: ``report.html`` (the grade above profreport's report of their runs) and
``feedback.md``. Text from a submission is autoescaped in HTML and passes through
:func:`~profreport.reports.render.markdown.escape_markdown` in Markdown."""

from __future__ import annotations

from functools import cache

import jinja2

from profreport import __version__
from profreport.grade.results import CheckResult, StudentResult
from profreport.grade.rubric import Rubric
from profreport.reports.analysis.results import Report
from profreport.reports.render.html import build_view, render_page, templates_environment
from profreport.reports.render.markdown import escape_markdown

STUDENT_TEMPLATE = "grade_student.html.j2"
FEEDBACK_TEMPLATE = "feedback.md.j2"


def points(value: float) -> str:
    """Points without a trailing ``.0`` (``4``, ``2.5``)."""
    return f"{value:g}"


def check_class(check: CheckResult) -> str:
    """The CSS class of a check's row: passed, partly, or failed."""
    if check.passed:
        return "check-pass"
    return "check-partial" if check.points > 0 else "check-fail"


GRADE_FILTERS = {"points": points, "check_class": check_class}


@cache
def _markdown_environment() -> jinja2.Environment:
    """The feedback template's environment: no autoescape, every value Markdown-escaped."""
    environment = templates_environment(autoescape=False, finalize=escape_markdown,
                                        trim_blocks=True, lstrip_blocks=True)
    environment.filters.update(GRADE_FILTERS)
    return environment


def render_feedback(result: StudentResult, rubric: Rubric) -> str:
    """feedback.md: each check's points, what was measured, and what to try next."""
    template = _markdown_environment().get_template(FEEDBACK_TEMPLATE)
    return template.render(result=result, rubric=rubric)


def render_student_page(result: StudentResult, rubric: Rubric, report: Report | None) -> str:
    """report.html: the grade, then the report of the student's runs (none on error)."""
    report = report or Report(title=f"{result.student}: {rubric.name}",
                              generated_by=f"profreport {__version__}", runs=[],
                              failures=result.refused + result.failures)
    extra = {"result": result, "rubric": rubric, **GRADE_FILTERS}
    return render_page(build_view(report), template=STUDENT_TEMPLATE, extra=extra)
