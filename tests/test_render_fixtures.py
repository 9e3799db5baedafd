"""What a reader sees in reports of the project's own fixtures (real runs of runner/train.py):
human labels, the trials next to the verdict, grouped metrics, the per-rank chart, the listing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from markupsafe import escape

from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.results import Report
from profreport.reports.render.display import TRIAL_LABELS, metric_groups
from profreport.reports.render.html import build_view, render_html
from profreport.reports.render.markdown import SLOWEST_LINES, escape_markdown, render_markdown

RAW_TRIAL_KEY = re.compile(r"\btrial_(?:io|full|synthetic)\b")


def analyze(*folders: Path) -> Report:
    """The report the real pipeline makes of fixture run folders."""
    return analyze_paths(list(folders), AnalyzeOptions())


def manifest_trials(folder: Path) -> dict[str, float]:
    """The runner's unprofiled trials of a fixture, read straight from its manifest.json."""
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["trials"]


@pytest.fixture(scope="module")
def loader_heavy(fixtures_dir: Path) -> Report:
    """loader_heavy: num_workers=0 with heavy per-sample work, profiled by all three profilers."""
    return analyze(fixtures_dir / "loader_heavy")


@pytest.fixture(scope="module")
def all_three(fixtures_dir: Path) -> Report:
    """loader_heavy, compute_heavy and ddp_gloo as one three-run report."""
    return analyze(fixtures_dir / "loader_heavy", fixtures_dir / "compute_heavy",
                   fixtures_dir / "ddp_gloo")


def test_trials_are_labelled_for_people_next_to_the_verdict(loader_heavy: Report,
                                                           fixtures_dir: Path) -> None:
    """The three trials read "Loader only (IO trial)"... with the manifest's rates, rounded,
    between the verdict and the first finding; no raw ``trial_io`` key anywhere."""
    trials = manifest_trials(fixtures_dir / "loader_heavy")
    page = render_html(loader_heavy)
    assert not RAW_TRIAL_KEY.search(page)
    summary = page[page.index('class="verdict '):page.index('class="finding')]
    for key, label in TRIAL_LABELS.items():
        rate = f"{round(trials[key.removeprefix('trial_')]):,} samples/s"
        assert label in summary and rate in summary
    text = render_markdown(loader_heavy)
    assert not RAW_TRIAL_KEY.search(text)
    io = round(trials["io"])
    assert f"| Loader only (IO trial) | {io:,} samples/s |" in text


def test_dataloader_share_is_grouped_by_profiler(loader_heavy: Report) -> None:
    """Each profiler's DataLoader share sits in that profiler's group, under one plain label."""
    metrics = loader_heavy.runs[0].metrics
    groups = {group.origin: group.rows for group in metric_groups(metrics)}
    assert list(groups) == ["nsys", "kineto", "lprof", "manifest"]
    for origin, fraction in metrics.dataloader_fraction_by_origin.items():
        shares = [row.value for row in groups[origin]
                  if row.label == "Share of step time waiting for data"]
        assert shares == [f"{fraction * 100:.1f}%"]
    labels = [row.label for rows in groups.values() for row in rows]
    assert not any("(kineto)" in label or "(lprof)" in label for label in labels)
    page = render_html(loader_heavy)
    for name in ("Nsight Systems", "torch.profiler", "line_profiler", "runner measurement"):
        assert f'<tr class="group"><th colspan="2">{name}</th></tr>' in page


def test_cpu_only_run_says_there_are_no_gpu_events(loader_heavy: Report) -> None:
    """A run without kernels draws no GPU chart and says so instead."""
    view = build_view(loader_heavy)
    assert not [chart for chart in view.charts() if chart.id.endswith(("kernels", "comm"))]
    assert "No GPU events in this run" in render_html(loader_heavy)


def test_listing_marks_the_dataloader_line_with_heat(loader_heavy: Report) -> None:
    """The annotated listing looks like line_profiler's: the DataLoader loop line is marked and
    coloured by its share of the function; the slowest-lines table shows file:line short."""
    metrics = loader_heavy.runs[0].metrics
    loop = next(line for line in metrics.lines if line.is_dataloader_loop)
    page = render_html(loader_heavy)
    assert "Timer unit: 1e-06 s" in page and "Line Contents" in page
    heat = round(loop.share * 10)
    row = re.search(rf'<tr class="heat-{heat} dataloader-line">\s*<td class="num">'
                    rf'{loop.lineno}</td>.*?</tr>', page, re.S)
    assert row is not None and "◀ DataLoader wait" in row.group(0)
    assert f"train.py:{loop.lineno} ({loop.function})" in page


def test_ddp_gloo_draws_the_per_rank_chart(fixtures_dir: Path) -> None:
    """Two ranks profiled: a per-rank bar chart with each rank's mean step time as its label."""
    report = analyze(fixtures_dir / "ddp_gloo")
    per_rank = report.runs[0].metrics.per_rank_step_ns
    assert sorted(per_rank) == [0, 1]
    (chart,) = [chart for chart in build_view(report).charts() if chart.id == "chart-run1-ranks"]
    (bars,) = chart.figure.data
    assert list(bars.y) == ["rank 0", "rank 1"]
    assert list(bars.x) == [round(per_rank[0] / 1e6, 3), round(per_rank[1] / 1e6, 3)]
    assert list(bars.text) == [f"{per_rank[0] / 1e6:,.1f} ms", f"{per_rank[1] / 1e6:,.1f} ms"]
    assert 'id="chart-run1-ranks"' in render_html(report)


def test_timeline_lanes_and_legend_read_as_words(fixtures_dir: Path) -> None:
    """Timeline lanes say what they hold; legend entries are words, not category keys."""
    (chart,) = [chart for chart in build_view(analyze(fixtures_dir / "ddp_gloo")).charts()
                if chart.id == "chart-run1-timeline"]
    lanes = {lane for trace in chart.figure.data for lane in trace.y}
    assert all(re.fullmatch(r"CPU thread \d+: (steps|data waits)", lane) for lane in lanes)
    assert {trace.name for trace in chart.figure.data} <= {"Training step", "DataLoader wait"}


def test_several_runs_start_with_what_to_change(all_three: Report) -> None:
    """Three runs: the page opens with each run's first fix, before the comparison."""
    page = render_html(all_three)
    todo = page[page.index('id="what-to-change"'):page.index('id="comparison"')]
    for run in all_three.runs:
        assert run.name in todo
        assert str(escape(run.findings[0].recommendation)) in todo  # jinja2's escaping


def test_markdown_reads_as_a_comment(all_three: Report) -> None:
    """Markdown: what to change, then verdicts and findings, then the long tables; the line
    table keeps only the slowest lines."""
    text = render_markdown(all_three)
    first_detail = text.index("## Details")
    assert text.index("## What to change") < text.index("## Comparison") < first_detail
    for run in all_three.runs:
        assert text.index(f"## {escape_markdown(run.name)}\n") < first_detail
    findings = sum(len(run.findings) for run in all_three.runs)
    headings = re.findall(r"^### (?:HIGH|MEDIUM|LOW|INFO): ", text[:first_detail], re.M)
    assert len(headings) == findings
    assert text.index("### Key metrics") > first_detail
    line_rows = re.findall(r"^\| train\.py:\d+ \(", text, re.M)
    with_lines = [run for run in all_three.runs if run.metrics.lines]
    assert len(line_rows) == SLOWEST_LINES * len(with_lines)
    assert ".." not in text.replace("...", "")


def test_display_units_read_in_one_unit() -> None:
    """Deltas stay in ms whatever their size; clauses become sentences; indents are counted."""
    from profreport.reports.render.display import duration, indent_width, plain, sentence
    from profreport.units import delta_ms

    assert [delta_ms(-519_900), delta_ms(11_900_000), delta_ms(0)] == ["-0.52 ms", "+11.9 ms",
                                                                      "0 ms"]
    assert duration(0) == "0 ms" and duration(4_524_524_800) == "4,524.5 ms"
    assert sentence("the model sets the pace") == "The model sets the pace."
    assert sentence("done.") == "Done."
    assert indent_width("        output = model(data)") == 8 and indent_width("\tx") == 8
    assert plain(None) == "—" and plain(["x86_64"]) == "x86_64"
