"""The shape of a run's steps: start-up at the front, and how the per-step figures spread.

A mean hides two things that real profiles show often. The first step of a process holds one-off
work (CUDA context creation, cuDNN autotuning, the caching allocator growing, the DataLoader's
first fill): read as steady state, it makes every step look like start-up. And a DataLoader wait
that is a few long stalls (an epoch start, evaluation, a checkpoint, workers falling behind once
per round) averages into "each step waits X" although most steps wait almost nothing.

:func:`find_warmup` tells the first step apart (much longer than the others' median, with the
set-up calls recorded inside it); :func:`per_step` gives the median, p90, the outlying steps with
where they lie, and the period when they recur every Nth step.
"""

from __future__ import annotations

import re

import numpy as np

from profreport import concepts
from profreport.model import Profile, profiled_span
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.dataloader import training_fetches
from profreport.reports.analysis.results import (
    PerStep,
    RunMetrics,
    StepOutlier,
    Warmup,
)
from profreport.units import ms, ms_range, ordinal

#: A first step this many times the median of the later ones holds one-off work: steady steps of
#: one loop stay within tens of percent of each other, start-up (context creation, autotuning,
#: the allocator growing, the workers' first fill) takes several steps' time.
WARMUP_FACTOR = 2.0
#: ... and longer than this quantile of the later steps: a first step that a tenth of the later
#: steps reach (a loop slowed by other work on its CPUs) is within the loop's own spread.
WARMUP_BEYOND_QUANTILE = 0.9
#: A step's value is an outlier (a stall) when it is this many times the median step's (the
#: lower middle value of an even count): a steady wait jitters within a factor of two of its
#: median, so four times it is a one-off.
STALL_FACTOR = 4.0
#: ... and when it costs at least this share of the median step window: a stall of less than a
#: tenth of a step is within the step-to-step spread and not worth naming.
STALL_MIN_SHARE = 0.10
#: A value over this share of a stall's is that stall recurring, though under the stall limit:
#: steady waits jitter within a factor of two, so the limit must not split one group of waits
#: (two workers that cannot keep up: every 2nd wait 134-140 ms over 30 ms, the limit 4 x 35 ms
#: took the 140 ms alone).
STALL_GROUP_SHARE = 0.5
#: Outliers must recur at least this often before a period (every Nth step) is claimed: two
#: stalls always have a spacing, three at one spacing are a pattern.
PERIOD_MIN_STALLS = 3
#: ... at a spacing of at least this many steps: stalls one step apart are a stretch of slow
#: steps in a row (the machine busy with something else for a while), not a recurrence.
PERIOD_MIN_SPACING = 2
#: Stalls holding half the DataLoader wait make it a stall problem rather than a steady wait:
#: the title says so instead of "each step waits".
STALLS_DOMINATE = 0.5
#: A GPU busy for half of the stalls runs work of its own then (an evaluation pass, say): the
#: stalls are not the loop waiting for data but another task between the training steps.
STALL_GPU_WORK_SHARE = 0.5
#: Outliers listed by step and time in the results (the largest first); the rest are counted.
OUTLIERS_LISTED = 5

#: Calls that do start-up work, by the API or operator the profile records: CUDA context
#: creation (driver entry points; ``cudaFree(0)`` is its usual trigger, but cudaFree also frees,
#: so it counts only with cudaMalloc below), cuDNN/MIOpen autotuning (benchmark=True runs the
#: ``Find`` searches), and the CUDA caching allocator growing (cudaMalloc: a steady loop reuses
#: its blocks and calls none), GPU code being loaded (a module or library of kernels: with
#: CUDA's lazy loading, at a kernel's first launch, never again for it), and torch.compile
#: compiling (the spans its dynamo_timed records around Dynamo compiling a frame and
#: AOTAutograd compiling the backward at its first call).
_SETUP_CALL = re.compile(
    r"^(?:cuInit|cuDevicePrimaryCtxRetain|cuCtxCreate\w*|cudnnFind\w*|miopenFind\w*|"
    r"cudnnGet\w*Algorithm\w*|cudaMalloc|cuMemAlloc\w*|hipMalloc|hipInit|"
    r"cuModuleLoad\w*|cuLibraryLoad\w*|hipModuleLoad\w*|"
    + "|".join(sorted(concepts.COMPILE_SPANS)) + r")$")


def setup_calls(profile: Profile, start: int, end: int) -> dict[str, int]:
    """Start-up calls (see _SETUP_CALL) the profile records between ``start`` and ``end``
    (ns), by name, most first; runtime calls and CPU operators both count."""
    counts: dict[str, int] = {}
    for table in ("runtime", "cpu_ops"):
        frame = profile.table(table)
        if frame.empty:
            continue
        inside = frame[(frame["start"] >= start) & (frame["start"] < end)]
        names = inside["name"][inside["name"].str.match(_SETUP_CALL)]
        for name, count in names.value_counts().items():
            if count:  # a categorical's counts list its other names too, at 0
                counts[str(name)] = counts.get(str(name), 0) + int(count)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _before_steps(profile: Profile, starts: np.ndarray, ends: np.ndarray) -> Warmup | None:
    """Start-up recorded before the first step window (steps found from the optimizer leave the
    first iteration out): set-up calls there over a stretch of at least WARMUP_FACTOR times the
    median window. It is no step's, so the per-step figures already leave it out."""
    first = min((int(t["start"].min()) for name in ("runtime", "cpu_ops")
                 if not (t := profile.table(name)).empty), default=None)
    if first is None or first >= starts[0]:
        return None
    span = (first, int(starts[0]))
    calls = setup_calls(profile, *span)
    median = int(np.median(ends - starts))
    if not calls or span[1] - span[0] < WARMUP_FACTOR * median:
        return None
    return Warmup(None, span, span[1] - span[0], median, calls, only=False)


def startup_without_steps(profile: Profile) -> Warmup | None:
    """Start-up in a profile that holds no step (one training iteration traced without a
    schedule: its one optimizer step bounds no step): the set-up calls recorded over its
    profiled span (model.profiled_span: the device work it launched too), which is then
    start-up only. None when it records none."""
    span = profiled_span(profile)
    if span is None:
        return None
    calls = setup_calls(profile, span[0], span[1] + 1)
    if not calls:
        return None
    return Warmup(None, span, span[1] - span[0], None, calls, only=True)


def find_warmup(profile: Profile, numbers: np.ndarray, starts: np.ndarray,
                ends: np.ndarray, steps_before: int = 0,
                last_whole: bool = False) -> Warmup | None:
    """The first step when it is start-up: much longer than the later steps' median (see
    WARMUP_FACTOR) and than most of them (WARMUP_BEYOND_QUANTILE), with the set-up calls
    recorded in it and not in the later steps; a single step is start-up only when set-up calls
    are recorded in it; else start-up recorded before the first step (see _before_steps). None
    otherwise. ``steps_before``: the steps the process ran before the first one recorded
    (Warmup.steps_before); ``last_whole``: whether the last window is a whole iteration
    (steps.last_window_whole), else it is only its own range and left out of the comparison."""
    if len(numbers) == 0:
        return None
    before = _before_steps(profile, starts, ends)
    if before is not None:
        return before
    first_span = (int(starts[0]), int(ends[0]))
    calls = setup_calls(profile, *first_span)
    if len(numbers) == 1:
        if not calls:
            return None
        return Warmup(int(numbers[0]), first_span, first_span[1] - first_span[0], None, calls,
                      only=True)
    durations = ends - starts
    # Compare with the whole steps: the last window may be only its own range (no fetch).
    later = durations[1:-1] if len(durations) > 2 and not last_whole else durations[1:]
    median = int(np.median(later))
    if durations[0] < WARMUP_FACTOR * median or \
            durations[0] <= np.quantile(later, WARMUP_BEYOND_QUANTILE):
        return None
    later_calls = setup_calls(profile, int(starts[1]), int(ends[-1]))
    steady = {name: n for name, n in calls.items() if n > later_calls.get(name, 0)}
    waits = iv.overlap_per_window(iv.union_of([training_fetches(profile).fetches]), starts, ends)
    return Warmup(int(numbers[0]), first_span, int(durations[0]), median, steady, only=False,
                  loader_fill=(int(waits[0]), int(np.median(waits[1:])))
                  if waits.any() else None, steps_before=steps_before)


def _period(numbers: list[int]) -> int | None:
    """The spacing of step numbers when every consecutive pair of outliers has the same one
    (every Nth step), with at least PERIOD_MIN_STALLS of them, PERIOD_MIN_SPACING apart or
    more; else None."""
    if len(numbers) < PERIOD_MIN_STALLS:
        return None
    spacing = set(np.diff(sorted(numbers)).tolist())
    period = int(spacing.pop()) if len(spacing) == 1 else None
    return period if period is not None and period >= PERIOD_MIN_SPACING else None


def per_step(values: np.ndarray, numbers: np.ndarray, starts: np.ndarray, ends: np.ndarray,
             window_ns: int, gpu_busy: np.ndarray | None = None) -> PerStep:
    """The distribution of one per-step figure (ns per step window): median, p90, the outlying
    steps (over STALL_FACTOR times the median and STALL_MIN_SHARE of ``window_ns``, the median
    step window, and those within STALL_GROUP_SHARE of the shortest of them) with where they
    lie, the period when they recur, and the median of the rest; ``gpu_busy`` (ns per window of
    the figure's time with a GPU busy) gives the outliers' busy share."""
    median = int(np.median(values))
    # From the lower middle value: when every 2nd step stalls, the median of an even count lies
    # between the two groups, and STALL_FACTOR times it would hide the stalls.
    lower = int(np.percentile(values, 50, method="lower"))
    limit = max(STALL_FACTOR * lower, STALL_MIN_SHARE * window_ns)
    out = np.flatnonzero(values > limit)
    if len(out):  # the waits as long as the shortest stall, within its jitter, are stalls too
        out = np.flatnonzero(values > max(STALL_GROUP_SHARE * values[out].min(),
                                          STALL_MIN_SHARE * window_ns))
    rest = np.delete(values, out)
    outliers = [StepOutlier(int(numbers[i]), (int(starts[i]), int(ends[i])), int(values[i]))
                for i in out]
    listed = sorted(outliers, key=lambda o: -o.value_ns)[:OUTLIERS_LISTED]
    return PerStep(
        median_ns=median, p90_ns=int(np.percentile(values, 90)), min_ns=int(values.min()),
        max_ns=int(values.max()), count=len(values), total_ns=int(values.sum()), outliers=listed,
        outlier_count=len(outliers), outlier_ns=int(values[out].sum()),
        outlier_range_ns=(int(values[out].min()), int(values[out].max())) if len(out) else None,
        period=_period([o.number for o in outliers]),
        steady_ns=int(np.median(rest)) if len(rest) else median,
        outlier_gpu_busy=float(gpu_busy[out].sum() / max(values[out].sum(), 1))
        if gpu_busy is not None and len(out) else None)


def _outliers_text(d: PerStep, m: RunMetrics, origin: str) -> str:
    """'step 15 at 10.03 s (1,607.0 ms), ...' for the listed outliers."""
    parts = []
    for o in d.outliers:
        at = m.locate(origin, o.span)  # type: ignore[arg-type]
        when = f" at {ms(at.offset_ns)}" if at is not None else ""
        parts.append(f"step {o.number}{when} ({ms(o.value_ns)})")
    more = d.outlier_count - len(d.outliers)
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def wait_shape_text(m: RunMetrics) -> str | None:
    """The DataLoader wait's spread over the steps in one sentence: median and p90, and the
    stalls with where they lie and their period; None without a wait to describe."""
    shape = m.shape
    d = shape.dataloader_wait if shape is not None else None
    if d is None:
        return None
    text = (f"the wait per step has median {ms(d.median_ns)} and p90 {ms(d.p90_ns)} over "
            f"{d.count} steps")
    if not d.outlier_count or d.outlier_range_ns is None:
        return text + ", with no stall"
    low, high = d.outlier_range_ns
    every = f", every {ordinal(d.period)} step" if d.period else ""
    stalls = "stall" if d.outlier_count == 1 else "stalls"
    return (f"{text}: {d.outlier_count} {stalls} of {ms_range(low, high)}{every} "
            f"({_outliers_text(d, m, shape.origin)}) and {ms(d.steady_ns)} (median) over the "
            f"other {d.count - d.outlier_count} steps")


def stalled_share(m: RunMetrics) -> float | None:
    """Share of the DataLoader wait (over the measured steps) spent in stalls; None without a
    wait measured step by step."""
    d = m.shape.dataloader_wait if m.shape is not None else None
    return None if d is None else d.outlier_ns / max(d.total_ns, 1)
