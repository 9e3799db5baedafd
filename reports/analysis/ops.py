"""What the framework's operators say about the model: matmul/convolution precision against the
GPU's tensor cores, and convolutions with a bias feeding BatchNorm.

The evidence is torch.profiler's ``Input type``/``Input Dims`` of each operator (the parser's
``op_inputs`` table, ``record_shapes=True``), the compute capability of the GPU that ran the work
(``devices``), and the kernels each operator launched: GPU kernel -> runtime call with the same
correlation id -> the operator on that call's thread whose span holds the call. ``aten::conv2d``
holds ``convolution`` -> ``_convolution`` -> ``cudnn_convolution``: precision is read at the
innermost layer, the one that computes and launches the kernels (under autocast the outer
``conv2d`` still takes the fp32 tensors and an inner ``conv2d`` their bf16 casts); a
convolution's bias and the op that follows it are read at the outermost layer, the model's call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from profreport import concepts, searches
from profreport.model import Profile, ids_at, position_dtype
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.launches import launch_calls, launched_in_windows, unlinked
from profreport.reports.analysis.results import (
    ConvBiasStats,
    ConvFormats,
    OpDtypes,
    OpPrecision,
    PrecisionReading,
    RunMetrics,
    origin_label,
)
from profreport.reports.analysis.steps import StepWindows

#: Precision labels of :func:`concepts.precision_of`, plus operators whose types were not recorded.
UNRECORDED = "unrecorded"
#: The precisions an operator's kernel time is counted under, in the order they are reported.
PRECISIONS = ("fp32", "reduced", "other", UNRECORDED)


def outermost(ops: pd.DataFrame) -> pd.DataFrame:
    """The ops not nested inside another op of ``ops`` on the same thread, sorted by thread and
    start."""
    ordered = ops.sort_values(["pid", "tid", "start", "end"], ascending=[True, True, True, False],
                              kind="stable")
    threads = [ordered["pid"], ordered["tid"]]
    reached = ordered.groupby(threads, sort=False)["end"].cummax()
    before = reached.groupby(threads, sort=False).shift(fill_value=np.iinfo(np.int64).min)
    return ordered[(ordered["start"] >= before).to_numpy()]


def innermost(ops: pd.DataFrame) -> pd.DataFrame:
    """The ops of ``ops`` that hold no other op of ``ops`` on their thread."""
    ordered = ops.sort_values(["pid", "tid", "start", "end"], ascending=[True, True, True, False],
                              kind="stable")
    following = ordered.groupby([ordered["pid"], ordered["tid"]], sort=False)["start"].shift(-1)
    return ordered[(following.isna() | (following >= ordered["end"])).to_numpy()]


def launching_op(profile: Profile, spans: pd.DataFrame, call: np.ndarray) -> np.ndarray:
    """For GPU rows launched by the runtime calls ``call`` (rows of the runtime table, -1 for
    none; see launches.launch_calls), the position in ``spans`` (non-overlapping per thread) of
    the span whose thread made the launching call inside it; -1 for none."""
    out = np.full(len(call), -1, dtype=position_dtype(len(spans)))
    if spans.empty or len(call) == 0:
        return out
    runtime = profile.table("runtime")
    with_call = np.flatnonzero(call >= 0)
    call = call[with_call]
    call_pid, call_tid = ids_at(runtime["pid"], call), ids_at(runtime["tid"], call)
    call_start = runtime["start"].to_numpy(np.int64)[call]
    positions = pd.Series(np.arange(len(spans)), index=spans.index)
    for (pid, tid), mine in spans.groupby(["pid", "tid"], sort=False):
        starts, ends = mine["start"].to_numpy(np.int64), mine["end"].to_numpy(np.int64)
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        where = positions[mine.index].to_numpy()[order]
        mask = (call_pid == pid) & (call_tid == tid)
        rows, at = with_call[mask], call_start[mask]
        slot = searches.searchsorted(starts, at, side="right") - 1
        inside = (slot >= 0) & (at < ends[np.maximum(slot, 0)])
        out[rows[inside]] = where[slot[inside]]
    return out


def _stepped_kernels(profile: Profile, windows: StepWindows | None) -> np.ndarray:
    """Which kernels are compute kernels launched inside the step windows (every compute
    kernel without windows)."""
    compute = ~profile.table("kernels")["is_comm"].to_numpy(bool)
    if windows is not None:
        compute &= launched_in_windows(profile, "kernels", windows)
    return compute


def _durations(profile: Profile, rows: np.ndarray) -> np.ndarray:
    """How long each of the kernel ``rows`` ran."""
    kernels = profile.table("kernels")
    duration = kernels["end"].to_numpy(np.int64)[rows]
    duration -= kernels["start"].to_numpy(np.int64)[rows]
    return duration


def _capability(devices: pd.DataFrame,
                ran_on: list[int]) -> tuple[tuple[int, int] | None, str | None]:
    """Compute capability and name of the GPUs ``ran_on`` (the devices the kernels ran on;
    the lowest when they differ); None when the profiles do not record it."""
    ran = devices[devices["device"].isin(ran_on)]
    known = ran[(ran["compute_major"] >= 0) & (ran["compute_minor"] >= 0)]
    if known.empty:
        return None, (str(ran["name"].iloc[0]) if not ran.empty else None)
    lowest = known.sort_values(["compute_major", "compute_minor"]).iloc[0]
    return (int(lowest["compute_major"]), int(lowest["compute_minor"])), str(lowest["name"])


def _unknown_reason(profile: Profile, units: pd.DataFrame,
                    capability: tuple[int, int] | None) -> str | None:
    """Why the precision of the matmuls and convolutions cannot be judged, or None when it can."""
    if not profile.meta.records_torch_spans:
        return (f"{origin_label(profile.kind)} records no operator input dtypes (only "
                "torch.profiler with record_shapes=True does)")
    if units.empty:
        return None
    if units["precision"].eq(UNRECORDED).all():
        return (f"the trace's {len(units)} matmul/convolution calls carry no 'Input type' "
                "(torch.profiler ran without record_shapes=True)")
    if bool(concepts.is_rocm_api(profile.table("runtime")["name"]).any()):
        return "the trace is from a ROCm (AMD) GPU, whose matrix cores this check does not model"
    if capability is None and units["precision"].eq("fp32").any():
        return ("the trace does not record the GPU's compute capability (deviceProperties "
                "computeMajor/computeMinor), so whether it has tensor cores is unknown")
    return None


def op_precision(profile: Profile, devices: pd.DataFrame,
                 windows: StepWindows | None) -> OpPrecision | None:
    """What the matmul and convolution operators compute in, and the GPU kernel time each
    precision launched, against the GPU's compute capability; None without GPU kernels."""
    stepped = _stepped_kernels(profile, windows)
    if not stepped.any():
        return None
    kernels = profile.table("kernels")
    units = _precision_units(profile)
    per_precision, fp32_rows, fp32_launcher, ran_on, unlinked_ns = _kernel_precisions(
        profile, units, stepped)
    kernel_ns = {label: int(per_precision[code]) for code, label in enumerate(PRECISIONS)}
    in_steps = units if windows is None else units[windows.index_of(
        units["start"].to_numpy(np.int64)) >= 0]
    duration = _durations(profile, fp32_rows)
    tf32 = concepts.is_tf32_kernel(kernels["name"]).to_numpy(bool)[fp32_rows] \
        if len(fp32_rows) else np.zeros(0, dtype=bool)
    capability, device_name = _capability(devices, ran_on)
    by_name = pd.Series(duration, index=np.append(units["name"].to_numpy(object),
                                                  "")[fp32_launcher])
    return OpPrecision(
        origin=profile.kind, compute_capability=capability, device_name=device_name,
        steps=windows.count if windows is not None else None,
        calls={label: int((in_steps["precision"] == label).sum()) for label in PRECISIONS},
        kernel_ns=kernel_ns, compute_kernel_ns=int(per_precision.sum()),
        fp32_ops=list(by_name.groupby(level=0).sum().sort_values(ascending=False).index),
        tf32_kernel_fraction=(float(duration[tf32].sum()) / kernel_ns["fp32"]
                              if kernel_ns["fp32"] else 0.0),
        unknown_reason=_unknown_reason(profile, units, capability),
        longest_fp32=_longest_call(units, fp32_launcher, duration),
        unlinked_kernel_ns=unlinked_ns,
        # Without a unit no kernel's launch call was gathered (see _kernel_precisions).
        launches_unknown=None if units.empty else unlinked(profile, "kernels", stepped,
                                                           "in the steps"))


def _kernel_precisions(profile: Profile, units: pd.DataFrame, stepped: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int], int]:
    """Over the ``stepped`` kernels (a mask), read :data:`intervals.BLOCK_ROWS` kernels at a
    time (no array as long as the kernels): the kernel time per precision of the unit that
    launched each (the last slot: launched by none), the positions of the kernels an fp32 unit
    launched and that unit's position in ``units``, the devices the kernels ran on, and the
    time of the kernels linked to no launch call (0 without units: no call is gathered)."""
    kernels = profile.table("kernels")
    starts, ends = kernels["start"].to_numpy(np.int64), kernels["end"].to_numpy(np.int64)
    devices = kernels["device"].to_numpy()
    # Each unit's precision as its place in PRECISIONS: position -1 (launched by no
    # matmul/convolution) reads the trailing -1.
    codes = np.append(pd.Categorical(units["precision"], categories=PRECISIONS).codes,
                      np.int8(-1))
    # Without a unit (nsys records no operator inputs) no kernel has one to launch it: the
    # launch calls of 10 M kernels are not gathered to find none.
    calls = launch_calls(profile, "kernels") if not units.empty else None
    per_precision = np.zeros(len(PRECISIONS) + 1, dtype=np.int64)
    fp32_rows, fp32_launcher, ran_on = [np.empty(0, np.intp)], [np.empty(0, np.intp)], set()
    unlinked_ns = 0
    for block in iv.blocks(len(kernels)):
        rows = np.flatnonzero(stepped[block]) + block.start
        launcher = launching_op(profile, units, calls[rows]) if calls is not None \
            else np.full(len(rows), -1, dtype=np.int8)
        precision = codes[launcher]
        duration = ends[rows] - starts[rows]
        np.add.at(per_precision, precision, duration)
        if calls is not None:
            unlinked_ns += int(duration[calls[rows] < 0].sum())
        fp32 = precision == PRECISIONS.index("fp32")
        fp32_rows.append(rows[fp32])
        fp32_launcher.append(launcher[fp32])
        ran_on.update(pd.unique(devices[rows]).tolist())
    return (per_precision, np.concatenate(fp32_rows), np.concatenate(fp32_launcher),
            sorted(ran_on), unlinked_ns)


def _precision_units(profile: Profile) -> pd.DataFrame:
    """The matmul and convolution calls at their innermost layer, the one that computes (under
    autocast the outer aten::conv2d still takes the fp32 tensors, the inner one their bf16
    casts), each with its precision label."""
    ops = profile.table("op_inputs")
    family = concepts.op_family(ops["name"])
    units = innermost(ops[family.isin([concepts.MATMUL, concepts.CONVOLUTION]).to_numpy()])
    return units.assign(precision=[concepts.precision_of(t) or UNRECORDED
                                   for t in units["input_types"]])


def op_dtypes(profile: Profile, windows: StepWindows | None) -> OpDtypes | None:
    """A CPU-only run's matmul and convolution calls: their own time by the precision of their
    recorded inputs; None when the profile records no such call."""
    units = _precision_units(profile)
    if windows is not None:
        units = units[windows.index_of(units["start"].to_numpy(np.int64)) >= 0]
    if units.empty:
        return None
    spent = (units["end"] - units["start"]).groupby(units["precision"]).sum()
    return OpDtypes(origin=profile.kind,
                    ns={label: int(spent.get(label, 0)) for label in PRECISIONS})


def share_of_recorded(part_ns: int, recorded_ns: int) -> float | None:
    """``part_ns``'s share of the time whose evidence the profile recorded (the calls' input
    dtypes, the kernels' names); None when none was: time without it is no evidence either
    way, so it is in neither."""
    return part_ns / recorded_ns if recorded_ns else None


def _reduced_of_recorded(spent: dict[str, int]) -> float | None:
    """Share in fp16/bf16 of the time of the calls whose input dtypes were recorded (GPU kernel
    time they launched, or their own time), by precision label; None when none was."""
    recorded = sum(ns for label, ns in spent.items() if label != UNRECORDED)
    return share_of_recorded(spent.get("reduced", 0), recorded)


def reduced_precision(m: RunMetrics) -> PrecisionReading:
    """The share of the matmul/convolution work in fp16/bf16 and what it is read from: their
    recorded input dtypes (of the GPU kernel time they launched, or of their own time on a
    CPU: what autocast casts, whatever the GPU's tensor cores), else the GPU kernels' names (a
    hint, of the compute-kernel time whose names were recorded); unknown, and why, when
    neither is there."""
    for spent in (m.op_precision.kernel_ns if m.op_precision is not None else {},
                  m.op_dtypes.ns if m.op_dtypes is not None else {}):
        share = _reduced_of_recorded(spent)
        if share is not None:
            return PrecisionReading(share, "operator input dtypes")
    if m.kernel_mix is not None and m.kernel_mix.reduced_precision_fraction is not None:
        return PrecisionReading(m.kernel_mix.reduced_precision_fraction, "kernel names")
    names = ("" if m.kernel_mix is None or m.kernel_mix.names_unknown is None
             else f"; {m.kernel_mix.names_unknown}")
    if m.op_dtypes is not None:
        return PrecisionReading(None, "the matmuls and convolutions carry no input dtypes "
                                f"(torch.profiler ran without record_shapes=True){names}")
    return PrecisionReading(None, "no profile records the matmuls' and convolutions' input "
                                  f"dtypes (torch.profiler with record_shapes=True does){names}")


def _longest_call(units: pd.DataFrame, launcher: np.ndarray,
                  duration: np.ndarray) -> tuple[int, int] | None:
    """Start and end of the unit whose kernels (``launcher`` positions, ``duration``) add up to
    the most time; None without any."""
    if not len(launcher):
        return None
    busiest = int(np.bincount(launcher, weights=duration).argmax())
    return int(units["start"].iloc[busiest]), int(units["end"].iloc[busiest])


def _has_bias(types: tuple[str, ...] | None, dims: tuple[tuple[int, ...], ...] | None) -> bool:
    """Whether a convolution's recorded third input (its bias) is a tensor."""
    return (types is not None and dims is not None and len(types) > 2 and len(dims) > 2
            and concepts.is_tensor_dtype(types[2]) and len(dims[2]) > 0)


#: How many ops after a convolution are looked at for its BatchNorm: BatchNorm's own bookkeeping
#: is one op; a longer run of scalar updates would be something else.
FOLLOWING_OPS = 8


@dataclass(frozen=True)
class _ThreadOps:
    """One thread's CPU ops sorted by start (the outermost first among equal starts), with their
    op family and recorded input shapes (None when not kept or not recorded)."""

    start: np.ndarray
    end: np.ndarray
    family: np.ndarray
    dims: np.ndarray


def thread_ops(profile: Profile) -> dict[tuple[int, int], _ThreadOps]:
    """Each thread's CPU ops with their family and recorded input shapes."""
    keys = ["pid", "tid", "start", "end", "name"]
    ops = profile.table("cpu_ops").merge(
        profile.table("op_inputs")[[*keys, "input_dims"]].drop_duplicates(keys), how="left",
        on=keys).sort_values(["start", "end"], ascending=[True, False], kind="stable")
    ops["family"] = concepts.op_family(ops["name"]).astype(object)
    return {(int(pid), int(tid)): _ThreadOps(
        mine["start"].to_numpy(np.int64), mine["end"].to_numpy(np.int64),
        mine["family"].to_numpy(object), mine["input_dims"].to_numpy(object))
        for (pid, tid), mine in ops.groupby(["pid", "tid"])}


def _only_scalars(dims: object) -> bool:
    """Whether an op's recorded input shapes are all scalars (it touches no activation)."""
    return isinstance(dims, tuple) and all(isinstance(d, tuple) and not d for d in dims)


def feeds_batch_norm(conv: pd.Series, ops: _ThreadOps) -> bool:
    """Whether the op after a convolution on its thread is batch_norm on its output: between
    them only pointwise ops on scalars (BatchNorm's ``num_batches_tracked += 1``), and the
    BatchNorm's recorded input is the convolution's output shape."""
    index = int(searches.searchsorted(ops.start, int(conv["end"]), side="left"))
    reached, seen = np.iinfo(np.int64).min, 0
    while index < len(ops.start) and seen < FOLLOWING_OPS:
        if ops.start[index] >= reached:  # a top-level op after the convolution
            if ops.family[index] == concepts.BATCH_NORM:
                return _output_matches(conv, ops.dims[index])
            if ops.family[index] != concepts.POINTWISE or not _only_scalars(ops.dims[index]):
                return False
            reached, seen = int(ops.end[index]), seen + 1
        index += 1
    return False


def _output_matches(conv: pd.Series, norm_dims: object) -> bool:
    """Whether a BatchNorm input shape is the convolution's output: same rank and batch, and its
    channels are the convolution's out channels (weight dim 0; not checked when transposed)."""
    dims = conv["input_dims"]
    if not isinstance(norm_dims, tuple) or not norm_dims or dims is None or len(dims) < 2:
        return False
    batch, weight, norm_input = dims[0], dims[1], norm_dims[0]
    if len(norm_input) != len(batch) or not batch or norm_input[0] != batch[0]:
        return False
    return bool(conv["transposed"]) or (len(norm_input) > 1 and bool(weight)
                                        and norm_input[1] == weight[0])


def _bias_kernel_ns(profile: Profile, convs: pd.DataFrame, chosen: pd.DataFrame,
                    windows: StepWindows | None) -> int | None:
    """Kernel time the ``chosen`` convolutions launched outside the innermost convolution ops
    inside them (the bias add ATen launches after cuDNN's kernel); None when none."""
    stepped = _stepped_kernels(profile, windows)
    if not stepped.any() or chosen.empty:
        return None
    call = launch_calls(profile, "kernels")[stepped]
    in_chosen = launching_op(profile, chosen, call) >= 0
    in_kernel_op = launching_op(profile, innermost(convs), call) >= 0
    total = int(_durations(profile, np.flatnonzero(stepped)[in_chosen & ~in_kernel_op]).sum())
    return total or None


def _convolutions(profile: Profile, windows: StepWindows | None
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The convolution ops of the profile's ``op_inputs``, and the forward calls among them: the
    outermost layer of each call, in the step windows (all of them without windows)."""
    ops = profile.table("op_inputs")
    convs = ops[(concepts.op_family(ops["name"]) == concepts.CONVOLUTION).to_numpy()]
    forward = outermost(convs)
    forward = forward[concepts.takes_conv_bias(forward["name"]).to_numpy()]
    if windows is not None:
        forward = forward[windows.index_of(forward["start"].to_numpy(np.int64)) >= 0]
    return convs, forward


def conv_formats(profile: Profile, windows: StepWindows | None) -> ConvFormats | None:
    """The memory format of each forward convolution's input (concepts.memory_format of its
    recorded sizes and strides); None for a profile without convolutions' inputs (Nsight
    Systems, a trace without record_shapes)."""
    if not profile.meta.records_torch_spans:
        return None
    forward = _convolutions(profile, windows)[1]
    if forward.empty:
        return None
    formats = [concepts.memory_format(dims[0], strides[0])
               if isinstance(dims, tuple) and isinstance(strides, tuple) and dims and strides
               else None for dims, strides in zip(forward["input_dims"],
                                                  forward["input_strides"], strict=True)]
    return ConvFormats(origin=profile.kind, convolutions=len(formats),
                       channels_last=formats.count(concepts.CHANNELS_LAST),
                       contiguous=formats.count(concepts.CONTIGUOUS))


def conv_bias_before_bn(profile: Profile, windows: StepWindows | None) -> ConvBiasStats | None:
    """Convolutions with a bias input whose output goes straight into batch_norm (see
    :func:`feeds_batch_norm`); None without convolutions."""
    if not profile.meta.records_torch_spans:
        return ConvBiasStats(profile.kind, None, 0, 0, 0, None, [], unknown_reason=(
            f"{origin_label(profile.kind)} records no operators' inputs"))
    convs, forward = _convolutions(profile, windows)
    if forward.empty:
        return None
    ranks = tuple(sorted({len(dims[0]) for dims in forward["input_dims"]
                          if isinstance(dims, tuple) and dims and dims[0]}))
    if forward["input_types"].isna().all():
        return ConvBiasStats(profile.kind, None, len(forward), 0, 0, None, [],
                             unknown_reason=f"the trace's {len(forward)} convolutions carry no "
                             "'Input Dims' (torch.profiler ran without record_shapes=True)")
    biased = forward[np.array([_has_bias(t, d) for t, d in zip(
        forward["input_types"], forward["input_dims"], strict=True)], dtype=bool)]
    biased = biased.assign(transposed=concepts.is_transposed_conv(biased["name"]).to_numpy())
    threads = thread_ops(profile) if not biased.empty else {}
    before = biased[np.array([(int(conv["pid"]), int(conv["tid"])) in threads and
                              feeds_batch_norm(conv, threads[(int(conv["pid"]),
                                                              int(conv["tid"]))])
                              for _, conv in biased.iterrows()], dtype=bool)]
    shapes = before["input_dims"].map(lambda dims: "×".join(map(str, dims[1])))
    return ConvBiasStats(
        origin=profile.kind, steps=windows.count if windows is not None else None,
        convolutions=len(forward), with_bias=len(biased), before_batch_norm=len(before),
        bias_kernel_ns=_bias_kernel_ns(profile, convs, before,
                                                                   windows),
        weight_shapes=list(shapes.value_counts().index),
        first=(int(before["start"].iloc[0]), int(before["end"].iloc[0])) if len(before)
        else None, input_ranks=ranks)
