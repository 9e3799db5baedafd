"""Rubric checks against one submission's analysed runs: points, the measurement in words, and
what to try next. Every figure comes from the analysis (``profreport/1`` metrics, verdicts,
findings, the comparison); nothing here measures a profile itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from profreport.grade.fair import Fair
from profreport.grade.forgery import same_profile
from profreport.grade.results import CheckResult
from profreport.grade.rubric import SPEEDUP, SUBMISSION_RUN, Check
from profreport.reports.analysis.compare import compare_runs, samples_per_step, shared_cpus
from profreport.reports.analysis.findings import VERDICT_FINDINGS
from profreport.reports.analysis.results import Finding, RunAnalysis, origin_label
from profreport.reports.render import display
from profreport.reports.render.json import metrics_json

KIND_LABELS = {"lprof": "line_profiler (.lprof)", "kineto": "torch.profiler trace",
               "nsys": "Nsight Systems report"}
#: Points are rounded to this many decimals (partial credit is linear).
POINT_DECIMALS = 2


@dataclass
class Graded:
    """What the checks may look at: the submission's runs, by folder name, and what failed."""

    runs: dict[str, RunAnalysis]
    #: Run name -> profiles of that run that could not be read (one line each).
    failures: dict[str, list[str]] = field(default_factory=dict)
    #: Profile path -> path inside the submission, for naming sources to the student.
    shown_paths: dict[str, str] = field(default_factory=dict)
    #: ``grade --run``: the submission's trials against the reference's.
    fair: Fair | None = None
    #: Profile path -> SHA-256 of its bytes (profile-only mode).
    digests: dict[str, str] = field(default_factory=dict)

    def where(self, run: RunAnalysis) -> str:
        """The run's profiles as the student knows them."""
        return ", ".join(self.shown_paths.get(s.path, s.path) for s in run.inputs) or "none"


def _credit(check: Check, fraction: float, measured: str, advice: str,
            evidence: list[str] | None = None) -> CheckResult:
    """A CheckResult worth ``fraction`` of the check's points."""
    fraction = min(max(fraction, 0.0), 1.0)
    return CheckResult(id=check.id, asks=asks(check),
                       points=round(check.points * fraction, POINT_DECIMALS),
                       max_points=check.points, passed=fraction >= 1.0, measured=measured,
                       evidence=evidence or [], advice="" if fraction >= 1.0 else advice)


def asks(check: Check) -> str:
    """What the check asks, in words (the rubric's title when it has one)."""
    if check.title:
        return check.title
    where = f"the {check.run} run" if check.run else "the submission"
    target = check.target
    if check.kind == "require":
        kinds = " and ".join("a profile" if k == "any" else f"a {KIND_LABELS[k]}"
                             for k in target)
        return f"{where} holds {kinds} that can be read"
    if check.kind == "expect_verdict":
        return f"{where} is {' or '.join(_listed(target))}"
    if check.kind == "expect_verdict_not":
        return f"{where} is neither {' nor '.join(_listed(target))}" if isinstance(
            target, list) and len(target) > 1 else f"{where} is not {_listed(target)[0]}"
    if check.kind == "expect_finding":
        return f"profreport finds {target} in {where}"
    if check.kind == "expect_no_finding":
        return f"profreport finds no {target} in {where}"
    if check.kind == "trains":
        return "the submission trains like the reference (steps, batch, loss)"
    subject = (f"speedup of {check.candidate} over {check.baseline}" if target == SPEEDUP
               else f"{target} of {where}")
    return f"{subject} {_bounds(check)}"


def _listed(target: str | list[str]) -> list[str]:
    """A rubric value that may be one item or a list, as a list."""
    return target if isinstance(target, list) else [target]


def _bounds(check: Check) -> str:
    """``≥ 1.2``, ``≤ 10.0%`` or ``between a and b``, in the metric's unit."""
    def show(value: float) -> str:
        return f"{value:g}" if check.target == SPEEDUP else show_metric(check.target, value)

    if check.min is not None and check.max is not None:
        return f"between {show(check.min)} and {show(check.max)}"
    return f"≥ {show(check.min)}" if check.min is not None else f"≤ {show(check.max)}"


def _missing_run(check: Check, name: str, graded: Graded) -> CheckResult:
    """The check fails: the submission has no run of that name."""
    found = ", ".join(graded.runs) or "none"
    failed = graded.failures.get(name)
    if graded.fair is not None and name == SUBMISSION_RUN:  # grade --run: the grader's run
        why = "; ".join(failed) if failed else graded.fair.not_training or "no profile written"
        return _credit(check, 0.0, "The grader's profiled run of your script gave no readable "
                       f"profile ({why}).", "Make your script run to its end in the grader's "
                       "sandbox: the grader profiles it there itself.")
    why = (f"its profiles could not be read ({'; '.join(failed)})" if failed
           else f"runs found: {found}")
    return _credit(check, 0.0, f"There is no readable run named {name!r} ({why}).",
                   f"Put the profiles of that run in a folder named {name}/ in your submission.")


def check_require(check: Check, graded: Graded) -> CheckResult:
    """Readable profiles of the required kinds (in one run, or anywhere)."""
    if check.run is not None and check.run not in graded.runs:
        return _missing_run(check, check.run, graded)
    runs = [graded.runs[check.run]] if check.run else list(graded.runs.values())
    sources = [s for run in runs for s in run.inputs]
    kinds = {s.kind for s in sources}
    wanted = list(check.target)
    present = [k for k in wanted if (k == "any" and sources) or k in kinds]
    found = "; ".join(f"{KIND_LABELS[s.kind]} {graded.shown_paths.get(s.path, s.path)}"
                      for s in sources) or "no readable profile"
    absent = [k for k in wanted if k not in present]
    failed = [line for run in ([check.run] if check.run else graded.failures)
              for line in graded.failures.get(run, [])]
    measured = f"Read: {found}." + (f" Could not read: {'; '.join(failed)}." if failed else "")
    fraction = len(present) / len(wanted) if check.partial else float(not absent)
    names = ", ".join("a profile" if k == "any" else KIND_LABELS[k] for k in absent)
    return _credit(check, fraction, measured, f"Missing: {names}. Hand in the file the profiler "
                   "wrote (kernprof -l writes .lprof, torch.profiler a .pt.trace.json[.gz], "
                   "nsys profile a .nsys-rep).")


def _verdict_evidence(run: RunAnalysis) -> list[str]:
    """The evidence of the finding that explains the run's verdict, with its profiler."""
    lead = VERDICT_FINDINGS.get(run.verdict)
    finding = next((f for f in run.findings if f.id == lead), None)
    return [] if finding is None else _evidence(finding)


def _evidence(finding: Finding) -> list[str]:
    """A finding's evidence lines, each naming its profiler."""
    return [f"{e.text} ({origin_label(e.origin)})" for e in finding.evidence]


def _what_to_change(run: RunAnalysis) -> str:
    """The run's own advice: its leading finding's recommendation."""
    top = display.headline_finding(run)
    return top.recommendation if top else "The profiles do not show a bottleneck to act on."


def _others(run: RunAnalysis, graded: Graded) -> str:
    """The verdict of the submission's other runs, for contrast."""
    parts = []
    for other in graded.runs.values():
        if other is not run:
            wait = other.metrics.dataloader_fraction
            waited = f", {display.percent(wait)} of each step waiting for data" if wait else ""
            parts.append(f"{other.name}: {other.verdict}{waited}")
    return f" (for comparison, {'; '.join(parts)})" if parts else ""


def check_verdict(check: Check, graded: Graded) -> CheckResult:
    """The run's verdict is (or is not) the one the rubric names."""
    assert check.run is not None
    run = graded.runs.get(check.run)
    if run is None:
        return _missing_run(check, check.run, graded)
    hit = run.verdict in _listed(check.target)
    passed = hit if check.kind == "expect_verdict" else not hit
    measured = (f"Your {run.name} run is {run.verdict}: "
                f"{run.verdict_reason} (from {graded.where(run)}){_others(run, graded)}.")
    return _credit(check, float(passed), measured, _what_to_change(run), _verdict_evidence(run))


def check_finding(check: Check, graded: Graded) -> CheckResult:
    """The run has (or has not) the finding the rubric names."""
    assert check.run is not None
    run = graded.runs.get(check.run)
    if run is None:
        return _missing_run(check, check.run, graded)
    finding = next((f for f in run.findings if f.id == check.target), None)
    passed = (finding is not None) == (check.kind == "expect_finding")
    if finding is not None:
        measured = f"In your {run.name} run profreport finds {finding.id}: {finding.title}"
        advice = finding.recommendation
    else:
        shown = ", ".join(f.id for f in run.findings) or "none"
        measured = (f"profreport does not find {check.target} in your {run.name} run "
                    f"(its findings: {shown}; verdict {run.verdict}).")
        advice = (f"The assignment expects {check.target} to show in this run; profile the "
                  "configuration it asks for, with a profiler that records it.")
    return _credit(check, float(passed), measured + f" Profiles: {graded.where(run)}.",
                   advice, _evidence(finding) if finding else [])


def metric_value(run: RunAnalysis, name: str) -> Any:
    """A ``profreport/1`` metric of the run (``a.b`` reaches into a nested one); None if absent."""
    value: Any = metrics_json(run.metrics)
    for part in name.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def show_metric(name: str, value: float) -> str:
    """A metric value with the unit its name tells (fractions as %, ``_ms`` as ms)."""
    if name.endswith("fraction"):
        return display.percent(value)
    if "_ms" in name:
        return f"{value:,.3f} ms"
    return f"{value:,.4g}"


def _fraction(check: Check, value: float) -> float:
    """Credit for ``value``: 1 within the bounds, linear from ``partial_from``, else 0."""
    low, high = check.min, check.max
    if (low is None or value >= low) and (high is None or value <= high):
        return 1.0
    start = check.partial_from
    if start is None:
        return 0.0
    if low is not None:
        return (value - start) / (low - start)
    assert high is not None
    return (start - value) / (start - high)


def check_metric(check: Check, graded: Graded) -> CheckResult:
    """A profreport/1 metric of one run within the rubric's bounds."""
    assert check.run is not None
    run = graded.runs.get(check.run)
    if run is None:
        return _missing_run(check, check.run, graded)
    value = metric_value(run, check.target)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return _credit(check, 0.0, f"Your {run.name} run's profiles ({graded.where(run)}) do "
                       f"not measure {check.target}.", "Hand in a profile that records it "
                       "(GPU metrics need a torch.profiler trace or an Nsight Systems report "
                       "of a GPU run).")
    measured = (f"Your {run.name} run measures {check.target} = "
                f"{show_metric(check.target, value)} (needs {_bounds(check)}; from "
                f"{graded.where(run)}).")
    fraction = _fraction(check, value)
    return _credit(check, fraction, measured, _what_to_change(run),
                   _verdict_evidence(run) if fraction < 1 else [])


def _samples(values: list[float]) -> str:
    """Trials' throughputs: ``412, 398, 405 samples/s``."""
    return ", ".join(f"{value:,.0f}" for value in values) + " samples/s"


def measured_speedup(fair: Fair) -> str:
    """The speedup of a run submission in words, with its spread and the trials behind it."""
    if fair.not_training or fair.speedup is None:
        return (f"Not compared: {fair.not_training}. A faster run that does not train is not "
                "faster.")
    text = (f"Run by the grader: {_samples(fair.submission)} against the reference's "
            f"{_samples(fair.reference)} (trial by trial {fair.low:.2f}x to {fair.high:.2f}x): "
            f"{fair.speedup:.2f}x, loss {fair.loss:.4g} (reference {fair.reference_loss:.4g}).")
    if fair.within_noise:
        text += (" Your trials overlap the reference's: the difference is within run-to-run "
                 "noise, counted as 1.00x.")
    return text


def check_run_speedup(check: Check, fair: Fair) -> CheckResult:
    """``grade --run``: the speedup measured by the grader's trials within the bounds."""
    advice = ("Keep the training the same (steps, batch, loss) and make each step cheaper." if
              not fair.not_training else "Make the script train as the reference does.")
    return _credit(check, _fraction(check, fair.graded_speedup), measured_speedup(fair) +
                   f" (needs {_bounds(check)})", advice)


def check_trains(check: Check, graded: Graded) -> CheckResult:
    """``grade --run``: the submission makes the rubric's steps on its batch, and its loss
    after them is within the tolerance of the reference's."""
    fair = graded.fair
    if fair is None:
        return _credit(check, 0.0, "The submission was not run.", "")
    if fair.not_training:
        return _credit(check, 0.0, f"It does not train like the reference: {fair.not_training}.",
                       "Train the same model on the same data and batch for the same steps.")
    return _credit(check, 1.0, f"It trains like the reference: loss {fair.loss:.4g} after the "
                   f"rubric's steps (reference {fair.reference_loss:.4g}).", "")


def check_speedup(check: Check, graded: Graded) -> CheckResult:
    """The comparison's speedup within the bounds: the unprofiled throughput ratio (samples/s)
    when both runs have the runner's manifest, else the profiled step-time ratio in samples
    (compare.per_sample_speedup, the comparison's own figure); 1.00x within the noise band.
    Under ``grade --run``, the grader's trials."""
    if graded.fair is not None:
        return check_run_speedup(check, graded.fair)
    assert check.baseline is not None and check.candidate is not None
    for name in (check.baseline, check.candidate):
        if name not in graded.runs:
            return _missing_run(check, name, graded)
    base, cand = graded.runs[check.baseline], graded.runs[check.candidate]
    comparison = compare_runs([base, cand], base.name)
    assert comparison is not None
    base_row, row = comparison.rows
    if row.speedup is None:
        return _credit(check, 0.0, f"The step time of {base.name} or {cand.name} is unknown: "
                       "their profiles have no step markers.", "Profile a few training steps "
                       "(torch.profiler with a schedule, or NVTX ranges per step).")
    value, basis = row.speedup, _basis(base, cand, row.speedup_basis)
    steps = (f"A step of {cand.name} takes {display.duration(row.step_time_ns)} against "
             f"{display.duration(base_row.step_time_ns)} in {base.name}. "
             if row.step_time_ns and base_row.step_time_ns else "")
    noise = display.noise_mark(row.within_noise, row.noise_fraction)
    same = same_profile(base, cand, graded.digests, graded.shown_paths)
    itself = (f"Your {cand.name} run is your {base.name} run's own profile ({same}): this "
              "compares one profile with itself. " if same is not None else "")
    measured = (f"{itself}{steps}{basis}: {display.ratio(value)}"
                f"{' ' + noise if noise else ''} (needs {_bounds(check)}). {row.explanation}")
    if row.within_noise:
        measured += " The difference is within run-to-run noise: counted as 1.00x."
        value = 1.0
    return _credit(check, _fraction(check, value), measured, _what_to_change(cand),
                   _verdict_evidence(cand))


def _basis(base: RunAnalysis, cand: RunAnalysis, basis: str) -> str:
    """What the speedup is the ratio of, in words."""
    if basis == "throughput":
        return (f"Samples per second of the unprofiled runs (the runner's manifests), "
                f"{cand.name} over {base.name}")
    why = ("the unprofiled runs' throughput set aside: their launches shared the CPUs"
           if shared_cpus(base) or shared_cpus(cand) else "no manifest with throughput")
    old, new = samples_per_step(base), samples_per_step(cand)
    if old is not None and new is not None and old != new:
        return (f"Profiled step time of {base.name} over {cand.name}, x {new}/{old} samples "
                f"per step (samples/s, not steps/s; {why})")
    return f"Profiled step time of {base.name} over {cand.name} ({why})"


CHECKS: dict[str, Callable[[Check, Graded], CheckResult]] = {
    "require": check_require,
    "expect_verdict": check_verdict, "expect_verdict_not": check_verdict,
    "expect_finding": check_finding, "expect_no_finding": check_finding,
    "trains": check_trains,
}


def evaluate(check: Check, graded: Graded) -> CheckResult:
    """Grade one check."""
    if check.kind == "metric":
        return (check_speedup if check.target == SPEEDUP else check_metric)(check, graded)
    return CHECKS[check.kind](check, graded)
