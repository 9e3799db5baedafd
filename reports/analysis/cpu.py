"""CPU-side metrics: framework ops, their self times, the top ops and the ops' implementation.

Which CPU op is which (framework op, optimizer, backward, DataParallel) is decided in
:mod:`profreport.concepts`; this module only measures.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profreport import concepts
from profreport.model import Profile, narrowest_int
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.kept import classified, table_name_codes
from profreport.reports.analysis.results import CpuOpMix, TopItem
from profreport.reports.analysis.steps import StepWindows, in_windows
from profreport.reports.analysis.top import TOP_OPS, ranked


def _is_framework_op(profile: Profile) -> np.ndarray:
    """Which CPU ops are the framework's own work (not steps, DataLoader waits, collectives)."""
    return concepts.is_framework_op(profile.table("cpu_ops")["name"]).to_numpy()


def framework_ops(profile: Profile) -> pd.DataFrame:
    """CPU ops that are the framework's own work (not steps, DataLoader waits, collectives)."""
    return profile.table("cpu_ops")[_is_framework_op(profile)]


#: The tables of spans on the CPU: framework ops and annotated ranges (NVTX, user annotations).
SPAN_TABLES = ("cpu_ops", "ranges")


def spans_where(profile: Profile, classify) -> pd.DataFrame:
    """Start and end of the CPU ops and annotated ranges that ``classify`` (a concepts
    predicate) selects: Kineto records ``Optimizer.step#...`` as a user annotation, i.e. a range,
    not a ``cpu_op``."""
    frames = [profile.table(table)[classified(profile, table, classify)]
              for table in SPAN_TABLES]
    return pd.concat([f[["start", "end", "name"]] for f in frames], ignore_index=True)


def outer_calls(frame: pd.DataFrame, key: str) -> pd.Series:
    """Whether each row starts outside every earlier same-``key`` row, aligned with ``frame``: a
    call re-entered under a same-name call (``aten::conv2d`` under autocast) is no new call.

    Rows are ordered by key code and start (integer sorts, not string sorts); within a key,
    a row is outer when it starts at or after the latest end of the rows before it."""
    codes = pd.factorize(frame[key])[0]
    start, end = frame["start"].to_numpy(), frame["end"].to_numpy()
    order = np.lexsort((start, codes))
    code = codes[order]
    first = np.r_[True, code[1:] != code[:-1]] if len(code) else np.empty(0, dtype=bool)
    reach = pd.Series(end[order]).groupby(np.cumsum(first), sort=False).cummax().to_numpy()
    outer = first | (start[order] >= np.r_[reach[:1], reach[:-1]]) | (code < 0)
    out = np.empty(len(order), dtype=bool)
    out[order] = outer
    return pd.Series(out, index=frame.index)


def _nesting_depth(starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> np.ndarray:
    """How many spans of the same thread are open when each span starts (spans sorted by thread,
    start, longest first): a sweep over start (+1) and end (-1) events, ends first on ties.
    Positions and counts in int32 and the steps in int8: millions of operators make the sweep's
    arrays twice as long as the operators."""
    n = len(starts)
    position = np.int32 if 2 * n < np.iinfo(np.int32).max else np.int64
    rank = np.tile(np.arange(n, dtype=position), 2)
    is_start = np.repeat(np.array([True, False]), n)
    events = np.lexsort((rank, is_start, np.concatenate([starts, ends]), np.tile(threads, 2)))
    starting = is_start[events]
    del is_start
    open_after = np.cumsum(starting.astype(np.int8) * np.int8(2) - np.int8(1), dtype=position)
    depth = np.empty(n, dtype=position)
    depth[rank[events][starting]] = open_after[starting] - 1
    return depth


def _parents(depth: np.ndarray) -> np.ndarray:
    """Index of each span's direct parent (-1 for none): the nearest earlier span one level up,
    found with one searchsorted per nesting level (levels are few, spans many)."""
    parent = np.full(len(depth), -1, dtype=depth.dtype)
    for level in range(1, int(depth.max(initial=0)) + 1):
        above, here = np.flatnonzero(depth == level - 1), np.flatnonzero(depth == level)
        k = np.searchsorted(above, here) - 1
        parent[here] = np.where(k >= 0, above[np.maximum(k, 0)], -1)
    return parent


def self_time_ns(ops: pd.DataFrame, covering: iv.Intervals | None = None) -> np.ndarray:
    """Each op's self (exclusive) time: its duration minus the part of it its direct children on
    the same thread cover, aligned with ``ops``' rows; with ``covering``, only the self time
    that lies inside those intervals. Vectorised: nesting depth from a sweep over start/end
    events, parents by depth level. A child that overruns its parent's end (trace rounding) only
    takes its overlap; self time never goes below zero."""
    if ops.empty:
        return np.empty(0, dtype=np.int64)
    start = ops["start"].to_numpy(np.int64)
    end = np.maximum(ops["end"].to_numpy(np.int64), start)
    thread = ops.groupby(["pid", "tid"], sort=False).ngroup().to_numpy()
    thread = thread.astype(narrowest_int(thread), copy=False)
    order = np.lexsort((-end, start, thread))
    s, e, threads = start[order], end[order], thread[order]
    del end, thread  # only the sorted copies are read from here on
    order = order.astype(narrowest_int(np.array([len(order)])), copy=False)
    parent = _parents(_nesting_depth(s, e, threads))
    del threads
    child = parent >= 0
    child_end = np.maximum(np.minimum(e[child], e[parent[child]]), s[child])
    if covering is None:
        length, covered = e - s, child_end - s[child]
    else:
        length = iv.overlap_per_window(covering, s, e)
        covered = iv.overlap_per_window(covering, s[child], child_end)
    children_ns = np.bincount(parent[child], weights=covered, minlength=len(s)).astype(np.int64)
    own = np.empty(len(s), dtype=np.int64)
    own[order] = np.maximum(length - children_ns, 0)
    return own


def op_self_times(profile: Profile, windows: StepWindows | None) -> pd.DataFrame:
    """Framework ops with their self time ``ns`` and ``outer`` (a call not re-entered under a
    same-name call), inside the step windows' span when there are steps. Nesting is worked out
    over all CPU ops, so a step or DataLoader span still owns the time between its children."""
    ops = profile.table("cpu_ops")
    framework = _is_framework_op(profile)
    spans = ops[framework]  # the one copy made: the framework ops' rows, given two columns
    if spans.empty:
        return spans.assign(ns=pd.Series(dtype="int64"), outer=pd.Series(dtype=bool))
    spans["ns"] = self_time_ns(ops)[framework]
    spans["outer"] = outer_calls(spans, "name")
    return in_windows(spans, windows) if windows is not None else spans


def top_ops(profile: Profile, windows: StepWindows | None) -> list[TopItem]:
    """CPU ops by self time (duration minus direct children), so a chain of wrappers
    (``autograd::engine::evaluate_function: ConvolutionBackward0`` > ``ConvolutionBackward0`` >
    ``aten::convolution_backward``) is counted once, where the work is done. ``share`` is the
    self time over the summed step windows (first to last op without steps); ops on several
    threads (autograd's device threads, workers) run beside each other, so shares of different
    threads can add up to more than 1."""
    spans = op_self_times(profile, windows)
    if spans.empty:
        return []
    total = windows.total_ns if windows else int(spans["end"].max() - spans["start"].min())
    return ranked(spans, "name", TOP_OPS, total, exclusive=True)


def cpu_op_mix(profile: Profile, windows: StepWindows) -> CpuOpMix | None:
    """CPU-only runs: share of framework-op self time in ATen's slow reference kernels and in
    oneDNN (mkldnn) ops."""
    spans = op_self_times(profile, windows)
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


def dataparallel_ops(profile: Profile) -> dict[str, int]:
    """Counts of nn.DataParallel's forward and its autograd functions among the CPU ops and
    annotated ranges."""
    counts: dict[str, int] = {}
    for table in SPAN_TABLES:
        codes, distinct = table_name_codes(profile, table)
        chosen = (concepts.is_dataparallel_op(distinct)
                  | concepts.is_dataparallel_forward(distinct)).to_numpy(bool)
        if not chosen.any():
            continue
        found = np.bincount(codes[codes >= 0], minlength=len(distinct))
        for name, count in zip(distinct[chosen], found[chosen], strict=True):
            if count:
                counts[str(name)] = counts.get(str(name), 0) + int(count)
    return dict(sorted(counts.items()))


def ddp_forward_calls(profile: Profile) -> int:
    """How many DistributedDataParallel forward spans the profile holds."""
    return sum(int(classified(profile, table, concepts.is_ddp_forward).sum())
               for table in SPAN_TABLES)
