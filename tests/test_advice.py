"""Advice that fits the run (issue #19 item 4): a fix is offered only where the profile's own
evidence shows it applies, and never for a setting the run already has.

Each shape is a small trace built by hand here; the corpus files check the same on real runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.results import RunAnalysis


def event(name: str, ts: int, dur: int, cat: str = "cpu_op", pid: int = 1, tid: int = 1,
          **args: object) -> dict:
    """One complete Kineto event (times in µs, as Kineto writes them)."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def kernel(name: str, ts: int, dur: int, correlation: int, **args: object) -> dict:
    """A GPU kernel on device 0, stream 7."""
    return event(name, ts, dur, "kernel", pid=0, tid=7, correlation=correlation, device=0,
                 stream=7, **args)


def launch(ts: int, correlation: int, tid: int = 1) -> dict:
    """The cudaLaunchKernel call of ``correlation``."""
    return event("cudaLaunchKernel", ts, 5, "cuda_runtime", tid=tid, correlation=correlation)


def analyze_trace(tmp_path: Path, events: list[dict], name: str = "trace.json",
                  **header: object) -> RunAnalysis:
    """Write a Kineto trace of ``events`` and analyse it alone."""
    path = tmp_path / name
    path.write_text(json.dumps({"schemaVersion": 1, **header, "traceEvents": events}))
    return analyze_paths([path], AnalyzeOptions()).runs[0]


def comm_steps(collective: tuple[str, str], kernel_name: str, steps: int = 4) -> list[dict]:
    """Steps of 10 ms with 2 ms of compute, then a 6 ms collective (c10d op and backend
    annotation around its launch) whose kernel runs after the compute: exposed communication."""
    c10d, backend = collective
    events: list[dict] = []
    for step in range(steps):
        t0, corr = step * 10_000, 100 + 2 * step
        events += [event(f"ProfilerStep#{step + 1}", t0, 10_000, "user_annotation"),
                   event("aten::mm", t0 + 100, 200), launch(t0 + 150, corr),
                   kernel("gemm_kernel", t0 + 200, 2000, corr),
                   event(c10d, t0 + 400, 300), event(backend, t0 + 450, 200, "user_annotation"),
                   launch(t0 + 500, corr + 1),
                   kernel(kernel_name, t0 + 2300, 6000, corr + 1)]
    return events


def test_collective_kind_from_the_launching_call(tmp_path: Path) -> None:
    """NCCL 2.19+ runs every collective as ``ncclDevKernel_Generic``: what it does comes from
    the CPU collective running on the thread that launched it (correlation id)."""
    run = analyze_trace(tmp_path, comm_steps(("c10d::alltoall_", "nccl:all_to_all"),
                                             "ncclDevKernel_Generic(ncclDevKernelArgsStorage)"),
                        distributedInfo={"backend": "nccl", "rank": 0, "world_size": 8})
    assert run.metrics.comm is not None
    assert run.metrics.comm.ns_per_step_by_collective == {"all_to_all": 6_000_000}


def test_collective_kind_from_the_kernel_name(tmp_path: Path) -> None:
    """A kernel named for its collective needs no launching call."""
    run = analyze_trace(tmp_path, comm_steps(("c10d::allreduce_", "nccl:all_reduce"),
                                             "ncclKernel_AllReduce_RING_LL_Sum_float"))
    assert run.metrics.comm.ns_per_step_by_collective == {"all_reduce": 6_000_000}


def test_collectives_of_real_runs(corpus: Path) -> None:
    """HTA's DDP trace: all-reduces and a few broadcasts; the MI300X trace's
    ``ncclDevKernel_Generic`` kernels are all-reduces where their launch was recorded, and
    unknown where the launch came before the trace began (no correlated call)."""
    hta = analyze_paths([corpus / "hta" / "nccl_data.json.gz"], AnalyzeOptions()).runs[0]
    assert list(hta.metrics.comm.ns_per_step_by_collective) == ["all_reduce", "broadcast"]
    amd = analyze_paths([corpus / "wild" / "tracelens_mi300x_resnet_actckpt_rank0of8.json.gz"],
                        AnalyzeOptions()).runs[0]
    kinds = amd.metrics.comm.ns_per_step_by_collective
    assert set(kinds) == {"all_reduce", "broadcast", "unknown"}
    assert kinds["all_reduce"] == pytest.approx(5_257_000, rel=0.01)
