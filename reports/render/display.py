"""Display formatting shared by the HTML, PDF and Markdown renderers: units and labels only.

Nothing here computes a metric; it turns the numbers of
:mod:`profreport.reports.analysis.results` into text (nanoseconds to ms or s, fractions to
percent) and names the verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from profreport.concepts import ANNOTATED_RANGE, LOOP_PASS
from profreport.reports.analysis.results import (
    PART_LABELS,
    Breakdown,
    Comparison,
    ComparisonRow,
    Finding,
    RankVerdict,
    RunAnalysis,
    RunMetrics,
    TraceLocation,
    Trials,
    origin_label,
)
from profreport.text import elide as elide_text
from profreport.units import MISSING, delta_ms, duration, nbytes, ordinal, percent

#: Longest name a tooltip holds: the longest real C++ kernel names fit, a hostile one does not.
TOOLTIP_NAME_LIMIT = 2000

VERDICT_LABELS = {
    "loader-bound": "Waiting for data (DataLoader-bound)",
    "compute-bound": "Compute-bound",
    "communication-bound": "Communication-bound",
    "host-bound": "Host-bound (the CPU cannot feed the GPU)",
    "sync-bound": "Sync-bound (the CPU blocks in syncs, the GPU drains)",
    "transfer-bound": "Transfer-bound (the GPU's copies set the pace)",
    "balanced": "Balanced",
    "unknown": "Unknown",
}



def verdict_label(verdict: str) -> str:
    """The human name of a verdict (the raw value when it is not one profreport knows)."""
    return VERDICT_LABELS.get(verdict, verdict)


def part_label(part: str, breakdown: Breakdown | None = None) -> str:
    """The human name of a breakdown part (as ``breakdown`` names it, when given)."""
    return breakdown.label(part) if breakdown is not None else PART_LABELS.get(part, part)


#: What a breakdown part its source did not measure reads as (never 0: its time is inside
#: another part).
UNMEASURED = "unmeasured"


def part_time(breakdown: Breakdown, part: str) -> str:
    """A breakdown part's mean per step, or UNMEASURED."""
    return duration(breakdown.parts_ns[part]) if part in breakdown.measured else UNMEASURED


def breakdown_step_label(metrics: RunMetrics) -> str:
    """The breakdown's total row: the mean step window, or line_profiler's mean loop pass (its
    lines hold totals, not windows)."""
    origin = metrics.breakdown.origin if metrics.breakdown is not None else None
    steps = next((s for s in metrics.steps_by_origin if s.origin == origin), None)
    if steps is not None and steps.marker == LOOP_PASS:
        return mean_step_label(LOOP_PASS)
    return "Step window, mean (start to next start; the last step its range)"


def part_delta(row: ComparisonRow, part: str) -> str:
    """A comparison row's change of one breakdown part, or UNMEASURED when the breakdowns did
    not both measure it (see compare.breakdown_delta)."""
    delta = row.breakdown_delta_ns.get(part)
    return UNMEASURED if delta is None else delta_ms(delta)


def location(at: TraceLocation | None) -> str:
    """Where a piece of evidence lies, for after its sentence: ``rank0.json at 12.3 ms, for
    2.8 ms``; empty without one."""
    if at is None:
        return ""
    return f"{at.file} at {duration(at.offset_ns)}, for {duration(at.duration_ns)}"


def signed_duration(ns: float | None) -> str:
    """A duration change with its sign: ``+12.0 ms``, ``-3.1 ms``."""
    if ns is None:
        return MISSING
    return ("+" if ns > 0 else "") + duration(ns)


def sentence(text: str) -> str:
    """``text`` as a sentence: first letter capitalised, closing full stop (reasons are clauses)."""
    text = text.strip()
    if text and text[-1] not in ".!?":
        text += "."
    return text[:1].upper() + text[1:]


def source_place(file: str, lineno: int, function: str) -> str:
    """Where a source line is, short: ``train.py:114 (train)``; the full path is in the listing."""
    name, function = elide_text(PurePath(file).name), elide_text(function)
    return f"{name}:{lineno} ({function})"


def plain(value: object) -> str:
    """A manifest value as text: lists joined, None as a dash."""
    if value is None:
        return MISSING
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value) or MISSING
    return str(value)


def indent_width(source: str | None) -> int:
    """Columns of leading whitespace of a source line (tabs to 8), for its hanging indent."""
    if not source:
        return 0
    expanded = source.expandtabs(8)
    return len(expanded) - len(expanded.lstrip(" "))


def ratio(value: float | None) -> str:
    """A speedup-style ratio: ``1.25×``."""
    return MISSING if value is None else f"{value:.2f}×"


def noise_mark(within_noise: bool | None, noise_fraction: float | None) -> str:
    """A comparison row's noise mark: ``within noise (±7%)``, ``±7%`` for a change that clears
    the noise, nothing when the noise is unknown."""
    if noise_fraction is None:
        return ""
    band = f"±{noise_fraction:.0%}"
    return f"within noise ({band})" if within_noise else band


def one_interval(single: bool) -> str:
    """What a step time or throughput that is one start-to-next-start interval says of itself
    (StepStats.single_interval and its carriers), nothing otherwise."""
    return " (one interval: a single measurement)" if single else ""


def number(value: float | None, digits: int = 1) -> str:
    """A count or rate with thousands separators."""
    if value is None:
        return MISSING
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def share_header(basis: str | None) -> str:
    """The top-operator table's share column: of step time, as every share in a report is
    unless it says otherwise, or of the profiled span (a profile without steps)."""
    return "Share of the profiled span" if basis == "profiled span" else "Share"


def elide(text: str, limit: int | None) -> str:
    """``text`` cut to about ``limit`` characters by dropping its middle (no limit when None);
    the templates' ``finalize`` neutralises it afterwards (:func:`profreport.text.neutralise`)."""
    return text if limit is None else elide_text(str(text), limit)


def tooltip(text: str) -> str:
    """A name for a tooltip: whole unless absurdly long (the JSON report keeps every name)."""
    return elide(text, TOOLTIP_NAME_LIMIT)


@dataclass(frozen=True)
class MetricRow:
    """One row of the key-metrics table: what, its value as text, and where it came from."""

    label: str
    value: str
    origin: str


@dataclass(frozen=True)
class MetricGroup:
    """The key metrics one source measured (its profiler, or the runner)."""

    origin: str
    rows: list[MetricRow]


#: The runner's trials without a profiler, in the order they are read: the DataLoader alone,
#: the model alone, then both together.
TRIAL_LABELS = {
    "io": "Loader only (IO trial)",
    "synthetic": "Model on one cached batch (synthetic trial)",
    "full": "Real loop (full trial)",
}
#: Order in which the key-metrics table shows its sources (the runner's own figures last).
ORIGIN_ORDER = ("nsys", "kineto", "lprof", "manifest")


@dataclass(frozen=True)
class TrialBar:
    """One trial as a labelled bar: its rate as text and its length relative to the fastest."""

    label: str
    value: str
    #: Bar length, 0..1 of the fastest trial (drawing only).
    length: float


def trial_bars(trials: Trials | None) -> list[TrialBar]:
    """The three unprofiled trials as bars (empty when the run has none)."""
    if trials is None:
        return []
    rates = {"io": trials.io, "synthetic": trials.synthetic, "full": trials.full}
    shown = {key: value for key, value in rates.items() if value}
    if not shown:
        return []
    fastest = max(shown.values())
    return [TrialBar(TRIAL_LABELS[key], f"{number(round(value))} samples/s", value / fastest)
            for key, value in shown.items()]


def metric_groups(metrics: RunMetrics) -> list[MetricGroup]:
    """The key metrics of a run grouped by source, leaving out those its sources cannot tell."""
    rows = metric_rows(metrics)
    origins = sorted({row.origin for row in rows},
                     key=lambda origin: (ORIGIN_ORDER + (origin,)).index(origin))
    return [MetricGroup(origin, [row for row in rows if row.origin == origin])
            for origin in origins]


def mean_step_label(marker: str) -> str:
    """The mean step's label from what marks the steps: an annotated range, line_profiler's
    loop time over its passes (it records totals, not ranges), or what else marks them."""
    if marker == LOOP_PASS:
        return "Mean step (the loop's time over its passes)"
    if marker == ANNOTATED_RANGE:
        return "Mean annotated step (its range alone)"
    return f"Mean step ({marker})"


def part_rows(comparison: Comparison) -> tuple[list[ComparisonRow], list[ComparisonRow]]:
    """The rows of the table of changes by part (the baseline's and those compared with it
    part by part; none when no other is), and the rows left out of it (each says why)."""
    compared = [row for row in comparison.rows
                if row.parts_not_compared is None and row.breakdown_delta_ns]
    return (compared if len(compared) > 1 else [],
            [row for row in comparison.rows if row.parts_not_compared is not None])


def comparison_step_label(comparison: Comparison) -> str:
    """The comparison table's step column: the profiler that timed every row's steps, or
    that none timed them all (each row says why)."""
    if comparison.steps_origin is None:
        return "Step (profiled): unknown"
    return f"Step (profiled, {origin_label(comparison.steps_origin)})"


def rank_step_label(ranks: list[RankVerdict]) -> str:
    """The per-rank table's step column, named from what marks the ranks' steps (each rank's
    marker when they differ)."""
    timed = [r for r in ranks if r.step_ns is not None]
    markers = dict.fromkeys(r.step_marker for r in timed)
    if len(markers) <= 1:
        return mean_step_label(next(iter(markers), ANNOTATED_RANGE))
    return "Mean step (" + "; ".join(f"{r.label}: {r.step_marker}" for r in timed) + ")"


def metric_rows(metrics: RunMetrics) -> list[MetricRow]:
    """The key metrics of a run as display rows, leaving out those its sources cannot tell."""
    rows: list[MetricRow] = []
    if metrics.steps is not None:
        steps = metrics.steps
        rows.append(MetricRow("Steps measured", number(steps.count), steps.origin))
        rows.append(MetricRow(mean_step_label(steps.marker), duration(steps.mean_ns), steps.origin))
        if steps.p50_ns is not None and steps.p90_ns is not None:
            annotated = "Annotated step" if steps.marker == ANNOTATED_RANGE else "Step"
            rows.append(MetricRow(f"{annotated} p50 / p90",
                                  f"{duration(steps.p50_ns)} / {duration(steps.p90_ns)}",
                                  steps.origin))
        if steps.wall_mean_ns is not None:
            rows.append(MetricRow("Wall time per step (start to next start)",
                                  duration(steps.wall_mean_ns)
                                  + one_interval(steps.single_interval),
                                  steps.origin))
    rows.extend(_shape_rows(metrics))
    for other in metrics.steps_by_origin:
        if metrics.steps is None or other.origin != metrics.steps.origin:
            rows.append(MetricRow(mean_step_label(other.marker), duration(other.mean_ns),
                                  other.origin))
    if metrics.throughput_samples_per_s is not None:
        rows.append(MetricRow("Throughput (unprofiled)",
                              f"{number(metrics.throughput_samples_per_s)} samples/s",
                              "manifest"))
    if metrics.gpu is not None:
        gpu = metrics.gpu
        rows.append(MetricRow("GPU busy", f"{percent(gpu.busy_fraction)} of "
                              f"{gpu.window_text(duration)} ({duration(gpu.busy_ns)} busy)",
                              gpu.origin))
        rows.append(MetricRow(f"Idle gaps longer than {duration(gpu.long_gap_ns)}",
                              number(gpu.long_gap_count), gpu.origin))
    for origin, fraction in metrics.dataloader_fraction_by_origin.items():
        rows.append(MetricRow("Share of step time waiting for data", percent(fraction), origin))
    rows.extend(_comm_rows(metrics))
    rows.extend(_launch_and_copy_rows(metrics))
    rows.extend(_mix_rows(metrics))
    return rows


def _shape_rows(metrics: RunMetrics) -> list[MetricRow]:
    """Display rows for start-up and the spread of the step window and the DataLoader wait."""
    shape = metrics.shape
    if shape is None:
        return []
    rows = []
    warmup = shape.warmup
    if warmup is not None:
        what = ("no step: start-up only" if warmup.only and warmup.number is None else
                "the only step: start-up only" if warmup.only else
                f"step {warmup.number}, left out of the per-step figures"
                if warmup.number is not None else "before the first step, no step's")
        rows.append(MetricRow("First step profiled" if warmup.after_startup else "Start-up",
                              f"{duration(warmup.duration_ns)} ({what})", shape.origin))
    if shape.compiling:
        held = ("left out of the per-step figures" if shape.compiling_left_out else
                "every step: the per-step figures hold it")
        rows.append(MetricRow("torch.compile recompiling",
                              f"{duration(shape.compiling_ns)} in {len(shape.compiling)} "
                              f"step{'s' if len(shape.compiling) > 1 else ''} ({held})",
                              shape.origin))
    if shape.evaluating:
        count = len(shape.evaluating)
        rows.append(MetricRow("Evaluation-only steps",
                              f"{number(count)} step{'s' if count > 1 else ''} (no backward pass "
                              "or optimizer step: left out of the per-step figures)",
                              shape.origin))
    for label, spread in (("Step window (start to next start)", shape.step_window),
                          ("DataLoader wait per step", shape.dataloader_wait)):
        if spread is None:
            continue
        stalls = (f"; {number(spread.outlier_count)} over "
                  f"{duration(spread.outlier_range_ns[0])}"
                  + (f", every {ordinal(spread.period)} step" if spread.period else "")
                  if spread.outlier_range_ns is not None else "")
        rows.append(MetricRow(f"{label} median / p90",
                              f"{duration(spread.median_ns)} / {duration(spread.p90_ns)}{stalls}",
                              shape.origin))
    return rows


def _mix_rows(metrics: RunMetrics) -> list[MetricRow]:
    """Display rows for what the compute kernels (GPU) or the framework ops (CPU) are."""
    rows: list[MetricRow] = []
    if metrics.kernel_mix is not None:
        mix = metrics.kernel_mix
        of = "Named compute-kernel time" if mix.unnamed_kernel_ns else "Compute-kernel time"
        if mix.unnamed_kernel_ns:
            rows.append(MetricRow("Compute-kernel time of unrecorded name",
                                  percent(mix.unnamed_kernel_fraction), mix.origin))
        rows += [MetricRow(f"{of} in {kind}",
                           percent(share) if share is not None else f"unknown: {mix.names_unknown}",
                           mix.origin)
                 for kind, share in (("fp16/bf16 kernels", mix.reduced_precision_fraction),
                                     ("layout conversions (NCHW ↔ NHWC)",
                                      mix.layout_conversion_fraction),
                                     ("elementwise kernels", mix.elementwise_fraction))]
        if mix.optimizer_kernels_per_step is not None:
            fused = {True: "multi-tensor", False: "one kernel per tensor",
                     None: f"multi-tensor or not: unknown, {mix.fused_unknown}"}[
                mix.fused_optimizer]
            value = f"{number(mix.optimizer_kernels_per_step)} ({fused})"
            if mix.optimizer_unlinked_per_step is not None:
                value = (f"at least {value}; {number(mix.optimizer_unlinked_per_step)} more "
                         f"per step may be: {mix.optimizer_unknown}")
            rows.append(MetricRow(f"Optimizer ({mix.optimizer_name or 'unnamed'}) kernels per step",
                                  value, mix.origin))
        elif mix.optimizer_unknown is not None:
            rows.append(MetricRow(f"Optimizer ({mix.optimizer_name or 'unnamed'}) kernels per step",
                                  f"unknown: {mix.optimizer_unknown}", mix.origin))
    if metrics.cpu_op_mix is not None:
        ops = metrics.cpu_op_mix
        rows += [
            MetricRow("Operator self time in oneDNN (mkldnn) ops", percent(ops.onednn_fraction),
                      ops.origin),
            MetricRow("Operator self time in ATen's slow reference kernels",
                      percent(ops.slow_fallback_fraction), ops.origin),
        ]
    return rows


def _comm_rows(metrics: RunMetrics) -> list[MetricRow]:
    """Display rows for collective communication."""
    comm = metrics.comm
    if comm is None:
        return []
    where = f"GPU ({comm.library})" if comm.on_gpu else "CPU"
    return [
        MetricRow(f"Communication per step, {where}", f"{duration(comm.total_ns_per_step)} "
                  f"({percent(comm.fraction)} of the step)", comm.origin),
        MetricRow("Communication exposed (not hidden by compute), share of the step",
                  percent(comm.exposed_fraction), comm.origin),
        MetricRow("Share of communication overlapping compute", percent(comm.overlap_fraction),
                  comm.origin),
        MetricRow("Collective calls per step", number(comm.calls_per_step)
                  + (f" ({comm.calls_unknown})" if comm.calls_unknown else ""), comm.origin),
    ]


def _launch_and_copy_rows(metrics: RunMetrics) -> list[MetricRow]:
    """Display rows for kernel launches, copies and synchronisations."""
    rows: list[MetricRow] = []
    if metrics.launch is not None:
        launch = metrics.launch
        rows.append(MetricRow("Kernels per step", number(launch.kernels_per_step) + (
            f" ({launch.kernels_unknown})" if launch.kernels_unknown else ""), launch.origin))
        rows.append(MetricRow(f"Kernels shorter than {duration(launch.short_kernel_ns)}",
                              percent(launch.short_kernel_fraction), launch.origin))
        if launch.queued_launch_fraction is not None:
            delay = (f"{duration(launch.launch_delay_p50_ns)} over "
                     f"{number(launch.launch_delay_kernels)} kernels"
                     if launch.launch_delay_p50_ns is not None else
                     "unknown: every kernel was launched behind work still queued on its stream"
                     if not (launch.launch_delay_skewed or launch.launch_delay_waited
                             or launch.launch_delay_wait_unknown)
                     else "unknown")
            if launch.left_out_text():
                delay += f" ({launch.left_out_text()})"
            rows.append(MetricRow("Launch delay p50 (kernels launched onto an idle stream)",
                                  delay, launch.origin))
            rows.append(MetricRow("Kernels launched behind work still queued on their stream",
                                  percent(launch.queued_launch_fraction), launch.origin))
            if launch.launches_unknown is not None:
                rows.append(MetricRow("Kernels the launch delay and queued share leave out "
                                      "(linked to no launch call)", launch.launches_unknown,
                                      launch.origin))
        elif launch.launches_unknown is not None:
            rows.append(MetricRow("Launch delay and kernels launched behind queued work",
                                  f"unknown: {launch.launches_unknown}", launch.origin))
    if metrics.copies is not None:
        copies = metrics.copies
        source = (f"{nbytes(copies.h2d_pageable_bytes)} from pageable memory"
                  if copies.h2d_pageable_bytes is not None
                  else f"from pageable or pinned memory: unknown, {copies.h2d_kinds_unknown}")
        size = (nbytes(copies.h2d_bytes) if not copies.h2d_unsized else
                f"at least {nbytes(copies.h2d_bytes)}" if copies.h2d_bytes else "size unrecorded")
        copied = (f"{size} in {duration(copies.h2d_ns)} ({source})"
                  if copies.h2d_bytes or copies.h2d_kinds_unknown else "none recorded")
        rows.append(MetricRow("Host-to-device copies", copied, copies.origin))
        rows.append(MetricRow("Synchronising API calls", f"{number(copies.sync_api_calls)} "
                              f"({duration(copies.sync_api_ns)})", copies.origin))
    return rows


#: Human names of the CPU phases of CPU-only runs.
PHASE_LABELS = {
    "dataloader": "Waiting for data",
    "forward": "Forward",
    "backward": "Backward",
    "optimizer": "Optimizer step",
    "communication": "Communication",
    "other": "Other",
}


def phase_label(phase: str) -> str:
    """The human name of a CPU phase."""
    return PHASE_LABELS.get(phase, phase)


def headline_finding(run: RunAnalysis) -> Finding | None:
    """The finding a reader should act on first: findings come with the one explaining the
    verdict first, then by severity."""
    return next(iter(run.findings), None)


#: Heat colours of the line_profiler listing: share of the function's time in tenths, 0..10.
HEAT_BUCKETS = 10


def heat_bucket(share: float | None) -> int:
    """The CSS heat class number of a listing line (0 cold .. 10 hot)."""
    if share is None or share != share:
        return 0
    return max(0, min(HEAT_BUCKETS, round(share * HEAT_BUCKETS)))
