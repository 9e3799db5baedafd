"""Step windows are time (reports.analysis.steps): built by hand, Kineto traces whose
ProfilerStep spans overlap (a span running past the next one's start, the spans of two processes
read as one trace) give the figures a person computes from the wall clock, never counting a
stretch of time twice."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from profreport.parsers import kineto
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.results import RunMetrics

sys.path.insert(0, str(Path(__file__).parent))
from conftest import kineto_trace  # noqa: E402

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
US = 1000


def _event(name: str, ts: int, dur: int, cat: str, pid: int, **args: object) -> dict:
    """A complete event of process ``pid`` (on its thread of the same id)."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": pid, "ts": ts, "dur": dur,
            "args": args}


def _step(number: int, ts: int, dur: int, pid: int, device: int, ids: int = 1000) -> list[dict]:
    """ProfilerStep#``number`` of ``dur`` µs from ``ts`` on process ``pid``: a 300 µs DataLoader
    fetch, then aten::mm launching one 400 µs kernel on ``device`` (correlation id ``number``
    plus ``ids`` times ``pid``)."""
    at, correlation = ts + 300, pid * ids + number
    return [_event(f"ProfilerStep#{number}", ts, dur, "user_annotation", pid),
            _event(LOADER, ts, 300, "user_annotation", pid),
            _event("aten::mm", at + 10, 50, "cpu_op", pid),
            _event("cudaLaunchKernel", at + 20, 10, "cuda_runtime", pid, correlation=correlation),
            {**_event("gemm_kernel", at + 40, 400, "kernel", 0, correlation=correlation,
                      stream=7, device=device), "tid": 7}]


def _metrics(path: Path) -> RunMetrics:
    """The run metrics of one trace."""
    return analyze_paths([path], AnalyzeOptions()).runs[0].metrics


def test_a_step_span_running_past_the_next_ones_start_counts_that_time_once(
        tmp_path: Path) -> None:
    """Four steps start 1 ms apart, the first three spans 1.5 ms long (each runs 0.5 ms into the
    next), the last 1 ms: 4 ms of wall time, 4 x 300 µs of DataLoader wait (30%), 4 x 400 µs
    of kernels (40%), 1 ms a step. The windows overlapped by 0.5 ms: summed, they made 5.5 ms
    of step time, the mean step 1.375 ms, and the wait in each overlap counted twice (38%)."""
    events = [event for i in range(4)
              for event in _step(i + 1, 1000 + i * 1000, 1500 if i < 3 else 1000, 1, 0)]
    metrics = _metrics(kineto_trace(tmp_path / "past_next.json", events))
    steps = metrics.steps
    assert steps.count == 4 and steps.wall_mean_ns == 1000 * US
    assert steps.mean_ns == 1000 * US  # each span taken up to the next one's start
    assert steps.window_ns == (1000 * US,) * 4
    assert metrics.dataloader_fraction == pytest.approx(0.30)
    assert (metrics.gpu.busy_ns, metrics.gpu.window_ns) == (1600 * US, 4000 * US)
    breakdown = metrics.breakdown
    assert breakdown.step_ns == 1000 * US
    assert (breakdown.parts_ns["dataloader"], breakdown.parts_ns["compute"]) == (300 * US,
                                                                                400 * US)
    assert sum(breakdown.parts_ns.values()) == breakdown.step_ns


def _two_processes(path: Path, ids: int = 1000) -> Path:
    """One trace holding two processes' training loops (two ranks' traces read as one), each
    on a GPU of its own: process 1's ProfilerStep#1-#4 start every 1 ms from 1 ms, process 2's
    #0-#3 (its profiler started one step later) 10 µs after each of them; with ``ids`` 0 both
    number their launches' correlation ids alike (1-4 and 0-3), as CUPTI does per process."""
    events = []
    for i in range(4):
        events += _step(i + 1, 1000 + i * 1000, 1000, 1, 0, ids)
        events += _step(i, 1010 + i * 1000, 1000, 2, 1, ids)
    return kineto_trace(path, events)


#: What the note on a trace of two processes says first: which spans are the steps.
TWO_PROCESSES = (
    "step spans are recorded on 2 threads: the steps are the 4 spans of pid 1 thread 1, the "
    "thread that records the most; the 4 of the other thread (another loop's, or another "
    "process's, as in traces of several ranks read as one) cover the same time and mark no "
    "step; the rows of pid 2 (another process's loop) are left out: its operators, spans, "
    "DataLoader fetches and memory events, ")


def test_the_steps_of_a_trace_of_two_processes_are_one_process(tmp_path: Path) -> None:
    """Process 1's 4 steps are the steps; process 2's spans cover the same time under numbers
    of their own. Taken together (the first span of each number), they made 5 steps 0.75 ms
    apart: process 2's #0 and process 1's #1-#4, each stretch of time in two steps' windows.
    The figures are process 1's alone: its 300 µs fetch of each 1 ms step (30%), its one
    400 µs kernel on GPU 0 (compute 400 µs, GPU 0 40% busy), its 10 µs launch call while the
    GPU is idle (host runtime 10 µs). Process 2's rows are left out, its launch calls and the
    work on GPU 1 that only they launched too, and the note says so; they were read with
    process 1's: the wait was 310 µs a step (31%: process 2's fetch starts 10 µs later),
    compute 410 µs, host runtime 20 µs, 2 kernels a step, GPU 1 40% busy beside GPU 0."""
    path = _two_processes(tmp_path / "two.json")
    profile = kineto.parse(path)
    steps = profile.table("steps")
    assert steps["number"].tolist() == [1, 2, 3, 4] and set(steps["pid"]) == {1}
    for name in ("dataloader", "cpu_ops", "ranges", "runtime"):
        assert set(profile.table(name)["pid"]) == {1}, name
    assert set(profile.table("kernels")["device"]) == {0}
    metrics = _metrics(path)
    assert metrics.steps.count == 4
    assert (metrics.steps.mean_ns, metrics.steps.wall_mean_ns) == (1000 * US, 1000 * US)
    assert metrics.steps.window_ns == (1000 * US,) * 4
    assert metrics.gpu.per_device == {0: pytest.approx(0.40)}
    assert metrics.dataloader_fraction == pytest.approx(0.30)
    assert metrics.launch is not None and metrics.launch.kernels_per_step == 1
    breakdown = metrics.breakdown
    assert breakdown.step_ns == 1000 * US
    assert {name: breakdown.parts_ns[name] for name in ("dataloader", "compute", "host_runtime",
                                                        "other")} == {
        "dataloader": 300 * US, "compute": 400 * US, "host_runtime": 10 * US, "other": 290 * US}
    assert profile.meta.notes == [
        TWO_PROCESSES + "its launch calls, and the work on GPU 1, which only its calls "
        "launched; the figures are pid 1's"]


def test_two_processes_whose_launch_ids_collide_keep_every_gpus_work_and_say_so(
        tmp_path: Path) -> None:
    """The same trace with both processes numbering their correlation ids alike: the launch
    calls no longer tell whose each GPU's work is (GPU 0's kernels share ids with both
    processes' calls), so the calls and the work of both GPUs are kept, and the note says the
    GPU figures read every process's work; the CPU side is process 1's alone: the DataLoader
    wait is its 300 µs of each step (30%)."""
    path = _two_processes(tmp_path / "two.json", ids=0)
    profile = kineto.parse(path)
    assert set(profile.table("dataloader")["pid"]) == {1}
    assert set(profile.table("runtime")["pid"]) == {1, 2}
    assert set(profile.table("kernels")["device"]) == {0, 1}
    metrics = _metrics(path)
    assert metrics.dataloader_fraction == pytest.approx(0.30)
    assert metrics.gpu.per_device == {0: pytest.approx(0.40), 1: pytest.approx(0.40)}
    assert profile.meta.notes == [
        TWO_PROCESSES[:-2] + ", not its launch calls: whose the work on GPUs 0, 1 is, no launch "
        "call tells (it is linked to calls of several processes, or to none), so the launch "
        "calls and every GPU's work are kept: the CPU figures are pid 1's, the GPU figures read "
        "every process's work"]
