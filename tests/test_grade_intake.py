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
