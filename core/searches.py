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


#: Columns of a GPU table for :class:`StreamReach`: starts, ends (int64), devices, streams
#: (integer ids of any width).
StreamColumns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class StreamReach:
    """When the work queued ahead of each row of a GPU table on its stream had all ended (the
    latest end of the rows of the same device and stream before it in start order, and of the
    other tables' rows started before it), asked for the rows a block at a time in start order:
    the C pass of :func:`reports.analysis.gpu.stream_free_by_block`."""

    def __init__(self, table: StreamColumns, others: list[StreamColumns]) -> None:
        """Before any row of ``table``; ``others``' rows in start order."""
        self.table = _stream_columns(table)
        self.others = tuple(_stream_columns(columns) for columns in others)
        self.taken = np.zeros(len(others), dtype=np.int64)  # rows of each other table passed
        self.streams = np.empty((16, 3), dtype=np.int64)  # (device, stream, reach) met so far
        self.used = 0

    def ahead(self, rows: np.ndarray) -> np.ndarray:
        """For the table's rows at ``rows`` (positions, in start order, after every row asked
        before), when the work ahead of each on its stream had ended (INT64 min for none)."""
        positions = np.ascontiguousarray(rows, dtype=np.intp)
        free = np.empty(len(positions), dtype=np.int64)
        done = 0
        while True:
            count, self.used = _searches.stream_free(self.table, positions[done:], self.others,
                                                     self.taken, self.streams, self.used,
                                                     free[done:])
            done += count
            if done == len(positions):
                return free
            grown = np.empty((2 * len(self.streams), 3), dtype=np.int64)  # full: room for more
            grown[:self.used] = self.streams[:self.used]
            self.streams = grown


def _stream_columns(columns: StreamColumns) -> StreamColumns:
    """A table's columns for the C pass: contiguous, times as int64, ids as they are where
    they are signed integers (else int64: an empty table's columns may be of objects)."""
    starts, ends, devices, streams = columns
    return _int64(starts), _int64(ends), _ids(devices), _ids(streams)


def _ids(values: np.ndarray) -> np.ndarray:
    """Integer ids as a contiguous array of signed integers (their own width where they are)."""
    return np.ascontiguousarray(values, dtype=None if values.dtype.kind == "i" else np.int64)
