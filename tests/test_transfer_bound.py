"""A GPU kept busy by copies is transfer-bound, not compute-bound: the verdict reads the step
breakdown's copy parts (h2d_copy, copy_memset), and compute-bound needs the kernels to hold the
step (hand-built Kineto traces: the steps of 1 ms a reviewer built, of pinned host-to-device
copies and of kernels; an nsys export of pageable copies reads the same). Nor is such a GPU
saturated for the findings that excuse a blocked CPU on a saturated GPU: SYNC_STALL and
HOST_DEVICE_COPIES_PER_STEP's severity read gpu_saturated_by_compute, not the busy fraction."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from profreport.executors import ExecutorOptions
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.results import RunAnalysis

sys.path.insert(0, str(Path(__file__).parent))
from conftest import cpu_event, device_event, kineto_trace, write_nsys_export  # noqa: E402

#: The one device of the traces.
DEVICE = [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 42314694656,
           "computeMajor": 8, "computeMinor": 0, "numSms": 108}]


def gpu_steps(path: Path, work_us: int, copy: bool, beside_us: int = 0, steps: int = 4) -> Path:
    """``steps`` ProfilerStep#N of 990 us, 1 ms apart, each launching one GPU operation of
    ``work_us``: a 64 MiB host-to-device copy from pinned memory (``copy``) or a kernel, with a
    pinned copy of ``beside_us`` under it on another stream (non_blocking, overlapped)."""
    events = []
    for i in range(steps):
        t = 1000 + i * 1000
        if beside_us:
            events += [cpu_event("cudaMemcpyAsync", t + 15, 5, cat="cuda_runtime",
                                 correlation=500 + i),
                       device_event("Memcpy HtoD (Pinned -> Device)", t + 60, beside_us,
                                    cat="gpu_memcpy", device=0, stream=8, tid=8,
                                    correlation=500 + i, bytes=1 << 26)]
        op, call = ("aten::to", "cudaMemcpyAsync") if copy else ("aten::mm", "cudaLaunchKernel")
        events += [cpu_event(f"ProfilerStep#{i + 1}", t, 990, cat="user_annotation"),
                   cpu_event(op, t + 10, 500 if copy else 100),
                   cpu_event(call, t + 20, 10, cat="cuda_runtime", correlation=100 + i)]
        if copy:
            events.append(device_event("Memcpy HtoD (Pinned -> Device)", t + 50, work_us,
                                       cat="gpu_memcpy", device=0, stream=7,
                                       correlation=100 + i, bytes=1 << 26))
        else:
            events.append(device_event("gemm_kernel", t + 50, work_us, device=0, stream=7,
                                       correlation=100 + i))
    return kineto_trace(path, events, deviceProperties=DEVICE)


def analyzed(path: Path) -> RunAnalysis:
    """The one run ``profreport analyze PATH`` makes of a file (in this process)."""
    (run,) = analyze_paths([path], AnalyzeOptions(executor=ExecutorOptions(processes=1))).runs
    return run


@pytest.mark.parametrize(("copy_us", "share"), [(900, "90%"), (700, "70%")])
def test_steps_of_pinned_copies_are_transfer_bound(tmp_path: Path, copy_us: int,
                                                   share: str) -> None:
    """Steps of 90% (the GPU busy past COMPUTE_BOUND_BUSY) and of 70% host-to-device copies and
    no kernel: they were compute-bound ('compute 0.0%') and balanced with no finding; the copies
    set the pace, with their share, direction, bytes and memory as evidence."""
    run = analyzed(gpu_steps(tmp_path / "copies.json", copy_us, copy=True))
    assert run.verdict == "transfer-bound"
    assert run.verdict_reason == (f"GPU copies and memsets take {share} of step time, its compute "
                                  "kernels 0.0%: moving data sets the pace")
    ids = [f.id for f in run.findings]
    assert ids[0] == "TRANSFER_BOUND" and "COMPUTE_BOUND" not in ids
    found = run.findings[0]
    assert found.title == f"Copies on the GPU set the pace of training: {share} of each step."
    evidence = [e.text for e in found.evidence]
    per_step = f"{copy_us / 1000:.1f} ms"
    assert evidence[0] == (f"host-to-device copies {per_step} and other copies and memsets 0.0 "
                           f"ms per step: {share} of 1.0 ms with no compute kernel beside them; "
                           "compute kernels 0.0%")
    assert evidence[1] == ("1 host-to-device copy launched per step (0 under 64 KiB), 64.0 MiB "
                           f"and {per_step} of copy time per step")
    assert evidence[-1] == ("host-to-device bytes over the profile: 256.0 MiB from pinned "
                            "memory, 0 B from pageable memory")
    advice = found.recommendation
    assert "already come from pinned memory" in advice and "pin_memory=True" not in advice
    assert "mixed precision" not in advice


def test_steps_of_kernels_stay_compute_bound(tmp_path: Path) -> None:
    """The same steps with a 900 us kernel in place of the copy: the kernels hold the step, the
    run is compute-bound and TRANSFER_BOUND stays silent."""
    run = analyzed(gpu_steps(tmp_path / "kernels.json", 900, copy=False))
    assert run.verdict == "compute-bound"
    assert run.verdict_reason == "GPU busy 90% of the step windows"
    ids = [f.id for f in run.findings]
    assert ids[0] == "COMPUTE_BOUND" and "TRANSFER_BOUND" not in ids
    assert "compute 90% of 1.0 ms per step" in [e.text for e in run.findings[0].evidence]


def test_nsys_steps_of_pageable_copies_are_transfer_bound(tmp_path: Path) -> None:
    """An Nsight Systems export: 4 NVTX steps of 10 ms, each copying 64 MiB host-to-device from
    pageable memory for 8 ms and running a 1 ms kernel (busy 90%: compute-bound before). The
    same rule as Kineto's: transfer-bound, pinning advised."""
    ms = 1_000_000
    kernels, runtime, copies = [], [], []
    for i in range(4):
        t, c = i * 10 * ms, i * 10
        runtime += [(t + 100_000, t + 200_000, c + 1, "cudaMemcpyAsync_v3020"),
                    (t + 300_000, t + 310_000, c + 2, "cudaLaunchKernel_v7000")]
        copies.append((t + 500_000, t + 8_500_000, c + 1, 2**26, 1, 0, 2))
        kernels.append((t + 8_600_000, t + 9_600_000, c + 2, "gemm"))
    steps = [(i * 10 * ms, i * 10 * ms + 10 * ms, f"step {i}") for i in range(4)]
    path = write_nsys_export(tmp_path / "copies.sqlite", kernels, steps, runtime)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, "
                     "streamId INT, correlationId INT, bytes INT, copyKind INT, srcKind INT, "
                     "dstKind INT)")
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES "
                         "(?, ?, 0, 7, ?, ?, ?, ?, ?)", copies)
    run = analyzed(path)
    assert run.verdict == "transfer-bound"
    assert run.verdict_reason == ("GPU copies and memsets take 80% of step time, its compute "
                                  "kernels 10%: moving data sets the pace")
    found = run.findings[0]
    assert found.id == "TRANSFER_BOUND"
    assert [e.text for e in found.evidence] == [
        "host-to-device copies 8.0 ms and other copies and memsets 0.0 ms per step: 80% of "
        "10.0 ms with no compute kernel beside them; compute kernels 10%",
        "1 host-to-device copy launched per step (0 under 64 KiB), 64.0 MiB and 8.0 ms of "
        "copy time per step",
        "host-to-device bytes over the profile: 0 B from pinned memory, 256.0 MiB from "
        "pageable memory"]
    assert "pin_memory=True" in found.recommendation


def test_copies_hidden_under_the_kernels_leave_it_compute_bound(tmp_path: Path) -> None:
    """The kernel steps with a 600 us pinned copy on a second stream under each 900 us kernel:
    the kernels run beside the copies all along, so compute claims those 600 us (the h2d_copy
    part claimed them before compute: compute 300 us, 30% of the step) and the copies set no
    pace: compute-bound, no TRANSFER_BOUND, the hidden copy time kept beside the breakdown."""
    run = analyzed(gpu_steps(tmp_path / "overlapped.json", 900, copy=False, beside_us=600))
    breakdown = run.metrics.breakdown
    assert (breakdown.parts_ns["h2d_copy"], breakdown.parts_ns["compute"],
            breakdown.h2d_overlapped_ns) == (0, 900_000, 600_000)
    assert run.verdict == "compute-bound"
    assert run.verdict_reason == "GPU busy 90% of the step windows"
    assert "TRANSFER_BOUND" not in [f.id for f in run.findings]


def test_a_copy_hidden_under_the_kernels_is_compute_time(tmp_path: Path) -> None:
    """Kernels of 650 us a step (the GPU busy 65%, under COMPUTE_BOUND_BUSY) with a 300 us
    pinned copy on a second stream under each: the kernels hold 65% of the step, past
    COMPUTE_BOUND_SHARE. The copy claimed its 300 us before compute, which read 35%: balanced.
    Now compute claims first and the copy shows only what it adds (none)."""
    run = analyzed(gpu_steps(tmp_path / "hidden.json", 650, copy=False, beside_us=300))
    breakdown = run.metrics.breakdown
    assert (breakdown.parts_ns["compute"], breakdown.parts_ns["h2d_copy"],
            breakdown.h2d_overlapped_ns) == (650_000, 0, 300_000)
    assert run.verdict == "compute-bound"
    assert run.verdict_reason == "GPU kernels take 65% of step time"


def test_transfer_bound_counts_only_the_copy_time_no_kernel_hides(tmp_path: Path) -> None:
    """A 300 us kernel a step with a 900 us pinned copy on a second stream starting under it:
    290 us of the copy run beside the kernel, 610 us alone (61% of the step): transfer-bound.
    The evidence gives the exposed copy time and the hidden time beside it, and the kernels
    their 30% (the copy claimed all of its time first: 'compute kernels 1.0%')."""
    run = analyzed(gpu_steps(tmp_path / "partly.json", 300, copy=False, beside_us=900))
    breakdown = run.metrics.breakdown
    assert (breakdown.parts_ns["compute"], breakdown.parts_ns["h2d_copy"],
            breakdown.h2d_overlapped_ns) == (300_000, 610_000, 290_000)
    assert run.verdict == "transfer-bound"
    found = run.findings[0]
    assert found.id == "TRANSFER_BOUND"
    assert found.evidence[0].text == (
        "host-to-device copies 0.6 ms (and 0.3 ms more beside compute kernels) and other copies "
        "and memsets 0.0 ms per step: 61% of 1.0 ms with no compute kernel beside them; "
        "compute kernels 30%")


def waiting_steps(path: Path, copy_us: int, kernel_us: int, wait: str) -> Path:
    """4 training steps (ProfilerStep#N of 990 us, 1 ms apart, each with an optimizer step), each
    queuing a 64 MiB pinned host-to-device copy of ``copy_us`` (none at 0) and then a kernel of
    ``kernel_us`` on one stream, the CPU then waiting for the GPU to drain: in a
    cudaStreamSynchronize (``wait`` "sync") or in two aten::item reads of 4 bytes into pageable
    memory ("reads"), the first issued as the GPU work starts, the second after it."""
    events = []
    for i in range(4):
        t = 1000 + i * 1000
        end = t + 50 + copy_us + kernel_us  # the GPU has drained
        events += [cpu_event(f"ProfilerStep#{i + 1}", t, 990, cat="user_annotation"),
                   cpu_event("aten::mm", t + 30, 15),
                   cpu_event("cudaLaunchKernel", t + 32, 5, cat="cuda_runtime",
                             correlation=200 + i),
                   device_event("gemm_kernel", t + 50 + copy_us, kernel_us, device=0, stream=7,
                                correlation=200 + i),
                   cpu_event("Optimizer.step#SGD.step", end + 40, 10, cat="user_annotation")]
        if copy_us:
            events += [cpu_event("aten::to", t + 10, 15),
                       cpu_event("cudaMemcpyAsync", t + 12, 5, cat="cuda_runtime",
                                 correlation=100 + i),
                       device_event("Memcpy HtoD (Pinned -> Device)", t + 50, copy_us,
                                    cat="gpu_memcpy", device=0, stream=7,
                                    correlation=100 + i, bytes=1 << 26)]
        if wait == "sync":
            events.append(cpu_event("cudaStreamSynchronize", t + 50, end + 5 - (t + 50),
                                    cat="cuda_runtime"))
            continue
        for k, (at, copied) in enumerate([(t + 50, end + 2), (end + 15, end + 19)]):
            events += [cpu_event("aten::item", at, copied + 8 - at),
                       cpu_event("cudaMemcpyAsync", at + 2, copied + 4 - at, cat="cuda_runtime",
                                 correlation=300 + 10 * i + k),
                       device_event("Memcpy DtoH (Device -> Pageable)", copied, 2,
                                    cat="gpu_memcpy", device=0, stream=7,
                                    correlation=300 + 10 * i + k, bytes=4)]
    return kineto_trace(path, events, deviceProperties=DEVICE)


@pytest.mark.parametrize(("copy_us", "kernel_us", "stall"), [(700, 150, True), (0, 850, False)])
def test_a_cpu_waiting_on_copies_stalls_one_waiting_on_kernels_does_not(
        tmp_path: Path, copy_us: int, kernel_us: int, stall: bool) -> None:
    """The CPU blocks 86% of each step in cudaStreamSynchronize while the GPU is busy 85%: with
    a 700 us copy and a 150 us kernel the GPU is transfer-bound, its kernels idle while the
    copy runs alone, and the blocked CPU queues nothing to run beside it: SYNC_STALL (it read
    the GPU busy fraction, copies included, as saturation and stayed silent). With an 850 us
    kernel the kernels saturate the GPU and waiting on it costs nothing: no SYNC_STALL."""
    run = analyzed(waiting_steps(tmp_path / "sync.json", copy_us, kernel_us, "sync"))
    assert run.metrics.gpu.busy_fraction == pytest.approx(0.852, abs=0.001)
    assert run.metrics.syncs.fraction == pytest.approx(0.857, abs=0.001)
    assert run.verdict == ("transfer-bound" if stall else "compute-bound")
    found = {f.id: f for f in run.findings}
    assert ("SYNC_STALL" in found) == stall
    if stall:
        assert found["SYNC_STALL"].title == ("The CPU waits for the GPU in blocking calls for "
                                             "86% of each step, most in cudaStreamSynchronize.")
        assert run.findings[0].id == "TRANSFER_BOUND"


@pytest.mark.parametrize(("copy_us", "kernel_us", "severity"),
                         [(700, 150, "medium"), (0, 850, "low")])
def test_reads_back_on_a_gpu_busy_with_copies_weigh_more(tmp_path: Path, copy_us: int,
                                                         kernel_us: int, severity: str) -> None:
    """Two aten::item reads into pageable memory per step, each blocking the CPU until the GPU
    drains, on a GPU busy 86%: behind a 700 us copy and a 150 us kernel the drain leaves the
    kernels idle beside the copy, medium (it was low: the busy fraction, copies included, read
    as saturation); behind an 850 us kernel the GPU is saturated by compute, low."""
    run = analyzed(waiting_steps(tmp_path / "reads.json", copy_us, kernel_us, "reads"))
    assert run.metrics.gpu.busy_fraction == pytest.approx(0.856, abs=0.001)
    assert run.metrics.step_copies.blocking_per_step == 2
    found = next(f for f in run.findings if f.id == "HOST_DEVICE_COPIES_PER_STEP")
    assert found.severity == severity
    assert ("2 device-to-host copies per step go to pageable memory: each blocks the CPU until "
            "the GPU drains") in [e.text for e in found.evidence]
