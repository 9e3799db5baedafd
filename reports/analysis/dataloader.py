"""The DataLoader wait: which fetches of a profile fed training (the one rule, for every format's
``dataloader`` table), from which share a run is loader-bound, and whether the shares several
profilers measured tell one story. The step figures read the wait through
:func:`training_fetches`, the metrics pick the breakdown's source with it
(metrics._breakdown_source) and the findings read it (LOADER_BOUND, SOURCES_AGREE...), so it
sits below all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from profreport import concepts, searches
from profreport.model import Profile, covered_ns, outermost, sorted_times
from profreport.reports.analysis.kept import classified, per_profile
from profreport.units import duration

#: A quarter of every step spent waiting for the next batch is the biggest single loss a run can
#: fix without touching the model, so from here on the run is called loader-bound.
LOADER_BOUND_FRACTION = 0.25
#: Two sources agree about the DataLoader when their wait shares differ by at most this much.
SOURCES_AGREE_DELTA = 0.15
# The tables whose rows may be training work (concepts.is_training_work): torch.profiler's
# operators and spans, an nsys capture's NVTX ranges (emit_nvtx records the operators so).
_WORK_TABLES = ("cpu_ops", "ranges")


def loader_shares_agree(shares: list[float]) -> bool:
    """Whether profilers' DataLoader wait shares tell one story: within SOURCES_AGREE_DELTA of
    each other, or all on one side of LOADER_BOUND_FRACTION (the same verdict)."""
    return max(shares) - min(shares) <= SOURCES_AGREE_DELTA or \
        len({share >= LOADER_BOUND_FRACTION for share in shares}) == 1


@dataclass(frozen=True, eq=False)
class TrainingFetches:
    """The DataLoader fetches of one profile that fed training (its DataLoader wait), and the
    note on the others, or on why none could be told from them (None when nothing is to say)."""

    fetches: pd.DataFrame
    note: str | None


@per_profile
def training_fetches(profile: Profile) -> TrainingFetches:
    """The fetches of the profile's ``dataloader`` table that fed training, and the note.

    A profiler names every DataLoader's fetch alike, a validation loader's as the training
    one's (torch.profiler's ``enumerate(DataLoader)#<iterator>.__next__``, as a span or as the
    NVTX range emit_nvtx opens), and records no iterator or grad mode: what follows a fetch
    tells. A fetch fed training when the backward pass or an optimizer step
    (concepts.is_training_work) starts in its process between its end and the next fetch's
    start; one that no such work follows (an evaluation loop's under no_grad, the last fetch
    of a loop that ended or broke off after it) is no DataLoader wait, and the note counts them.
    A profile that records no such work at all (an inference loop's trace, an nsys capture of
    no backward or optimizer range) cannot tell: every fetch is kept, and the note says why."""
    fetches = profile.table("dataloader")
    if fetches.empty:
        return TrainingFetches(fetches, None)
    work = pd.concat([profile.table(name).loc[classified(profile, name, concepts.is_training_work),
                                              ["start", "pid"]]
                      for name in _WORK_TABLES if profile.has(name)])
    if work.empty:
        return TrainingFetches(fetches, _untold_note(profile, fetches))
    fed = _fed_training(fetches, work)
    if fed.all():
        return TrainingFetches(fetches, None)
    left = fetches[~fed]
    return TrainingFetches(fetches[fed], (
        f"{len(left):,} of {len(fetches):,} DataLoader fetches ({duration(covered_ns(left))}) "
        "fed no training: no backward pass or optimizer step follows any of them before the "
        "next fetch (an evaluation loop's, or the last fetch of a loop that ended or broke "
        "off after it), so they are no DataLoader wait"))


def _untold_note(profile: Profile, fetches: pd.DataFrame) -> str | None:
    """Why a profile recording no backward pass or optimizer step cannot tell which of its
    ``fetches`` fed training; None when each fetch's range says so itself (profreport's
    runner names its fetches as it makes them: concepts.is_training_fetch_range), or when the
    profile records no steps: no DataLoader wait is then measured, nothing counts a fetch."""
    if concepts.is_training_fetch_range(fetches["name"]).all() or profile.table("steps").empty:
        return None
    recorded = ("the trace records no backward pass or optimizer step"
                if profile.meta.records_torch_spans else
                "the capture records no backward pass or optimizer step (no NVTX range of "
                "either, as torch.autograd.profiler.emit_nvtx records them)")
    return (f"{recorded}, so nothing tells a training loop's DataLoader fetches from another "
            "loop's (a validation loop's): the DataLoader wait counts every fetch inside the "
            "steps, whichever loop's")


def _fed_training(fetches: pd.DataFrame, work: pd.DataFrame) -> np.ndarray:
    """Whether ``work`` (start, pid) starts between each fetch's end and the next fetch of its
    process; fetches nested in one another (a DataPipe's inside its DataLoader's) count as the
    outermost one."""
    fed = np.zeros(len(fetches), bool)
    for pid, rows in fetches.groupby("pid", sort=False).indices.items():
        order = rows[np.argsort(fetches["start"].to_numpy(np.int64)[rows], kind="stable")]
        starts, ends = (fetches[column].to_numpy(np.int64)[order] for column in ("start", "end"))
        heads, group = outermost(starts, ends)
        last_ends = np.maximum.reduceat(ends, heads)
        following = np.r_[starts[heads[1:]], np.iinfo(np.int64).max]
        times = sorted_times(work.loc[(work["pid"] == pid).to_numpy(), "start"].to_numpy(np.int64))
        held = searches.searchsorted(times, following) > searches.searchsorted(times, last_ends)
        fed[order] = held[group]
    return fed
