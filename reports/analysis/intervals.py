"""Vectorised interval arithmetic on int64 nanosecond intervals (numpy, no per-row loops).

An :class:`Intervals` is a set of disjoint, sorted ``[start, end)`` intervals; build one with
:func:`union` from any overlapping starts/ends, then subtract, intersect and measure it against
windows (step windows, the GPU window) without Python loops over rows.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd


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


def union(starts: np.ndarray | pd.Series, ends: np.ndarray | pd.Series) -> Intervals:
    """Merge possibly overlapping intervals into disjoint ones (sort + cumulative max)."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if len(s) == 0:
        return EMPTY
    if (s[1:] < s[:-1]).any():  # tables come in start order: sort only when they are not
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    # Empty intervals (end <= start) stay in, not copied out: their end never reaches past a
    # later start, so they join no two intervals, and alone they make a group left out below.
    reach = np.maximum.accumulate(e)
    # A new merged interval starts where a start lies beyond everything reached before it, and
    # the one before it ends there (boolean masks: no index array of every row).
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    np.greater(s[1:], reach[:-1], out=new[1:])
    last = np.empty(len(s), dtype=bool)
    last[:-1] = new[1:]
    last[-1] = True
    merged_starts, merged_ends = s[new], reach[last]
    held = merged_ends > merged_starts
    if held.all():
        return Intervals(merged_starts, merged_ends)
    return Intervals(merged_starts[held], merged_ends[held])


def union_of(frames: list[pd.DataFrame]) -> Intervals:
    """Union of the ``start``/``end`` intervals of several tables."""
    frames = [frame for frame in frames if not frame.empty]
    if not frames:
        return EMPTY
    return union_each([(f["start"].to_numpy(), f["end"].to_numpy()) for f in frames])


def union_each(columns: list[tuple[np.ndarray, np.ndarray]]) -> Intervals:
    """Union of several ``(starts, ends)`` column pairs: each one's union (tables come in start
    order: no sort, no concatenated copy of their columns), merged one after another."""
    return functools.reduce(merge, (union(starts, ends) for starts, ends in columns), EMPTY)


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
    binary search in the sorted ends and starts (no sort of all the endpoints)."""
    pair_b, pair_a = ranges_of(np.searchsorted(b.ends, a.starts, side="right"),
                               np.searchsorted(b.starts, a.ends, side="left"))
    starts = a.starts[pair_a]
    np.maximum(starts, b.starts[pair_b], out=starts)
    ends = a.ends[pair_a]
    del pair_a
    np.minimum(ends, b.ends[pair_b], out=ends)
    return union(starts, ends)


def _complement(iv: Intervals) -> Intervals:
    """Everything ``iv`` does not cover, as intervals reaching the int64 limits."""
    limits = np.iinfo(np.int64)
    return Intervals(np.concatenate([[limits.min], iv.ends]),
                     np.concatenate([iv.starts, [limits.max]]))


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """The parts of ``a`` not covered by ``b``."""
    if len(a) == 0 or len(b) == 0:
        return a
    return _overlaps(a, _complement(b))


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """The parts covered by both ``a`` and ``b``."""
    if len(a) == 0 or len(b) == 0:
        return EMPTY
    return _overlaps(a, b)


def merge(a: Intervals, b: Intervals) -> Intervals:
    """Union of two interval sets: both are sorted, so they are interleaved by binary search
    (each one's place among the other's starts, ties ``a`` first) instead of sorted again."""
    if len(a) == 0 or len(b) == 0:
        return b if len(a) == 0 else a
    at_a = np.searchsorted(b.starts, a.starts, side="left") + np.arange(len(a))
    at_b = np.searchsorted(a.starts, b.starts, side="right") + np.arange(len(b))
    starts = np.empty(len(a) + len(b), dtype=np.int64)
    ends = np.empty(len(a) + len(b), dtype=np.int64)
    starts[at_a], starts[at_b] = a.starts, b.starts
    ends[at_a], ends[at_b] = a.ends, b.ends
    return union(starts, ends)


def covered_before(iv: Intervals, times: np.ndarray) -> np.ndarray:
    """For each time t, the covered length of ``iv`` in ``(-inf, t)``."""
    times = np.asarray(times, dtype=np.int64)
    if len(iv) == 0:
        return np.zeros(len(times), dtype=np.int64)
    lengths = iv.ends - iv.starts
    before = np.concatenate([[0], np.cumsum(lengths)])
    k = np.searchsorted(iv.starts, times, side="right")
    last = np.maximum(k - 1, 0)
    partial = np.clip(times - iv.starts[last], 0, lengths[last])
    return np.where(k > 0, before[last] + partial, 0)


def inside(iv: Intervals, times: np.ndarray) -> np.ndarray:
    """Whether each time lies in an interval of ``iv`` (``start <= t < end``)."""
    times = np.asarray(times, dtype=np.int64)
    at = np.searchsorted(iv.starts, times, side="right") - 1
    found = at >= 0
    found[found] = times[found] < iv.ends[at[found]]
    return found


def overlap_per_window(iv: Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Covered length of ``iv`` inside each window ``[starts[i], ends[i])``."""
    return covered_before(iv, ends) - covered_before(iv, starts)


def gaps(iv: Intervals) -> Intervals:
    """The holes between consecutive intervals (idle time inside the covered span)."""
    if len(iv) < 2:
        return EMPTY
    return Intervals(iv.ends[:-1], iv.starts[1:])
