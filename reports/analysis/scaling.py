"""Scaling: throughput against process count, the ideal line, and where and why scaling breaks.

A study is made of runs of one training at several world sizes: the runner's ``--scaling``
points (their manifests' ``scaling.group``), or, without them, runs of different world sizes
given together (one run per world size; the single-process one whose knobs match the
multi-process run's is the reference). The world size of a run comes from its manifest, else
from ``distributedInfo``, else from the number of rank traces.

Each point carries what the tutorials draw: the job's throughput, the ideal line (the first
point's throughput per process times the processes), the efficiency, the data loader alone and
the synthetic-data throughput from the runner's trials, and the communication per step.
"""

from __future__ import annotations

from collections.abc import Sequence

from profreport.manifest import Manifest
from profreport.reports.analysis.ranks import RankSummary
from profreport.reports.analysis.results import (
    Evidence,
    Finding,
    RunAnalysis,
    ScalingPoint,
    ScalingStudy,
)

# --- thresholds -------------------------------------------------------------------------------
#: Below 90% of ideal, scaling loses a tenth of the added hardware: worth explaining (the SC22
#: tutorial calls 89% good and 78% the thing to fix).
SCALING_OK_EFFICIENCY = 0.90
#: Below 75% a quarter of the added hardware is lost: high severity.
SCALING_POOR_EFFICIENCY = 0.75
#: The loader alone at most 10% faster than the full loop: the loader sets the job's pace.
LOADER_CAP_MARGIN = 1.10
#: The slowest rank's step 15% longer than the fastest's: every collective waits for it.
STRAGGLER_IMBALANCE = 1.15
#: Exposed communication that grew by half the time each step lost explains the loss.
COMM_GROWTH_SHARE = 0.5
#: Above 110% of ideal the reference point, not the scaling, is the story: it runs slower per
#: process than the others (more threads contending per process, a cold start).
SUPERLINEAR_EFFICIENCY = 1.10
#: Traces without a manifest are one training when at least half of their busiest operators
#: (by name) are the same: another model runs other operators.
SAME_MODEL_OP_OVERLAP = 0.5

# Knobs that only say how many processes there are and how they talk: runs differing only in
# these are points of one curve.
PROCESS_KNOBS = frozenset({"ddp", "nproc", "bucket_cap_mb", "broadcast_buffers"})


def run_world_size(manifest: Manifest | None, summaries: Sequence[RankSummary]) -> int | None:
    """Processes of a run: the manifest's world size (or its DDP knobs), else the traces'
    ``distributedInfo.world_size``, else the number of distinct rank traces; 1 for Kineto traces
    without a process group."""
    if manifest is not None:
        recorded = getattr(manifest, "world_size", None)
        if isinstance(recorded, int) and recorded > 0:
            return recorded
        if manifest.knobs:
            return int(manifest.knobs.get("nproc", 1)) if manifest.knobs.get("ddp") else 1
    sizes = [s.world_size for s in summaries if s.world_size is not None]
    if sizes:
        return max(sizes)
    ranks = {s.source.rank for s in summaries if s.source.rank is not None}
    if ranks:
        return len(ranks)
    traces = [s for s in summaries if s.source.kind == "kineto"]
    # torch.profiler writes distributedInfo whenever a process group exists: none, one process.
    return 1 if traces and not any(s.distributed for s in traces) else None


def _same_training(run: RunAnalysis, other: RunAnalysis) -> bool:
    """Whether two runs train the same thing: with knobs, they differ only in their process
    knobs; without, their busiest operators are mostly the same ones."""
    if run.knobs and other.knobs:
        def strip(knobs: dict[str, object]) -> dict[str, object]:
            """The knobs that are not about processes."""
            return {k: v for k, v in knobs.items() if k not in PROCESS_KNOBS}
        return strip(run.knobs) == strip(other.knobs)
    ops = [{item.name for item in r.metrics.top_ops} for r in (run, other)]
    shared = len(ops[0] & ops[1]) / max(min(len(ops[0]), len(ops[1])), 1)
    return bool(ops[0] and ops[1]) and shared >= SAME_MODEL_OP_OVERLAP


def _implicit_points(runs: list[RunAnalysis]) -> list[RunAnalysis]:
    """One run per world size, each the same training as the largest run (the first such)."""
    sized = [run for run in runs if run.world_size]
    largest = max(sized, key=lambda r: r.world_size or 0, default=None)
    chosen: dict[int, RunAnalysis] = {}
    for run in sized:
        if largest is not None and (run is largest or _same_training(run, largest)):
            chosen.setdefault(run.world_size or 0, run)
    return [chosen[size] for size in sorted(chosen)]


def _groups(runs: list[RunAnalysis]) -> dict[str, list[RunAnalysis]]:
    """The runs of each study: the runner's scaling groups, else one group of all runs."""
    groups: dict[str, list[RunAnalysis]] = {}
    for run in runs:
        if run.scaling_point and run.world_size:
            groups.setdefault(str(run.scaling_point.get("group") or run.name), []).append(run)
    if groups:
        return {name: sorted(members, key=lambda r: r.world_size or 0)
                for name, members in groups.items()}
    return {"runs": _implicit_points(runs)}


def _local_batches_per_s(run: RunAnalysis) -> float | None:
    """The job's local batches per second from its profiled steps (one per process per step)."""
    steps = run.metrics.steps
    if steps is None or not run.world_size:
        return None
    step_ns = steps.wall_mean_ns or steps.mean_ns
    return run.world_size * 1e9 / step_ns if step_ns > 0 else None


def _comm(run: RunAnalysis) -> tuple[int | None, int | None]:
    """Communication per step and its exposed part (ns), None when no source measured it."""
    comm, breakdown = run.metrics.comm, run.metrics.breakdown
    if comm is None:
        return (0, 0) if run.world_size == 1 else (None, None)
    exposed = breakdown.parts_ns.get("comm_exposed") if breakdown is not None else None
    return comm.total_ns_per_step, exposed


def _imbalance(run: RunAnalysis) -> float | None:
    """Slowest over fastest rank's mean step, with at least two ranks traced."""
    steps = [ms for ms in run.metrics.per_rank_step_ms.values() if ms > 0]
    return max(steps) / min(steps) if len(steps) > 1 else None


def _int_or_none(value: object) -> int | None:
    """An integer field of the runner's scaling record."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _points(members: list[RunAnalysis]) -> tuple[str, list[ScalingPoint]]:
    """The unit and the points of one study."""
    measured = all(run.metrics.throughput_samples_per_s for run in members)
    unit = "samples/s" if measured else "local batches/s"
    base = members[0]
    base_value = base.metrics.throughput_samples_per_s if measured else _local_batches_per_s(base)
    per_process = base_value / (base.world_size or 1) if base_value else None
    points = []
    for run in members:
        value = run.metrics.throughput_samples_per_s if measured else _local_batches_per_s(run)
        processes = run.world_size or 1
        ideal = per_process * processes if per_process else None
        trials = run.metrics.trials if measured else None
        comm, exposed = _comm(run)
        points.append(ScalingPoint(
            run=run.name, processes=processes, throughput=value, ideal=ideal,
            efficiency=value / ideal if value and ideal else None,
            loader_alone=trials.io if trials else None,
            synthetic=trials.synthetic if trials else None,
            step_ns=run.metrics.steps.mean_ns if run.metrics.steps else None,
            comm_ns_per_step=comm, comm_exposed_ns_per_step=exposed,
            rank_imbalance=_imbalance(run),
            profile_origin=run.metrics.steps.origin if run.metrics.steps else None,
            threads_per_process=_int_or_none(run.environment.get("torch_threads")),
            local_batch_size=_int_or_none(run.scaling_point.get("local_batch_size"))))
    return unit, points


def _mode(members: list[RunAnalysis]) -> str:
    """Weak or strong as the runner recorded it; the runner's plain runs keep the batch per
    process fixed, so manifests without a scaling record are weak scaling too."""
    modes = {str(run.scaling_point.get("mode")) for run in members if run.scaling_point}
    if len(modes) == 1:
        return modes.pop()
    return "weak" if all(run.knobs for run in members) and not modes else "unknown"


def scaling_studies(runs: list[RunAnalysis]) -> list[ScalingStudy]:
    """Every study the runs make: groups with at least two different process counts."""
    studies = []
    for group, members in _groups(runs).items():
        if len({run.world_size for run in members}) < 2:
            continue
        unit, points = _points(members)
        mode = _mode(members)
        studies.append(ScalingStudy(group=group, mode=mode, unit=unit, points=points,
                                    findings=scaling_findings(points, unit, mode)))
    return studies


# --- where and why scaling breaks -------------------------------------------------------------


def _ms(ns: float) -> str:
    """Nanoseconds as milliseconds text."""
    return f"{ns / 1e6:.1f} ms"


def _comm_cause(base: ScalingPoint, point: ScalingPoint,
                points: list[ScalingPoint], mode: str) -> tuple[Evidence, str] | None:
    """Exposed communication that grew by at least COMM_GROWTH_SHARE of the time lost per step."""
    if None in (base.step_ns, point.step_ns, base.comm_exposed_ns_per_step,
                point.comm_exposed_ns_per_step):
        return None
    lost = (point.step_ns or 0) - (base.step_ns or 0)
    grown = (point.comm_exposed_ns_per_step or 0) - (base.comm_exposed_ns_per_step or 0)
    if lost <= 0 or grown < COMM_GROWTH_SHARE * lost:
        return None
    per_point = ", ".join(f"{p.processes} proc: {_ms(p.comm_ns_per_step)} "
                          f"({_ms(p.comm_exposed_ns_per_step or 0)} exposed)"
                          for p in points if p.comm_ns_per_step is not None)
    evidence = Evidence(f"communication per step {per_point}; the exposed part grew by "
                        f"{_ms(grown)} of the {_ms(lost)} each step lost",
                        point.profile_origin or "kineto")
    batch = "the per-process batch shrinks as processes are added" if mode == "strong" else (
        "the per-process batch is too small to hide it")
    fix = (f"Communication per step is set by the gradients' size, compute by the batch: {batch}. "
           "Double the local batch (the SC22 fix: 78% -> 89% efficiency), scaling the learning "
           "rate by the square root of the batch ratio; also let DDP overlap more (larger "
           "bucket_cap_mb, gradient_as_bucket_view=True).")
    return evidence, fix


def _loader_cause(point: ScalingPoint, unit: str) -> tuple[Evidence, str] | None:
    """The data loader alone barely faster than the full loop at this point."""
    if point.loader_alone is None or point.throughput is None:
        return None
    if point.loader_alone > LOADER_CAP_MARGIN * point.throughput:
        return None
    evidence = Evidence(f"at {point.processes} processes the data loader alone delivers "
                        f"{point.loader_alone:.1f} {unit}, the full loop {point.throughput:.1f}: "
                        "the loader caps the job", "manifest")
    fix = ("Feed the processes faster: more DataLoader workers per process (within the cores "
           "each process has), persistent_workers=True, pinned memory, a faster data format or "
           "local copy of the data set.")
    return evidence, fix


def _straggler_cause(point: ScalingPoint) -> tuple[Evidence, str] | None:
    """One rank's steps markedly longer than another's."""
    if point.rank_imbalance is None or point.rank_imbalance < STRAGGLER_IMBALANCE:
        return None
    evidence = Evidence(f"at {point.processes} processes the slowest rank's mean step is "
                        f"{point.rank_imbalance:.2f}x the fastest's: every collective waits "
                        "for it", point.profile_origin or "kineto")
    fix = ("Find what slows that rank: its data shard, its host (other jobs, CPU binding), its "
           "GPU clocks; balance the work per rank.")
    return evidence, fix


def _synthetic_cause(base: ScalingPoint, point: ScalingPoint,
                     unit: str) -> tuple[Evidence, str] | None:
    """The model alone on cached data does not scale either: the processes compete for the same
    hardware (cores, memory bandwidth) or wait for each other."""
    if base.synthetic is None or point.synthetic is None:
        return None
    ideal = base.synthetic / base.processes * point.processes
    efficiency = point.synthetic / ideal
    if efficiency >= SCALING_OK_EFFICIENCY:
        return None
    evidence = Evidence(f"on synthetic data (no loader) {point.processes} processes reach "
                        f"{point.synthetic:.1f} {unit} of an ideal {ideal:.1f} "
                        f"({efficiency * 100:.0f}%)", "manifest")
    fix = ("Even without data loading the processes do not add up: give each its own cores "
           "(OMP_NUM_THREADS = cores per process, one process per GPU) or its own node, and "
           "check communication above.")
    return evidence, fix


def _per_process(value: float | None, processes: int) -> str:
    """A throughput per process, or "?"."""
    return "?" if value is None else f"{value / processes:.1f}"


def superlinear(points: list[ScalingPoint], unit: str) -> Finding | None:
    """A point far above ideal: the reference runs slower per process than the others."""
    scored = [p for p in points[1:] if p.efficiency is not None]
    best = max(scored, key=lambda p: p.efficiency or 0.0, default=None)
    if best is None or (best.efficiency or 0.0) <= SUPERLINEAR_EFFICIENCY:
        return None
    base = points[0]
    evidence = [Evidence(
        f"{best.processes} processes reach {(best.efficiency or 0) * 100:.0f}% of ideal: "
        f"{_per_process(best.throughput, best.processes)} {unit} per process against "
        f"{_per_process(base.throughput, base.processes)} at {base.processes}", "manifest")]
    if base.synthetic is not None and best.synthetic is not None:
        evidence.append(Evidence(
            f"on synthetic data too: {_per_process(best.synthetic, best.processes)} per process "
            f"against {_per_process(base.synthetic, base.processes)}: the model itself runs "
            "faster per process", "manifest"))
    if base.threads_per_process is not None and best.threads_per_process is not None:
        evidence.append(Evidence(
            f"intra-op threads per process: {base.threads_per_process} at {base.processes}, "
            f"{best.threads_per_process} at {best.processes}", "manifest"))
    return Finding(
        id="SCALING_SUPERLINEAR", severity="info",
        title=f"Above ideal at {best.processes} processes: the {base.processes}-process "
              "reference is slow per process",
        evidence=evidence,
        recommendation="The ideal line is drawn from a reference that underuses the machine "
                       "(several intra-op threads contending in one process, or a cold start): "
                       "compare points at equal threads per process (set OMP_NUM_THREADS), and "
                       "for one process try fewer threads; efficiencies above 100% here say "
                       "more about the reference than about scaling.")


def scaling_findings(points: list[ScalingPoint], unit: str, mode: str) -> list[Finding]:
    """Where scaling breaks (the least efficient point) and why, or where it exceeds ideal."""
    above = superlinear(points, unit)
    if above is not None:
        return [above]
    scored = [p for p in points[1:] if p.efficiency is not None]
    if not scored:
        return []
    worst = min(scored, key=lambda p: p.efficiency or 0.0)
    if (worst.efficiency or 0.0) >= SCALING_OK_EFFICIENCY:
        return []
    base = points[0]
    causes = [cause for cause in (_comm_cause(base, worst, points, mode),
                                  _loader_cause(worst, unit), _straggler_cause(worst),
                                  _synthetic_cause(base, worst, unit)) if cause is not None]
    summary = Evidence(f"{worst.processes} processes: {worst.throughput:.1f} {unit} of an "
                       f"ideal {worst.ideal:.1f} ({(worst.efficiency or 0) * 100:.0f}% "
                       f"efficiency, {mode} scaling)", "manifest" if unit == "samples/s"
                       else base.profile_origin or "kineto")
    fix = " ".join(fix for _, fix in causes) or (
        "The data do not show why (no communication, trial or per-rank figures at this point): "
        "profile each point with torch.profiler to see communication and per-rank steps.")
    severity = "high" if (worst.efficiency or 0.0) < SCALING_POOR_EFFICIENCY else "medium"
    return [Finding(id="SCALING_EFFICIENCY", severity=severity,
                    title=f"Scaling breaks at {worst.processes} processes: "
                          f"{(worst.efficiency or 0) * 100:.0f}% of ideal",
                    evidence=[summary, *(evidence for evidence, _ in causes)],
                    recommendation=fix)]
