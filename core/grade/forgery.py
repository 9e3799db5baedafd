"""Profile-only mode: signs that a submission's profiles were edited, made up, or taken under
unequal conditions. Each sign is a flag for the teacher with its evidence, read from the
analysis of the runs (the profilers of one run against each other, the runs' manifests); a flag
never changes the points by itself. Times scaled by one factor (every operator and kernel
faster by the same ratio, as an edit of a trace's timestamps makes them) are flagged, and so is
a speedup of one profile over itself (the same run handed in as baseline and candidate). Copies
between students are found by
:func:`profreport.grade.gradebook.duplicates`. Edited step times are not flagged: profilers'
overheads differ too much to bound one by another (the fixture loader_heavy: nsys steps 1.1 s,
the unprofiled run 2.1 s, torch.profiler 6.0 s); the speedup comes from the manifests'
unprofiled samples/s instead, which no trace edit moves, and a manifest whose throughput is not
what its own step times give is flagged."""

from __future__ import annotations

import hashlib

from profreport.grade.rubric import SPEEDUP, Rubric
from profreport.reports.analysis.compare import compare_runs, samples_per_step
from profreport.reports.analysis.results import RunAnalysis, RunMetrics
from profreport.units import NS_PER_S, ms

#: The runner writes a manifest's throughput as batch x processes over its own mean plain step:
#: more than this relative difference between the two means one of them was edited.
MANIFEST_TOLERANCE = 0.01
#: Operators and kernels two runs must share before their per-call times can be called scaled.
SCALED_MIN_NAMES = 5
#: Per-call times all within this much of one factor are one scaling, not a code change: the
#: same run profiled twice spreads by tens of percent over its operators (resnet50 with 0 and 4
#: workers: 0.97-1.4x), an edit multiplies them exactly.
SCALED_SPREAD = 0.05
#: ... and only a factor this far from 1 matters for a grade (a 20% faster or slower run).
SCALED_MIN_FACTOR = 1.2
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
    mean_ns = sum(metrics.plain_step_ns) / len(metrics.plain_step_ns)
    per_step = run.knobs.get("batches_per_step", 1)
    if not isinstance(per_step, int | float) or per_step <= 0:
        per_step = 1
    expected = batch * per_step * (run.world_size or 1) * NS_PER_S / mean_ns
    batches = f" x {per_step:g} batches" if per_step != 1 else ""
    if abs(metrics.throughput_samples_per_s / expected - 1) <= MANIFEST_TOLERANCE:
        return []
    return [f"run {run.name}: the manifest says {metrics.throughput_samples_per_s:,.1f} "
            f"samples/s; its own plain steps ({len(metrics.plain_step_ns)}, mean "
            f"{ms(mean_ns)}) of {batch} samples{batches} x {run.world_size or 1} process(es) "
            f"give {expected:,.1f}: edited"]


def handmade(run: RunAnalysis) -> list[str]:
    """torch.profiler traces without the ``schemaVersion`` every torch.profiler writes."""
    return [f"run {run.name}: {source.path} has no schemaVersion (torch.profiler writes one "
            "in every trace): written by hand or edited"
            for source in run.inputs
            if source.kind == "kineto" and "schema unknown" in (source.tool_version or "")]


def per_call_ns(run: RunAnalysis) -> dict[str, float]:
    """Mean time per call of each top CPU operator (self time) and GPU kernel of a run."""
    return {item.name: item.total_ns / item.count
            for item in (*run.metrics.top_ops, *run.metrics.top_kernels) if item.count > 0}


def scaled_times(base: RunAnalysis, cand: RunAnalysis) -> str | None:
    """Why ``cand``'s recorded times look like ``base``'s scaled by one factor, else None: every
    operator and kernel the two runs share runs faster (or slower) per call by the same factor.
    A real change (workers, pinned memory, AMP) leaves most operators as they were and moves a
    few by different amounts; a trace whose timestamps were multiplied moves all of them alike."""
    before, after = per_call_ns(base), per_call_ns(cand)
    common = sorted(set(before) & set(after))
    if len(common) < SCALED_MIN_NAMES:
        return None
    ratios = sorted(after[name] / before[name] for name in common)
    middle = ratios[len(ratios) // 2]
    if not (middle <= 1 / SCALED_MIN_FACTOR or middle >= SCALED_MIN_FACTOR) or \
            any(abs(ratio / middle - 1) > SCALED_SPREAD for ratio in ratios):
        return None
    return (f"every one of the {len(common)} operators and kernels both runs record takes "
            f"{middle:.2f}x its time per call in {cand.name} (all within "
            f"{SCALED_SPREAD:.0%} of each other, e.g. {common[0]}): what a trace whose times "
            "were scaled looks like (or a run on other hardware); no code change moves every "
            "operator by one factor")


def timing_fingerprint(metrics: RunMetrics) -> str | None:
    """A hash of the step timings and the busiest operators' calls and times the profiler
    recorded, not of any timestamp or name (a copy with its timestamps shifted or an operator
    renamed keeps it); None without steps."""
    steps = metrics.steps
    if steps is None:
        return None
    ops = "|".join(f"{count}:{total}" for count, total in
                   sorted((op.count, op.total_ns) for op in metrics.top_ops))
    text = (f"{steps.origin}|{steps.count}|{steps.mean_ns}|{steps.p50_ns}|{steps.p90_ns}|"
            f"{steps.min_ns}|{steps.max_ns}|{ops}")
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def same_profile(base: RunAnalysis, cand: RunAnalysis, digests: dict[str, str],
                 shown: dict[str, str]) -> str | None:
    """How ``cand`` is ``base``'s own profile (a file of the same bytes in both, by ``digests``:
    profile path -> SHA-256; or the same recorded step and operator timings, a re-compressed or
    renamed copy), else None: a speedup between them compares one profile with itself."""
    before = {digests[s.path]: s.path for s in base.inputs if s.path in digests}
    for source in cand.inputs:
        twin = before.get(digests.get(source.path, ""))
        if twin is not None:
            return (f"{shown.get(source.path, source.path)} has the same bytes as "
                    f"{shown.get(twin, twin)}")
    fingerprint = timing_fingerprint(cand.metrics)
    if fingerprint is not None and fingerprint == timing_fingerprint(base.metrics):
        return "the same recorded step and operator timings, timestamps aside"
    return None


def unknown_samples(base: RunAnalysis, cand: RunAnalysis) -> list[str]:
    """The runs whose samples per step are unknown (compare.samples_per_step: no whole number
    of batches per step, or no batch size)."""
    return [run.name for run in (base, cand) if samples_per_step(run) is None]


def per_sample(base: RunAnalysis, cand: RunAnalysis) -> bool:
    """Whether the comparison's speedup of ``cand`` over ``base`` is per sample: the manifests'
    samples/s, or the step-time ratio scaled by both runs' samples per step."""
    comparison = compare_runs([base, cand], base.name)
    assert comparison is not None
    return comparison.rows[1].speedup_basis == "throughput" or not unknown_samples(base, cand)


def unequal_comparison(rubric: Rubric, runs: dict[str, RunAnalysis], digests: dict[str, str],
                       shown: dict[str, str]) -> list[str]:
    """Speedups compared across another batch, or across other profilers."""
    flags = []
    for check in rubric.checks:
        if check.target != SPEEDUP or check.baseline not in runs or check.candidate not in runs:
            continue
        base, cand = runs[check.baseline], runs[check.candidate]  # type: ignore[index]
        same = same_profile(base, cand, digests, shown)
        if same is not None:
            flags.append(f"{check.id}: {cand.name} is {base.name}'s own profile ({same}): the "
                         "speedup compares one profile with itself")
        batches = (base.knobs.get("batch_size"), cand.knobs.get("batch_size"))
        if None not in batches and batches[0] != batches[1] and not per_sample(base, cand):
            flags.append(f"{check.id}: {cand.name} trains on batches of {batches[1]}, "
                         f"{base.name} on {batches[0]}, and the speedup is their step-time "
                         "ratio, not per sample (the samples a step takes are unknown for "
                         f"{' and '.join(unknown_samples(base, cand))}): a step of each is not "
                         "the same work")
        scaled = scaled_times(base, cand)
        if scaled is not None:
            flags.append(f"{check.id}: {scaled}")
        kinds = (sorted({s.kind for s in base.inputs}), sorted({s.kind for s in cand.inputs}))
        if kinds[0] != kinds[1]:
            flags.append(f"{check.id}: {base.name} was profiled with {', '.join(kinds[0])}, "
                         f"{cand.name} with {', '.join(kinds[1])}: their step times carry "
                         "different profiler overheads")
    return flags


def flags(rubric: Rubric, runs: dict[str, RunAnalysis], digests: dict[str, str],
          shown: dict[str, str]) -> list[str]:
    """Every sign of forgery or unequal conditions in one submission's runs (``digests``: each
    profile's SHA-256; ``shown``: its path as the student named it)."""
    found = [flag for run in runs.values() for sign in (profilers_disagree, handmade,
                                                        manifest_edited)
             for flag in sign(run)]
    return found + unequal_comparison(rubric, runs, digests, shown)
