"""The HTML report, rendered from reports the real pipeline makes of the corpus, in a browser."""

from __future__ import annotations

import base64
import gzip
import html
import re
import shutil
import subprocess
from pathlib import Path

import plotly.offline
import pytest

from profreport.errors import UsageError
from profreport.parsers import ParseOptions
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.results import (
    BREAKDOWN_PARTS,
    Breakdown,
    Comparison,
    ComparisonRow,
    Report,
)
from profreport.reports.render import write_reports
from profreport.reports.render.charts import breakdown_figure, comparison_figure
from profreport.reports.render.html import render_html

pytestmark = pytest.mark.corpus

#: The size budget for one report page (plotly.js alone is 4.8 MB, 2 MB packed).
MAX_HTML_BYTES = 5_000_000
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CORPUS_FILES = [
    "kineto/resnet50_num_workers_0.pt.trace.json.gz",
    "kineto/resnet50_num_workers_4.pt.trace.json.gz",
    "hta/nccl_data.json.gz",
    "nsys/sc22_1gpu_baseline.nsys-rep",
    "nsys/sc22_4gpu_baseline.nsys-rep",
]


def analyze(paths: list[Path], cache_dir: Path | None = None) -> Report:
    """The report the real pipeline makes of ``paths``."""
    return analyze_paths(paths, AnalyzeOptions(parse=ParseOptions(cache_dir=cache_dir)))


@pytest.fixture(scope="module")
def kineto_pair(corpus: Path) -> Report:
    """Both ResNet-50 traces as two runs: the first is the baseline of the comparison."""
    return analyze([corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz",
                    corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz"])


def chromium_dump(page: Path, tmp_path: Path) -> tuple[str, str]:
    """The DOM of ``page`` after its scripts ran in headless chromium, and the browser's log."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed")
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={tmp_path / 'chromium-profile'}",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom",
         page.as_uri()],
        capture_output=True, text=True, timeout=120, check=True)
    return result.stdout, result.stderr


def console_problems(log: str) -> list[str]:
    """Console lines of the page that report an error, a CSP violation or a blocked load."""
    return [line for line in log.splitlines() if ":CONSOLE" in line
            and re.search(r"Uncaught|violates|Failed to load|Error", line)]


def test_page_is_self_contained(kineto_pair: Report) -> None:
    """plotly.js once (gzipped), chart data via tojson, a strict CSP, nothing from elsewhere."""
    page = render_html(kineto_pair)
    packed = re.findall(r'<script id="plotly-js-gzip" type="application/octet-stream">'
                        r"([A-Za-z0-9+/=]+)</script>", page)
    assert len(packed) == 1
    assert gzip.decompress(base64.b64decode(packed[0])).decode() == plotly.offline.get_plotlyjs()
    page = page.replace(packed[0], "")
    assert page.count("<script") == 2  # the packed plotly.js, then the small drawing script
    assert "Plotly.newPlot" in page and "DecompressionStream" in page
    assert "default-src 'none'" in page
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page)
    assert "<link" not in page and "@import" not in page


def test_verdict_and_comparison_come_before_detail(kineto_pair: Report) -> None:
    """The first screen tells what to change: comparison, verdicts and findings, then detail."""
    page = render_html(kineto_pair)
    first_detail = page.index('class="run-detail"')
    assert page.index('id="comparison"') < page.index('class="verdict') < first_detail
    assert kineto_pair.runs[0].findings[0].id == "LOADER_BOUND"  # num_workers=0 waits 40%
    assert page.index('class="finding') < first_detail
    for run in kineto_pair.runs:
        assert html.escape(run.verdict_reason) in page[:first_detail]


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_corpus_page_stays_small(corpus: Path, name: str, nsys_cache_dir: Path) -> None:
    """Each corpus file's page stays under 5 MB, plotly.js included."""
    path = corpus / name
    if path.suffix == ".nsys-rep" and shutil.which("nsys") is None:
        pytest.skip("nsys is not installed")
    page = render_html(analyze([path], cache_dir=nsys_cache_dir))
    assert len(page.encode("utf-8")) < MAX_HTML_BYTES


def test_browser_draws_every_chart_without_errors(kineto_pair: Report, tmp_path: Path) -> None:
    """Chromium draws each chart from file:// with no console error and no blocked request."""
    page = tmp_path / "report.html"
    page.write_text(render_html(kineto_pair), encoding="utf-8")
    dom, log = chromium_dump(page, tmp_path)
    charts = dom.count('class="plot js-plotly-plot"')
    assert charts >= 4  # comparison + per-run breakdown/timeline/kernels/ops
    assert dom.count('class="main-svg"') >= charts
    assert console_problems(log) == []


def test_hostile_names_show_as_text(hostile_kineto_trace: Path, hostile_names: tuple[str, str],
                                    tmp_path: Path) -> None:
    """A kernel named <script> and an op named <img onerror> are drawn as text, never as tags."""
    hostile_kernel, hostile_op = hostile_names
    report = analyze([hostile_kineto_trace])
    metrics = report.runs[0].metrics
    assert hostile_kernel in [item.name for item in metrics.top_kernels]
    assert hostile_op in [item.name for item in metrics.top_ops]
    page = render_html(report)
    assert hostile_kernel not in page and hostile_op not in page
    assert html.escape(hostile_kernel) in page and html.escape(hostile_op) in page
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    dom, log = chromium_dump(path, tmp_path)
    assert "<script>alert" not in dom and "<img" not in dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "alert(" not in " ".join(console_problems(log) + [ln for ln in log.splitlines()
                                                            if ":CONSOLE" in ln])


def test_write_reports_writes_each_format_atomically(kineto_pair: Report, tmp_path: Path) -> None:
    """write_reports creates the folder, writes the files, leaves no temporary files."""
    out = tmp_path / "new" / "folder"
    written = write_reports(kineto_pair, out, ["html", "md", "json"])
    assert [path.name for path in written] == ["report.html", "report.md", "report.json"]
    assert sorted(path.name for path in out.iterdir()) == ["report.html", "report.json",
                                                           "report.md"]
    assert written[0].read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_write_reports_refuses_unknown_format(kineto_pair: Report, tmp_path: Path) -> None:
    """An unknown format is a usage error and writes nothing."""
    with pytest.raises(UsageError):
        write_reports(kineto_pair, tmp_path / "out", ["html", "docx"])
    assert not (tmp_path / "out").exists()


def test_breakdown_chart_names_the_profiler_of_its_bars() -> None:
    """The breakdown chart says which profiler split each step: in its title when one made every
    bar, beside each run's name when they differ (an nsys breakdown against torch.profiler's
    reads differently: torch.profiler's compute holds its per-operator cost)."""
    def split(origin: str) -> Breakdown:
        """A 10 ms step, all compute, as ``origin`` measured it."""
        parts = dict.fromkeys(BREAKDOWN_PARTS, 0) | {"compute": 10_000_000}
        return Breakdown(origin=origin, step_ns=10_000_000, parts_ns=parts)  # type: ignore[arg-type]

    alike = breakdown_figure([("a", split("kineto")), ("b", split("kineto"))])
    assert alike.layout.title.text == ("Where a step&#x27;s time goes (mean ms per step, "
                                       "torch.profiler)")
    assert list(alike.data[0].y) == ["a", "b"]
    mixed = breakdown_figure([("a", split("nsys")), ("b", split("kineto"))])
    assert mixed.layout.title.text == "Where a step&#x27;s time goes (mean ms per step)"
    assert list(mixed.data[0].y) == ["a (Nsight Systems)", "b (torch.profiler)"]


def test_a_step_chart_says_the_speedup_per_sample_beside_the_step_ratio() -> None:
    """The built-in workload's --scaling 1,2 points: 1,195.0 and 316.5 ms median steps, 64 and
    128 samples per step. The table's speedup is per sample (7.55x); the chart's bar read
    '3.78x' alone, the ratio of its bars, so the one report gave both figures as the speedup.
    Runs of equal steps keep the one figure."""
    def row(name: str, step_ms: float, speedup: float, step_speedup: float) -> ComparisonRow:
        return ComparisonRow(name, round(step_ms * 1e6), None, speedup, None, {}, {}, "",
                             step_speedup=step_speedup)

    figure = comparison_figure(Comparison("baseline-np1", [
        row("baseline-np1", 1195.0, 1.0, 1.0), row("baseline-np2", 316.5, 7.55, 3.78),
        row("other", 600.0, 2.0, 2.0)], steps_origin="nsys"))
    assert list(figure.data[0].text) == ["1.00×", "3.78× per step (7.55× per sample)", "2.00×"]
