"""Searches and unions over ascending int64 columns, in C where ``core/_searches.c`` is built.

The analysis places millions of times of one table among another's (``searchsorted``) and
merges millions of intervals into unions. numpy does both (the fallback where no C compiler
built the extension); the compiled passes give the same answers with fewer reads: a key is
placed by galloping from the previous key's place, and a union is one pass that carries the
interval still open from one block of rows to the next.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

try:  # built by pyproject.toml where a C compiler is found; numpy runs the passes otherwise
    from profreport import _searches
except ImportError:
    _searches = None


def compiled() -> bool:
    """Whether the C passes are in use."""
    return _searches is not None


def searchsorted(column: Any, keys: Any, side: Literal["left", "right"] = "left") -> Any:
    """``numpy.searchsorted(column, keys, side)`` of an ascending ``column``: placed in C when
    both are int64 arrays (keys in rising order cost a few reads each), else by numpy."""
    column = np.asarray(column)
    keys_array = np.asarray(keys)
    if (_searches is None or keys_array.ndim != 1 or column.ndim != 1
            or column.dtype != np.int64 or keys_array.dtype != np.int64):
        return np.searchsorted(column, keys, side=side)
    found = np.empty(len(keys_array), dtype=np.intp)
    _searches.search(np.ascontiguousarray(column), np.ascontiguousarray(keys_array), found,
                    side == "right")
    return found


class UnionWriter:
    """The union of intervals handed over in start order (block after block, or two ascending
    runs at once), written into arrays sized for every row (pages past the union's count are
    never touched, so never resident): the C pass of :mod:`reports.analysis.intervals`."""

    def __init__(self, rows: int) -> None:
        """Ready for at most ``rows`` intervals."""
        self.starts = np.empty(rows, dtype=np.int64)
        self.ends = np.empty(rows, dtype=np.int64)
        self.count = 0
        self.open_start = self.reach = 0  # the interval still open, once one is
        self.is_open = False

    def add(self, starts: Any, ends: Any, chosen: np.ndarray | None = None) -> None:
        """Merge a block of intervals (starts ascending, none before the last block's), only
        the rows ``chosen`` (a mask) picks when given."""
        self.add_runs(_NONE, _NONE, starts, ends, chosen)

    def add_runs(self, a_starts: Any, a_ends: Any, b_starts: Any, b_ends: Any,
                 b_chosen: np.ndarray | None = None) -> None:
        """Merge two runs of intervals read as one sequence by start, ties ``a`` first (each
        run's starts ascending, none before the last block's), of ``b`` only the rows
        ``b_chosen`` (a mask) picks when given."""
        chosen = None if b_chosen is None else np.ascontiguousarray(b_chosen, dtype=np.bool_)
        self.count, self.open_start, self.reach, self.is_open = _searches.union_into(
            _int64(a_starts), _int64(a_ends), _int64(b_starts), _int64(b_ends), chosen,
            self.starts, self.ends, self.count, self.open_start, self.reach, self.is_open)

    def done(self) -> tuple[np.ndarray, np.ndarray]:
        """The union's starts and ends (the open interval closed; empty ones left out)."""
        if self.is_open and self.reach > self.open_start:
            self.starts[self.count], self.ends[self.count] = self.open_start, self.reach
            self.count += 1
        self.is_open = False
        return self.starts[:self.count], self.ends[:self.count]


_NONE = np.empty(0, dtype=np.int64)


def _int64(values: Any) -> np.ndarray:
    """``values`` as a C-contiguous int64 array (as they are when they already are one)."""
    return np.ascontiguousarray(values, dtype=np.int64)
