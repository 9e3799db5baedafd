"""Which CUDA runtime call launched each GPU row (kernel, copy, memset), joined once per profile.

A GPU row and the runtime call that launched it carry the same correlation id. The metrics ask
for this join of the same rows many times (a 10 M-kernel profile: launch times, steps, launch
delays, the launching thread), so it is made once per profile and table and kept beside the
profile (:func:`kept.per_profile`) for as long as the profile lives.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from profreport import searches
from profreport.executors import cpu_share
from profreport.model import PROCESS_CORRELATIONS, Profile, position_dtype
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.kept import per_profile
from profreport.reports.analysis.results import origin_label
from profreport.reports.analysis.steps import StepWindows

#: The tables of the GPU's activity, in the order their rows are taken.
GPU_TABLES = ("kernels", "memcpy", "memset")
#: What the rows of each table are, in a sentence.
_ROWS = {"runtime": "runtime calls", "kernels": "kernels", "memcpy": "copies",
         "memset": "memsets"}


#: What a profile lacks where some of its GPU work is linked to no launch call (link_gaps):
#: the runtime calls altogether; correlation ids (on the calls, or on some of the work); or,
#: the work carrying ids, the calls of those ids (launched before the capture recorded calls,
#: or dropped by the profiler).
NO_RUNTIME_CALLS = "no runtime calls"
NO_CORRELATION_IDS = "no correlation ids"
CALLS_UNRECORDED = "calls unrecorded"


@dataclass(frozen=True)
class _Gap:
    """Why some chosen rows of a GPU table are linked to no launch call (:func:`_gap`)."""

    #: What the profile lacks for them (NO_RUNTIME_CALLS, NO_CORRELATION_IDS, CALLS_UNRECORDED).
    lacks: frozenset[str]
    #: The table none of whose rows records a correlation id ("runtime" or the GPU table's
    #: own); "" when both record ids, or there is no runtime call at all.
    bare: str = ""
    #: The rows chosen, those of them linked to no launch call, and of those the rows that
    #: record no correlation id (counted only where both tables record ids).
    chosen: int = 0
    unlinked: int = 0
    no_id: int = 0


def _gap(profile: Profile, table: str, rows: np.ndarray | None) -> _Gap | None:
    """What the profile lacks where some of the ``rows`` (a mask; all when None) of GPU table
    ``table`` are linked to no launch call: any runtime call (NO_RUNTIME_CALLS); the
    correlation ids of every runtime call, or of every row of the table (NO_CORRELATION_IDS,
    that table named); else, counted over the chosen rows linked to no call, the ids of some
    (NO_CORRELATION_IDS) or the calls of the ids the others carry (CALLS_UNRECORDED). None
    when each chosen row has its launch call, or none is chosen."""
    chosen = len(profile.table(table)) if rows is None else int(rows.sum())
    if not chosen:
        return None
    if profile.table("runtime").empty:
        return _Gap(frozenset({NO_RUNTIME_CALLS}))
    for name in ("runtime", table):
        ids = profile.table(name)["correlation"].to_numpy()
        if int(ids.max()) < 0:  # neither is empty: the runtime checked, rows chosen
            return _Gap(frozenset({NO_CORRELATION_IDS}), bare=name)
    missing = launch_calls(profile, table) < 0
    if rows is not None:
        missing &= rows
    count = int(missing.sum())
    if not count:
        return None
    no_id = int((missing & (_ids_of(profile, table) < 0)).sum())
    lacks = {NO_CORRELATION_IDS} if no_id else set()
    if count > no_id:
        lacks.add(CALLS_UNRECORDED)
    return _Gap(frozenset(lacks), chosen=chosen, unlinked=count, no_id=no_id)


def unlinked(profile: Profile, table: str, rows: np.ndarray | None = None,
             which: str = "") -> str | None:
    """Why which runtime call launched the ``rows`` (a mask; all by default) of GPU table
    ``table`` is unknown (:func:`_gap`): the table's rows, or the runtime calls, record no
    correlation id (an nsys table without correlationId, Kineto events without
    ``args.correlation`` or an ``ac2g`` flow), the evidence that links a launch call to its
    work, or the profile records no runtime call at all (an nsys export without its runtime
    table, a trace without ``cuda_runtime`` events); else how many of the rows (``which`` says
    what they are) no launch call is linked to, those without an id apart from those whose id
    no recorded call carries. None when each row has its launch call, or there are no rows."""
    gap = _gap(profile, table, rows)
    if gap is None:
        return None
    origin = origin_label(profile.kind)
    if NO_RUNTIME_CALLS in gap.lacks:
        return (f"the {origin} profile records no runtime calls, the calls that launched its "
                f"{_ROWS[table]}")
    if gap.bare:
        return (f"the {origin} profile records no correlation id on its {_ROWS[gap.bare]}, the "
                f"evidence that links each launch call to the {_ROWS[table]} it launched")
    return (f"the {origin} profile records no launch call for {gap.unlinked:,} of the "
            f"{gap.chosen:,} {_ROWS[table]}{f' {which}' if which else ''} ({gap.no_id:,} "
            f"with no correlation id, {gap.unlinked - gap.no_id:,} with one that no recorded "
            "runtime call carries)")


@per_profile
def link_gaps(profile: Profile) -> frozenset[str]:
    """What the profile lacks where some of its kernels, copies or memsets are linked to no
    launch call (NO_RUNTIME_CALLS, NO_CORRELATION_IDS, CALLS_UNRECORDED; :func:`_gap` of each
    table's rows); empty when every row is linked (or there are none)."""
    return frozenset().union(*(gap.lacks for table in GPU_TABLES
                               if (gap := _gap(profile, table, None)) is not None))


def counted_by_start(why: str | None) -> str | None:
    """How a count of GPU rows launched per step (launched_in_windows) counts those linked to
    no launch call, ``why`` they are (:func:`unlinked`): by the step they started in on the
    GPU, the latest they can have been launched; None when every row is linked."""
    return None if why is None else (
        f"those linked to no launch call counted by the step they started in: {why}")


@per_profile
def unlinked_launched_by(profile: Profile, table: str) -> tuple[np.ndarray, np.ndarray]:
    """The rows (positions) of GPU table ``table`` linked to no launch call, and the latest
    time each can have been launched: its own start (work starts after its launch), or, where
    earlier, the start of the recorded runtime call with the next larger correlation id of
    the same process (CUPTI counts the ids up as the calls are made, so that call began after
    the row's own launch call: work whose id lies below every recorded call's was launched
    before the profile recorded any)."""
    rows = np.flatnonzero(launch_calls(profile, table) < 0)
    latest = profile.table(table)["start"].to_numpy(np.int64)[rows]
    keys = _ids_of(profile, table)[rows].astype(np.int64)
    known = keys >= 0
    runtime = profile.table("runtime")
    if not known.any() or runtime.empty:  # no call's id is read: nothing to bound
        return rows, latest
    order, ordered = _by_correlation(profile)
    at = np.minimum(searches.searchsorted(ordered, keys[known], side="right"), len(ordered) - 1)
    later = ordered[at].astype(np.int64) > keys[known]  # a larger id: none past the last
    later &= ordered[at].astype(np.int64) // PROCESS_CORRELATIONS \
        == keys[known] // PROCESS_CORRELATIONS
    bound = np.where(later, runtime["start"].to_numpy(np.int64)[order[at]], latest[known])
    latest[known] = np.minimum(latest[known], bound)
    return rows, latest


@per_profile
def unlinked_launched_after(profile: Profile, table: str) -> np.ndarray:
    """For the rows of GPU table ``table`` linked to no launch call (those of
    :func:`unlinked_launched_by`, in its order), the earliest time each can have been launched:
    the start of the recorded runtime call with the next smaller correlation id of the same
    process (CUPTI counts the ids up as the calls are made, so that call began before the
    row's own launch call); INT64 min for a row without an id or none recorded below it.
    Kept: the optimizer's and zero_grad()'s counts both ask it, and where a row's id is read
    it sorts every runtime call by id."""
    rows = unlinked_launched_by(profile, table)[0]
    earliest = np.full(len(rows), np.iinfo(np.int64).min, dtype=np.int64)
    keys = _ids_of(profile, table)[rows].astype(np.int64)
    known = np.flatnonzero(keys >= 0)
    if not len(known) or profile.table("runtime").empty:  # no call's id is read: no bound
        return earliest
    order, ordered = _by_correlation(profile)
    at = searches.searchsorted(ordered, keys[known], side="left") - 1  # the largest id below
    below = np.maximum(at, 0)
    found = (at >= 0) & (ordered[below].astype(np.int64) // PROCESS_CORRELATIONS
                         == keys[known] // PROCESS_CORRELATIONS)
    starts = profile.table("runtime")["start"].to_numpy(np.int64)
    earliest[known[found]] = starts[order[below[found]]]
    return earliest


def launched_by(profile: Profile, table: str, rows: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """For the ``rows`` (positions) of GPU table ``table``: when each was launched, the start
    of its launch call, or, for a row linked to none, the latest time it can have been
    launched (:func:`unlinked_launched_by`); and whether each is linked."""
    call = launch_calls(profile, table)[rows]
    linked = call >= 0
    times = np.empty(len(rows), dtype=np.int64)
    times[linked] = profile.table("runtime")["start"].to_numpy(np.int64)[call[linked]]
    loose, latest = unlinked_launched_by(profile, table)
    times[~linked] = latest[searches.searchsorted(loose, rows[~linked])]
    return times, linked


def may_be_launched_after(profile: Profile, table: str, time: int) -> np.ndarray:
    """Which rows of GPU table ``table`` were launched at or after ``time``, or, linked to no
    launch call, may have been (:func:`launched_by`): a mask, made a block of rows at a time."""
    mask = np.empty(len(profile.table(table)), dtype=bool)
    for block in iv.blocks(len(mask)):
        mask[block] = launched_by(profile, table, np.arange(block.start, block.stop))[0] >= time
    return mask


def may_be_launched_in(profile: Profile, table: str, spans: iv.Intervals) -> np.ndarray:
    """Which rows of GPU table ``table`` were launched inside ``spans``, or, linked to no launch
    call, may have been: a span holds a time between the earliest
    (:func:`unlinked_launched_after`) and the latest (:func:`launched_by`) it can have been
    launched. A mask, made a block of rows at a time."""
    mask = np.empty(len(profile.table(table)), dtype=bool)
    loose, earliest = unlinked_launched_by(profile, table)[0], unlinked_launched_after(
        profile, table)
    for block in iv.blocks(len(mask)):
        rows = np.arange(block.start, block.stop)
        times, linked = launched_by(profile, table, rows)
        mask[block] = iv.inside(spans, times)
        # The last span starting by the latest time ends the latest of those that do.
        at = searches.searchsorted(spans.starts, times[~linked], side="right") - 1
        meets = at >= 0
        meets[meets] = spans.ends[at[meets]] > earliest[
            searches.searchsorted(loose, rows[~linked][meets])]
        mask[block][~linked] = meets
    return mask


def _by_correlation(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """The runtime table's rows ordered by correlation id (stable: equal ids in row order), and
    those ids in that order."""
    ids = profile.table("runtime")["correlation"].to_numpy()
    order = np.argsort(ids, kind="stable")
    order = order.astype(position_dtype(len(ids)), copy=False)  # half, while the join holds it
    return order, ids[order]


#: Correlation ids spread over more than this many slots per runtime call are joined by sorting
#: the calls instead of through a table indexed by id (it would cost more memory than the sort).
SLOTS_PER_CALL = 2
#: Unique ids spread wide that rise with the calls (CUPTI counts them up as calls are made; a
#: thread's call may start after another thread's later one) are joined through their running
#: maximum, the calls that come late looked up on their own, when at most this share of the
#: calls come late; more, and sorting every call costs little more than sorting them.
LATE_SHARE = 1 / 8


@per_profile
def _launch_index(profile: Profile
                  ) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, np.ndarray] | None]:
    """For each GPU table, the runtime row of each row's first call with its correlation id (-1
    where none was recorded; int32 where the runtime table allows), and, where two runtime
    calls share an id, the calls sorted by id (:func:`_by_correlation`: kept with the index,
    as :func:`launch_pairs` reads them on every call; None where no id repeats). Unique ids
    that lie close together (CUPTI counts them up per process) are looked up in a table
    indexed by id, no sort; unique ids spread wide that mostly rise with the calls through
    their running maximum (:func:`_rising_ids`), no sort of every call; others through the
    calls sorted by id, let go once every table is joined when the ids are unique."""
    ids = profile.table("runtime")["correlation"].to_numpy()
    dtype = position_dtype(len(ids))
    slots = _slots_by_id(ids, dtype)
    if slots is not None:
        low, row_of = slots
        return {name: _known(profile, name, _looked_up(_ids_of(profile, name), low, row_of))
                for name in GPU_TABLES}, None
    rising = _rising_ids(ids)
    if rising is not None:
        return {name: _known(profile, name, _found_rising(_ids_of(profile, name), ids, *rising,
                                                          dtype)) for name in GPU_TABLES}, None
    order, ordered = _by_correlation(profile)
    unique = bool((ordered[1:] != ordered[:-1]).all())
    calls = {name: _known(profile, name, _first_in(_ids_of(profile, name), order, ordered,
                                                   dtype)) for name in GPU_TABLES}
    return calls, None if unique else (order, ordered)


def _ids_of(profile: Profile, table: str) -> np.ndarray:
    """The correlation ids of GPU table ``table``'s rows (-1 where none was recorded)."""
    return profile.table(table)["correlation"].to_numpy()


def _known(profile: Profile, table: str, calls: np.ndarray) -> np.ndarray:
    """``calls`` (each row's launch call) with -1 for the rows that record no correlation id:
    an unknown id links nothing, though runtime calls that record none share it too (an MTIA
    trace's). Block by block, in place."""
    ids = _ids_of(profile, table)
    for block in iv.blocks(len(ids)):
        calls[block][ids[block] < 0] = -1
    return calls


def _slots_by_id(ids: np.ndarray, dtype: type) -> tuple[int, np.ndarray] | None:
    """The lowest id and, for every id from it up, the row of the call with that id (-1 for
    none); None when the ids repeat or spread over more than SLOTS_PER_CALL slots per call.
    Filled and checked :data:`intervals.BLOCK_ROWS` calls at a time."""
    if len(ids) == 0:
        return None
    low, high = int(ids.min()), int(ids.max())
    if high - low + 1 > SLOTS_PER_CALL * len(ids):
        return None
    row_of = np.full(high - low + 1, -1, dtype=dtype)
    blocks = list(iv.blocks(len(ids)))
    for block in blocks:
        row_of[ids[block].astype(np.int64) - low] = np.arange(block.start, block.stop,
                                                              dtype=dtype)
    # Every call finds its own row in its id's slot only when no other call took that slot.
    for block in blocks:
        if (row_of[ids[block].astype(np.int64) - low]
                != np.arange(block.start, block.stop)).any():
            return None
    return low, row_of


def _rising_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """For unique ids that mostly rise with the calls: the running maximum of the ids at the
    end of each :data:`intervals.BLOCK_ROWS` calls (the maximum is ascending: the id of each
    call on time, that of the last one on time for a call that comes late, its id below an
    earlier call's), and the late calls' rows and ids, ordered by id; None when an id repeats,
    the calls are none, or more than LATE_SHARE of them come late. The maximum is made a block
    of calls at a time and let go: a 17 M-call join holds no array as long as the calls."""
    if len(ids) == 0:
        return None
    tops, late, steady = [], [], 0  # steady: calls after the first where the maximum stays
    for block in iv.blocks(len(ids)):
        reach = _block_reach(ids, block, tops[-1] if tops else None)
        late.append(np.flatnonzero(ids[block] < reach) + block.start)
        steady += int((reach[1:] == reach[:-1]).sum()) + int(bool(tops) and reach[0] == tops[-1])
        tops.append(int(reach[-1]))
    late_rows = np.concatenate(late)
    if len(late_rows) > LATE_SHARE * len(ids):
        return None
    late_ids = ids[late_rows]
    order = np.argsort(late_ids, kind="stable")
    late_rows, late_ids = late_rows[order], late_ids[order]
    # On time, a call's id passes every earlier one's: the maximum rises at each, stays at
    # each late one, and a call that neither is a repeat; so is a late id that a call on time
    # holds (the maximum reaches it there).
    tops = np.asarray(tops, dtype=np.int64)
    if steady != len(late_rows) or (late_ids[1:] == late_ids[:-1]).any() or \
            (_rising_rows(late_ids, ids, tops) >= 0).any():
        return None
    return tops, late_rows, late_ids


def _block_reach(ids: np.ndarray, block: slice, carried: int | None) -> np.ndarray:
    """The running maximum of the ids over the calls of ``block``, from the maximum
    ``carried`` over the calls before it."""
    reach = np.maximum.accumulate(ids[block])
    if carried is not None:
        np.maximum(reach, carried, out=reach)
    return reach


def _rising_rows(keys: np.ndarray, ids: np.ndarray, tops: np.ndarray) -> np.ndarray:
    """For each key, the row of the call on time with that id (-1 for none): the first place
    where the running maximum reaches the key, found in the block whose maximum first does
    (:func:`_rising_ids`' ``tops``), its maximum made again."""
    found = np.full(len(keys), -1, dtype=np.int64)
    at = searches.searchsorted(tops, keys, side="left")  # len(tops): beyond every call's id
    by_block = np.argsort(at, kind="stable")
    ends = np.cumsum(np.bincount(at, minlength=len(tops) + 1))
    for number in np.flatnonzero(np.diff(ends[:-1], prepend=0)).tolist():
        block = slice(number * iv.BLOCK_ROWS, min((number + 1) * iv.BLOCK_ROWS, len(ids)))
        reach = _block_reach(ids, block, int(tops[number - 1]) if number else None)
        mine = by_block[ends[number - 1] if number else 0:ends[number]]
        place = searches.searchsorted(reach, keys[mine], side="left")  # the block's top reaches it
        known = reach[place] == keys[mine]
        found[mine[known]] = place[known] + block.start
    return found


def _found_rising(keys: np.ndarray, ids: np.ndarray, tops: np.ndarray, late: np.ndarray,
                  late_ids: np.ndarray, dtype: type) -> np.ndarray:
    """For each key, the row of the call with that id (-1 for none), from :func:`_rising_ids`:
    the call on time with it (:func:`_rising_rows`), else the late call with it, searched by
    id; :data:`intervals.BLOCK_ROWS` keys at a time."""
    found = np.full(len(keys), -1, dtype=dtype)
    for block in iv.blocks(len(keys)):
        wanted = keys[block]
        found[block] = _rising_rows(wanted, ids, tops)
        if len(late_ids):
            place = np.minimum(searches.searchsorted(late_ids, wanted, side="left"), len(late) - 1)
            known = late_ids[place] == wanted
            found[block][known] = late[place[known]]
    return found


def _looked_up(keys: np.ndarray, low: int, row_of: np.ndarray) -> np.ndarray:
    """For each key, the row ``row_of`` holds for it (-1 outside its ids), block by block."""
    out = np.full(len(keys), -1, dtype=row_of.dtype)
    for block in iv.blocks(len(keys)):
        slot = keys[block].astype(np.int64) - low
        known = (slot >= 0) & (slot < len(row_of))
        out[block][known] = row_of[slot[known]]
    return out


def join_beside(profile: Profile) -> None:
    """Start joining the GPU rows to their launch calls on a thread of its own (``beside``, see
    kept.per_profile) when this process has a second CPU: the first metrics read only the GPU
    tables' times, and the join (sorting every runtime call by id) is the launch metrics' first
    step."""
    if cpu_share() >= 2 and profile.has("runtime") and any(map(profile.has, GPU_TABLES)):
        _launch_index.beside(profile)


def forget_launches(profile: Profile, windows: StepWindows | None) -> None:
    """Let go of the launch join and which GPU rows were launched in the step ``windows``
    (kept beside the profile) once their last reader is done: 54 MB for a 10 M-kernel export,
    held through the rest of the analysis otherwise."""
    _launch_index.forget(profile)
    for table in GPU_TABLES:
        launched_in_windows.forget(profile, table, windows)


def _first_in(keys: np.ndarray, order: np.ndarray, ordered: np.ndarray,
              dtype: type = np.int64) -> np.ndarray:
    """For each key, the first of the calls (``order``: their stable order by id, ``ordered``:
    their ids in that order) with that id (-1 for none), :data:`intervals.BLOCK_ROWS` keys at a
    time."""
    found = np.full(len(keys), -1, dtype=dtype)
    if len(ordered) == 0:
        return found
    for block in iv.blocks(len(keys)):
        place = searches.searchsorted(ordered, keys[block], side="left")
        np.minimum(place, len(ordered) - 1, out=place)
        known = ordered[place] == keys[block]
        found[block][known] = order[place[known]]
    return found


def launch_calls(profile: Profile, table: str) -> np.ndarray:
    """For each row of GPU table ``table``, the runtime row of the first call with its
    correlation id (-1 where none was recorded)."""
    return _launch_index(profile)[0][table]


def launch_pairs(profile: Profile, table: str, rows: np.ndarray | None = None
                 ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every pair (row, runtime call) with the same correlation id, for the ``rows`` (a mask;
    all by default) of GPU table ``table``, in the order of an inner merge (by row, then by
    call), a block of :data:`intervals.BLOCK_ROWS` rows at a time. Where ids repeat (several
    processes in one export) a row pairs with every call of its id."""
    calls = launch_calls(profile, table)
    repeated = _launch_index(profile)[1]  # the calls sorted once per profile, where ids repeat
    if repeated is not None:
        order, ordered = repeated
        ids = profile.table(table)["correlation"].to_numpy()
    for block in iv.blocks(len(calls)):
        chosen = calls[block] >= 0
        if rows is not None:
            chosen &= rows[block]
        found = np.flatnonzero(chosen)
        if repeated is None:
            yield found + block.start, calls[block][found]
            continue
        keys = ids[block][found]
        pair, row = iv.ranges_of(searches.searchsorted(ordered, keys, side="left"),
                                 searches.searchsorted(ordered, keys, side="right"))
        yield found[row] + block.start, order[pair]


def launch_times(profile: Profile, table: str, rows: np.ndarray | slice = slice(None)
                 ) -> np.ndarray:
    """When the CPU launched the ``rows`` (positions or a mask) of GPU table ``table``: the
    start of the runtime call with the same correlation id, or the row's own GPU start when no
    call was recorded."""
    call = launch_calls(profile, table)[rows]
    times = profile.table(table)["start"].to_numpy(np.int64)[rows].copy()
    launched = call >= 0
    times[launched] = profile.table("runtime")["start"].to_numpy(np.int64)[call[launched]]
    return times


@per_profile
def launched_in_windows(profile: Profile, table: str, windows: StepWindows) -> np.ndarray:
    """Whether each row of GPU table ``table`` was launched inside a step window: a kernel
    launched in step N that runs in step N+1 belongs to the steps; one linked to no launch
    call is taken by its own start (launch_times; its counts say so: counted_by_start). Kept
    read-only, a byte a row (its readers ask only whether, never which step: 10 MB held
    through the analysis for 10 M kernels, not the 20 MB of int16 step numbers, and no mask
    made again per reader)."""
    rows = len(profile.table(table))
    inside = np.empty(rows, dtype=bool)
    for block in iv.blocks(rows):
        inside[block] = windows.index_of(launch_times(profile, table, block)) >= 0
    inside.flags.writeable = False
    return inside
