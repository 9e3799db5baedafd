"""Display formatting shared by the HTML, PDF and Markdown renderers: units and labels only.

Nothing here computes a metric; it turns the numbers of :mod:`profreport.reports.results` into
text (nanoseconds to ms or s, fractions to percent) and names the verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass

from profreport.reports.results import RunMetrics

#: Shown where a metric is unknown (its sources cannot tell).
MISSING = "—"
#: Below this many nanoseconds a duration reads better in microseconds (1 ms).
_MICROSECOND_BELOW_NS = 1_000_000
#: From this many nanoseconds on a duration reads better in seconds (10 s).
_SECOND_FROM_NS = 10_000_000_000

VERDICT_LABELS = {
    "loader-bound": "Waiting for data (DataLoader-bound)",
    "compute-bound": "Compute-bound",
    "communication-bound": "Communication-bound",
    "host-bound": "Host-bound (the CPU cannot feed the GPU)",
    "balanced": "Balanced",
    "unknown": "Unknown",
}

#: Keys in BREAKDOWN_PARTS order.
PART_LABELS = {
    "dataloader": "DataLoader wait",
    "h2d_copy": "Host-to-device copy",
    "compute": "Compute",
    "comm_exposed": "Communication (exposed)",
    "host_runtime": "Host / CUDA runtime",
    "other": "Other",
}


def verdict_label(verdict: str) -> str:
    """The human name of a verdict (the raw value when it is not one profreport knows)."""
    return VERDICT_LABELS.get(verdict, verdict)


def part_label(part: str) -> str:
    """The human name of a breakdown part."""
    return PART_LABELS.get(part, part)


def ns_to_ms(ns: float) -> float:
    """Nanoseconds as milliseconds, rounded to the microsecond (keeps chart data small)."""
    return round(ns / 1e6, 3)


def duration(ns: float | None) -> str:
    """A duration in the unit that reads best: µs, ms or s."""
    if ns is None:
        return MISSING
    if ns == 0:
        return "0"
    if abs(ns) < _MICROSECOND_BELOW_NS:
        return f"{ns / 1e3:,.1f} µs"
    if abs(ns) < _SECOND_FROM_NS:
        return f"{ns / 1e6:,.1f} ms"
    return f"{ns / 1e9:,.2f} s"


def signed_duration(ns: float | None) -> str:
    """A duration change with its sign: ``+12.0 ms``, ``-3.1 ms``."""
    if ns is None:
        return MISSING
    return ("+" if ns > 0 else "") + duration(ns)


def percent(fraction: float | None) -> str:
    """A 0..1 fraction as a percentage."""
    return MISSING if fraction is None else f"{fraction * 100:.1f}%"


def ratio(value: float | None) -> str:
    """A speedup-style ratio: ``1.25×``."""
    return MISSING if value is None else f"{value:.2f}×"


def number(value: float | None, digits: int = 1) -> str:
    """A count or rate with thousands separators."""
    if value is None:
        return MISSING
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def nbytes(value: int | None) -> str:
    """A byte count in B, KiB, MiB or GiB."""
    if value is None or value < 0:
        return MISSING
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return MISSING


def elide(text: str, limit: int | None) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (no limit when ``limit`` is None)."""
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class MetricRow:
    """One row of the key-metrics table: what, its value as text, and where it came from."""

    label: str
    value: str
    origin: str


def metric_rows(metrics: RunMetrics) -> list[MetricRow]:
    """The key metrics of a run as display rows, leaving out those its sources cannot tell."""
    rows: list[MetricRow] = []
    if metrics.steps is not None:
        steps = metrics.steps
        rows.append(MetricRow("Steps measured", number(steps.count), steps.origin))
        rows.append(MetricRow("Mean step time", duration(steps.mean_ns), steps.origin))
        rows.append(MetricRow("Step time p50 / p90",
                              f"{duration(steps.p50_ns)} / {duration(steps.p90_ns)}",
                              steps.origin))
        if steps.wall_mean_ns is not None:
            rows.append(MetricRow("Wall time per step (start to start)",
                                  duration(steps.wall_mean_ns), steps.origin))
    for other in metrics.steps_by_origin:
        if metrics.steps is None or other.origin != metrics.steps.origin:
            rows.append(MetricRow(f"Mean step time ({other.origin})", duration(other.mean_ns),
                                  other.origin))
    if metrics.throughput_samples_per_s is not None:
        rows.append(MetricRow("Throughput", f"{number(metrics.throughput_samples_per_s)} samples/s",
                              "manifest"))
    if metrics.gpu is not None:
        gpu = metrics.gpu
        rows.append(MetricRow("GPU busy", f"{percent(gpu.busy_fraction)} of "
                              f"{duration(gpu.window_ns)} ({duration(gpu.busy_ns)} busy)",
                              gpu.origin))
        rows.append(MetricRow(f"Idle gaps longer than {duration(gpu.long_gap_ns)}",
                              number(gpu.long_gap_count), gpu.origin))
    for origin, fraction in metrics.dataloader_fraction_by_origin.items():
        rows.append(MetricRow("Share of step time waiting for data", percent(fraction), origin))
    rows.extend(_comm_rows(metrics))
    rows.extend(_launch_and_copy_rows(metrics))
    rows.extend(MetricRow(item.name, f"{number(item.value, 3)} {item.unit}", "manifest")
                for item in metrics.measurements)
    return rows


def _comm_rows(metrics: RunMetrics) -> list[MetricRow]:
    """Display rows for collective communication."""
    comm = metrics.comm
    if comm is None:
        return []
    where = "GPU (NCCL)" if comm.on_gpu else "CPU"
    return [
        MetricRow(f"Communication per step, {where}", f"{duration(comm.total_ns_per_step)} "
                  f"({percent(comm.fraction)} of the step)", comm.origin),
        MetricRow("Communication exposed (not hidden by compute)", percent(comm.exposed_fraction),
                  comm.origin),
        MetricRow("Communication overlapping compute", percent(comm.overlap_fraction),
                  comm.origin),
        MetricRow("Collective calls per step", number(comm.calls_per_step), comm.origin),
    ]


def _launch_and_copy_rows(metrics: RunMetrics) -> list[MetricRow]:
    """Display rows for kernel launches, copies and synchronisations."""
    rows: list[MetricRow] = []
    if metrics.launch is not None:
        launch = metrics.launch
        rows.append(MetricRow("Kernels per step", number(launch.kernels_per_step), launch.origin))
        rows.append(MetricRow(f"Kernels shorter than {duration(launch.short_kernel_ns)}",
                              percent(launch.short_kernel_fraction), launch.origin))
        if launch.launch_delay_p50_ns is not None:
            rows.append(MetricRow("Launch delay p50", duration(launch.launch_delay_p50_ns),
                                  launch.origin))
    if metrics.copies is not None:
        copies = metrics.copies
        rows.append(MetricRow("Host-to-device copies", f"{nbytes(copies.h2d_bytes)} in "
                              f"{duration(copies.h2d_ns)} ({nbytes(copies.h2d_pageable_bytes)} "
                              "from pageable memory)", copies.origin))
        rows.append(MetricRow("Synchronising API calls", f"{number(copies.sync_api_calls)} "
                              f"({duration(copies.sync_api_ns)})", copies.origin))
    return rows




#: Heat colours of the line_profiler listing: share of the function's time in tenths, 0..10.
HEAT_BUCKETS = 10


def heat_bucket(share: float | None) -> int:
    """The CSS heat class number of a listing line (0 cold .. 10 hot)."""
    if share is None or share != share:
        return 0
    return max(0, min(HEAT_BUCKETS, round(share * HEAT_BUCKETS)))
