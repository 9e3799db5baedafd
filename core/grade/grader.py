"""Grading one submission: stage it, analyse each run with the analysis pipeline, run the checks,
write the student's report and feedback. Never raises: whatever goes wrong becomes the
student's ``error`` and the batch goes on."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from profreport import __version__
from profreport.errors import NothingReadable, ProfreportError
from profreport.fileio import write_text
from profreport.grade.adjust import Adjustments, apply
from profreport.grade.checks import Graded, evaluate
from profreport.grade.execute import code_digest, load_measured
from profreport.grade.fair import compare
from profreport.grade.feedback import render_feedback, render_student_page
from profreport.grade.forgery import flags, timing_fingerprint
from profreport.grade.results import GRADEBOOK_SCHEMA, RunSummary, StudentResult
from profreport.grade.rubric import SUBMISSION_RUN, Rubric, RunSpec
from profreport.grade.submissions import Submission, content_hash, file_hash, stage, unwrap
from profreport.manifest import MANIFEST_NAME
from profreport.parsers import ParseOptions
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths, find_profiles
from profreport.reports.analysis.compare import compare_runs
from profreport.reports.analysis.results import FunctionListing, LineItem, Report, RunAnalysis
from profreport.reports.render import display

#: The run that profiles lying directly in a submission form.
LOOSE_RUN = "main"
#: Version of the cached per-student result: a change re-grades every submission.
CACHE_FORMAT = 2


@dataclass(frozen=True)
class Layout:
    """Where grading writes, all under the output folder."""

    out: Path

    @property
    def staging(self) -> Path:
        """Unpacked submissions, removed once each is graded."""
        return self.out / "staging"

    @property
    def cache(self) -> Path:
        """Per-student results of earlier runs, and nsys exports."""
        return self.out / "cache"

    def runs(self, name: str) -> Path:
        """``grade --run``: the student's sandbox, trials and the run folders made of them."""
        return self.out / "runs" / name

    def student(self, name: str) -> Path:
        """The student's report folder."""
        return self.out / "students" / name


@dataclass(frozen=True)
class Job:
    """One submission to grade (picklable: it crosses to a worker process)."""

    submission: Submission
    rubric: Rubric
    layout: Layout
    #: The teacher's overrides and the lateness of this submission.
    adjust: Adjustments = Adjustments()


def cache_key(job: Job, digest: str) -> str:
    """What a cached result depends on: the submission, the rubric and the grader's code."""
    text = (f"{GRADEBOOK_SCHEMA}|{CACHE_FORMAT}|{__version__}|{code_digest()}|"
            f"{job.rubric.digest}|{digest}|{job.adjust!r}")
    return hashlib.sha256(text.encode()).hexdigest()


def grade_submission(job: Job) -> StudentResult:
    """Grade one submission; every failure becomes the result's error, never an exception."""
    name = job.submission.student
    try:
        return _grade(job)
    except ProfreportError as exc:
        return failed_result(job, exc.one_line())
    except Exception as exc:  # hostile input must not stop the class: one line, batch goes on
        return failed_result(job, f"grading failed ({type(exc).__name__}: {str(exc)[:200]})")
    finally:
        shutil.rmtree(job.layout.staging / name, ignore_errors=True)


def failed_result(job: Job, error: str, **fields: object) -> StudentResult:
    """An error result: every check at zero, saying why."""
    checks = [evaluate(check, Graded(runs={})) for check in job.rubric.checks]
    return StudentResult(student=job.submission.student, status="error", error=error,
                         checks=checks, **fields)  # type: ignore[arg-type]


def _cached(job: Job, key: str) -> StudentResult | None:
    """The result of an earlier run with the same key, when its files are still there."""
    path = job.layout.cache / f"{job.submission.student}.json"
    folder = job.layout.student(job.submission.student)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("key") != key or not (folder / "feedback.md").is_file():
            return None
        result = StudentResult.from_json(data["result"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    result.reused = True
    return result


def _grade(job: Job) -> StudentResult:
    """Stage, analyse, check, write; the cached result when nothing changed."""
    if job.rubric.run is not None:
        return _grade_run(job, job.rubric.run)
    digest = content_hash(job.submission)
    key = cache_key(job, digest)
    cached = _cached(job, key)
    if cached is not None:
        return cached
    staged = stage(job.submission, job.layout.staging / job.submission.student)
    root = unwrap(staged.root, job.submission.own_name)
    moved = _gather_loose(root)
    refused = staged.refused
    runs, failures, shown = _analyse(root, job.layout, moved)
    digests = {s.path: file_hash(Path(s.path)) for run in runs for s in run.inputs}
    graded = Graded(runs={run.name: run for run in runs}, failures=failures, shown_paths=shown,
                    digests=digests)
    all_failures = [line for lines in failures.values() for line in lines]
    fields = {"refused": refused, "failures": all_failures, "content_hash": digest,
              "flags": flags(job.rubric, graded.runs, digests, shown), "notes": staged.notes}
    if not runs:
        error = ("no profile could be read: " + "; ".join(all_failures) if all_failures
                 else "no profiles in the submission")
        result = failed_result(job, error, **fields)
    else:
        result = StudentResult(
            student=job.submission.student, status="ok", error="",
            checks=[evaluate(check, graded) for check in job.rubric.checks],
            runs=[_summary(run, graded) for run in runs],
            profile_hashes={shown.get(path, path): value for path, value in digests.items()},
            **fields)
    return _finish(job, key, result, graded)


def _finish(job: Job, key: str, result: StudentResult, graded: Graded) -> StudentResult:
    """Write the student's pages and cache the result."""
    if job.submission.note:
        result.notes.insert(0, job.submission.note)
    apply(result, job.adjust, job.rubric)
    _write_student(job, result, graded)
    write_text(job.layout.cache / f"{job.submission.student}.json",
               json.dumps({"key": key, "result": result.to_json()}, sort_keys=True))
    return result


def _grade_run(job: Job, spec: RunSpec) -> StudentResult:
    """``grade --run``: grade the run folder and the trials the grader made of the submission
    (:mod:`.execute`), never anything the student handed in but the script."""
    folder = job.layout.runs(job.submission.student)
    measured = load_measured(folder)
    if measured is None:
        return failed_result(job, "the submission was not run (no measured.json in "
                                  f"runs/{job.submission.student})")
    key = cache_key(job, measured.key)
    cached = _cached(job, key)
    if cached is not None:
        return cached
    runs_root = folder / "runs"
    runs, failures, shown = (_analyse(runs_root, job.layout, {}) if runs_root.is_dir()
                             else ([], {}, {}))
    fair = compare(measured, spec)
    graded = Graded(runs={run.name: run for run in runs}, failures=failures,
                    shown_paths=shown, fair=fair)
    all_failures = measured.failures + [line for lines in failures.values() for line in lines]
    fields = {"refused": measured.refused, "notes": measured.notes,
              "failures": all_failures, "content_hash": measured.key,
              "profile_hashes": {spec.script: measured.script_hash} if measured.script_hash
              else {}, "measured": fair.to_json()}
    if not measured.of(SUBMISSION_RUN) or not measured.script_hash:
        result = failed_result(job, "; ".join(measured.failures) or "the submission was not run",
                               **fields)
    else:
        result = StudentResult(
            student=job.submission.student, status="ok", error="",
            checks=[evaluate(check, graded) for check in job.rubric.checks],
            runs=[_summary(run, graded) for run in runs], **fields)  # type: ignore[arg-type]
    return _finish(job, key, result, graded)


def _gather_loose(root: Path) -> dict[Path, str]:
    """Move files lying directly in the submission into the run folder ``main``; returns each
    moved file's new path -> its name in the submission."""
    loose = [p for p in root.iterdir() if p.is_file()]
    if not loose:
        return {}
    folder = root / LOOSE_RUN
    folder.mkdir(exist_ok=True)
    moved = {}
    for path in loose:
        target = folder / path.name
        if not target.exists():
            path.rename(target)
            moved[target] = path.name
    return moved


def _analyse(root: Path, layout: Layout, moved: dict[Path, str]
             ) -> tuple[list[RunAnalysis], dict[str, list[str]], dict[str, str]]:
    """Each run folder analysed on its own: runs, failures per run, and each profile's path as
    the student named it."""
    options = AnalyzeOptions(parse=ParseOptions(cache_dir=layout.cache / "nsys",
                                                source_root=root))
    runs: list[RunAnalysis] = []
    failures: dict[str, list[str]] = {}
    shown: dict[str, str] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        profiles = find_profiles(folder)
        if not profiles and not (folder / MANIFEST_NAME).is_file():
            continue
        for path in profiles:
            shown[str(path)] = moved.get(path, path.relative_to(root).as_posix())
        try:
            report = analyze_paths([folder], options)
        except NothingReadable as exc:
            failures[folder.name] = [_relative(line, root, shown) for line in exc.failures]
            continue
        except Exception as exc:  # hostile input: this run fails, the others are graded
            failures[folder.name] = [f"{folder.name}: cannot be analysed "
                                     f"({type(exc).__name__}: {str(exc)[:200]})"]
            continue
        failures[folder.name] = [_relative(line, root, shown) for line in report.failures]
        run = report.runs[0]
        run.notes = [_relative(note, root, shown) for note in run.notes]
        run.metrics.listings = [_relative_listing(listing, root, shown)
                                for listing in run.metrics.listings]
        run.name = folder.name
        runs.append(run)
    return runs, failures, shown


def _relative(line: str, root: Path, shown: dict[str, str]) -> str:
    """A failure line or note with the staging folder's paths replaced by the student's."""
    for path, name in shown.items():
        line = line.replace(path, name)
    return line.replace(f"{root}/", "").replace(str(root), "your submission")


def _relative_listing(listing: FunctionListing, root: Path, shown: dict[str, str]
                      ) -> FunctionListing:
    """A line listing whose reason its source is hidden names the student's paths, as a note
    does, never the staging folder."""
    hidden = listing.source_hidden
    if hidden is None:
        return listing
    reason = _relative(hidden.reason, root, shown)
    return dataclasses.replace(listing, source_hidden=dataclasses.replace(hidden, reason=reason))


def _source_missing(lines: list[LineItem]) -> bool:
    """Whether line_profiler lines were recorded but none has its source text."""
    return bool(lines) and all(line.source is None for line in lines)


def _summary(run: RunAnalysis, graded: Graded) -> RunSummary:
    """What the feedback and the class summary show of a run."""
    top = display.headline_finding(run)
    return RunSummary(
        name=run.name, verdict=run.verdict, verdict_reason=run.verdict_reason,
        sources=[(s.kind, graded.shown_paths.get(s.path, s.path)) for s in run.inputs],
        finding_ids=[f.id for f in run.findings],
        what_to_change=top.recommendation if top else "",
        timing_fingerprint=timing_fingerprint(run.metrics),
        source_missing=_source_missing(run.metrics.lines), notes=run.notes)


def _student_report(job: Job, result: StudentResult, graded: Graded) -> Report:
    """The analysis report of the student's runs (profiles named as in the submission),
    compared against the rubric's baseline."""
    runs = list(graded.runs.values())
    baseline = next((c.baseline for c in job.rubric.checks
                     if c.baseline in graded.runs), None)
    for run in runs:
        run.inputs = [dataclasses.replace(s, path=graded.shown_paths.get(s.path, s.path))
                       for s in run.inputs]
    return Report(title=f"{result.student}: {job.rubric.name}",
                  generated_by=f"profreport {__version__}", runs=runs,
                  comparison=compare_runs(runs, baseline),
                  failures=result.refused + result.failures)


def _write_student(job: Job, result: StudentResult, graded: Graded) -> None:
    """students/NAME/report.html (the analysis with the grade on top) and feedback.md."""
    folder = job.layout.student(result.student)
    report = _student_report(job, result, graded) if graded.runs else None
    write_text(folder / "report.html", render_student_page(result, job.rubric, report))
    write_text(folder / "feedback.md", render_feedback(result, job.rubric))
