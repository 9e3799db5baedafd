"""Each concept of ``profreport.concepts`` on real names read from the corpus and the fixtures.

The names are taken from the raw files (plain gzip + json), so the tests follow the traces, not
a copy of their names; each test also checks the names that must NOT match.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profreport import concepts

#: When the work ahead of a copy on an idle stream ended: none was recorded (stream_free_by_block).
IDLE = np.iinfo(np.int64).min


@cache
def _raw_names(path: Path) -> dict[str, set[str]]:
    """Event names of a Kineto trace, by category."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    out: dict[str, set[str]] = {}
    for event in events:
        out.setdefault(str(event.get("cat")), set()).add(str(event.get("name", "")))
    return out


def names(path: Path, *cats: str) -> pd.Series:
    """The distinct event names of the given categories, sorted."""
    found = set().union(*(_raw_names(path).get(cat, set()) for cat in cats))
    return pd.Series(sorted(found), dtype="object")


def selected(series: pd.Series, mask: pd.Series) -> set[str]:
    """The names a classifier selects."""
    return set(series[mask.to_numpy()])


def test_nccl_kernels_of_the_hta_trace(corpus: Path) -> None:
    """Exactly the two NCCL kernels of the HTA trace are communication; the 2700-kernel rest
    (multi_tensor_apply, elementwise, gemm...) is compute."""
    kernels = names(corpus / "hta" / "nccl_data.json.gz", "kernel")
    comm = selected(kernels, concepts.is_comm_kernel(kernels))
    assert comm == {"ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, "
                    "ncclWork*)",
                    "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, "
                    "ncclWork*)"}
    assert len(kernels) == 70  # the other 68 distinct kernel names are no communication


def test_rccl_and_newer_nccl_kernel_names() -> None:
    """RCCL (ROCm) keeps NCCL's kernel names and NCCL >= 2.19 names them ``ncclDevKernel_*``
    (the names as the libraries' sources spell them); a model's own kernel mentioning 'nccl'
    elsewhere in its name is not one."""
    sample = pd.Series(["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                        "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWork*)",
                        "rcclKernel_AllReduce_RING_LL_Sum_float",
                        "my_unccl_kernel", "volta_sgemm_128x64_nn"])
    assert concepts.is_comm_kernel(sample).tolist() == [True, True, True, False, False]


def test_gloo_and_c10d_collectives_of_the_ddp_fixture(fixtures_dir: Path) -> None:
    """The gloo DDP fixture's collectives, one per layer (c10d op, gloo backend op); its
    framework ops are no collective."""
    trace = next((fixtures_dir / "ddp_gloo" / "trace").glob("rank0.*.pt.trace.json.gz"))
    ops = names(trace, "cpu_op", "user_annotation")
    layers = concepts.collective_layer(ops)
    found = {name: layer for name, layer in zip(ops, layers, strict=True) if pd.notna(layer)}
    assert found.get("c10d::allreduce_") == "c10d"
    assert found.get("gloo:all_reduce") == "backend"
    assert set(found.values()) == {"c10d", "backend"}
    assert {"aten::addmm", "aten::relu"} <= set(ops) - set(found)


def test_nccl_cpu_side_collectives_of_the_hta_trace(corpus: Path) -> None:
    """The NCCL process group's CPU ops of the HTA trace are collectives of their layer."""
    ops = names(corpus / "hta" / "nccl_data.json.gz", "cpu_op", "user_annotation")
    layers = dict(zip(ops, concepts.collective_layer(ops), strict=True))
    assert layers["nccl:all_reduce"] == "backend" and layers["nccl:broadcast"] == "backend"
    assert layers["c10d::allreduce_"] == "c10d" and layers["record_param_comms"] == "wrapper"
    assert pd.isna(layers["Optimizer.step#SGD.step"])


@pytest.mark.parametrize(("file", "expected"), [
    ("hta/cuda_event_sync.json.gz", {("DtoH", "Device", "Pageable")}),
    ("hta/nccl_data.json.gz", {("DtoD", "Device", "Device")}),
    ("kineto/resnet50_num_workers_0.pt.trace.json.gz", {("HtoD", "Pageable", "Device")}),
])
def test_copy_kinds_of_real_copies(corpus: Path, file: str, expected: set) -> None:
    """Direction and memory kinds of every copy name in both trace formats (``gpu_memcpy`` and
    the 2021 ``Memcpy``); a memset name is no copy."""
    copies = names(corpus / file, "gpu_memcpy", "Memcpy")
    kinds = concepts.copy_kinds(copies)
    assert set(kinds.itertuples(index=False, name=None)) == expected
    memsets = names(corpus / file, "gpu_memset", "Memset")
    assert set(concepts.copy_kinds(memsets)["kind"]) <= {"unknown"}


def test_optimizer_kernels_and_spans_of_the_hta_trace(corpus: Path) -> None:
    """SGD with foreach: its kernels are multi_tensor_apply (fused); the optimizer step is both
    the torch.profiler span and the ``## optimizer ##`` annotation; zero_grad is its own span."""
    path = corpus / "hta" / "nccl_data.json.gz"
    kernels = names(path, "kernel")
    fused = selected(kernels, concepts.is_fused_optimizer_kernel(kernels))
    assert fused and all("multi_tensor_apply_kernel" in name for name in fused)
    assert not concepts.is_fused_optimizer_kernel(pd.Series(["void at::native::"
                                                             "_amp_foreach_non_finite_check_and_"
                                                             "unscale_cuda_kernel"])).any()
    spans = names(path, "cpu_op", "user_annotation")
    assert selected(spans, concepts.is_optimizer_step_span(spans)) == {
        "## optimizer ##", "Optimizer.step#SGD.step"}
    assert selected(spans, concepts.is_zero_grad_span(spans)) == {
        "Optimizer.zero_grad#SGD.zero_grad"}
    assert concepts.optimizer_class("Optimizer.step#SGD.step") == "SGD"


@pytest.mark.parametrize(("file", "span"), [
    ("kineto/resnet50_num_workers_0.pt.trace.json.gz",
     "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
    ("kineto/resnet50_num_workers_4.pt.trace.json.gz",
     "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"),
    ("hta/rank_not_found.json.gz",
     "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"),
])
def test_dataloader_spans_of_both_trace_formats(corpus: Path, file: str, span: str) -> None:
    """The DataLoader wait is exactly the iterator's ``__next__`` span, in the 2021 format
    (``Operator``) and the newer one (``user_annotation``/``cpu_op``)."""
    ops = names(corpus / file, "Operator", "cpu_op", "user_annotation")
    assert selected(ops, concepts.is_dataloader_span(ops)) == {span}


def test_runner_annotations_are_what_the_concepts_recognise() -> None:
    """The runner's NVTX names come from concepts and are read back as step and DataLoader."""
    names_ = pd.Series([concepts.step_range_name(7), concepts.DATALOADER_RANGE, "forward"])
    assert concepts.step_numbers(names_).tolist()[0] == 7
    assert pd.isna(concepts.step_numbers(names_)[1])
    assert concepts.is_dataloader_span(names_).tolist() == [False, True, False]


def test_steps_of_both_formats(corpus: Path) -> None:
    """``ProfilerStep#N`` and NVTX ``step N`` are steps; other spans are not."""
    spans = pd.Series(["ProfilerStep#1", "ProfilerStep#1009", "step 12", "forward",
                       "## optimizer ##"])
    assert concepts.step_numbers(spans).tolist()[:3] == [1, 1009, 12]
    assert concepts.step_numbers(spans)[3:].isna().all()
    triton = names(corpus / "hta" / "triton_example.json.gz", "user_annotation")
    assert concepts.step_numbers(triton).dropna().tolist() == [1]


def test_sync_and_launch_apis_of_the_event_sync_trace(corpus: Path) -> None:
    """The runtime calls of the event-sync trace: three blocking syncs, the launches."""
    calls = names(corpus / "hta" / "cuda_event_sync.json.gz", "cuda_runtime")
    assert set(calls) & concepts.SYNC_APIS == {"cudaDeviceSynchronize", "cudaEventSynchronize",
                                                "cudaStreamSynchronize"}
    assert set(calls) & concepts.LAUNCH_APIS == {"cudaLaunchKernel"}


def test_a_blocking_copy_is_linked_by_a_known_correlation_id() -> None:
    """A copy call blocks on a DtoH copy into pageable memory only through the copy's own
    correlation id: an unknown id (-1) on both sides links nothing, and a sync call is never
    labelled a copy."""
    runtime = pd.DataFrame({"name": ["cudaDeviceSynchronize", "cudaMemcpyAsync",
                                     "cudaMemcpyAsync"],
                            "correlation": [-1, -1, 5], "start": [0, 10, 20], "end": [5, 15, 25]})
    memcpy = pd.DataFrame({"kind": [concepts.DTOH, concepts.DTOH],
                           "dst_kind": [concepts.PAGEABLE, concepts.PAGEABLE],
                           "correlation": [-1, 5], "end": [12, 22]})
    calls = concepts.blocking_calls(runtime, memcpy, np.full(2, IDLE))
    assert list(zip(calls["correlation"], calls["label"], strict=True)) == [
        (-1, "cudaDeviceSynchronize"), (5, "cudaMemcpyAsync DtoH to pageable")]


def test_a_copy_of_unrecorded_direction_blocks_when_it_outlasts_its_copy() -> None:
    """An nsys export without copyKind records no copy's direction: a copy call that returned
    (at 61 ms) only after its copy ended (at 60.5 ms) held the CPU for it and blocks, though
    nothing was queued ahead of the copy (it may have gone into pageable memory); one that
    returned before its copy started did not."""
    ms = 1_000_000
    runtime = pd.DataFrame({"name": ["cudaMemcpyAsync", "cudaMemcpyAsync"],
                            "correlation": [3, 5], "start": [6 * ms, 70 * ms],
                            "end": [61 * ms, 70 * ms + 10_000]})
    memcpy = pd.DataFrame({"kind": ["unknown", "unknown"], "dst_kind": ["unknown", "unknown"],
                           "correlation": [3, 5], "end": [60 * ms + 500_000, 70 * ms + 30_000]})
    calls = concepts.blocking_calls(runtime, memcpy, np.full(2, IDLE))
    assert list(zip(calls["correlation"], calls["label"], strict=True)) == [
        (3, "cudaMemcpyAsync (returned after its copy ended; copy direction unrecorded)")]


def test_the_autograd_engines_records_are_no_program_spans() -> None:
    """In the 2021 Kineto format every span is an ``Operator``: what the dispatcher and the
    autograd engine record keeps a C++ name, the engine's ``evaluate_function`` record followed
    by the node it runs (torch 1.10's ``autograd::engine::evaluate_function:
    ConvolutionBackward0``); it was read as a span the program opened, so a backward node's
    operators lost their enclosing record. What Python named stays a program span."""
    names = pd.Series(["aten::add", "torch::autograd::AccumulateGrad", "CudnnConvolutionBackward",
                       "autograd::engine::evaluate_function: ConvolutionBackward0",
                       "DistributedDataParallel.forward", "Optimizer.step#SGD.step",
                       "## forward ##",
                       "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"])
    assert concepts.is_program_span(names).tolist() == [False, False, False, False,
                                                         True, True, True, True]


def test_names_that_never_recorded_an_input_are_program_spans() -> None:
    """Where the 2021 trace records inputs (record_shapes), a C++-like name none of whose
    events recorded one is a ``record_function`` range (entered with no arguments), except
    the autograd engine's evaluate_function record (entered with none too); one that recorded
    inputs stays an operator, and a name no C++ operator takes is a range either way."""
    names = pd.Series(["forward", "model::stage", "aten::add",
                       "autograd::engine::evaluate_function: AddBackward0",
                       "Optimizer.step#SGD.step"])
    records = np.array([False, False, True, False, True])
    assert concepts.is_program_span(names, records).tolist() == [True, True, False, False,
                                                                 True]
    assert concepts.is_program_span(names).tolist() == [False, False, False, False, True]


def test_a_host_to_device_copy_call_that_waited_behind_queued_work_blocks() -> None:
    """A pageable host-to-device copy that CUDA staged and synchronized with the stream: its
    cudaMemcpyAsync began at 6 ms while a kernel queued ahead of its copy ran until 60 ms, and
    returned (at 61 ms) only after its copy ended (at 60.5 ms), so it held the CPU until the GPU
    reached and finished the copy, and blocks; a pinned one whose call returned before its copy
    ended did not, nor does a copy call whose copy no correlation id links to it."""
    ms = 1_000_000
    runtime = pd.DataFrame({"name": ["cudaMemcpyAsync", "cudaMemcpyAsync", "cudaMemcpyAsync"],
                            "correlation": [3, 5, 7], "start": [6 * ms, 70 * ms, 80 * ms],
                            "end": [61 * ms, 70 * ms + 10_000, 90 * ms]})
    memcpy = pd.DataFrame({"kind": [concepts.HTOD] * 3,
                           "dst_kind": ["Device"] * 3,
                           "correlation": [3, 5, -1],
                           "end": [60 * ms + 500_000, 70 * ms + 30_000, 85 * ms]})
    calls = concepts.blocking_calls(runtime, memcpy, np.array([60 * ms, IDLE, IDLE]))
    assert list(zip(calls["correlation"], calls["label"], calls["end"] - calls["start"],
                    strict=True)) == [
        (3, "cudaMemcpyAsync HtoD (returned after its copy ended)", 55 * ms)]


@pytest.mark.parametrize(("ahead_ms", "label"), [
    (None, None), (0, None), (5, None),
    (6.5, "cudaMemcpyAsync HtoD (returned after its copy ended)"),
    ("unknown", "cudaMemcpyAsync HtoD (returned after its copy ended; stream unrecorded)")])
def test_a_copy_call_on_an_idle_stream_only_waited_for_its_copy(
        ahead_ms: float | str | None, label: str | None) -> None:
    """A pinned host-to-device cudaMemcpyAsync from 6 ms to 6.03 ms whose copy ran inside it
    (6.01 to 6.02 ms) returned after its copy ended but waited for nothing queued: on an idle
    stream (nothing ahead of its copy, or work that ended before the call began at 6 ms) it is
    copy time, no blocking call. Behind work still running when it began (until 6.5 ms) it
    blocked; where the copy's stream is unrecorded it is said so."""
    ms = 1_000_000
    runtime = pd.DataFrame({"name": ["cudaMemcpyAsync"], "correlation": [3],
                            "start": [6 * ms], "end": [6 * ms + 30_000]})
    memcpy = pd.DataFrame({"kind": [concepts.HTOD], "dst_kind": ["Device"],
                           "correlation": [3], "end": [6 * ms + 20_000]})
    ahead = (IDLE if ahead_ms is None else concepts.QUEUE_UNKNOWN if ahead_ms == "unknown"
             else int(float(ahead_ms) * ms))
    calls = concepts.blocking_calls(runtime, memcpy, np.array([ahead]))
    assert calls["label"].tolist() == ([] if label is None else [label])


def test_a_device_to_host_copy_into_pageable_memory_blocks_on_an_idle_stream() -> None:
    """A device-to-host cudaMemcpyAsync into pageable memory blocks whatever was queued ahead
    of its copy: the driver waits for the GPU before it writes pageable memory. On an idle
    stream, its copy inside the call, it is still a blocking call."""
    runtime = pd.DataFrame({"name": ["cudaMemcpyAsync"], "correlation": [3],
                            "start": [6_000_000], "end": [6_030_000]})
    memcpy = pd.DataFrame({"kind": [concepts.DTOH], "dst_kind": [concepts.PAGEABLE],
                           "correlation": [3], "end": [6_020_000]})
    calls = concepts.blocking_calls(runtime, memcpy, np.array([IDLE]))
    assert calls["label"].tolist() == ["cudaMemcpyAsync DtoH to pageable"]
