"""Hostile and malformed manifests: the run is analysed from what is valid, one line says what
was left out, and no artifact outside the run folder is ever opened."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from profreport.errors import InputError
from profreport.manifest import MANIFEST_SCHEMA, read_manifest
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths


def write_run(folder: Path, trace: Path, **fields: object) -> Path:
    """A run folder holding ``trace`` and a manifest with ``fields`` (over valid defaults)."""
    folder.mkdir()
    shutil.copy(trace, folder / "trace.pt.trace.json")
    data: dict[str, object] = {
        "schema": MANIFEST_SCHEMA, "name": folder.name, "workload": "tiny",
        "knobs": {"num_workers": 0}, "environment": {"cpus": 2},
        "artifacts": [{"path": "trace.pt.trace.json", "profiler": "torch.profiler"}]}
    data.update(fields)
    (folder / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    return folder


@pytest.mark.parametrize(("fields", "left_out"), [
    ({"knobs": "num_workers=4"}, "knobs left out: a str, not an object"),
    ({"notes": 7}, "notes left out: an int, not a list"),
    ({"trials": {"io": "fast", "full": 12.5}}, "trials.io left out: a str, not a number"),
    ({"trials": "fast"}, "trials left out: a str, not an object"),
    ({"knobs": {"num_workers": [[[[4]]]]}}, "knobs.num_workers left out: a list, not an integer"),
    ({"environment": {"cpus": [[1], [2]]}}, "environment.cpus left out: a list, not a scalar"),
    ({"notes": [[["deep"]]]}, "notes[0] left out: a list, not text"),
    ({"plain_step_ns": [-5, 10**30, 7]}, "plain_step_ns[0] left out: -5 is negative"),
    ({"throughput_samples_per_s": 1e308}, "throughput_samples_per_s left out: 1e+308 is not"),
    ({"launches": [{"profiler": 5}]}, "launches[0] left out: no command"),
])
def test_bad_fields_are_left_out_and_the_run_analysed(tmp_path: Path, tiny_trace: Path,
                                                      fields: dict, left_out: str) -> None:
    folder = write_run(tmp_path / "bad", tiny_trace, **fields)
    manifest, problems = read_manifest(folder / "manifest.json")
    assert any(problem.startswith(left_out) for problem in problems), problems
    report = analyze_paths([folder, tiny_trace], AnalyzeOptions())
    assert [run.name for run in report.runs] == ["bad", "good"]
    assert report.runs[0].metrics.steps is not None and report.runs[0].metrics.steps.count == 2
    assert len(report.failures) == 1
    assert report.failures[0].startswith(f"{folder / 'manifest.json'}: invalid entries left out")
    assert any(left_out in note for note in report.runs[0].notes)


def test_valid_entries_are_kept_beside_bad_ones(tmp_path: Path, tiny_trace: Path) -> None:
    folder = write_run(tmp_path / "mixed", tiny_trace, plain_step_ns=[-5, 10**30, 7],
                       trials={"io": "fast", "full": 12.5}, knobs={"amp": "yes", "nproc": 2})
    manifest, problems = read_manifest(folder / "manifest.json")
    assert manifest.plain_step_ns == [7]
    assert manifest.trials == {"full": 12.5}
    assert manifest.knobs == {"nproc": 2}
    assert len(problems) == 4


@pytest.mark.parametrize("artifact", [
    {"path": "../../../../etc/passwd", "profiler": "kernprof"},
    {"path": "/etc/passwd", "profiler": "kernprof"},
    {"path": "/proc/self/environ", "profiler": "kernprof"},
])
def test_artifacts_outside_the_run_folder_are_never_opened(tmp_path: Path, tiny_trace: Path,
                                                           artifact: dict) -> None:
    folder = write_run(tmp_path / "escape", tiny_trace, artifacts=[
        artifact, {"path": "trace.pt.trace.json", "profiler": "torch.profiler"}])
    report = analyze_paths([folder], AnalyzeOptions())
    assert [source.path for source in report.runs[0].inputs] == [
        str(folder / "trace.pt.trace.json")]
    assert report.failures == [f"{folder / 'manifest.json'}: refused {artifact['path']}: " + (
        "system folders (/proc, /sys, /dev) are never read" if "proc" in artifact["path"]
        else "it names a parent folder ('..')" if ".." in artifact["path"]
        else f"it lies outside {folder.resolve()}")]


def test_artifact_link_leading_outside_is_refused(tmp_path: Path, tiny_trace: Path) -> None:
    folder = write_run(tmp_path / "link", tiny_trace, artifacts=[
        {"path": "secret.json", "profiler": "torch.profiler"},
        {"path": "trace.pt.trace.json", "profiler": "torch.profiler"}])
    (folder / "secret.json").symlink_to(tiny_trace)
    report = analyze_paths([folder], AnalyzeOptions())
    assert len(report.runs[0].inputs) == 1
    assert report.failures[0].endswith("(through a symbolic link)")


def test_artifact_path_that_is_an_int(tmp_path: Path, tiny_trace: Path) -> None:
    folder = write_run(tmp_path / "intpath", tiny_trace, artifacts=[
        {"path": 5, "profiler": "nsys"}, {"path": "trace.pt.trace.json", "profiler": "kineto"}])
    manifest, problems = read_manifest(folder / "manifest.json")
    assert problems == ["artifacts[0] left out: path: an int, not text"]
    assert [a.path for a in manifest.artifacts] == ["trace.pt.trace.json"]


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000,
                                  '{"schema": "profreport-manifest/1", "knobs": '
                                  + "[" * 100_000 + "]" * 100_000 + "}",
                                  '{"schema": "profreport-manifest/1", "name": ' + "9" * 5000 + "}",
                                  "\u202e\x00 not json"])
def test_unreadable_manifest_is_one_line_and_the_others_go_on(tmp_path: Path, tiny_trace: Path,
                                                              text: str) -> None:
    folder = tmp_path / "deep"
    folder.mkdir()
    shutil.copy(tiny_trace, folder / "t.pt.trace.json")
    (folder / "manifest.json").write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        read_manifest(folder / "manifest.json")
    line = caught.value.one_line()
    assert line.startswith(f"{folder / 'manifest.json'}: ") and len(line) < 1000
    report = analyze_paths([folder, tiny_trace], AnalyzeOptions())
    assert len(report.runs) == 2 and report.failures == [line]


def test_a_profile_the_artifacts_do_not_list_is_named_and_a_link_never_opened(
        tmp_path: Path, tiny_trace: Path) -> None:
    """A trace beside the manifest that its artifacts do not list is named in the run's notes,
    not read; a link beside it leading outside is neither opened to tell nor named."""
    folder = write_run(tmp_path / "run", tiny_trace)
    shutil.copy(tiny_trace, folder / "extra.pt.trace.json")
    outside = tmp_path / "outside.pt.trace.json"
    shutil.copy(tiny_trace, outside)
    (folder / "link.pt.trace.json").symlink_to(outside)
    run = analyze_paths([folder], AnalyzeOptions()).runs[0]
    assert [source.path for source in run.inputs] == [str(folder / "trace.pt.trace.json")]
    assert [note for note in run.notes if note.startswith("not read")] == [
        "not read: extra.pt.trace.json (beside manifest.json, which does not list it in its "
        "artifacts: a run folder with a manifest is read from its artifacts only)"]
