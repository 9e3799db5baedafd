"""The fast paths that keep million-row nsys exports cheap give what the plain pandas way gives."""

from __future__ import annotations

import re
import sqlite3
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from profreport.model import Profile
from profreport.parsers import nsys
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis import launches
from profreport.reports.analysis.gpu import top_kernels
from profreport.reports.analysis.kept import _kept
from profreport.reports.analysis.launches import (
    _launch_index,
    launch_calls,
    launch_pairs,
)


def _keys(seed: int, size: int, high: int) -> np.ndarray:
    """Random correlation ids with repeats (and the unknown id -1)."""
    return np.random.default_rng(seed).integers(-1, high, size)


def _launched(kernel_ids: np.ndarray, call_ids: np.ndarray) -> Profile:
    """A profile of kernels and runtime calls with these correlation ids (in the narrow dtype
    the parsers give ids)."""
    return Profile(Path("hand-built"), "nsys", tables={
        "kernels": pd.DataFrame({"correlation": kernel_ids.astype(np.int32)}),
        "runtime": pd.DataFrame({"correlation": call_ids.astype(np.int32),
                                 "start": np.arange(len(call_ids), dtype=np.int64)})})


def _rising(rng: np.random.Generator, count: int, high: int) -> np.ndarray:
    """Unique ids spread wide that rise with the calls, but for a few calls (one in 50) made
    late: as CUPTI numbers the calls of threads that interleave."""
    ids = np.sort(rng.choice(np.arange(-1, high), count, replace=False))
    late = 2 * np.flatnonzero(rng.random((count - 1) // 2) < 0.04)  # calls swapped in pairs
    ids[late], ids[late + 1] = ids[late + 1], ids[late].copy()
    return ids


@pytest.mark.parametrize("ids", ["repeated", "unique and sparse", "unique and dense",
                                 "unique, sparse and rising"])
def test_launch_pairs_are_those_of_an_inner_merge(ids: str) -> None:
    """Every join path: repeated ids (sorted calls, every pair), unique ids spread wide (sorted
    calls), unique ids close together (a table indexed by id) and unique ids spread wide that
    rise with the calls (their running maximum, the late calls apart). An unknown id (-1)
    links nothing, though calls without an id share it too."""
    keys = _keys(1, 5000, 3000)
    rng = np.random.default_rng(2)
    calls = {"repeated": _keys(2, 4000, 3000),
             "unique and sparse": rng.choice(np.arange(-1, 100_000), 4000, replace=False),
             "unique and dense": rng.permutation(np.arange(-1, 3999)),
             "unique, sparse and rising": _rising(rng, 4000, 100_000)}[ids]
    profile = _launched(keys, calls)
    # No second array of calls by id: no two calls share an id.
    assert (_launch_index(profile)[1] is None) == (ids != "repeated")
    left, right = _pairs(profile)
    merged = pd.DataFrame({"key": keys, "i": np.arange(len(keys))}).query("key >= 0").merge(
        pd.DataFrame({"key": calls, "j": np.arange(len(calls))}), on="key")
    assert len(left) == len(merged) > 50
    np.testing.assert_array_equal(left, merged["i"].to_numpy())
    np.testing.assert_array_equal(right, merged["j"].to_numpy())
    some = np.arange(len(keys)) % 3 == 0
    sub_left, sub_right = _pairs(profile, some)
    chosen = merged[merged["i"] % 3 == 0]
    np.testing.assert_array_equal(sub_left, chosen["i"].to_numpy())
    np.testing.assert_array_equal(sub_right, chosen["j"].to_numpy())
    empty_left, empty_right = _pairs(_launched(keys, np.empty(0, np.int64)))
    assert len(empty_left) == len(empty_right) == 0


def _pairs(profile: Profile, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """launch_pairs of the kernels in blocks of 256 rows, joined."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(iv, "BLOCK_ROWS", 256)
        blocks = list(launch_pairs(profile, "kernels", rows))
    return (np.concatenate([left for left, _ in blocks] or [np.empty(0, np.int64)]),
            np.concatenate([right for _, right in blocks] or [np.empty(0, np.int64)]))


def test_rising_ids_are_joined_without_sorting_every_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Unique ids spread wide that rise with the calls (the 10M-kernel export's 17 M calls span
    686 M ids, 3,108 calls late) are joined through their running maximum: the calls are never
    sorted by id (their order and sorted ids were 140 MB more at the join's peak); ids that
    repeat still are."""
    rng = np.random.default_rng(5)
    calls = _rising(rng, 2500, 100_000)  # 40 ids a call: too wide for a table indexed by id
    keys = rng.choice(np.concatenate([calls, _keys(6, 2500, 100_000)]), 5000)

    def sorted_calls(profile: Profile) -> None:
        raise AssertionError("every call sorted by id")

    monkeypatch.setattr(launches, "_by_correlation", sorted_calls)
    first = pd.Series(np.arange(len(calls))).groupby(calls).first()
    expected = pd.Series(keys).map(first).fillna(-1).to_numpy(np.int64)
    expected[keys < 0] = -1  # an unknown id links nothing
    np.testing.assert_array_equal(launch_calls(_launched(keys, calls), "kernels"), expected)
    with pytest.raises(AssertionError, match="sorted by id"):
        launch_calls(_launched(keys, np.concatenate([calls, calls[:1]])), "kernels")


def test_launch_call_is_the_first_call_of_each_id() -> None:
    keys, calls = _keys(3, 5000, 3000), _keys(4, 4000, 3000)
    first = pd.Series(np.arange(len(calls))).groupby(calls).first()
    expected = pd.Series(keys).map(first).fillna(-1).to_numpy(np.int64)
    expected[keys < 0] = -1  # an unknown id links nothing
    profile = _launched(keys, calls)
    np.testing.assert_array_equal(launch_calls(profile, "kernels"), expected)
    assert launch_calls(profile, "kernels") is launch_calls(profile, "kernels")  # made once
    assert (launch_calls(_launched(keys, np.empty(0, np.int64)), "kernels") == -1).all()


def test_launch_join_made_beside_is_the_same_join() -> None:
    """The join started on a thread of its own (``beside``, as the analysis starts it)
    gives the rows the join made on first use gives; asking waits for it, once."""
    keys, calls = _keys(3, 5000, 3000), _keys(4, 4000, 3000)
    beside = _launched(keys, calls)
    _launch_index.beside(beside)
    assert [type(kept) for kept in _kept(beside).values()] == [Future]  # given to the thread
    in_line = launch_calls(_launched(keys, calls), "kernels")
    np.testing.assert_array_equal(launch_calls(beside, "kernels"), in_line)
    assert launch_calls(beside, "kernels") is launch_calls(beside, "kernels")
    assert _launch_index(beside)[1] is not None  # ids repeat: the calls sorted by id


def test_nsys_names_are_categoricals_of_the_exported_strings(corpus: Path, nsys_available: str,
                                                              nsys_cache_dir: Path) -> None:
    """Kernel and runtime names come as categoricals (sorted, only names that occur) whose
    values are the strings a plain sqlite3 join of the export gives, row for row."""
    report = corpus / "nsys" / "sc22_4gpu_baseline.nsys-rep"
    export = nsys.export_report(report, cache_dir=nsys_cache_dir)
    profile = nsys.read_export(export)
    db = sqlite3.connect(export)
    kernels = db.execute("SELECT COALESCE(d.value, s.value) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
                         "LEFT JOIN StringIds AS d ON d.id = k.demangledName "
                         "LEFT JOIN StringIds AS s ON s.id = k.shortName "
                         "ORDER BY k.start, k.correlationId").fetchall()
    calls = db.execute("SELECT s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r "
                       "JOIN StringIds AS s ON s.id = r.nameId ORDER BY r.start, r.correlationId"
                       ).fetchall()
    db.close()
    for table, column, expected in (("kernels", "name", kernels), ("runtime", "name", calls)):
        frame = profile.table(table).sort_values(["start", "correlation"], kind="stable")
        names = frame[column]
        assert isinstance(names.dtype, pd.CategoricalDtype)
        assert list(names.cat.categories) == sorted(set(names.astype(object)))
        got = names.astype(object).tolist()
        want = [re.sub(r"_v\d+$", "", row[0]) for row in expected]
        assert got == want and len(got) > 10_000


def test_nsys_copy_and_sync_kinds_are_categoricals_of_the_enum_names(
        corpus: Path, nsys_available: str, nsys_cache_dir: Path) -> None:
    """The copy direction, memory kinds and sync kind of the export's million-row tables come
    as categoricals (a byte a row) counting, kind by kind, what SQL's enum join counts."""
    report = corpus / "nsys" / "sc22_4gpu_baseline.nsys-rep"
    export = nsys.export_report(report, cache_dir=nsys_cache_dir)
    profile = nsys.read_export(export)
    db = sqlite3.connect(export)
    for table, column, raw, enum in (
            ("memcpy", "kind", "copyKind", "ENUM_CUDA_MEMCPY_OPER"),
            ("memcpy", "src_kind", "srcKind", "ENUM_CUDA_MEM_KIND"),
            ("sync", "kind", "syncType", "ENUM_CUPTI_SYNC_TYPE")):
        source = "CUPTI_ACTIVITY_KIND_MEMCPY" if table == "memcpy" else \
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
        counted = dict(db.execute(f"SELECT e.name, COUNT(*) FROM {source} AS t JOIN {enum} AS e "
                                  f"ON e.id = t.{raw} GROUP BY e.name").fetchall())
        kinds = profile.table(table)[column]
        assert isinstance(kinds.dtype, pd.CategoricalDtype)
        assert kinds.memory_usage(index=False) <= 2 * len(kinds) + 1_000
        assert sorted(kinds.value_counts().loc[lambda c: c > 0].tolist()) == \
            sorted(counted.values())
    db.close()


def _random_intervals(seed: int, count: int) -> iv.Intervals:
    """A union of random, overlapping and touching intervals on a small grid."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, 400, count)
    return iv.union(starts, starts + rng.integers(0, 30, count))


def _covered(intervals: iv.Intervals) -> np.ndarray:
    """Which of the grid's nanoseconds 0..499 the intervals cover (the plain way)."""
    grid = np.zeros(500, dtype=bool)
    for start, end in zip(intervals.starts, intervals.ends, strict=True):
        grid[start:end] = True
    return grid


@pytest.mark.usefixtures("search_passes")
def test_interval_arithmetic_matches_a_plain_grid() -> None:
    for seed in range(20):
        a, b = _random_intervals(seed, 40), _random_intervals(seed + 100, 25)
        assert (a.starts[1:] > a.ends[:-1]).all()  # disjoint, sorted, touching ones merged
        np.testing.assert_array_equal(_covered(iv.subtract(a, b)), _covered(a) & ~_covered(b))
        np.testing.assert_array_equal(_covered(iv.intersect(a, b)), _covered(a) & _covered(b))
        np.testing.assert_array_equal(_covered(iv.merge(a, b)), _covered(a) | _covered(b))
        shuffled = np.random.default_rng(seed).permutation(len(a))
        again = iv.union(a.ends[shuffled] - 1, a.ends[shuffled])
        np.testing.assert_array_equal(_covered(again), np.isin(np.arange(500), a.ends - 1))


@pytest.mark.usefixtures("search_passes")
def test_subtraction_by_stretches_of_time_is_the_whole_subtraction() -> None:
    """subtract_blocks, 1 to 5 gaps of b at a time, joined, equals subtract, interval for
    interval (touching windows as a, step windows are: their parts in one gap stay merged)."""
    for seed in range(20):
        rng = np.random.default_rng(seed)
        cuts = np.unique(rng.integers(0, 500, 8))
        windows = iv.Intervals(cuts[:-1], cuts[1:])
        for a in (windows, _random_intervals(seed, 40)):
            b = _random_intervals(seed + 100, 25)
            whole = iv.subtract(a, b)
            for size in range(1, 6):
                with pytest.MonkeyPatch.context() as patch:
                    patch.setattr(iv, "BLOCK_ROWS", size)
                    pieces = list(iv.subtract_blocks(a, b))
                np.testing.assert_array_equal(
                    np.concatenate([p.starts for p in pieces] or [np.empty(0, np.int64)]),
                    whole.starts)
                np.testing.assert_array_equal(
                    np.concatenate([p.ends for p in pieces] or [np.empty(0, np.int64)]),
                    whole.ends)
        assert [len(p) for p in iv.subtract_blocks(windows, iv.EMPTY)] == [len(windows)]
        assert list(iv.subtract_blocks(iv.EMPTY, b)) == []


@pytest.mark.usefixtures("search_passes")
def test_covered_lengths_match_a_plain_grid() -> None:
    """Covered length before any times (unsorted, repeated, outside every interval) and inside
    windows, summed over blocks of 4 intervals, as a grid of nanoseconds counts them."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(iv, "BLOCK_ROWS", 4)
        for seed in range(20):
            a = _random_intervals(seed, 40)
            rng = np.random.default_rng(seed)
            times = rng.integers(-5, 505, 60)
            grid = np.concatenate([[0], np.cumsum(_covered(a))])  # covered before t: grid[t]
            expected = grid[np.clip(times, 0, 500)]
            np.testing.assert_array_equal(iv.covered_before(a, times), expected)
            starts = rng.integers(0, 450, 30)
            ends = starts + rng.integers(0, 50, 30)
            np.testing.assert_array_equal(iv.overlap_per_window(a, starts, ends),
                                          grid[ends] - grid[starts])
            # Fewer times than intervals: summed block by block, not as a whole running sum.
            spaced = np.arange(0, 490, 10)
            b = iv.union(spaced, spaced + rng.integers(1, 9, len(spaced)))
            grid_b = np.concatenate([[0], np.cumsum(_covered(b))])
            np.testing.assert_array_equal(iv.covered_before(b, times[:3]),
                                          grid_b[np.clip(times[:3], 0, 500)])
            np.testing.assert_array_equal(iv.overlap_per_window(b, starts[:2], ends[:2]),
                                          grid_b[ends[:2]] - grid_b[starts[:2]])


@pytest.mark.usefixtures("search_passes")
def test_covered_lengths_asked_block_after_block_go_on_from_where_the_last_ask_began(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Times asked a block at a time in rising order with a cursor: each ask reads the
    intervals from the block where the last ask's earliest time lay (95 lies in the 3rd block of
    4 intervals, 250 in the 7th), not from the first, and gives what the grid gives; an earlier
    time starts again from the first block."""
    monkeypatch.setattr(iv, "BLOCK_ROWS", 4)
    spaced = np.arange(0, 490, 10)  # 49 intervals: 13 blocks of 4
    b = iv.union(spaced, spaced + 5)
    grid = np.concatenate([[0], np.cumsum(_covered(b))])
    read: list[int] = []
    blocks = iv.blocks
    monkeypatch.setattr(iv, "blocks", lambda count, size=None, first=0: (
        read.append(block.start) or block for block in blocks(count, size, first)))
    cursor = iv.Cursor()
    for times in (np.array([3, 12]), np.array([95, 101]), np.array([250, 260]),
                  np.array([255, 480]), np.array([30])):
        read.clear()
        np.testing.assert_array_equal(iv.covered_before(b, times, cursor), grid[times])
        assert read[0] == {3: 0, 95: 0, 250: 8, 255: 24, 30: 0}[int(times[0])]
    assert (cursor.at, cursor.before) == (0, 0)


def test_vocabulary_numbers_keys_across_chunks_and_threads() -> None:
    """Chunks coded by four threads at once: every key gets one code, each code names its key."""
    from concurrent.futures import ThreadPoolExecutor

    keys = np.random.default_rng(5).integers(-1, 5000, 20_000)
    vocabulary = nsys._Vocabulary()
    with ThreadPoolExecutor(4) as pool:
        codes = list(pool.map(vocabulary.codes, np.array_split(keys, 40)))
    numbered = np.array(vocabulary.in_order())
    np.testing.assert_array_equal(numbered[np.concatenate(codes)], keys)
    assert sorted(numbered.tolist()) == np.unique(keys).tolist()


@pytest.mark.parametrize("categorical", [True, False], ids=["nsys names", "Kineto names"])
def test_top_kernels_rank_as_a_grouping_by_name(categorical: bool) -> None:
    """Top kernels summed per name code in blocks rank as pandas' grouping does: most time,
    then most calls, then the name seen first (ties made on purpose: durations of 1-3 ns)."""
    rng = np.random.default_rng(7)
    names = pd.Series(rng.choice([f"k{i}" for i in range(25)] + [None], 3000))
    starts = np.sort(rng.integers(0, 10**6, 3000))
    kernels = pd.DataFrame({"start": starts, "end": starts + rng.integers(1, 4, 3000),
                            "name": names.astype("category") if categorical else names,
                            "is_comm": rng.random(3000) < 0.1})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(iv, "BLOCK_ROWS", 256)
        top = top_kernels(Profile(Path("hand-built"), "nsys", tables={"kernels": kernels}))
    spans = kernels.assign(ns=kernels["end"] - kernels["start"])
    grouped = (spans.groupby("name", sort=False, observed=True)
               .agg(sum=("ns", "sum"), count=("ns", "size"))
               .sort_values(["sum", "count"], ascending=False).head(10))
    comm = set(kernels.loc[kernels["is_comm"], "name"])
    assert [(t.name, t.total_ns, t.count, t.is_comm) for t in top] == [
        (str(name), int(row["sum"]), int(row["count"]), name in comm)
        for name, row in grouped.iterrows()]
    assert top[0].share == grouped["sum"].iloc[0] / spans["ns"].sum()


def _join_in_forked_worker(seed: int, out: Any) -> None:
    """The launch join made beside in a forked worker process (its parent's thread is gone)."""
    profile = _launched(_keys(seed, 500, 300), _keys(seed + 1, 400, 300))
    _launch_index.beside(profile)
    out.put(launch_calls(profile, "kernels").tolist())


def test_a_forked_worker_makes_its_own_join_beside() -> None:
    """A worker forked after this process made a join beside starts its own thread for it
    instead of waiting forever on a thread that only the parent has."""
    import multiprocessing

    here = _launched(_keys(1, 50, 30), _keys(2, 40, 30))
    _launch_index.beside(here)  # this process's thread starts
    launch_calls(here, "kernels")  # and is idle again when the worker is forked
    expected = launch_calls(_launched(_keys(9, 500, 300), _keys(10, 400, 300)), "kernels")
    fork = multiprocessing.get_context("fork")
    out = fork.Queue()
    worker = fork.Process(target=_join_in_forked_worker, args=(9, out))
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():
        worker.kill()
    assert out.get(timeout=5) == expected.tolist()  # queue.Empty: the worker never answered


def test_rising_ids_joined_across_blocks_of_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The running maximum is made a block of calls at a time (intervals.BLOCK_ROWS) and the
    late calls found across the blocks' bounds: at blocks of 7 calls (350 blocks, calls swapped
    in pairs across bounds too), every kernel finds the call with its id, the join through the
    running maximum taken, not the sort."""
    rng = np.random.default_rng(13)
    calls = _rising(rng, 2450, 100_000)
    keys = rng.choice(np.concatenate([calls, _keys(14, 500, 100_000)]), 3000)
    monkeypatch.setattr(iv, "BLOCK_ROWS", 7)
    assert launches._rising_ids(calls) is not None
    first = pd.Series(np.arange(len(calls))).groupby(calls).first()
    expected = pd.Series(keys).map(first).fillna(-1).to_numpy(np.int64)
    np.testing.assert_array_equal(launch_calls(_launched(keys, calls), "kernels"), expected)


@pytest.mark.usefixtures("search_passes")
def test_packed_intervals_read_back_piece_by_piece_are_the_intervals() -> None:
    """Packed intervals (uint32 gaps and lengths, int64 beside them where a gap or length
    passes 2^32 - 1 ns) read back 1 to 5 at a time are the intervals they were made from, and
    subtracting or intersecting them piece by piece gives what the whole intervals give."""
    for seed in range(20):
        small = _random_intervals(seed, 40)
        # Stretched apart: some gaps and lengths past uint32 (4.29 s), the rest as they were.
        wide = iv.Intervals(small.starts * (1 << 28), small.ends * (1 << 28) - seed)
        windows = _random_intervals(seed + 100, 25)
        for intervals, others in ((small, windows),
                                  (wide, iv.Intervals(windows.starts << 28, windows.ends << 28))):
            packed = iv.pack(iv.pieces(intervals, 3), len(intervals))
            assert packed.total == intervals.total and len(packed) == len(intervals)
            assert packed.gaps.dtype == packed.lengths.dtype == np.uint32
            assert (len(packed.wide_at) > 0) == (intervals is wide)
            for size in range(1, 6):
                with pytest.MonkeyPatch.context() as patch:
                    patch.setattr(iv, "BLOCK_ROWS", size)
                    assert all(len(p) <= size for p in iv.pieces(packed))
                    again = packed.intervals()
                    np.testing.assert_array_equal(again.starts, intervals.starts)
                    np.testing.assert_array_equal(again.ends, intervals.ends)
                    both = iv.intersect_pieces(others, packed)
                    left = iv.subtract(others, packed)
                whole_both, whole_left = iv.intersect(others, intervals), iv.subtract(others,
                                                                                     intervals)
                np.testing.assert_array_equal(both.starts, whole_both.starts)
                np.testing.assert_array_equal(both.ends, whole_both.ends)
                np.testing.assert_array_equal(left.starts, whole_left.starts)
                np.testing.assert_array_equal(left.ends, whole_left.ends)
    assert len(iv.pack(iv.pieces(iv.EMPTY), 0)) == 0 and iv.pack([], 0).total == 0
