"""The closing fetch: a last step in which nothing but DataLoader fetches is recorded from its
start on is the fetch that ended its loop, no step (the one rule, for every format's ``steps``
and ``dataloader`` tables). The step windows leave it out (steps.step_windows), and its note
joins the source notes (analyze.source_notes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from profreport import concepts
from profreport.model import Profile, covered_ns, ids_at
from profreport.reports.analysis.kept import per_profile
from profreport.units import duration

#: Why the step windows leave the closing fetch's step out, as a drawing names it
#: (steps.step_label).
CLOSING_REASON = "only a DataLoader fetch, no work after it"


@dataclass(frozen=True)
class ClosingFetch:
    """The last step of a profile when it holds only the fetch that ended its loop: its number
    and range, and the note saying why it is no step."""

    number: int
    start: int
    end: int
    note: str


@per_profile
def closing_fetch(profile: Profile) -> ClosingFetch | None:
    """The last step when nothing but DataLoader fetches (and what runs inside them on their
    thread) is recorded in its process from its start on, else None.

    The loop's last ``__next__`` raised StopIteration (or the loop broke off after it): no
    batch follows it and no step's work, so it is no step (an inference loop's
    ``ProfilerStep#N`` opened by its last prof.step(), the last occurrence of the fetch span
    when that repeated span marks the steps, a ``step N`` NVTX range opened before the fetch),
    and its fetch, then outside every step, no DataLoader wait. The evidence of work is what
    the process records on any of its threads: an operator, a range other than the step's own
    (a ProfilerStep span is none), a CUDA runtime call, a collective, an OS runtime call (nsys
    ``--trace=osrt``) or an allocation. Device work still running into the step was launched
    before it (a launch inside it is a runtime call there)."""
    steps = profile.table("steps")
    if steps.empty:
        return None
    last = steps.sort_values("start", kind="stable").iloc[-1]
    start, end, pid = int(last["start"]), int(last["end"]), last["pid"]
    fetches = profile.table("dataloader")
    closing = fetches[(fetches["start"].to_numpy() >= start)
                      & (fetches["pid"].to_numpy() == pid)]
    if closing.empty or _work_from(profile, last, closing):
        return None
    number = int(last["number"])
    label = f"ProfilerStep#{number}" if last["origin"] == concepts.PROFILER_STEP \
        else f"step {number}"
    return ClosingFetch(number, start, end, (
        f"{label}, the last step ({duration(end - start)}), holds only a DataLoader fetch "
        f"({duration(covered_ns(closing))}) and no work is recorded after it before the trace "
        "ends, so it is no step, and its fetch no DataLoader wait"))


def _work_from(profile: Profile, step: pd.Series, fetches: pd.DataFrame) -> bool:
    """Whether the process of ``step`` records any CPU work or allocation from the step's start
    on, other than the ``fetches`` and what runs inside them on their thread."""
    start, pid = int(step["start"]), step["pid"]
    for name in concepts.CPU_WORK_TABLES:
        if not profile.has(name):
            continue
        frame = profile.table(name)
        rows = np.flatnonzero(frame["start"].to_numpy() >= start)
        rows = rows[ids_at(frame["pid"], rows) == pid]
        later = frame.iloc[rows]
        if name == "ranges":
            later = later[~_the_step_itself(later, step)]
        if not _inside_fetches(later["start"], later, fetches).all():
            return True
    if not profile.has("memory"):
        return False
    memory = profile.table("memory")
    allocated = memory[(memory["time"].to_numpy() >= start) & (memory["bytes"].to_numpy() > 0)
                       & (memory["pid"].to_numpy() == pid)]
    return not _inside_fetches(allocated["time"], allocated, fetches).all()


def _the_step_itself(ranges: pd.DataFrame, step: pd.Series) -> np.ndarray:
    """Which of ``ranges`` mark a step, not work: ProfilerStep spans, and the range that is
    ``step`` (a ``step N`` NVTX range, a repeated span), on its thread from its start to its
    end."""
    itself = (ranges["start"].to_numpy() == int(step["start"])) & \
        (ranges["end"].to_numpy() == int(step["end"])) & \
        (ranges["tid"].to_numpy() == step["tid"])
    return itself | concepts.is_profiler_step_span(ranges["name"]).to_numpy()


def _inside_fetches(times: pd.Series, rows: pd.DataFrame, fetches: pd.DataFrame) -> np.ndarray:
    """Whether each of ``times`` (of ``rows``, with pid and tid) lies inside one of the
    ``fetches`` on its thread."""
    inside = np.zeros(len(rows), bool)
    at, pid, tid = times.to_numpy(np.int64), rows["pid"].to_numpy(), rows["tid"].to_numpy()
    for fetch in fetches.itertuples(index=False):
        inside |= (pid == fetch.pid) & (tid == fetch.tid) & (at >= fetch.start) & (at < fetch.end)
    return inside
