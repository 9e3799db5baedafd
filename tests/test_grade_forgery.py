"""Profile-only mode: the gaming attempts of issue 20, each made from the runner's fixtures
(real traces and manifests), are flagged for the teacher with their evidence."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from profreport.grade import grade_class
from profreport.grade.results import StudentResult
from profreport.grade.rubric import example_rubric, parse_rubric


def trace_of(run: Path) -> Path:
    """The torch.profiler trace of a run folder."""
    return next((run / "trace").glob("*.pt.trace.json.gz"))


def edit_trace(run: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the run's trace with ``change`` applied to its JSON."""
    path = trace_of(run)
    data = json.loads(gzip.decompress(path.read_bytes()))
    change(data)
    path.write_bytes(gzip.compress(json.dumps(data).encode()))


def halve_times(data: dict[str, Any]) -> None:
    """Every timestamp and duration of the trace halved."""
    for event in data["traceEvents"]:
        for key in ("ts", "dur"):
            if isinstance(event.get(key), int | float):
                event[key] = event[key] / 2


def run_folder(target: Path, fixture: Path, keep: tuple[str, ...] = ("trace",)) -> Path:
    """A copy of a fixture run folder with its manifest and only the profiles in ``keep``."""
    target.mkdir(parents=True)
    shutil.copy(fixture / "manifest.json", target)
    for name in keep:
        source = fixture / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target / name)
    return target


def grade(tmp_path: Path, subs: Path) -> dict[str, StudentResult]:
    """The class graded in profile-only mode with the example rubric, results by student."""
    rubric = parse_rubric(example_rubric(), tmp_path / "r.toml")
    outcome = grade_class(subs, rubric, tmp_path / "out")
    return {result.student: result for result in outcome.results}


@pytest.fixture(scope="module")
def gamed(tmp_path_factory: pytest.TempPathFactory,
          fixtures_dir: Path) -> dict[str, StudentResult]:
    """One class of gaming attempts, graded once."""
    root = tmp_path_factory.mktemp("gamed")
    subs = root / "subs"
    heavy, compute = fixtures_dir / "loader_heavy", fixtures_dir / "compute_heavy"
    # Every time of the optimized trace halved.
    run_folder(subs / "halver" / "baseline", heavy)
    edit_trace(run_folder(subs / "halver" / "optimized", heavy), halve_times)
    # A trace written by hand: ten steps of ProfilerStep annotations, nothing else.
    run_folder(subs / "forger" / "baseline", heavy)
    handmade = subs / "forger" / "optimized"
    handmade.mkdir()
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": i * 1000,
               "dur": 900, "pid": 1, "tid": 1} for i in range(10)]
    (handmade / "fast.pt.trace.json").write_text(json.dumps({"traceEvents": events}))
    # The DataLoader's spans deleted from the trace; line_profiler still shows the wait.
    run_folder(subs / "deleter" / "baseline", heavy)
    edit_trace(run_folder(subs / "deleter" / "optimized", heavy, ("trace", "train.lprof")),
               lambda data: data.update(traceEvents=[
                   e for e in data["traceEvents"] if "DataLoader" not in e.get("name", "")]))
    # The optimized manifest's throughput doubled by hand.
    run_folder(subs / "inflater" / "baseline", heavy)
    inflated = run_folder(subs / "inflater" / "optimized", compute)
    manifest = json.loads((inflated / "manifest.json").read_text())
    manifest["throughput_samples_per_s"] *= 2
    (inflated / "manifest.json").write_text(json.dumps(manifest))
    # A quarter of the batch: the manifest says so.
    run_folder(subs / "smaller" / "baseline", heavy)
    small = run_folder(subs / "smaller" / "optimized", compute)
    manifest = json.loads((small / "manifest.json").read_text())
    manifest["knobs"]["batch_size"] = 16
    (small / "manifest.json").write_text(json.dumps(manifest))
    # A quarter of the batch, a step taking 1.5 batches on average and no throughput: the
    # speedup can only be the step-time ratio, which cannot be put per sample.
    run_folder(subs / "uneven" / "baseline", heavy)
    uneven = run_folder(subs / "uneven" / "optimized", compute)
    manifest = json.loads((uneven / "manifest.json").read_text())
    manifest["knobs"].update(batch_size=16, batches_per_step=1.5)
    manifest["throughput_samples_per_s"] = None
    (uneven / "manifest.json").write_text(json.dumps(manifest))
    # The baseline under two profilers, the optimized run under one.
    run_folder(subs / "fewer" / "baseline", heavy, ("trace", "train.lprof"))
    run_folder(subs / "fewer" / "optimized", compute)
    # Someone else's profiles, every timestamp shifted by an hour.
    run_folder(subs / "author" / "baseline", heavy)
    run_folder(subs / "author" / "optimized", compute)
    run_folder(subs / "copier" / "baseline", heavy)
    edit_trace(run_folder(subs / "copier" / "optimized", compute), lambda data: [
        event.update(ts=event["ts"] + 3.6e9) for event in data["traceEvents"] if "ts" in event])
    # The same run handed in as baseline and optimized: the same file, and a re-written copy.
    run_folder(subs / "twice" / "baseline", heavy)
    run_folder(subs / "twice" / "optimized", heavy)
    run_folder(subs / "rewritten" / "baseline", heavy)
    edit_trace(run_folder(subs / "rewritten" / "optimized", heavy), lambda data: None)
    return grade(root, subs)


def test_halved_times_do_not_move_the_speedup(gamed: dict) -> None:
    """The speedup comes from the manifests' unprofiled samples/s: a trace whose every time was
    halved earns what the same run unedited earns (1.00x: the same run twice)."""
    check = next(check for check in gamed["halver"].checks if check.id == "speedup")
    assert "Samples per second of the unprofiled runs" in check.measured
    assert check.points == 0 and "1.00x" in check.measured


def test_halved_times_are_flagged(gamed: dict) -> None:
    """Every operator and kernel of the halved trace takes 0.50x its time per call, all alike:
    flagged. Two different honest runs (loader_heavy against compute_heavy) are not."""
    (flag,) = [f for f in gamed["halver"].flags if "scaled" in f]
    assert flag.startswith("speedup: every one of the ") and "takes 0.50x its time" in flag
    assert not any("scaled" in f for f in gamed["author"].flags)


def test_edited_manifest_throughput_is_flagged(gamed: dict) -> None:
    """A throughput that the manifest's own step times do not give is flagged; the honest
    fixtures' manifests are not."""
    (flag,) = [f for f in gamed["inflater"].flags if "manifest says" in f]
    assert flag.startswith("run optimized:") and flag.endswith("edited")
    assert not any("manifest says" in f for f in gamed["author"].flags)


def test_handmade_trace_is_flagged(gamed: dict) -> None:
    """A trace without schemaVersion is flagged as made by hand."""
    assert any("fast.pt.trace.json has no schemaVersion" in f for f in gamed["forger"].flags)


def test_deleted_dataloader_events_disagree_with_line_profiler(gamed: dict) -> None:
    """line_profiler still sees the loader wait the edited trace no longer shows."""
    (flag,) = [f for f in gamed["deleter"].flags if "disagree on the DataLoader" in f]
    assert "0.0% of step time waiting" in flag and "on the DataLoader loop line" in flag


def test_smaller_batch_and_fewer_profilers_are_flagged(gamed: dict) -> None:
    """A speedup that mixes two batch sizes (a step-time ratio that cannot be put per sample),
    or runs under other profilers, is flagged; one in samples/s across two batch sizes is not
    (it was: 'a step of each is not the same work (compare samples/s)' of a speedup that
    compared samples/s)."""
    (flag,) = [f for f in gamed["uneven"].flags if "batches of 16" in f]
    assert flag == ("speedup: optimized trains on batches of 16, baseline on 64, and the speedup "
                    "is their step-time ratio, not per sample (the samples a step takes are "
                    "unknown for optimized): a step of each is not the same work")
    check = next(check for check in gamed["smaller"].checks if check.id == "speedup")
    assert "Samples per second of the unprofiled runs" in check.measured
    assert not any("batches of 16" in f for f in gamed["smaller"].flags)
    assert any("baseline was profiled with kineto, lprof, optimized with kineto" in f
               for f in gamed["fewer"].flags)


def test_shifted_copy_is_found(gamed: dict) -> None:
    """A copy whose timestamps were shifted is the same recorded timings as its original."""
    fingerprints = {name: {run.name: run.timing_fingerprint for run in gamed[name].runs}
                    for name in ("author", "copier")}
    assert fingerprints["author"]["optimized"] == fingerprints["copier"]["optimized"]
    assert fingerprints["author"]["baseline"] != fingerprints["author"]["optimized"]


def test_accumulated_batches_are_no_edited_throughput() -> None:
    """A manifest whose steps each took 4 batches (gradient accumulation) gives 4 batches'
    samples per step: not flagged; the same throughput without the knob is."""
    from types import SimpleNamespace

    from profreport.grade.forgery import manifest_edited

    metrics = SimpleNamespace(throughput_samples_per_s=6400.0, plain_step_ns=[40_000_000] * 5)
    honest = SimpleNamespace(name="ga", metrics=metrics, world_size=1,
                             knobs={"batch_size": 64, "batches_per_step": 4})
    assert manifest_edited(honest) == []
    edited = SimpleNamespace(name="ga", metrics=metrics, world_size=1, knobs={"batch_size": 64})
    assert manifest_edited(edited)[0].endswith("give 1,600.0: edited")


def test_one_profile_handed_in_as_both_runs_is_flagged(gamed: dict, fixtures_dir: Path) -> None:
    """The same trace as baseline and optimized (its bytes, or re-written: the same recorded
    timings) is flagged, and the speedup's feedback says it compares one profile with itself;
    it was graded 1.00x without a word. Two different runs are not flagged."""
    trace = trace_of(fixtures_dir / "loader_heavy").relative_to(fixtures_dir / "loader_heavy")
    same_bytes = (f"optimized/{trace.as_posix()} has the same bytes as "
                  f"baseline/{trace.as_posix()}")
    assert f"speedup: optimized is baseline's own profile ({same_bytes}): the speedup compares " \
           "one profile with itself" in gamed["twice"].flags
    check = next(check for check in gamed["twice"].checks if check.id == "speedup")
    assert check.measured.startswith(f"Your optimized run is your baseline run's own profile "
                                     f"({same_bytes}): this compares one profile with itself.")
    assert "speedup: optimized is baseline's own profile (the same recorded step and operator " \
           "timings, timestamps aside)" in " ".join(gamed["rewritten"].flags)
    assert not any("own profile" in flag for flag in gamed["author"].flags)
