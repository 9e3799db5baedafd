"""Findings from the allocator's levels (reports.analysis.memory): out-of-memory risk, headroom for
a larger batch, growth from step to step, allocator churn.
"""

from __future__ import annotations

import math

from profreport.reports.analysis.findings.catalogue import Facts, rule
from profreport.reports.analysis.findings.compute import amp_not_to_advise
from profreport.reports.analysis.memory import TrainingSettings
from profreport.reports.analysis.ops import reduced_precision
from profreport.reports.analysis.results import (
    DeviceMemory,
    Evidence,
    Finding,
    MemoryStats,
    rank_label,
)
from profreport.units import memory_size, whole_pct

#: Above 90% of the device's memory a longer sequence, a larger image or fragmentation is enough
#: to run out of memory.
OOM_RISK_FRACTION = 0.90
#: Below half the device's memory at peak, the batch can grow (at least double, less the fixed
#: part) without touching the model.
HEADROOM_FRACTION = 0.50
#: The share of the device a suggested larger batch is sized to fill: leaves room for the
#: allocator's rounding and fragmentation.
TARGET_FILL_FRACTION = 0.80
#: A leak shows as the level at the end of each step above the previous one: at least this many
#: consecutive growing steps, so a one-off (optimizer state made on the first step) is not one.
LEAK_MIN_STEPS = 3
#: ... and growth of at least 1 MiB over them: allocator rounding moves levels by a few kB.
LEAK_MIN_BYTES = 1 << 20
#: Driver allocations in steady-state steps: even one per step means cudaMalloc/cudaFree (which
#: synchronise the device) in every iteration instead of reusing cached blocks.
CHURN_DRIVER_CALLS_PER_STEP = 1.0


def _where(device: DeviceMemory) -> str:
    """``rank 1 cuda:0 (Tesla V100)`` for evidence sentences."""
    place = "host memory" if device.device < 0 else f"{device.device_kind}:{device.device}"
    return " ".join(filter(None, [rank_label(device.rank), place])) + \
        (f" ({device.device_name})" if device.device_name else "")


def _peak_used(device: DeviceMemory) -> int | None:
    """What the device held at most: reserved when known (the GPU holds it), else allocated."""
    return device.peak_reserved if device.peak_reserved is not None else device.peak_allocated


def _peak_evidence(device: DeviceMemory, fraction: float) -> Evidence:
    """The peak and its share of the device, labelled with what it counts."""
    what = "reserved" if device.peak_reserved is not None else "allocated"
    basis = "" if device.basis == "absolute" else f" ({device.basis}: a lower bound)"
    total = device.total_bytes or 0
    peak = memory_size(_peak_used(device) or 0)
    return Evidence(f"{_where(device)}: peak {what} {peak}{basis} of {memory_size(total)}, "
                    f"{whole_pct(fraction)} of the device", device.origin)


def _gpu_fractions(stats: MemoryStats) -> list[tuple[float, DeviceMemory]]:
    """Peak share of the device's memory for every device whose total is known."""
    return [((_peak_used(d) or 0) / d.total_bytes, d) for d in stats.devices
            if d.total_bytes and _peak_used(d) is not None]


@rule("MEMORY_OOM_RISK", severity=("high",), needs=("memory",))
def oom_risk(facts: Facts) -> Finding | None:
    """Peak memory above OOM_RISK_FRACTION of the device."""
    stats = facts.metrics.memory
    if stats is None:
        return None
    risky = [(f, d) for f, d in _gpu_fractions(stats) if f > OOM_RISK_FRACTION]
    if not risky:
        return None
    fraction, device = max(risky, key=lambda item: item[0])
    levers = ["lower the per-process batch size", "recompute activations in backward "
              "(torch.utils.checkpoint on the largest blocks)"]
    if not amp_not_to_advise(reduced_precision(facts.metrics), facts.context):
        levers.append("train in mixed precision (AMP halves activations)")
    return Finding(
        id="MEMORY_OOM_RISK", severity="high",
        title=f"Memory peaks at {whole_pct(fraction)} of the device: close to out-of-memory",
        evidence=[_peak_evidence(device, fraction)],
        recommendation=f"Free room before it runs out: {', '.join(levers[:-1])}, or "
                       f"{levers[-1]}; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when "
                       "reserved memory runs well above allocated.")


def _fitting_batch(device: DeviceMemory, batch: int) -> int | None:
    """The batch that would fill TARGET_FILL_FRACTION of the device: the fixed part (weights,
    gradients, optimizer state: the lowest level at a step's start) stays, the per-step part
    (activations: peak minus that) grows with the batch."""
    if not device.steps or device.peak_allocated is None or not device.total_bytes:
        return None
    fixed = min(step.start_level for step in device.steps)
    per_step = device.peak_allocated - fixed
    room = TARGET_FILL_FRACTION * device.total_bytes - fixed
    if per_step <= 0 or room <= per_step:
        return None
    return int(batch * room / per_step)


def _batch_advice(device: DeviceMemory, settings: TrainingSettings) -> str:
    """Which batch would fit and what to do with the learning rate (square-root rule)."""
    if settings.batch_size is None:
        return ("Raise the per-process batch size until the peak nears "
                f"{whole_pct(TARGET_FILL_FRACTION)} of the device (the runner did not record "
                "the batch size, so the fitting size is unknown); scale the learning rate by "
                "the square root of the batch ratio.")
    batch = settings.batch_size
    fitting = _fitting_batch(device, batch)
    if fitting is None:
        return (f"Try a larger per-process batch than {batch} (the steps do not show which part "
                "of the peak grows with the batch); scale the learning rate by the square root "
                "of the batch ratio.")
    factor = math.sqrt(fitting / batch)
    lr = (f"from {settings.learning_rate:g} to {settings.learning_rate * factor:.3g}"
          if settings.learning_rate is not None else f"by {factor:.2f}")
    return (f"Raise the per-process batch from {batch} to about {fitting} (fills "
            f"~{whole_pct(TARGET_FILL_FRACTION)} of the device, counting the fixed weights and "
            f"optimizer state once), and scale the learning rate {lr} (square-root rule: "
            f"sqrt({fitting}/{batch})); check the loss curve over the first epoch.")


@rule("MEMORY_HEADROOM", severity=("low",), needs=("memory", "manifest"))
def headroom(facts: Facts) -> Finding | None:
    """Peak below HEADROOM_FRACTION of the device, on absolute levels only."""
    stats, settings = facts.metrics.memory, facts.context.settings
    if stats is None:
        return None
    roomy = [(f, d) for f, d in _gpu_fractions(stats)
             if f < HEADROOM_FRACTION and d.basis == "absolute"]
    if not roomy or len(roomy) < len(_gpu_fractions(stats)):
        return None
    fraction, device = max(roomy, key=lambda item: item[0])
    return Finding(
        id="MEMORY_HEADROOM", severity="low",
        title=f"Memory peaks at only {whole_pct(fraction)} of the device: room for a larger "
              "batch",
        evidence=[_peak_evidence(device, fraction)],
        recommendation=_batch_advice(device, settings))


def _growing(device: DeviceMemory) -> tuple[int, int] | None:
    """Bytes the level grew by over the steps when it ends every step higher than the last, and
    over how many steps it grew (steps without any memory event, where the recorder was off, are
    left out; so is the change across a step the per-step figures leave out, MemoryStep.follows:
    a recompile's new buffers are no leak)."""
    seen = [step for step in device.steps if step.events]
    pairs = list(zip(seen, seen[1:], strict=False))
    if len(seen) < LEAK_MIN_STEPS or any(b.end_level <= a.end_level for a, b in pairs):
        return None
    grew = [b.end_level - a.end_level for a, b in pairs if b.follows]
    growth = sum(grew)
    return (growth, len(grew)) if grew and growth >= LEAK_MIN_BYTES else None


def _held_evidence(device: DeviceMemory) -> list[Evidence]:
    """What stays allocated step after step, by the operator that allocated it."""
    return [Evidence(f"{held.op or 'outside any recorded operator'}: {held.count} allocations of "
                     f"{memory_size(held.bytes)} made over {held.steps} steps are never "
                     f"released ({memory_size(held.bytes * held.count)} held)", device.origin)
            for held in device.held or []]


def _growth_evidence(device: DeviceMemory, growth: int, grown: int) -> list[Evidence]:
    """How one device's level grew, ``growth`` bytes over ``grown`` steps, and what it holds."""
    steps = sum(1 for step in device.steps if step.events)
    return [Evidence(f"{_where(device)}: the level at the end of each of {steps} steps is "
                     f"above the previous one, +{memory_size(growth)} in all "
                     f"(+{memory_size(growth / grown)} per step); it will run out of "
                     "memory in a long run", device.origin),
            *_held_evidence(device)]


@rule("MEMORY_GROWTH", severity=("high",), needs=("memory",))
def memory_growth(facts: Facts) -> Finding | None:
    """The level at the end of each step above the previous step's: a leak."""
    stats = facts.metrics.memory
    if stats is None:
        return None
    leaking = [(g, d) for d in stats.devices if (g := _growing(d)) is not None]
    if not leaking:
        return None
    leaking.sort(key=lambda item: -item[0][0])  # every growing device, the most first
    return Finding(
        id="MEMORY_GROWTH", severity="high",
        title="Memory grows from step to step: something keeps tensors alive across iterations",
        evidence=[item for (growth, grown), device in leaking
                  for item in _growth_evidence(device, growth, grown)],
        recommendation="Find what keeps a reference from one step to the next: accumulating "
                       "the loss tensor (total += loss keeps every step's graph; use "
                       "loss.item() every N steps, or loss.detach()), lists of outputs or "
                       "hidden states kept for logging, a cache filled every step.")


@rule("MEMORY_CHURN", severity=("medium",), needs=("memory",))
def allocation_churn(facts: Facts) -> Finding | None:
    """Driver allocations in every steady-state step instead of reuse of cached blocks."""
    stats = facts.metrics.memory
    if stats is None:
        return None
    churning = [d for d in stats.devices if d.device >= 0 and d.driver_calls_per_step is not None
                and d.driver_calls_per_step >= CHURN_DRIVER_CALLS_PER_STEP]
    if not churning:
        return None
    device = max(churning, key=lambda d: d.driver_calls_per_step or 0.0)
    evidence = [Evidence(f"{_where(device)}: {device.driver_calls_per_step:.1f} driver "
                         "allocations or releases per step after the first (cudaMalloc/cudaFree "
                         "synchronise the device)", device.origin)]
    if device.steps:
        mean_calls = sum(s.allocations for s in device.steps) / len(device.steps)
        mean_bytes = sum(s.allocated_bytes for s in device.steps) / len(device.steps)
        evidence.append(Evidence(f"{mean_calls:.0f} allocations of {memory_size(mean_bytes)} "
                                 "per step from the framework allocator", device.origin))
    return Finding(
        id="MEMORY_CHURN", severity="medium",
        title="The allocator goes back to the driver in every step",
        evidence=evidence,
        recommendation="Let the caching allocator reuse its blocks: remove "
                       "torch.cuda.empty_cache() from the loop, keep tensor shapes constant "
                       "between steps (pad or bucket variable lengths), set "
                       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation, "
                       "and call optimizer.zero_grad(set_to_none=True).")
