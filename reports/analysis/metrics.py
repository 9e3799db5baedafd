"""Metrics of one run: small typed functions of a profile's tables, combined once per run.

Each metric records its origin (the profiler that showed it). When several sources of a run have
the same metric, each metric comes from the source that can attribute it, judged by what the
source holds (never by its file name):

- step count and wall time: a source with GPU events, else nsys, else Kineto (``ProfilerStep``/
  NVTX ranges), before line_profiler;
- the step breakdown, DataLoader share, CPU phases and communication: the source that can
  *attribute* step time (:func:`attribution_level`): GPU events first; on CPU-only runs a trace
  with framework ops (Kineto ``cpu_op``), then line_profiler's lines; a source with only NVTX
  ranges (nsys on a CPU-only capture) splits the step into DataLoader wait and unattributed time
  only, so it comes last.

The other sources' figures are kept in ``steps_by_origin`` and ``dataloader_fraction_by_origin``
for the agreement finding.

The metrics themselves live in focused modules: :mod:`.steps` (step windows), :mod:`.gpu`,
:mod:`.cpu`, :mod:`.comm`, :mod:`.breakdown`, :mod:`.lines`; this module picks the sources and
assembles :class:`RunMetrics`.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

from profreport import concepts
from profreport.manifest import Manifest, ProfiledRun
from profreport.model import Profile, SourceHidden, TrainingLoop
from profreport.reports.analysis.breakdown import claim, cpu_breakdown, cpu_parts, cpu_phases
from profreport.reports.analysis.comm import cpu_comm_stats, ddp_forwards_per_sync, gpu_comm_stats
from profreport.reports.analysis.cpu import (
    compiled_regions,
    cpu_op_mix,
    framework_ops,
    top_ops,
    zero_grad_fills_per_step,
)
from profreport.reports.analysis.dataloader import loader_shares_agree, training_fetches
from profreport.reports.analysis.gpu import (
    busy_within,
    copy_stats,
    device_activity,
    gpu_breakdown,
    gpu_claims,
    gpu_utilization,
    has_gpu_events,
    kernel_mix,
    launch_stats,
    max_devices_per_process,
    top_kernels,
)
from profreport.reports.analysis.launches import forget_launches, join_beside, link_gaps
from profreport.reports.analysis.lines import (
    ListingKey,
    dataloader_loop,
    function_listings,
    hidden_sources,
    line_table,
    loop_identification,
    loop_line,
    lprof_breakdown,
    lprof_dataloader_fraction,
    lprof_step_stats,
    top_lines,
)
from profreport.reports.analysis.ops import (
    conv_bias_before_bn,
    conv_formats,
    op_dtypes,
    op_precision,
)
from profreport.reports.analysis.results import (
    Breakdown,
    RunMetrics,
    SharedCpu,
    StepShape,
    TraceFile,
    Trials,
)
from profreport.reports.analysis.shape import startup_without_steps
from profreport.reports.analysis.steps import (
    StepWindows,
    dataloader_fraction,
    step_shape,
    step_stats,
    step_windows,
)
from profreport.reports.analysis.syncs import idle_causes, sync_stats
from profreport.reports.analysis.transfers import step_copies
from profreport.units import NS_PER_S


def manifest_trials(manifest: Manifest) -> Trials | None:
    """The runner's trial throughputs (loader alone, model alone, real loop), when it ran them."""
    trials = {name: float(value) for name, value in manifest.trials.items()
              if isinstance(value, (int, float)) and value > 0}
    if not trials:
        return None
    return Trials(io=trials.get("io"), synthetic=trials.get("synthetic"), full=trials.get("full"))


#: A launch competed for the CPUs when its machine had less than this share of its CPU time
#: left idle (every CPU busy: another process's turn was time taken from the launch)...
SATURATED_IDLE_SHARE = 0.10
#: ...and other processes used at least this share of it (a launch training on every core
#: keeps the machine busy on its own).
OTHER_CPU_SHARE_MIN = 0.10


def plain_cpu(manifest: Manifest) -> SharedCpu | None:
    """The plain launch's CPU time beside the rest of the CPUs it may use (see launch_cpu)."""
    plain = next((launch for launch in manifest.launches if launch.profiler == "none"), None)
    return None if plain is None else launch_cpu(manifest, plain)


def launch_cpu(manifest: Manifest, launch: ProfiledRun) -> SharedCpu | None:
    """A launch's CPU time beside the rest of the CPUs it may use, when the runner measured
    both (runner.launch.run_launch) and knows over how many CPUs (the launch's ``cpus``; the
    machine's count for a manifest written before launches recorded it)."""
    cpus = launch.cpus or manifest.environment.get("cpu_count")
    if (launch.cpu_s is None or launch.other_cpu_s is None
            or not isinstance(cpus, int) or cpus < 1 or launch.wall_time_s <= 0):
        return None
    capacity_s = launch.wall_time_s * cpus
    other_share = launch.other_cpu_s / capacity_s
    idle_share = max(1.0 - (launch.cpu_s + launch.other_cpu_s) / capacity_s, 0.0)
    return SharedCpu(wall_ns=round(launch.wall_time_s * NS_PER_S),
                     cpu_ns=round(launch.cpu_s * NS_PER_S),
                     other_cpu_ns=round(launch.other_cpu_s * NS_PER_S), cpus=cpus,
                     other_share=other_share, idle_share=idle_share,
                     shared=idle_share < SATURATED_IDLE_SHARE
                     and other_share >= OTHER_CPU_SHARE_MIN)


#: The manifest's name of the launch that recorded each origin's profiles.
ORIGIN_LAUNCH: dict[str, str] = {"nsys": "nsys", "kineto": "torch.profiler",
                                 "lprof": "kernprof"}


def profiled_cpu(manifest: Manifest) -> dict[str, SharedCpu | None]:
    """Each profiled launch's CPU sharing (see launch_cpu), by the origin of its profiles; None
    where the runner did not measure it (srun's tasks; nsys launches before the runner sampled
    their marked processes)."""
    by_name = {launch.profiler: launch for launch in manifest.launches}
    return {origin: launch_cpu(manifest, by_name[name]) for origin, name in ORIGIN_LAUNCH.items()
            if name in by_name}


def preference(profile: Profile) -> tuple[int, int, int, int]:
    """Sort key for step statistics: profiles with GPU events first, nsys before Kineto, one
    that records a rank before one that records none (see primary_timed), lowest rank first."""
    return (0 if has_gpu_events(profile) else 1, 0 if profile.kind == "nsys" else 1,
            0 if profile.rank is not None else 1,
            profile.rank if profile.rank is not None else 0)


#: Levels of :func:`attribution_level`: what a source can say about where step time goes.
ATTRIBUTES_GPU, ATTRIBUTES_CPU_OPS, RANGES_ONLY = 0, 1, 2
_OPS_ORIGIN_ORDER = {"kineto": 0, "nsys": 1, "lprof": 2}


def attribution_level(profile: Profile) -> int:
    """How well a profile can attribute step time: GPU events (kernels, copies), else framework
    ops on the CPU (forward/backward/optimizer), else only ranges (steps, DataLoader waits)."""
    if has_gpu_events(profile):
        return ATTRIBUTES_GPU
    return ATTRIBUTES_CPU_OPS if not framework_ops(profile).empty else RANGES_ONLY


def _attribution_key(timed: tuple[Profile, StepWindows]) -> tuple[int, int, int, int]:
    """Sort key for the breakdown's source: best attribution, then nsys first, lowest rank."""
    return (attribution_level(timed[0]),) + preference(timed[0])[1:]


def _timed(profiles: list[Profile]) -> list[tuple[Profile, StepWindows]]:
    """Profiles with steps (not line_profiler), preferred step source first, with their windows."""
    ordered = sorted(profiles, key=preference)
    return [(p, w) for p in ordered if p.kind != "lprof" and (w := step_windows(p)) is not None]


def primary_timed(profiles: list[Profile]) -> list[tuple[Profile, StepWindows]]:
    """Profiles with steps of the run's primary rank, preferred step source first; a file
    that records no rank beside files of the same profiler that record ranks is none of the
    job's (another run's trace, or a process outside the job: see unranked_beside_ranks)."""
    timed = _timed(profiles)
    primary_rank = min((p.rank for p, _ in timed if p.rank is not None), default=None)
    ranked = {p.kind for p, _ in timed if p.rank is not None and p.process is None}
    return [(p, w) for p, w in timed if p.rank == primary_rank
            or (p.rank is None and not (p.process is None and p.kind in ranked))]


def line_profiles(profiles: list[Profile]) -> tuple[list[Profile], list[Profile]]:
    """The line_profiler profiles the run's lines come from, and those left out: of the files
    that record no rank, the first alone (kernprof writes one file per process, and two
    processes' line totals do not add up to one's: the same line twice, or one loop's passes
    counted twice)."""
    lprofs = [p for p in profiles if p.kind == "lprof" and p.has("lines")]
    alone = [p for p in lprofs if p.rank is None and p.process is None]
    left = {id(p) for p in alone[1:]}
    return [p for p in lprofs if id(p) not in left], alone[1:]


def loader_in_process(profile: Profile) -> bool | None:
    """Whether the profile's DataLoader spans that fed training (dataloader.training_fetches)
    are single-process iterators (num_workers=0); None without spans that name their
    iterator."""
    names = training_fetches(profile).fetches["name"]
    if concepts.is_worker_loader_span(names).any():
        return False
    return True if concepts.is_in_process_loader_span(names).any() else None


def without_gpu(manifest: Manifest | None) -> bool:
    """Whether the run's manifest says it trained without a GPU (the runner records CUDA's
    version as None where torch.cuda.is_available() is false); False when it does not say."""
    environment = manifest.environment if manifest is not None else {}
    return "cuda" in environment and not environment["cuda"]


def compute_run_metrics(profiles: list[Profile], manifest: Manifest | None = None) -> RunMetrics:
    """Every metric of one run that its primary rank's profiles give (and its manifest, when
    there is one); the figures every rank adds come from ranks.add_rank_metrics."""
    metrics = RunMetrics()
    ordered = sorted(profiles, key=preference)
    gpu_profile = next((p for p in ordered if has_gpu_events(p)), None)
    if gpu_profile is not None:
        join_beside(gpu_profile)
    timed = primary_timed(profiles)
    used, _ = line_profiles(profiles)
    lines = line_table(used)
    if gpu_profile is None and without_gpu(manifest):
        lines = lines.assign(is_sync_point=False)  # .item() of a CPU tensor waits for nothing
    loop = dataloader_loop(used)
    _add_step_metrics(metrics, timed, ordered)
    _add_top_ops(metrics, timed, ordered)
    _add_lprof_metrics(metrics, lines, loop, hidden_sources(used))
    _add_attributed_metrics(metrics, timed, loop)
    _add_other_breakdowns(metrics, timed, loop)
    metrics.launch_link_gaps = tuple(sorted(set().union(
        *(link_gaps(profile) for profile in profiles if has_gpu_events(profile)))))
    if gpu_profile is not None:
        metrics.top_kernels = top_kernels(gpu_profile)
        metrics.kernel_mix = kernel_mix(gpu_profile, _windows_of(gpu_profile, timed))
        metrics.copies = copy_stats(gpu_profile)
        metrics.max_devices_per_process, metrics.devices_per_process_unknown = \
            max_devices_per_process(gpu_profile, _windows_of(gpu_profile, timed))
        metrics.step_copies = step_copies(gpu_profile, _windows_of(gpu_profile, timed))
        if metrics.gpu is None:
            metrics.gpu = gpu_utilization(gpu_profile, None)
    ops_profile = _op_inputs_profile(ordered)
    if gpu_profile is not None:
        precision_profile = ops_profile if ops_profile is not None and has_gpu_events(
            ops_profile) else gpu_profile
        metrics.op_precision = op_precision(precision_profile, _devices_of(profiles),
                                            _windows_of(precision_profile, timed))
    elif ops_profile is not None:
        metrics.op_dtypes = op_dtypes(ops_profile, _windows_of(ops_profile, timed))
    conv_profile = ops_profile or gpu_profile
    if conv_profile is not None:
        conv_windows = _windows_of(conv_profile, timed)
        metrics.conv_bias = conv_bias_before_bn(conv_profile, conv_windows)
        metrics.conv_formats = conv_formats(conv_profile, conv_windows)
    for profile in ordered:  # the metrics above were the last to read the launch join
        forget_launches(profile, _windows_of(profile, timed))
    metrics.compiled_regions = compiled_regions(ordered)
    for profile in ordered:
        first = first_recorded_ns(profile)
        if first is not None:
            metrics.trace_files.setdefault(profile.kind, TraceFile(Path(profile.path).name, first))
    if manifest is not None:
        metrics.throughput_samples_per_s = manifest.throughput_samples_per_s
        metrics.plain_step_ns = list(manifest.plain_step_ns)
        metrics.plain_cpu = plain_cpu(manifest)
        metrics.profiled_cpu = profiled_cpu(manifest)
        metrics.trials = manifest_trials(manifest)
    return metrics


def _op_inputs_profile(ordered: list[Profile]) -> Profile | None:
    """The first profile (GPU ones first) whose operators' inputs were recorded (torch.profiler
    with record_shapes=True), else the first with such operators at all."""
    with_ops = [p for p in ordered if p.has("op_inputs")]
    recorded = [p for p in with_ops if p.table("op_inputs")["input_types"].notna().any()]
    return next(iter(recorded or with_ops), None)


def _devices_of(profiles: list[Profile]) -> pd.DataFrame:
    """The devices every profile of the run lists, one row per device, those whose compute
    capability is known first (torch.profiler and nsys number CUDA devices alike)."""
    frames = [p.table("devices") for p in profiles if p.has("devices")]
    if not frames:
        return profiles[0].table("devices") if profiles else pd.DataFrame()
    devices = pd.concat(frames, ignore_index=True)
    return devices.sort_values("compute_major", ascending=False, kind="stable").drop_duplicates(
        "device")
def first_recorded_ns(profile: Profile) -> int | None:
    """The file's time zero in its viewer: the one its parser states (nsys: the session start),
    else the earliest start any table records (Perfetto's zero for a Kineto trace); None for a
    profile without times (line_profiler)."""
    if profile.meta.time_zero_ns is not None:
        return profile.meta.time_zero_ns
    starts = [int(table["start"].min()) for table in profile.tables.values()
              if "start" in table.columns and not table.empty]
    return min(starts) if starts else None


def _windows_of(profile: Profile, timed: list[tuple[Profile, StepWindows]]) -> StepWindows | None:
    """The step windows of ``profile`` when it is among the timed profiles."""
    return next((w for p, w in timed if p is profile), None)


def _add_step_metrics(metrics: RunMetrics, timed: list[tuple[Profile, StepWindows]],
                      ordered: list[Profile]) -> None:
    """Step statistics and the DataLoader share from every ranged profile; where none holds a
    step, the start-up the first profile recording set-up calls shows (start-up only)."""
    for profile, windows in timed:
        metrics.steps_by_origin.append(step_stats(windows))
        share = dataloader_fraction(profile, windows)
        if share is not None:
            metrics.dataloader_fraction_by_origin.setdefault(profile.kind, share)
    if timed:
        metrics.steps = metrics.steps_by_origin[0]
        profile, windows = timed[0]
        metrics.shape = step_shape(profile, windows, functools.partial(busy_within, profile)
                                   if has_gpu_events(profile) else None)
        return
    for profile in ordered:
        warmup = startup_without_steps(profile)
        if warmup is not None:
            metrics.shape = StepShape(origin=profile.kind, warmup=warmup, step_window=None,
                                      dataloader_wait=None)
            return


def _add_top_ops(metrics: RunMetrics, timed: list[tuple[Profile, StepWindows]],
                 ordered: list[Profile]) -> None:
    """CPU ops by self time, from the preferred source with operators over its steps; when no
    source has both, over the profiled span of one without steps (a trace of model
    construction, or of inference with no pass marked), so the report still says where the
    time went."""
    with_ops: list[tuple[Profile, StepWindows | None]] = [
        (p, w) for p, w in timed if attribution_level(p) <= ATTRIBUTES_CPU_OPS]
    if not with_ops:
        with_ops = [(p, None) for p in ordered
                    if p.kind != "lprof" and step_windows(p) is None
                    and attribution_level(p) <= ATTRIBUTES_CPU_OPS]
    if not with_ops:
        return
    ops_profile, ops_windows = min(with_ops, key=lambda pw: _OPS_ORIGIN_ORDER[pw[0].kind])
    metrics.top_ops = top_ops(ops_profile, ops_windows)
    metrics.zero_grad_fills_per_step = zero_grad_fills_per_step(ops_profile, ops_windows)
    metrics.ddp_forwards_per_sync = ddp_forwards_per_sync(ops_profile, ops_windows)
    if metrics.top_ops:
        metrics.top_ops_origin = ops_profile.kind
        metrics.top_ops_share_of = "step time" if ops_windows is not None else "profiled span"


def _add_attributed_metrics(metrics: RunMetrics, timed: list[tuple[Profile, StepWindows]],
                            loop: TrainingLoop | None) -> None:
    """Breakdown, DataLoader share, CPU phases, communication, GPU and launch metrics, from the
    source that can attribute step time best (see the module docstring), unless the trace
    profilers disagree on the DataLoader wait (see _breakdown_source)."""
    best = _breakdown_source(metrics, timed)
    lprof_steps = lprof_step_stats(loop)
    if lprof_steps is not None and (best is None or attribution_level(best[0]) == RANGES_ONLY):
        # NVTX-only ranges still time the DataLoader well; the lines split the rest.
        metrics.breakdown = lprof_breakdown(loop, lprof_steps)
        origin = best[0].kind if best is not None else "lprof"
        if origin in metrics.dataloader_fraction_by_origin:  # not lprof's when its wait is unknown
            metrics.dataloader_origin = origin
            metrics.dataloader_fraction = metrics.dataloader_fraction_by_origin[origin]
        return
    if best is None:
        return
    profile, windows = best
    metrics.dataloader_fraction = metrics.dataloader_fraction_by_origin.get(profile.kind)
    metrics.dataloader_origin = profile.kind if metrics.dataloader_fraction is not None else None
    metrics.loader_in_process = loader_in_process(profile)
    if has_gpu_events(profile):
        # The readers of the devices' whole activity (gpu.device_activity: 5.8 M intervals,
        # 92 MB for a 10 M-kernel export) one after the other, then it is let go: the claims,
        # launch and sync figures after them peak without it.
        metrics.gpu = gpu_utilization(profile, windows)
        metrics.gpu_idle = idle_causes(profile, windows)
        device_activity.forget(profile)
        claims = gpu_claims(profile, windows)
        metrics.breakdown = gpu_breakdown(profile, windows, claims)
        metrics.comm = gpu_comm_stats(profile, windows, claims)
        metrics.launch = launch_stats(profile, windows)
        metrics.syncs = sync_stats(profile, windows)
        return
    parts = cpu_parts(profile, windows)
    claims = claim(parts.items(), windows)
    metrics.breakdown = cpu_breakdown(profile, windows, claims)
    metrics.comm = cpu_comm_stats(profile, windows, parts, claims)
    if attribution_level(profile) == ATTRIBUTES_CPU_OPS:
        metrics.cpu_phases = cpu_phases(profile, windows)
        metrics.cpu_op_mix = cpu_op_mix(profile, windows)


def _add_other_breakdowns(metrics: RunMetrics, timed: list[tuple[Profile, StepWindows]],
                          loop: TrainingLoop | None) -> None:
    """The breakdown over the steps of every other profiler that timed them (see
    RunMetrics.breakdowns_by_origin), each from the first profile of that profiler, as
    steps_by_origin's figures are (a second pass over that profile's parts)."""
    own = metrics.breakdown.origin if metrics.breakdown is not None else None
    for profile, windows in timed:
        if profile.kind != own and profile.kind not in metrics.breakdowns_by_origin:
            metrics.breakdowns_by_origin[profile.kind] = _breakdown_over(profile, windows)
    lprof_steps = lprof_step_stats(loop)
    lines = lprof_breakdown(loop, lprof_steps) if lprof_steps is not None else None
    if own != "lprof" and lines is not None:
        metrics.breakdowns_by_origin["lprof"] = lines


def _breakdown_over(profile: Profile, windows: StepWindows) -> Breakdown:
    """One profile's step breakdown over its own steps: the parts of its GPU events, else of
    its CPU spans."""
    if has_gpu_events(profile):
        return gpu_breakdown(profile, windows, gpu_claims(profile, windows))
    return cpu_breakdown(profile, windows, claim(cpu_parts(profile, windows).items(), windows))


def _breakdown_source(metrics: RunMetrics, timed: list[tuple[Profile, StepWindows]]
                      ) -> tuple[Profile, StepWindows] | None:
    """The profile the breakdown and the DataLoader share come from: the one that attributes
    step time best, unless it and the trace profiler that timed the most steps disagree on the
    DataLoader wait (loader_shares_agree): then that one, as SOURCES_DISAGREE's advice trusts
    it (a few steps may hold an epoch start or the workers' first fill; more average it out)."""
    best = min(timed, key=_attribution_key, default=None)
    most = max(timed, key=lambda pw: pw[1].count, default=None)
    if best is None or most is None or most[1].count <= best[1].count:
        return best
    shares = metrics.dataloader_fraction_by_origin
    if best[0].kind not in shares or most[0].kind not in shares or \
            loader_shares_agree([shares[best[0].kind], shares[most[0].kind]]):
        return best
    return most


def _add_lprof_metrics(metrics: RunMetrics, lines: pd.DataFrame, loop: TrainingLoop | None,
                       hidden: dict[ListingKey, SourceHidden | None]) -> None:
    """Lines, listings (with why each source is hidden: ``hidden``), line_profiler's step and
    DataLoader figures; its steps stand in when no profiler timed the steps."""
    if lines.empty:
        return
    metrics.lines = top_lines(lines)
    metrics.loop_line = loop_line(lines, loop)
    metrics.loop_identification = loop_identification(loop)
    metrics.listings = function_listings(lines, hidden)
    steps = lprof_step_stats(loop)
    fraction = lprof_dataloader_fraction(loop)
    if steps is not None:
        metrics.steps_by_origin.append(steps)
        if metrics.steps is None:
            metrics.steps = steps
    if fraction is not None:
        metrics.dataloader_fraction_by_origin["lprof"] = fraction
