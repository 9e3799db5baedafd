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
    if len(frames) == 1:  # no copy of a million-row table's columns
        return union(frames[0]["start"].to_numpy(), frames[0]["end"].to_numpy())
    return union(np.concatenate([f["start"].to_numpy() for f in frames]),
                 np.concatenate([f["end"].to_numpy() for f in frames]))


def _overlaps(a: Intervals, b: Intervals) -> Intervals:
    """The parts covered by both ``a`` and ``b``: each pair of overlapping intervals, found by
    binary search in the sorted ends and starts (no sort of all the endpoints)."""
    first = np.searchsorted(b.ends, a.starts, side="right")  # b's first interval ending after
    counts = np.maximum(np.searchsorted(b.starts, a.ends, side="left") - first, 0)
    pair_a = np.repeat(np.arange(len(a)), counts)
    pair_b = np.repeat(first - (np.cumsum(counts) - counts), counts) + np.arange(len(pair_a))
    return union(np.maximum(a.starts[pair_a], b.starts[pair_b]),
                 np.minimum(a.ends[pair_a], b.ends[pair_b]))


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
