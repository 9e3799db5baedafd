"""Intake of a class folder: names in any script kept and never collapsed, an archive whose top
folder is the student's name (spaces, accents) unwrapped, the newest of several submissions of
one student graded and the others named."""

from __future__ import annotations

import csv
import os
import zipfile
from pathlib import Path

from profreport.grade import grade_class
from profreport.grade.rubric import parse_rubric
from profreport.grade.submissions import find_submissions, stage, unwrap

RUBRIC = "[[check]]\nid = \"profiled\"\npoints = 1\nrequire = [\"any\"]\n"


def test_names_in_any_script_are_kept_apart(tmp_path: Path) -> None:
    """Chinese, Arabic and accented names stay as they are; two names that differ only in
    punctuation are two students, not one."""
    for name in ("王小明", "محمد علي", "Zoë", "a+b", "a=b"):
        (tmp_path / name).mkdir()
    found, skipped = find_submissions(tmp_path)
    assert [s.student for s in found] == ["Zoë", "a_b", "a_b~2", "محمد_علي", "王小明"]
    assert [s.path.name for s in found][1:3] == ["a+b", "a=b"]
    assert skipped == []


def test_archive_with_the_students_name_is_unwrapped(tmp_path: Path) -> None:
    """``José Núñez.zip`` holding ``José Núñez/train.py`` is graded from inside that folder."""
    archive = tmp_path / "class" / "José Núñez.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("José Núñez/train.py", "print(1)\n")
        handle.writestr("__MACOSX/._train.py", "")
    (submission,), _ = find_submissions(archive.parent)
    assert submission.student == "José_Núñez"
    staged = stage(submission, tmp_path / "staging")
    assert (unwrap(staged.root, submission.student) / "train.py").is_file()


def test_newest_of_several_submissions(tmp_path: Path) -> None:
    """``alice/`` and ``alice.zip``: the newer is graded, the older is named, and the gradebook
    says which was taken."""
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / "notes.txt").write_text("old")
    with zipfile.ZipFile(subs / "alice.zip", "w") as handle:
        handle.writestr("notes.txt", "new")
    os.utime(subs / "alice", (1_700_000_000, 1_700_000_000))
    (submission,), skipped = find_submissions(subs)
    assert submission.path.name == "alice.zip"
    assert skipped == ["alice: an older submission of alice than alice.zip"]
    outcome = grade_class(subs, parse_rubric(RUBRIC, tmp_path / "r.toml"), tmp_path / "out")
    (result,) = outcome.results
    assert result.notes == ["newest of 2 submissions: alice.zip (not graded: alice)"]
    rows = list(csv.reader((tmp_path / "out" / "gradebook.csv").open(encoding="utf-8")))
    assert rows[0][-2:] == ["notes", "flags"] and rows[1][0] == "alice"
    assert rows[1][-2] == "newest of 2 submissions: alice.zip (not graded: alice)"


def test_roster_overrides_and_late_penalty(tmp_path: Path) -> None:
    """The Canvas file carries the roster's LMS ids; the teacher's override and comment are
    applied on every regrade; a submission two days late loses 2 x 10% of the points."""
    subs = tmp_path / "subs"
    for name in ("José Núñez", "bob", "zed"):
        (subs / name).mkdir(parents=True)
        (subs / name / "notes.txt").write_text(name)
        os.utime(subs / name, (1_763_500_000, 1_763_500_000))  # 2025-11-18 21:06 UTC
    os.utime(subs / "bob", (1_763_700_000, 1_763_700_000))  # 2025-11-21 04:40 UTC
    rubric = parse_rubric('[assignment]\nname = "hw"\ndeadline = 2025-11-20T00:00:00Z\n'
                          "late_penalty_per_day = 0.1\n" + RUBRIC, tmp_path / "r.toml")
    roster = tmp_path / "roster.csv"
    roster.write_text("student,name,id,sis_user_id,login,section\n"
                      "José Núñez,\"Núñez, José\",1001,S1,jnunez,A\nbob,Bob B,1002,S2,bob,A\n",
                      encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "overrides.csv").write_text("student,check,points,comment\n"
                                       "José Núñez,profiled,1,read the notes by hand\n"
                                       "bob,,,handed in by email\n", encoding="utf-8")
    for _ in range(2):
        outcome = grade_class(subs, rubric, out, lms="canvas", roster=roster)
        results = {r.student: r for r in outcome.results}
        jose = results["José_Núñez"]
        assert jose.total == 1 and "Points set by the teacher: 1 (measured 0)" in \
            jose.checks[0].measured and "read the notes by hand" in jose.checks[0].measured
        assert results["bob"].penalty == 0.2 and results["bob"].total == 0
        assert "teacher: handed in by email" in results["bob"].notes
        assert "2 day(s) late: -0.2 points (10% of 1 per day)" in results["bob"].notes
    assert all(r.reused for r in outcome.results)
    rows = list(csv.reader((out / "gradebook-canvas.csv").open(encoding="utf-8")))
    assert rows[2:] == [["Núñez, José", "1001", "S1", "jnunez", "A", "1.0"],
                        ["Bob B", "1002", "S2", "bob", "A", "0.0"]]
    assert "not in the roster: left out of the LMS file" in results["zed"].notes


def test_anonymous_mode(tmp_path: Path) -> None:
    """Names appear nowhere the teacher grades from; the key maps the codes back, a regrade
    keeps them, and the LMS file carries the real names."""
    subs = tmp_path / "subs"
    for name in ("Zoë Quinn", "王小明"):
        (subs / name).mkdir(parents=True)
        (subs / name / "notes.txt").write_text("hello")
    out = tmp_path / "out"
    rubric = parse_rubric(RUBRIC, tmp_path / "r.toml")
    first = grade_class(subs, rubric, out, lms="canvas", anonymous=True)
    codes = sorted(r.student for r in first.results)
    assert all(code.startswith("anon-") and len(code) == 13 for code in codes)
    shown = [out / "gradebook.csv", out / "gradebook.json", out / "summary.html",
             *(out / "students").rglob("*")]
    for path in shown:
        text = path.read_text(encoding="utf-8") if path.is_file() else path.name
        assert "Zoë" not in text and "王小明" not in text and "Quinn" not in text, path
    key = dict(list(csv.reader((out / "anonymous-key.csv").open(encoding="utf-8")))[1:])
    assert sorted(key.values()) == ["Zoë_Quinn", "王小明"]
    canvas = {row[0] for row in csv.reader((out / "gradebook-canvas.csv").open(encoding="utf-8"))}
    assert {"Zoë_Quinn", "王小明"} <= canvas and not set(codes) & canvas
    again = grade_class(subs, rubric, out, anonymous=True)
    assert sorted(r.student for r in again.results) == codes
    assert all(r.reused for r in again.results)
