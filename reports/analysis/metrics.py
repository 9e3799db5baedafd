"""Metrics of one run: small typed functions of a profile's tables, combined once per run.

Each metric records its origin (the profiler that showed it). When several sources of a run have
the same metric, each metric comes from the source that can attribute it, judged by what the
source holds (never by its file name):

- step count and wall time: a source with GPU events, else nsys, else Kineto (``ProfilerStep``/
  NVTX ranges), before line_profiler;
- the step breakdown, DataLoader share, CPU phases and communication: the source that can
  *attribute* step time (:func:`attribution_level`): GPU events first; on CPU-only runs a trace
  with framework ops (Kineto ``cpu_op``), then line_profiler's lines; a source with only NVTX
  ranges (nsys on a CPU-only capture) splits the step into DataLoader wait and unattributed time
  only, so it comes last.

The other sources' figures are kept in ``steps_by_origin`` and ``dataloader_fraction_by_origin``
for the agreement finding.

Step windows: a step's window runs from its start to the next step's start (the last step's
window is its own range), so the time between annotated ranges belongs to a step. Inside a
window, time outside the annotated range is the training loop fetching the next batch (``for
batch in loader:`` runs ``next(loader)`` before the body's range opens), and is counted as
DataLoader wait together with explicit DataLoader spans.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from profreport import concepts
from profreport.manifest import Manifest
from profreport.model import Profile
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.results import (
    BREAKDOWN_PARTS,
    Breakdown,
    CommStats,
    CopyStats,
    CpuOpMix,
    CpuPhaseBreakdown,
    FunctionListing,
    GpuUtilization,
    IdleGap,
    KernelMix,
    LaunchStats,
    LineItem,
    Origin,
    RunMetrics,
    StepStats,
    TopItem,
    Trials,
)

#: An idle GPU gap longer than this is a stall, not launch jitter: the sc22 tutorial reads its
#: 500 ms gaps as the GPU waiting for the DataLoader between iterations.
LONG_IDLE_GAP_NS = 500_000_000
#: Kernels shorter than this cost about as much to launch (~5-10 us) as they run.
SHORT_KERNEL_NS = 10_000
#: A device-to-host copy this small is a scalar read back (``.item()``, ``print(loss)``): a sync.
TINY_COPY_BYTES = 64
#: How many idle gaps, kernels, CPU ops and source lines are kept for display.
TOP_GAPS = 5
TOP_KERNELS = 10
TOP_OPS = 10
TOP_LINES = 20

# CPU-only phase classification (Kineto CPU op names). The optimizer step is recorded as
# ``Optimizer.step#SGD.step`` (and ``Optimizer.zero_grad#...``); the backward pass as autograd
# engine nodes.
_OPTIMIZER_OP = r"^Optimizer\.(?:step|zero_grad)#"
_BACKWARD_OP = r"^autograd::engine::evaluate_function"
# ATen's elementwise CUDA kernels (``vectorized_elementwise_kernel``, ``unrolled_...``,
# ``elementwise_kernel``): one launch per pointwise op, what torch.compile fuses.
_ELEMENTWISE_KERNEL = r"elementwise_kernel"
# nn.DataParallel's autograd functions (replicate = Broadcast, scatter/gather of the batch, the
# gradient reduction ReduceAddCoalesced) and their backward nodes; capitalised, so a model's own
# ``aten::scatter`` does not count.
_DATAPARALLEL_OP = r"\b(?:Broadcast|Scatter|Gather|ReduceAddCoalesced)(?:Backward\d*)?\b"


@dataclass(frozen=True)
class StepWindows:
    """The steps of one profile: annotated ranges and the wall windows they own."""

    origin: Origin
    numbers: np.ndarray
    range_starts: np.ndarray
    range_ends: np.ndarray
    #: Window i runs from step i's start to step i+1's start; the last one is its own range.
    starts: np.ndarray
    ends: np.ndarray

    @property
    def count(self) -> int:
        """Number of steps."""
        return len(self.numbers)

    @property
    def total_ns(self) -> int:
        """Sum of the window lengths."""
        return int((self.ends - self.starts).sum())

    def ranges(self) -> iv.Intervals:
        """The annotated step ranges as intervals."""
        return iv.union(self.range_starts, self.range_ends)

    def windows(self) -> iv.Intervals:
        """The step windows as intervals."""
        return iv.union(self.starts, self.ends)


def step_windows(profile: Profile) -> StepWindows | None:
    """The step windows of a profile with a ``steps`` table, or None."""
    steps = profile.table("steps")
    if steps.empty:
        return None
    steps = steps.sort_values("start").drop_duplicates("number", keep="first")
    starts = steps["start"].to_numpy(np.int64)
    ends = steps["end"].to_numpy(np.int64)
    wall_ends = np.append(np.maximum(starts[1:], ends[:-1]), ends[-1])
    return StepWindows(origin=profile.kind, numbers=steps["number"].to_numpy(np.int64),
                       range_starts=starts, range_ends=ends, starts=starts, ends=wall_ends)


def _pct(values: np.ndarray, q: float) -> int:
    """Percentile ``q`` of integer durations, as int ns."""
    return int(np.percentile(values, q))


def step_stats(windows: StepWindows) -> StepStats:
    """Count and duration of the annotated step ranges; wall time is start-to-start."""
    durations = windows.range_ends - windows.range_starts
    wall = np.diff(windows.range_starts)
    return StepStats(origin=windows.origin, count=windows.count, mean_ns=int(durations.mean()),
                     p50_ns=_pct(durations, 50), p90_ns=_pct(durations, 90),
                     min_ns=int(durations.min()), max_ns=int(durations.max()),
                     wall_mean_ns=int(wall.mean()) if len(wall) else None,
                     stdev_ns=int(durations.std(ddof=1)) if len(durations) > 1 else None)


def lprof_loop_line(lines: pd.DataFrame) -> pd.Series | None:
    """The DataLoader loop line that took the most time, or None."""
    loops = lines[lines["is_dataloader_loop"]]
    if loops.empty:
        return None
    return loops.loc[loops["time_ns"].idxmax()]


def _function_total(lines: pd.DataFrame, line: pd.Series) -> int:
    """Total time of the function holding ``line``."""
    same = (lines["file"] == line["file"]) & (lines["function"] == line["function"])
    return int(lines.loc[same, "time_ns"].sum())


def lprof_step_stats(lines: pd.DataFrame) -> StepStats | None:
    """Iterations from the loop line's hits; mean = function total / hits (only the mean is known,
    so percentiles, min and max repeat it)."""
    line = lprof_loop_line(lines)
    if line is None or int(line["hits"]) == 0:
        return None
    mean = _function_total(lines, line) // int(line["hits"])
    return StepStats(origin="lprof", count=int(line["hits"]), mean_ns=mean, p50_ns=mean,
                     p90_ns=mean, min_ns=mean, max_ns=mean, wall_mean_ns=mean)


def lprof_dataloader_fraction(lines: pd.DataFrame) -> float | None:
    """The loop line's share of its function's time (waiting on ``next(loader)``)."""
    line = lprof_loop_line(lines)
    return None if line is None else float(line["function_share"])


def gpu_tables(profile: Profile) -> list[pd.DataFrame]:
    """The kernel, memcpy and memset tables (the GPU's activity)."""
    return [profile.table("kernels"), profile.table("memcpy"), profile.table("memset")]


def has_gpu_events(profile: Profile) -> bool:
    """Whether the profile recorded any GPU activity."""
    return any(profile.has(name) for name in ("kernels", "memcpy", "memset"))


def _where(gap_starts: np.ndarray, windows: StepWindows | None) -> list[str]:
    """Where each gap starts relative to the step ranges."""
    if windows is None:
        return ["outside steps"] * len(gap_starts)
    k = np.searchsorted(windows.range_starts, gap_starts, side="right") - 1
    inside = (k >= 0) & (gap_starts < windows.range_ends[np.maximum(k, 0)])
    spanned = (gap_starts >= windows.range_starts[0]) & (gap_starts < windows.range_ends[-1])
    return [f"inside step {windows.numbers[i]}" if inn else
            ("between steps" if sp else "outside steps")
            for i, inn, sp in zip(k, inside, spanned, strict=True)]


def _device_activity(profile: Profile) -> dict[int, iv.Intervals]:
    """Per device, the union of its kernel, memcpy and memset intervals."""
    frame = pd.concat([t[["start", "end", "device"]] for t in gpu_tables(profile) if not t.empty])
    return {int(dev): iv.union(part["start"], part["end"])
            for dev, part in frame.groupby("device", sort=True)}


def gpu_utilization(profile: Profile, windows: StepWindows | None) -> GpuUtilization | None:
    """Busy share of each GPU over its window (first event start to last event end)."""
    if not has_gpu_events(profile):
        return None
    activity = _device_activity(profile)
    per_device = {dev: busy.total / max(int(busy.ends[-1] - busy.starts[0]), 1)
                  for dev, busy in activity.items()}
    window_ns = sum(int(b.ends[-1] - b.starts[0]) for b in activity.values())
    busy_ns = sum(b.total for b in activity.values())
    holes = [(dev, iv.gaps(b)) for dev, b in activity.items()]
    frame = pd.DataFrame({
        "device": np.concatenate([np.full(len(g), dev) for dev, g in holes]),
        "start": np.concatenate([g.starts for _, g in holes]),
        "duration": np.concatenate([g.ends - g.starts for _, g in holes]),
    })
    top = frame.nlargest(TOP_GAPS, "duration")
    where = _where(top["start"].to_numpy(np.int64), windows)
    largest = [IdleGap(int(d), int(s), int(n), w) for d, s, n, w in
               zip(top["device"], top["start"], top["duration"], where, strict=True)]
    return GpuUtilization(origin=profile.kind, busy_fraction=busy_ns / max(window_ns, 1),
                          window_ns=window_ns, busy_ns=busy_ns, per_device=per_device,
                          largest_gaps=largest,
                          long_gap_count=int((frame["duration"] > LONG_IDLE_GAP_NS).sum()),
                          long_gap_ns=LONG_IDLE_GAP_NS)


def dataloader_intervals(profile: Profile, windows: StepWindows) -> iv.Intervals:
    """DataLoader spans plus the time inside step windows outside the annotated step ranges."""
    between = iv.subtract(windows.windows(), windows.ranges())
    return iv.merge(iv.union_of([profile.table("dataloader")]), between)


def dataloader_fraction(profile: Profile, windows: StepWindows) -> float:
    """Share of step-window time spent waiting for the next batch."""
    waited = iv.overlap_per_window(dataloader_intervals(profile, windows),
                                   windows.starts, windows.ends).sum()
    return float(waited) / max(windows.total_ns, 1)


def _kernels(profile: Profile, comm: bool) -> pd.DataFrame:
    """Communication kernels (``comm=True``) or all the others."""
    kernels = profile.table("kernels")
    return kernels[kernels["is_comm"] == comm]


def _h2d(profile: Profile) -> pd.DataFrame:
    """Host-to-device copies."""
    memcpy = profile.table("memcpy")
    return memcpy[memcpy["kind"] == "HtoD"]


def compute_intervals(profile: Profile) -> iv.Intervals:
    """GPU work other than communication and H2D copies: kernels, memsets, other copies."""
    memcpy = profile.table("memcpy")
    return iv.union_of([_kernels(profile, False), profile.table("memset"),
                        memcpy[memcpy["kind"] != "HtoD"]])


def _claim(parts: list[tuple[str, iv.Intervals]], windows: StepWindows) -> dict[str, int]:
    """Mean ns per window of each part, each claiming only time no earlier part claimed."""
    claimed = iv.EMPTY
    out: dict[str, int] = {}
    count = max(windows.count, 1)
    for name, part in parts:
        fresh = iv.subtract(part, claimed)
        out[name] = int(iv.overlap_per_window(fresh, windows.starts, windows.ends).sum()) // count
        claimed = iv.merge(claimed, fresh)
    return out


def _breakdown(origin: Origin, windows: StepWindows, parts: list[tuple[str, iv.Intervals]],
               overlapped_ns: int = 0) -> Breakdown:
    """A Breakdown whose parts (in BREAKDOWN_PARTS order) add up to the mean window."""
    step_ns = windows.total_ns // max(windows.count, 1)
    parts_ns = dict.fromkeys(BREAKDOWN_PARTS, 0)
    parts_ns.update(_claim(parts, windows))
    parts_ns["other"] = max(step_ns - sum(v for k, v in parts_ns.items() if k != "other"), 0)
    return Breakdown(origin=origin, step_ns=step_ns, parts_ns=parts_ns,
                     comm_overlapped_ns=overlapped_ns)


def gpu_breakdown(profile: Profile, windows: StepWindows) -> Breakdown:
    """Step time split into DataLoader wait, H2D copies, compute kernels, exposed communication,
    CUDA runtime calls on the CPU while the GPU has nothing else, and the rest."""
    comm = iv.union_of([_kernels(profile, True)])
    compute = compute_intervals(profile)
    overlapped = iv.overlap_per_window(iv.intersect(comm, compute), windows.starts,
                                       windows.ends).sum() // max(windows.count, 1)
    parts = [("dataloader", dataloader_intervals(profile, windows)),
             ("h2d_copy", iv.union_of([_h2d(profile)])),
             ("compute", compute), ("comm_exposed", comm),
             ("host_runtime", iv.union_of([profile.table("runtime")]))]
    return _breakdown(profile.kind, windows, parts, int(overlapped))


def _cpu_ops_matching(profile: Profile, pattern: str | None) -> pd.DataFrame:
    """CPU ops whose name matches ``pattern`` (all ops but steps/DataLoader/collectives: None)."""
    ops = profile.table("cpu_ops")
    names = ops["name"].astype("string")
    if pattern is not None:
        return ops[names.str.contains(pattern, regex=True).fillna(False).astype(bool)]
    special = (concepts.step_numbers(names).notna() | concepts.is_dataloader_span(names)
               | concepts.is_cpu_collective(names))
    return ops[~special.to_numpy()]


def cpu_breakdown(profile: Profile, windows: StepWindows) -> Breakdown:
    """CPU-only runs: DataLoader wait, then framework ops (any thread) as compute, then CPU
    collectives while no framework op runs as exposed communication; the rest is other.

    A profile with ranges but no framework ops (nsys NVTX on a CPU-only capture) gets DataLoader
    wait and "other" only: it cannot tell compute from anything else."""
    parts = [("dataloader", dataloader_intervals(profile, windows)),
             ("compute", iv.union_of([_cpu_ops_matching(profile, None)])),
             ("comm_exposed", iv.union_of([profile.table("cpu_collectives")]))]
    return _breakdown(profile.kind, windows, parts)


def _spans_matching(profile: Profile, pattern: str) -> pd.DataFrame:
    """CPU ops and annotated ranges whose name matches ``pattern`` (Kineto records
    ``Optimizer.step#...`` as a user annotation, i.e. a range, not a ``cpu_op``)."""
    ranges = profile.table("ranges")
    names = ranges["name"].astype("string")
    hits = ranges[names.str.contains(pattern, regex=True).fillna(False).astype(bool)]
    return pd.concat([_cpu_ops_matching(profile, pattern)[["start", "end"]],
                      hits[["start", "end"]]], ignore_index=True)


def cpu_phases(profile: Profile, windows: StepWindows) -> CpuPhaseBreakdown:
    """CPU-only runs: share of step time in DataLoader, optimizer, backward, forward (the
    remaining framework ops) and communication while no op runs, each claiming only unclaimed
    time."""
    parts = [("dataloader", dataloader_intervals(profile, windows)),
             ("optimizer", iv.union_of([_spans_matching(profile, _OPTIMIZER_OP)])),
             ("backward", iv.union_of([_spans_matching(profile, _BACKWARD_OP)])),
             ("forward", iv.union_of([_cpu_ops_matching(profile, None)])),
             ("communication", iv.union_of([profile.table("cpu_collectives")]))]
    mean = _claim(parts, windows)
    step_ns = max(windows.total_ns // max(windows.count, 1), 1)
    fractions = {name: ns / step_ns for name, ns in mean.items()}
    fractions["other"] = max(1.0 - sum(fractions.values()), 0.0)
    return CpuPhaseBreakdown(origin=profile.kind, fractions=fractions)


def lprof_breakdown(lines: pd.DataFrame, steps: StepStats) -> Breakdown | None:
    """line_profiler: the loop line is DataLoader wait, the rest of the loop's function is counted
    as compute (line_profiler cannot split the loop body further)."""
    share = lprof_dataloader_fraction(lines)
    if share is None:
        return None
    loader = int(steps.mean_ns * share)
    parts_ns = dict.fromkeys(BREAKDOWN_PARTS, 0)
    parts_ns.update(dataloader=loader, compute=steps.mean_ns - loader)
    return Breakdown(origin="lprof", step_ns=steps.mean_ns, parts_ns=parts_ns)


def _in_windows(frame: pd.DataFrame, windows: StepWindows) -> pd.DataFrame:
    """Rows starting inside the span of the step windows."""
    return frame[(frame["start"] >= windows.starts[0]) & (frame["start"] < windows.ends[-1])]


def gpu_comm_stats(profile: Profile, windows: StepWindows) -> CommStats | None:
    """NCCL kernels: share of step time, exposed share, overlap with compute, calls per step."""
    kernels = _kernels(profile, True)
    if kernels.empty:
        return None
    comm = iv.union_of([kernels])
    return _comm_stats(profile, windows, comm, iv.subtract(comm, compute_intervals(profile)),
                       (len(_in_windows(kernels, windows)), len(kernels)),
                       kernels["short_name"], on_gpu=True)


def _comm_stats(profile: Profile, windows: StepWindows, comm: iv.Intervals,
                exposed: iv.Intervals, calls: tuple[int, int], names: pd.Series,
                on_gpu: bool) -> CommStats:
    """CommStats from the communication intervals, their exposed part and the call counts
    (inside the step windows, and in all)."""
    spent = iv.overlap_per_window(comm, windows.starts, windows.ends).sum()
    exposed_in_steps = iv.overlap_per_window(exposed, windows.starts, windows.ends).sum()
    total = max(windows.total_ns, 1)
    return CommStats(origin=profile.kind, total_ns_per_step=int(spent) // windows.count,
                     fraction=float(spent) / total,
                     exposed_fraction=float(exposed_in_steps) / total,
                     overlap_fraction=1.0 - exposed.total / max(comm.total, 1),
                     calls_per_step=calls[0] / windows.count, calls_total=calls[1],
                     bytes_total=None, names=sorted(names.unique().tolist()), on_gpu=on_gpu)


def collective_calls(calls: pd.DataFrame) -> int:
    """Collective calls the program made: one call is recorded once per layer (the c10d op and
    the gloo/NCCL op that runs it), so the count is that of the layer with the most records."""
    if calls.empty:
        return 0
    return int(concepts.collective_layer(calls["name"]).value_counts().max())


def cpu_comm_stats(profile: Profile, windows: StepWindows) -> CommStats | None:
    """CPU collectives (gloo, c10d): time with a collective in flight on any thread, and the
    exposed part, when no framework op runs beside it (the training thread waits for it)."""
    calls = profile.table("cpu_collectives")
    if calls.empty:
        return None
    comm = iv.union_of([calls])
    exposed = iv.subtract(comm, iv.union_of([_cpu_ops_matching(profile, None)]))
    return _comm_stats(profile, windows, comm, exposed,
                       (collective_calls(_in_windows(calls, windows)), collective_calls(calls)),
                       calls["name"], on_gpu=False)


def launch_stats(profile: Profile, windows: StepWindows) -> LaunchStats | None:
    """Kernels per step, share of short kernels, launch delay and CPU runtime time per step."""
    kernels = _in_windows(profile.table("kernels"), windows)
    if kernels.empty:
        return None
    duration = kernels["end"] - kernels["start"]
    runtime = _in_windows(profile.table("runtime"), windows)
    launches = runtime[runtime["name"].isin(concepts.LAUNCH_APIS)]
    joined = kernels.merge(launches[["correlation", "start"]], on="correlation",
                           suffixes=("", "_call"))
    delay = joined["start"] - joined["start_call"]
    return LaunchStats(origin=profile.kind, kernels_per_step=len(kernels) / windows.count,
                       short_kernel_fraction=float((duration < SHORT_KERNEL_NS).mean()),
                       short_kernel_ns=SHORT_KERNEL_NS,
                       launch_delay_p50_ns=int(delay.median()) if len(delay) else None,
                       runtime_ns_per_step=int((runtime["end"] - runtime["start"]).sum())
                       // windows.count,
                       gpu_kernel_ns_per_step=int(duration.sum()) // windows.count)


def copy_stats(profile: Profile) -> CopyStats | None:
    """H2D volume (pageable vs pinned), tiny D2H copies, and synchronising API calls."""
    memcpy = profile.table("memcpy")
    runtime = profile.table("runtime")
    if memcpy.empty and runtime.empty:
        return None
    h2d = memcpy[(memcpy["kind"] == "HtoD")]
    known = h2d[h2d["bytes"] >= 0]
    d2h = memcpy[(memcpy["kind"] == "DtoH") & memcpy["bytes"].between(0, TINY_COPY_BYTES)]
    syncs = runtime[runtime["name"].isin(concepts.SYNC_APIS)]
    return CopyStats(origin=profile.kind, h2d_bytes=int(known["bytes"].sum()),
                     h2d_ns=int((h2d["end"] - h2d["start"]).sum()),
                     h2d_pageable_bytes=int(known.loc[known["src_kind"] == "Pageable",
                                                      "bytes"].sum()),
                     h2d_pinned_bytes=int(known.loc[known["src_kind"] == "Pinned",
                                                    "bytes"].sum()),
                     tiny_d2h_count=len(d2h),
                     sync_api_ns=int((syncs["end"] - syncs["start"]).sum()),
                     sync_api_calls=len(syncs))


def outer_calls(frame: pd.DataFrame, key: str) -> pd.Series:
    """Whether each row starts outside every earlier same-``key`` row, aligned with ``frame``: a
    call re-entered under a same-name call (``aten::conv2d`` under autocast) is no new call."""
    ordered = frame.sort_values([key, "start"], kind="stable")
    reach = ordered.groupby(key, sort=False)["end"].cummax()
    before = reach.groupby(ordered[key], sort=False).shift()
    return (before.isna() | (ordered["start"] >= before)).reindex(frame.index)


def _nesting_depth(starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> np.ndarray:
    """How many spans of the same thread are open when each span starts (spans sorted by thread,
    start, longest first): a sweep over start (+1) and end (-1) events, ends first on ties."""
    n = len(starts)
    times = np.concatenate([starts, ends])
    is_start = np.concatenate([np.ones(n, dtype=bool), np.zeros(n, dtype=bool)])
    rank = np.concatenate([np.arange(n), np.arange(n)])
    events = np.lexsort((rank, is_start, times, np.concatenate([threads, threads])))
    open_after = np.cumsum(np.where(is_start[events], 1, -1))
    depth = np.empty(n, dtype=np.int64)
    starting = is_start[events]
    depth[rank[events][starting]] = open_after[starting] - 1
    return depth


def _parents(depth: np.ndarray) -> np.ndarray:
    """Index of each span's direct parent (-1 for none): the nearest earlier span one level up,
    found with one searchsorted per nesting level (levels are few, spans many)."""
    parent = np.full(len(depth), -1, dtype=np.int64)
    for level in range(1, int(depth.max(initial=0)) + 1):
        above, here = np.flatnonzero(depth == level - 1), np.flatnonzero(depth == level)
        k = np.searchsorted(above, here) - 1
        parent[here] = np.where(k >= 0, above[np.maximum(k, 0)], -1)
    return parent


def self_time_ns(ops: pd.DataFrame) -> np.ndarray:
    """Each op's self (exclusive) time: its duration minus the part of it its direct children on
    the same thread cover, aligned with ``ops``' rows. Vectorised: nesting depth from a sweep over
    start/end events, parents by depth level. A child that overruns its parent's end (trace
    rounding) only takes its overlap; self time never goes below zero."""
    if ops.empty:
        return np.empty(0, dtype=np.int64)
    start = ops["start"].to_numpy(np.int64)
    end = np.maximum(ops["end"].to_numpy(np.int64), start)
    thread = ops.groupby(["pid", "tid"], sort=False).ngroup().to_numpy(np.int64)
    order = np.lexsort((-end, start, thread))
    s, e = start[order], end[order]
    parent = _parents(_nesting_depth(s, e, thread[order]))
    child = parent >= 0
    covered = np.clip(np.minimum(e[child], e[parent[child]]) - s[child], 0, None)
    children_ns = np.bincount(parent[child], weights=covered, minlength=len(s)).astype(np.int64)
    own = np.empty(len(s), dtype=np.int64)
    own[order] = np.maximum(e - s - children_ns, 0)
    return own


def _ranked(spans: pd.DataFrame, key: str, limit: int, total_ns: int,
            exclusive: bool) -> list[TopItem]:
    """The ``limit`` names with the most ``ns`` (calls: the ``outer`` rows), with their share of
    ``total_ns``."""
    if spans.empty:
        return []
    grouped = (spans.groupby(key, sort=False).agg(sum=("ns", "sum"), count=("outer", "sum"))
               .sort_values(["sum", "count"], ascending=False).head(limit))
    return [TopItem(name=str(name), total_ns=int(row["sum"]), count=int(row["count"]),
                    share=float(row["sum"]) / max(total_ns, 1), exclusive=exclusive)
            for name, row in grouped.iterrows()]


def top_items(frame: pd.DataFrame, key: str, limit: int, total_ns: int) -> list[TopItem]:
    """The ``limit`` names with the most summed duration (kernels: they do not nest)."""
    return _ranked(frame.assign(ns=frame["end"] - frame["start"], outer=True), key, limit,
                   total_ns, exclusive=False)


def top_kernels(profile: Profile) -> list[TopItem]:
    """Kernels by total GPU time (grouped by full name), share of all kernel time."""
    kernels = profile.table("kernels")
    return top_items(kernels, "name", TOP_KERNELS, int((kernels["end"] - kernels["start"]).sum()))


def _op_self_times(profile: Profile, windows: StepWindows | None) -> pd.DataFrame:
    """Framework ops (not steps, DataLoader waits or collectives) with their self time ``ns``
    and ``outer`` (a call not re-entered under a same-name call), inside the step windows' span
    when there are steps. Nesting is worked out over all CPU ops, so a step or DataLoader span
    still owns the time between its children."""
    ops = profile.table("cpu_ops")
    framework = _cpu_ops_matching(profile, None)
    if framework.empty:
        return framework.assign(ns=pd.Series(dtype="int64"), outer=pd.Series(dtype=bool))
    spans = ops.assign(ns=self_time_ns(ops)).loc[framework.index]
    spans = spans.assign(outer=outer_calls(spans, "name"))
    return _in_windows(spans, windows) if windows is not None else spans


def top_ops(profile: Profile, windows: StepWindows | None) -> list[TopItem]:
    """CPU ops by self time (duration minus direct children), so a chain of wrappers
    (``autograd::engine::evaluate_function: ConvolutionBackward0`` > ``ConvolutionBackward0`` >
    ``aten::convolution_backward``) is counted once, where the work is done. ``share`` is the
    self time over the summed step windows (first to last op without steps); ops on several
    threads (autograd's device threads, workers) run beside each other, so shares of different
    threads can add up to more than 1."""
    spans = _op_self_times(profile, windows)
    if spans.empty:
        return []
    total = windows.total_ns if windows else int(spans["end"].max() - spans["start"].min())
    return _ranked(spans, "name", TOP_OPS, total, exclusive=True)


def cpu_op_mix(profile: Profile, windows: StepWindows) -> CpuOpMix | None:
    """CPU-only runs: share of framework-op self time in ATen's slow reference kernels and in
    oneDNN (mkldnn) ops."""
    spans = _op_self_times(profile, windows)
    total = int(spans["ns"].sum()) if not spans.empty else 0
    if total <= 0:
        return None
    slow = spans[concepts.is_slow_fallback_op(spans["name"]).to_numpy()]
    onednn = spans[concepts.is_onednn_op(spans["name"]).to_numpy()]
    by_name = slow.groupby("name")["ns"].sum().sort_values(ascending=False)
    return CpuOpMix(origin=profile.kind, op_self_ns=total,
                    slow_fallback_fraction=float(slow["ns"].sum()) / total,
                    onednn_fraction=float(onednn["ns"].sum()) / total,
                    slow_fallback_ops=[str(name) for name in by_name.index])


def _launched_in(profile: Profile, spans: iv.Intervals) -> pd.DataFrame:
    """Kernels whose launch call started inside ``spans`` (joined on the correlation id)."""
    runtime = profile.table("runtime")
    launches = runtime[runtime["name"].isin(concepts.LAUNCH_APIS)]
    at = launches["start"].to_numpy(np.int64)
    inside = iv.overlap_per_window(spans, at, at + 1) > 0
    return profile.table("kernels").merge(launches.loc[inside, ["correlation"]], on="correlation")


def _optimizer_spans(profile: Profile) -> pd.DataFrame:
    """Optimizer-step spans among the CPU ops and annotated ranges."""
    frames = [table[concepts.is_optimizer_step_span(table["name"]).to_numpy()]
              for table in (profile.table("cpu_ops"), profile.table("ranges"))]
    return pd.concat([f[["start", "end", "name"]] for f in frames], ignore_index=True)


def kernel_mix(profile: Profile, windows: StepWindows | None) -> KernelMix | None:
    """Precision, layout conversions, elementwise share and optimizer kernels of the compute
    kernels (communication kernels left out)."""
    kernels = _kernels(profile, False)
    duration = (kernels["end"] - kernels["start"]).to_numpy(np.int64)
    total = int(duration.sum())
    if total <= 0:
        return None
    names = kernels["name"]

    def share(mask: pd.Series) -> float:
        """Share of compute-kernel time in the kernels ``mask`` selects."""
        return float(duration[mask.to_numpy()].sum()) / total

    spans = _optimizer_spans(profile)
    optimizer = iv.union_of([spans])
    in_optimizer = _launched_in(profile, optimizer) if len(optimizer) else kernels.iloc[:0]
    classes = [c for c in map(concepts.optimizer_class, spans["name"].unique()) if c]
    per_step = None
    if len(optimizer) and windows is not None:
        per_step = len(_in_windows(in_optimizer, windows)) / windows.count
    fused_pool = in_optimizer if not in_optimizer.empty else kernels
    return KernelMix(
        origin=profile.kind, compute_kernel_ns=total,
        reduced_precision_fraction=share(concepts.is_reduced_precision_kernel(names)),
        layout_conversion_fraction=share(concepts.is_layout_conversion_kernel(names)),
        elementwise_fraction=share(names.astype("string").str.contains(
            _ELEMENTWISE_KERNEL, regex=True).fillna(False).astype(bool)),
        optimizer_kernels_per_step=per_step,
        fused_optimizer=bool(concepts.is_fused_optimizer_kernel(fused_pool["name"]).any()),
        optimizer_name=classes[0] if classes else None)


def _line_item(row: pd.Series) -> LineItem:
    """One line_profiler row as a LineItem."""
    return LineItem(file=str(row["file"]), function=str(row["function"]),
                    lineno=int(row["lineno"]), hits=int(row["hits"]), time_ns=int(row["time_ns"]),
                    time_per_hit_ns=int(row["time_per_hit_ns"]),
                    share=float(row["function_share"]),
                    source=None if pd.isna(row["source"]) else str(row["source"]),
                    is_dataloader_loop=bool(row["is_dataloader_loop"]))


def top_lines(lines: pd.DataFrame) -> list[LineItem]:
    """The lines with the most time, most first."""
    ordered = lines.sort_values(["time_ns", "file", "lineno"], ascending=[False, True, True])
    return [_line_item(row) for _, row in ordered.head(TOP_LINES).iterrows()]


def function_listings(lines: pd.DataFrame) -> list[FunctionListing]:
    """Every profiled function with all its lines in order, slowest function first."""
    listings = []
    for (file, function), part in lines.groupby(["file", "function"], sort=True):
        part = part.sort_values("lineno")
        listings.append(FunctionListing(
            file=str(file), function=str(function), first_lineno=int(part["lineno"].iloc[0]),
            total_ns=int(part["time_ns"].sum()),
            lines=[_line_item(row) for _, row in part.iterrows()]))
    return sorted(listings, key=lambda item: (-item.total_ns, item.file, item.function))


def dataparallel_ops(profile: Profile) -> dict[str, int]:
    """Counts of nn.DataParallel's own ops among the CPU ops and annotated ranges."""
    names = pd.concat([profile.table("cpu_ops")["name"], profile.table("ranges")["name"]])
    names = names.astype("string")
    hits = names[names.str.contains(_DATAPARALLEL_OP, regex=True).fillna(False).astype(bool)]
    return {str(name): int(count) for name, count in hits.value_counts().sort_index().items()}


def max_devices_per_process(profile: Profile) -> int:
    """Most GPUs whose kernels one process launched (kernels joined to runtime calls)."""
    kernels = profile.table("kernels")
    launched = kernels[["correlation", "device"]].merge(
        profile.table("runtime")[["correlation", "pid"]], on="correlation")
    if launched.empty:
        return int(kernels["device"].nunique())
    return int(launched.groupby("pid")["device"].nunique().max())


def manifest_trials(manifest: Manifest) -> Trials | None:
    """The runner's trial throughputs (loader alone, model alone, real loop), when it ran them."""
    trials = {name: float(value) for name, value in manifest.trials.items()
              if isinstance(value, (int, float)) and value > 0}
    if not trials:
        return None
    return Trials(io=trials.get("io"), synthetic=trials.get("synthetic"), full=trials.get("full"))


def _preference(profile: Profile) -> tuple[int, int, int]:
    """Sort key for step statistics: profiles with GPU events first, nsys before Kineto, lowest
    rank first."""
    return (0 if has_gpu_events(profile) else 1, 0 if profile.kind == "nsys" else 1,
            profile.rank if profile.rank is not None else 0)


#: Levels of :func:`attribution_level`: what a source can say about where step time goes.
ATTRIBUTES_GPU, ATTRIBUTES_CPU_OPS, RANGES_ONLY = 0, 1, 2
_OPS_ORIGIN_ORDER = {"kineto": 0, "nsys": 1, "lprof": 2}


def attribution_level(profile: Profile) -> int:
    """How well a profile can attribute step time: GPU events (kernels, copies), else framework
    ops on the CPU (forward/backward/optimizer), else only ranges (steps, DataLoader waits)."""
    if has_gpu_events(profile):
        return ATTRIBUTES_GPU
    return ATTRIBUTES_CPU_OPS if not _cpu_ops_matching(profile, None).empty else RANGES_ONLY


def _attribution_key(timed: tuple[Profile, StepWindows]) -> tuple[int, int, int]:
    """Sort key for the breakdown's source: best attribution, then nsys first, lowest rank."""
    return (attribution_level(timed[0]),) + _preference(timed[0])[1:]


def _timed(profiles: list[Profile]) -> list[tuple[Profile, StepWindows]]:
    """Profiles with steps (not line_profiler), preferred step source first, with their windows."""
    ordered = sorted(profiles, key=_preference)
    return [(p, w) for p in ordered if p.kind != "lprof" and (w := step_windows(p)) is not None]


def primary_timed(profiles: list[Profile]) -> list[tuple[Profile, StepWindows]]:
    """Profiles with steps of the run's primary rank, preferred step source first."""
    timed = _timed(profiles)
    primary_rank = min((p.rank for p, _ in timed if p.rank is not None), default=None)
    return [(p, w) for p, w in timed if p.rank in (primary_rank, None)]


def per_rank_step_ms(profiles: list[Profile]) -> dict[int, float]:
    """Mean annotated step time of every rank, in ms, from each rank's preferred step source."""
    out: dict[int, float] = {}
    for profile, windows in _timed(profiles):
        if profile.rank is not None:
            out.setdefault(int(profile.rank), float(step_stats(windows).mean_ns) / 1e6)
    return dict(sorted(out.items()))


def _lines_of(profiles: list[Profile]) -> pd.DataFrame:
    """The line_profiler lines of every lprof profile, in one table."""
    tables = [p.table("lines") for p in profiles if p.kind == "lprof" and p.has("lines")]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def compute_run_metrics(profiles: list[Profile], manifest: Manifest | None = None) -> RunMetrics:
    """Every metric of one run from all its profiles (and its manifest, when there is one)."""
    metrics = RunMetrics()
    timed = primary_timed(profiles)
    lines = _lines_of(profiles)
    _add_step_metrics(metrics, timed)
    _add_lprof_metrics(metrics, lines)
    _add_attributed_metrics(metrics, timed, lines)
    metrics.per_rank_step_ms = per_rank_step_ms(profiles)
    ordered = sorted(profiles, key=_preference)
    gpu_profile = next((p for p in ordered if has_gpu_events(p)), None)
    if gpu_profile is not None:
        metrics.top_kernels = top_kernels(gpu_profile)
        metrics.kernel_mix = kernel_mix(gpu_profile, _windows_of(gpu_profile, timed))
        metrics.copies = copy_stats(gpu_profile)
        metrics.max_devices_per_process = max_devices_per_process(gpu_profile)
        if metrics.gpu is None:
            metrics.gpu = gpu_utilization(gpu_profile, None)
    for profile in ordered:
        for name, count in dataparallel_ops(profile).items():
            metrics.dataparallel_ops[name] = metrics.dataparallel_ops.get(name, 0) + count
    if manifest is not None:
        metrics.throughput_samples_per_s = manifest.throughput_samples_per_s
        metrics.plain_step_ns = list(manifest.plain_step_ns)
        metrics.trials = manifest_trials(manifest)
    return metrics


def _windows_of(profile: Profile, timed: list[tuple[Profile, StepWindows]]) -> StepWindows | None:
    """The step windows of ``profile`` when it is among the timed profiles."""
    return next((w for p, w in timed if p is profile), None)


def _add_step_metrics(metrics: RunMetrics, timed: list[tuple[Profile, StepWindows]]) -> None:
    """Step statistics and the DataLoader share from every ranged profile; CPU ops to list."""
    for profile, windows in timed:
        metrics.steps_by_origin.append(step_stats(windows))
        metrics.dataloader_fraction_by_origin.setdefault(
            profile.kind, dataloader_fraction(profile, windows))
    if timed:
        metrics.steps = metrics.steps_by_origin[0]
    with_ops = [(p, w) for p, w in timed if attribution_level(p) <= ATTRIBUTES_CPU_OPS]
    if with_ops:
        ops_profile, ops_windows = min(with_ops, key=lambda pw: _OPS_ORIGIN_ORDER[pw[0].kind])
        metrics.top_ops = top_ops(ops_profile, ops_windows)
        metrics.top_ops_origin = ops_profile.kind if metrics.top_ops else None


def _add_attributed_metrics(metrics: RunMetrics, timed: list[tuple[Profile, StepWindows]],
                            lines: pd.DataFrame) -> None:
    """Breakdown, DataLoader share, CPU phases, communication, GPU and launch metrics, from the
    source that can attribute step time best (see the module docstring)."""
    best = min(timed, key=_attribution_key, default=None)
    lprof_steps = lprof_step_stats(lines) if not lines.empty else None
    if lprof_steps is not None and (best is None or attribution_level(best[0]) == RANGES_ONLY):
        # NVTX-only ranges still time the DataLoader well; the lines split the rest.
        metrics.breakdown = lprof_breakdown(lines, lprof_steps)
        metrics.dataloader_fraction = metrics.dataloader_fraction_by_origin[
            best[0].kind if best is not None else "lprof"]
        return
    if best is None:
        return
    profile, windows = best
    metrics.dataloader_fraction = metrics.dataloader_fraction_by_origin[profile.kind]
    if has_gpu_events(profile):
        metrics.gpu = gpu_utilization(profile, windows)
        metrics.breakdown = gpu_breakdown(profile, windows)
        metrics.comm = gpu_comm_stats(profile, windows)
        metrics.launch = launch_stats(profile, windows)
        return
    metrics.breakdown = cpu_breakdown(profile, windows)
    metrics.comm = cpu_comm_stats(profile, windows)
    if attribution_level(profile) == ATTRIBUTES_CPU_OPS:
        metrics.cpu_phases = cpu_phases(profile, windows)
        metrics.cpu_op_mix = cpu_op_mix(profile, windows)


def _add_lprof_metrics(metrics: RunMetrics, lines: pd.DataFrame) -> None:
    """Lines, listings, line_profiler's step and DataLoader figures; its steps stand in when no
    profiler timed the steps."""
    if lines.empty:
        return
    metrics.lines = top_lines(lines)
    metrics.listings = function_listings(lines)
    steps = lprof_step_stats(lines)
    fraction = lprof_dataloader_fraction(lines)
    if steps is not None:
        metrics.steps_by_origin.append(steps)
        if metrics.steps is None:
            metrics.steps = steps
    if fraction is not None:
        metrics.dataloader_fraction_by_origin["lprof"] = fraction
