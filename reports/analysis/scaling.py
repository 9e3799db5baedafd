"""Scaling: throughput against process count and the ideal line (where and why scaling breaks is
findings/scaling.py's).

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
from pathlib import Path

from profreport.manifest import Manifest
from profreport.reports.analysis.compare import (
    common_source,
    common_step_source,
    confounds,
    shared_cpus,
    step_time_ns,
    steps_of,
)
from profreport.reports.analysis.findings import Study, study_findings
from profreport.reports.analysis.ranks import RankSummary
from profreport.reports.analysis.results import (
    Origin,
    RunAnalysis,
    ScalingPoint,
    ScalingStudy,
    rank_label,
)

# --- thresholds -------------------------------------------------------------------------------
#: Traces without a manifest are one training when, in each, at least half of its busiest
#: operators' self time is spent in operators (by name) that are among the other's busiest:
#: another model spends its time in other operators. Weighed by time, not counted by name, so
#: that the last few of a list (near-equal, their order moved by a loaded machine's noise) do
#: not decide it.
SAME_MODEL_OP_OVERLAP = 0.5

# Knobs that only say how many processes there are and how they talk: runs differing only in
# these are points of one curve.
PROCESS_KNOBS = frozenset({"ddp", "nproc", "bucket_cap_mb", "broadcast_buffers"})


def run_world_size(manifest: Manifest | None, summaries: Sequence[RankSummary],
                   communicates: bool = False) -> int | None:
    """Processes of a run: the manifest's world size (or its DDP knobs), else the traces'
    ``distributedInfo.world_size``, else the number of distinct rank traces; 1 for traces of a
    format that records the process group whenever one exists (torch.profiler) without one,
    unless the run ``communicates``: collectives recorded are a process group's, which a trace
    of a torch older than ``distributedInfo`` (or one stripped of it) does not record."""
    if manifest is not None:
        recorded = getattr(manifest, "world_size", None)
        if isinstance(recorded, int) and recorded > 0:
            return recorded
        if manifest.knobs:
            return int(manifest.knobs.get("nproc", 1)) if manifest.knobs.get("ddp") else 1
    sizes = [s.world_size for s in summaries if s.world_size is not None]
    if sizes:
        return max(sizes)
    ranks = {s.input.rank for s in summaries if s.input.rank is not None}
    if ranks:
        return len(ranks)
    traces = [s for s in summaries if s.records_process_group]
    return 1 if traces and not communicates and not any(s.distributed for s in traces) else None


def world_sizes_note(summaries: Sequence[RankSummary]) -> list[str]:
    """The note saying that the profiles of one run record different world sizes (each process
    its own distributedInfo or rank mark: a trace of another run, or a damaged record), whose
    largest run_world_size takes; [] when they agree."""
    sizes: dict[int, list[str]] = {}
    for summary in summaries:
        if summary.world_size is not None:
            sizes.setdefault(summary.world_size, []).append(
                rank_label(summary.input.rank, summary.input.process)
                or Path(summary.input.path).name)
    if len(sizes) < 2:
        return []
    said = "; ".join(f"{size} by {', '.join(members)}" for size, members in sorted(sizes.items()))
    return [f"the profiles of this run record different world sizes ({said}): the job's is "
            f"taken as the largest, {max(sizes)}, and a profile may be of another run"]


def _same_training(run: RunAnalysis, other: RunAnalysis) -> bool:
    """Whether two runs train the same thing: with knobs, they differ only in their process
    knobs; without, their busiest operators are mostly the same ones."""
    if run.knobs and other.knobs:
        def strip(knobs: dict[str, object]) -> dict[str, object]:
            """The knobs that are not about processes."""
            return {k: v for k, v in knobs.items() if k not in PROCESS_KNOBS}
        return strip(run.knobs) == strip(other.knobs)
    ops = [{item.name: item.total_ns for item in r.metrics.top_ops} for r in (run, other)]
    if not (ops[0] and ops[1]):
        return False
    return all(sum(ns for name, ns in mine.items() if name in theirs)
               >= SAME_MODEL_OP_OVERLAP * sum(mine.values())
               for mine, theirs in ((ops[0], ops[1]), (ops[1], ops[0])))


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


def _local_batches_per_s(run: RunAnalysis, origin: Origin | None) -> float | None:
    """The job's local batches per second from its steps as ``origin`` timed them (one per
    process per step)."""
    steps = steps_of(run, origin)
    if steps is None or not run.world_size:
        return None
    step_ns = steps.wall_mean_ns or steps.mean_ns
    return run.world_size * 1e9 / step_ns if step_ns > 0 else None


def _intervals(run: RunAnalysis, origin: Origin | None) -> int:
    """How many start-to-next-start intervals _local_batches_per_s's step time is the mean of
    (0 when it is the mean range: no such interval)."""
    steps = steps_of(run, origin)
    return steps.wall_intervals if steps is not None and steps.wall_mean_ns else 0


def _comm(run: RunAnalysis) -> tuple[int | None, int | None]:
    """Communication per step and its exposed part (ns), None when no source measured it."""
    comm, breakdown = run.metrics.comm, run.metrics.breakdown
    if comm is None:
        return (0, 0) if run.world_size == 1 else (None, None)
    exposed = breakdown.parts_ns.get("comm_exposed") if breakdown is not None else None
    return comm.total_ns_per_step, exposed


def comm_source(members: list[RunAnalysis]) -> Origin | None:
    """The profiler every point's communication figures come from (see compare.common_source;
    a point without them, one process, sets none beside another's); None when two profilers
    measured them: each slows a step, and the communication in it, by its own amount."""
    origin, _ = common_source([(run.name, set() if run.metrics.comm is None
                                else {run.metrics.comm.origin}) for run in members], "point")
    return origin


def _imbalance(run: RunAnalysis) -> float | None:
    """Slowest over fastest rank's mean step, with at least two ranks traced."""
    steps = [ns for ns in run.metrics.per_rank_step_ns.values() if ns > 0]
    return max(steps) / min(steps) if len(steps) > 1 else None


def _int_or_none(value: object) -> int | None:
    """An integer field of the runner's scaling record."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _points(members: list[RunAnalysis]) -> tuple[str, list[ScalingPoint]]:
    """The unit and the points of one study; step figures from the one profiler that timed
    every point's steps (compare.common_step_source), none when no profiler did; the step the
    communication is weighed against from the one that measured it (comm_source)."""
    measured = all(run.metrics.throughput_samples_per_s for run in members)
    unit = "samples/s" if measured else "local batches/s"
    origin, _ = common_step_source(members)
    comm_origin = comm_source(members)
    base = members[0]
    base_value = (base.metrics.throughput_samples_per_s if measured
                  else _local_batches_per_s(base, origin))
    per_process = base_value / (base.world_size or 1) if base_value else None
    points = []
    for run in members:
        value = (run.metrics.throughput_samples_per_s if measured
                 else _local_batches_per_s(run, origin))
        steps = steps_of(run, origin)
        processes = run.world_size or 1
        ideal = per_process * processes if per_process else None
        trials = run.metrics.trials if measured else None
        comm, exposed = _comm(run)
        points.append(ScalingPoint(
            run=run.name, processes=processes, throughput=value, ideal=ideal,
            efficiency=value / ideal if value and ideal else None,
            loader_alone=trials.io if trials else None,
            synthetic=trials.synthetic if trials else None,
            step_ns=steps.mean_ns if steps is not None else None,
            comm_ns_per_step=comm, comm_exposed_ns_per_step=exposed,
            rank_imbalance=_imbalance(run),
            profile_origin=origin, comm_origin=comm_origin,
            comm_step_ns=step_time_ns(run, comm_origin) if comm_origin else None,
            threads_per_process=_int_or_none(run.environment.get("torch_threads")),
            local_batch_size=_int_or_none(run.scaling_point.get("local_batch_size")),
            confounds=_besides_processes(base, run),
            shared_cpu=run.metrics.plain_cpu if measured and shared_cpus(run) else None,
            throughput_intervals=0 if measured or value is None else _intervals(run, origin)))
    return unit, points


def _besides_processes(base: RunAnalysis, run: RunAnalysis) -> list[str]:
    """What differs between two points of a study besides the process count and the process
    knobs (see compare.confounds)."""
    return [c.phrase for c in confounds(base, run)
            if c.kind != "world size" and c.knob not in PROCESS_KNOBS]


def _mode(members: list[RunAnalysis]) -> str:
    """Weak or strong as the runner recorded it; the runner's plain runs keep the batch per
    process fixed, so manifests without a scaling record are weak scaling too."""
    modes = {str(run.scaling_point["mode"]) for run in members
             if run.scaling_point and run.scaling_point.get("mode") is not None}
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
                                    findings=study_findings(Study(points, unit, mode))))
    return studies
