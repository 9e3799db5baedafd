"""The PDF report: the print version of the HTML page through weasyprint, charts as static SVG.

Static chart export uses kaleido, which drives the installed Chrome/Chromium; profreport never
asks kaleido to download a browser (``kaleido.get_chrome``), it reports the missing tool instead.
"""

from __future__ import annotations

import base64
import tempfile
from pathlib import Path

import plotly.io
import weasyprint

from profreport.errors import MissingToolError
from profreport.reports.analysis.results import Report
from profreport.reports.render.charts import Chart
from profreport.reports.render.html import build_view, render_page

#: Width of an exported chart in CSS pixels: about the text width of an A4 page at 96 dpi.
CHART_WIDTH_PX = 720


def chart_images(charts: list[Chart]) -> dict[str, str]:
    """Every chart as an SVG data URI by chart id, exported in one kaleido browser session."""
    if not charts:
        return {}
    with tempfile.TemporaryDirectory(prefix="profreport-charts-") as folder:
        paths = [Path(folder) / f"{chart.id}.svg" for chart in charts]
        try:
            plotly.io.write_images([chart.figure for chart in charts], paths, format="svg",
                                   width=CHART_WIDTH_PX,
                                   height=[chart.figure.layout.height for chart in charts])
        except RuntimeError as exc:
            raise MissingToolError(
                "the PDF report needs Chrome or Chromium for its charts (kaleido found none: "
                f"install chromium, or set BROWSER_PATH); {exc}") from exc
        return {chart.id: _svg_data_uri(path.read_bytes())
                for chart, path in zip(charts, paths, strict=True)}


def _svg_data_uri(svg: bytes) -> str:
    """An SVG document as a base64 ``data:`` URI."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg).decode("ascii")


def render_pdf(report: Report) -> bytes:
    """The PDF report: A4 pages, numbered, the verdict on page one."""
    view = build_view(report)
    page = render_page(view, images=chart_images(view.charts()))
    return weasyprint.HTML(string=page, base_url=None).write_pdf()
