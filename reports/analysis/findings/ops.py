"""Findings from the operators' recorded inputs and the kernels they launch: fp32 on tensor cores,
convolution bias before BatchNorm, zero-filled gradients, an unfused optimizer, and the checks
the profiles cannot make.
"""

from __future__ import annotations

from collections.abc import Callable

from profreport import concepts
from profreport.reports.analysis.findings.catalogue import Facts, rule
from profreport.reports.analysis.findings.copies import unjudged_copies_evidence
from profreport.reports.analysis.findings.verdicts import HOST_BOUND_IDLE_SHARE
from profreport.reports.analysis.launches import (
    CALLS_UNRECORDED,
    NO_CORRELATION_IDS,
    NO_RUNTIME_CALLS,
)
from profreport.reports.analysis.ops import UNRECORDED
from profreport.reports.analysis.results import (
    Evidence,
    Finding,
    KernelMix,
    OpPrecision,
    RunMetrics,
)
from profreport.units import ms, pct

#: fp32 matmuls/convolutions launching a tenth of compute-kernel time are worth moving to tensor
#: cores (2-8x faster there); below that the step would gain under ~5%.
FP32_MATMUL_SHARE = 0.10
#: Half of the fp32 matmuls'/convolutions' kernel time in kernels named TF32 says TF32 is on
#: already (a name hint, used only to choose between two fixes).
TF32_PRESENT_FRACTION = 0.50
#: A foreach/fused optimizer launches a handful of kernels per step; more than this is one or
#: several small kernels per parameter.
OPTIMIZER_KERNELS_MANY = 50


@rule("ZERO_GRAD_NOT_NONE", severity=("low",), needs=("profiles",))
def zero_grad_not_none(facts: Facts) -> Finding | None:
    """``zero_grad()`` writes zeros into the gradients instead of freeing them
    (``set_to_none=False``): the kernels it launches on a GPU, the zero-filling operators it
    runs on any device."""
    m = facts.metrics
    mix = m.kernel_mix
    kernels = mix.zero_grad_work_per_step if mix is not None else None
    fills = m.zero_grad_fills_per_step
    if kernels:
        evidence = Evidence(f"{_at_least(mix.zero_grad_unlinked_per_step)}{kernels:.0f} kernels "
                            "and memsets launched inside "
                            "Optimizer.zero_grad per step (set_to_none=True launches none)",
                            mix.origin)
        saving = "a kernel per parameter"
    elif fills:
        one = f"{fills:.0f}" == "1"
        evidence = Evidence(f"{fills:.0f} zero-filling operator{'' if one else 's'} (aten::zero_, "
                            f"aten::_foreach_zero_) run{'s' if one else ''} inside "
                            "Optimizer.zero_grad per step (set_to_none=True runs none)",
                            m.top_ops_origin or "kineto")
        saving = "a pass writing zeros over every gradient"
    else:
        return None
    return Finding("ZERO_GRAD_NOT_NONE", "low",
                   "optimizer.zero_grad() writes zeros into every gradient each step.",
                   [evidence],
                   "Call optimizer.zero_grad(set_to_none=True) (the default from PyTorch 2.0): "
                   f"gradients are freed instead of zero-filled, saving {saving}.")


def _capability_text(precision: OpPrecision) -> str:
    """'Tesla V100-DGXS-32GB, compute capability 7.0'."""
    major, minor = precision.compute_capability or (0, 0)
    return f"{precision.device_name or 'the GPU'}, compute capability {major}.{minor}"


def _per_step(precision: OpPrecision, count: float) -> str:
    """``count`` per step when the figures cover steps, else in the profile."""
    steps = precision.steps
    return f"{count / steps:.0f} per step" if steps else f"{count:.0f} in the profile"


def _amp_on_advice(p: OpPrecision) -> str:
    """fp32 matmuls in a run that has mixed precision on: they run outside it."""
    return ("Mixed precision is on, yet these operators receive fp32 tensors: they run outside "
            "the torch.autocast region (move the forward pass and the loss inside it) or on "
            f"tensors cast back to float ({', '.join(p.fp32_ops[:2])}: look for .float() or a "
            "custom autograd function with custom_fwd(cast_inputs=torch.float32)).")


def _fp32_advice(capability: tuple[int, int], tf32_fraction: float) -> str:
    """Autocast in the precision this GPU's tensor cores take, and TF32 where it exists (unless
    the kernel names say it is already on)."""
    if capability >= concepts.TF32_CAPABILITY and tf32_fraction >= TF32_PRESENT_FRACTION:
        return ("TF32 already runs most of this fp32 work on the tensor cores (by the kernel "
                "names); run the forward pass and the loss under "
                "torch.autocast(device_type='cuda', dtype=torch.bfloat16) (no GradScaler "
                "needed): bf16 halves the operands' memory traffic and doubles tensor-core "
                "throughput again.")
    if capability >= concepts.TF32_CAPABILITY:
        return ("Run the forward pass and the loss under torch.autocast(device_type='cuda', "
                "dtype=torch.bfloat16) (bf16 needs no GradScaler); or, keeping fp32, let the "
                "tensor cores take it as TF32: torch.set_float32_matmul_precision('high') for "
                "matmuls and torch.backends.cudnn.allow_tf32 = True (the default) for "
                "convolutions.")
    return ("Run the forward pass and the loss under torch.autocast(device_type='cuda', "
            "dtype=torch.float16) and scale the loss with torch.cuda.amp.GradScaler: this GPU's "
            "tensor cores take fp16 (bf16 and TF32 need compute capability 8.0).")


@rule("FP32_ON_TENSOR_CORES", severity=("medium",), needs=("profiles",))
def fp32_on_tensor_cores(facts: Facts) -> Finding | None:
    """Matmuls and convolutions take fp32 inputs (their recorded dtypes) on a GPU whose tensor
    cores would run them several times faster in fp16/bf16 (or TF32)."""
    m, ctx = facts.metrics, facts.context
    p = m.op_precision
    if p is None or p.unknown_reason is not None or p.compute_capability is None or \
            p.compute_capability < concepts.TENSOR_CORE_CAPABILITY or \
            p.share("fp32") < FP32_MATMUL_SHARE:
        return None
    evidence = [
        Evidence(f"matmul/convolution calls with fp32 inputs (the operators' recorded Input "
                 f"type 'float'): {_per_step(p, p.calls['fp32'])}, launching "
                 f"{_per_step_ms(p, p.kernel_ns['fp32'])} of kernels, "
                 f"{pct(p.share('fp32'))} of compute-kernel time", p.origin,
                 m.locate(p.origin, p.longest_fp32)),
        Evidence(f"the kernels ran on {_capability_text(p)}: tensor cores from 7.0, TF32 "
                 "from 8.0 (the profiles' device properties)", p.origin),
        Evidence("fp32 operators by kernel time: " + ", ".join(p.fp32_ops[:4]), p.origin)]
    if p.launches_unknown is not None:
        evidence.append(Evidence(f"at least that: {_per_step_ms(p, p.unlinked_kernel_ns)} of "
                                 "compute kernels, linked to no launch call, may be fp32 "
                                 f"calls' too: {p.launches_unknown}", p.origin))
    if p.calls["reduced"]:
        evidence.append(Evidence(f"calls already in fp16/bf16: {_per_step(p, p.calls['reduced'])}"
                                 f" ({pct(p.share('reduced'))} of compute-kernel time)",
                                 p.origin))
    if p.compute_capability >= concepts.TF32_CAPABILITY:
        evidence.append(Evidence(f"kernel names only (a hint, not the dtypes): "
                                 f"{pct(p.tf32_kernel_fraction)} of the fp32 operators' kernel "
                                 "time is in kernels named TF32", p.origin))
    return Finding("FP32_ON_TENSOR_CORES", "medium",
                   f"{pct(p.share('fp32'))} of compute-kernel time is fp32 matmuls and "
                   f"convolutions on a GPU with tensor cores ({_capability_text(p)}).",
                   evidence, _amp_on_advice(p) if ctx.knob("amp") else
                   _fp32_advice(p.compute_capability, p.tf32_kernel_fraction))


def _per_step_ms(precision: OpPrecision, total_ns: int) -> str:
    """A duration per step when the figures cover steps, else in the profile."""
    steps = precision.steps
    return f"{ms(total_ns // steps)} per step" if steps else f"{ms(total_ns)} in the profile"


def optimizer_many_kernels(mix: KernelMix) -> bool:
    """Whether the optimizer step launches many small kernels instead of fused ones."""
    per_step = mix.optimizer_kernels_per_step
    return per_step is not None and _many_unfused(mix, per_step)


def _many_unfused(mix: KernelMix, per_step: float) -> bool:
    """Whether ``per_step`` optimizer kernels make OPTIMIZER_NOT_FUSED: many, and none multi-tensor
    by their recorded names (never when some names are unrecorded: then it is unknown)."""
    return mix.fused_optimizer is False and per_step >= OPTIMIZER_KERNELS_MANY


@rule("OPTIMIZER_NOT_FUSED", severity=("low",), needs=("profiles",))
def optimizer_not_fused(facts: Facts) -> Finding | None:
    """The optimizer step launches many kernels, none multi-tensor: one or more small kernels
    per parameter instead of foreach/fused ones."""
    m = facts.metrics
    mix = m.kernel_mix
    if mix is None or not optimizer_many_kernels(mix):
        return None
    per_step = mix.optimizer_kernels_per_step or 0.0
    at_least = _at_least(mix.optimizer_unlinked_per_step)
    evidence = [Evidence(f"{at_least}{per_step:.0f} kernels launched inside each optimizer step "
                         "(launch calls inside its span, kernels joined by correlation id), none "
                         "of them multi-tensor (multi_tensor_apply)", mix.origin)]
    if mix.optimizer_unknown is not None:
        evidence.append(Evidence(f"kernels whose launch is unknown: {mix.optimizer_unknown}",
                                 mix.origin))
    if m.launch is not None and m.launch.kernels_per_step:
        evidence.append(Evidence(f"{pct(per_step / m.launch.kernels_per_step)} of the "
                                 f"{m.launch.kernels_per_step:.0f} kernels launched per step",
                                 m.launch.origin))
    name = mix.optimizer_name
    return Finding("OPTIMIZER_NOT_FUSED", "low",
                   f"The optimizer{f' ({name})' if name else ''} updates the parameters one "
                   f"small kernel at a time: {at_least}{per_step:.0f} kernels per step.",
                   evidence,
                   f"Build it with foreach=True (torch.optim.{name or 'AdamW'}(..., "
                   "foreach=True); the default on CUDA since PyTorch 2.0) or fused=True where "
                   "the optimizer has it (Adam, AdamW, SGD): a few multi-tensor kernels replace "
                   "the per-parameter ones.")


def _at_least(unlinked_per_step: float | None) -> str:
    """'at least ' before a count of launches that leaves out the GPU work linked to no launch
    call that may belong to it (KernelMix.*_unlinked_per_step), else nothing."""
    return "at least " if unlinked_per_step else ""


@rule("CONV_BIAS_BEFORE_BN", severity=("low",), needs=("profiles",))
def conv_bias_before_bn(facts: Facts) -> Finding | None:
    """Convolutions add a bias that the BatchNorm right after them removes again."""
    m = facts.metrics
    b = m.conv_bias
    if b is None or b.unknown_reason is not None or not b.before_batch_norm:
        return None
    per = (f"{b.before_batch_norm / b.steps:.0f} per step" if b.steps else
           f"{b.before_batch_norm} in the profile")
    evidence = [Evidence(f"convolutions with a bias input (recorded Input Dims) whose next op "
                         f"on the same thread is batch_norm on their output: {per}, of "
                         f"{b.convolutions} convolution calls ({b.with_bias} with a bias)",
                         b.origin, m.locate(b.origin, b.first)),
                Evidence("their weights: " + ", ".join(b.weight_shapes[:4]), b.origin)]
    if b.bias_kernel_ns:
        added = (f"{ms(b.bias_kernel_ns // b.steps)} per step" if b.steps else
                 f"{ms(b.bias_kernel_ns)} in the profile")
        evidence.append(Evidence(f"kernels these convolutions launch outside their convolution "
                                 f"kernels (the bias add): {added}", b.origin))
    else:
        why = ("a CPU-only profile records no kernels" if m.gpu is None else
               "no GPU kernel launched outside the convolution kernels")
        evidence.append(Evidence(f"the bias add's own kernel time cannot be told apart ({why})",
                                 b.origin))
    return Finding("CONV_BIAS_BEFORE_BN", "low",
                   f"Convolutions add a bias that the BatchNorm after them cancels ({per}).",
                   evidence,
                   "Build the convolutions that feed a BatchNorm with bias=False "
                   "(nn.Conv2d(..., bias=False)): BatchNorm subtracts the per-channel mean, so "
                   "the bias has no effect (BatchNorm's own shift replaces it), and dropping it "
                   "saves a bias add forward and a bias-gradient reduction backward per "
                   "convolution.")


def _unknown_checks(m: RunMetrics) -> list[Evidence]:
    """One line per operator check that this run's sources cannot make, with the reason."""
    out = []
    p, bias = m.op_precision, m.conv_bias
    if p is not None and p.unknown_reason is not None:
        out.append(Evidence(f"fp32 matmuls/convolutions on tensor cores: unknown, "
                            f"{p.unknown_reason}", p.origin))
        mix = m.kernel_mix
        if mix is not None and mix.reduced_precision_fraction is not None:
            out.append(Evidence(f"kernel names only (supporting, not the dtypes): "
                                f"{pct(mix.reduced_precision_fraction)} {mix.of_named_text()} "
                                "is in kernels named fp16/bf16", mix.origin))
    if bias is not None and bias.unknown_reason is not None:
        out.append(Evidence(f"convolution bias before BatchNorm: unknown, {bias.unknown_reason}",
                            bias.origin))
    return out


def _fusion_unknown(mix: KernelMix | None) -> list[Evidence]:
    """OPTIMIZER_NOT_FUSED's check when its answer hangs on whether the optimizer's kernels are
    multi-tensor and that is unknown (KernelMix.fused_unknown): many kernels per step (counting
    those that may belong to it unlinked), some of unrecorded name. Empty otherwise: a few
    kernels per step answer it whatever their kind."""
    if mix is None or mix.fused_unknown is None or mix.optimizer_kernels_per_step is None:
        return []
    linked = mix.optimizer_kernels_per_step
    if linked + (mix.optimizer_unlinked_per_step or 0) < OPTIMIZER_KERNELS_MANY:
        return []
    return [Evidence(f"whether the optimizer's {_at_least(mix.optimizer_unlinked_per_step)}"
                     f"{linked:.0f} kernels per step are multi-tensor (OPTIMIZER_NOT_FUSED): "
                     f"unknown, {mix.fused_unknown}", mix.origin)]


@rule("OP_CHECKS_UNKNOWN", severity=("info",), needs=("profiles",))
def op_checks_unknown(facts: Facts) -> Finding | None:
    """The operator checks (precision, conv bias before BatchNorm, an unfused optimizer) this
    run's profiles cannot make, and why: said, never guessed."""
    m = facts.metrics
    operators, fusion = _unknown_checks(m), _fusion_unknown(m.kernel_mix)
    if not operators and not fusion:
        return None
    advice = [_operator_checks_advice(m)] if operators else []
    if fusion:
        advice.append("Whether the optimizer is multi-tensor is read from the names of the "
                      "kernels it launches, which this profile does not record for all of them: "
                      "a profile that records each kernel's name (the name of torch.profiler's "
                      "kernel events, the StringIds an nsys export's kernel rows point to) "
                      "answers it.")
    return Finding("OP_CHECKS_UNKNOWN", "info",
                   "Some operator checks could not be made from these profiles.",
                   operators + fusion, " ".join(advice))


def _operator_checks_advice(m: RunMetrics) -> str:
    """OP_CHECKS_UNKNOWN's fix for the precision and bias checks (_unknown_checks): profile
    with record_shapes, on the GPU for the precision check, where the operators' inputs went
    unrecorded; else that no profiling option answers them."""
    # The precision check needs the GPU's compute capability; the bias check reads shapes only.
    # Profiling with record_shapes=True answers a check only where the operators' inputs went
    # unrecorded: a precision check the recorded dtypes leave unknown (a ROCm GPU, an
    # unrecorded compute capability) it does not answer.
    p = m.op_precision
    gpu = p is not None and p.unknown_reason is not None and not any(
        count for label, count in p.calls.items() if label != UNRECORDED)
    if not gpu and (m.conv_bias is None or m.conv_bias.unknown_reason is None):
        return ("No profiling option answers these checks: the trace records the operators' "
                "input dtypes; why each is unknown is said above.")
    return ("Profile a few steps with torch.profiler(record_shapes=True)"
            f"{' on the GPU' if gpu else ''}: the operators' input dtypes and shapes "
            "answer these checks.")


def _fp32_share_unknown_evidence(m: RunMetrics) -> list[Evidence]:
    """The share of compute-kernel time fp32 matmuls and convolutions launched, when the
    kernels linked to no launch call (OpPrecision.unlinked_kernel_ns) could make it reach
    FP32_MATMUL_SHARE the linked ones do not: unknown, between the two, and why."""
    p = m.op_precision
    if p is None or p.launches_unknown is None or p.unknown_reason is not None or \
            p.compute_capability is None or \
            p.compute_capability < concepts.TENSOR_CORE_CAPABILITY:
        return []
    low = p.share("fp32")
    high = low + p.unlinked_kernel_ns / max(p.compute_kernel_ns, 1)
    if not low < FP32_MATMUL_SHARE <= high:
        return []
    return [Evidence("compute-kernel time fp32 matmuls/convolutions launched "
                     f"(FP32_ON_TENSOR_CORES): unknown, between {pct(low)} and {pct(high)}, "
                     f"{p.launches_unknown}", p.origin)]


def _launch_wait_unknown_evidence(m: RunMetrics) -> list[Evidence]:
    """The GPU idle time that may have waited for launches no call is linked to
    (IdleCauses.launch_unknown), when it could make the host-bound share the linked launches
    do not, and the launch delay when no kernel of the steps is linked
    (LaunchStats.launches_unknown): unknown and why."""
    out = []
    idle, launch = m.gpu_idle, m.launch
    if idle is not None and idle.launch_unknown is not None and \
            idle.share("launch") < HOST_BOUND_IDLE_SHARE <= idle.share("launch") + \
            (idle.launch_unknown_ns_per_step or 0) / max(idle.step_ns, 1):
        out.append(Evidence(f"GPU idle time waiting for launches (HOST_LAUNCH_BOUND): unknown for "
                            f"{ms(idle.launch_unknown_ns_per_step or 0)} per step, counted as "
                            f"unexplained, {idle.launch_unknown}", idle.origin))
    if launch is not None and launch.queued_launch_fraction is None and \
            launch.launches_unknown is not None:
        out.append(Evidence("launch delay and kernels launched behind queued work: unknown, "
                            f"{launch.launches_unknown}", launch.origin))
    return out


def _devices_unknown_evidence(m: RunMetrics) -> list[Evidence]:
    """The most GPUs one process launched kernels on, when the kernels linked to no launch
    call (RunMetrics.devices_per_process_unknown) could make it several where the linked ones
    do not: unknown, at least the linked ones' count where some are, and why."""
    why, most = m.devices_per_process_unknown, m.max_devices_per_process
    if why is None or m.gpu is None or (most or 0) > 1:
        return []
    bound = "" if most is None else f"at least {most}, "
    return [Evidence(f"GPUs one process launched kernels on (DATAPARALLEL_NOT_DDP): unknown, "
                     f"{bound}{why}", m.gpu.origin)]


def _launch_count_evidence(mix: KernelMix, label: str, linked: float | None,
                           unlinked: float | None, why: str | None,
                           flags: Callable[[float], bool]) -> list[Evidence]:
    """A count of launches (``label``) that is unknown, and why: none could be linked, or the
    ``linked`` per step do not make its finding (``flags``: whether a count per step does)
    and with the ``unlinked`` ones that may belong to it they would."""
    if why is None:
        return []
    if linked is None:
        return [Evidence(f"{label}: unknown, {why}", mix.origin)]
    if unlinked is None or flags(linked) or not flags(linked + unlinked):
        return []
    return [Evidence(f"{label}: unknown, between {linked:.0f} and {linked + unlinked:.0f} per "
                     f"step, {why}", mix.origin)]


@rule("LAUNCH_LINKS_UNKNOWN", severity=("info",), needs=("profiles",))
def launch_links_unknown(facts: Facts) -> Finding | None:
    """The checks that need each kernel or copy linked to the call that launched it (blocking
    copy calls, kernels per optimizer step and per zero_grad, the GPU's wait for launches, the
    launch delay, the GPUs one process drives) when the profiles record no correlation id, or
    not on every row, the link: unknown and why, never read as no problem."""
    m = facts.metrics
    evidence = unjudged_copies_evidence(m.syncs)
    mix = m.kernel_mix
    if mix is not None:
        evidence += _launch_count_evidence(
            mix, "kernels launched inside each optimizer step (OPTIMIZER_NOT_FUSED)",
            mix.optimizer_kernels_per_step, mix.optimizer_unlinked_per_step,
            mix.optimizer_unknown,
            lambda count: _many_unfused(mix, count))
        evidence += _launch_count_evidence(
            mix, "kernels and memsets launched inside zero_grad() (ZERO_GRAD_NOT_NONE)",
            mix.zero_grad_work_per_step, mix.zero_grad_unlinked_per_step,
            mix.zero_grad_unknown, lambda count: count > 0)
    evidence += _launch_wait_unknown_evidence(m) + _fp32_share_unknown_evidence(m)
    evidence += _devices_unknown_evidence(m)
    if not evidence:
        return None
    fixes = [_LINK_FIXES[gap] for gap in m.launch_link_gaps] or [
        _LINK_FIXES[NO_CORRELATION_IDS]]
    return Finding("LAUNCH_LINKS_UNKNOWN", "info",
                   "Some checks could not be made: these profiles do not link GPU work to the "
                   "calls that launched it.", evidence, " ".join(fixes))


#: LAUNCH_LINKS_UNKNOWN's fix for each thing the profiles lack (launches.link_gaps).
_LINK_FIXES = {
    NO_RUNTIME_CALLS: "Record the CPU side of the launches too: torch.profiler with "
                      "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] records the "
                      "runtime calls that launch the GPU work, and nsys profile --trace=cuda "
                      "records them (CUPTI_ACTIVITY_KIND_RUNTIME).",
    NO_CORRELATION_IDS: "Profile with the correlation ids kept: torch.profiler records them "
                        "on its runtime, kernel and copy events (args.correlation), and Nsight "
                        "Systems exports them as the correlationId column of its CUPTI tables; "
                        "export the report again with an nsys version that writes that column.",
    CALLS_UNRECORDED: "The unlinked GPU work carries correlation ids that no recorded call "
                      "holds: the profile recorded the work but not the calls that launched it, "
                      "made before the capture began recording calls (work still queued as it "
                      "started) or dropped by the profiler (see its notes for lost records). "
                      "Profile more steps, so that work launched before the capture weighs "
                      "less, and start the capture between steps, not inside one.",
}
