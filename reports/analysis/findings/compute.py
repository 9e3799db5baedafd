"""Findings about compute: what sets the pace when the model's own work does (GPU kernels or CPU
operators), with advice from the kernel and operator mix, and CPU oversubscription.
"""

from __future__ import annotations

import math

import pandas as pd

from profreport import concepts
from profreport.reports.analysis.dataloader import LOADER_BOUND_FRACTION
from profreport.reports.analysis.findings.catalogue import Facts, rule
from profreport.reports.analysis.findings.context import (
    CpuLoad,
    RunContext,
    cpu_load,
    loader_core_demand,
)
from profreport.reports.analysis.findings.ops import optimizer_many_kernels
from profreport.reports.analysis.findings.verdicts import (
    COMPUTE_BOUND_SHARE,
    compute_share,
    gpu_saturated_by_compute,
    loop_evidence,
    trial_evidence,
)
from profreport.reports.analysis.ops import reduced_precision
from profreport.reports.analysis.results import (
    Evidence,
    Finding,
    KernelMix,
    Origin,
    PrecisionReading,
    RunMetrics,
    Severity,
)
from profreport.reports.analysis.top import top_kernel
from profreport.units import ms, pct

#: Autocast casts the matmuls' and convolutions' inputs to fp16/bf16: half of their time in
#: such inputs (ops.reduced_precision: by recorded dtypes, else half of compute-kernel time by
#: kernel names) says mixed precision is already on.
AMP_PRESENT_FRACTION = 0.50
#: NCHW <-> NHWC conversion kernels above this share of kernel time are a transpose per
#: convolution that channels_last removes.
LAYOUT_CONVERSION_SHARE = 0.05
#: Elementwise kernels taking this share of kernel time are worth fusing with torch.compile.
ELEMENTWISE_SHARE = 0.15
#: ATen's slow reference kernels taking a fifth of the operators' self time is the CPU running
#: without its optimised (oneDNN) path.
SLOW_FALLBACK_SHARE = 0.20
#: A loader that needs less than half a core at the real loop's pace costs the model less than
#: taking an intra-op thread away would: then more CPUs, not fewer threads, is the fix.
LIGHT_LOADER_CORES = 0.5
#: The memory format that keeps a convolution's input in the layout its kernels want, by the
#: rank of that input (NCHW 2-D convolutions, NCDHW 3-D ones).
_MEMORY_FORMAT_OF_RANK = {4: "channels_last", 5: "channels_last_3d"}


def amp_on(reading: PrecisionReading, ctx: RunContext) -> bool:
    """Whether mixed precision is on: AMP_PRESENT_FRACTION of the matmul/convolution work in
    fp16/bf16 by what the profiles record (ops.reduced_precision), else the run's amp knob."""
    if reading.share is not None:
        return reading.share >= AMP_PRESENT_FRACTION
    return bool(ctx.knob("amp"))


def amp_not_to_advise(reading: PrecisionReading, ctx: RunContext) -> bool:
    """Whether advice leaves mixed precision out: it is on (amp_on), or the run's amp knob asks
    for it (with fp32 inputs that is autocast missing the model, which other advice says)."""
    return amp_on(reading, ctx) or bool(ctx.knob("amp"))


def memory_format_advice(conv_ranks: tuple[int, ...]) -> str:
    """Which channels-last format to use, from the recorded ranks of the convolutions' inputs:
    'channels_last (model.to(memory_format=torch.channels_last), x.to(...))'; both, each with
    the convolutions it applies to, when the ranks were not recorded."""
    formats = [_MEMORY_FORMAT_OF_RANK[rank] for rank in conv_ranks
               if rank in _MEMORY_FORMAT_OF_RANK]
    if not formats:
        return ("channels_last for 2-D convolutions (4-D inputs) or channels_last_3d for 3-D "
                "ones (5-D inputs; the profile records no input shapes to tell which)")
    spelled = [f"{name} (model.to(memory_format=torch.{name}), x.to(memory_format="
               f"torch.{name}))" for name in formats]
    return " and ".join(spelled)


def conv_ranks(m: RunMetrics) -> tuple[int, ...]:
    """Ranks of the convolutions' inputs as recorded (empty when not)."""
    return m.conv_bias.input_ranks if m.conv_bias is not None else ()


@rule("COMPUTE_BOUND", severity=("info",), needs=("profiles", "manifest"))
def compute_bound(facts: Facts) -> Finding | None:
    """The GPU is saturated (by more than its collectives and copies), or compute fills most of
    the step: the model's math sets the pace."""
    m, ctx = facts.metrics, facts.context
    share = compute_share(m)
    if not (gpu_saturated_by_compute(m) or (share is not None and share >= COMPUTE_BOUND_SHARE)):
        return None
    evidence = []
    if share is not None and m.breakdown is not None:
        part = m.breakdown.labels.get("compute", "compute")  # what its source can tell
        evidence.append(Evidence(f"{part} {pct(share)} of {ms(m.breakdown.step_ns)} per step",
                                 m.breakdown.origin))
    evidence += trial_evidence(m.trials, "compute")
    if m.gpu is None and m.breakdown is not None and m.breakdown.origin == "lprof":
        return _lines_compute_bound(share or 0.0, evidence + loop_evidence(m))
    if m.gpu is None:
        return _cpu_compute_bound(m, ctx, share or 0.0, evidence)
    evidence.append(Evidence(f"GPU busy {pct(m.gpu.busy_fraction)} of its "
                             f"{m.gpu.window_text(ms)} window", m.gpu.origin))
    top = _top_kernel_text(m)
    if top is not None:
        evidence.append(Evidence(top, m.gpu.origin))
    if m.kernel_mix is not None:
        evidence += _kernel_mix_evidence(m.kernel_mix, reduced_precision(m))
    return Finding("COMPUTE_BOUND", "info",
                   "The GPU's kernels set the pace of training.", evidence,
                   _gpu_compute_advice(m.kernel_mix, ctx, conv_ranks(m),
                                       reduced_precision(m)))


def _precision_evidence(mix: KernelMix, reading: PrecisionReading) -> str | None:
    """What the model computes in, as the advice reads it (ops.reduced_precision): by the
    recorded input dtypes, else by kernel names, said to be a hint (a name need not carry its
    dtype: ROCm's ``Cijk_..._BBS_...``, Triton's) of the named kernels' time; None when neither
    tells."""
    if reading.share is None:
        return None
    if reading.source != "kernel names":
        return (f"{pct(reading.share)} of the matmuls' and convolutions' time has fp16/bf16 "
                "inputs, by their recorded dtypes")
    return (f"{pct(reading.share)} {mix.of_named_text()} is in kernels named fp16/bf16 (kernel "
            "names only: the profiles record no input dtypes, and a name need not carry one)")


def _kernel_mix_evidence(mix: KernelMix, reading: PrecisionReading) -> list[Evidence]:
    """What the kernels say: precision (``reading``), layout conversions, how the optimizer
    runs; that their names do not tell when the profile records none."""
    precision = _precision_evidence(mix, reading)
    out = [Evidence(precision, mix.origin)] if precision is not None else []
    if mix.names_unknown is not None:
        out.append(Evidence("the kernels' precision, layout conversions and elementwise share "
                            f"by name: unknown, {mix.names_unknown}", mix.origin))
    if _share_reaches(mix.layout_conversion_fraction, LAYOUT_CONVERSION_SHARE):
        out.append(Evidence(f"NCHW/NHWC layout conversion kernels (nchwToNhwc, nhwcToNchw) take "
                            f"{pct(mix.layout_conversion_fraction)} {mix.of_named_text()}",
                            mix.origin))
    if mix.fused_optimizer is True:
        out.append(Evidence("the optimizer already runs as fused multi_tensor_apply kernels",
                            mix.origin))
    elif optimizer_many_kernels(mix):
        out.append(Evidence(f"{mix.optimizer_kernels_per_step:.0f} kernels launched per "
                            "optimizer step, none of them multi-tensor (fused)", mix.origin))
    return out


def _amp_step(reading: PrecisionReading, ctx: RunContext, mix: KernelMix | None) -> str | None:
    """'enable mixed precision' with what the run computes in now (by kernel names: of the
    named kernels of ``mix``); None when it is on (by the recorded dtypes or kernel names, else
    the knob)."""
    if amp_not_to_advise(reading, ctx):
        return None
    if reading.share is None:
        return ("enable mixed precision (torch.autocast + GradScaler) if the model trains in "
                f"fp32 (the profiles cannot tell: {reading.source})")
    if reading.source == "kernel names" and mix is not None:
        unnamed = f", {mix.unnamed_text()}" if mix.unnamed_kernel_ns else ""
        now = (f"{pct(reading.share)} of {mix.named_time_text} is fp16/bf16 now{unnamed}"
               if reading.share > 0 else f"no kernel is named fp16/bf16 now{unnamed}")
    elif reading.share > 0:
        now = (f"{pct(reading.share)} of the matmuls' and convolutions' time has fp16/bf16 "
               "inputs now, by their recorded dtypes")
    else:
        now = "the matmuls and convolutions take no fp16/bf16 input now, by their recorded dtypes"
    return f"enable mixed precision (torch.autocast + GradScaler; {now})"


def _gpu_compute_advice(mix: KernelMix | None, ctx: RunContext, conv_ranks: tuple[int, ...],
                        reading: PrecisionReading) -> str:
    """What to change, from what the kernels show (and the run's knobs, its convolutions'
    input ranks and what it computes in)."""
    amp_step = _amp_step(reading, ctx, mix)
    if mix is None:
        amp = "" if amp_step is None else f"{amp_step}, "
        layout = ("" if ctx.channels_last() else
                  f"try {memory_format_advice(conv_ranks)} for the convolutions, and ")
        compiled = "" if ctx.compiled() else "try torch.compile, or "
        return f"To go faster, {amp}{layout}{compiled}reduce the model's work per sample."
    steps = [amp_step] if amp_step is not None else []
    layout = _share_reaches(mix.layout_conversion_fraction, LAYOUT_CONVERSION_SHARE)
    if layout and ctx.channels_last():
        steps.append("find the layer or input still in the old layout: with channels_last on, "
                     f"layout conversions still take {pct(mix.layout_conversion_fraction)} of "
                     f"{mix.named_time_text}")
    elif layout:
        steps.append(f"put the model and every batch in {memory_format_advice(conv_ranks)}: "
                     f"layout conversions take {pct(mix.layout_conversion_fraction)} of "
                     f"{mix.named_time_text}")
    if optimizer_many_kernels(mix):
        optimizer = f"torch.optim.{mix.optimizer_name or 'AdamW'}"
        steps.append(f"build the optimizer with foreach=True ({optimizer}(..., foreach=True), or "
                     "fused=True where it supports it): each step launches "
                     f"{mix.optimizer_kernels_per_step:.0f} optimizer kernels")
    if _share_reaches(mix.elementwise_fraction, ELEMENTWISE_SHARE) and not ctx.compiled():
        steps.append("try torch.compile to fuse the elementwise kernels "
                     f"({pct(mix.elementwise_fraction)} of {mix.named_time_text})")
    if not steps and mix.names_unknown is not None:
        return (f"The kernels' names do not say what to change ({mix.names_unknown}): the "
                "remaining levers are less work per sample (a smaller model or input) or more "
                "GPUs.")
    if not steps:
        return ("The kernels already run in reduced precision without layout conversions or an "
                "unfused optimizer: the remaining levers are less work per sample (a smaller "
                "model or input) or more GPUs.")
    return "To go faster: " + "; ".join(steps) + "."


def _share_reaches(share: float | None, threshold: float) -> bool:
    """Whether a share by kernel name is known and at least ``threshold`` (unknown: no advice
    is built on it)."""
    return share is not None and share >= threshold


def _lines_compute_bound(share: float, evidence: list[Evidence]) -> Finding:
    """COMPUTE_BOUND from line_profiler alone: the loop body, not the batch fetch, fills the
    step, but the lines record neither the operators nor the device that run them."""
    return Finding("COMPUTE_BOUND", "info",
                   f"The loop body takes {pct(share)} of each step; line_profiler does not record "
                   "what runs in it.", evidence,
                   "Profile a few steps with torch.profiler (record_shapes=True) or Nsight "
                   "Systems to see which operators or kernels the loop body's time goes to: "
                   "line_profiler times lines, not the operators or the device that run them "
                   "(the slowest lines are listed below).")


def _cpu_compute_bound(m: RunMetrics, ctx: RunContext, share: float,
                       evidence: list[Evidence]) -> Finding:
    """COMPUTE_BOUND on a CPU-only run: the top operators by self time, and advice that fits
    the operators' implementation (oneDNN or ATen's slow fallback) and the run's knobs."""
    origin: Origin = m.top_ops_origin or "kineto"
    for top in m.top_ops[:1]:
        calls = f"{top.count:,} call{'' if top.count == 1 else 's'}"
        evidence.append(Evidence(f"top CPU operator by self time {top.name[:80]}: "
                                 f"{pct(top.share)} of step time ({ms(top.total_ns)} in "
                                 f"{calls} over the steps measured)", origin))
    mix = m.cpu_op_mix
    slow = mix is not None and mix.slow_fallback_fraction >= SLOW_FALLBACK_SHARE
    if mix is not None and slow:
        names = ", ".join(mix.slow_fallback_ops[:2])
        evidence.append(Evidence(f"ATen's slow reference kernels ({names}) take "
                                 f"{pct(mix.slow_fallback_fraction)} of operator self time, "
                                 + (f"oneDNN ops {pct(mix.onednn_fraction)}" if mix.onednn_fraction
                                    else "none on oneDNN"), mix.origin))
    elif mix is not None and mix.onednn_fraction > 0:
        evidence.append(Evidence(f"oneDNN (mkldnn) ops take {pct(mix.onednn_fraction)} of "
                                 "operator self time: the optimised CPU path", mix.origin))
    return Finding("COMPUTE_BOUND", "info",
                   f"The CPU spends {pct(share)} of each step in the model's own operators.",
                   evidence, _cpu_compute_advice(m, ctx, slow))


def _cpu_compute_advice(m: RunMetrics, ctx: RunContext, slow: bool) -> str:
    """CPU advice from this run's evidence: autocast without native bf16 or a missed oneDNN path
    first; then how its threads fit its CPUs, its top operator's lever and knobs that do nothing
    without a GPU."""
    mix, reading = m.cpu_op_mix, reduced_precision(m)
    cores = _cpu_threads_advice(m, ctx)
    autocast = amp_on(reading, ctx)
    if autocast and ctx.environment.get("cpu_native_bf16") is False:
        where = (f" ({', '.join(mix.slow_fallback_ops[:2])})" if slow and mix is not None
                 else "")
        return ("Turn autocast off on this CPU: it has no native bf16 (AVX512-BF16 or AMX), so "
                f"bf16 operators run emulated or on ATen's slow reference kernels{where}; fp32 "
                f"runs the convolutions on oneDNN. Then {cores}.")
    if autocast and slow:
        return ("Autocast is on and the bf16 convolutions run on ATen's slow reference kernels: "
                "this CPU probably lacks native bf16 (look for avx512_bf16 or amx_bf16 in lscpu); "
                f"compare a run with amp off. Then {cores}.")
    if slow:
        return ("The convolutions miss oneDNN and run on ATen's slow reference kernels: keep "
                "inputs and weights float32 and contiguous, and check "
                f"torch.backends.mkldnn.is_available(). Then {cores}.")
    amp = list(filter(None, [_cpu_amp_step(reading, ctx)]))
    # With autocast on, whether bf16 is emulated matters before cores and operators.
    steps = (amp if autocast else []) + [cores] + _top_op_levers(m, ctx) + \
        ([] if autocast else amp)
    if ctx.knob("pin_memory"):
        steps.append("drop pin_memory=True: without a GPU it pins nothing and only costs the "
                     "DataLoader a copy")
    return "To go faster: " + "; ".join(steps) + ". A GPU is the larger step."


def _cpu_amp_step(reading: PrecisionReading, ctx: RunContext) -> str | None:
    """bf16 autocast on a CPU that computes bf16 natively (elsewhere it is emulated, slower
    than fp32), by what the matmuls and convolutions take: not for a run already in bf16, a
    conditional step when the dtypes are not recorded; autocast on with fp32 inputs is
    autocast missing the model; bf16 inputs where nothing says whether the CPU computes bf16
    natively (a bare trace: no manifest) are a run to compare without autocast."""
    if ctx.knob("amp") and reading.share is not None and not amp_on(reading, ctx):
        return ("autocast is on, yet the matmuls and convolutions take fp32 inputs (by their "
                "recorded dtypes): run the forward pass and the loss inside the torch.autocast "
                "region")
    if reading.share is not None and amp_on(reading, ctx) and \
            ctx.environment.get("cpu_native_bf16") is None:
        return (f"the matmuls and convolutions spend {pct(reading.share)} of their time on "
                "fp16/bf16 inputs (by their recorded dtypes): unless this CPU computes bf16 "
                "natively (avx512_bf16 or amx_bf16 in lscpu), they run emulated, slower than in "
                "fp32; compare a run with autocast off")
    if amp_on(reading, ctx) or ctx.environment.get("cpu_native_bf16") is not True:
        return None
    autocast = "run the forward pass under torch.autocast('cpu', dtype=torch.bfloat16)"
    if reading.share is None:
        return (f"this CPU computes bf16 natively: if the model trains in fp32 (the profiles "
                f"cannot tell: {reading.source}), {autocast}")
    return (f"{autocast}: this CPU computes bf16 natively and the matmuls and convolutions "
            f"spend {pct(1 - reading.share)} of their time on fp32 or wider inputs")


def _loader_recorded(m: RunMetrics, ctx: RunContext) -> bool:
    """Whether the run shows a DataLoader: its num_workers knob, DataLoader spans that name
    their iterator, a DataLoader wait, or line_profiler's DataLoader loop."""
    return (ctx.knob("num_workers") is not None or m.loader_in_process is not None
            or any(m.dataloader_fraction_by_origin.values()) or m.loop_line is not None)


def _cpu_threads_advice(m: RunMetrics, ctx: RunContext) -> str:
    """How this run's compute threads and DataLoader workers fit its CPUs, as advice (without
    the workers where the run shows no DataLoader)."""
    load = cpu_load(ctx)
    if load is None:
        cores = ("the cores left after the DataLoader workers" if _loader_recorded(m, ctx)
                 else "the job's cores")
        return ("give the job more cores (--cpus-per-task) and match torch.set_num_threads to "
                f"{cores}")
    budget = load.cpus_per_process
    demand = loader_core_demand(load, m.trials)
    if load.oversubscribed and demand is not None and demand < LIGHT_LOADER_CORES:
        needed = max(math.ceil(demand), 1)
        surplus = (f"lower num_workers from {load.workers} to {needed} (the loader needs only "
                   f"{demand:.2f} of a core; more workers only compete for the {budget} CPUs), "
                   "then " if load.workers > needed else
                   f"the DataLoader needs only {demand:.2f} of a core, so ")
        one = load.threads == 1
        return (f"{surplus}PyTorch's {load.threads} intra-op thread{'' if one else 's'} "
                f"ha{'s' if one else 've'} the {budget} CPU{'' if budget == 1 else 's'} "
                f"nearly to {'itself' if one else 'themselves'}: more cores "
                f"(--cpus-per-task={budget * 2}) make the operators faster")
    if load.oversubscribed:
        return (f"stop {load.describe()} competing for cores (see the oversubscription finding), "
                f"then request more cores: --cpus-per-task={load.busy} would give every thread "
                "its own")
    free = budget - load.workers - load.threads
    if load.threads_known and free > 0:
        return (f"PyTorch computes on {load.threads} thread{'s' if load.threads != 1 else ''} "
                f"while {free} of {budget} CPUs are free: call torch.set_num_threads"
                f"({budget - load.workers})")
    return (f"every CPU is in use ({load.describe()}): more cores (--cpus-per-task) make the "
            "operators faster")


def _top_op_levers(m: RunMetrics, ctx: RunContext) -> list[str]:
    """What can make this run's top CPU operator cheaper, by how it runs and the knobs not yet
    tried (channels_last for oneDNN convolutions, torch.compile)."""
    top = m.top_ops[0] if m.top_ops else None
    if top is None:
        return []
    out = []
    onednn = bool(concepts.is_onednn_op(pd.Series([top.name])).iloc[0])
    if onednn and not ctx.channels_last():
        out.append(f"{top.name} takes {pct(top.share)} of step time on oneDNN: try "
                   f"{memory_format_advice(conv_ranks(m))}, which oneDNN's convolutions prefer")
    if not ctx.compiled():
        out.append(f"torch.compile the model to fuse the operators around {top.name}"
                   if not out else "torch.compile the model to fuse the operators around it")
    elif not out:
        out.append(f"{top.name} takes {pct(top.share)} of step time even compiled: a smaller "
                   "model or input is the remaining lever")
    return out


def _top_kernel_text(m: RunMetrics) -> str | None:
    """Which compute (non-communication) kernel takes the most time, unknown when the kernels of
    unrecorded name outweigh the top named one (top.top_kernel). None without compute
    kernels."""
    top = top_kernel([k for k in m.top_kernels if not k.is_comm])
    if top is None:
        return None
    if top.known:
        return f"top kernel {top.top.name[:80]} takes {pct(top.top.share)} of kernel time"
    named = top.largest_named
    largest = (f" (the largest named one, {named.name[:80]}, {pct(named.share)})"
               if named is not None else "")
    return ("which kernel takes the most time is unknown: kernels whose names the profile does "
            f"not record take {pct(top.top.share)} of kernel time together{largest}")


@rule("CPU_OVERSUBSCRIBED", severity=("medium", "low"), needs=("manifest", "profiles"))
def cpu_oversubscribed(facts: Facts) -> Finding | None:
    """CPU-only run: DataLoader workers and PyTorch's intra-op threads want more CPUs than the run
    has, so the loader steals cores from the model's operators (or, without workers, the
    intra-op threads alone outnumber the CPUs)."""
    m, ctx = facts.metrics, facts.context
    load = cpu_load(ctx)
    if load is None or m.gpu is not None or not load.oversubscribed:
        return None
    evidence = [Evidence(f"{load.describe()}: {load.busy} busy threads", "manifest")]
    share = compute_share(m)
    if share is not None and m.breakdown is not None:
        evidence.append(Evidence(f"the model's operators take {pct(share)} of the "
                                 f"{ms(m.breakdown.step_ns)} step, on the same cores",
                                 m.breakdown.origin))
    trials = m.trials
    if trials is not None and trials.synthetic and trials.full:
        evidence.append(Evidence(f"{trials.synthetic:.0f} samples/s on synthetic data "
                                 f"(no DataLoader) against {trials.full:.0f} with it",
                                 "manifest"))
    demand = loader_core_demand(load, trials)
    if demand is not None:
        evidence.append(Evidence(f"the DataLoader needs about {demand:.2f} of a core at the real "
                                 "loop's pace (workers × full / IO trial throughput)", "manifest"))
    budget = load.cpus_per_process
    instead = "; or"
    if demand is not None and demand < LIGHT_LOADER_CORES:
        advice = (f"Keep PyTorch's {load.threads} intra-op threads: the loader needs only "
                  f"{demand:.2f} of a core, less than a thread taken from the model would cost. "
                  "Make the per-sample work cheaper (precompute or cache the transformed "
                  "samples)")
        severity: Severity = "low"
    elif load.workers < budget:
        left = budget - load.workers
        sharing = ("the intra-op threads" if load.workers == 0 else
                   f"the {load.workers} DataLoader worker{'s' if load.workers != 1 else ''} "
                   "and the intra-op threads")
        advice = (f"Call torch.set_num_threads({left}) (or set OMP_NUM_THREADS={left}) so "
                  f"{sharing} share {budget} CPU{'s' if budget != 1 else ''} per process "
                  "without contention")
        severity = "medium"
    elif m.dataloader_fraction is not None and m.dataloader_fraction >= LOADER_BOUND_FRACTION:
        advice = (f"Keep the {load.workers} DataLoader workers: the loop waits for data "
                  f"{pct(m.dataloader_fraction)} of its step, so fewer would slow it further"
                  f"{_one_thread(load)}; it needs more CPUs, not fewer workers")
        severity, instead = "medium", ":"
    else:
        advice = f"Lower num_workers from {load.workers} to {budget - 1}{_one_thread(load)}"
        severity = "medium"
    # Without workers the batches load in the training thread, between the operators.
    who = ("PyTorch's intra-op threads outnumber the CPUs and take turns on them"
           if load.workers == 0 else "the DataLoader competes with the model for cores")
    return Finding("CPU_OVERSUBSCRIBED", severity, f"{load.describe()}: {who}.",
                   evidence, f"{advice}{instead} request --cpus-per-task={load.busy} in Slurm.")


def _one_thread(load: CpuLoad) -> str:
    """' and call torch.set_num_threads(1)', unless the run records one intra-op thread."""
    return "" if load.threads_known and load.threads == 1 else \
        " and call torch.set_num_threads(1)"
