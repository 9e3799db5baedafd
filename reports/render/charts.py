"""Plotly figures built from result objects; the HTML and PDF renderers draw these.

Every name that came from an input file (kernel, op, run, lane, NVTX text) is HTML-escaped
before it goes into a figure: plotly renders labels and hover text as a subset of HTML.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from profreport.reports.analysis.results import (
    BREAKDOWN_PARTS,
    Breakdown,
    Comparison,
    ComparisonRow,
    DeviceMemory,
    RunAnalysis,
    ScalingStudy,
    Timeline,
    TopItem,
    origin_label,
)
from profreport.reports.render.display import part_label, ratio
from profreport.text import display_text
from profreport.units import NS_PER_MS, binary_unit, duration, ms_value, whole_pct

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
    "copy_memset": "#bcbd22",
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
    "left_out_step": "#aec7e8",
    "idle": "#e0e0e0",
    "cpu_op": "#17becf",
    "range": "#8c564b",
}
#: Legend names of the timeline's categories.
CATEGORY_LABELS = {
    "kernel": "Compute kernel",
    "comm": "Communication kernel",
    "memcpy": "Memory copy",
    "memset": "Memset",
    "dataloader": "DataLoader wait",
    "step": "Training step",
    "left_out_step": "Step left out of the per-step figures",
    "idle": "GPU idle",
    "cpu_op": "CPU operator",
    "range": "NVTX range",
}
#: Lane names the timeline uses, and how the chart names them for people.
_LANE_NAMES = (
    (re.compile(r"CPU (\d+) data"), r"CPU thread \1: data waits"),
    (re.compile(r"CPU (\d+)"), r"CPU thread \1: steps"),
    (re.compile(r"GPU (\d+)"), r"GPU \1: idle"),
)
_DIGITS = re.compile(r"(\d+)")
#: Small shared look for every figure (the default plotly template adds ~10 KB per chart).
LAYOUT = {
    "template": "none",
    "font": {"family": "system-ui, sans-serif", "size": 12, "color": "#222"},
    "paper_bgcolor": "white",
    "plot_bgcolor": "white",
    "margin": {"l": 10, "r": 10, "t": 40, "b": 40},
    # The legend sits under the plot, measured from the figure's bottom edge, so it never covers
    # the axis labels of a short chart.
    "legend": {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom",
               "traceorder": "normal"},
    "xaxis": {"gridcolor": "#e5e5e5", "zerolinecolor": "#bbb", "automargin": True},
    "yaxis": {"gridcolor": "#e5e5e5", "zerolinecolor": "#bbb", "automargin": True},
}


@dataclass(frozen=True)
class Chart:
    """One figure with the id of the element it is drawn into and a caption."""

    id: str
    title: str
    figure: go.Figure
    #: A note the analysis gives the figure (which steps its bars count), shown under it.
    note: str | None = None


def safe_label(text: str) -> str:
    """An untrusted name made fit for a plotly label: elided, neutralised, HTML-escaped."""
    return html.escape(display_text(text, NAME_LIMIT))


def lane_label(lane: str) -> str:
    """The name a timeline lane is shown under (``CPU 26216`` -> ``CPU thread 26216: steps``)."""
    for pattern, name in _LANE_NAMES:
        if pattern.fullmatch(lane):
            return pattern.sub(name, lane)
    return lane


def _natural_key(text: str) -> tuple[object, ...]:
    """Sort key that orders ``stream 7`` before ``stream 16``."""
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(text))


def _lane_order(lanes: list[str]) -> list[str]:
    """CPU lanes first, then each GPU's idle lane and its streams in numeric order."""
    return sorted(lanes, key=lambda lane: (not lane.startswith("CPU"), _natural_key(lane)))


def kernel_label(name: str) -> str:
    """A kernel or op name for a chart axis: without the ``void`` return type, elided, escaped."""
    return safe_label(name.removeprefix("void "))


def _figure(title: str, height: int, **layout: object) -> go.Figure:
    """An empty figure with the shared look."""
    figure = go.Figure()
    figure.update_layout(LAYOUT, title={"text": html.escape(title), "x": 0}, height=height,
                         **layout)
    return figure


def breakdown_figure(named: list[tuple[str, Breakdown | None]]) -> go.Figure | None:
    """Stacked bars of the mean step split into BREAKDOWN_PARTS, one bar per named breakdown
    (no segment for a part its breakdown did not measure), the profiler that made them in the
    title, or beside each name when they are several."""
    shown = [(name, b) for name, b in named if b is not None]
    if not shown:
        return None
    origins = {b.origin for _, b in shown}
    one = origin_label(origins.pop()) if len(origins) == 1 else None
    names = [safe_label(name if one else f"{name} ({origin_label(b.origin)})")
             for name, b in shown]
    figure = _figure(f"Where a step's time goes (mean ms per step{f', {one}' if one else ''})",
                     FRAME_PX + ROW_PX * 2 * len(shown), barmode="stack")
    for part in BREAKDOWN_PARTS:
        values = [ms_value(b.parts_ns[part]) if part in b.measured else None for _, b in shown]
        label = " / ".join(dict.fromkeys(part_label(part, b) for _, b in shown
                                         if part in b.measured)) or part_label(part)
        figure.add_trace(go.Bar(y=names, x=values, name=label, orientation="h",
                                marker_color=PART_COLOURS[part],
                                hovertemplate="%{x:.2f} ms<extra>" + label + "</extra>"))
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
    frame["base_ms"] = (frame["start"] / NS_PER_MS).round(3)
    frame["width_ms"] = ((frame["end"] - frame["start"]) / NS_PER_MS).round(3)
    frame["lane"] = frame["lane"].map(lambda lane: safe_label(lane_label(lane)))
    frame["label"] = frame["label"].map(safe_label)
    return frame


def timeline_figure(timeline: Timeline | None) -> go.Figure | None:
    """A few steps as lanes of intervals: one bar trace per category, not one per segment."""
    if timeline is None or not timeline.segments:
        return None
    frame = _segment_frame(timeline)
    lanes = [safe_label(lane_label(lane)) for lane in _lane_order(timeline.lanes)]
    figure = _figure(f"Timeline of a few steps ({origin_label(timeline.source)}; ms from the "
                     "start of the window)",
                     FRAME_PX + ROW_PX * 2 * max(len(lanes), 1), barmode="overlay", bargap=0.25)
    for category, group in frame.groupby("category", sort=False):
        figure.add_trace(go.Bar(
            y=group["lane"], base=group["base_ms"], x=group["width_ms"], orientation="h",
            name=html.escape(CATEGORY_LABELS.get(str(category), str(category))),
            hovertext=group["label"],
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
    labels = [f"{index + 1}. {kernel_label(item.name)}" for index, item in enumerate(shown)]
    what = "self ms" if shown[0].exclusive else "total ms"
    figure = _figure(title, FRAME_PX + ROW_PX * len(shown), xaxis_title=what, showlegend=False)
    figure.add_trace(go.Bar(
        y=labels, x=[ms_value(item.total_ns) for item in shown], orientation="h",
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
    figure = _figure(f"Communication vs compute (overlap {whole_pct(comm.overlap_fraction)})",
                     FRAME_PX + ROW_PX * len(bars), xaxis_title="ms per step", showlegend=False)
    figure.add_trace(go.Bar(y=list(bars), x=[ms_value(ns) for ns, _ in bars.values()],
                            orientation="h", marker_color=[colour for _, colour in bars.values()],
                            hovertemplate="%{y}: %{x:.2f} ms<extra></extra>"))
    figure.update_yaxes(autorange="reversed")
    return figure


def per_rank_figure(run: RunAnalysis) -> go.Figure | None:
    """Mean step time of each rank as labelled bars, when several ranks were profiled."""
    per_rank = run.metrics.per_rank_step_ns
    if len(per_rank) < 2:
        return None
    ranks = list(per_rank)  # by rank, then processes of unknown rank by pid
    figure = _figure("Mean step time per rank (ms)", FRAME_PX + ROW_PX * 2 * len(ranks),
                     xaxis_title="mean ms per step", showlegend=False)
    figure.add_trace(go.Bar(
        y=[run.metrics.per_rank_labels.get(rank, str(rank)) for rank in ranks],
        x=[ms_value(per_rank[rank]) for rank in ranks],
        orientation="h", marker_color="#1f77b4",
        text=[duration(per_rank[rank]) for rank in ranks], textposition="auto",
        hovertemplate="%{y}: %{x:.2f} ms<extra></extra>"))
    figure.update_yaxes(autorange="reversed", type="category")
    return figure


def _step_label(row: ComparisonRow) -> str:
    """A step-time bar's label: the step-time ratio its bar shows, and the row's speedup per
    sample beside it where that is the speedup (runs whose steps hold different numbers of
    samples: a weak-scaling point's step holds every process's batch)."""
    step = ratio(row.step_speedup)
    if row.speedup_basis == "step time" and row.speedup is not None \
            and row.speedup != row.step_speedup:
        return f"{step} per step ({ratio(row.speedup)} per sample)"
    return step


def comparison_figure(comparison: Comparison | None) -> go.Figure | None:
    """Every run against the baseline: unprofiled throughput when every run has one (what the
    speedup is the ratio of), else the typical profiled step (its median, or its mean where the
    step source gives only that), as the one profiler that timed every run's steps; each bar
    labelled with its speedup."""
    if comparison is None or not comparison.rows:
        return None
    rows = comparison.rows
    baseline = safe_label(comparison.baseline)
    if all(row.throughput_samples_per_s is not None and row.speedup_basis == "throughput"
           for row in rows):
        title = f"Throughput against the baseline ({baseline}), unprofiled"
        values = [round(row.throughput_samples_per_s, 1) for row in rows]
        unit, labels = "samples/s", [ratio(row.speedup) for row in rows]
    else:
        rows = [row for row in rows if row.step_time_ns is not None]
        title = f"Step time against the baseline ({baseline})"
        values = [ms_value(row.step_time_ns) for row in rows]
        unit = (f"{rows[0].step_time_kind} ms per step, "
                f"{origin_label(comparison.steps_origin or '')}" if rows else "")
        labels = [_step_label(row) for row in rows]
    if not rows:
        return None
    figure = _figure(title, FRAME_PX + ROW_PX * 2 * len(rows), xaxis_title=unit,
                     showlegend=False)
    figure.add_trace(go.Bar(
        y=[safe_label(row.name) for row in rows], x=values, orientation="h",
        marker_color="#1f77b4", text=labels,
        textposition="auto", hovertemplate="%{y}: %{x:,.1f} " + unit + ", %{text}<extra></extra>"))
    figure.update_yaxes(autorange="reversed", type="category")
    return figure


def _memory_unit(device: DeviceMemory) -> tuple[str, int]:
    """GiB when the levels reach one, else MiB, with the divisor."""
    return binary_unit(max(abs(value) for point in device.timeline
                           for value in (point.allocated, point.reserved) if value is not None))


def device_title(device: DeviceMemory) -> str:
    """``rank 1, cuda:0 (Tesla V100)``, ``pid 9, cuda:1`` or ``host memory``."""
    rank = f"{device.source_label}, " if device.source_label else ""
    place = "host memory" if device.device < 0 else f"{device.device_kind}:{device.device}"
    return rank + place + (f" ({device.device_name})" if device.device_name else "")


def memory_figure(device: DeviceMemory) -> go.Figure | None:
    """Allocated and reserved memory over the first steps of one device, with step boundaries
    and, on absolute levels, the device's total memory."""
    if not device.timeline:
        return None
    unit, divisor = _memory_unit(device)
    axis = unit if device.basis == "absolute" else f"{unit}, {device.basis}"
    figure = _figure(f"Memory of {device_title(device)}, first steps", 340,
                     xaxis_title="ms from the first step's start", yaxis_title=axis)
    times = [ms_value(point.at_ns) for point in device.timeline]
    for name, values, dash, colour in (
            ("allocated", [p.allocated for p in device.timeline], "solid", "#1f77b4"),
            ("reserved", [p.reserved for p in device.timeline], "dash", "#ff7f0e")):
        if all(value is None for value in values):
            continue
        figure.add_trace(go.Scatter(
            x=times, y=[round(v / divisor, 4) for v in values], name=name, mode="lines",
            line={"shape": "hv", "dash": dash, "color": colour, "width": 1.5},
            hovertemplate="%{x:.2f} ms: %{y:.3f} " + unit + "<extra>" + name + "</extra>"))
    for start, name in device.timeline_steps:
        figure.add_vline(x=start / NS_PER_MS, line={"color": "#999", "width": 1, "dash": "dot"},
                         annotation_text=html.escape(name), annotation_position="top right")
    if device.total_bytes and device.basis == "absolute":
        figure.add_hline(y=device.total_bytes / divisor, line={"color": "#d62728", "dash": "dash"},
                         annotation_text="device memory", annotation_position="bottom right")
    return figure


def scaling_figure(study: ScalingStudy) -> go.Figure | None:
    """Throughput against processes with the ideal, loader-alone and synthetic lines, each
    measured point labelled with its efficiency."""
    points = [p for p in study.points if p.throughput is not None]
    if len(points) < 2:
        return None
    processes = [p.processes for p in points]
    figure = _figure(f"Scaling of {safe_label(study.group)}: throughput against "
                     f"processes ({study.mode} scaling)", 420, xaxis_title="processes",
                     yaxis_title=study.unit)
    lines = (
        ("ideal", [p.ideal for p in points], {"dash": "dash", "color": "#7f7f7f"}),
        ("data loader alone", [p.loader_alone for p in points],
         {"dash": "dot", "color": "#d62728"}),
        ("synthetic data", [p.synthetic for p in points],
         {"dash": "dashdot", "color": "#2ca02c"}),
    )
    for name, values, line in lines:
        if any(value is not None for value in values):
            figure.add_trace(go.Scatter(
                x=processes, y=values, name=name, mode="lines+markers", line=line,
                hovertemplate="%{x} processes: %{y:,.1f}<extra>" + name + "</extra>"))
    figure.add_trace(go.Scatter(
        x=processes, y=[p.throughput for p in points], name="measured", mode="lines+markers+text",
        line={"color": "#1f77b4", "width": 3}, marker={"size": 9},
        text=[whole_pct(p.efficiency) if p.efficiency is not None else "" for p in points],
        textposition="top center",
        hovertemplate="%{x} processes: %{y:,.1f}, efficiency %{text}<extra>measured</extra>"))
    figure.update_xaxes(type="log", tickvals=processes, ticktext=[str(n) for n in processes])
    figure.update_yaxes(rangemode="tozero")
    return figure


def memory_charts(run: RunAnalysis, index: int) -> list[Chart]:
    """One memory timeline per device of a run."""
    devices = run.metrics.memory.devices if run.metrics.memory else []
    return [Chart(f"chart-run{index}-memory{number}", f"Memory of {device_title(device)}", figure)
            for number, device in enumerate(devices)
            if (figure := memory_figure(device)) is not None]


def scaling_charts(studies: list[ScalingStudy]) -> list[Chart]:
    """One throughput-against-processes chart per scaling study."""
    return [Chart(f"chart-scaling{number}", f"Scaling of {study.group}", figure)
            for number, study in enumerate(studies)
            if (figure := scaling_figure(study)) is not None]


def _ops_title(run: RunAnalysis) -> str:
    """Title of the CPU-operator chart: by self time when the analysis measured self time."""
    ops = run.metrics.top_ops
    return ("Top CPU operators by self time" if ops and ops[0].exclusive
            else "Top CPU operators by total time")


def run_charts(run: RunAnalysis, index: int) -> list[Chart]:
    """The charts of one run's detail section, in reading order (only those with data)."""
    candidates = [
        ("breakdown", "Step-time breakdown", breakdown_figure([(run.name,
                                                                run.metrics.breakdown)])),
        ("timeline", "Timeline", timeline_figure(run.timeline)),
        ("kernels", "Top GPU kernels", top_items_figure(run.metrics.top_kernels,
                                                         "Top GPU kernels by total time")),
        ("ops", "Top CPU operators", top_items_figure(run.metrics.top_ops, _ops_title(run))),
        ("comm", "Communication and compute", comm_overlap_figure(run)),
        ("ranks", "Per-rank step time", per_rank_figure(run)),
    ]
    notes = {"ranks": run.metrics.per_rank_steps_note}
    return [Chart(f"chart-run{index}-{key}", title, figure, notes.get(key))
            for key, title, figure in candidates if figure is not None]


def comparison_charts(runs: list[RunAnalysis], comparison: Comparison | None) -> list[Chart]:
    """The charts of the comparison section (only with several runs); every run's breakdown
    the one its row's parts come from (ComparisonRow.breakdown: over the common step
    source)."""
    if len(runs) < 2 or comparison is None:
        return []
    candidates = [
        ("speedup", "Step time and speedup", comparison_figure(comparison)),
        ("breakdown", "Breakdown of every run",
         breakdown_figure([(row.name, row.breakdown) for row in comparison.rows])),
    ]
    return [Chart(f"chart-compare-{key}", title, figure)
            for key, title, figure in candidates if figure is not None]
