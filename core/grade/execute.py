"""``grade --run``: the grader runs each submission's training script itself, from a clean copy,
inside the sandbox (:mod:`profreport.runner.sandbox`), beside the teacher's reference script.

For each submission: unprofiled trials of the reference and of the submission, alternating (so a
change in the machine's load falls on both), each timed by the grader's own clock outside the
sandbox; then the runner's ``run-and-report`` on the submission's script (the plain run and the
rubric's profilers), whose run folder the grader analyses like any other. What each trial did
(optimizer steps, the DataLoader's batch, the loss at each step) comes from the runner's step
hooks (``script_profile --record-loss``). Everything is written under ``runs/NAME/`` of the
output folder, and ``measured.json`` there is reused while the submission, the rubric, the
reference and the grader are unchanged.

The submission is staged as in profile-only mode (:func:`.submissions.stage`): what staging
refuses (links, entries climbing out or absolute, past the size or file limits) is not in the
sandbox's copy. The rest runs, and the measurement keeps every refusal so that the grade says
what was left out of the run; a submission whose script itself was refused is not run.

:func:`main` runs one submission of a jobs file (a Slurm array task: :mod:`.array_task`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import json
import os
import shutil
import stat
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from profreport import __version__
from profreport.errors import InputError, ProfreportError
from profreport.fileio import write_text
from profreport.grade.rubric import REFERENCE_RUN, SUBMISSION_RUN, Rubric, RunSpec, load_rubric
from profreport.grade.submissions import (
    Staged,
    Submission,
    content_hash,
    file_hash,
    stage,
    unwrap,
)
from profreport.inputs import open_input
from profreport.runner.sandbox import Limits, Sandbox, run_sandboxed

MEASURED_NAME = "measured.json"
#: Version of measured.json: a change runs every submission again.
MEASURED_FORMAT = 2
#: The most bytes of a trial's step marks read back (they are written inside the sandbox).
MAX_RESULT_BYTES = 1 << 20
#: The runner module each trial runs the script under.
TRIAL_MODULE = "profreport.runner.script_profile"


@dataclass
class Trial:
    """One unprofiled launch of a script, as timed by the grader and seen by the step hooks."""

    who: str
    index: int
    #: Seconds from start to exit, measured outside the sandbox.
    wall_s: float
    status: int | None
    #: Optimizer steps, the DataLoader's batch size and the loss of each step (step hooks).
    steps: int | None = None
    batch_size: int | None = None
    losses: list[float] = field(default_factory=list)
    #: Why the trial failed (empty when it exited 0).
    error: str = ""

    @property
    def loss(self) -> float | None:
        """The loss at the last step."""
        return self.losses[-1] if self.losses else None


@dataclass
class Measured:
    """What running one submission produced."""

    key: str
    trials: list[Trial] = field(default_factory=list)
    #: The folder of the profiled run the grader made (``runs/NAME/runs/submission``).
    run_folder: str | None = None
    #: Why the submission could not be run, or a launch failed (one line each).
    failures: list[str] = field(default_factory=list)
    #: SHA-256 of the submission's script.
    script_hash: str = ""
    #: Entries of the submission that staging refused, with the reason: not in the sandbox's
    #: copy, so not in the run.
    refused: list[str] = field(default_factory=list)
    #: How staging read names that a teacher should know of (a Windows zip's "\\").
    notes: list[str] = field(default_factory=list)

    def of(self, who: str) -> list[Trial]:
        """The trials of the reference or of the submission."""
        return [trial for trial in self.trials if trial.who == who]

    def to_json(self) -> dict[str, Any]:
        """Plain data for measured.json."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measured:
        """The measurement an earlier run wrote."""
        return cls(**{**data, "trials": [Trial(**trial) for trial in data["trials"]]})


@dataclass(frozen=True)
class RunJob:
    """One submission to run: where its files are and where its run goes."""

    submission: Submission
    rubric: Rubric
    #: ``runs/NAME`` under the output folder.
    folder: Path


#: The packages whose code makes a measurement or a grade (the runner, the parsers, the
#: analysis, the rubric's checks, the templates).
GRADING_PACKAGES = ("profreport", "profreport.runner", "profreport.parsers",
                    "profreport.reports", "profreport.templates")
#: Files of those packages that can change a measurement or a grade.
_CODE_SUFFIXES = (".py", ".j2", ".toml", ".html", ".css", ".md")


@functools.cache
def code_digest() -> str:
    """A digest of the code that measures and grades (:data:`GRADING_PACKAGES`): any change to
    the runner, a parser, the analysis or a check re-measures and re-grades what was kept
    before it, whatever the version number says."""
    digest = hashlib.sha256()
    for package in GRADING_PACKAGES:
        root = Path(importlib.import_module(package).__path__[0])
        for path in sorted(p for p in root.rglob("*") if p.suffix in _CODE_SUFFIXES
                           and p.is_file() and "__pycache__" not in p.parts):
            digest.update(f"{package}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def run_key(job: RunJob) -> str:
    """What a measurement depends on: submission, rubric, reference script, grader code."""
    spec = _spec(job.rubric)
    text = (f"{MEASURED_FORMAT}|{__version__}|{code_digest()}|{job.rubric.digest}|"
            f"{file_hash(spec.reference)}|{content_hash(job.submission)}")
    return hashlib.sha256(text.encode()).hexdigest()


def _spec(rubric: Rubric) -> RunSpec:
    """The rubric's [run] table (grade --run checked that it has one)."""
    assert rubric.run is not None
    return rubric.run


def load_measured(folder: Path) -> Measured | None:
    """``folder/measured.json``, or None when absent or unreadable."""
    try:
        return Measured.from_json(json.loads((folder / MEASURED_NAME).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def limits(spec: RunSpec) -> Limits:
    """The sandbox limits the rubric asks for."""
    return Limits(wall_s=spec.time_limit_s, cpu_s=int(spec.time_limit_s * 4),
                  memory_bytes=int(spec.memory_gb * (1 << 30)), processes=spec.processes)


def execute(job: RunJob) -> Measured:
    """Run one submission (and the reference beside it), or reuse the earlier measurement."""
    key = run_key(job)
    earlier = load_measured(job.folder)
    if earlier is not None and earlier.key == key:
        return earlier
    shutil.rmtree(job.folder, ignore_errors=True)
    job.folder.mkdir(parents=True)
    measured = Measured(key=key)
    try:
        _execute(job, measured)
    except ProfreportError as exc:
        measured.failures.append(exc.one_line())
    write_text(job.folder / MEASURED_NAME, json.dumps(measured.to_json(), indent=1) + "\n")
    return measured


def _boxes(job: RunJob, spec: RunSpec, script: Path) -> dict[str, tuple[Sandbox, Path]]:
    """Two sandboxes, each with its own writable copy: the submission's staged files (holding
    ``script``), and the reference script (the submission cannot touch the reference it is
    timed against)."""
    reference = job.folder / "reference-sandbox" / "work"
    reference.mkdir(parents=True)
    shutil.copy2(spec.reference, reference / spec.reference.name)
    readable = (spec.data,) if spec.data else ()
    return {REFERENCE_RUN: (Sandbox(reference.parent, readable, limits(spec)),
                            reference / spec.reference.name),
            SUBMISSION_RUN: (Sandbox(job.folder / "sandbox", readable, limits(spec)), script)}


def _execute(job: RunJob, measured: Measured) -> None:
    """Stage the submission into its sandbox's copy (what was refused recorded); then the
    trials, alternating reference and submission, and the profiled run. Nothing runs when
    the script is not among the staged files."""
    spec = _spec(job.rubric)
    staged = stage(job.submission, job.folder / "sandbox" / "work")
    measured.refused, measured.notes = staged.refused, staged.notes
    script = unwrap(staged.root, job.submission.own_name) / spec.script
    if not script.is_file() or script.is_symlink():
        measured.failures.append(missing_script(spec.script, staged))
        return
    boxes = _boxes(job, spec, script)
    measured.script_hash = file_hash(script)
    order = [REFERENCE_RUN, SUBMISSION_RUN]
    for index in range(spec.trials):
        for who in order if index % 2 == 0 else order[::-1]:
            box, path = boxes[who]
            measured.trials.append(trial(box, path, spec, who, index, job.folder / "logs"))
    failed = [t for t in measured.of(SUBMISSION_RUN) if t.error]
    if failed:
        measured.failures.append(f"trial {failed[0].index + 1} failed: {failed[0].error}")
        return
    measured.run_folder = profile(boxes[SUBMISSION_RUN][0], script, spec, job.folder, measured)


def missing_script(script: str, staged: Staged) -> str:
    """Why there is no script to run: staging's refusal of it when there was one (the entry
    named as the script, or the limit past which nothing was staged), else that it is not in
    the submission."""
    why = next((refusal for refusal in staged.refusals if refusal.takes(script)), None)
    if why is not None:
        return f"{script} was refused at staging, so nothing was run ({why.line()})"
    return f"the submission has no {script} to run"


def trial(box: Sandbox, script: Path, spec: RunSpec, who: str, index: int,
          logs: Path) -> Trial:
    """One unprofiled launch of ``script`` in ``box``, timed from outside."""
    logs.mkdir(exist_ok=True)
    marks = box.writable / f"trial{index}.rank{{rank}}.json"
    command = [sys.executable, "-m", TRIAL_MODULE, "--mode", "none", "--record-loss",
               "--result", str(marks), "--", str(script), *spec.command_args()]
    log = logs / f"{who}-trial{index}"
    done = run_sandboxed(box, command, script.parent, log.with_suffix(".out"),
                         log.with_suffix(".err"))
    result = Trial(who, index, round(done.wall_s, 4), done.status)
    if done.killed or done.status != 0:
        result.error = done.killed or _last_line(log.with_suffix(".err"), done.status)
        return result
    _read_marks(Path(str(marks).format(rank=0)), result)
    return result


def _last_line(path: Path, status: int | None) -> str:
    """How a launch ended: its exit status and the last line of its stderr."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    return f"exit status {status}" + (f": {lines[-1][:300]}" if lines else "")


def _read_marks(path: Path, result: Trial) -> None:
    """Steps, batch size and losses from the step marks (written inside the sandbox: read
    with a size limit and every field's type checked)."""
    try:
        if path.is_symlink():
            raise InputError("a link", path)
        with open_input(path) as handle:  # never blocks on a FIFO the script left there
            data = json.loads(handle.read(MAX_RESULT_BYTES))
    except (OSError, ValueError, InputError):
        result.error = "the run left no readable step marks"
        return
    if not isinstance(data, dict):
        result.error = "the run's step marks are not an object"
        return
    steps, loader, losses = data.get("steps"), data.get("loader"), data.get("losses")
    result.steps = steps if isinstance(steps, int) and not isinstance(steps, bool) else None
    batch = loader.get("batch_size") if isinstance(loader, dict) else None
    result.batch_size = batch if isinstance(batch, int) and not isinstance(batch, bool) else None
    if isinstance(losses, list):
        result.losses = [float(v) for v in losses if isinstance(v, int | float)
                         and not isinstance(v, bool)]


def profile(box: Sandbox, script: Path, spec: RunSpec, folder: Path,
            measured: Measured) -> str | None:
    """The runner's run-and-report on the script, in the sandbox; the run folder it made,
    moved out of the sandbox's reach, or None when it made none."""
    runs = box.writable / "runs"
    command = [sys.executable, "-m", "profreport", "run-and-report", "--script", str(script),
               "--runs-dir", str(runs), "--out", str(box.writable / "report"), "--format",
               "json", "--profilers", ",".join(spec.profilers), "--device", "auto",
               "--", *spec.command_args()]
    logs = folder / "logs"
    # One limit per launch run-and-report makes (the plain run and each profiler) and one for
    # its analysis.
    wall = box.limits.wall_s * (len(spec.profilers) + 2)
    box = dataclasses.replace(box, limits=dataclasses.replace(box.limits, wall_s=wall))
    done = run_sandboxed(box, command, script.parent, logs / "profile.out", logs / "profile.err")
    made = runs / script.stem
    if done.killed or done.status != 0:
        measured.failures.append("the profiled run " + (done.killed or _last_line(
            logs / "profile.err", done.status)))
    if not made.is_dir() or made.is_symlink():
        return None
    target = folder / "runs" / SUBMISSION_RUN
    target.parent.mkdir(exist_ok=True)
    made.rename(target)
    measured.failures += _regular_only(target)
    return str(target)


def _regular_only(folder: Path) -> list[str]:
    """Remove every link, FIFO, socket or device the sandboxed code left in the run folder the
    grader is about to analyse; one line for each."""
    removed = []
    for parent, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            path = Path(parent) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                path.unlink()
                removed.append(f"{path.relative_to(folder)}: removed from the run folder "
                               "(not a regular file)")
    return removed


def main(argv: list[str] | None = None) -> int:
    """``JOBS.json INDEX``: run the INDEX-th submission of a jobs file (a Slurm array task)."""
    jobs_file, index = (argv if argv is not None else sys.argv[1:])
    data = json.loads(Path(jobs_file).read_text(encoding="utf-8"))
    student, path = data["submissions"][int(index)]
    rubric = load_rubric(Path(data["rubric"]))
    job = RunJob(Submission(student, Path(path)), rubric, Path(data["runs"]) / student)
    measured = execute(job)
    for line in measured.failures:
        print(f"{student}: {line}", file=sys.stderr)
    return 0
