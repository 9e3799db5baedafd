"""Comparison noise: the t quantile, each run's step spread, and the within-noise flag, from the
project's fixtures (whose manifests hold the plain run's per-step durations) and the corpus."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.compare import (
    NOISE_BLOCKS,
    Spread,
    noise_band,
    step_spread,
    t_quantile,
    within_noise,
)
from profreport.reports.render.html import render_html


def test_t_quantile_matches_the_tables() -> None:
    """Two-sided 95% critical values of Student's t (printed tables: 2.571, 2.228, 2.042)."""
    assert t_quantile(0.975, 5) == pytest.approx(2.5706, abs=0.01)
    assert t_quantile(0.975, 10) == pytest.approx(2.2281, abs=0.002)
    assert t_quantile(0.975, 30) == pytest.approx(2.0423, abs=0.001)


def test_identical_spreads_give_a_symmetric_band() -> None:
    """Two runs of 5 blocks with 10% relative spread: band exp(t(8 df) * sqrt(2 * 0.01 / 5)) - 1."""
    spread = Spread(mean=100.0, stdev=10.0, count=5)
    band = noise_band(spread, spread)
    assert band == pytest.approx(math.expm1(t_quantile(0.975, 8) * math.sqrt(0.004)))
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
    spread = step_spread(report.runs[0])
    assert spread.count == NOISE_BLOCKS
    assert spread.mean == pytest.approx(np.mean(blocks))
    assert spread.stdev == pytest.approx(np.std(blocks, ddof=1))


def test_fixture_comparison_flags_noise_consistently(fixtures_dir: Path) -> None:
    """compute_heavy against loader_heavy: the flag agrees with the band, the band comes from
    both plain runs, and the HTML table prints the row's band."""
    report = analyze_paths([fixtures_dir / "loader_heavy", fixtures_dir / "compute_heavy"],
                           AnalyzeOptions())
    row = report.comparison.rows[1]
    expected = noise_band(step_spread(report.runs[0]), step_spread(report.runs[1]))
    assert row.noise_fraction == pytest.approx(expected) and row.noise_fraction > 0
    assert row.within_noise is (abs(math.log(row.speedup)) <= math.log1p(row.noise_fraction))
    said = row.explanation.startswith(f"{row.speedup:.2f}× is within this machine's run-to-run")
    assert said is row.within_noise
    page = render_html(report)
    assert f"±{row.noise_fraction:.0%}" in page[page.index('id="comparison"'):]


def test_step_stats_carry_their_spread(corpus: Path) -> None:
    """torch.profiler's 6 ResNet-50 steps (num_workers 0): stdev 5.70 ms around 174.8 ms."""
    report = analyze_paths([corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz"],
                           AnalyzeOptions())
    steps = report.runs[0].metrics.steps
    assert steps.count == 6 and steps.mean_ns == 174_829_333
    assert steps.stdev_ns == 5_698_040
