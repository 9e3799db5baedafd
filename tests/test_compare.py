"""Comparison noise: the t quantile, each run's step spread, and the within-noise flag, from the
project's fixtures (whose manifests hold the plain run's per-step durations) and the corpus."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.compare import (
    NOISE_BLOCKS,
    Noise,
    Spread,
    changed_knobs,
    compare_runs,
    confounds,
    explain,
    noise_band,
    step_spread,
    t_quantile,
    within_noise,
)
from profreport.reports.analysis.results import (
    BREAKDOWN_PARTS,
    Breakdown,
    ComparisonRow,
    KernelMix,
    OpPrecision,
    Report,
    RunAnalysis,
    RunMetrics,
    SharedCpu,
    StepCopies,
    StepStats,
)
from profreport.reports.render.charts import comparison_charts
from profreport.reports.render.html import render_html
from profreport.reports.render.json import render_json
from profreport.reports.render.markdown import render_markdown

sys.path.insert(0, str(Path(__file__).parent))
from conftest import gpu_trace, write_nsys_export  # noqa: E402


def test_t_quantile_matches_the_tables() -> None:
    """Two-sided 95% critical values of Student's t (printed tables: 2.571, 2.228, 2.042)."""
    assert t_quantile(0.975, 5) == pytest.approx(2.5706, abs=0.01)
    assert t_quantile(0.975, 10) == pytest.approx(2.2281, abs=0.002)
    assert t_quantile(0.975, 30) == pytest.approx(2.0423, abs=0.001)


def test_identical_spreads_give_a_symmetric_band() -> None:
    """Two runs of 5 blocks with 10% relative spread: band exp(t(8 df) * sqrt(2 * 0.01 / 5)) - 1."""
    spread = Spread(mean=100.0, stdev=10.0, count=5)
    band = noise_band(spread, spread)
    # t(0.975, 8 df) = 2.306 in the printed tables: exp(2.306 * sqrt(0.004)) - 1 = 0.15702.
    assert band == pytest.approx(0.15702, abs=1e-4)
    assert within_noise(1 + band * 0.99, band) and within_noise(1 / (1 + band * 0.99), band)
    assert not within_noise(1 + band * 1.01, band)


def test_plain_steps_are_averaged_in_blocks(fixtures_dir: Path) -> None:
    """The fixture's plain run (3 x 6 steps, 17 timed) gives 5 block means as its samples."""
    report = analyze_paths([fixtures_dir / "loader_heavy", fixtures_dir / "compute_heavy"],
                           AnalyzeOptions())
    manifest = json.loads((fixtures_dir / "loader_heavy" / "manifest.json").read_text())
    steps = np.array(manifest["plain_step_ns"], dtype=np.float64)
    assert len(steps) == 17 and report.runs[0].metrics.plain_step_ns == manifest["plain_step_ns"]
    blocks = [steps[0:4].mean(), steps[4:8].mean(), steps[8:11].mean(), steps[11:14].mean(),
              steps[14:17].mean()]
    spread = step_spread(report.runs[0], report.comparison.steps_origin)
    assert spread.count == NOISE_BLOCKS
    assert spread.mean == pytest.approx(np.mean(blocks))
    assert spread.stdev == pytest.approx(np.std(blocks, ddof=1))


def test_fixture_comparison_flags_noise_consistently(fixtures_dir: Path) -> None:
    """compute_heavy against loader_heavy: the flag agrees with the band, the band comes from
    both plain runs, and the HTML table prints the row's band."""
    report = analyze_paths([fixtures_dir / "loader_heavy", fixtures_dir / "compute_heavy"],
                           AnalyzeOptions())
    row = report.comparison.rows[1]
    assert report.comparison.steps_origin == "nsys"
    # Measured on the fixtures: the throughput ratio 5.15x against a band of ±182% of the
    # plain runs' steps: log 5.15 = 1.64 > log 2.82 = 1.04, beyond the noise.
    assert row.speedup == pytest.approx(5.1530, abs=1e-4)
    assert row.noise_fraction == pytest.approx(1.8213, abs=1e-4)
    assert row.within_noise is False
    assert row.explanation.startswith("Unprofiled throughput rose (5.15×) while the profiled "
                                      "step time grew (0.69×)")
    assert "within this machine's run-to-run" not in row.explanation
    page = render_html(report)
    assert "±182%" in page[page.index('id="comparison"'):]


def test_step_stats_carry_their_spread(corpus: Path) -> None:
    """torch.profiler's 6 ResNet-50 steps (num_workers 0): stdev 5.70 ms around 174.8 ms."""
    report = analyze_paths([corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz"],
                           AnalyzeOptions())
    steps = report.runs[0].metrics.steps
    assert steps.count == 6 and steps.mean_ns == 174_829_333
    assert steps.stdev_ns == 5_698_040


def run_with_parts(name: str, parts_ms: dict[str, float], plain_ms: list[float] | None = None,
                   steps_ms: float | None = None, knobs: dict[str, object] | None = None
                   ) -> RunAnalysis:
    """A run whose torch.profiler breakdown holds ``parts_ms`` (the rest 0) over torch.profiler's
    steps, with the plain run's step samples when given, and nsys's steps too when
    ``steps_ms`` is."""
    parts = dict.fromkeys(BREAKDOWN_PARTS, 0) | {k: round(v * 1e6) for k, v in parts_ms.items()}
    step = sum(parts.values())
    timed = [StepStats("kineto", 10, step, step, step, step, step)]
    if steps_ms is not None:
        mean = round(steps_ms * 1e6)
        timed.insert(0, StepStats("nsys", 10, mean, mean, mean, mean, mean))
    metrics = RunMetrics(steps=timed[0], breakdown=Breakdown("kineto", step, parts),
                         plain_step_ns=[round(v * 1e6) for v in plain_ms or []],
                         steps_by_origin=timed)
    return RunAnalysis(name, [], "compute-bound", "", metrics, [], knobs=knobs or {})


def roles(row: ComparisonRow) -> dict[str, tuple[str, float | None]]:
    """Part -> (role, share) of the row's attribution, minor parts left out."""
    return {c.part: (c.role, c.share) for c in row.attribution if c.role != "minor"}


def test_corpus_speedup_is_attributed_to_the_parts_that_add_up(corpus: Path) -> None:
    """ResNet-50 num_workers 0 -> 4: DataLoader wait fell 59.3 -> 1.2 ms and explains 165% of the
    35.1 ms the step lost; Other, Host / CUDA runtime and Compute grew and are named as offsets;
    the parts add up to the step-time difference exactly (both from torch.profiler)."""
    report = analyze_paths([corpus / "kineto" / f"resnet50_num_workers_{n}.pt.trace.json.gz"
                            for n in (0, 4)], AnalyzeOptions())
    row = report.comparison.rows[1]
    # The row shows the median step window (warm-up and teardown cannot move it), over all 6
    # ProfilerStep spans, the last one too: 176.3 ms -> 126.6 ms, 1.39x beyond a ±11% band;
    # the attribution splits the mean step, which its parts add up to.
    assert (report.comparison.rows[0].step_time_ns, row.step_time_ns) == (176_340_500,
                                                                          126_614_500)
    assert row.speedup == pytest.approx(176_340_500 / 126_614_500) and not row.within_noise
    assert row.noise_fraction == pytest.approx(0.1061, abs=1e-4)
    total = 139_748_333 - 174_886_166
    assert sum(c.delta_ns for c in row.attribution) == total and row.unexplained_ns == 0
    loader = row.attribution[0]
    assert (loader.part, loader.role, loader.before_ns, loader.after_ns) == (
        "dataloader", "driver", 59_261_833, 1_186_166)
    assert loader.share == pytest.approx(58_075_667 / 35_137_833)
    assert [c.part for c in row.attribution if c.role == "offset"] == [
        "other", "host_runtime", "compute"]
    assert row.explanation.startswith(
        "Mean step time fell by 35.1 ms per step (174.9 ms -> 139.7 ms): DataLoader wait fell "
        "59.3 ms -> 1.2 ms (-58.1 ms, 165% of the difference); offset by Other grew")
    # Each part judged on its own spread: the DataLoader wait's median fell 59.4 -> 0.7 ms,
    # far beyond its ±5.9 ms band.
    assert (loader.median_before_ns, loader.median_after_ns) == (59_441_000, 690_000)
    assert loader.beyond_noise and round(loader.band_ns) == 5_938_939
    assert "these parts changed: DataLoader wait 59.4 ms -> 0.7 ms (±5.9 ms)" in row.explanation
    data = json.loads(render_json(report))["comparison"]["rows"][1]
    assert (row.step_time_kind, data["step_time_kind"]) == ("median", "median")
    assert data["attribution"][0] == {"part": "dataloader", "before_ms": 59.262,
                                      "after_ms": 1.186, "delta_ms": -58.076,
                                      "share_of_difference": 1.6528, "role": "driver",
                                      "median_before_ms": 59.441, "median_after_ms": 0.69,
                                      "band_ms": data["attribution"][0]["band_ms"],
                                      "beyond_noise": True}
    assert data["unexplained_ms"] == 0.0


def test_a_gain_explained_by_two_parts() -> None:
    """100 -> 70 ms: DataLoader wait -20 ms (67%) and Host-to-device copy -10 ms (33%), both
    acted on by the changed knobs, which are credited once each."""
    base = run_with_parts("base", {"dataloader": 30, "h2d_copy": 15, "compute": 55},
                          knobs={"num_workers": 0, "pin_memory": False})
    run = run_with_parts("fast", {"dataloader": 10, "h2d_copy": 5, "compute": 55},
                         knobs={"num_workers": 4, "pin_memory": True})
    row = compare_runs([base, run]).rows[1]
    assert roles(row) == {"dataloader": ("driver", pytest.approx(2 / 3)),
                          "h2d_copy": ("driver", pytest.approx(1 / 3))}
    assert row.explanation == (
        "Mean step time fell by 30.0 ms per step (100.0 ms -> 70.0 ms): DataLoader wait fell "
        "30.0 ms -> 10.0 ms (-20.0 ms, 67% of the difference); Host-to-device copy fell 15.0 ms -> "
        "5.0 ms (-10.0 ms, 33% of the difference). The DataLoader change (num_workers 0 -> 4, "
        "pin_memory False -> True) and the copy change (pin_memory False -> True) brought the "
        "gain.")


def test_a_part_that_grew_while_the_step_fell_is_an_offset() -> None:
    """The issue's case: compute grew 95 -> 123 ms while the step fell 200 -> 160 ms because the
    DataLoader wait fell 80 -> 12 ms: compute is named as an offset, never as the reason, and
    the AMP knob (which acts on compute) is not credited with the gain."""
    base = run_with_parts("base", {"dataloader": 80, "compute": 95, "other": 25},
                          knobs={"num_workers": 0, "amp": False})
    run = run_with_parts("fast", {"dataloader": 12, "compute": 123, "other": 25},
                         knobs={"num_workers": 8, "amp": True})
    row = compare_runs([base, run]).rows[1]
    assert roles(row) == {"dataloader": ("driver", pytest.approx(68 / 40)),
                          "compute": ("offset", pytest.approx(-28 / 40))}
    assert row.explanation == (
        "Mean step time fell by 40.0 ms per step (200.0 ms -> 160.0 ms): DataLoader wait fell "
        "80.0 ms -> 12.0 ms (-68.0 ms, 170% of the difference); offset by Compute grew 95.0 ms -> "
        "123.0 ms (+28.0 ms). These runs differ in 2 ways at once (amp False -> True; "
        "num_workers 0 -> 8): the change cannot be credited to any one of them.")


def test_a_change_within_noise_names_no_cause() -> None:
    """100 -> 98 ms with ±10% step-to-step wobble in both plain runs: within noise, the parts are
    shown but no knob is credited."""
    wobble = [90.0, 110.0, 95.0, 105.0, 100.0]
    base = run_with_parts("base", {"dataloader": 20, "compute": 80}, plain_ms=wobble,
                          knobs={"num_workers": 0})
    run = run_with_parts("same", {"dataloader": 18, "compute": 80},
                         plain_ms=[v * 0.98 for v in wobble], knobs={"num_workers": 2})
    row = compare_runs([base, run]).rows[1]
    assert row.within_noise is True and row.speedup == pytest.approx(100 / 98)
    assert row.explanation.startswith("1.02× is within this machine's run-to-run noise")
    assert row.explanation.endswith(
        "no change can be claimed. In the profiled runs, mean step time fell by 2.0 ms per step "
        "(100.0 ms -> 98.0 ms): DataLoader wait fell 20.0 ms -> 18.0 ms (-2.0 ms). Also different "
        "between these runs: num_workers 0 -> 2.")
    assert "brought" not in row.explanation


def test_a_step_time_from_another_profiler_leaves_a_reported_rest() -> None:
    """Step time from nsys (120 -> 80 ms) but the breakdown from torch.profiler (100 -> 90 ms):
    the 30 ms the parts do not cover is reported as unexplained, not given to a part."""
    base = run_with_parts("base", {"dataloader": 20, "compute": 80}, steps_ms=120)
    run = run_with_parts("fast", {"dataloader": 10, "compute": 80}, steps_ms=80)
    row = compare_runs([base, run]).rows[1]
    assert row.unexplained_ns == -30_000_000
    # These hand-built nsys steps hold no windows, only their mean: the row says it is a mean.
    assert row.step_time_kind == "mean"
    assert sum(c.delta_ns for c in row.attribution) + row.unexplained_ns == -40_000_000
    assert row.explanation == (
        "Mean step time fell by 40.0 ms per step (120.0 ms -> 80.0 ms, timed by Nsight Systems); "
        "in the torch.profiler breakdown (its own steps 100.0 ms -> 90.0 ms): DataLoader wait "
        "fell 20.0 ms -> 10.0 ms (-10.0 ms, 25% of the difference); -30.0 ms (75% of the "
        "difference) is not in the breakdown, whose steps are timed by another profiler than the "
        "step time.")


def test_a_step_time_within_noise_names_both_profilers() -> None:
    """The new-user run on a loaded machine: nsys timed 48.0 -> 44.6 ms steps while the slowed
    torch.profiler runs' compute fell 362.7 -> 42.3 ms. Within noise, the sentence still says
    which profiler timed which figure, and the breakdown's own steps."""
    wobble = [40.0, 56.0, 44.0, 52.0, 48.0]
    base = run_with_parts("base", {"compute": 362.7, "dataloader": 7.3}, steps_ms=48.0,
                          plain_ms=wobble)
    run = run_with_parts("pinned", {"compute": 42.3, "dataloader": 7.7}, steps_ms=44.6,
                         plain_ms=[v * 44.6 / 48 for v in wobble])
    row = compare_runs([base, run]).rows[1]
    assert row.within_noise is True
    assert ("In the profiled runs, mean step time fell by 3.4 ms per step (48.0 ms -> 44.6 ms, "
            "timed by Nsight Systems); in the torch.profiler breakdown (its own steps 370.0 ms "
            "-> 50.0 ms): Compute fell 362.7 ms -> 42.3 ms (-320.4 ms)") in row.explanation


def test_a_row_within_a_wide_band_says_so_once(fixtures_dir: Path) -> None:
    """loader_heavy against compute_heavy's torch.profiler trace: the median step windows, every
    ProfilerStep counted (loader_heavy's four run 1.2 s to 9.5 s), are 4371.3 ms -> 1605.2 ms,
    2.72x, inside the ±181% band (on the log of the ratio: 1/2.81x to 2.81x): the sentence says
    once that no change can be claimed, then gives the mean step's parts without judging their
    sum against a band of its own (it had called the 3236.0 ms fall 'within the noise of
    ±8799.4 ms', 181% of the baseline's 4871.3 ms step). Leaving each trace's last step out of
    the medians had read 7275.1 ms -> 1683.0 ms, 4.32x, beyond the band."""
    trace = next((fixtures_dir / "compute_heavy" / "trace").iterdir())
    report = analyze_paths([fixtures_dir / "loader_heavy", trace], AnalyzeOptions())
    row = report.comparison.rows[1]
    assert row.noise_fraction == pytest.approx(1.8124, abs=1e-4) and row.within_noise is True
    assert row.explanation.startswith(
        "2.72× is within this machine's run-to-run noise (±181% at 95% confidence, from the "
        "step-to-step spread of both runs): no change can be claimed. In the profiled runs, "
        "mean step time fell by 3236.0 ms per step (4871.3 ms -> 1635.3 ms): DataLoader wait "
        "fell 4477.0 ms -> 9.1 ms (-4467.9 ms, 138% of the difference); offset by Compute grew")
    assert row.explanation.split(". Judged each")[0].count("noise") == 1
    # A part judged on its own spread names its band as the part's.
    assert ("Judged each on its own step-to-step spread (median per step, 95% band), these "
            "parts changed: Compute 278.5 ms -> 1591.7 ms (±284.8 ms).") in row.explanation


def test_an_unprofiled_run_that_shared_the_cpus_is_not_its_throughput() -> None:
    """The new-user run on a loaded machine: the baseline's unprofiled run took 350-470 ms steps
    (277 samples/s) while another job kept both CPUs busy, the variant's 47-52 ms (1271
    samples/s). The 4.6x throughput ratio is the other job's doing: the speedup is the profiled
    step-time ratio, the noise band comes from the profiled steps, and the row says why."""
    slow_plain = [468.0, 351.0, 306.0, 435.0, 327.0, 354.0, 137.0, 93.0, 458.0, 472.0]
    base = run_with_parts("baseline", {"compute": 42.5, "dataloader": 1.3, "other": 1.7},
                          plain_ms=slow_plain, steps_ms=49.4)
    run = run_with_parts("workers", {"compute": 47.4, "dataloader": 1.3, "other": 2.8},
                         plain_ms=[52.0, 74.5, 47.3, 46.2, 51.6, 48.1, 47.1, 51.0, 48.5, 62.8],
                         steps_ms=53.9)
    base.metrics.throughput_samples_per_s, run.metrics.throughput_samples_per_s = 277.4, 1270.8
    base.metrics.plain_cpu = SharedCpu(wall_ns=12_100_000_000, cpu_ns=9_000_000_000,
                                       other_cpu_ns=14_500_000_000, cpus=2, other_share=0.60,
                                       idle_share=0.03, shared=True)
    run.metrics.plain_cpu = SharedCpu(wall_ns=5_200_000_000, cpu_ns=9_800_000_000,
                                      other_cpu_ns=200_000_000, cpus=2, other_share=0.02,
                                      idle_share=0.04, shared=False)
    row = compare_runs([base, run]).rows[1]
    assert row.speedup_basis == "step time" and row.throughput_gain is None
    assert row.speedup == pytest.approx(49.4 / 53.9)
    assert row.explanation.startswith(
        "The baseline's unprofiled run shared the CPUs with other work (as its row says): its "
        "throughput is not its own, so the speedup is the profiled step-time ratio.")
    # The baseline's figures are said once, in its own row, not again in every other row.
    assert compare_runs([base, run]).rows[0].explanation == (
        "baseline. Its unprofiled run shared the CPUs with other work (other processes used "
        "60% of its CPUs' time while it ran and 3.0% was left idle): its throughput is not its "
        "own, so no speedup here is a throughput ratio.")
    run.metrics.plain_cpu = dataclasses.replace(base.metrics.plain_cpu, other_share=0.41)
    assert compare_runs([base, run]).rows[1].explanation.startswith(
        "Both unprofiled runs shared the CPUs with other work (the baseline's as its row says; "
        "workers's: other processes used 41% of its CPUs' time while it ran and 3.0% was left "
        "idle): their throughput is not their own")
    run.metrics.plain_cpu = SharedCpu(wall_ns=5_200_000_000, cpu_ns=9_800_000_000,
                                      other_cpu_ns=200_000_000, cpus=2, other_share=0.02,
                                      idle_share=0.04, shared=False)
    # Both sides' noise would come from their profiled steps, not one from its unshared plain
    # run: these hand-built runs time no profiled step, so the band is unknown, not mixed.
    assert step_spread(run, "nsys") is not None and step_spread(run, "nsys", plain=False) is None
    assert row.noise_fraction is None and row.within_noise is None
    # Without the shared baseline, the slow plain steps set the speedup and its band.
    base.metrics.plain_cpu = None
    unshared = compare_runs([base, run]).rows[1]
    # 1270.8 / 277.4 samples/s; the band of the two plain runs' 10 steps each (the baseline's
    # 93-472 ms) is ±61.8%, which 4.58x lies beyond.
    assert unshared.speedup_basis == "throughput"
    assert unshared.speedup == pytest.approx(1270.8 / 277.4, rel=1e-9)
    assert unshared.noise_fraction == pytest.approx(0.6182, abs=1e-4)
    assert unshared.within_noise is False


def test_a_step_time_speedup_says_when_its_profiled_launches_shared_the_cpus_too() -> None:
    """The default CPU run on a loaded machine: every launch of the baseline shared the CPUs
    (its torch.profiler launch: 5.996 s of CPU time, other processes 5.873 s in 5.977 s on 2
    CPUs), so its profiled step times were as slowed as its throughput; nsys launches are not
    measured. The row said 'so the speedup is the profiled step-time ratio' as if that ratio
    were the runs' own; it now names the launches that shared the CPUs or were not measured."""
    from profreport.manifest import Manifest, ProfiledRun
    from profreport.reports.analysis.metrics import profiled_cpu

    def manifest(torch_cpu_s: float, torch_other_s: float) -> Manifest:
        launches = [ProfiledRun("none", ["python"], 0, 21.0, cpu_s=20.8, other_cpu_s=21.0,
                                cpus=2),
                    ProfiledRun("torch.profiler", ["python"], 0, 5.977, cpu_s=torch_cpu_s,
                                other_cpu_s=torch_other_s, cpus=2)]
        return Manifest("run", "mnist", {}, {"cpu_count": 2}, launches=launches)

    base = run_with_parts("baseline", {"compute": 361.1, "dataloader": 7.2})
    run = run_with_parts("workers", {"compute": 39.4, "dataloader": 2.0})
    for r, m in ((base, manifest(5.996, 5.873)), (run, manifest(3.374, 0.185))):
        r.metrics.plain_cpu = SharedCpu(21_000_000_000, 20_800_000_000, 21_000_000_000, 2,
                                        0.50, 0.005, True)
        r.metrics.profiled_cpu = profiled_cpu(m)
    assert base.metrics.profiled_cpu["kineto"].shared
    assert not run.metrics.profiled_cpu["kineto"].shared
    row = compare_runs([base, run]).rows[1]
    assert row.speedup_basis == "step time"
    assert ("so the speedup is the profiled step-time ratio, but the torch.profiler launch "
            "shared them too (baseline's: other processes used 49% of its CPUs' time while it "
            "ran).") \
        in row.explanation
    run.metrics.profiled_cpu["kineto"] = None  # as a launch the runner did not measure (srun)
    assert ("so the speedup is the profiled step-time ratio, but the torch.profiler launch "
            "shared them too (baseline's: other processes used 49% of its CPUs' time while it "
            "ran); and whether the torch.profiler launch of workers shared them was not "
            "measured.") \
        in compare_runs([base, run]).rows[1].explanation


def test_a_step_time_speedup_counts_the_samples_each_step_holds() -> None:
    """A weak-scaling pair on a loaded machine (--scaling 1,2: 64 samples a process, steps of
    309.3 ms at 1 process and 82.5 ms at 2): the speedup fell back to the step-time ratio, 3.75x,
    though each 2-process step holds 128 samples, not 64; it is now 7.50x per sample, the
    step-time ratio stays beside it, and the row says so."""
    shared = SharedCpu(21_000_000_000, 20_800_000_000, 21_000_000_000, 2, 0.45, 0.018, True)
    base = run_with_parts("np1", {"compute": 309.3}, knobs={"batch_size": 64})
    run = run_with_parts("np2", {"compute": 82.5}, knobs={"batch_size": 64})
    base.world_size, run.world_size = 1, 2
    base.metrics.plain_cpu = run.metrics.plain_cpu = shared
    row = compare_runs([base, run]).rows[1]
    assert row.step_speedup == pytest.approx(309.3 / 82.5)
    assert row.speedup == pytest.approx(2 * 309.3 / 82.5) and row.speedup_basis == "step time"
    assert "so the speedup is the profiled step-time ratio per sample (128 samples per step " \
        "against 64)." in row.explanation
    run.world_size = 1  # the same samples per step: the step-time ratio itself
    assert compare_runs([base, run]).rows[1].speedup == pytest.approx(309.3 / 82.5)


@pytest.mark.parametrize(("cpus", "cpu_s", "other_cpu_s", "shared"), [
    (2, 9.0, 10.5, True),     # another job kept the CPUs the run left busy
    (2, 19.5, 0.3, False),    # the run itself keeps both CPUs busy: no one else's doing
    (64, 9.0, 320.0, False),  # others used half a big node, and 49% of it stayed idle
    (2, 1.0, 0.2, False),     # an idle machine
])
def test_a_run_shared_the_cpus_when_the_machine_was_full_and_others_used_it(
        cpus: int, cpu_s: float, other_cpu_s: float, shared: bool) -> None:
    """metrics.plain_cpu over a 10 s unprofiled launch: shared only when the machine had under
    SATURATED_IDLE_SHARE of its CPU time idle and other processes used OTHER_CPU_SHARE_MIN."""
    from profreport.manifest import Manifest, ProfiledRun
    from profreport.reports.analysis.metrics import plain_cpu

    launch = ProfiledRun("none", ["python", "train.py"], 0, 10.0, cpu_s=cpu_s,
                         other_cpu_s=other_cpu_s)
    manifest = Manifest("run", "mnist", {}, {"cpu_count": cpus}, launches=[launch])
    measured = plain_cpu(manifest)
    assert measured.shared is shared
    assert measured.other_share == pytest.approx(other_cpu_s / (10.0 * cpus))
    assert measured.cpu_ns == round(cpu_s * 1e9) and measured.wall_ns == 10_000_000_000
    assert plain_cpu(Manifest("run", "mnist", {}, {"cpu_count": cpus},
                              launches=[ProfiledRun("none", ["python"], 0, 10.0)])) is None


def test_a_confounded_comparison_lists_what_differs_and_credits_no_one(tmp_path: Path) -> None:
    """One GPU against four that also moved to fp16 kernels, a fused optimizer and a quarter of
    the bytes per step, with a num_workers change: every difference is listed and the gain is
    credited to none of them."""
    base = run_with_parts("1gpu", {"dataloader": 30, "compute": 70}, knobs={"num_workers": 4})
    run = run_with_parts("4gpu", {"dataloader": 5, "compute": 20}, knobs={"num_workers": 8})
    base.world_size, run.world_size = 1, 4
    for r, reduced, fused, h2d in ((base, 0.0, False, 64 << 20), (run, 0.9, True, 16 << 20)):
        r.metrics.kernel_mix = KernelMix("kineto", 10**9, reduced, 0.0, 0.1, None, fused)
        r.metrics.step_copies = StepCopies("kineto", 10, {"HtoD": 1.0}, {}, {"HtoD": h2d},
                                           {}, {}, 0.0)
    row = compare_runs([base, run]).rows[1]
    assert row.confounds == [
        "num_workers 4 -> 8", "world size 1 -> 4",
        "fp16/bf16 compute 0.0% -> 90% of compute-kernel time (kernel names)",
        "optimizer kernels per-tensor -> fused (multi_tensor_apply)",
        "host-to-device bytes per step 64.0 MiB -> 16.0 MiB (another batch or input)"]
    assert "These runs differ in 5 ways at once" in row.explanation
    assert "cannot be credited to any one of them" in row.explanation
    assert "brought the gain" not in row.explanation


@pytest.mark.parametrize("unknown", [0, 1])
def test_an_optimizer_of_unknown_kind_is_no_change(unknown: int) -> None:
    """A side whose optimizer kernels' names are unrecorded (fused_optimizer None) against a
    per-tensor one: whether the optimizer changed is unknown, so no confound (it read None as
    per-tensor, or named a change from an unknown to a known kind)."""
    runs = run_with_parts("a", {"compute": 70}), run_with_parts("b", {"compute": 40})
    for i, r in enumerate(runs):
        r.metrics.kernel_mix = KernelMix("kineto", 10**9, 0.0, 0.0, 0.1, None,
                                         None if i == unknown else bool(unknown))
    assert compare_runs(list(runs)).rows[1].confounds == []


def test_a_precision_change_read_two_ways_names_each_sides_reading() -> None:
    """A baseline traced without record_shapes (its share of fp16/bf16 read from kernel names,
    of every compute kernel's time) against a run whose matmuls' dtypes were recorded (bf16,
    of the matmul/convolution time): the phrase gave both figures the run's reading ('0.0% ->
    100% of matmul/convolution time (operator input dtypes)'), though 0.0% was of another
    time, read another way."""
    base = run_with_parts("names", {"compute": 70})
    run = run_with_parts("dtypes", {"compute": 40})
    base.metrics.kernel_mix = KernelMix("kineto", 10**9, 0.0, 0.0, 0.1, None, False)
    run.metrics.op_precision = OpPrecision("kineto", (8, 0), "A100", 3, {"reduced": 30},
                                           {"reduced": 9 * 10**8}, 10**9, [], 0.0)
    assert compare_runs([base, run]).rows[1].confounds == [
        "fp16/bf16 compute 0.0% of compute-kernel time (kernel names) -> 100% of "
        "matmul/convolution time (operator input dtypes)"]


def test_a_precision_change_by_kernel_names_says_what_each_side_named() -> None:
    """Shares of fp16/bf16 by kernel name are of the named compute-kernel time: a baseline with
    every kernel named against a run with half its kernel time unnamed says each side's own
    (it said '... -> 90% of compute-kernel time' of a share over the named half only)."""
    base = run_with_parts("named", {"compute": 70})
    run = run_with_parts("half unnamed", {"compute": 40})
    base.metrics.kernel_mix = KernelMix("kineto", 10**9, 0.0, 0.0, 0.1, None, False)
    run.metrics.kernel_mix = KernelMix("kineto", 10**9, 0.9, 0.0, 0.1, None, False,
                                       unnamed_kernel_ns=5 * 10**8)
    assert compare_runs([base, run]).rows[1].confounds == [
        "fp16/bf16 compute 0.0% of compute-kernel time (kernel names) -> 90% of the named "
        "compute-kernel time (50% of compute-kernel time has no recorded name) (kernel names)"]


def test_the_amp_knob_and_the_bf16_compute_it_makes_are_one_difference() -> None:
    """amp False -> True and the compute going 0% -> 100% fp16/bf16 (the default CPU run's amp
    variant) are the knob and its own effect: credited to the knob with the profile's evidence,
    not 'These runs differ in 2 ways at once ... cannot be credited'. A bf16 change without the
    knob's change is still a difference of its own."""
    def pair(amp_after: bool) -> tuple[RunAnalysis, RunAnalysis]:
        base = run_with_parts("baseline", {"compute": 70}, knobs={"amp": False})
        run = run_with_parts("amp", {"compute": 40}, knobs={"amp": amp_after})
        for r, reduced in ((base, 0.0), (run, 1.0)):
            r.metrics.kernel_mix = KernelMix("kineto", 10**9, reduced, 0.0, 0.1, None, False)
        return base, run

    row = compare_runs(list(pair(True))).rows[1]
    assert row.confounds == ["amp False -> True (fp16/bf16 compute 0.0% -> 100% of "
                             "compute-kernel time (kernel names))"]
    assert row.explanation.endswith(" The compute change (amp False -> True) brought the gain.")
    assert compare_runs(list(pair(False))).rows[1].confounds == [
        "fp16/bf16 compute 0.0% -> 100% of compute-kernel time (kernel names)"]


def test_the_nproc_knob_and_the_world_size_it_makes_are_one_difference() -> None:
    """--scaling 1,2's points: nproc 1 -> 2, world size 1 -> 2 and ddp False -> True are the
    knob, its effect and the wrapper the runner trains any processes above one with: one
    difference ('differ in 3 ways at once (ddp False -> True; nproc 1 -> 2; world size 1 -> 2)'
    counted it thrice, then 'differ in 2 ways at once (ddp False -> True; nproc 1 -> 2 (world
    size 1 -> 2)): the change cannot be credited to any one of them' twice, on the built-in
    workload's --scaling 1,2); a world size or ddp that moved without the knob is listed on
    its own."""
    base = run_with_parts("np1", {"compute": 70}, knobs={"ddp": False, "nproc": 1})
    run = run_with_parts("np2", {"compute": 40}, knobs={"ddp": True, "nproc": 2})
    base.world_size, run.world_size = 1, 2
    row = compare_runs([base, run]).rows[1]
    assert row.confounds == [
        "nproc 1 -> 2 (world size 1 -> 2; ddp False -> True: DDP is how the runner trains "
        "several processes)"]
    assert "ways at once" not in row.explanation
    run.knobs["nproc"] = 1
    assert compare_runs([base, run]).rows[1].confounds == ["ddp False -> True",
                                                         "world size 1 -> 2"]


def test_parts_that_overshoot_the_step_difference_get_no_shares() -> None:
    """A real pair: nsys timed the steps 2.9 -> 1.6 ms, torch.profiler's breakdown (slowed 385x
    in the first run) 127.9 -> 5.4 ms: 'Compute fell ... (-126.5 ms, 9764% of the difference)'.
    The parts' moves are now said without shares, and the row says why."""
    base = run_with_parts("train", {"compute": 126.7, "other": 0.9, "dataloader": 0.3},
                          steps_ms=2.9)
    run = run_with_parts("ddp", {"compute": 0.3, "other": 0.2, "dataloader": 0.2,
                                 "comm_exposed": 4.7}, steps_ms=1.6)
    row = compare_runs([base, run]).rows[1]
    assert "% of the difference" not in row.explanation
    assert "Compute fell 126.7 ms -> 0.3 ms (-126.4 ms);" in row.explanation
    assert ("the parts moved -122.5 ms together against the step's -1.3 ms: the breakdown's "
            "steps are timed by another profiler than the step time, so no share of the "
            "difference is given.") in row.explanation


def test_the_prefetch_factor_pytorch_sets_with_workers_is_no_second_difference() -> None:
    """--vary num_workers=0,2 on a script: its DataLoader's prefetch_factor is None without
    workers and 2 with them (PyTorch's default), and the row said 'differ in 2 ways at once
    (num_workers 0 -> 2; prefetch_factor None -> 2)'. A prefetch_factor set apart from the
    workers is still a difference of its own, also beside a change of the workers (0 -> 2 with
    prefetch_factor None -> 4 was said as PyTorch's default)."""
    def confounds_of(before: dict[str, object], after: dict[str, object]) -> list[str]:
        base = run_with_parts("a", {"compute": 70}, knobs=before)
        return compare_runs([base, run_with_parts("b", {"compute": 40}, knobs=after)]
                            ).rows[1].confounds

    assert confounds_of({"num_workers": 0, "prefetch_factor": None},
                        {"num_workers": 2, "prefetch_factor": 2}) == [
        "num_workers 0 -> 2 (prefetch_factor None -> 2, PyTorch's default with that many "
        "workers)"]
    assert confounds_of({"num_workers": 2, "prefetch_factor": 2},
                        {"num_workers": 4, "prefetch_factor": 4}) == [
        "num_workers 2 -> 4", "prefetch_factor 2 -> 4"]
    # The workers' change does not make a prefetch_factor the script set: 4 is not PyTorch's.
    assert confounds_of({"num_workers": 0, "prefetch_factor": None},
                        {"num_workers": 2, "prefetch_factor": 4}) == [
        "num_workers 0 -> 2", "prefetch_factor None -> 4"]
    assert confounds_of({"num_workers": 4, "prefetch_factor": 2},
                        {"num_workers": 0, "prefetch_factor": None}) == [
        "num_workers 4 -> 0 (prefetch_factor 2 -> None, PyTorch's default with that many "
        "workers)"]


def test_a_line_profiler_breakdown_is_not_compared_part_by_part() -> None:
    """torch.profiler's breakdown (loader 0.5, compute 2.6, other 0.5 ms) against
    line_profiler's, which measured only the DataLoader wait and the rest (loader 0.5, compute
    2.9 ms): 'Other fell 0.5 ms -> 0' would be the two profilers' difference, not the runs', so
    no part is credited and the sentence says which parts each measured."""
    base = run_with_parts("traced", {"dataloader": 0.5, "compute": 2.6, "other": 0.5})
    base.metrics.breakdown = dataclasses.replace(
        base.metrics.breakdown, measured=frozenset({"dataloader", "compute", "other"}))
    lines = run_with_parts("lines", {"dataloader": 0.5, "compute": 2.9})
    lines.metrics.breakdown = Breakdown("lprof", lines.metrics.breakdown.step_ns,
                                        lines.metrics.breakdown.parts_ns,
                                        measured=frozenset({"dataloader", "compute"}))
    row = compare_runs([base, lines]).rows[1]
    assert row.attribution == [] and row.unexplained_ns is None
    assert row.breakdown_delta_ns == {}  # the per-part table would show the same 'Other -0.5 ms'
    assert row.explanation.startswith(
        "The breakdowns split the step differently (traced's torch.profiler breakdown measures "
        "DataLoader wait, Compute and Other; lines's line_profiler breakdown measures DataLoader "
        "wait and Compute): the step time alone is compared.")


def test_line_profiler_leaves_the_parts_it_cannot_see_unmeasured(fixtures_dir: Path) -> None:
    """loader_heavy's .lprof alone: its lines give the DataLoader wait (4110.8 ms) and the rest
    of the loop (435.0 ms, as compute); every other part is unmeasured, never '0 ms' in the
    reports or 0.0 in the JSON."""
    report = analyze_paths([fixtures_dir / "loader_heavy" / "train.lprof"], AnalyzeOptions())
    breakdown = report.runs[0].metrics.breakdown
    assert breakdown.origin == "lprof" and breakdown.measured == {"dataloader", "compute"}
    assert (breakdown.parts_ns["dataloader"], breakdown.parts_ns["compute"]) == (
        4_110_770_516, 434_986_521)
    text = render_markdown(report)
    assert "| Other | unmeasured |" in text and "| Host-to-device copy | unmeasured |" in text
    assert ("| Rest of the loop (line\\_profiler cannot tell compute from other work) | "
            "435.0 ms |") in text
    # Its total is the mean pass of the loop, not a step window it never saw.
    assert "| **Mean step (the loop's time over its passes)** | **4,545.8 ms** |" in text
    data = json.loads(render_json(report))["runs"][0]["breakdown"]
    assert data["other"] is None and data["h2d_copy"] is None and data["compute"] == 434.987


def test_both_runs_parts_are_split_over_the_steps_of_the_common_source(
        fixtures_dir: Path, nsys_available: str, tmp_path: Path) -> None:
    """loader_heavy's nsys report (NVTX ranges on a CPU-only run: DataLoader wait and the rest)
    against compute_heavy's nsys report and torch.profiler trace: nsys timed both runs' steps,
    so compute_heavy's parts are split over nsys's steps too (its own breakdown, torch.profiler's,
    is over ProfilerStep spans and measures compute): DataLoader wait 862.6 -> 29.4 ms (its
    `dataloader` ranges; it was 864.4 -> 30.5 ms while the time between the step ranges counted
    as fetching), Other 202.4 -> 1637.3 ms, adding up to the 601.8 ms step difference, and no
    compute is claimed from a capture that never measured it. The parts had not been compared
    at all ('the breakdowns split the step differently'); before that, 'Compute grew 0.0 ms ->
    1616.6 ms' (278% of the difference) credited a part nsys never measured."""
    traced = tmp_path / "traced"
    traced.mkdir()
    for source in [fixtures_dir / "compute_heavy" / "nsys.nsys-rep",
                   *(fixtures_dir / "compute_heavy" / "trace").iterdir()]:
        (traced / source.name).write_bytes(source.read_bytes())
    report = analyze_paths([fixtures_dir / "loader_heavy" / "nsys.nsys-rep", traced],
                           AnalyzeOptions())
    assert report.comparison.steps_origin == "nsys"
    ranges, ops = (run.metrics.breakdown for run in report.runs)
    assert ranges.measured == {"dataloader", "other"}
    assert ops.origin == "kineto"  # the run's own section keeps the best-attributing source
    assert ops.measured == {"dataloader", "compute", "comm_exposed", "other"}
    row = report.comparison.rows[1]
    assert row.breakdown_delta_ns == {"dataloader": -833_171_068, "other": 1_434_930_008}
    assert row.unexplained_ns == 0 and row.parts_not_compared is None
    assert row.breakdown.origin == "nsys" and row.breakdown.measured == {"dataloader", "other"}
    assert row.breakdown.step_ns == 1_666_721_796
    assert ("In the profiled runs, mean step time grew by 601.8 ms per step (1065.0 ms -> "
            "1666.7 ms): Other grew 202.4 ms -> 1637.3 ms (+1434.9 ms, 238% of the difference); "
            "offset by DataLoader wait fell 862.6 ms -> 29.4 ms (-833.2 ms).") in row.explanation
    assert "Compute" not in row.explanation
    assert ("| traced | -833.2 ms | unmeasured | unmeasured | unmeasured | unmeasured | "
            "unmeasured | +1,434.9 ms |") in render_markdown(report)
    # Runs whose own breakdowns one profiler made keep them: loader_heavy's folder (nsys,
    # torch.profiler, line_profiler) against this one, both split over ProfilerStep spans.
    whole = analyze_paths([fixtures_dir / "loader_heavy", traced], AnalyzeOptions())
    assert whole.comparison.steps_origin == "nsys"
    row = whole.comparison.rows[1]
    assert (row.breakdown.origin, row.breakdown.step_ns) == ("kineto", 1_635_341_482)
    assert ("(1112.9 ms -> 1645.6 ms, timed by Nsight Systems); in the torch.profiler breakdown "
            "(its own steps 4871.3 ms -> 1635.3 ms): Compute grew 388.4 ms -> 1616.6 ms") \
        in row.explanation


def test_a_run_profiled_twice_is_split_over_the_steps_it_shares(tmp_path: Path) -> None:
    """One run under nsys (NVTX 'step i' ranges opened after a 3 ms fetch, 10 ms apart) and
    torch.profiler (10 ms ProfilerStep spans holding the fetch), against a run under
    torch.profiler alone (8 ms steps, a 1 ms fetch): the common source is torch.profiler, so
    the first run's parts are split over its ProfilerStep spans, not over nsys's step ranges
    (its own breakdown, nsys's, which attributes as well and comes first): DataLoader wait 3.0
    -> 1.0 ms explains the whole 2.0 ms. Each run's own source had been kept, and the row read
    'The breakdowns come from different profilers (both's by Nsight Systems, fast's by
    torch.profiler) ...: the step time alone is compared', the chart of every run setting
    nsys's 9.3 ms step beside torch.profiler's 8.0 ms."""
    both, fast = tmp_path / "both", tmp_path / "fast"
    both.mkdir(), fast.mkdir()
    gpu_trace(both / "both.pt.trace.json", 10_000, 3_000)
    gpu_trace(fast / "fast.pt.trace.json", 8_000, 1_000)
    ms = 1_000_000
    opens = [10 * ms * i + 3 * ms for i in range(6)]
    write_nsys_export(both / "both.sqlite",
                      [(t + 50_000, t + 50_000 + 5 * ms, 500 + i, "gemm_kernel")
                       for i, t in enumerate(opens)],
                      [(t, t + 6 * ms, f"step {i}") for i, t in enumerate(opens)],
                      [(t + 10_000, t + 30_000, 500 + i, "cudaLaunchKernel_v7000")
                       for i, t in enumerate(opens)])
    report = analyze_paths([both, fast], AnalyzeOptions())
    assert report.comparison.steps_origin == "kineto"
    own = report.runs[0].metrics.breakdown
    assert (own.origin, own.step_ns) == ("nsys", 9_333_333)
    base, row = report.comparison.rows
    assert row.explanation.startswith(
        "Mean step time fell by 2.0 ms per step (10.0 ms -> 8.0 ms): DataLoader wait fell 3.0 ms "
        "-> 1.0 ms (-2.0 ms, 100% of the difference).")
    assert row.breakdown_delta_ns["dataloader"] == -2 * ms
    assert sum(row.breakdown_delta_ns.values()) == -2 * ms and row.unexplained_ns == 0
    assert (base.breakdown.origin, base.breakdown.step_ns) == ("kineto", 10 * ms)
    assert base.breakdown.parts_ns["dataloader"] == 3 * ms
    chart = next(c for c in comparison_charts(report.runs, report.comparison)
                 if c.id == "chart-compare-breakdown")
    loader = next(t for t in chart.figure.data if t.name == "DataLoader wait")
    assert list(loader.x) == [3.0, 1.0]


def test_every_row_is_timed_by_the_one_profiler_all_runs_have(fixtures_dir: Path) -> None:
    """loader_heavy (nsys, torch.profiler, line_profiler) against compute_heavy's torch.profiler
    trace alone: only torch.profiler timed the steps of both, so both rows are its median step
    windows, 4371.3 ms -> 1605.2 ms (2.72x; the median of every ProfilerStep window, the last
    one too: leaving it out had read 7275.1 ms -> 1683.0 ms). Each run's own step source had
    set nsys's 1112.9 ms start-to-start mean beside torch.profiler's median and read 0.66x."""
    trace = next((fixtures_dir / "compute_heavy" / "trace").iterdir())
    report = analyze_paths([fixtures_dir / "loader_heavy", trace], AnalyzeOptions())
    comparison = report.comparison
    assert comparison.steps_origin == "kineto" and comparison.steps_unknown_reason is None
    assert report.runs[0].metrics.steps.origin == "nsys"  # the run's own preferred source
    base, row = comparison.rows
    assert (base.step_time_ns, row.step_time_ns) == (4_371_302_256, 1_605_229_833)
    assert base.step_time_kind == row.step_time_kind == "median"
    assert row.speedup == pytest.approx(4_371_302_256 / 1_605_229_833)
    assert "mean step time fell by 3236.0 ms per step (4871.3 ms -> 1635.3 ms" in row.explanation
    assert "Nsight Systems" not in row.explanation
    data = json.loads(render_json(report))["comparison"]
    assert (data["steps_origin"], data["steps_unknown_reason"]) == ("kineto", None)
    assert "| Run | Step (profiled, torch.profiler) |" in render_markdown(report)


def test_no_profiler_timed_every_run_so_no_step_time_is_compared(
        fixtures_dir: Path, nsys_available: str) -> None:
    """An nsys report against a torch.profiler trace: no profiler timed both runs' steps, so no
    row has a step time or a step-time speedup, and the comparison says why rather than set
    nsys's 1112.9 ms beside torch.profiler's 1683.0 ms."""
    trace = next((fixtures_dir / "compute_heavy" / "trace").iterdir())
    report = analyze_paths([fixtures_dir / "loader_heavy" / "nsys.nsys-rep", trace],
                           AnalyzeOptions())
    comparison = report.comparison
    name = report.runs[1].name  # the trace's file name without its suffixes
    why = (f"no profiler timed the steps of every run (nsys: Nsight Systems; {name}: "
           "torch.profiler), and each profiler slows a step by its own amount, so step times of "
           "two profilers are not compared")
    assert comparison.steps_origin is None and comparison.steps_unknown_reason == why
    assert all(r.step_time_ns is None and r.step_time_kind is None and r.speedup is None
               for r in comparison.rows)
    row = comparison.rows[1]
    assert row.attribution == [] and row.explanation == f"Profiled step time unknown: {why}."
    assert "| Run | Step (profiled): unknown |" in render_markdown(report)


def test_a_run_without_steps_leaves_the_others_their_common_source() -> None:
    """The baseline (nsys and torch.profiler), a run with torch.profiler's steps and one whose
    profilers all failed (only the unprofiled throughput): the two timed runs share
    torch.profiler, so their rows keep their step times, and the untimed run's row gives its
    throughput ratio and says it has no steps rather than take every step time away."""
    base = run_with_parts("base", {"dataloader": 20, "compute": 80}, steps_ms=90)
    fast = run_with_parts("fast", {"dataloader": 10, "compute": 80})
    bare = RunAnalysis("bare", [], "unknown", "", RunMetrics(), [])
    base.metrics.throughput_samples_per_s, bare.metrics.throughput_samples_per_s = 100.0, 150.0
    comparison = compare_runs([base, fast, bare])
    assert comparison.steps_origin == "kineto"
    rows = {row.name: row for row in comparison.rows}
    assert (rows["base"].step_time_ns, rows["fast"].step_time_ns) == (100_000_000, 90_000_000)
    assert rows["bare"].step_time_ns is None and rows["bare"].speedup == pytest.approx(1.5)
    assert rows["bare"].explanation == (
        "Profiled step time unknown: no profiler timed the steps of bare.")


def nsys_breakdown(run: RunAnalysis, kineto_ms: float | None = None) -> RunAnalysis:
    """The run with its breakdown and steps made nsys's (GPU events: every part), and
    torch.profiler's steps of ``kineto_ms`` beside them when given, as a run profiled under
    both keeps nsys's breakdown."""
    metrics = run.metrics
    metrics.breakdown = dataclasses.replace(metrics.breakdown, origin="nsys")
    metrics.steps_by_origin = [dataclasses.replace(metrics.steps, origin="nsys")]
    if kineto_ms is not None:
        step = round(kineto_ms * 1e6)
        metrics.steps_by_origin.append(StepStats("kineto", 10, step, step, step, step, step))
    metrics.steps = metrics.steps_by_origin[0]
    return run


def test_breakdowns_of_two_profilers_are_not_subtracted_without_a_step_source() -> None:
    """The baseline's breakdown and steps nsys's, the run's torch.profiler's: no step time is
    compared, and no part either ('Compute +50.0 ms' in the per-part table and the JSON had set
    torch.profiler's compute, its per-operator cost in it, beside nsys's)."""
    base = nsys_breakdown(run_with_parts("nsysrun", {"dataloader": 20, "compute": 80}))
    run = run_with_parts("kinetorun", {"dataloader": 20, "compute": 130})
    report = Report("t", "test", runs=[base, run], comparison=compare_runs([base, run]))
    row = report.comparison.rows[1]
    assert row.breakdown_delta_ns == {} and row.attribution == []
    assert row.explanation.startswith("Profiled step time unknown: no profiler timed the steps")
    assert json.loads(render_json(report))["comparison"]["rows"][1]["breakdown_delta_ms"] == {}
    assert "+50.0 ms" not in render_markdown(report)


def test_a_change_by_part_table_holds_only_runs_compared_by_part() -> None:
    """No run compared part by part with the baseline: the reports show no table of changes by
    part (it had held the baseline's row alone, 0 ms in every part) but say which run was left
    out and why, as the JSON row does (``parts_not_compared``)."""
    base = nsys_breakdown(run_with_parts("nsysrun", {"dataloader": 20, "compute": 80}))
    run = run_with_parts("kinetorun", {"dataloader": 20, "compute": 130})
    report = Report("t", "test", runs=[base, run], comparison=compare_runs([base, run]))
    why = ("the breakdowns come from different profilers (nsysrun's by Nsight Systems, "
           "kinetorun's by torch.profiler), and each profiler slows the parts it times by its "
           "own amount, so their parts are not compared")
    assert [row.parts_not_compared for row in report.comparison.rows] == [None, why]
    assert json.loads(render_json(report))["comparison"]["rows"][1]["parts_not_compared"] == why
    markdown, html = render_markdown(report), render_html(report)
    assert "| nsysrun | 0 ms |" not in markdown and "Change per step against the baseline" \
        not in html
    assert f"Not compared part by part with nsysrun: kinetorun ({why})." in markdown
    assert f"kinetorun ({why.replace(chr(39), '&#39;')})." in html


def test_a_changed_knob_is_listed_whatever_the_run_is_named() -> None:
    """A run named after its knob ('amp', whose name the sentence quotes) still lists the knob's
    change among the differences: a name in the text is no statement of the change."""
    base = nsys_breakdown(run_with_parts("base", {"dataloader": 20, "compute": 80},
                                         knobs={"amp": False}), kineto_ms=150)
    run = run_with_parts("amp", {"dataloader": 20, "compute": 120}, knobs={"amp": True})
    explanation = compare_runs([base, run]).rows[1].explanation
    assert "amp's by torch.profiler" in explanation
    assert explanation.endswith("Also different between these runs: amp False -> True.")


@pytest.mark.parametrize(("name", "knobs", "world_sizes", "confound"), [
    ("amp False -> True", ({"amp": False}, {"amp": True}), (None, None), "amp False -> True"),
    ("world size 1 -> 2", ({}, {}), (1, 2), "world size 1 -> 2"),
])
def test_a_run_named_as_its_change_still_lists_the_change(
        name: str, knobs: tuple[dict[str, object], dict[str, object]],
        world_sizes: tuple[int | None, int | None], confound: str) -> None:
    """A run named by the change it makes, as the row would say it: its name is in the sentence
    on the breakdowns of two profilers, which states no change, so the change is still listed.
    It was matched in the sentence's text and taken as stated, and the row left it out."""
    base = nsys_breakdown(run_with_parts("base", {"dataloader": 20, "compute": 80},
                                         knobs=knobs[0]), kineto_ms=150)
    run = run_with_parts(name, {"dataloader": 20, "compute": 120}, knobs=knobs[1])
    base.world_size, run.world_size = world_sizes
    row = compare_runs([base, run]).rows[1]
    assert row.confounds == [confound]
    assert row.explanation == (
        f"The breakdowns come from different profilers (base's by Nsight Systems, {name}'s by "
        "torch.profiler), and each profiler slows the parts it times by its own amount, so "
        "their parts are not compared: the step time alone is compared. Also different between "
        f"these runs: {confound}.")


def test_what_a_row_credits_is_what_it_states() -> None:
    """The credited sentence states the two knobs' changes it names (the record the row's list
    of differences reads, not its words); the same row within noise states none."""
    base = run_with_parts("base", {"dataloader": 30, "h2d_copy": 15, "compute": 55},
                          knobs={"num_workers": 0, "pin_memory": False})
    run = run_with_parts("fast", {"dataloader": 10, "h2d_copy": 5, "compute": 55},
                         knobs={"num_workers": 4, "pin_memory": True})
    said = explain(base, run, changed_knobs(base, run), Noise(0.05, False), "kineto")
    assert said.text.endswith("The DataLoader change (num_workers 0 -> 4, pin_memory False -> "
                              "True) and the copy change (pin_memory False -> True) brought the "
                              "gain.")
    assert {(c.kind, c.knob, c.phrase) for c in said.stated} == {
        ("knob", "num_workers", "num_workers 0 -> 4"),
        ("knob", "pin_memory", "pin_memory False -> True")}
    assert said.stated == frozenset(confounds(base, run))
    within = explain(base, run, changed_knobs(base, run), Noise(0.5, True), "kineto")
    assert within.stated == frozenset() and "brought" not in within.text


def test_breakdowns_of_two_profilers_are_not_compared_part_by_part() -> None:
    """The baseline profiled under nsys (its breakdown, 100 ms steps) and torch.profiler (150
    ms steps, the common source), the run, the same work with AMP on, under torch.profiler
    alone (140 ms): its compute 120 ms against nsys's 80 ms is torch.profiler's own cost, so no
    part moves, no rest is left unexplained and AMP is credited with nothing. The row had read
    'offset by Compute grew 80.0 ms -> 120.0 ms (+40.0 ms); -50.0 ms (500% of the difference)
    is not in the breakdown'."""
    base = nsys_breakdown(run_with_parts("base", {"dataloader": 20, "compute": 80},
                                         knobs={"amp": False}), kineto_ms=150)
    run = run_with_parts("half", {"dataloader": 20, "compute": 120}, knobs={"amp": True})
    comparison = compare_runs([base, run])
    assert comparison.steps_origin == "kineto"
    row = comparison.rows[1]
    assert row.step_speedup == pytest.approx(150 / 140)
    assert row.attribution == [] and row.breakdown_delta_ns == {}
    assert row.unexplained_ns is None
    assert row.explanation == (
        "The breakdowns come from different profilers (base's by Nsight Systems, half's by "
        "torch.profiler), and each profiler slows the parts it times by its own amount, so "
        "their parts are not compared: the step time alone is compared. Also different between "
        "these runs: amp False -> True.")


def test_a_step_time_of_one_window_is_said_to_be_one_interval(tmp_path: Path) -> None:
    """A run of one 10 ms ProfilerStep against one of six 8 ms steps: the first row's step
    time is the median of a single step window, one measurement, and the comparison table
    showed it as '10.0 ms median' like the other's median of six. The row says how many windows
    its step time is the median of, and the table says 'one interval' where it is one."""
    one, six = tmp_path / "one", tmp_path / "six"
    one.mkdir(), six.mkdir()
    gpu_trace(one / "one.pt.trace.json", 10_000, 3_000, steps=1)
    gpu_trace(six / "six.pt.trace.json", 8_000, 1_000)
    report = analyze_paths([one, six], AnalyzeOptions())
    rows = report.comparison.rows
    assert [(r.step_time_ns, r.step_time_kind, r.step_intervals) for r in rows] == [
        (10_000_000, "median", 1), (8_000_000, "median", 6)]
    assert [r.single_interval for r in rows] == [True, False]
    markdown = render_markdown(report)
    assert "| one | 10.0 ms median (one interval: a single measurement) |" in markdown
    assert "| six | 8.0 ms median |" in markdown
    html = render_html(report)
    assert ('<td class="num">10.0 ms median (one interval: a single measurement)</td>' in html)
    data = json.loads(render_json(report))["comparison"]["rows"]
    assert [r["step_time_intervals"] for r in data] == [1, 6]
