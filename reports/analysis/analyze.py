"""``profreport analyze``: inputs -> profiles -> metrics -> findings -> report files.

Each input is one run: a profile file, or a folder holding several profiles of the same training
(and optionally the runner's ``manifest.json``). A bad file becomes one line in
``Report.failures`` and the batch goes on; only when nothing at all can be read is it an error.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

from profreport import __version__
from profreport.errors import InputError, NothingReadable, ProfreportError, failure_line
from profreport.executors import Executor, ExecutorOptions, open_executor
from profreport.inputs import check_regular_file, resolve_inside
from profreport.manifest import MANIFEST_NAME, Manifest, read_manifest
from profreport.model import LprofMeta, Profile, process_label
from profreport.parsers import (
    NSYS_REPORT_SUFFIXES,
    PROFILE_SUFFIXES,
    ParseOptions,
    is_execution_trace,
    is_profile,
)
from profreport.progress import ReadProgress
from profreport.reports.analysis.closing import closing_fetch
from profreport.reports.analysis.compare import compare_runs
from profreport.reports.analysis.dataloader import training_fetches
from profreport.reports.analysis.findings import (
    RunContext,
    find_all,
    verdict,
    verdict_confidence,
)
from profreport.reports.analysis.job import PACE_EXPOSED_MARGIN, job_analysis
from profreport.reports.analysis.memory import training_settings
from profreport.reports.analysis.metrics import (
    compute_run_metrics,
    line_profiles,
    preference,
    primary_timed,
)
from profreport.reports.analysis.ranks import (
    RankResult,
    RankSummary,
    RankTask,
    add_rank_metrics,
    job_step_source,
    needed_whole,
    rank_verdicts,
    read_rank,
)
from profreport.reports.analysis.results import (
    InputFile,
    JobAnalysis,
    RankVerdict,
    Report,
    RunAnalysis,
    RunMetrics,
    Verdict,
    rank_label,
)
from profreport.reports.analysis.scaling import (
    run_world_size,
    scaling_studies,
    world_sizes_note,
)
from profreport.reports.analysis.steps import STEADY_MIN_STEPS, phases_text
from profreport.reports.analysis.timeline import build_timeline

#: profreport's own JSON files in a run folder, never read as traces: the manifest, its report,
#: the runner's launch configs and plain-run result (runner/orchestrate.py CONFIG_NAME,
#: RESULT_NAME); any other JSON file is read only when the registry recognises a trace in it.
NOT_TRACES = (MANIFEST_NAME, "report.json", "train_config.*.json", "plain_result.json")
#: Folders never searched: hidden ones, caches, environments.
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", ".venv", "venv", ".git"})
#: A run folder's profiles lie at most this deep (run/rank0/trace.json is depth 2).
MAX_SEARCH_DEPTH = 3


@dataclass(frozen=True)
class AnalyzeOptions:
    """What ``analyze`` was asked for besides the inputs."""

    title: str | None = None
    baseline: str | None = None
    parse: ParseOptions = field(default_factory=ParseOptions)
    #: Where the per-rank parsing runs (local processes by default, or Dask).
    executor: ExecutorOptions = field(default_factory=ExecutorOptions)
    #: Told which files are read and when each is done (the terminal's progress bar).
    progress: ReadProgress = field(default_factory=ReadProgress)


def run_name(path: Path) -> str:
    """A file's stem without its profile suffixes (``a.pt.trace.json.gz`` -> ``a``)."""
    name = path.name
    for suffix in PROFILE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return path.stem


def _searched(folder: Path, path: Path) -> bool:
    """Whether ``path`` lies in a folder the search may enter."""
    parts = path.relative_to(folder).parts[:-1]
    return len(parts) < MAX_SEARCH_DEPTH and not any(
        part.startswith(".") or part in SKIPPED_DIRS for part in parts)


def find_profiles(folder: Path, links: bool = True) -> list[Path]:
    """The profile files of a run folder, sorted; an nsys export beside its report is skipped,
    and so is a PyTorch execution trace beside other profiles (ExecutionTraceObserver writes
    it beside the torch.profiler trace of its run; alone, it gets its own failure line).
    Anything but a folder counts, so a FIFO or a broken link named like a profile gets its own
    failure line when it is read, instead of being skipped without a word; ``links=False``
    leaves symbolic links out unopened."""
    found = sorted(p for p in folder.rglob("*") if not p.is_dir() and _searched(folder, p)
                   and (links or not p.is_symlink())
                   and not any(fnmatch.fnmatchcase(p.name, name) for name in NOT_TRACES)
                   and is_profile(p))
    reports = {run_name(p) for p in found if p.name.endswith(NSYS_REPORT_SUFFIXES)}
    found = [p for p in found if not (p.suffix == ".sqlite" and run_name(p) in reports)]
    graphs = [p for p in found if p.name.endswith((".json", ".json.gz"))
              and is_execution_trace(p)]
    return [p for p in found if p not in graphs] if len(graphs) < len(found) else found


def _manifest_of(folder: Path, failures: list[str]) -> Manifest | None:
    """The folder's manifest, or None (a damaged one is a failure, not a crash); entries left
    out as invalid are one failure line and notes of the run."""
    path = folder / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        manifest, problems = read_manifest(path)
    except ProfreportError as exc:
        failures.append(exc.one_line())
        return None
    if problems:
        failures.append(InputError(f"invalid entries left out: {'; '.join(problems)}",
                                   path).one_line())
        manifest.notes += [f"{MANIFEST_NAME}: {problem}" for problem in problems]
    return manifest


def _artifact_files(folder: Path, manifest: Manifest,
                    failures: list[str]) -> dict[Path, int | None]:
    """The manifest's artifacts that lie inside the run folder, with their ranks; any other is
    refused with one line and never opened."""
    files: dict[Path, int | None] = {}
    for artifact in manifest.artifacts:
        try:
            resolve_inside(artifact.path, [folder], owner=folder / MANIFEST_NAME)
        except InputError as exc:
            failures.append(exc.one_line())
            continue
        files.setdefault(folder / artifact.path, artifact.rank)
    return files


def _files_of(path: Path, manifest: Manifest | None,
              failures: list[str]) -> dict[Path, int | None]:
    """The profile files of one input, with the rank the manifest gives each (or None)."""
    if path.is_file():
        return {path: None}
    if manifest is not None and manifest.artifacts:
        files = _artifact_files(path, manifest, failures)
        manifest.notes += unlisted_note(path, files)
        return files
    return dict.fromkeys(find_profiles(path))


def unlisted_note(folder: Path, listed: dict[Path, int | None]) -> list[str]:
    """A note naming the profiles lying in a run folder that its manifest's artifacts do not
    list: only the artifacts are read, and a profile added beside them is not silently lost
    (a symbolic link is not opened to tell: artifacts are never read through one)."""
    unlisted = [p.relative_to(folder).as_posix() for p in find_profiles(folder, links=False)
                if p not in listed]
    if not unlisted:
        return []
    return [f"not read: {', '.join(unlisted)} (beside {MANIFEST_NAME}, which does not list "
            f"{'it' if len(unlisted) == 1 else 'them'} in its artifacts: a run folder with a "
            "manifest is read from its artifacts only)"]


def _read_files(files: dict[Path, int | None], options: AnalyzeOptions, executor: Executor,
                failures: list[str]) -> tuple[list[Profile], list[RankSummary]]:
    """Parse and reduce every file (in parallel, by ``executor``); return the whole profiles
    the detailed analysis reads and every file's summary, both in file order."""
    folder = str(Path.cwd())
    alone = len(files) == 1  # a run of one file reads it whole, whatever its rank
    tasks = [RankTask(str(file), folder, rank, options.parse, whole=alone)
             for file, rank in files.items()]
    options.progress.start(list(files))
    results: list[RankResult | None] = [None] * len(tasks)
    for index, result in executor.map_unordered(read_rank, tasks):
        results[index] = result
        options.progress.file_done(Path(tasks[index].path))
    failures += [r.failure for r in results if r is not None and r.failure is not None]
    read = [(r, at) for r in results if r is not None for at in range(len(r.summaries))]
    summaries = [result.summaries[at] for result, at in read]
    profiles = []
    for index in needed_whole(summaries):
        # A whole profile the worker did not send back (a lowest rank other than 0) is read here.
        result, at = read[index]
        if not result.profiles:
            result = read_rank(dataclasses.replace(result.task, whole=True))
        if len(result.profiles) > at:
            profiles.append(result.profiles[at])
    return profiles, summaries


def _notes(manifest: Manifest | None) -> list[str]:
    """Notes of the run: the manifest's, its data source, and failed launches."""
    if manifest is None:
        return []
    notes = list(manifest.notes)
    if manifest.data_source:
        notes.append(f"data: {manifest.data_source}")
    notes += [f"{launch.profiler} run failed: {launch.error}" for launch in manifest.launches
              if launch.error]
    return notes


def source_notes(profiles: list[Profile]) -> list[str]:
    """What the parsers say they left out of each file (``meta.notes``): records dropped for
    impossible values, sources not shown, what the steps are (with their phases: _with_phases);
    a last step that is the fetch that ended its loop (closing.closing_fetch); which of its
    DataLoader fetches fed no training (dataloader.training_fetches); and, beside
    files with something to analyse, each file that holds nothing (``meta.empty``: its profiler
    recorded none of it)."""
    some = any(profile.meta.empty is None for profile in profiles)
    return [f"{Path(profile.path).name}: {note}" for profile in profiles
            for note in [*(_with_phases(profile, note) for note in profile.meta.notes),
                         *filter(None, [_closing_note(profile),
                                        training_fetches(profile).note]),
                         *([profile.meta.empty] if some and profile.meta.empty else [])]]


def _closing_note(profile: Profile) -> str | None:
    """The note on the profile's closing fetch (closing.closing_fetch), None without one."""
    closing = closing_fetch(profile)
    return closing.note if closing else None


def _with_phases(profile: Profile, note: str) -> str:
    """A parser's note, with the phases' time per step (steps.phases_text) after the one saying
    what the steps are (``meta.steps_note``)."""
    return note + phases_text(profile) if note == getattr(profile.meta, "steps_note", None) \
        else note


def left_out_notes(profiles: list[Profile], summaries: list[RankSummary]) -> list[str]:
    """The traces whose steps the per-step figures leave out, said rather than dropped without a
    word: a second file of one format recording the same rank as another, or none (the next
    profiling cycle of the same process, as tensorboard_trace_handler writes one file per
    cycle), beside the one they come from (the first by preference, as every figure takes)."""
    used: dict[tuple[str, int | None], InputFile] = {}
    notes = []
    for summary in sorted(summaries, key=lambda s: s.preference):
        found, steps = summary.input, summary.step_stats
        if steps is None or found.process is not None:
            continue
        ranked = ranked_files(summaries, found.kind)
        if found.rank is None and ranked:
            notes.append(f"{Path(found.path).name}: its {steps.count:,} steps are not in the "
                         f"per-step figures, which come from {Path(ranked[0].path).name} (it "
                         f"records no rank, beside {len(ranked)} trace"
                         f"{'' if len(ranked) == 1 else 's'} of the same profiler recording "
                         "one: another run's trace, or a process outside the job; analyse it "
                         "alone for its own figures)")
            continue
        first = used.setdefault((found.kind, found.rank), found)
        if first is not found:
            why = ("neither records a rank, so they are not read as ranks of one job"
                   if found.rank is None else f"both record rank {found.rank}: the profiling "
                   "cycles of one process, or two runs")
            notes.append(f"{Path(found.path).name}: its {steps.count:,} steps are not in the "
                         f"per-step figures, which come from {Path(first.path).name} ({why}; "
                         "analyse it alone for its own figures)")
    used, left = line_profiles(profiles)
    if left:
        first = next(p for p in used if p.rank is None and p.process is None)
        notes += [f"{Path(p.path).name}: its lines are not in the line figures or listings, "
                  f"which come from {Path(first.path).name} (neither records a rank, and two "
                  "processes' line totals do not add up; analyse it alone for its own lines)"
                  for p in left]
    return notes


def ranked_files(summaries: list[RankSummary], kind: str) -> list[InputFile]:
    """The files of profiler ``kind`` (not a process of a capture) that record a rank, with
    steps, the lowest rank first."""
    return [s.input for s in sorted(summaries, key=lambda s: s.preference)
            if s.input.kind == kind and s.input.rank is not None and s.input.process is None
            and s.step_stats is not None]


def ranks_not_given(world_size: int | None, summaries: list[RankSummary],
                    communicates: bool, unread: int = 0) -> str | None:
    """``only rank 1 of the job's 2 ranks given`` when a communicating job's traces are not all
    there (a collective's time on one rank holds its wait for the others, which its own trace
    cannot tell apart from the transfer), ``... ranks read (1 file of this run could not be
    read)`` when ``unread`` files of the run failed, or that one process was given whose
    profile records neither its rank nor the job's size (a trace without distributedInfo);
    None when every rank is there, or nothing communicates."""
    ranks = sorted({int(s.input.rank) for s in summaries if s.input.rank is not None})
    if communicates and world_size is None and not ranks and len(summaries) == 1:
        return "only one process given, its rank and the job's size not recorded"
    if not communicates or world_size is None or not ranks or len(ranks) >= world_size:
        return None
    given = f"ranks {', '.join(map(str, ranks))}" if len(ranks) > 1 else f"rank {ranks[0]}"
    if unread:
        return (f"only {given} of the job's {world_size} ranks read ({unread} file"
                f"{'' if unread == 1 else 's'} of this run could not be read)")
    return f"only {given} of the job's {world_size} ranks given"


def _ranks_of(run: RunAnalysis) -> set[int]:
    """The ranks a run's inputs record."""
    return {i.rank for i in run.inputs if i.rank is not None}


def ranks_in_other_inputs(run: RunAnalysis, runs: list[RunAnalysis]) -> list[str]:
    """The note naming the other inputs of the analysis that hold ranks a run of some ranks of
    a job lacks (same world size, none of its ranks): each input is one run, so the ranks of
    one job given as separate files (``analyze rank0.json rank1.json``) were compared as two
    runs ('rank1 vs rank0: 1.00x') without a word; [] when there are none."""
    ranks = _ranks_of(run)
    if not ranks or not run.world_size or len(ranks) >= run.world_size:
        return []
    others = [(other.name, sorted(_ranks_of(other))) for other in runs
              if other is not run and other.world_size == run.world_size
              and _ranks_of(other) and not _ranks_of(other) & ranks]
    if not others:
        return []
    named = "; ".join(f"rank{'s' if len(held) > 1 else ''} {', '.join(map(str, held))} in "
                      f"{name}" for name, held in others)
    return [f"other inputs hold ranks of a job of {run.world_size} this run lacks ({named}): "
            "each input is one run, so they are compared as runs, not read as one job's ranks; "
            "if they are one job, give its traces in one folder"]


def missing_ranks_note(partial: str | None, ranks: int) -> list[str]:
    """The note saying that some ranks of a communicating job were not given (ranks_not_given),
    ``ranks`` of them given."""
    if partial is None:
        return []
    traces = "these traces" if ranks > 1 else "its trace"
    return [f"{partial}: the time in collectives includes waiting for the other ranks, "
            f"which {traces} cannot tell apart from the transfer itself (give every rank's "
            "trace to see which rank the job waits for)"]


def _partial_verdict(verdict: tuple[Verdict, str, tuple[str, float] | None],
                     partial: str | None) -> tuple[Verdict, str, tuple[str, float] | None]:
    """A communication-bound verdict of a job given in part: its exposed communication may be
    waiting for a rank not given, so its confidence is low and the reason says why."""
    name, reason, confidence = verdict
    if partial is None or name != "communication-bound":
        return verdict
    return (name, f"{reason}; but {partial}, and how much of that is waiting for the others "
            "its trace cannot tell", ("low", confidence[1]) if confidence else None)


def few_steps_note(metrics: RunMetrics) -> list[str]:
    """The note saying that too few steps were measured to tell a typical step from one holding
    one-off work (see STEADY_MIN_STEPS), unless the step is known to be start-up."""
    steps = metrics.steps
    warmup = metrics.shape.warmup if metrics.shape is not None else None
    if steps is None or steps.count >= STEADY_MIN_STEPS or (warmup is not None and warmup.only):
        return []
    return [f"only {steps.count} step measured: one step cannot show the steady state, neither "
            "whether it is a typical step or holds one-off work (a first step builds optimizer "
            "state, picks its kernels, grows the allocator's pool) nor how the steps vary (no "
            "p50, p90 or spread is given), so the verdict's confidence is low at most; profile "
            "several steps after the first"]


def member_label(profile: Profile) -> str:
    """The job's member whose profile this is (see rank_label); "" for a profile of neither a
    rank nor a process of a capture."""
    return rank_label(profile.rank, profile.process)


def detailed_profiles(profiles: list[Profile], summaries: list[RankSummary]
                      ) -> tuple[list[Profile], list[str]]:
    """The profiles the detailed figures come from, and the note saying whose they are: of a
    capture read as processes (counted among ``summaries`` of that file), one process's (the
    lowest rank the processes recorded, as of ranked files; else the preferred step source,
    then the lowest pid: which rank it is the capture cannot tell); every profile when there
    are no such processes."""
    parts = [p for p in profiles if p.process is not None]
    if not parts:
        return profiles, []
    first = min(parts, key=lambda p: (p.rank is None, p.rank or 0, preference(p), p.process))
    processes = sum(s.input.process is not None and s.input.path == str(first.path)
                    for s in summaries)
    ranked_files = any(p.rank is not None and p.process is None for p in profiles)
    whose = (f"{member_label(first)}'s profile"
             + (f" ({process_label(first.process)})" if first.rank is not None else ""))
    note = (f"the Nsight Systems figures come from {whose}, one of the {processes} processes of "
            "the capture" + (", whose rank it does not record" if first.rank is None else "")
            + ("" if ranked_files and first.rank is None else
               "; the other processes' own figures are in the per-rank verdicts"))
    return [p for p in profiles if p.process in (None, first.process)], [note]


def run_knobs(manifest: Manifest | None, profiles: list[Profile]
              ) -> tuple[dict[str, object], frozenset[str], list[str]]:
    """The run's knobs: its manifest's, and the DataLoader knobs a line profile's shown source
    gives (LprofMeta.loader_knobs) where the manifest gives none; the names of those read from
    the source, and a note saying which and where."""
    knobs = dict(manifest.knobs) if manifest else {}
    notes: list[str] = []
    read: set[str] = set()
    for profile in profiles:
        meta = profile.meta
        if not isinstance(meta, LprofMeta):
            continue
        taken = {name: value for name, value in meta.loader_knobs.items()
                 if knobs.get(name) is None}
        if taken:
            knobs.update(taken)
            read.update(taken)
            listed = ", ".join(f"{name}={value!r}" for name, value in taken.items())
            notes.append(f"{Path(profile.path).name}: DataLoader knobs read from the "
                         f"DataLoader(...) call its source shows ({meta.loader_calls}; "
                         "PyTorch's default where the call leaves one out), as no manifest "
                         f"records them: {listed}")
    return knobs, frozenset(read), notes


def analyze_run(name: str, profiles: list[Profile], manifest: Manifest | None,
                summaries: list[RankSummary], unread: int = 0) -> RunAnalysis:
    """Metrics, findings, verdict and timeline of one run, from the whole profiles of its
    primary rank and the summary of every file (``unread``: its files that could not be
    read)."""
    origin, unknown = job_step_source(summaries)
    job = job_analysis(rank_verdicts(summaries, profiles, origin), origin, unknown)
    profiles, detailed_note = detailed_profiles(profiles, summaries)
    metrics = compute_run_metrics(profiles, manifest)
    add_rank_metrics(metrics, summaries, origin)
    pacer = waited_for(job, profiles)
    world_size = run_world_size(manifest, summaries, metrics.comm is not None)
    partial = ranks_not_given(world_size, summaries, metrics.comm is not None, unread)
    knobs, source_knobs, knob_notes = run_knobs(manifest, profiles)
    context = RunContext(waited_for=pacer, ranks_not_given=partial, knobs=knobs,
                         source_knobs=source_knobs,
                         environment=dict(manifest.environment) if manifest else {},
                         settings=training_settings(manifest),
                         compiled_regions=metrics.compiled_regions,
                         channels_last_convolutions=metrics.conv_formats.channels_last
                         if metrics.conv_formats is not None else 0)
    name_verdict, reason = verdict(metrics)
    if profiles and all(p.meta.empty for p in profiles):  # the parsers' fact, never a bottleneck
        name_verdict, reason = "unknown", str(profiles[0].meta.empty)
    elif metrics.shape is not None and metrics.shape.warmup is not None \
            and metrics.shape.warmup.only:
        held = ("no step, set-up calls recorded" if metrics.shape.warmup.number is None
                else "one step holding set-up calls")
        # An unknown verdict claims nothing to set this against ("GPU busy 3.6% but no step
        # markers ..."): the start-up is one more thing said, not a "but".
        joined = "and" if name_verdict == "unknown" else "but"
        reason += (f"; {joined} the profile shows start-up only ({held}), so this is not the "
                   "steady state of training")
    confidence = verdict_confidence(metrics, name_verdict)
    paced = _paced_verdict(job, pacer, profiles)
    name_verdict, reason, confidence = paced if paced is not None else _partial_verdict(
        (name_verdict, reason, confidence), partial)
    timed = primary_timed(profiles)
    return RunAnalysis(
        name=name,
        inputs=list(dict.fromkeys(  # a file of several processes once, of no one rank
            dataclasses.replace(summary.input, process=None, rank=None if summary.input.process
                                is not None else summary.input.rank) for summary in summaries)),
        verdict=name_verdict, verdict_reason=reason, metrics=metrics,
        findings=find_all(metrics, context, name_verdict),
        timeline=build_timeline(*timed[0]) if timed else None,
        knobs=context.knobs, environment=context.environment,
        notes=_notes(manifest) + source_notes(profiles) + knob_notes + detailed_note
        + left_out_notes(profiles, summaries) + world_sizes_note(summaries)
        + missing_ranks_note(partial, len({s.input.rank for s in summaries} - {None}))
        + few_steps_note(metrics),
        world_size=world_size,
        scaling_point=dict(getattr(manifest, "scaling", None) or {}),
        verdict_confidence=confidence[0] if confidence else None,
        verdict_margin=confidence[1] if confidence else None,
        job=job,
        detailed_rank=min((p.rank for p, _ in timed if p.rank is not None), default=None),
        waits_for=pacer)


def waited_for(job: JobAnalysis | None, profiles: list[Profile]) -> RankVerdict | None:
    """The rank the job waits for when the detailed figures come from another rank's profile:
    a straggler, or a rank keeping pace whose exposed communication lies PACE_EXPOSED_MARGIN of
    the step below the detailed rank's (that rank waits inside the collectives for it); None
    otherwise."""
    if job is None or job.pacer is None:
        return None
    detailed = next(filter(None, map(member_label, profiles)), None)
    if detailed is None or detailed == job.pacer:
        return None
    pacer = next(r for r in job.ranks if r.label == job.pacer)
    mine = next((r for r in job.ranks if r.label == detailed), None)
    if job.straggler:
        return pacer
    waits = (mine is not None and mine.comm_exposed_fraction is not None
             and pacer.comm_exposed_fraction is not None
             and mine.comm_exposed_fraction - pacer.comm_exposed_fraction >= PACE_EXPOSED_MARGIN)
    return pacer if waits else None


def _paced_verdict(job: JobAnalysis | None, pacer: RankVerdict | None, profiles: list[Profile]
                   ) -> tuple[Verdict, str, tuple[str, float] | None] | None:
    """The run's verdict when the rank the job waits for (see waited_for) reads otherwise than
    the rank whose profile is detailed: the job runs at that rank's pace, so its verdict leads
    (with its confidence), and the reason says which rank the details below come from."""
    if job is None or pacer is None:
        return None
    detailed = next(filter(None, map(member_label, profiles)), None)
    mine = next((r for r in job.ranks if r.label == detailed), None)
    if mine is not None and mine.verdict == pacer.verdict:
        return None
    reason = (f"{job.verdict_reason} (the findings below come from {detailed}'s profile"
              + (f", which reads {mine.verdict}" if mine is not None else "") + ")")
    confidence = (pacer.confidence, pacer.margin) if pacer.confidence and \
        pacer.margin is not None else None
    return pacer.verdict, reason, confidence


def _unique(name: str, taken: set[str]) -> str:
    """``name``, or ``name-2``, ``name-3``... when it is already taken."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}-{n}"
    taken.add(candidate)
    return candidate


def _analyze_input(path: Path, options: AnalyzeOptions, executor: Executor,
                   failures: list[str], taken: set[str]) -> RunAnalysis | None:
    """The run of one input (a file or a run folder), or None when it holds nothing to read."""
    if not path.exists():
        raise InputError("no such file or folder", path)
    if not path.is_dir():
        check_regular_file(path)
    manifest = _manifest_of(path, failures) if path.is_dir() else None
    files = _files_of(path, manifest, failures)
    before = len(failures)
    profiles, summaries = _read_files(files, options, executor, failures)
    if path.is_dir() and not summaries and manifest is None:
        raise InputError("no profiles found in this folder", path)
    if not summaries and manifest is None:
        return None
    name = manifest.name if manifest else run_name(path)
    run = analyze_run(_unique(name, taken), profiles, manifest, summaries,
                      unread=len(failures) - before)
    impossible = impossible_fractions(run.metrics)
    if impossible:  # the parsers validate every value; this is the last guard before a report
        raise InputError(f"impossible figures, so no report for it: {', '.join(impossible)} "
                         "(a fraction outside [0, 1]; the input holds values no profiler "
                         "records)", path)
    return run


#: Values that hold no fraction below them (checked only as a named field themselves).
_LEAVES = (str, int, float, bool, type(None))
#: The exact types of the leaves, for reading a long sequence's in bulk (_only_leaves).
_LEAF_TYPES = frozenset(_LEAVES)


def impossible_fractions(value: object, where: str = "metrics") -> list[str]:
    """Where a result holds a fraction (a ``*_fraction`` or ``share`` field) that is not a
    number in [0, 1]: ``["metrics.gpu.busy_fraction = 1.7"]``. A field's path is written out
    only when something below it is impossible."""
    if isinstance(value, _LEAVES):
        return []
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [found for item in dataclasses.fields(value)
                for found in _fraction_field(getattr(value, item.name), where, item.name)]
    if isinstance(value, list | tuple):
        if _only_leaves(value):
            return []
        return [found for index, item in enumerate(value) if not isinstance(item, _LEAVES)
                for found in impossible_fractions(item, f"{where}[{index}]")]
    if isinstance(value, dict):
        return [found for key, item in value.items()
                for found in _fraction_field(item, where, key)]
    return []


def _only_leaves(items: list | tuple) -> bool:
    """Whether ``items`` holds leaves alone, in lists and tuples to any depth (a run's (step
    number, ns) pairs): no field name below it, so no fraction. Read from the set of the
    items' types, made in bulk, one level at a time: no call per item (tens of thousands of
    steps cost milliseconds); False where anything else is held, then walked item by item."""
    while items:
        kinds = set(map(type, items))
        if kinds <= _LEAF_TYPES:
            return True
        if not kinds <= {list, tuple}:
            return False
        items = list(chain.from_iterable(items))
    return True


def _fraction_field(value: object, where: str, name: object) -> list[str]:
    """:func:`impossible_fractions` for field ``name`` of ``where``: checked when its name says
    fraction."""
    if isinstance(value, _LEAVES):
        text = str(name)
        named = text.endswith("fraction") or text == "share" or text.endswith(".share")
        if named and isinstance(value, int | float) and not isinstance(value, bool) \
                and not 0.0 <= value <= 1.0:
            return [f"{where}.{text} = {value:g}"]
        return []
    return impossible_fractions(value, f"{where}.{name}")


def run_folders(path: Path) -> list[Path]:
    """The run folders a folder of runs holds (run-and-report's OUT/runs: no manifest of its
    own, one in each of its subfolders), in the order their manifests were written (the order
    the runs ran, so the first is the baseline); [] for anything else (a run folder, a file)."""
    if not path.is_dir() or (path / MANIFEST_NAME).is_file():
        return []
    runs = [sub for sub in path.iterdir()
            if sub.is_dir() and not sub.is_symlink() and (sub / MANIFEST_NAME).is_file()]
    return sorted(runs, key=lambda sub: ((sub / MANIFEST_NAME).stat().st_mtime_ns, sub.name))


def analyze_paths(inputs: list[Path], options: AnalyzeOptions) -> Report:
    """Analyse every input (one run each; a folder of run folders, each of them, see
    run_folders) and compare them; NothingReadable (an InputError) if none can be read."""
    failures: list[str] = []
    runs: list[RunAnalysis] = []
    taken: set[str] = set()
    with open_executor(options.executor) as executor:
        for path in (run for given in inputs for run in run_folders(given) or [given]):
            try:
                run = _analyze_input(path, options, executor, failures, taken)
            except Exception as exc:  # one bad input never stops the batch
                failures.append(failure_line(exc, path))
                continue
            if run is not None:
                runs.append(run)
    if not runs:
        raise NothingReadable(failures)
    for run in runs:
        run.notes.extend(ranks_in_other_inputs(run, runs))
    title = options.title or "profreport: " + ", ".join(run.name for run in runs)
    return Report(title=title, generated_by=f"profreport {__version__}", runs=runs,
                  comparison=compare_runs(runs, options.baseline), failures=failures,
                  scaling=scaling_studies(runs))
