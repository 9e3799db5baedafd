"""Findings of a scaling study (reports.analysis.scaling): where scaling breaks and why, or where it
exceeds ideal.
"""

from __future__ import annotations

from profreport.reports.analysis.findings.catalogue import Facts, rule
from profreport.reports.analysis.results import (
    Evidence,
    Finding,
    ScalingPoint,
    Severity,
    origin_label,
)
from profreport.units import ms, whole_pct

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


def _comm_cause(base: ScalingPoint, point: ScalingPoint,
                points: list[ScalingPoint], mode: str) -> tuple[Evidence, str] | None:
    """Exposed communication that grew by at least COMM_GROWTH_SHARE of the time lost per step,
    both as the one profiler that measured the communication timed them (comm_origin: the step
    source's step times are another profiler's when it is not that one); None when two
    profilers measured the points' communication."""
    if None in (base.comm_step_ns, point.comm_step_ns, base.comm_exposed_ns_per_step,
                point.comm_exposed_ns_per_step) or point.comm_origin is None:
        return None
    lost = (point.comm_step_ns or 0) - (base.comm_step_ns or 0)
    grown = (point.comm_exposed_ns_per_step or 0) - (base.comm_exposed_ns_per_step or 0)
    if lost <= 0 or grown < COMM_GROWTH_SHARE * lost:
        return None
    per_point = ", ".join(f"{p.processes} proc: {ms(p.comm_ns_per_step)} "
                          f"({ms(p.comm_exposed_ns_per_step or 0)} exposed)"
                          for p in points if p.comm_ns_per_step is not None)
    timed = ("" if point.comm_origin == point.profile_origin else
             f" (the steps as {origin_label(point.comm_origin)} timed them)")
    evidence = Evidence(f"communication per step {per_point}; the exposed part grew by "
                        f"{ms(grown)} of the {ms(lost)} each step lost{timed}",
                        point.comm_origin)
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
                        f"({whole_pct(efficiency)})", "manifest")
    fix = ("Even without data loading the processes do not add up: give each its own cores "
           "(OMP_NUM_THREADS = cores per process, one process per GPU) or its own node, and "
           "check communication above.")
    return evidence, fix


def _per_process(value: float | None, processes: int) -> str:
    """A throughput per process, or "?"."""
    return "?" if value is None else f"{value / processes:.1f}"


def _above_ideal(points: list[ScalingPoint]) -> ScalingPoint | None:
    """The point furthest above ideal, when it is more than SUPERLINEAR_EFFICIENCY of it."""
    scored = [p for p in points[1:] if p.efficiency is not None]
    best = max(scored, key=lambda p: p.efficiency or 0.0, default=None)
    if best is None or (best.efficiency or 0.0) <= SUPERLINEAR_EFFICIENCY:
        return None
    return best


def confound_evidence(base: ScalingPoint, point: ScalingPoint) -> list[Evidence]:
    """What else changed at this point besides the process count, and whether its throughput
    or the reference's was shared with other work: then its efficiency is not the scaling's
    alone."""
    said = []
    if point.confounds:
        said.append(Evidence(
            f"besides the process count, the {point.processes}-process point differs from the "
            f"reference in: {'; '.join(point.confounds)}: its efficiency is not the scaling's "
            "alone, and no part of it can be credited to one of these",
            point.profile_origin or "manifest"))
    shared = [p.shared_cpu.sharing_text(f"{p.processes}-process run")
              for p in (base, point) if p.shared_cpu is not None]
    if shared:
        said.append(Evidence(
            f"the unprofiled runs shared the CPUs with other work ({'; '.join(shared)}): their "
            "throughput, and this efficiency, are not their own (a comparison of these runs "
            "takes their profiled step times instead)", "manifest"))
    return said


def _synthetic_per_process(base: ScalingPoint, point: ScalingPoint) -> str:
    """What the model alone (synthetic trial) does per process at ``point`` against the
    reference: faster per process too (the reference's model is slow), or not (what slows the
    reference's real loop is outside the model)."""
    faster = point.synthetic / point.processes > base.synthetic / base.processes  # type: ignore[operator]
    said = (f"{_per_process(point.synthetic, point.processes)} per process against "
            f"{_per_process(base.synthetic, base.processes)}")
    if faster:
        return f"on synthetic data too: {said}: the model itself runs faster per process"
    return (f"on synthetic data the model is no faster per process ({said}): what slows the "
            "reference's real loop is outside the model (its DataLoader, or other work on its "
            "CPUs)")


@rule("SCALING_SUPERLINEAR", severity=("info",), needs=("study",))
def superlinear(facts: Facts) -> Finding | None:
    """A point far above ideal: the reference runs slower per process than the others."""
    study = facts.study
    if study is None:
        return None
    points, unit = study.points, study.unit
    best = _above_ideal(points)
    if best is None:
        return None
    base = points[0]
    evidence = [Evidence(
        f"{best.processes} processes reach {whole_pct(best.efficiency or 0)} of ideal: "
        f"{_per_process(best.throughput, best.processes)} {unit} per process against "
        f"{_per_process(base.throughput, base.processes)} at {base.processes}", "manifest")]
    if base.synthetic is not None and best.synthetic is not None:
        evidence.append(Evidence(_synthetic_per_process(base, best), "manifest"))
    if base.threads_per_process is not None and best.threads_per_process is not None:
        evidence.append(Evidence(
            f"intra-op threads per process: {base.threads_per_process} at {base.processes}, "
            f"{best.threads_per_process} at {best.processes}", "manifest"))
    evidence += confound_evidence(base, best)
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


@rule("SCALING_EFFICIENCY", severity=("high", "medium"), needs=("study",))
def scaling_efficiency(facts: Facts) -> Finding | None:
    """Where scaling breaks (the least efficient point) and why; not said when a point exceeds
    ideal (SCALING_SUPERLINEAR: then the reference, not the scaling, is the story)."""
    study = facts.study
    if study is None or _above_ideal(study.points) is not None:
        return None
    points, unit, mode = study.points, study.unit, study.mode
    scored = [p for p in points[1:] if p.efficiency is not None]
    if not scored:
        return None
    worst = min(scored, key=lambda p: p.efficiency or 0.0)
    if (worst.efficiency or 0.0) >= SCALING_OK_EFFICIENCY:
        return None
    base = points[0]
    causes = [cause for cause in (_comm_cause(base, worst, points, mode),
                                  _loader_cause(worst, unit), _straggler_cause(worst),
                                  _synthetic_cause(base, worst, unit)) if cause is not None]
    summary = Evidence(f"{worst.processes} processes: {worst.throughput:.1f} {unit} of an "
                       f"ideal {worst.ideal:.1f} ({whole_pct(worst.efficiency or 0)} "
                       f"efficiency, {mode} scaling)", "manifest" if unit == "samples/s"
                       else base.profile_origin or "kineto")
    fix = " ".join(fix for _, fix in causes) or (
        "The data do not show why (no communication, trial or per-rank figures at this point): "
        "profile each point with torch.profiler to see communication and per-rank steps.")
    severity: Severity = ("high" if (worst.efficiency or 0.0) < SCALING_POOR_EFFICIENCY
                          else "medium")
    return Finding(id="SCALING_EFFICIENCY", severity=severity,
                   title=f"Scaling breaks at {worst.processes} processes: "
                         f"{whole_pct(worst.efficiency or 0)} of ideal",
                   evidence=[summary, *(evidence for evidence, _ in causes),
                             *confound_evidence(base, worst)],
                   recommendation=fix)
