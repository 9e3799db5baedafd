"""``profreport grade``: a class with a good, an empty and a hostile submission, graded from real
profiles (fixtures/, and the Kineto ResNet-50 samples when ../shared/corpus is present)."""

from __future__ import annotations

import csv
import gzip
import importlib
import io
import json
import os
import pickle
import re
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
from line_profiler.line_profiler import LineStats

from profreport import grade
from profreport.cli import main
from profreport.grade import grade_class, grader, submissions
from profreport.grade.grader import Job, grade_submission
from profreport.grade.results import StudentResult
from profreport.grade.rubric import parse_rubric
from profreport.inputs import Limit
from profreport.parsers import parse_file
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

RUBRIC = """\
[assignment]
name = "loader tuning"

[[check]]
id = "profiled"
points = 2
require = ["any"]

[[check]]
id = "loader-fixed"
points = 4
run = "optimized"
expect_verdict_not = "loader-bound"

[[check]]
id = "speedup"
points = 4
metric = "speedup"
baseline = "baseline"
candidate = "optimized"
min = 1.2
partial_from = 1.0

[[check]]
id = "bottleneck-moved"
points = 1
run = "optimized"
expect_verdict = ["compute-bound", "balanced"]

[[check]]
id = "little-wait"
points = 2
metric = "dataloader_fraction"
run = "optimized"
max = 0.1

[[check]]
id = "lprof"
points = 1
require = ["lprof", "kineto"]
partial = true
"""
#: Markup an attacker puts in an archive entry's name.
MARKUP = "<script>alert(1)</script>"


class RunsOnLoad:
    """Pickles as a call of ``func(*args)``: what a malicious .lprof would carry."""

    def __init__(self, func: object, *args: object) -> None:
        self.call = (func, args)

    def __reduce__(self) -> tuple:
        return self.call


def trace_of(fixture: Path) -> Path:
    """The torch.profiler trace of a fixture run folder."""
    return next((fixture / "trace").glob("*.pt.trace.json.gz"))


def good_submission(folder: Path, fixtures_dir: Path) -> None:
    """loader_heavy as the baseline run, compute_heavy as the optimized one (whole folders)."""
    shutil.copytree(fixtures_dir / "loader_heavy", folder / "baseline")
    shutil.copytree(fixtures_dir / "compute_heavy", folder / "optimized")


def add(archive: zipfile.ZipFile, name: str, data: bytes, mode: int = 0o100644) -> None:
    """A zip entry with a Unix mode (so symlinks can be planted)."""
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = mode << 16
    archive.writestr(info, data)


def hostile_zip(path: Path, fixtures_dir: Path, marker: Path) -> None:
    """Two good traces among every trick: code in a pickle, zip-slip, absolute path, symlink out,
    a .lprof naming /etc/passwd, broken JSON, markup in a name."""
    with zipfile.ZipFile(path, "w") as archive:
        add(archive, "baseline/a.pt.trace.json.gz", trace_of(fixtures_dir / "loader_heavy")
            .read_bytes())
        add(archive, "optimized/b.pt.trace.json.gz", trace_of(fixtures_dir / "compute_heavy")
            .read_bytes())
        add(archive, "optimized/evil.lprof",
            pickle.dumps(RunsOnLoad(os.system, f"touch {marker}"), protocol=5))
        add(archive, "baseline/passwd.lprof", pickle.dumps(LineStats(
            {("/etc/passwd", 1, "f"): [(1, 100, 5000), (2, 99, 4000)]}, 1e-6), protocol=5))
        add(archive, "broken/trace.json", b'{"traceEvents": [{"ph": "X", ')
        add(archive, "broken/cut.pt.trace.json.gz", gzip.compress(b'{"traceEvents": []}')[:12])
        add(archive, "broken/export.sqlite", b"SQLite format 3\x00" + b"\xff" * 200)
        add(archive, "../../escaped.txt", b"zip-slip")
        add(archive, "/tmp/absolute.txt", b"absolute")
        add(archive, "optimized/link.pt.trace.json.gz", b"/etc/passwd", 0o120777)
        add(archive, f"../{MARKUP}", b"markup")


def hostile_tar(path: Path, fixtures_dir: Path) -> None:
    """A tar with a good trace, a hard link, a device file and a climbing entry."""
    with tarfile.open(path, "w:gz") as archive:
        archive.add(trace_of(fixtures_dir / "loader_heavy"), "baseline/a.pt.trace.json.gz")
        for name, kind, link in (("baseline/hard.json", tarfile.LNKTYPE, "/etc/passwd"),
                                 ("baseline/dev", tarfile.CHRTYPE, ""),
                                 ("../../up.json", tarfile.REGTYPE, "")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            archive.addfile(info, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)


def tree(folder: Path) -> set[str]:
    """Every path under ``folder``."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path
           ) -> tuple[Path, dict[str, StudentResult], set[str], Path]:
    """The class graded once: (out folder, results by student, files around it before, marker)."""
    root = tmp_path_factory.mktemp("class")
    subs = root / "submissions"
    good_submission(subs / "good", fixtures_dir)
    (subs / "empty").mkdir()
    marker = root / "pwned"
    hostile_zip(subs / "mallory.zip", fixtures_dir, marker)
    hostile_tar(subs / "oscar.tgz", fixtures_dir)
    (subs / "trudy" / "baseline").mkdir(parents=True)
    (subs / "trudy" / "baseline" / "t.pt.trace.json.gz").symlink_to(
        trace_of(fixtures_dir / "loader_heavy"))
    (subs / "notes.txt").write_text("not a submission")
    # The same trace, decompressed and compressed again: other bytes, same recorded timings.
    trace = trace_of(fixtures_dir / "compute_heavy")
    (subs / "carl" / "baseline").mkdir(parents=True)
    shutil.copy(trace, subs / "carl" / "baseline")
    (subs / "dana" / "baseline").mkdir(parents=True)
    (subs / "dana" / "baseline" / "mine.pt.trace.json.gz").write_bytes(
        gzip.compress(gzip.decompress(trace.read_bytes()), compresslevel=1, mtime=1))
    (root / "rubric.toml").write_text(RUBRIC)
    before = tree(root)
    out = root / "out"
    rubric = parse_rubric(RUBRIC, root / "rubric.toml")
    outcome = grade_class(subs, rubric, out, workers=2, lms="canvas")
    return out, {r.student: r for r in outcome.results}, before, marker


def test_gradebook_rows_and_totals(graded: tuple) -> None:
    out, results, _, _ = graded
    rows = list(csv.DictReader((out / "gradebook.csv").open()))
    assert [r["student"] for r in rows] == ["carl", "dana", "empty", "good", "mallory", "oscar",
                                            "trudy"]
    good = next(r for r in rows if r["student"] == "good")
    # loader_heavy is loader-bound, compute_heavy compute-bound with a 1.5x-width network: the
    # fixtures' unprofiled throughputs differ 5.15x (beyond their noise), past the rubric's
    # 1.2x, so the speedup check gives its full 4 points: 2 + 4 + 4 + 1 + 2 + 1 = 14.
    assert (good["profiled"], good["loader-fixed"], good["speedup"], good["bottleneck-moved"],
            good["little-wait"], good["lprof"]) == ("2.0", "4.0", "4.0", "1.0", "2.0", "1.0")
    assert (good["total"], good["max_total"], good["status"]) == ("14.0", "14.0", "ok")
    speedup = next(c for c in results["good"].checks if c.id == "speedup")
    assert "5.15×" in speedup.measured and "needs ≥ 1.2" in speedup.measured
    data = json.loads((out / "gradebook.json").read_text())
    assert data["schema"] == "profreport-gradebook/1"
    assert [s["total"] for s in data["students"]] == [float(r["total"]) for r in rows]


def test_empty_submission_is_an_error_with_zero(graded: tuple) -> None:
    _, results, _, _ = graded
    empty = results["empty"]
    assert (empty.status, empty.error, empty.total) == ("error", "no profiles in the submission",
                                                         0)
    assert all(c.points == 0 for c in empty.checks)


def test_hostile_zip_is_graded_from_its_good_files(graded: tuple) -> None:
    out, results, _, marker = graded
    mallory = results["mallory"]
    assert mallory.status == "ok"
    assert not marker.exists()  # the pickle's os.system never ran
    refused = "\n".join(mallory.refused)
    assert "../../escaped.txt: path climbs out of the submission with '..'" in refused
    assert "/tmp/absolute.txt: absolute path" in refused
    assert "optimized/link.pt.trace.json.gz: a symbolic link" in refused
    failures = "\n".join(mallory.failures)
    assert "evil.lprof: refused: the file asks to load posix.system" in failures
    assert "broken/trace.json: truncated trace" in failures
    assert "broken/cut.pt.trace.json.gz: " in failures
    assert "broken/export.sqlite: " in failures
    checks = {c.id: c for c in mallory.checks}
    # Both traces read: baseline loader-bound, optimized compute-bound.
    assert checks["loader-fixed"].passed and checks["profiled"].passed
    # The .lprof naming /etc/passwd was read (hit counts) but its "source" is never shown.
    assert mallory.runs[0].source_missing
    assert checks["lprof"].points == 1.0


def test_tar_links_devices_and_symlinked_folders_refused(graded: tuple) -> None:
    _, results, _, _ = graded
    refused = "\n".join(results["oscar"].refused)
    assert "baseline/hard.json: a hard link to '/etc/passwd'" in refused
    assert "baseline/dev: a character device, not a regular file" in refused
    assert "../../up.json: path climbs out" in refused
    assert results["oscar"].status == "ok"
    trudy = results["trudy"]
    assert "baseline/t.pt.trace.json.gz: a symbolic link" in "\n".join(trudy.refused)
    assert (trudy.status, trudy.error) == ("error", "no profiles in the submission")


def test_nothing_outside_out_and_no_local_file_leaks(graded: tuple) -> None:
    out, _, before, _ = graded
    root = out.parent
    assert tree(root) - before == {p for p in tree(root) if p.startswith("out")}
    passwd = Path("/etc/passwd").read_text().splitlines()[0]
    for path in out.rglob("*"):
        if path.is_file():
            assert passwd not in path.read_text(errors="replace"), path
    assert not (out / "staging").exists()
    # Nor the grader's own folders: students see their files as they named them.
    pages = [*(out / "students").rglob("*.*"), *out.glob("gradebook*"), out / "summary.html"]
    assert not [page for page in pages if str(out.resolve()) in page.read_text()]


def test_names_from_submissions_are_escaped(graded: tuple) -> None:
    out, results, _, _ = graded
    assert any(MARKUP in line for line in results["mallory"].refused)
    page = (out / "students" / "mallory" / "report.html").read_text()
    assert MARKUP not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    feedback = (out / "students" / "mallory" / "feedback.md").read_text()
    assert MARKUP not in feedback and r"\<script\>alert(1)\</script\>" in feedback


def test_feedback_says_what_was_measured(graded: tuple) -> None:
    out, _, _, _ = graded
    feedback = (out / "students" / "good" / "feedback.md").read_text()
    assert "Your optimized run is compute-bound" in feedback
    # torch.profiler's share of loader_heavy's step waiting for data: 91.9% (test_findings).
    assert "baseline: loader-bound, 91.9% of each step waiting for data" in feedback
    assert "graded from its hit counts only" in feedback  # the fixture .lprof's script is absent
    page = (out / "students" / "good" / "report.html").read_text()
    assert "loader tuning" in page and "14 / 14" in page


def test_summary_and_lms(graded: tuple) -> None:
    out, _, _, _ = graded
    summary = (out / "summary.html").read_text()
    assert "class summary" in summary and "notes.txt" in summary
    # good and mallory handed in the same loader_heavy and compute_heavy traces.
    assert "Identical profiles" in summary and "good, mallory" in summary
    groups = json.loads((out / "gradebook.json").read_text())["summary"]["duplicates"]
    # dana's copy differs in bytes from carl's and mallory's, not in what the profiler recorded.
    assert {"students": ["carl", "dana", "mallory"], "what": "same recorded step and operator "
            "timings (timestamps aside): "
            "carl run baseline, dana run baseline, mallory run optimized"} in groups
    assert not any("dana" in g["students"] and "content" in g["what"] for g in groups)
    rows = list(csv.reader((out / "gradebook-canvas.csv").open()))
    assert rows[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert rows[1][0] == "Points Possible" and rows[1][-1] == "14.0"
    assert ["good", "", "", "good", "", "14.0"] in rows  # full marks, as in the gradebook


def test_rerun_reuses_unchanged_and_regrades_changed(tmp_path: Path, fixtures_dir: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    subs = tmp_path / "subs"
    good_submission(subs / "a", fixtures_dir)
    shutil.copytree(fixtures_dir / "loader_heavy", subs / "b" / "optimized")
    rubric = parse_rubric(RUBRIC, tmp_path / "rubric.toml")
    first = grade_class(subs, rubric, tmp_path / "out")
    assert [r.reused for r in first.results] == [False, False]
    assert first.results[1].checks[1].points == 0  # b's optimized run is loader-bound
    shutil.rmtree(subs / "b" / "optimized")
    shutil.copytree(fixtures_dir / "compute_heavy", subs / "b" / "optimized")
    second = grade_class(subs, rubric, tmp_path / "out")
    assert [r.reused for r in second.results] == [True, False]
    assert second.results[1].checks[1].points == 4
    assert second.results[0].to_json() | {"reused": False} == first.results[0].to_json()
    changed = parse_rubric(RUBRIC.replace("points = 4\nrun", "points = 5\nrun"),
                           tmp_path / "rubric.toml")
    third = grade_class(subs, changed, tmp_path / "out")
    assert [r.reused for r in third.results] == [False, False]
    assert third.results[1].checks[1].points == 5
    # A change to the grading code (not to the version number) regrades everything.
    monkeypatch.setattr(grader, "code_digest", lambda: "another grader")
    fourth = grade_class(subs, changed, tmp_path / "out")
    assert [r.reused for r in fourth.results] == [False, False]
    # Staged copies keep their files' times, so three gradings of two distinct nsys reports
    # leave two exports in the cache, not one per staging.
    if shutil.which("nsys"):
        assert len(list((tmp_path / "out" / "cache" / "nsys").glob("*.sqlite"))) == 2


def test_the_code_digest_follows_the_code(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The grading code's digest changes with any of its files (a check, a template)."""
    execute = importlib.import_module("profreport.grade.execute")  # the package's execute()
    package = tmp_path / "gradingcode"
    (package / "checks").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "checks" / "rule.py").write_text("LIMIT = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(execute, "GRADING_PACKAGES", ("gradingcode",))
    try:
        execute.code_digest.cache_clear()
        before = execute.code_digest()
        (package / "checks" / "rule.py").write_text("LIMIT = 2\n")
        execute.code_digest.cache_clear()
        assert execute.code_digest() != before
    finally:
        execute.code_digest.cache_clear()


def test_archive_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("a.json", b"\0" * (4 << 20))
        archive.writestr("b.json", b"{}")
    assert bomb.stat().st_size < 10_000
    monkeypatch.setattr(submissions, "MAX_UNPACKED_BYTES",
                        Limit("unpacked bytes", 1 << 20, "test"))
    staged = submissions.stage(submissions.Submission("bomb", bomb), tmp_path / "s1")
    # The refusal names the entry that crossed the limit (it said 'the rest of the submission',
    # naming no file: a teacher could not tell which file of a folder was too large).
    assert staged.refused == ["a.json and every entry after it: not unpacked: more than "
                              "1,048,576 unpacked bytes (test)"]
    assert tree(tmp_path / "s1") == set()
    many = tmp_path / "many.zip"
    with zipfile.ZipFile(many, "w") as archive:
        for i in range(5):
            archive.writestr(f"f{i}.json", b"{}")
    monkeypatch.setattr(submissions, "MAX_FILES", Limit("files", 3, "test"))
    staged = submissions.stage(submissions.Submission("many", many), tmp_path / "s2")
    assert tree(tmp_path / "s2") == {"f0.json", "f1.json", "f2.json"}
    assert staged.refused == ["f3.json and every entry after it: not unpacked: more than 3 "
                              "files (test)"]


def test_a_folder_past_the_limit_is_not_copied_not_unpacked(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """A folder (no archive) past the file limit says its rest was not copied: it said 'not
    unpacked', of a folder nothing is unpacked from."""
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(5):
        (folder / f"f{i}.json").write_text("{}")
    monkeypatch.setattr(submissions, "MAX_FILES", Limit("files", 3, "test"))
    staged = submissions.stage(submissions.Submission("many", folder), tmp_path / "s")
    assert tree(tmp_path / "s") == {"f0.json", "f1.json", "f2.json"}
    assert staged.refused == ["f3.json and every entry after it: not copied: more than 3 "
                              "files (test)"]


def test_a_backslash_in_a_name_is_refused_never_a_folder(tmp_path: Path) -> None:
    """A '\\' in an entry's name is refused with the reason, in a zip made on Linux, a tar and
    a folder: it was split into folders ('optimized\\trace.json' became optimized/trace.json, a
    run the student never made; on Linux the name is one file's). Only a zip made on Windows
    separates folders with it (tests/test_grade_staging.py)."""
    name = "optimized\\trace.json"
    with zipfile.ZipFile(tmp_path / "z.zip", "w") as archive:
        archive.writestr(name, b"{}")
        archive.writestr("baseline/trace.json", b"{}")
    with tarfile.open(tmp_path / "t.tar", "w") as archive:
        for member in (name, "baseline/trace.json"):
            info = tarfile.TarInfo(member)
            info.size = 2
            archive.addfile(info, io.BytesIO(b"{}"))
    (tmp_path / "f" / "baseline").mkdir(parents=True)
    (tmp_path / "f" / name).write_text("{}")
    (tmp_path / "f" / "baseline" / "trace.json").write_text("{}")
    for entry in ("z.zip", "t.tar", "f"):
        staged = submissions.stage(submissions.Submission("s", tmp_path / entry),
                                   tmp_path / "staged" / entry)
        assert tree(tmp_path / "staged" / entry) == {"baseline", "baseline/trace.json"}
        assert staged.refused == [f"{name}: a '\\' in the name: on Linux it is part of one "
                                  "name, never a folder separator (archives separate folders "
                                  "with '/'); rename the file, or make the archive again with "
                                  "'/' between folders"]


def test_a_profile_the_manifest_does_not_list_is_named_in_the_feedback(tmp_path: Path,
                                                                        fixtures_dir: Path
                                                                        ) -> None:
    """A profile added beside a runner's manifest that its artifacts do not list is not read,
    and the student's feedback names it: it was left out without a word."""
    subs = tmp_path / "subs"
    for run, fixture in (("baseline", "loader_heavy"), ("optimized", "compute_heavy")):
        (subs / "ann" / run).mkdir(parents=True)
        shutil.copy(fixtures_dir / fixture / "manifest.json", subs / "ann" / run)
        shutil.copytree(fixtures_dir / fixture / "trace", subs / "ann" / run / "trace")
    shutil.copy(fixtures_dir / "loader_heavy" / "train.lprof",
                subs / "ann" / "optimized" / "extra.lprof")
    outcome = grade_class(subs, parse_rubric(RUBRIC, tmp_path / "r.toml"), tmp_path / "out")
    optimized = next(run for run in outcome.results[0].runs if run.name == "optimized")
    note = ("not read: extra.lprof (beside manifest.json, which does not list it in its "
            "artifacts: a run folder with a manifest is read from its artifacts only)")
    assert note in optimized.notes
    assert [kind for kind, _ in optimized.sources] == ["kineto"]
    feedback = (tmp_path / "out" / "students" / "ann" / "feedback.md").read_text()
    assert "not read: extra.lprof (beside manifest.json" in feedback


def test_unreadable_archive_is_that_students_error(tmp_path: Path, fixtures_dir: Path) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "zed.zip").write_bytes(b"PK\x03\x04 not really")
    good_submission(subs / "amy", fixtures_dir)
    outcome = grade_class(subs, parse_rubric(RUBRIC, tmp_path / "r.toml"), tmp_path / "out")
    by_name = {r.student: r for r in outcome.results}
    assert by_name["amy"].status == "ok"
    assert by_name["zed"].status == "error" and "not a readable zip archive" in by_name[
        "zed"].error


def test_a_run_of_unreadable_files_keeps_each_reason_whole(tmp_path: Path,
                                                          fixtures_dir: Path) -> None:
    """A run none of whose files can be read keeps each file's reason whole: the reason for a
    file of unknown content holds '; ' itself, and was split into a second 'file' reading 'it
    reads: Nsight Systems report ...' in the feedback's list of files not used."""
    subs = tmp_path / "subs"
    good_submission(subs / "ann", fixtures_dir)
    shutil.rmtree(subs / "ann" / "baseline")
    (subs / "ann" / "baseline").mkdir()
    (subs / "ann" / "baseline" / "notes.pt.trace.json").write_text("not a trace\n")
    outcome = grade_class(subs, parse_rubric(RUBRIC, tmp_path / "r.toml"), tmp_path / "out")
    failures = outcome.results[0].failures
    assert len(failures) == 2 and failures[0].startswith(
        "baseline/notes.pt.trace.json: not a profile profreport knows (unknown content); "
        "it reads: Nsight Systems report")
    assert failures[1] == "baseline: no profiles found in this folder"
    feedback = (tmp_path / "out" / "students" / "ann" / "feedback.md").read_text()
    assert "\n- it reads:" not in feedback


@pytest.mark.corpus
def test_resnet_num_workers_fix_earns_every_point(tmp_path: Path, corpus: Path) -> None:
    subs = tmp_path / "subs"
    for run, workers in (("baseline", 0), ("optimized", 4)):
        (subs / "ann" / run).mkdir(parents=True)
        shutil.copy(corpus / "kineto" / f"resnet50_num_workers_{workers}.pt.trace.json.gz",
                    subs / "ann" / run)
    outcome = grade_class(subs, parse_rubric(RUBRIC, tmp_path / "r.toml"), tmp_path / "out")
    ann = outcome.results[0]
    points = {c.id: c.points for c in ann.checks}
    # 174.9 ms -> 139.7 ms per step (1.25x); DataLoader wait 40% -> 1%; no .lprof (half credit).
    assert points == {"profiled": 2, "loader-fixed": 4, "speedup": 4, "bottleneck-moved": 1,
                      "little-wait": 2, "lprof": 0.5}
    speedup = next(c for c in ann.checks if c.id == "speedup")
    assert "126.6 ms against 176.3 ms" in speedup.measured and "1.39×" in speedup.measured


def test_cli_grade_and_rubric_error_line(tmp_path: Path, fixtures_dir: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    subs = tmp_path / "subs"
    good_submission(subs / "a", fixtures_dir)
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(RUBRIC.replace('run = "optimized"\nmax', 'run = "optimized"\nmaxx'))
    assert main(["grade", str(subs), "--rubric", str(rubric), "--out",
                 str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"profreport: error: {rubric}:35: unknown key 'maxx' in [check]")
    assert not (tmp_path / "out").exists()
    rubric.write_text(RUBRIC)
    assert main(["grade", str(subs), "--rubric", str(rubric), "--out", str(tmp_path / "out"),
                 "--processes", "1"]) == 0
    assert "a: 14/14 ok" in capsys.readouterr().out  # the fixtures' 5.15x: full marks
    assert stat.S_ISREG(os.stat(tmp_path / "out" / "gradebook.csv").st_mode)


def crash_on_zed(job: Job) -> StudentResult:
    """Grade as usual, except that zed's grading process dies (as on an out-of-memory kill)."""
    if job.submission.student == "zed":
        os._exit(9)
    return grade_submission(job)


def test_a_dying_worker_costs_only_its_submission(tmp_path: Path, fixtures_dir: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    subs = tmp_path / "subs"
    for name in ("amy", "zed"):
        (subs / name / "baseline").mkdir(parents=True)
        shutil.copy(trace_of(fixtures_dir / "loader_heavy"), subs / name / "baseline")
    monkeypatch.setattr(grade, "grade_submission", crash_on_zed)
    outcome = grade_class(subs, parse_rubric(RUBRIC, tmp_path / "r.toml"), tmp_path / "out",
                          workers=2)
    by_name = {r.student: r for r in outcome.results}
    assert by_name["amy"].status == "ok" and by_name["amy"].total == 2.5
    assert (by_name["zed"].status, by_name["zed"].error) == (
        "error", "the grading process died (killed, or out of memory)")


def test_lprof_without_its_script_is_graded_from_hit_counts(tmp_path: Path,
                                                            fixtures_dir: Path) -> None:
    subs = tmp_path / "subs"
    for run, fixture in (("baseline", "loader_heavy"), ("optimized", "compute_heavy")):
        (subs / "lena" / run).mkdir(parents=True)
        shutil.copy(fixtures_dir / fixture / "train.lprof", subs / "lena" / run)
    outcome = grade_class(subs, parse_rubric(RUBRIC, tmp_path / "r.toml"), tmp_path / "out")
    lena = outcome.results[0]
    assert [(run.name, run.verdict, run.source_missing) for run in lena.runs] == [
        ("baseline", "loader-bound", True), ("optimized", "compute-bound", True)]
    # Without manifests the speedup is the line profiles' mean pass, 4545.8 ms -> 1816.5 ms:
    # 2.50x, past the rubric's 1.2x, full 4 points.
    assert {c.id: c.points for c in lena.checks} == {
        "profiled": 2, "loader-fixed": 4, "speedup": 4, "bottleneck-moved": 1,
        "little-wait": 2, "lprof": 0.5}
    speedup = next(c for c in lena.checks if c.id == "speedup")
    assert "2.50×" in speedup.measured
    feedback = (tmp_path / "out" / "students" / "lena" / "feedback.md").read_text()
    assert "graded from its hit counts only" in feedback
    # The fixture's .lprof records the runner's train.py where make_fixtures.py ran: a file
    # outside the submission when that checkout still exists, else one that is not there.
    recorded = next(f.file for f in parse_file(
        fixtures_dir / "loader_heavy" / "train.lprof").meta.functions)
    why = ("it lies outside baseline, your submission" if Path(recorded).is_file() else
           "not found beside the .lprof")
    assert f"runner/train.py) not shown: {why}" in feedback


def test_a_speedup_from_step_times_says_why_the_throughput_was_set_aside(
        tmp_path: Path, fixtures_dir: Path) -> None:
    """Both runs' manifests record their unprofiled throughput, but the optimized run's launch
    shared the CPUs with other work, so the speedup is the profiled step-time ratio: the check
    said nothing of it ('(no manifest with throughput)' when the batches were alike), untrue
    of these runs; it now says why."""
    subs = tmp_path / "submissions"
    shutil.copytree(fixtures_dir / "loader_heavy", subs / "eve" / "baseline")
    shutil.copytree(fixtures_dir / "compute_heavy", subs / "eve" / "optimized")
    manifest_path = subs / "eve" / "optimized" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    plain = next(launch for launch in manifest["launches"] if launch["profiler"] == "none")
    plain.update(cpus=2, cpu_s=0.4 * plain["wall_time_s"], other_cpu_s=1.55 * plain["wall_time_s"])
    manifest_path.write_text(json.dumps(manifest))
    outcome = grade_class(subs, parse_rubric(RUBRIC, tmp_path / "r.toml"), tmp_path / "out",
                          workers=1)
    speedup = next(c for c in outcome.results[0].checks if c.id == "speedup")
    assert ("Profiled step time of baseline over optimized, x 128/64 samples per step "
            "(samples/s, not steps/s; the unprofiled runs' throughput set aside: their launches "
            "shared the CPUs):") in speedup.measured
    # The figure is the step-time ratio the check states, scaled to samples once (the check
    # scaled the comparison's per-sample figure again by 128/64: 2.76x for these 1.38x).
    steps = re.search(r"A step of optimized takes ([\d.,]+) ms against ([\d.,]+) ms",
                      speedup.measured)
    cand_ms, base_ms = (float(steps.group(i).replace(",", "")) for i in (1, 2))
    ratio = float(re.search(r"shared the CPUs\): ([\d.]+)×", speedup.measured).group(1))
    assert ratio == pytest.approx(base_ms / cand_ms * 128 / 64, abs=0.005)
    assert "no manifest with throughput" not in speedup.measured


def test_a_copied_profile_with_an_operator_renamed_is_still_identical(
        tmp_path: Path, fixtures_dir: Path) -> None:
    """rita hands in carl's trace with its busiest operator renamed (as a real hostile
    submission did, to '<script>...'): every recorded timing is carl's, yet the class summary
    did not list them as identical profiles, the fingerprint hashing operator names too."""
    trace = trace_of(fixtures_dir / "compute_heavy")
    subs = tmp_path / "submissions"
    (subs / "carl" / "baseline").mkdir(parents=True)
    shutil.copy(trace, subs / "carl" / "baseline")
    top = analyze_paths([trace], AnalyzeOptions()).runs[0].metrics.top_ops[0].name
    document = json.loads(gzip.decompress(trace.read_bytes()))
    for event in document["traceEvents"]:
        if event.get("name") == top:
            event["name"] = "<script>alert(1)</script>"
    (subs / "rita" / "baseline").mkdir(parents=True)
    (subs / "rita" / "baseline" / "mine.pt.trace.json").write_text(json.dumps(document))
    grade_class(subs, parse_rubric(RUBRIC, tmp_path / "r.toml"), tmp_path / "out", workers=1)
    groups = json.loads((tmp_path / "out" / "gradebook.json").read_text())["summary"]
    assert {"students": ["carl", "rita"], "what": "same recorded step and operator timings "
            "(timestamps aside): carl run baseline, rita run baseline"} in groups["duplicates"]
