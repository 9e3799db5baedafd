"""Findings about the start of a profile: one-off set-up work in its first step.
"""

from __future__ import annotations

from profreport import concepts
from profreport.reports.analysis.findings.catalogue import Facts, rule
from profreport.reports.analysis.findings.loader import has_workers
from profreport.reports.analysis.results import (
    Evidence,
    Finding,
    Origin,
    Warmup,
    origin_label,
)
from profreport.units import ms


def _calls_text(calls: dict[str, int]) -> str:
    """'cudaMalloc ×12, cuInit ×1', or a note that none was recorded."""
    if not calls:
        return "no context, autotuning or allocator call recorded in it"
    return ", ".join(f"{name} ×{count}" for name, count in calls.items())


def _fill_evidence(w: Warmup, origin: Origin, workers: bool | None) -> list[Evidence]:
    """The DataLoader's first fill, when the start-up step waits longer for its batch than the
    later steps do: its workers starting where it has some (``workers``: see
    loader.has_workers), its first batches loaded in the training process where it has
    none."""
    if w.loader_fill is None or w.loader_fill[0] <= w.loader_fill[1]:
        return []
    first, later = w.loader_fill
    fill = {True: "the loader's first fill (worker start-up, first batches)",
            False: "the loader's first batches, loaded in the training process (no workers: "
                   "its iterator's creation, the dataset's first reads)",
            None: "the loader's first fill (its iterator's creation, first batches)"}[workers]
    return [Evidence(f"its DataLoader spans take {ms(first)} against a median of {ms(later)} in "
                     f"the later steps: {fill}", origin)]


def _first_recorded(w: Warmup, times: float, measured: Evidence) -> Finding:
    """STARTUP for a long first step that is not the process's first and records no set-up
    call: the profiler counted ``w.steps_before`` steps before it (a schedule's wait and
    warmup), in which the process's start-up ran, so what slowed it is no start-up and no
    DataLoader's first fill."""
    before = ("step 0" if w.steps_before == 1 else f"steps 0-{w.steps_before - 1}")
    return Finding(
        id="STARTUP", severity="info",
        title=f"Step {w.number}, the first step profiled, takes {times:.1f}× the later steps' "
              "median and is left out of the per-step figures; it is not the process's "
              "start-up.",
        evidence=[measured, Evidence(
            f"the profiler counted {before} before it without recording them (ProfilerStep#"
            f"{w.number} is the first it recorded: a schedule's wait and warmup steps): the "
            "process's start-up (context creation, the DataLoader's first fill) ran then",
            measured.origin)],
        recommendation="Nothing to change in the training: one slow step at the start of "
                       "recording is no steady state (the profiler starting to record, or other "
                       "work on the machine then). Look at it in the trace if later captures "
                       "show it again.")


#: What shows the steady state when a profile holds start-up only.
_LATER_STEPS = ("Profile later steps: torch.profiler.schedule(wait=1, warmup=1, active=3) skips "
                "the first iterations; with nsys, start the capture after a few steps "
                "(cudaProfilerStart, --capture-range=cudaProfilerApi).")


@rule("STARTUP", severity=("high", "info"), needs=("profiles",))
def startup(facts: Facts) -> Finding | None:
    """The start-up the profile holds, and whether the per-step figures leave it out
    (high severity when the profile shows start-up only: one step holding set-up calls, or no
    step at all and set-up calls, as one iteration traced without a schedule records: its one
    optimizer step bounds no step)."""
    m = facts.metrics
    shape = m.shape
    if shape is None or shape.warmup is None:
        return None
    w = shape.warmup
    at = m.locate(shape.origin, w.span)
    if w.only and w.number is None:
        return Finding(
            id="STARTUP", severity="high",
            title=f"The profile shows start-up only: it holds no step ({ms(w.duration_ns)} "
                  "profiled) and records one-off set-up work, so its figures are not the steady "
                  "state of training.",
            evidence=[Evidence(f"the {ms(w.duration_ns)} profiled hold no step and these set-up "
                               f"calls: {_calls_text(w.setup_calls)}", shape.origin, at)],
            recommendation=_LATER_STEPS)
    if w.only:
        return Finding(
            id="STARTUP", severity="high",
            title=f"The profile shows start-up only: its one step ({ms(w.duration_ns)}) holds "
                  "one-off set-up work, so its figures are not the steady state of training.",
            evidence=[Evidence(f"step {w.number}, the only one, holds set-up calls: "
                               f"{_calls_text(w.setup_calls)}", shape.origin, at)],
            recommendation=_LATER_STEPS)
    median = w.others_median_ns or 0
    times = w.duration_ns / max(median, 1)
    if w.after_startup:
        return _first_recorded(w, times, Evidence(
            f"step {w.number} takes {ms(w.duration_ns)}, {times:.1f}× the later steps' median "
            f"of {ms(median)}; set-up calls in it: {_calls_text(w.setup_calls)}", shape.origin,
            at))
    where = (f"step {w.number} takes {ms(w.duration_ns)}, {times:.1f}× the later steps' median "
             f"of {ms(median)}" if w.number is not None else
             f"{ms(w.duration_ns)} before the first step, {times:.0f}× the median step of "
             f"{ms(median)}")
    return Finding(
        id="STARTUP", severity="info",
        title=(f"Step {w.number} is start-up, left out of the per-step figures."
               if w.number is not None else
               "The profile begins with start-up before its first step, left out of the "
               "per-step figures."),
        evidence=[Evidence(f"{where}; set-up calls in it: {_calls_text(w.setup_calls)}",
                           shape.origin, at)]
        + _fill_evidence(w, shape.origin, has_workers(m, facts.context)),
        recommendation=_startup_advice(w))


def _startup_advice(w: Warmup) -> str:
    """Start-up happens once per process; torch.compile's compiling too, unless later steps
    recompile (a new input shape)."""
    once = ("Nothing to change: start-up (context creation, cuDNN autotuning, the allocator "
            "growing, the DataLoader's first fill) happens once per process.")
    if not concepts.COMPILE_SPANS & set(w.setup_calls):
        return once
    return (once[:-1] + ", and so does torch.compile compiling the model at its first forward "
            "and backward, unless an input of a new shape recompiles it (a smaller last batch: "
            "drop_last=True, or torch.compile(dynamic=True)).")


#: What makes torch.compile compile again after start-up, and how to find out which.
_RECOMPILE_CAUSES = ("A compile after start-up is a recompile: an input of a new shape (a "
                     "smaller last batch: drop_last=True, or torch.compile(dynamic=True)), or a "
                     "guard failing on changed state; TORCH_LOGS=recompiles names the cause.")


def _recompiled_in_another_source(facts: Facts) -> Finding | None:
    """RECOMPILED from a profiler whose figures are not the run's: the run's step figures come
    from one that records no compiling (Nsight Systems), while another profiler of the run
    (torch.profiler) left steps out for it. Each traced a run of its own, so the steps are not
    matched: the finding says the run's figures may hold recompiles."""
    run_origin = facts.metrics.steps.origin if facts.metrics.steps is not None else None
    left = [(s.origin, s.recompiling_left_out) for s in facts.metrics.steps_by_origin
            if s.recompiling_left_out and s.origin != run_origin]
    if not left or run_origin is None:
        return None
    origin, numbers = left[0]
    count = len(numbers)
    steps = f"step{'s' if count > 1 else ''} {', '.join(map(str, numbers))}"
    return Finding(
        id="RECOMPILED", severity="medium",
        title=(f"torch.compile compiled again inside {count} of {origin_label(origin)}'s "
               f"profiled steps: the run's per-step figures, {origin_label(run_origin)}'s, "
               "record no compiling and may hold it."),
        evidence=[Evidence(f"torch.compile compiling (Dynamo's entire_frame_compile, "
                           f"AOTAutograd's entire_backward_compile) in {steps}, left out of "
                           f"{origin_label(origin)}'s per-step figures", origin),
                  Evidence(f"{origin_label(run_origin)} records no compile spans, and it traced "
                           "a run of the training of its own: its steps are not matched to "
                           f"{origin_label(origin)}'s", run_origin)],
        recommendation=_RECOMPILE_CAUSES + " Compare the run's step times with "
                       f"{origin_label(origin)}'s, which leave the recompiling steps out.")


@rule("RECOMPILED", severity=("medium",), needs=("profiles",))
def recompiled(facts: Facts) -> Finding | None:
    """torch.compile compiled inside the profiled steps after start-up (a recompile): those
    steps are left out of every per-step figure (step times, breakdown, spreads, shares)
    when some step does not compile; when every step does, the per-step means hold it. When
    the run's figures come from a profiler that records no compiling (Nsight Systems) and
    another of the run left steps out for it, it names them and says the run's figures may
    hold a recompile."""
    shape = facts.metrics.shape
    if shape is None or not shape.compiling:
        return _recompiled_in_another_source(facts)
    if shape.warmup is not None and shape.warmup.only:
        return None
    compiling = shape.compiling_ns
    listed = ", ".join(f"step {number} ({ms(ns)})" for number, ns in shape.compiling[:3])
    more = len(shape.compiling) - 3
    steps = facts.metrics.steps
    total = steps.mean_ns * steps.count if steps is not None else 0
    share = (f", {compiling / total:.0%} of the steps' time"
             if total and not shape.compiling_left_out else "")
    evidence = [Evidence(f"torch.compile compiling (Dynamo's entire_frame_compile, AOTAutograd's "
                         f"entire_backward_compile) in {listed}"
                         + (f" and {more} more" if more > 0 else "") + share, shape.origin)]
    if shape.step_window is not None:
        evidence.append(Evidence(f"the step windows' median is {ms(shape.step_window.median_ns)}"
                                 ": the steady steps", shape.origin))
    count = len(shape.compiling)
    if shape.compiling_left_out:
        kept = f" over the other {steps.count:,} steps" if steps is not None else ""
        title = (f"torch.compile compiled again inside {count} of the profiled steps "
                 f"({ms(compiling)}): {'they are' if count > 1 else 'it is'} left out of the "
                 f"per-step figures{kept}.")
        judge = ("The per-step figures leave those steps out; each recompile still costs its "
                 "time every time its cause recurs (every epoch's last batch).")
    else:
        title = (f"torch.compile compiled again inside {count} of the measured steps "
                 f"({ms(compiling)}): the per-step means and shares hold that compiling.")
        judge = "Judge the steady state from steps without it (the median above)."
    return Finding(
        id="RECOMPILED", severity="medium", title=title, evidence=evidence,
        recommendation=_RECOMPILE_CAUSES + " " + judge)
