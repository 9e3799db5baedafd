"""``manifest.json``: what one run-and-report run did, written by the runner, read by the analysis.

A run folder holds ``manifest.json`` plus the artifacts it lists (paths relative to the folder).
The analysis takes knobs, environment, throughput and trial figures from here, and the profiles
from the artifacts; a folder without a manifest is analysed from its profiles alone.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from profreport.errors import InputError, UnsupportedFormatError
from profreport.fileio import write_text

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = "profreport-manifest/1"


@dataclass
class Artifact:
    """One file a profiler wrote: path relative to the run folder, and which profiler made it."""

    path: str
    profiler: str  # "kernprof" | "torch.profiler" | "nsys"
    rank: int | None = None


@dataclass
class ProfiledRun:
    """One launch of the training (under one profiler, or plain)."""

    profiler: str  # "none" | "kernprof" | "torch.profiler" | "nsys"
    command: list[str]
    exit_status: int | None
    wall_time_s: float
    error: str | None = None
    note: str | None = None


@dataclass
class Manifest:
    """Everything one variant's run records (schema ``profreport-manifest/1``)."""

    name: str
    workload: str
    knobs: dict[str, Any]
    #: python, torch, cuda, devices, cpu_count, cpus_usable (affinity), cpus (what the job may
    #: use: SLURM_CPUS_PER_TASK, else affinity), cpu_native_bf16, slurm_job_id, hostname,
    #: platform; torch_threads (torch.get_num_threads() in the training process, per process)
    #: once the plain run has finished.
    environment: dict[str, Any]
    launches: list[ProfiledRun] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    #: Samples per second of the plain (unprofiled) run.
    throughput_samples_per_s: float | None = None
    #: Duration of each timed step of the plain run (rank 0, after the warm-up step), integer ns:
    #: the samples behind ``throughput_samples_per_s``, for telling a change from noise.
    plain_step_ns: list[int] = field(default_factory=list)
    #: Benchy-style trials, samples per second: "io" (loader only), "synthetic" (model on one
    #: cached batch), "full" (the real loop).
    trials: dict[str, float] = field(default_factory=dict)
    #: Where the data came from, e.g. "generated (MNIST-shaped)" or "MNIST IDX files in DIR".
    data_source: str = ""
    notes: list[str] = field(default_factory=list)
    schema: str = MANIFEST_SCHEMA

    def to_json(self) -> str:
        """The manifest as JSON text."""
        return json.dumps(asdict(self), indent=2, sort_keys=False, default=str)


def write_manifest(folder: Path, manifest: Manifest) -> Path:
    """Write ``folder/manifest.json`` atomically."""
    return write_text(folder / MANIFEST_NAME, manifest.to_json() + "\n")


def load_manifest(path: Path) -> Manifest:
    """Read a manifest, checking its schema; one-line InputError when it is damaged."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"unreadable manifest: {exc}", path) from None
    if not isinstance(data, dict) or "schema" not in data:
        raise InputError("not a profreport manifest (no 'schema' field)", path)
    if data["schema"] != MANIFEST_SCHEMA:
        raise UnsupportedFormatError(
            f"wrong manifest schema: {data['schema']!r} instead of {MANIFEST_SCHEMA!r}", path)
    try:
        launches = [ProfiledRun(**item) for item in data.pop("launches", [])]
        artifacts = [Artifact(**item) for item in data.pop("artifacts", [])]
        return Manifest(**data, launches=launches, artifacts=artifacts)
    except TypeError as exc:
        raise InputError(f"malformed manifest: {exc}", path) from None
