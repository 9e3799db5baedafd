"""Metrics against facts measured on real profiles (the corpus), and the interval arithmetic."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profreport import concepts
from profreport.model import Profile
from profreport.parsers import kineto, parse_file
from profreport.reports.analysis import cpu, gpu, syncs
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.cpu import outer_calls, self_time_ns
from profreport.reports.analysis.gpu import LONG_IDLE_GAP_NS, launch_stats
from profreport.reports.analysis.launches import launched_in_windows
from profreport.reports.analysis.metrics import (
    ATTRIBUTES_CPU_OPS,
    RANGES_ONLY,
    attribution_level,
    compute_run_metrics,
)
from profreport.reports.analysis.ranks import add_rank_metrics, job_step_source, summarize
from profreport.reports.analysis.results import RunMetrics
from profreport.reports.analysis.steps import step_stats, step_windows
from profreport.reports.analysis.timeline import MAX_SEGMENTS, build_timeline
from profreport.reports.render.json import metrics_json

sys.path.insert(0, str(Path(__file__).parent))
from conftest import cpu_event, device_event, kineto_trace, write_nsys_export  # noqa: E402


def run_metrics(profiles: list) -> RunMetrics:
    """The metrics of one run of these profiles, those every rank adds included."""
    metrics = compute_run_metrics(profiles)
    summaries = [summarize(profile) for profile in profiles]
    add_rank_metrics(metrics, summaries, job_step_source(summaries)[0])
    return metrics


def metrics_of(path: Path) -> RunMetrics:
    """Parse one corpus file and compute its metrics."""
    return run_metrics([parse_file(path)])


@pytest.fixture(scope="module")
def sc22_1gpu(corpus: Path, nsys_available: str) -> RunMetrics:
    """Metrics of the 1-GPU sc22 baseline."""
    return metrics_of(corpus / "nsys" / "sc22_1gpu_baseline.nsys-rep")


@pytest.fixture(scope="module")
def sc22_4gpu(corpus: Path, nsys_available: str) -> RunMetrics:
    """Metrics of the 4-GPU sc22 baseline (rank 0)."""
    return metrics_of(corpus / "nsys" / "sc22_4gpu_baseline.nsys-rep")


@pytest.mark.usefixtures("search_passes")
def test_union_merges_overlaps_and_touching() -> None:
    """Overlapping and nested intervals merge; disjoint ones stay apart."""
    merged = iv.union(np.array([0, 5, 2, 20, 30]), np.array([3, 10, 4, 25, 30]))
    assert merged.starts.tolist() == [0, 5, 20] and merged.ends.tolist() == [4, 10, 25]
    assert merged.total == 14


@pytest.mark.usefixtures("search_passes")
def test_subtract_intersect_and_windows() -> None:
    """A minus B, A and B, and the covered length per window."""
    a = iv.union(np.array([0, 20]), np.array([10, 30]))
    b = iv.union(np.array([5]), np.array([25]))
    assert iv.subtract(a, b).starts.tolist() == [0, 25]
    assert iv.subtract(a, b).total == 10
    assert iv.intersect(a, b).total == 10
    per_window = iv.overlap_per_window(a, np.array([0, 8, 100]), np.array([8, 22, 200]))
    assert per_window.tolist() == [8, 4, 0]


def _claim_parts(rng: np.random.Generator) -> list[tuple[str, iv.Intervals | iv.Rows]]:
    """Parts as the GPU breakdown gives them: unions, and tables' rows in start order (some of
    them, by a mask) that overlap one another, a few lasting over many others."""
    def rows(count: int, longest: int) -> tuple[np.ndarray, np.ndarray]:
        starts = np.sort(rng.integers(0, 1_000_000, count))
        return starts, starts + rng.integers(0, longest, count)
    kernels, calls = rows(3000, 400), rows(5000, 60)
    return [("loader", iv.union(*rows(40, 30_000))),
            ("compute", iv.Rows(*kernels, rng.random(3000) < 0.8)),
            ("copies", iv.union(*rows(700, 1000))),
            ("calls", iv.Rows(*calls))]


@pytest.mark.usefixtures("search_passes")
def test_claim_a_stretch_at_a_time_holds_a_stretch_of_the_union(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each part claims, in each window (windows overlapping and out of order too), what it
    covers there that no earlier part covers: the figures of running unions of the whole parts,
    while the running union is built a stretch of time at a time (64 rows of each part: never
    the 4,000 intervals of the whole)."""
    from types import SimpleNamespace

    from profreport.reports.analysis import breakdown

    rng = np.random.default_rng(7)
    parts = _claim_parts(rng)
    w_starts = np.concatenate([np.arange(0, 1_000_000, 25_000), [990_000, 100]])
    windows = SimpleNamespace(count=len(w_starts), starts=w_starts, ends=w_starts + np.concatenate(
        [np.full(40, 25_000), [50_000, 300_000]]))
    expected, whole, before = {}, iv.EMPTY, np.zeros(windows.count, np.int64)
    for name, part in parts:
        if isinstance(part, iv.Rows):
            part = iv.union(part.starts, part.ends, part.rows)
        whole = iv.merge(whole, part)
        covered = iv.overlap_per_window(whole, windows.starts, windows.ends)
        expected[name], before = covered - before, covered
    assert len(whole) > 1000
    held = []
    merge_rows = iv.merge_rows
    monkeypatch.setattr(iv, "merge_rows", lambda *args: held.append(merge_rows(*args)) or held[-1])
    monkeypatch.setattr(iv, "STRETCH_ROWS", 64)
    claimed = breakdown.claim(parts, windows)
    assert list(claimed) == list(expected)
    for name, ns in expected.items():
        np.testing.assert_array_equal(claimed[name], ns)
    assert sum(ns.sum() for ns in claimed.values()) == iv.overlap_per_window(
        whole, windows.starts, windows.ends).sum() > 0
    assert held and max(map(len, held)) < 4 * 64


@pytest.mark.usefixtures("search_passes")
def test_union_each_a_stretch_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several tables' intervals (some rows by a mask, one table out of start order), their
    union made a stretch of time at a time (64 rows of each table), is the union of all their
    rows at once: intervals that touch across a stretch's bound are one."""
    rng = np.random.default_rng(11)
    tables = []
    for count, longest in ((3000, 400), (700, 1000), (40, 30_000)):
        starts = np.sort(rng.integers(0, 1_000_000, count))
        tables.append((starts, starts + rng.integers(0, longest, count)))
    mask = rng.random(3000) < 0.7
    touching = (np.arange(0, 9000, 100), np.arange(100, 9100, 100))  # one interval, 90 rows
    backwards = (tables[1][0][::-1].copy(), tables[1][1][::-1].copy())
    columns = [(*tables[0], mask), backwards, tables[2], touching]
    whole = iv.union(np.concatenate([tables[0][0][mask], *(c[0] for c in columns[1:])]),
                     np.concatenate([tables[0][1][mask], *(c[1] for c in columns[1:])]))
    monkeypatch.setattr(iv, "STRETCH_ROWS", 64)
    stretched = iv.union_each(columns)
    assert len(whole) > 500 and whole.starts[0] == 0 and whole.ends[0] >= 9000
    np.testing.assert_array_equal(stretched.starts, whole.starts)
    np.testing.assert_array_equal(stretched.ends, whole.ends)


def _covered_ns(rows: list[tuple[np.ndarray, np.ndarray]], span: int) -> np.ndarray:
    """Which ns of ``[0, span)`` the rows cover, one boolean a ns: the plainest reference."""
    covered = np.zeros(span, bool)
    for starts, ends in rows:
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            covered[start:end] = True
    return covered


@pytest.mark.usefixtures("search_passes")
def test_stretch_wise_unions_and_claims_are_those_of_every_ns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Randomized (fixed seed), against a boolean a ns: union_each (the very intervals of the
    whole-table union too), the breakdown's claim and an intersection made a stretch at a
    time (as comm_under_compute makes it), at stretches of
    1 to 5 rows and blocks of 1 to 5 rows, so every bound a stretch or block can fall on
    (inside an interval, at its end, between two touching ones, with rows masked out or out of
    start order) is crossed many times over 300 draws."""
    from types import SimpleNamespace

    from profreport.reports.analysis import breakdown

    rng = np.random.default_rng(2026)
    for _ in range(300):
        span = int(rng.integers(10, 300))
        tables, kept = [], []
        for _ in range(int(rng.integers(1, 4))):
            count = int(rng.integers(0, 30))
            starts = rng.integers(0, span // 2, count)
            starts = np.sort(starts) if rng.random() < 0.85 else starts
            ends = starts + rng.integers(0, span // 2, count)
            mask = rng.random(count) < 0.6 if rng.random() < 0.4 else None
            tables.append((starts, ends) if mask is None else (starts, ends, mask))
            kept.append((starts, ends) if mask is None else (starts[mask], ends[mask]))
        bounds = np.sort(rng.choice(span, int(rng.integers(2, 7)), replace=False))
        windows = SimpleNamespace(count=len(bounds) - 1, starts=bounds[:-1], ends=bounds[1:])
        monkeypatch.setattr(iv, "STRETCH_ROWS", int(rng.integers(1, 6)))
        monkeypatch.setattr(iv, "BLOCK_ROWS", int(rng.integers(1, 6)))
        union = iv.union_each(tables)
        np.testing.assert_array_equal(_covered_ns([(union.starts, union.ends)], span),
                                      _covered_ns(kept, span))
        assert (union.starts[1:] > union.ends[:-1]).all() and (union.ends > union.starts).all()
        whole = iv.union(np.concatenate([rows[0] for rows in kept]),
                         np.concatenate([rows[1] for rows in kept]))
        np.testing.assert_array_equal(union.starts, whole.starts)
        np.testing.assert_array_equal(union.ends, whole.ends)
        claimed = breakdown.claim([(str(k), iv.Rows(*table)) for k, table in enumerate(tables)],
                                  windows)
        before = np.zeros(span, bool)
        for k, rows in enumerate(kept):
            now = before | _covered_ns([rows], span)
            added = [int((now & ~before)[a:b].sum())
                     for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
            assert claimed[str(k)].tolist() == added
            before = now
        first, second = iv.Stretched(iv.Rows(*tables[0])), iv.Stretched(iv.Rows(*tables[-1]))
        both = 0
        for low, high in iv.stretches([first, second]):
            mine, theirs = first.within(low, high), second.within(low, high)
            both += iv.intersect(iv.union(mine.starts, mine.ends),
                                 iv.union(theirs.starts, theirs.ends)).total
        assert both == int((_covered_ns(kept[:1], span) & _covered_ns(kept[-1:], span)).sum())


def test_launch_delay_past_two_seconds_widens_the_delays(tmp_path: Path) -> None:
    """Launch delays are held in int32 while they fit: a kernel that ran 3 s after its launch
    call widens them, so the median of 1 us, 2 us and 3 s is 2 us (1 us when 3 s wrapped)."""
    s = 10**9
    calls = [(at * s, at * s + 500, at + 1, "cudaLaunchKernel_v7000") for at in range(3)]
    kernels = [(call[0] + delay, call[0] + delay + 1000, call[2], "gemm")
               for call, delay in zip(calls, (1000, 2000, 3 * s), strict=True)]
    profile = parse_file(write_nsys_export(tmp_path / "delays.sqlite", kernels,
                                           [(0, 5 * s, "step 0"), (5 * s, 10 * s, "step 1")],
                                           calls))
    stats = launch_stats(profile, step_windows(profile))
    assert stats is not None and stats.launch_delay_p50_ns == 2000


def test_launch_delay_counts_only_kernels_launched_onto_an_idle_stream(tmp_path: Path) -> None:
    """A kernel launched behind work still running on its stream waits for that work, not for
    its launch (the MI300X rank-0 trace: the GPU runs 21-32 ms behind the CPU, and the old
    'launch delay p50' of 27.5 ms was that queue). Stream 7: A (launched at 100 us, starts 10 us
    later, runs 1 ms), B and C launched meanwhile, queued behind A and each other, F behind C, D
    launched at 3200 us once F has ended (starts 12 us later). Stream 8: a copy from 128 to
    600 us, E launched at 130 us queued behind it. Measured: A and D (median 11 us); queued: 4
    of 6 (every delay: median 730 us)."""
    def launch(name: str, at: float, correlation: int, start: float, dur: float,
               stream: int = 7) -> list[dict]:
        return [cpu_event("cudaLaunchKernel", at, 5, cat="cuda_runtime",
                          correlation=correlation),
                device_event(name, start, dur, device=0, stream=stream, correlation=correlation)]
    events = [cpu_event("ProfilerStep#1", 0, 4000, cat="user_annotation"),
              cpu_event("cudaMemcpyAsync", 125, 2, cat="cuda_runtime", correlation=9),
              device_event("Memcpy HtoD (Pageable -> Device)", 128, 472, cat="gpu_memcpy",
                           device=0, stream=8, correlation=9, bytes=1 << 20),
              *launch("A", 100, 1, 110, 1000), *launch("B", 120, 2, 1110, 1000),
              *launch("C", 125, 3, 2110, 1000), *launch("E", 130, 5, 600, 50, stream=8),
              *launch("F", 140, 6, 3110, 50), *launch("D", 3200, 4, 3212, 100)]
    profile = kineto.parse(kineto_trace(tmp_path / "queued.json", events))
    stats = launch_stats(profile, step_windows(profile))
    assert stats is not None and stats.kernels_per_step == 6
    assert stats.launch_delay_p50_ns == 11_000 and stats.launch_delay_kernels == 2
    assert stats.queued_launch_fraction == pytest.approx(4 / 6)


def test_a_kernel_starting_before_its_launch_call_measures_the_clocks_skew(
        tmp_path: Path) -> None:
    """CUPTI can record a kernel starting before the call that launched it (pytorch/kineto
    #1380: tightly clustered launches): that is the CPU's and GPU's clocks disagreeing, no
    launch delay. Four kernels launched onto an idle stream, starting 11, 30 and 50 us after
    their calls and one 2 us before its call: the median is 30 us over 3, the fourth counted
    apart (it made the median 20.5 us over 4; a trace of such kernels alone read 'median
    launch-to-start latency -3.0 us'), in report.json too (launch_delay_skewed_kernels)."""
    events = [cpu_event("ProfilerStep#1", 0, 2000, cat="user_annotation")]
    for correlation, (at, delay) in enumerate(((100, 11), (400, 30), (800, 50), (1200, -2)),
                                              start=1):
        events += [cpu_event("cudaLaunchKernel", at, 5, cat="cuda_runtime",
                             correlation=correlation),
                   device_event("k", at + delay, 20, device=0, stream=7,
                                correlation=correlation)]
    profile = kineto.parse(kineto_trace(tmp_path / "skew.json", events))
    stats = launch_stats(profile, step_windows(profile))
    assert stats is not None and stats.kernels_per_step == 4
    assert stats.launch_delay_p50_ns == 30_000 and stats.launch_delay_kernels == 3
    assert stats.launch_delay_skewed == 1
    assert stats.skewed_text() == ("1 kernel recorded as starting before its launch call left "
                                   "out: the CPU's and the GPU's clocks disagree")
    metrics = metrics_json(run_metrics([profile]))
    assert (metrics["launch_delay_kernels"], metrics["launch_delay_skewed_kernels"]) == (3, 1)


@pytest.mark.parametrize("table", ["kernels", "memcpy"])
@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("streams", [3, 40])
@pytest.mark.usefixtures("search_passes")
def test_stream_free_by_block_is_the_reach_of_the_work_ahead_on_the_stream(
        monkeypatch: pytest.MonkeyPatch, in_order: bool, table: str, streams: int) -> None:
    """Each kernel's (or copy's) stream_free_by_block, read in blocks of 16 rows (a stream's
    reach carried across them; a block of the 40 copies spans more than 16 of the 300 kernels,
    taken 16 at a time) from tables in start order or not, is the latest end of the kernels,
    copies and memsets of its device and stream that started before it, counted one by one;
    with 3 streams a device, or 40 (more streams than the C pass first makes room for), ids
    of different widths in each table."""
    monkeypatch.setattr(iv, "BLOCK_ROWS", 16)
    rng = np.random.default_rng(7)

    def work(count: int, ids: type) -> pd.DataFrame:
        start = rng.choice(10_000, count, replace=False)  # a stream starts one at a time
        start = np.sort(start) if in_order else start
        return pd.DataFrame({"start": start, "end": start + rng.integers(1, 400, count),
                             "device": rng.integers(0, 2, count).astype(ids),
                             "stream": rng.integers(3, 3 + streams, count).astype(ids)})

    tables = {"kernels": work(300, np.int8), "memcpy": work(40, np.int32),
              "memset": work(20, np.int64)}
    free = np.concatenate(list(gpu.stream_free_by_block(
        Profile(Path("hand-built"), "nsys", tables=tables), table)))
    every = pd.concat(tables.values(), ignore_index=True)
    for row, work_row in enumerate(tables[table].itertuples()):
        ahead = every[(every["device"] == work_row.device)
                      & (every["stream"] == work_row.stream) & (every["start"] < work_row.start)]
        assert free[row] == (ahead["end"].max() if len(ahead) else np.iinfo(np.int64).min)


@pytest.mark.usefixtures("search_passes")
def test_the_work_ahead_of_a_copy_of_unrecorded_stream_is_unknown() -> None:
    """A Kineto copy recorded without its stream (-1) cannot be put behind the work of any
    stream: when the work ahead of it ended is concepts.QUEUE_UNKNOWN, not that of the other
    streamless rows (it read as their stream -1). The copy on stream 7 queued behind the
    kernel (ended at 50), and the one after it behind both (ended at 65); nothing was ahead of
    the one on stream 8."""
    def work(rows: list[tuple[int, int, int]]) -> pd.DataFrame:
        return pd.DataFrame(rows, columns=["start", "end", "stream"]).assign(device=0)

    tables = {"kernels": work([(0, 50, 7), (5, 20, -1)]),
              "memcpy": work([(10, 15, -1), (50, 65, 7), (60, 61, 7), (70, 75, 8)]),
              "memset": work([])}
    ahead = syncs.queued_ahead_of_copies(Profile(Path("hand-built"), "kineto", tables=tables))
    assert ahead.tolist() == [concepts.QUEUE_UNKNOWN, 50, 65, np.iinfo(np.int64).min]


def test_launched_in_windows_is_a_read_only_byte_a_kernel(corpus: Path,
                                                          nsys_available: str) -> None:
    """Whether each kernel was launched inside the step windows, kept through the analysis: a
    byte a kernel, read-only (its readers share it); 22,537 of the sc22 4-GPU capture's 22,564
    kernels were launched inside its 59 windows."""
    profile = parse_file(corpus / "nsys" / "sc22_4gpu_baseline.nsys-rep")
    windows = step_windows(profile)
    inside = launched_in_windows(profile, "kernels", windows)
    assert inside.dtype == np.bool_ and not inside.flags.writeable
    assert windows.count == 59 and len(inside) == 22564 and int(inside.sum()) == 22537


def test_step_stats_are_made_once_per_windows(corpus: Path, nsys_available: str) -> None:
    """The rank's summary and the run's metrics ask the same windows' StepStats: made once and
    shared (a 10 M-kernel export's 26 k steps are 7 MB of per-step tuples each)."""
    profile = parse_file(corpus / "nsys" / "sc22_4gpu_baseline.nsys-rep")
    stats = summarize(profile).step_stats
    assert stats is not None and stats.count == 59
    assert step_stats(step_windows(profile)) is stats


def test_sc22_1gpu_gpu_idle_between_steps(sc22_1gpu: RunMetrics) -> None:
    """Union ≈ 7.7 s of a 44.5 s window (≈ 17%), 28 gaps over 500 ms, between the steps.

    Busy time is measured inside the 59 step windows (44.44 s), not between the GPU's own first
    and last event (44.50 s, the tutorial's figure): the 60 ms of GPU work before the first
    step's range (7.73 s -> 7.67 s busy) belongs to no step."""
    gpu = sc22_1gpu.gpu
    assert gpu is not None and gpu.origin == "nsys" and gpu.span == "step windows"
    assert gpu.busy_ns / 1e9 == pytest.approx(7.67, abs=0.01)
    assert gpu.window_ns / 1e9 == pytest.approx(44.44, abs=0.01)
    assert gpu.busy_fraction == pytest.approx(0.173, abs=0.002)
    assert gpu.long_gap_count == 28 and gpu.long_gap_ns == LONG_IDLE_GAP_NS
    assert gpu.largest_gaps[0].where == "between steps"
    assert gpu.largest_gaps[0].duration_ns > LONG_IDLE_GAP_NS


def test_sc22_1gpu_steps_and_wait_between_ranges(sc22_1gpu: RunMetrics) -> None:
    """59 NVTX steps of ≈ 88.6 ms, but ≈ 750 ms per step of wall time: the wait is between."""
    steps = sc22_1gpu.steps
    assert steps is not None and steps.origin == "nsys" and steps.count == 59
    assert steps.mean_ns / 1e6 == pytest.approx(88.6, abs=0.1)
    assert steps.wall_mean_ns == 764_937_062
    # The loop's 664_558_399 ns between the ranges in its 753_186_389 ns step.
    assert sc22_1gpu.dataloader_fraction == pytest.approx(664_558_399 / 753_186_389, abs=1e-6)
    breakdown = sc22_1gpu.breakdown
    assert breakdown is not None and sum(breakdown.parts_ns.values()) == breakdown.step_ns
    # The 750 ms step is the wall time from one step to the next: the GPU still runs the step's
    # kernels and memsets 42.6 ms of the 664.6 ms after its range, compute's time; 622.0 ms of
    # it the loop waits with the GPU idle.
    assert (breakdown.parts_ns["dataloader"], breakdown.step_ns) == (621_992_269, 753_186_389)


def test_sc22_4gpu_communication(sc22_4gpu: RunMetrics) -> None:
    """472 NCCL kernels over 59 steps = 8 launched per step; most NCCL time overlaps compute
    kernels: 92.6% (it was 97.1% while memsets and device copies counted as compute)."""
    comm = sc22_4gpu.comm
    assert comm is not None and comm.on_gpu
    assert comm.calls_total == 472 and comm.calls_per_step == 8
    assert comm.names == ["ncclKernel_AllReduce_RING_LL_Sum_float"]
    assert comm.overlap_fraction == pytest.approx(0.9255, abs=0.001)
    assert comm.fraction == pytest.approx(0.1621, abs=1e-4)
    assert comm.exposed_fraction == pytest.approx(0.00297, abs=1e-5)  # 91 µs of a 30.6 ms step
    assert sc22_4gpu.gpu.busy_fraction == pytest.approx(0.97286, abs=1e-5)
    assert sc22_4gpu.steps.mean_ns / 1e6 == pytest.approx(29.9, abs=0.05)
    breakdown = sc22_4gpu.breakdown
    assert (breakdown.parts_ns["comm_exposed"], breakdown.comm_overlapped_ns) == (90_992,
                                                                                  4_593_054)


def test_kineto_dataloader_share(corpus: Path) -> None:
    """num_workers=0: ≈ 416 of ≈ 1049 ms in DataLoader (≈ 40%); num_workers=4: ≈ 1%."""
    w0 = metrics_of(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    w4 = metrics_of(corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz")
    assert w0.steps.count == 6 and w0.steps.origin == "kineto"
    # The 6 ProfilerStep spans last 1048.976 ms in all (test_kineto): 174_829_333 ns each.
    assert w0.steps.mean_ns == 174_829_333
    assert w0.dataloader_fraction == pytest.approx(0.39625, abs=1e-5)
    assert w4.dataloader_fraction == pytest.approx(0.01, abs=0.005)
    # 6 steps of 32 fp32 images of 3 x 224 x 224: 6 * 32 * 602_112 bytes, all pageable.
    assert (w0.copies.h2d_bytes, w0.copies.h2d_pageable_bytes) == (115_607_040, 115_607_040)
    assert w0.top_kernels and w0.top_ops


def test_hta_nccl_trace_has_rank_and_comm(corpus: Path) -> None:
    """The HTA distributed trace: rank 0, its 21 NCCL kernels (AllReduce and Broadcast) over
    3 ProfilerStep spans, 7 a step, and its step time: the spans last 222442.191, 219726.905
    and 224936.243 µs in the raw trace, 222368.446 µs on average."""
    m = metrics_of(corpus / "hta" / "nccl_data.json.gz")
    assert m.comm is not None and m.comm.on_gpu
    assert (m.comm.calls_total, m.comm.calls_per_step) == (21, 7)
    assert m.per_rank_step_ns == {0: 222_368_446}
    # Measured on this trace: NCCL kernels 7.0% of the step, 15.6% of them overlapped.
    assert m.comm.fraction == pytest.approx(0.07026, abs=1e-5)
    assert m.comm.overlap_fraction == pytest.approx(0.15609, abs=1e-5)


def test_timeline_is_small_and_relative(corpus: Path, nsys_available: str) -> None:
    """Three steps around the median, lanes for CPU and GPU, idle gaps, capped segment count."""
    profile = parse_file(corpus / "nsys" / "sc22_4gpu_baseline.nsys-rep")
    timeline = build_timeline(profile, step_windows(profile))
    categories = {s.category for s in timeline.segments}
    assert {"step", "kernel", "comm", "idle"} <= categories
    assert sum(s.category == "step" for s in timeline.segments) == 3
    # 476 segments over the three steps, far below the cap of MAX_SEGMENTS (3000).
    assert len(timeline.segments) == 476 < MAX_SEGMENTS
    assert min(s.start_ns for s in timeline.segments) == 0
    assert timeline.lanes[0].startswith("CPU")


def fixture_profiles(folder: Path) -> list:
    """Every profile of one of the project's fixture run folders, parsed."""
    from profreport.reports.analysis.analyze import find_profiles

    return [parse_file(path) for path in find_profiles(folder)]


def test_ddp_gloo_ranks_and_collectives(fixtures_dir: Path, raw_collectives_per_step) -> None:
    """2 gloo ranks: both ranks' step times; calls per step = c10d calls per step in the raw
    trace (the gloo op running each call on its own thread is not counted again)."""
    folder = fixtures_dir / "ddp_gloo"
    m = run_metrics(fixture_profiles(folder))
    assert m.per_rank_step_ns == {0: 60_043_673, 1: 60_442_905}
    assert m.per_rank_step_ns[0] == m.steps.mean_ns
    c10d, gloo = raw_collectives_per_step(next((folder / "trace").glob("rank0.*")))
    assert (c10d, gloo) == (1, 1)  # one gradient bucket: one all-reduce a step
    comm = m.comm
    assert comm is not None and not comm.on_gpu and comm.origin == "kineto"
    assert (comm.calls_total, comm.calls_per_step) == (4, 1)  # 4 steps
    assert {"c10d::allreduce_", "gloo:all_reduce"} <= set(comm.names)
    # Measured on rank 0's trace: 5.4% of the step in the all-reduce, 5.2% of it exposed
    # (3.15 ms of the 60.1 ms breakdown step).
    assert comm.fraction == pytest.approx(0.05413, abs=1e-5)
    assert comm.exposed_fraction == pytest.approx(0.05230, abs=1e-5)
    assert (m.breakdown.parts_ns["comm_exposed"], m.breakdown.step_ns) == (3_145_517, 60_149_354)
    assert sum(m.breakdown.parts_ns.values()) == m.breakdown.step_ns


def test_a_gloo_all_reduce_is_one_gradient_sync(fixtures_dir: Path) -> None:
    """The ddp_gloo fixture's rank 0 makes 4 gradient all-reduces (one bucket a step, 4 steps),
    each recorded as the c10d::allreduce_ call and the gloo:all_reduce op on gloo's worker
    thread paired with it: gradient_syncs counted both, 8 syncs; each all-reduce is one."""
    from profreport.reports.analysis.comm import gradient_syncs

    profile = parse_file(next((fixtures_dir / "ddp_gloo" / "trace").glob("rank0.*")))
    syncs = gradient_syncs(profile)
    assert len(syncs) == 4 and len(np.unique(syncs)) == 4
    calls = profile.table("cpu_collectives")
    made = calls[calls["name"] == "c10d::allreduce_"]["start"].to_numpy(np.int64)
    assert syncs.tolist() == sorted(made.tolist())


def test_cpu_only_breakdown_comes_from_the_trace(fixtures_dir: Path, nsys_available: str) -> None:
    """compute_heavy (lprof + torch.profiler + NVTX-only nsys): steps from nsys, but the breakdown
    from torch.profiler's CPU ops, where the model's forward/backward/optimizer fill the step."""
    profiles = fixture_profiles(fixtures_dir / "compute_heavy")
    assert sorted(p.kind for p in profiles) == ["kineto", "lprof", "nsys"]
    levels = {p.kind: attribution_level(p) for p in profiles if p.kind != "lprof"}
    assert levels == {"kineto": ATTRIBUTES_CPU_OPS, "nsys": RANGES_ONLY}
    m = compute_run_metrics(profiles)
    assert m.steps.origin == "nsys"
    b = m.breakdown
    assert b.origin == "kineto" and sum(b.parts_ns.values()) == b.step_ns
    # Measured on the fixture: compute 1616.6 ms of a 1635.3 ms step (98.9%), other 9.6 ms.
    assert (b.parts_ns["compute"], b.parts_ns["other"], b.step_ns) == (
        1_616_627_653, 9_601_296, 1_635_341_482)
    phases = m.cpu_phases.fractions
    assert (phases["forward"], phases["backward"], phases["optimizer"]) == pytest.approx(
        (0.3528, 0.5536, 0.0837), abs=1e-4)
    assert set(m.dataloader_fraction_by_origin) == {"kineto", "lprof", "nsys"}
    top = m.top_ops[0]
    assert (top.name, top.count) == ("aten::convolution_backward", 6)
    assert top.share == pytest.approx(0.4469, abs=1e-4)


def test_nvtx_only_nsys_attributes_no_compute(fixtures_dir: Path, nsys_available: str) -> None:
    """The CPU-only nsys capture alone: DataLoader wait and unattributed time, no compute."""
    m = metrics_of(fixtures_dir / "compute_heavy" / "nsys.nsys-rep")
    assert m.breakdown.origin == "nsys" and m.breakdown.parts_ns["compute"] == 0
    # Measured on the fixture: of a 1666.7 ms step, 29.4 ms waits (its `dataloader` ranges; the
    # time between the step ranges is no fetch) and the rest is unattributed.
    parts = m.breakdown.parts_ns
    assert (parts["dataloader"], parts["other"], m.breakdown.step_ns) == (
        29_414_662, 1_637_307_134, 1_666_721_796)
    assert m.cpu_phases is None


def test_self_time_subtracts_direct_children_per_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A [0,100] holds B [10,60] (holding C [20,30]) and B [70,90]; D runs on another thread
    beside A. Self time: A 100-50-20, B 50-10, C 10, B 20, D 50; a re-entered B is no new call."""
    ops = pd.DataFrame({"name": ["A", "B", "C", "B", "D"], "pid": 1, "tid": [1, 1, 1, 1, 2],
                        "start": [0, 10, 20, 70, 0], "end": [100, 60, 30, 90, 50]})
    assert self_time_ns(ops).tolist() == [30, 40, 10, 20, 50]
    # Inside [25, 80) only: A's own [60, 70), B's own [25, 60) less C's [25, 30), C's [25, 30),
    # the second B's [70, 80), D's [25, 50).
    inside = iv.Intervals(np.array([25]), np.array([80]))
    assert self_time_ns(ops, inside).tolist() == [10, 30, 5, 10, 25]
    # Threads as the Kineto parser keeps them (categoricals of their ids, sorted by the codes),
    # and as a categorical whose ids do not ascend (sorted by the ids themselves): the same.
    for tids in ([1, 2], [2, 1]):
        threads = ops.assign(pid=pd.Categorical([1] * 5), tid=pd.Categorical(
            ops["tid"], categories=tids))
        assert self_time_ns(threads).tolist() == [30, 40, 10, 20, 50]
    # Worked out in parts that no span crosses (one row a part at least): thread 1 splits only
    # before E [100, 120), which starts as A ends; the self times stay the same.
    monkeypatch.setattr(cpu, "SELF_TIME_PART_ROWS", 1)
    more = pd.concat([ops, pd.DataFrame({"name": ["E"], "pid": [1], "tid": [1], "start": [100],
                                         "end": [120]})], ignore_index=True)
    parts = cpu._closed_parts(more["start"].to_numpy(), more["end"].to_numpy(),
                              np.array([0, 1, 2, 3, 5]))
    assert [part.tolist() for part in parts] == [[0, 1, 2, 3], [5]]
    assert self_time_ns(more).tolist() == [30, 40, 10, 20, 50, 20]
    nested = pd.DataFrame({"name": ["conv", "conv", "conv"], "start": [0, 10, 200],
                           "end": [100, 90, 250]})
    assert outer_calls(nested, "name").tolist() == [True, False, True]


def test_resnet50_top_ops_by_self_time(corpus: Path) -> None:
    """resnet50 (23,622 CPU ops; its 18 DataLoader, zero_grad and optimizer-step spans are
    ranges): the top op by self time is the leaf aten::add_ (78.1 ms over 2994 calls, 7.4% of
    the 6 steps); the backward wrapper chain no longer fills the list; the self times on the
    step thread add up to that thread's busy time, not more (479.6 ms: the 314 ms of Python
    those spans hold between their operators is no operator's)."""
    profile = parse_file(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    ops = profile.table("cpu_ops")
    assert len(ops) == 23622
    m = compute_run_metrics([profile])
    top = m.top_ops[0]
    assert (top.name, top.count, top.exclusive) == ("aten::add_", 2994, True)
    assert top.total_ns / 1e6 == pytest.approx(78.1, abs=0.1)
    assert top.share == pytest.approx(0.0745, abs=0.001) and m.top_ops_origin == "kineto"
    names = [item.name for item in m.top_ops]
    assert not any(name.startswith("autograd::engine::evaluate_function") for name in names)
    own = self_time_ns(ops)
    step_tid = int(profile.table("steps")["tid"].iloc[0])
    on_step = (ops["tid"] == step_tid).to_numpy()
    busy = iv.union(ops.loc[on_step, "start"], ops.loc[on_step, "end"]).total
    assert own[on_step].sum() <= busy and own[on_step].sum() / 1e6 == pytest.approx(479.6, abs=0.1)


def test_kernel_mix_of_real_runs(corpus: Path, nsys_available: str,
                                 sc22_4gpu: RunMetrics) -> None:
    """sc22 4 GPUs: 76% of compute-kernel time in fp16 kernels, NCHW/NHWC conversions 19%, a
    fused multi_tensor_apply Adam (27.5 kernels launched per optimizer range). resnet50: all fp32,
    SGD launching 483 kernels per step (counted by the launching step; by GPU start time in the
    step windows it was 402.5) with no multi-tensor kernel."""
    mix = sc22_4gpu.kernel_mix
    assert mix is not None and mix.origin == "nsys"
    assert mix.reduced_precision_fraction == pytest.approx(0.761, abs=0.005)
    assert mix.layout_conversion_fraction == pytest.approx(0.194, abs=0.005)
    assert mix.fused_optimizer and mix.optimizer_kernels_per_step == pytest.approx(27.49, abs=0.01)
    resnet = metrics_of(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz").kernel_mix
    assert resnet.reduced_precision_fraction == 0 and not resnet.fused_optimizer
    assert resnet.optimizer_kernels_per_step == 483 and resnet.optimizer_name == "SGD"


def test_cpu_op_mix_of_a_fixture(fixtures_dir: Path, nsys_available: str) -> None:
    """compute_heavy (fp32 on CPU): convolutions on oneDNN, no slow fallback kernels."""
    m = compute_run_metrics(fixture_profiles(fixtures_dir / "compute_heavy"))
    mix = m.cpu_op_mix
    assert mix is not None and mix.origin == "kineto"
    assert mix.slow_fallback_fraction == 0 and mix.slow_fallback_ops == []
    # Measured on the fixture: oneDNN ops hold 23.9% of the CPU ops' 4850.1 ms of self time.
    assert mix.op_self_ns == 4_850_103_211
    assert mix.onednn_fraction == pytest.approx(0.2389, abs=1e-4)


def test_gpu_work_is_counted_by_the_step_that_launched_it(corpus: Path) -> None:
    """Kernels per step by launch (correlation id -> runtime call in the step window): resnet50
    launches 1462 kernels per step (1368.5 by GPU start time, which moves kernels launched at a
    step's end into the next); the HTA NCCL trace launches exactly 7 NCCL kernels in each of its
    3 steps."""
    resnet = metrics_of(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    assert resnet.launch is not None and resnet.launch.kernels_per_step == 1462
    hta = metrics_of(corpus / "hta" / "nccl_data.json.gz")
    assert hta.comm is not None and hta.comm.calls_per_step == 7 and hta.comm.calls_total == 21


def test_exposed_communication_is_one_figure(corpus: Path) -> None:
    """CommStats.exposed_fraction and the breakdown's comm_exposed part are the same time (they
    read the same claimed intervals), up to the breakdown's integer ns per step."""
    m = metrics_of(corpus / "hta" / "nccl_data.json.gz")
    assert m.comm is not None and m.breakdown is not None
    from_breakdown = m.breakdown.parts_ns["comm_exposed"] / m.breakdown.step_ns
    assert m.comm.exposed_fraction == pytest.approx(from_breakdown, abs=1e-6)
    assert m.comm.exposed_fraction == pytest.approx(0.0587, abs=0.0005)


#: The NCCL kernel the hand-built traces below run (concepts.is_comm by its name).
NCCL_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float"


def test_a_collective_between_step_ranges_is_communication_not_a_wait(tmp_path: Path) -> None:
    """5 NVTX ``step N`` ranges of 6 ms, 10 ms apart, each running a 4 ms compute kernel, then
    an all-reduce of 2.5 ms in the 4 ms after its range, where the loop fetches its next batch
    (StepWindows.fetch_between): the device communicates there, it does not wait for data.
    The gap claimed its whole 4 ms as DataLoader wait before communication, which read 0%
    exposed; now the 4 collectives in the windows (46 ms) are 2 ms exposed per step, the
    DataLoader wait the 1.5 ms of each gap the device idles."""
    ms = 1_000_000
    kernels, runtime, steps = [], [], []
    for i in range(5):
        t, c = i * 10 * ms, 10 * i
        steps.append((t, t + 6 * ms, f"step {i}"))
        runtime += [(t + ms // 2, t + ms // 2 + 10_000, c + 1, "cudaLaunchKernel_v7000"),
                    (t + 5 * ms, t + 5 * ms + 10_000, c + 2, "ncclAllReduce")]
        kernels += [(t + ms, t + 5 * ms, c + 1, "gemm"),
                    (t + 6 * ms + ms // 2, t + 9 * ms, c + 2, NCCL_KERNEL)]
    m = metrics_of(write_nsys_export(tmp_path / "ddp.sqlite", kernels, steps, runtime))
    assert m.breakdown is not None and m.comm is not None
    assert m.breakdown.step_ns == 46 * ms // 5
    parts = m.breakdown.parts_ns
    assert (parts["compute"], parts["comm_exposed"], parts["dataloader"]) == (
        4 * ms, 4 * 5 * ms // 2 // 5, 4 * 3 * ms // 2 // 5)
    assert m.comm.exposed_fraction == pytest.approx(2 / 9.2)
    # The loop's whole time between the ranges stays its wait for data (the loader findings').
    assert m.dataloader_fraction == pytest.approx(16 / 46)


def test_a_collective_during_a_fetch_is_communication_not_a_wait(tmp_path: Path) -> None:
    """4 ProfilerStep#N of 10 ms, each fetching for 4 ms, then running a 4 ms compute kernel
    and an all-reduce of 3 ms that runs 2 ms into the next step's fetch: of that fetch the
    device communicates 2 ms and idles 2 ms. The fetch claimed all 4 ms before communication
    (exposed 1 ms of the 3: 10% of the step); now the collectives' time in the windows is
    exposed (3 ms each, the last one's 1 ms before the profile's last step ends: 2.5 ms per
    step), the DataLoader wait the time the device idles in the fetches (the first step's
    4 ms, then 2 ms each: 2.5 ms per step)."""
    events = []
    for i in range(4):
        t = 1000 + i * 10_000
        events += [cpu_event(f"ProfilerStep#{i + 1}", t, 10_000, cat="user_annotation"),
                   cpu_event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t,
                             4000, cat="user_annotation"),
                   cpu_event("cudaLaunchKernel", t + 4100, 20, cat="cuda_runtime",
                             correlation=100 + i),
                   device_event("gemm_kernel", t + 4200, 4000, device=0, stream=7,
                                correlation=100 + i),
                   cpu_event("ncclAllReduce", t + 8300, 20, cat="cuda_runtime",
                             correlation=200 + i),
                   device_event(NCCL_KERNEL, t + 9000, 3000, device=0, stream=9,
                                correlation=200 + i)]
    m = metrics_of(kineto_trace(tmp_path / "ddp.json", events))
    assert m.breakdown is not None and m.comm is not None
    parts = m.breakdown.parts_ns
    assert (parts["compute"], parts["comm_exposed"], parts["dataloader"]) == (
        4_000_000, 2_500_000, 2_500_000)
    assert m.comm.exposed_fraction == pytest.approx(0.25)
    # The loop's whole time in its fetches stays its wait for data (the loader findings').
    assert m.dataloader_fraction == pytest.approx(0.4)


def test_busy_share_is_against_the_step_not_the_gpus_own_events(corpus: Path) -> None:
    """Triton trace: one 1.76 µs kernel in a 13.3 s step is a GPU idle ~100% of the step (it
    was 'busy 100%' of a window spanning that one kernel)."""
    m = metrics_of(corpus / "hta" / "triton_example.json.gz")
    assert m.gpu is not None and m.gpu.span == "step windows"
    assert m.gpu.window_ns / 1e9 == pytest.approx(13.34, abs=0.01)
    assert m.gpu.busy_ns < 2_000 and m.gpu.busy_fraction < 1e-6


def test_syncs_are_per_step_inside_the_windows_and_teardown_apart(corpus: Path) -> None:
    """cuda_event_sync: in its one 3.15 ms step, one each of cudaEventSynchronize (34 µs), the
    pageable DtoH cudaMemcpyAsync, cudaDeviceSynchronize and cudaStreamSynchronize. resnet50: the
    cudaDeviceSynchronize after the last step (16.2 ms) is teardown, not a per-step sync."""
    m = metrics_of(corpus / "hta" / "cuda_event_sync.json.gz")
    calls = {call.name: call for call in m.syncs.calls}
    assert set(calls) == {"cudaEventSynchronize", "cudaMemcpyAsync DtoH to pageable",
                          "cudaDeviceSynchronize", "cudaStreamSynchronize"}
    assert all(call.calls_per_step == 1 for call in calls.values())
    assert calls["cudaEventSynchronize"].ns_per_step == 34_000 and m.syncs.outside_calls == 0
    # Its longest call, located in the file: 3,047 µs after the first event, for 34 µs.
    at = m.locate("kineto", calls["cudaEventSynchronize"].longest)
    assert (at.file, at.offset_ns, at.duration_ns) == ("cuda_event_sync.json.gz", 3_047_000,
                                                       34_000)
    resnet = metrics_of(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz").syncs
    teardown = {call.name: call for call in resnet.calls}["cudaDeviceSynchronize"]
    assert teardown.calls_per_step == 0 and teardown.outside_calls == 1
    assert teardown.outside_ns == 16_194_000 and resnet.outside_ns == 16_194_000


def test_what_the_idle_gpu_waits_for(corpus: Path) -> None:
    """cuda_event_sync: the GPU idles 92% of the step until work launched during the idle time
    arrives; triton: the idle time after its one kernel is ended by nothing in the trace."""
    event_sync = metrics_of(corpus / "hta" / "cuda_event_sync.json.gz").gpu_idle
    assert event_sync.share("launch") == pytest.approx(0.916, abs=0.002)
    triton = metrics_of(corpus / "hta" / "triton_example.json.gz").gpu_idle
    assert triton.share("unexplained") > 0.999


def test_one_process_on_two_gpus_idles_each_a_share_of_the_step(tmp_path: Path) -> None:
    """nn.DataParallel's one process launching onto GPUs 0 and 1: 3 steps of 10 ms, each one
    kernel per GPU (0: 3 ms from 2220 us into the step, 1: 2.5 ms from 2230 us) launched 20 us
    before it starts. Each GPU waits for a launch from the first step's start to its first
    kernel (2.22 and 2.23 ms) and between steps (2 x 7 ms on GPU 0, 2 x 7.5 ms on GPU 1):
    33.45 ms over 3 steps and 2 GPUs, 5.575 ms (56%) per step and GPU (the devices' idle summed
    read 'the GPU idles 97% of the step' on such a trace, and 133% with short kernels). The
    waits' union (GPU 1's gaps hold GPU 0's) is 2.23 + 15 ms, 5.743 ms per step."""
    events = []
    for step in range(3):
        base = 1000 + step * 10_000
        events.append(cpu_event(f"ProfilerStep#{step + 1}", base, 10_000, cat="user_annotation"))
        for device, offset, dur in ((0, 2200, 3000), (1, 2210, 2500)):
            correlation = 2 * step + device + 1
            events += [cpu_event("cudaLaunchKernel", base + offset, 5, cat="cuda_runtime",
                                 correlation=correlation),
                       device_event("gemm", base + offset + 20, dur, device=device, stream=7,
                                    correlation=correlation)]
    idle = metrics_of(kineto_trace(tmp_path / "two_gpus.json", events)).gpu_idle
    assert idle is not None and idle.step_ns == 10_000_000
    assert idle.idle_ns_per_step["launch"] == 33_450_000 // 6
    assert idle.share("launch") == pytest.approx(0.5575)
    assert idle.launch_wait_ns == 17_230_000 // 3
    assert idle.launch_wait_outside_ops_ns is None  # no CPU op recorded: what ran is unknown


def test_a_gpu_used_only_outside_the_steps_is_none_of_their_devices(tmp_path: Path) -> None:
    """One 10 us kernel on GPU 1 before the first step (a tensor put on another GPU at
    start-up, or a DDP rank touching cuda:0 before set_device), then 3 steps of 10 ms each
    running a 6 ms kernel on GPU 0, launched 1 ms into the step: the steps' figures are GPU
    0's, 60% busy of 30 ms, idle 4 ms per step waiting for launches but the last step's
    tail. GPU 1's idle steps made it 'GPU busy 30% of 60 ms', 'the GPU idles 55% of the step,
    and no ... launch in the trace ends that idle time' (unknown, not compute-bound) and 'one
    process launched kernels on 2 GPUs' (DataParallel)."""
    events = [cpu_event("cudaLaunchKernel", 100, 5, cat="cuda_runtime", correlation=99),
              device_event("init", 120, 10, device=1, stream=7, correlation=99)]
    for step in range(3):
        base = 1000 + step * 10_000
        events += [cpu_event(f"ProfilerStep#{step + 1}", base, 10_000, cat="user_annotation"),
                   cpu_event("cudaLaunchKernel", base + 900, 5, cat="cuda_runtime",
                             correlation=step + 1),
                   device_event("gemm", base + 1000, 6000, device=0, stream=7,
                                correlation=step + 1)]
    metrics = metrics_of(kineto_trace(tmp_path / "stray.json", events))
    assert metrics.gpu is not None and metrics.gpu.busy_fraction == pytest.approx(0.6)
    assert metrics.gpu.window_ns == 30_000_000 and metrics.max_devices_per_process == 1
    idle = metrics.gpu_idle
    assert idle is not None
    # GPU 0 idles 1 ms before the first kernel, 4 ms between steps twice (launch waits), and
    # 3 ms after the last one (nothing ends it).
    assert idle.idle_ns_per_step == {"data": 0, "sync": 0, "launch": 9_000_000 // 3,
                                     "unexplained": 3_000_000 // 3}


def _ddp_hook_trace(path: Path, beside: bool) -> Path:
    """A CPU DDP trace shaped as torch 2.13 records gloo: 3 ProfilerSteps of 4 ms, each 1 ms of
    aten::mm, then autograd's AccumulateGrad op holding DDP's hook, c10d::allreduce_, for 2 ms
    on the training thread while gloo's thread runs gloo:all_reduce for 1 ms; with ``beside``,
    another thread runs an aten::mm through the collective."""
    events = []
    for n in range(3):
        ts = 1000 + n * 4000
        events += [cpu_event(f"ProfilerStep#{n}", ts, 4000, cat="user_annotation"),
                   cpu_event("aten::mm", ts + 100, 1000),
                   cpu_event("autograd::engine::evaluate_function: "
                             "torch::autograd::AccumulateGrad", ts + 1200, 2100),
                   cpu_event("c10d::allreduce_", ts + 1250, 2000),
                   {**cpu_event("gloo:all_reduce", ts + 1300, 1000, cat="user_annotation"),
                    "tid": 77}]
        if beside:
            events.append({**cpu_event("aten::mm", ts + 1250, 2000), "tid": 78})
    return kineto_trace(path, events)


def test_a_thread_inside_a_collective_call_is_not_computing(tmp_path: Path) -> None:
    """The training thread inside c10d::allreduce_ waits on the collective, although autograd's
    AccumulateGrad op holds the call: its 2 ms per step are exposed communication, not compute
    the collective overlaps (a real 2-rank gloo DDP trace read 'compute-bound: the model's CPU
    operators take 86%', 'Communication takes 58% of each step; 100% of it overlaps compute').
    Another thread's op beside the collective is compute it overlaps."""
    alone = metrics_of(_ddp_hook_trace(tmp_path / "alone.json", beside=False))
    assert alone.comm is not None and alone.breakdown is not None
    assert alone.breakdown.parts_ns["comm_exposed"] == 2_000_000
    assert alone.breakdown.parts_ns["compute"] == 1_000_000 + 100_000
    assert alone.comm.overlap_fraction == 0.0
    assert alone.cpu_phases is not None and alone.cpu_phases.fractions["communication"] == 0.5
    beside = metrics_of(_ddp_hook_trace(tmp_path / "beside.json", beside=True))
    assert beside.comm is not None and beside.comm.overlap_fraction == 1.0
    assert beside.breakdown is not None and beside.breakdown.parts_ns["comm_exposed"] == 0


def _gpu_rows(rows: list[tuple[int, int, int]]) -> pd.DataFrame:
    """A kernels table of ``(start, end, device)`` rows, in start order."""
    from profreport.model import conform

    rows = sorted(rows)
    return conform("kernels", pd.DataFrame({
        "start": [r[0] for r in rows], "end": [r[1] for r in rows],
        "device": [r[2] for r in rows], "stream": 7, "correlation": range(len(rows)),
        "name": "k", "short_name": "k", "is_comm": False}))


def _two_devices() -> Profile:
    """Kernels on devices 0 and 1, one copy on device 0 only (12-18 ns), a zero-length kernel
    at 30."""
    from profreport.model import conform

    kernels = _gpu_rows([(0, 10, 0), (20, 30, 0), (30, 30, 0), (50, 60, 0), (5, 15, 1),
                         (40, 45, 1)])
    memcpy = conform("memcpy", pd.DataFrame({
        "start": [12], "end": [18], "device": [0], "stream": [7], "correlation": [9],
        "kind": ["DtoD"], "bytes": [64], "src_kind": ["device"], "dst_kind": ["device"]}))
    return Profile(Path("hand-built"), "nsys", tables={"kernels": kernels, "memcpy": memcpy})


def test_device_activity_takes_no_other_devices_rows() -> None:
    """A table holding one device's rows only (the copies of device 0) adds nothing to another
    device's activity: device 1 was busy 5-18 ns, device 0's copy counted as its own."""
    from profreport.reports.analysis.gpu import device_activity

    activity = {device: list(zip(busy.starts.tolist(), busy.ends.tolist(), strict=True))
                for device, busy in ((d, packed.intervals())
                                     for d, packed in device_activity(_two_devices()).items())}
    assert activity == {0: [(0, 10), (12, 18), (20, 30), (50, 60)], 1: [(5, 15), (40, 45)]}


@pytest.mark.parametrize(("low", "high", "holes"), [
    # Device 0's gaps inside the span; device 1's hole runs to its last busy time (40), not
    # past its last kernel (45) to the span's end.
    (8, 55, {"GPU 0": [(10, 12), (18, 20), (30, 50)], "GPU 1": [(15, 40)]}),
    # Before device 0's first busy time nothing is a hole; device 1 has no row there at all.
    (-5, 3, {}),
    # Inside one gap of device 0 the whole span is idle (no row reaches into it); device 1's
    # hole stops at its next kernel.
    (31, 49, {"GPU 0": [(31, 49)], "GPU 1": [(31, 40)]}),
])
def test_timeline_idle_holes_are_the_device_activity_gaps(low: int, high: int,
                                                          holes: dict) -> None:
    """The timeline's idle lanes, made from the rows reaching into its span, are the gaps of
    each device's whole activity (gpu.device_activity) there: a zero-length kernel (at 30)
    busies nothing, the copy (12-18) busies device 0."""
    from profreport.reports.analysis.gpu import device_activity
    from profreport.reports.analysis.kept import _kept
    from profreport.reports.analysis.timeline import _idle_segments

    profile = _two_devices()
    segments = _idle_segments(profile, low, high)
    # Made from the rows in the span: the devices' whole activity was neither made nor kept.
    assert not any(key[0] is device_activity.__wrapped__ for key in _kept(profile))
    found = {lane: list(zip(rows["start"].tolist(), rows["end"].tolist(), strict=True))
             for lane, rows in segments.groupby("lane") if len(rows)}
    assert found == holes
    span = iv.union(np.array([low]), np.array([high]))
    for device, busy in device_activity(profile).items():
        gaps = iv.intersect(iv.gaps(busy.intervals()), span)
        assert list(zip(gaps.starts.tolist(), gaps.ends.tolist(), strict=True)) == \
            holes.get(f"GPU {device}", [])


def test_a_forgotten_kept_result_is_made_again() -> None:
    """kept.per_profile's ``forget`` lets a result go: the next call makes it anew."""
    from profreport.reports.analysis.gpu import device_activity

    profile = _two_devices()
    kept = device_activity(profile)
    assert device_activity(profile) is kept
    device_activity.forget(profile)
    again = device_activity(profile)
    assert again is not kept and again.keys() == kept.keys()


def test_one_collective_on_each_gpu_of_one_process_is_one_call(tmp_path: Path) -> None:
    """One process driving two GPUs (nn.DataParallel): each step's broadcast is one NCCL group
    call launching a kernel on each GPU, each launch with its own correlation id. That is one
    collective a step, not two (it read 2 calls per step, 6 in all)."""
    events = []
    for n in range(3):
        start = 1000 + n * 1000
        events.append(cpu_event(f"ProfilerStep#{n + 1}", start, 900, cat="user_annotation"))
        events.append(cpu_event("Broadcast", start + 10, 100))
        for device in (0, 1):
            correlation = 10 * n + device + 1
            events.append(cpu_event("cudaLaunchKernel", start + 20 + 10 * device, 5,
                                    cat="cuda_runtime", correlation=correlation))
            events.append(device_event("ncclKernel_Broadcast_RING_LL_Sum_int8_t",
                                       start + 40, 200, pid=device, device=device, stream=7,
                                       correlation=correlation))
    m = metrics_of(kineto_trace(tmp_path / "dataparallel.json", events))
    assert m.comm is not None and m.comm.on_gpu
    assert (m.comm.calls_total, m.comm.calls_per_step) == (3, 1)
