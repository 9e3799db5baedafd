"""``manifest.json``: what one run-and-report run did, written by the runner, read by the analysis.

A run folder holds ``manifest.json`` plus the artifacts it lists (paths relative to the folder).
The analysis takes knobs, environment, throughput and trial figures from here, and the profiles
from the artifacts; a folder without a manifest is analysed from its profiles alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from profreport.errors import InputError, UnsupportedFormatError
from profreport.fileio import write_text
from profreport.inputs import MAX_JSON_DEPTH, MAX_NAME_CHARS, Limit, open_input
from profreport.text import error_text

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
    #: One line: how it failed (exit status or signal) and its last exception line.
    error: str | None = None
    note: str | None = None
    #: The signal that killed it (``SIGSEGV``), directly or, under torchrun, a rank.
    signal: str | None = None
    #: The last lines of its stderr when it failed.
    stderr_tail: list[str] = field(default_factory=list)
    #: CPU seconds its own processes used (user + system of its whole process tree); None
    #: where not measured (launches on other nodes).
    cpu_s: float | None = None
    #: CPU seconds the rest of the CPUs it may use (``cpus``) were busy while it ran: other
    #: processes, and time the hypervisor took (/proc/stat's busy time less the launch's and the
    #: runner's own).
    other_cpu_s: float | None = None
    #: How many CPUs ``other_cpu_s`` was measured over: the runner's affinity set. None in
    #: manifests written before it was recorded, whose figure is the whole machine's.
    cpus: int | None = None
    #: One line: the processes the launch left running once it ended (nsys's agent, in a
    #: session of its own) and how they were ended (runner.leftovers); None when it left none.
    leftovers: str | None = None


@dataclass
class Manifest:
    """Everything one variant's run records (schema ``profreport-manifest/1``)."""

    name: str
    #: The built-in workload's name, or ``script PATH`` for the user's own script.
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
    #: Iterations per second of the plain run (a script's: from its optimizer steps).
    throughput_steps_per_s: float | None = None
    #: One line saying what the plain run's throughput was measured on.
    throughput_basis: str = ""
    #: Processes of the job (torchrun processes per node x nodes).
    world_size: int = 1
    #: One point of ``--scaling``: mode ("weak" | "strong"), processes, nodes, local_batch_size,
    #: global_batch_size, backend, group (the variant the points belong to); None otherwise.
    scaling: dict[str, Any] | None = None
    #: The user's script (absolute path; line profiles name this file) and its arguments.
    script: str | None = None
    script_args: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    schema: str = MANIFEST_SCHEMA

    def to_json(self) -> str:
        """The manifest as JSON text."""
        return json.dumps(asdict(self), indent=2, sort_keys=False, default=str)


def write_manifest(folder: Path, manifest: Manifest) -> Path:
    """Write ``folder/manifest.json`` atomically."""
    return write_text(folder / MANIFEST_NAME, manifest.to_json() + "\n")


def load_manifest(path: Path) -> Manifest:
    """Read a manifest, keeping what is valid (see :func:`read_manifest`)."""
    return read_manifest(path)[0]


def read_manifest(path: Path) -> tuple[Manifest, list[str]]:
    """Read and validate a manifest: the manifest built from its valid fields, and one line per
    field or entry that was wrong and left out. InputError when it is not a manifest at all."""
    data = _manifest_json(path)
    if not isinstance(data, dict) or "schema" not in data:
        raise InputError("not a profreport manifest (no 'schema' field)", path)
    if data["schema"] != MANIFEST_SCHEMA:
        raise UnsupportedFormatError(
            f"wrong manifest schema: {error_text(repr(data['schema']))} instead of "
            f"{MANIFEST_SCHEMA!r}", path)
    problems: list[str] = []
    fields = {name: _field(data, name, check, default, problems)
              for name, (check, default) in _FIELDS.items()}
    if not fields["name"]:
        fields["name"] = path.parent.name or "run"
    unknown = sorted(str(key) for key in data if key not in _FIELDS and key != "schema")
    if unknown:
        problems.append(f"unknown fields ignored: {error_text(', '.join(unknown))}")
    if len(problems) > MAX_PROBLEMS_LISTED:
        problems[MAX_PROBLEMS_LISTED:] = [f"and {len(problems) - MAX_PROBLEMS_LISTED:,} more"]
    return Manifest(**fields), problems


def _manifest_json(path: Path) -> object:
    """The parsed JSON of a manifest file (regular file, bounded size and nesting)."""
    with open_input(path) as handle:
        raw = handle.read(MAX_MANIFEST_BYTES.value + 1)
    MAX_MANIFEST_BYTES.check(len(raw), path)
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError as exc:  # also UnicodeDecodeError, JSONDecodeError, over-long integers
        raise InputError(f"unreadable manifest: {exc}", path) from None
    except RecursionError:
        raise InputError(f"unreadable manifest: {MAX_JSON_DEPTH.exceeded(10**6)}", path) from None


# Validation: each check returns the cleaned value, or raises _Invalid saying what is wrong.


class _Invalid(ValueError):
    """A manifest value of the wrong type or out of range (the message says which)."""


def _kind(value: object) -> str:
    """What a JSON value is, for an error line ("a str", "a list")."""
    if value is None:
        return "null"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _text(value: object) -> str:
    """A string of bounded length."""
    if not isinstance(value, str):
        raise _Invalid(f"{_kind(value)}, not text")
    MAX_NAME_CHARS.check(len(value))
    return value


def _optional_text(value: object) -> str | None:
    """A string or null."""
    return None if value is None else _text(value)


def _integer(value: object) -> int:
    """An integer (not a bool) that fits a signed 64-bit value."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"{_kind(value)}, not an integer")
    if not -(2**63) <= value < 2**63:
        raise _Invalid("an integer outside the 64-bit range")
    return value


def _optional_integer(value: object) -> int | None:
    """An integer or null."""
    return None if value is None else _integer(value)


def _count(value: object) -> int:
    """A non-negative integer (a rank, nanoseconds)."""
    if _integer(value) < 0:
        raise _Invalid(f"{value} is negative")
    return int(value)  # type: ignore[call-overload]


def _optional_count(value: object) -> int | None:
    """A non-negative integer or null."""
    return None if value is None else _count(value)


def _finite(value: object) -> float:
    """A finite number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid(f"{_kind(value)}, not a number")
    if not math.isfinite(value) or not -MAX_MANIFEST_NUMBER < value < MAX_MANIFEST_NUMBER:
        raise _Invalid(f"{error_text(value)} is not a possible figure")
    return float(value)


def _number(value: object) -> float:
    """A finite, non-negative number."""
    if _finite(value) < 0:
        raise _Invalid(f"{error_text(value)} is negative")
    return float(value)  # type: ignore[arg-type]


def _optional_number(value: object) -> float | None:
    """A finite non-negative number or null."""
    return None if value is None else _number(value)


def _texts(value: object) -> list[str]:
    """A list of strings (a command line)."""
    if not isinstance(value, list):
        raise _Invalid(f"{_kind(value)}, not a list")
    return [_text(item) for item in value]


def _scalar(value: object) -> object:
    """A JSON scalar: text, bool, null, or a finite number."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, int):
        return _integer(value)
    if isinstance(value, float):
        return _finite(value)
    raise _Invalid(f"{_kind(value)}, not a scalar")


def _environment_value(value: object) -> object:
    """A scalar, or a flat list of scalars (``devices``)."""
    return [_scalar(item) for item in value] if isinstance(value, list) else _scalar(value)


def _knob(name: str, value: object) -> object:
    """A knob's value, of its declared type when the knob is one the runner sets."""
    kind = KNOB_TYPES.get(name)
    if kind is None:
        return _scalar(value)
    if value is None and name in DEFAULTED_KNOBS:
        return None
    if kind is bool and not isinstance(value, bool):
        raise _Invalid(f"{_kind(value)}, not true/false")
    if kind is int:
        return _integer(value)
    return _finite(value) if kind is float else value


def _checked(what: str, check: Callable[[object], object], value: object,
             problems: list[str]) -> tuple[bool, object]:
    """(True, cleaned value), or (False, None) with a line in ``problems``."""
    try:
        return True, check(value)
    except (_Invalid, InputError) as exc:
        problems.append(f"{what} left out: {error_text(exc.args[0])}")
        return False, None


def _list_of(check: Callable[[object], object]) -> Callable[[str, object, list[str]], list]:
    """A validator of a list whose bad items are left out one by one."""
    def validate(what: str, value: object, problems: list[str]) -> list:
        if not isinstance(value, list):
            raise _Invalid(f"{_kind(value)}, not a list")
        kept = [_checked(f"{what}[{i}]", check, item, problems) for i, item in enumerate(value)]
        return [item for ok, item in kept if ok]
    return validate


def _map_of(check: Callable[[str, object], object]) -> Callable[[str, object, list[str]], dict]:
    """A validator of an object whose bad entries are left out one by one."""
    def validate(what: str, value: object, problems: list[str]) -> dict:
        if not isinstance(value, dict):
            raise _Invalid(f"{_kind(value)}, not an object")
        kept = {key: _checked(f"{what}.{error_text(key)}", lambda v, k=key: check(k, v), item,
                              problems) for key, item in value.items()}
        return {key: item for key, (ok, item) in kept.items() if ok}
    return validate


def _record(cls: type, spec: dict[str, Callable[[object], object]]) -> Callable[[object], object]:
    """A validator of one JSON object into ``cls``, every field checked by ``spec``."""
    def validate(value: object) -> object:
        if not isinstance(value, dict):
            raise _Invalid(f"{_kind(value)}, not an object")
        missing = [name for name in spec if name not in value and name in _REQUIRED[cls]]
        if missing:
            raise _Invalid(f"no {', '.join(missing)}")
        fields = {}
        for name, check in spec.items():
            if name in value:
                try:
                    fields[name] = check(value[name])
                except _Invalid as exc:
                    raise _Invalid(f"{name}: {exc.args[0]}") from None
        return cls(**fields)
    return validate


def _optional_map_of_scalars(what: str, value: object, problems: list[str]) -> dict | None:
    """An object of scalars (a scaling point), or null."""
    if value is None:
        return None
    return _map_of(lambda key, item: _scalar(item))(what, value, problems)


def _plain(check: Callable[[object], object]) -> Callable[[str, object, list[str]], object]:
    """A whole-field validator from a value check."""
    return lambda what, value, problems: check(value)


def _field(data: dict, name: str, check: Callable[[str, object, list[str]], object],
           default: Callable[[], object], problems: list[str]) -> object:
    """One top-level field, validated; its default (with a line in ``problems``) when wrong."""
    if name not in data:
        return default()
    try:
        return check(name, data[name], problems)
    except (_Invalid, InputError) as exc:
        problems.append(f"{name} left out: {error_text(exc.args[0])}")
        return default()


#: The knobs the runner sets (runner/variants.py Knobs) and their types; others must be scalars.
KNOB_TYPES: dict[str, type] = {
    "num_workers": int, "pin_memory": bool, "non_blocking": bool, "persistent_workers": bool,
    "amp": bool, "channels_last": bool, "compile": bool, "ddp": bool, "nproc": int,
    "bucket_cap_mb": float, "broadcast_buffers": bool, "dataparallel": bool, "batch_size": int,
    "lr": float,
}
#: Knobs the runner records as None where it left them to PyTorch's default (passed none).
DEFAULTED_KNOBS = frozenset({"bucket_cap_mb"})
#: Largest manifest read: the runner's are a few KB; this leaves room for thousands of steps.
MAX_MANIFEST_BYTES = Limit("bytes of manifest", 16 << 20,
                           "a manifest lists a run's settings and files, never megabytes")
#: Problems of one manifest listed one by one; the rest are counted.
MAX_PROBLEMS_LISTED = 10
#: Largest figure (throughput, seconds, trial rate) taken as possible: 10^15 samples/s or s.
MAX_MANIFEST_NUMBER = 1e15

_REQUIRED: dict[type, tuple[str, ...]] = {
    Artifact: ("path", "profiler"),
    ProfiledRun: ("profiler", "command", "exit_status", "wall_time_s"),
}
_FIELDS: dict[str, tuple[Callable[[str, object, list[str]], object], Callable[[], object]]] = {
    "name": (_plain(_text), str),
    "workload": (_plain(_text), str),
    "knobs": (_map_of(_knob), dict),
    "environment": (_map_of(lambda key, value: _environment_value(value)), dict),
    "launches": (_list_of(_record(ProfiledRun, {
        "profiler": _text, "command": _texts,
        "exit_status": _optional_integer, "wall_time_s": _number,
        "error": _optional_text, "note": _optional_text, "signal": _optional_text,
        "stderr_tail": _texts, "cpu_s": _optional_number, "other_cpu_s": _optional_number,
        "cpus": _optional_count, "leftovers": _optional_text})),
        list),
    "artifacts": (_list_of(_record(Artifact, {
        "path": _text, "profiler": _text, "rank": _optional_count})), list),
    "throughput_samples_per_s": (_plain(_optional_number), lambda: None),
    "plain_step_ns": (_list_of(_count), list),
    "trials": (_map_of(lambda key, value: _number(value)), dict),
    "data_source": (_plain(_text), str),
    "throughput_steps_per_s": (_plain(_optional_number), lambda: None),
    "throughput_basis": (_plain(_text), str),
    "world_size": (_plain(_count), lambda: 1),
    "scaling": (_optional_map_of_scalars, lambda: None),
    "script": (_plain(_optional_text), lambda: None),
    "script_args": (_plain(_texts), list),
    "notes": (_list_of(_text), list),
}
