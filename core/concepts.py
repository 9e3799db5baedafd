"""One definition of each concept the analysis relies on, shared by every parser and metric.

Parsers use these to fill ``is_comm``, ``steps``, ``dataloader`` and ``cpu_collectives``;
metrics use them for launch and sync calls. Nothing else may re-define what these words mean.

The runner's launches import this module for the names they record (step ranges, the
DataLoader's range, the rank marks) in every training process, so pandas loads only inside the
functions that build tables: the child's start-up pays nothing for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from profreport.text import error_text

if TYPE_CHECKING:
    import pandas as pd
    from pandas.api.extensions import ExtensionArray

#: The ``steps`` origin of torch.profiler's ``ProfilerStep#N`` spans: ``prof.step()`` closes one
#: and opens the next back to back, so the loop's fetch of its next batch lies inside a span and
#: the sliver between two spans is the profiler's own work.
PROFILER_STEP = "ProfilerStep"
#: The ``steps`` origins of a Kineto trace without step spans: the stretches from one optimizer
#: step's end to the next one's, and the stretches between the starts of a repeated span.
OPTIMIZER_STEPS, REPEATED_SPAN = "optimizer", "repeated op"
#: The tables of what a process does on the CPU: a step's work shows in one of them (torch's
#: operators, spans or NVTX ranges, CUDA runtime calls, collectives, OS runtime calls).
CPU_WORK_TABLES = ("cpu_ops", "ranges", "runtime", "cpu_collectives", "osrt")
#: What a step is when a span the loop (or torch.profiler) opens per pass marks it.
ANNOTATED_RANGE = "annotated range"
#: What a step is to line_profiler: one pass of the training loop (its lines hold totals).
LOOP_PASS = "loop pass"
#: What a rank's pace is measured by when its step ranges leave the fetch out (a range opened
#: after ``for x in loader:``): each step's window, from its start to the next step's.
START_TO_NEXT_START = "start to next start"
#: Copy directions, as nsys and Kineto name them (the ``kind`` column of the ``memcpy`` table).
HTOD, DTOH, DTOD, HTOH, PTOP = "HtoD", "DtoH", "DtoD", "HtoH", "PtoP"
#: The copy direction or memory kind of a copy whose profile records none.
UNKNOWN_KIND = "unknown"
#: The name shown for an event or kernel whose profile records none (a Kineto event without
#: ``name`` or with ``name`` null, an nsys kernel whose name ids are NULL or missing from
#: StringIds, an NVTX range of neither text nor a textId that StringIds holds, an nsys runtime
#: call, OS runtime call or thread whose nameId is NULL or missing from StringIds); the name
#: classifiers read it as no name, so it is no communication kernel or anything else by name.
UNRECORDED_NAME = "(name unrecorded)"
COPY_KINDS = (HTOD, DTOH, DTOD, HTOH, PTOP, UNKNOWN_KIND)
#: Memory kinds at either end of a copy (``src_kind``/``dst_kind``).
PAGEABLE, PINNED = "Pageable", "Pinned"
MEMORY_KINDS = (PAGEABLE, PINNED, "Device", "Managed", "Array", UNKNOWN_KIND)

# A kernel that moves data between GPUs for a collective: NCCL (``ncclKernel_*``, the newer
# ``ncclDevKernel_*``), and RCCL on AMD, which keeps NCCL's names.
_COMM_KERNEL = r"\b(?:nccl|rccl)(?:Dev)?Kernel"

# A CPU-side collective call: the c10d op, the gloo or NCCL process-group call that Kineto records
# (``gloo:all_reduce``, ``nccl:all_reduce``), and PyTorch's ``record_param_comms`` wrapper. One
# call of the program shows up once in each of these layers that the profiler recorded (the c10d
# op on the calling thread, the backend op on the process group's own thread), so calls are
# counted within one layer.
_COLLECTIVE_LAYERS = {
    "c10d": r"^c10d::",
    "backend": r"^(?:gloo:|nccl:|ProcessGroupGloo::|ProcessGroupNCCL::)",
    "wrapper": r"^record_param_comms$",
}

#: What a collective does, as the NCCL/RCCL kernel names it (``ncclKernel_AllReduce_RING_LL_Sum``,
#: ``ncclDevKernel_AllGather_RING_LL``; all-to-all and pipeline sends run as ``SendRecv`` kernels)
#: and as the process group's call names it (``nccl:all_to_all``, ``gloo:all_reduce``,
#: ``c10d::alltoall_``, ``c10d::_reduce_scatter_base_``). DDP reduces gradients with all-reduce;
#: FSDP gathers parameters and scatters gradients; embedding sharding exchanges with all-to-all.
ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL, BROADCAST, SEND_RECV = (
    "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send_recv")
_COLLECTIVE_KINDS = {
    BROADCAST: r"(?i)broadcast",
    SEND_RECV: r"(?i)send_?recv|(?:^|[:_])(?:send|recv)(?:_|\b)",
    ALL_GATHER: r"(?i)all_?gather",
    ALL_TO_ALL: r"(?i)all_?to_?all",
    REDUCE_SCATTER: r"(?i)reduce_?scatter",
    ALL_REDUCE: r"(?i)all_?reduce",
}

# A training iteration: torch.profiler's ``ProfilerStep#12``, or an NVTX range ``step 12`` /
# ``step_12`` / ``Step 12`` as the tutorials and profreport's own runner annotate them.
_STEP = re.compile(r"^\s*(?:ProfilerStep#(\d+)|step[ _#]?(\d+))\s*$", re.IGNORECASE)
# The step spans torch.profiler itself opens (see PROFILER_STEP), not a user's ``step 12``.
_PROFILER_STEP_SPAN = r"^\s*ProfilerStep#\d+\s*$"

# Waiting for the next batch: torch.profiler's ``enumerate(DataLoader)#<Iter>.__next__`` for the
# single- and multi-process iterators, ``enumerate(DataPipe)#...`` for DataPipes, and the NVTX
# ranges profreport's runner puts around ``next(loader)``.
_DATALOADER_SPAN = r"^enumerate\((?:DataLoader|DataPipe)\)#.*__next__"
# torch.profiler's span of a DataLoader with num_workers=0: batches are loaded in the training
# process itself, while the GPU waits.
_IN_PROCESS_LOADER = r"_SingleProcessDataLoaderIter"
# ... and with worker processes (num_workers > 0).
_WORKER_LOADER = r"_MultiProcessingDataLoaderIter"
#: The NVTX range profreport's runner puts around ``next(loader)``.
DATALOADER_RANGE = "dataloader"
DATALOADER_RANGE_NAMES = frozenset({DATALOADER_RANGE, "data_loading", "data loading",
                                    "next_batch"})
#: The name profreport's runner gives a fetch that feeds no training step (a validation loader's,
#: or one under ``no_grad``), as an NVTX range and a torch.profiler span: no DataLoader wait.
OTHER_LOADER_RANGE = "dataloader (not training)"
#: The NVTX range profreport's runner puts around iteration ``n`` (matched by ``_STEP``).
STEP_RANGE_FORMAT = "step {n}"
#: The NVTX domain of the marks profreport's runner records, and the mark each rank of a
#: distributed job records in it once (``rank 1 of 2``): an nsys capture records no process's
#: environment, so the mark is how the parser learns which rank a process of the capture is.
RANK_DOMAIN = "profreport"
RANK_MARK_FORMAT = "rank {rank} of {world_size}"
# Digits no more than a world size holds (a longer number is no rank, not parsed).
_RANK_MARK = re.compile(r"^rank (\d{1,7}) of (\d{1,7})$")
#: The most processes a job may have: past the largest jobs trained (10^5 GPUs, one process
#: each) and NCCL's communicators; a larger world size in a mark is damage, not a job.
MAX_WORLD_SIZE = 1 << 20

# A kernel computing in reduced precision: fp16 (``__half``, ``c10::Half``, cuDNN/cuBLAS names
# with ``f16``/``fp16``), bfloat16 (``c10::BFloat16``, ``bf16``), and the tensor-core HMMA
# instructions (``hmma``, ``h884``/``h1688``/``h16816`` tiles). TF32 (``tf32``, ``s1688``) is
# single precision on tensor cores, not mixed precision, and does not match.
_REDUCED_PRECISION_KERNEL = (r"(?i)__half|c10::Half\b|\bhalf\b|bfloat16|c10::BFloat16|"
                             r"(?<![a-z0-9])(?:b?f16|fp16)|hmma|\bh(?:884|1688|16816)")

# A kernel that only converts a tensor between NCHW and NHWC (cuDNN's ``nchwToNhwcKernel`` /
# ``nhwcToNchwKernel``, also spelt ``nchw2nhwc``): the model's layout differs from the one the
# convolution kernels want, and every convolution pays a transpose.
_LAYOUT_CONVERSION_KERNEL = r"(?i)nchw_?to_?nhwc|nhwc_?to_?nchw|nchw2nhwc|nhwc2nchw"

# An optimizer running as fused multi-tensor kernels (``foreach=True``/``fused=True``, apex):
# ``multi_tensor_apply_kernel``, except GradScaler's unscale/inf check, which uses the same
# machinery under any optimizer.
_MULTI_TENSOR_KERNEL = r"multi_tensor_apply"
_AMP_SCALER_KERNEL = r"_amp_foreach|amp_update_scale"

# One optimizer step: torch.profiler's ``Optimizer.step#AdamW.step``, or an NVTX range / user
# annotation called ``optimizer`` / ``optimizer.step`` / ``## optimizer ##`` (the sc22 tutorial,
# HTA's sample traces).
_OPTIMIZER_STEP_SPAN = r"(?i)^(?:Optimizer\.step#|[#\s]*optimizer(?:[._ ]step)?[#\s]*$)"
_OPTIMIZER_CLASS = re.compile(r"^Optimizer\.step#(\w+)\.step")
# Clearing the gradients: torch.profiler's ``Optimizer.zero_grad#SGD.zero_grad``.
_ZERO_GRAD_SPAN = r"^Optimizer\.zero_grad#"
# What zero_grad(set_to_none=False) runs to write zeros into the gradients, on any device: a
# ``Tensor.zero_()`` per gradient (which calls ``fill_``), or one ``_foreach_zero_`` per group.
_ZERO_FILL_OP = r"^aten::(?:zero_|fill_|_foreach_zero_)$"
# The backward pass on the CPU: autograd engine nodes
# (``autograd::engine::evaluate_function: ConvolutionBackward0``).
_BACKWARD_OP = r"^autograd::engine::evaluate_function"
# ATen's elementwise CUDA kernels (``vectorized_elementwise_kernel``, ``unrolled_...``,
# ``elementwise_kernel``): one launch per pointwise op, what torch.compile fuses.
_ELEMENTWISE_KERNEL = r"elementwise_kernel"
# nn.DataParallel's Python autograd functions (replicate = Broadcast, scatter/gather of the
# batch, the gradient reduction ReduceAddCoalesced) and their backward nodes, which as Python
# Functions are called ``GatherBackward`` with no number: ATen's generated nodes carry one
# (``GatherBackward0`` is the backward of ``torch.gather``, not DataParallel). Capitalised, so a
# model's own ``aten::scatter`` does not count.
_DATAPARALLEL_OP = r"\b(?:Broadcast|Scatter|Gather|ReduceAddCoalesced)(?:Backward)?\b"
# The forward of nn.DataParallel itself (a module span or the Python frame), never
# DistributedDataParallel's.
_DATAPARALLEL_FORWARD = (r"(?<![A-Za-z])DataParallel(?:\.forward|_\d+\b|\b)"
                         r"|nn/parallel/data_parallel\.py\(\d+\): forward")
# DistributedDataParallel's forward: a module span or the Python frame.
_DDP_FORWARD = (r"DistributedDataParallel(?:\.forward|_\d+\b|\b)"
                r"|nn/parallel/distributed\.py\(\d+\): forward")

# ATen's reference CPU kernels, used when no optimised (oneDNN/mkldnn) kernel fits the dtype or
# layout: ``aten::_slow_conv2d_forward`` runs bf16 convolutions on CPUs without native bf16.
_SLOW_FALLBACK_OP = r"^aten::_slow_|^aten::thnn_"
# oneDNN (formerly MKL-DNN) operators: the optimised CPU path for convolutions and matmuls.
_ONEDNN_OP = r"(?i)mkldnn|onednn"
# What torch.compile leaves in a trace: TorchDynamo runs every compiled frame inside a
# ``record_function("Torch-Compiled Region: <frame>/<compile>")``, and AOTAutograd runs the
# compiled graph as the autograd function ``CompiledFunction`` (torch 2.0 records only that).
_COMPILED_REGION = r"^Torch-Compiled Region\b|^CompiledFunction$"
#: The spans torch.compile's dynamo_timed records around its compiling: Dynamo compiling a frame,
#: and AOTAutograd compiling the backward at its first call. Every operator inside one is the
#: compiler's work (tracing on fake tensors, code generation), none of the model's.
COMPILE_SPANS = frozenset({"entire_frame_compile", "entire_backward_compile"})

# Matrix multiplications as ATen records them (``aten::linear`` calls ``aten::addmm``;
# ``aten::matmul`` calls ``mm``/``bmm``): the work tensor cores run.
_MATMUL_OP = r"^aten::(?:mm|bmm|addmm|addbmm|baddbmm|matmul|linear|_addmm_activation)$"
# Convolutions, forward and backward, at every layer of the dispatch (``aten::conv2d`` ->
# ``convolution`` -> ``_convolution`` -> ``cudnn_convolution``; ``convolution_backward``) and on
# every backend (cuDNN, MIOpen, oneDNN, ATen's slow reference kernels).
_CONV_OP = (r"^aten::(?:conv(?:_transpose)?[123]d|_?convolution(?:_backward|_mode)?|"
            r"(?:cudnn|miopen|mkldnn)_convolution\w*|_slow_conv2d_\w+|slow_conv\w+|"
            r"thnn_conv2d\w*)$")
# Batch normalisation's forward at every layer of the dispatch (``aten::batch_norm`` ->
# ``_batch_norm_impl_index`` -> ``cudnn_batch_norm`` / ``native_batch_norm``).
_BATCH_NORM_OP = (r"^aten::(?:batch_norm|_batch_norm_impl_index|(?:cudnn|miopen)_batch_norm|"
                  r"native_batch_norm|_native_batch_norm_legit\w*)$")
# The convolution layers whose third argument is the bias (``conv2d(input, weight, bias, ...)``,
# ``convolution``, ``_convolution``, oneDNN's); cuDNN's own op takes no bias (ATen adds it).
_CONV_WITH_BIAS_ARGUMENT = r"^aten::(?:conv(?:_transpose)?[123]d|_?convolution|mkldnn_convolution)$"
_TRANSPOSED_CONV = r"^aten::conv_transpose[123]d$"
# Pointwise arithmetic, activations and dropout, in place or not: what may sit between a
# convolution and a BatchNorm, either transforming the activation (a ReLU, a residual add) or
# only updating a scalar (BatchNorm's own ``num_batches_tracked += 1``); their input shapes say
# which.
_POINTWISE_OP = (r"^aten::(?:add|sub|mul|div|relu|relu6|gelu|silu|sigmoid|tanh|hardtanh|"
                 r"hardswish|hardsigmoid|leaky_relu|elu|selu|mish|clamp|clamp_min|dropout|"
                 r"feature_dropout|native_dropout)_?$")
#: Operator families whose inputs the Kineto parser keeps (the ``op_inputs`` table).
MATMUL, CONVOLUTION, BATCH_NORM, POINTWISE = "matmul", "convolution", "batch_norm", "pointwise"
_OP_FAMILIES = {MATMUL: _MATMUL_OP, CONVOLUTION: _CONV_OP, BATCH_NORM: _BATCH_NORM_OP,
                POINTWISE: _POINTWISE_OP}
#: What a floating-point dtype computes in: double, single, or the 16-bit floats tensor cores
#: take directly (fp8 too).
FP64, FP32, REDUCED = "fp64", "fp32", "reduced"
_FP8 = ("Float8_e4m3fn", "Float8_e5m2", "Float8_e4m3fnuz", "Float8_e5m2fnuz")
#: Every dtype as torch.profiler names it, ``Input type`` (C++ type names) and
#: record_param_comms' ``dtype`` (c10::ScalarType names): its bytes per element, and what it
#: computes in (FP64, FP32, REDUCED; None for integers, bools and complex numbers).
DTYPES: dict[str, tuple[int, str | None]] = {
    **dict.fromkeys(("double", "c10::Double", "Double"), (8, FP64)),
    **dict.fromkeys(("long int", "int64_t", "Long", "c10::complex<float>", "ComplexFloat",
                     "unsigned long", "UInt64"), (8, None)),
    **dict.fromkeys(("float", "c10::Float", "Float"), (4, FP32)),
    **dict.fromkeys(("int", "Int", "unsigned int", "UInt32", "c10::complex<c10::Half>",
                     "ComplexHalf"), (4, None)),
    **dict.fromkeys(("c10::Half", "Half", "half", "c10::BFloat16", "BFloat16"), (2, REDUCED)),
    **dict.fromkeys(("short int", "short", "Short", "unsigned short", "UInt16"), (2, None)),
    **dict.fromkeys((*_FP8, *(f"c10::{name}" for name in _FP8)), (1, REDUCED)),
    **dict.fromkeys(("signed char", "Char", "unsigned char", "Byte", "bool", "Bool"), (1, None)),
    **dict.fromkeys(("c10::complex<double>", "ComplexDouble"), (16, None)),
}
#: Bytes per element of each dtype (DTYPES).
DTYPE_BYTES = {name: size for name, (size, _) in DTYPES.items()}
#: Compute capabilities (CUDA) from which the GPU has tensor cores (Volta), and from which they
#: take fp32 inputs as TF32 (Ampere).
TENSOR_CORE_CAPABILITY = (7, 0)
TF32_CAPABILITY = (8, 0)
# A kernel running fp32 math on tensor cores as TF32 (cuBLAS/cuDNN ``tf32``, CUTLASS ``s1688``
# tiles); only a hint of what the operator asked for.
_TF32_KERNEL = r"(?i)tf32|_s1688|_s16816"

#: CUDA API calls that launch work on the GPU.
LAUNCH_APIS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cuLaunchKernel",
    "cuLaunchKernelEx", "cudaGraphLaunch", "cuGraphLaunch",
    # ROCm's HIP runtime, as Kineto records it on AMD GPUs.
    "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipGraphLaunch",
})
#: CUDA API calls that block the CPU until the GPU has caught up.
SYNC_APIS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize",
})

#: The kinds of a GPU sync record (the ``sync`` table) that tell a stream to wait on an event
#: (``cudaStreamWaitEvent``): nsys's CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT token,
#: as the nsys parser lower-cases it, and Kineto's ``cuda_sync_kind``.
STREAM_WAIT_KINDS = frozenset({"stream_wait_event", "Stream Wait Event"})

#: The stream id CUPTI gives a record of no stream (CUPTI_INVALID_STREAM_ID, uint32 -1: event
#: and context syncs), which nsys exports and Kineto writes as recorded: no real stream, read -1.
UNSET_STREAM = 0xFFFFFFFF

#: Copy calls that always block the CPU until the copy is done (the synchronous ``cudaMemcpy``).
SYNC_COPY_APIS = frozenset({"cudaMemcpy", "cuMemcpy", "cuMemcpyDtoH", "hipMemcpy"})

_API_VERSION_SUFFIX = re.compile(r"_v\d+$")
# A copy as torch.profiler names it: ``Memcpy HtoD (Pageable -> Device)``.
_COPY_NAME = r"^Memcpy (\w+)(?: \((\w+) -> (\w+)\))?"
#: Every way a profiler records a copy's direction, onto COPY_KINDS: CUPTI/Kineto's short tokens,
#: ROCm's spelled-out names (roctracer's ``CopyHostToDevice`` activity, HIP's ``hipMemcpyKind``
#: names), and the numeric ``cudaMemcpyKind``/``hipMemcpyKind`` that HIP API calls record in
#: ``args.kind`` (0 host->host, 1 host->device, 2 device->host, 3 device->device; 4 is
#: "default", inferred from the pointers, so unknown here).
RECORDED_COPY_KINDS = {
    **{kind.lower(): kind for kind in (HTOD, DTOH, DTOD, HTOH, PTOP)},
    "hosttodevice": HTOD, "devicetohost": DTOH, "devicetodevice": DTOD, "hosttohost": HTOH,
    "peertopeer": PTOP, "0": HTOH, "1": HTOD, "2": DTOH, "3": DTOD,
}
# The direction inside a recorded copy name or kind: ``Memcpy HtoD``, ``CopyHostToDevice``,
# ``hipMemcpyDeviceToHost``, ``cudaMemcpyHostToDevice``.
_RECORDED_KIND = re.compile(r"^(?:hip|cuda)?(?:Memcpy|Copy)?\s*(\w+?)\s*$", re.IGNORECASE)
# Names people give the function that runs the training loop (``train``, ``train_one_epoch``,
# ``fit``, ``run_epoch``): with no source, they make a loop found from hit counts more likely
# the training loop.
_TRAINING_FUNCTION = re.compile(r"(?i)train|epoch|(?:^|_)fit(?:$|_)")


def per_distinct(codes: np.ndarray, distinct: pd.Series,
                 classify: Callable[[pd.Series], pd.Series]) -> np.ndarray | ExtensionArray:
    """``classify``'s answer for each name code (a position in ``distinct``, -1 for no name),
    asked once per distinct name and once, as None, for no name.

    A table holds one name per event (hundreds of thousands of kernels) but only hundreds of
    distinct names, so a regular expression per distinct name instead of per row. Answers of
    a numpy dtype are spread by numpy indexing, which casts the codes a block at a time (a
    pandas take first copies them all as int64)."""
    answers = _distinct_answers(distinct, classify)
    return (answers.to_numpy()[codes] if isinstance(answers.dtype, np.dtype)
            else answers.array.take(codes))


def _distinct_answers(distinct: pd.Series, classify: Callable[[pd.Series], pd.Series]
                     ) -> pd.Series:
    """``classify``'s answer for each of the ``distinct`` names, then for no name (None): read
    at a name code, -1 (no name) reads the last. :data:`UNRECORDED_NAME` is asked as no name."""
    import pandas as pd

    named = distinct.where(distinct != UNRECORDED_NAME, None)
    return classify(pd.concat([named, pd.Series([None], dtype=object)], ignore_index=True))


def _per_distinct(names: pd.Series, classify: Callable[[pd.Series], pd.Series]) -> pd.Series:
    """:func:`per_distinct` of a column of names (same index, the answers' dtype)."""
    import pandas as pd

    spread = per_distinct(*name_codes(names), classify)
    return pd.Series(spread, index=names.index, dtype=spread.dtype, copy=False)


#: Rows of names hashed at a time: pandas sizes its hash table by the rows it is handed, so the
#: 775k operator names of a 400 MB trace hashed at once held 36 MB beside their codes.
NAME_CODE_ROWS = 1 << 16


def name_codes(names: pd.Series) -> tuple[np.ndarray, pd.Series]:
    """Each row's name as its position among the distinct names (-1 where it has none), and
    those names: a categorical's own codes and sorted categories as they are (no pass to hash
    the rows), else the names in the order they first appear, int32 codes, the rows hashed a
    block at a time."""
    import pandas as pd

    if isinstance(names.dtype, pd.CategoricalDtype):  # its codes as they are, not a copy
        return names.array.codes, pd.Series(names.cat.categories, dtype=object)
    values = names.to_numpy(dtype=object)
    codes = np.empty(len(values), dtype=np.int32)
    number: dict[object, int] = {}
    for at in range(0, len(values), NAME_CODE_ROWS):
        block, distinct = pd.factorize(values[at:at + NAME_CODE_ROWS])
        ours = [number.setdefault(name, len(number)) for name in distinct]
        codes[at:at + len(block)] = np.array([*ours, -1], dtype=np.int32)[block]
    return codes, pd.Series(list(number), dtype=object)


def is_unrecorded_name(names: pd.Series) -> np.ndarray:
    """Whether each name is none the profiler recorded: :data:`UNRECORDED_NAME`, or empty (an
    NVTX range pushed with the text '', a ``record_function("")``), a name that says nothing of
    what its event was (a categorical's categories asked, not its rows)."""
    return names.isin([UNRECORDED_NAME, ""]).to_numpy(bool)


def is_comm_kernel(names: pd.Series) -> pd.Series:
    """Whether each kernel name is a communication (collective) kernel."""
    return _matches(names, _COMM_KERNEL)


def _label_by_pattern(names: pd.Series, patterns: dict[str, str]) -> pd.Series:
    """For each distinct name, the label of the last of ``patterns`` (label -> regex) it
    matches, <NA> for none."""
    import pandas as pd

    text = names.astype("string")
    label = pd.Series(pd.NA, index=names.index, dtype="string")
    for name, pattern in patterns.items():
        label = label.mask(text.str.contains(pattern, regex=True).fillna(False).astype(bool),
                           name)
    return label


def collective_layer(names: pd.Series) -> pd.Series:
    """Which layer of a collective call each CPU op name is ("c10d", "backend", "wrapper"), or
    <NA> for a name that is no collective."""
    return _per_distinct(names, lambda distinct: _label_by_pattern(distinct, _COLLECTIVE_LAYERS))


def collective_kind(names: pd.Series) -> pd.Series:
    """Which collective each communication kernel or CPU collective call performs (ALL_REDUCE,
    ALL_TO_ALL...), <NA> where its name does not say."""
    return _per_distinct(names, lambda distinct: _label_by_pattern(distinct, _COLLECTIVE_KINDS))


def _matches(names: pd.Series, pattern: str) -> pd.Series:
    """Whether each name matches ``pattern`` (missing names do not)."""
    return _per_distinct(names, lambda distinct: distinct.astype("string").str.contains(
        pattern, regex=True).fillna(False).astype(bool))


def recorded_copy_kind(value: object) -> str:
    """A copy direction as a profiler recorded it (``HtoD``, ``CopyHostToDevice``,
    ``hipMemcpyHostToDevice``, ``1``...) as one of COPY_KINDS; "unknown" when it says none."""
    match = _RECORDED_KIND.match(str(value)) if value is not None else None
    return RECORDED_COPY_KINDS.get(match.group(1).lower(), UNKNOWN_KIND) if match else UNKNOWN_KIND


def copy_kinds(names: pd.Series, recorded: pd.Series | None = None) -> pd.DataFrame:
    """Direction and memory kinds of each copy: columns kind (COPY_KINDS), src_kind and dst_kind
    (MEMORY_KINDS). The direction is the kind the profiler recorded with the copy (``recorded``:
    Kineto's ``args.kind`` on ROCm) when it names one, else the one in the copy's name (``Memcpy
    DtoH (Device -> Pageable)``, ROCm's ``CopyHostToDevice``); "unknown" where neither says."""
    parts = names.astype("string").str.extract(_COPY_NAME)
    parts.columns = ["kind", "src_kind", "dst_kind"]
    by_name = names.map(recorded_copy_kind)
    parts["kind"] = parts["kind"].where(parts["kind"].isin(COPY_KINDS), by_name)
    if recorded is not None:
        stated = recorded.map(recorded_copy_kind)
        parts["kind"] = stated.where(stated != UNKNOWN_KIND, parts["kind"]).to_numpy()
    for column in ("src_kind", "dst_kind"):
        parts[column] = parts[column].where(parts[column].isin(MEMORY_KINDS), UNKNOWN_KIND)
    return parts.astype(object)


#: What a copy call's name holds (cudaMemcpy, cudaMemcpyAsync, cuMemcpyDtoH, hipMemcpy...).
_COPY_CALL = "Memcpy"


def is_launch_api(names: pd.Series) -> pd.Series:
    """Whether each runtime call launches work on the GPU (see LAUNCH_APIS)."""
    return names.isin(LAUNCH_APIS)


def is_sync_api(names: pd.Series) -> pd.Series:
    """Whether each runtime call is a sync API, blocking the CPU until the GPU caught up."""
    return names.isin(SYNC_APIS)


def recorded_streams(streams: np.ndarray) -> np.ndarray:
    """Stream ids as the tables hold them: :data:`UNSET_STREAM` read as -1, unrecorded."""
    return np.where(streams == UNSET_STREAM, -1, streams)


def is_stream_wait(kinds: pd.Series) -> pd.Series:
    """Whether each GPU sync record tells a stream to wait on an event (STREAM_WAIT_KINDS): the
    stream's next work starts only once another stream's work reaches that event."""
    return kinds.isin(STREAM_WAIT_KINDS)


def _always_blocks(names: pd.Series) -> pd.Series:
    """Whether each runtime call is a sync API or a synchronous copy API, blocking whatever
    it copies."""
    return names.isin(SYNC_APIS | SYNC_COPY_APIS)


def may_block(names: pd.Series) -> pd.Series:
    """Whether each runtime call's name lets :func:`blocking_calls` choose it: a sync or
    synchronous copy API, or any copy call ("Memcpy" in its name, whose copy then decides)."""
    return _always_blocks(names) | _matches(names, _COPY_CALL)


def blocks_by_its_copy(names: pd.Series) -> pd.Series:
    """Whether each runtime call is a copy call that no name makes blocking (cudaMemcpyAsync):
    whether it blocked is its copy's to decide, through the correlation id that links them
    (see :func:`blocking_calls`)."""
    return may_block(names) & ~_always_blocks(names)


def blocking_calls(runtime: pd.DataFrame, memcpy: pd.DataFrame, ahead: np.ndarray,
                   candidates: np.ndarray | None = None) -> pd.DataFrame:
    """The runtime calls that block the CPU until the GPU catches up, with a ``label``: among
    the calls that :func:`may_block` (of the ``candidates``, positions of such calls, when
    given), the sync APIs, the synchronous copy APIs, any copy call whose copy goes from the
    device to pageable host memory (``cudaMemcpyAsync`` too: the driver must wait for the GPU
    before it can write pageable memory), labelled ``<call> DtoH to pageable``, and any other
    copy call that waited for work queued ahead of its copy: it returned only after the copy
    its correlation id links to it had ended on the GPU, and the work queued ahead of that copy
    on its device's stream (``ahead``: for each row of ``memcpy``, when that work had all
    ended, INT64 min for none, :data:`QUEUE_UNKNOWN` where its stream is unrecorded) ended
    after the call began: the GPU reached the copy only then, so the call held the CPU until
    the GPU caught up (a pageable host-to-device copy, which CUDA stages and may synchronize
    with the stream, too). A call whose copy's stream was idle as it began only waited for its
    own copy (a small pinned copy runs within the call): copy time, no wait for the GPU.
    These are labelled by the copy's direction and COPY_WAITED's reason; by what the profile
    lacks where it does not record a copy's direction, a device-to-host copy's destination
    memory (an nsys export without ``copyKind`` or ``dstKind``) or its stream: such a call
    blocked when it returned only after its copy ended (it may have gone into pageable
    memory, or waited behind queued work). Calls are judged by their name, correlation id,
    start and end alone; only the chosen ones are copied whole."""
    import pandas as pd

    rows = np.arange(len(runtime)) if candidates is None else candidates
    names = pd.Series(runtime["name"].array.take(rows))
    eligible = may_block(names).to_numpy()
    is_copy = eligible & _matches(names, _COPY_CALL).to_numpy()
    # A copy call launched the copy with its correlation id; -1 (unknown) links nothing.
    correlation = runtime["correlation"].to_numpy()[rows]
    # The calls' times read a block at a time: no two arrays of every candidate's times.
    call_start, call_end = runtime["start"].to_numpy(np.int64), runtime["end"].to_numpy(np.int64)
    groups = _copies_by_reason(memcpy, ahead == QUEUE_UNKNOWN)
    # Each call's reason as its place in the labels (0: none yet), a byte a call: no object
    # array of a million empty strings compared again for each group.
    suffixes = ("", *(label for _, label, _ in groups))
    reason = np.zeros(len(rows), dtype=np.int8)
    for code, (copies, label, behind_work) in enumerate(groups, start=1):
        keys, last_end, first_ahead = _copy_ends(memcpy, ahead, copies)
        for at in range(0, len(rows), JUDGED_CALLS):
            block = slice(at, at + JUDGED_CALLS)
            place = np.minimum(np.searchsorted(keys, correlation[block]), len(keys) - 1)
            judged = is_copy[block] & (reason[block] == 0) & (keys[place] == correlation[block])
            if label != COPY_TO_PAGEABLE:  # the others blocked if the call outlasted its copy
                judged &= last_end[place] <= call_end[rows[block]]
            if behind_work:  # ... and its copy waited for work still running as it began
                judged &= first_ahead[place] > call_start[rows[block]]
            reason[block][judged] = code
        del keys, last_end, first_ahead  # gone before the next group's are made
    chosen = np.flatnonzero((reason > 0) | (eligible & _always_blocks(names).to_numpy()))
    calls = runtime.iloc[rows[chosen]]
    return calls.assign(label=_labels(calls["name"], suffixes, reason[chosen]))


def _labels(names: pd.Series, suffixes: tuple[str, ...], reason: np.ndarray) -> pd.Categorical:
    """Each call's name followed by the suffix its ``reason`` picks, as a categorical: one
    string per distinct label, not one per call (a copy call a step labelled on a long run)."""
    import pandas as pd

    codes, distinct = name_codes(names)
    texts = [*distinct.fillna("").astype(str), ""]  # a missing name (code -1) reads ""
    width = len(suffixes)
    label_of, at = np.unique(codes.astype(np.int64) * width + reason, return_inverse=True)
    said = [texts[key // width] + suffixes[key % width] for key in label_of.tolist()]
    return pd.Categorical(np.array(said, dtype=object)[at])


#: Copy calls judged at a time against a group's copies: the lookups' arrays stay a few MB
#: beside a 10 M-kernel export's largest tables instead of a million calls' worth each.
JUDGED_CALLS = 1 << 16
#: When the work queued ahead of a copy ended, where its stream is unrecorded (see
#: blocking_calls): later than any time, as if the copy waited behind work.
QUEUE_UNKNOWN = np.iinfo(np.int64).max


def _copy_ends(memcpy: pd.DataFrame, ahead: np.ndarray, copies: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct correlation ids of the ``copies`` (a mask of ``memcpy``'s rows, not empty),
    ascending, when the last copy with each ended and when the work queued ahead of the first
    of them (the earliest ``ahead``: later ones queue behind it) had ended (int64 ns: no float
    rounding): sorted ids to search, no hash table of a group that holds most of a large
    export's copies."""
    copy_ids = memcpy["correlation"].to_numpy()[copies]
    ends = memcpy["end"].to_numpy(np.int64)[copies]
    ahead = ahead[copies]
    if (copy_ids[1:] < copy_ids[:-1]).any():  # CUPTI's ids mostly rise with the copies
        order = np.argsort(copy_ids, kind="stable")
        # One column sorted at a time, each unsorted one gone before the next is sorted.
        copy_ids = copy_ids[order]
        ends = ends[order]
        ahead = ahead[order]
        del order
    repeats = copy_ids[1:] == copy_ids[:-1]
    if not repeats.any():  # one copy per id, as CUPTI links them: no reduced copies of each
        return copy_ids, ends, ahead
    first = np.flatnonzero(np.r_[True, ~repeats])
    return copy_ids[first], np.maximum.reduceat(ends, first), np.minimum.reduceat(ahead, first)


#: How a copy call whose copy wrote pageable host memory is labelled (see blocking_calls).
COPY_TO_PAGEABLE = " DtoH to pageable"
#: How a copy call that blocked by returning only after its copy ended is labelled (see
#: blocking_calls): after its copy's direction, or by what the profile lacks to know it.
COPY_WAITED = {"recorded": " (returned after its copy ended)",
               "memory": " DtoH (returned after its copy ended; host memory kind unrecorded)",
               "direction": " (returned after its copy ended; copy direction unrecorded)",
               "stream": " (returned after its copy ended; stream unrecorded)"}


def _copies_by_reason(memcpy: pd.DataFrame, stream_unknown: np.ndarray
                      ) -> list[tuple[np.ndarray, str, bool]]:
    """The copies a correlation id links to a call, in groups (masks of ``memcpy``'s rows),
    each with the label its call takes when it blocked and whether its call blocked only when
    its copy queued behind work (not where that copy may have gone into pageable memory, nor
    where the copy's stream is unrecorded: ``stream_unknown``), in the order a call is judged:
    device-to-host into pageable memory first (such a call always blocked), then those of
    unrecorded host memory, and each direction's, those of unrecorded stream after."""
    linked = memcpy["correlation"].to_numpy() >= 0
    kinds = memcpy["kind"]  # compared as pandas columns: a categorical's codes, no objects
    dtoh = linked & (kinds == DTOH).to_numpy(bool)
    pageable = (memcpy["dst_kind"] == PAGEABLE).to_numpy(bool)
    unrecorded = (memcpy["dst_kind"] == UNKNOWN_KIND).to_numpy(bool)
    groups = [(dtoh & pageable, COPY_TO_PAGEABLE, False),
              (dtoh & unrecorded, COPY_WAITED["memory"], False)]
    rest = linked & ~(dtoh & (pageable | unrecorded))
    for kind in kinds[rest].drop_duplicates().sort_values():  # as groupby(sort=True) orders
        mine = rest & (kinds == kind).to_numpy(bool)
        if kind == UNKNOWN_KIND:  # a copy of unknown direction may go into pageable memory
            groups.append((mine, COPY_WAITED["direction"], False))
            continue
        groups += [(mine & ~stream_unknown, f" {kind}{COPY_WAITED['recorded']}", True),
                   (mine & stream_unknown, f" {kind}{COPY_WAITED['stream']}", False)]
    return [group for group in groups if group[0].any()]


def is_reduced_precision_kernel(names: pd.Series) -> pd.Series:
    """Whether each kernel computes in fp16/bf16 (mixed precision is on for its work)."""
    return _matches(names, _REDUCED_PRECISION_KERNEL)


def is_tf32_kernel(names: pd.Series) -> pd.Series:
    """Whether each kernel's name says it runs fp32 math as TF32 on tensor cores."""
    return _matches(names, _TF32_KERNEL)


def op_family(names: pd.Series) -> pd.Series:
    """Which family each CPU op belongs to (MATMUL, CONVOLUTION, BATCH_NORM, POINTWISE), <NA>
    for others."""
    return _per_distinct(names, lambda distinct: _label_by_pattern(distinct, _OP_FAMILIES))


_INPUT_CHECKED_OP = re.compile("|".join(f"(?:{p})" for p in _OP_FAMILIES.values()))


def is_input_checked_name(name: str) -> bool:
    """Whether a CPU op is one whose inputs (dtypes, shapes) the analysis checks: one of an
    :func:`op_family` (for a parser classifying names as they come)."""
    return _INPUT_CHECKED_OP.match(name) is not None


def precision_of(types: tuple[str, ...] | None) -> str | None:
    """What an operator computes in, from its inputs' dtype names: "reduced" (fp16/bf16/fp8
    among them), "fp32", "other" (fp64, integers), or None when no types were recorded."""
    if types is None:
        return None
    computes = {DTYPES[name][1] for name in types if name in DTYPES}
    return REDUCED if REDUCED in computes else FP32 if FP32 in computes else "other"


#: The memory formats a convolution's input can be told to be in (torch.memory_format names).
CHANNELS_LAST, CONTIGUOUS = "channels_last", "contiguous"


def memory_format(dims: tuple[int, ...], strides: tuple[int, ...]) -> str | None:
    """The memory format of a 4-D (N, C, H, W) or 5-D (N, C, D, H, W) tensor from its sizes and
    strides: CONTIGUOUS when they are the row-major ones, CHANNELS_LAST when the channel is
    innermost (channels_last, channels_last_3d); None when neither, or when both fit (a single
    channel, or one pixel: the layouts coincide). Dimensions of size 1 have any stride."""
    if len(dims) not in (4, 5) or len(strides) != len(dims):
        return None
    channels_inner = (0, *range(2, len(dims)), 1)
    fits = [name for name, order in ((CONTIGUOUS, tuple(range(len(dims)))),
                                     (CHANNELS_LAST, channels_inner))
            if _strides_in_order(dims, strides, order)]
    return fits[0] if len(fits) == 1 else None


def _strides_in_order(dims: tuple[int, ...], strides: tuple[int, ...],
                      order: tuple[int, ...]) -> bool:
    """Whether ``strides`` are those of a dense tensor whose dimensions lie in memory in
    ``order`` (outermost first), ignoring dimensions of size 1."""
    expected = 1
    for axis in reversed(order):
        if dims[axis] != 1 and strides[axis] != expected:
            return False
        expected *= dims[axis]
    return True


def takes_conv_bias(names: pd.Series) -> pd.Series:
    """Whether each convolution op's third input is its bias."""
    return _matches(names, _CONV_WITH_BIAS_ARGUMENT)


def is_transposed_conv(names: pd.Series) -> pd.Series:
    """Whether each convolution op is a transposed one (weight is in x out channels)."""
    return _matches(names, _TRANSPOSED_CONV)


def is_tensor_dtype(name: str) -> bool:
    """Whether an ``Input type`` names a floating-point tensor (not None, a list or a scalar)."""
    return name in DTYPES and DTYPES[name][1] is not None


def is_rocm_api(names: pd.Series) -> pd.Series:
    """Whether each runtime call is ROCm's HIP runtime (an AMD GPU)."""
    return _matches(names, r"^hip")


def collective_library(kernels: pd.Series, runtime: pd.Series) -> str:
    """The library of a GPU trace's communication kernels (``kernels``: their names), by what
    launched them: RCCL where the trace records ROCm's HIP runtime (``runtime``: the calls'
    names), for RCCL keeps NCCL's kernel names, or a kernel is named ``rccl...``; else NCCL."""
    if bool(is_rocm_api(runtime).any()) or bool(_matches(kernels, r"^rccl").any()):
        return "RCCL"
    return "NCCL"


def is_layout_conversion_kernel(names: pd.Series) -> pd.Series:
    """Whether each kernel only converts between NCHW and NHWC memory layouts."""
    return _matches(names, _LAYOUT_CONVERSION_KERNEL)


def is_fused_optimizer_kernel(names: pd.Series) -> pd.Series:
    """Whether each kernel is a multi-tensor (foreach/fused) optimizer kernel."""
    return _matches(names, _MULTI_TENSOR_KERNEL) & ~_matches(names, _AMP_SCALER_KERNEL)


def is_zero_grad_span(names: pd.Series) -> pd.Series:
    """Whether each CPU op or range is an ``optimizer.zero_grad()`` call."""
    return _matches(names, _ZERO_GRAD_SPAN)


def is_zero_fill_op(names: pd.Series) -> pd.Series:
    """Whether each CPU op writes zeros into a tensor in place (``aten::zero_``...)."""
    return _matches(names, _ZERO_FILL_OP)


def is_backward_op(names: pd.Series) -> pd.Series:
    """Whether each CPU op is an autograd engine node of the backward pass."""
    return _matches(names, _BACKWARD_OP)


def is_training_work(names: pd.Series) -> pd.Series:
    """Whether each CPU op or range is work only training does: a node of the backward pass
    or an optimizer step (a DataLoader fetch that such work follows fed training; see
    reports.analysis.dataloader.training_fetches)."""
    return is_backward_op(names) | is_optimizer_step_span(names)


def is_elementwise_kernel(names: pd.Series) -> pd.Series:
    """Whether each kernel is one of ATen's elementwise kernels (one launch per pointwise op)."""
    return _matches(names, _ELEMENTWISE_KERNEL)


def is_dataparallel_op(names: pd.Series) -> pd.Series:
    """Whether each CPU op or range is one of nn.DataParallel's autograd functions."""
    return _matches(names, _DATAPARALLEL_OP)


def is_dataparallel_forward(names: pd.Series) -> pd.Series:
    """Whether each CPU op or range is nn.DataParallel's own forward (not DDP's)."""
    return _matches(names, _DATAPARALLEL_FORWARD)


def is_ddp_forward(names: pd.Series) -> pd.Series:
    """Whether each CPU op or range is DistributedDataParallel's forward."""
    return _matches(names, _DDP_FORWARD)


def is_optimizer_step_span(names: pd.Series) -> pd.Series:
    """Whether each CPU op or range is one optimizer step."""
    return _matches(names, _OPTIMIZER_STEP_SPAN)


def optimizer_class(name: str) -> str | None:
    """The optimizer a torch.profiler step span names (``Optimizer.step#AdamW.step`` ->
    ``AdamW``), or None (an NVTX ``optimizer`` range does not say)."""
    match = _OPTIMIZER_CLASS.match(name)
    return match.group(1) if match else None


def is_slow_fallback_op(names: pd.Series) -> pd.Series:
    """Whether each CPU op is one of ATen's slow reference kernels (no oneDNN kernel fit)."""
    return _matches(names, _SLOW_FALLBACK_OP)


def is_onednn_op(names: pd.Series) -> pd.Series:
    """Whether each CPU op runs on oneDNN (mkldnn), the optimised CPU path."""
    return _matches(names, _ONEDNN_OP)


def is_compiled_region(names: pd.Series) -> pd.Series:
    """Whether each CPU span is code torch.compile compiled (a Dynamo frame or AOTAutograd's
    compiled graph)."""
    return _matches(names, _COMPILED_REGION)


def is_compile_span(names: pd.Series) -> pd.Series:
    """Whether each CPU span is torch.compile compiling (see COMPILE_SPANS)."""
    return _per_distinct(names, lambda distinct: distinct.isin(COMPILE_SPANS))


def is_cpu_collective(names: pd.Series) -> pd.Series:
    """Whether each CPU op name is a collective call (gloo/NCCL process group, c10d)."""
    return collective_layer(names).notna().astype(bool)


#: What the dispatcher and the autograd engine name what they run: a C++ name, namespaced or not
#: (``aten::add``, ``c10d::allreduce_``, ``torch::autograd::AccumulateGrad``, the 2021 format's
#: ``detach`` and autograd nodes such as ``CudnnConvolutionBackward``), the autograd engine's
#: record followed by the node it runs (``autograd::engine::evaluate_function:
#: ConvolutionBackward0``). A span the program opens (``record_function``) carries the name
#: Python gave it: a module's forward (``DistributedDataParallel.forward``),
#: ``Optimizer.step#SGD.step``, ``enumerate(DataLoader)#...``, ``ProfilerStep#3``,
#: ``## forward ##``.
_DISPATCHED_OP = r"^[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*(?:: [A-Za-z_]\w*)?$"


#: The autograd engine's record around each backward node it runs: the engine enters it with
#: no inputs (``RECORD_FUNCTION(..., {})`` in torch/csrc/autograd/engine.cpp), as
#: ``record_function`` does, yet it is no span the program opened.
_ENGINE_RECORD = r"^autograd::engine::evaluate_function: "


def is_program_span(names: pd.Series, records_inputs: np.ndarray | None = None) -> pd.Series:
    """Whether each name of the 2021 Kineto format's ``Operator`` category (which holds every
    span, that format having no ``user_annotation`` category) is a span the program opened, not
    an operator the dispatcher or autograd ran: a name no C++ operator takes (see
    :data:`_DISPATCHED_OP`), or, where the trace records the operators' inputs
    (``record_shapes``; ``records_inputs`` then says whether any event of each name recorded
    one), a name that never recorded an input: the dispatcher enters every operator's
    RecordFunction with its arguments, ``record_function`` enters its own with none (the
    engine's evaluate_function record, see :data:`_ENGINE_RECORD`, aside). Such a span encloses
    the operators it calls; its own time is Python, not an operator's work. Without recorded
    inputs a user's ``record_function("forward")`` is a C++-like name and stays an operator:
    the format records nothing else that tells them apart."""
    unnamed = ~_matches(names, _DISPATCHED_OP)
    if records_inputs is None:
        return unnamed
    engine = _matches(names, _ENGINE_RECORD).to_numpy(bool)
    return unnamed | (~np.asarray(records_inputs, dtype=bool) & ~engine)


def is_framework_op(names: pd.Series) -> pd.Series:
    """Whether each CPU op is the framework's own work: not a step span, a DataLoader wait or a
    collective call."""
    special = step_numbers(names).notna() | is_dataloader_span(names) | is_cpu_collective(names)
    return ~special.astype(bool)


def step_range_name(number: int) -> str:
    """The NVTX range name profreport's runner gives iteration ``number`` (``step 3``)."""
    return STEP_RANGE_FORMAT.format(n=number)


def rank_mark_name(rank: int, world_size: int) -> str:
    """The NVTX mark rank ``rank`` of a job of ``world_size`` records (``rank 1 of 2``)."""
    return RANK_MARK_FORMAT.format(rank=rank, world_size=world_size)


def rank_of_mark(text: str) -> tuple[int, int] | None:
    """The (rank, world size) a mark of :data:`RANK_DOMAIN` records; None for another text, a
    rank outside its world or a world size past MAX_WORLD_SIZE."""
    match = _RANK_MARK.match(text)
    if match is None:
        return None
    rank, world_size = int(match.group(1)), int(match.group(2))
    return (rank, world_size) if rank < world_size <= MAX_WORLD_SIZE else None


def one_row_per_step(steps: pd.DataFrame) -> pd.DataFrame:
    """Steps in time order with one row per step number: the first span recorded with a number
    (a trace can repeat a step's span, e.g. on the GPU user-annotation track)."""
    return steps.sort_values("start", kind="stable").drop_duplicates("number", keep="first")


def stepping_thread(marks: pd.DataFrame) -> np.ndarray:
    """Which of the step marks (:func:`step_marks`, not empty) are the thread's that records
    the most of them (the first in (pid, tid) order on a tie): the steps of one profile are
    one loop's. One thread's marks follow one another (``prof.step()`` closes a span before it
    opens the next; a push/pop range nests); another thread's or process's (another rank's of
    traces read as one, another loop's) cover the same time under numbers of their own, and
    taken with them would count that time twice, as steps that are no iterations of this
    loop."""
    pid, tid = marks.groupby(["pid", "tid"], observed=True).size().idxmax()
    return ((marks["pid"] == pid) & (marks["tid"] == tid)).to_numpy(bool)


def _step_numbers(names: pd.Series) -> pd.Series:
    """:func:`step_numbers` of distinct names; a number past int64 (``ProfilerStep#`` and 20
    digits) is no loop's count, and its name marks no step."""
    import pandas as pd

    parts = names.astype("string").str.extract(_STEP)
    digits = parts[0].fillna(parts[1])
    countable = [number is not pd.NA and int(number) < 1 << 63 for number in digits]
    return digits.where(pd.Series(countable, index=digits.index, dtype=bool)).astype("Int64")


def is_profiler_step_span(names: pd.Series) -> pd.Series:
    """Whether each step span is one torch.profiler opened (``ProfilerStep#N``)."""
    return _matches(names, _PROFILER_STEP_SPAN)


def step_numbers(names: pd.Series) -> pd.Series:
    """The iteration number each range name marks: nullable Int64, <NA> where it marks no step."""
    return _per_distinct(names, _step_numbers)


def step_marks(ranges: pd.DataFrame) -> pd.DataFrame:
    """The ranges that mark the steps, with their ``number``: torch.profiler's ``ProfilerStep#N``
    spans when there are any, else a user's ``step N`` ranges; never both, whose numbers and
    bounds need not agree (a loop annotating its own steps inside the profiler's counts from 0
    while ``ProfilerStep#N`` goes on counting the profiler's skipped and warm-up steps)."""
    codes, distinct = name_codes(ranges["name"])
    numbers = _distinct_answers(distinct, _step_numbers)
    # Each row's number read only at the rows that mark a step: a step's number spread over
    # every range (4.5 M on a 10 M-kernel export) held 80 MB beside them.
    rows = np.flatnonzero(numbers.notna().to_numpy(bool)[codes])
    marks = ranges.iloc[rows].assign(number=numbers.array.take(codes[rows]))
    profiler = is_profiler_step_span(marks["name"]).to_numpy()
    return marks[profiler] if profiler.any() else marks


def step_marker(origin: str, span: str | None) -> str:
    """What each step is, from the ``steps`` table's origin: the stretch from one optimizer
    step's end to the next one's, the repeated span ``span`` (start to next start) when no
    marker names the steps, else the annotated range that marks each."""
    if origin == OPTIMIZER_STEPS:
        return "optimizer step to optimizer step"
    if origin == REPEATED_SPAN and span is not None:
        return f"repeated span '{span}'"
    return ANNOTATED_RANGE


def steps_note(origin: str, span: str | None, count: int, last: str | None = None
               ) -> str | None:
    """The note saying where ``count`` steps of a Kineto trace came from when no ProfilerStep
    span marks them (see :func:`step_marker`), with ``last`` where the last of a repeated span's
    steps runs to its own end (what is recorded past it: why, and whether that is its whole
    pass); None when a ProfilerStep span marks them."""
    if origin == OPTIMIZER_STEPS and span is not None:
        return (f"no ProfilerStep span: the {count:,} steps run from the end of one step of the "
                f"first optimizer, {error_text(span)}, to the end of its next (the trace's "
                "optimizer steps are those of several optimizers: one step of each is one "
                "iteration; the time before the first one's end is no step's)")
    if origin == OPTIMIZER_STEPS:
        return (f"no ProfilerStep span: the {count:,} steps run from the end of one optimizer "
                "step to the end of the next (the time before the first one's end is no step's)")
    if origin == REPEATED_SPAN:
        return (f"no ProfilerStep span or optimizer step: the {count:,} steps are the repeated "
                f"span '{error_text(span)}', each from its start to the next one's"
                + (f", the last to its own end: {last}" if last else ""))
    return None


def _dataloader_spans(names: pd.Series) -> pd.Series:
    """:func:`is_dataloader_span` of distinct names."""
    text = names.astype("string")
    hits = text.str.contains(_DATALOADER_SPAN, regex=True)
    hits |= text.str.strip().str.lower().isin(DATALOADER_RANGE_NAMES)
    return hits.fillna(False).astype(bool)


def is_dataloader_span(names: pd.Series) -> pd.Series:
    """Whether each CPU span is the training loop waiting for the next batch."""
    return _per_distinct(names, _dataloader_spans)


def is_training_fetch_range(names: pd.Series) -> pd.Series:
    """Whether each DataLoader span is the range profreport's runner opens around a fetch for
    training (DATALOADER_RANGE; any other fetch it names OTHER_LOADER_RANGE, no fetch), whose
    name alone says the fetch fed training."""
    return _matches(names, rf"^{re.escape(DATALOADER_RANGE)}$")


def is_other_fetch_range(names: pd.Series) -> pd.Series:
    """Whether each range is the one profreport's runner opens around a fetch that feeds no
    training (OTHER_LOADER_RANGE): a fetch the capture records, though no DataLoader wait."""
    return _matches(names, rf"^{re.escape(OTHER_LOADER_RANGE)}$")


def is_in_process_loader_span(names: pd.Series) -> pd.Series:
    """Whether each DataLoader span is a single-process iterator (``num_workers=0``)."""
    return _matches(names, _IN_PROCESS_LOADER)


def is_worker_loader_span(names: pd.Series) -> pd.Series:
    """Whether each DataLoader span is a multi-process iterator (``num_workers > 0``)."""
    return _matches(names, _WORKER_LOADER)


def strip_api_version(name: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``."""
    return _API_VERSION_SUFFIX.sub("", name)


def short_kernel_name(name: str) -> str:
    """A kernel's name without return type, template arguments and parameter list."""
    text = name.strip()
    if text.startswith("void "):
        text = text[5:]
    depth = 0
    out = []
    for char in text:
        if char in "<(":
            if depth == 0 and char == "(":
                break
            depth += 1
            continue
        if char in ">)":
            depth = max(depth - 1, 0)
            continue
        if depth == 0:
            out.append(char)
    short = "".join(out).strip()
    return short.rsplit("::", 1)[-1] if short else name


def is_training_function(name: str) -> bool:
    """Whether a profiled function's name says it runs the training loop."""
    return _TRAINING_FUNCTION.search(name) is not None


#: CPUs each training process keeps for its own loop (the model's operators, one intra-op
#: thread under the runner's jobs); the rest of its share can run DataLoader workers.
LOOP_CPUS = 1


def worker_cpus(cpus: int, processes: int = 1) -> int:
    """CPUs each of ``processes`` training processes sharing ``cpus`` leaves its DataLoader
    workers: its share less LOOP_CPUS (0 or less: none to spare). The runner sizes the
    ``workers`` variant by it and the DataLoader advice caps its workers by it."""
    return cpus // processes - LOOP_CPUS
