"""The HTML report: one self-contained page (plotly.js embedded once, no network access).

The same template renders the print version the PDF is made from (``images`` given: charts as
static images, no scripts). Everything from input files is autoescaped; chart data reaches the
page only through jinja2's ``tojson``.
"""

from __future__ import annotations

import base64
import gzip
import importlib.resources
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

import jinja2
import markupsafe

from profreport.reports.analysis.results import (
    BREAKDOWN_PARTS,
    Finding,
    Report,
    RunAnalysis,
    origin_label,
)
from profreport.reports.render import display
from profreport.reports.render.display import MetricGroup, TrialBar
from profreport.text import neutralise

if TYPE_CHECKING:  # plotly (behind the charts) loads only when a page with charts is rendered
    from profreport.reports.render.charts import Chart

TEMPLATE = "report.html.j2"

_FILTERS = {
    "duration": display.duration,
    "location": display.location,
    "signed_duration": display.signed_duration,
    "sentence": display.sentence,
    "source_place": display.source_place,
    "phase_label": display.phase_label,
    "indent_width": display.indent_width,
    "plain": display.plain,
    "percent": display.percent,
    "ratio": display.ratio,
    "noise_mark": display.noise_mark,
    "one_interval": display.one_interval,
    "number": display.number,
    "nbytes": display.nbytes,
    "verdict_label": display.verdict_label,
    "part_label": display.part_label,
    "part_time": display.part_time,
    "breakdown_step_label": display.breakdown_step_label,
    "part_delta": display.part_delta,
    "rank_step_label": display.rank_step_label,
    "comparison_step_label": display.comparison_step_label,
    "part_rows": display.part_rows,
    "origin_label": origin_label,
    "heat_bucket": display.heat_bucket,
    "elide": display.elide,
    "share_header": display.share_header,
    "tooltip": display.tooltip,
}
#: Longest kernel or op name a table shows (templated kernels run to thousands of characters;
#: the page keeps the full name in the cell's tooltip).
SCREEN_NAME_LIMIT = 240
PRINT_NAME_LIMIT = 140
#: Rows of the slowest-lines table (the annotated listing below it has every line).
SLOWEST_LINES = 10


@dataclass(frozen=True)
class RunView:
    """What the template shows of one run besides the run itself."""

    index: int
    run: RunAnalysis
    charts: list[Chart]
    metric_groups: list[MetricGroup]
    trials: list[TrialBar]
    #: The finding to act on first (the summary at the top of a several-run report).
    headline: Finding | None
    #: One memory timeline per device, shown with the run's memory tables.
    memory_charts: list[Chart] = field(default_factory=list)


@dataclass(frozen=True)
class ReportView:
    """The report with the charts of every section, ready for the template."""

    report: Report
    runs: list[RunView]
    comparison_charts: list[Chart]
    scaling_charts: list[Chart] = field(default_factory=list)

    def charts(self) -> list[Chart]:
        """Every chart of the page, in page order."""
        return (self.comparison_charts + self.scaling_charts
                + [chart for view in self.runs for chart in view.charts + view.memory_charts])


def shown(value: object) -> object:
    """Every value a template prints: text from inputs neutralised (controls, NUL and bidi
    overrides made visible) before escaping; markup the templates built (a macro's output, whose
    values were neutralised as they were printed) and other values unchanged."""
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return neutralise(value)
    return value


def templates_environment(autoescape: bool = True,
                          finalize: Callable[[object], object] | None = None,
                          **options: object) -> jinja2.Environment:
    """A jinja2 environment over the ``profreport.templates`` package with the display filters;
    every printed value goes through :func:`shown` (then ``finalize`` when given)."""
    folder = importlib.resources.files("profreport.templates")
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)), autoescape=autoescape,
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
        finalize=shown if finalize is None else lambda value: finalize(shown(value)),
        **options)
    environment.filters.update(_FILTERS)
    return environment


@cache
def compressed_plotly_js() -> str:
    """plotly.js, gzipped and base64-encoded: 2 MB instead of 4.8 MB, unpacked by the page.

    The page decompresses it with the browser's DecompressionStream (every current browser),
    so the report stays self-contained and small enough to attach to a ticket.
    """
    import plotly.offline

    source = plotly.offline.get_plotlyjs().encode("utf-8")
    return base64.b64encode(gzip.compress(source, compresslevel=9, mtime=0)).decode("ascii")


@cache
def _html_environment() -> jinja2.Environment:
    """The (cached) environment of the HTML templates."""
    return templates_environment(autoescape=True)


def build_run_views(report: Report, with_charts: bool = True) -> list[RunView]:
    """Display rows (and charts, unless ``with_charts`` is False) of every run."""
    if with_charts:
        from profreport.reports.render.charts import memory_charts, run_charts
    return [RunView(index, run, run_charts(run, index) if with_charts else [],
                    display.metric_groups(run.metrics), display.trial_bars(run.metrics.trials),
                    display.headline_finding(run),
                    memory_charts(run, index) if with_charts else [])
            for index, run in enumerate(report.runs, start=1)]


def build_view(report: Report) -> ReportView:
    """Charts and display rows of every run and of the comparison."""
    from profreport.reports.render.charts import comparison_charts, scaling_charts

    return ReportView(report, build_run_views(report),
                      comparison_charts(report.runs, report.comparison),
                      scaling_charts(report.scaling))


def render_page(view: ReportView, images: dict[str, str] | None = None,
                template: str = TEMPLATE, extra: dict[str, object] | None = None) -> str:
    """The page: interactive (``images`` None) or for print, charts as image data URIs by id.
    ``template`` may extend the report's (``grade_student.html.j2`` fills its ``preface`` block
    from ``extra``)."""
    context = {**(extra or {}), "report": view.report, "runs": view.runs, "parts": BREAKDOWN_PARTS,
               "comparison_charts": view.comparison_charts,
               "scaling_charts": view.scaling_charts, "images": images,
               "line_limit": SLOWEST_LINES,
               "name_limit": SCREEN_NAME_LIMIT if images is None else PRINT_NAME_LIMIT}
    if images is None:
        context["plotly_js_gzip_base64"] = compressed_plotly_js()
        context["charts"] = [{"id": chart.id, "figure": json.loads(chart.figure.to_json())}
                             for chart in view.charts()]
    return _html_environment().get_template(template).render(context)


def render_html(report: Report) -> str:
    """The self-contained interactive HTML report."""
    return render_page(build_view(report))
