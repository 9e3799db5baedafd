"""``profreport grade``: grade a class's submissions against a rubric, safely and in parallel.

Submissions are staged into the output folder (:mod:`.submissions`), each run analysed by the
ordinary pipeline (``reports.analysis.analyze``), the rubric's checks evaluated on the results
(:mod:`.checks`), and the class's gradebook and summary written atomically (:mod:`.gradebook`).
Without ``--run`` nothing from a submission is executed. With ``--run`` (a rubric with a
``[run]`` table), each submission's script is first run by the grader inside the sandbox
(:mod:`.execute`), one submission at a time here or as a Slurm job array (:mod:`.slurm`), and the
run folders and trials it made are graded. Each is graded in a worker process, and a result is
reused when neither the submission nor the rubric changed.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from profreport.errors import UsageError
from profreport.grade.adjust import (
    OVERRIDES_NAME,
    adjustments,
    anonymize,
    load_overrides,
    load_roster,
)
from profreport.grade.execute import RunJob, execute
from profreport.grade.gradebook import write_gradebook
from profreport.grade.grader import Job, Layout, failed_result, grade_submission
from profreport.grade.results import StudentResult
from profreport.grade.rubric import Rubric
from profreport.grade.slurm import run_on_slurm
from profreport.grade.submissions import Submission, find_submissions
from profreport.runner.sandbox import probe

#: Called after each student is graded: (students done, students in all, the result).
Progress = Callable[[int, int, StudentResult], None]


@dataclass
class ClassOutcome:
    """What grading the class produced."""

    results: list[StudentResult]
    #: Entries of the submissions folder that are not submissions, with the reason.
    skipped: list[str]
    written: list[Path]


def _check_out(submissions: Path, out: Path) -> None:
    """The output folder may not lie inside the submissions (it would be graded next time)."""
    if out.resolve().is_relative_to(submissions.resolve()):
        raise UsageError(f"--out {out} lies inside the submissions folder {submissions}; "
                         "choose a folder outside it")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a folder")


def _in_pool(jobs: list[Job], workers: int, progress: Progress, done: list[StudentResult],
             total: int) -> list[Job]:
    """Grade ``jobs`` in a pool; returns those whose results a dying worker took with it."""
    broken = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(grade_submission, job): job for job in jobs}
        for future in as_completed(futures):
            try:
                result = future.result()
            except BrokenProcessPool:
                broken.append(futures[future])
                continue
            done.append(result)
            progress(len(done), total, result)
    return broken


def grade_all(jobs: list[Job], workers: int, progress: Progress) -> list[StudentResult]:
    """Every job graded (in worker processes unless ``workers`` is 1), in job order."""
    done: list[StudentResult] = []
    if workers <= 1:
        for job in jobs:
            done.append(grade_submission(job))
            progress(len(done), len(jobs), done[-1])
    else:
        broken = _in_pool(jobs, workers, progress, done, len(jobs))
        for job in broken:  # one at a time, so a submission that kills its worker is found
            if _in_pool([job], 1, progress, done, len(jobs)):
                done.append(failed_result(job, "the grading process died (killed, or out of "
                                               "memory)"))
                progress(len(done), len(jobs), done[-1])
    order = {job.submission.student: i for i, job in enumerate(jobs)}
    return sorted(done, key=lambda r: order[r.student])


def run_submissions(found: list[Submission], rubric: Rubric, layout: Layout, slurm: bool,
                    said: Callable[[str], None]) -> None:
    """``--run``: run every submission in the sandbox (one after the other, so that no two
    share the CPUs they are timed on), or as one Slurm job array."""
    if rubric.run is None:
        raise UsageError("--run needs a rubric with a [run] table (the script, the reference, "
                         "the steps and the batch); profreport grade --example-rubric shows one")
    probe()
    jobs = [RunJob(submission, rubric, layout.runs(submission.student)) for submission in found]
    if slurm:
        said(f"submitting {len(jobs)} submission(s) to Slurm as one job array")
        said(f"Slurm array {run_on_slurm(jobs, rubric, layout.out / 'runs')} ended")
        return
    for index, job in enumerate(jobs, start=1):
        said(f"running {job.submission.student} ({index}/{len(jobs)})")
        execute(job)


def grade_class(submissions: Path, rubric: Rubric, out: Path, *, workers: int = 1,
                lms: str | None = None, run: bool = False, slurm: bool = False,
                roster: Path | None = None, overrides: Path | None = None,
                anonymous: bool = False,
                progress: Progress = lambda done, total, result: None,
                said: Callable[[str], None] = lambda line: None) -> ClassOutcome:
    """Grade every submission in ``submissions`` into ``out`` (running each first when
    ``run``)."""
    _check_out(submissions, out)
    found, skipped = find_submissions(submissions)
    layout = Layout(out.resolve())
    out.mkdir(parents=True, exist_ok=True)
    if anonymous:
        found = anonymize(found, out)
    if run or slurm:
        run_submissions(found, rubric, layout, slurm, said)
    changes = load_overrides(overrides or out / OVERRIDES_NAME)
    jobs = [Job(submission, rubric, layout, adjustments(submission, rubric, changes))
            for submission in found]
    results = grade_all(jobs, workers, progress)
    shutil.rmtree(layout.staging, ignore_errors=True)
    names = {s.student: s.named for s in found if s.named}
    written = write_gradebook(out, results, rubric, [] if anonymous else skipped, lms,
                              load_roster(roster), names)
    return ClassOutcome(results=results, skipped=skipped, written=written)
