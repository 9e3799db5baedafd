"""Plotly figures built from result objects; the HTML and PDF renderers draw these.

Every name that came from an input file (kernel, op, run, lane, NVTX text) is HTML-escaped
before it goes into a figure: plotly renders labels and hover text as a subset of HTML.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from profreport.reports.display import elide, ns_to_ms, part_label, ratio
from profreport.reports.results import (
    BREAKDOWN_PARTS,
    Comparison,
    RunAnalysis,
    Timeline,
    TopItem,
)

#: Longest name shown on a chart axis or in hover text; the tables show names in full.
NAME_LIMIT = 60
#: Rows of a top-N bar chart (the tables hold the rest).
TOP_BARS = 10
#: Height of one horizontal bar row in pixels, and the frame around the bars.
ROW_PX = 26
FRAME_PX = 110

PART_COLOURS = {
    "dataloader": "#d62728",
    "h2d_copy": "#ff7f0e",
    "compute": "#2ca02c",
    "comm_exposed": "#9467bd",
    "host_runtime": "#8c564b",
    "other": "#7f7f7f",
}
CATEGORY_COLOURS = {
    "kernel": "#2ca02c",
    "comm": "#9467bd",
    "memcpy": "#ff7f0e",
    "memset": "#bcbd22",
    "dataloader": "#d62728",
    "step": "#1f77b4",
    "idle": "#e0e0e0",
    "cpu_op": "#17becf",
    "range": "#8c564b",
}
#: Small shared look for every figure (the default plotly template adds ~10 KB per chart).
LAYOUT = {
    "template": "none",
    "font": {"family": "system-ui, sans-serif", "size": 12, "color": "#222"},
    "paper_bgcolor": "white",
    "plot_bgcolor": "white",
    "margin": {"l": 10, "r": 10, "t": 40, "b": 40},
    "legend": {"orientation": "h", "y": -0.15, "traceorder": "normal"},
    "xaxis": {"gridcolor": "#e5e5e5", "zerolinecolor": "#bbb", "automargin": True},
    "yaxis": {"gridcolor": "#e5e5e5", "zerolinecolor": "#bbb", "automargin": True},
}


@dataclass(frozen=True)
class Chart:
    """One figure with the id of the element it is drawn into and a caption."""

    id: str
    title: str
    figure: go.Figure


def safe_label(text: str) -> str:
    """An untrusted name made fit for a plotly label: elided and HTML-escaped."""
    return html.escape(elide(str(text), NAME_LIMIT))


def _figure(title: str, height: int, **layout: object) -> go.Figure:
    """An empty figure with the shared look."""
    figure = go.Figure()
    figure.update_layout(LAYOUT, title={"text": html.escape(title), "x": 0}, height=height,
                         **layout)
    return figure


def breakdown_figure(runs: list[RunAnalysis]) -> go.Figure | None:
    """Stacked bars of the mean step split into BREAKDOWN_PARTS, one bar per run."""
    runs = [run for run in runs if run.metrics.breakdown is not None]
    if not runs:
        return None
    names = [safe_label(run.name) for run in runs]
    figure = _figure("Where a step's time goes (mean ms per step)",
                     FRAME_PX + ROW_PX * 2 * len(runs), barmode="stack")
    for part in BREAKDOWN_PARTS:
        values = [ns_to_ms(run.metrics.breakdown.parts_ns.get(part, 0)) for run in runs]
        figure.add_trace(go.Bar(y=names, x=values, name=part_label(part), orientation="h",
                                marker_color=PART_COLOURS[part],
                                hovertemplate="%{x:.2f} ms<extra>" + part_label(part)
                                + "</extra>"))
    figure.update_yaxes(autorange="reversed", type="category")
    return figure


def _segment_frame(timeline: Timeline) -> pd.DataFrame:
    """The timeline's segments as a frame in milliseconds."""
    frame = pd.DataFrame({
        "lane": [seg.lane for seg in timeline.segments],
        "start": [seg.start_ns for seg in timeline.segments],
        "end": [seg.end_ns for seg in timeline.segments],
        "label": [seg.label for seg in timeline.segments],
        "category": [seg.category for seg in timeline.segments],
    })
    frame["base_ms"] = (frame["start"] / 1e6).round(3)
    frame["width_ms"] = ((frame["end"] - frame["start"]) / 1e6).round(3)
    frame["lane"] = frame["lane"].map(safe_label)
    frame["label"] = frame["label"].map(safe_label)
    return frame


def timeline_figure(timeline: Timeline | None) -> go.Figure | None:
    """A few steps as lanes of intervals: one bar trace per category, not one per segment."""
    if timeline is None or not timeline.segments:
        return None
    frame = _segment_frame(timeline)
    lanes = [safe_label(lane) for lane in timeline.lanes]
    figure = _figure("Timeline of a few steps (ms from the start of the window)",
                     FRAME_PX + ROW_PX * 2 * max(len(lanes), 1), barmode="overlay", bargap=0.25)
    for category, group in frame.groupby("category", sort=False):
        figure.add_trace(go.Bar(
            y=group["lane"], base=group["base_ms"], x=group["width_ms"], orientation="h",
            name=html.escape(str(category)), hovertext=group["label"],
            marker_color=CATEGORY_COLOURS.get(str(category), "#aaaaaa"),
            hovertemplate="%{hovertext}<br>%{base:.3f} ms + %{x:.3f} ms<extra></extra>"))
    figure.update_yaxes(type="category", categoryorder="array", categoryarray=lanes,
                        autorange="reversed")
    return figure


def top_items_figure(items: list[TopItem], title: str) -> go.Figure | None:
    """Horizontal bars of the largest kernels or CPU ops by total time."""
    if not items:
        return None
    shown = items[:TOP_BARS]
    labels = [f"{index + 1}. {safe_label(item.name)}" for index, item in enumerate(shown)]
    figure = _figure(title, FRAME_PX + ROW_PX * len(shown), xaxis_title="total ms",
                     showlegend=False)
    figure.add_trace(go.Bar(
        y=labels, x=[ns_to_ms(item.total_ns) for item in shown], orientation="h",
        marker_color="#1f77b4", customdata=[round(item.share * 100, 1) for item in shown],
        hovertemplate="%{y}<br>%{x:.2f} ms, %{customdata}%<extra></extra>"))
    figure.update_yaxes(autorange="reversed", type="category")
    return figure


def comm_overlap_figure(run: RunAnalysis) -> go.Figure | None:
    """Communication hidden under compute against exposed communication, per step (GPU runs)."""
    comm, breakdown = run.metrics.comm, run.metrics.breakdown
    if comm is None or not comm.on_gpu or breakdown is None:
        return None
    bars = {
        "Compute": (breakdown.parts_ns.get("compute", 0), PART_COLOURS["compute"]),
        "Communication hidden under compute": (breakdown.comm_overlapped_ns, "#c5b0d5"),
        "Communication exposed": (breakdown.parts_ns.get("comm_exposed", 0),
                                  PART_COLOURS["comm_exposed"]),
    }
    figure = _figure(f"Communication vs compute (overlap {comm.overlap_fraction * 100:.0f}%)",
                     FRAME_PX + ROW_PX * len(bars), xaxis_title="ms per step", showlegend=False)
    figure.add_trace(go.Bar(y=list(bars), x=[ns_to_ms(ns) for ns, _ in bars.values()],
                            orientation="h", marker_color=[colour for _, colour in bars.values()],
                            hovertemplate="%{y}: %{x:.2f} ms<extra></extra>"))
    figure.update_yaxes(autorange="reversed")
    return figure


def per_rank_figure(run: RunAnalysis) -> go.Figure | None:
    """Mean step time of each rank, when several ranks were profiled."""
    per_rank = run.metrics.per_rank_step_ms
    if len(per_rank) < 2:
        return None
    ranks = sorted(per_rank)
    figure = _figure("Mean step time per rank", 320, yaxis_title="ms per step",
                     showlegend=False)
    figure.add_trace(go.Bar(x=[f"rank {rank}" for rank in ranks],
                            y=[round(per_rank[rank], 3) for rank in ranks],
                            marker_color="#1f77b4",
                            hovertemplate="%{x}: %{y:.2f} ms<extra></extra>"))
    return figure


def comparison_figure(comparison: Comparison | None) -> go.Figure | None:
    """Mean step time of every run, labelled with its speedup over the baseline."""
    if comparison is None or not comparison.rows:
        return None
    rows = [row for row in comparison.rows if row.step_time_ns is not None]
    if not rows:
        return None
    figure = _figure(f"Step time against the baseline ({elide(comparison.baseline, NAME_LIMIT)})",
                     FRAME_PX + ROW_PX * 2 * len(rows), xaxis_title="mean ms per step",
                     showlegend=False)
    figure.add_trace(go.Bar(
        y=[safe_label(row.name) for row in rows], x=[ns_to_ms(row.step_time_ns) for row in rows],
        orientation="h", marker_color="#1f77b4", text=[ratio(row.speedup) for row in rows],
        textposition="auto", hovertemplate="%{y}: %{x:.2f} ms, %{text}<extra></extra>"))
    figure.update_yaxes(autorange="reversed", type="category")
    return figure


def run_charts(run: RunAnalysis, index: int) -> list[Chart]:
    """The charts of one run's detail section, in reading order (only those with data)."""
    candidates = [
        ("breakdown", "Step-time breakdown", breakdown_figure([run])),
        ("timeline", "Timeline", timeline_figure(run.timeline)),
        ("kernels", "Top GPU kernels", top_items_figure(run.metrics.top_kernels,
                                                         "Top GPU kernels by total time")),
        ("ops", "Top CPU operators", top_items_figure(run.metrics.top_ops,
                                                       "Top CPU operators by total time")),
        ("comm", "Communication and compute", comm_overlap_figure(run)),
        ("ranks", "Per-rank step time", per_rank_figure(run)),
    ]
    return [Chart(f"chart-run{index}-{key}", title, figure)
            for key, title, figure in candidates if figure is not None]


def comparison_charts(runs: list[RunAnalysis], comparison: Comparison | None) -> list[Chart]:
    """The charts of the comparison section (only with several runs)."""
    if len(runs) < 2:
        return []
    candidates = [
        ("speedup", "Step time and speedup", comparison_figure(comparison)),
        ("breakdown", "Breakdown of every run", breakdown_figure(runs)),
    ]
    return [Chart(f"chart-compare-{key}", title, figure)
            for key, title, figure in candidates if figure is not None]
