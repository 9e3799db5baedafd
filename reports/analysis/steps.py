"""Steps: the annotated iterations of one profile and the wall windows they own.

A step's window runs from its start to the next step's start (the last step's window is its own
range), so the time between annotated ranges belongs to a step. The windows are time: they never
overlap (a range that runs past the next step's start is cut there, the next step's from then on),
so whatever is summed over them (the step time, a wait, a busy GPU) counts each stretch of time
once, and their sum is the time of their union. Inside a window, time outside the
annotated range is the training loop fetching the next batch (``for batch in loader:`` runs
``next(loader)`` before the body's range opens) where the profile records no fetch of its own
(StepWindows.fetch_between), and is then counted as DataLoader wait together with explicit
DataLoader spans.

A first step that is start-up (see reports.analysis.shape) is left out of the windows when later
steps follow, so every per-step figure describes steady state; the windows keep it as
``warmup``. So are the later steps in which torch.compile compiles again (a recompile: its compile
spans, concepts.COMPILE_SPANS, in their windows), when some step does not: their windows are
left out, the others keep the ends they had, and the windows keep the steps left out as
``compiling``. So are the steps that only evaluate (``prof.step()`` called in an evaluation loop
too: a fetch and a forward, no backward pass, no optimizer step), when the steps record the
backward pass (see evaluation_only); the windows keep them as ``evaluating``. So is a last step
that holds only the DataLoader fetch that ended its loop (closing.closing_fetch): the windows are
those of the steps before it, as if it were not recorded, and keep it as ``closing``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from profreport import concepts, searches
from profreport.model import Profile
from profreport.parsers.repeats import phases_per_step
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.closing import CLOSING_REASON, closing_fetch
from profreport.reports.analysis.dataloader import training_fetches
from profreport.reports.analysis.kept import classified, classified_rows, per_profile
from profreport.reports.analysis.results import (
    Origin,
    StepShape,
    StepStats,
    Warmup,
)
from profreport.reports.analysis.shape import find_warmup, per_step
from profreport.units import ms

#: Fewer steps than this cannot tell a typical step from one holding one-off work (a first step
#: builds optimizer state, picks its kernels, grows the allocator's pool): confidence low at most,
#: and no spread (p50, p90, min, max) is measured over them.
STEADY_MIN_STEPS = 2


@dataclass(frozen=True, eq=False)
class StepWindows:
    """The steps of one profile: annotated ranges and the wall windows they own (compared and
    hashed by identity: results kept per windows, see kept.per_profile)."""

    origin: Origin
    numbers: np.ndarray
    range_starts: np.ndarray
    range_ends: np.ndarray
    #: Window i runs from the start of step i to the start of the next recorded step (kept or
    #: left out); the last recorded step's to the last end of a recorded range (its own, unless
    #: an earlier one runs past it). They never overlap, and each range above ends inside its
    #: window (cut at the next step's start when it ran past it).
    starts: np.ndarray
    ends: np.ndarray
    #: The first step when it is start-up: left out of the arrays above when later steps
    #: follow (kept, as the only step, when none does).
    warmup: Warmup | None = None
    #: Whether the time between one step's range and the next step's start is the loop fetching
    #: its next batch (ranges opened after the fetch, as NVTX ``step N``); not between
    #: ProfilerStep spans (see concepts.PROFILER_STEP), nor between the ranges of a repeated
    #: range that no name marks as a step (``batch 3`` of an inference loop over a list: nothing
    #: says what runs between them), nor in a torch.profiler trace, which records the
    #: DataLoader iterator's spans on its own, nor in a capture that records its fetches
    #: (records_fetches: the runner's ``dataloader`` ranges, a user's): they say when the loop
    #: fetched, and the rest of the time between ``step N`` ranges is other work (a thread
    #: joined, a log written, validation between epochs).
    fetch_between: bool = True
    #: What each step is (see concepts.step_marker).
    marker: str = concepts.ANNOTATED_RANGE
    #: Whether each step's range ends where the next one's starts (steps cut at the ends of
    #: the optimizer's steps, concepts.OPTIMIZER_STEPS): the ranges are the whole iterations,
    #: the last one too.
    tiled: bool = False
    #: Whether each step's range holds its whole iteration, the fetch included, though the
    #: ranges need not meet: ProfilerStep spans (``prof.step()`` closes one and opens the next,
    #: so the loop's fetch falls inside one), the last one too.
    holds_fetch: bool = False
    #: Whether the steps are occurrences of a repeated span that hold their whole passes, each
    #: from its start to the next one's, the last to its own end (no work is recorded between
    #: them: ProfileMeta.steps_hold_passes), so the last window is as whole as the others.
    spans_hold_passes: bool = False
    #: The steps (after start-up) whose windows hold torch.compile compiling, as (step number,
    #: ns compiling in it): left out of the arrays above when some step does not compile (see
    #: :attr:`compiling_left_out`), kept when every one does.
    compiling: tuple[tuple[int, int], ...] = ()
    #: The annotated ranges of the steps left out of the arrays above (start-up, evaluation
    #: only, torch.compile compiling again, the closing fetch), as (step number, range start,
    #: range end), in time order.
    left_out: tuple[tuple[int, int, int], ...] = ()
    #: The steps that only evaluate (see evaluation_only), by number: left out of the arrays
    #: above; empty when none does (then none is told from training).
    evaluating: tuple[int, ...] = ()
    #: The number of the last step when it holds only the fetch that ended its loop
    #: (closing.closing_fetch): no step, left out of the arrays above; no window reaches it.
    closing: int | None = None

    @property
    def compiling_left_out(self) -> bool:
        """Whether the steps in :attr:`compiling` are left out of the windows (some step does
        not compile), so that the per-step figures hold no compiling."""
        return bool(self.compiling) and not np.isin(
            [number for number, _ in self.compiling], self.numbers).any()

    @property
    def count(self) -> int:
        """Number of steps."""
        return len(self.numbers)

    @property
    def last_followed(self) -> bool:
        """Whether a recorded step the windows leave out follows the last window (an evaluation-
        only or recompiling step after the last kept one): that window then reaches the next
        step's start, fetch included, and is whole. The closing fetch is no step: the windows
        end before it."""
        return any(start > self.range_starts[-1] for number, start, _ in self.left_out
                   if number != self.closing)

    @property
    def last_whole(self) -> bool:
        """Whether the last window is a whole iteration (see last_window_whole): the steps are
        :attr:`tiled`, their ranges hold the fetch (:attr:`holds_fetch`) or their pass
        (:attr:`spans_hold_passes`), or a recorded step follows it (:attr:`last_followed`)."""
        return last_window_whole(self.tiled, self.holds_fetch or self.spans_hold_passes,
                                 self.last_followed)

    @property
    def whole(self) -> int:
        """Number of whole windows: the last one is left out when it is only its own range (no
        fetch after it: no recorded step follows it), unless it is whole
        (:attr:`last_whole`) or that would leave fewer than two."""
        return self.count - 1 if self.count > 2 and not self.last_whole else self.count

    @property
    def fetching(self) -> int:
        """Number of the whole windows that can hold their step's fetch: all but the last when
        it is only its own range, kept whole so that two remain (its fetch, after it, is not
        recorded: its DataLoader wait is unknown, not 0)."""
        return self.whole - 1 if not self.last_whole and self.whole == self.count else self.whole

    def whole_lengths(self) -> np.ndarray:
        """Lengths of the whole windows (see :attr:`whole`), ns."""
        return (self.ends[:self.whole] - self.starts[:self.whole]).astype(np.int64)

    @property
    def total_ns(self) -> int:
        """Sum of the window lengths: the time of their union, as they never overlap."""
        return int((self.ends - self.starts).sum())

    @property
    def first_ns(self) -> int:
        """Start of the first window."""
        return int(self.starts[0])

    @property
    def last_ns(self) -> int:
        """End of the last window."""
        return int(self.ends[-1])

    def ranges(self) -> iv.Intervals:
        """The annotated step ranges as intervals."""
        return iv.union(self.range_starts, self.range_ends)

    def windows(self) -> iv.Intervals:
        """The step windows as intervals."""
        return iv.union(self.starts, self.ends)

    def per_step(self, intervals: iv.Intervals) -> int:
        """Mean ns per step that ``intervals`` cover inside the windows."""
        return self.covered(intervals) // max(self.count, 1)

    def covered(self, intervals: iv.Intervals) -> int:
        """Total ns that ``intervals`` cover inside the windows (measured in the windows that
        reach into their span, see intervals.reaching)."""
        if len(intervals) == 0:
            return 0
        near = iv.reaching(self.starts, self.ends, int(intervals.starts[0]),
                           int(intervals.ends[-1]))
        return int(iv.overlap_per_window(intervals, self.starts[near], self.ends[near]).sum())

    def follows(self) -> np.ndarray:
        """Whether each step after the first follows the one before it (no step left out
        between them: its window reaches the next step's start)."""
        return self.ends[:-1] >= self.range_starts[1:]

    def index_of(self, times: np.ndarray) -> np.ndarray:
        """The window each time lies in (-1 outside every window)."""
        k = searches.searchsorted(self.starts, times, side="right") - 1
        inside = (k >= 0) & (times < self.ends[np.maximum(k, 0)])
        return np.where(inside, k, -1)


def last_window_whole(tiled: bool, holds_pass: bool, followed: bool) -> bool:
    """Whether the last step window is a whole iteration, fetch included: the steps are the
    optimizer's (tiled), their ranges hold their pass (ProfilerStep spans, repeated spans with
    nothing recorded between them), or a recorded step left out follows it; else it is only its
    own range (an NVTX ``step N`` range opened after the fetch, nothing after it)."""
    return tiled or holds_pass or followed


@per_profile
def step_windows(profile: Profile) -> StepWindows | None:
    """The step windows of a profile with a ``steps`` table (one row per step), or None: a
    start-up step, the steps that only evaluate, the steps torch.compile compiles in and the
    closing fetch left out (see the module docstring); kept, so that every question asks with
    the same windows and finds the results kept for them."""
    steps = profile.table("steps").sort_values("start", kind="stable")
    closing = closing_fetch(profile)
    if closing is not None:
        steps = steps.iloc[:-1]
    if steps.empty:
        return None
    starts = steps["start"].to_numpy(np.int64)
    ends = steps["end"].to_numpy(np.int64)
    # Start to next start: a range that runs past the next one's start (another loop's steps
    # are not these, see concepts.stepping_thread; a user's ranges need not nest) gives the time
    # after it to the next step, so that no time is in two windows nor in two steps' ranges.
    wall_ends = np.append(starts[1:], ends.max())
    numbers = steps["number"].to_numpy(np.int64)
    counted = bool(steps["origin"].eq(concepts.PROFILER_STEP).all())
    # Start-up is judged among the training steps: an evaluation step is shorter than any.
    evaluating = evaluation_only(profile, starts, wall_ends)
    keep = ~evaluating
    tiled = bool(steps["origin"].eq(concepts.OPTIMIZER_STEPS).all())
    held = profile.meta.steps_hold_passes
    warmup = find_warmup(profile, numbers[keep], starts[keep], wall_ends[keep],
                         steps_before=int(numbers[0]) if counted else 0,
                         last_whole=last_window_whole(tiled, counted or held,
                                                      bool(keep.any() and not keep[-1])))
    if warmup is not None and warmup.number is not None and not warmup.only:
        keep[np.flatnonzero(keep)[0]] = False
    compiling = np.asarray(iv.overlap_per_window(compile_intervals(profile), starts, wall_ends),
                           np.int64) * keep
    if (keep & (compiling == 0)).any():
        keep &= compiling == 0
    return StepWindows(origin=profile.kind, numbers=numbers[keep], range_starts=starts[keep],
                       range_ends=np.minimum(ends, wall_ends)[keep], starts=starts[keep],
                       ends=wall_ends[keep], warmup=warmup,
                       compiling=tuple((int(numbers[i]), int(compiling[i]))
                                       for i in np.flatnonzero(compiling)),
                       left_out=tuple((int(numbers[i]), int(starts[i]), int(ends[i]))
                                      for i in np.flatnonzero(~keep))
                       + (((closing.number, closing.start, closing.end),) if closing else ()),
                       evaluating=tuple(int(n) for n in numbers[evaluating]),
                       closing=closing.number if closing else None,
                       fetch_between=not profile.meta.records_torch_spans
                       and profile.meta.step_span is None and not records_fetches(profile),
                       marker=concepts.step_marker(str(steps["origin"].iloc[0]),
                                                   profile.meta.step_span),
                       tiled=tiled,
                       holds_fetch=counted, spans_hold_passes=held)


def evaluation_only(profile: Profile, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which of the windows ``starts``..``ends`` only evaluate: no backward pass and no
    optimizer step (concepts.is_training_work) starts in them, while some window records the
    backward pass (concepts.is_backward_op: every training pass runs one, a gradient
    accumulation's too, while the optimizer may step every k passes), so never every window.
    None does where no window records it: an inference loop, or a capture recording no
    operators (an nsys capture's ranges, unless emit_nvtx made autograd's nodes ranges),
    cannot tell evaluating from training."""
    work = {name: (profile.table(name)["start"].to_numpy(np.int64),
                   classified(profile, name, concepts.is_training_work),
                   classified(profile, name, concepts.is_backward_op))
            for name in ("cpu_ops", "ranges") if profile.has(name)}

    def per_window(column: int) -> np.ndarray:
        """How many of the rows that ``column`` of ``work`` selects start in each window."""
        times = np.sort(np.concatenate([[], *(row[0][row[column]] for row in work.values())]))
        return searches.searchsorted(times, ends) - searches.searchsorted(times, starts)

    if not per_window(2).any():
        return np.zeros(len(starts), bool)
    return per_window(1) == 0


def _pct(values: np.ndarray, q: float) -> int:
    """Percentile ``q`` of integer durations, as int ns."""
    return int(np.percentile(values, q))


def phases_text(profile: Profile) -> str:
    """``; inside each: forward 35.0 ms, backward 30.0 ms per step``: the time per step of the
    NVTX ranges directly inside the steps (repeats.phases_per_step), over the steps the
    per-step figures count, so that the phases add up to no more than the mean step; the
    start-up step they leave out is named. "" without steps or ranges inside them."""
    windows = step_windows(profile)
    steps = profile.table("steps")
    if windows is None:
        return ""
    counted = np.isin(steps["start"].to_numpy(np.int64), windows.range_starts)
    per_step = phases_per_step(profile.table("ranges"),
                               steps[counted].sort_values("start", kind="stable"))
    if per_step.empty:
        return ""
    listed = ", ".join(f"{name} {ms(int(value))}" for name, value in per_step.items())
    left = steps["number"].to_numpy(np.int64)[~counted]
    over = (f" of the {windows.count:,} steps the per-step figures count ("
            f"{_left_out_text(left.tolist(), windows)}, left out)" if len(left) else "")
    return f"; inside each{over}: {listed} per step"


def _left_out_text(numbers: list[int], windows: StepWindows) -> str:
    """``step 0, start-up; steps 15, 31, torch.compile compiling again``: the steps
    ``numbers`` (those the windows leave out, in order: start-up first), each group with why."""
    groups: dict[str, list[int]] = {}
    for number in numbers:
        groups.setdefault(_why_left_out(number, windows), []).append(number)
    return "; ".join(f"step{'s' if len(group) > 1 else ''} {', '.join(map(str, group))}, {why}"
                     for why, group in groups.items())


def _why_left_out(number: int, windows: StepWindows) -> str:
    """Why the windows leave out step ``number`` (one they leave out): its holding only the
    fetch that ended the loop, its only evaluating, torch.compile compiling again in it, else
    its being start-up."""
    if number == windows.closing:
        return CLOSING_REASON
    if number in windows.evaluating:
        return "evaluation only"
    return "torch.compile compiling again" if number in dict(windows.compiling) else "start-up"


def step_label(number: int, windows: StepWindows | None) -> str:
    """``step 5``, or for a step the windows leave out ``step 5 (left out: torch.compile
    compiling again)``: how a drawing that shows every recorded step names one."""
    if windows is None or number not in {n for n, _, _ in windows.left_out}:
        return f"step {number}"
    return f"step {number} (left out: {_why_left_out(number, windows)})"


#: Each step windows' StepStats, made once while the windows live: the rank's summary and the
#: run's metrics both ask (a 10 M-kernel export's 26 k steps: 7 MB of per-step tuples each).
_STATS: weakref.WeakKeyDictionary[StepWindows, StepStats] = weakref.WeakKeyDictionary()


def step_stats(windows: StepWindows) -> StepStats:
    """Count and duration of the annotated step ranges (each up to its window's end: see
    StepWindows.starts); wall time is start-to-start (the last step's range too when the
    steps are tiled); every whole window's length. Made once per
    windows (a StepStats is frozen: its askers share it)."""
    stats = _STATS.get(windows)
    if stats is None:
        stats = _STATS[windows] = _measured_steps(windows)
    return stats


def _measured_steps(windows: StepWindows) -> StepStats:
    """The StepStats of ``windows``, measured (see step_stats)."""
    durations = windows.range_ends - windows.range_starts
    # Start to next start, over the steps that follow one another (not across a step left out).
    wall = durations if windows.tiled else np.diff(windows.range_starts)[windows.follows()]
    spread = len(durations) >= STEADY_MIN_STEPS  # one step has no spread to measure
    return StepStats(origin=windows.origin, count=windows.count, mean_ns=int(durations.mean()),
                     p50_ns=_pct(durations, 50) if spread else None,
                     p90_ns=_pct(durations, 90) if spread else None,
                     min_ns=int(durations.min()) if spread else None,
                     max_ns=int(durations.max()) if spread else None,
                     wall_mean_ns=int(wall.mean()) if len(wall) else None,
                     wall_intervals=len(wall),
                     stdev_ns=int(durations.std(ddof=1)) if len(durations) > 1 else None,
                     marker=windows.marker,
                     window_ns=tuple(int(v) for v in windows.whole_lengths()),
                     range_by_number=tuple(zip(windows.numbers.tolist(), durations.tolist(),
                                               strict=True)),
                     recompiling_left_out=tuple(number for number, _ in windows.compiling)
                     if windows.compiling_left_out else (),
                     **_pace(windows, durations))


def _pace(windows: StepWindows, durations: np.ndarray) -> dict[str, object]:
    """StepStats.pace_by_number and pace_marker: the ranges when each holds its whole
    iteration, else the whole windows (start to next start)."""
    if windows.tiled or windows.holds_fetch:
        return {"pace_by_number": tuple(zip(windows.numbers.tolist(), durations.tolist(),
                                            strict=True)), "pace_marker": windows.marker}
    whole = windows.whole
    return {"pace_by_number": tuple(zip(windows.numbers[:whole].tolist(),
                                        windows.whole_lengths().tolist(), strict=True)),
            "pace_marker": f"{windows.marker}, {concepts.START_TO_NEXT_START}"}


def in_windows(frame: pd.DataFrame, windows: StepWindows) -> pd.DataFrame:
    """Rows starting inside the step windows (see starts_in_windows)."""
    return frame[starts_in_windows(frame["start"].to_numpy(), windows)]


def starts_in_windows(starts: np.ndarray, windows: StepWindows) -> np.ndarray:
    """Which of ``starts`` lie inside the step windows (the span from the first to the last,
    less the windows of the steps left out between them: see StepWindows.compiling and
    StepWindows.evaluating)."""
    inside = (starts >= windows.first_ns) & (starts < windows.last_ns)
    if windows.compiling_left_out or windows.evaluating:
        inside &= windows.index_of(np.asarray(starts, np.int64)) >= 0
    return inside


def where_in_steps(starts: np.ndarray, ends: np.ndarray,
                   windows: StepWindows | None) -> list[str]:
    """Where each stretch of time (``starts`` to ``ends``) lies relative to the step ranges:
    "inside step N", one that begins inside step N and runs past its end "from step N into
    step M" (M the step it ends in) or "from step N past its end", inside a step the windows
    leave out "inside step N (left out: start-up)" or "(left out: torch.compile compiling
    again)", "between steps" or "outside steps" (by where it begins)."""
    if windows is None:
        return ["outside steps"] * len(starts)
    k = searches.searchsorted(windows.range_starts, starts, side="right") - 1
    inside = (k >= 0) & (starts < windows.range_ends[np.maximum(k, 0)])
    spanned = (starts >= windows.range_starts[0]) & (starts < windows.range_ends[-1])
    # The step each stretch ends in: the last to begin before its end, holding that end.
    last = searches.searchsorted(windows.range_starts, ends, side="left") - 1
    ends_in = np.where((last >= 0) & (ends <= windows.range_ends[np.maximum(last, 0)]), last, -1)
    where = [(f"inside step {windows.numbers[i]}" if end_step == i else
              f"from step {windows.numbers[i]} into step {windows.numbers[end_step]}"
              if end_step >= 0 else f"from step {windows.numbers[i]} past its end") if inn else
             ("between steps" if sp else "outside steps")
             for i, end_step, inn, sp in zip(k, ends_in, inside, spanned, strict=True)]
    for number, start, end in windows.left_out:
        for i in np.flatnonzero((starts >= start) & (starts < end)).tolist():
            where[i] = f"inside {step_label(number, windows)}"
    return where


def dataloader_intervals(profile: Profile, windows: StepWindows) -> iv.Intervals:
    """DataLoader spans of the fetches that fed training (dataloader.training_fetches) plus the
    time inside step windows outside the annotated step ranges (when that is the loop's fetch,
    see StepWindows.fetch_between)."""
    spans = iv.union_of([training_fetches(profile).fetches])
    if not windows.fetch_between:
        return spans
    return iv.merge(spans, iv.subtract(windows.windows(), windows.ranges()))


def compile_intervals(profile: Profile) -> iv.Intervals:
    """When torch.compile compiles (its compile spans among the CPU ops: see
    concepts.COMPILE_SPANS)."""
    if not profile.has("cpu_ops"):
        return iv.union_of([])
    ops = profile.table("cpu_ops")
    return iv.union_of([ops[classified(profile, "cpu_ops", concepts.is_compile_span)]])


def step_shape(profile: Profile, windows: StepWindows,
               gpu_busy: Callable[[iv.Intervals], iv.Intervals] | None = None) -> StepShape:
    """Start-up and the spread of the step window and the DataLoader wait over the whole
    windows (StepWindows.whole: the last left out when it is only its own range, with no fetch
    after it; for the DataLoader wait, StepWindows.fetching: so too when it was kept so that two
    remain), no spread over fewer than STEADY_MIN_STEPS of them; with ``gpu_busy`` (the parts
    of given spans when a GPU is busy), how busy the GPUs are during the DataLoader stalls."""
    whole = windows.whole
    spread = whole >= STEADY_MIN_STEPS
    numbers, starts, ends = (windows.numbers[:whole], windows.starts[:whole],
                             windows.ends[:whole])
    lengths = windows.whole_lengths()
    median = int(np.median(lengths))
    loader = dataloader_intervals(profile, windows)
    fetching = windows.fetching
    waits = iv.overlap_per_window(loader, starts[:fetching], ends[:fetching])
    busy = None if gpu_busy is None else \
        iv.overlap_per_window(gpu_busy(loader), starts[:fetching], ends[:fetching])
    return StepShape(origin=windows.origin, warmup=windows.warmup,
                     compiling=windows.compiling,
                     compiling_left_out=windows.compiling_left_out,
                     evaluating=windows.evaluating,
                     step_window=per_step(lengths, numbers, starts, ends, median)
                     if spread else None,
                     dataloader_wait=per_step(np.asarray(waits, np.int64), numbers[:fetching],
                                              starts[:fetching], ends[:fetching], median, busy)
                     if fetching >= STEADY_MIN_STEPS and waits.any() else None)


def records_fetches(profile: Profile) -> bool:
    """Whether the profile records the loop's fetches as ranges of their own: DataLoader spans
    (its ``dataloader`` table, whichever loop's), or the ranges profreport's runner opens around
    the fetches that fed no training (concepts.is_other_fetch_range)."""
    return not profile.table("dataloader").empty or (
        profile.has("ranges")
        and classified_rows(profile, "ranges", concepts.is_other_fetch_range).size > 0)


def loader_known(profile: Profile, windows: StepWindows) -> bool:
    """Whether the profile records the DataLoader wait: torch.profiler records the DataLoader
    iterator's spans on its own (ProfileMeta.records_torch_spans; none: no wait), an nsys
    capture only the ranges the program opened: its fetch ranges (records_fetches; none that
    fed training: no wait), or else the fetch between NVTX step ranges (see
    StepWindows.fetch_between)."""
    return (profile.meta.records_torch_spans or windows.fetch_between
            or records_fetches(profile))


def dataloader_fraction(profile: Profile, windows: StepWindows) -> float | None:
    """Share of step-window time spent waiting for the next batch; None when the profile does
    not record the wait (see loader_known)."""
    if not loader_known(profile, windows):
        return None
    return windows.covered(dataloader_intervals(profile, windows)) / max(windows.total_ns, 1)
