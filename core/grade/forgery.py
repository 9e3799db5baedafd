"""Profile-only mode: signs that a submission's profiles were edited, made up, or taken under
unequal conditions. Each sign is a flag for the teacher with its evidence, read from the
analysis of the runs (the profilers of one run against each other, the runs' manifests); a flag
never changes the points by itself. Copies between students are found by
:func:`profreport.grade.gradebook.duplicates`. Edited step times are not flagged: profilers'
overheads differ too much to bound one by another (the fixture loader_heavy: nsys steps 1.1 s,
the unprofiled run 2.1 s, torch.profiler 6.0 s); the speedup comes from the manifests'
unprofiled samples/s instead, which no trace edit moves."""

from __future__ import annotations

from profreport.grade.rubric import SPEEDUP, Rubric
from profreport.reports.analysis.results import RunAnalysis

#: The finding the analysis emits when a run's profilers disagree on the DataLoader wait.
SOURCES_DISAGREE = "SOURCES_DISAGREE"


def profilers_disagree(run: RunAnalysis) -> list[str]:
    """Profilers of one run that disagree on the DataLoader wait (events deleted from one)."""
    disagree = next((f for f in run.findings if f.id == SOURCES_DISAGREE), None)
    if disagree is None:
        return []
    return [f"run {run.name}: {disagree.title} ("
            + "; ".join(e.text for e in disagree.evidence) + ")"]


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
    found = [flag for run in runs.values() for sign in (profilers_disagree, handmade)
             for flag in sign(run)]
    return found + unequal_comparison(rubric, runs)
