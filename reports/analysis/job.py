"""The ranks of one job analysed together: each rank's own verdict, the job's verdict, the slowest
rank (straggler) and why rank verdicts differ.

In data-parallel training every rank waits in each collective until the slowest rank joins it, so
the job runs at the pace of its slowest rank and the job's verdict is that rank's. The faster ranks
spend the difference waiting inside the collectives: their communication looks exposed although
the cause is the straggler's own bottleneck. Communication is a property of the job: when any rank
records collectives, a rank verdict is never read as "no communication" (the disagreement says
which ranks recorded none).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from profreport.reports.analysis.results import JobAnalysis, Origin, RankVerdict
from profreport.units import duration, ms, pct

#: The slowest rank is called a straggler when its mean step is 10% longer than the other ranks'
#: mean: below that, ranks of one job differ by the ordinary step-to-step wobble.
STRAGGLER_LAG = 0.10
#: Ranks whose mean steps differ by less than this are tied: the sentence gives the lag to 0.1%,
#: and a slowest rank 'lagging by +0.0%' behind another is no slowest.
TIED_LAG = 0.0005
#: A rank that keeps pace is the one the others wait for only when its exposed communication is
#: this share of the step below every other rank's: ranks within it wait alike inside the
#: collectives (one collective's timing moves the share by a few percent from rank to rank).
PACE_EXPOSED_MARGIN = 0.05
#: A rank's exposed communication is 'mostly' waiting for the rank the job waits for when more
#: than this share of it lies beyond that rank's own exposed communication per step.
MOSTLY_WAITING_SHARE = 0.5


def mostly_waiting(exposed: float, pacer_exposed: float) -> bool:
    """Whether a rank's exposed communication (``exposed``, per step) is mostly waiting for the
    rank the job waits for: more than MOSTLY_WAITING_SHARE of it lies beyond that rank's own
    (``pacer_exposed``, in the same unit)."""
    return exposed > 0 and (exposed - pacer_exposed) / exposed > MOSTLY_WAITING_SHARE


Key = TypeVar("Key", bound=Hashable)


def common_step_means(ranges: Mapping[Key, tuple[tuple[int, int], ...]]) -> dict[Key, int]:
    """Each member's mean step (ns) over the step numbers every member counts
    (StepStats.range_by_number): a synchronous job's ranks run the same steps, but each
    profile leaves out its own start-up step (shape.find_warmup), so one rank's mean may hold a
    first step another's leaves out. Empty when a member records no step numbers, when all
    count the same steps, or when they share none (each one's own mean stands then)."""
    counted = [dict(steps) for steps in ranges.values()]
    if len(counted) < 2 or not all(counted):
        return {}
    shared = set.intersection(*(set(steps) for steps in counted))
    if not shared or all(len(steps) == len(shared) for steps in counted):
        return {}
    return {key: int(sum(steps[n] for n in shared) / len(shared))
            for key, steps in zip(ranges, counted, strict=True)}


def _steps_text(numbers: Sequence[int]) -> str:
    """``step 0``, ``steps 1 to 4`` (consecutive numbers), ``steps 1, 3, 4``."""
    if len(numbers) == 1:
        return f"step {numbers[0]}"
    if numbers[-1] - numbers[0] == len(numbers) - 1:
        return f"steps {numbers[0]} to {numbers[-1]}"
    return "steps " + ", ".join(map(str, numbers))


#: One member of a job for a steps note: its label, the steps it counts as (number, ns), and
#: its own mean over them, ns.
Counted = tuple[str, tuple[tuple[int, int], ...], int]


def steps_note(members: Sequence[Counted]) -> str | None:
    """Why a member's mean step compared over the steps every member counts
    (common_step_means) may differ from its own figures: each profile judged its own
    start-up, recompiling and evaluation-only steps, while the member's own figures (its Why,
    the key metrics of the rank the details come from) count its own steps. None when every
    member counts the same steps, or they share none."""
    if not common_step_means({label: ranges for label, ranges, _ in members}):
        return None
    counted = {label: sorted(dict(ranges)) for label, ranges, _ in members}
    shared = sorted(set.intersection(*(set(numbers) for numbers in counted.values())))
    more = [f"{label}'s counts {_steps_text(sorted(set(counted[label]) - set(shared)))} "
            f"too: {ms(own)} per step over its own {len(counted[label])} steps"
            for label, _, own in members if len(counted[label]) > len(shared)]
    return (f"The mean steps count {_steps_text(shared)}, those every rank's profile counts "
            "(each profile judges its own start-up, recompiling and evaluation-only steps): "
            f"{'; '.join(more)}. A rank's own figures (its Why, and the key metrics of the rank "
            "the details come from) count its own steps.")


def common_steps_note(ranks: Sequence[RankVerdict]) -> str | None:
    """The per-rank table's steps_note: ``ranks`` with their own means (RankVerdict.step_ns)."""
    return steps_note([(r.label, r.step_ranges, r.step_ns) for r in ranks
                       if r.step_ns is not None])


def _on_common_steps(ranks: Sequence[RankVerdict]) -> list[RankVerdict]:
    """The ranks with each timed rank's step time over the steps every timed rank counts
    (common_step_means)."""
    means = common_step_means({r.order: r.step_ranges for r in ranks if r.step_ns is not None})
    return [replace(r, step_ns=means[r.order]) if r.order in means else r for r in ranks]


def _slowest(ranks: Sequence[RankVerdict]) -> tuple[list[RankVerdict], int] | None:
    """The ranks with the longest mean step, those within TIED_LAG of it tying (the longest
    first, then in order), and the other ranks' mean step, ns (of all but the first when every
    rank ties); None when fewer than two ranks time steps."""
    timed = [r for r in ranks if r.step_ns is not None]
    if len(timed) < 2:
        return None
    timed.sort(key=lambda r: (-r.step_ns, r.order))  # type: ignore[operator]
    longest = timed[0].step_ns
    tying = max(1, sum(1 for r in timed if longest < r.step_ns * (1 + TIED_LAG)))  # type: ignore[operator]
    others = [r.step_ns for r in timed[tying:] or timed[1:]]
    return timed[:tying], round(sum(others) / len(others))  # type: ignore[arg-type]


def _comm_note(ranks: Sequence[RankVerdict]) -> str | None:
    """The sentence saying some ranks recorded collectives and others none, or None."""
    with_comm = [r for r in ranks if r.comm_fraction]
    without = [r for r in ranks if not r.comm_fraction]
    if not with_comm or not without:
        return None
    return (f"{_named(without)} recorded no collectives although {_named(with_comm)} did: the "
            "job communicates, so its trace is incomplete there rather than the rank free of "
            "communication")


def _named(ranks: Sequence[RankVerdict]) -> str:
    """``rank 1, 2`` for ranks, ``pid 41, pid 42`` where a rank is unknown."""
    if all(r.rank is not None for r in ranks):
        return "rank " + ", ".join(str(r.rank) for r in ranks)
    return ", ".join(r.label for r in ranks)


def pace_setter(ranks: Sequence[RankVerdict], slowest: RankVerdict,
                straggler: bool) -> RankVerdict:
    """The rank the job waits for: the straggler when one lags; else, among ranks that keep
    pace (a synchronous job's steps take the same time on every rank), the one that waits least
    inside the collectives, since the others' exposed communication is time spent waiting for
    it. The slowest rank when the ranks record no communication."""
    timed = [r for r in ranks if r.comm_exposed_fraction is not None]
    if straggler or len(timed) < 2 or _wait_alike(timed):
        return slowest
    return min(timed, key=lambda r: (r.comm_exposed_fraction, r.order))


def _wait_alike(timed: Sequence[RankVerdict]) -> str | None:
    """Who waits alike when the least exposed communication of the ranks lies within
    PACE_EXPOSED_MARGIN of the step of the next (no rank is waited for): 'they wait alike
    (61% to 67% ...' when every rank does, 'the 2 ranks that wait least wait alike (10% to
    12% ...' when others wait longer; else None."""
    shares = sorted(r.comm_exposed_fraction or 0.0 for r in timed)
    if len(shares) < 2 or shares[1] - shares[0] >= PACE_EXPOSED_MARGIN:
        return None
    alike = [share for share in shares if share - shares[0] < PACE_EXPOSED_MARGIN]
    low, high = pct(alike[0]), pct(alike[-1])
    who = ("they wait alike" if len(alike) == len(shares)
           else f"the {len(alike)} ranks that wait least wait alike")
    return f"{who} inside the collectives ({low if low == high else f'{low} to {high}'}"


def disagreement(ranks: Sequence[RankVerdict], pacer: RankVerdict | None) -> str | None:
    """Why the rank verdicts differ, or None when they agree."""
    if len({r.verdict for r in ranks}) < 2:
        return None
    said = "; ".join(f"{r.label} {r.verdict}" for r in ranks)
    reasons = []
    waiting = [r for r in ranks if r.verdict == "communication-bound" and pacer is not None
               and r is not pacer and pacer.verdict != "communication-bound"]
    if waiting and pacer is not None:
        exposed = ", ".join(f"{r.label} {pct(r.comm_exposed_fraction or 0)} of its step"
                            for r in waiting)
        reasons.append(f"the other ranks wait inside the collectives for {pacer.label} "
                       f"(exposed communication: {exposed}, {pacer.label} "
                       f"{pct(pacer.comm_exposed_fraction or 0)}), so their communication is "
                       f"{pacer.label}'s {pacer.verdict} time seen from outside")
    note = _comm_note(ranks)
    if note is not None:
        reasons.append(note)
    if not reasons:
        reasons.append("each rank's profile shows a different largest part of its step")
    return f"Ranks disagree ({said}): {'; '.join(reasons)}."


def not_together(ranks: Sequence[RankVerdict]) -> str | None:
    """Why the ranks' step times cannot be compared, or None: two ranks whose steps, on the
    clock their traces share, never ran at the same time (every pair overlaps exactly when the
    latest first step starts before the earliest last step ends) are other steps of the job,
    or of another run, and neither waited for the other in them."""
    timed = [r for r in ranks if r.steps_clock is not None]
    if len(timed) < 2 or len({r.steps_clock[0] for r in timed}) > 1:  # type: ignore[index]
        return None
    ended = min(timed, key=lambda r: (r.steps_clock[2], r.order))  # type: ignore[index]
    started = max(timed, key=lambda r: (r.steps_clock[1], r.order))  # type: ignore[index]
    gap = started.steps_clock[1] - ended.steps_clock[2]  # type: ignore[index]
    if gap < 0:
        return None
    return (f"the ranks' traces were not recorded together: {started.label}'s steps start "
            f"{duration(gap)} after {ended.label}'s end (other steps of the job, or another "
            "run), so which rank the job waits for is unknown; each rank's own verdict is in "
            "the table")


def job_analysis(ranks: Sequence[RankVerdict], steps_origin: Origin | None = None,
                 steps_unknown: str | None = None) -> JobAnalysis | None:
    """The job's verdict from its ranks' own verdicts: the slowest rank's (the job runs at its
    pace), or the common verdict when no rank times steps (``steps_unknown`` says why when no
    profiler timed every rank's, see ranks.job_step_source); None for fewer than two ranks.
    ``steps_origin`` is the profiler that timed the ranks' steps."""
    ranks = sorted(ranks, key=lambda r: r.order)
    if len(ranks) < 2:
        return None
    steps_note = common_steps_note(ranks)
    ranks = _on_common_steps(ranks)
    found = _slowest(ranks)
    if found is None:
        lead = ranks[0]
        unknown = f"the ranks' step times are unknown: {steps_unknown}; " if steps_unknown else ""
        return JobAnalysis(ranks, lead.verdict, f"{unknown}{lead.label}: {lead.verdict_reason}",
                           disagreement=disagreement(ranks, None),
                           steps_unknown_reason=steps_unknown)
    apart = not_together(ranks)
    if apart is not None:
        return JobAnalysis(ranks, "unknown", apart, disagreement=disagreement(ranks, None),
                           steps_origin=steps_origin, common_steps_note=steps_note)
    tying, others = found
    slowest = tying[0]
    lag = slowest.step_ns / others - 1 if others else 0.0  # type: ignore[operator]
    step = ms(slowest.step_ns)  # type: ignore[arg-type]
    if lag < TIED_LAG:
        pace = f"every rank takes {step} per step"
    elif len(tying) > 1:
        pace = (f"{_named(tying)}, the slowest alike, take {step} per step against "
                f"{ms(others)} for the other ranks ({lag:+.1%})")
    else:
        pace = (f"{slowest.label}, the slowest, takes {step} per step against {ms(others)} "
                f"for the other ranks ({lag:+.1%})")
    straggler = lag > STRAGGLER_LAG
    pacer = pace_setter(ranks, slowest, straggler)
    # Ranks that tie as the slowest have no slowest: the first of them is named neither slowest
    # nor, when they set the pace, the one the others wait for.
    tied = len(tying) > 1
    if straggler:
        lead = f"{pace} and the job runs at {'their' if tied else 'its'} pace"
    elif pacer is slowest:
        lead = f"the ranks keep pace within {STRAGGLER_LAG:.0%}: {pace}"
        alike = _wait_alike([r for r in ranks if r.comm_exposed_fraction is not None])
        if alike is not None:
            lead += f"; {alike} of each step exposed), so none is the one the others wait for"
    else:
        lead = (f"the ranks keep pace within {STRAGGLER_LAG:.0%} ({pace}); {pacer.label} "
                "waits least inside the collectives "
                f"({pct(pacer.comm_exposed_fraction or 0)} of its step exposed), so the others "
                "wait for it")
    return JobAnalysis(ranks, pacer.verdict, f"{lead}: {pacer.verdict_reason}",
                       slowest_rank=None if tied else slowest.rank,
                       slowest_step_ns=slowest.step_ns, others_step_ns=others,
                       slowest=None if tied else slowest.label,
                       pacer=None if tied and pacer is slowest else pacer.label,
                       straggler=straggler, disagreement=disagreement(ranks, pacer),
                       paced_by=pacer.rank, steps_origin=steps_origin,
                       common_steps_note=steps_note)
