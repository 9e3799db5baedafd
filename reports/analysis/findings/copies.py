"""Findings about copies and syncs: copies setting the pace, pageable host-to-device copies,
copies in every step, the CPU blocked waiting for the GPU.
"""

from __future__ import annotations

from profreport import concepts
from profreport.reports.analysis.findings.catalogue import Facts, rule
from profreport.reports.analysis.findings.verdicts import (
    COPY_PARTS,
    compute_share,
    gpu_saturated_by_compute,
    transfer_bound_share,
)
from profreport.reports.analysis.results import (
    CopyStats,
    Evidence,
    Finding,
    RunMetrics,
    Severity,
    StepCopies,
    SyncStats,
    origin_label,
)
from profreport.reports.analysis.transfers import NO_LAUNCH_CALL, NO_OPERATOR
from profreport.units import ms, nbytes, pct

#: Pageable copies are staged through a bounce buffer: worth fixing once half the H2D bytes ...
PAGEABLE_SHARE = 0.50
#: ... and at least this many bytes (64 MiB) come from pageable memory over the profile.
PAGEABLE_MIN_BYTES = 64 * 2**20
#: Blocking calls (syncs, blocking copy calls) holding the CPU 10% of the step while the
#: GPU is not saturated by compute (gpu_saturated_by_compute) stall the pipeline.
SYNC_STALL_FRACTION = 0.10
#: A batch is a few tensors, one of them perhaps small (the labels): from 4 small (<64 KiB)
#: host-to-device copies per step on, tensors are built on the host inside the loop.
SMALL_HTOD_PER_STEP = 4
#: One device-to-host copy per step is a loss read; from two on, values are read back in the loop
#: (.item(), .cpu(), printing, ``if tensor:``), each waiting for the GPU to get there.
DTOH_PER_STEP = 2


@rule("PAGEABLE_MEMCPY", severity=("medium", "low"), needs=("profiles", "manifest"))
def pageable_memcpy(facts: Facts) -> Finding | None:
    """Host-to-device copies come from pageable (unpinned) memory; low when the profile shows
    start-up only (one-off set-up copies, the model's weights among them: pinning pays for the
    copies every step repeats, which such a profile does not show)."""
    m, ctx = facts.metrics, facts.context
    c = m.copies
    if c is None or c.h2d_bytes <= 0 or c.h2d_pageable_bytes is None:
        return None
    if c.h2d_pageable_bytes < PAGEABLE_MIN_BYTES or \
            c.h2d_pageable_bytes / c.h2d_bytes < PAGEABLE_SHARE:
        return None
    pinned = "pin_memory=True" if not ctx.knob("pin_memory") else "pinned buffers"
    advice = (f"Use {pinned} in the DataLoader with .to(device, non_blocking=True): "
              f"{nbytes(c.h2d_pageable_bytes)} of H2D copies came from pageable memory.")
    if m.startup_only:
        advice = (f"The profile shows start-up only (see the start-up finding): its "
                  f"{nbytes(c.h2d_pageable_bytes)} of pageable H2D copies are one-off set-up "
                  "(the model's weights and buffers moved to the device, a first batch), "
                  "which pinning does not speed up. Profile later steps: if batches are copied "
                  f"from pageable memory there, use {pinned} in the DataLoader with "
                  ".to(device, non_blocking=True).")
    return Finding("PAGEABLE_MEMCPY", "low" if m.startup_only else "medium",
                   f"{pct(c.h2d_pageable_bytes / c.h2d_bytes)} of host-to-device bytes come "
                   "from pageable memory.",
                   [Evidence(f"{nbytes(c.h2d_pageable_bytes)} of {nbytes(c.h2d_bytes)} H2D copied "
                             f"from pageable memory, {ms(c.h2d_ns)} of copy time",
                             c.origin)],
                   advice)


def _sync_evidence(syncs: SyncStats, m: RunMetrics) -> list[Evidence]:
    """One line per blocking call inside the steps (located at its longest call), and one for
    those outside them."""
    out = [Evidence(f"{call.name}: {call.calls_per_step:g} per step, {ms(call.ns_per_step)} per "
                    "step inside the step windows", syncs.origin,
                    m.locate(syncs.origin, call.longest))
           for call in syncs.calls if call.calls_per_step > 0]
    if syncs.outside_calls:
        out.append(Evidence(f"{syncs.outside_calls} more blocking call"
                            f"{'s' if syncs.outside_calls != 1 else ''} "
                            f"({ms(syncs.outside_ns)}) outside the steps (warm-up or teardown), "
                            "not counted per step", syncs.origin))
    return out


def unjudged_copies_evidence(syncs: SyncStats | None) -> list[Evidence]:
    """The copy calls whose blocking is unknown, and why (SyncStats.copies_unknown): the time
    the CPU blocked in them is in no figure, so no stall is ruled out by it."""
    if syncs is None or syncs.copies_unknown is None:
        return []
    return [Evidence(f"time the CPU blocked in copy calls (SYNC_STALL): unknown, "
                     f"{syncs.copies_unknown}",
                     syncs.origin)]


def minor_sync_evidence(syncs: SyncStats | None) -> list[Evidence]:
    """Blocking calls that exist but are too short to be the stall: said, so that a reader who
    sees them in the trace knows they were weighed."""
    if syncs is None or syncs.fraction >= SYNC_STALL_FRACTION or syncs.ns_per_step <= 0:
        return []
    names = ", ".join(call.name for call in syncs.calls if call.calls_per_step > 0)
    return [Evidence(f"the CPU also blocks in {names} for {ms(syncs.ns_per_step)} per step "
                     f"({pct(syncs.fraction)} of the step): too little to be the stall",
                     syncs.origin)]


@rule("SYNC_STALL", severity=("medium",), needs=("profiles",))
def sync_stall(facts: Facts) -> Finding | None:
    """The CPU blocks in syncs or blocking copies for a large share of each step while the GPU
    is not saturated by compute (``COMPUTE_BOUND_BUSY``: a CPU waiting on a GPU its kernels fill
    costs nothing, but a GPU kept busy by copies or collectives with no kernel beside them has
    its kernels idle, and the blocked CPU queues none to run beside them). A copy call blocks
    when its copy goes device-to-host into pageable memory, or when it returned only after the
    copy its correlation id links to it ended and work queued ahead of that copy on its stream
    ran past the call's start: it held the CPU until the GPU reached and finished the copy (a
    pageable host-to-device copy, which CUDA stages and may synchronize with the stream, too),
    its whole call counted; on an idle stream it only waited for its own copy, copy time and no
    stall (where the profile records no copy direction, destination memory kind or stream,
    returning after its copy ended is enough, its label saying which is unrecorded)."""
    m = facts.metrics
    syncs = m.syncs
    if syncs is None or syncs.fraction < SYNC_STALL_FRACTION or gpu_saturated_by_compute(m):
        return None
    top = syncs.calls[0]
    pageable = any("pageable" in call.name and call.calls_per_step for call in syncs.calls)
    advice = ("Keep values on the GPU (accumulate the loss as a tensor), read them every N steps "
              "instead of each step (.item(), .cpu(), print(loss)), and remove "
              "torch.cuda.synchronize() from the step")
    if pageable:
        advice += ("; copy device-to-host into pinned memory with non_blocking=True so the copy "
                   "does not block")
    return Finding("SYNC_STALL", "medium",
                   f"The CPU waits for the GPU in blocking calls for {pct(syncs.fraction)} of "
                   f"each step, most in {top.name}.",
                   _sync_evidence(syncs, m) + unjudged_copies_evidence(syncs), advice + ".")


def _copy_evidence(m: RunMetrics, c: StepCopies, kind: str) -> list[Evidence]:
    """Count, size, GPU time and launching operators of one direction's copies per step."""
    if not c.copies_per_step[kind]:
        return []
    where = {concepts.HTOD: "host-to-device", concepts.DTOH: "device-to-host"}[kind]
    noun = "copy" if c.copies_per_step[kind] == 1 else "copies"
    out = [Evidence(f"{_count(c.copies_per_step[kind])} {where} {noun} launched per step "
                    f"({_count(c.small_per_step[kind])} under 64 KiB), "
                    f"{nbytes(c.bytes_per_step[kind])} and {ms(c.ns_per_step[kind])} of copy "
                    "time per step", c.origin, m.locate(c.origin, c.longest.get(kind)))]
    if c.launchers.get(kind):
        labels = {NO_OPERATOR: "no recorded operator",
                  NO_LAUNCH_CALL: "unknown, linked to no launch call"}
        listed = ", ".join(f"{labels.get(name, name)} ({_count(count)} per step)"
                           for name, count in c.launchers[kind])
        out.append(Evidence(f"launched (runtime call joined by correlation id) inside: {listed}",
                            c.origin))
    return out


def _count(value: float) -> str:
    """A per-step count: whole numbers as such, others to one decimal."""
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


@rule("HOST_DEVICE_COPIES_PER_STEP", severity=("medium", "low"), needs=("profiles",))
def host_device_copies(facts: Facts) -> Finding | None:
    """More host <-> device copies per step than a batch needs: small tensors built on the host
    in the loop, or values read back each step; medium where ``DTOH_PER_STEP`` reads a step go
    to pageable memory, each blocking the CPU until the GPU drains, and the GPU is not saturated
    by compute (as for SYNC_STALL)."""
    m = facts.metrics
    c = m.step_copies
    if c is None:
        return None
    small_in = c.small_per_step[concepts.HTOD] >= SMALL_HTOD_PER_STEP
    # an inference step returns its outputs: reading them back is its job
    read_back = c.copies_per_step[concepts.DTOH] >= DTOH_PER_STEP and c.training is not False
    if not (small_in or read_back):
        return None
    evidence = _copy_evidence(m, c, concepts.HTOD) + _copy_evidence(m, c, concepts.DTOH)
    if c.launches_unknown is not None:
        evidence.append(Evidence(f"copies per step: {c.launches_unknown}", c.origin))
    if not c.records_operators:
        evidence.append(Evidence(f"{origin_label(c.origin)} records no framework operators: "
                                 "which call launched the copies is unknown", c.origin))
    if c.blocking_per_step:
        evidence.append(Evidence(f"{_count(c.blocking_per_step)} device-to-host copies per step "
                                 "go to pageable memory: each blocks the CPU until the GPU "
                                 "drains",
                                 c.origin))
    severity: Severity = ("medium" if c.blocking_per_step >= DTOH_PER_STEP
                          and not gpu_saturated_by_compute(m) else "low")
    steps = []
    if small_in:
        steps.append("Build per-step tensors on the GPU (torch.tensor(..., device='cuda'), "
                     "torch.zeros(..., device=...)) or move them once, not each step")
    if read_back:
        steps.append(("k" if small_in else "K") + "eep per-step values on the GPU (accumulate "
                     "the loss as a tensor) and read them every N steps instead of calling "
                     ".item()/.cpu()/print or testing a tensor in an if inside the step")
    counts = " and ".join(f"{_count(c.copies_per_step[k])} {label}" for k, label in
                          ((concepts.HTOD, "host-to-device"), (concepts.DTOH, "device-to-host"))
                          if c.copies_per_step[k])
    return Finding("HOST_DEVICE_COPIES_PER_STEP", severity,
                   f"Each step copies between host and device more often than a batch needs: "
                   f"{counts} copies.", evidence, "; ".join(steps) + ".")


def _memory_evidence(c: CopyStats | None) -> list[Evidence]:
    """Which host memory the host-to-device copies come from: pinned and pageable bytes, or
    unknown and why (CopyStats.h2d_kinds_unknown)."""
    if c is None or (c.h2d_bytes <= 0 and c.h2d_kinds_unknown is None):
        return []
    if c.h2d_pageable_bytes is None or c.h2d_pinned_bytes is None:
        return [Evidence(f"pinned or pageable host memory: unknown, {c.h2d_kinds_unknown}",
                         c.origin)]
    return [Evidence(f"host-to-device bytes over the profile: {nbytes(c.h2d_pinned_bytes)} from "
                     f"pinned memory, {nbytes(c.h2d_pageable_bytes)} from pageable memory",
                     c.origin)]


def _transfer_advice(m: RunMetrics) -> str:
    """What to change when copies set the pace: keep the data on the GPU, pin and overlap the
    copies (pinning only where some come from pageable memory or it is unknown), fewer larger
    copies where a step makes several, a smaller dtype."""
    c, steps = m.copies, m.step_copies
    pageable = c is None or c.h2d_pageable_bytes is None or c.h2d_pageable_bytes > 0
    advice = ["Keep the data on the GPU: move a dataset (or its tensors) that fits in GPU memory "
              "there once, before the loop, not each step"]
    advice.append("use pin_memory=True in the DataLoader with .to(device, non_blocking=True) so "
                  "the copies overlap the kernels" if pageable else
                  "the copies already come from pinned memory: issue them with "
                  ".to(device, non_blocking=True) (and prefetch the next batch) so they overlap "
                  "the kernels")
    if steps is not None and steps.copies_per_step[concepts.HTOD] >= SMALL_HTOD_PER_STEP:
        advice.append(f"make fewer, larger copies ({_count(steps.copies_per_step[concepts.HTOD])} "
                      "host-to-device copies per step now: stack the tensors into one)")
    advice.append("copy a smaller dtype (uint8 images, fp16/bf16 features) and convert on the GPU")
    return "; ".join(advice) + "."


@rule("TRANSFER_BOUND", severity=("high",), needs=("profiles",))
def transfer_bound(facts: Facts) -> Finding | None:
    """The GPU's copies and memsets, with no compute kernel beside them, hold most of the step
    (the breakdown's host-to-device copy and other copy parts), not its kernels: moving data
    sets the pace."""
    m = facts.metrics
    share, b = transfer_bound_share(m), m.breakdown
    if share is None or b is None:
        return None
    h2d, other = (ms(b.parts_ns[part]) for part in COPY_PARTS)
    hidden = (f" (and {ms(b.h2d_overlapped_ns)} more beside compute kernels)"
              if b.h2d_overlapped_ns else "")
    evidence = [Evidence(f"host-to-device copies {h2d}{hidden} and other copies and memsets "
                         f"{other} per step: {pct(share)} of {ms(b.step_ns)} with no compute "
                         f"kernel beside them; compute kernels {pct(compute_share(m) or 0.0)}",
                         b.origin)]
    if m.step_copies is not None:
        evidence += (_copy_evidence(m, m.step_copies, concepts.HTOD)
                     + _copy_evidence(m, m.step_copies, concepts.DTOH))
    evidence += _memory_evidence(m.copies)
    return Finding("TRANSFER_BOUND", "high",
                   f"Copies on the GPU set the pace of training: {pct(share)} of each step.",
                   evidence, _transfer_advice(m))
