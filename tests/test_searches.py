"""The analysis's searches and unions (core/searches.py): the C passes give numpy's answers."""

from __future__ import annotations

import shutil
import sysconfig

import numpy as np
import pytest

from profreport import searches
from profreport.reports.analysis import intervals as iv


def test_the_c_searches_are_built_where_a_compiler_is() -> None:
    """An install on a machine with a C compiler builds core/_searches.c (optional: a failed
    build would leave the analysis to numpy without a word)."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) here")
    assert searches.compiled(), f"{compiler} is here but core/_searches.c is not built"


@pytest.mark.parametrize("keys_in_order", [True, False])
def test_searchsorted_is_numpys(search_passes: str, keys_in_order: bool) -> None:
    """Every place, both sides, for keys in rising order and shuffled, with repeated values,
    keys beyond both ends and empty columns."""
    rng = np.random.default_rng(7)
    for _ in range(400):
        column = np.sort(rng.integers(-5, 20, int(rng.integers(0, 40)))).astype(np.int64)
        keys = rng.integers(-8, 25, int(rng.integers(0, 40))).astype(np.int64)
        if keys_in_order:
            keys.sort()
        for side in ("left", "right"):
            found = searches.searchsorted(column, keys, side=side)
            np.testing.assert_array_equal(found, np.searchsorted(column, keys, side=side))
            assert found.dtype == np.intp


def test_searchsorted_of_other_kinds_is_left_to_numpy(search_passes: str) -> None:
    """A scalar key, a list of keys and columns of another dtype are placed as numpy does."""
    column = np.array([1, 3, 3, 7], dtype=np.int64)
    assert searches.searchsorted(column, 3, side="right") == 3
    assert searches.searchsorted(column, [0, 3, 9]).tolist() == [0, 1, 4]
    floats = np.array([0.5, 1.5])
    assert searches.searchsorted(floats, np.array([1.0])).tolist() == [1]


def _plain_union(starts: np.ndarray, ends: np.ndarray) -> list[tuple[int, int]]:
    """The union of intervals the plain way: sorted, each joining the last when it starts
    at or before its end, empty ones dropped."""
    merged: list[list[int]] = []
    for start, end in sorted(zip(starts.tolist(), ends.tolist(), strict=True)):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        elif end > start:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def _pairs(intervals: iv.Intervals) -> list[tuple[int, int]]:
    """An Intervals as a list of (start, end)."""
    return list(zip(intervals.starts.tolist(), intervals.ends.tolist(), strict=True))


def test_unions_and_merges_are_the_plain_union(search_passes: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """union (rows in or out of order, all or a mask of them, several blocks), merge and
    merge_rows of a union with a table's rows: each is the plain union, touching intervals
    joined, empty ones left out."""
    monkeypatch.setattr(iv, "BLOCK_ROWS", 4)  # several blocks for the numpy passes
    rng = np.random.default_rng(11)
    for _ in range(300):
        count = int(rng.integers(0, 30))
        starts = rng.integers(0, 100, count).astype(np.int64)
        ends = starts + rng.integers(-3, 15, count)
        if rng.random() < 0.5:
            order = np.argsort(starts, kind="stable")
            starts, ends = starts[order], ends[order]
        chosen = rng.random(count) < 0.6
        assert _pairs(iv.union(starts, ends)) == _plain_union(starts, ends)
        assert _pairs(iv.union(starts, ends, chosen)) == _plain_union(starts[chosen],
                                                                       ends[chosen])
        other = iv.union(*(lambda s: (s, s + rng.integers(1, 9, len(s))))(
            rng.integers(0, 100, int(rng.integers(0, 20))).astype(np.int64)))
        both_starts = np.concatenate([other.starts, starts[chosen]])
        both_ends = np.concatenate([other.ends, ends[chosen]])
        expected = _plain_union(both_starts, both_ends)
        assert _pairs(iv.merge_rows(other, iv.Rows(starts, ends, chosen))) == expected
        mine = iv.union(starts[chosen], ends[chosen])
        assert _pairs(iv.merge(other, mine)) == _plain_union(
            np.concatenate([other.starts, mine.starts]), np.concatenate([other.ends, mine.ends]))


def test_a_union_is_written_block_after_block() -> None:
    """The C union carries the interval still open from one block to the next: an interval
    reaching over several blocks is one, and blocks handed in several calls give the union of
    them all at once."""
    if not searches.compiled():
        pytest.skip("the C searches are not built (no C compiler at install)")
    writer = searches.UnionWriter(6)
    writer.add(np.array([0, 2]), np.array([10, 3]))
    writer.add(np.array([5, 10]), np.array([6, 12]))  # 10 touches the open [0, 10)
    writer.add(np.array([20, 30]), np.array([20, 31]))  # [20, 20) is empty: left out
    starts, ends = writer.done()
    assert starts.tolist() == [0, 30] and ends.tolist() == [12, 31]


def test_the_c_passes_refuse_arrays_that_do_not_fit() -> None:
    """Arrays of the wrong item size, ends shorter than starts, a mask of another length and
    output arrays too short are refused with a Python error, never read or written past."""
    if not searches.compiled():
        pytest.skip("the C searches are not built (no C compiler at install)")
    c_searches = searches._searches
    column = np.arange(4, dtype=np.int64)
    with pytest.raises(TypeError, match="8-byte signed"):
        c_searches.search(column.astype(np.int32), column, np.empty(4, np.intp), False)
    with pytest.raises(ValueError, match="as long as keys"):
        c_searches.search(column, column, np.empty(3, np.intp), False)
    out = np.empty(4, np.int64)
    with pytest.raises(ValueError, match="out is short"):
        c_searches.union_into(column, column[:3], column[:0], column[:0], None, out, out, 0,
                              0, 0, False)
    with pytest.raises(ValueError, match="out is short"):
        c_searches.union_into(column, column, column[:1], column[:1], None, out, out, 0, 0,
                              0, False)
    with pytest.raises(ValueError, match="one bool per row"):
        c_searches.union_into(column[:0], column[:0], column, column, np.ones(3, bool), out,
                              out, 0, 0, 0, False)


def test_the_stream_pass_refuses_what_does_not_fit() -> None:
    """A position outside the table, columns of different lengths, ids that are not integers
    and a taken count past its table are refused with a Python error, never read past."""
    if not searches.compiled():
        pytest.skip("the C searches are not built (no C compiler at install)")
    c_searches = searches._searches
    times = np.arange(3, dtype=np.int64)
    table = (times, times + 1, np.zeros(3, np.int8), np.zeros(3, np.int16))
    streams, out = np.empty((4, 3), np.int64), np.empty(1, np.int64)

    def free(positions: list[int], others: tuple = (), taken: list[int] | None = None,
             of: tuple = table) -> object:
        return c_searches.stream_free(of, np.array(positions, np.intp), others,
                                      np.array(taken or [0] * len(others), np.int64), streams,
                                      0, out)

    with pytest.raises(IndexError, match="outside the table"):
        free([3])
    with pytest.raises(ValueError, match="differ in length"):
        free([0], of=(times, times[:2], table[2], table[3]))
    with pytest.raises(TypeError, match="integers of 1, 2, 4 or 8"):
        free([0], of=(times, times, np.zeros(3, np.float32), table[3]))
    with pytest.raises(ValueError, match="taken lies outside"):
        free([0], others=(table,), taken=[4])
    assert free([2], others=(table,)) == (1, 1) and out.tolist() == [2]  # rows 0, 1 ahead


def test_the_c_passes_refuse_floats_of_integer_width() -> None:
    """Floats of 8 bytes are not int64 times, nor bytes a mask: refused, never read as them."""
    if not searches.compiled():
        pytest.skip("the C searches are not built (no C compiler at install)")
    c_searches = searches._searches
    column, out = np.arange(4, dtype=np.int64), np.empty(4, np.int64)
    with pytest.raises(TypeError, match="8-byte signed"):
        c_searches.search(column.astype(np.float64), column, np.empty(4, np.intp), False)
    with pytest.raises(ValueError, match="one bool per row"):
        c_searches.union_into(column[:0], column[:0], column, column, np.ones(4, np.uint8),
                              out, out, 0, 0, 0, False)
