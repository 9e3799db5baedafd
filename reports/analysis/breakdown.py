"""The step breakdown: each part of a step claims the time no earlier part claimed.

The parts claim in their builder's order (gpu.gpu_parts, :func:`cpu_parts`), so they add up to
the mean step window; ``BREAKDOWN_PARTS`` is the order they are shown in. The time
the communication part claims is *the* exposed communication of the run: ``CommStats`` reads the
same claimed time (:func:`claim`), so the breakdown and the communication figures never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from profreport import concepts
from profreport.model import Profile
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.cpu import (
    framework_ops,
    framework_time,
    off_collectives,
    spans_where,
)
from profreport.reports.analysis.results import (
    BREAKDOWN_PARTS,
    Breakdown,
    CpuPhaseBreakdown,
    Origin,
)
from profreport.reports.analysis.steps import StepWindows, dataloader_intervals, loader_known

#: A part's intervals, a table's rows, or several tables' rows (merged into the claimed time row
#: by row, never built into a union of their own).
Part = iv.Intervals | iv.Rows | tuple[iv.Rows, ...]
Parts = Iterable[tuple[str, Part]]


def _sets(part: Part) -> tuple[iv.Intervals | iv.Rows, ...]:
    """The one or more sets of intervals a part joins the claimed time with."""
    return part if isinstance(part, tuple) else (part,)


def claim(parts: Parts, windows: StepWindows) -> dict[str, np.ndarray]:
    """The ns each part claims in every step window: what it covers there that no earlier part
    covers. The parts' running union is measured in the windows after each part joins it, and a
    part claims what it adds, a stretch of time at a time (iv.stretches: what a window holds is
    the sum of what its pieces in the stretches hold), so no union of the whole profile is built,
    nor any part's own remainder."""
    named = [(name, [iv.Stretched(rows) for rows in _sets(part)]) for name, part in parts]
    out = {name: np.zeros(windows.count, dtype=np.int64) for name, _ in named}
    for low, high in iv.stretches([rows for _, sets in named for rows in sets]):
        near = iv.reaching(windows.starts, windows.ends, low, high)  # the others hold none
        starts, ends = windows.starts[near], windows.ends[near]
        claimed = iv.EMPTY
        before = np.zeros(len(near), dtype=np.int64)
        for name, sets in named:
            for rows in sets:
                claimed = iv.merge_rows(claimed, rows.within(low, high))
            covered = np.asarray(iv.overlap_per_window(claimed, starts, ends), np.int64)
            out[name][near] += covered - before
            before = covered
    return out


def mean_per_step(claims: dict[str, np.ndarray], windows: StepWindows) -> dict[str, int]:
    """Mean ns per step window of each claimed part."""
    return {name: int(part.sum()) // max(windows.count, 1) for name, part in claims.items()}


def per_step_samples(claims: dict[str, np.ndarray],
                     windows: StepWindows) -> dict[str, tuple[int, ...]]:
    """Each part's ns in every whole step window (the last window left out when it is only its
    own range, with no fetch after it), ``other`` the rest of the window (the window itself is
    the steps' StepStats.window_ns)."""
    whole = windows.whole
    lengths = windows.whole_lengths()
    out = {name: np.zeros(whole, np.int64) for name in BREAKDOWN_PARTS}
    for name, part in claims.items():
        out[name] = part[:whole]
    out["other"] = np.maximum(lengths - sum(v for k, v in out.items() if k != "other"), 0)
    return {name: tuple(int(v) for v in values) for name, values in out.items()}


def make_breakdown(origin: Origin, windows: StepWindows, claims: dict[str, np.ndarray],
                   overlapped_ns: int = 0,
                   measured: frozenset[str] = frozenset(BREAKDOWN_PARTS),
                   h2d_overlapped_ns: int = 0) -> Breakdown:
    """A Breakdown whose parts (in BREAKDOWN_PARTS order) add up to the mean window, with each
    part's per-step samples, the parts its source ``measured``, and the communication and the
    host-to-device copies per step that run under compute kernels."""
    step_ns = windows.total_ns // max(windows.count, 1)
    parts_ns = dict.fromkeys(BREAKDOWN_PARTS, 0)
    parts_ns.update(mean_per_step(claims, windows))
    parts_ns["other"] = max(step_ns - sum(v for k, v in parts_ns.items() if k != "other"), 0)
    return Breakdown(origin=origin, step_ns=step_ns, parts_ns=parts_ns,
                     comm_overlapped_ns=overlapped_ns, h2d_overlapped_ns=h2d_overlapped_ns,
                     per_step_ns=per_step_samples(claims, windows), measured=measured)


def cpu_parts(profile: Profile, windows: StepWindows) -> dict[str, iv.Intervals]:
    """CPU-only runs: DataLoader wait, then framework ops (any thread, outside the collective
    calls of their own thread) as compute, then CPU collectives while no framework op runs as
    exposed communication; the rest is other. Built
    once per run: the breakdown claims them and the communication figures read them.

    A profile with ranges but no framework ops (nsys NVTX on a CPU-only capture) gets DataLoader
    wait and "other" only: it cannot tell compute from anything else."""
    return {"dataloader": dataloader_intervals(profile, windows),
            "compute": framework_time(profile),
            "comm_exposed": iv.union_of([profile.table("cpu_collectives")])}


def cpu_breakdown(profile: Profile, windows: StepWindows,
                  claims: dict[str, np.ndarray]) -> Breakdown:
    """The step breakdown of a CPU-only run from the ``claims`` of :func:`cpu_parts`: the rest
    ("other") always, the DataLoader wait when the profile records it (steps.loader_known);
    compute and exposed communication only when the profile records framework ops (nsys NVTX
    ranges alone cannot tell them from the rest); the GPU parts never."""
    ops = {"compute", "comm_exposed"} if not framework_ops(profile).empty else set()
    loader = {"dataloader"} if loader_known(profile, windows) else set()
    return make_breakdown(profile.kind, windows, claims,
                          measured=frozenset({"other"} | loader | ops))


def cpu_phases(profile: Profile, windows: StepWindows) -> CpuPhaseBreakdown:
    """CPU-only runs: share of step time in DataLoader, optimizer, backward, forward (the
    remaining framework ops) and communication while no op runs, each claiming only unclaimed
    time; the ops' time inside a collective call of their thread is the collective's."""
    optimizer = spans_where(profile, lambda names: concepts.is_optimizer_step_span(names)
                            | concepts.is_zero_grad_span(names))
    parts = [("dataloader", dataloader_intervals(profile, windows)),
             ("optimizer", off_collectives(profile, optimizer)),
             ("backward", off_collectives(profile, spans_where(profile, concepts.is_backward_op))),
             ("forward", framework_time(profile)),
             ("communication", iv.union_of([profile.table("cpu_collectives")]))]
    mean = mean_per_step(claim(parts, windows), windows)
    step_ns = max(windows.total_ns // max(windows.count, 1), 1)
    fractions = {name: ns / step_ns for name, ns in mean.items()}
    fractions["other"] = max(1.0 - sum(fractions.values()), 0.0)
    return CpuPhaseBreakdown(origin=profile.kind, fractions=fractions)
