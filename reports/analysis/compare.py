"""Several runs against one baseline: speedup, breakdown deltas, changed knobs, and why.

Which speedup: a profiler slows each run by its own amount (torch.profiler by the number of
operators, line_profiler by the Python lines), and a step holds a batch whose size may differ
between runs, so step times of profiled runs can move the other way from the samples per second
the run achieves without a profiler. When both runs have the runner's
unprofiled throughput, the speedup is the throughput ratio (run over baseline) and the
profiled step-time ratio (baseline over run) is kept beside it (``step_speedup``); otherwise the
speedup is the step-time ratio. When the two ratios point in opposite directions the row's
explanation says so before naming the part of the step that moved.

Step source: every row's profiled steps come from one profiler, the first of
``STEP_SOURCE_ORDER`` that timed the steps of every run (each run's own preferred source could
set one profiler's figure beside another's, and each profiler slows a step by its own amount).
When no profiler timed them all, no step time is compared and each row says why.

Noise: identical work on a shared machine varies by tens of percent between launches. Each side's
step samples (the plain run's per-step durations, averaged in consecutive blocks; else the
profiled step windows' median with its robust error) give the relative standard error; a
Welch t-interval on the log of the ratio gives the band (``noise_fraction``) at
``NOISE_CONFIDENCE``. A speedup inside it is ``within_noise``: its explanation says so first and
names the part that moved without claiming a cause or a gain. That band and verdict (``Noise``)
are the row's one statement of noise: the attribution makes no noise claim of its own, and
judges the step difference it splits by the same band and rule (``Noise.covers``). A part's gain
or loss is claimed only when the part moved the same way as the whole run; each part judged on
its own spread says that band is the part's.

Attribution: the breakdown's parts add up to its step, so the step-time difference splits into
the parts' differences. Each run's breakdown is its best-attributing profiler's when one
profiler made them all, else its breakdown over the common step source's steps where it has one
(see one_step_definition). Parts are compared only between breakdowns that one profiler made
over the same parts (each profiler slows the parts it times by its own amount): else no part's
change, attribution or knob credit is given, and the sentence says why. Parts that moved with
the step are its drivers, each with the share of the difference it explains (a driver can
explain more than all of it when others moved against it); parts that moved the other way are
named as offsets, never as the reason. When the step time comes from another profiler than the
breakdown, the sentence names both profilers and the breakdown's own steps, and the rest beyond
the noise band is reported as unexplained. A knob change is credited only to the drivers, and
only when the change is beyond noise and the profiled step time moved the same way as the
speedup.

Confounds: everything else that differs between two runs (``confounds``) is said once in the
row: credited, listed as what the change cannot be credited to, or, after the row's sentences,
as also different. Each sentence builder returns what it states (``Said``), and the row lists
the rest from that record, never from the words of its sentences.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Literal

import numpy as np

from profreport import pysource
from profreport.errors import UsageError
from profreport.reports.analysis.findings import RunContext, cpu_load
from profreport.reports.analysis.findings.compute import AMP_PRESENT_FRACTION
from profreport.reports.analysis.job import mostly_waiting
from profreport.reports.analysis.ops import reduced_precision
from profreport.reports.analysis.results import (
    BREAKDOWN_PARTS,
    PART_LABELS,
    Breakdown,
    Comparison,
    ComparisonRow,
    Origin,
    PartChange,
    PartRole,
    RankVerdict,
    RunAnalysis,
    StepStats,
    StepTimeKind,
    origin_label,
    rank_label,
)
from profreport.units import ms, nbytes, pct

#: Which knobs act on which part of the step (to name the change that brought a gain).
PART_KNOBS = {
    "dataloader": ("num_workers", "persistent_workers", "pin_memory", "batch_size"),
    "h2d_copy": ("pin_memory", "non_blocking"),
    "compute": ("amp", "channels_last", "compile", "batch_size"),
    "copy_memset": ("set_to_none", "non_blocking"),
    "comm_exposed": ("ddp", "nproc", "bucket_cap_mb", "broadcast_buffers", "dataparallel"),
    "host_runtime": ("compile", "batch_size"),
    "other": (),
}
#: The kind of change each part's knobs make, for the sentence.
PART_CHANGE = {"dataloader": "the DataLoader change", "h2d_copy": "the copy change",
               "compute": "the compute change", "copy_memset": "the copy change",
               "comm_exposed": "the parallelism change",
               "host_runtime": "the launch change", "other": "the change"}
#: Confidence a speedup's interval must reach before it counts as a change: 95%, the usual bar;
#: steps on a shared machine wobble by tens of percent, and a lower bar would call that a gain.
NOISE_CONFIDENCE = 0.95
#: The plain run's steps are averaged in this many consecutive blocks before the test: load on a
#: shared machine comes in stretches, so neighbouring steps are not independent samples.
NOISE_BLOCKS = 5
#: A part whose change is under 5% of the step-time difference is summed with the other small
#: ones instead of named: listing every wobble of a few tenths of a ms would bury the cause.
PART_SHARE_MIN = 0.05
#: The profilers a comparison times every run's steps with, the first that timed them all, least
#: intrusive first (as metrics picks a run's step source): nsys records CUDA and NVTX calls,
#: torch.profiler every operator, line_profiler every Python line.
STEP_SOURCE_ORDER = ("nsys", "kineto", "lprof")
#: Host-to-device bytes per step differing by this factor between two runs are another batch
#: or input (the same training moves the same batch each step): a confound of the comparison.
BYTES_CONFOUND_RATIO = 1.25
#: Scales the median absolute deviation to a standard deviation for normally spread samples, so
#: one warm-up or teardown step cannot widen the spread as it widens the standard deviation.
MAD_TO_SD = 1.4826
#: Standard error of a median over that of a mean for normal samples (sqrt(pi/2)): the price of
#: a centre that one outlying step cannot move.
MEDIAN_SE_FACTOR = 1.2533


@dataclass(frozen=True)
class Spread:
    """Mean, sample standard deviation and count of one run's step samples, ns."""

    mean: float
    stdev: float
    count: int

    @property
    def relative_variance(self) -> float:
        """Squared relative standard error of the mean (the variance of its logarithm)."""
        return (self.stdev / self.mean) ** 2 / self.count


def block_means(samples: list[int], blocks: int = NOISE_BLOCKS) -> np.ndarray:
    """Means of ``blocks`` consecutive runs of samples (the samples themselves when there are
    fewer than two per block)."""
    values = np.asarray(samples, dtype=np.float64)
    if len(values) < 2 * blocks:
        return values
    return np.array([chunk.mean() for chunk in np.array_split(values, blocks)])


def robust_spread(samples: tuple[int, ...] | list[int]) -> Spread | None:
    """Median of per-step samples with the standard error a median has (MAD_TO_SD times the
    median absolute deviation, the sample standard deviation when that is 0, times
    MEDIAN_SE_FACTOR); None with fewer than two samples."""
    values = np.asarray(samples, dtype=np.float64)
    if len(values) < 2:
        return None
    median = float(np.median(values))
    mad = float(np.median(np.abs(values - median)))
    sd = MAD_TO_SD * mad if mad > 0 else float(values.std(ddof=1))
    return Spread(median, MEDIAN_SE_FACTOR * sd, len(values))


def common_source(timed: Sequence[tuple[str, Collection[str]]],
                  member: str) -> tuple[Origin | None, str | None]:
    """The first profiler of STEP_SOURCE_ORDER that timed the steps of every one of ``timed``
    (each a name and the profilers that timed its steps) that has steps (one without any sets
    no step time beside another's), so that all their step times are one profiler's; else None
    and why, ``member`` ('run', 'rank') naming what they are."""
    timed = [(name, origins) for name, origins in timed if origins]
    if not timed:
        return None, f"no profiler timed the steps of any {member}"
    for origin in STEP_SOURCE_ORDER:
        if all(origin in origins for _, origins in timed):
            return origin, None
    said = "; ".join(f"{name}: " + ", ".join(origin_label(o) for o in STEP_SOURCE_ORDER
                                             if o in origins) for name, origins in timed)
    return None, (f"no profiler timed the steps of every {member} ({said}), and each profiler "
                  "slows a step by its own amount, so step times of two profilers are not "
                  "compared")


def common_step_source(runs: list[RunAnalysis]) -> tuple[Origin | None, str | None]:
    """The profiler every row's step time comes from (see common_source), else None and why."""
    return common_source([(run.name, {s.origin for s in run.metrics.steps_by_origin})
                          for run in runs], "run")


def one_step_definition(runs: list[RunAnalysis], origin: Origin | None) -> list[RunAnalysis]:
    """The runs as the comparison splits their steps: each with its own breakdown when one
    profiler made all of them (over that profiler's steps); else each with its breakdown over
    the steps of ``origin``, the common step source, where it has one (see over_source), so
    that no two runs' parts are split over different step definitions (nsys's NVTX step ranges
    beside torch.profiler's ProfilerStep spans)."""
    own = {run.metrics.breakdown.origin for run in runs if run.metrics.breakdown is not None}
    return runs if len(own) <= 1 else [over_source(run, origin) for run in runs]


def over_source(run: RunAnalysis, origin: Origin | None) -> RunAnalysis:
    """The run with its step breakdown over ``origin``'s steps (RunMetrics.breakdowns_by_origin)
    when its own is another profiler's and it has that one; else the run as it is."""
    over = run.metrics.breakdowns_by_origin.get(origin) if origin is not None else None
    if over is None:
        return run
    return replace(run, metrics=replace(run.metrics, breakdown=over))


def steps_of(run: RunAnalysis, origin: Origin | None) -> StepStats | None:
    """The run's steps as ``origin`` timed them, or None."""
    return next((s for s in run.metrics.steps_by_origin if s.origin == origin), None)


def part_samples(run: RunAnalysis, part: str) -> tuple[int, ...]:
    """The run's per-step samples of one breakdown part, warm-up left out; empty without
    them."""
    breakdown = run.metrics.breakdown
    return breakdown.per_step_ns.get(part, ()) if breakdown is not None else ()


def step_samples(run: RunAnalysis, origin: Origin | None) -> tuple[int, ...]:
    """The run's step windows as ``origin`` timed them (warm-up left out); empty when it timed
    none (line_profiler knows only the mean pass)."""
    steps = steps_of(run, origin)
    return steps.window_ns if steps is not None else ()


def typical_step(run: RunAnalysis, origin: Origin | None) -> tuple[int | None, StepTimeKind]:
    """The run's typical step as ``origin`` timed it and which statistic it is: the median step
    window (warm-up left out, so one start-up or teardown step cannot move it), else
    step_time_ns, a mean (line_profiler's)."""
    samples = step_samples(run, origin)
    return (int(np.median(samples)), "median") if samples else (step_time_ns(run, origin),
                                                                 "mean")


def samples_per_step(run: RunAnalysis) -> int | None:
    """Samples one step of the whole job takes: the DataLoader's batch size x the batches a
    step takes (gradient accumulation) x the world size; None when the knobs do not say."""
    batch, per = run.knobs.get("batch_size"), run.knobs.get("batches_per_step", 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (batch, per)):
        return None
    return batch * per * (run.world_size or 1)  # type: ignore[operator]


def per_sample_speedup(base: RunAnalysis, run: RunAnalysis, step_speedup: float | None
                       ) -> float | None:
    """The step-time ratio as a speedup in samples: times the run's samples per step over the
    baseline's, where both are known (a weak-scaling point's step holds the batch of every
    process); the step-time ratio itself otherwise."""
    sizes = samples_per_step(base), samples_per_step(run)
    if step_speedup is None or sizes[0] is None or sizes[1] is None:
        return step_speedup
    return step_speedup * sizes[1] / sizes[0]


def shared_cpus(run: RunAnalysis) -> bool:
    """Whether the run's unprofiled launch competed with other processes for the CPUs (see
    metrics.plain_cpu): its throughput and step times are then not its own."""
    return run.metrics.plain_cpu is not None and run.metrics.plain_cpu.shared


def baseline_shared_text(base: RunAnalysis) -> str | None:
    """The baseline row's sentence when its unprofiled launch shared the CPUs with other work
    (no row's speedup is then a throughput ratio), said once there rather than in every row;
    None otherwise."""
    cpu = base.metrics.plain_cpu
    if cpu is None or not cpu.shared:
        return None
    return (f"Its unprofiled run shared the CPUs with other work ({cpu.sharing_text(idle=True)}):"
            " its throughput is not its own, so no speedup here is a throughput ratio.")


def shared_cpu_text(base: RunAnalysis, run: RunAnalysis, step_speedup: float | None,
                    origin: Origin | None) -> str | None:
    """The sentence naming the runs whose unprofiled launch shared the CPUs with other work
    (their throughput is then left out of the speedup; the baseline's figures are in its own
    row, see baseline_shared_text), and whether the launches of ``origin`` whose step times
    replace it shared them too or were not measured (see profiled_sharing_text), or None."""
    shared = [r for r in (base, run) if shared_cpus(r)]
    if not shared:
        return None
    if shared == [base]:
        head = "The baseline's unprofiled run shared the CPUs with other work (as its row says)"
    else:
        said = run.metrics.plain_cpu.sharing_text(run.name, idle=True)  # type: ignore[union-attr]
        head = (f"Both unprofiled runs shared the CPUs with other work (the baseline's as its "
                f"row says; {said})" if len(shared) == 2 else
                f"The unprofiled run shared the CPUs with other work ({said})")
    one = len(shared) == 1
    instead = ("so the speedup is the profiled step-time ratio" + per_sample_text(base, run)
               + profiled_sharing_text(base, run, origin) if step_speedup is not None
               else "and no profiled step time gives a speedup instead")
    return (f"{head}: {'its' if one else 'their'} throughput is not {'its' if one else 'their'}"
            f" own, {instead}.")


def per_sample_text(base: RunAnalysis, run: RunAnalysis) -> str:
    """' per sample (128 samples per step against 64)' when the runs' steps hold different
    numbers of samples (see per_sample_speedup); '' otherwise."""
    sizes = samples_per_step(base), samples_per_step(run)
    if sizes[0] is None or sizes[1] is None or sizes[0] == sizes[1]:
        return ""
    return f" per sample ({sizes[1]:,} samples per step against {sizes[0]:,})"


def profiled_sharing_text(base: RunAnalysis, run: RunAnalysis, origin: Origin | None) -> str:
    """The clause saying which runs' ``origin`` launches (whose step times the speedup then
    takes) also shared the CPUs, or had their sharing unmeasured: a ratio no cleaner than the
    throughput's; '' when both had the CPUs to themselves or no manifest says."""
    if origin is None:
        return ""
    label = origin_label(origin)
    launches = [(r.name, r.metrics.profiled_cpu[origin]) for r in (base, run)
                if origin in r.metrics.profiled_cpu]
    shared = [cpu.sharing_text(name) for name, cpu in launches if cpu is not None and cpu.shared]
    unmeasured = [name for name, cpu in launches if cpu is None]
    clauses = ([f"the {label} launch{'es' if len(shared) > 1 else ''} shared them too "
                f"({'; '.join(shared)})"] if shared else []) + \
        ([f"whether the {label} launch{'es' if len(unmeasured) > 1 else ''} of "
          f"{' and '.join(unmeasured)} shared them was not measured"] if unmeasured else [])
    return f", but {'; and '.join(clauses)}" if clauses else ""


def step_spread(run: RunAnalysis, origin: Origin | None, plain: bool = True) -> Spread | None:
    """Spread of the run's step samples: the plain run's steps in blocks (see NOISE_BLOCKS;
    when ``plain`` and that run did not share the CPUs with other work), else the median of the
    step windows ``origin`` timed and its robust error (see robust_spread); None when neither
    has two samples."""
    samples = block_means(run.metrics.plain_step_ns if plain and not shared_cpus(run) else [])
    if len(samples) >= 2 and samples.mean() > 0:
        return Spread(float(samples.mean()), float(samples.std(ddof=1)), len(samples))
    robust = robust_spread(step_samples(run, origin))
    return robust if robust is not None and robust.mean > 0 else None


def t_quantile(probability: float, df: float) -> float:
    """Student's t quantile from the normal one (Cornish-Fisher expansion; within 0.01 of the
    exact value from 3 degrees of freedom up)."""
    z = NormalDist().inv_cdf(probability)
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def welch_half_width(va: float, vb: float, na: int, nb: int,
                     confidence: float = NOISE_CONFIDENCE) -> float:
    """Half-width of a Welch t-interval for a difference whose two sides have variances ``va``,
    ``vb`` (of their estimates) from ``na``, ``nb`` samples (Welch-Satterthwaite degrees of
    freedom)."""
    if va + vb == 0:
        return 0.0
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    return t_quantile(0.5 + confidence / 2, df) * math.sqrt(va + vb)


def noise_band(base: Spread, run: Spread, confidence: float = NOISE_CONFIDENCE) -> float:
    """Half-width of the confidence interval of the ratio of the two means, as a fraction: a
    Welch t-interval on the log of the ratio (the delta method: the log of a mean has the
    variance of its relative standard error squared)."""
    return math.expm1(welch_half_width(base.relative_variance, run.relative_variance,
                                       base.count, run.count, confidence))


def part_band_ns(base: RunAnalysis, run: RunAnalysis, part: str) -> tuple[int, int, float] | None:
    """One breakdown part judged on its own spread: its median per step in the baseline and in
    the run, and the half-width (ns) of the confidence interval of their difference; None
    without per-step samples on both sides."""
    a, b = robust_spread(part_samples(base, part)), robust_spread(part_samples(run, part))
    if a is None or b is None:
        return None
    half = welch_half_width(a.stdev**2 / a.count, b.stdev**2 / b.count, a.count, b.count)
    return round(a.mean), round(b.mean), half


def within_noise(speedup: float, band: float) -> bool:
    """Whether ``speedup`` lies inside the interval 1 ±``band`` (taken on the log scale)."""
    return abs(math.log(speedup)) <= math.log1p(band)


@dataclass(frozen=True)
class Noise:
    """A row's one statement of noise: the band of its speedup (see noise_band; None when a
    side's spread is unknown) and whether the speedup lies inside it (see within_noise; None
    when the band is unknown). Every sentence of the row takes its noise from here, so none can
    call a difference noise that the row calls beyond it."""

    band: float | None = None
    within: bool | None = None

    def covers(self, before_ns: int, after_ns: int) -> bool:
        """Whether a step that went from ``before_ns`` to ``after_ns`` lies inside the band, by
        the rule the row's speedup is judged with (see within_noise); False when it is unknown."""
        return (self.band is not None and before_ns > 0 and after_ns > 0
                and within_noise(before_ns / after_ns, self.band))

    def rest_ns(self, before_ns: int, after_ns: int) -> float:
        """How far the parts may miss the step difference before the rest is reported as
        unexplained: the band on the baseline's step, else PART_SHARE_MIN of the difference."""
        if self.band is not None and before_ns:
            return self.band * before_ns
        return PART_SHARE_MIN * abs(after_ns - before_ns)


def noise_text(speedup: float, band: float) -> str:
    """The sentence that says a speedup is indistinguishable from noise."""
    return (f"{_ratio_text(speedup)} is within this machine's run-to-run noise "
            f"(±{band:.0%} at {NOISE_CONFIDENCE:.0%} confidence, from the step-to-step spread of "
            "both runs): no change can be claimed.")


def step_time_ns(run: RunAnalysis, origin: Origin | None) -> int | None:
    """Mean time per step as ``origin`` timed the run's steps: the breakdown's step when the
    breakdown comes from that source (its parts add up to it), else the source's wall time per
    step (line_profiler's mean pass); None when it timed none."""
    breakdown = run.metrics.breakdown
    if breakdown is not None and breakdown.origin == origin:
        return breakdown.step_ns
    steps = steps_of(run, origin)
    return None if steps is None else steps.wall_mean_ns or steps.mean_ns


def _sources_text(a: Breakdown, b: Breakdown, origin: Origin) -> tuple[str, str] | None:
    """When the two runs' breakdowns (one profiler's, see split_alike) come from another
    profiler than ``origin``, which timed the steps: who timed the steps ('Nsight Systems') and
    the breakdown with its own steps ('the torch.profiler breakdown (its own steps 370.0 ms ->
    50.0 ms)'), so that no sentence sets figures of two profilers side by side unnamed; None
    when one profiler gives both."""
    if a.origin == origin:
        return None
    return origin_label(origin), (f"the {origin_label(a.origin)} breakdown (its own steps "
                                  f"{ms(a.step_ns)} -> {ms(b.step_ns)})")


def changed_knobs(base: RunAnalysis, run: RunAnalysis) -> dict[str, object]:
    """Knobs whose value differs from the baseline's, as ``{name: {"from": a, "to": b}}``."""
    names = sorted(set(base.knobs) | set(run.knobs))
    return {name: {"from": base.knobs.get(name), "to": run.knobs.get(name)}
            for name in names if base.knobs.get(name) != run.knobs.get(name)}


def _reduced_share(run: RunAnalysis) -> tuple[float, str] | None:
    """Share of the compute in fp16/bf16 and how it was read (ops.reduced_precision); None
    when nothing tells."""
    reading = reduced_precision(run.metrics)
    return None if reading.share is None else (reading.share, reading.source)


def _share_of(run: RunAnalysis, source: str) -> str:
    """What ``run``'s precision share read from ``source`` (ops.reduced_precision) is a share
    of: 'of matmul/convolution time', or by kernel names of its named compute-kernel time
    (KernelMix.of_named_text)."""
    mix = run.metrics.kernel_mix
    return (mix.of_named_text() if source == "kernel names" and mix is not None
            else "of matmul/convolution time")


def _h2d_per_step(run: RunAnalysis) -> int | None:
    """Host-to-device bytes launched per step, or None when not counted."""
    copies = run.metrics.step_copies
    return None if copies is None else copies.bytes_per_step.get("HtoD")


#: What a confound is the change of: a knob, or what the profiles show of the runs.
ConfoundKind = Literal["knob", "world size", "precision", "optimizer", "loader", "bytes"]


@dataclass(frozen=True)
class Confound:
    """One way two runs differ besides their speed (see confounds): what it is, the phrase a
    row says it with, and the knob whose change it is (None for what the profiles show)."""

    kind: ConfoundKind
    phrase: str
    knob: str | None = None


@dataclass(frozen=True)
class Said:
    """Sentences of a row and the confounds they state (credited, listed, or named as a cause),
    so that which differences a row still has to name is known without reading its words."""

    text: str
    stated: frozenset[Confound] = frozenset()


def _joined_to_knob(out: list[Confound], knob: str, phrase: str) -> list[Confound]:
    """The confounds ``out`` with ``phrase`` said with the change of ``knob``, whose own effect
    it is: one difference, not two; [] when ``knob`` did not change."""
    if not any(c.knob == knob for c in out):
        return []
    return [Confound("knob", _said_with(c.phrase, phrase), knob) if c.knob == knob else c
            for c in out]


def _said_with(said: str, phrase: str) -> str:
    """``said (phrase)``; ``said (earlier; phrase)`` when ``said`` ends in what an earlier
    join added."""
    return f"{said[:-1]}; {phrase})" if said.endswith(")") else f"{said} ({phrase})"


def _amp_made(amp: dict[str, object] | None, reduced_after: bool) -> bool:
    """Whether a precision change is the amp knob's change ``amp`` (``{"from": a, "to": b}``):
    amp turned on and the compute went to fp16/bf16, or off and it left them."""
    return amp is not None and bool(amp["to"]) == reduced_after != bool(amp["from"])


def _nproc_made(nproc: dict[str, object] | None, before: int, after: int) -> bool:
    """Whether a world-size change is the nproc knob's change ``nproc``: both moved the same
    way."""
    if nproc is None or not all(isinstance(nproc[k], int) for k in ("from", "to")):
        return False
    return (nproc["to"] > nproc["from"]) == (after > before)  # type: ignore[operator]


def _ddp_made(knobs: dict[str, object]) -> bool:
    """Whether the ddp knob's change is the nproc change's: the runner wraps the model in DDP
    exactly when it trains more than one process (a scaling study's points, the ddp variant
    beside the baseline), so ddp turns on as nproc leaves 1, and off as it comes back."""
    ddp, nproc = knobs.get("ddp"), knobs.get("nproc")
    if not isinstance(ddp, dict) or not isinstance(nproc, dict):
        return False
    return all(isinstance(nproc[side], int) and not isinstance(nproc[side], bool)
               and ddp[side] is (nproc[side] > 1) for side in ("from", "to"))


def _workers_made(knobs: dict[str, object]) -> bool:
    """Whether a prefetch_factor change is PyTorch's default following the num_workers change:
    on both sides the default for that side's workers (pysource.default_prefetch_factor); a
    value the script set is a difference of its own."""
    prefetch, workers = knobs.get("prefetch_factor"), knobs.get("num_workers")
    if not isinstance(prefetch, dict) or not isinstance(workers, dict):
        return False
    return all(isinstance(workers[side], int) and not isinstance(workers[side], bool)
               and prefetch[side] == pysource.default_prefetch_factor(workers[side])
               for side in ("from", "to"))


def confounds(base: RunAnalysis, run: RunAnalysis) -> list[Confound]:
    """Everything that differs between the two runs besides their speed: changed knobs, world
    size, the precision of the compute kernels, the optimizer's kernels, the DataLoader's kind,
    the host-to-device bytes per step (another batch or input); a precision change that the amp
    knob's change makes, a world-size change the nproc knob's, a ddp change the nproc knob's
    (see _ddp_made), or a prefetch_factor change the num_workers knob's (see _workers_made), is
    said with that knob (see _joined_to_knob)."""
    knobs = changed_knobs(base, run)
    out = [Confound("knob", f"{name} {change['from']} -> {change['to']}", name)  # type: ignore[index]
           for name, change in knobs.items()]
    if _workers_made(knobs):
        prefetch = next(c for c in out if c.knob == "prefetch_factor")
        out = _joined_to_knob([c for c in out if c is not prefetch], "num_workers",
                              f"{prefetch.phrase}, PyTorch's default with that many workers")
    if base.world_size != run.world_size and None not in (base.world_size, run.world_size):
        phrase = f"world size {base.world_size} -> {run.world_size}"
        made = _nproc_made(knobs.get("nproc"), base.world_size, run.world_size)  # type: ignore[arg-type]
        out = (_joined_to_knob(out, "nproc", phrase) if made else []) or \
            out + [Confound("world size", phrase)]
    if _ddp_made(knobs):
        ddp = next(c for c in out if c.knob == "ddp")
        out = _joined_to_knob([c for c in out if c is not ddp], "nproc",
                              f"{ddp.phrase}: DDP is how the runner trains several processes")
    before, after = _reduced_share(base), _reduced_share(run)
    if before is not None and after is not None and \
            (before[0] >= AMP_PRESENT_FRACTION) != (after[0] >= AMP_PRESENT_FRACTION):
        # Each side's share is of what its own reading covers; one phrase when both cover alike.
        was = (pct(before[0]) if _share_of(base, before[1]) == _share_of(run, after[1]) else
               f"{pct(before[0])} {_share_of(base, before[1])} ({before[1]})")
        phrase = f"fp16/bf16 compute {was} -> {pct(after[0])} {_share_of(run, after[1])} " \
                 f"({after[1]})"
        made = _amp_made(knobs.get("amp"), after[0] >= AMP_PRESENT_FRACTION)  # type: ignore[arg-type]
        out = (_joined_to_knob(out, "amp", phrase) if made else []) or \
            out + [Confound("precision", phrase)]
    mixes = base.metrics.kernel_mix, run.metrics.kernel_mix
    fused = [None if m is None else m.fused_optimizer for m in mixes]
    if None not in fused and fused[0] != fused[1]:  # a change only between two known kinds
        kinds = ["fused (multi_tensor_apply)" if f else "per-tensor" for f in fused]
        out.append(Confound("optimizer", f"optimizer kernels {kinds[0]} -> {kinds[1]}"))
    loaders = base.metrics.loader_in_process, run.metrics.loader_in_process
    if None not in loaders and loaders[0] != loaders[1] and \
            "num_workers" not in changed_knobs(base, run):
        kinds = ["in the training process" if inside else "in worker processes"
                 for inside in loaders]
        out.append(Confound("loader", f"DataLoader {kinds[0]} -> {kinds[1]} (its spans)"))
    sizes = _h2d_per_step(base), _h2d_per_step(run)
    if sizes[0] and sizes[1] and max(sizes) / min(sizes) >= BYTES_CONFOUND_RATIO:  # type: ignore[type-var, operator]
        out.append(Confound("bytes", f"host-to-device bytes per step {nbytes(sizes[0])} -> "
                            f"{nbytes(sizes[1])} (another batch or input)"))
    return out


def unlike_breakdowns(base: RunAnalysis, run: RunAnalysis) -> str | None:
    """Why the two runs' breakdowns are not compared part by part: they measured different
    parts (Breakdown.measured: a part one side did not measure sits inside another of its
    parts), or two profilers made them (each slows the parts it times by its own amount:
    torch.profiler's compute holds its per-operator cost, nsys's does not); None when one
    profiler made both over the same parts, or a side has none."""
    a, b = base.metrics.breakdown, run.metrics.breakdown
    if a is None or b is None:
        return None
    if a.measured != b.measured:
        return (f"the breakdowns split the step differently ({measured_text(base.name, a)}; "
                f"{measured_text(run.name, b)})")
    if a.origin != b.origin:
        return (f"the breakdowns come from different profilers ({base.name}'s by "
                f"{origin_label(a.origin)}, {run.name}'s by {origin_label(b.origin)}), and each "
                "profiler slows the parts it times by its own amount, so their parts are not "
                "compared")
    return None


def parts_not_compared(base: RunAnalysis, run: RunAnalysis) -> str | None:
    """Why ``run``'s breakdown is not compared part by part with ``base``'s: a side has none (no
    steps split into parts), or they are not alike (see unlike_breakdowns); None when they are
    compared, and for the baseline itself."""
    if run is base:
        return None
    without = [r.name for r in (base, run) if r.metrics.breakdown is None]
    if without:
        return f"no breakdown of the steps of {' or '.join(without)}"
    return unlike_breakdowns(base, run)


def split_alike(base: RunAnalysis, run: RunAnalysis) -> tuple[Breakdown, Breakdown] | None:
    """Both runs' breakdowns when one profiler made both over the same parts, so each part
    means one thing on both sides; None otherwise (see unlike_breakdowns)."""
    a, b = base.metrics.breakdown, run.metrics.breakdown
    if a is None or b is None or unlike_breakdowns(base, run) is not None:
        return None
    return a, b


def breakdown_delta(base: RunAnalysis, run: RunAnalysis) -> dict[str, int]:
    """Run minus baseline, mean ns per step, for each part both breakdowns measured; none when
    either side has no breakdown, or the two are not alike (see split_alike)."""
    alike = split_alike(base, run)
    if alike is None:
        return {}
    a, b = alike
    return {part: b.parts_ns[part] - a.parts_ns[part] for part in BREAKDOWN_PARTS
            if part in a.measured}


def _core_contention(base: RunAnalysis, run: RunAnalysis, part: str,
                     knobs: dict[str, object]) -> str | None:
    """Why compute moved with num_workers on a CPU-only run, when it moved the way contention
    predicts (grew with more workers, fell with fewer): in the run with more busy threads than
    CPUs, the loader workers and PyTorch's intra-op threads share the cores."""
    if part != "compute" or "num_workers" not in knobs or run.metrics.gpu is not None:
        return None
    change = knobs["num_workers"]
    before, after = change["from"], change["to"]  # type: ignore[index]
    if not isinstance(before, int) or not isinstance(after, int) or before == after:
        return None
    grew = run.metrics.breakdown.parts_ns[part] > base.metrics.breakdown.parts_ns[part]  # type: ignore[union-attr]
    if grew != (after > before):
        return None
    more = run if after > before else base
    load = cpu_load(RunContext(more.knobs, more.environment))
    if load is None or not load.oversubscribed:
        return None
    who = "the loader workers compete" if grew else "fewer loader workers compete"
    return (f"num_workers went {before} -> {after} ({load.describe()}"
            f"{'' if more is run else ' in ' + base.name}): {who} with PyTorch's intra-op "
            "threads for the same cores.")


def measured_text(name: str, breakdown: Breakdown) -> str:
    """"loader's torch.profiler breakdown measures DataLoader wait, Compute and Other"."""
    parts = [breakdown.label(part) for part in BREAKDOWN_PARTS if part in breakdown.measured]
    listed = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
    return f"{name}'s {origin_label(breakdown.origin)} breakdown measures {listed}"


def attribute(base: RunAnalysis, run: RunAnalysis, total_ns: int) -> list[PartChange]:
    """Each measured breakdown part's change with its share of the step difference
    ``total_ns``: drivers (moved with the step, at least PART_SHARE_MIN of it) largest first,
    then offsets (moved against it), then minor parts; empty without a breakdown on both
    sides, or when they are not alike (see split_alike)."""
    alike = split_alike(base, run)
    if alike is None:
        return []
    a, b = alike
    changes = []
    for part in (part for part in BREAKDOWN_PARTS if part in a.measured):
        delta = b.parts_ns[part] - a.parts_ns[part]
        share = delta / total_ns if total_ns else None
        role: PartRole = ("minor" if share is None or abs(share) < PART_SHARE_MIN
                          else "driver" if share > 0 else "offset")
        own = part_band_ns(base, run, part)
        changes.append(PartChange(part, a.parts_ns[part], b.parts_ns[part], share, role)
                       if own is None else
                       PartChange(part, a.parts_ns[part], b.parts_ns[part], share, role,
                                  own[0], own[1], own[2], abs(own[1] - own[0]) > own[2]))
    order = {"driver": 0, "offset": 1, "minor": 2}
    return sorted(changes, key=lambda c: (order[c.role], -abs(c.delta_ns), c.part))


def unexplained_ns(changes: list[PartChange], total_ns: int) -> int | None:
    """The step difference the parts' changes do not add up to; None without a breakdown."""
    return total_ns - sum(c.delta_ns for c in changes) if changes else None


def _signed(ns: int) -> str:
    """-67878667 -> '-67.9 ms'; a plus sign for growth."""
    return ("+" if ns > 0 else "-" if ns < 0 else "") + ms(abs(ns))


def _moved(change: PartChange) -> str:
    """'DataLoader wait fell 69.4 ms -> 1.5 ms (-67.9 ms'; the caller closes the bracket."""
    verb = "fell" if change.delta_ns < 0 else "grew"
    return (f"{PART_LABELS[change.part]} {verb} {ms(change.before_ns)} -> {ms(change.after_ns)} "
            f"({_signed(change.delta_ns)}")


def attribution_text(changes: list[PartChange], before_ns: int, after_ns: int,
                     noise: Noise, sources: tuple[str, str] | None = None) -> str:
    """The step difference split into its parts: drivers with their share, offsets named as
    offsets (never as the reason), minor parts summed, and what the parts leave unexplained when
    it exceeds ``noise``'s rest (see Noise.rest_ns); ``sources`` (see _sources_text) names who
    timed the step and the breakdown when they differ. The sentence makes no noise claim of its
    own: the row's (``noise``) is said once, before it."""
    total = after_ns - before_ns
    if total == 0:
        return f"Mean step time unchanged at {ms(before_ns)}."
    # Shares of a difference inside the noise mean nothing (a 79 µs change split 928% / -870%):
    # when the row's band covers it, the parts' moves are said without them.
    within = noise.covers(before_ns, after_ns)
    head = (f"Mean step time {'fell' if total < 0 else 'grew'} by {ms(abs(total))} per step "
            f"({ms(before_ns)} -> {ms(after_ns)}"
            + (f", timed by {sources[0]})" if sources else ")")
            + (f"; in {sources[1]}" if sources else ""))
    drivers = [c for c in changes if c.role == "driver"]
    offsets = [c for c in changes if c.role == "offset"]
    minor = sum(c.delta_ns for c in changes if c.role == "minor")
    rest = unexplained_ns(changes, total) or 0
    # Nor do shares of a difference the parts overshoot, their steps timed by another profiler
    # that moved far more than the step did (9764% of a 1.3 ms difference).
    overshoot = abs(rest) > abs(total) and not within
    clauses = ["; ".join(f"{_moved(c)}" + (")" if within or overshoot else
                                         f", {pct(c.share)} of the difference)")  # type: ignore[arg-type]
                         for c in drivers) or "no part of the breakdown moved with it"]
    if offsets:
        clauses.append("offset by " + ", ".join(f"{_moved(c)})" for c in offsets))
    if minor:
        clauses.append(f"smaller changes {_signed(minor)} together")
    if overshoot:
        clauses.append(f"the parts moved {_signed(total - rest)} together against the step's "
                       f"{_signed(total)}: the breakdown's steps are timed by another profiler "
                       "than the step time, so no share of the difference is given")
    elif abs(rest) > noise.rest_ns(before_ns, after_ns) and not within:
        clauses.append(f"{_signed(rest)} ({pct(rest / total)} of the difference) is not in the "
                       "breakdown, whose steps are timed by another profiler than the step time")
    return f"{head}: " + "; ".join(clauses) + "."


def _credit(base: RunAnalysis, run: RunAnalysis, changes: list[PartChange],
            knobs: dict[str, object]) -> Said:
    """The sentence naming the knob change behind the drivers (or core contention behind a
    compute change), or the knobs that changed when none acts on a driver; '' without knobs;
    with the confounds it states. When the runs differ in several ways (see confounds) and some
    of them are not knobs acting on a driver, nothing is credited: the confounds are listed
    instead."""
    differ = confounds(base, run)
    acting = {name for c in changes if c.role == "driver" for name in PART_KNOBS[c.part]
              if name in knobs}
    if len(differ) > 1 and any(d.knob not in acting for d in differ):
        return Said(f" These runs differ in {len(differ)} ways at once "
                    f"({'; '.join(d.phrase for d in differ)}): the change cannot be credited to "
                    "any one of them.", frozenset(differ))
    for change in changes:
        if change.role != "minor":
            contention = _core_contention(base, run, change.part, knobs)
            if contention is not None:
                return Said(f" {PART_LABELS[change.part]} moved when {contention}",
                            _knob_confounds(differ, {"num_workers"}))
    credited = []
    for change in (c for c in changes if c.role == "driver"):
        related = [name for name in PART_KNOBS[change.part] if name in knobs]
        if related:
            named = ", ".join(f"{name} {knobs[name]['from']} -> {knobs[name]['to']}"  # type: ignore[index]
                              for name in related)
            credited.append(f"{PART_CHANGE[change.part]} ({named})")
    if credited:
        gain = "gain" if sum(c.delta_ns for c in changes) < 0 else "loss"
        cause = " and ".join(dict.fromkeys(credited))
        return Said(f" {cause[:1].upper()}{cause[1:]} brought the {gain}.",
                    _knob_confounds(differ, acting))
    return Said(_knobs_changed_text(knobs), _knob_confounds(differ, knobs))


def _knob_confounds(differ: list[Confound], names: Collection[str]) -> frozenset[Confound]:
    """The confounds of ``differ`` that are the changes of the knobs ``names``."""
    return frozenset(d for d in differ if d.knob is not None and d.knob in names)


def _knobs_changed_text(knobs: dict[str, object]) -> str:
    """The sentence listing the knobs that changed when none acts on the parts that moved; ''
    without knobs."""
    if not knobs:
        return ""
    return f" Knobs changed: {', '.join(knobs)} (none acts on the parts that moved)."


def explain(base: RunAnalysis, run: RunAnalysis, knobs: dict[str, object], noise: Noise,
            origin: Origin | None, causal: bool = True) -> Said:
    """The step difference (``origin`` timed the steps) attributed to its parts (see
    attribution_text, told the row's ``noise``) and, when ``causal`` (the row's change is beyond
    noise and the speedup agrees with the step time), the knob change behind the parts that
    account for it, with the confounds that states (see _credit)."""
    before, after = step_time_ns(base, origin), step_time_ns(run, origin)
    changes = attribute(base, run, (after or 0) - (before or 0))
    unlike = unlike_breakdowns(base, run)
    if unlike is not None:
        return Said(f"{unlike[:1].upper()}{unlike[1:]}: the step time alone is compared.")
    alike = split_alike(base, run)
    if alike is None or not changes or before is None or after is None or origin is None:
        return Said("No breakdown on both sides: the step time alone is compared.")
    text = (attribution_text(changes, before, after, noise, _sources_text(*alike, origin))
            + beyond_spread_text(changes) + waiting_text(changes, base, run))
    if not causal or after == before or noise.covers(before, after):
        return Said(text)
    credit = _credit(base, run, changes, knobs)
    return Said(text + credit.text, credit.stated)


def waiting_text(changes: list[PartChange], base: RunAnalysis, run: RunAnalysis) -> str:
    """The sentence saying that the exposed communication that changed most (grew in ``run``,
    or fell from ``base``) is mostly that run's detailed rank waiting for another
    (RunAnalysis.waits_for), so the change is that rank's own step seen from outside; ''
    otherwise."""
    moved = max(changes, key=lambda c: abs(c.after_ns - c.before_ns), default=None)
    if moved is None or moved.part != "comm_exposed" or moved.after_ns == moved.before_ns:
        return ""
    grew = moved.after_ns > moved.before_ns
    waiting, pacer = (run, run.waits_for) if grew else (base, base.waits_for)
    if not _mostly_waiting(waiting, pacer):
        return ""
    whose = rank_label(waiting.detailed_rank) or "the detailed process"
    return (f" In {waiting.name}, that communication {'is' if grew else 'was'} mostly {whose} "
            f"waiting inside the collectives for {pacer.label}, the rank the job waits for "
            f"({pacer.verdict}: {pacer.verdict_reason.rstrip('.')}): what "
            f"{'grew' if grew else 'fell'} is {pacer.label}'s own step, seen from outside.")


def _exposed_ns(rank: RankVerdict) -> float | None:
    """A rank's exposed communication per step, in ns; None when not known."""
    if rank.comm_exposed_fraction is None or rank.step_ns is None:
        return None
    return rank.comm_exposed_fraction * rank.step_ns


def _mostly_waiting(run: RunAnalysis, pacer: RankVerdict | None) -> bool:
    """Whether the detailed rank's exposed communication per step is mostly waiting for
    ``pacer``, the rank it waits for (job.mostly_waiting); False when either is not known."""
    if run.job is None or pacer is None:
        return False
    mine = next((r for r in run.job.ranks if r.rank == run.detailed_rank), None)
    exposed = _exposed_ns(mine) if mine is not None else None
    theirs = _exposed_ns(pacer)
    return exposed is not None and theirs is not None and mostly_waiting(exposed, theirs)


def beyond_spread_text(changes: list[PartChange]) -> str:
    """The sentence naming the parts whose median per step moved beyond their own spread (each
    judged on its own step-to-step spread, warm-up left out); '' when none did or none can be
    judged."""
    moved = [c for c in changes if c.beyond_noise and c.median_before_ns is not None
             and c.median_after_ns is not None and c.band_ns is not None]
    if not moved:
        return ""
    said = "; ".join(f"{PART_LABELS[c.part]} {ms(c.median_before_ns)} -> "  # type: ignore[arg-type]
                     f"{ms(c.median_after_ns)} (±{ms(c.band_ns)})" for c in moved)  # type: ignore[arg-type]
    return (f" Judged each on its own step-to-step spread (median per step, "
            f"{NOISE_CONFIDENCE:.0%} band), these parts changed: {said}.")


def _ratio_text(ratio: float) -> str:
    """1.0213 -> '1.02×'."""
    return f"{ratio:.2f}×"


def disagreement(throughput_gain: float | None, step_speedup: float | None) -> str | None:
    """A sentence when unprofiled throughput and profiled step time moved in opposite
    directions, else None."""
    if throughput_gain is None or step_speedup is None:
        return None
    if (throughput_gain > 1) == (step_speedup > 1) or 1.0 in (throughput_gain, step_speedup):
        return None
    moved = "rose" if throughput_gain > 1 else "fell"
    step = "shrank" if step_speedup > 1 else "grew"
    return (f"Unprofiled throughput {moved} ({_ratio_text(throughput_gain)}) while the profiled "
            f"step time {step} ({_ratio_text(step_speedup)}); the speedup is the throughput "
            "ratio, measured without profilers (step times also move with the batch size and "
            "with how much each profiler slows a run).")


def row_noise(base: RunAnalysis, run: RunAnalysis, speedup: float | None,
              origin: Origin | None) -> Noise:
    """The row's noise (see Noise): the band of ``speedup`` (see noise_band) and the verdict,
    both unknown when a side's spread is; both sides' spreads of the same kind: the profiled
    steps' (``origin``'s) on both when either plain run shared the CPUs."""
    plain = not (shared_cpus(base) or shared_cpus(run))
    spreads = step_spread(base, origin, plain), step_spread(run, origin, plain)
    if speedup is None or speedup <= 0 or spreads[0] is None or spreads[1] is None:
        return Noise()
    band = noise_band(spreads[0], spreads[1])
    return Noise(band, within_noise(speedup, band))


def _row_explanation(base: RunAnalysis, run: RunAnalysis, knobs: dict[str, object],
                     ratios: tuple[float | None, float | None], noise: Noise,
                     origin: Origin) -> Said:
    """The row's sentences: the noise or disagreement note first, then the attribution of the
    step difference ``origin`` timed; a cause is named (and a confound stated) only for a change
    beyond noise that the profiled step time agrees with."""
    throughput_gain, step_speedup = ratios
    speedup = throughput_gain if throughput_gain is not None else \
        per_sample_speedup(base, run, step_speedup)
    if noise.within:
        return Said(f"{noise_text(speedup, noise.band)} "  # type: ignore[arg-type]
                    f"{_in_profiled_runs(base, run, knobs, noise, origin)}")
    note = disagreement(throughput_gain, step_speedup)
    if note is None:
        return explain(base, run, knobs, noise, origin)
    return Said(f"{note} {_in_profiled_runs(base, run, knobs, noise, origin)} The profiled "
                "breakdown does not explain the throughput change, so no cause is named.")


def _unknown_steps_text(speedup: float | None, noise: Noise, why: str) -> str:
    """The row's sentences when no profiler timed every run's steps: the noise note of the
    throughput ratio when it is within noise, then why no step time is compared."""
    head = f"{noise_text(speedup, noise.band)} " if noise.within else ""  # type: ignore[arg-type]
    return f"{head}Profiled step time unknown: {why}."


def _in_profiled_runs(base: RunAnalysis, run: RunAnalysis, knobs: dict[str, object],
                      noise: Noise, origin: Origin) -> str:
    """What moved in the profiled runs' breakdown, said as what the profilers saw (no cause)."""
    profiled = explain(base, run, knobs, noise, origin, causal=False).text
    return f"In the profiled runs, {profiled[:1].lower()}{profiled[1:]}"


def _row(base: RunAnalysis, run: RunAnalysis, origin: Origin | None,
         unknown: str | None) -> ComparisonRow:
    """One run's row against the baseline (speedup and noise: see the module docstring), its
    steps as ``origin`` timed them, or none and why (``unknown`` when no profiler timed every
    run's, or that one side has none); the step time shown and its ratio are the typical
    (median) step, warm-up left out."""
    (base_step, _), (step, step_kind) = typical_step(base, origin), typical_step(run, origin)
    base_tp, tp = base.metrics.throughput_samples_per_s, run.metrics.throughput_samples_per_s
    knobs = changed_knobs(base, run)
    delta = breakdown_delta(base, run)
    step_speedup = base_step / step if base_step and step else None
    shared = shared_cpu_text(base, run, step_speedup, origin) if run is not base else None
    throughput_gain = tp / base_tp if tp and base_tp and shared is None else None
    speedup = throughput_gain if throughput_gain is not None else \
        per_sample_speedup(base, run, step_speedup)
    said, noise = Said("baseline"), Noise()
    mean_base, mean_run = step_time_ns(base, origin), step_time_ns(run, origin)
    total = (mean_run or 0) - (mean_base or 0)
    changes = attribute(base, run, total) if mean_base and mean_run else []
    if run is not base:
        noise = row_noise(base, run, speedup, origin)
        untimed = [r.name for r in (base, run) if steps_of(r, origin) is None]
        why = unknown if origin is None else (
            f"no profiler timed the steps of {' or '.join(untimed)}" if untimed else None)
        said = (Said(_unknown_steps_text(speedup, noise, why)) if why is not None
                else _row_explanation(base, run, knobs, (throughput_gain, step_speedup), noise,
                                      origin))  # type: ignore[arg-type]
        if shared is not None:
            said = replace(said, text=f"{shared} {said.text}")
        unsaid = [d.phrase for d in confounds(base, run) if d not in said.stated]
        if unsaid:
            said = replace(said, text=f"{said.text} Also different between these runs: "
                           f"{'; '.join(unsaid)}.")
    elif (own := baseline_shared_text(base)) is not None:
        said = Said(f"baseline. {own}")
    return ComparisonRow(
        name=run.name, step_time_ns=step, throughput_samples_per_s=tp, speedup=speedup,
        throughput_gain=throughput_gain, breakdown_delta_ns=delta, changed_knobs=knobs,
        explanation=said.text, step_speedup=step_speedup,
        speedup_basis="throughput" if throughput_gain is not None else "step time",
        within_noise=noise.within, noise_fraction=noise.band, attribution=changes,
        confounds=[d.phrase for d in confounds(base, run)] if run is not base else [],
        unexplained_ns=unexplained_ns(changes, total),
        step_time_kind=step_kind if step is not None else None,
        parts_not_compared=parts_not_compared(base, run), breakdown=run.metrics.breakdown,
        step_intervals=len(step_samples(run, origin)) if step is not None else 0)


def compare_runs(runs: list[RunAnalysis], baseline: str | None = None) -> Comparison | None:
    """Every run against the baseline (the first run, or the one named); None for one run."""
    if len(runs) < 2:
        return None
    names = [run.name for run in runs]
    if baseline is not None and baseline not in names:
        raise UsageError(f"--baseline {baseline!r} is not one of the runs: {', '.join(names)}")
    origin, unknown = common_step_source(runs)
    views = one_step_definition(runs, origin)
    base = views[names.index(baseline)] if baseline is not None else views[0]
    return Comparison(baseline=base.name, rows=[_row(base, run, origin, unknown) for run in views],
                      noise_confidence=NOISE_CONFIDENCE, steps_origin=origin,
                      steps_unknown_reason=unknown)
