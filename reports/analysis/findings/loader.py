"""Findings about the input pipeline: waiting for batches, a DataLoader in the training process,
stalls, and whether the profilers agree on the wait.
"""

from __future__ import annotations

import math

from profreport import concepts
from profreport.reports.analysis.dataloader import LOADER_BOUND_FRACTION, loader_shares_agree
from profreport.reports.analysis.findings.catalogue import Facts, rule
from profreport.reports.analysis.findings.context import (
    RunContext,
    training_processes,
)
from profreport.reports.analysis.findings.gpu import largest_gap_at
from profreport.reports.analysis.findings.verdicts import (
    loop_evidence,
    loop_ns_without_loader,
    trial_evidence,
)
from profreport.reports.analysis.results import (
    Evidence,
    Finding,
    Origin,
    PerStep,
    RunMetrics,
    origin_label,
)
from profreport.reports.analysis.shape import (
    PERIOD_MIN_STALLS,
    STALL_GPU_WORK_SHARE,
    STALLS_DOMINATE,
    ordinal,
    stalled_share,
    wait_shape_text,
)
from profreport.units import ms, ms_range, pct

#: A single-process DataLoader (num_workers=0) taking 5% of the step is worth a worker process
#: even when the run is not loader-bound.
IN_PROCESS_LOADER_SHARE = 0.05
#: Spare producing capacity asked of the DataLoader's workers over the bare rate the loop
#: consumes batches at: batch load times vary, and a worker that is late stalls the loop.
WORKER_HEADROOM = 1.5
#: Fewest workers to suggest: one worker leaves no batch in flight while it loads the next.
MIN_SUGGESTED_WORKERS = 2


def _loader_evidence(m: RunMetrics) -> list[Evidence]:
    """Where the DataLoader share was seen, one line per source."""
    out = [Evidence(f"{pct(share)} of step time waits for the next batch", origin)
           for origin, share in sorted(m.dataloader_fraction_by_origin.items())]
    spread = wait_shape_text(m)
    if spread is not None and m.shape is not None:
        out.append(Evidence(spread[:1].upper() + spread[1:], m.shape.origin))
    out += loop_evidence(m)
    if m.steps is not None and m.steps.wall_mean_ns and m.steps.origin != "lprof" \
            and m.steps.wall_mean_ns > 1.5 * m.steps.mean_ns:
        one = " over one interval" if m.steps.single_interval else ""
        out.append(Evidence(f"annotated steps average {ms(m.steps.mean_ns)} but wall time per "
                            f"step is {ms(m.steps.wall_mean_ns)}{one}: the rest goes between "
                            "steps", m.steps.origin))
    if m.gpu is not None:
        out.append(Evidence(f"GPU busy {pct(m.gpu.busy_fraction)}; {m.gpu.long_gap_count} idle "
                            f"gaps over {ms(m.gpu.long_gap_ns)}", m.gpu.origin,
                            largest_gap_at(m)))
    return out


#: Stalls in at most a tenth of the steps (or fewer than PERIOD_MIN_STALLS) are one-off events
#: (an epoch start, a checkpoint); more of them with no period are the workers falling behind.
ISOLATED_STALLS_SHARE = 0.10


def workers_needed(wait_ns: int, rest_ns: int, workers: int) -> int:
    """Workers that would load batches as fast as the rest of the loop consumes them.

    With ``workers`` = 0 the loop loads each batch itself, in ``wait_ns``; with n workers each
    batch takes one worker about n x (wait + rest), since n batches arrive per n steps. The loop
    then needs ``load / rest`` workers, with WORKER_HEADROOM to spare."""
    load_ns = wait_ns if workers == 0 else workers * (wait_ns + rest_ns)
    return max(MIN_SUGGESTED_WORKERS, math.ceil(WORKER_HEADROOM * load_ns / rest_ns))


#: Batches each DataLoader worker loads ahead that the advice asks for (PyTorch's default is 2).
PREFETCH_FACTOR = 4


def loader_workers(m: RunMetrics, ctx: RunContext) -> int | None:
    """The DataLoader's worker count: the run's num_workers, else 0 where its spans are
    single-process iterators (see metrics.loader_in_process); None when neither tells."""
    workers = ctx.num_workers()
    if workers is None and m.loader_in_process:
        return 0
    return workers


def _loader_settings(m: RunMetrics, ctx: RunContext) -> str:
    """The end of a fix: the DataLoader settings this run lacks ('; set pin_memory=True,
    persistent_workers=True and prefetch_factor=4.'), or '.' when it lacks none; pin_memory
    only where the profile shows batches copied from pageable memory (a run whose copies are
    pinned, or without a GPU, has nothing to pin), prefetch_factor unless the run's is as
    high already."""
    wanted = []
    if not ctx.knob("pin_memory") and m.copies is not None \
            and (m.copies.h2d_pageable_bytes or 0) > 0:
        wanted.append("pin_memory=True")
    if not ctx.knob("persistent_workers"):
        wanted.append("persistent_workers=True")
    prefetch = ctx.knob("prefetch_factor")
    if not (isinstance(prefetch, int) and prefetch >= PREFETCH_FACTOR):
        wanted.append(f"prefetch_factor={PREFETCH_FACTOR}")
    if not wanted:
        return "."
    return ("; set " + ", ".join(wanted[:-1]) + (" and " if len(wanted) > 1 else "")
            + wanted[-1] + ".")


def _unknown_workers_need(m: RunMetrics, wait: int, rest: int) -> str:
    """The workers a loop whose worker count is unknown needs, per step waiting ``wait`` ns for
    ``rest`` ns of other work: with n workers now, each batch takes a worker n steps, so it
    needs (wait + rest) / rest x n of them, with WORKER_HEADROOM (workers_needed); loading in
    the main process (n = 0), the wait alone is the load."""
    scale = f"{WORKER_HEADROOM * (wait + rest) / rest:.1f} times as many workers as it has"
    said = f"the loop waits {ms(wait)} per step for {ms(rest)} of other work"
    if m.loader_in_process is False:
        return ("The DataLoader runs in worker processes (its spans are "
                f"_MultiProcessingDataLoaderIter) but the profile does not record how many: "
                f"{said}, so it needs about {scale}.")
    return (f"The profile does not record num_workers: {said}, so it needs about "
            f"{workers_needed(wait, rest, 0)} workers if it loads batches in the main process "
            f"(num_workers=0), or about {scale} if it has some.")


def _workers_advice(ctx: RunContext, m: RunMetrics) -> str:
    """Concrete DataLoader advice: the workers this run's loop needs (from its DataLoader wait
    and the rest of its step, and its worker count: see loader_workers), within its CPUs, and
    the DataLoader settings it lacks."""
    workers = loader_workers(m, ctx)
    loop = loop_ns_without_loader(m)
    cpus = ctx.cpus()
    cheaper = ("make each sample cheaper (decode/augment once and cache, smaller images, "
               "DALI/GPU augmentation)")
    extras = _loader_settings(m, ctx)
    if loop is None:
        return (f"Give the DataLoader more workers (num_workers; the profile has no step "
                f"breakdown to size them from) or {cheaper}{extras}")
    wait, rest = loop
    if workers is None:
        return (f"{_unknown_workers_need(m, wait, rest)} Raise num_workers to that where the "
                f"job has the CPUs, else {cheaper}{extras}")
    target = workers_needed(wait, rest, workers)
    processes = training_processes(ctx)
    budget = concepts.worker_cpus(cpus, processes) if cpus else None
    share = (f"the job's {cpus} CPUs" if processes == 1 else
             f"each of the {processes} ranks' share of the job's {cpus} CPUs")
    if budget is not None and target > budget:
        leave = "leave" if processes == 1 else "leaves"
        if budget <= 0:
            return (f"{share[0].upper()}{share[1:]} {leave} no core for DataLoader workers "
                    f"beside the training loop, and the loop would need about {target}: request "
                    f"--cpus-per-task={target + 1} (one task per rank), or {cheaper}.")
        if workers >= budget:
            many = (f"as many as {share} {leave.replace('leave', 'allow')}" if workers == budget
                    else f"more than the {budget} {share} {leave}")
            return (f"num_workers is already {workers}, {many} beside the training loop, and "
                    f"the loop would need about {target}: {cheaper}, or request more CPUs per "
                    f"task{extras}")
        return (f"Raise DataLoader num_workers from {workers} to {budget} ({share}, less one for "
                f"the training loop; the loop would need about {target}) and {cheaper}"
                f"{extras}")
    slurm = f"request --cpus-per-task={target + 1} in Slurm (one core for the training loop)"
    instead = f", or {cheaper}" if workers > 0 else ""
    return (f"Raise DataLoader num_workers from {workers} to {target} (the loop waits "
            f"{ms(wait)} per step for {ms(rest)} of other work) and {slurm}{instead}"
            f"{extras}")


@rule("LOADER_BOUND", severity=("high",), needs=("profiles", "manifest"))
def loader_bound(facts: Facts) -> Finding | None:
    """The training loop waits for batches for a large share of each step."""
    m, ctx = facts.metrics, facts.context
    share = m.dataloader_fraction
    if share is None or share < LOADER_BOUND_FRACTION:
        return None
    # The stalls are a share of one profiler's wait: of this share only when it measured both.
    stalls = stalled_share(m) if m.shape is not None and m.shape.origin == m.dataloader_origin \
        else None
    where = (f"{pct(share)} of its step time waiting for data, {pct(stalls)} of that in "
             "stalls" if stalls is not None and stalls >= STALLS_DOMINATE
             else f"{pct(share)} of each step waiting for data")
    return Finding("LOADER_BOUND", "high", f"The training loop spends {where}.",
                   _loader_evidence(m) + _in_process_evidence(m)
                   + trial_evidence(m.trials, "loader"),
                   _workers_advice(ctx, m))


def _in_process_evidence(m: RunMetrics) -> list[Evidence]:
    """That the DataLoader runs in the training process, when the trace's spans say so."""
    if not m.loader_in_process:
        return []
    origin: Origin = m.breakdown.origin if m.breakdown is not None else "kineto"
    waits = "the GPU" if m.gpu is not None else "the model"
    return [Evidence("the DataLoader spans are _SingleProcessDataLoaderIter: num_workers=0, "
                     f"every batch is loaded in the training process while {waits} waits",
                     origin)]


@rule("SYNC_DATALOADER", severity=("medium",), needs=("profiles", "manifest"))
def in_process_loader(facts: Facts) -> Finding | None:
    """A single-process DataLoader costing a noticeable share of the step, below loader-bound
    (LOADER_BOUND covers it above)."""
    m, ctx = facts.metrics, facts.context
    share = m.dataloader_fraction
    if not m.loader_in_process or share is None or \
            not IN_PROCESS_LOADER_SHARE <= share < LOADER_BOUND_FRACTION:
        return None
    return Finding("SYNC_DATALOADER", "medium",
                   f"The DataLoader loads batches in the training process (num_workers=0): "
                   f"{pct(share)} of each step.", _in_process_evidence(m),
                   _workers_advice(ctx, m))


@rule("DATA_STALLS", severity=("medium", "low"), needs=("profiles",))
def data_stalls(facts: Facts) -> Finding | None:
    """The DataLoader wait is mostly a few long stalls (or stalls every Nth step),
    not a steady wait of every step."""
    m, ctx = facts.metrics, facts.context
    shape = m.shape
    d = shape.dataloader_wait if shape is not None else None
    if shape is None or d is None or not d.outlier_count or d.outlier_range_ns is None:
        return None
    restart = ("persistent_workers=True is set, so not the workers restarting"
               if ctx.knob("persistent_workers") else
               "the workers restart unless persistent_workers=True")
    share = d.outlier_ns / max(d.total_ns, 1)
    low, high = d.outlier_range_ns
    periodic = (f"every {ordinal(d.period)} step stalls" if d.period else
                f"{d.outlier_count} of {d.count} steps stall")
    workers = has_workers(m, ctx)
    frequent = d.outlier_count >= PERIOD_MIN_STALLS and \
        d.outlier_count > ISOLATED_STALLS_SHARE * d.count
    cause = (_periodic_cause(d.period, workers) if d.period else
             _frequent_cause(pct(d.outlier_count / d.count), workers) if frequent else
             f"Isolated stalls are one-off events: an epoch start ({restart}), evaluation, a "
             "checkpoint, or a slow read.")
    biggest = d.outliers[0]
    gpu = _stall_gpu_evidence(d, shape.origin)
    if d.outlier_gpu_busy is not None and d.outlier_gpu_busy >= STALL_GPU_WORK_SHARE:
        cause = ("The GPU works through the stalls, so they are another task between the "
                 "training steps (an evaluation pass, say), not the loop waiting for data.")
    return Finding(
        id="DATA_STALLS", severity="medium" if share >= STALLS_DOMINATE else "low",
        title=f"The DataLoader wait is stalls, not a steady wait: {periodic} for "
              f"{ms_range(low, high)}, the other steps wait {ms(d.steady_ns)} (median).",
        evidence=[Evidence(wait_shape_text(m) or "", shape.origin,
                           m.locate(shape.origin, biggest.span)),
                  Evidence(f"the stalls hold {pct(share)} of the DataLoader wait over these "
                           "steps", shape.origin)] + gpu,
        recommendation=f"{cause} Look at what runs during the longest stall (the location "
                       "above) before raising num_workers: more workers shorten a steady wait, "
                       "not a periodic task.")


def has_workers(m: RunMetrics, ctx: RunContext) -> bool | None:
    """Whether the DataLoader loads in worker processes: its worker count (loader_workers), else
    spans of worker processes' iterators; None when neither tells."""
    workers = loader_workers(m, ctx)
    if workers is not None:
        return workers > 0
    return True if m.loader_in_process is False else None


def _periodic_cause(period: int, workers: bool | None) -> str:
    """What stalls every ``period``-th step are, by whether the DataLoader has workers."""
    task = f"a periodic task (evaluation, checkpointing, an epoch start) every {period} steps"
    if workers is False:
        return (f"With no DataLoader workers (num_workers=0), a stall every {ordinal(period)} "
                f"step is {task}, or every {ordinal(period)} batch being slower to load.")
    return (f"A stall every {ordinal(period)} step is what a DataLoader whose workers cannot "
            f"keep up does (with {period} workers each batch arrives late once per round), or "
            f"{task}.")


def _frequent_cause(share: str, workers: bool | None) -> str:
    """What stalls in many steps with no period are, by whether the DataLoader has workers."""
    if workers is False:
        return (f"Stalls in {share} of the steps with no period, with no DataLoader workers "
                "(num_workers=0): the training process loads some batches slower than others "
                "(slow samples or collate_fn, a slow read).")
    if workers is None:
        return (f"Stalls in {share} of the steps with no period: some batches arrive later "
                "than others (slow samples or collate_fn, or DataLoader workers falling behind; "
                "the profile does not say whether the DataLoader has workers).")
    return (f"Stalls in {share} of the steps with no period are the workers falling behind: a "
            "batch comes late whenever the worker making it has not finished (slow samples or "
            "collate_fn, workers short of cores).")


def _stall_gpu_evidence(d: PerStep, origin: Origin) -> list[Evidence]:
    """How busy the GPU is during the stalls, when the profile records GPU work."""
    if d.outlier_gpu_busy is None:
        return []
    busy = d.outlier_gpu_busy
    what = ("it runs work of its own then" if busy >= STALL_GPU_WORK_SHARE else
            "it waits with the training loop")
    return [Evidence(f"during the stalls the GPU is busy {pct(busy)} of the time: {what}",
                     origin)]


def _wait_evidence(m: RunMetrics, origin: str, share: float) -> Evidence:
    """What one profiler measured of the DataLoader wait, in its own terms."""
    loop = m.loop_line if origin == "lprof" else None
    if loop is not None:
        return Evidence(f"{pct(share)} of {loop.function}() on the DataLoader loop line "
                        f"{loop.file.rsplit('/', 1)[-1]}:{loop.lineno}", "lprof")
    return Evidence(f"{pct(share)} of step time waiting for the next batch",
                    origin)  # type: ignore[arg-type]


@rule("SOURCES_AGREE", "SOURCES_DISAGREE", severity=("info",), needs=("profiles",))
def sources_agreement(facts: Facts) -> Finding | None:
    """When several profilers measured the DataLoader share: do they tell the same story?"""
    m = facts.metrics
    shares = m.dataloader_fraction_by_origin
    if len(shares) < 2:
        return None
    evidence = [_wait_evidence(m, origin, share) for origin, share in sorted(shares.items())]
    if m.gpu is not None:
        evidence.append(Evidence(f"GPU idle {pct(1 - m.gpu.busy_fraction)}", m.gpu.origin))
    evidence += _recompiling_evidence(m)
    values = list(shares.values())
    spread = f"{pct(min(values))} to {pct(max(values))}"
    if loader_shares_agree(values):
        return Finding("SOURCES_AGREE", "info", _agreement_title(values, spread), evidence,
                       "No action: the diagnosis rests on several independent measurements.")
    return Finding("SOURCES_DISAGREE", "info",
                   f"The profilers of this run disagree on the DataLoader wait ({spread} of "
                   "step time).", evidence, _disagreement_advice(m))


def _recompiling_evidence(m: RunMetrics) -> list[Evidence]:
    """That one profiler's step figures leave out steps torch.compile compiled again in and the
    others' leave none out (nsys records no compiling, and nothing recorded matches one
    profiler's steps to another's: the runner traces each in a run of its own), so the
    profilers compare different steps."""
    stats = {s.origin: s for s in reversed(m.steps_by_origin)
             if s.origin in m.dataloader_fraction_by_origin}
    holding = [origin for origin, s in stats.items() if not s.recompiling_left_out]
    if not holding:
        return []
    others = " and ".join(f"{origin_label(origin)}'s" for origin in sorted(holding))
    return [Evidence(f"{origin_label(origin)}'s step figures leave out {len(left)} "
                     f"step{'s' if len(left) > 1 else ''} in which torch.compile compiled again "
                     f"(step {', '.join(map(str, left))}); {others} leave out none, so they "
                     "hold any recompile of their run", origin)
            for origin, left in sorted((o, s.recompiling_left_out) for o, s in stats.items())
            if left]


def _agreement_title(values: list[float], spread: str) -> str:
    """What the profilers agree on: the verdict when every share lies on one side of
    LOADER_BOUND_FRACTION (shares 0.2% and 13% agree on that, not on the wait); else the wait
    itself, their shares being within SOURCES_AGREE_DELTA."""
    sides = {share >= LOADER_BOUND_FRACTION for share in values}
    if len(sides) > 1:
        return (f"The {len(values)} profilers of this run agree on the DataLoader wait "
                f"({spread} of step time).")
    bound = sides.pop()
    return (f"The {len(values)} profilers of this run agree that the run is"
            f"{'' if bound else ' not'} loader-bound: they put the DataLoader wait at {spread} "
            f"of step time, each {'at or above' if bound else 'below'} "
            f"{pct(LOADER_BOUND_FRACTION)}.")


def _disagreement_advice(m: RunMetrics) -> str:
    """Which figure to trust when the profilers disagree on the DataLoader wait: the trace
    profilers' over line_profiler's, whose per-line overhead inflates Python-heavy lines; of
    trace profilers alone, the one that timed more steps (a few steps may hold an epoch start or
    the workers' first fill that many steps average out)."""
    if "lprof" in m.dataloader_fraction_by_origin:
        return ("Trust the trace-based profiler (nsys/torch.profiler) over line_profiler, "
                "whose per-line overhead inflates Python-heavy lines; re-run if in doubt.")
    timed = sorted((s for s in m.steps_by_origin if s.origin in m.dataloader_fraction_by_origin),
                   key=lambda s: -s.count)
    if len(timed) < 2:
        return "Profile the same steps under each profiler to compare like with like."
    counts = "; ".join(f"{origin_label(s.origin)} {s.count:,} steps of {ms(s.mean_ns)}"
                       for s in timed)
    trust = ("Each timed as many steps: compare the spread of the wait in each (the stalls) "
             "and re-run if in doubt." if timed[0].count == timed[-1].count else
             f"The verdict and the breakdown take the figure of {origin_label(timed[0].origin)}, "
             "over more steps; profile as many steps under the others to compare like with "
             "like.")
    return (f"The trace profilers measured different windows ({counts}): a few steps may hold "
            "an epoch start or the DataLoader workers' first fill that many steps average "
            f"out. {trust}")
