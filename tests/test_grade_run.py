"""``profreport grade --run``: a class of real scripts (good, slower, wrong loss, hostile on a
smaller batch, copied) run by the grader in the sandbox beside the reference, and graded on what
the grader measured; the rubric's [run] table; the fair comparison on trials built by hand."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from profreport.errors import RubricError
from profreport.grade.execute import Measured, Trial
from profreport.grade.fair import compare
from profreport.grade.rubric import RunSpec, parse_rubric
from profreport.grade.submissions import BACKSLASH_REASON

CLASS = Path(__file__).resolve().parent / "scripts" / "grade_class"
RUBRIC = CLASS / "rubric.toml"
#: What each kind of student changes in the reference script (old text -> new text).
SLOW_SAMPLE = """        values = self.x[index].tolist()
        for _ in range(args.work):
            values = [value * 1.0 for value in values]
        return torch.tensor(values), self.y[index]"""
FAST_SAMPLE = "        return self.x[index], self.y[index]"
EDITS = {
    "good": [(SLOW_SAMPLE, FAST_SAMPLE)],
    "slower": [("range(args.work)", "range(2 * args.work)")],
    "wrong": [(SLOW_SAMPLE, FAST_SAMPLE), ("lr=0.05", "lr=0.0")],
    "small": [(SLOW_SAMPLE, FAST_SAMPLE),
              ("batch_size=args.batch_size", "batch_size=args.batch_size // 4")],
}
#: Submission folder -> the script it hands in as train.py (the hostile one, once it has tried
#: its attacks, runs the one that trains on a quarter of the batch; 王小明 copied good's).
STUDENTS = {"good": "good", "slower": "slower", "wrong": "wrong", "hostile": "hostile.py",
            "王小明": "good"}
#: The script the hostile submission runs after its attacks, handed in beside it.
HOSTILE_TRAINS = "small"


def student_script(kind: str) -> str:
    """The reference script with one kind of student's changes."""
    text = (CLASS / "reference.py").read_text()
    for old, new in EDITS[kind]:
        assert old in text
        text = text.replace(old, new)
    return text


def make_class(folder: Path, students: dict[str, str]) -> Path:
    """A folder of submissions, each a folder holding its train.py."""
    for student, kind in students.items():
        (folder / student).mkdir(parents=True)
        if kind == "hostile.py":
            shutil.copy(CLASS / kind, folder / student / "train.py")
            (folder / student / "train_copy.py").write_text(student_script(HOSTILE_TRAINS))
        else:
            (folder / student / "train.py").write_text(student_script(kind))
    return folder


def grade(subs: Path, out: Path, *extra: str, rubric: Path = RUBRIC
          ) -> subprocess.CompletedProcess[str]:
    """The teacher's command."""
    return subprocess.run([sys.executable, "-m", "profreport", "grade", str(subs), "--rubric",
                           str(rubric), "--out", str(out), "--lms", "canvas", *extra],
                          capture_output=True, text=True, check=False, timeout=1200)


def quick_rubric(folder: Path) -> Path:
    """The class's rubric and reference in ``folder``, the reference's loader doing one pass
    over each sample (``--work 1``, the same values and loss): for tests that compare no
    speeds, the reference's trials take the launch's start-up and little more."""
    folder.mkdir()
    shutil.copy(CLASS / "reference.py", folder / "reference.py")
    text = RUBRIC.read_text()
    assert '"--work", "1000"' in text
    (folder / "rubric.toml").write_text(text.replace('"--work", "1000"', '"--work", "1"'))
    return folder / "rubric.toml"


def students(out: Path) -> dict[str, dict]:
    """gradebook.json's students by name."""
    data = json.loads((out / "gradebook.json").read_text(encoding="utf-8"))
    return {student["student"]: student for student in data["students"]}


def checks(student: dict) -> dict[str, dict]:
    """A student's checks by id."""
    return {check["id"]: check for check in student["checks"]}


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_available")
def test_a_class_run_by_the_grader(tmp_path: Path) -> None:
    """Good earns the speedup; slower earns none; a run that does not train, or trains on a
    smaller batch (the hostile one's), is not compared; the hostile one is contained; the copy
    is found; a regrade reuses every measurement."""
    subs = make_class(tmp_path / "subs", STUDENTS)
    out = tmp_path / "out"
    done = grade(subs, out, "--run", "--jobs", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    graded = students(out)
    assert set(graded) == set(STUDENTS)

    good = graded["good"]
    assert good["status"] == "ok" and good["total"] == 7
    fair = good["measured"]
    assert fair["speedup"] > 1.3 and not fair["within_noise"]
    assert min(fair["submission"]) > max(fair["reference"])
    assert f"{fair['speedup']:.2f}x" in checks(good)["speedup"]["measured"]
    assert fair["loss"] == pytest.approx(fair["reference_loss"], rel=0.05)

    slower = graded["slower"]
    assert slower["measured"]["speedup"] < 1 and checks(slower)["speedup"]["points"] == 0
    assert checks(slower)["trains"]["passed"] and checks(slower)["profiled"]["passed"]

    wrong = checks(graded["wrong"])
    assert not wrong["trains"]["passed"] and wrong["speedup"]["points"] == 0
    assert "does not train is not faster" in wrong["speedup"]["measured"]

    hostile = graded["hostile"]
    assert "batch is 16 samples; the rubric asks for 64" in hostile["measured"]["not_training"]
    assert checks(hostile)["speedup"]["points"] == 0

    hostile_log = (out / "runs" / "hostile" / "logs" / "submission-trial0.out").read_text()
    assert "NETWORK REACHED" not in hostile_log and "refused network" in hostile_log
    assert "good" not in hostile_log and "refused /etc/shadow" in hostile_log
    assert (out / "gradebook.csv").is_file() and (subs / "good" / "train.py").is_file()

    summary = json.loads((out / "gradebook.json").read_text())["summary"]
    copied = [group["students"] for group in summary["duplicates"]]
    assert ["good", "王小明"] in copied
    rows = list(csv.reader((out / "gradebook-canvas.csv").open(encoding="utf-8")))
    assert "王小明" in [row[0] for row in rows]

    started = time.monotonic()
    again = grade(subs, out, "--run", "--jobs", "1")
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("(unchanged, reused)") == len(STUDENTS)
    assert time.monotonic() - started < 60


RUN_TABLE = """
[run]
reference = "reference.py"
steps = 60
batch_size = 64
"""
SPEEDUP = """
[[check]]
id = "speedup"
points = 4
metric = "speedup"
baseline = "{baseline}"
candidate = "{candidate}"
min = 1.3
"""


def test_rubric_run_table(tmp_path: Path) -> None:
    """[run] resolves the reference beside the rubric; trains needs [run]; under [run] the
    speedup compares the submission with the reference; a missing reference is refused."""
    (tmp_path / "reference.py").write_text("print(1)\n")
    path = tmp_path / "rubric.toml"
    text = RUN_TABLE + SPEEDUP.format(baseline="reference", candidate="submission")
    rubric = parse_rubric(text, path)
    assert rubric.run is not None and rubric.run.reference == tmp_path / "reference.py"
    assert rubric.run.trials == 3 and rubric.run.profilers == ("kernprof", "torch")
    with pytest.raises(RubricError, match="baseline = 'reference'"):
        parse_rubric(RUN_TABLE + SPEEDUP.format(baseline="a", candidate="b"), path)
    with pytest.raises(RubricError, match="a trains check needs a \\[run\\] table"):
        parse_rubric("[[check]]\nid = 't'\npoints = 1\ntrains = true\n", path)
    with pytest.raises(RubricError, match="no such file"):
        parse_rubric(RUN_TABLE.replace("reference.py", "gone.py") + SPEEDUP.format(
            baseline="reference", candidate="submission"), path)
    with pytest.raises(RubricError, match="trials = 1: expected a whole number of at least 2"):
        parse_rubric(RUN_TABLE + "trials = 1\n" + SPEEDUP.format(
            baseline="reference", candidate="submission"), path)


def trials(who: str, walls: list[float], loss: float = 0.5, steps: int = 60,
           batch: int = 64) -> list[Trial]:
    """Trials of one script, as the runner's step hooks and the grader's clock record them."""
    return [Trial(who, index, wall, 0, steps, batch, [1.0, loss])
            for index, wall in enumerate(walls)]


def spec(**changes: object) -> RunSpec:
    """The [run] table of the comparisons below."""
    return RunSpec(**{"reference": Path("reference.py"), "steps": 60, "batch_size": 64,
                      **changes})  # type: ignore[arg-type]


def test_fair_speedup_in_samples_per_second() -> None:
    """Samples/s = steps x batch over the grader's wall time; speedup of the medians; the
    trial-by-trial spread."""
    measured = Measured("k", trials("reference", [4.0, 4.4, 4.2]) +
                        trials("submission", [2.0, 2.1, 2.2]))
    fair = compare(measured, spec())
    assert fair.reference == [960.0, 872.727, 914.286]
    assert fair.speedup == pytest.approx(1828.571 / 914.286, rel=1e-4)
    assert fair.low == pytest.approx(1745.455 / 914.286, rel=1e-4)
    assert not fair.within_noise and fair.graded_speedup == fair.speedup


def test_fair_within_noise_counts_as_no_change() -> None:
    """Trials that overlap the reference's, or a speedup inside the trials' spreads: within
    noise, graded as 1.00x."""
    measured = Measured("k", trials("reference", [4.0, 4.6]) + trials("submission", [3.9, 4.5]))
    fair = compare(measured, spec())
    assert fair.speedup is not None and fair.speedup > 1
    assert fair.within_noise and fair.graded_speedup == 1.0
    # Apart, every pair faster, but by less than the two sides' spreads (9.5% + 10.8%).
    apart = compare(Measured("k", trials("reference", [4.0, 4.4]) +
                             trials("submission", [3.5, 3.9])), spec())
    assert min(apart.submission) > max(apart.reference) and apart.low > 1
    assert apart.speedup == pytest.approx(1.136, abs=1e-3) and apart.within_noise


def test_fair_refuses_fewer_steps_another_batch_or_loss() -> None:
    """Fewer steps, a smaller batch (unless allowed) or a loss off the reference's: not
    compared, whatever the clock says."""
    reference = trials("reference", [4.0, 4.0])
    fewer = compare(Measured("k", reference + trials("submission", [1.0, 1.0], steps=30)),
                    spec())
    assert fewer.not_training == "it made 30 optimizer steps; the rubric asks for 60"
    assert fewer.graded_speedup == 0.0
    small = trials("submission", [1.0, 1.0], batch=16)
    assert "batch is 16" in compare(Measured("k", reference + small), spec()).not_training
    allowed = compare(Measured("k", reference + small), spec(allow_batch_change=True))
    assert allowed.speedup == pytest.approx(1.0)
    off = compare(Measured("k", reference + trials("submission", [1.0, 1.0], loss=0.6)), spec())
    assert "loss after 60 steps is 0.6" in off.not_training


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.usefixtures("sandbox_available", "slurm_available")
def test_grade_run_on_slurm(tmp_path: Path) -> None:
    """--slurm: two submissions, one array task each on the local Slurm, in the same sandbox:
    the good one earns the speedup, the one that does not train earns none; each task's Slurm
    log and measurement are there."""
    subs = make_class(tmp_path / "subs", {"good": "good", "wrong": "wrong"})
    out = tmp_path / "out"
    done = grade(subs, out, "--run", "--slurm", "--jobs", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Slurm array" in done.stderr and "ended" in done.stderr
    jobs = json.loads((out / "runs" / "jobs.json").read_text())
    assert [name for name, _ in jobs["submissions"]] == ["good", "wrong"]
    assert len(sorted((out / "runs").glob("slurm-*_*.out"))) == 2
    graded = students(out)
    assert graded["good"]["measured"]["speedup"] > 1.3
    assert checks(graded["good"])["speedup"]["passed"]
    assert not checks(graded["wrong"])["trains"]["passed"]
    assert checks(graded["wrong"])["speedup"]["points"] == 0
    for name in ("good", "wrong"):
        measured = json.loads((out / "runs" / name / "measured.json").read_text())
        assert len(measured["trials"]) == 4 and measured["run_folder"]


#: A stand-in for Slurm's commands: sbatch submits array 42; squeue answers, call by call, with
#: the lines of ``$FAKE/answers`` (``STATUS|STDOUT|STDERR``; the last repeats).
FAKE_SBATCH = """#!/bin/sh
echo "$@" > "$FAKE/sbatch.args"
echo '42;cluster'
"""
FAKE_SQUEUE = """#!/bin/sh
echo "$@" >> "$FAKE/squeue.args"
line=$(sed -n "$(wc -l < "$FAKE/squeue.args")p" "$FAKE/answers")
[ -n "$line" ] || line=$(tail -n 1 "$FAKE/answers")
printf '%s' "$line" | cut -d'|' -f2 | sed '/^$/d'
printf '%s' "$line" | cut -d'|' -f3 | sed '/^$/d' >&2
exit "$(printf '%s' "$line" | cut -d'|' -f1)"
"""


@pytest.mark.parametrize(("answers", "asked"), [
    (["0|PENDING|", "1||slurm_load_jobs error: Socket timed out on send/recv operation",
      "0|RUNNING|", "0||"], 4),
    (["1||slurm_load_jobs error: Invalid job id specified"], 1)])
def test_slurm_array_is_waited_for_by_squeue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             answers: list[str], asked: int) -> None:
    """--slurm submits the array and asks squeue after it until it lists no task of the array
    (the array ended), or the controller no longer knows the job; squeue's other failures are
    asked again. Before, ``sbatch --wait`` waited, looking at the job only every 32 s once it
    had run half a minute, so the grader sat idle up to 32 s after the array ended."""
    from profreport.grade import slurm
    from profreport.grade.execute import RunJob
    from profreport.grade.rubric import load_rubric
    from profreport.grade.submissions import Submission

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("squeue", FAKE_SQUEUE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "answers").write_text("\n".join(answers) + "\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE", str(tmp_path))
    monkeypatch.setattr(slurm, "POLL_S", 0.01, raising=False)
    rubric = load_rubric(RUBRIC)
    runs = tmp_path / "runs"
    job = RunJob(Submission("good", tmp_path / "subs" / "good"), rubric, runs / "good")
    assert slurm.run_on_slurm([job], rubric, runs) == "42"
    assert "--wait" not in (tmp_path / "sbatch.args").read_text().split()
    asks = (tmp_path / "squeue.args").read_text().splitlines()
    assert asks == ["--noheader --jobs 42 --format %T"] * asked


def test_run_without_a_sandbox_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    """Without bubblewrap, --run stops before any student's script runs, with one line."""
    subs = make_class(tmp_path / "subs", {"good": "good"})
    monkeypatch.setenv("PATH", str(tmp_path))
    done = grade(subs, tmp_path / "out", "--run")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith(
        "profreport: error: sandbox unavailable: bubblewrap (bwrap) is not installed")
    assert not (tmp_path / "out" / "runs").exists()


def test_what_the_sandbox_leaves_is_read_safely(tmp_path: Path) -> None:
    """Step marks left as a FIFO (which would block a reader) or a link are not read; links
    and FIFOs in the run folder are removed before the analysis sees it."""
    from profreport.grade.execute import _read_marks, _regular_only

    fifo = tmp_path / "trial0.rank0.json"
    os.mkfifo(fifo)
    trial = Trial("submission", 0, 1.0, 0)
    _read_marks(fifo, trial)
    assert trial.error == "the run left no readable step marks"
    run = tmp_path / "run"
    (run / "trace").mkdir(parents=True)
    (run / "trace" / "a.pt.trace.json").symlink_to("/etc/passwd")
    os.mkfifo(run / "manifest.json")
    (run / "train.lprof").write_bytes(b"x")
    removed = _regular_only(run)
    assert sorted(removed) == [
        "manifest.json: removed from the run folder (not a regular file)",
        "trace/a.pt.trace.json: removed from the run folder (not a regular file)"]
    assert sorted(p.name for p in run.rglob("*")) == ["trace", "train.lprof"]


def test_a_missing_profiled_run_is_said_to_be_the_graders() -> None:
    """grade --run of a script that fails: the grader makes the run 'submission' itself, yet a
    verdict check on it told the student 'Put the profiles of that run in a folder named
    submission/ in your submission'. It now says the grader's run gave no profile, and why;
    without --run (no trials), the old advice stands."""
    from profreport.grade.checks import Graded, evaluate
    from profreport.grade.fair import Fair
    from profreport.grade.rubric import Check

    check = Check(id="not-loader", points=2, kind="expect_verdict_not", target="loader-bound",
                  run="submission")
    failed = "a trial failed: exit status 1: RuntimeError: boom"
    result = evaluate(check, Graded(runs={}, fair=Fair(not_training=failed)))
    assert (result.points, result.measured) == (
        0.0, f"The grader's profiled run of your script gave no readable profile ({failed}).")
    assert result.advice == ("Make your script run to its end in the grader's sandbox: the "
                             "grader profiles it there itself.")
    handed_in = evaluate(check, Graded(runs={}))
    assert handed_in.advice == ("Put the profiles of that run in a folder named submission/ in "
                                "your submission.")


#: A name an attacker gives an entry of a submission: markup, and a '\\' (refused on Linux).
MARKUP_NAME = "<img src=x onerror=alert(1)>\\x.py"


def add_member(archive: tarfile.TarFile, name: str, data: bytes = b"",
               link: str | None = None) -> None:
    """A regular file ``name`` holding ``data`` (a symbolic link to ``link`` when given)."""
    member = tarfile.TarInfo(name)
    if link is not None:
        member.type, member.linkname = tarfile.SYMTYPE, link
        archive.addfile(member)
        return
    member.size = len(data)
    archive.addfile(member, io.BytesIO(data))


@pytest.mark.slow
@pytest.mark.usefixtures("sandbox_available")
def test_grade_run_says_what_staging_refused(tmp_path: Path) -> None:
    """--run stages a submission as profile-only mode does, and grades what staging kept: a tar
    with a good train.py, an entry climbing out with '..', a link to /etc/passwd and a name
    holding markup and a '\\' runs without them, and its gradebook, feedback and pages list the
    three refusals, the markup escaped. A submission whose train.py is a link is not run, and
    its error says that staging refused it. Before, the refusals were dropped: the run's
    gradebook said nothing was refused, and the linked script read 'the submission has no
    train.py to run'."""
    subs = tmp_path / "subs"
    subs.mkdir()
    escape = b"open('/tmp/escaped', 'w').write('x')\n"
    with tarfile.open(subs / "partial.tar", "w") as archive:
        add_member(archive, "partial/train.py", student_script("good").encode())
        add_member(archive, "partial/../escape.py", escape)
        add_member(archive, "partial/data", link="/etc/passwd")
        add_member(archive, f"partial/{MARKUP_NAME}", escape)
    (subs / "linked").mkdir()
    (tmp_path / "good.py").write_text(student_script("good"))
    (subs / "linked" / "train.py").symlink_to(tmp_path / "good.py")
    out = tmp_path / "out"
    done = grade(subs, out, "--run", "--jobs", "1", rubric=quick_rubric(tmp_path / "rubric"))
    assert done.returncode == 1, done.stderr[-2000:]  # linked could not be graded
    graded = students(out)

    partial = graded["partial"]
    assert partial["status"] == "ok" and checks(partial)["trains"]["passed"]
    assert partial["refused"] == [
        "partial/../escape.py: path climbs out of the submission with '..'",
        "partial/data: a symbolic link to '/etc/passwd' (links are not followed)",
        f"partial/{MARKUP_NAME}: {BACKSLASH_REASON}"]
    assert json.loads((out / "runs" / "partial" / "measured.json").read_text())["refused"] == \
        partial["refused"]
    work = out / "runs" / "partial" / "sandbox" / "work"
    assert staged_names(work) == {"partial/train.py"}
    assert not (out / "runs" / "escape.py").exists() and not (out / "escape.py").exists()
    feedback = (out / "students" / "partial" / "feedback.md").read_text(encoding="utf-8")
    assert "## Files that were not used" in feedback
    assert "<img src=x onerror=alert(1)>" not in feedback
    assert r"partial/\<img src=x onerror=alert(1)\>" in feedback
    assert "partial/../escape.py: path climbs out" in feedback
    page = (out / "students" / "partial" / "report.html").read_text(encoding="utf-8")
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<img src=x onerror=alert(1)>" not in page
    assert "(3 files refused)" in (out / "summary.html").read_text(encoding="utf-8")

    linked = graded["linked"]
    assert linked["status"] == "error" and linked["total"] == 0
    assert linked["error"] == ("train.py was refused at staging, so nothing was run (train.py: "
                               "a symbolic link (links are not followed))")
    assert linked["refused"] == ["train.py: a symbolic link (links are not followed)"]
    assert not (out / "runs" / "linked" / "logs").exists()  # neither script was launched


def staged_names(root: Path) -> set[str]:
    """The files under ``root``, relative to it."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_the_slurm_array_task_starts_without_a_warning(tmp_path: Path) -> None:
    """Each task of the job array runs profreport.grade.array_task: with Python's warnings made
    errors it starts and reads its jobs file (here one naming a rubric that is not there, so it
    stops at the rubric), never warning that the module it runs was imported already (as
    ``-m profreport.grade.execute`` did in every task's log: the package imports it)."""
    from profreport.grade.rubric import load_rubric
    from profreport.grade.slurm import array_script

    rubric = tmp_path / "missing-rubric.toml"
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps({"submissions": [["ann", str(tmp_path)]], "rubric": str(rubric),
                                "runs": str(tmp_path / "runs")}), encoding="utf-8")
    task = subprocess.run([sys.executable, "-W", "error", "-m", "profreport.grade.array_task",
                           str(jobs), "0"], capture_output=True, text=True, timeout=120)
    assert "found in sys.modules" not in task.stderr
    assert str(rubric) in task.stderr or "missing-rubric" in task.stderr, task.stderr[-2000:]
    assert "-m profreport.grade.array_task" in array_script(jobs, 1, load_rubric(RUBRIC),
                                                            tmp_path)
