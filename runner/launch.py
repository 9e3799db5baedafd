"""Launching one training process under one profiler, and recording what it did."""

from __future__ import annotations

import os
import platform
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profreport import concepts
from profreport.errors import UsageError
from profreport.manifest import Artifact, ProfiledRun
from profreport.runner.leftovers import (
    MarkedCpu,
    end_leftovers,
    marked_environment,
    new_mark,
    rusage_cpu_s,
)
from profreport.runner.variants import cpu_has_native_bf16, cpus_available

PROFILERS = ("kernprof", "torch", "nsys")
#: torch.profiler schedule: skip one step, warm up one, then record the active ones.
PROFILER_WAIT, PROFILER_WARMUP = 1, 1
#: The profiler names the manifest uses for each ``--profilers`` entry.
MANIFEST_PROFILER = {"none": "none", "kernprof": "kernprof", "torch": "torch.profiler",
                     "nsys": "nsys"}
#: Lines of a failed launch's stderr kept in the manifest.
STDERR_TAIL_LINES = 12
#: torchrun's summary of a rank that died of a signal.
TORCHRUN_SIGNAL = re.compile(r"Signal (\d+) \(SIG\w+\) received by PID")
#: torchrun's error summary: the heading of its root-cause section, and the rank line there.
TORCHRUN_ROOT_CAUSE = "Root Cause (first observed failure):"
TORCHRUN_RANK = re.compile(r"^rank\s*:\s*(\d+)")
#: torchrun's own exception, raised after a rank failed (its traceback precedes the summary).
TORCHRUN_FAILED = "ChildFailedError"
#: A Python exception line, possibly prefixed by torchrun's ``[rank0]:``.
EXCEPTION_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?[\w.]*(?:Error|Exception):\s")
#: Port of torchrun's c10d rendezvous on the first node of a multi-node job.
RENDEZVOUS_PORT = 29500
NSYS_OUTPUT = "nsys"
LPROF_NAME = "train.lprof"
TRACE_DIR = "trace"
#: The names torch.profiler's trace handlers give their files.
TRACE_PATTERNS = ("*.pt.trace.json.gz", "*.pt.trace.json")
#: CPU sampling and context-switch tracing are off: the analysis reads neither, and in containers
#: without perf events nsys 2022.4's agent spins on them and never finishes.
NSYS_QUIET_OPTIONS = ("--sample=none", "--cpuctxsw=none")
#: Where nsys keeps QdstrmImporter, relative to the folder of its ``nsys`` binary's parent, and
#: Debian's own place (its nsys looks next to the resolved binary, where the importer is not).
IMPORTER_DIRS = ("host-linux-x64",)
DEBIAN_IMPORTER = Path("/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter")


@dataclass(frozen=True)
class Launch:
    """One process to start: the command and the log file its output goes to."""

    profiler: str
    command: list[str]
    log: Path


def record_rank(rank: int, world_size: int) -> None:
    """Say this process's rank in an Nsight Systems capture, which records no environment: one
    NVTX mark ``rank R of W`` in profreport's domain (concepts.RANK_DOMAIN; a mark, so no range
    is added to the capture's figures), made by each rank of the runner's training and of a
    --script run under nsys; nothing for a job of one process, which has no rank to tell
    apart (the parser reads a process that marks a rank as a distributed job's). Without a
    tool attached NVTX does nothing."""
    if world_size <= 1:
        return
    import nvtx  # the training process's import: the runner's own command never loads it

    nvtx.mark(concepts.rank_mark_name(rank, world_size), domain=concepts.RANK_DOMAIN)


def nsys_options(on_gpu: bool) -> list[str]:
    """What nsys traces: CUDA and its memory use too when a GPU is in use, else OS runtime and
    NVTX; never CPU samples or context switches."""
    if on_gpu:
        return ["--trace=cuda,nvtx,osrt", "--cuda-memory-usage=true", *NSYS_QUIET_OPTIONS]
    return ["--trace=osrt,nvtx", *NSYS_QUIET_OPTIONS]


def srun_prefix(nodes: int) -> list[str]:
    """srun starting one launcher per node of the allocation, with the job's CPUs (srun does not
    inherit --cpus-per-task from sbatch since Slurm 22.05)."""
    cpus = os.environ.get("SLURM_CPUS_PER_TASK", "")
    spread = ["--nodes", str(nodes), "--ntasks-per-node=1"] if nodes > 1 else ["--ntasks=1"]
    return ["srun", *spread, *([f"--cpus-per-task={cpus}"] if cpus.isdigit() else [])]


def rendezvous_host() -> str:
    """The first node of the Slurm allocation, where torchrun's c10d rendezvous runs."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    done = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                          text=True, check=False)
    hosts = done.stdout.split()
    return hosts[0] if done.returncode == 0 and hosts else socket.gethostname()


def torchrun_command(nproc: int, nodes: int) -> list[str]:
    """torchrun for ``nproc`` processes per node: standalone on one node, a c10d rendezvous on
    the allocation's first node for several."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
    if nodes <= 1:
        return [*torchrun, "--standalone"]
    job = os.environ.get("SLURM_JOB_ID", "profreport")
    return [*torchrun, f"--nnodes={nodes}", "--rdzv_backend=c10d", f"--rdzv_id={job}",
            f"--rdzv_endpoint={rendezvous_host()}:{RENDEZVOUS_PORT}"]


def wrap_command(profiler: str, folder: Path, entry: list[str], on_gpu: bool,
                 nproc: int = 1, nodes: int = 1) -> list[str]:
    """The full command running ``entry`` (``-m module args`` or ``script args``) under
    ``profiler``: torchrun when there are several processes, under srun inside a Slurm
    allocation (the profiler then runs inside srun, on every node)."""
    distributed = nproc * nodes > 1
    srun = srun_prefix(nodes) if distributed and "SLURM_JOB_ID" in os.environ else []
    if nodes > 1 and not srun:
        raise UsageError(f"--nodes {nodes} needs a Slurm allocation (run inside sbatch/salloc, "
                         "or write the jobs with --emit-slurm)")
    if profiler == "kernprof":
        kernprof = [sys.executable, "-m", "kernprof", "-l", "-q"]
        if not distributed:
            return [*kernprof, "-o", str(folder / LPROF_NAME), *entry]
        per_rank = shlex.join([*kernprof, "-o", str(folder / "train.rank")]) + '"$RANK".lprof '
        script = f"exec {per_rank}{shlex.join(entry)}"
        return [*srun, *torchrun_command(nproc, nodes), "--no-python", "bash", "-c", script]
    command = [*torchrun_command(nproc, nodes), *entry] if distributed else [sys.executable,
                                                                              *entry]
    if profiler == "nsys":
        output = folder / (f"{NSYS_OUTPUT}.node%q{{SLURM_NODEID}}" if nodes > 1 else NSYS_OUTPUT)
        command = ["nsys", "profile", *nsys_options(on_gpu), "--force-overwrite=true",
                   "-o", str(output), *command]
    return [*srun, *command]


#: /proc/stat: a line per CPU (``cpu3 ...``, after the machine's sum ``cpu ...``) of the ticks
#: it spent in each state since boot.
PROC_STAT = Path("/proc/stat")
# The busy states among them: user (guest time inside), nice, system, irq, softirq, steal.
_BUSY_STATES = (0, 1, 2, 5, 6, 7)
# A per-CPU line of /proc/stat and its CPU's number.
_CPU_LINE = re.compile(r"cpu(\d+)\s")


def busy_ticks(stat: str, cpus: Collection[int]) -> int | None:
    """The ticks the CPUs numbered ``cpus`` spent busy, from the text of /proc/stat; None when
    one of them has no line there (a container's virtualised /proc/stat numbers its own CPUs
    from 0 while the affinity names the host's: their time is unknown, not idle)."""
    total, seen = 0, set()
    for line in stat.splitlines():
        found = _CPU_LINE.match(line)
        if found and int(found.group(1)) in cpus:
            ticks = line.split()[1:]
            total += sum(int(ticks[i]) for i in _BUSY_STATES if i < len(ticks))
            seen.add(int(found.group(1)))
    return total if seen == set(cpus) else None


def cpus_busy_s(cpus: Collection[int]) -> float | None:
    """CPU seconds the CPUs numbered ``cpus`` have been busy since boot, or None without a
    /proc/stat line for each of them."""
    try:
        stat = PROC_STAT.read_text(encoding="ascii")
    except OSError:
        return None
    ticks = busy_ticks(stat, cpus)
    return None if ticks is None else ticks / os.sysconf("SC_CLK_TCK")


#: Launchers whose tasks run under another machine's or daemon's processes (slurmstepd runs
#: srun's, on every node of the allocation): their CPU time is not measured.
UNFOLLOWED_LAUNCHERS = frozenset({"srun"})


def _measured(launch: Launch) -> bool:
    """Whether the launch's processes run where the runner can measure their CPU time: below
    it, or found by their mark (see leftovers.MarkedCpu)."""
    return bool(launch.command) and Path(launch.command[0]).name not in UNFOLLOWED_LAUNCHERS


def _launcher(profiler: str) -> str:
    """What the line about a launch's leftovers names as having left them."""
    return "the plain run" if profiler == "none" else profiler


def run_launch(launch: Launch) -> ProfiledRun:
    """Run the command, stdout into the log and stderr beside it; exit status, signal, wall time,
    the CPU time of its processes and of the others on the CPUs it may use meanwhile (its
    affinity set, which a Slurm allocation or taskset bounds) and, when it failed, the error
    line and the last lines of stderr recorded. Every launch is marked: its processes (those
    nsys runs outside the runner's tree, and those whose parent ended first, which the runner
    adopts as their subreaper) are found by the mark, their CPU time counted as it returns
    and what it left running ended."""
    cpus = os.sched_getaffinity(0)
    busy_before = cpus_busy_s(cpus)
    runner_before = rusage_cpu_s(resource.RUSAGE_SELF)
    started = time.perf_counter()
    launch.log.parent.mkdir(parents=True, exist_ok=True)
    errors = stderr_log(launch.log)
    mark = new_mark()
    marked = MarkedCpu(mark)
    leftovers = marked_cpu_s = busy_after = runner_s = None
    try:
        with open(launch.log, "w", encoding="utf-8") as out, \
                open(errors, "w", encoding="utf-8") as err, marked:
            status = subprocess.run(launch.command, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, check=False,
                                    env=marked_environment(mark)).returncode
        wall_s = time.perf_counter() - started
        # Measured as the launch returns, before waiting for what it left running.
        busy_after = cpus_busy_s(cpus)
        runner_s = rusage_cpu_s(resource.RUSAGE_SELF) - runner_before
        marked_cpu_s = marked.cpu_s()
    except OSError as exc:
        return ProfiledRun(MANIFEST_PROFILER[launch.profiler], launch.command, None,
                           time.perf_counter() - started, error=f"cannot start: {exc}")
    finally:
        leftovers = end_leftovers(mark, _launcher(launch.profiler))
        marked.reap_adopted()  # what it left, adopted by the runner, once ended
    record = ProfiledRun(MANIFEST_PROFILER[launch.profiler], launch.command, status, wall_s,
                         leftovers=leftovers)
    # A launch that failed may leave workers no one reaps: their CPU time would read as the
    # rest of the machine's.
    if _measured(launch) and status == 0:
        record.cpu_s = round(marked_cpu_s, 3)
        if busy_before is not None and busy_after is not None:
            record.other_cpu_s = round(max(busy_after - busy_before - record.cpu_s - runner_s,
                                           0.0), 3)
            record.cpus = len(cpus)
    if status != 0:
        lines = log_lines(errors) or log_lines(launch.log)
        record.signal = signal_of(status, lines)
        record.stderr_tail = stderr_tail(lines)
        record.error = failure_line(status, record.signal, lines)
    return record


def stderr_log(log: Path) -> Path:
    """Where a launch's stderr goes: ``none.log`` -> ``none.stderr.log``."""
    return log.with_suffix(".stderr.log")


def log_lines(path: Path) -> list[str]:
    """The stripped lines of a log file (none when it cannot be read)."""
    try:
        return [line.strip() for line in path.read_text(errors="replace").splitlines()]
    except OSError:
        return []


def _root_cause(lines: list[str]) -> list[str]:
    """The lines of torchrun's root-cause section (the first rank that failed); empty when the
    output has none."""
    if TORCHRUN_ROOT_CAUSE not in lines:
        return []
    section = lines[lines.index(TORCHRUN_ROOT_CAUSE) + 1:]
    return [line for line in section if line and not set(line) <= {"=", "-"}]


def _before_torchrun_summary(lines: list[str]) -> list[str]:
    """The ranks' own output: what precedes torchrun's traceback of its ChildFailedError."""
    failed = next((i for i, line in enumerate(lines) if TORCHRUN_FAILED in line), None)
    if failed is None:
        return lines
    starts = [i for i, line in enumerate(lines[:failed]) if line.startswith("Traceback")]
    return lines[:starts[-1]] if starts else lines[:failed]


def stderr_tail(lines: list[str]) -> list[str]:
    """The last lines of a failed launch's output worth keeping: the ranks' own last lines (a
    glibc abort message, an exception) and torchrun's root-cause rank, exit code and signal,
    instead of the tail of torchrun's long summary."""
    cause = [line for line in _root_cause(lines) if line.split(":")[0].strip() in
             ("rank", "exitcode", "traceback")]
    own = [line for line in _before_torchrun_summary(lines) if line]
    return own[-(STDERR_TAIL_LINES - len(cause)):] + cause


def signal_of(status: int, lines: list[str]) -> str | None:
    """The signal that ended the process (a negative status), or that torchrun reports its
    root-cause rank (the first that failed) died of; None when it exited."""
    number = -status if status < 0 else None
    if number is None:
        reported = [TORCHRUN_SIGNAL.search(line) for line in _root_cause(lines) or lines]
        number = next((int(m.group(1)) for m in reported if m), None)
    if number is None:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def failure_line(status: int, signal_name: str | None, lines: list[str]) -> str:
    """One line: how the launch ended, and its last exception line (or last stderr line)."""
    how = f"exit status {status}"
    ranks = [TORCHRUN_RANK.match(line) for line in _root_cause(lines)]
    rank = next((f"rank {m.group(1)}" for m in ranks if m), "a rank")
    if signal_name:
        how = f"killed by {signal_name}" if status < 0 else f"{how}, {rank} killed by {signal_name}"
    exceptions = [line for line in lines if EXCEPTION_LINE.match(line)]
    last = exceptions[-1] if exceptions else next((line for line in reversed(lines) if line), "")
    if signal_name and not exceptions:
        return how
    return f"{how}: {last}" if last else f"{how}, without output"


def qdstrm_importer() -> Path | None:
    """Nsight's QdstrmImporter beside the nsys on PATH, or Debian's, when one exists."""
    nsys = shutil.which("nsys")
    candidates = [DEBIAN_IMPORTER]
    if nsys:
        for binary in (Path(nsys).resolve(), Path(os.path.realpath(Path(nsys).parent))):
            candidates += [binary.parent.parent / name / "QdstrmImporter" for name in IMPORTER_DIRS]
    return next((path for path in candidates if path.is_file()), None)


def import_leftover_qdstrm(folder: Path) -> str | None:
    """Turn an ``nsys.qdstrm`` that nsys could not import into ``nsys.nsys-rep``; says what
    happened, or None when there was nothing to do."""
    raw = folder / f"{NSYS_OUTPUT}.qdstrm"
    if not raw.is_file() or (folder / f"{NSYS_OUTPUT}.nsys-rep").is_file():
        return None
    importer = qdstrm_importer()
    if importer is None:
        return "nsys left a .qdstrm and no QdstrmImporter was found to convert it"
    done = subprocess.run([str(importer), "-i", str(raw)], capture_output=True, check=False)
    if done.returncode != 0 or not (folder / f"{NSYS_OUTPUT}.nsys-rep").is_file():
        return f"QdstrmImporter failed ({done.returncode}) on {raw.name}"
    raw.unlink()
    return f"nsys could not find its importer; converted {raw.name} with {importer}"


def find_artifacts(folder: Path, profiler: str, per_rank: bool) -> list[Artifact]:
    """The files ``profiler`` left in ``folder``, as manifest entries (ranked when
    ``per_rank``)."""
    if profiler == "kernprof":
        files = sorted(folder.glob("*.lprof"))
    elif profiler == "torch":
        files = sorted(path for pattern in TRACE_PATTERNS
                       for path in (folder / TRACE_DIR).glob(pattern))
    else:
        files = sorted(folder.glob(f"{NSYS_OUTPUT}*.nsys-rep"))
    return [Artifact(str(path.relative_to(folder)), MANIFEST_PROFILER[profiler],
                     rank_of(path.name) if per_rank else None) for path in files]


def rank_of(name: str) -> int | None:
    """The rank a per-rank file name carries (``rank1.…``, ``train.rank1.lprof``), else None."""
    for part in name.split("."):
        if part.startswith("rank") and part[4:].isdigit():
            return int(part[4:])
    return None


def tool_missing(profiler: str) -> str | None:
    """Why ``profiler`` cannot run here, or None when it can."""
    if profiler == "nsys" and shutil.which("nsys") is None:
        return "nsys is not installed: Nsight Systems profile skipped"
    if profiler == "kernprof" and _module_missing("kernprof"):
        return "line_profiler (kernprof) is not installed: line profile skipped"
    return None


def _module_missing(name: str) -> bool:
    """Whether ``name`` cannot be imported by this Python."""
    import importlib.util

    return importlib.util.find_spec(name) is None


def environment() -> dict[str, Any]:
    """Python, torch, CUDA, devices, CPUs, Slurm job and host of this machine (``cpus``: the
    CPUs this job may use; the runner adds ``torch_threads`` from the training process)."""
    import torch

    cuda = torch.cuda.is_available()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if cuda else [platform.processor() or platform.machine()],
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpus": cpus_available(),
        "cpu_native_bf16": cpu_has_native_bf16(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
    }
