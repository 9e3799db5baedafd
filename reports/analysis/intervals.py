"""Vectorised interval arithmetic on int64 nanosecond intervals (numpy, no per-row loops).

An :class:`Intervals` is a set of disjoint, sorted ``[start, end)`` intervals; build one with
:func:`union` from any overlapping starts/ends, then subtract, intersect and measure it against
windows (step windows, the GPU window) without Python loops over rows.
"""

from __future__ import annotations

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
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    if len(s) == 0:
        return EMPTY
    if (s[1:] < s[:-1]).any():  # tables come in start order: sort only when they are not
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # A new merged interval starts where a start lies beyond everything reached before it.
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    group_ends = np.append(np.flatnonzero(new)[1:] - 1, len(s) - 1)
    return Intervals(s[new], reach[group_ends])


def union_of(frames: list[pd.DataFrame]) -> Intervals:
    """Union of the ``start``/``end`` intervals of several tables."""
    frames = [frame for frame in frames if not frame.empty]
    if not frames:
        return EMPTY
    return union(np.concatenate([f["start"].to_numpy() for f in frames]),
                 np.concatenate([f["end"].to_numpy() for f in frames]))


def _sweep(a: Intervals, b: Intervals, keep_a: bool, keep_b: bool) -> Intervals:
    """Segments where membership in ``a`` and ``b`` equals ``keep_a``/``keep_b``."""
    times = np.concatenate([a.starts, a.ends, b.starts, b.ends])
    if len(times) == 0:
        return EMPTY
    # +1 where an interval opens, -1 where it closes (small integers: millions of events).
    steps = np.repeat(np.array([1, -1, 1, -1], dtype=np.int8), [len(a), len(a), len(b), len(b)])
    order = np.argsort(times, kind="stable")
    times, steps = times[order], steps[order]
    in_a = np.cumsum(np.where(order < 2 * len(a), steps, 0), dtype=np.int32) > 0
    in_b = np.cumsum(np.where(order >= 2 * len(a), steps, 0), dtype=np.int32) > 0
    chosen = (in_a == keep_a) & (in_b == keep_b)
    return union(times[:-1][chosen[:-1]], times[1:][chosen[:-1]])


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """The parts of ``a`` not covered by ``b``."""
    if len(a) == 0 or len(b) == 0:
        return a
    return _sweep(a, b, True, False)


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """The parts covered by both ``a`` and ``b``."""
    if len(a) == 0 or len(b) == 0:
        return EMPTY
    return _sweep(a, b, True, True)


def merge(a: Intervals, b: Intervals) -> Intervals:
    """Union of two interval sets."""
    return union(np.concatenate([a.starts, b.starts]), np.concatenate([a.ends, b.ends]))


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


def overlap_per_window(iv: Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Covered length of ``iv`` inside each window ``[starts[i], ends[i])``."""
    return covered_before(iv, ends) - covered_before(iv, starts)


def gaps(iv: Intervals) -> Intervals:
    """The holes between consecutive intervals (idle time inside the covered span)."""
    if len(iv) < 2:
        return EMPTY
    return Intervals(iv.ends[:-1], iv.starts[1:])
