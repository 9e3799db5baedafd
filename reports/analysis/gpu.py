"""GPU-side metrics: utilisation, the GPU step breakdown, launches, copies and the kernel mix.

What a kernel, copy or memset is comes from the parsers' tables and :mod:`profreport.concepts`:
communication kernels are the ``is_comm`` rows; *compute* kernels are all the others; copies and
memsets are their own categories.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from profreport import concepts, searches
from profreport.allocator import giving_back_memory
from profreport.model import Profile, ids_at, narrowest_int, profiled_span
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.breakdown import Part, Parts, claim, make_breakdown
from profreport.reports.analysis.cpu import spans_where
from profreport.reports.analysis.kept import (
    classified_at,
    classified_rows,
    per_profile,
    table_name_codes,
)
from profreport.reports.analysis.launches import (
    GPU_TABLES,
    counted_by_start,
    launch_calls,
    launch_pairs,
    launched_in_windows,
    may_be_launched_in,
    unlinked,
)
from profreport.reports.analysis.ops import share_of_recorded
from profreport.reports.analysis.results import (
    BREAKDOWN_PARTS,
    Breakdown,
    CopyStats,
    GpuUtilization,
    IdleGap,
    KernelMix,
    LaunchStats,
    TopItem,
)
from profreport.reports.analysis.steps import (
    StepWindows,
    dataloader_intervals,
    loader_known,
    starts_in_windows,
    where_in_steps,
)
from profreport.reports.analysis.top import TOP_KERNELS, calls_by_name, top_items
from profreport.units import nbytes

#: An idle GPU gap longer than this is a stall, not launch jitter: the sc22 tutorial reads its
#: 500 ms gaps as the GPU waiting for the DataLoader between iterations.
LONG_IDLE_GAP_NS = 500_000_000
#: Kernels shorter than this cost about as much to launch (~5-10 us) as they run.
SHORT_KERNEL_NS = 10_000
#: A device-to-host copy this small is a scalar read back (``.item()``, ``print(loss)``): a sync.
TINY_COPY_BYTES = 64
#: How many idle gaps are kept for display.
TOP_GAPS = 5


def gpu_tables(profile: Profile) -> list[pd.DataFrame]:
    """The kernel, memcpy and memset tables (the GPU's activity)."""
    return [profile.table(name) for name in GPU_TABLES]


def has_gpu_events(profile: Profile) -> bool:
    """Whether the profile recorded any GPU activity."""
    return any(profile.has(name) for name in ("kernels", "memcpy", "memset"))


def comm_kernels(profile: Profile) -> pd.DataFrame:
    """Communication (collective) kernels."""
    kernels = profile.table("kernels")
    return kernels[kernels["is_comm"]]


def copies_of_kind(profile: Profile, kind: str) -> pd.DataFrame:
    """GPU copies of one direction (a ``concepts.COPY_KINDS`` value)."""
    memcpy = profile.table("memcpy")
    return memcpy[memcpy["kind"] == kind]


def device_rows(tables: list[pd.DataFrame]) -> Iterator[tuple[int, list[np.ndarray | slice]]]:
    """Each device of the (non-empty) GPU ``tables``, in order, with the rows of each table it
    ran (a mask, or every row when the table holds only that device; none when it holds only
    another): a device's rows are taken from the columns, never from one concatenated copy."""
    distinct = [pd.unique(t["device"].to_numpy()) for t in tables]
    for device in np.unique(np.concatenate(distinct)).tolist():
        yield device, [slice(None) if d.tolist() == [device] else t["device"].to_numpy() == device
                       for t, d in zip(tables, distinct, strict=True)]


@per_profile
def device_activity(profile: Profile) -> dict[int, iv.Packed]:
    """Per device (in order), the union of its kernel, memcpy and memset intervals (a device's
    rows read in place from the columns, not copied out), packed a stretch of time at a time
    as it is made (intervals.Packed: 5.8 M intervals of a 10 M-kernel export in 46 MB, never
    92 MB) and read a piece at a time."""
    tables = [t for t in gpu_tables(profile) if not t.empty]
    packed = {}
    for device, masks in device_rows(tables):
        most, made = iv.union_pieces([(t["start"], t["end"], None if isinstance(m, slice) else m)
                                      for t, m in zip(tables, masks, strict=True)])
        packed[device] = iv.pack(made, most)
    return packed


def step_devices(profile: Profile, span: iv.Intervals) -> dict[int, iv.Packed]:
    """:func:`device_activity` of the devices with work inside ``span`` (the step windows): a
    GPU one process used only outside them (a tensor put on another GPU at start-up) idles
    through no step of its training; every device where none has work there."""
    activity = device_activity(profile)
    if len(activity) < 2:
        return activity
    used = {device: busy for device, busy in activity.items() if _busy_ns_in(busy, span)}
    return used or activity


def _busy_ns_in(activity: iv.Packed, span: iv.Intervals) -> int:
    """How long ``activity`` covers ``span`` (disjoint intervals), read a piece at a time: no
    intersection is built."""
    return sum(int((iv.covered_before(piece, span.ends)
                    - iv.covered_before(piece, span.starts)).sum())
               for piece in iv.pieces(activity))


def busy_within(profile: Profile, spans: iv.Intervals) -> iv.Intervals:
    """The parts of ``spans`` when any GPU of the profile is busy (kernels, copies, memsets on
    any device): each device's kept activity read a piece at a time against them, the union of
    all devices never built (5.8 M intervals, 92 MB for a 10 M-kernel export)."""
    busy = iv.EMPTY
    for activity in device_activity(profile).values():
        busy = iv.merge(busy, iv.intersect_pieces(spans, activity))
    return busy


def _longest_candidates(order: int, device: int, idle: iv.Intervals, count: int, before: int
                        ) -> list[tuple[int, int, int, int, int]]:
    """The holes of a stretch of one device's that can be among the ``count`` longest of all,
    as sort keys (-length, device order, position among the device's holes, ``before`` being
    those of earlier stretches, device, start): those longer than its count-th longest, and the
    first ``count`` as long, picked by partition rather than by sorting them all."""
    lengths = idle.ends - idle.starts
    if len(lengths) > count:  # every hole as long as the count-th longest, ties and all
        kth = np.partition(lengths, len(lengths) - count)[len(lengths) - count]
        picked = np.concatenate([np.flatnonzero(lengths > kth),
                                 np.flatnonzero(lengths == kth)[:count]])
    else:
        picked = np.arange(len(lengths))
    return [(-int(lengths[i]), order, before + int(i), device, int(idle.starts[i]))
            for i in picked.tolist()]


@giving_back_memory
def gpu_utilization(profile: Profile, windows: StepWindows | None) -> GpuUtilization | None:
    """Busy share of each device over the step windows (the profiled span without steps), never
    over the device's own first and last event: a GPU that runs one 2 µs kernel in a 13 s step
    is idle, not busy. ``window_ns`` is that span times the devices; gaps are the idle stretches
    inside it."""
    if not has_gpu_events(profile):
        return None
    span = windows.windows() if windows is not None else _profiled(profile)
    busy: dict[int, int] = {}
    candidates: list[tuple[int, int, int, int, int]] = []
    long_gaps = 0
    # The idle stretches of one device inside the span, a stretch of time at a time (what they
    # leave of it is busy): only the longest few outlive it.
    for order, (dev, activity) in enumerate(step_devices(profile, span).items()):
        idle_ns = holes = 0
        for idle in iv.subtract_blocks(span, activity):
            idle_ns += idle.total
            candidates += _longest_candidates(order, dev, idle, TOP_GAPS, holes)
            long_gaps += int((idle.ends - idle.starts > LONG_IDLE_GAP_NS).sum())
            holes += len(idle)
        busy[dev] = span.total - idle_ns
    span_ns = max(span.total, 1)
    per_device = {dev: ns / span_ns for dev, ns in busy.items()}
    window_ns = span_ns * len(busy)
    busy_ns = sum(busy.values())
    # Longest first; equal lengths in device, then time order.
    top = [(device, start, -negative)
           for negative, _, _, device, start in sorted(candidates)[:TOP_GAPS]]
    where = where_in_steps(np.array([start for _, start, _ in top], dtype=np.int64),
                           np.array([start + ns for _, start, ns in top], dtype=np.int64),
                           windows)
    largest = [IdleGap(d, s, n, w) for (d, s, n), w in zip(top, where, strict=True)]
    return GpuUtilization(origin=profile.kind, busy_fraction=busy_ns / max(window_ns, 1),
                          window_ns=window_ns, busy_ns=busy_ns, per_device=per_device,
                          largest_gaps=largest, long_gap_count=long_gaps,
                          long_gap_ns=LONG_IDLE_GAP_NS,
                          span="step windows" if windows is not None else "profiled span")


def _profiled(profile: Profile) -> iv.Intervals:
    """The profiled span (model.profiled_span) as intervals, at least 1 ns long; none without
    a recorded row."""
    span = profiled_span(profile)
    if span is None:
        return iv.EMPTY
    return iv.union(np.array([span[0]]), np.array([max(span[1], span[0] + 1)]))


def compute_rows(profile: Profile) -> iv.Rows:
    """The compute kernels' rows (every kernel that is not communication): the two time
    columns and a mask, not a copy of the kernel table."""
    kernels = profile.table("kernels")
    return iv.Rows(kernels["start"], kernels["end"], ~kernels["is_comm"].to_numpy(bool))


def table_rows(profile: Profile, table: str) -> iv.Rows:
    """Every row of ``table`` as intervals (its two time columns as they are)."""
    rows = profile.table(table)
    return iv.Rows(rows["start"], rows["end"])


def copy_rows(profile: Profile, host_to_device: bool) -> iv.Rows:
    """The host-to-device copies' rows, or every other copy's: the table's two time columns
    and a mask, not a copy of its other columns (0.3 s on a 10 M-kernel export)."""
    memcpy = profile.table("memcpy")
    is_h2d = (memcpy["kind"] == concepts.HTOD).to_numpy(bool)
    return iv.Rows(memcpy["start"], memcpy["end"], is_h2d if host_to_device else ~is_h2d)


def gpu_parts(profile: Profile, windows: StepWindows) -> Parts:
    """The parts of a GPU step in claiming order: the device's work first, compute kernels,
    H2D copies, other copies and memsets, communication kernels (so each copy and collective
    claims only the time no compute kernel runs beside it: what the communication kernels
    claim is the exposed communication), then the DataLoader wait (the loop waiting for a batch
    while the device runs nothing: a kernel queued before the fetch, or a collective still
    running, is work the step does meanwhile), then CUDA runtime calls on the CPU while the GPU
    has nothing else; the rest is other. The compute kernels, the copies, the memsets and the
    runtime calls are their tables' rows, never built into unions of their own (8.4 M and 17 M
    intervals on a 10 M-kernel export; its copies' and memsets' union took 36 MB of temporaries
    beside its own 24 MB)."""
    yield "compute", compute_rows(profile)
    yield "h2d_copy", copy_rows(profile, host_to_device=True)
    yield "copy_memset", (copy_rows(profile, host_to_device=False), table_rows(profile, "memset"))
    yield "comm_exposed", comm_intervals(profile)
    yield "dataloader", dataloader_intervals(profile, windows)
    yield "host_runtime", table_rows(profile, "runtime")


@giving_back_memory
def gpu_claims(profile: Profile, windows: StepWindows) -> dict[str, np.ndarray]:
    """The ns each part of :func:`gpu_parts` claims in every step window (computed once per
    run: the breakdown and the communication figures both read it)."""
    return claim(gpu_parts(profile, windows), windows)


@per_profile
def comm_intervals(profile: Profile) -> iv.Intervals:
    """When communication kernels run."""
    return iv.union_of([comm_kernels(profile)])


def under_compute(profile: Profile, windows: StepWindows, part: Part) -> int:
    """The ns inside the step windows with ``part`` running while a compute kernel runs (copies
    and memsets are not compute: overlap with them hides nothing). Measured a stretch of time
    at a time (iv.stretches), the compute kernels' union never built whole."""
    mine_all, compute = iv.Stretched(part), iv.Stretched(compute_rows(profile))
    covered = 0
    for low, high in iv.stretches([mine_all, compute]):
        mine, theirs = mine_all.within(low, high), compute.within(low, high)
        covered += windows.covered(iv.intersect(iv.union(mine.starts, mine.ends),
                                                iv.union(theirs.starts, theirs.ends)))
    return covered


@per_profile
def comm_under_compute(profile: Profile, windows: StepWindows) -> int:
    """The ns inside the step windows with communication kernels running while a compute
    kernel runs (under_compute); kept as that figure, not as its intervals."""
    return under_compute(profile, windows, comm_intervals(profile))


def gpu_breakdown(profile: Profile, windows: StepWindows,
                  claims: dict[str, np.ndarray]) -> Breakdown:
    """Step time split into the parts of :func:`gpu_parts`; ``comm_overlapped_ns`` is the
    communication that runs under compute kernels, ``h2d_overlapped_ns`` the host-to-device
    copies that do (compute claims both: neither is in its own part). The DataLoader wait is
    unmeasured where the profile does not record it (steps.loader_known: an nsys capture
    without fetch or step ranges), its time in "other"."""
    steps = max(windows.count, 1)
    overlapped = comm_under_compute(profile, windows) // steps
    h2d_hidden = (0 if copies_of_kind(profile, concepts.HTOD).empty else
                  under_compute(profile, windows, copy_rows(profile, host_to_device=True)) // steps)
    measured = frozenset(BREAKDOWN_PARTS) - (set() if loader_known(profile, windows)
                                             else {"dataloader"})
    return make_breakdown(profile.kind, windows, claims, overlapped, measured,
                          h2d_overlapped_ns=h2d_hidden)


def stream_free_by_block(profile: Profile, table: str = "kernels") -> Iterator[np.ndarray]:
    """For each block of ``table``'s rows (one of GPU_TABLES, the kernels unless named;
    :func:`intervals.blocks`, as :func:`launches.launch_pairs` reads them), when the work ahead
    of each row on its stream had all ended: the latest end of the kernels, copies and memsets
    of the same device and stream that started before it (a stream runs its work in order);
    INT64 min where none was recorded. A table in start order (as the parsers hand them over)
    is read a block at a time, each stream's reach carried from block to block, with no array
    as long as the table; one out of order is first read whole in start order."""
    rows = profile.table(table)
    reach = _stream_reach(profile, table)
    if iv.ascending(rows["start"].to_numpy(np.int64)):
        for block in iv.blocks(len(rows)):
            yield reach.ahead(np.arange(block.start, block.stop))
        return
    order = np.argsort(rows["start"].to_numpy(np.int64), kind="stable")
    free = np.empty(len(rows), dtype=np.int64)
    for block in iv.blocks(len(order)):
        free[order[block]] = reach.ahead(order[block])
    yield from (free[block] for block in iv.blocks(len(rows)))


def _stream_reach(profile: Profile, table: str) -> _StreamReach | searches.StreamReach:
    """What :func:`stream_free_by_block` asks for each block: in C where it is built."""
    if not searches.compiled():
        return _StreamReach(profile, table)
    rows = profile.table(table)
    columns = (rows["start"].to_numpy(np.int64), rows["end"].to_numpy(np.int64),
               rows["device"].to_numpy(), rows["stream"].to_numpy())
    others = [_Started(profile.table(name)).columns for name in GPU_TABLES if name != table]
    return searches.StreamReach(columns, others)


class _StreamReach:
    """The latest end of the work each stream of a profile ran, as the rows of one GPU table
    are read in start order: those rows read so far, and the other tables' rows started before
    them."""

    def __init__(self, profile: Profile, table: str) -> None:
        rows = profile.table(table)
        self.starts = rows["start"].to_numpy(np.int64)
        self.ends = rows["end"].to_numpy(np.int64)
        self.devices, self.streams = rows["device"].to_numpy(), rows["stream"].to_numpy()
        #: Each (device, stream)'s reach of the rows read so far.
        self.carried: dict[tuple[int, int], int] = {}
        #: The other tables' rows, taken in start order as the rows read pass them.
        self.others = [_Started(profile.table(name)) for name in GPU_TABLES if name != table]

    def ahead(self, rows: np.ndarray) -> np.ndarray:
        """For the rows at ``rows`` (positions, in start order, after every row read before),
        when the work ahead of each on its stream had ended."""
        free = np.empty(len(rows), dtype=np.int64)
        if not len(rows):
            return free
        starts = self.starts[rows]
        devices, streams = self.devices[rows], self.streams[rows]
        queues = [_Queue(key, at, starts[at], self._ahead_on(key, rows[at]))
                  for key, at in _by_stream(devices, streams)]  # each stream of these rows
        # The other tables' rows started before the last of these rows, not yet taken, a block
        # at a time: a sparse table's block (the copies) spans millions of a dense one's rows.
        for other in self.others:
            for taken in other.take(int(starts[-1])):
                elsewhere = np.ones(len(taken.starts), dtype=bool)
                for queue in queues:
                    mine = (taken.devices == queue.key[0]) & (taken.streams == queue.key[1])
                    elsewhere &= ~mine
                    other.raise_to(queue.key, queue.meet(taken.starts[mine], taken.ends[mine]))
                other.carry(taken, elsewhere)
        for queue in queues:
            free[queue.at] = queue.done()
        return free

    def _ahead_on(self, key: tuple[int, int], rows: np.ndarray) -> np.ndarray:
        """:meth:`ahead` for rows of one device and stream, by the rows read before them on
        it and the other tables' rows carried so far."""
        carried = self.carried.get(key, np.iinfo(np.int64).min)
        reach = np.maximum.accumulate(self.ends[rows])
        np.maximum(reach, carried, out=reach)
        ahead = np.empty_like(reach)
        ahead[0], ahead[1:] = carried, reach[:-1]
        for other in self.others:
            np.maximum(ahead, other.reach(key), out=ahead)  # taken with earlier rows
        self.carried[key] = int(reach[-1])
        return ahead


class _Queue:
    """Rows of one device and stream being read (``at``: their places among the rows read, in
    start order), when the work ahead of each had ended so far, raised by the other tables'
    rows on the stream as they are taken a block at a time."""

    def __init__(self, key: tuple[int, int], at: np.ndarray, starts: np.ndarray,
                 free: np.ndarray) -> None:
        self.key, self.at, self.starts, self.free = key, at, starts, free
        #: At each row, the latest end of a block of other rows that all started before it;
        #: the rows after it are raised to it too (see :meth:`done`).
        self.after = np.full(len(at), np.iinfo(np.int64).min, dtype=np.int64)

    def meet(self, starts: np.ndarray, ends: np.ndarray) -> int:
        """Raise each row to the latest end of the other rows (``starts``, ``ends``: on this
        stream, in start order) started before it: searched only for the rows among them,
        those after them marked (:attr:`after`); their latest end (INT64 min for none)."""
        if not len(starts):
            return int(np.iinfo(np.int64).min)
        reach = np.maximum.accumulate(ends)
        among, after = searches.searchsorted(self.starts, starts[[0, -1]], side="right").tolist()
        before = searches.searchsorted(starts, self.starts[among:after], side="left")
        np.maximum(self.free[among:after], reach[before - 1], out=self.free[among:after])
        if after < len(self.after):
            self.after[after] = max(self.after[after], reach[-1])
        return int(reach[-1])

    def done(self) -> np.ndarray:
        """When the work ahead of each row had ended: each raised by the blocks before it."""
        return np.maximum(self.free, np.maximum.accumulate(self.after), out=self.free)


@dataclass(frozen=True)
class _Taken:
    """Rows of a GPU table, in start order: their starts, ends, devices, streams."""

    starts: np.ndarray
    ends: np.ndarray
    devices: np.ndarray
    streams: np.ndarray


class _Started:
    """A GPU table read in start order, a block at a time as another table's rows pass its
    rows (no array as long as the table where it is in start order, as the parsers hand it
    over), and each (device, stream)'s latest end over the rows taken so far."""

    def __init__(self, table: pd.DataFrame) -> None:
        self.columns = [table[name].to_numpy(np.int64 if name in ("start", "end") else None)
                        for name in ("start", "end", "device", "stream")]
        if not iv.ascending(self.columns[0]):
            order = np.argsort(self.columns[0], kind="stable")
            self.columns = [column[order] for column in self.columns]
        self.done = 0
        self.reached: dict[tuple[int, int], int] = {}

    def take(self, bound: int) -> Iterator[_Taken]:
        """The rows not taken yet that start before ``bound``, :data:`intervals.BLOCK_ROWS`
        at a time; each block is to be carried (:meth:`carry`) before the next is asked."""
        stop = int(searches.searchsorted(self.columns[0], bound, side="left"))
        for block in iv.blocks(stop, first=self.done):
            self.done = block.stop
            yield _Taken(*(column[block] for column in self.columns))

    def reach(self, key: tuple[int, int]) -> int:
        """The latest end of the rows carried on stream ``key`` (INT64 min for none)."""
        return self.reached.get(key, np.iinfo(np.int64).min)

    def raise_to(self, key: tuple[int, int], end: int) -> None:
        """Carry ``end`` into stream ``key``'s reach."""
        self.reached[key] = max(self.reach(key), end)

    def carry(self, taken: _Taken, rows: np.ndarray) -> None:
        """Add the ``taken`` rows where ``rows`` (a mask) to each stream's reach: grouped by
        stream, the rows on a stream being read are carried as they are met instead."""
        if not rows.any():
            return
        latest = pd.Series(taken.ends[rows]).groupby([taken.devices[rows],
                                                      taken.streams[rows]]).max()
        for (device, stream), end in latest.items():
            self.raise_to((int(device), int(stream)), int(end))


@per_profile
def waited_on_event(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """The kernels (positions, ascending) whose stream was told to wait on an event (a stream
    wait-event sync record, concepts.is_stream_wait) after the work ahead of them on it was
    launched and before their own launch call, and those that may have been: the first work
    of a stream enqueued after such a record starts only once another stream's work reaches
    that event. Each is the first of its stream's work linked to a launch call launched after
    the record; where work of the stream linked to no launch call ran between the record and
    it, after the linked work (kernels, copies, memsets) launched before the record
    (:func:`_unlinked_between`), that work may have been enqueued after the record and waited
    instead (its launch is unknown, only that it came before its start): whether the kernel
    waited is unknown. Work linked to no call that started before the record was launched
    before it, and so was work that ran ahead of linked work launched before it: a stream
    runs its work in the order it was enqueued. The kernels are read a block at a time
    (:func:`_first_kernels_after`), the copies and memsets only on the streams and at the
    kernels found: no array as long as the kernels."""
    sync = profile.table("sync")
    waits = sync[concepts.is_stream_wait(sync["kind"]).to_numpy(bool)]
    none = np.empty(0, dtype=np.int64)
    if waits.empty:
        return none, none
    keys = _LaunchKeys(profile)
    starts = profile.table("kernels")["start"].to_numpy(np.int64)
    known, unknown = [none], [none]
    for key, (found, told, after) in _first_kernels_after(profile, keys, waits).items():
        launched, started = _other_work_ahead(profile, keys, key, found, told)
        first = launched <= told
        found, after = found[first], np.maximum(after[first], started[first])
        maybe = _unlinked_between(profile, key, after, starts[found])
        known.append(found[~maybe])
        unknown.append(found[maybe])
    waited = np.unique(np.concatenate(known))
    return waited, np.setdiff1d(np.concatenate(unknown), waited)


class _LaunchKeys:
    """Launch calls as keys that order as the calls' starts: a call's runtime row where the
    runtime table is in start order (no start read, as the nsys parser hands them over), else
    its start; a time's key is that of the last call started by then."""

    def __init__(self, profile: Profile) -> None:
        self.starts = profile.table("runtime")["start"].to_numpy(np.int64)
        self.in_order = iv.ascending(self.starts)

    def of_calls(self, calls: np.ndarray) -> np.ndarray:
        """The keys of the runtime rows ``calls``."""
        return calls.astype(np.int64) if self.in_order else self.starts[calls]

    def of_times(self, times: np.ndarray) -> np.ndarray:
        """The key of the last call started at or before each of the ``times``."""
        if not self.in_order:
            return times
        return searches.searchsorted(self.starts, times, side="right") - 1


def _waits_on(waits: pd.DataFrame, key: tuple[int, int]) -> np.ndarray:
    """Which of the ``waits`` records told stream ``key`` (device, stream) to wait (a mask). A
    record whose stream or device is unrecorded (CUPTI's invalid value, read as -1) may have
    been any stream's of its device (or any device's): it is counted on each."""
    devices, streams = waits["device"].to_numpy(np.int64), waits["stream"].to_numpy(np.int64)
    return ((devices == key[0]) | (devices < 0)) & ((streams == key[1]) | (streams < 0))


def _by_stream(devices: np.ndarray, streams: np.ndarray
               ) -> Iterator[tuple[tuple[int, int], np.ndarray]]:
    """Each (device, stream) of rows with these ``devices`` and ``streams``, with the rows'
    positions on it (ascending)."""
    for device in pd.unique(devices).tolist():
        on_device = devices == device
        for stream in pd.unique(streams[on_device]).tolist():
            yield (int(device), int(stream)), np.flatnonzero(on_device & (streams == stream))


def _first_kernels_after(profile: Profile, keys: _LaunchKeys, waits: pd.DataFrame
                         ) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """For each stream (device, stream) of the kernels, the first of its kernels linked to
    their launch call launched after each time it was told to wait (the ``waits`` records'
    starts, the call's time on the CPU; :func:`_waits_on`), in the order the stream ran them
    (their launches, in that order, taken as never earlier than the one before), the keys of
    those times (:class:`_LaunchKeys`), and after when work ahead of each may have been
    enqueued after the record, as the kernels tell: the record's start, or the start of the
    stream's linked kernel before it (launched before the record) where that is later. Read a
    block of kernels at a time in start order, each stream's latest launch and start carried
    from block to block. A copy or memset of the stream launched in between may come first
    instead, and one launched before the record raises that bound as a kernel does
    (:func:`_other_work_ahead`)."""
    kernels = profile.table("kernels")
    calls = launch_calls(profile, "kernels")
    starts = kernels["start"].to_numpy(np.int64)
    devices, streams = kernels["device"].to_numpy(), kernels["stream"].to_numpy()
    order = None if iv.ascending(starts) else np.argsort(starts, kind="stable")
    times = waits["start"].to_numpy(np.int64)
    moments = keys.of_times(times)
    told: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    reached: dict[tuple[int, int], tuple[int, int]] = {}
    found: dict[tuple[int, int], list[np.ndarray]] = {}
    for block in iv.blocks(len(starts)):
        rows = np.arange(block.start, block.stop) if order is None else order[block]
        rows = rows[calls[rows] >= 0]
        for key, at in _by_stream(devices[rows], streams[rows]):
            if key not in told:
                mine = _waits_on(waits, key)
                # Keys order as times do, so both sorted stay paired.
                told[key] = (np.sort(moments[mine]), np.sort(times[mine]))
            launched = np.maximum.accumulate(keys.of_calls(calls[rows[at]]))
            carried, last_start = reached.get(key, (np.iinfo(np.int64).min,) * 2)
            np.maximum(launched, carried, out=launched)
            reached[key] = (int(launched[-1]), int(starts[rows[at[-1]]]))
            # The waits that no kernel of the stream before this block was launched after,
            # but one of this block's was.
            low, high = searches.searchsorted(told[key][0], [carried, launched[-1]], side="left")
            wait = told[key][0][low:high]
            first = searches.searchsorted(launched, wait, side="right")
            before = np.r_[last_start, starts[rows[at]]][first]  # the kernel ahead's start
            found.setdefault(key, []).extend(
                (rows[at[first]], wait, np.maximum(before, told[key][1][low:high])))
    return {key: (np.concatenate(parts[0::3]), np.concatenate(parts[1::3]),
                  np.concatenate(parts[2::3])) for key, parts in found.items()}


def _other_work_ahead(profile: Profile, keys: _LaunchKeys, key: tuple[int, int],
                      kernels: np.ndarray, told: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of the ``kernels`` (positions) on stream ``key`` (device, stream), over the
    copies and memsets of that stream linked to their launch call that started before it (a
    stream runs a kernel before other work of the same start): their latest launch
    (:class:`_LaunchKeys`), and the latest start of those launched by the kernel's ``told``
    (a launch key: its wait record's), before which work linked to no call was enqueued
    before the record (the stream runs its work in the order it was enqueued); INT64 min for
    none. A launch is taken as never earlier than the one before it in start order, so a copy
    launched out of that order bounds no start. Each table is read a block at a time in start
    order, the stream's latest launch carried from block to block."""
    starts = profile.table("kernels")["start"].to_numpy(np.int64)[kernels]
    ahead = np.full(len(kernels), np.iinfo(np.int64).min, dtype=np.int64)
    started = ahead.copy()
    for name in (name for name in GPU_TABLES if name != "kernels"):
        carried = np.iinfo(np.int64).min
        for begun, calls in _on_stream(profile, name, key, linked=True):
            launched = np.maximum.accumulate(keys.of_calls(calls))
            np.maximum(launched, carried, out=launched)
            carried = int(launched[-1])
            place = searches.searchsorted(begun, starts, side="left")
            met = place > 0
            ahead[met] = np.maximum(ahead[met], launched[place[met] - 1])
            place = np.minimum(place, searches.searchsorted(launched, told, side="right"))
            met = place > 0
            started[met] = np.maximum(started[met], begun[place[met] - 1])
    return ahead, started


def _unlinked_between(profile: Profile, key: tuple[int, int], after: np.ndarray,
                      before: np.ndarray) -> np.ndarray:
    """Whether work of stream ``key`` (device, stream; kernels, copies, memsets) linked to no
    launch call started inside each interval from ``after`` to ``before`` (ns, both left
    out): a mask. Each table is read a block at a time in start order."""
    met = np.zeros(len(after), dtype=bool)
    for name in GPU_TABLES:
        calls = launch_calls(profile, name)
        if not len(calls) or calls.min() >= 0:  # every row linked: no pass over the table
            continue
        for begun, _ in _on_stream(profile, name, key, linked=False):
            met |= (np.searchsorted(begun, before, side="left")
                    > np.searchsorted(begun, after, side="right"))
    return met


def _on_stream(profile: Profile, name: str, key: tuple[int, int], linked: bool
               ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The rows of GPU table ``name`` on stream ``key`` (device, stream) that are linked to
    their launch call (``linked``) or to none, :data:`intervals.BLOCK_ROWS` rows of the table
    at a time in start order: their starts and launch calls (runtime rows, -1 for none)."""
    rows, calls = profile.table(name), launch_calls(profile, name)
    begun = rows["start"].to_numpy(np.int64)
    devices, streams = rows["device"].to_numpy(), rows["stream"].to_numpy()
    order = None if iv.ascending(begun) else np.argsort(begun, kind="stable")
    for block in iv.blocks(len(begun)):
        at = np.arange(block.start, block.stop) if order is None else order[block]
        at = at[((calls[at] >= 0) == linked) & (devices[at] == key[0]) & (streams[at] == key[1])]
        if len(at):
            yield begun[at], calls[at]


@giving_back_memory
def launch_stats(profile: Profile, windows: StepWindows) -> LaunchStats | None:
    """Kernels launched per step, share of short kernels, launch delay and CPU runtime time per
    step. The launch delay (launch call start to kernel start) is measured only over the
    kernels launched onto an idle stream (the work ahead of them on it had ended by the launch
    call's end): the wait of the others is queueing behind that work, not launch latency. A
    kernel whose stream was told to wait on an event before its launch (:func:`waited_on_event`)
    waits for another stream's work, and one recorded as starting before its launch call did
    measures the skew between the CPU's and the GPU's clocks: neither is a launch delay, both
    left out and counted."""
    kernels = profile.table("kernels")
    mine = launched_in_windows(profile, "kernels", windows)
    count = int(mine.sum())
    if count == 0:
        return None
    short = kernel_ns = 0
    for duration in iv.lengths(kernels["start"], kernels["end"], mine):
        short += int((duration < SHORT_KERNEL_NS).sum())
        kernel_ns += int(duration.sum())
    short_fraction = short / count
    runtime = profile.table("runtime")
    starts = runtime["start"].to_numpy(np.int64)
    runtime_ns = _runtime_ns_in(starts, runtime["end"].to_numpy(np.int64), windows)
    delay, launched, queued, skewed, waited, may_wait = _idle_stream_delays(profile, mine,
                                                                            windows)
    why = unlinked(profile, "kernels", mine, "that ran in the steps")
    return LaunchStats(origin=profile.kind, kernels_per_step=count / windows.count,
                       short_kernel_fraction=short_fraction, short_kernel_ns=SHORT_KERNEL_NS,
                       launch_delay_p50_ns=int(np.median(delay, overwrite_input=True))
                       if len(delay) else None,
                       launch_delay_kernels=len(delay), launch_delay_skewed=skewed,
                       launch_delay_waited=waited, launch_delay_wait_unknown=may_wait,
                       waits_recorded=not profile.table("sync").empty,
                       queued_launch_fraction=queued / launched if launched else None,
                       runtime_ns_per_step=runtime_ns // windows.count,
                       gpu_kernel_ns_per_step=kernel_ns // windows.count,
                       launches_unknown=why, kernels_unknown=counted_by_start(why))


def _idle_stream_delays(profile: Profile, rows: np.ndarray, windows: StepWindows
                        ) -> tuple[np.ndarray, int, int, int, int, int]:
    """The launch delays (kernel start minus launch call start) of the ``rows`` (a mask of the
    kernels) launched by a launch call started inside the step ``windows`` onto an idle
    stream, how many of the rows such a call launched, how many of those it launched behind
    work still queued or running on their stream (:func:`stream_free_by_block`), and, of
    those launched onto an idle stream, how many start before their call did (their delay, the
    clocks' skew), how many their stream was told to wait on an event for first and how many
    it may have been (:func:`waited_on_event`: their delay, another stream's work), all three
    left out."""
    kernel_starts = profile.table("kernels")["start"].to_numpy(np.int64)
    runtime = profile.table("runtime")
    call_starts = runtime["start"].to_numpy(np.int64)
    call_ends = runtime["end"].to_numpy(np.int64)
    # Filled in place (a list of blocks then joined held every delay twice): one per kernel,
    # more only where a correlation id repeats; int32 (half of 10 M kernels' 80 MB) until a
    # delay does not fit. Whether a call is a launch inside the windows is asked of the calls
    # paired, never of all 17 M at once.
    delay, filled = np.empty(int(rows.sum()), dtype=np.int32), 0
    launched = queued = skewed = waited = may_wait = 0
    after_wait, perhaps = waited_on_event(profile)
    pairs = launch_pairs(profile, "kernels", rows)
    for block, (kernel_at, call_at), free in zip(iv.blocks(len(rows)), pairs,
                                                 stream_free_by_block(profile), strict=True):
        by_launch = starts_in_windows(call_starts[call_at], windows)
        by_launch &= classified_at(profile, "runtime", concepts.is_launch_api, call_at)
        kernel_at, call_at = kernel_at[by_launch], call_at[by_launch]
        idle = free[kernel_at - block.start] <= call_ends[call_at]
        launched += len(idle)
        queued += len(idle) - int(idle.sum())
        if len(after_wait) or len(perhaps):
            on_event = _among(after_wait, block)[kernel_at - block.start]
            maybe = _among(perhaps, block)[kernel_at - block.start]
            waited += int((idle & on_event).sum())
            may_wait += int((idle & maybe).sum())
            idle &= ~(on_event | maybe)
        block = kernel_starts[kernel_at[idle]]
        block -= call_starts[call_at[idle]]
        before_call = block < 0  # a kernel cannot start before its launch: the clocks disagree
        if before_call.any():
            skewed += int(before_call.sum())
            block = block[~before_call]
        if len(block) and narrowest_int(block) == np.int64:
            delay = delay.astype(np.int64, copy=False)
        if filled + len(block) > len(delay):
            delay = np.resize(delay, 2 * (filled + len(block)))
        delay[filled:filled + len(block)] = block
        filled += len(block)
    return delay[:filled], launched, queued, skewed, waited, may_wait


def _among(positions: np.ndarray, block: slice) -> np.ndarray:
    """Which rows of ``block`` are among the ``positions`` (ascending): a mask of the block's
    length, read off the positions inside it (no search of the block's rows among them)."""
    mask = np.zeros(block.stop - block.start, dtype=bool)
    low, high = searches.searchsorted(positions, [block.start, block.stop], side="left")
    mask[positions[low:high] - block.start] = True
    return mask


def _runtime_ns_in(starts: np.ndarray, ends: np.ndarray, windows: StepWindows) -> int:
    """The ns of the runtime calls (``starts``, ``ends``) that start inside the step windows,
    :data:`intervals.BLOCK_ROWS` calls at a time (no mask as long as the calls)."""
    total = 0
    for block in iv.blocks(len(starts)):
        inside = starts_in_windows(starts[block], windows)
        total += int((ends[block][inside] - starts[block][inside]).sum())
    return total


def copy_stats(profile: Profile) -> CopyStats | None:
    """H2D volume (pageable vs pinned), tiny D2H copies, and synchronising API calls."""
    memcpy = profile.table("memcpy")
    runtime = profile.table("runtime")
    if memcpy.empty and runtime.empty:
        return None
    h2d = copies_of_kind(profile, concepts.HTOD)
    known = h2d[h2d["bytes"] >= 0]
    d2h = copies_of_kind(profile, concepts.DTOH)
    tiny = d2h[d2h["bytes"].between(0, TINY_COPY_BYTES)]
    syncs = runtime.iloc[classified_rows(profile, "runtime", concepts.is_sync_api)]
    unsized = len(h2d) - len(known)
    unknown = _h2d_kinds_unknown(known, copies_of_kind(profile, concepts.UNKNOWN_KIND),
                                 len(memcpy), unsized)
    return CopyStats(origin=profile.kind, h2d_bytes=int(known["bytes"].sum()),
                     h2d_ns=int((h2d["end"] - h2d["start"]).sum()),
                     h2d_pageable_bytes=None if unknown else int(
                         known.loc[known["src_kind"] == concepts.PAGEABLE, "bytes"].sum()),
                     h2d_pinned_bytes=None if unknown else int(
                         known.loc[known["src_kind"] == concepts.PINNED, "bytes"].sum()),
                     h2d_kinds_unknown=unknown, tiny_d2h_count=len(tiny),
                     sync_api_ns=int((syncs["end"] - syncs["start"]).sum()),
                     sync_api_calls=len(syncs), h2d_unsized=unsized)


def _h2d_kinds_unknown(h2d: pd.DataFrame, undirected: pd.DataFrame, copies: int,
                       unsized: int) -> str | None:
    """Why the pageable and pinned bytes of the host-to-device copies ``h2d`` (those recording
    a size) are unknown: some record no source memory kind, ``unsized`` more record no size, or
    some of the profile's ``copies`` (``undirected``) record no direction and may be
    host-to-device copies of either memory; None when they are known."""
    unrecorded = int((h2d["src_kind"] == concepts.UNKNOWN_KIND).sum())
    why = [f"the profile records no source memory kind for {unrecorded:,} of its "
           f"{len(h2d):,} host-to-device copies"] if unrecorded else []
    if unsized:
        why.append(f"the profile records no size for {unsized:,} of its "
                   f"{len(h2d) + unsized:,} host-to-device copies")
    if len(undirected):
        sized = undirected["bytes"][undirected["bytes"] >= 0]
        why.append(f"the profile records no direction for {len(undirected):,} of its "
                   f"{copies:,} copies ({nbytes(int(sized.sum()))}"
                   f"{'' if len(sized) == len(undirected) else ' with bytes recorded'}), "
                   "which may be host-to-device")
    return "; ".join(why) or None


def top_kernels(profile: Profile) -> list[TopItem]:
    """Kernels by total GPU time (grouped by full name), share of all kernel time, each marked
    communication or not: summed per kept name code a block at a time, no copy of the table."""
    kernels = profile.table("kernels")
    codes, distinct = table_name_codes(profile, "kernels")
    ns = ns_by_name(kernels, np.ones(len(kernels), dtype=bool), codes, len(distinct))
    count, first = calls_by_name(codes, len(distinct))
    comm = np.zeros(len(distinct) + 1, dtype=bool)
    is_comm = kernels["is_comm"].to_numpy(bool)
    for block in iv.blocks(len(kernels)):
        comm[codes[block][is_comm[block]]] = True
    return top_items(distinct, ns, count, first, TOP_KERNELS, int(ns.sum()), comm=comm)


def launched_in(profile: Profile, spans: iv.Intervals, table: str = "kernels") -> np.ndarray:
    """Which rows of a GPU table (kernels by default) a runtime call started inside ``spans``
    launched (joined on the correlation id)."""
    starts = profile.table("runtime")["start"].to_numpy(np.int64)
    launched = np.zeros(len(profile.table(table)), dtype=bool)
    for row, call in launch_pairs(profile, table):
        launched[row[iv.inside(spans, starts[call])]] = True
    return launched


def launched_in_steps(profile: Profile, table: str, rows: np.ndarray,
                      windows: StepWindows) -> int:
    """How many of the ``rows`` (a mask) of GPU table ``table`` were launched inside a step
    window."""
    return int((rows & launched_in_windows(profile, table, windows)).sum())


@dataclass(frozen=True)
class SpanLaunches:
    """The GPU rows launched inside some CPU spans within the step windows, per step."""

    #: Rows launched inside the spans per step; None when no row is linked to a launch call
    #: at all (see ``why``), or there are no such spans or steps.
    per_step: float | None
    #: Rows per step linked to no launch call that may have been launched inside such a span
    #: within the windows (launches.may_be_launched_in): ``per_step`` is then a lower bound;
    #: None when there are none.
    unlinked_per_step: float | None = None
    #: Why some rows' launch calls are unknown (launches.unlinked); None when every one's is.
    why: str | None = None


def launched_in_spans(profile: Profile, spans: pd.DataFrame, windows: StepWindows | None,
                      tables: tuple[str, ...], which: str) -> SpanLaunches:
    """The rows of ``tables`` launched inside ``spans`` within the step windows, per step, with
    the rows that may have been launched there but are linked to no launch call: those a span
    inside the windows holds a time each can have been launched at
    (launches.may_be_launched_in; ``which`` says so in the reason)."""
    union = iv.union_of([spans])
    if windows is None or not len(union):
        return SpanLaunches(None)
    inside = iv.intersect(union, windows.windows())
    count = unlinked_rows = 0
    why, linked = [], False
    for table in tables:
        calls = launch_calls(profile, table)
        linked |= bool((calls >= 0).any())
        count += launched_in_steps(profile, table, launched_in(profile, union, table), windows)
        if not len(inside):
            continue
        may = may_be_launched_in(profile, table, inside)
        reason = unlinked(profile, table, may, which)
        if reason is not None:
            why.append(reason)
            unlinked_rows += int((may & (calls < 0)).sum())
    return SpanLaunches(count / windows.count if linked or not why else None,
                        unlinked_rows / windows.count if why else None,
                        "; ".join(why) if why else None)


def ns_by_name(table: pd.DataFrame, rows: np.ndarray, codes: np.ndarray,
               names: int) -> np.ndarray:
    """Summed duration of the ``rows`` (a mask) of ``table`` per name code (of ``names``
    distinct names; the last slot sums the rows without a name), block by block."""
    ns = np.zeros(names + 1, dtype=np.int64)
    durations = iv.lengths(table["start"], table["end"], rows)
    for block in iv.blocks(len(table)):
        duration = next(durations)
        np.add.at(ns, codes[block][rows[block]], duration)  # code -1 adds to the last slot
        del duration  # let go before the next block's lengths are made
    return ns


def fused_among(distinct: pd.Series, present: np.ndarray) -> bool | None:
    """Whether the kernels of the ``present`` names (a mask over ``distinct`` and one last slot
    for kernels without a name) include a multi-tensor one: True when a named one is, False when
    every one is named and none is, None when some are unnamed (no evidence either way)."""
    names = distinct[present[:-1]]
    if concepts.is_fused_optimizer_kernel(names).any():
        return True
    return None if present[-1] or concepts.is_unrecorded_name(names).any() else False


def kernel_mix(profile: Profile, windows: StepWindows | None) -> KernelMix | None:
    """Precision, layout conversions, elementwise share and optimizer kernels of the compute
    kernels (communication kernels left out); the shares by name of the kernels whose names
    were recorded."""
    kernels = profile.table("kernels")
    compute = ~kernels["is_comm"].to_numpy(bool)  # masks, not a copy of the kernel table
    codes, distinct = table_name_codes(profile, "kernels")
    ns = ns_by_name(kernels, compute, codes, len(distinct))
    total = int(ns.sum())
    if total <= 0:
        return None
    named = ~concepts.is_unrecorded_name(distinct)  # the last slot of ns: kernels without one
    named_ns = int(ns[:-1][named].sum())

    def share(classify: Callable[[pd.Series], pd.Series]) -> float | None:
        """Share of the named compute-kernel time in the kernels whose names ``classify``
        selects; None when no name is recorded."""
        return share_of_recorded(int(ns[:-1][named & classify(distinct).to_numpy(bool)].sum()),
                                 named_ns)

    spans = spans_where(profile, concepts.is_optimizer_step_span)
    optimizer = iv.union_of([spans])
    in_optimizer = launched_in(profile, optimizer) if len(optimizer) else None
    classes = [c for c in map(concepts.optimizer_class, spans["name"].unique()) if c]
    step = launched_in_spans(profile, spans, windows, ("kernels",),
                             "that may have been launched inside an optimizer step")
    zero_grad = launched_in_spans(profile, spans_where(profile, concepts.is_zero_grad_span),
                                  windows, ("kernels", "memset"),
                                  "that may have been launched inside a zero_grad()")
    pool = in_optimizer if in_optimizer is not None and in_optimizer.any() else compute
    present = np.zeros(len(distinct) + 1, dtype=bool)  # the last: kernels without a name
    present[codes[pool]] = True
    return KernelMix(
        origin=profile.kind, compute_kernel_ns=total,
        reduced_precision_fraction=share(concepts.is_reduced_precision_kernel),
        layout_conversion_fraction=share(concepts.is_layout_conversion_kernel),
        elementwise_fraction=share(concepts.is_elementwise_kernel),
        optimizer_kernels_per_step=step.per_step,
        fused_optimizer=fused_among(distinct, present),
        optimizer_name=classes[0] if classes else None,
        zero_grad_work_per_step=zero_grad.per_step, optimizer_unknown=step.why,
        optimizer_unlinked_per_step=step.unlinked_per_step, zero_grad_unknown=zero_grad.why,
        zero_grad_unlinked_per_step=zero_grad.unlinked_per_step,
        unnamed_kernel_ns=total - named_ns)


def max_devices_per_process(profile: Profile, windows: StepWindows | None = None
                            ) -> tuple[int | None, str | None]:
    """Most GPUs whose kernels one process launched (kernels joined to runtime calls), inside
    the step ``windows`` where there are steps (see step_devices), and why it is not known:
    kernels linked to no launch call (launches.unlinked) may be any process's, so with none
    linked the figure is None, with some a lower bound. Known whatever the links when the
    kernels ran on at most one GPU, or the linked ones already reach every GPU they ran on."""
    kernels = profile.table("kernels")
    pids, devices = profile.table("runtime")["pid"], kernels["device"].to_numpy()
    inside = launched_in_windows(profile, "kernels", windows) if windows is not None else None
    ran_on = len(pd.unique(devices if inside is None else devices[inside]))
    # Each device's launching processes (a few devices: a pass each per block, no table of
    # every launch), then the devices each process launched on.
    launchers: dict[int, set[int]] = {}
    for kernel_at, call_at in launch_pairs(profile, "kernels", inside):
        launched_on, launched_by = devices[kernel_at], ids_at(pids, call_at)
        for device in pd.unique(launched_on).tolist():
            launchers.setdefault(device, set()).update(
                pd.unique(launched_by[launched_on == device]).tolist())
    per_pid: dict[int, int] = {}
    for launching in launchers.values():
        for pid in launching:
            per_pid[pid] = per_pid.get(pid, 0) + 1
    most = max(per_pid.values(), default=0)
    if ran_on <= 1 or most == ran_on:
        return ran_on, None
    why = unlinked(profile, "kernels", inside, "that ran in the steps" if windows else "")
    return (None if not launchers and why else most), why
