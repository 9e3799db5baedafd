"""CPU-side metrics: framework ops, their self times, the top ops and the ops' implementation.

Which CPU op is which (framework op, optimizer, backward, DataParallel) is decided in
:mod:`profreport.concepts`; this module only measures.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy as np
import pandas as pd

from profreport import concepts, searches
from profreport.allocator import giving_back_memory
from profreport.model import (
    Profile,
    narrowest_int,
    position_dtype,
    profiled_span,
    sorted_times,
)
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.kept import classified, table_name_codes
from profreport.reports.analysis.ops import outermost
from profreport.reports.analysis.results import CpuOpMix, TopItem
from profreport.reports.analysis.steps import StepWindows, compile_intervals, starts_in_windows
from profreport.reports.analysis.top import TOP_OPS, ranked


def _is_framework_op(profile: Profile) -> np.ndarray:
    """Which CPU ops are the framework's own work (not steps, DataLoader waits, collectives),
    asked once per distinct name."""
    return classified(profile, "cpu_ops", concepts.is_framework_op)


def framework_ops(profile: Profile) -> pd.DataFrame:
    """CPU ops that are the framework's own work (not steps, DataLoader waits, collectives)."""
    return profile.table("cpu_ops")[_is_framework_op(profile)]


def off_collectives(profile: Profile, spans: pd.DataFrame) -> iv.Intervals:
    """The time ``spans`` (CPU rows with their pid and tid) cover outside the collective calls
    of their own thread: a thread inside ``c10d::allreduce_`` is in the collective, not in the
    op that holds the call (DDP's gradient hook runs inside autograd's AccumulateGrad), while
    another thread's ops beside it are work the collective overlaps."""
    calls = profile.table("cpu_collectives")
    starts, ends = spans["start"].to_numpy(np.int64), spans["end"].to_numpy(np.int64)
    pids, tids = spans["pid"].to_numpy(), spans["tid"].to_numpy()
    held = np.zeros(len(spans), bool)
    kept = []
    # Masks over the spans' columns, read in place: no copy of a table of every operator.
    for (pid, tid), inside in calls.groupby(["pid", "tid"], sort=False):
        on_thread = (pids == pid) & (tids == tid)
        held |= on_thread
        kept.append(iv.subtract(iv.union(starts, ends, on_thread), iv.union_of([inside])))
    return functools.reduce(iv.merge, kept, iv.union(starts, ends, ~held))


def framework_time(profile: Profile) -> iv.Intervals:
    """When a framework op runs on some thread, outside its thread's collective calls (see
    :func:`off_collectives`)."""
    return off_collectives(profile, framework_ops(profile))


#: The tables of spans on the CPU: framework ops and annotated ranges (NVTX, user annotations).
SPAN_TABLES = ("cpu_ops", "ranges")


def spans_where(profile: Profile, classify) -> pd.DataFrame:
    """Start, end, thread and name of the CPU ops and annotated ranges that ``classify`` (a
    concepts predicate) selects: Kineto records ``Optimizer.step#...`` as a user annotation, i.e.
    a range, not a ``cpu_op``."""
    frames = [profile.table(table)[classified(profile, table, classify)]
              for table in SPAN_TABLES]
    return pd.concat([f[["start", "end", "pid", "tid", "name"]] for f in frames],
                     ignore_index=True)


def outer_calls(frame: pd.DataFrame, key: str) -> pd.Series:
    """Whether each row starts outside every earlier same-``key`` row, aligned with ``frame``: a
    call re-entered under a same-name call (``aten::conv2d`` under autocast) is no new call."""
    return pd.Series(_outer(concepts.name_codes(frame[key])[0], frame["start"].to_numpy(),
                            frame["end"].to_numpy()), index=frame.index)


def _outer(codes: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """:func:`outer_calls` of rows given as their key codes (-1: none), starts and ends.

    Rows are ordered by key code and start (integer sorts, not string sorts); within a key,
    a row is outer when it starts at or after the latest end of the rows before it. The latest
    end is a running maximum over each key's rows, a key at a time: names are hundreds, rows
    millions, and a grouped running maximum held ~40 bytes a row."""
    order = np.lexsort((start, codes))
    code = codes[order]
    bounds = np.flatnonzero(np.r_[True, code[1:] != code[:-1], True]) if len(code) else [0]
    outer = np.ones(len(order), dtype=bool)  # a key's first row, and rows without a key
    for first, stop in zip(bounds[:-1], bounds[1:], strict=True):
        if stop - first > 1 and code[first] >= 0:
            rows = order[first:stop]
            reach = np.maximum.accumulate(end[rows])
            outer[first + 1:stop] = start[rows[1:]] >= reach[:-1]
    out = np.empty(len(order), dtype=bool)
    out[order] = outer
    return out


#: Spans handled at a time once sorted: their temporaries stay a few MB whatever the op count.
SPAN_BLOCK_ROWS = 1 << 16


def _nesting_depth(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many spans of one thread are open when each span starts (spans sorted by start,
    longest first; a span ending when another starts is closed by then): the spans sorted
    before it less those that ended by its start, counted with a sorted copy of the ends (no
    sweep over twice as many start/end events)."""
    depth = np.empty(len(starts), dtype=position_dtype(len(starts)))
    ended = sorted_times(ends)
    for block in iv.blocks(len(starts), SPAN_BLOCK_ROWS):
        depth[block] = np.arange(block.start, block.stop)
        depth[block] -= searches.searchsorted(ended, starts[block], side="right")
    return depth


def _parents(depth: np.ndarray) -> np.ndarray:
    """Index of each span's direct parent (-1 for none): the nearest earlier span one level up,
    found with one searchsorted per nesting level (levels are few, spans many)."""
    parent = np.full(len(depth), -1, dtype=depth.dtype)
    for level in range(1, int(depth.max(initial=0)) + 1):
        above = np.flatnonzero(depth == level - 1)
        for block in iv.blocks(len(depth), SPAN_BLOCK_ROWS):
            here = np.flatnonzero(depth[block] == level) + block.start
            k = searches.searchsorted(above, here) - 1
            parent[here] = np.where(k >= 0, above[np.maximum(k, 0)], -1)
    return parent


@giving_back_memory
def self_time_ns(ops: pd.DataFrame, covering: iv.Intervals | None = None) -> np.ndarray:
    """Each op's self (exclusive) time: its duration minus the part of it its direct children on
    the same thread cover, aligned with ``ops``' rows; with ``covering``, only the self time
    that lies inside those intervals. The ops are sorted by thread, start and longest first
    once, then each thread's are worked out alone (:func:`_thread_self_times`), so the arrays
    held at once are one thread's. A child that overruns its parent's end (trace rounding) only
    takes its overlap; self time never goes below zero."""
    if ops.empty:
        return np.empty(0, dtype=np.int64)
    start, end = ops["start"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
    pid, tid = _in_order_of_ids(ops["pid"]), _in_order_of_ids(ops["tid"])
    longest_first = np.maximum(end, start)
    np.negative(longest_first, out=longest_first)
    order = np.lexsort((longest_first, start, tid, pid))
    del longest_first
    pid, tid = pid[order], tid[order]
    threads = np.flatnonzero(np.r_[True, (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1]), True])
    del pid, tid
    order = order.astype(narrowest_int(np.array([len(order)])), copy=False)
    out = np.empty(len(order), dtype=np.int64)
    for first, stop in zip(threads[:-1], threads[1:], strict=True):
        for rows in _closed_parts(start, end, order[first:stop]):
            s = start[rows]
            out[rows] = _thread_self_times(s, np.maximum(end[rows], s), covering)
    return out


#: Spans of one thread worked out together at least (:func:`_closed_parts`): the temporaries
#: of a part are ~40 bytes a span, where one thread's 3.9 M operators (a 2 GB trace) held 140 MB.
SELF_TIME_PART_ROWS = 1 << 18


def _closed_parts(start: np.ndarray, end: np.ndarray, rows: np.ndarray) -> Iterator[np.ndarray]:
    """One thread's spans (``rows``, sorted by start) in consecutive parts of at least
    :data:`SELF_TIME_PART_ROWS` spans (the last one may be shorter) that no span crosses: a part
    starts where every span before it has ended, so no span's parent or children lie in
    another part and each part's self times are those of the whole thread."""
    taken, reached = 0, np.iinfo(np.int64).min  # the latest end of the spans before the block
    for block in iv.blocks(len(rows), SPAN_BLOCK_ROWS):
        s = start[rows[block]]
        reach = np.maximum.accumulate(np.maximum(end[rows[block]], s))
        np.maximum(reach, reached, out=reach)
        # A part may start at a span that starts once everything before it has ended.
        cuts = np.flatnonzero(np.r_[reached <= s[0], reach[:-1] <= s[1:]]) + block.start
        reached = int(reach[-1])
        while len(cuts) and cuts[-1] - taken >= SELF_TIME_PART_ROWS:
            cut = int(cuts[searches.searchsorted(cuts, taken + SELF_TIME_PART_ROWS)])
            yield rows[taken:cut]
            taken = cut
    if taken < len(rows):
        yield rows[taken:]


def _in_order_of_ids(column: pd.Series) -> np.ndarray:
    """Values that sort and compare as the ids of an id column do: the codes of a categorical of
    ids whose categories ascend (a byte a row, read in place, where its ids would be copied out
    at 4 or 8: 3.9 M operators of a 2 GB trace), else the ids themselves."""
    dtype = column.dtype
    if isinstance(dtype, pd.CategoricalDtype) and dtype.categories.is_monotonic_increasing:
        codes = column.cat.codes.to_numpy()
        if not len(codes) or codes.min() >= 0:
            return codes
    return column.to_numpy()


def _thread_self_times(s: np.ndarray, e: np.ndarray, covering: iv.Intervals | None
                       ) -> np.ndarray:
    """:func:`self_time_ns` of one thread's spans sorted by start, longest first (``s`` and
    ``e`` are written over): nesting depth from the sorted ends, parents by depth level, then
    the children's time summed into their parents a block of spans at a time."""
    parent = _parents(_nesting_depth(s, e))
    if covering is not None:
        # Each time becomes the covered time before it: a span's length is then the part of it
        # inside ``covering``, and clipping a child to its parent still holds (covered time
        # never decreases, so it keeps every min and max).
        from_start, from_end = iv.Cursor(), iv.Cursor()  # each walk goes on block by block
        for block in iv.blocks(len(s), SPAN_BLOCK_ROWS):
            s[block] = iv.covered_before(covering, s[block], from_start)
            e[block] = iv.covered_before(covering, e[block], from_end)
    own = np.zeros(len(s), dtype=np.int64)  # the children's time, then the self time
    for block in iv.blocks(len(s), SPAN_BLOCK_ROWS):
        mine = parent[block]
        child = np.flatnonzero(mine >= 0) + block.start
        mine = mine[mine >= 0]
        child_start, child_end = s[child], np.minimum(e[child], e[mine])
        np.maximum(child_end, child_start, out=child_end)
        np.add.at(own, mine, child_end - child_start)
    del parent
    for block in iv.blocks(len(s), SPAN_BLOCK_ROWS):
        np.maximum(e[block] - s[block] - own[block], 0, out=own[block])
    return own


def op_self_times(profile: Profile, windows: StepWindows | None) -> pd.DataFrame:
    """Name, self time ``ns`` and ``outer`` (a call not re-entered under a same-name call) of
    the framework ops, those starting inside the step windows' span when there are steps, none
    of those torch.compile runs while it compiles (inside its compile spans: the compiler's
    work, not the model's). Nesting is worked out over all CPU ops, so a step or DataLoader
    span still owns the time between its children."""
    ops = profile.table("cpu_ops")
    framework = _is_framework_op(profile)
    compiling = compile_intervals(profile)
    if len(compiling):
        framework &= ~iv.inside(compiling, ops["start"].to_numpy(np.int64))
    ns = self_time_ns(ops)
    start, end = (ops[column].to_numpy() for column in ("start", "end"))
    # The calls are told apart among all the framework ops (the others' names left out), over
    # the table's own columns rather than copies of the framework ops' rows.
    outer = _outer(np.where(framework, table_name_codes(profile, "cpu_ops")[0], -1), start,
                   end)
    if windows is not None:
        framework &= starts_in_windows(start, windows)
    return pd.DataFrame({"name": ops["name"][framework].reset_index(drop=True),
                         "ns": ns[framework], "outer": outer[framework]}, copy=False)


def top_ops(profile: Profile, windows: StepWindows | None) -> list[TopItem]:
    """CPU ops by self time (duration minus direct children), so a chain of wrappers
    (``autograd::engine::evaluate_function: ConvolutionBackward0`` > ``ConvolutionBackward0`` >
    ``aten::convolution_backward``) is counted once, where the work is done. ``share`` is the
    self time over the summed step windows (the profiled span without steps: model.profiled_span,
    as the GPU's busy share is); ops on several threads (autograd's device threads, workers) run
    beside each other, so shares of different threads can add up to more than 1."""
    spans = op_self_times(profile, windows)
    if spans.empty:
        return []
    if windows is not None:
        total = windows.total_ns
    else:
        first, last = profiled_span(profile) or (0, 0)
        total = last - first
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


def compiled_regions(profiles: list[Profile]) -> int | None:
    """The most spans of torch.compile'd code (concepts.is_compiled_region) one of the profiles
    records among its operators and ranges; None when none records the framework's operators
    (NVTX ranges alone, line_profiler: compiled code leaves no span there to tell)."""
    telling = [p for p in profiles if p.has("cpu_ops")]
    if not telling:
        return None
    return max(sum(int(classified(p, table, concepts.is_compiled_region).sum())
                   for table in SPAN_TABLES) for p in telling)


def ddp_forward_calls(profile: Profile) -> int:
    """How many DistributedDataParallel forward spans the profile holds."""
    return sum(int(classified(profile, table, concepts.is_ddp_forward).sum())
               for table in SPAN_TABLES)


def zero_grad_fills_per_step(profile: Profile, windows: StepWindows | None) -> float | None:
    """Operators writing zeros into the gradients (``aten::zero_``, ``aten::_foreach_zero_``)
    that start inside ``optimizer.zero_grad()`` spans in the step windows, per step, each
    counted once (not the ``fill_`` its ``zero_`` runs); None without such spans or steps.
    ``set_to_none=True`` frees the gradients and runs none, on a CPU as on a GPU."""
    spans = iv.union_of([spans_where(profile, concepts.is_zero_grad_span)])
    if windows is None or not len(spans):
        return None
    ops = profile.table("cpu_ops")
    fills = ops[classified(profile, "cpu_ops", concepts.is_zero_fill_op)]
    starts = fills["start"].to_numpy(np.int64)
    fills = fills[iv.inside(spans, starts) & starts_in_windows(starts, windows)]
    return len(outermost(fills)) / windows.count
