"""Collective communication: NCCL/RCCL kernels on GPUs, gloo/c10d calls on CPU-only runs.

The exposed part of communication is what it claims in the step breakdown
(:mod:`profreport.reports.analysis.breakdown`): the caller passes those intervals in, so
``CommStats.exposed_fraction`` and ``Breakdown.parts_ns["comm_exposed"]`` are one figure. The
overlap is communication under compute *kernels* (copies and memsets are no compute), inside the
step windows. Calls per step are counted by the step that launched them (correlation id).
"""

from __future__ import annotations

import pandas as pd

from profreport import concepts
from profreport.model import Profile
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.breakdown import claim, cpu_parts
from profreport.reports.analysis.gpu import comm_kernels, comm_under_compute, launched_in_steps
from profreport.reports.analysis.results import CommStats
from profreport.reports.analysis.steps import StepWindows, in_windows


def _comm_stats(profile: Profile, windows: StepWindows, comm: iv.Intervals,
                exposed: iv.Intervals, overlapped: iv.Intervals, calls: tuple[int, int],
                names: pd.Series, on_gpu: bool) -> CommStats:
    """CommStats from the communication intervals, their exposed part, the part under compute
    and the call counts (inside the step windows, and in all)."""
    spent = windows.covered(comm)
    total = max(windows.total_ns, 1)
    return CommStats(origin=profile.kind, total_ns_per_step=spent // windows.count,
                     fraction=spent / total,
                     exposed_fraction=windows.covered(exposed) / total,
                     overlap_fraction=windows.covered(overlapped) / max(spent, 1),
                     calls_per_step=calls[0] / windows.count, calls_total=calls[1],
                     names=sorted(names.unique().tolist()), on_gpu=on_gpu)


def gpu_comm_stats(profile: Profile, windows: StepWindows,
                   claims: dict[str, iv.Intervals]) -> CommStats | None:
    """NCCL kernels: share of step time, exposed share (what they claim in the breakdown),
    overlap with compute kernels, calls launched per step."""
    kernels = comm_kernels(profile)
    if kernels.empty:
        return None
    launched = len(launched_in_steps(profile, kernels, windows))
    return _comm_stats(profile, windows, iv.union_of([kernels]), claims["comm_exposed"],
                       comm_under_compute(profile), (launched, len(kernels)),
                       kernels["short_name"], on_gpu=True)


def collective_calls(calls: pd.DataFrame) -> int:
    """Collective calls the program made: one call is recorded once per layer (the c10d op and
    the gloo/NCCL op that runs it), so the count is that of the layer with the most records."""
    if calls.empty:
        return 0
    return int(concepts.collective_layer(calls["name"]).value_counts().max())


def cpu_comm_stats(profile: Profile, windows: StepWindows) -> CommStats | None:
    """CPU collectives (gloo, c10d): time with a collective in flight on any thread, and the
    exposed part, when no framework op runs beside it (the training thread waits for it)."""
    calls = profile.table("cpu_collectives")
    if calls.empty:
        return None
    comm = iv.union_of([calls])
    claims = claim(cpu_parts(profile, windows))
    overlapped = iv.intersect(comm, claims["compute"])
    return _comm_stats(profile, windows, comm, claims["comm_exposed"], overlapped,
                       (collective_calls(in_windows(calls, windows)), collective_calls(calls)),
                       calls["name"], on_gpu=False)
