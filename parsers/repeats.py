"""Iterations found in recorded spans when no span is named as a step: the top-level span that
repeats most on the busiest thread. Kineto groups operators by name; nsys groups NVTX ranges by
their name with the numbers masked (``epoch 0 batch 17`` and ``epoch 0 batch 18`` are one range),
because a loop annotates each pass with its counter."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from profreport import concepts
from profreport.model import conform, ids_at

# A step found by repetition must repeat at least this often: two occurrences are not a loop.
MIN_STEP_REPEATS = 3
# The steps are looked for this many levels deep at most: a loop's passes lie inside a run's
# range and an epoch's at most (``train`` > ``epoch`` > ``step``), and each level costs a sort.
STEP_NESTING_LEVELS = 3
# A run of digits in a range name: the loop counter that differs between its passes.
_NUMBER = re.compile(r"\d+")
# A counter of more digits than this is no step number that fits int64 (10^18 steps).
COUNTER_DIGITS = 18


def on_busiest_thread(spans: pd.DataFrame) -> pd.DataFrame:
    """The spans of the thread whose spans cover the most time, sorted by start."""
    busiest = (spans["end"] - spans["start"]).groupby([spans["pid"], spans["tid"]]).sum().idxmax()
    mine = spans[(spans["pid"] == busiest[0]) & (spans["tid"] == busiest[1])]
    return mine.sort_values("start", kind="stable")


def top_level(spans: pd.DataFrame) -> pd.DataFrame:
    """The spans of one thread that no other span of it encloses."""
    ordered = spans.assign(length=spans["end"] - spans["start"]).sort_values(
        ["start", "length"], ascending=[True, False], kind="stable")
    reach = np.maximum.accumulate(ordered["end"].to_numpy())
    enclosed = np.r_[False, ordered["end"].to_numpy()[1:] <= reach[:-1]]
    return ordered[~enclosed]


def masked_numbers(names: pd.Series) -> pd.Series:
    """Each name with its numbers written ``#`` (``epoch 0 batch 17`` -> ``epoch # batch #``)."""
    return names.astype(str).str.replace(_NUMBER, "#", regex=True)


def steps_from_repeats(spans: pd.DataFrame, origin: str,
                       key: Callable[[pd.Series], pd.Series] | None = None,
                       never: str | None = None) -> tuple[pd.DataFrame, str | None]:
    """Iterations from the top-level span that repeats most (by time) on the busiest thread,
    spans grouped by ``key(name)`` (the name itself by default). A group whose every
    occurrence has a name of its own (``iteration 3``, ``iteration 4``: the loop writes its
    counter into it) comes first: it marks the passes of the loop, where a repeated name
    without a counter (``load batch``, ``forward``) may be any part of a pass. Each step is one
    occurrence's own extent (an annotated range encloses its step, as ``step N`` ranges do; a
    caller that takes a step from one start to the next asks what lies past them: see
    pass_ends). Spans true in the boolean column ``never``, and spans whose name the profiler
    did not record (concepts.is_unrecorded_name: no evidence of what they were, so of no pass
    of a loop), are no step, though they still enclose others and count in the busiest
    thread's time. Returns the ``steps`` table and the group's name (None when nothing
    repeats)."""
    if spans.empty:
        return conform("steps", spans.assign(number=0, origin="")), None
    top, counts = _first_repeating_level(on_busiest_thread(spans).reset_index(drop=True), key,
                                         never)
    repeated = counts[counts["size"] >= MIN_STEP_REPEATS]
    if repeated.empty:
        return conform("steps", spans.iloc[:0].assign(number=0, origin="")), None
    counted = repeated[repeated["names"] == repeated["size"]]
    name = str((counted if not counted.empty else repeated)["sum"].idxmax())
    chosen = top[top["group"] == name]
    frame = pd.DataFrame({"number": step_counters(chosen["name"]),
                          "start": chosen["start"].to_numpy(), "end": chosen["end"].to_numpy(),
                          "pid": chosen["pid"].to_numpy(),
                          "tid": chosen["tid"].to_numpy(), "origin": origin})
    return conform("steps", frame), name


def unrecorded_names_reason(spans: pd.DataFrame, what: str) -> str | None:
    """Why the ``spans`` of no recorded name (``what``: "spans", "ranges") are no steps, for
    the note saying the steps are unknown: None where too few are there to repeat as steps."""
    count = int(concepts.is_unrecorded_name(spans["name"]).sum())
    if count < MIN_STEP_REPEATS:
        return None
    return (f"the {count:,} {what} whose name the profiler did not record are no evidence of a "
            "pass of the training loop")


@dataclass(frozen=True)
class PassEnds:
    """What the process of a repeated span's occurrences records past them: the names (numbers
    masked) of the CPU work starting in each gap, from one occurrence's end to the next one's
    start, and at or after the last one's end."""

    between: tuple[frozenset[str], ...]
    after: frozenset[str]

    @property
    def holds_pass(self) -> bool:
        """Whether each occurrence holds its whole pass: no work starts between two of them
        (what the loop does, it does inside the span), so the last one's own extent is its
        whole step, whatever follows it."""
        return not any(self.between)

    @property
    def common(self) -> frozenset[str]:
        """The work every pass records after its occurrence (its pass going on: the rest of
        the iteration, the next fetch), by name; empty when some gap holds none of it."""
        return frozenset.intersection(*self.between) if self.between else frozenset()

    @property
    def last_goes_on(self) -> bool:
        """Whether the last occurrence's pass goes on past it, so that its end is unrecorded:
        work is recorded after it, the occurrences do not hold their passes, and that work is
        some of what every earlier pass recorded after its occurrence, or anything where no
        work is common to every gap (nothing then tells the pass from other work). Work none
        of the passes went on with (the profiler's teardown, an evaluation after training) is
        other work: the last pass ended at its occurrence's end."""
        if not self.after or self.holds_pass:
            return False
        return not self.common or bool(self.common & self.after)


def pass_ends(occurrences: pd.DataFrame, work: Iterable[pd.DataFrame]) -> PassEnds:
    """The PassEnds of ``occurrences`` (a steps_from_repeats table: one thread's occurrences,
    by start, each its own extent): the rows of ``work`` (start, pid, name: operators, ranges,
    runtime calls, Python functions..., on any thread of the process) that start in each gap
    or after the last. Device work is not looked at: launched inside an occurrence, it is the
    occurrence's own even when it runs on after it."""
    starts, ends = occurrences["start"].to_numpy(np.int64), occurrences["end"].to_numpy(np.int64)
    pid = occurrences["pid"].iloc[0]
    found = []
    for frame in work:
        times = frame["start"].to_numpy()
        rows = np.flatnonzero(times >= ends[0])
        rows = rows[ids_at(frame["pid"], rows) == pid]
        gap = np.searchsorted(starts, times[rows], side="right") - 1
        past = times[rows] >= ends[gap]
        # Each name once a gap before it is text (a categorical's rows compared by code).
        names = frame["name"].iloc[rows[past]].reset_index(drop=True)
        found.append(pd.DataFrame({"gap": gap[past], "name": names}).drop_duplicates()
                     .astype({"name": object}))
    pairs = pd.concat(found, ignore_index=True).drop_duplicates() if found else None
    named: dict[int, frozenset[str]] = {} if pairs is None or pairs.empty else {
        int(gap): frozenset(names)
        for gap, names in masked_numbers(pairs["name"]).groupby(pairs["gap"].to_numpy())}
    return PassEnds(between=tuple(named.get(gap, frozenset()) for gap in range(len(starts) - 1)),
                    after=named.get(len(starts) - 1, frozenset()))


def step_counters(names: pd.Series) -> np.ndarray:
    """The number of each step: the counter its name carries (``batch 0``, ``batch 1``), as the
    report then names the step the trace shows, when every name carries one number and they
    increase; else 1, 2, ... in time order (``epoch 0 batch 3`` counts the batches of an epoch,
    ``forward`` none)."""
    found = names.astype(str).str.findall(_NUMBER)
    one = found.map(len).eq(1).all() and found.str[0].str.len().le(COUNTER_DIGITS).all()
    if len(found) and one:
        counters = found.str[0].astype(np.int64).to_numpy()
        if (np.diff(counters) > 0).all():
            return counters
    return np.arange(1, len(names) + 1)


def _first_repeating_level(thread: pd.DataFrame, key: Callable[[pd.Series], pd.Series] | None,
                           never: str | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The outermost level of nesting of one thread's spans where a span repeats (the spans
    that no other encloses, else those only such spans enclose, and so on down to
    STEP_NESTING_LEVELS: ``step`` ranges inside two ``epoch`` ranges), grouped by
    ``key(name)``: its spans and each group's count, total length and distinct names; the last
    level looked at when none repeats. Spans of ``never`` or of no recorded name are none of
    its groups; a level of ``never`` spans alone (operators) is not looked into."""
    for _ in range(STEP_NESTING_LEVELS):
        level = top_level(thread)
        excluded = concepts.is_unrecorded_name(level["name"])
        if never is not None:
            excluded = excluded | level[never].to_numpy(bool)
        top = level[~excluded]
        top = top.assign(group=top["name"] if key is None else key(top["name"]))
        counts = top.groupby("group").agg(size=("length", "size"), sum=("length", "sum"),
                                          names=("name", "nunique"))
        thread = thread.drop(index=level.index)
        if (counts["size"] >= MIN_STEP_REPEATS).any() or thread.empty or (
                never is not None and thread[never].to_numpy(bool).all()):
            break
    return top, counts


def phases_per_step(spans: pd.DataFrame, steps: pd.DataFrame) -> pd.Series:
    """Time per step (ns, over the ``steps`` given) of the spans that lie directly inside those
    steps on their thread, by name with numbers masked, most time first (a span inside another
    of them is part of its time); empty when none do."""
    if steps.empty:
        return pd.Series(dtype=np.int64)
    mine = spans[(spans["pid"] == steps["pid"].iloc[0]) & (spans["tid"] == steps["tid"].iloc[0])]
    order = np.searchsorted(steps["start"].to_numpy(), mine["start"].to_numpy(), side="right") - 1
    inside = (order >= 0) & (mine["end"].to_numpy()
                             <= steps["end"].to_numpy()[np.clip(order, 0, None)])
    inside &= ~mine["start"].isin(steps["start"]).to_numpy()
    if not inside.any():
        return pd.Series(dtype=np.int64)
    phases = top_level(mine[inside])
    total = (phases["end"] - phases["start"]).groupby(masked_numbers(phases["name"])).sum()
    return (total // len(steps)).astype(np.int64).sort_values(ascending=False, kind="stable")
