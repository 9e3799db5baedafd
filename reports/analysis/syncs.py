"""Synchronisation stalls and what an idle GPU waits for, from the mechanisms in the trace.

A CPU blocked in a sync or a blocking copy waits *for* the GPU: that is a synchronisation stall,
not a host-bound run. A GPU waits for the CPU when the work that ends an idle gap was launched
during the gap (the correlation id ties the work to its launch call): nothing was queued.
Everything per step is measured inside the step windows; calls outside them (warm-up, the
teardown ``cudaDeviceSynchronize``) are reported apart.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from profreport import concepts, searches
from profreport.allocator import giving_back_memory
from profreport.concepts import name_codes
from profreport.model import Profile, sorted_times
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.cpu import SPAN_BLOCK_ROWS, self_time_ns
from profreport.reports.analysis.gpu import (
    has_gpu_events,
    step_devices,
    stream_free_by_block,
)
from profreport.reports.analysis.kept import classified, classified_rows, per_profile
from profreport.reports.analysis.launches import (
    GPU_TABLES,
    launched_by,
    may_be_launched_after,
    unlinked,
    unlinked_launched_by,
)
from profreport.reports.analysis.results import IdleCauses, SyncCall, SyncStats, TopItem
from profreport.reports.analysis.steps import StepWindows, dataloader_intervals
from profreport.reports.analysis.top import calls_by_name, ranked, top_items

#: Order in which an idle gap's cause is decided: the first that fits wins.
IDLE_CAUSES = ("data", "sync", "launch", "unexplained")
#: How many CPU ops are named as what the CPU did while the GPU waited for its launches.
LAUNCH_WAIT_OPS = 3


@per_profile
def blocking(profile: Profile) -> pd.DataFrame:
    """The profile's blocking calls (see ``concepts.blocking_calls``), judged among the calls
    that could be one (a sync or copy API by name, asked once per distinct name): each call is
    judged on its own, so the few candidates give the same rows as all 17 M calls."""
    candidates = classified_rows(profile, "runtime", concepts.may_block)
    return concepts.blocking_calls(profile.table("runtime"), profile.table("memcpy"),
                                   queued_ahead_of_copies(profile), candidates)


def queued_ahead_of_copies(profile: Profile) -> np.ndarray:
    """For each copy, when the work queued ahead of it on its device's stream had all ended
    (:func:`gpu.stream_free_by_block`; INT64 min for none), concepts.QUEUE_UNKNOWN where its
    stream is unrecorded (-1): one int64 a copy, filled a block at a time."""
    streams = profile.table("memcpy")["stream"].to_numpy()
    ahead = np.empty(len(streams), dtype=np.int64)
    for block, free in zip(iv.blocks(len(streams)), stream_free_by_block(profile, "memcpy"),
                           strict=True):
        ahead[block] = free
    ahead[streams < 0] = concepts.QUEUE_UNKNOWN
    return ahead


def queued_at(profile: Profile, times: np.ndarray) -> np.ndarray:
    """How many GPU operations (kernels, copies, memsets) were queued or running at each time:
    launched before it (the launch call joined by correlation id; one linked to none, where
    the latest it can have been launched is before it: launches.launched_by) and not yet
    finished."""
    order = np.argsort(times, kind="stable")
    asked = np.asarray(times, dtype=np.int64)[order]
    # The GPU rows launched before each asked time and those ended by it, counted a block of
    # rows at a time: each block's times sorted, then searched for the (fewer) asked times,
    # with no sorted copy of every row's times.
    launched = np.zeros(len(asked), dtype=np.int64)
    ended = np.zeros(len(asked), dtype=np.int64)
    for name in GPU_TABLES:
        end = profile.table(name)["end"].to_numpy(np.int64)
        for block in iv.blocks(len(end)):
            times = launched_by(profile, name, np.arange(block.start, block.stop))[0]
            launched += searches.searchsorted(sorted_times(times), asked, side="left")
            ended += searches.searchsorted(sorted_times(end[block]), asked, side="right")
    # Work that ended by t was launched before t, so the difference counts the pending work.
    queued = launched
    queued -= ended
    out = np.empty(len(asked), dtype=np.int64)
    out[order] = queued.clip(min=0)
    return out


def copies_unjudged(profile: Profile, windows: StepWindows) -> str | None:
    """Why some copy calls inside the step windows that only their copy makes blocking
    (concepts.blocks_by_its_copy) cannot be judged, with their number per step: a call linked
    to no copy may have launched one of the copies linked to no call (any copy can make its
    call block: one device-to-host into pageable memory always, any other when the call
    returned only after it ended, queued behind work, see concepts.blocking_calls); None when
    none may have."""
    copies, latest = unlinked_launched_by(profile, "memcpy")
    if not len(copies):
        return None
    runtime = profile.table("runtime")
    rows = classified_rows(profile, "runtime", concepts.blocks_by_its_copy)
    starts = runtime["start"].to_numpy(np.int64)[rows]
    ids = runtime["correlation"].to_numpy()[rows]
    copy_ids = profile.table("memcpy")["correlation"].to_numpy()
    # A call with an id launched the copy with that id: only a copy without one may be its
    # unlinked copy. One without an id may have launched any; each launched it before it began.
    any_copy = latest.max(initial=_NO_LAUNCH_NS)
    no_id_copy = latest[copy_ids[copies] < 0].max(initial=_NO_LAUNCH_NS)
    owns = (ids >= 0) & np.isin(ids, copy_ids[copy_ids >= 0])
    may = np.where(ids < 0, any_copy, np.where(owns, _NO_LAUNCH_NS, no_id_copy)) >= starts
    inside = int((may & (windows.index_of(starts) >= 0)).sum())
    if not inside:
        return None
    why = unlinked(profile, "memcpy", may_be_launched_after(profile, "memcpy", windows.first_ns),
                   "that may have been launched in or after the steps")
    return ("the copy calls that block only when their copy goes device-to-host into pageable "
            "memory or ends before they return behind queued work (cudaMemcpyAsync), "
            f"{round(inside / windows.count, 1):g} per step, cannot be judged: {why}")


@giving_back_memory
def sync_stats(profile: Profile, windows: StepWindows) -> SyncStats | None:
    """Blocking calls per step inside the step windows, by call, with the GPU work queued when
    each began; the rest apart; and why the copy calls whose copy decides could not be judged,
    when they could not (then with no blocking call too)."""
    calls = blocking(profile)
    unjudged = copies_unjudged(profile, windows)
    if calls.empty:
        return None if unjudged is None else SyncStats(
            origin=profile.kind, calls=[], ns_per_step=0, fraction=0.0, outside_calls=0,
            outside_ns=0, copies_unknown=unjudged)
    starts = calls["start"].to_numpy(np.int64)
    calls = calls.assign(ns=calls["end"] - calls["start"], queued=queued_at(profile, starts),
                         inside=windows.index_of(starts) >= 0)
    inside, outside = calls[calls["inside"]], calls[~calls["inside"]]
    rows = []
    for label in calls["label"].unique():
        mine, theirs = inside[inside["label"] == label], outside[outside["label"] == label]
        longest = mine.loc[mine["ns"].idxmax()] if not mine.empty else None
        rows.append(SyncCall(name=str(label), calls_per_step=len(mine) / windows.count,
                             ns_per_step=int(mine["ns"].sum()) // windows.count,
                             outside_calls=len(theirs), outside_ns=int(theirs["ns"].sum()),
                             longest=None if longest is None else
                             (int(longest["start"]), int(longest["end"])),
                             queued=None if mine.empty else
                             (int(mine["queued"].min()), int(mine["queued"].max()))))
    rows.sort(key=lambda call: (-call.ns_per_step, -call.outside_ns, call.name))
    blocked = windows.covered(iv.union_of([inside]))
    return SyncStats(origin=profile.kind, calls=rows, ns_per_step=blocked // windows.count,
                     fraction=blocked / max(windows.total_ns, 1),
                     outside_calls=len(outside), outside_ns=int(outside["ns"].sum()),
                     copies_unknown=unjudged, queued_unknown="; ".join(
                         why for name in GPU_TABLES
                         if (why := unlinked(profile, name)) is not None) or None)


@dataclass(frozen=True)
class _Work:
    """One GPU table's rows of one device, by start: to find the work that starts at a time."""

    table: str
    #: The device's rows of the table (None: every row is the device's).
    rows: np.ndarray | None
    #: Their stable order by start (None: they come in start order).
    order: np.ndarray | None
    #: Their starts in that order.
    starts: np.ndarray


def _work_of(profile: Profile, device: int) -> list[_Work]:
    """The device's rows of each GPU table that has any (kernels, copies, memsets)."""
    found = []
    for name in GPU_TABLES:
        table = profile.table(name)
        devices = table["device"].to_numpy()
        # Told by the distinct devices (hashed): no masks as long as the table to find a
        # device holds every row.
        rows = None if pd.unique(devices).tolist() == [device] \
            else np.flatnonzero(devices == device)
        starts = table["start"].to_numpy(np.int64)
        if rows is not None:
            starts = starts[rows]
        if len(starts) == 0:
            continue
        order = None if iv.ascending(starts) else np.argsort(starts, kind="stable")
        found.append(_Work(name, rows, order, starts if order is None else starts[order]))
    return found


#: The launch time of work no launch was found for: earlier than any possible time.
_NO_LAUNCH_NS = np.iinfo(np.int64).min


def _launch_of_work_at(profile: Profile, work: list[_Work], times: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """For each time, the launch time (ns) of the first row of ``work`` (kernels, then copies,
    then memsets; each in row order) that starts exactly then (for a row linked to no launch
    call, the latest it can have been launched: launches.launched_by), _NO_LAUNCH_NS, before
    every time, where none does; and whether that row is linked to its launch call (True where
    none starts then). Integers throughout: a float64 would round epoch-based Kineto times to
    256 ns, enough to move a launch across the gap's start."""
    out = np.full(len(times), _NO_LAUNCH_NS, dtype=np.int64)
    linked = np.ones(len(times), dtype=bool)
    pending = np.ones(len(times), dtype=bool)
    for rows in work:
        at = searches.searchsorted(rows.starts, times, side="left")
        np.minimum(at, len(rows.starts) - 1, out=at)
        found = pending & (rows.starts[at] == times)
        row = at[found] if rows.order is None else rows.order[at[found]]
        out[found], linked[found] = launched_by(profile, rows.table, row if rows.rows is None
                                                else rows.rows[row])
        pending &= ~found
    return out, linked


def _mostly(covering: iv.Intervals, starts: np.ndarray, ends: np.ndarray,
            length: np.ndarray) -> np.ndarray:
    """Whether ``covering`` covers more than half of each gap ``[starts, ends)`` (``length``
    long)."""
    return 2 * iv.overlap_per_window(covering, starts, ends) > length


def _blocked_in(blocked: iv.Intervals, starts: np.ndarray, ends: np.ndarray,
                length: np.ndarray) -> np.ndarray:
    """Whether a blocking call (``blocked``) runs as each gap ``[starts, ends)`` (``length``
    long) begins, or covers more than half of it: one search of ``blocked`` for the three
    times each gap asks about."""
    count = len(starts)
    before = iv.covered_before(blocked, np.concatenate([ends, starts, starts - 1]))
    at_ends, at_starts = before[:count], before[count:2 * count]
    began_blocked = at_starts > before[2 * count:]
    at_ends -= at_starts
    at_ends *= 2
    return began_blocked | (at_ends > length)


@giving_back_memory
def idle_causes(profile: Profile, windows: StepWindows) -> IdleCauses | None:
    """What each device's idle time inside the step windows waits for (see IdleCauses), per
    step and device: one process driving several GPUs idles each of them, and their idle times
    summed would read as more than the step. The gaps are judged a block at a time (a GPU kept
    busy by 10 M kernels has millions of short ones)."""
    if not has_gpu_events(profile):
        return None
    # The gaps' own arrays are gone (the helper returned) before every CPU op is read.
    idle, devices, waited, waited_ns, longest, (unknown_ns, unknown_gaps) = (
        _idle_by_cause(profile, windows))
    # Without CPU operators (an nsys export, a trace of CUDA activity alone) what the CPU ran
    # while the GPU waited is unknown, not Python between operators.
    cpu = (_cpu_in(profile, waited, windows.count)
           if waited is not None and profile.has("cpu_ops") else None)
    per_device_step = windows.count * max(devices, 1)
    return IdleCauses(origin=profile.kind, step_ns=windows.total_ns // max(windows.count, 1),
                      idle_ns_per_step={cause: ns // per_device_step
                                        for cause, ns in idle.items()},
                      launch_wait_ns=waited_ns // windows.count,
                      launch_wait_ops=cpu.ops if cpu else [],
                      launch_wait_outside_ops_ns=cpu.outside_ns if cpu else None,
                      launch_wait_runtime_calls=cpu.runtime_calls if cpu else [],
                      launch_wait_runtime_ns=cpu.runtime_ns if cpu else None,
                      longest_launch_wait=longest[1:] if longest[0] else None,
                      launch_unknown_ns_per_step=unknown_ns // per_device_step
                      if unknown_gaps else None,
                      launch_unknown=_launch_wait_unknown(profile, unknown_gaps))


def _launch_wait_unknown(profile: Profile, gaps: int) -> str | None:
    """Why whether ``gaps`` idle gaps waited for a launch is unknown: the work that ends each
    is linked to no launch call, and may have been launched during the gap (see
    launches.launched_by); None for no such gap."""
    if not gaps:
        return None
    why = [reason for name in GPU_TABLES if (reason := unlinked(profile, name)) is not None]
    return (f"{gaps:,} idle gap{'s end' if gaps > 1 else ' ends'} with work linked to no launch "
            f"call that may have been launched during the gap: {'; '.join(why)}")


#: Gaps judged at a time by :func:`_idle_by_cause`: each block's holes ask a dozen arrays of
#: their length (three of them three times as long), 50 MB held beside the devices' activity
#: at :data:`intervals.BLOCK_ROWS` gaps (the idle causes' peak on a 10 M-kernel export).
GAP_BLOCK_ROWS = 1 << 16


def _idle_by_cause(profile: Profile, windows: StepWindows
                   ) -> tuple[dict[str, int], int, iv.Intervals | None, int, tuple[int, int, int],
                              tuple[int, int]]:
    """The devices' idle ns inside the step windows by cause, summed over the devices, their
    number, the launch waits' union (None where no CPU op could cover them: see _waits_kept)
    and its ns, the longest launch wait (length, start, end; the first of equals), and the ns
    (summed over the devices) and number of the gaps, counted unexplained, whose ending work is
    linked to no launch call and may have been launched during them (whether they waited for a
    launch is unknown); the gaps a stretch of time at a time (see intervals.subtract_blocks)."""
    loader = dataloader_intervals(profile, windows)
    blocked = iv.union_of([blocking(profile)])
    idle = dict.fromkeys(IDLE_CAUSES, 0)
    unknown = [0, 0]  # ns and number of the gaps whose wait for a launch is unknown
    activity = step_devices(profile, windows.windows())
    kept = _waits_kept(profile, len(activity))
    waited, waited_ns = iv.EMPTY, 0
    longest = (0, 0, 0)  # length, start and end of the longest launch wait (the first of equals)
    for device, busy in activity.items():
        work = _work_of(profile, device)
        # One device's launch waits are some of its holes (disjoint, in order), written in
        # place (at most one hole per gap of ``busy`` and per window; pages never written are
        # never resident), then merged into the other devices'.
        most = len(busy) + 1 + windows.count if kept else 0
        wait_starts, wait_ends = np.empty(most, np.int64), np.empty(most, np.int64)
        waits = 0
        for holes in iv.subtract_blocks(windows.windows(), busy, GAP_BLOCK_ROWS):
            starts, ends = holes.starts, holes.ends
            length = ends - starts
            data = _mostly(loader, starts, ends, length)
            sync = ~data & _blocked_in(blocked, starts, ends, length)
            # Waiting for the launch: the work that ends the gap was launched during it (asked
            # only of the gaps neither the DataLoader nor a blocking call explains).
            launch = ~data & ~sync
            asked = np.flatnonzero(launch)
            launched, linked = _launch_of_work_at(profile, work, ends[asked])
            during = launched >= starts[asked]
            launch[asked] = during & linked
            unknown[0] += int(length[asked[during & ~linked]].sum())
            unknown[1] += int((during & ~linked).sum())
            for cause, mask in (("data", data), ("sync", sync), ("launch", launch),
                                ("unexplained", ~(data | sync | launch))):
                idle[cause] += int(length[mask].sum())
            found = int(launch.sum())
            if kept:
                wait_starts[waits:waits + found] = starts[launch]
                wait_ends[waits:waits + found] = ends[launch]
                waits += found
            else:
                waited_ns += int(length[launch].sum())
            if found:
                at_most = int(np.argmax(np.where(launch, length, -1)))
                if length[at_most] > longest[0]:
                    longest = (int(length[at_most]), int(starts[at_most]), int(ends[at_most]))
        del work
        waited = iv.merge(waited, iv.Intervals(wait_starts[:waits], wait_ends[:waits]))
    return (idle, len(activity), waited if kept else None,
            waited.total if kept else waited_ns, longest, (unknown[0], unknown[1]))


def _waits_kept(profile: Profile, devices: int) -> bool:
    """Whether the launch waits are kept as intervals: where CPU ops may cover them
    (_cpu_in), or several devices' waits may overlap (their union's length is the waited
    time). Otherwise one device's waits, disjoint, are summed as they are found: a 10 M-kernel
    nsys export (no CPU ops) has millions of them, tens of MB as intervals."""
    return profile.has("cpu_ops") or devices > 1


@giving_back_memory
def _cpu_in(profile: Profile, waited: iv.Intervals, steps: int) -> _CpuInWait:
    """What the CPU did while the GPU waited for launches, per step: the framework ops with the
    most self time inside ``waited`` (share: of ``waited``), the waited time no CPU op on any
    thread covers but GPU runtime or driver calls do (:func:`_runtime_outside`), and the
    waited time neither covers (Python between operators, or a thread the profiler did not
    record)."""
    if waited.total == 0:
        return _CpuInWait([], 0, [], 0)
    ops = profile.table("cpu_ops")
    start, end = ops["start"].to_numpy(), ops["end"].to_numpy()  # in file order: unsorted
    # Unioned in blocks of the intervals module's size: each merge into the union so far reads
    # all of it, so fewer, larger blocks (15 merges, not 60, for 3.9 M ops); each block's union
    # made as it is merged, never all 15 at once (iv.union_each holds them all before merging:
    # on a 2 GB trace's 3.9 M ops the process went 110 MB higher, one block at a time 49 MB).
    busy = functools.reduce(iv.merge, (iv.union(start[block], end[block])
                                       for block in iv.blocks(len(ops))), iv.EMPTY)
    # The waited time the ops cover, summed a block of waits at a time (both sets are disjoint:
    # the length of their intersection, without making it), each walk over ``busy`` going on
    # from block to block.
    from_end, from_start = iv.Cursor(), iv.Cursor()
    covered = sum(int((iv.covered_before(busy, waited.ends[block], from_end)
                       - iv.covered_before(busy, waited.starts[block], from_start)).sum())
                  for block in iv.blocks(len(waited), SPAN_BLOCK_ROWS))
    calls, in_calls = _runtime_outside(profile, waited, busy, steps)
    outside = waited.total - covered - in_calls
    del busy  # each large step's temporaries gone before the next one's
    ns = self_time_ns(ops, waited)
    ns //= steps
    chosen = classified(profile, "cpu_ops", concepts.is_framework_op) & (ns > 0)
    spans = pd.DataFrame({"name": ops["name"][chosen].reset_index(drop=True), "ns": ns[chosen],
                          "outer": True}, copy=False)  # only the rows and columns ranked reads
    del ns, chosen
    return _CpuInWait(ranked(spans, "name", LAUNCH_WAIT_OPS, waited.total // steps,
                             exclusive=True), outside // steps, calls, in_calls // steps)


@dataclass(frozen=True)
class _CpuInWait:
    """What the CPU ran while the GPU waited for launches (:func:`_cpu_in`), per step."""

    ops: list[TopItem]
    outside_ns: int
    runtime_calls: list[TopItem]
    runtime_ns: int


def _runtime_outside(profile: Profile, waited: iv.Intervals, busy: iv.Intervals,
                     steps: int) -> tuple[list[TopItem], int]:
    """The GPU runtime and driver calls (CUDA, HIP...) made while the GPU waited for launches
    outside every CPU op (``busy``: their union): the names with the most such time per step
    (share: of ``waited``), and the time their union covers there (the whole, not per step). A
    call the program or a library makes outside torch's operators (a module load, an
    allocation) is CPU time spent in the GPU runtime, not Python between operators. Only the
    calls that reach into the wait are read."""
    runtime = profile.table("runtime")
    if runtime.empty:
        return [], 0
    starts = runtime["start"].to_numpy(np.int64)
    ends = runtime["end"].to_numpy(np.int64)
    from_end, from_start = iv.Cursor(), iv.Cursor()  # the calls come in start order
    reach = np.concatenate([
        np.flatnonzero(iv.covered_before(waited, ends[block], from_end)
                       > iv.covered_before(waited, starts[block], from_start)) + block.start
        for block in iv.blocks(len(runtime))])
    if not len(reach):
        return [], 0
    outside = iv.subtract(iv.intersect(iv.union(starts[reach], ends[reach]), waited), busy)
    held = reach[(iv.covered_before(outside, ends[reach])
                  > iv.covered_before(outside, starts[reach]))]
    # Each name's time is the union of its calls there: calls nest (a runtime call's driver
    # calls) and run on several threads at once, so their lengths would add up past the wait.
    codes, distinct = name_codes(runtime["name"].iloc[held])
    ns = np.zeros(len(distinct) + 1, dtype=np.int64)
    for code in range(len(distinct)):
        mine = held[codes == code]
        ns[code] = iv.intersect(iv.union(starts[mine], ends[mine]), outside).total // steps
    count, first = calls_by_name(codes, len(distinct))
    return top_items(distinct, ns, count, first, LAUNCH_WAIT_OPS, waited.total // steps), \
        outside.total
