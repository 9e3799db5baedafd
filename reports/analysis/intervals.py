"""Vectorised interval arithmetic on int64 nanosecond intervals (numpy, no per-row loops).

An :class:`Intervals` is a set of disjoint, sorted ``[start, end)`` intervals; build one with
:func:`union` from any overlapping starts/ends, then subtract, intersect and measure it against
windows (step windows, the GPU window) without Python loops over rows.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from profreport import searches


@dataclass(frozen=True)
class Intervals:
    """Disjoint intervals sorted by start: ``starts[i] < ends[i] <= starts[i + 1]``."""

    starts: np.ndarray
    ends: np.ndarray

    @property
    def total(self) -> int:
        """Total covered length in ns."""
        return int((self.ends - self.starts).sum())

    def __len__(self) -> int:
        """Number of disjoint intervals."""
        return len(self.starts)


EMPTY = Intervals(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))


#: Rows handled at a time by the block-wise passes (:func:`union`, :func:`merge`, sums per name):
#: their temporaries stay a few MB, reused from one block to the next, instead of several arrays
#: as long as a 10 M-row table.
BLOCK_ROWS = 1 << 18


def blocks(count: int, size: int | None = None, first: int = 0) -> Iterator[slice]:
    """Rows ``first`` to ``count`` as slices of ``size`` rows (:data:`BLOCK_ROWS` by default,
    read when called), the last one stopping at ``count``."""
    size = size or BLOCK_ROWS
    return (slice(at, min(at + size, count)) for at in range(first, count, size))


#: The longest gap or length a packed interval holds in its uint32 columns (4.29 s); a longer
#: one (an idle gap of several seconds) is held as int64 beside them, by position.
PACKED_MAX = int(np.iinfo(np.uint32).max)


@dataclass(frozen=True)
class Packed:
    """Disjoint intervals in start order (an :class:`Intervals`) in 8 bytes each instead of 16:
    each one's gap from the previous one's end (the first's from ``origin``, its start) and its
    length as uint32, those with a gap or length past :data:`PACKED_MAX` as int64 beside them
    (``wide_at``: their positions, ascending). Read back a piece at a time (:func:`pieces`): a
    GPU's 1.5 M busy intervals are 23 MB, not 46 MB, between their readers."""

    origin: int
    gaps: np.ndarray
    lengths: np.ndarray
    wide_at: np.ndarray
    wide_gaps: np.ndarray
    wide_lengths: np.ndarray

    @property
    def total(self) -> int:
        """Total covered length in ns."""
        wide = int(self.lengths[self.wide_at].sum(dtype=np.int64))
        return int(self.lengths.sum(dtype=np.int64)) - wide + int(self.wide_lengths.sum())

    def __len__(self) -> int:
        """Number of disjoint intervals."""
        return len(self.gaps)

    def intervals(self) -> Intervals:
        """All of them at once, as :class:`Intervals`."""
        whole = list(pieces(self))
        if len(whole) <= 1:
            return whole[0] if whole else EMPTY
        return Intervals(np.concatenate([piece.starts for piece in whole]),
                         np.concatenate([piece.ends for piece in whole]))


def pack(made: Iterable[Intervals], most: int) -> Packed:
    """Disjoint intervals given in order, piece after piece (none touching the next), at most
    ``most`` of them, as :class:`Packed`: the pieces packed as they come, never all held as
    int64 (arrays sized for ``most``: pages past the count are never touched)."""
    gaps, lengths = np.empty(most, np.uint32), np.empty(most, np.uint32)
    wide: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    origin = before = count = 0  # ``before``: the end before the piece's first interval
    for piece in made:
        if not len(piece):
            continue
        if not count:
            origin = before = int(piece.starts[0])
        gap = np.empty(len(piece), np.int64)
        gap[0] = piece.starts[0] - before
        np.subtract(piece.starts[1:], piece.ends[:-1], out=gap[1:])
        length = piece.ends - piece.starts
        before = int(piece.ends[-1])
        at = np.flatnonzero((gap > PACKED_MAX) | (length > PACKED_MAX))
        if len(at):
            wide.append((at + count, gap[at], length[at]))
            gap[at] = length[at] = 0
        gaps[count:count + len(piece)], lengths[count:count + len(piece)] = gap, length
        count += len(piece)
    wide_at, wide_gaps, wide_lengths = (np.concatenate([w[k] for w in wide]) if wide else
                                        np.empty(0, np.int64) for k in range(3))
    return Packed(origin, gaps[:count], lengths[:count], wide_at, wide_gaps, wide_lengths)


def pieces(intervals: Intervals | Packed, rows: int | None = None) -> Iterator[Intervals]:
    """``intervals``, in order, ``rows`` (:data:`BLOCK_ROWS` by default) at a time as
    :class:`Intervals` (slices of them, or decoded from :class:`Packed`)."""
    if isinstance(intervals, Intervals):
        for block in blocks(len(intervals), rows):
            yield Intervals(intervals.starts[block], intervals.ends[block])
        return
    before = intervals.origin  # the end before the block's first interval
    for block in blocks(len(intervals), rows):
        ends = intervals.gaps[block].astype(np.int64)
        length = intervals.lengths[block].astype(np.int64)
        wide = slice(*searches.searchsorted(intervals.wide_at, [block.start, block.stop]).tolist())
        at = intervals.wide_at[wide] - block.start
        ends[at], length[at] = intervals.wide_gaps[wide], intervals.wide_lengths[wide]
        ends += length
        np.cumsum(ends, out=ends)
        ends += before
        before = int(ends[-1])
        yield Intervals(ends - length, ends)


def union(starts: np.ndarray | pd.Series, ends: np.ndarray | pd.Series,
          rows: np.ndarray | None = None) -> Intervals:
    """Merge possibly overlapping intervals (the ``rows`` of them a mask selects; all by
    default) into disjoint ones (sort + cumulative max), block by block (:data:`BLOCK_ROWS`
    rows): a table in start order is read in place, its chosen rows never copied out whole."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if not ascending(s):  # tables come in start order: sort only when they are not
        if rows is not None:
            s, e, rows = s[rows], e[rows], None
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    if searches.compiled():  # one pass in C over the rows in place
        writer = searches.UnionWriter(len(s))
        writer.add(s, e, rows)
        return _written(writer)
    if rows is None:
        return _union_blocks(((s[block], e[block]) for block in blocks(len(s))), len(s))
    return _union_blocks(((s[block][rows[block]], e[block][rows[block]])
                          for block in blocks(len(s))), len(s))


def _union_blocks(blocks: Iterable[tuple[np.ndarray, np.ndarray]], rows: int) -> Intervals:
    """The union of ``rows`` intervals given block after block, their starts ascending across
    blocks: a cumulative max of the ends, carried from one block to the next. The merged
    intervals are written into arrays sized for ``rows`` (their pages past the merged count are
    never touched, so never resident) instead of being gathered and concatenated. In C
    (:class:`searches.UnionWriter`) where it is built."""
    if searches.compiled():
        writer = searches.UnionWriter(rows)
        for block_starts, block_ends in blocks:
            writer.add(block_starts, block_ends)
        return _written(writer)
    merged_starts = np.empty(rows, dtype=np.int64)
    merged_ends = np.empty(rows, dtype=np.int64)
    count = 0  # merged intervals opened so far; the last one's end is not known yet
    reached = None
    for block_starts, block_ends in blocks:
        if len(block_starts) == 0:
            continue
        reach = np.maximum.accumulate(block_ends)
        if reached is not None:  # the carried reach: above a leading run of the block's only
            reach[:int(searches.searchsorted(reach, reached, side="left"))] = reached
        # A merged interval starts where a start lies beyond everything reached before it; the
        # one before it ends at that reach (the carried one for a block's first row).
        new = np.empty(len(block_starts), dtype=bool)
        new[0] = reached is None or block_starts[0] > reached
        np.greater(block_starts[1:], reach[:-1], out=new[1:])
        opened = np.flatnonzero(new)
        merged_starts[count:count + len(opened)] = block_starts[opened]
        closed = reach[opened - 1]  # opened[0] == 0 reads reach[-1]: the carried reach instead
        if len(opened) and opened[0] == 0:
            closed = closed[1:]
            if count:
                merged_ends[count - 1] = reached
        merged_ends[count + len(opened) - 1 - len(closed):count + len(opened) - 1] = closed
        count += len(opened)
        reached = int(reach[-1])
    if reached is None:
        return EMPTY
    merged_ends[count - 1] = reached
    merged_starts, merged_ends = merged_starts[:count], merged_ends[:count]
    # Empty intervals (end <= start) stay in until here: their end never reaches past a later
    # start, so they join no two intervals, and alone they make a group left out now.
    held = merged_ends > merged_starts
    if held.all():
        return Intervals(merged_starts, merged_ends)
    return Intervals(merged_starts[held], merged_ends[held])


def _written(writer: searches.UnionWriter) -> Intervals:
    """The union a :class:`searches.UnionWriter` wrote (EMPTY when it holds none)."""
    merged = Intervals(*writer.done())
    return merged if len(merged) else EMPTY


def lengths(starts: np.ndarray | pd.Series, ends: np.ndarray | pd.Series,
            rows: np.ndarray) -> Iterator[np.ndarray]:
    """The lengths of the ``rows`` (a mask) of a table's intervals, :data:`BLOCK_ROWS` rows at a
    time (for sums and counts with no column-sized array)."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    for block in blocks(len(s)):
        chosen = rows[block]
        length = e[block][chosen]
        length -= s[block][chosen]
        yield length


def ascending(values: np.ndarray) -> bool:
    """Whether ``values`` never decrease (checked block by block, no column-sized mask)."""
    return not any((values[block.start + 1:block.stop + 1] < values[block]).any()
                   for block in blocks(len(values) - 1))


def union_of(frames: list[pd.DataFrame]) -> Intervals:
    """Union of the ``start``/``end`` intervals of several tables."""
    frames = [frame for frame in frames if not frame.empty]
    if not frames:
        return EMPTY
    return union_each([(f["start"].to_numpy(), f["end"].to_numpy()) for f in frames])


#: Columns of intervals: ``(starts, ends)``, or ``(starts, ends, rows)`` with a mask of the
#: rows taken (None: all).
Columns = tuple[np.ndarray | pd.Series, np.ndarray | pd.Series] | tuple[
    np.ndarray | pd.Series, np.ndarray | pd.Series, np.ndarray | None]


def union_each(columns: list[Columns]) -> Intervals:
    """Union of several tables' intervals (tables come in start order: no sort, no
    concatenated copy of their columns, the chosen rows read in place), made a stretch of time
    at a time (:func:`union_pieces`) and written piece after piece into arrays sized for every
    row (pages past the union's count are never touched, so never resident)."""
    most, made = union_pieces(columns)
    starts, ends = np.empty(most, dtype=np.int64), np.empty(most, dtype=np.int64)
    count = 0
    for piece in made:
        starts[count:count + len(piece)] = piece.starts
        ends[count:count + len(piece)] = piece.ends
        count += len(piece)
    return Intervals(starts[:count], ends[:count]) if count else EMPTY


def union_pieces(columns: list[Columns]) -> tuple[int, Iterator[Intervals]]:
    """The union of several tables' intervals as pieces in order, none touching the next, and
    how many intervals it holds at most: each stretch of time's union (:func:`stretches`),
    made from the tables' rows there, its last interval held back until the next stretch's
    first, which may join it, so no table's own union is built whole beside the union of the
    others (a device's 2 M kernels of a 10 M-kernel export: 34 MB). In each stretch the
    tables' rows join the union fewest first: each merge reads the union so far whole, so a
    device's few copies and memsets are merged together and then once with its kernels, not
    each into the kernels' union."""
    parts = [Stretched(Rows(*column)) for column in columns]
    return sum(len(part.starts) + 1 for part in parts), _stretched_union(parts)


def _stretched_union(parts: list[Stretched]) -> Iterator[Intervals]:
    """:func:`union_pieces`' pieces."""
    held: tuple[int, int] | None = None  # the last interval so far: the next may join it
    for low, high in stretches(parts):
        rows = sorted((part.within(low, high) for part in parts), key=lambda r: len(r.starts))
        piece = functools.reduce(merge_rows, rows, EMPTY)
        if not len(piece):
            continue
        starts, ends = piece.starts, piece.ends
        if held is not None and starts[0] <= held[1]:  # touching at ``low``: joined
            starts = np.concatenate([[held[0]], starts[1:]])
        elif held is not None:
            starts, ends = np.concatenate([[held[0]], starts]), np.concatenate([[held[1]], ends])
        held = (int(starts[-1]), int(ends[-1]))
        if len(starts) > 1:
            yield Intervals(starts[:-1], ends[:-1])
    if held is not None:
        yield Intervals(np.array([held[0]]), np.array([held[1]]))


def ranges_of(first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each i, the positions ``first[i] .. last[i] - 1`` (none where ``last <= first``),
    one range after another, and the i each comes from. Both arrays are written over: each
    step in place, not another array as long as them."""
    last -= first
    np.maximum(last, 0, out=last)
    counts = last
    before = np.cumsum(counts)
    before -= counts
    first -= before
    del before
    positions = np.repeat(first, counts)
    positions += np.arange(len(positions))
    return positions, np.repeat(np.arange(len(counts)), counts)


def _overlaps(a: Intervals, b: Intervals) -> Intervals:
    """The parts covered by both ``a`` and ``b``: each pair of overlapping intervals, found by
    binary search in the sorted ends and starts (no sort of all the endpoints), made
    :data:`BLOCK_ROWS` pairs at a time (a few windows against millions of idle gaps are
    millions of pairs)."""
    first = searches.searchsorted(b.ends, a.starts, side="right")  # a[i] meets b[first[i]:stop[i]]
    counts = searches.searchsorted(b.starts, a.ends, side="left")
    counts -= first
    np.maximum(counts, 0, out=counts)
    through = np.cumsum(counts)  # pairs up to and including a[i]'s
    total = int(through[-1]) if len(through) else 0
    return _union_blocks((_pieces(a, b, first, through - counts, through, pairs)
                          for pairs in (np.arange(block.start, block.stop)
                                        for block in blocks(total))), total)


def _pieces(a: Intervals, b: Intervals, first: np.ndarray, before: np.ndarray,
            through: np.ndarray, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The overlaps of the ``pairs`` (numbers in the order of a, then b) of :func:`_overlaps`:
    pair p belongs to the a[i] whose pairs run through it, and is its (p - before[i])-th b."""
    in_a = searches.searchsorted(through, pairs, side="right")
    in_b = first[in_a] + pairs - before[in_a]
    starts = a.starts[in_a]
    np.maximum(starts, b.starts[in_b], out=starts)
    ends = a.ends[in_a]
    np.minimum(ends, b.ends[in_b], out=ends)
    return starts, ends


def subtract(a: Intervals, b: Intervals | Packed) -> Intervals:
    """The parts of ``a`` not covered by ``b``: :func:`subtract_blocks`' stretches joined."""
    pieces = list(subtract_blocks(a, b))
    if len(pieces) <= 1:
        return pieces[0] if pieces else EMPTY
    return Intervals(np.concatenate([piece.starts for piece in pieces]),
                     np.concatenate([piece.ends for piece in pieces]))


def subtract_blocks(a: Intervals, b: Intervals | Packed, rows: int | None = None
                    ) -> Iterator[Intervals]:
    """:func:`subtract` a stretch of time at a time: the parts of ``a`` not covered by ``b``, in
    order, made from ``rows`` (:data:`BLOCK_ROWS` by default) of ``b``'s gaps at a time (read
    from ``b`` a piece at a time, :func:`pieces`) against the intervals of ``a`` that reach into
    them (the gaps of 6 M busy intervals, and the parts of a few windows they leave, are never
    built whole). Joined, the pieces are ``subtract(a, b)``: parts from different gaps never
    touch, ``b``'s intervals being non-empty."""
    if len(a) == 0:
        return
    if len(b) == 0:
        yield a
        return
    limits = np.iinfo(np.int64)
    before = limits.min  # gap i runs from b's (i - 1)-th end (or -inf) to its i-th start
    for piece in pieces(b, rows):
        starts = np.concatenate([[before], piece.ends[:-1]])
        before = int(piece.ends[-1])
        yield from _uncovered(a, starts, piece.starts)
    yield from _uncovered(a, np.array([before]), np.array([limits.max]))


def _uncovered(a: Intervals, starts: np.ndarray, ends: np.ndarray) -> Iterator[Intervals]:
    """The parts of ``a`` inside the gaps ``[starts[i], ends[i])`` (disjoint, in order), made
    from the intervals of ``a`` that reach into them; none when nothing of ``a`` is there."""
    reaching = slice(int(searches.searchsorted(a.ends, starts[0], side="right")),
                     int(searches.searchsorted(a.starts, ends[-1], side="left")))
    if reaching.stop > reaching.start:
        parts = _overlaps(Intervals(a.starts[reaching], a.ends[reaching]),
                          Intervals(starts, ends))
        if len(parts):
            yield parts


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """The parts covered by both ``a`` and ``b``."""
    if len(a) == 0 or len(b) == 0:
        return EMPTY
    return _overlaps(a, b) if len(a) <= len(b) else _overlaps(b, a)  # searched: the fewer


def intersect_pieces(a: Intervals, b: Intervals | Packed) -> Intervals:
    """The parts covered by both ``a`` and ``b``, ``b`` read a piece at a time (:func:`pieces`):
    its pieces never touch, so their parts joined are ``intersect(a, b)``."""
    parts = [part for part in (intersect(a, piece) for piece in pieces(b)) if len(part)]
    if len(parts) <= 1:
        return parts[0] if parts else EMPTY
    return Intervals(np.concatenate([part.starts for part in parts]),
                     np.concatenate([part.ends for part in parts]))


def merge(a: Intervals, b: Intervals) -> Intervals:
    """Union of two interval sets: both are sorted, so they are interleaved by binary search
    (each one's place among the other's starts, ties ``a`` first) instead of sorted again, a
    stretch of time at a time (at most :data:`BLOCK_ROWS` of each's intervals)."""
    if len(a) == 0 or len(b) == 0:
        return b if len(a) == 0 else a
    return _merged(a, b)


@dataclass(frozen=True)
class Rows:
    """The intervals of a table's rows as they are (they may overlap), the ``rows`` of them a
    mask selects (all when None): merged into a union row by row (:func:`merge_rows`), never
    built into a union of their own (10 M kernels are an 8 M-interval union, 135 MB)."""

    starts: np.ndarray | pd.Series
    ends: np.ndarray | pd.Series
    rows: np.ndarray | None = None


def merge_rows(a: Intervals, part: Rows) -> Intervals:
    """Union of ``a`` and the intervals of a table's rows (``part``): when the rows come in
    start order (tables do) they are merged into ``a`` as they are, the chosen ones a block at
    a time, without building their own union first (17 M runtime calls are 17 M intervals of
    their own)."""
    s = np.asarray(part.starts, dtype=np.int64)
    e = np.asarray(part.ends, dtype=np.int64)
    if len(a) == 0 or len(s) == 0 or not ascending(s):
        return merge(a, union(s, e, part.rows))
    return _merged(a, Intervals(s, e), part.rows)


class Stretched:
    """A part (:class:`Intervals`, or :class:`Rows` in start order) taken a stretch of time at a
    time, the stretches in order: in each, what it covers there, as intervals in start order
    (one carried from before the stretch first, where earlier intervals reach into it)."""

    def __init__(self, part: Intervals | Rows) -> None:
        """Start before every stretch. Rows out of start order are made their union first."""
        rows = None
        if isinstance(part, Rows):
            starts = np.asarray(part.starts, dtype=np.int64)
            ends = np.asarray(part.ends, dtype=np.int64)
            rows = part.rows
            if not ascending(starts):
                part, rows = union(starts, ends, rows), None
        if isinstance(part, Intervals):
            starts, ends = part.starts, part.ends
        self.starts, self.ends, self.rows = starts, ends, rows
        self.taken = 0  # rows starting before the stretches done
        self.reach = np.iinfo(np.int64).min  # the latest end of those rows

    def within(self, low: int, high: int) -> Rows:
        """What the part covers in ``[low, high)``, the stretch after the last one asked."""
        stop = int(searches.searchsorted(self.starts, high, side="left"))
        starts, ends = self.starts[self.taken:stop], self.ends[self.taken:stop]
        if self.rows is not None:
            chosen = self.rows[self.taken:stop]
            starts, ends = starts[chosen], ends[chosen]
        carried = min(self.reach, high)
        if len(ends):
            self.reach = max(self.reach, int(ends.max()))
        self.taken = stop
        ends = np.minimum(ends, high)
        if carried > low:
            starts, ends = np.concatenate([[low], starts]), np.concatenate([[carried], ends])
        return Rows(starts, ends)


#: Rows of each part a stretch of time holds at most (:func:`stretches`): a stretch's running
#: union is a few MB, where the claimed time of a whole 10 M-kernel export is 7.5 M intervals
#: (119 MB) and its compute kernels' union 8.4 M (135 MB); 2^20 rows took a 400 MB Kineto
#: trace's 472 k API calls in one stretch, and its breakdown's claim to the analysis's peak,
#: 10 MB above the next step's.
STRETCH_ROWS = 1 << 18


def stretches(parts: list[Stretched], rows: int | None = None) -> Iterator[tuple[int, int]]:
    """Stretches of time, in order, that cover all of it, each holding the starts of at most
    ``rows`` rows (:data:`STRETCH_ROWS` by default, read when called) of every part."""
    rows = rows or STRETCH_ROWS
    limits = np.iinfo(np.int64)
    bounds = np.unique(np.concatenate([np.empty(0, np.int64)]
                                      + [part.starts[rows::rows] for part in parts])).tolist()
    return zip([limits.min, *bounds], [*bounds, limits.max], strict=True)


def _merged(a: Intervals, b: Intervals, rows: np.ndarray | None = None) -> Intervals:
    """:func:`merge` of two non-empty sets whose starts ascend (``b`` may overlap itself; only
    its ``rows``, a mask, are taken when given)."""
    if searches.compiled():  # one linear pass in C over both, in place
        writer = searches.UnionWriter(len(a) + len(b))
        writer.add_runs(a.starts, a.ends, b.starts, b.ends, rows)
        return _written(writer)
    bounds = np.unique(np.concatenate([a.starts[BLOCK_ROWS::BLOCK_ROWS],
                                       b.starts[BLOCK_ROWS::BLOCK_ROWS]]))
    cut_a = np.concatenate([[0], searches.searchsorted(a.starts, bounds, side="left"), [len(a)]])
    cut_b = np.concatenate([[0], searches.searchsorted(b.starts, bounds, side="left"), [len(b)]])
    return _union_blocks((_interleaved(a, b, slice(*cut_a[k:k + 2]), slice(*cut_b[k:k + 2]),
                                       rows) for k in range(len(cut_a) - 1)), len(a) + len(b))


def _interleaved(a: Intervals, b: Intervals, in_a: slice, in_b: slice,
                 rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The intervals ``in_a`` of ``a`` and ``in_b`` of ``b`` (the same stretch of time; of
    ``b`` only its ``rows``, a mask, when given) as one sequence by start, ties ``a`` first:
    a stable sort of the two ascending runs one after the other is one linear merge of them
    (timsort), where placing each by binary search in the other read both again per element."""
    b_starts, b_ends = b.starts[in_b], b.ends[in_b]
    if rows is not None:
        b_starts, b_ends = b_starts[rows[in_b]], b_ends[rows[in_b]]
    starts = np.concatenate([a.starts[in_a], b_starts])
    order = np.argsort(starts, kind="stable")
    return starts[order], np.concatenate([a.ends[in_a], b_ends])[order]


@dataclass
class Cursor:
    """Where a walk over the intervals of one :class:`Intervals` may start again (see
    :func:`covered_before`): the first interval of the block that held the earliest position
    the last walk was asked, and the covered length of the intervals before that one."""

    at: int = 0
    before: int = 0


def covered_before(iv: Intervals, times: np.ndarray, cursor: Cursor | None = None
                   ) -> np.ndarray:
    """For each time t, the covered length of ``iv`` in ``(-inf, t)``. A ``cursor`` kept
    between calls on the same ``iv`` (times asked block after block, in rising order) lets each
    call start from the block of intervals where the last one's earliest time lay instead of
    from the first (a time earlier than that starts again from the first)."""
    times = np.asarray(times, dtype=np.int64)
    if len(iv) == 0:
        return np.zeros(len(times), dtype=np.int64)
    # The k intervals starting at or before t: all but the last end by its start, so they cover
    # their whole length but for what the last reaches past t.
    k = searches.searchsorted(iv.starts, times, side="right")
    past = iv.ends[k - 1]  # k == 0 reads the last interval: none is before t, set to 0 below
    past -= times
    np.maximum(past, 0, out=past)
    covered = _length_before(iv, k, cursor)
    covered -= past
    covered[k == 0] = 0
    return covered


def _length_before(iv: Intervals, positions: np.ndarray, cursor: Cursor | None = None
                   ) -> np.ndarray:
    """For each position p, the total length of ``iv``'s intervals before the p-th. A running
    sum over the intervals when it is no longer than the positions asked (or one block);
    otherwise summed a block of :data:`BLOCK_ROWS` intervals at a time in the order of the
    positions, with no array as long as ``iv`` (a running sum over the 7 M merged intervals
    that a few thousand step windows ask about is 118 MB), from the ``cursor``'s block when no
    position lies before it, else from the first; the cursor then moves to the block of the
    earliest position."""
    if len(iv) <= max(len(positions), BLOCK_ROWS):
        before = np.zeros(len(iv) + 1, dtype=np.int64)
        np.cumsum(iv.ends - iv.starts, out=before[1:])
        return before[positions]
    order = np.argsort(positions, kind="stable")
    ordered = positions[order]
    walk = cursor if cursor is not None and ordered[0] >= cursor.at else Cursor()
    found = np.zeros(len(positions), dtype=np.int64)
    carried = walk.before
    done = int(searches.searchsorted(ordered, walk.at, side="right"))  # nothing between them
    found[:done] = carried
    first = None  # the block of the first position past the walk's: a later ask starts there
    for block in blocks(len(iv), first=walk.at):
        if done == len(ordered):
            break
        running = np.cumsum(iv.ends[block] - iv.starts[block])
        upto = int(searches.searchsorted(ordered, block.stop, side="right"))  # in (start, stop]
        found[done:upto] = carried + running[ordered[done:upto] - block.start - 1]
        if first is None and upto > done:
            first = Cursor(block.start, carried)
        carried += int(running[-1])
        done = upto
    if cursor is not None and first is not None:
        cursor.at, cursor.before = first.at, first.before
    out = np.empty(len(positions), dtype=np.int64)
    out[order] = found
    return out


def inside(iv: Intervals, times: np.ndarray) -> np.ndarray:
    """Whether each time lies in an interval of ``iv`` (``start <= t < end``)."""
    times = np.asarray(times, dtype=np.int64)
    at = searches.searchsorted(iv.starts, times, side="right") - 1
    found = at >= 0
    found[found] = times[found] < iv.ends[at[found]]
    return found


def overlap_per_window(iv: Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Covered length of ``iv`` inside each window ``[starts[i], ends[i])`` (both ends of every
    window measured in one pass over the intervals)."""
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    if len(iv) == 0:
        return np.zeros(len(starts), dtype=np.int64)
    before = covered_before(iv, np.concatenate([ends, starts]))
    return before[:len(ends)] - before[len(ends):]


def reaching(starts: np.ndarray, ends: np.ndarray, low: int, high: int) -> np.ndarray:
    """The windows ``[starts[i], ends[i])`` reaching into ``[low, high)``, by index: intervals
    lying in it cover nothing of the others (:func:`overlap_per_window`: both of their ends lie
    past it on one side, covered before them alike)."""
    return np.flatnonzero((np.maximum(starts, ends) > low) & (np.minimum(starts, ends) < high))


def gaps(iv: Intervals) -> Intervals:
    """The holes between consecutive intervals (idle time inside the covered span)."""
    if len(iv) < 2:
        return EMPTY
    return Intervals(iv.ends[:-1], iv.starts[1:])
