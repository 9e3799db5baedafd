"""The analyze pipeline end to end: runs, comparison, the JSON report, and the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from profreport.errors import InputError, UsageError
from profreport.manifest import Artifact, Manifest, write_manifest
from profreport.reports.analysis.analyze import (
    AnalyzeOptions,
    analyze_paths,
    find_profiles,
    run_name,
)
from profreport.reports.render.json import render_json
from profreport.reports.render.markdown import render_markdown

RUN_KEYS = {"name", "sources", "verdict", "verdict_reason", "metrics", "breakdown", "findings",
            "top_kernels", "top_ops", "lines", "knobs", "notes"}
METRIC_KEYS = {"steps", "steps_origin", "steps_marker", "step_time_ms", "wall_step_time_ms",
               "gpu_busy_fraction", "dataloader_fraction", "comm_fraction", "comm_exposed_fraction",
               "comm_overlap_fraction", "comm_calls_per_step", "h2d_bytes", "h2d_pageable_bytes",
               "kernels_per_step", "short_kernel_fraction", "throughput_samples_per_s"}
PROFREPORT = Path(sys.executable).with_name("profreport")


def kineto(corpus: Path, workers: int) -> Path:
    """A resnet50 corpus trace."""
    return corpus / "kineto" / f"resnet50_num_workers_{workers}.pt.trace.json.gz"


def run_folder(root: Path, corpus: Path, workers: int, throughput: float | None = None) -> Path:
    """A run folder as run-and-report writes it: the trace and a manifest with knobs and an
    unprofiled throughput (100 + workers samples/s unless given)."""
    folder = root / f"w{workers}"
    folder.mkdir()
    shutil.copy(kineto(corpus, workers), folder / "trace.pt.trace.json.gz")
    write_manifest(folder, Manifest(
        name=f"workers{workers}", workload="resnet50", knobs={"num_workers": workers},
        environment={"cpus": 8}, artifacts=[Artifact("trace.pt.trace.json.gz", "torch.profiler")],
        throughput_samples_per_s=100.0 + workers if throughput is None else throughput,
        notes=["corpus trace"]))
    return folder


def test_run_names_strip_profile_suffixes() -> None:
    """Run names drop the profile suffixes."""
    assert run_name(Path("a/resnet.pt.trace.json.gz")) == "resnet"
    assert run_name(Path("x/sc22.nsys-rep")) == "sc22"
    assert run_name(Path("t.lprof")) == "t"


def test_folder_search_skips_nsys_cache_and_outputs(tmp_path: Path) -> None:
    """A folder's .sqlite beside its .nsys-rep, manifest.json, report.json and the runner's
    configs and plain-run result are not profiles."""
    for name in ("p.nsys-rep", "p.sqlite", "manifest.json", "report.json", "rank1/t.json.gz",
                 ".hidden/x.lprof", "train.lprof", "plain_result.json", "train_config.nsys.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    found = [p.relative_to(tmp_path).as_posix() for p in find_profiles(tmp_path)]
    assert found == ["p.nsys-rep", "rank1/t.json.gz", "train.lprof"]


#: What the ResNet-50 pair's breakdown says moved, after "Mean " (the mean parts add up to the
#: mean step; each part's median is then judged on its own spread).
RESNET_PARTS = (
    "step time fell by 35.1 ms per step (174.9 ms -> 139.7 ms): DataLoader wait fell "
    "59.3 ms -> 1.2 ms (-58.1 ms, 165% of the difference); offset by Other grew 14.8 ms -> "
    "26.9 ms (+12.1 ms), Host / CUDA runtime grew 2.8 ms -> 10.5 ms (+7.7 ms), Compute grew "
    "96.0 ms -> 97.9 ms (+1.9 ms); smaller changes +1.3 ms together. Judged each on its own "
    "step-to-step spread (median per step, 95% band), these parts changed: DataLoader wait "
    "59.4 ms -> 0.7 ms (±5.9 ms); Host / CUDA runtime 2.8 ms -> 3.5 ms (±0.5 ms); "
    "Host-to-device copy 1.9 ms -> 3.0 ms (±88.5 µs); Other GPU copies and memsets 88.5 µs -> "
    "97.5 µs (±4.9 µs).")


def test_comparison_names_the_dataloader_change(corpus: Path, tmp_path: Path) -> None:
    """Two run folders with manifests, 100 -> 140 samples/s: beyond the ±11% band of the traces'
    median step windows' robust spread, so the num_workers change is named as the gain; the
    other way round, the loss."""
    folders = [run_folder(tmp_path, corpus, 0, 100.0), run_folder(tmp_path, corpus, 4, 140.0)]
    report = analyze_paths(folders, AnalyzeOptions())
    assert [run.name for run in report.runs] == ["workers0", "workers4"]
    row = report.comparison.rows[1]
    assert report.comparison.baseline == "workers0"
    assert row.speedup_basis == "throughput" and row.speedup == pytest.approx(1.40)
    assert row.step_speedup == pytest.approx(176.3405 / 126.6145, abs=0.001)
    assert row.within_noise is False and row.noise_fraction == pytest.approx(0.1061, abs=0.001)
    assert report.comparison.rows[0].within_noise is None
    assert row.changed_knobs == {"num_workers": {"from": 0, "to": 4}}
    assert row.breakdown_delta_ns["dataloader"] < -58_000_000
    assert row.explanation == (
        f"Mean {RESNET_PARTS}"
        " The DataLoader change (num_workers 0 -> 4) brought the gain.")
    assert report.runs[0].knobs == {"num_workers": 0} and report.runs[0].notes == ["corpus trace"]
    assert "num_workers from 0" in report.runs[0].findings[0].recommendation
    flipped = analyze_paths(folders, AnalyzeOptions(baseline="workers4")).comparison.rows[0]
    assert flipped.speedup == pytest.approx(100 / 140) and flipped.within_noise is False
    assert flipped.explanation.startswith("Mean step time grew by 35.1 ms per step (139.7 ms -> "
                                          "174.9 ms): DataLoader wait grew 1.2 ms -> 59.3 ms")
    assert flipped.explanation.endswith(
        "The DataLoader change (num_workers 4 -> 0) brought the loss.")


def test_comparison_calls_a_small_difference_noise(corpus: Path, tmp_path: Path) -> None:
    """100 -> 104 samples/s is inside the ±11% band that the traces' median step windows give
    (their robust spread over every ProfilerStep, the last ones too: one slow first step no
    longer widens it to ±22%): the row says so and claims no gain for the whole step, and
    judges each part of the breakdown on its own spread, so the DataLoader wait's fall (median
    59.4 -> 0.7 ms per step) is said beside it."""
    report = analyze_paths([run_folder(tmp_path, corpus, 0), run_folder(tmp_path, corpus, 4)],
                           AnalyzeOptions())
    row = report.comparison.rows[1]
    assert row.speedup == pytest.approx(1.04) and row.within_noise is True
    assert row.explanation.startswith(
        "1.04× is within this machine's run-to-run noise (±11% at 95% confidence, from the "
        "step-to-step spread of both runs): no change can be claimed. "
        "In the profiled runs, mean step time fell by 35.1 ms per step (174.9 ms -> 139.7 ms): "
        "DataLoader wait fell 59.3 ms "
        "-> 1.2 ms (-58.1 ms, 165% of the difference); offset by Other grew 14.8 ms -> 26.9 ms "
        "(+12.1 ms), Host / CUDA runtime grew 2.8 ms -> 10.5 ms (+7.7 ms), Compute grew 96.0 ms "
        "-> 97.9 ms (+1.9 ms); smaller changes +1.3 ms together. Judged each on its own "
        "step-to-step spread (median per step, 95% band), these parts changed: DataLoader wait "
        "59.4 ms -> 0.7 ms (±5.9 ms);")
    assert row.explanation.endswith(" Also different between these runs: num_workers 0 -> 4.")
    data = json.loads(render_json(report))["comparison"]
    assert data["noise_confidence"] == 0.95
    assert data["rows"][1]["within_noise"] is True
    assert data["rows"][1]["noise_fraction"] == pytest.approx(0.1061, abs=1e-4)
    table_row = next(line for line in render_markdown(report).splitlines()
                     if line.startswith("| workers4 |"))
    assert "1.04× (within noise (±11%))" in table_row


def test_comparison_says_when_throughput_and_step_time_disagree(corpus: Path,
                                                                 tmp_path: Path) -> None:
    """Profiled step time shrank 1.25× but the unprofiled throughput fell (100 -> 75 samples/s,
    beyond the noise): the speedup is the throughput ratio, the sentence names both, and the
    DataLoader change is not credited with a gain the run did not make."""
    report = analyze_paths([run_folder(tmp_path, corpus, 0, 100.0),
                            run_folder(tmp_path, corpus, 4, 75.0)], AnalyzeOptions())
    row = report.comparison.rows[1]
    assert row.speedup == pytest.approx(0.75) and row.speedup_basis == "throughput"
    assert row.within_noise is False
    assert row.explanation == (
        "Unprofiled throughput fell (0.75×) while the profiled step time shrank (1.39×); the "
        "speedup is the throughput ratio, measured without profilers (step times also move with "
        "the batch size and with how much each profiler slows a run). In the profiled runs, "
        f"mean {RESNET_PARTS}"
        " The profiled breakdown does not explain the throughput change, so no cause is named."
        " Also different between these runs: num_workers 0 -> 4.")
    data = json.loads(render_json(report))["comparison"]["rows"][1]
    assert data["speedup_basis"] == "throughput" and data["step_speedup"] == pytest.approx(1.39,
                                                                                           abs=0.01)


def test_comparison_without_knobs_and_baseline_choice(corpus: Path) -> None:
    """Without manifests the part that shrank most is named; --baseline picks the reference."""
    files = [kineto(corpus, 0), kineto(corpus, 4)]
    report = analyze_paths(files, AnalyzeOptions())
    assert "DataLoader wait fell 59.3 ms -> 1.2 ms" in report.comparison.rows[1].explanation
    row = report.comparison.rows[1]
    assert row.speedup_basis == "step time" and row.speedup == row.step_speedup
    flipped = analyze_paths(files, AnalyzeOptions(baseline="resnet50_num_workers_4"))
    assert flipped.comparison.baseline == "resnet50_num_workers_4"
    assert "DataLoader wait grew 1.2 ms -> 59.3 ms" in flipped.comparison.rows[0].explanation
    with pytest.raises(UsageError):
        analyze_paths(files, AnalyzeOptions(baseline="nope"))


def test_json_report_has_the_documented_keys(corpus: Path) -> None:
    """schema profreport/1 with every documented key, deterministic text."""
    report = analyze_paths([kineto(corpus, 0), corpus / "hta" / "nccl_data.json.gz"],
                           AnalyzeOptions(title="t"))
    text = render_json(report)
    assert text == render_json(report)
    data = json.loads(text)
    assert data["schema"] == "profreport/1" and data["generated_by"].startswith("profreport ")
    assert set(data) == {"schema", "generated_by", "title", "runs", "comparison", "failures",
                         "scaling"}
    assert data["scaling"] == []  # a ResNet-50 and another model: no scaling curve
    for run in data["runs"]:
        assert set(run) >= RUN_KEYS and set(run["metrics"]) >= METRIC_KEYS
        assert set(run["metrics"]["step_time_ms"]) == {"mean", "p50", "p90", "min", "max"}
    w0, hta = data["runs"]
    assert w0["verdict"] == "loader-bound"
    assert w0["metrics"]["dataloader_fraction"] == 0.3962  # 0.39625 to the JSON's 4 places
    assert w0["metrics"]["comm_fraction"] is None
    # 21 NCCL kernels over the trace's 3 ProfilerStep spans.
    assert hta["sources"][0]["rank"] == 0 and hta["metrics"]["comm_calls_per_step"] == 7
    assert {"id", "severity", "title", "evidence", "recommendation"} == set(w0["findings"][0])


def test_nothing_readable_is_an_input_error(tmp_path: Path) -> None:
    """No input parses at all: one InputError naming the file."""
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(InputError, match="bad.json"):
        analyze_paths([bad], AnalyzeOptions())


def test_cli_bad_file_among_good(corpus: Path, tmp_path: Path) -> None:
    """`profreport analyze good bad --format json`: exit 1, one line naming bad, report written."""
    bad = tmp_path / "broken.pt.trace.json"
    bad.write_text('{"traceEvents": [')
    out = tmp_path / "out"
    done = subprocess.run([str(PROFREPORT), "analyze", str(kineto(corpus, 0)), str(bad),
                           "--out", str(out), "--format", "json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if "broken.pt.trace.json" in line]
    assert len(errors) == 1
    assert "resnet50_num_workers_0: loader-bound" in done.stdout
    data = json.loads((out / "report.json").read_text())
    assert [run["name"] for run in data["runs"]] == ["resnet50_num_workers_0"]
    assert len(data["failures"]) == 1 and "broken.pt.trace.json" in data["failures"][0]


def test_fixture_folders_end_to_end(fixtures_dir: Path, nsys_available: str,
                                    raw_collectives_per_step) -> None:
    """The project's three fixture runs: verdicts, both DDP ranks, and gloo calls counted once."""
    folders = [fixtures_dir / name for name in ("loader_heavy", "compute_heavy", "ddp_gloo")]
    data = json.loads(render_json(analyze_paths(folders, AnalyzeOptions())))
    runs = {run["name"]: run for run in data["runs"]}
    assert runs["loader_heavy"]["verdict"] == "loader-bound"
    assert runs["compute_heavy"]["verdict"] == "compute-bound"
    assert runs["compute_heavy"]["breakdown"]["other"] < runs["compute_heavy"]["breakdown"][
        "compute"] / 10
    ddp = runs["ddp_gloo"]
    assert ddp["verdict"] in ("compute-bound", "communication-bound")
    assert set(ddp["metrics"]["per_rank_step_ms"]) == {"0", "1"}
    c10d, _ = raw_collectives_per_step(next((fixtures_dir / "ddp_gloo" / "trace").glob("rank0.*")))
    assert ddp["metrics"]["comm_calls_per_step"] == pytest.approx(c10d)
    assert ddp["metrics"]["comm_on_gpu"] is False
    assert all(item["share"] <= 1 for run in data["runs"] for item in run["top_ops"])


def test_comparison_names_core_contention() -> None:
    """CPU-only, num_workers 1 -> 2 on 2 CPUs: contention is named only when compute moved the
    way it predicts (grew with more workers, fell with fewer), never when compute fell with more
    workers; a gain is never claimed for a run that got slower."""
    from profreport.reports.analysis.compare import compare_runs
    from profreport.reports.analysis.results import (
        BREAKDOWN_PARTS,
        Breakdown,
        RunAnalysis,
        RunMetrics,
        StepStats,
    )

    def run(name: str, workers: int, compute_ms: int) -> RunAnalysis:
        """A CPU-only run whose step (torch.profiler's) is mostly compute."""
        parts = dict.fromkeys(BREAKDOWN_PARTS, 0) | {"compute": compute_ms * 10**6,
                                                     "dataloader": 3 * 10**6}
        step = sum(parts.values())
        metrics = RunMetrics(breakdown=Breakdown("kineto", step, parts), steps_by_origin=[
            StepStats("kineto", 10, step, step, step, step, step)])
        return RunAnalysis(name, [], "compute-bound", "", metrics, [],
                           knobs={"num_workers": workers},
                           environment={"cpus_usable": 2, "cuda": None, "torch_threads": 2})

    row = compare_runs([run("baseline", 1, 90), run("workers", 2, 102)]).rows[1]
    assert row.within_noise is None and row.noise_fraction is None
    assert row.explanation == (
        "Mean step time grew by 12.0 ms per step (93.0 ms -> 105.0 ms): Compute grew 90.0 ms -> "
        "102.0 ms (+12.0 ms, 100% of the difference). Compute moved when num_workers went 1 -> 2 "
        "(2 DataLoader workers + 2 PyTorch intra-op threads on 2 CPUs): the loader workers "
        "compete with PyTorch's intra-op threads for the same cores.")
    fewer = compare_runs([run("workers", 2, 102), run("baseline", 1, 90)]).rows[1]
    assert fewer.explanation == (
        "Mean step time fell by 12.0 ms per step (105.0 ms -> 93.0 ms): Compute fell 102.0 ms -> "
        "90.0 ms (-12.0 ms, 100% of the difference). Compute moved when num_workers went 2 -> 1 "
        "(2 DataLoader workers + 2 PyTorch intra-op threads on 2 CPUs in workers): fewer loader "
        "workers compete with PyTorch's intra-op threads for the same cores.")
    fell = compare_runs([run("baseline", 1, 103), run("workers", 2, 94)]).rows[1]
    # Steps of 103 + 3 and 94 + 3 ms (compute and the DataLoader's 3 ms).
    assert fell.speedup == pytest.approx(106 / 97, rel=1e-9)
    assert fell.explanation == (
        "Mean step time fell by 9.0 ms per step (106.0 ms -> 97.0 ms): Compute fell 103.0 ms -> "
        "94.0 ms (-9.0 ms, 100% of the difference). Knobs changed: num_workers (none acts on the "
        "parts that moved).")
