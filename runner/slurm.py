"""``--emit-slurm DIR``: one sbatch script per run (variant, script setting, or scaling point) and
a ``submit_all.sh`` driver.

Each job runs ``python -m profreport run-and-report`` for its one run inside its own allocation,
so the runner's launching applies there as anywhere: the plain run and every profiler, torchrun
under ``srun`` on every node of a multi-node job (c10d rendezvous on the first node), and the
manifest. Everything is named by absolute path (interpreter, script, folders): a job does not
depend on the submit shell's PATH or directory. The folders Slurm writes ``--output`` into are
made when the scripts are written, since Slurm opens that file before the job starts. The driver
submits every job with ``sbatch --parsable`` and queues ``profreport analyze`` on their run
folders with ``--dependency=afterany`` on all of them.
"""

from __future__ import annotations

import re
import shlex
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from profreport import concepts
from profreport.fileio import write_text

#: Wall-clock limit of each job; the built-in workloads need minutes, not hours.
JOB_TIME_LIMIT = "00:30:00"


@dataclass(frozen=True)
class SlurmPlan:
    """What every job shares: where runs and reports go, the run-and-report options."""

    runs_dir: Path
    report_dir: Path
    #: run-and-report options shared by every job (steps, profilers, device...).
    run_args: list[str]
    #: GPUs each training process needs (0 on CPU).
    gpus_per_process: int = 0
    #: The report job's analyze options: run-and-report's report options (formats, title,
    #: baseline) and where the profiled code lives, as run-and-report's own report takes them.
    report_args: tuple[str, ...] = ()
    #: Why the jobs ask for no GPU when ``--device auto`` chose the CPU (no_gpu_note), written
    #: atop every script; empty otherwise.
    device_note: str = ""


@dataclass(frozen=True)
class SlurmJob:
    """One job: its run's name, its own run-and-report options, and its shape."""

    name: str
    run_args: list[str]
    nodes: int
    processes_per_node: int
    #: DataLoader workers of each process (each gets a CPU, as does the process itself).
    workers: int = 0


#: Characters of a comment line in the scripts (a terminal's width).
COMMENT_WIDTH = 78
#: How long sinfo may take to say the cluster's nodes.
SINFO_TIMEOUT_S = 10


def python_command() -> list[str]:
    """``python -m profreport`` with this interpreter's absolute path."""
    return [str(Path(sys.executable).absolute()), "-m", "profreport"]


def job_cpus(job: SlurmJob) -> int:
    """CPUs one node of the job asks for: one per process on the node (its loop,
    concepts.LOOP_CPUS) and per worker of each."""
    return (job.workers + concepts.LOOP_CPUS) * job.processes_per_node


def largest_node_cpus() -> int | None:
    """The most CPUs a node of the cluster has, as ``sinfo`` reports them (``64+`` counts as
    64); None where no sinfo answers (scripts written away from the cluster)."""
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True,
                              timeout=SINFO_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    counts = [int(n) for n in re.findall(r"\d+", done.stdout)] if done.returncode == 0 else []
    return max(counts) if counts else None


def too_large(jobs: list[SlurmJob], largest: int | None) -> list[str]:
    """A line for each job asking more CPUs per node than the cluster's largest node has:
    Slurm refuses it or holds it pending for good (reason PartitionConfig), and the report job
    after it with it."""
    if largest is None:
        return []
    return [f"{job.name}.sbatch asks for {job_cpus(job)} CPUs per node and this cluster's "
            f"largest node has {largest} (sinfo): Slurm cannot start it (it refuses it or "
            "holds it pending), nor the report job after it"
            for job in jobs if job_cpus(job) > largest]


def no_gpu_note(requested: str, device: str) -> str:
    """Why the jobs ask for no GPU, when ``--device auto`` resolved to the CPU on the machine
    writing the scripts (a CPU-only login node): the compute nodes may have GPUs it cannot see,
    and no job of the cluster would use them; '' for an explicit device or a GPU found."""
    if requested != "auto" or device != "cpu":
        return ""
    return ("--device auto found no GPU on this machine, so the jobs ask for none (no --gres) "
            "and train on the CPU (--device cpu); to train on the cluster's GPUs, write the "
            "scripts with --device cuda (one GPU per process)")


def sbatch_header(job: SlurmJob, plan: SlurmPlan) -> list[str]:
    """The ``#SBATCH`` lines of one job: one task per node with CPUs for every process on the
    node and its workers (job_cpus), and a GPU per process on a GPU run; the plan's device
    note as a comment above them (sbatch reads ``#SBATCH`` lines after comments)."""
    cpus = job_cpus(job)
    lines = ["#!/usr/bin/env bash", f"#SBATCH --job-name=profreport-{job.name}",
             f"#SBATCH --nodes={job.nodes}", "#SBATCH --ntasks-per-node=1",
             f"#SBATCH --cpus-per-task={cpus}", f"#SBATCH --time={JOB_TIME_LIMIT}",
             f"#SBATCH --output={plan.runs_dir / job.name}/slurm-%j.out"]
    if plan.device_note:
        lines[1:1] = [f"# {line}" for line in textwrap.wrap(plan.device_note, COMMENT_WIDTH)]
    if plan.gpus_per_process:
        lines.append(f"#SBATCH --gres=gpu:{plan.gpus_per_process * job.processes_per_node}")
    return lines


def job_script(job: SlurmJob, plan: SlurmPlan, workdir: Path) -> str:
    """The sbatch script of one job: run-and-report for its run, from ``workdir``, with one
    intra-op thread per process (OMP_NUM_THREADS, unless the submitting shell sets it), as
    sbatch_header's CPUs count."""
    run = [*python_command(), "run-and-report", *plan.run_args, "--runs-dir",
           str(plan.runs_dir), "--out", str(plan.report_dir / job.name), *job.run_args]
    body = ["set -euo pipefail",
            "# One intra-op thread per process, as the CPUs asked above count: PyTorch would",
            "# start one per core of the node and oversubscribe the allocation.",
            'export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"',
            "# The directory the scripts were written from: relative paths in the script's",
            "# own arguments mean the same here.",
            f"cd {shlex.quote(str(workdir))}", shlex.join(run)]
    return "\n".join([*sbatch_header(job, plan), *body]) + "\n"


def driver_script(names: list[str], plan: SlurmPlan) -> str:
    """``submit_all.sh``: submit every job, then the report job after all of them."""
    here = 'HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)'
    lines = ["#!/usr/bin/env bash", "# Submits every run, then analyses the run folders.",
             "set -euo pipefail", here, "ids=()"]
    lines += [f'ids+=("$(sbatch --parsable "$HERE/{name}.sbatch")")' for name in names]
    folders = [str(plan.runs_dir / name) for name in names]
    analyze = shlex.join([*python_command(), "analyze", *folders, "--out",
                          str(plan.report_dir), *plan.report_args])
    output = shlex.quote(str(plan.report_dir / "slurm-report-%j.out"))
    lines += ['deps=$(IFS=:; echo "${ids[*]}")',
              f'report=$(sbatch --parsable --job-name=profreport-report '
              f'--dependency=afterany:"$deps" --ntasks=1 --time={JOB_TIME_LIMIT} '
              f'--output={output} --wrap={shlex.quote(analyze)})',
              'echo "submitted ${#ids[@]} jobs (${ids[*]}) and the report job $report"']
    return "\n".join(lines) + "\n"


def emit_slurm(jobs: list[SlurmJob], plan: SlurmPlan, out: Path) -> list[Path]:
    """Write one ``<name>.sbatch`` per job and ``submit_all.sh`` into ``out``, and make every
    folder the jobs write their Slurm output into."""
    for folder in [plan.report_dir, *(plan.runs_dir / job.name for job in jobs)]:
        folder.mkdir(parents=True, exist_ok=True)
    workdir = Path.cwd()
    written = [write_text(out / f"{job.name}.sbatch", job_script(job, plan, workdir))
               for job in jobs]
    written.append(write_text(out / "submit_all.sh",
                              driver_script([job.name for job in jobs], plan)))
    for path in written:
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return written
