"""Advice that fits the run (issue #19 item 4): a fix is offered only where the profile's own
evidence shows it applies, and never for a setting the run already has.

Each shape is a small trace built by hand here; the corpus files check the same on real runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.results import RunAnalysis
from profreport.reports.render.json import metrics_json


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


def test_collective_kind_from_the_launching_process_s_thread(tmp_path: Path) -> None:
    """Two processes in one trace whose threads share the id 1: process 1 launches its
    ``ncclDevKernel_Generic`` inside its all-to-all, while process 2's thread 1 runs an
    all-reduce that started later and is still running at the launch. Matched by thread id
    alone, the kernels read as all-reduces ({'all_reduce': 6000000}); matched by process and
    thread, they are the launching process's all-to-all."""
    events = comm_steps(("c10d::alltoall_", "nccl:all_to_all"),
                        "ncclDevKernel_Generic(ncclDevKernelArgsStorage)")
    for step in range(4):
        t0 = step * 10_000
        events += [event("c10d::allreduce_", t0 + 460, 300, pid=2, tid=1),
                   event("nccl:all_reduce", t0 + 470, 200, "user_annotation", pid=2, tid=1)]
    run = analyze_trace(tmp_path, events,
                        distributedInfo={"backend": "nccl", "rank": 0, "world_size": 8})
    assert run.metrics.comm.ns_per_step_by_collective == {"all_to_all": 6_000_000}


def test_collective_kind_from_the_kernel_name(tmp_path: Path) -> None:
    """A kernel named for its collective needs no launching call."""
    run = analyze_trace(tmp_path, comm_steps(("c10d::allreduce_", "nccl:all_reduce"),
                                             "ncclKernel_AllReduce_RING_LL_Sum_float"))
    assert run.metrics.comm.ns_per_step_by_collective == {"all_reduce": 6_000_000}


def test_collective_kind_from_the_collective_name_recorded(tmp_path: Path) -> None:
    """A ``ncclDevKernel_Generic`` launched inside a record_param_comms span alone (no c10d or
    backend op recorded around it): the kind is the ``Collective name`` that span records."""
    events = bucket_steps([262_144] * 2)
    events = [e for e in events if e["name"] != "c10d::allreduce_"]
    for e in events:
        if e["name"].startswith("ncclKernel"):
            e["name"] = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
    run = analyze_trace(tmp_path, events)
    assert run.metrics.comm.ns_per_step_by_collective == {"all_reduce": 12_000_000}


def test_collectives_of_real_runs(corpus: Path) -> None:
    """HTA's DDP trace: all-reduces and a few broadcasts; the MI300X trace's
    ``ncclDevKernel_Generic`` kernels are all-reduces where their launch was recorded, and
    unknown where the launch came before the trace began (no correlated call)."""
    hta = analyze_paths([corpus / "hta" / "nccl_data.json.gz"], AnalyzeOptions()).runs[0]
    assert list(hta.metrics.comm.ns_per_step_by_collective) == ["all_reduce", "broadcast"]
    amd = analyze_paths([corpus / "wild" / "tracelens_mi300x_resnet_actckpt_rank0of8.json.gz"],
                        AnalyzeOptions()).runs[0]
    kinds = amd.metrics.comm.ns_per_step_by_collective
    # Measured on the trace's 3 steps: 5.26 ms of all-reduce a step, 8.11 ms unknown.
    assert kinds == {"all_reduce": 5_257_018, "broadcast": 6_866, "unknown": 8_105_404}


def loader_steps(copy_name: str, steps: int = 4) -> list[dict]:
    """Steps of 10 ms: a 6 ms wait in a multi-process DataLoader, a 1 MB host-to-device copy
    named ``copy_name``, and a 2 ms kernel: loader-bound."""
    events: list[dict] = []
    for step in range(steps):
        t0, corr = step * 10_000, 200 + 2 * step
        events += [event(f"ProfilerStep#{step + 1}", t0, 10_000, "user_annotation"),
                   event("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t0,
                         6000, "user_annotation"),
                   event("cudaMemcpyAsync", t0 + 6100, 20, "cuda_runtime", correlation=corr),
                   event(copy_name, t0 + 6150, 100, "gpu_memcpy", pid=0, tid=7, device=0,
                         stream=7, correlation=corr, bytes=1 << 20),
                   event("aten::mm", t0 + 6300, 200), launch(t0 + 6350, corr + 1),
                   kernel("gemm_kernel", t0 + 6400, 2000, corr + 1)]
    return events


@pytest.mark.parametrize("copy_name, pinned", [
    ("Memcpy HtoD (Pinned -> Device)", True), ("Memcpy HtoD (Pageable -> Device)", False)])
def test_pin_memory_only_for_pageable_copies(tmp_path: Path, copy_name: str,
                                             pinned: bool) -> None:
    """A loader-bound run whose batches are copied from pinned memory is not told to pin them;
    one copying from pageable memory is."""
    run = analyze_trace(tmp_path, loader_steps(copy_name))
    advice = {f.id: f for f in run.findings}["LOADER_BOUND"].recommendation
    assert ("pin_memory=True" in advice) is not pinned
    assert "does not record how many" in advice  # worker spans, no count recorded


def conv_steps(rank: int, steps: int = 3, strides: list[list[int]] | None = None) -> list[dict]:
    """Steps of 10 ms on a busy GPU: a convolution of a ``rank``-D input whose kernels include a
    NCHW -> NHWC transpose (layout conversions 20% of kernel time); its inputs' ``strides``
    recorded when given."""
    dims = [[8, 16, 32, 32, 32][:rank], [32, 16, 3, 3, 3][:rank], []]
    conv = f"aten::conv{rank - 2}d"
    inputs = {"Input type": ["float", "float", ""], "Input Dims": dims}
    if strides is not None:
        inputs["Input Strides"] = strides
    events: list[dict] = []
    for step in range(steps):
        t0, corr = step * 10_000, 300 + 2 * step
        events += [event(f"ProfilerStep#{step + 1}", t0, 10_000, "user_annotation"),
                   event(conv, t0 + 10, 100, **inputs),
                   launch(t0 + 20, corr), launch(t0 + 30, corr + 1),
                   kernel("void cudnn::ops::nchwToNhwcKernel<float>", t0 + 50, 1900, corr),
                   kernel("sm80_xmma_fprop_implicit_gemm_bf16", t0 + 1960, 7900, corr + 1)]
    return events


@pytest.mark.parametrize("rank, fmt, other", [(4, "torch.channels_last)", "channels_last_3d"),
                                              (5, "torch.channels_last_3d)", "channels_last)")])
def test_memory_format_follows_the_convolutions_rank(tmp_path: Path, rank: int, fmt: str,
                                                     other: str) -> None:
    """channels_last for 2-D convolutions (4-D inputs), channels_last_3d for 3-D ones, read from
    the recorded input shapes."""
    run = analyze_trace(tmp_path, conv_steps(rank), deviceProperties=[
        {"id": 0, "name": "NVIDIA A100-SXM4-40GB", "computeMajor": 8, "computeMinor": 0}])
    assert run.metrics.conv_bias is not None and run.metrics.conv_bias.input_ranks == (rank,)
    advice = {f.id: f for f in run.findings}["COMPUTE_BOUND"].recommendation
    assert fmt in advice and other not in advice


#: Strides of conv_steps' 4-D input (8, 16, 32, 32) and weight, row-major and channels-last.
NCHW_STRIDES = [[16 * 32 * 32, 32 * 32, 32, 1], [144, 9, 3, 1], []]
NHWC_STRIDES = [[16 * 32 * 32, 1, 32 * 16, 16], [144, 1, 48, 16], []]


def test_channels_last_is_read_from_the_input_strides(tmp_path: Path) -> None:
    """Convolutions whose recorded input strides are channels-last: the model uses it already,
    so the layout conversions left are to be found, not channels_last advised again; row-major
    strides get the advice; a trace without strides cannot tell (counted as neither)."""
    gpu = [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "computeMajor": 8, "computeMinor": 0}]
    runs = {name: analyze_trace(tmp_path, conv_steps(4, strides=strides), f"{name}.json",
                                deviceProperties=gpu)
            for name, strides in (("nhwc", NHWC_STRIDES), ("nchw", NCHW_STRIDES),
                                  ("unrecorded", None))}
    formats = {name: (run.metrics.conv_formats.channels_last, run.metrics.conv_formats.contiguous)
               for name, run in runs.items()}
    assert formats == {"nhwc": (3, 0), "nchw": (0, 3), "unrecorded": (0, 0)}
    advice = {name: {f.id: f for f in run.findings}["COMPUTE_BOUND"].recommendation
              for name, run in runs.items()}
    assert "find the layer or input still in the old layout" in advice["nhwc"]
    assert "torch.channels_last)" not in advice["nhwc"]
    assert "torch.channels_last)" in advice["nchw"] and "torch.channels_last)" in \
        advice["unrecorded"]


def test_memory_formats_of_strides() -> None:
    """Row-major and channel-innermost strides, 4-D and 5-D; one channel or a strided view
    tells neither."""
    from profreport.concepts import CHANNELS_LAST, CONTIGUOUS, memory_format

    assert memory_format((8, 16, 32, 32), tuple(NCHW_STRIDES[0])) == CONTIGUOUS
    assert memory_format((8, 16, 32, 32), tuple(NHWC_STRIDES[0])) == CHANNELS_LAST
    assert memory_format((2, 4, 3, 5, 5), (300, 1, 100, 20, 4)) == CHANNELS_LAST
    assert memory_format((2, 4, 3, 5, 5), (300, 75, 25, 5, 1)) == CONTIGUOUS
    assert memory_format((8, 1, 32, 32), (1024, 1024, 32, 1)) is None
    assert memory_format((8, 16, 32, 32), (16384, 1024, 1, 32)) is None
    assert memory_format((8, 16), (16, 1)) is None


def test_memory_format_is_conditional_without_shapes(corpus: Path, nsys_available: str) -> None:
    """sc22's 3-D U-Net on 4 GPUs under nsys: layout conversions take 19% of kernel time, but
    nsys records no input shapes, so both formats are named, each with the convolutions it
    fits, and no rank is claimed."""
    run = analyze_paths([corpus / "nsys" / "sc22_4gpu_baseline.nsys-rep"],
                        AnalyzeOptions()).runs[0]
    assert run.metrics.kernel_mix is not None
    assert run.metrics.kernel_mix.layout_conversion_fraction == pytest.approx(0.194, abs=0.005)
    advice = {f.id: f for f in run.findings}["COMPUTE_BOUND"].recommendation
    assert ("channels_last for 2-D convolutions (4-D inputs) or channels_last_3d for 3-D ones "
            "(5-D inputs; the profile records no input shapes to tell which)") in advice
    assert "memory_format=torch." not in advice


@pytest.mark.parametrize("collective, advice_has, advice_lacks", [
    (("c10d::alltoall_", "nccl:all_to_all"), "all-to-all", "bucket_cap_mb"),
    (("c10d::allreduce_", "nccl:all_reduce"), "Tune DDP's gradient all-reduce", "all-to-all")])
def test_ddp_advice_only_for_all_reduce(tmp_path: Path, collective: tuple[str, str],
                                        advice_has: str, advice_lacks: str) -> None:
    """DDP's bucket_cap_mb fits gradient all-reduces, not embedding all-to-all."""
    run = analyze_trace(tmp_path, comm_steps(collective, "ncclDevKernel_Generic"))
    advice = {f.id: f for f in run.findings}["COMM_OVERHEAD"].recommendation
    assert advice_has in advice and advice_lacks not in advice


def test_broadcast_buffers_only_where_broadcasts_run(tmp_path: Path) -> None:
    """DDP's broadcast_buffers=True sends the model's buffers at every forward: a step that
    records only the gradient all-reduce broadcasts nothing, so the knob would change nothing;
    one that records a broadcast beside it gets the advice."""
    reduce_only = comm_steps(("c10d::allreduce_", "nccl:all_reduce"),
                             "ncclKernel_AllReduce_RING_LL_Sum_float")
    advice = {f.id: f for f in analyze_trace(tmp_path, reduce_only).findings}[
        "COMM_OVERHEAD"].recommendation
    assert "broadcast_buffers" not in advice and "no_sync()" in advice
    broadcasts = [kernel("ncclKernel_Broadcast_RING_LL_Sum_int8_t", 10_000 * step + 8400, 100,
                         -1) for step in range(4)]
    both = analyze_trace(tmp_path, reduce_only + broadcasts, name="both.json")
    advice = {f.id: f for f in both.findings}["COMM_OVERHEAD"].recommendation
    assert "set broadcast_buffers=False" in advice


def test_a_changed_ddp_knob_is_not_advised_again(tmp_path: Path) -> None:
    """A run that set bucket_cap_mb and broadcast_buffers is not told to set them."""
    from profreport.reports.analysis.findings import RunContext, find_all

    run = analyze_trace(tmp_path, comm_steps(("c10d::allreduce_", "nccl:all_reduce"),
                                             "ncclKernel_AllReduce_RING_LL_Sum_float"))
    found = find_all(run.metrics, RunContext(knobs={"bucket_cap_mb": 100,
                                                    "broadcast_buffers": False}))
    advice = {f.id: f for f in found}["COMM_OVERHEAD"].recommendation
    assert "bucket_cap_mb" not in advice and "broadcast_buffers" not in advice
    assert "no_sync()" in advice


def bucket_steps(nelems: list[int], steps: int = 3, **sizes: object) -> list[dict]:
    """Steps of 20 ms: 2 ms of compute, then one all-reduce per bucket of ``nelems`` floats
    (record_param_comms with its recorded size, unless ``sizes`` replaces those args, the
    c10d op and an NCCL kernel of 12 ms / len(nelems) each), exposed after the compute."""
    events: list[dict] = []
    each = 12_000 // len(nelems)
    for step in range(steps):
        t0, corr = step * 20_000, 1000 * (step + 1)
        events += [event(f"ProfilerStep#{step + 1}", t0, 20_000, "user_annotation"),
                   event("aten::mm", t0 + 100, 200), launch(t0 + 150, corr),
                   kernel("gemm_kernel", t0 + 200, 2000, corr)]
        for i, count in enumerate(nelems):
            args = sizes or {"In msg nelems": count, "Out msg nelems": count, "dtype": "Float",
                             "Collective name": "allreduce"}
            at = t0 + 400 + 10 * i
            events += [event("c10d::allreduce_", at, 8), event("record_param_comms", at + 1, 5,
                                                               **args),
                       launch(at + 2, corr + 1 + i),
                       kernel("ncclKernel_AllReduce_RING_LL_Sum_float", t0 + 2300 + i * each,
                              each, corr + 1 + i)]
    return events


def comm_advice(tmp_path: Path, events: list[dict], **knobs: object) -> tuple[str, str]:
    """COMM_OVERHEAD's evidence (one text) and advice for ``events`` with ``knobs``."""
    from profreport.reports.analysis.findings import RunContext, find_all

    run = analyze_trace(tmp_path, events)
    found = {f.id: f for f in find_all(run.metrics, RunContext(knobs=knobs))}["COMM_OVERHEAD"]
    return " | ".join(e.text for e in found.evidence), found.recommendation


def test_small_all_reduces_are_told_to_grow_to_the_default_bucket(tmp_path: Path) -> None:
    """20 all-reduces of 1 MiB each step (the trace records their elements and dtype): DDP's
    default buckets (a 1 MiB first bucket, then 25 MiB) would send those 20 MiB in 2, so
    bucket_cap_mb is raised from the size the buckets have (or the knob the run recorded) to
    25 MB, which, passed, caps the first bucket too: 1 all-reduce."""
    events = bucket_steps([262_144] * 20)
    evidence, advice = comm_advice(tmp_path, events)
    assert ("20 all-reduces per step send 20.0 MiB in all (each 1.0 MiB); DDP's default "
            "buckets (1 MB first, then 25 MB) would make about 2") in evidence
    assert ("raise bucket_cap_mb from about 1 MB (the largest all-reduce: DDP fills each bucket "
            "up to bucket_cap_mb and the last one holds the rest; the run's bucket_cap_mb is "
            "unknown, not recorded) to 25 MB: the 20.0 MiB each step reduces would take about "
            "1 all-reduce instead of 20 (passed, bucket_cap_mb caps DDP's first bucket "
            "too)") in advice
    assert "raise bucket_cap_mb from 1 MB to 25 MB" in comm_advice(tmp_path, events,
                                                                   bucket_cap_mb=1)[1]


def test_buckets_at_the_default_are_not_told_to_grow(tmp_path: Path) -> None:
    """4 all-reduces of 26 MiB each step: as large as DDP's default buckets make them (the run
    recording no bucket_cap_mb, or the default): raising it is not advised."""
    evidence, advice = comm_advice(tmp_path, bucket_steps([6_815_744] * 4))
    assert "4 all-reduces per step send 104.0 MiB in all (each 26.0 MiB)" in evidence
    assert "bucket_cap_mb" not in advice and "no_sync()" in advice
    assert "bucket_cap_mb" not in comm_advice(tmp_path, bucket_steps([6_815_744] * 4),
                                              bucket_cap_mb=25)[1]


def test_two_buckets_are_given_each_and_a_median_is_a_real_one(tmp_path: Path) -> None:
    """A step's two gradient buckets of 4.0 and 2.5 MiB read 'largest 4.0 MiB, median
    3.2 MiB', the mean of the two, a size no bucket has: each size is given. Four sizes (4, 3,
    2 and 1 MiB) give a median some bucket has, the smaller middle one, not 2.5 MiB."""
    evidence = comm_advice(tmp_path, bucket_steps([1_048_576, 655_360]))[0]
    assert "2 all-reduces per step send 6.5 MiB in all (sizes 4.0 MiB and 2.5 MiB)" in evidence
    run = analyze_trace(tmp_path, bucket_steps([1_048_576, 786_432, 524_288, 262_144]))
    sizes = run.metrics.comm.all_reduce_sizes
    assert (sizes.median_bytes, sizes.sizes_bytes) == (2 * 1024 * 1024, ())
    assert "(largest 4.0 MiB, median 2.0 MiB: the middle one by size)" in comm_advice(
        tmp_path, bucket_steps([1_048_576, 786_432, 524_288, 262_144]))[0]


def test_bucket_counts_follow_torchs_first_bucket_rule(tmp_path: Path) -> None:
    """8 all-reduces of 6.25 MiB a step (50 MiB). torch 2.13 caps DDP's first bucket at 1 MiB
    only when bucket_cap_mb is not passed; passed, 25 included, it caps the first bucket too.
    A run that passed 25 would make about 2 (it read 'about 3', the 1 MiB first bucket
    assumed); one that recorded passing none, about 3 (it was told to raise bucket_cap_mb, which
    it never set); one whose knob is unrecorded is told so, and that passing 25 makes 2."""
    events = bucket_steps([1_638_400] * 8)
    assert ("the 8 all-reduces per step are smaller than DDP's buckets of 25 MB make (about 2)"
            in comm_advice(tmp_path, events, bucket_cap_mb=25)[1])
    assert "DDP's default buckets (1 MB first, then 25 MB) would make about 3" in comm_advice(
        tmp_path, events)[0]
    assert ("the 8 all-reduces per step are smaller than DDP's default buckets make (about 3)"
            in comm_advice(tmp_path, events, bucket_cap_mb=None)[1])
    assert ("the run's bucket_cap_mb is unknown, not recorded) to 25 MB: the 50.0 MiB each step "
            "reduces would take about 2 all-reduces instead of 8" in comm_advice(tmp_path,
                                                                              events)[1])


def test_unrecorded_sizes_are_unknown(tmp_path: Path) -> None:
    """The same 20 all-reduces with no size recorded: the advice stays conditional and says
    why the sizes are unknown."""
    evidence, advice = comm_advice(tmp_path, bucket_steps([262_144] * 20, **{"Ev Idx": 1}))
    assert "all-reduce sizes: unknown, the trace records no message sizes" in evidence
    assert ("raise bucket_cap_mb from 25 MB to cut the 20 calls per step if they are small "
            "buckets (their sizes are unknown: the trace records no message sizes") in advice


def test_sizes_past_int64_are_unknown(tmp_path: Path) -> None:
    """An all-reduce recording 2^61 doubles (2^64 bytes, past int64) or a backend op whose
    input dims multiply past it: the size is an impossible value, unknown, and the trace is
    read (the whole file was refused: 'cannot read (OverflowError: Python int too large to
    convert to C long)')."""
    huge = {"In msg nelems": 2 ** 61, "dtype": "Double", "Collective name": "allreduce"}
    evidence = comm_advice(tmp_path, bucket_steps([1] * 2, **huge))[0]
    assert "all-reduce sizes: unknown, the trace records no message sizes" in evidence
    dims = {"Input type": ["float"], "Input Dims": [[10 ** 200, 10 ** 200]]}
    evidence = comm_advice(tmp_path, bucket_steps([1] * 2, **dims))[0]
    assert "all-reduce sizes: unknown, the trace records no message sizes" in evidence


ACCUMULATE_GRAD = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"


def ddp_and_metric_steps(gloo: bool, in_backward: bool = True) -> list[dict]:
    """Steps of 20 ms of a DDP run that also all-reduces its loss (1 float) and a metric (2
    floats) after backward, as a real torch 2.13 2-rank gloo run does: the gradient bucket (1
    MiB) is all-reduced inside autograd's AccumulateGrad (``in_backward``), the others by the
    loop. NCCL's shape: record_param_comms with its size on the calling thread; gloo's: the
    c10d op on the calling thread, the sized gloo:all_reduce on a gloo worker thread."""
    events: list[dict] = []
    for step in range(3):
        t0 = step * 20_000
        events += [event(f"ProfilerStep#{step + 1}", t0, 20_000, "user_annotation"),
                   event("aten::mm", t0 + 100, 2000)]
        if in_backward:
            events.append(event(ACCUMULATE_GRAD, t0 + 2200, 6000))
        else:
            events.append(event(ACCUMULATE_GRAD, t0 + 2200, 100))
        for i, count in enumerate([262_144, 2, 1]):
            at = t0 + 2300 + 4000 * i + (6000 if i else 0)
            events.append(event("c10d::allreduce_", at, 3000))
            if gloo:
                events.append(event("gloo:all_reduce", at + 50, 2900, tid=9,
                                    **{"Input type": ["float"], "Input Dims": [[count]]}))
            else:
                events.append(event("record_param_comms", at + 1, 2990, **{
                    "In msg nelems": count, "dtype": "Float", "Collective name": "allreduce"}))
    return events


@pytest.mark.parametrize("gloo", [False, True])
def test_a_loops_own_all_reduces_are_no_gradient_buckets(tmp_path: Path, gloo: bool) -> None:
    """A DDP step's one 1 MiB gradient bucket, all-reduced in backward, and the loss and a
    metric all-reduced after it: DDP's default buckets make the one all-reduce already, so
    bucket_cap_mb is not raised (a real gloo run of that shape was told to raise it 'from about
    7.6e-06 MB ... about 1 all-reduces instead of 3'); the two others are said apart."""
    evidence, advice = comm_advice(tmp_path, ddp_and_metric_steps(gloo))
    assert ("1 all-reduce per step in the backward pass sends 1.0 MiB in all; DDP's default "
            "buckets (1 MB first, then 25 MB) would make about 1; 2 more per step "
            "outside it (a loss or metric the loop reduces: no gradient bucket)") in evidence
    assert "bucket_cap_mb" not in advice


def test_a_loop_all_reduce_on_a_thread_without_backward_is_no_bucket(tmp_path: Path) -> None:
    """On a GPU, autograd runs the backward pass on its device thread, where DDP issues the
    bucket's all-reduce inside AccumulateGrad; the loop all-reduces its loss and a metric on
    the main thread, which runs no backward op: those two are no buckets either (they were all
    counted as buckets, 'raise bucket_cap_mb from about 0.0000076 MB')."""
    events = []
    for step in range(3):
        t0 = step * 20_000
        events += [event(f"ProfilerStep#{step + 1}", t0, 20_000, "user_annotation"),
                   event("aten::mm", t0 + 100, 2000),
                   event(ACCUMULATE_GRAD, t0 + 2200, 6000, tid=2)]
        for i, count in enumerate([262_144, 2, 1]):
            at, tid = t0 + 2300 + 4000 * i + (6000 if i else 0), 2 if i == 0 else 1
            events += [event("c10d::allreduce_", at, 3000, tid=tid),
                       event("record_param_comms", at + 1, 2990, tid=tid, **{
                           "In msg nelems": count, "dtype": "Float",
                           "Collective name": "allreduce"})]
    evidence, advice = comm_advice(tmp_path, events)
    assert ("1 all-reduce per step in the backward pass sends 1.0 MiB in all; DDP's default "
            "buckets (1 MB first, then 25 MB) would make about 1; 2 more per step "
            "outside it") in evidence
    assert "bucket_cap_mb" not in advice


def test_all_reduces_outside_backward_are_no_buckets(tmp_path: Path) -> None:
    """Every all-reduce issued after backward (an all_reduce per gradient by hand, or a loss
    and a metric): none is DDP's, and bucket_cap_mb is not advised."""
    evidence, advice = comm_advice(tmp_path, ddp_and_metric_steps(False, in_backward=False))
    assert ("the 3 all-reduces per step run outside the backward pass: none is a gradient "
            "bucket") in evidence
    assert "bucket_cap_mb" not in advice


def test_tiny_buckets_are_written_without_an_exponent(tmp_path: Path) -> None:
    """20 all-reduces of one float per step in a trace recording no backward pass (nothing
    tells them from buckets): the largest all-reduce is written as a number, not '3.8e-06'."""
    advice = comm_advice(tmp_path, bucket_steps([1] * 20))[1]
    assert ("raise bucket_cap_mb from about 0.0000038 MB (the largest all-reduce: DDP fills "
            "each bucket up to bucket_cap_mb and the last one holds the rest; the run's "
            "bucket_cap_mb is unknown, not recorded) to 25 MB: the 80 B each step reduces would "
            "take about 1 all-reduce instead of 20") in advice


def test_the_cap_in_force_is_read_from_the_largest_bucket(tmp_path: Path) -> None:
    """A run that passed bucket_cap_mb=4 (unrecorded) with 5 MiB of fp32 gradients and 1.5 MiB
    of fp16 ones (DDP buckets each dtype apart): buckets of 4 MiB (the cap, the first one too:
    passed, it caps the first), 1 MiB (the fp32 remainder) and 1.5 MiB (all the fp16 ones).
    The advice read 'raise bucket_cap_mb from about 1.5 MB (the median all-reduce...)', a
    remainder; the cap in force is the largest bucket, 4 MB."""
    events = bucket_steps([1_048_576, 262_144, 393_216])
    for e in events:
        if e["name"] == "record_param_comms" and e["args"]["In msg nelems"] == 393_216:
            e["args"].update({"In msg nelems": 786_432, "Out msg nelems": 786_432,
                              "dtype": "Half"})
    evidence, advice = comm_advice(tmp_path, events)
    assert "3 all-reduces per step send 6.5 MiB in all (sizes 4.0 MiB, 1.5 MiB and 1.0 MiB)" \
        in evidence
    assert "raise bucket_cap_mb from about 4 MB (the largest all-reduce: DDP fills" in advice
    assert ("to 25 MB: the 6.5 MiB each step reduces would take about 1 all-reduce instead "
            "of 3") in advice


def test_buckets_as_large_as_the_default_are_not_told_to_grow(tmp_path: Path) -> None:
    """One 30 MiB all-reduce and nine of one float a step, in a trace recording no backward
    pass (all counted as buckets): the largest says the cap in force is past 25 MB already, so
    raising it 'from about 30 MB to 25 MB' is not advised; the many small calls are said to be
    no DDP buckets if they are not."""
    advice = comm_advice(tmp_path, bucket_steps([7_864_320] + [1] * 9))[1]
    assert "raise bucket_cap_mb" not in advice
    assert ("the 10 all-reduces per step are smaller than DDP's default buckets make (about "
            "3): if they are not DDP's (an all_reduce per tensor)") in advice


def test_all_reduce_sizes_of_real_runs(corpus: Path) -> None:
    """HTA's ResNet-50 DDP trace: 5 float all-reduces per step of 97.5 MiB in all (ResNet-50's
    25.6 M parameters), the largest 30.0 MiB, as DDP's default buckets make them; the MI300X
    trace: 2 bf16 all-reduces per step of 22.3 MiB (11.7 M parameters), as few as the default
    makes: neither is told to raise bucket_cap_mb."""
    hta = analyze_paths([corpus / "hta" / "nccl_data.json.gz"], AnalyzeOptions()).runs[0]
    sizes = hta.metrics.comm.all_reduce_sizes
    assert sizes is not None and sizes.calls_per_step == 5
    assert sizes.bytes_per_step == 25_557_032 * 4 and sizes.largest_bytes == 7_875_584 * 4
    mi300x = analyze_paths([corpus / "wild" / "tracelens_mi300x_resnet_actckpt_rank0of8.json.gz"],
                           AnalyzeOptions()).runs[0]
    sizes = mi300x.metrics.comm.all_reduce_sizes
    assert sizes is not None and sizes.calls_per_step == 2
    assert sizes.bytes_per_step == (2_873_320 + 8_816_192) * 2
    advice = {f.id: f for f in mi300x.findings}["COMM_OVERHEAD"].recommendation
    assert "bucket_cap_mb" not in advice
    nsys = analyze_paths([corpus / "nsys" / "sc22_4gpu_baseline.nsys-rep"],
                         AnalyzeOptions()).runs[0]
    assert nsys.metrics.comm.all_reduce_sizes is None
    assert nsys.metrics.comm.sizes_unknown == (
        "Nsight Systems' NCCL kernels and ranges, as profreport reads them, carry no message "
        "size")
    # report.json's metrics carry them (they were only in COMM_OVERHEAD's evidence).
    assert metrics_json(hta.metrics)["comm_all_reduce_sizes"] == {
        "calls_per_step": 5, "bytes_per_step": 25_557_032 * 4,
        "largest_bytes": 7_875_584 * 4, "median_bytes": 6_563_840 * 4, "sizes_bytes": [],
        "others_per_step": 0}
    assert metrics_json(hta.metrics)["comm_all_reduce_sizes_unknown_reason"] is None
    assert {key: metrics_json(nsys.metrics)[key] for key in (
        "comm_all_reduce_sizes", "comm_all_reduce_sizes_unknown_reason")} == {
        "comm_all_reduce_sizes": None,
        "comm_all_reduce_sizes_unknown_reason": nsys.metrics.comm.sizes_unknown}


def zero_grad_steps(fills: bool) -> list[dict]:
    """A CPU-only run of 3 steps of 10 ms: 8 ms of convolution, then Optimizer.zero_grad;
    with ``fills`` (set_to_none=False) it zero-fills 3 gradients (aten::zero_ -> aten::fill_
    each), else (set_to_none=True) it runs no operator."""
    events: list[dict] = []
    for step in range(3):
        t0 = step * 10_000
        events += [event(f"ProfilerStep#{step + 1}", t0, 10_000, "user_annotation"),
                   event("aten::conv2d", t0 + 100, 8_000),
                   event("Optimizer.zero_grad#SGD.zero_grad", t0 + 8_200, 300,
                         "user_annotation")]
        if fills:
            events += [op for i in range(3) for op in (
                event("aten::zero_", t0 + 8_210 + 50 * i, 40),
                event("aten::fill_", t0 + 8_215 + 50 * i, 30))]
    return events


def test_zero_grad_filling_zeros_on_a_cpu(tmp_path: Path) -> None:
    """zero_grad(set_to_none=False) writes zeros into every gradient on a CPU too: the
    zero-filling operators inside its span (3 per step, aten::zero_ counted once, not the
    fill_ it runs) are the evidence; set_to_none=True runs none and gets no finding."""
    run = analyze_trace(tmp_path, zero_grad_steps(fills=True))
    assert run.metrics.gpu is None and run.metrics.zero_grad_fills_per_step == 3
    finding = {f.id: f for f in run.findings}["ZERO_GRAD_NOT_NONE"]
    assert finding.evidence[0].text == (
        "3 zero-filling operators (aten::zero_, aten::_foreach_zero_) run inside "
        "Optimizer.zero_grad per step (set_to_none=True runs none)")
    assert finding.recommendation.endswith("saving a pass writing zeros over every gradient.")
    none = analyze_trace(tmp_path, zero_grad_steps(fills=False), name="none.json")
    assert none.metrics.zero_grad_fills_per_step == 0
    # foreach=True zeroes every gradient in one _foreach_zero_ (a real torch 2.13 CPU SGD with
    # foreach=True read '1 zero-filling operators ... run').
    events = zero_grad_steps(fills=False) + [
        event("aten::_foreach_zero_", step * 10_000 + 8_210, 100) for step in range(3)]
    foreach = analyze_trace(tmp_path, events, name="foreach.json")
    assert {f.id: f for f in foreach.findings}["ZERO_GRAD_NOT_NONE"].evidence[0].text == (
        "1 zero-filling operator (aten::zero_, aten::_foreach_zero_) runs inside "
        "Optimizer.zero_grad per step (set_to_none=True runs none)")
    assert "ZERO_GRAD_NOT_NONE" not in {f.id for f in none.findings}


def test_a_run_that_accumulates_is_asked_for_more_batches(tmp_path: Path) -> None:
    """A --script run whose steps take 2 batches each (gradient accumulation under no_sync(),
    as a real gloo DDP script of find_unused_parameters and gradient_as_bucket_view did) is
    asked to accumulate over more, not told to start accumulating."""
    from profreport.reports.analysis.findings import RunContext, find_all

    run = analyze_trace(tmp_path, comm_steps(("c10d::allreduce_", "nccl:all_reduce"),
                                             "ncclKernel_AllReduce_RING_LL_Sum_float"))

    def advice(**knobs: object) -> str:
        found = find_all(run.metrics, RunContext(knobs=knobs))
        return {f.id: f for f in found}["COMM_OVERHEAD"].recommendation

    assert advice(batches_per_step=2).endswith(
        "accumulate gradients over more than the 2 batches each step takes now (with no_sync() "
        "on all but the last), or use a larger local batch, so gradients are reduced less "
        "often.")
    assert "use a larger local batch or gradient accumulation with no_sync()" in advice(
        batches_per_step=1)


def test_a_launch_wait_held_once_is_a_one_off(tmp_path: Path) -> None:
    """Three steps after warm-up; in the middle one (30 ms) the GPU waits 29 ms for the CPU,
    which runs aten::add_ once (a lazy first call), the others keep the GPU busy. The wait is
    most of the profiled time, but it is one call: not 'make aten::add_ cheaper'."""
    events = [event("ProfilerStep#1", 0, 10_000, "user_annotation"),
              launch(20, 401), kernel("gemm_kernel", 50, 9900, 401),
              event("ProfilerStep#2", 10_000, 30_000, "user_annotation"),
              event("aten::add_", 10_050, 28_900), launch(39_000, 402),
              kernel("gemm_kernel", 39_050, 900, 402),
              event("ProfilerStep#3", 40_000, 10_000, "user_annotation"),
              launch(40_020, 403), kernel("gemm_kernel", 40_050, 9900, 403)]
    run = analyze_trace(tmp_path, events)
    advice = {f.id: f for f in run.findings}["HOST_LAUNCH_BOUND"].recommendation
    assert advice.startswith("aten::add_ held the CPU once in 3 steps (28.9 ms)")
    assert "cheaper" not in advice


def test_a_2021_module_span_is_no_operator_to_make_cheaper(tmp_path: Path) -> None:
    """The 2021 Kineto format records DDP's record_function span in the Operator category (it
    has no user_annotation): three 100 ms steps, each a 96 ms DistributedDataParallel.forward
    enclosing one 1 ms aten::linear that launches the step's only kernel. The span's own time
    is Python, no operator's: the advice named 'make DistributedDataParallel.forward cheaper
    (95 ms per step)'; it is a range, and the wait lies outside every operator."""
    events = []
    for step in range(3):
        at = step * 100_000
        events += [event(f"ProfilerStep#{step + 1}", at, 100_000, "Operator"),
                   event("DistributedDataParallel.forward", at + 100, 96_000, "Operator"),
                   event("aten::linear", at + 95_000, 1_000, "Operator"),
                   event("cudaLaunchKernel", at + 95_500, 5, "Runtime", correlation=step + 1),
                   event("gemm_kernel", at + 95_600, 4_000, "Kernel", pid=0, tid=7,
                         correlation=step + 1, device=0, stream=7)]
    run = analyze_trace(tmp_path, events)
    finding = {f.id: f for f in run.findings}["HOST_LAUNCH_BOUND"]
    assert "DistributedDataParallel.forward" not in finding.recommendation
    assert finding.recommendation.startswith("Cut the Python between operators in the step")
    assert [op.name for op in run.metrics.top_ops] == ["aten::linear"]


def test_a_launch_a_quarter_microsecond_before_the_gap_is_no_launch_wait(
        tmp_path: Path) -> None:
    """Epoch-based times (1.7e15 µs): the kernel that ends a 34 µs gap was launched 0.25 µs
    before the gap began, so the gap did not wait for its launch. In float64 ns the launch and
    the gap's start are the same number (1.7e18 ns is spaced 256 ns), and the gap was counted
    as a launch wait."""
    base = 1_700_000_000_000_000
    events = [event("ProfilerStep#1", base, 100, "user_annotation"),
              launch(base + 1, 501), kernel("gemm_kernel", base + 2, 14, 501),
              event("cudaLaunchKernel", base + 15.75, 0.1, "cuda_runtime", correlation=502),
              kernel("gemm_kernel", base + 50, 40, 502)]
    idle = analyze_trace(tmp_path, events).metrics.gpu_idle
    # Only the step's first 2 µs waited for a launch (the first kernel's, 1 µs in); the 34 µs
    # gap and the 10 µs after the last kernel are unexplained.
    assert idle is not None and idle.idle_ns_per_step["launch"] == 2_000
    assert idle.idle_ns_per_step["unexplained"] == 44_000


#: Every setting the advice may name, already set, and what advising it again would say.
ALREADY_SET = {"pin_memory": True, "persistent_workers": True, "amp": True,
               "channels_last": True, "compile": True, "bucket_cap_mb": 100.0,
               "broadcast_buffers": False}
REPEATED_FIX = {"pin_memory": ("pin_memory=True",),
                "persistent_workers": ("persistent_workers=True",),
                "amp": ("under torch.autocast(", "enable mixed precision"),
                "channels_last": ("memory_format=torch.channels",),
                "compile": ("torch.compile the", "with torch.compile"),
                "bucket_cap_mb": ("bucket_cap_mb",),
                "broadcast_buffers": ("broadcast_buffers=False",)}
CORPUS_FILES = ("nsys/sc22_1gpu_baseline.nsys-rep", "nsys/sc22_4gpu_baseline.nsys-rep",
                "hta/cuda_event_sync.json.gz", "hta/nccl_data.json.gz",
                "hta/triton_example.json.gz", "hta/mtia_inference_rank_0.json.gz",
                "kineto/resnet50_num_workers_0.pt.trace.json.gz",
                "kineto/resnet50_num_workers_4.pt.trace.json.gz",
                "wild/jh_rtx3080_toymodel_num-workers-0-batch-size-16.json.gz",
                "wild/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz",
                "wild/kineto2021_autograd_api_resnet50_nw0_worker0.pt.trace.json.gz")


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_no_fix_repeats_a_setting_the_run_has(corpus: Path, name: str,
                                              request: pytest.FixtureRequest) -> None:
    """Each real profile's findings, with every knob the advice can name already set: no
    recommendation asks for one of them again."""
    from profreport.reports.analysis.findings import RunContext, find_all

    if name.endswith(".nsys-rep"):
        request.getfixturevalue("nsys_available")
    run = analyze_paths([corpus / name], AnalyzeOptions()).runs[0]
    for finding in find_all(run.metrics, RunContext(knobs=ALREADY_SET)):
        for knob, phrases in REPEATED_FIX.items():
            assert not any(text in finding.recommendation for text in phrases), \
                (finding.id, knob, finding.recommendation)


#: How a sentence names another finding ("see the oversubscription finding") -> its id.
REFERENCE_NAMES = {"oversubscription": "CPU_OVERSUBSCRIBED"}
_REFERENCE = re.compile(r"see the ([\w\- ]+?) findings?\b")


def references(text: str) -> list[str]:
    """The findings a sentence points at, by the names it uses ('the DataLoader and launch
    findings' -> ['DataLoader', 'launch'])."""
    return [name.strip() for found in _REFERENCE.findall(text)
            for name in found.split(" and ")]


@pytest.mark.parametrize("name", [*CORPUS_FILES, "fixtures/loader_heavy",
                                  "fixtures/compute_heavy", "fixtures/ddp_gloo"])
def test_no_sentence_points_at_an_absent_finding(name: str,
                                                 request: pytest.FixtureRequest) -> None:
    """Every 'see the X finding' in a real profile's report (corpus and fixture runs) names a
    finding that is in it."""
    fixture = name.startswith("fixtures/")
    if name.endswith(".nsys-rep") or (fixture and "ddp" not in name):
        request.getfixturevalue("nsys_available")
    folder = request.getfixturevalue("fixtures_dir").parent if fixture else \
        request.getfixturevalue("corpus")
    run = analyze_paths([folder / name], AnalyzeOptions()).runs[0]
    present = {f.id for f in run.findings}
    texts = [run.verdict_reason] + [t for f in run.findings
                                    for t in (f.title, f.recommendation,
                                              *(e.text for e in f.evidence))]
    for text in texts:
        for named in references(text):
            assert REFERENCE_NAMES.get(named) in present, (named, text)


def test_the_reference_walker_reads_references() -> None:
    """The walker finds each name of a reference (so the test above can fail)."""
    assert references("fix it first (see the DataLoader and launch findings); then") == \
        ["DataLoader", "launch"]
    assert references("stop them (see the oversubscription finding), then") == \
        ["oversubscription"]


def test_many_small_launches_advice_keeps_its_names(tmp_path: Path) -> None:
    """Two steps of 150 kernels of 5 µs, each launched 60 µs after the last: the GPU waits for
    the CPU's launches. The fix names torch.compile, or CUDA graphs for a compiled model, with
    'CUDA' spelt as such."""
    from profreport.reports.analysis.findings import RunContext, find_all

    events: list[dict] = []
    for step in range(2):
        t0 = step * 10_000
        events.append(event(f"ProfilerStep#{step + 1}", t0, 10_000, "user_annotation"))
        for k in range(150):
            corr = 1000 + step * 200 + k
            events += [launch(t0 + 20 + 60 * k, corr),
                       kernel("vectorized_elementwise_kernel", t0 + 40 + 60 * k, 5, corr)]
    run = analyze_trace(tmp_path, events)
    advice = {f.id: f for f in run.findings}["HOST_LAUNCH_BOUND"].recommendation
    assert advice.startswith("Fuse kernels with torch.compile (mode='reduce-overhead' also "
                             "replays them as a CUDA graph) and raise the batch size")
    compiled = {f.id: f for f in find_all(run.metrics, RunContext(knobs={"compile": True}))}
    assert compiled["HOST_LAUNCH_BOUND"].recommendation.startswith(
        "Replay the step as a CUDA graph (the model is compiled already")


def compute_steps(compiled: bool, steps: int = 4) -> list[dict]:
    """A CPU-only trace whose steps are one matmul each, run inside torch.compile's frame (as
    TorchDynamo records it) when ``compiled``."""
    events = []
    for number in range(steps):
        start = 1_000 + number * 1_000
        events.append(event(f"ProfilerStep#{number}", start, 990, "user_annotation"))
        if compiled:
            events.append(event("Torch-Compiled Region: 0/0", start + 10, 960))
        events.append(event("aten::mm", start + 20, 900))
    return events


def test_a_compiled_model_is_not_told_to_compile(tmp_path: Path) -> None:
    """The profile shows compiled code (TorchDynamo's frame spans): no fix asks for
    torch.compile, and JSON counts the spans; the same steps without them are told to."""
    compiled = analyze_trace(tmp_path, compute_steps(compiled=True), "compiled.json")
    plain = analyze_trace(tmp_path, compute_steps(compiled=False), "plain.json")
    assert (compiled.metrics.compiled_regions, plain.metrics.compiled_regions) == (4, 0)
    fixes = {run.name: " ".join(f.recommendation for f in run.findings)
             for run in (compiled, plain)}
    assert "torch.compile the model to fuse the operators around aten::mm" in fixes["plain"]
    assert "torch.compile" not in fixes["compiled"]
    assert "aten::mm takes" in fixes["compiled"] and "even compiled" in fixes["compiled"]


def test_without_cpu_spans_compilation_is_unknown(fixtures_dir: Path, corpus: Path,
                                                   nsys_available: str) -> None:
    """line_profiler's lines hold no operators, and an nsys capture's NVTX ranges none of
    torch.compile's spans: whether the model was compiled is unknown (null), not 0."""
    lprof = fixtures_dir / "compute_heavy" / "train.lprof"
    capture = corpus / "nsys" / "sc22_1gpu_baseline.nsys-rep"
    for path in (lprof, capture):
        assert analyze_paths([path], AnalyzeOptions()).runs[0].metrics.compiled_regions is None
