"""What the teacher adds to the measured grade: manual overrides and comments (a CSV the grader
reads on every run and never writes, so they survive regrading), late penalties from the
submissions' times and the rubric's deadline, and the roster mapping students to LMS ids."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import math
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from profreport.errors import UsageError
from profreport.fileio import write_text
from profreport.grade.results import StudentResult
from profreport.grade.rubric import Rubric
from profreport.grade.submissions import Submission, student_name

#: Seconds in a day late (a part of a day counts as a whole one, as LMS late policies do).
DAY_S = 86400
#: The overrides file the grader reads from the output folder when no --overrides is given.
OVERRIDES_NAME = "overrides.csv"
#: Anonymous mode: code -> student, for the teacher to open once grading is done, and the
#: secret that makes the codes (kept, so that a regrade gives every student the same code).
ANONYMOUS_KEY = "anonymous-key.csv"
ANONYMOUS_SECRET = ".anonymous-secret"
#: Hex digits of an anonymous code.
CODE_DIGITS = 8


@dataclass(frozen=True)
class Override:
    """One line of the overrides file: points for a check (or none), and a comment."""

    check: str
    points: float | None
    comment: str


@dataclass(frozen=True)
class Adjustments:
    """Everything added to one student's measured grade (picklable; part of the cache key)."""

    overrides: tuple[Override, ...] = ()
    late_days: int = 0
    #: Fraction of the rubric's points taken per day late.
    penalty_per_day: float = 0.0


@dataclass(frozen=True)
class RosterEntry:
    """A student's LMS identity."""

    name: str
    id: str = ""
    sis_user_id: str = ""
    login: str = ""
    section: str = ""


def _rows(path: Path, needed: tuple[str, ...]) -> list[dict[str, str]]:
    """A CSV file's rows as dicts; UsageError when it cannot be read or lacks a column."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            rows = list(reader)
            columns = set(reader.fieldnames or [])
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    missing = [column for column in needed if column not in columns]
    if missing:
        raise UsageError(f"{path}: no {', '.join(missing)} column (it has: "
                         f"{', '.join(sorted(columns)) or 'none'})")
    return rows


def load_overrides(path: Path | None) -> dict[str, tuple[Override, ...]]:
    """``student,check,points,comment`` rows by student (as profreport names them); an empty
    ``points`` keeps the measured points, an empty ``check`` is a comment on the whole grade."""
    if path is None or not path.is_file():
        return {}
    found: dict[str, list[Override]] = {}
    for number, row in enumerate(_rows(path, ("student", "check", "points", "comment")),
                                 start=2):
        text = (row.get("points") or "").strip()
        try:
            points = float(text) if text else None
        except ValueError:
            raise UsageError(f"{path}:{number}: points {text!r} is not a number") from None
        student = student_name(Path(row["student"] or ""))
        found.setdefault(student, []).append(
            Override((row.get("check") or "").strip(), points, (row.get("comment") or "").strip()))
    return {student: tuple(lines) for student, lines in found.items()}


def load_roster(path: Path | None) -> dict[str, RosterEntry]:
    """``student,name,id,sis_user_id,login,section`` rows (``student``: the submission's folder
    or archive name) by student as profreport names them."""
    if path is None:
        return {}
    roster = {}
    for row in _rows(path, ("student",)):
        student = student_name(Path(row["student"] or ""))
        roster[student] = RosterEntry(*(((row.get(key) or "").strip()) for key in (
            "name", "id", "sis_user_id", "login", "section")))
    return roster


def anonymize(found: list[Submission], out: Path) -> list[Submission]:
    """Each submission under a code made from its name and a secret kept in ``out`` (the same
    code on every regrade; unguessable from the name alone); ``anonymous-key.csv`` maps them
    back. Intake notes naming the files lose the names."""
    secret_file = out / ANONYMOUS_SECRET
    if not secret_file.is_file():
        write_text(secret_file, secrets.token_hex(16) + "\n")
        secret_file.chmod(0o600)
    secret = secret_file.read_text(encoding="utf-8").strip()
    coded = []
    for submission in found:
        digest = hashlib.sha256(f"{secret}|{submission.student}".encode()).hexdigest()
        note = submission.note.split(":", 1)[0] if submission.note else ""
        coded.append(dataclasses.replace(submission, student=f"anon-{digest[:CODE_DIGITS]}",
                                         note=note, named=submission.student))
    rows = [["code", "student"], *sorted([s.student, s.named] for s in coded)]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    write_text(out / ANONYMOUS_KEY, buffer.getvalue())
    return coded


def late_days(submission: Submission, deadline: datetime | None) -> int:
    """Whole days (started) between the deadline and the submission's modification time."""
    if deadline is None:
        return 0
    when = deadline if deadline.tzinfo else deadline.replace(tzinfo=timezone.utc)
    late = submission.path.lstat().st_mtime - when.timestamp()
    return max(math.ceil(late / DAY_S), 0)


def adjustments(submission: Submission, rubric: Rubric,
                overrides: dict[str, tuple[Override, ...]]) -> Adjustments:
    """One student's overrides and lateness."""
    return Adjustments(overrides.get(submission.own_name, ()),
                       late_days(submission, rubric.deadline), rubric.late_penalty_per_day)


def apply(result: StudentResult, adjust: Adjustments, rubric: Rubric) -> None:
    """The teacher's overrides and the late penalty, applied to a measured result (each one
    said in the result's notes and the check's own text)."""
    checks = {check.id: i for i, check in enumerate(result.checks)}
    for override in adjust.overrides:
        if override.check and override.check not in checks:
            result.notes.append(f"override for an unknown check {override.check!r} ignored")
            continue
        if not override.check:
            result.notes.append(f"teacher: {override.comment}")
            continue
        index = checks[override.check]
        check = result.checks[index]
        points = check.points if override.points is None else min(max(override.points, 0.0),
                                                                   check.max_points)
        said = f" Teacher: {override.comment}" if override.comment else ""
        if points != check.points:
            said = f" Points set by the teacher: {points:g} (measured {check.points:g}).{said}"
        result.checks[index] = dataclasses.replace(check, points=points,
                                                   measured=check.measured + said)
    if adjust.late_days and adjust.penalty_per_day:
        fraction = min(adjust.late_days * adjust.penalty_per_day, 1.0)
        result.penalty = round(fraction * rubric.max_total, 3)
        result.notes.append(f"{adjust.late_days} day(s) late: -{result.penalty:g} points "
                            f"({adjust.penalty_per_day:.0%} of {rubric.max_total:g} per day)")
