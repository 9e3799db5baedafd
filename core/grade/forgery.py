"""Profile-only mode: signs that a submission's profiles were edited, made up, or taken under
unequal conditions. Each sign is a flag for the teacher with its evidence, read from the
analysis of the runs (the profilers of one run against each other, the runs' manifests); a flag
never changes the points by itself. Copies between students are found by
:func:`profreport.grade.gradebook.duplicates`. Edited step times are not flagged: profilers'
overheads differ too much to bound one by another (the fixture loader_heavy: nsys steps 1.1 s,
the unprofiled run 2.1 s, torch.profiler 6.0 s); the speedup comes from the manifests'
unprofiled samples/s instead, which no trace edit moves, and a manifest whose throughput is not
what its own step times give is flagged."""

from __future__ import annotations

from profreport.grade.rubric import SPEEDUP, Rubric
from profreport.reports.analysis.results import RunAnalysis

#: The runner writes a manifest's throughput as batch x processes over its own mean plain step:
#: more than this relative difference between the two means one of them was edited.
MANIFEST_TOLERANCE = 0.01
#: The finding the analysis emits when a run's profilers disagree on the DataLoader wait.
SOURCES_DISAGREE = "SOURCES_DISAGREE"


def profilers_disagree(run: RunAnalysis) -> list[str]:
    """Profilers of one run that disagree on the DataLoader wait (events deleted from one)."""
    disagree = next((f for f in run.findings if f.id == SOURCES_DISAGREE), None)
    if disagree is None:
        return []
    return [f"run {run.name}: {disagree.title} ("
            + "; ".join(e.text for e in disagree.evidence) + ")"]


def manifest_edited(run: RunAnalysis) -> list[str]:
    """A manifest whose throughput is not what its own plain step times and batch give."""
    metrics, batch = run.metrics, run.knobs.get("batch_size")
    if not (metrics.throughput_samples_per_s and metrics.plain_step_ns
            and isinstance(batch, int) and batch > 0):
        return []
    mean_s = sum(metrics.plain_step_ns) / len(metrics.plain_step_ns) / 1e9
    expected = batch * (run.world_size or 1) / mean_s
    if abs(metrics.throughput_samples_per_s / expected - 1) <= MANIFEST_TOLERANCE:
        return []
    return [f"run {run.name}: the manifest says {metrics.throughput_samples_per_s:,.1f} "
            f"samples/s; its own plain steps ({len(metrics.plain_step_ns)}, mean "
            f"{mean_s * 1e3:,.1f} ms) of {batch} samples x {run.world_size or 1} process(es) "
            f"give {expected:,.1f}: edited"]


def handmade(run: RunAnalysis) -> list[str]:
    """torch.profiler traces without the ``schemaVersion`` every torch.profiler writes."""
    return [f"run {run.name}: {source.path} has no schemaVersion (torch.profiler writes one "
            "in every trace): written by hand or edited"
            for source in run.inputs
            if source.kind == "kineto" and "schema unknown" in (source.tool_version or "")]


def unequal_comparison(rubric: Rubric, runs: dict[str, RunAnalysis]) -> list[str]:
    """Speedups compared across another batch, or across other profilers."""
    flags = []
    for check in rubric.checks:
        if check.target != SPEEDUP or check.baseline not in runs or check.candidate not in runs:
            continue
        base, cand = runs[check.baseline], runs[check.candidate]  # type: ignore[index]
        batches = (base.knobs.get("batch_size"), cand.knobs.get("batch_size"))
        if None not in batches and batches[0] != batches[1]:
            flags.append(f"{check.id}: {cand.name} trains on batches of {batches[1]}, "
                         f"{base.name} on {batches[0]}: a step of each is not the same work "
                         "(compare samples/s)")
        kinds = (sorted({s.kind for s in base.inputs}), sorted({s.kind for s in cand.inputs}))
        if kinds[0] != kinds[1]:
            flags.append(f"{check.id}: {base.name} was profiled with {', '.join(kinds[0])}, "
                         f"{cand.name} with {', '.join(kinds[1])}: their step times carry "
                         "different profiler overheads")
    return flags


def flags(rubric: Rubric, runs: dict[str, RunAnalysis]) -> list[str]:
    """Every sign of forgery or unequal conditions in one submission's runs."""
    found = [flag for run in runs.values() for sign in (profilers_disagree, handmade,
                                                        manifest_edited)
             for flag in sign(run)]
    return found + unequal_comparison(rubric, runs)
