"""``grade --run``'s figures: does the submission train like the reference, and how much faster
is it, in samples per second of the grader's own clock, with the spread over trials.

Each trial's throughput is the rubric's steps x the batch over the launch's wall time measured
outside the sandbox (start-up included, the same for every script): nothing the script reports
about its own speed enters it. A submission that makes other steps, or (unless the rubric allows
it) another batch, or whose loss after the steps is not within the tolerance of the
reference's, is not compared: a faster run that does not train is not faster. A speedup is
within noise, and counts as no change, when the trials overlap the reference's (the slowest
submission trial no faster than the fastest reference one, or the other way round), when the
trial-by-trial ratios fall on both sides of 1, or when it lies closer to 1 than the two sides'
spreads added (each side's range over its median): the same script against itself on a busy
machine (load 5 on 2 CPUs) measured 0.72x to 1.13x with two trials.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from profreport.grade.execute import Measured, Trial
from profreport.grade.rubric import REFERENCE_RUN, SUBMISSION_RUN, RunSpec

#: Below this absolute loss difference two losses are equal whatever the relative tolerance
#: (a reference that reaches ~0 loss would otherwise demand bit-identical training).
LOSS_FLOOR = 1e-6


@dataclass
class Fair:
    """The comparison of a submission's trials with the reference's."""

    #: Samples per second of each trial, reference and submission.
    reference: list[float] = field(default_factory=list)
    submission: list[float] = field(default_factory=list)
    #: Median submission throughput over median reference throughput; the lowest and highest
    #: ratio of one trial's pair.
    speedup: float | None = None
    low: float | None = None
    high: float | None = None
    within_noise: bool = False
    reference_loss: float | None = None
    loss: float | None = None
    #: Why the submission does not count as training like the reference (empty: it does).
    not_training: str = ""

    @property
    def graded_speedup(self) -> float:
        """The figure the grade uses: 0 when it does not train, 1 within noise."""
        if self.not_training or self.speedup is None:
            return 0.0
        return 1.0 if self.within_noise else self.speedup

    def to_json(self) -> dict[str, Any]:
        """Plain data for the gradebook."""
        return {**asdict(self), "graded_speedup": self.graded_speedup}


def _loss(trials: list[Trial]) -> float | None:
    """The median over trials of the loss at the last step."""
    losses = [trial.loss for trial in trials if trial.loss is not None]
    return statistics.median(losses) if losses else None


def _why_not_training(trials: list[Trial], spec: RunSpec, reference_loss: float | None,
                      loss: float | None) -> str:
    """Why the submission's trials do not train as the rubric asks; empty when they do."""
    if not trials or any(trial.error for trial in trials):
        failed = next((trial for trial in trials if trial.error), None)
        return f"a trial failed: {failed.error}" if failed else "it was not run"
    steps = {trial.steps for trial in trials}
    if steps != {spec.steps}:
        shown = ", ".join(str(s) for s in sorted(steps, key=lambda s: s or 0))
        return f"it made {shown} optimizer steps; the rubric asks for {spec.steps}"
    batches = {trial.batch_size for trial in trials}
    if not spec.allow_batch_change and batches != {spec.batch_size}:
        shown = ", ".join(str(b) for b in batches)
        return (f"its DataLoader's batch is {shown} samples; the rubric asks for "
                f"{spec.batch_size} (a smaller batch is not a faster training)")
    if reference_loss is None or loss is None:
        return "no loss was recorded (no backward() on a one-element tensor)"
    if abs(loss - reference_loss) > max(spec.loss_tolerance * abs(reference_loss), LOSS_FLOOR):
        return (f"its loss after {spec.steps} steps is {loss:.4g}; the reference's is "
                f"{reference_loss:.4g} (tolerance {spec.loss_tolerance:.0%})")
    return ""


def samples_per_s(trial: Trial, spec: RunSpec) -> float:
    """One trial's samples per second: steps x batch over the grader's wall time."""
    batch = trial.batch_size if spec.allow_batch_change and trial.batch_size else spec.batch_size
    return spec.steps * batch / trial.wall_s


def compare(measured: Measured, spec: RunSpec) -> Fair:
    """The submission's trials against the reference's (paired by trial index)."""
    reference, submission = measured.of(REFERENCE_RUN), measured.of(SUBMISSION_RUN)
    fair = Fair(reference_loss=_loss(reference), loss=_loss(submission))
    if not reference or any(trial.error for trial in reference):
        failed = next((trial.error for trial in reference if trial.error), "it was not run")
        fair.not_training = f"the reference failed ({failed}): nothing to compare with"
        return fair
    fair.not_training = _why_not_training(submission, spec, fair.reference_loss, fair.loss)
    fair.reference = [round(samples_per_s(trial, spec), 3) for trial in reference]
    if fair.not_training:
        return fair
    fair.submission = [round(samples_per_s(trial, spec), 3) for trial in submission]
    fair.speedup = statistics.median(fair.submission) / statistics.median(fair.reference)
    ratios = [s / r for s, r in zip(fair.submission, fair.reference, strict=False)]
    fair.low, fair.high = min(ratios), max(ratios)
    overlap = (min(fair.submission) <= max(fair.reference)
               and max(fair.submission) >= min(fair.reference))
    band = _spread(fair.reference) + _spread(fair.submission)
    fair.within_noise = (overlap or fair.low <= 1 <= fair.high
                         or abs(fair.speedup - 1) <= band)
    return fair


def _spread(values: list[float]) -> float:
    """A side's range over its median (0.1: its trials lie within 10% of each other)."""
    return (max(values) - min(values)) / statistics.median(values)
