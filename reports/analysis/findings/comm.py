"""Findings about communication: collectives' share of the step and overlap, nn.DataParallel.
"""

from __future__ import annotations

import math

import pandas as pd

from profreport import concepts
from profreport.reports.analysis.findings.catalogue import Facts, rule
from profreport.reports.analysis.findings.context import RunContext
from profreport.reports.analysis.findings.copies import _count
from profreport.reports.analysis.findings.verdicts import COMM_BOUND_EXPOSED_FRACTION
from profreport.reports.analysis.job import mostly_waiting
from profreport.reports.analysis.results import (
    AllReduceSizes,
    CommStats,
    Evidence,
    Finding,
    Origin,
    Severity,
)
from profreport.units import MIB, knob_mb, ms, nbytes, pct

#: NCCL/gloo taking a tenth of the step is worth reporting, even when mostly overlapped.
COMM_REPORT_FRACTION = 0.10
#: Exposed communication above this share is worth tuning (bucket sizes, overlap).
COMM_EXPOSED_WARN_FRACTION = 0.05
#: Half of the communication time in collectives of one kind (all-reduce, all-to-all...) says
#: what the communication is for, and so which knobs move it.
COLLECTIVE_DOMINANT_SHARE = 0.50
#: DDP's bucket size when the script does not set it (torch.nn.parallel.DistributedDataParallel):
#: a run at this value has not tuned it; any other value was chosen and is not advised again.
DDP_DEFAULT_BUCKET_MB = 25
#: DDP's first bucket (the last layers' gradients, ready first) is capped at 1 MiB
#: (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES) when bucket_cap_mb is not passed, so that
#: reducing starts early; any bucket_cap_mb passed, 25 included, caps it alike (torch 2.13's
#: _BucketCapacityConfig.create).
DDP_FIRST_BUCKET_MB = 1


def dominant_collective(c: CommStats) -> str | None:
    """The kind of collective (concepts.ALL_REDUCE...) that holds COLLECTIVE_DOMINANT_SHARE of
    the communication time, None when none does or the kinds are unknown."""
    total = sum(c.ns_per_step_by_collective.values())
    return next((kind for kind, ns in c.ns_per_step_by_collective.items()
                 if kind != "unknown" and ns >= COLLECTIVE_DOMINANT_SHARE * total > 0), None)


def _may_broadcast(c: CommStats) -> bool:
    """Whether the steps may hold DDP's buffer broadcasts (broadcast_buffers=True sends the
    buffers at every forward): broadcasts recorded, or collectives the profile does not name.
    A model without buffers broadcasts nothing, and neither does the knob then."""
    kinds = c.ns_per_step_by_collective
    return not kinds or kinds.get(concepts.BROADCAST, 0) > 0 or kinds.get("unknown", 0) > 0


def buckets_at(total_bytes: int, cap_mb: float | None) -> int:
    """All-reduces DDP makes of ``total_bytes`` of gradients at bucket_cap_mb=``cap_mb`` (None:
    not passed, DDP_DEFAULT_BUCKET_MB): its first bucket (DDP_FIRST_BUCKET_MB when not passed,
    else ``cap_mb`` too), then one per cap (a bucket is closed once it holds that much)."""
    cap = DDP_DEFAULT_BUCKET_MB if cap_mb is None else cap_mb
    first = DDP_FIRST_BUCKET_MB if cap_mb is None else cap_mb
    return 1 + math.ceil(max(total_bytes - first * MIB, 0) / (cap * MIB))


def _sizes_said(s: AllReduceSizes) -> str:
    """What sizes the gradient all-reduces have: each distinct size when there are few
    (AllReduceSizes.sizes_bytes), else the largest and the median, defined."""
    if len(s.sizes_bytes) == 1:
        return "" if s.calls_per_step == 1 else f" (each {nbytes(s.sizes_bytes[0])})"
    if s.sizes_bytes:
        said = [nbytes(b) for b in s.sizes_bytes]
        return f" (sizes {', '.join(said[:-1])} and {said[-1]})"
    return (f" (largest {nbytes(s.largest_bytes)}, median {nbytes(s.median_bytes)}: the "
            "middle one by size)")


def _sizes_evidence(c: CommStats) -> Evidence | None:
    """What the steps' all-reduces send (against the buckets DDP's default would make), or why
    that is unknown; None when the communication is of another kind."""
    s = c.all_reduce_sizes
    if s is None:
        return (None if c.sizes_unknown is None or dominant_collective(c) not in
                (None, concepts.ALL_REDUCE) else
                Evidence(f"all-reduce sizes: unknown, {c.sizes_unknown}", c.origin))
    if not s.calls_per_step:
        return Evidence(f"the {_count(s.others_per_step)} all-reduce{_plural(s.others_per_step)}"
                        " per step run outside the backward pass: none is a gradient bucket "
                        "(DDP all-reduces those from autograd's hooks in backward), and "
                        "bucket_cap_mb does not change them", c.origin)
    where = " in the backward pass" if s.others_per_step else ""
    others = (f"; {_count(s.others_per_step)} more per step outside it (a loss or metric the "
              "loop reduces: no gradient bucket)" if s.others_per_step else "")
    default = buckets_at(s.bytes_per_step, None)
    return Evidence(f"{_count(s.calls_per_step)} all-reduce{_plural(s.calls_per_step)} per step"
                    f"{where} send{'s' if s.calls_per_step == 1 else ''} "
                    f"{nbytes(s.bytes_per_step)} in all{_sizes_said(s)}; DDP's default buckets "
                    f"({DDP_FIRST_BUCKET_MB} MB first, then {DDP_DEFAULT_BUCKET_MB} MB) would make "
                    f"about {default}{others}", c.origin)


def _plural(count: float) -> str:
    """'s' after a noun counted ``count`` times, '' after one."""
    return "" if count == 1 else "s"


def _bucket_lever(c: CommStats, ctx: RunContext) -> str | None:
    """Raise bucket_cap_mb when the steps' all-reduces are smaller than DDP's default buckets
    would make them (from what to what, by their recorded sizes); never when they are as large
    or larger. A run whose knob is recorded (a value, or None: not passed) is judged at it; one
    whose knob is unrecorded at its largest bucket (DDP fills each up to the cap, the last one
    holds the rest), and is said to be unrecorded. Sizes unknown: the old conditional advice, saying
    why they are unknown."""
    s, knob = c.all_reduce_sizes, ctx.knob("bucket_cap_mb")
    if s is None:
        if knob not in (None, DDP_DEFAULT_BUCKET_MB) or c.calls_per_step <= 1:
            return None
        return (f"raise bucket_cap_mb from {DDP_DEFAULT_BUCKET_MB} MB to cut the "
                f"{_count(c.calls_per_step)} calls per step if they are small buckets (their "
                f"sizes are unknown: {c.sizes_unknown})")
    if s.calls_per_step <= buckets_at(s.bytes_per_step, None):
        return None
    recorded = "bucket_cap_mb" in ctx.knobs
    # Unrecorded, the knob in force is the largest bucket: as large as the default, it is not
    # what makes the many all-reduces.
    default_cap = not recorded and s.largest_bytes >= DDP_DEFAULT_BUCKET_MB * MIB
    if (recorded and knob is None) or default_cap or (isinstance(knob, int | float)
                                                      and knob >= DDP_DEFAULT_BUCKET_MB):
        at = "DDP's default buckets" if knob is None else f"DDP's buckets of {knob:g} MB"
        return (f"the {_count(s.calls_per_step)} all-reduces per step are smaller than {at} "
                f"make (about {buckets_at(s.bytes_per_step, knob)}): if they are not "
                "DDP's (an all_reduce per tensor), let DDP bucket the "
                "gradients, or flatten them into one tensor per all_reduce")
    now = (f"{knob:g} MB" if isinstance(knob, int | float) else
           f"about {knob_mb(s.largest_bytes)} (the largest all-reduce: DDP fills each bucket "
           "up to bucket_cap_mb and the last one holds the rest; the run's bucket_cap_mb is "
           "unknown, not recorded)")
    made = buckets_at(s.bytes_per_step, DDP_DEFAULT_BUCKET_MB)
    return (f"raise bucket_cap_mb from {now} to {DDP_DEFAULT_BUCKET_MB} MB: the "
            f"{nbytes(s.bytes_per_step)} each step reduces would take about {made} "
            f"all-reduce{_plural(made)} instead of {_count(s.calls_per_step)} (passed, "
            "bucket_cap_mb caps DDP's first bucket too)")


def _ddp_levers(c: CommStats, ctx: RunContext, forwards: int | None) -> str:
    """DDP's gradient all-reduce: the knobs that cut or hide it, less those the run has set
    (``forwards``: the fewest DDP forward passes one gradient all-reduce round takes,
    RunMetrics.ddp_forwards_per_sync)."""
    levers = list(filter(None, [_bucket_lever(c, ctx)]))
    if ctx.knob("broadcast_buffers") in (None, True) and _may_broadcast(c):
        levers.append("set broadcast_buffers=False if the model's buffers need no sync")
    levers.append(_accumulation_lever(ctx, forwards))
    return "; ".join(levers)


def _accumulation_lever(ctx: RunContext, forwards: int | None) -> str:
    """Reduce gradients less often: start accumulating them, or, in a run whose steps already
    take several batches (the knob ``batches_per_step`` a --script run records, else the DDP
    forward passes every step of the profile holds), accumulate over more."""
    batches = ctx.knob("batches_per_step")
    if isinstance(batches, int | float) and not isinstance(batches, bool) and batches > 1:
        return (f"accumulate gradients over more than the {batches:g} batches each step takes "
                "now (with no_sync() on all but the last), or use a larger local batch, so "
                "gradients are reduced less often")
    if forwards is not None and forwards > 1:
        return (f"accumulate gradients over more than the {forwards} forward passes each step "
                "runs now (its DistributedDataParallel.forward spans; no_sync() on all but the "
                "last), or use a larger local batch, so gradients are reduced less often")
    return ("use a larger local batch or gradient accumulation with no_sync() so gradients are "
            "reduced less often")


#: What to change for communication of each kind, when it dominates.
_COLLECTIVE_ADVICE = {
    concepts.ALL_TO_ALL: "The communication is all-to-all (embedding or expert sharding, not "
    "DDP's gradient reduction): overlap it with compute (a pipelined training loop such as "
    "TorchRec's TrainPipelineSparseDist), send fewer bytes (smaller or quantised embeddings, "
    "fp16/bf16 comms), or shard so that fewer lookups cross ranks.",
    concepts.SEND_RECV: "The communication is point-to-point send/recv (pipeline stages or "
    "all-to-all built from them): overlap it with compute (more micro-batches per pipeline "
    "step, an interleaved schedule) and send fewer bytes (bf16 activations).",
    concepts.ALL_GATHER: "The communication gathers parameters (FSDP/ZeRO): prefetch the next "
    "all-gather during compute (forward_prefetch=True, backward_prefetch=BACKWARD_PRE), wrap "
    "larger units so fewer gathers run, or keep parameters sharded less (hybrid sharding).",
    concepts.REDUCE_SCATTER: "The communication scatters gradients (FSDP/ZeRO): wrap larger "
    "units so fewer reduce-scatters run, reduce in bf16 (MixedPrecision(reduce_dtype="
    "torch.bfloat16)), or accumulate gradients over more micro-batches.",
    concepts.BROADCAST: "The communication is broadcasts (parameters or buffers sent from one "
    "rank every step): broadcast once at start-up (DDP's broadcast_buffers=False when buffers "
    "need no sync).",
}


def _comm_advice(c: CommStats, ctx: RunContext, forwards: int | None) -> str:
    """What to change, by the collective the communication is: DDP's knobs only for
    all-reduce, and conditional when the profile does not say what the kernels do."""
    kind = dominant_collective(c)
    if kind == concepts.ALL_REDUCE:
        return f"Tune DDP's gradient all-reduce: {_ddp_levers(c, ctx, forwards)}."
    if kind in _COLLECTIVE_ADVICE:
        return _COLLECTIVE_ADVICE[kind]
    return ("The profile does not say what most of this communication is (kernel names "
            "without the collective, launches not recorded): if it is DDP's gradient "
            f"all-reduce, {_ddp_levers(c, ctx, forwards)}.")


def _waiting(c: CommStats, ctx: RunContext) -> tuple[float, Evidence, str] | None:
    """When this rank's exposed communication is mostly waiting for the rank the job waits for
    (RunContext.waited_for, which waits less inside the collectives; job.mostly_waiting): the
    share of the step the collectives themselves may cost (that rank's exposed share), the
    evidence and the advice."""
    pacer = ctx.waited_for
    if pacer is None or pacer.comm_exposed_fraction is None \
            or not mostly_waiting(c.exposed_fraction, pacer.comm_exposed_fraction):
        return None
    share = pacer.comm_exposed_fraction
    evidence = Evidence(f"{pacer.label}, the rank the job waits for, has {pct(share)} of its "
                        f"step exposed in the same collectives: the rest of this rank's "
                        f"{pct(c.exposed_fraction)} is waiting for {pacer.label} to join them",
                        c.origin)
    advice = (f"Most of this communication is waiting for {pacer.label} ({pacer.verdict}: "
              f"{pacer.verdict_reason.rstrip('.')}): make {pacer.label}'s own step as short as "
              "the others' first (its verdict in the per-rank table); the collectives "
              f"themselves cost at most {pct(share)} of the step.")
    return share, evidence, advice


@rule("COMM_OVERHEAD", severity=("high", "medium", "low"), needs=("profiles", "manifest"))
def comm_overhead(facts: Facts) -> Finding | None:
    """Collectives take a noticeable share of the step; say how much is hidden under compute
    (and, of a rank waiting for another, how much is that wait)."""
    m, ctx = facts.metrics, facts.context
    c = m.comm
    if c is None or c.fraction < COMM_REPORT_FRACTION:
        return None
    waiting = _waiting(c, ctx)
    exposed = c.exposed_fraction if waiting is None else waiting[0]
    severity: Severity = ("high" if exposed >= COMM_BOUND_EXPOSED_FRACTION else
                          "medium" if exposed >= COMM_EXPOSED_WARN_FRACTION else "low")
    where = f"{c.library} kernels" if c.on_gpu else "CPU collectives"
    calls = f"{_count(c.calls_per_step)} call{'' if c.calls_per_step == 1 else 's'} per step"
    evidence = [Evidence(f"{where} take {pct(c.fraction)} of step time "
                         f"({ms(c.total_ns_per_step)} per step, {calls})", c.origin),
                Evidence(f"{pct(c.overlap_fraction)} of communication time overlaps compute; "
                         f"{pct(c.exposed_fraction)} of the step is exposed communication",
                         c.origin)]
    if c.ns_per_step_by_collective:
        evidence.append(Evidence("per step: " + ", ".join(
            f"{'not identified' if kind == 'unknown' else kind.replace('_', '-')} {ms(ns)}"
            for kind, ns in
            c.ns_per_step_by_collective.items()), c.origin))
    evidence += filter(None, [_sizes_evidence(c)])
    advice = _comm_advice(c, ctx, m.ddp_forwards_per_sync)
    if severity == "low":
        advice = ("Communication is mostly hidden under compute; no change needed unless you "
                  "scale further. " + advice)
    if waiting is not None:
        evidence.append(waiting[1])
        advice = waiting[2] + ("" if severity == "low" else " Then: " + advice)
    elif ctx.ranks_not_given is not None:
        advice = (f"First profile every rank ({ctx.ranks_not_given}): this rank's time in the "
                  "collectives includes waiting for the others, which its trace cannot tell "
                  "apart from the transfer; when a rank lags, make its step shorter. If none "
                  "does: " + advice)
    title = (f"Communication takes {pct(c.fraction)} of each step; "
             f"{pct(c.overlap_fraction)} of it overlaps compute.")
    return Finding("COMM_OVERHEAD", severity, title, evidence, advice)


@rule("DATAPARALLEL_NOT_DDP", severity=("high",), needs=("profiles", "manifest"))
def dataparallel_not_ddp(facts: Facts) -> Finding | None:
    """nn.DataParallel (one process driving several GPUs) instead of DDP: its forward span, or
    one process launching kernels on several GPUs, or the run's knob.

    DataParallel's autograd
    functions alone (Broadcast, Gather...) are not enough: ``GatherBackward0`` is torch.gather's
    backward, and a DistributedDataParallel run is no DataParallel run. Nor are several GPUs
    where the GPU profile records CPU operators and none of DataParallel's: its forward runs
    its Scatter and Gather functions, which a profile recording operators records, so such a
    process splits its model over the GPUs (model parallelism, a device_map), which DDP does
    not replace. Where the GPU profile records no CPU operator (an nsys capture) the GPUs alone
    cannot tell the two apart: the finding says so and advises DDP only for DataParallel."""
    m, ctx = facts.metrics, facts.context
    forward = bool(m.dataparallel_ops) and bool(
        concepts.is_dataparallel_forward(pd.Series(list(m.dataparallel_ops))).any())
    multi_device = (m.max_devices_per_process or 0) > 1 and m.gpu is not None and not (
        m.top_ops and m.top_ops_origin == m.gpu.origin and not m.dataparallel_ops)
    if not (forward or multi_device or ctx.knob("dataparallel")):
        return None
    evidence: list[Evidence] = []
    if m.dataparallel_ops:
        listed = ", ".join(f"{name} ×{count}" for name, count in m.dataparallel_ops.items())
        origin: Origin = "nsys" if m.gpu is not None and m.gpu.origin == "nsys" else "kineto"
        evidence.append(Evidence(f"nn.DataParallel ops: {listed[:200]}", origin))
    if multi_device:
        at_least = "at least " if m.devices_per_process_unknown else ""
        evidence.append(Evidence(f"one process launched kernels on {at_least}"
                                 f"{m.max_devices_per_process} GPUs", m.gpu.origin))
    if ctx.knob("dataparallel"):
        evidence.append(Evidence("the run's knobs use nn.DataParallel", "manifest"))
    ddp = ("switch to DistributedDataParallel with one process per GPU (torchrun "
           "--nproc_per_node=<GPUs>, or srun --ntasks-per-node=<GPUs>) and a DistributedSampler.")
    if forward or ctx.knob("dataparallel") or m.dataparallel_ops:
        return Finding("DATAPARALLEL_NOT_DDP", "high",
                       "The model uses nn.DataParallel: one process drives every GPU.", evidence,
                       ddp[0].upper() + ddp[1:])
    # Only the GPUs one process launched on, in a GPU profile of no CPU operator (multi_device
    # with no DataParallel op): DataParallel and a model split over the GPUs both look so.
    at_least = "at least " if m.devices_per_process_unknown else ""
    return Finding("DATAPARALLEL_NOT_DDP", "high",
                   f"One process drives {at_least}{m.max_devices_per_process} GPUs: "
                   "nn.DataParallel, or one model split over them (the profile records no CPU "
                   "operator to tell which).", evidence,
                   f"If it is nn.DataParallel: {ddp} A model split over the GPUs (model "
                   "parallelism, a device_map) is no DataParallel: DDP does not replace it.")
