"""Launching one training process under one profiler, and recording what it did."""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profreport.manifest import Artifact, ProfiledRun
from profreport.runner.variants import cpu_has_native_bf16, cpus_available

PROFILERS = ("kernprof", "torch", "nsys")
#: The profiler names the manifest uses for each ``--profilers`` entry.
MANIFEST_PROFILER = {"none": "none", "kernprof": "kernprof", "torch": "torch.profiler",
                     "nsys": "nsys"}
#: Lines of a failed launch's log kept as its error message.
ERROR_TAIL_LINES = 3
#: A Python exception line, possibly prefixed by torchrun's ``[rank0]:``.
EXCEPTION_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?[\w.]*(?:Error|Exception):\s")
NSYS_OUTPUT = "nsys"
LPROF_NAME = "train.lprof"
TRACE_DIR = "trace"
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


def nsys_trace_option(on_gpu: bool) -> str:
    """What nsys traces: CUDA too when a GPU is in use, else OS runtime and NVTX."""
    return "--trace=cuda,nvtx,osrt" if on_gpu else "--trace=osrt,nvtx"


def torchrun_prefix(nproc: int, in_slurm: bool) -> list[str]:
    """Start ``nproc`` local processes with torchrun (under srun inside a Slurm allocation)."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={nproc}"]
    return ["srun", "--ntasks=1", *torchrun] if in_slurm else torchrun


def wrap_command(profiler: str, folder: Path, entry: list[str], on_gpu: bool,
                 nproc: int = 1) -> list[str]:
    """The full command running ``entry`` (``-m module args`` or ``script args``) under
    ``profiler``, with torchrun when ``nproc > 1``."""
    in_slurm = "SLURM_JOB_ID" in os.environ
    if profiler == "kernprof":
        kernprof = [sys.executable, "-m", "kernprof", "-l", "-q"]
        if nproc <= 1:
            return [*kernprof, "-o", str(folder / LPROF_NAME), *entry]
        per_rank = shlex.join([*kernprof, "-o", str(folder / "train.rank")]) + '"$RANK".lprof '
        script = f"exec {per_rank}{shlex.join(entry)}"
        return [*torchrun_prefix(nproc, in_slurm), "--no-python", "bash", "-c", script]
    python = [sys.executable] if nproc <= 1 else [*torchrun_prefix(nproc, in_slurm)]
    command = [*python, *entry]
    if profiler == "nsys":
        return ["nsys", "profile", nsys_trace_option(on_gpu), *NSYS_QUIET_OPTIONS,
                "--force-overwrite=true", "-o", str(folder / NSYS_OUTPUT), *command]
    return command


def run_launch(launch: Launch) -> ProfiledRun:
    """Run the command, its output into the log; exit status, wall time and error recorded."""
    started = time.perf_counter()
    launch.log.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(launch.log, "w", encoding="utf-8") as log:
            status = subprocess.run(launch.command, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, check=False).returncode
    except OSError as exc:
        return ProfiledRun(MANIFEST_PROFILER[launch.profiler], launch.command, None,
                           time.perf_counter() - started, error=f"cannot start: {exc}")
    wall = time.perf_counter() - started
    error = None if status == 0 else log_tail(launch.log)
    return ProfiledRun(MANIFEST_PROFILER[launch.profiler], launch.command, status, wall,
                       error=error)


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


def log_tail(path: Path) -> str:
    """The last exception line of a log (``ValueError: ...``), else its last few lines."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines()]
    except OSError:
        return "no log"
    errors = [line for line in lines if EXCEPTION_LINE.match(line)]
    if errors:
        return errors[-1]
    tail = [line for line in lines if line][-ERROR_TAIL_LINES:]
    return " | ".join(tail) or "exited without output"


def find_artifacts(folder: Path, profiler: str, per_rank: bool) -> list[Artifact]:
    """The files ``profiler`` left in ``folder``, as manifest entries (ranked when
    ``per_rank``)."""
    if profiler == "kernprof":
        files = sorted(folder.glob("*.lprof"))
    elif profiler == "torch":
        files = sorted((folder / TRACE_DIR).glob("*.pt.trace.json.gz"))
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
