"""Several runs against one baseline: speedup, breakdown deltas, changed knobs, and why.

Which speedup: a profiler slows each run by its own amount (torch.profiler by the number of
operators, line_profiler by the Python lines), and a step holds a batch whose size may differ
between runs, so step times of profiled runs can move the other way from the samples per second
the run achieves without a profiler. When both runs have the runner's
unprofiled throughput, the speedup is the throughput ratio (run over baseline) and the
profiled step-time ratio (baseline over run) is kept beside it (``step_speedup``); otherwise the
speedup is the step-time ratio. When the two ratios point in opposite directions the row's
explanation says so before naming the part of the step that moved.
"""

from __future__ import annotations

from profreport.errors import UsageError
from profreport.reports.findings import RunContext, cpu_load
from profreport.reports.results import BREAKDOWN_PARTS, Comparison, ComparisonRow, RunAnalysis

#: Readable names of the breakdown parts, for explanations.
PART_NAMES = {
    "dataloader": "DataLoader wait", "h2d_copy": "host-to-device copy time",
    "compute": "compute time", "comm_exposed": "exposed communication",
    "host_runtime": "CUDA runtime time", "other": "other time",
}
#: Which knobs act on which part of the step (to name the change that brought a gain).
PART_KNOBS = {
    "dataloader": ("num_workers", "persistent_workers", "pin_memory", "batch_size"),
    "h2d_copy": ("pin_memory", "non_blocking"),
    "compute": ("amp", "channels_last", "compile", "batch_size"),
    "comm_exposed": ("ddp", "nproc", "bucket_cap_mb", "broadcast_buffers", "dataparallel"),
    "host_runtime": ("compile", "batch_size"),
    "other": (),
}
#: The kind of change each part's knobs make, for the sentence.
PART_CHANGE = {"dataloader": "the DataLoader change", "h2d_copy": "the copy change",
               "compute": "the compute change", "comm_exposed": "the parallelism change",
               "host_runtime": "the launch change", "other": "the change"}


def step_time_ns(run: RunAnalysis) -> int | None:
    """Time per step from the run's step source (the least intrusive profiler that timed steps,
    see metrics): the breakdown's step when the breakdown comes from that same source, else the
    source's wall time per step; the breakdown's step when no source timed steps."""
    m = run.metrics
    if m.breakdown is not None and (m.steps is None or m.steps.origin == m.breakdown.origin):
        return m.breakdown.step_ns
    if m.steps is not None:
        return m.steps.wall_mean_ns or m.steps.mean_ns
    return None


def changed_knobs(base: RunAnalysis, run: RunAnalysis) -> dict[str, object]:
    """Knobs whose value differs from the baseline's, as ``{name: {"from": a, "to": b}}``."""
    names = sorted(set(base.knobs) | set(run.knobs))
    return {name: {"from": base.knobs.get(name), "to": run.knobs.get(name)}
            for name in names if base.knobs.get(name) != run.knobs.get(name)}


def breakdown_delta(base: RunAnalysis, run: RunAnalysis) -> dict[str, int]:
    """Run minus baseline, mean ns per step, for each breakdown part."""
    a, b = base.metrics.breakdown, run.metrics.breakdown
    if a is None or b is None:
        return {}
    return {part: b.parts_ns[part] - a.parts_ns[part] for part in BREAKDOWN_PARTS}


def _ms(ns: int) -> str:
    """Nanoseconds as milliseconds text."""
    return f"{ns / 1e6:.1f} ms" if ns < 10**10 else f"{ns / 1e9:.1f} s"


def _core_contention(base: RunAnalysis, run: RunAnalysis, part: str,
                     knobs: dict[str, object]) -> str | None:
    """Why compute moved with num_workers on a CPU-only run: in the run with more busy threads
    than CPUs, the loader workers and PyTorch's intra-op threads share the cores."""
    if part != "compute" or "num_workers" not in knobs or run.metrics.gpu is not None:
        return None
    loads = [cpu_load(RunContext(r.knobs, r.environment)) for r in (run, base)]
    crowded = next((load for load in loads if load is not None and load.oversubscribed), None)
    if crowded is None:
        return None
    change = knobs["num_workers"]
    return (f"num_workers went {change['from']} -> {change['to']}"  # type: ignore[index]
            f" ({crowded.describe()}): the loader workers compete with PyTorch's intra-op "
            "threads for the same cores.")


def explain(base: RunAnalysis, run: RunAnalysis, delta: dict[str, int],
            knobs: dict[str, object]) -> str:
    """One sentence naming the part that moved most and the knob change behind it."""
    if not delta:
        return "No breakdown on both sides: the step time alone is compared."
    part = max(delta, key=lambda name: (abs(delta[name]), name))
    before = base.metrics.breakdown.parts_ns[part]  # type: ignore[union-attr]
    after = run.metrics.breakdown.parts_ns[part]  # type: ignore[union-attr]
    verb = "fell" if after < before else "grew"
    gain = "gain" if after < before else "loss"
    head = f"{PART_NAMES[part]} {verb} from {_ms(before)} to {_ms(after)} per step"
    contention = _core_contention(base, run, part, knobs)
    if contention is not None:
        return f"{head} when {contention}"
    related = [name for name in PART_KNOBS[part] if name in knobs]
    if related:
        changes = ", ".join(f"{name} {knobs[name]['from']} -> {knobs[name]['to']}"  # type: ignore[index]
                            for name in related)
        return f"{head}: {PART_CHANGE[part]} ({changes}) brought the {gain}."
    if knobs:
        return f"{head}, the part that changed most (knobs changed: {', '.join(knobs)})."
    return f"{head}, the part of the step that changed most."


def _ratio_text(ratio: float) -> str:
    """1.0213 -> '1.02×'."""
    return f"{ratio:.2f}×"


def disagreement(throughput_gain: float | None, step_speedup: float | None) -> str | None:
    """A sentence when unprofiled throughput and profiled step time moved in opposite
    directions, else None."""
    if throughput_gain is None or step_speedup is None:
        return None
    if (throughput_gain > 1) == (step_speedup > 1) or 1.0 in (throughput_gain, step_speedup):
        return None
    moved = "rose" if throughput_gain > 1 else "fell"
    step = "shrank" if step_speedup > 1 else "grew"
    return (f"Unprofiled throughput {moved} ({_ratio_text(throughput_gain)}) while the profiled "
            f"step time {step} ({_ratio_text(step_speedup)}); the speedup is the throughput "
            "ratio, measured without profilers (step times also move with the batch size and "
            "with how much each profiler slows a run).")


def _row(base: RunAnalysis, run: RunAnalysis) -> ComparisonRow:
    """One run's row against the baseline (speedup: see the module docstring)."""
    base_step, step = step_time_ns(base), step_time_ns(run)
    base_tp, tp = base.metrics.throughput_samples_per_s, run.metrics.throughput_samples_per_s
    knobs = changed_knobs(base, run)
    delta = breakdown_delta(base, run)
    step_speedup = base_step / step if base_step and step else None
    throughput_gain = tp / base_tp if tp and base_tp else None
    explanation = "baseline"
    if run is not base:
        explanation = explain(base, run, delta, knobs)
        note = disagreement(throughput_gain, step_speedup)
        explanation = f"{note} {explanation[:1].upper()}{explanation[1:]}" if note else explanation
    return ComparisonRow(
        name=run.name, step_time_ns=step, throughput_samples_per_s=tp,
        speedup=throughput_gain if throughput_gain is not None else step_speedup,
        throughput_gain=throughput_gain, breakdown_delta_ns=delta, changed_knobs=knobs,
        explanation=explanation, step_speedup=step_speedup,
        speedup_basis="throughput" if throughput_gain is not None else "step time")


def compare_runs(runs: list[RunAnalysis], baseline: str | None = None) -> Comparison | None:
    """Every run against the baseline (the first run, or the one named); None for one run."""
    if len(runs) < 2:
        return None
    names = [run.name for run in runs]
    if baseline is not None and baseline not in names:
        raise UsageError(f"--baseline {baseline!r} is not one of the runs: {', '.join(names)}")
    base = runs[names.index(baseline)] if baseline is not None else runs[0]
    return Comparison(baseline=base.name, rows=[_row(base, run) for run in runs])
