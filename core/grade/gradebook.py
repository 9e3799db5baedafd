"""The class's outputs: ``gradebook.csv`` / ``gradebook.json``, the LMS import CSV, and the
summary page. Every file is written to a temporary name and renamed (:mod:`profreport.fileio`),
so an interrupted run leaves the previous gradebook or the new one, never half of one."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import jinja2

from profreport import __version__
from profreport.fileio import write_text
from profreport.grade.adjust import RosterEntry
from profreport.grade.feedback import GRADE_FILTERS
from profreport.grade.results import GRADEBOOK_SCHEMA, StudentResult
from profreport.grade.rubric import Rubric
from profreport.reports.render.html import templates_environment

SUMMARY_TEMPLATE = "grade_summary.html.j2"
#: Bars of the totals histogram.
HISTOGRAM_BINS = 10
#: Width in pixels of the longest histogram bar.
BAR_PX = 400
#: Characters that make a spreadsheet read a cell as a formula.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def cell(value: object) -> str:
    """A CSV cell that a spreadsheet shows as text, never runs as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def _csv(rows: list[list[object]]) -> str:
    """Rows as CSV text."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerows([[cell(value) for value in row] for row in rows])
    return buffer.getvalue()


def gradebook_rows(results: list[StudentResult], rubric: Rubric) -> list[list[object]]:
    """Header and one row per student: student, each check, total, max_total, status, error,
    notes (the newest of several submissions...), flags (signs of forged profiles)."""
    header: list[object] = ["student", *(c.id for c in rubric.checks), "total", "max_total",
                            "status", "error", "notes", "flags"]
    rows = [[r.student, *(c.points for c in r.checks), r.total, rubric.max_total, r.status,
             r.error, "; ".join(r.notes), "; ".join(r.flags)] for r in results]
    return [header, *rows]


def lms_rows(results: list[StudentResult], rubric: Rubric, lms: str,
             roster: dict[str, RosterEntry] | None = None,
             names: dict[str, str] | None = None) -> list[list[object]]:
    """The totals in the CSV layout the LMS imports (Canvas gradebook, Moodle grade import),
    each student under the roster's LMS identity (their own name without a roster; left out,
    and said in their notes, when a roster does not list them); ``names`` turns anonymous
    codes back into the students' names (the LMS must know who is who)."""
    people = [(r, _identity(r, (names or {}).get(r.student, r.student), roster))
              for r in results]
    listed = [(r, who) for r, who in people if who is not None]
    if lms == "canvas":
        column = f"{rubric.name} ({rubric.max_total:g} points)"
        return [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", column],
                ["Points Possible", "", "", "", "", rubric.max_total],
                *[[who.name, who.id, who.sis_user_id, who.login, who.section, r.total]
                  for r, who in listed]]
    return [["Username", "Grade", "Feedback"],
            *[[who.login or who.id, r.total, "; ".join(r.notes)] for r, who in listed]]


def _identity(result: StudentResult, name: str, roster: dict[str, RosterEntry] | None
              ) -> RosterEntry | None:
    """The student's LMS identity: the roster's, or their name when there is no roster."""
    if not roster:
        return RosterEntry(name, login=name)
    entry = roster.get(name)
    if entry is None:
        result.notes.append("not in the roster: left out of the LMS file")
        return None
    return dataclasses.replace(entry, name=entry.name or name)


@dataclass
class Summary:
    """The class summary's figures."""

    students: int
    errors: int
    mean: float
    median: float
    histogram: list[dict[str, object]]
    checks: list[dict[str, object]]
    verdicts: list[dict[str, object]]
    duplicates: list[dict[str, object]] = field(default_factory=list)


def _histogram(totals: list[float], max_total: float) -> list[dict[str, object]]:
    """How many totals fall in each bin from 0 to max_total: one bin per point when the
    rubric is worth few whole points, else HISTOGRAM_BINS equal bins."""
    whole = float(max_total).is_integer() and max_total <= 2 * HISTOGRAM_BINS
    width = 1.0 if whole else max_total / HISTOGRAM_BINS
    bins = int(max_total) + 1 if whole else HISTOGRAM_BINS
    counts = Counter(min(int(total / width), bins - 1) for total in totals)
    most = max(counts.values(), default=1)
    labels = ([f"{i:g}" for i in range(bins)] if whole else
              [f"{i * width:.3g}–{(i + 1) * width:.3g}" for i in range(bins)])
    return [{"label": label, "count": counts.get(i, 0),
             "width": round(BAR_PX * counts.get(i, 0) / most)} for i, label in enumerate(labels)]


def duplicates(results: list[StudentResult]) -> list[dict[str, object]]:
    """Groups of students who handed in the same profile: the same bytes, or the same recorded
    step timings and timestamps (a re-compressed or renamed copy, shown when the bytes differ)."""
    same_bytes: dict[str, dict[str, str]] = defaultdict(dict)
    same_timing: dict[str, dict[str, str]] = defaultdict(dict)
    for result in results:
        for path, digest in result.profile_hashes.items():
            same_bytes[digest].setdefault(result.student, path)
        for run in result.runs:
            if run.timing_fingerprint:
                same_timing[run.timing_fingerprint].setdefault(result.student, f"run {run.name}")
    groups = [_group("same file content", owners) for owners in same_bytes.values()
              if len(owners) > 1]
    copied = [set(owners) for owners in same_bytes.values()]
    groups += [_group("same recorded step and operator timings (timestamps aside)", owners)
               for owners in same_timing.values()
               if len(owners) > 1 and not any(set(owners) <= group for group in copied)]
    return sorted(groups, key=lambda group: group["students"])  # type: ignore[arg-type,return-value]


def _group(what: str, owners: dict[str, str]) -> dict[str, object]:
    """One group of students handing in the same profile, and where each has it."""
    names = sorted(owners)
    return {"students": names,
            "what": what + ": " + ", ".join(f"{name} {owners[name]}" for name in names)}


def summarize(results: list[StudentResult], rubric: Rubric) -> Summary:
    """Distribution of totals, each check's hits, the most common verdicts, duplicates."""
    totals = [r.total for r in results]
    checks = [{"id": check.id, "asks": results[0].checks[i].asks if results else check.id,
               "max_points": check.points,
               "passed": sum(r.checks[i].passed for r in results),
               "partial": sum(0 < r.checks[i].points < check.points for r in results),
               "mean": round(statistics.fmean(r.checks[i].points for r in results), 2)
               if results else 0.0}
              for i, check in enumerate(rubric.checks)]
    verdicts = Counter((run.name, run.verdict) for r in results for run in r.runs)
    return Summary(students=len(results), errors=sum(r.status == "error" for r in results),
                   mean=round(statistics.fmean(totals), 2) if totals else 0.0,
                   median=statistics.median(totals) if totals else 0.0,
                   histogram=_histogram(totals, rubric.max_total), checks=checks,
                   verdicts=[{"run": run, "verdict": verdict, "count": count}
                             for (run, verdict), count in verdicts.most_common()],
                   duplicates=duplicates(results))


@cache
def _environment() -> jinja2.Environment:
    """The summary page's environment (autoescaped)."""
    environment = templates_environment(autoescape=True)
    environment.globals.update(GRADE_FILTERS)
    return environment


def write_gradebook(out: Path, results: list[StudentResult], rubric: Rubric,
                    skipped: list[str], lms: str | None = None,
                    roster: dict[str, RosterEntry] | None = None,
                    names: dict[str, str] | None = None) -> list[Path]:
    """gradebook.csv, gradebook.json, summary.html (and the LMS CSV); returns the paths."""
    lms_text = (_csv(lms_rows(results, rubric, lms, roster, names)) if lms is not None
                else None)
    summary = summarize(results, rubric)
    data = {"schema": GRADEBOOK_SCHEMA, "generated_by": f"profreport {__version__}",
            "assignment": rubric.name, "max_total": rubric.max_total,
            "checks": [{"id": c.id, "points": c.points, "kind": c.kind} for c in rubric.checks],
            "students": [r.to_json() for r in results], "skipped": skipped,
            "summary": {"mean": summary.mean, "median": summary.median,
                        "errors": summary.errors, "duplicates": summary.duplicates}}
    page = _environment().get_template(SUMMARY_TEMPLATE).render(
        rubric=rubric, results=results, summary=summary, skipped=skipped,
        generated_by=f"profreport {__version__}", schema=GRADEBOOK_SCHEMA)
    written = [write_text(out / "gradebook.csv", _csv(gradebook_rows(results, rubric))),
               write_text(out / "gradebook.json", json.dumps(data, indent=2, sort_keys=True)
                          + "\n"),
               write_text(out / "summary.html", page)]
    if lms_text is not None:
        written.append(write_text(out / f"gradebook-{lms}.csv", lms_text))
    return written
