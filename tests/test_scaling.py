"""Scaling studies: world sizes, points against the ideal line, and why scaling breaks."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.findings import Study, study_findings
from profreport.reports.analysis.results import (
    BREAKDOWN_PARTS,
    Breakdown,
    CommStats,
    RunAnalysis,
    RunMetrics,
    ScalingPoint,
    SharedCpu,
    StepStats,
    TopItem,
)
from profreport.reports.analysis.scaling import _same_training, scaling_studies
from profreport.reports.render.html import render_html
from profreport.reports.render.json import render_json, scaling_json
from profreport.reports.render.markdown import render_markdown

sys.path.insert(0, str(Path(__file__).parent))
from conftest import gpu_trace  # noqa: E402

MS = 1_000_000


def _point(processes: int, throughput: float, *, step_ms: float = 100.0,
           exposed_ms: float = 0.0, comm_ms: float = 0.0, loader: float | None = None,
           synthetic: float | None = None, imbalance: float | None = None,
           base_per_process: float = 100.0) -> ScalingPoint:
    """A point as scaling._points makes it, against an ideal of ``base_per_process`` each."""
    ideal = base_per_process * processes
    return ScalingPoint(run=f"np{processes}", processes=processes, throughput=throughput,
                        ideal=ideal, efficiency=throughput / ideal, loader_alone=loader,
                        synthetic=synthetic, step_ns=int(step_ms * MS),
                        comm_ns_per_step=int(comm_ms * MS),
                        comm_exposed_ns_per_step=int(exposed_ms * MS), rank_imbalance=imbalance,
                        profile_origin="kineto", comm_origin="kineto",
                        comm_step_ns=int(step_ms * MS))


def test_exposed_communication_growth_is_named_with_the_sc22_fix() -> None:
    """78% at 4 processes, exposed communication grown by 25 of the 28 ms lost per step."""
    points = [_point(1, 100.0, synthetic=120.0, loader=500.0),
              _point(4, 312.0, step_ms=128.0, comm_ms=40.0, exposed_ms=25.0, loader=2000.0,
                     synthetic=470.0)]
    finding = study_findings(Study(points, "samples/s", "weak"))[0]
    assert finding.title == "Scaling breaks at 4 processes: 78% of ideal"
    assert finding.severity == "medium"
    assert "4 proc: 40.0 ms (25.0 ms exposed)" in finding.evidence[1].text
    assert "Double the local batch" in finding.recommendation
    assert len(finding.evidence) == 2  # the loader and the synthetic trial scale


def test_loader_cap_straggler_and_synthetic_causes() -> None:
    """A loader barely above the loop, an uneven rank, and no scaling on synthetic data."""
    points = [_point(1, 100.0, synthetic=120.0),
              _point(2, 130.0, step_ms=150.0, loader=140.0, synthetic=150.0, imbalance=1.4)]
    finding = study_findings(Study(points, "samples/s", "weak"))[0]
    assert finding.severity == "high"  # 65%
    texts = " | ".join(e.text for e in finding.evidence)
    assert "data loader alone delivers 140.0 samples/s" in texts
    assert "1.40x the fastest" in texts
    assert "reach 150.0 samples/s of an ideal 240.0 (62%)" in texts


def test_good_scaling_has_no_finding() -> None:
    """95% of ideal is not reported."""
    points = [_point(1, 100.0), _point(2, 190.0)]
    assert study_findings(Study(points, "samples/s", "weak")) == []


@pytest.mark.slow
def test_real_one_and_two_process_scaling(tmp_path: Path) -> None:
    """`run-and-report --scaling 1,2` on the CPU (gloo): the points, ideal and efficiency come
    from the runner's measured throughputs, the world sizes from the manifests; the report shows
    the study; the bare rank traces alone give the same process counts."""
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "profreport", "run-and-report", "--variants",
                    "baseline", "--scaling", "1,2", "--steps", "4", "--profilers", "torch",
                    "--device", "cpu", "--out", str(out), "--format", "json,html"],
                   check=True, capture_output=True, timeout=1200)
    runs = out / "runs"
    names = ("baseline-np1", "baseline-np2")
    report = analyze_paths([runs / name for name in names], AnalyzeOptions())
    study = report.scaling[0]
    measured = {name: json.loads((runs / name / "manifest.json").read_text()) for name in names}
    one, two = study.points
    assert (one.processes, two.processes) == (1, 2)
    assert study.group == "baseline" and study.unit == "samples/s" and study.mode == "weak"
    assert one.throughput == measured["baseline-np1"]["throughput_samples_per_s"]
    assert two.throughput == measured["baseline-np2"]["throughput_samples_per_s"]
    assert two.ideal == pytest.approx(2 * one.throughput)
    assert two.efficiency == pytest.approx(two.throughput / (2 * one.throughput))
    assert two.loader_alone == measured["baseline-np2"]["trials"]["io"]
    assert two.synthetic == measured["baseline-np2"]["trials"]["synthetic"]
    assert one.local_batch_size == two.local_batch_size == 64
    assert two.comm_ns_per_step is not None and two.comm_ns_per_step > 0  # gloo all_reduce
    bare = analyze_paths([runs / name / "trace" for name in names], AnalyzeOptions())
    assert [run.world_size for run in bare.runs] == [1, 2]  # no process group; two rank traces
    assert bare.scaling[0].unit == "local batches/s"
    written = json.loads((out / "report.json").read_text())
    assert written["scaling"][0]["points"][1]["efficiency"] == pytest.approx(two.efficiency,
                                                                              abs=1e-4)
    assert "Scaling: baseline (weak scaling)" in (out / "report.html").read_text()


def test_above_ideal_blames_the_reference() -> None:
    """164% of ideal with the model alone faster per process too: the reference is slow."""
    base = _point(1, 25.7, synthetic=31.2)
    two = ScalingPoint(run="np2", processes=2, throughput=84.5, ideal=51.4,
                       efficiency=84.5 / 51.4, loader_alone=None, synthetic=113.3, step_ns=None,
                       comm_ns_per_step=None, comm_exposed_ns_per_step=None,
                       rank_imbalance=None, threads_per_process=1)
    finding = study_findings(Study([base, two], "samples/s", "weak"))[0]
    assert finding.id == "SCALING_SUPERLINEAR" and "164%" in finding.evidence[0].text
    assert "42.2 samples/s per process against 25.7 at 1" in finding.evidence[0].text
    assert "56.6 per process against 31.2" in finding.evidence[1].text


def test_above_ideal_with_a_model_no_faster_per_process_says_so() -> None:
    """A real weak-scaling run on a loaded 2-CPU machine: 213% of ideal (433.6 samples/s per
    process against 204.0) while the model alone ran 577.6 per process against 1115.1; the
    evidence said 'the model itself runs faster per process', the opposite of its figures."""
    base = _point(1, 203.982, synthetic=1115.096)
    two = ScalingPoint(run="np2", processes=2, throughput=867.29, ideal=407.965,
                       efficiency=867.29 / 407.965, loader_alone=None, synthetic=1155.14,
                       step_ns=None, comm_ns_per_step=None, comm_exposed_ns_per_step=None,
                       rank_imbalance=None, threads_per_process=1)
    finding = study_findings(Study([base, two], "samples/s", "weak"))[0]
    assert finding.id == "SCALING_SUPERLINEAR"
    assert finding.evidence[1].text == (
        "on synthetic data the model is no faster per process (577.6 per process against "
        "1115.1): what slows the reference's real loop is outside the model (its DataLoader, "
        "or other work on its CPUs)")


def test_a_point_that_changed_more_than_its_processes_says_so() -> None:
    """A 4-process point that also moved to fp16 kernels and a fused optimizer: the efficiency
    finding lists those differences and credits none of them (scaling._besides_processes keeps
    world size and process knobs out, since they are what a study varies)."""
    from dataclasses import replace

    from profreport.reports.analysis.results import KernelMix, RunAnalysis, RunMetrics
    from profreport.reports.analysis.scaling import _besides_processes

    def run(name: str, size: int, reduced: float, fused: bool) -> RunAnalysis:
        metrics = RunMetrics(kernel_mix=KernelMix("kineto", MS, reduced, 0.0, 0.1, None, fused))
        return RunAnalysis(name, [], "compute-bound", "", metrics, [], world_size=size,
                           knobs={"nproc": size, "num_workers": 4})
    base, big = run("np1", 1, 0.0, False), run("np4", 4, 0.9, True)
    differ = _besides_processes(base, big)
    assert differ == ["fp16/bf16 compute 0.0% -> 90% of compute-kernel time (kernel names)",
                      "optimizer kernels per-tensor -> fused (multi_tensor_apply)"]
    points = [_point(1, 100.0), replace(_point(4, 250.0), confounds=differ)]
    finding = study_findings(Study(points, "samples/s", "weak"))[0]
    assert finding.evidence[-1].text.startswith(
        "besides the process count, the 4-process point differs from the reference in: fp16/bf16")
    assert "no part of it can be credited to one of these" in finding.evidence[-1].text


def _ops_run(name: str, ops: dict[str, float]) -> RunAnalysis:
    """A run without knobs whose busiest CPU ops took these ms."""
    metrics = RunMetrics(top_ops=[TopItem(op, int(ms * MS), 1, 0.0, True)
                                  for op, ms in ops.items()])
    return RunAnalysis(name, [], "compute-bound", "", metrics, [])


# The busiest ops of this project's CNN at 1 and 2 processes (4 steps on the loaded CPU, as
# test_real_one_and_two_process_scaling ran them): six of the ten names shared, the other four
# near-equal tails that a loaded machine reorders, but 77% and 86% of the time shared.
ONE_PROCESS = {"aten::convolution_backward": 35.9, "aten::mkldnn_convolution": 26.4,
               "aten::addmm": 8.8, "aten::dropout": 8.1, "aten::threshold_backward": 8.0,
               "aten::mul": 8.0, "aten::bernoulli_": 7.9, "aten::fill_": 6.6, "aten::mul_": 4.2,
               "torch::autograd::AccumulateGrad": 4.1}
TWO_PROCESSES = {"aten::convolution_backward": 44.9, "aten::fill_": 27.7,
                 "aten::threshold_backward": 16.0, "aten::mkldnn_convolution": 13.7,
                 "aten::max_pool2d_with_indices": 7.9, "aten::bernoulli_": 7.3, "aten::mm": 7.1,
                 "aten::addmm": 3.4, "aten::sqrt_": 1.6, "aten::add": 1.5}
# Another model (a transformer): its time goes to other operators; two small names shared.
TRANSFORMER = {"aten::bmm": 40.0, "aten::_softmax": 22.0, "aten::native_layer_norm": 12.0,
               "aten::gelu": 9.0, "aten::addmm": 3.0, "aten::mul": 2.0}


def test_traces_without_knobs_are_one_training_by_their_busiest_ops_time() -> None:
    """Names shared by the tails alone do not make another model the same training, and a
    reordered tail does not split one training (the weight is the ops' self time)."""
    one, two = _ops_run("np1", ONE_PROCESS), _ops_run("np2", TWO_PROCESSES)
    other = _ops_run("other", TRANSFORMER)
    assert _same_training(one, two) and _same_training(two, one)
    assert not _same_training(one, other) and not _same_training(other, two)
    tail_moved = dict(list(ONE_PROCESS.items())[:6])  # its last four ops fell off the list
    assert _same_training(_ops_run("np1", tail_moved), two)
    # Two more of the 2-process run's small ops swapped for others: 4 of 10 names shared, which
    # a count of names took for another model; 63% and 78% of the time still shared.
    swapped = {("aten::sum" if op == "aten::addmm" else "aten::div" if op == "aten::bernoulli_"
                else op): ms for op, ms in TWO_PROCESSES.items()}
    assert _same_training(one, _ops_run("np2", swapped))


def test_every_point_is_timed_by_the_one_profiler_all_points_have() -> None:
    """A scaling study from profiled steps (no unprofiled throughput): the 1-process run has
    nsys's steps (100 ms start to start) and torch.profiler's (160 ms), the 2-process run only
    torch.profiler's (200 ms). Both points come from torch.profiler: 6.25 -> 10.0 local
    batches/s, 80% of ideal; the 1-process run's own source, nsys, had set 10.0 against 10.0,
    a 50% efficiency that was the two profilers' difference."""

    def run(name: str, size: int, steps_ms: dict[str, int]) -> RunAnalysis:
        timed = [StepStats(origin, 10, ms * MS, None, None, None, None, wall_mean_ns=ms * MS)
                 for origin, ms in steps_ms.items()]  # type: ignore[arg-type]
        metrics = RunMetrics(steps=timed[0], steps_by_origin=timed)
        return RunAnalysis(name, [], "compute-bound", "", metrics, [], world_size=size,
                           scaling_point={"group": "cnn"})

    study = scaling_studies([run("np1", 1, {"nsys": 100, "kineto": 160}),
                             run("np2", 2, {"kineto": 200})])[0]
    one, two = study.points
    assert study.unit == "local batches/s"
    assert (one.profile_origin, two.profile_origin) == ("kineto", "kineto")
    assert (one.step_ns, two.step_ns) == (160 * MS, 200 * MS)
    assert (one.throughput, two.throughput) == (pytest.approx(6.25), pytest.approx(10.0))
    assert two.efficiency == pytest.approx(0.8)
    # No profiler timed both points' steps: no step figure, rather than two profilers' mixed.
    apart = scaling_studies([run("np1", 1, {"nsys": 100}), run("np2", 2, {"kineto": 200})])[0]
    assert all(p.throughput is None and p.step_ns is None and p.profile_origin is None
               for p in apart.points)


def _timed_run(name: str, size: int, steps_ms: dict[str, int], breakdown: str,
               exposed_ms: int = 0) -> RunAnalysis:
    """A run of a scaling group whose profilers timed ``steps_ms`` (mean per step) and whose
    breakdown, and communication when it has more than one process, are ``breakdown``'s, with
    ``exposed_ms`` of it exposed."""
    timed = [StepStats(origin, 10, ms * MS, None, None, None, None, wall_mean_ns=ms * MS)
             for origin, ms in steps_ms.items()]  # type: ignore[arg-type]
    step = steps_ms[breakdown] * MS
    parts = dict.fromkeys(BREAKDOWN_PARTS, 0) | {"compute": step - exposed_ms * MS,
                                                  "comm_exposed": exposed_ms * MS}
    comm = None if size == 1 else CommStats(breakdown, 2 * exposed_ms * MS, 0.0, 0.0, 0.5, 1.0,
                                            10, ["allreduce"], False)
    metrics = RunMetrics(steps=timed[0], steps_by_origin=timed,
                         breakdown=Breakdown(breakdown, step, parts), comm=comm)  # type: ignore[arg-type]
    return RunAnalysis(name, [], "compute-bound", "", metrics, [], world_size=size,
                       scaling_point={"group": "cnn"})


def test_exposed_communication_is_weighed_against_its_own_profilers_steps() -> None:
    """A CPU study whose steps nsys timed (100 -> 125 ms: 80% of ideal) and whose communication
    torch.profiler measured (60 ms exposed at 2 processes, its steps 160 -> 240 ms): the exposed
    part is weighed against torch.profiler's 80 ms lost, not nsys's 25 ms ('grew by 60.0 ms of
    the 25.0 ms each step lost', two profilers' figures)."""
    study = scaling_studies([
        _timed_run("np1", 1, {"nsys": 100, "kineto": 160}, "kineto"),
        _timed_run("np2", 2, {"nsys": 125, "kineto": 240}, "kineto", exposed_ms=60)])[0]
    assert [p.profile_origin for p in study.points] == ["nsys", "nsys"]
    assert [(p.comm_origin, p.comm_step_ns) for p in study.points] == [
        ("kineto", 160 * MS), ("kineto", 240 * MS)]
    finding = study.findings[0]
    assert finding.title == "Scaling breaks at 2 processes: 80% of ideal"
    comm = finding.evidence[1]
    assert comm.origin == "kineto"
    assert comm.text.endswith("the exposed part grew by 60.0 ms of the 80.0 ms each step lost "
                              "(the steps as torch.profiler timed them)")


def test_no_communication_cause_without_its_profilers_steps_at_every_point() -> None:
    """The 2-process point's communication measured by nsys (30 ms exposed), the 1-process
    point timed by torch.profiler alone (the study's step source, 160 -> 200 ms): nsys's exposed
    30 ms is not set against torch.profiler's 40 ms lost; the finding says the data do not show
    why."""
    study = scaling_studies([
        _timed_run("np1", 1, {"kineto": 160}, "kineto"),
        _timed_run("np2", 2, {"nsys": 130, "kineto": 200}, "nsys", exposed_ms=30)])[0]
    assert [(p.comm_origin, p.comm_step_ns) for p in study.points] == [
        ("nsys", None), ("nsys", 130 * MS)]
    finding = study.findings[0]
    assert finding.title == "Scaling breaks at 2 processes: 80% of ideal"
    assert len(finding.evidence) == 1
    assert finding.recommendation.startswith("The data do not show why")


def test_points_without_a_recorded_mode_have_no_mode_named_none() -> None:
    """Scaling points that record a group but no mode (runs given together, knobs unknown)
    are of an unknown mode, never 'None'; one recorded mode is the study's."""
    bare = [_timed_run("np1", 1, {"kineto": 100}, "kineto"),
            _timed_run("np2", 2, {"kineto": 125}, "kineto")]
    assert scaling_studies(bare)[0].mode == "unknown"
    weak = [dataclasses.replace(run, scaling_point={"group": "cnn", "mode": "weak"})
            for run in bare]
    assert scaling_studies(weak)[0].mode == "weak"


def test_a_study_of_runs_that_shared_the_cpus_says_its_efficiency_is_not_their_own() -> None:
    """The built-in workload's --scaling 1,2 on a loaded machine: the unprofiled runs made 50.6
    and 468.2 samples/s while other processes used 84% and 73% of their CPUs' time. The
    comparison row of the same report set those throughputs aside ('not their own') and the
    scaling table drew 463% of ideal from them without a word; the finding now says so."""
    def run(name: str, size: int, samples_per_s: float, other: float) -> RunAnalysis:
        step = StepStats("nsys", 10, 100 * MS, None, None, None, None, wall_mean_ns=100 * MS)
        cpu = SharedCpu(wall_ns=30 * 10**9, cpu_ns=10**10, other_cpu_ns=5 * 10**10, cpus=2,
                        other_share=other, idle_share=0.0, shared=True)
        metrics = RunMetrics(steps=step, steps_by_origin=[step], plain_cpu=cpu,
                             throughput_samples_per_s=samples_per_s)
        return RunAnalysis(name, [], "compute-bound", "", metrics, [], world_size=size,
                           scaling_point={"group": "baseline"})

    study = scaling_studies([run("np1", 1, 50.6, 0.84), run("np2", 2, 468.2, 0.73)])[0]
    assert [p.shared_cpu.other_share for p in study.points] == [0.84, 0.73]
    assert [p["shared_cpu_share"] for p in scaling_json(study)["points"]] == [0.84, 0.73]
    (finding,) = study.findings
    assert finding.id == "SCALING_SUPERLINEAR" and finding.evidence[-1].text == (
        "the unprofiled runs shared the CPUs with other work (1-process run's: other processes "
        "used 84% of its CPUs' time while it ran; 2-process run's: other processes used 73% of "
        "its CPUs' time while it ran): their throughput, and this efficiency, are not their own "
        "(a comparison of these runs takes their profiled step times instead)")


def test_a_throughput_from_one_interval_is_said_to_be_one(tmp_path: Path) -> None:
    """A study from profiled steps: the 1-process run holds two ProfilerSteps (10 ms apart),
    the 2-process run six (12 ms apart). The first point's 100 local batches/s comes from one
    start-to-next-start interval, one measurement, and the scaling table showed it like the
    other's mean of five. The point says how many intervals its throughput is the mean of,
    and both tables say 'one interval' where it is one."""
    report = analyze_paths([gpu_trace(tmp_path / "np1.pt.trace.json", 10_000, 1_000, steps=2),
                            gpu_trace(tmp_path / "np2.pt.trace.json", 12_000, 1_000)],
                           AnalyzeOptions())
    runs = [dataclasses.replace(run, world_size=size, scaling_point={"group": "cnn"})
            for run, size in zip(report.runs, (1, 2), strict=True)]
    study = scaling_studies(runs)[0]
    assert study.unit == "local batches/s"
    assert [(p.throughput, p.throughput_intervals, p.single_interval) for p in study.points] == [
        (pytest.approx(100.0), 1, True), (pytest.approx(166.667, abs=1e-3), 5, False)]
    shown = dataclasses.replace(report, runs=runs, scaling=[study])
    assert "| np1 | 1 | 100 (one interval: a single measurement) |" in render_markdown(shown)
    assert "| np2 | 2 | 166.7 |" in render_markdown(shown)
    assert ('<td class="num">100 (one interval: a single measurement)</td>'
            in render_html(shown))
    points = json.loads(render_json(shown))["scaling"][0]["points"]
    assert [p["throughput_intervals"] for p in points] == [1, 5]
