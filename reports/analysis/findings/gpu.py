"""Findings about how busy the GPU is: waiting for launches, low utilisation, long idle gaps, too
little work per step.
"""

from __future__ import annotations

from profreport.reports.analysis.dataloader import LOADER_BOUND_FRACTION
from profreport.reports.analysis.findings.catalogue import Facts, rule
from profreport.reports.analysis.findings.compute import amp_not_to_advise
from profreport.reports.analysis.findings.context import RunContext
from profreport.reports.analysis.findings.copies import minor_sync_evidence
from profreport.reports.analysis.findings.verdicts import (
    HOST_BOUND_IDLE_SHARE,
    loop_ns_without_loader,
)
from profreport.reports.analysis.ops import reduced_precision
from profreport.reports.analysis.results import (
    Evidence,
    Finding,
    IdleCauses,
    RunMetrics,
    Severity,
    TraceLocation,
)
from profreport.units import ms, pct, whole_us

#: Below half busy the GPU idles more than it works: worth a finding on its own.
LOW_GPU_BUSY = 0.50
#: Below this the GPU is mostly idle: high severity.
VERY_LOW_GPU_BUSY = 0.30
#: Launch overhead adds up only over many launches: below 100 kernels per step (about 1 ms of
#: launch cost at ~10 us each) short kernels are not what the GPU waits for.
MANY_KERNELS_PER_STEP = 100
#: Half the kernels under SHORT_KERNEL_NS means launch overhead rivals the work itself.
SHORT_KERNEL_MANY = 0.50
#: A CPU op (or Python between ops) holding a fifth of the GPU's launch wait is named as a cause:
#: below that the wait is spread over many small things and no one of them is the fix.
LAUNCH_WAIT_OP_SHARE = 0.20
#: Per-device batches at or below this rarely fill a modern GPU.
SMALL_BATCH_SIZE = 16
#: With a mostly idle GPU, 60% of kernels under SHORT_KERNEL_NS says the work per step is tiny.
SMALL_BATCH_SHORT_KERNELS = 0.60
#: A cause of the GPU's idle time under a tenth of it is not worth naming in the advice.
IDLE_CAUSE_SHARE = 0.10


def largest_gap_at(m: RunMetrics) -> TraceLocation | None:
    """Where the GPU's largest idle gap lies in its trace."""
    if m.gpu is None or not m.gpu.largest_gaps:
        return None
    gap = m.gpu.largest_gaps[0]
    return m.locate(m.gpu.origin, (gap.start_ns, gap.start_ns + gap.duration_ns))


@rule("HOST_LAUNCH_BOUND", severity=("high",), needs=("profiles",))
def host_launch_bound(facts: Facts) -> Finding | None:
    """The GPU waits for the CPU: its idle time ends with work launched during it (nothing was
    queued), for a large share of the step."""
    m, ctx = facts.metrics, facts.context
    idle, launch = m.gpu_idle, m.launch
    if idle is None or launch is None or idle.share("launch") < HOST_BOUND_IDLE_SHARE:
        return None
    many_short = launch.short_kernel_fraction >= SHORT_KERNEL_MANY and \
        launch.kernels_per_step >= MANY_KERNELS_PER_STEP
    evidence = [Evidence(f"the GPU idles {pct(idle.share('launch'))} of the step until work the "
                         "CPU launches during the idle time arrives (launch call and GPU work "
                         "joined by correlation id): nothing was queued", idle.origin,
                         m.locate(idle.origin, idle.longest_launch_wait)),
                Evidence(f"{launch.kernels_per_step:.0f} kernels launched per step, "
                         f"{pct(launch.short_kernel_fraction)} shorter than "
                         f"{whole_us(launch.short_kernel_ns)}; CUDA runtime calls take "
                         f"{ms(launch.runtime_ns_per_step)} of CPU time per step", launch.origin)]
    if launch.launch_delay_p50_ns is not None:
        left_out = f" ({launch.left_out_text()})" if launch.left_out_text() else ""
        evidence.append(Evidence(f"median launch-to-start latency {ms(launch.launch_delay_p50_ns)}"
                                 f" over the {launch.launch_delay_kernels:,} kernels launched "
                                 f"onto an idle stream{left_out}", launch.origin))
    if idle.launch_unknown is not None:
        evidence.append(Evidence(f"{ms(idle.launch_unknown_ns_per_step or 0)} more idle time per "
                                 "step, counted as unexplained, may wait for launches too: "
                                 f"{idle.launch_unknown}", idle.origin))
    evidence += _launch_wait_evidence(idle) + minor_sync_evidence(m.syncs)
    title = ("The GPU waits for the CPU to launch many small kernels." if many_short else
             "The GPU waits for the CPU to launch its work.")
    fuse = _fuse_advice(ctx)  # str.capitalize would lower-case 'CUDA'
    advice = (f"{fuse[0].upper()}{fuse[1:]} and raise the batch size so each launch "
              "carries more work." if many_short else
              _launch_wait_advice(idle, m.steps.count if m.steps is not None else 1, ctx))
    return Finding("HOST_LAUNCH_BOUND", "high", title, evidence, advice)


def _launch_wait_evidence(idle: IdleCauses) -> list[Evidence]:
    """What the CPU did while the GPU waited for its launches: the ops with the most self time
    then, and the time outside every op."""
    out = [Evidence(f"while the GPU waited, the CPU spent {ms(op.total_ns)} per step in {op.name} "
                    f"(self time, {pct(op.share)} of the wait)", idle.origin)
           for op in idle.launch_wait_ops if op.share >= LAUNCH_WAIT_OP_SHARE]
    if not out and idle.launch_wait_ops:
        spread = ", ".join(f"{op.name} {pct(op.share)}" for op in idle.launch_wait_ops)
        out.append(Evidence("while the GPU waited, no CPU operator held more than "
                            f"{pct(LAUNCH_WAIT_OP_SHARE)} of the wait (top by self time: "
                            f"{spread}): the time is spread over many operators", idle.origin))
    waited = idle.launch_wait_ns
    outside = idle.launch_wait_outside_ops_ns
    if outside is None:
        out.append(Evidence("what the CPU ran while the GPU waited is unknown: the profile "
                            "records no CPU operators", idle.origin))
    runtime = idle.launch_wait_runtime_ns or 0
    if waited and runtime / waited >= LAUNCH_WAIT_OP_SHARE:
        calls = ", ".join(f"{call.name} {ms(call.total_ns)}"
                          for call in idle.launch_wait_runtime_calls)
        out.append(Evidence(f"{ms(runtime)} per step ({pct(runtime / waited)} of the wait) lies "
                            "in GPU runtime or driver calls outside every recorded CPU "
                            f"operator ({calls})", idle.origin))
    if outside is not None and waited and outside / waited >= LAUNCH_WAIT_OP_SHARE:
        out.append(Evidence(f"{ms(outside)} per step ({pct(outside / waited)} of the wait) lies "
                            "outside every recorded CPU operator and runtime call: Python code "
                            "between operators", idle.origin))
    return out


def _fuse_advice(ctx: RunContext) -> str:
    """How to launch fewer kernels from the CPU: torch.compile, or CUDA graphs when the model is
    compiled already (compiled kernels are still launched one by one)."""
    if ctx.compiled():
        return ("replay the step as a CUDA graph (the model is compiled already, but each of its "
                "kernels is still launched from the CPU: compile with mode='reduce-overhead' or "
                "capture with torch.cuda.graph)")
    return ("fuse kernels with torch.compile (mode='reduce-overhead' also replays them as a "
            "CUDA graph)")


def _launch_wait_advice(idle: IdleCauses, steps: int, ctx: RunContext) -> str:
    """Advice aimed at what the CPU does while the GPU waits: the top op (or that it ran once,
    a start-up cost), or Python between ops, or generic when the trace names neither."""
    top = next((op for op in idle.launch_wait_ops if op.share >= LAUNCH_WAIT_OP_SHARE), None)
    waited = idle.launch_wait_ns
    outside = (idle.launch_wait_outside_ops_ns or 0) / waited if waited else 0.0
    runtime = (idle.launch_wait_runtime_ns or 0) / waited if waited else 0.0
    if runtime >= LAUNCH_WAIT_OP_SHARE and runtime >= outside and (top is None
                                                                   or runtime >= top.share):
        names = ", ".join(call.name for call in idle.launch_wait_runtime_calls)
        return ("The CPU spends the wait in GPU runtime calls made outside torch's operators "
                f"({names}): "
                "where they are one-off set-up (loading GPU code, growing the allocator), "
                "profile after a warm-up step (torch.profiler.schedule with warmup=1) to see the "
                "steady state; where the step makes them itself, move them out of the loop.")
    if top is not None and top.share >= outside and top.count == 1 and steps > 1:
        return (f"{top.name} held the CPU once in {steps} steps ({ms(top.total_ns * steps)}): "
                "a one-off cost (first call: lazy initialisation, allocation, autotuning), not "
                "one of every step; profile after a warm-up step (torch.profiler.schedule with "
                "warmup=1) to see the steady state.")
    if top is not None and top.share >= outside:
        return (f"Make {top.name} cheaper or move it out of the step: it holds the CPU for "
                f"{ms(top.total_ns)} per step while the GPU has nothing queued (allocate and "
                "prepare tensors once before the loop and reuse them, or launch the GPU work "
                "that does not depend on it first).")
    if top is None and outside < LAUNCH_WAIT_OP_SHARE and idle.launch_wait_ops:
        return ("Cut the CPU's cost per operator, which is spread over many small ops "
                f"({', '.join(op.name for op in idle.launch_wait_ops)}...): "
                f"{_fuse_advice(ctx)}, and raise the batch size so each op carries more GPU "
                "work.")
    if outside >= LAUNCH_WAIT_OP_SHARE:
        return ("Cut the Python between operators in the step (it runs while the GPU has nothing "
                f"queued): {_fuse_advice(ctx)}, move logging and metric computation out of the "
                "step, and avoid per-step .item()/print calls.")
    return ("Move Python and CPU work out of the step (or overlap it with the GPU: prepare the "
            "next batch while the current one runs), and avoid per-step .item()/print calls.")


#: What the GPU's idle time waits for (IdleCauses' causes), as the advice names it.
_IDLE_CAUSE_FIX = {"data": "the DataLoader", "sync": "blocking syncs",
                   "launch": "the CPU launching its work",
                   "unexplained": "CPU work that launches nothing (compilation, Python)"}


def _idle_advice(m: RunMetrics) -> str:
    """Fix what the GPU's idle time waits for, largest first, from the profile's own causes;
    said plainly when the profile shows none."""
    waits = dict(m.gpu_idle.idle_ns_per_step) if m.gpu_idle is not None else {}
    loop = loop_ns_without_loader(m)
    if loop is not None:  # the loader wait includes the GPU idle time between steps
        waits["data"] = max(waits.get("data", 0), loop[0])
    total = sum(waits.values())
    causes = [cause for cause, ns in sorted(waits.items(), key=lambda item: -item[1])
              if cause in _IDLE_CAUSE_FIX and ns > 0 and ns >= IDLE_CAUSE_SHARE * total]
    if not causes and m.startup_only:
        return ("The profile shows start-up only (see the start-up finding): its idle time lies "
                "in the set-up, not in steady training. Profile later steps to see what the GPU "
                "waits for then.")
    if not causes:
        return ("The profile does not show what the GPU waits for (no step markers or CPU "
                "activity around its idle time): profile a few steps with torch.profiler to see "
                "the CPU side.")
    named = ", ".join(f"{_IDLE_CAUSE_FIX[cause]} ({ms(waits[cause])} per step)"
                      for cause in causes)
    batch = ("; then raise the batch size so each launch carries more GPU work"
             if "launch" in causes else "")
    return f"Fix what the GPU waits for first: {named}{batch}."


@rule("LOW_GPU_UTIL", severity=("high", "medium"), needs=("profiles",))
def low_gpu_util(facts: Facts) -> Finding | None:
    """The GPU idles for most of its window; medium at most when the profile shows start-up
    only (its idle time lies in one-off set-up, not in steady training: STARTUP says so)."""
    m = facts.metrics
    g = m.gpu
    if g is None or g.busy_fraction >= LOW_GPU_BUSY:
        return None
    severity: Severity = ("high" if g.busy_fraction < VERY_LOW_GPU_BUSY and not m.startup_only
                          else "medium")
    evidence = [Evidence(f"kernels, copies and memsets cover {ms(g.busy_ns)} of the "
                         f"{g.window_text(ms)} GPU window", g.origin)]
    if g.largest_gaps:
        gap = g.largest_gaps[0]
        evidence.append(Evidence(f"largest idle gap {ms(gap.duration_ns)} on GPU {gap.device},"
                                 f" {gap.where}; {g.long_gap_count} gaps over "
                                 f"{ms(g.long_gap_ns)}", g.origin, largest_gap_at(m)))
    return Finding("LOW_GPU_UTIL", severity,
                   f"The GPU is busy only {pct(g.busy_fraction)} of the time.", evidence,
                   _idle_advice(m))


def _idle_cause_evidence(m: RunMetrics) -> list[Evidence]:
    """What the GPU's idle time inside the steps waits for, per step, when the trace tells."""
    idle = m.gpu_idle
    if idle is None or not sum(idle.idle_ns_per_step.values()):
        return []
    labels = {"data": "the DataLoader", "sync": "a sync", "launch": "launches",
              "unexplained": "nothing the trace shows"}
    parts = [f"{labels.get(cause, cause)} {ms(ns)}" for cause, ns in
             sorted(idle.idle_ns_per_step.items(), key=lambda item: -item[1]) if ns]
    return [Evidence("per step, the GPU's idle time waits for: " + ", ".join(parts),
                     idle.origin)]


@rule("LONG_GPU_IDLE_GAPS", severity=("low",), needs=("profiles",))
def long_gpu_idle_gaps(facts: Facts) -> Finding | None:
    """The GPU stops for more than LONG_IDLE_GAP_NS at a time although it is busy most of the
    time otherwise (a mostly idle GPU is LOW_GPU_UTIL's)."""
    m = facts.metrics
    g = m.gpu
    if g is None or not g.long_gap_count or g.busy_fraction < LOW_GPU_BUSY:
        return None
    gaps = [gap for gap in g.largest_gaps if gap.duration_ns > g.long_gap_ns]
    evidence = [Evidence(f"{g.long_gap_count} idle gap{'s' if g.long_gap_count != 1 else ''} "
                         f"over {ms(g.long_gap_ns)} while the GPU is busy "
                         f"{pct(g.busy_fraction)} of the {g.span}", g.origin)]
    evidence += [Evidence(f"idle {ms(gap.duration_ns)} on GPU {gap.device}, {gap.where}",
                          g.origin, m.locate(g.origin, (gap.start_ns,
                                                        gap.start_ns + gap.duration_ns)))
                 for gap in gaps[:3]]
    return Finding("LONG_GPU_IDLE_GAPS", "low",
                   f"The GPU stops for more than {ms(g.long_gap_ns)} at a time "
                   f"({g.long_gap_count} time{'s' if g.long_gap_count != 1 else ''}).",
                   evidence + _idle_cause_evidence(m),
                   "Look at what the loop does in these gaps (the locations point at them): a "
                   "DataLoader refilling at an epoch start (persistent_workers=True, a larger "
                   "prefetch_factor), evaluation, checkpointing or logging inside the loop (run "
                   "them less often or asynchronously), or a host-side sync.")


@rule("SMALL_BATCH", severity=("medium",), needs=("profiles", "manifest"))
def small_batch(facts: Facts) -> Finding | None:
    """Each step gives the GPU too little work (by the knobs, or by tiny kernels)."""
    m, ctx = facts.metrics, facts.context
    batch = ctx.knob("batch_size")
    if m.gpu is None:
        return None
    if isinstance(batch, int) and batch <= SMALL_BATCH_SIZE:
        origin = ctx.knob_origin("batch_size")
        where = "the source shown" if origin == "lprof" else "manifest"
        evidence = [Evidence(f"batch size {batch} per device ({where})", origin)]
    elif (m.launch is not None and m.gpu.busy_fraction < LOW_GPU_BUSY
          and m.launch.short_kernel_fraction >= SMALL_BATCH_SHORT_KERNELS
          and m.launch.kernels_per_step >= MANY_KERNELS_PER_STEP
          and (m.dataloader_fraction or 0.0) < LOADER_BOUND_FRACTION):
        evidence = [Evidence(f"{pct(m.launch.short_kernel_fraction)} of kernels are shorter "
                             f"than {whole_us(m.launch.short_kernel_ns)} and the GPU is busy "
                             f"{pct(m.gpu.busy_fraction)}", m.launch.origin)]
    else:
        return None
    amp = "" if amp_not_to_advise(reduced_precision(m), ctx) else \
        "; mixed precision frees memory for a larger batch"
    return Finding("SMALL_BATCH", "medium", "Each step gives the GPU too little work.", evidence,
                   "Raise the per-device batch size (scale the learning rate with it) or use "
                   f"gradient accumulation{amp}.")
