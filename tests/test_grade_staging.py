"""Staging a submission under its byte budget: a size an archive or folder declares is checked
before a byte is read, and an entry whose data outruns what it declares is still stopped. A zip
made on Windows separates its folders with '\\': read so, as unzip does, under the same checks."""

from __future__ import annotations

import io
import struct
import tarfile
import zipfile
from pathlib import Path

import pytest

from profreport.grade import grade_class, submissions
from profreport.grade.rubric import parse_rubric
from profreport.grade.submissions import BACKSLASH_REASON, ZIP_HOST_FAT, Submission, stage
from profreport.inputs import Limit

#: Offset of the uncompressed size in a zip's central directory record (APPNOTE 4.3.12).
CENTRAL_SIZE_OFFSET = 24
#: A budget small enough to cross with a few MiB of zeros.
SMALL_BUDGET = Limit("unpacked bytes", 1 << 20, "test")
RUBRIC = "[[check]]\nid = \"profiled\"\npoints = 1\nrequire = [\"any\"]\n"
#: Markup an attacker puts in an archive entry's name (no '/', so a Windows zip's '\\' in the
#: same name is read as folders).
MARKUP = "<img src=x onerror=alert(1)>"


def zip_declaring(path: Path, declared: int, data: bytes,
                  method: int = zipfile.ZIP_DEFLATED) -> None:
    """A zip of one entry ``x.json`` holding ``data`` whose central directory says it holds
    ``declared`` bytes, then an honest ``after.json``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        archive.writestr("x.json", data)
        archive.writestr("after.json", b"{}")
    raw = bytearray(buffer.getvalue())
    central = raw.find(b"PK\x01\x02")
    struct.pack_into("<I", raw, central + CENTRAL_SIZE_OFFSET, declared)
    path.write_bytes(bytes(raw))


def staged_files(root: Path) -> set[str]:
    """The files staged under ``root``."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def refusal(entry: str) -> str:
    """The line refusing ``entry`` and the rest for the real byte budget."""
    return (f"{entry} and every entry after it: not unpacked: more than 1,073,741,824 unpacked "
            f"bytes ({submissions.MAX_UNPACKED_BYTES.reason})")


def test_a_zip_entry_declaring_more_than_the_budget_is_refused_unread(tmp_path: Path) -> None:
    """The central directory says 3 GiB: refused before a byte is read (it was read, and,
    holding 100 bytes, staged with everything after it)."""
    bomb = tmp_path / "bomb.zip"
    zip_declaring(bomb, 3 << 30, b"{}" * 50, zipfile.ZIP_STORED)
    staged = stage(Submission("bomb", bomb), tmp_path / "s")
    assert staged.refused == [refusal("x.json")]
    assert (staged.bytes, staged_files(tmp_path / "s")) == (0, set())


@pytest.mark.parametrize("kind", ["zip", "tar", "folder"])
def test_an_honest_large_entry_is_refused_before_it_is_copied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """4 MiB of zeros under a 1 MiB budget, in a zip (its central directory), a tar (its
    header) and a folder (lstat): no byte is copied (1,048,577 were, then thrown away)."""
    zeros = b"\0" * (4 << 20)
    entry = tmp_path / {"zip": "a.zip", "tar": "a.tar", "folder": "a"}[kind]
    if kind == "zip":
        with zipfile.ZipFile(entry, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("a.json", zeros)
    elif kind == "tar":
        with tarfile.open(entry, "w") as archive:
            info = tarfile.TarInfo("a.json")
            info.size = len(zeros)
            archive.addfile(info, io.BytesIO(zeros))
    else:
        entry.mkdir()
        (entry / "a.json").write_bytes(zeros)
    monkeypatch.setattr(submissions, "MAX_UNPACKED_BYTES", SMALL_BUDGET)
    staged = stage(Submission(kind, entry), tmp_path / "s")
    verb = "not copied" if kind == "folder" else "not unpacked"
    assert staged.refused == [f"a.json and every entry after it: {verb}: more than 1,048,576 "
                              "unpacked bytes (test)"]
    assert (staged.bytes, staged_files(tmp_path / "s")) == (0, set())


def test_a_zip_entry_holding_more_than_it_declares_is_stopped(tmp_path: Path) -> None:
    """The central directory says 2 MiB, the data inflates to 8 MiB: zipfile stops at the
    declared size and the CRC fails; the entry is refused and the MiB already written is
    removed (it stayed in staging, a truncated file graded as the student's)."""
    liar = tmp_path / "liar.zip"
    zip_declaring(liar, 2 << 20, b"\0" * (8 << 20))
    staged = stage(Submission("liar", liar), tmp_path / "s")
    assert staged.refused == ["x.json: damaged entry: Bad CRC-32 for file 'x.json'"]
    assert staged_files(tmp_path / "s") == {"after.json"}
    # The MiB read before the CRC failed counts against the budget, as every byte read does.
    assert staged.bytes == (1 << 20) + 2


def test_a_stream_outrunning_its_declared_size_stops_at_the_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A source that says 10 bytes and holds 4 MiB (a file growing while it is copied) is
    stopped by the bounded reader at the budget, and its partial copy removed."""
    monkeypatch.setattr(submissions, "MAX_UNPACKED_BYTES", SMALL_BUDGET)
    root = tmp_path / "s"
    root.mkdir()
    stager = submissions._Stager(root)
    with pytest.raises(submissions._Budget) as raised:
        stager.add("grows.json", io.BytesIO(b"\0" * (4 << 20)), 10)
    assert raised.value.entry == "grows.json"
    assert stager.staged.bytes == SMALL_BUDGET.value + 1
    assert staged_files(root) == set()



def windows_zip(path: Path, entries: dict[str, bytes]) -> None:
    """A zip whose entries say an MS-DOS/Windows tool made them (host 0, as PowerShell 5's
    Compress-Archive writes), names as given ('\\' between folders)."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            info.create_system = ZIP_HOST_FAT
            archive.writestr(info, data)


def test_a_windows_zip_is_read_with_its_folders_and_still_checked(tmp_path: Path,
                                                                 fixtures_dir: Path) -> None:
    """``baseline\\a.pt.trace.json.gz`` from a Windows zip is the baseline run's trace (it was
    refused, and the student's only profile with it); names that climb out, are absolute or
    name a drive once '\\' is read as '/' are refused as before, one that mixes '/' and '\\'
    is not guessed (unzip does not either), and markup in a name reaches no page."""
    trace = next((fixtures_dir / "loader_heavy" / "trace").glob("*.pt.trace.json.gz"))
    subs = tmp_path / "subs"
    subs.mkdir()
    windows_zip(subs / "win.zip", {
        "baseline\\": b"", "baseline\\a.pt.trace.json.gz": trace.read_bytes(),
        "..\\..\\evil.txt": b"x", "C:\\Users\\eve\\c.json": b"{}",
        "\\\\server\\share\\d.json": b"{}", "\\root.json": b"{}",
        f"..\\{MARKUP}": b"x", "mixed/a\\b.json": b"{}"})
    outcome = grade_class(subs, parse_rubric(RUBRIC, tmp_path / "rubric.toml"),
                          tmp_path / "out", workers=1)
    (result,) = outcome.results
    assert (result.status, result.total) == ("ok", 1)
    assert [(run.name, run.sources) for run in result.runs] == [
        ("baseline", [("kineto", "baseline/a.pt.trace.json.gz")])]
    assert result.refused == [
        "../../evil.txt: path climbs out of the submission with '..'",
        "C:/Users/eve/c.json: absolute path", "//server/share/d.json: absolute path",
        "/root.json: absolute path", f"../{MARKUP}: path climbs out of the submission with '..'",
        f"mixed/a\\b.json: {BACKSLASH_REASON}"]
    assert result.notes == ["zip made on MS-DOS/Windows: '\\' in 7 entry name(s) read as the "
                            "folder separator, as unzip does"]
    page = (tmp_path / "out" / "students" / "win" / "report.html").read_text()
    assert MARKUP not in page and "../&lt;img src=x onerror=alert(1)&gt;" in page
    feedback = (tmp_path / "out" / "students" / "win" / "feedback.md").read_text()
    assert MARKUP not in feedback and r"../\<img src=x onerror=alert(1)\>" in feedback
