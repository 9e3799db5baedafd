"""The verdict: the run's bottleneck in one word with the numbers behind it and how clearly it
stands, the runner's trials beside the profilers, the TRIALS finding when they disagree and
SHARED_CPUS when the unprofiled run competed with other work for the CPUs.
"""

from __future__ import annotations

from profreport import concepts
from profreport.model import HiddenKind, SourceHidden
from profreport.reports.analysis.dataloader import LOADER_BOUND_FRACTION
from profreport.reports.analysis.findings.catalogue import Facts, rule, run_findings
from profreport.reports.analysis.findings.context import RunContext
from profreport.reports.analysis.results import (
    Evidence,
    Finding,
    FunctionListing,
    Origin,
    RunMetrics,
    SyncCall,
    Trials,
    Verdict,
    origin_label,
)
from profreport.reports.analysis.steps import STEADY_MIN_STEPS
from profreport.text import error_text
from profreport.units import duration, ms, pct

#: Communication not hidden under compute for a quarter of the step makes the run comm-bound.
COMM_BOUND_EXPOSED_FRACTION = 0.25
#: A GPU busy 80% of its window is limited by its own kernels: the run is compute-bound (unless
#: its collectives or copies keep it busy: see gpu_saturated_by_compute).
COMPUTE_BOUND_BUSY = 0.80
#: Compute (GPU kernels, or CPU framework ops on CPU-only runs) filling 60% of the step makes
#: the model's own math the bottleneck.
COMPUTE_BOUND_SHARE = 0.60
#: Copies and memsets holding half the step with no compute kernel beside them (the breakdown's
#: h2d_copy and copy_memset parts) leave every other part less: the run is transfer-bound.
TRANSFER_BOUND_SHARE = 0.50
#: Half the step with the GPU idle until work launched during the idle time arrives (nothing
#: queued): the GPU waits for the CPU more than it works, the run is host-bound.
HOST_BOUND_IDLE_SHARE = 0.50
#: A quarter of the step with the GPU idle since the CPU blocked in a sync (it could queue
#: nothing more) makes the run sync-bound.
SYNC_BOUND_IDLE_SHARE = 0.25
#: A verdict whose figure is 15 points of the step past its threshold and ahead of every other
#: cause would survive run-to-run noise of that size: high confidence.
CONFIDENT_MARGIN = 0.15
#: Under 5 points from the threshold or the runner-up, a rerun could flip it: low confidence.
CLEAR_MARGIN = 0.05
#: When more than this share of the step the GPU idles for no reason the trace shows (no data
#: wait, sync or launch ends it), the verdict says unknown rather than guess.
UNEXPLAINED_IDLE_SHARE = 0.50
#: When half the step is time no profile could attribute (a CPU-only nsys capture holds only NVTX
#: ranges), calling the run "balanced" would be a guess: the verdict is unknown instead.
UNATTRIBUTED_SHARE = 0.50
#: In the runner's trials, the DataLoader alone or the model alone is the limit when the other
#: runs at least this much faster on its own; closer than that both matter and neither is named.
TRIAL_LIMIT_RATIO = 1.5
#: A profiler whose steps take this many times the unprofiled run's measures mostly its own
#: work (per-operator or per-line cost): its shares describe the profiled run, not the real one.
PROFILER_SLOWDOWN_LIMIT = 10.0
# Which limit (in the runner's trials' terms) each profiler verdict points at: the synthetic
# trial runs the whole model step, so launch overhead and communication count as the model's.
VERDICT_LIMIT = {"loader-bound": "loader", "compute-bound": "compute",
                 "host-bound": "compute", "communication-bound": "compute",
                 "sync-bound": "compute"}
# The breakdown's parts that are GPU copies and memsets, not kernels (see gpu.gpu_parts).
COPY_PARTS = ("h2d_copy", "copy_memset")
_LIMIT_VERDICT: dict[str, Verdict] = {"loader": "loader-bound", "compute": "compute-bound"}
#: The finding that explains each verdict: it leads the run's findings, whatever its severity.
VERDICT_FINDINGS: dict[str, str] = {
    "loader-bound": "LOADER_BOUND", "compute-bound": "COMPUTE_BOUND",
    "communication-bound": "COMM_OVERHEAD", "host-bound": "HOST_LAUNCH_BOUND",
    "sync-bound": "SYNC_STALL", "transfer-bound": "TRANSFER_BOUND",
}


def trial_limit(trials: Trials | None) -> str | None:
    """What the runner's trials say limits throughput: "loader" when the model alone runs
    TRIAL_LIMIT_RATIO times faster than the DataLoader alone, "compute" the other way round,
    None when they are close or missing."""
    if trials is None or not trials.io or not trials.synthetic:
        return None
    if trials.synthetic >= TRIAL_LIMIT_RATIO * trials.io:
        return "loader"
    if trials.io >= TRIAL_LIMIT_RATIO * trials.synthetic:
        return "compute"
    return None


def trial_sentence(trials: Trials) -> str:
    """'the DataLoader alone delivers 1767 samples/s, the model alone 858 (one cached batch),
    the real loop 652'."""
    full = f", the real loop {trials.full:.0f}" if trials.full else ""
    return (f"the DataLoader alone delivers {trials.io:.0f} samples/s, the model alone "
            f"{trials.synthetic:.0f} (one cached batch){full}")


def trial_evidence(trials: Trials | None, limit: str) -> list[Evidence]:
    """The trials as evidence, when they point at ``limit``."""
    if trials is None or trial_limit(trials) != limit:
        return []
    who = "the DataLoader" if limit == "loader" else "the model"
    return [Evidence(f"without a profiler, {trial_sentence(trials)}: {who} sets the pace",
                     "manifest")]


def compute_share(m: RunMetrics) -> float | None:
    """Compute share of the step in the breakdown; None when it did not measure compute."""
    if m.breakdown is None or m.breakdown.step_ns <= 0 or "compute" not in m.breakdown.measured:
        return None
    return m.breakdown.parts_ns["compute"] / m.breakdown.step_ns


def copy_share(m: RunMetrics) -> float | None:
    """Share of the step the GPU's copies and memsets take with no compute kernel beside them:
    the breakdown's COPY_PARTS, which claim after compute (gpu.gpu_parts); None without a GPU
    breakdown that measured them."""
    b = m.breakdown
    if m.gpu is None or b is None or b.step_ns <= 0 or not b.measured.issuperset(COPY_PARTS):
        return None
    return sum(b.parts_ns[part] for part in COPY_PARTS) / b.step_ns


def transfer_bound_share(m: RunMetrics) -> float | None:
    """The copies' share of the step (copy_share) when it reaches TRANSFER_BOUND_SHARE: the
    figure of the transfer-bound verdict and of TRANSFER_BOUND; None below it."""
    share = copy_share(m)
    return share if share is not None and share >= TRANSFER_BOUND_SHARE else None


def compute_where(m: RunMetrics) -> str:
    """What the breakdown's compute part is: GPU kernels, the model's CPU operators, or, from
    line_profiler alone, the loop body's lines (it times lines, not the operators or the device
    that run them)."""
    if m.gpu is not None:
        return "GPU kernels"
    if m.breakdown is not None and m.breakdown.origin == "lprof":
        return "the loop body's lines"
    return "the model's CPU operators"


def loop_ns_without_loader(m: RunMetrics) -> tuple[int, int] | None:
    """Per step, the DataLoader wait and the rest of the loop (model, copies, Python), ns, from
    the step breakdown; None when the breakdown does not have both."""
    if m.breakdown is None or m.dataloader_fraction is None:
        return None
    wait = round(m.dataloader_fraction * m.breakdown.step_ns)
    rest = m.breakdown.step_ns - wait
    return (wait, rest) if wait > 0 and rest > 0 else None


def _gpu_idle_candidates(m: RunMetrics) -> list[Candidate]:
    """Host-bound and sync-bound from what the GPU's idle time waits for (see IdleCauses)."""
    idle = m.gpu_idle
    if idle is None:
        return []
    out: list[Candidate] = []
    launch, sync = idle.share("launch"), idle.share("sync")
    if launch >= HOST_BOUND_IDLE_SHARE:
        out.append((launch, HOST_BOUND_IDLE_SHARE, "host-bound",
                    f"the GPU idles {pct(launch)} of the step until work the CPU launches during "
                    "the idle time arrives: it waits for the CPU"))
    if sync >= SYNC_BOUND_IDLE_SHARE:
        call = m.syncs.calls[0] if m.syncs is not None and m.syncs.calls else None
        out.append((sync, SYNC_BOUND_IDLE_SHARE, "sync-bound",
                    f"the GPU idles {pct(sync)} of the step after the CPU blocked in "
                    f"{call.name if call is not None else 'a sync'}"
                    f"{_queued_text(call, m.syncs.queued_unknown if m.syncs else None)}"))
    return out


def _queued_text(call: SyncCall | None, unknown: str | None) -> str:
    """What the blocking call waited for: the GPU work queued when it began (launch and work
    joined by correlation id), then nothing more until the CPU was released; at least that
    work where some is linked to no launch call (``unknown``: SyncStats.queued_unknown), and
    nothing said of an empty queue then."""
    if call is None or call.queued is None:
        return ""
    low, high = call.queued
    if high == 0:
        return "" if unknown else ", with nothing queued on the GPU when it began"
    count = f"{low:,}" if low == high else f"{low:,}–{high:,}"
    return (f", which waited for {'at least ' if unknown else ''}the {count} GPU operations "
            "queued before it; once they ran the GPU had nothing more until the CPU, released, "
            "launched again")


def _unexplained_idle(m: RunMetrics) -> tuple[Verdict, str] | None:
    """Unknown, when the GPU idles most of the step for no reason the trace shows."""
    idle = m.gpu_idle
    if idle is None or idle.share("unexplained") < UNEXPLAINED_IDLE_SHARE:
        return None
    return "unknown", (f"the GPU idles {pct(idle.share('unexplained'))} of the step, and no "
                       "DataLoader wait, sync or launch in the trace ends that idle time (CPU "
                       "work that launches nothing, e.g. compilation, looks like this)")


def verdict(m: RunMetrics) -> tuple[Verdict, str]:
    """The run's bottleneck in one word, with the numbers behind it: the profilers' verdict,
    supported by the runner's trials when they agree, and taken from the trials when the
    profilers cannot tell (unknown) or see no dominant part (balanced)."""
    name, reason = profiler_verdict(m)
    limit = trial_limit(m.trials)
    if m.trials is None or limit is None:
        return name, reason
    if name in ("unknown", "balanced"):
        return _LIMIT_VERDICT[limit], (f"without a profiler, {trial_sentence(m.trials)} "
                                       f"(the runner's trials); the profilers: {reason}")
    if VERDICT_LIMIT.get(name) == limit:
        return name, f"{reason}; the runner's unprofiled trials agree"
    return name, reason


Candidate = tuple[float, float, Verdict, str]


def _waste_candidates(m: RunMetrics) -> list[Candidate]:
    """Verdicts whose figure (a share of the step lost to one cause) passed its threshold:
    (figure, threshold, verdict, reason)."""
    loader = m.dataloader_fraction or 0.0
    exposed = m.comm.exposed_fraction if m.comm is not None else 0.0
    out: list[Candidate] = []
    if loader >= LOADER_BOUND_FRACTION:
        out.append((loader, LOADER_BOUND_FRACTION, "loader-bound",
                    f"{pct(loader)} of step time waits for data"))
    if exposed >= COMM_BOUND_EXPOSED_FRACTION:
        out.append((exposed, COMM_BOUND_EXPOSED_FRACTION, "communication-bound",
                    f"{pct(exposed)} of step time is communication not hidden by compute"))
    if (copies := transfer_bound_share(m)) is not None:
        out.append((copies, TRANSFER_BOUND_SHARE, "transfer-bound",
                    f"GPU copies and memsets take {pct(copies)} of step time, its compute "
                    f"kernels {pct(compute_share(m) or 0.0)}: moving data sets the pace"))
    return out + _gpu_idle_candidates(m)


def _named(functions: list[str]) -> str:
    """``train_step()``, or the first three of these function names and how many more."""
    return ", ".join(functions[:3]) + (f" and {len(functions) - 3} more"
                                       if len(functions) > 3 else "")


def _functions(listings: list[FunctionListing]) -> str:
    """The functions of these listings as :func:`_named` writes them, each once (two .lprof
    files may each list it)."""
    return _named(list(dict.fromkeys(f"{error_text(f.function)}()" for f in listings)))


#: What would show a function's source, by why the parser did not show it (SourceHidden.kind;
#: ``{reason}`` is its reason).
SHOW_SOURCE: dict[HiddenKind, str] = {
    "absent": "its source is not shown (put the .py file beside the .lprof or pass "
              "--source-root)",
    "edited": "its source was edited since profiling ({reason}): profile it again to see its "
              "lines",
    "outside": "its source lies outside the folders sources are read from ({reason}): pass "
               "--source-root the folder that holds it",
    "refused": "its source may not be shown ({reason})",
    "nameless": "its source is not shown ({reason})",
}


def _show_source(listings: list[FunctionListing]) -> str:
    """Why these functions' sources are not shown and what would show them (SHOW_SOURCE), each
    function named once, with each distinct reason its listings give (two .lprof files may
    hide it apart) joined; the functions named where their reasons differ."""
    reasons: dict[str, list[SourceHidden]] = {}
    for listing in listings:
        found = reasons.setdefault(f"{error_text(listing.function)}()", [])
        if listing.source_hidden is not None and listing.source_hidden not in found:
            found.append(listing.source_hidden)
    by_reasons: dict[tuple[SourceHidden, ...], list[str]] = {}
    for function, found in reasons.items():
        by_reasons.setdefault(tuple(found), []).append(function)
    advice = {found: " and ".join(SHOW_SOURCE[why.kind].format(reason=why.reason)
                                  for why in found) for found in by_reasons}
    if len(advice) == 1:
        return next(iter(advice.values()))
    return "; ".join(f"for {_named(functions)}, {advice[found]}"
                     for found, functions in by_reasons.items())


def _no_loop_reason(listings: list[FunctionListing]) -> str:
    """Why a line profile shows no training loop, and what would show one. A function whose
    first timed line runs more often than the next may open with a loop, which hit counts
    cannot tell (no line before it counts its entries): its source would show it (what would
    show it depends on why it is not shown: _show_source). Else the loop is in a function
    kernprof did not time."""
    found = ("the line profile shows no training loop: none of the lines it timed is a loop "
             "known to fetch the batches")
    hidden = [f for f in listings if len(f.lines) >= 2 and f.lines[0].hits > f.lines[1].hits
              and f.source_hidden]
    if hidden:
        return (f"{found}; {_functions(hidden)} may open with one (its first line runs more "
                "often than the next), which only its source line shows, as no line before it "
                f"counts its entries, and {_show_source(hidden)}")
    return (f"{found} (kernprof timed {_functions(listings)}; decorate the function that holds "
            "the training loop)")


def profiler_verdict(m: RunMetrics) -> tuple[Verdict, str]:
    """The bottleneck the profiles alone show, with the numbers behind it."""
    if m.steps is None and m.gpu is None and m.listings and not m.top_ops:
        return "unknown", _no_loop_reason(m.listings)
    if m.steps is None and m.gpu is None:
        return "unknown", ("no step markers (ProfilerStep, NVTX 'step N', two optimizer steps "
                           "(a step runs from one's end to the next's), an annotated range that "
                           "repeats, a DataLoader loop line) and no GPU activity in the inputs")
    candidates = _waste_candidates(m)
    if candidates:
        _, _, name, reason = max(candidates, key=lambda c: c[0])
        return name, reason
    return _compute_or_balanced(m)


def gpu_saturated_by_compute(m: RunMetrics) -> bool:
    """Whether the GPU is busy COMPUTE_BOUND_BUSY of its window with more than communication
    and copies: exposed communication (collectives running with no compute beside them) and
    exposed copies and memsets (copy_share) holding 1 - COMPUTE_BOUND_BUSY of the step or more
    together leave the compute kernels less than COMPUTE_BOUND_BUSY of it, so a GPU kept busy
    by its collectives or its copies is not saturated by the model's math."""
    if m.gpu is None or m.gpu.busy_fraction < COMPUTE_BOUND_BUSY:
        return False
    exposed = m.comm.exposed_fraction if m.comm is not None else 0.0
    return exposed + (copy_share(m) or 0.0) < 1 - COMPUTE_BOUND_BUSY


def _compute_figure(m: RunMetrics) -> tuple[float, float] | None:
    """The figure behind compute-bound and its threshold: the GPU's busy share, else the compute
    share of the step."""
    if gpu_saturated_by_compute(m):
        return m.gpu.busy_fraction, COMPUTE_BOUND_BUSY
    share = compute_share(m)
    return (share, COMPUTE_BOUND_SHARE) if share is not None else None


def verdict_confidence(m: RunMetrics, name: Verdict) -> tuple[str, float] | None:
    """How clearly the profilers' verdict stands, as a label and the margin behind it: the
    smaller of how far its figure is past its threshold and how far ahead of the next candidate
    it is (shares of the step). None for unknown and balanced, whose reason says why."""
    candidates = _waste_candidates(m)
    chosen = next((c for c in sorted(candidates, reverse=True) if c[2] == name), None)
    if chosen is None and name == "compute-bound" and (figure := _compute_figure(m)):
        chosen = (figure[0], figure[1], name, "")
    if chosen is None:
        return None
    others = [c[0] for c in candidates if c is not chosen and c[2] != name]
    margin = min(chosen[0] - chosen[1], chosen[0] - max(others, default=0.0))
    label = ("high" if margin >= CONFIDENT_MARGIN else
             "medium" if margin >= CLEAR_MARGIN else "low")
    if m.steps is not None and m.steps.count < STEADY_MIN_STEPS:
        label = "low"
    return _capped_by_loop(m, name, label), margin


def _capped_by_loop(m: RunMetrics, name: Verdict, label: str) -> str:
    """A verdict that the DataLoader share line_profiler alone saw decides is no surer than the
    identification of its DataLoader line (hit counts alone give medium or low): loader-bound,
    and compute-bound without a GPU where the header was not seen (a body line may fetch: see
    LoopIdentification.header_unseen)."""
    found = m.loop_identification
    if not decided_by_loop_line(m, name) or found is None \
            or (name == "compute-bound" and not found.header_unseen):
        return label
    order = ("low", "medium", "high")
    return min(label, found.confidence if found.confidence in order else "low", key=order.index)


def decided_by_loop_line(m: RunMetrics, name: Verdict) -> bool:
    """Whether ``name`` rests on the DataLoader share that line_profiler alone measured: the
    share itself (loader-bound), or the rest of the loop counted as compute on a run without a
    GPU (compute-bound): a wrong DataLoader line moves both."""
    if set(m.dataloader_fraction_by_origin) != {"lprof"}:
        return False
    return name == "loader-bound" or (name == "compute-bound" and m.gpu is None)


def loop_evidence(m: RunMetrics) -> list[Evidence]:
    """How line_profiler's DataLoader line was found, when hit counts or a name alone found it
    and its share is among the run's."""
    found = m.loop_identification
    if found is None or found.evidence == "source" \
            or "lprof" not in m.dataloader_fraction_by_origin:
        return []
    return [Evidence(found.reason, "lprof")]


def _between_ranges(m: RunMetrics) -> str:
    """Where the unattributed time lies when most of it is between the annotated step ranges
    (each range covers less than UNATTRIBUTED_SHARE of its step, start to next start): the loop
    spends it outside every range it opened, which a loop annotating its body after ``for x in
    loader:`` spends fetching; "" otherwise."""
    steps = m.steps
    if steps is None or steps.marker == concepts.LOOP_PASS or not steps.wall_mean_ns:
        return ""
    between = 1 - steps.mean_ns / steps.wall_mean_ns
    if between < UNATTRIBUTED_SHARE:
        return ""
    one = " over one interval" if steps.single_interval else ""
    return (f"; the step ranges cover {pct(1 - between)} of the time from one's start to the "
            f"next ({ms(steps.mean_ns)} of {ms(steps.wall_mean_ns)}{one}): {pct(between)} lies "
            "between them, outside every range the loop opened (a loop that opens its ranges "
            "after 'for x in loader:' fetches its batches there)")


def _compute_or_balanced(m: RunMetrics) -> tuple[Verdict, str]:
    """Compute-bound when the GPU (or CPU ops) is saturated, else balanced or unknown."""
    unexplained = _unexplained_idle(m)
    if unexplained is not None:
        return unexplained
    if m.gpu is not None and gpu_saturated_by_compute(m):
        return "compute-bound", f"GPU busy {pct(m.gpu.busy_fraction)} of the {m.gpu.span}"
    share = compute_share(m)
    if share is not None and share >= COMPUTE_BOUND_SHARE:
        return "compute-bound", f"{compute_where(m)} take {pct(share)} of step time"
    if m.steps is None:
        return "unknown", (f"GPU busy {pct(m.gpu.busy_fraction) if m.gpu else '?'} but no step "
                           "markers to attribute the idle time")
    if m.breakdown is None:
        found = m.loop_identification
        why = found.dataloader_unknown if found is not None else None
        return "unknown", ("steps were found but no source could split the step time"
                           + (f": {why}" if why else ""))
    other = m.breakdown.parts_ns["other"] / max(m.breakdown.step_ns, 1)
    if other >= UNATTRIBUTED_SHARE:
        return "unknown", (f"{pct(other)} of the step is time {origin_label(m.breakdown.origin)} "
                           "cannot attribute (no GPU events, CPU operators or source lines)"
                           + _between_ranges(m))
    return "balanced", "no single part of the step dominates"


def _profiler_limit(m: RunMetrics) -> str | None:
    """What the profilers' verdict points at, in the trials' terms ("loader", "compute")."""
    return VERDICT_LIMIT.get(profiler_verdict(m)[0])


@rule("TRIALS", severity=("info",), needs=("manifest", "profiles"))
def trials_disagree(facts: Facts) -> Finding | None:
    """The runner's unprofiled trials point at another limit than the profilers."""
    m = facts.metrics
    limit, profiled = trial_limit(m.trials), _profiler_limit(m)
    if m.trials is None or limit is None or profiled is None or limit == profiled:
        return None
    name, reason = profiler_verdict(m)
    origin: Origin = m.breakdown.origin if m.breakdown is not None else (
        m.steps.origin if m.steps is not None else "manifest")
    who = {"loader": "the DataLoader", "compute": "the model"}
    return Finding("TRIALS", "info",
                   f"The runner's trials point at {who[limit]}, the profilers at "
                   f"{who[profiled]}.",
                   [Evidence(f"without a profiler, {trial_sentence(m.trials)}", "manifest"),
                    Evidence(f"profiled: {name} ({reason})", origin)],
                   "Profilers slow down what they trace (every operator, every Python line), "
                   "so the unprofiled trials are the better guide to throughput; compare the "
                   "step breakdown with a longer profiled run before acting on either.")


@rule("SHARED_CPUS", severity=("medium",), needs=("manifest",))
def shared_cpus(facts: Facts) -> Finding | None:
    """The unprofiled run competed with other processes for the CPUs: its throughput and step
    times are partly theirs."""
    shared = facts.metrics.plain_cpu
    if shared is None or not shared.shared:
        return None
    return Finding(
        "SHARED_CPUS", "medium",
        f"The unprofiled run shared the CPUs with other work: {shared.sharing_text()}.",
        [Evidence(f"in {duration(shared.wall_ns)} on the {shared.cpus} CPUs it may use, the "
                  f"run used {duration(shared.cpu_ns)} of CPU time, other processes "
                  f"{duration(shared.other_cpu_ns)}, and {pct(shared.idle_share)} of their "
                  "CPU time was left idle", "manifest")],
        "Measure again on an idle machine or in an allocation of its own (Slurm: --exclusive, "
        "or --cpus-per-task with the node's other jobs known): throughput and step times taken "
        "now include the time the run waited for the CPUs, and comparisons with it use the "
        "profiled step times instead.")


@rule("PROFILER_SLOWED", severity=("medium",), needs=("manifest", "profiles"))
def profiler_slowed(facts: Facts) -> Finding | None:
    """A profiler made the steps many times longer than the unprofiled run's: its figures
    describe mostly its own work."""
    m = facts.metrics
    if not m.plain_step_ns:
        return None
    plain_ns = sum(m.plain_step_ns) / len(m.plain_step_ns)
    slowed = sorted((s for s in m.steps_by_origin
                     if plain_ns > 0 and s.mean_ns >= PROFILER_SLOWDOWN_LIMIT * plain_ns),
                    key=lambda s: -s.mean_ns)
    if not slowed:
        return None
    names = " and ".join(origin_label(s.origin) for s in slowed)
    times = " to ".join(dict.fromkeys(f"{s.mean_ns / plain_ns:.0f}×"
                                      for s in (slowed[-1], slowed[0])))
    whose = "its figures describe mostly its" if len(slowed) == 1 else \
        "their figures describe mostly their"
    return Finding(
        "PROFILER_SLOWED", "medium",
        f"{names} made the steps {times} longer than without a profiler: {whose} own work.",
        [Evidence(f"mean step {duration(s.mean_ns)} under it", s.origin) for s in slowed]
        + [Evidence(f"mean step {duration(plain_ns)} over {len(m.plain_step_ns)} steps without a "
                    "profiler", "manifest")],
        "Read the shares and the breakdown of that profiler as the profiled run's, not the "
        "training's: trust the unprofiled throughput and the profiler that slowed the step "
        "least. Steps this much shorter than the profiling cost per operator or per line need "
        "more work per step (a larger batch) to be profiled faithfully.")


def find_all(metrics: RunMetrics, ctx: RunContext,
             run_verdict: Verdict | None = None) -> list[Finding]:
    """Every run rule that fires: the one explaining ``run_verdict`` first, then most severe
    first (then by id, for a stable order)."""
    return run_findings(Facts(metrics, ctx), VERDICT_FINDINGS.get(run_verdict or ""))
