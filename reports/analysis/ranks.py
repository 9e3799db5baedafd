"""Per-rank reduction: each profile of a run becomes a compact :class:`RankSummary` (its step
statistics, DataParallel ops and device memory) where it was parsed, so that a folder of hundreds
of rank traces is combined from small records; only the profiles the detailed analysis reads (the
primary rank, and sources without a rank) travel back whole.

:func:`read_rank` is the task a worker runs, in this process, a local worker process or a Dask
worker (``profreport.executors``): it takes and returns only picklable values."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from profreport.allocator import tune_for_large_arrays
from profreport.concepts import ANNOTATED_RANGE
from profreport.errors import failure_line
from profreport.model import Profile
from profreport.parsers import ParseOptions, parse_file
from profreport.parsers.nsys import process_profiles
from profreport.reports.analysis.compare import common_source
from profreport.reports.analysis.cpu import dataparallel_ops, ddp_forward_calls
from profreport.reports.analysis.findings import profiler_verdict, verdict_confidence
from profreport.reports.analysis.gpu import has_gpu_events
from profreport.reports.analysis.job import common_step_means, steps_note
from profreport.reports.analysis.lines import slowest_loop_line
from profreport.reports.analysis.memory import memory_stats
from profreport.reports.analysis.metrics import compute_run_metrics, preference
from profreport.reports.analysis.results import (
    DeviceMemory,
    InputFile,
    LineItem,
    MemoryStats,
    Origin,
    RankVerdict,
    RunMetrics,
    StepStats,
    rank_label,
)
from profreport.reports.analysis.steps import step_stats, step_windows
from profreport.text import error_text
from profreport.units import ms, pct

#: A member of a job: its rank, or the process of a capture of several whose rank is unknown.
Member = tuple[int | None, int | None]

#: Ranks whose profile a worker sends back whole without being asked: sources that have no rank,
#: and rank 0, the lowest rank of a whole job in every launcher (torchrun, srun, mpirun). Any
#: other lowest rank (a job kept only from rank 3, ranks 2 and 3 of 4) is read whole once the
#: first pass has seen every rank (see RankTask.whole).
WHOLE_PROFILE_RANKS = (None, 0)


@dataclass
class RankSummary:
    """One profile reduced to what the run's cross-rank figures need."""

    input: InputFile
    #: Sort key of the profile as a step source (GPU events first, nsys first, lowest rank).
    preference: tuple[int, int, int, int]
    has_gpu_events: bool
    #: Its annotated steps; None when it times none (line_profiler, or no step ranges).
    step_stats: StepStats | None
    #: ``distributedInfo.world_size`` of a trace, when it records one.
    world_size: int | None = None
    #: Whether a trace records ``distributedInfo`` (torch.profiler does when a process group
    #: exists).
    distributed: bool = False
    #: Whether its format records the process group whenever one exists
    #: (ProfileMeta.records_process_group).
    records_process_group: bool = False
    dataparallel_ops: dict[str, int] = field(default_factory=dict)
    #: DistributedDataParallel forward spans (DDP's signature).
    ddp_forward_calls: int = 0
    memory: list[DeviceMemory] = field(default_factory=list)
    #: The rank's own verdict (see reports.analysis.job); None for a source without a rank.
    verdict: RankVerdict | None = None
    #: The slowest line of a line profile (line_profiler); None for other profiles.
    slowest_line: LineItem | None = None


@dataclass(frozen=True)
class RankTask:
    """One file for a worker: its path as the user gave it and the folder that path is relative
    to (a Dask worker runs elsewhere), the rank the manifest gives it, how to parse it."""

    path: str
    folder: str
    rank: int | None = None
    parse: ParseOptions = field(default_factory=ParseOptions)
    #: Send the profile back whole whatever its rank: the run's only file, or the lowest rank
    #: present once every file's rank is known.
    whole: bool = False

    def location(self) -> Path:
        """Where this worker finds the file: the given path when it leads there from here."""
        given = Path(self.path)
        if given.is_absolute() or Path.cwd() == Path(self.folder):
            return given
        return Path(self.folder) / given


@dataclass
class RankResult:
    """What a worker sends back: the summary of each profile the file holds (one, or one per
    process of an nsys capture of several), those profiles whole when the analysis needs them
    (empty otherwise), or the one-line failure."""

    task: RankTask
    summaries: list[RankSummary] = field(default_factory=list)
    profiles: list[Profile] = field(default_factory=list)
    failure: str | None = None


def summarize(profile: Profile, with_verdict: bool = True) -> RankSummary:
    """The compact summary of one parsed profile; its rank's own verdict when ``with_verdict``
    (a profile that travels back whole gets it later, only when the job has other ranks, see
    rank_verdicts)."""
    windows = step_windows(profile) if profile.kind != "lprof" else None
    memory = memory_stats([profile])
    return RankSummary(
        input=InputFile(path=str(profile.path), kind=profile.kind,
                          tool_version=profile.tool_version, rank=profile.rank,
                          process=profile.process),
        preference=preference(profile), has_gpu_events=has_gpu_events(profile),
        step_stats=step_stats(windows) if windows is not None else None,
        world_size=profile.meta.world_size, distributed=profile.meta.distributed,
        records_process_group=profile.meta.records_process_group,
        dataparallel_ops=dataparallel_ops(profile), ddp_forward_calls=ddp_forward_calls(profile),
        memory=list(memory.devices) if memory is not None else [],
        verdict=rank_verdict(profile) if with_verdict else None,
        slowest_line=slowest_loop_line(profile) if profile.kind == "lprof" else None)


def rank_verdict(profile: Profile) -> RankVerdict | None:
    """The verdict of one rank's profile on its own, with its step and communication shares;
    None for a profile without a rank (nor a process of a capture of several) or without step
    timing (line_profiler)."""
    if (profile.rank is None and profile.process is None) or profile.kind == "lprof":
        return None
    metrics = compute_run_metrics([profile])
    name, reason = profiler_verdict(metrics)
    comm = metrics.comm
    confidence = verdict_confidence(metrics, name)
    steps = metrics.steps
    return RankVerdict(profile.rank, name, reason,
                       steps.pace_mean_ns if steps is not None else None,
                       comm.fraction if comm is not None else None,
                       comm.exposed_fraction if comm is not None else None,
                       confidence[0] if confidence else None,
                       confidence[1] if confidence else None,
                       steps.pace_marker if steps is not None else ANNOTATED_RANGE,
                       profile.process if profile.rank is None else None,
                       steps_clock(profile),
                       steps.pace_by_number if steps is not None else ())


def steps_clock(profile: Profile) -> tuple[str, int, int] | None:
    """When a profile's steps ran on a clock other ranks' traces share (RankVerdict.steps_clock):
    a current Kineto trace's times plus its ``baseTimeNanoseconds`` are the wall clock; None
    for a profile that records no base time (a 2021 trace: its clock is not said; an nsys
    capture, whose times count from its own start, has none) or without steps."""
    windows = step_windows(profile)
    base = getattr(profile.meta, "base_time_ns", -1)
    if windows is None or base < 0:
        return None
    return "wall clock", windows.first_ns + base, windows.last_ns + base


def read_rank(task: RankTask) -> RankResult:
    """Parse one file and reduce it (the task a worker runs); never raises for a bad file."""
    tune_for_large_arrays()  # a Dask worker's process is not the command's
    path = task.location()
    try:
        profile = parse_file(path, task.parse)
        profile.path = Path(task.path)  # the report names the file as the user gave it
        if profile.rank is None:
            profile.rank = task.rank
        if profile.kind == "nsys" and len(parts := process_profiles(profile)) > 1:
            # Processes of one capture (their ranks those they recorded): each travels back
            # whole; a rank the analysis may not read whole (see needed_whole) has its verdict.
            return RankResult(task, [summarize(part, with_verdict=part.rank not in
                                               WHOLE_PROFILE_RANKS) for part in parts], parts)
        whole = profile if task.whole or profile.rank in WHOLE_PROFILE_RANKS else None
        return RankResult(task, [summarize(profile, with_verdict=whole is None)],
                          [whole] if whole is not None else [])
    except Exception as exc:  # one bad file never stops the batch
        return RankResult(task, failure=failure_line(exc, path))


def needed_whole(summaries: Sequence[RankSummary]) -> list[int]:
    """Indexes of the summaries whose whole profile the detailed analysis reads: sources without
    a rank, the primary (lowest) rank among those that time steps (the lowest rank present when
    none does: a trace cut before the first step still says what it holds), and the preferred
    source of GPU events (see metrics.primary_timed and compute_run_metrics)."""
    ranks = [s.input.rank for s in summaries if s.input.rank is not None]
    timed = [s.input.rank for s in summaries
             if s.step_stats is not None and s.input.rank is not None]
    primary = min(timed or ranks, default=None)
    wanted = {i for i, s in enumerate(summaries) if s.input.rank in (None, primary)}
    gpu = [i for i, s in enumerate(summaries) if s.has_gpu_events]
    if gpu:
        wanted.add(min(gpu, key=lambda i: summaries[i].preference))
    return sorted(wanted)


def member(rank: int | None, process: int | None) -> Member:
    """A rank of a job as a key: ``(rank, None)``, or ``(None, process)`` for a process of a
    capture of several whose rank is unknown."""
    return (rank, None) if rank is not None else (None, process)


def job_members(summaries: Sequence[RankSummary]) -> set[Member]:
    """The job's ranks: every rank the files record and the processes of a capture of several
    recorded; without ranked files, also every process of unknown rank (beside ranked files
    such processes are those ranks, which ones the capture cannot tell)."""
    ranks = {member(s.input.rank, None) for s in summaries if s.input.rank is not None}
    if any(s.input.rank is not None and s.input.process is None for s in summaries):
        return ranks
    return ranks | {member(None, s.input.process) for s in summaries
                    if s.input.rank is None and s.input.process is not None}


def job_step_source(summaries: Sequence[RankSummary]) -> tuple[Origin | None, str | None]:
    """The profiler every rank's step time comes from: the first of compare.STEP_SOURCE_ORDER
    that timed the steps of every rank that has steps (compare.common_source), so that no rank's
    figure is another profiler's beside the others'; else None and why."""
    timed: dict[Member, set[str]] = {member: set() for member in job_members(summaries)}
    for summary in summaries:
        key = member(summary.input.rank, summary.input.process)
        if key in timed and summary.step_stats is not None:
            timed[key].add(summary.step_stats.origin)
    ordered = sorted(timed.items(), key=lambda item: _member_order(item[0]))
    return common_source([(rank_label(*key), origins) for key, origins in ordered], "rank")


def _rank_steps(summaries: Sequence[RankSummary], origin: Origin | None
                ) -> dict[Member, StepStats]:
    """The steps of every rank of the job (see job_members) as ``origin`` timed them, from
    each rank's preferred profile of it, in rank order (see _member_order)."""
    ranks = job_members(summaries)
    found: dict[Member, StepStats] = {}
    for summary in sorted(summaries, key=lambda s: s.preference):
        steps, key = summary.step_stats, member(summary.input.rank, summary.input.process)
        if key in ranks and steps is not None and steps.origin == origin:
            found.setdefault(key, steps)
    return dict(sorted(found.items(), key=lambda item: _member_order(item[0])))


def per_rank_step_ns(summaries: Sequence[RankSummary], origin: Origin | None
                     ) -> dict[int | str, int]:
    """Mean annotated step time of every rank of the job (ns, see job_members) as ``origin``
    (see job_step_source) timed it, by rank, then by ``pid N`` for a process of a capture of
    several whose rank is unknown; none when no profiler timed every rank."""
    found = _rank_steps(summaries, origin)
    common = common_step_means({key: steps.pace_by_number for key, steps in found.items()})
    out = {key: common.get(key, steps.pace_mean_ns) for key, steps in found.items()}
    return {rank if rank is not None else rank_label(None, process): ns
            for (rank, process), ns in out.items()}


def per_rank_steps_note(summaries: Sequence[RankSummary], origin: Origin | None) -> str | None:
    """Which steps per_rank_step_ns's means count when some rank's profile counts more than
    the others' (job.steps_note): that rank's own figures then differ from its bar."""
    return steps_note([(rank_label(*key), steps.pace_by_number, steps.pace_mean_ns)
                       for key, steps in _rank_steps(summaries, origin).items()])


def per_rank_labels(summaries: Sequence[RankSummary], keys: Sequence[int | str]
                    ) -> dict[int | str, str]:
    """How the report names each key of per_rank_step_ns: a rank that is a process of a
    capture of several with its pid too (``rank 0, pid 9``), so that its bar says which
    process of the capture it is."""
    processes = {s.input.rank: s.input.process for s in summaries
                 if s.input.rank is not None and s.input.process is not None}
    return {key: rank_label(key, processes.get(key), pid_too=True) if isinstance(key, int) else key
            for key in keys}


def memory_sources(devices: Sequence[DeviceMemory]) -> list[DeviceMemory]:
    """The devices, each named by the file or process it was read from (``source_label``): its
    rank, and its pid when it is a process of a capture of several; with the file's name too
    where those do not tell several feeders apart (the cycles of one process, each its own
    file, record the same rank or none)."""
    feeders = {(d.file, d.process): rank_label(d.rank, d.process, pid_too=True) for d in devices}
    alike = Counter(feeders.values())
    several = len(feeders) > 1

    def label(d: DeviceMemory) -> str | None:
        """The one device's label."""
        who = feeders[(d.file, d.process)]
        if several and (not who or alike[who] > 1):
            return ", ".join(filter(None, [who, d.file]))
        return who or None

    return [replace(d, source_label=label(d)) for d in devices]


def _member_order(key: Member) -> tuple[bool, int, int]:
    """Ranks first, by rank, then processes of unknown rank by pid."""
    return key[0] is None, key[0] or 0, key[1] or 0


def add_rank_metrics(metrics: RunMetrics, summaries: Sequence[RankSummary],
                     origin: Origin | None) -> None:
    """The figures of a run that every rank contributes to: per-rank step times (as ``origin``
    timed them, see job_step_source), DataParallel ops and the memory of every device."""
    metrics.per_rank_step_ns = per_rank_step_ns(summaries, origin)
    metrics.per_rank_steps_note = per_rank_steps_note(summaries, origin)
    metrics.per_rank_labels = per_rank_labels(summaries, list(metrics.per_rank_step_ns))
    for summary in sorted(summaries, key=lambda s: s.preference):
        metrics.ddp_forward_calls += summary.ddp_forward_calls
        for name, count in summary.dataparallel_ops.items():
            metrics.dataparallel_ops[name] = metrics.dataparallel_ops.get(name, 0) + count
    devices = memory_sources([device for summary in summaries for device in summary.memory])
    metrics.memory = MemoryStats(devices=devices) if devices else None


def rank_verdicts(summaries: Sequence[RankSummary], profiles: Sequence[Profile],
                  origin: Origin | None) -> list[RankVerdict]:
    """One verdict per rank, by rank, from its profile of ``origin`` (the profiler that timed
    every rank, see job_step_source), else its preferred one (the ranks of job_members: of
    unknown rank, a process of a capture of several is named by pid); where that profile
    cannot attribute the step (unknown: nsys on a CPU records no operators), the verdict of the
    rank's next profile that can, its step time still ``origin``'s. A rank whose profile
    came back whole gets its verdict here; no rank has a step time when no profiler timed them
    all (``origin`` None); empty when the run has fewer than two ranks."""
    ranks = job_members(summaries)
    if len(ranks) < 2:
        return []
    candidates: list[tuple[tuple[bool, tuple[int, int, int]], Member, RankVerdict | Profile]] = [
        ((s.input.kind != origin, s.preference), (s.verdict.rank, s.verdict.process), s.verdict)
        for s in summaries if s.verdict is not None]
    candidates += [((p.kind != origin, preference(p)), member(p.rank, p.process), p)
                   for p in profiles]
    chosen: dict[Member, RankVerdict] = {}
    for _, key, candidate in sorted(candidates, key=lambda c: c[0]):
        if key not in ranks or (key in chosen and chosen[key].verdict != "unknown"):
            continue
        found = candidate if isinstance(candidate, RankVerdict) else rank_verdict(candidate)
        if found is None:
            continue
        if key in chosen:  # the profile of ``origin`` cannot attribute the step: this one can
            if found.verdict != "unknown":
                timed = chosen[key]
                chosen[key] = replace(found, step_ns=timed.step_ns, step_marker=timed.step_marker,
                                      steps_clock=timed.steps_clock,
                                      step_ranges=timed.step_ranges)
            continue
        chosen[key] = found if origin is not None else replace(found, step_ns=None,
                                                               step_ranges=())
    return sorted((_with_lines(verdict, summaries) for verdict in chosen.values()),
                  key=lambda verdict: verdict.order)


def _with_lines(verdict: RankVerdict, summaries: Sequence[RankSummary]) -> RankVerdict:
    """A rank's unknown verdict with the slowest line of its own line profile's training loop,
    where it has one (see lines.slowest_loop_line): the time its preferred profile cannot
    attribute may be a line of its script (a sleep, a Python loop) that line_profiler timed."""
    line = next((s.slowest_line for s in summaries if s.slowest_line is not None
                 and s.input.rank == verdict.rank and verdict.rank is not None), None)
    if verdict.verdict != "unknown" or line is None:
        return verdict
    where = f"{Path(line.file).name}:{line.lineno}"
    code = f" ({error_text(line.source.strip())})" if line.source else ""
    return replace(verdict, verdict_reason=(
        f"{verdict.verdict_reason.rstrip('.')}; the slowest line of its training loop is {where}"
        f"{code}, {pct(line.share)} of {error_text(line.function)}() "
        f"({ms(line.time_ns)} over {line.hits:,} hits)"))
