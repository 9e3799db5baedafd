"""Operator checks: fp32 matmuls/convolutions on tensor cores, from the operators' recorded dtypes,
the GPU's compute capability and the kernels each operator launched (correlation ids); said
unknown, with the reason, when the profiles lack any of these."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profreport.model import Profile
from profreport.parsers import kineto, kineto_stream, nsys
from profreport.reports.analysis.findings import RunContext, find_all
from profreport.reports.analysis.metrics import compute_run_metrics
from profreport.reports.analysis.results import Finding
from profreport.reports.render.display import metric_rows

PID = 77
A100 = {"id": 0, "name": "NVIDIA A100-SXM4-40GB", "computeMajor": 8, "computeMinor": 0}
V100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0}
P100 = {"id": 0, "name": "Tesla P100-PCIE-16GB", "computeMajor": 6, "computeMinor": 0}


def _op(name: str, ts: float, dur: float, types: list[str] | None,
        dims: list[list[int]] | None) -> dict:
    """A CPU operator on the training thread, with its inputs when they were recorded."""
    args = {} if types is None else {"Input type": types, "Input Dims": dims}
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": PID, "ts": ts,
            "dur": dur, "args": args}


def _step_span(step: int, at: float, dur: float = 1000) -> dict:
    """torch.profiler's ``ProfilerStep#step`` span on the training thread."""
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": PID,
            "tid": PID, "ts": at, "dur": dur}


def _launch(ts: float, correlation: int, kernel: str | None, start: float, dur: float,
            api: str = "cudaLaunchKernel", stream: int | str = 7) -> list[dict]:
    """A launch call on the training thread and the kernel it launched."""
    return [{"ph": "X", "cat": "cuda_runtime", "name": api, "pid": PID, "tid": PID, "ts": ts,
             "dur": 4, "args": {"correlation": correlation}},
            {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": start,
             "dur": dur, "args": {"device": 0, "stream": stream, "correlation": correlation}}]


def linear_trace(path: Path, dtype: str | None, devices: list[dict] | None,
                 api: str = "cudaLaunchKernel", stream: int | str = 7, steps: int = 2,
                 gemm: str = "gemm_128x64") -> Path:
    """``steps`` steps of 1 ms, each an ``nn.Linear`` (aten::linear -> aten::addmm launching a
    400 us GEMM) and an elementwise add (a 100 us kernel); inputs recorded in ``dtype`` (None:
    record_shapes off)."""
    types = None if dtype is None else [dtype] * 3
    dims = None if dtype is None else [[32, 64], [128, 64], [128]]
    events: list[dict] = []
    for step in range(steps):
        at = 1000 * step
        events += [_step_span(step, at),
                   _op("aten::linear", at + 10, 90, types, dims),
                   _op("aten::addmm", at + 20, 70, types, dims),
                   _op("aten::add", at + 500, 20, types and types[:2], dims and dims[:2]),
                   _op("aten::empty", at + 600, 5, types and types[:1], dims and [[7]]),
                   *_launch(at + 30, 2 * step + 1, gemm, at + 40, 400, api, stream),
                   *_launch(at + 505, 2 * step + 2, "vectorized_elementwise_kernel", at + 510,
                            100, api, stream)]
    header = {} if devices is None else {"deviceProperties": devices}
    path.write_text(json.dumps({"schemaVersion": 1, **header, "traceEvents": events}))
    return path


def findings_of(*profiles: Profile) -> dict[str, Finding]:
    """The run's findings by id."""
    return {f.id: f for f in find_all(compute_run_metrics(list(profiles)), RunContext())}


def test_kineto_keeps_inputs_of_matmuls_and_the_compute_capability(tmp_path: Path) -> None:
    profile = kineto.parse(linear_trace(tmp_path / "t.json", "float", [A100]))
    inputs = profile.table("op_inputs")
    # matmuls and pointwise ops, not aten::empty
    assert inputs["name"].tolist() == ["aten::linear", "aten::addmm", "aten::add"] * 2
    assert inputs["input_types"].iloc[0] == ("float", "float", "float")
    assert inputs["input_dims"].iloc[0] == ((32, 64), (128, 64), (128,))
    devices = profile.table("devices")
    assert devices[["compute_major", "compute_minor"]].values.tolist() == [[8, 0]]


def test_fp32_linear_on_an_a100(tmp_path: Path) -> None:
    """One fp32 linear per step launches 400 of the 500 us of kernels: 80%, TF32 advice."""
    profile = kineto.parse(linear_trace(tmp_path / "t.json", "float", [A100]))
    metrics = compute_run_metrics([profile])
    precision = metrics.op_precision
    assert precision.compute_capability == (8, 0) and precision.steps == 2
    assert precision.calls == {"fp32": 2, "reduced": 0, "other": 0, "unrecorded": 0}
    assert precision.kernel_ns["fp32"] == 800_000 and precision.compute_kernel_ns == 1_000_000
    assert precision.fp32_ops == ["aten::addmm"]  # the layer that launched the GEMM
    found = findings_of(profile)
    finding = found["FP32_ON_TENSOR_CORES"]
    assert finding.title.startswith("80% of compute-kernel time is fp32")
    assert "1 per step" in finding.evidence[0].text and "0.4 ms per step" in \
        finding.evidence[0].text
    at = finding.evidence[0].at  # the first step's addmm, from the file's first event
    assert (at.file, at.offset_ns, at.duration_ns) == ("t.json", 20_000, 70_000)
    assert "set_float32_matmul_precision('high')" in finding.recommendation
    assert "bfloat16" in finding.recommendation
    assert "OP_CHECKS_UNKNOWN" not in found


def test_fp32_already_on_tf32_advises_bf16(tmp_path: Path) -> None:
    """The GEMM's name says TF32 (a hint, labelled so): the fix is bf16, not TF32 again."""
    profile = kineto.parse(linear_trace(tmp_path / "t.json", "float", [A100],
                                        gemm="sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n"))
    finding = findings_of(profile)["FP32_ON_TENSOR_CORES"]
    assert finding.evidence[-1].text == ("kernel names only (a hint, not the dtypes): 100% of "
                                         "the fp32 operators' kernel time is in kernels named "
                                         "TF32")
    assert finding.recommendation.startswith("TF32 already runs most of this fp32 work")
    assert "set_float32_matmul_precision" not in finding.recommendation


def test_fp32_on_a_v100_advises_fp16_with_a_scaler(tmp_path: Path) -> None:
    finding = findings_of(kineto.parse(linear_trace(tmp_path / "t.json", "float", [V100])))[
        "FP32_ON_TENSOR_CORES"]
    assert "GradScaler" in finding.recommendation and "float16" in finding.recommendation
    assert "compute capability 7.0" in finding.title


@pytest.mark.parametrize("dtype", ["c10::BFloat16", "c10::Half"])
def test_reduced_precision_is_no_finding(tmp_path: Path, dtype: str) -> None:
    profile = kineto.parse(linear_trace(tmp_path / "t.json", dtype, [A100]))
    assert compute_run_metrics([profile]).op_precision.calls["reduced"] == 2
    assert not {"FP32_ON_TENSOR_CORES", "OP_CHECKS_UNKNOWN"} & set(findings_of(profile))


def test_autocast_is_read_at_the_layer_that_computes(tmp_path: Path) -> None:
    """Under autocast torch.profiler records the model's aten::linear with its fp32 tensors and,
    inside it, the autocast re-dispatch with their bf16 casts (a cast kernel, then the GEMM):
    the GEMM's precision is the inner layer's."""
    float3, bf16 = ["float"] * 3, ["c10::BFloat16"] * 3
    dims = [[32, 64], [128, 64], [128]]
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": PID,
               "tid": PID, "ts": 0, "dur": 1000},
              _op("aten::linear", 10, 200, float3, dims),
              _op("aten::_to_copy", 15, 20, ["float"], [[128, 64]]),
              _op("aten::linear", 40, 160, bf16, dims),
              _op("aten::addmm", 50, 140, bf16, dims),
              *_launch(20, 1, "cast_kernel", 30, 5),
              *_launch(60, 2, "gemm_bf16", 70, 400)]
    path = tmp_path / "amp.json"
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [A100],
                                "traceEvents": events}))
    profile = kineto.parse(path)
    precision = compute_run_metrics([profile]).op_precision
    assert precision.calls == {"fp32": 0, "reduced": 1, "other": 0, "unrecorded": 0}
    assert precision.kernel_ns["reduced"] == 400_000 and precision.kernel_ns["fp32"] == 0
    assert "FP32_ON_TENSOR_CORES" not in findings_of(profile)


def test_gpu_without_tensor_cores_is_no_finding(tmp_path: Path) -> None:
    found = findings_of(kineto.parse(linear_trace(tmp_path / "t.json", "float", [P100])))
    assert not {"FP32_ON_TENSOR_CORES", "OP_CHECKS_UNKNOWN"} & set(found)


def test_without_record_shapes_the_precision_is_unknown(tmp_path: Path) -> None:
    found = findings_of(kineto.parse(linear_trace(tmp_path / "t.json", None, [A100])))
    assert "FP32_ON_TENSOR_CORES" not in found
    unknown = found["OP_CHECKS_UNKNOWN"]
    assert "2 matmul/convolution calls carry no 'Input type'" in unknown.evidence[0].text
    assert "record_shapes=True" in unknown.evidence[0].text
    assert unknown.evidence[1].text.startswith("kernel names only")


def test_without_device_properties_tensor_cores_are_unknown(tmp_path: Path) -> None:
    found = findings_of(kineto.parse(linear_trace(tmp_path / "t.json", "float", None)))
    assert "FP32_ON_TENSOR_CORES" not in found
    assert "compute capability" in found["OP_CHECKS_UNKNOWN"].evidence[0].text


def test_rocm_trace_with_hex_streams_is_unknown(tmp_path: Path) -> None:
    mi250 = {"id": 0, "name": "AMD Instinct MI250X", "computeMajor": 9, "computeMinor": 0}
    profile = kineto.parse(linear_trace(tmp_path / "t.json", "float", [mi250],
                                        api="hipLaunchKernel", stream="0x0"))
    assert compute_run_metrics([profile]).op_precision.kernel_ns["fp32"] == 800_000
    assert "ROCm" in findings_of(profile)["OP_CHECKS_UNKNOWN"].evidence[0].text


def test_cpu_only_trace_has_no_precision_check(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": PID,
               "tid": PID, "ts": 100 * i, "dur": 100} for i in range(3)]
    events += [_op("aten::linear", 100 * i + 5, 50, ["float"] * 3, [[8, 4], [2, 4], [2]])
               for i in range(3)]
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    profile = kineto.parse(path)
    assert len(profile.table("op_inputs")) == 3
    assert compute_run_metrics([profile]).op_precision is None
    assert not {"FP32_ON_TENSOR_CORES", "OP_CHECKS_UNKNOWN"} & set(findings_of(profile))


def test_resnet50_trains_in_fp32_on_a_v100(corpus: Path) -> None:
    """The resnet50 traces were recorded with record_shapes on a V100: every convolution and
    matmul takes float inputs: per step 53 cudnn_convolution, 53 backward_weight, 52
    backward_input (the first layer needs no input gradient), the fc layer's addmm and two
    backward mm; they launch 400.0 of 591.5 ms of compute kernels."""
    profile = kineto.parse(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    precision = compute_run_metrics([profile]).op_precision
    assert precision.compute_capability == (7, 0)
    assert precision.steps == 6 and precision.calls["fp32"] == 6 * 161
    assert precision.calls["reduced"] == precision.calls["unrecorded"] == 0
    assert precision.kernel_ns["fp32"] == 399_991_000
    assert precision.compute_kernel_ns == 591_532_000
    assert precision.fp32_ops[:3] == ["aten::cudnn_convolution_backward_weight",
                                      "aten::cudnn_convolution_backward_input",
                                      "aten::cudnn_convolution"]
    finding = findings_of(profile)["FP32_ON_TENSOR_CORES"]
    assert finding.title.startswith("68% of compute-kernel time")


def test_nsys_devices_have_their_compute_capability_and_no_dtypes(
        corpus: Path, nsys_available: str, nsys_cache_dir: Path) -> None:
    profile = nsys.parse(corpus / "nsys" / "sc22_1gpu_baseline.nsys-rep",
                         cache_dir=nsys_cache_dir)
    devices = profile.table("devices")
    assert set(map(tuple, devices[["compute_major", "compute_minor"]].values)) == {(8, 0)}
    unknown = findings_of(profile)["OP_CHECKS_UNKNOWN"]
    assert "Nsight Systems records no operator input dtypes" in unknown.evidence[0].text
    assert "Nsight Systems records no operators' inputs" in unknown.evidence[-1].text
    # the batch (two 288 MiB pinned copies) and one 4-byte loss read per step, by launch
    copies = compute_run_metrics([profile]).step_copies
    assert copies.copies_per_step == {"HtoD": 2, "DtoH": 1} and copies.steps == 59
    assert copies.bytes_per_step == {"HtoD": 576 * 2**20, "DtoH": 4}
    assert copies.blocking_per_step == 1 and copies.launchers == {"HtoD": [], "DtoH": []}


# --- convolution with a bias feeding BatchNorm ------------------------------------------------

CONV_IN, WEIGHT, CONV_OUT = [8, 3, 32, 32], [16, 3, 3, 3], [8, 16, 30, 30]


def conv_bn_trace(path: Path, bias: bool = True, between: str = "bookkeeping",
                  norm_channels: int = 16, shapes: bool = True, gpu: bool = True) -> Path:
    """Two 1 ms steps of Conv2d -> BatchNorm2d as torch.profiler records them in training:
    aten::conv2d -> convolution -> _convolution -> cudnn_convolution (a 200 us kernel) and, with
    a bias, the bias add_ inside _convolution (a 20 us kernel); then BatchNorm's
    ``num_batches_tracked += 1`` (``between="bookkeeping"``, a scalar add), or a ReLU on the
    activation (``"relu"``), then aten::batch_norm on ``norm_channels`` channels."""
    def op(name: str, ts: float, dur: float, types: list[str], dims: list[list[int]]) -> dict:
        return _op(name, ts, dur, types if shapes else None, dims if shapes else None)

    bias_type, bias_dims = ("float", [16]) if bias else ("", [])
    conv_types = ["float", "float", bias_type, "GenericList", "GenericList", "Int"]
    conv_dims = [CONV_IN, WEIGHT, bias_dims, [], [], []]
    norm_dims = [[8, norm_channels, 30, 30], [norm_channels], [norm_channels], [], []]
    events: list[dict] = []
    for step in range(2):
        at = 1000 * step
        events += [_step_span(step, at),
                   op("aten::conv2d", at + 10, 100, conv_types, conv_dims),
                   op("aten::convolution", at + 12, 96, conv_types, conv_dims),
                   op("aten::_convolution", at + 14, 92, conv_types, conv_dims),
                   op("aten::cudnn_convolution", at + 16, 64,
                      ["float", "float", "GenericList"], [CONV_IN, WEIGHT, []]),
                   op("aten::batch_norm", at + 130, 70, ["float"] * 5, norm_dims)]
        if bias:
            events.append(op("aten::add_", at + 85, 15, ["float", "float", "Int"],
                             [CONV_OUT, [1, 16, 1, 1], []]))
        if between == "bookkeeping":
            events.append(op("aten::add", at + 115, 5, ["long int", "long int", "Int"],
                             [[], [], []]))
        elif between == "relu":
            events.append(op("aten::relu", at + 115, 5, ["float"], [CONV_OUT]))
        if gpu:
            events += _launch(at + 20, 10 * step + 1, "implicit_convolve_sgemm", at + 30, 200)
            if bias:
                events += _launch(at + 90, 10 * step + 2, "elementwise_kernel", at + 240, 20)
            events += _launch(at + 150, 10 * step + 3, "bn_fw_tr_1C11_kernel", at + 270, 50)
    header = {"deviceProperties": [V100]} if gpu else {}
    path.write_text(json.dumps({"schemaVersion": 1, **header, "traceEvents": events}))
    return path


def test_conv_bias_before_batch_norm(tmp_path: Path) -> None:
    """BatchNorm's scalar bookkeeping between the two does not hide the pair; the bias add's
    20 us kernel is what the convolution launched outside cuDNN's kernel."""
    profile = kineto.parse(conv_bn_trace(tmp_path / "t.json"))
    stats = compute_run_metrics([profile]).conv_bias
    assert (stats.convolutions, stats.with_bias, stats.before_batch_norm) == (2, 2, 2)
    assert stats.bias_kernel_ns == 40_000 and stats.weight_shapes == ["16×3×3×3"]
    finding = findings_of(profile)["CONV_BIAS_BEFORE_BN"]
    assert finding.severity == "low" and "(1 per step)" in finding.title
    assert "the bias add): 20.0 µs per step" in finding.evidence[2].text
    assert "bias=False" in finding.recommendation
    assert (finding.evidence[0].at.offset_ns, finding.evidence[0].at.duration_ns) == (
        10_000, 100_000)


@pytest.mark.parametrize("shape", [{"bias": False}, {"between": "relu"}, {"norm_channels": 32}],
                         ids=["no bias", "relu between", "another tensor"])
def test_no_conv_bias_finding_when_the_bias_matters_or_is_absent(tmp_path: Path,
                                                                 shape: dict) -> None:
    profile = kineto.parse(conv_bn_trace(tmp_path / "t.json", **shape))
    stats = compute_run_metrics([profile]).conv_bias
    assert stats.convolutions == 2 and stats.before_batch_norm == 0
    assert not {"CONV_BIAS_BEFORE_BN", "OP_CHECKS_UNKNOWN"} & set(findings_of(profile))


def test_conv_bias_without_record_shapes_is_unknown(tmp_path: Path) -> None:
    found = findings_of(kineto.parse(conv_bn_trace(tmp_path / "t.json", shapes=False)))
    assert "CONV_BIAS_BEFORE_BN" not in found
    texts = [e.text for e in found["OP_CHECKS_UNKNOWN"].evidence]
    assert "convolution bias before BatchNorm: unknown, the trace's 2 convolutions carry no " \
        "'Input Dims' (torch.profiler ran without record_shapes=True)" in texts


def test_conv_bias_on_a_cpu_only_trace(tmp_path: Path) -> None:
    finding = findings_of(kineto.parse(conv_bn_trace(tmp_path / "t.json", gpu=False)))[
        "CONV_BIAS_BEFORE_BN"]
    assert finding.evidence[2].text == ("the bias add's own kernel time cannot be told apart "
                                        "(a CPU-only profile records no kernels)")


def test_resnet50_convolutions_have_no_bias(corpus: Path) -> None:
    """torchvision's ResNet-50 builds its 53 convolutions with bias=False: each is followed by
    BatchNorm (after its num_batches_tracked add), but none carries a bias."""
    profile = kineto.parse(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    stats = compute_run_metrics([profile]).conv_bias
    assert (stats.convolutions, stats.with_bias, stats.before_batch_norm) == (6 * 53, 0, 0)
    assert stats.unknown_reason is None
    assert "CONV_BIAS_BEFORE_BN" not in findings_of(profile)


# --- host <-> device copies per step ----------------------------------------------------------


def copies_trace(path: Path, scalars_in: int, reads_back: int, training: bool = True) -> Path:
    """Three 1 ms steps: a batch (2 MiB images and 256 B labels through aten::to), then
    ``scalars_in`` 8-byte tensors moved in with aten::to and ``reads_back`` losses read with
    .item() (aten::item -> aten::_local_scalar_dense -> a 4-byte copy to pageable memory), and
    an optimizer step when ``training``; a last read after the final step (teardown) that no
    step owns."""
    events: list[dict] = []
    correlation = 0

    def copy(at: float, op: str, kind: str, memory: str, size: int) -> list[dict]:
        nonlocal correlation
        correlation += 1
        return [_op(op, at, 8, None, None),
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": PID,
                 "tid": PID, "ts": at + 2, "dur": 4, "args": {"correlation": correlation}},
                {"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy {kind} ({memory})", "pid": 0,
                 "tid": 7, "ts": at + 3, "dur": 2,
                 "args": {"device": 0, "stream": 7, "correlation": correlation,
                          "bytes": size}}]

    for step in range(3):
        at = 1000 * step
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": PID, "tid": PID, "ts": at, "dur": 1000})
        events += copy(at + 10, "aten::to", "HtoD", "Pageable -> Device", 2 << 20)
        events += copy(at + 20, "aten::to", "HtoD", "Pageable -> Device", 256)
        for i in range(scalars_in):
            events += copy(at + 100 + 10 * i, "aten::to", "HtoD", "Pageable -> Device", 8)
        for i in range(reads_back):
            events += copy(at + 500 + 10 * i, "aten::item", "DtoH", "Device -> Pageable", 4)
        if training:
            events.append({"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step",
                           "pid": PID, "tid": PID, "ts": at + 800, "dur": 50})
    events += copy(3100, "aten::item", "DtoH", "Device -> Pageable", 4)
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [A100],
                                "traceEvents": events}))
    return path


def test_small_copies_and_reads_back_each_step(tmp_path: Path) -> None:
    profile = kineto.parse(copies_trace(tmp_path / "t.json", scalars_in=5, reads_back=3))
    copies = compute_run_metrics([profile]).step_copies
    assert copies.copies_per_step == {"HtoD": 7, "DtoH": 3}  # the teardown read is no step's
    assert copies.small_per_step == {"HtoD": 6, "DtoH": 3}
    assert copies.bytes_per_step == {"HtoD": (2 << 20) + 256 + 5 * 8, "DtoH": 12}
    assert copies.launchers == {"HtoD": [("aten::to", 7)], "DtoH": [("aten::item", 3)]}
    assert copies.blocking_per_step == 3
    finding = findings_of(profile)["HOST_DEVICE_COPIES_PER_STEP"]
    assert finding.severity == "medium"
    assert finding.title.endswith("7 host-to-device and 3 device-to-host copies.")
    texts = [e.text for e in finding.evidence]
    assert "launched (runtime call joined by correlation id) inside: aten::item (3 per step)" \
        in texts
    assert finding.recommendation.startswith("Build per-step tensors on the GPU")
    reads = next(e for e in finding.evidence if "device-to-host copies launched" in e.text)
    assert (reads.at.offset_ns, reads.at.duration_ns) == (503_000, 2_000)  # step 0's first


def test_an_inference_step_may_read_its_outputs_back(tmp_path: Path) -> None:
    """Without a backward pass or an optimizer step the step is inference: reading its outputs
    back is its job, only the small copies in would count."""
    profile = kineto.parse(copies_trace(tmp_path / "t.json", scalars_in=1, reads_back=3,
                                        training=False))
    copies = compute_run_metrics([profile]).step_copies
    assert copies.training is False and copies.copies_per_step["DtoH"] == 3
    assert "HOST_DEVICE_COPIES_PER_STEP" not in findings_of(profile)


def test_a_batch_and_one_loss_read_per_step_is_no_finding(tmp_path: Path) -> None:
    profile = kineto.parse(copies_trace(tmp_path / "t.json", scalars_in=1, reads_back=1))
    copies = compute_run_metrics([profile]).step_copies
    assert copies.copies_per_step == {"HtoD": 3, "DtoH": 1}
    assert "HOST_DEVICE_COPIES_PER_STEP" not in findings_of(profile)


def test_corpus_copies_per_step(corpus: Path) -> None:
    """resnet50 moves its batch (images and labels) with aten::to, two copies per step; the
    CUDA event-sync trace's one-byte read is aten::is_nonzero (a tensor tested in an ``if``)."""
    resnet = kineto.parse(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    copies = compute_run_metrics([resnet]).step_copies
    assert copies.copies_per_step == {"HtoD": 2, "DtoH": 0}
    assert copies.small_per_step["HtoD"] == 1 and copies.launchers["HtoD"] == [("aten::to", 2)]
    event_sync = kineto.parse(corpus / "hta" / "cuda_event_sync.json.gz")
    copies = compute_run_metrics([event_sync]).step_copies
    assert copies.launchers == {"DtoH": [("aten::is_nonzero", 1)]}
    assert copies.blocking_per_step == 1 and copies.bytes_per_step["DtoH"] == 1
    # the MTIA inference trace reads 23.25 small outputs back per step: no backward pass or
    # optimizer step is recorded, so that is its job
    mtia = kineto.parse(corpus / "hta" / "mtia_inference_rank_0.json.gz")
    copies = compute_run_metrics([mtia]).step_copies
    assert copies.training is False and copies.copies_per_step == {"HtoD": 24, "DtoH": 23.25}
    assert compute_run_metrics([resnet]).step_copies.training is True
    for profile in (resnet, event_sync, mtia):
        assert "HOST_DEVICE_COPIES_PER_STEP" not in findings_of(profile)


# --- long GPU idle gaps, unfused optimizer ----------------------------------------------------


def busy_steps_trace(path: Path, stall_ms: float, optimizer_kernels: int = 0,
                     fused: bool = False, kernel: str | None = "sgd_update",
                     unnamed: int = 0) -> Path:
    """Ten 200 ms steps, each a 190 ms kernel launched at its start; step 4 first stalls for
    ``stall_ms`` (the CPU busy in an op that launches nothing); each step's Optimizer.step span
    launches ``optimizer_kernels`` 10 us ``kernel`` kernels (None: events with a null name; one
    multi_tensor_apply kernel when ``fused``), then ``unnamed`` more with a null name."""
    events: list[dict] = []
    at, correlation = 0.0, 0
    for step in range(10):
        stall = stall_ms * 1000 if step == 4 else 0.0
        length = 200_000 + stall
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": PID, "tid": PID, "ts": at, "dur": length})
        if stall:
            events.append(_op("aten::save_checkpoint", at + 1, stall - 2, None, None))
        correlation += 1
        events += _launch(at + stall + 1, correlation, "gemm", at + stall + 5, 190_000)
        names = (["multi_tensor_apply_kernel"] if fused else [kernel] * optimizer_kernels) + \
            [None] * unnamed
        if names:
            events.append({"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step",
                           "pid": PID, "tid": PID, "ts": at + stall + 100, "dur": 1000})
        for i, name in enumerate(names):
            correlation += 1
            events += _launch(at + stall + 110 + 10 * i, correlation, name,
                              at + stall + 190_010 + 10 * i, 8)
        at += length
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [A100],
                                "traceEvents": events}))
    return path


def test_one_long_stall_in_an_otherwise_busy_run(tmp_path: Path) -> None:
    """A 600 ms stall in step 4 of ten 200 ms steps: the GPU is still busy 73% of the time, so
    LOW_GPU_UTIL says nothing and the stall is a finding of its own, with where it lies."""
    profile = kineto.parse(busy_steps_trace(tmp_path / "t.json", stall_ms=600))
    metrics = compute_run_metrics([profile])
    assert metrics.gpu.long_gap_count == 1
    found = findings_of(profile)
    assert "LOW_GPU_UTIL" not in found
    finding = found["LONG_GPU_IDLE_GAPS"]
    assert finding.title == "The GPU stops for more than 500.0 ms at a time (1 time)."
    gap = finding.evidence[1]  # from step 3's kernel end (10 ms before step 4) to step 4's
    assert gap.text == "idle 610.0 ms on GPU 0, from step 3 into step 4"
    assert (gap.at.offset_ns, gap.at.duration_ns) == (790_005_000, 610_000_000)
    assert "nothing the trace shows" in finding.evidence[-1].text


def test_no_long_gap_finding_without_a_stall(tmp_path: Path) -> None:
    assert "LONG_GPU_IDLE_GAPS" not in findings_of(
        kineto.parse(busy_steps_trace(tmp_path / "t.json", stall_ms=0)))


def test_unfused_optimizer(tmp_path: Path) -> None:
    profile = kineto.parse(busy_steps_trace(tmp_path / "t.json", 0, optimizer_kernels=60))
    finding = findings_of(profile)["OPTIMIZER_NOT_FUSED"]
    assert finding.title == ("The optimizer (SGD) updates the parameters one small kernel at a "
                             "time: 60 kernels per step.")
    assert "torch.optim.SGD(..., foreach=True)" in finding.recommendation
    assert finding.evidence[1].text == "98% of the 61 kernels launched per step"
    fused = kineto.parse(busy_steps_trace(tmp_path / "f.json", 0, fused=True))
    assert "OPTIMIZER_NOT_FUSED" not in findings_of(fused)
    assert compute_run_metrics([profile]).kernel_mix.fused_optimizer is False


def test_optimizer_of_unrecorded_kernel_names_is_not_called_unfused(tmp_path: Path) -> None:
    """60 kernels per SGD step whose names the trace does not record (Kineto events with a null
    name): whether they are multi-tensor is unknown, so no OPTIMIZER_NOT_FUSED and the display
    says unknown, not 'one kernel per tensor'; a named multi_tensor_apply kernel beside unnamed
    ones is fused; a named per-tensor kernel beside unnamed ones leaves it unknown."""
    profile = kineto.parse(busy_steps_trace(tmp_path / "u.json", 0, optimizer_kernels=60,
                                            kernel=None))
    metrics = compute_run_metrics([profile])
    mix = metrics.kernel_mix
    assert mix.fused_optimizer is None and mix.optimizer_kernels_per_step == 60
    found = findings_of(profile)
    assert "OPTIMIZER_NOT_FUSED" not in found and "LAUNCH_LINKS_UNKNOWN" not in found
    rows = {row.label: row.value for row in metric_rows(metrics)}
    assert rows["Optimizer (SGD) kernels per step"] == (
        "60 (multi-tensor or not: unknown, some of its kernels' names are not recorded)")
    fused = kineto.parse(busy_steps_trace(tmp_path / "f.json", 0, fused=True, unnamed=5))
    assert compute_run_metrics([fused]).kernel_mix.fused_optimizer is True
    mixed = kineto.parse(busy_steps_trace(tmp_path / "m.json", 0, optimizer_kernels=55,
                                          unnamed=5))
    assert compute_run_metrics([mixed]).kernel_mix.fused_optimizer is None
    assert "OPTIMIZER_NOT_FUSED" not in findings_of(mixed)


def test_an_optimizer_check_left_unknown_by_unrecorded_names_says_why(tmp_path: Path) -> None:
    """60 kernels per SGD step, 5 of them of a null name (their kind unknown): OP_CHECKS_UNKNOWN
    says that whether they are multi-tensor, which OPTIMIZER_NOT_FUSED asks of so many, is
    unknown and why, and how to answer it; only the key-metrics row said so before. With 10
    kernels per step, too few to be one per parameter whatever their kind, nothing is
    unknown."""
    many = kineto.parse(busy_steps_trace(tmp_path / "m.json", 0, optimizer_kernels=55,
                                         unnamed=5))
    unknown = findings_of(many)["OP_CHECKS_UNKNOWN"]
    assert [e.text for e in unknown.evidence] == [
        "whether the optimizer's 60 kernels per step are multi-tensor (OPTIMIZER_NOT_FUSED): "
        "unknown, some of its kernels' names are not recorded"]
    assert unknown.recommendation.startswith(
        "Whether the optimizer is multi-tensor is read from the names of the kernels it launches")
    few = kineto.parse(busy_steps_trace(tmp_path / "f.json", 0, optimizer_kernels=5, unnamed=5))
    assert compute_run_metrics([few]).kernel_mix.fused_optimizer is None
    assert "OP_CHECKS_UNKNOWN" not in findings_of(few)


def test_resnet50_sgd_is_not_fused(corpus: Path) -> None:
    """torch 1.8's SGD launches 483 kernels per step (3 per parameter of 161), none fused."""
    profile = kineto.parse(corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz")
    finding = findings_of(profile)["OPTIMIZER_NOT_FUSED"]
    assert "483 kernels per step" in finding.title and "(SGD)" in finding.title


def test_op_inputs_are_the_same_when_decoded_in_parallel(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain trace cut into byte ranges for worker processes: each worker interns its own
    inputs, and the joined table equals the sequential one (nested TensorList shapes too)."""
    path = linear_trace(tmp_path / "plain.json", "float", [A100], steps=60)
    document = json.loads(path.read_text())
    document["traceEvents"] += [
        _op("aten::add_", 100_000 + i, 1, ["c10::BFloat16", "float"], [[[2, 3], [4]], [i % 5]])
        for i in range(60)]
    path.write_text(json.dumps(document, indent=1))
    sequential = kineto.parse(path).table("op_inputs")
    monkeypatch.setattr(kineto_stream, "PARALLEL_MIN_BYTES", path.stat().st_size // 3)
    monkeypatch.setattr(kineto_stream, "SPLIT_PROBE_BYTES", 4096)
    parallel = kineto.parse(path).table("op_inputs")
    assert sequential.equals(parallel) and len(parallel) == 3 * 60 + 60
    assert parallel["input_dims"].iloc[-1] == (((2, 3), (4,)), (4,))


def test_fp32_kernel_time_by_a_simpler_route(corpus: Path) -> None:
    """Recomputed with plain json by another link than the analysis's: each kernel's runtime
    call names its innermost operator by ``external id`` (the analysis joins by the thread and
    the outermost operator's span instead); the kernel time of float matmul/convolution
    operators launched inside the ProfilerStep spans agrees to the nanosecond."""
    import gzip
    import re

    trace = corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz"
    with gzip.open(trace) as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e["name"].startswith("ProfilerStep#")]
    family = re.compile(r"^aten::(?:mm|addmm|linear|conv2d|_?convolution|cudnn_convolution\w*)$")
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "Operator"}
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") == "Runtime"}
    fp32_us = total_us = 0
    for kernel in (e for e in events if e.get("cat") == "Kernel"):
        call = calls.get(kernel["args"]["correlation"])
        if call is None or not any(a <= call["ts"] < b for a, b in steps):
            continue
        total_us += kernel["dur"]
        op = ops.get(call["args"]["external id"])
        if op is not None and family.match(op["name"]) and "float" in op["args"]["Input type"]:
            fp32_us += kernel["dur"]
    precision = compute_run_metrics([kineto.parse(trace)]).op_precision
    assert (precision.kernel_ns["fp32"], precision.compute_kernel_ns) == (
        fp32_us * 1000, total_us * 1000)


def test_real_torch_profiler_trace_of_conv_bias_and_autocast(tmp_path: Path) -> None:
    """A trace torch.profiler writes now (CPU, record_shapes=True): Conv2d(bias) -> BatchNorm2d
    is found past BatchNorm's num_batches_tracked add_, Conv2d(bias) -> ReLU -> BatchNorm2d is
    not; under bf16 autocast the inner conv2d carries the BFloat16 casts."""
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3), nn.ReLU(), nn.BatchNorm2d(8), nn.Flatten(),
                          nn.Linear(8 * 12 * 12, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for step in range(4):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=step == 3):
                loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            prof.step()
    prof.export_chrome_trace(str(tmp_path / "real.json"))
    profile_ = kineto.parse(tmp_path / "real.json")
    stats = compute_run_metrics([profile_]).conv_bias
    assert stats.with_bias == 2 * stats.steps and stats.before_batch_norm == stats.steps
    assert stats.weight_shapes == ["8×3×3×3"]
    inputs = profile_.table("op_inputs")
    conv_types = {t[0] for t in inputs.loc[inputs["name"] == "aten::conv2d", "input_types"]}
    assert conv_types == {"float", "c10::BFloat16"}


def steps_of_ops(path: Path, ops: list[tuple[str, float, float]], dtype: str | None,
                 dims: list[list[int]], step_us: int, devices: list[dict] | None = None,
                 kernel_us: float = 0) -> Path:
    """3 steps of ``step_us`` each holding ``ops`` (name, offset, duration), their inputs
    recorded in ``dtype`` (None: record_shapes off); with ``kernel_us``, the last op launches
    a GEMM of that length whose name says no precision."""
    events: list[dict] = []
    for step in range(3):
        at = step_us * step
        events.append(_step_span(step, at, step_us))
        events += [_op(name, at + offset, dur, None if dtype is None else [dtype] * len(dims),
                       None if dtype is None else dims) for name, offset, dur in ops]
        if kernel_us:
            events += _launch(at + ops[-1][1] + 5, step + 1, "gemm_128x64", at + 50, kernel_us)
    header = {} if devices is None else {"deviceProperties": devices}
    path.write_text(json.dumps({"schemaVersion": 1, **header, "traceEvents": events}))
    return path


def test_gpu_advice_reads_the_recorded_dtypes_before_kernel_names(tmp_path: Path) -> None:
    """A compute-bound GPU whose GEMM's name says no precision: the matmuls' recorded bf16
    inputs say mixed precision is on, so it is not advised; fp32 inputs get it, with the
    figure read from the dtypes; without them the kernel names are the hint, as before. The
    evidence reads the same: it said 'no compute kernel runs in fp16/bf16: the model trains in
    full precision' from the names whatever the dtypes, beside advice saying the kernels
    already run in reduced precision; by names alone it now says it is a hint."""
    def advice(dtype: str | None) -> tuple[str, list[str]]:
        # An nn.Linear (aten::linear -> aten::addmm) launching a 900 us GEMM in each 1 ms step.
        profile = kineto.parse(steps_of_ops(
            tmp_path / f"{dtype}.json", [("aten::linear", 5, 30), ("aten::addmm", 10, 20)],
            dtype, [[32, 64], [128, 64], [128]], 1000, [A100], kernel_us=900))
        finding = findings_of(profile)["COMPUTE_BOUND"]
        return finding.recommendation, [e.text for e in finding.evidence]

    fix, texts = advice("c10::BFloat16")
    assert "mixed precision" not in fix
    assert "100% of the matmuls' and convolutions' time has fp16/bf16 inputs, by their " \
        "recorded dtypes" in texts and not any("full precision" in t for t in texts)
    fix, texts = advice("float")
    assert ("enable mixed precision (torch.autocast + GradScaler; the matmuls and convolutions "
            "take no fp16/bf16 input now, by their recorded dtypes)") in fix
    assert "0.0% of the matmuls' and convolutions' time has fp16/bf16 inputs, by their " \
        "recorded dtypes" in texts
    fix, texts = advice(None)
    assert "enable mixed precision (torch.autocast + GradScaler; no kernel is named fp16/bf16 " \
        "now)" in fix
    assert ("0.0% of compute-kernel time is in kernels named fp16/bf16 (kernel names only: the "
            "profiles record no input dtypes, and a name need not carry one)") in texts


def test_cpu_autocast_advice_reads_the_recorded_dtypes(tmp_path: Path) -> None:
    """A CPU-only run's autocast advice follows what its convolutions take: bf16 inputs on a
    CPU without native bf16 are told to turn autocast off (the trace says autocast is on, no
    knob needed), and on one with it are not told to use autocast; fp32 inputs on a native-bf16
    CPU are told to try it; with no dtypes recorded it says it cannot tell; the amp knob with
    fp32 inputs is autocast missing the model."""
    def advice(dtype: str | None, native: bool | None, **knobs: object) -> str:
        # A convolution (aten::conv2d -> aten::mkldnn_convolution, 9 ms) in each 10 ms step.
        profile = kineto.parse(steps_of_ops(
            tmp_path / f"{dtype}.json", [("aten::conv2d", 100, 9_000),
                                         ("aten::mkldnn_convolution", 200, 8_800)],
            dtype, [[8, 3, 32, 32], [16, 3, 3, 3], [16]], 10_000))
        m = compute_run_metrics([profile])
        environment = {} if native is None else {"cpu_native_bf16": native}
        found = find_all(m, RunContext(knobs=knobs, environment=environment))
        return {f.id: f for f in found}["COMPUTE_BOUND"].recommendation

    assert advice("c10::BFloat16", native=False).startswith(
        "Turn autocast off on this CPU: it has no native bf16")
    bf16 = advice("c10::BFloat16", native=True)
    assert "autocast" not in bf16 and "Turn" not in bf16
    assert ("run the forward pass under torch.autocast('cpu', dtype=torch.bfloat16): this CPU "
            "computes bf16 natively and the matmuls and convolutions spend 100% of their "
            "time on fp32 or wider inputs") in advice("float", native=True)
    assert ("this CPU computes bf16 natively: if the model trains in fp32 (the profiles cannot "
            "tell: the matmuls and convolutions carry no input dtypes (torch.profiler ran "
            "without record_shapes=True)), run the forward pass under torch.autocast('cpu', "
            "dtype=torch.bfloat16)") in advice(None, native=True)
    missed = advice("float", native=False, amp=True)
    assert "autocast is on, yet the matmuls and convolutions take fp32 inputs" in missed
    assert "Turn autocast off" not in missed
    # A bare trace says nothing of the CPU: bf16 inputs are a run to compare without autocast,
    # said first (a real torch 2.13 CPU run without native bf16 took 90.7 ms a step under
    # autocast, 1.3 ms without, and was told only to add cores and torch.compile).
    assert advice("c10::BFloat16", native=None).startswith(
        "To go faster: the matmuls and convolutions spend 100% of their time on fp16/bf16 "
        "inputs (by their recorded dtypes): unless this CPU computes bf16 natively "
        "(avx512_bf16 or amx_bf16 in lscpu), they run emulated, slower than in fp32; compare a "
        "run with autocast off; ")
    assert "autocast" not in advice("float", native=None)


def test_small_batch_advice_reads_the_recorded_dtypes(tmp_path: Path) -> None:
    """A batch of 8 per GPU: a run whose matmuls take bf16 inputs is not told that mixed
    precision would free memory for a larger batch; one in fp32 is."""
    def advice(dtype: str) -> str:
        profile = kineto.parse(steps_of_ops(
            tmp_path / f"{dtype}.json", [("aten::linear", 5, 30), ("aten::addmm", 10, 20)],
            dtype, [[8, 64], [128, 64], [128]], 1000, [A100], kernel_us=900))
        found = find_all(compute_run_metrics([profile]), RunContext(knobs={"batch_size": 8}))
        return {f.id: f for f in found}["SMALL_BATCH"].recommendation

    assert advice("c10::BFloat16").endswith("or use gradient accumulation.")
    assert advice("float").endswith("; mixed precision frees memory for a larger batch.")


def test_mixed_precision_is_read_among_the_matmuls_not_every_kernel(tmp_path: Path) -> None:
    """A bf16 model whose GEMM (350 us) runs beside a longer elementwise kernel (550 us, an
    activation): autocast casts the matmul's inputs, so its share of the matmul/convolution
    time (100%) says mixed precision is on, not its 39% of every compute kernel's time."""
    events: list[dict] = []
    bf16, dims = ["c10::BFloat16"] * 3, [[32, 64], [128, 64], [128]]
    for step in range(3):
        at = 1000 * step
        events += [_step_span(step, at),
                   _op("aten::linear", at + 5, 30, bf16, dims),
                   _op("aten::addmm", at + 10, 20, bf16, dims),
                   *_launch(at + 15, 2 * step + 1, "gemm_128x64", at + 50, 350),
                   _op("aten::gelu", at + 40, 20, bf16[:1], dims[:1]),
                   *_launch(at + 45, 2 * step + 2, "vectorized_elementwise_kernel", at + 400,
                            550)]
    path = tmp_path / "bf16.json"
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [A100],
                                "traceEvents": events}))
    m = compute_run_metrics([kineto.parse(path)])
    from profreport.reports.analysis.ops import reduced_precision

    assert m.op_precision.share("reduced") == pytest.approx(350 / 900)
    assert reduced_precision(m).share == 1.0
    fix = find_all(m, RunContext())
    assert "mixed precision" not in {f.id: f for f in fix}["COMPUTE_BOUND"].recommendation
