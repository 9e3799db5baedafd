"""The rubric: a TOML file of ``[[check]]`` tables, read through a declarative option table.

Every key a table may hold is declared below with what it accepts; an unknown key, a value of the
wrong type or out of range, or a check whose keys do not make one kind of check, is a
:class:`RubricError` naming the rubric file and the line the key came from, raised before any
submission is graded. ``tomllib`` reports no line numbers for values, so the line is found by
scanning the text for the table and the key.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.resources
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profreport.errors import RubricError
from profreport.reports.analysis.findings import FINDING_IDS
from profreport.reports.analysis.results import RunMetrics, Verdict
from profreport.reports.render.json import metrics_json

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib  # type: ignore[no-redef]

#: The example rubric's file among the package's templates.
EXAMPLE_RUBRIC = "rubric.example.toml"

#: Profile kinds a ``require`` check may ask for ("any" = at least one profile of any kind).
PROFILE_KINDS = ("any", "lprof", "kineto", "nsys")
#: The metric a ``speedup`` check measures: baseline step time over candidate step time.
SPEEDUP = "speedup"
#: Metric names a check may use: the ``profreport/1`` metric keys (nested ones as ``a.b``).
METRIC_NAMES = frozenset(metrics_json(RunMetrics())) | {SPEEDUP}
VERDICTS = typing.get_args(Verdict)
#: Check ids become gradebook columns and file names: letters, digits, ``-``, ``_``, ``.``.
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: Run names are submission folder names.
_RUN = re.compile(r"^[^/\\\x00]{1,128}$")


@dataclass(frozen=True)
class Option:
    """One key a rubric table may hold: a check of its value and what it means."""

    accepts: str
    valid: Callable[[Any], bool]


def _text(value: Any) -> bool:
    """A non-empty string."""
    return isinstance(value, str) and bool(value.strip())


def _number(value: Any) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _positive(value: Any) -> bool:
    """A number above zero."""
    return _number(value) and value > 0


def _kinds(value: Any) -> bool:
    """A non-empty list of profile kinds."""
    return (isinstance(value, list) and bool(value)
            and all(isinstance(v, str) and v in PROFILE_KINDS for v in value))


def _verdicts(value: Any) -> bool:
    """A verdict, or a non-empty list of verdicts."""
    values = value if isinstance(value, list) else [value]
    return bool(values) and all(isinstance(v, str) and v in VERDICTS for v in values)


def _metric(value: Any) -> bool:
    """A profreport/1 metric key, or ``key.subkey`` of a nested one."""
    return isinstance(value, str) and value.split(".", 1)[0] in METRIC_NAMES


def _strings(value: Any) -> bool:
    """A list of strings."""
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _profilers(value: Any) -> bool:
    """A list of run-and-report profilers."""
    return isinstance(value, list) and all(v in RUN_PROFILERS for v in value)


def _count(value: Any) -> bool:
    """A whole number above zero."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


#: The profilers ``grade --run`` may run the submissions under (run-and-report's).
RUN_PROFILERS = ("kernprof", "torch", "nsys")
#: Unprofiled launches of each script ``--run`` times: two at least, or there is no spread.
MIN_TRIALS = 2

ASSIGNMENT_OPTIONS: dict[str, Option] = {
    "name": Option("a non-empty string", _text),
    "description": Option("a string", lambda v: isinstance(v, str)),
    "deadline": Option("a TOML date-time (2026-11-20T23:59:00Z)",
                       lambda v: isinstance(v, datetime.datetime)),
    "late_penalty_per_day": Option("a fraction between 0 and 1",
                                   lambda v: _number(v) and 0 <= v <= 1),
}
CHECK_OPTIONS: dict[str, Option] = {
    "id": Option("letters, digits, '-', '_' or '.' (at most 64)",
                 lambda v: isinstance(v, str) and bool(_ID.match(v))),
    "points": Option("a number above 0", _positive),
    "title": Option("a non-empty string", _text),
    "run": Option("a run (folder) name", lambda v: isinstance(v, str) and bool(_RUN.match(v))),
    "require": Option(f"a list of {', '.join(PROFILE_KINDS)}", _kinds),
    "expect_verdict": Option(f"one (or a list) of {', '.join(VERDICTS)}", _verdicts),
    "expect_verdict_not": Option(f"one (or a list) of {', '.join(VERDICTS)}", _verdicts),
    "expect_finding": Option("a finding id (" + ", ".join(sorted(FINDING_IDS)) + ")",
                             lambda v: v in FINDING_IDS),
    "expect_no_finding": Option("a finding id (" + ", ".join(sorted(FINDING_IDS)) + ")",
                                lambda v: v in FINDING_IDS),
    "metric": Option("a profreport/1 metric (" + ", ".join(sorted(METRIC_NAMES)) + ")", _metric),
    "baseline": Option("a run (folder) name", lambda v: isinstance(v, str) and bool(_RUN.match(v))),
    "candidate": Option("a run (folder) name",
                        lambda v: isinstance(v, str) and bool(_RUN.match(v))),
    "min": Option("a number", _number),
    "max": Option("a number", _number),
    "partial_from": Option("a number", _number),
    "partial": Option("true or false", lambda v: isinstance(v, bool)),
    "trains": Option("true (needs a [run] table)", lambda v: v is True),
}
RUN_OPTIONS: dict[str, Option] = {
    "script": Option("a path inside the submission", lambda v: _text(v) and bool(_RUN.match(v))),
    "reference": Option("the reference script's path, relative to the rubric", _text),
    "args": Option("a list of strings ({data} is the data folder)", _strings),
    "data": Option("a folder, relative to the rubric (mounted read-only)", _text),
    "steps": Option("a whole number above 0", _count),
    "batch_size": Option("a whole number above 0", _count),
    "allow_batch_change": Option("true or false", lambda v: isinstance(v, bool)),
    "trials": Option(f"a whole number of at least {MIN_TRIALS}",
                     lambda v: _count(v) and v >= MIN_TRIALS),
    "profilers": Option(f"a list of {', '.join(RUN_PROFILERS)}", _profilers),
    "loss_tolerance": Option("a number above 0 (relative)", _positive),
    "time_limit_s": Option("a number above 0", _positive),
    "memory_gb": Option("a number above 0", _positive),
    "processes": Option("a whole number above 0", _count),
}
#: The keys a [run] table cannot do without.
RUN_NEEDS = ("reference", "steps", "batch_size")


@dataclass(frozen=True)
class RunSpec:
    """``[run]``: how ``grade --run`` runs each submission and the reference."""

    #: The reference script, absolute.
    reference: Path
    steps: int
    batch_size: int
    script: str = "train.py"
    args: tuple[str, ...] = ()
    data: Path | None = None
    allow_batch_change: bool = False
    trials: int = 3
    profilers: tuple[str, ...] = ("kernprof", "torch")
    loss_tolerance: float = 0.05
    time_limit_s: float = 600.0
    memory_gb: float = 8.0
    processes: int = 512

    def command_args(self) -> list[str]:
        """The script's arguments, the data folder filled in."""
        data = str(self.data) if self.data else ""
        return [arg.replace("{data}", data) for arg in self.args]


#: The key that makes each kind of check; a check has exactly one.
KIND_KEYS = ("require", "expect_verdict", "expect_verdict_not", "expect_finding",
             "expect_no_finding", "metric", "trains")
#: ``grade --run``: the run folder the grader makes of each submission, and of the reference.
SUBMISSION_RUN = "submission"
REFERENCE_RUN = "reference"


@dataclass(frozen=True)
class Check:
    """One rubric check: what it tests, on which run, and what it is worth."""

    id: str
    points: float
    kind: str
    #: The value of the kind key: profile kinds, a verdict, a finding id, or a metric name.
    target: Any
    title: str = ""
    run: str | None = None
    baseline: str | None = None
    candidate: str | None = None
    min: float | None = None
    max: float | None = None
    #: Metric checks: the value at which partial credit falls to zero (linear up to min/max).
    partial_from: float | None = None
    #: ``require`` checks: credit in proportion to the required kinds present.
    partial: bool = False


@dataclass(frozen=True)
class Rubric:
    """An assignment's checks, with the hash of the rubric text (it keys the result cache)."""

    name: str
    checks: list[Check]
    description: str = ""
    digest: str = field(default="", compare=False)
    #: ``[run]``: what ``grade --run`` runs; None when the rubric grades handed-in profiles only.
    run: RunSpec | None = None
    #: The rubric file (absolute), for the Slurm tasks that read it again.
    source: Path | None = field(default=None, compare=False)
    #: Late submissions (modified after the deadline) lose this fraction of the points a day.
    deadline: datetime.datetime | None = None
    late_penalty_per_day: float = 0.0

    @property
    def max_total(self) -> float:
        """Points of a submission that passes every check."""
        return sum(check.points for check in self.checks)



def line_of(text: str, table: str, index: int, key: str | None = None) -> int | None:
    """The 1-based line of ``key`` in the ``index``-th ``[table]`` / ``[[table]]`` of ``text``
    (of the table header when ``key`` is None); None when it cannot be found."""
    header = re.compile(rf"^\s*\[\[?\s*{re.escape(table)}\s*\]\]?\s*(#.*)?$")
    any_header = re.compile(r"^\s*\[")
    key_line = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=") if key else None
    seen, inside, start = -1, False, None
    for number, line in enumerate(text.splitlines(), start=1):
        if header.match(line):
            seen += 1
            inside = seen == index
            start = number if inside else start
            continue
        if any_header.match(line):
            inside = False
        if inside and key_line is not None and key_line.match(line):
            return number
    return start if key is None else None


class _Reader:
    """Validates one parsed rubric against the option tables, citing lines of its text."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.text = path, text

    def fail(self, message: str, table: str, index: int, key: str | None = None) -> RubricError:
        """A RubricError at the line of ``key`` (or of the table) when it can be found."""
        line = line_of(self.text, table, index, key) or line_of(self.text, table, index)
        where = f"{self.path}:{line}" if line else str(self.path)
        return RubricError(message, where)

    def options(self, data: dict[str, Any], table: str, index: int,
                options: dict[str, Option]) -> None:
        """Refuse unknown keys and values an option does not accept."""
        for key, value in data.items():
            option = options.get(key)
            if option is None:
                raise self.fail(f"unknown key {key!r} in [{table}]; known keys: "
                                f"{', '.join(options)}", table, index, key)
            if not option.valid(value):
                raise self.fail(f"{key} = {value!r:.80}: expected {option.accepts}",
                                table, index, key)

    def check(self, data: Any, index: int) -> Check:
        """One ``[[check]]`` table as a Check."""
        if not isinstance(data, dict):
            raise self.fail("check must be a table", "check", index)
        self.options(data, "check", index, CHECK_OPTIONS)
        for key in ("id", "points"):
            if key not in data:
                raise self.fail(f"check has no {key!r}", "check", index)
        kinds = [key for key in KIND_KEYS if key in data]
        if len(kinds) != 1:
            raise self.fail(f"check {data['id']!r} needs exactly one of {', '.join(KIND_KEYS)}"
                            f" (it has {', '.join(kinds) or 'none'})", "check", index)
        return self._shaped(data, kinds[0], index)

    def _shaped(self, data: dict[str, Any], kind: str, index: int) -> Check:
        """The Check, once the keys that go with its kind are present and no others."""
        allowed = {"id", "points", "title", kind} | _KIND_EXTRAS[(kind, data[kind] == SPEEDUP)]
        for key in data:
            if key not in allowed:
                raise self.fail(f"{key!r} does not apply to a {_kind_label(kind, data)} check",
                                "check", index, key)
        needed = _KIND_NEEDS[(kind, data[kind] == SPEEDUP)]
        missing = [key for key in needed if key not in data]
        if missing:
            raise self.fail(f"a {_kind_label(kind, data)} check needs {', '.join(missing)}",
                            "check", index)
        if kind == "metric" and "min" not in data and "max" not in data:
            raise self.fail("a metric check needs min, max or both", "check", index)
        self._partial_range(data, index)
        return Check(id=data["id"], points=float(data["points"]), kind=kind, target=data[kind],
                     title=data.get("title", ""), run=data.get("run"),
                     baseline=data.get("baseline"), candidate=data.get("candidate"),
                     min=data.get("min"), max=data.get("max"),
                     partial_from=data.get("partial_from"), partial=data.get("partial", False))

    def _partial_range(self, data: dict[str, Any], index: int) -> None:
        """partial_from must lie on the failing side of exactly one bound."""
        start = data.get("partial_from")
        if start is None:
            return
        low, high = data.get("min"), data.get("max")
        if (low is None) == (high is None):
            raise self.fail("partial_from needs exactly one of min and max", "check", index,
                            "partial_from")
        if (low is not None and start >= low) or (high is not None and start <= high):
            side = f"below min = {low}" if low is not None else f"above max = {high}"
            raise self.fail(f"partial_from = {start} must lie {side}", "check", index,
                            "partial_from")


def _kind_label(kind: str, data: dict[str, Any]) -> str:
    """How a message names a kind of check."""
    return "speedup" if kind == "metric" and data[kind] == SPEEDUP else kind


#: Keys each kind of check may add to id/points/title (keyed by kind, and "is it speedup").
_KIND_EXTRAS: dict[tuple[str, bool], set[str]] = {
    ("require", False): {"run", "partial"},
    ("expect_verdict", False): {"run"}, ("expect_verdict_not", False): {"run"},
    ("expect_finding", False): {"run"}, ("expect_no_finding", False): {"run"},
    ("metric", False): {"run", "min", "max", "partial_from"},
    ("metric", True): {"baseline", "candidate", "min", "max", "partial_from"},
    ("trains", False): set(),
}
#: Keys each kind of check cannot do without.
_KIND_NEEDS: dict[tuple[str, bool], tuple[str, ...]] = {
    ("require", False): (), ("expect_verdict", False): ("run",),
    ("expect_verdict_not", False): ("run",), ("expect_finding", False): ("run",),
    ("expect_no_finding", False): ("run",), ("metric", False): ("run",),
    ("metric", True): ("baseline", "candidate"),
    ("trains", False): (),
}


def parse_rubric(text: str, path: Path) -> Rubric:
    """Validate rubric text; RubricError at the offending line for anything it cannot use."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RubricError(f"not valid TOML: {exc}", path) from None
    reader = _Reader(path, text)
    for key in data:
        if key not in ("assignment", "check", "run"):
            raise reader.fail(f"unknown table or key {key!r}; a rubric holds [assignment], "
                              "[run] and [[check]] tables", key, 0)
    run = _run_spec(reader, data.get("run"), path)
    assignment = data.get("assignment", {})
    if not isinstance(assignment, dict):
        raise reader.fail("assignment must be a table", "assignment", 0)
    reader.options(assignment, "assignment", 0, ASSIGNMENT_OPTIONS)
    tables = data.get("check", [])
    if not isinstance(tables, list) or not tables:
        raise RubricError("no [[check]] tables: nothing to grade", path)
    checks = [reader.check(table, index) for index, table in enumerate(tables)]
    seen: set[str] = set()
    for index, check in enumerate(checks):
        _fits_mode(reader, check, index, run is not None)
        if check.id in seen:
            raise reader.fail(f"two checks have the id {check.id!r}", "check", index, "id")
        seen.add(check.id)
    return Rubric(name=assignment.get("name", path.stem), checks=checks,
                  description=assignment.get("description", ""),
                  digest=hashlib.sha256(text.encode()).hexdigest(), run=run,
                  source=path.resolve(), deadline=assignment.get("deadline"),
                  late_penalty_per_day=float(assignment.get("late_penalty_per_day", 0.0)))


def _fits_mode(reader: _Reader, check: Check, index: int, running: bool) -> None:
    """A ``trains`` check needs ``[run]``; under ``[run]`` a speedup compares the submission's
    run with the reference's."""
    if check.kind == "trains" and not running:
        raise reader.fail("a trains check needs a [run] table (grade --run)", "check", index,
                          "trains")
    pair = (check.baseline, check.candidate)
    if running and check.target == SPEEDUP and pair != (REFERENCE_RUN, SUBMISSION_RUN):
        raise reader.fail(f"under [run], a speedup check has baseline = {REFERENCE_RUN!r} and "
                          f"candidate = {SUBMISSION_RUN!r}", "check", index, "baseline")


def _run_spec(reader: _Reader, data: Any, path: Path) -> RunSpec | None:
    """The ``[run]`` table, its paths resolved against the rubric's folder."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise reader.fail("run must be a table", "run", 0)
    reader.options(data, "run", 0, RUN_OPTIONS)
    missing = [key for key in RUN_NEEDS if key not in data]
    if missing:
        raise reader.fail(f"[run] needs {', '.join(missing)}", "run", 0)
    base = path.resolve().parent
    reference = base / data["reference"]
    if not reference.is_file():
        raise reader.fail(f"reference = {data['reference']!r}: no such file", "run", 0,
                          "reference")
    folder = base / data["data"] if "data" in data else None
    if folder is not None and not folder.is_dir():
        raise reader.fail(f"data = {data['data']!r}: no such folder", "run", 0, "data")
    lists = {key: tuple(data[key]) for key in ("args", "profilers") if key in data}
    return RunSpec(**{**data, **lists, "reference": reference, "data": folder})


def example_rubric() -> str:
    """The commented example rubric shipped with profreport (the README shows the same)."""
    return (importlib.resources.files("profreport.templates") / EXAMPLE_RUBRIC).read_text(
        encoding="utf-8")


def load_rubric(path: Path) -> Rubric:
    """Read and validate the rubric file at ``path``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RubricError(f"cannot read the rubric: {exc}", path) from None
    return parse_rubric(text, Path(path))
