"""``grade --run --slurm``: the per-submission runs as one Slurm job array, one task per
submission, each running :mod:`.execute` (the same sandbox inside); the grader waits for the
array to end (asking ``squeue`` every :data:`POLL_S`) and grades the run folders the tasks
left."""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
import time
from pathlib import Path

from profreport.errors import RunError, UsageError
from profreport.fileio import write_text
from profreport.grade.execute import RunJob
from profreport.grade.rubric import Rubric

JOBS_NAME = "jobs.json"
ARRAY_SCRIPT = "grade-array.sbatch"
#: Seconds between two looks at the array's tasks while it runs. ``sbatch --wait`` backs off
#: to 32 s between looks, so the grader sat idle up to half a minute after the array had ended.
POLL_S = 5.0
#: What squeue says of a job the controller no longer holds (it ended MinJobAge ago).
FORGOTTEN = "Invalid job id"
#: Launches of one task: each trial runs the reference and the submission, then one profiled
#: run-and-report (its plain run and each profiler, counted as four launches at most).
PROFILED_LAUNCHES = 4


def time_limit(rubric: Rubric) -> str:
    """The task's wall-clock limit (``HH:MM:SS``): every launch at its own limit."""
    assert rubric.run is not None
    launches = 2 * rubric.run.trials + PROFILED_LAUNCHES
    minutes = math.ceil(launches * rubric.run.time_limit_s / 60)
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def array_script(jobs_file: Path, count: int, rubric: Rubric, runs: Path) -> str:
    """The sbatch script: one task per submission, alone on its node (``--exclusive``) so that
    no other submission shares the CPUs its trials are timed on."""
    command = shlex.join([str(Path(sys.executable).absolute()), "-m", "profreport.grade.array_task",
                          str(jobs_file)])
    return "\n".join([
        "#!/usr/bin/env bash", "#SBATCH --job-name=profreport-grade",
        f"#SBATCH --array=0-{count - 1}", "#SBATCH --exclusive", "#SBATCH --ntasks=1",
        f"#SBATCH --time={time_limit(rubric)}",
        f"#SBATCH --output={runs}/slurm-%A_%a.out", "set -euo pipefail",
        f"cd {shlex.quote(str(Path.cwd()))}", f'exec {command} "$SLURM_ARRAY_TASK_ID"']) + "\n"


def run_on_slurm(jobs: list[RunJob], rubric: Rubric, runs: Path) -> str:
    """Submit every job as one array and wait for it to end; returns the array's job id."""
    if rubric.source is None:
        raise UsageError("--slurm needs the rubric as a file")
    runs.mkdir(parents=True, exist_ok=True)
    jobs_file = write_text(runs / JOBS_NAME, json.dumps({
        "rubric": str(rubric.source), "runs": str(runs),
        "submissions": [[job.submission.student, str(job.submission.path.absolute())]
                        for job in jobs]}, indent=1, ensure_ascii=False) + "\n")
    script = write_text(runs / ARRAY_SCRIPT, array_script(jobs_file, len(jobs), rubric, runs))
    try:
        done = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True,
                              text=True, check=False)
    except OSError as exc:
        raise RunError(f"cannot submit to Slurm: {exc}") from None
    job_id = done.stdout.strip().split(";")[0]
    if not job_id:
        raise RunError(f"sbatch refused the array: {done.stderr.strip()[:300]}")
    wait_for(job_id)
    return job_id


def wait_for(job_id: str) -> None:
    """Return once no task of the array is pending or running: squeue lists none of it (it
    lists no finished task), or the controller no longer holds the job. Any other failure of
    squeue (the controller busy or restarting) is asked again."""
    while True:
        time.sleep(POLL_S)
        try:
            shown = subprocess.run(["squeue", "--noheader", "--jobs", job_id, "--format", "%T"],
                                   capture_output=True, text=True, check=False)
        except OSError as exc:
            raise RunError(f"cannot ask Slurm how array {job_id} is doing: {exc}") from None
        if shown.returncode == 0 and not shown.stdout.strip():
            return
        if shown.returncode != 0 and FORGOTTEN in shown.stderr:
            return
