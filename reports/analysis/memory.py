"""Memory: per-device levels, steps and largest allocations (the findings they support are in
findings/memory.py).

The input is each profile's ``memory`` table (Kineto ``[memory]`` events, nsys CUDA memory usage
events). A level is the allocator's own total when the format records it (``absolute``), else the
running sum of the signed sizes since the profile's window opened (``relative to window start``:
what was allocated before the window is unknown). Kineto events count the framework allocator's
tensors (allocated); nsys events count the driver's allocations, which for PyTorch are the caching
allocator's segments (reserved).

The per-step figures (each step's levels, allocations per step, growth, the allocations held
step after step, driver calls per step) count the steps every per-step figure counts
(steps.step_windows: start-up and the steps torch.compile compiles again in left out); the
timeline and the step of a large allocation say where things happened, left-out steps too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from profreport import searches
from profreport.manifest import Manifest
from profreport.model import Profile
from profreport.reports.analysis.results import (
    DeviceMemory,
    HeldAllocations,
    LargeAllocation,
    MemoryBasis,
    MemoryPoint,
    MemoryStats,
    MemoryStep,
    Origin,
)
from profreport.reports.analysis.steps import StepWindows, step_label, step_windows

# How many of the largest allocations each device lists.
LARGEST_ALLOCATIONS = 5
# How many groups of held allocations each device lists.
HELD_GROUPS = 3
# A group of allocations is held step after step when made in at least this share of the steps
# it counts (those a recorded training step follows, see _followed_steps): a one-time
# allocation, such as optimizer state, is held in one step.
HELD_STEP_SHARE = 0.5
# Steps drawn in the memory timeline.
TIMELINE_STEPS = 3
# Points kept per device in the timeline (each bucket keeps its lowest and highest level).
TIMELINE_POINTS = 1500
# CUDA runtime calls that take or give back device memory from the driver.
DRIVER_ALLOCATION_APIS = frozenset({"cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync",
                                    "cuMemAlloc", "cuMemFree", "cuMemCreate", "cuMemRelease"})


@dataclass(frozen=True)
class _Levels:
    """One device's events and its allocated and reserved levels (None: unknown), each with the
    level before the first event prepended: ``level[i]`` is the level just before event ``i``."""

    events: pd.DataFrame
    allocated: np.ndarray | None
    reserved: np.ndarray | None
    basis: MemoryBasis

    @property
    def main(self) -> np.ndarray:
        """The level the steps follow: allocated when known, else reserved."""
        level = self.allocated if self.allocated is not None else self.reserved
        assert level is not None
        return level


def _running_sum(sizes: np.ndarray) -> np.ndarray:
    """Levels relative to the window's start: 0, then the running sum of the sizes."""
    return np.concatenate([[0], np.cumsum(sizes)])


def _levels(events: pd.DataFrame) -> _Levels:
    """Allocated and reserved levels of one device's events, absolute when totals exist."""
    sizes = events["bytes"].to_numpy(np.int64)
    if (events["counts"] == "reserved").all():
        return _Levels(events, None, _running_sum(sizes), "relative to window start")
    totals = events["total_allocated"].to_numpy(np.int64)
    if not (totals >= 0).all():
        return _Levels(events, _running_sum(sizes), None, "relative to window start")
    allocated = np.concatenate([[totals[0] - sizes[0]], totals])
    reserved = events["total_reserved"].to_numpy(np.int64)
    if (events["device_kind"] == "cpu").all():
        # c10's CPU allocator counts only what it allocated while memory profiling was on.
        return _Levels(events, allocated, None, "relative to profiling start")
    if not (reserved >= 0).all():
        return _Levels(events, allocated, None, "absolute")
    return _Levels(events, allocated, np.concatenate([[reserved[0]], reserved]), "absolute")


def _peak(level: np.ndarray | None, lo: int = 0, hi: int | None = None) -> int | None:
    """Highest level from just before event ``lo`` to just after event ``hi - 1``."""
    if level is None:
        return None
    return int(level[lo:(len(level) if hi is None else hi + 1)].max())


def _step_stats(levels: _Levels, windows: StepWindows | None) -> list[MemoryStep]:
    """Peak, start/end level and allocations of every step the windows count (their annotated
    ranges); none without steps."""
    if windows is None:
        return []
    times = levels.events["time"].to_numpy(np.int64)
    sizes = levels.events["bytes"].to_numpy(np.int64)
    follows = [True, *windows.follows().tolist()]
    out = []
    for number, start, end, after in zip(windows.numbers.tolist(), windows.range_starts.tolist(),
                                         windows.range_ends.tolist(), follows, strict=True):
        lo, hi = (int(i) for i in searches.searchsorted(times, [start, end]))
        taken = sizes[lo:hi][sizes[lo:hi] > 0]
        out.append(MemoryStep(
            number=number, peak_allocated=_peak(levels.allocated, lo, hi),
            peak_reserved=_peak(levels.reserved, lo, hi), start_level=int(levels.main[lo]),
            end_level=int(levels.main[hi]), allocations=int(taken.size),
            allocated_bytes=int(taken.sum()), events=hi - lo, follows=after))
    return out


def _enclosing_ops(cpu_ops: pd.DataFrame, events: pd.DataFrame) -> list[str | None]:
    """For each event (pid, tid, time), the operators running on its thread at that time: the
    outermost (what the model called) and the innermost (what allocated), ``outer › inner``;
    None when none runs. An operator's nested calls lie inside it on its thread, so the
    outermost is the first (by start) whose end reaches the time and the innermost the last of
    those that start after it and still run."""
    found: list[str | None] = [None] * len(events)
    rows = pd.DataFrame({"pid": events["pid"].to_numpy(), "tid": events["tid"].to_numpy(),
                         "time": events["time"].to_numpy(np.int64),
                         "row": np.arange(len(events))})
    pids, tids = cpu_ops["pid"].to_numpy(), cpu_ops["tid"].to_numpy()
    for (pid, tid), wanted in rows[rows["tid"] >= 0].groupby(["pid", "tid"], sort=False):
        mine = np.flatnonzero((pids == pid) & (tids == tid))
        if not len(mine):
            continue
        starts, ends = (cpu_ops[column].to_numpy(np.int64)[mine] for column in ("start", "end"))
        order = np.lexsort((-ends, starts))  # by start, the longer of two starting together first
        starts, ends = starts[order], ends[order]
        names = cpu_ops["name"].take(mine[order]).to_numpy()
        reach = np.maximum.accumulate(ends)
        times = wanted["time"].to_numpy(np.int64)
        first = searches.searchsorted(reach, times, side="left")
        after = searches.searchsorted(starts, times, side="right")
        for row, time, outer, stop in zip(wanted["row"], times, first, after, strict=True):
            if outer >= stop:
                continue
            inner = outer + int(np.flatnonzero(ends[outer:stop] >= time)[-1])
            found[row] = (str(names[outer]) if inner == outer
                          else f"{names[outer]} › {names[inner]}")
    return found


def _step_of(steps: pd.DataFrame, time: int) -> int | None:
    """The number of the step holding ``time``."""
    holding = steps[(steps["start"] <= time) & (steps["end"] > time)]
    return None if holding.empty else int(holding["number"].iloc[0])


def _largest(events: pd.DataFrame, profile: Profile, origin_ns: int) -> list[LargeAllocation]:
    """The largest single allocations, the operators that made them and the recorded step each
    lies in: every recorded step, those the per-step figures leave out too (a start-up step's
    weights and optimizer state are among the largest), as the step says where it happened."""
    top = events[events["bytes"] > 0].nlargest(LARGEST_ALLOCATIONS, "bytes", keep="first")
    steps = profile.table("steps")
    ops = _enclosing_ops(profile.table("cpu_ops"), top)
    return [LargeAllocation(bytes=int(row.bytes), at_ns=int(row.time) - origin_ns,
                            step=_step_of(steps, int(row.time)), op=op)
            for row, op in zip(top.itertuples(index=False), ops, strict=True)]


def _unreleased(events: pd.DataFrame) -> np.ndarray:
    """Which events are allocations whose address no later event of the device releases (each
    allocation paired with the next event at its address)."""
    addr, size = events["addr"].to_numpy(np.int64), events["bytes"].to_numpy(np.int64)
    order = np.lexsort((np.arange(len(addr)), addr))  # by address, then in time order
    released_next = np.zeros(len(addr), dtype=bool)
    released_next[order[:-1]] = (addr[order[1:]] == addr[order[:-1]]) & (size[order[1:]] < 0)
    return (size > 0) & ~released_next


def _followed_steps(windows: StepWindows) -> int:
    """How many of the windows' steps, from the first, a later recorded training step follows:
    a kept one, or one left out for torch.compile compiling again (the smaller last batch of an
    epoch recompiles), not an evaluation-only step, whose loop is another, nor the closing
    fetch's (closing.closing_fetch), no step. The allocations of
    the last training step recorded that the next iteration would release (its batch, output,
    loss) are never released while the profile records, so it is left out, whole window or not;
    a step before it had that next iteration recorded."""
    training = [start for number, start, _ in windows.left_out
                if number not in windows.evaluating and number != windows.closing]
    last = max([int(windows.range_starts[-1]), *training])
    return int((windows.range_starts < last).sum())


def held_each_step(events: pd.DataFrame, profile: Profile) -> list[HeldAllocations] | None:
    """The allocations made in most of the steps a recorded training step follows
    (:data:`HELD_STEP_SHARE`, :func:`_followed_steps`) and never released while the profile
    records, grouped by the operator that made them and their size, most bytes first, over the
    steps the per-step figures count (steps.step_windows); None when the events record no
    addresses or there are fewer than 2 such steps (one shows no repetition)."""
    windows = step_windows(profile)
    if (events["addr"] < 0).any() or windows is None:
        return None
    followed = _followed_steps(windows)
    if followed < 2:
        return None
    times = events["time"].to_numpy(np.int64)
    index = searches.searchsorted(windows.range_starts, times, side="right") - 1
    inside = (index >= 0) & (times < windows.range_ends[np.maximum(index, 0)])
    counted = np.flatnonzero(_unreleased(events) & inside & (index < followed))
    if not len(counted):
        return []
    held = events.iloc[counted]
    ops = _enclosing_ops(profile.table("cpu_ops"), held)
    groups = pd.DataFrame({"op": pd.Series(ops, dtype=object).fillna(""),
                           "bytes": held["bytes"].to_numpy(np.int64),
                           "step": index[counted]}).groupby(["op", "bytes"], sort=False)
    summary = groups["step"].agg(["size", "nunique"])
    needed = max(2, HELD_STEP_SHARE * followed)
    summary = summary[summary["nunique"] >= needed]
    ranked = summary.assign(total=summary["size"] * summary.index.get_level_values("bytes"))
    ranked = ranked.sort_values("total", ascending=False, kind="stable").head(HELD_GROUPS)
    return [HeldAllocations(op=op or None, bytes=int(size), count=int(count), steps=int(steps))
            for (op, size), count, steps in zip(ranked.index, ranked["size"], ranked["nunique"],
                                                strict=True)]


def _downsample(times: np.ndarray, series: list[np.ndarray | None],
                limit: int) -> np.ndarray:
    """Indices of the events to draw: all when few, else each bucket's lowest and highest."""
    if times.size <= limit:
        return np.arange(times.size)
    level = next(s for s in series if s is not None)
    buckets = np.array_split(np.arange(times.size), limit // 2)
    keep = {int(b[np.argmin(level[b])]) for b in buckets} | {int(b[np.argmax(level[b])])
                                                             for b in buckets}
    return np.array(sorted(keep))


def _timeline(levels: _Levels, steps: pd.DataFrame,
              windows: StepWindows | None) -> tuple[list[MemoryPoint], list[tuple[int, str]]]:
    """The level over the first few recorded steps (the whole window without steps),
    downsampled, with each step's start and name. The steps the per-step figures leave out are
    drawn too, named as such (steps.step_label): the first steps are where the allocators grow,
    a start-up step most of all."""
    times = levels.events["time"].to_numpy(np.int64)
    drawn = steps.sort_values("start").head(TIMELINE_STEPS)
    start = int(drawn["start"].min()) if not drawn.empty else int(times[0])
    end = int(drawn["end"].max()) if not drawn.empty else int(times[-1]) + 1
    lo, hi = searches.searchsorted(times, [start, end])
    picked = lo + _downsample(times[lo:hi], [a[lo + 1:hi + 1] if a is not None else None
                                             for a in (levels.allocated, levels.reserved)],
                              TIMELINE_POINTS)

    def value(level: np.ndarray | None, index: int) -> int | None:
        """The level just after event ``index``, None when unknown."""
        return None if level is None else int(level[index + 1])

    points = [MemoryPoint(at_ns=int(times[i]) - start, allocated=value(levels.allocated, i),
                          reserved=value(levels.reserved, i)) for i in picked]
    marks = [(int(row.start) - start, step_label(int(row.number), windows))
             for row in drawn.itertuples(index=False)]
    return points, marks


def _driver_calls_per_step(levels: _Levels, profile: Profile, device: int) -> float | None:
    """Driver allocations per step over the steps the per-step figures count (steps.step_windows)
    after the first step recorded: reserved-level changes when the events record them, else
    cudaMalloc/cudaFree calls of the process; None without such steps. The first step recorded
    is left out even where the windows keep it: the caching allocator takes its segments from
    the driver the first time each size is asked for, however long that step took, and the
    windows leave out a first step only by its length (shape.find_warmup)."""
    windows = step_windows(profile)
    if windows is None:
        return None
    later = windows.range_starts > int(profile.table("steps")["start"].min())
    if not later.any():
        return None
    if levels.reserved is not None:
        changed = levels.events["time"].to_numpy()[np.flatnonzero(np.diff(levels.reserved))]
    elif device >= 0 and profile.has("runtime"):
        runtime = profile.table("runtime")
        changed = runtime.loc[runtime["name"].isin(DRIVER_ALLOCATION_APIS), "start"].to_numpy()
    else:
        return None
    inside = sum(int(((changed >= s) & (changed < e)).sum())
                 for s, e in zip(windows.range_starts[later], windows.range_ends[later],
                                 strict=True))
    return inside / int(later.sum())


def _device_memory(profile: Profile, events: pd.DataFrame) -> DeviceMemory:
    """Everything about one device's events in one profile."""
    levels = _levels(events.reset_index(drop=True))
    kind, device = str(events["device_kind"].iloc[0]), int(events["device"].iloc[0])
    devices = profile.table("devices")
    row = devices[devices["device"] == device] if kind != "cpu" else devices.iloc[0:0]
    total = int(row["memory_bytes"].iloc[0]) if not row.empty else -1
    steps = profile.table("steps")
    gap = (None if levels.allocated is None or levels.reserved is None
           else int((levels.reserved - levels.allocated).max()))
    windows = step_windows(profile)
    points, marks = _timeline(levels, steps, windows)
    origin: Origin = profile.kind  # type: ignore[assignment]
    return DeviceMemory(
        origin=origin, rank=profile.rank, device_kind=kind, device=device,
        device_name=str(row["name"].iloc[0]) if not row.empty else None,
        total_bytes=total if total > 0 else None, counts=str(events["counts"].iloc[0]),
        basis=levels.basis, events=len(events),
        peak_allocated=_peak(levels.allocated), peak_reserved=_peak(levels.reserved),
        net_bytes=int(levels.main[-1] - levels.main[0]), reserved_gap_bytes=gap,
        steps=(stepped := _step_stats(levels, windows)),
        allocations_per_step=allocations_per_step(stepped),
        largest=_largest(events, profile, int(events["time"].iloc[0])),
        timeline=points, timeline_steps=marks,
        driver_calls_per_step=_driver_calls_per_step(levels, profile, device),
        held=held_each_step(events, profile), process=profile.process,
        file=Path(profile.path).name)


def allocations_per_step(steps: list[MemoryStep]) -> float | None:
    """Allocations per step, over the steps whose memory the recorder saw (a step with no event
    had the recorder off, torch.profiler stopping inside the last step); None without one."""
    seen = [step.allocations for step in steps if step.events]
    return sum(seen) / len(seen) if seen else None


def memory_stats(profiles: list[Profile]) -> MemoryStats | None:
    """Memory of every device of every profile that recorded allocator events."""
    devices = []
    for profile in profiles:
        memory = profile.table("memory")
        for _, events in memory.groupby(["device_kind", "device"], sort=True):
            devices.append(_device_memory(profile, events))
    return MemoryStats(devices=devices) if devices else None


@dataclass(frozen=True)
class TrainingSettings:
    """What the runner knows about the training that sizing advice needs (None: unknown)."""

    batch_size: int | None = None
    learning_rate: float | None = None


def _number(sources: list[object], keys: tuple[str, ...]) -> float | None:
    """The first of ``keys`` found with a number in any of ``sources`` (dicts or objects)."""
    for source in sources:
        for key in keys:
            value = source.get(key) if isinstance(source, dict) else getattr(source, key, None)
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                return float(value)
    return None


def training_settings(manifest: Manifest | None) -> TrainingSettings:
    """Per-process batch size and learning rate from the runner's manifest, when it has them."""
    if manifest is None:
        return TrainingSettings()
    sources: list[object] = [getattr(manifest, "scaling", None) or {}, manifest.knobs, manifest]
    batch = _number(sources, ("local_batch_size", "batch_size"))
    return TrainingSettings(batch_size=int(batch) if batch else None,
                            learning_rate=_number(sources, ("lr", "learning_rate")))
