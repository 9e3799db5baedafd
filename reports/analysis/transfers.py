"""Host <-> device copies launched inside the steps: how many per step, how many bytes, and which
framework operator launched them (copy -> runtime call with the same correlation id -> the
outermost CPU operator on that call's thread whose span holds it: ``aten::to`` for
``.to(device)``, ``aten::item`` for ``.item()``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from profreport import concepts
from profreport.model import Profile
from profreport.reports.analysis.cpu import spans_where
from profreport.reports.analysis.launches import (
    counted_by_start,
    launch_calls,
    launched_in_windows,
    unlinked,
)
from profreport.reports.analysis.ops import launching_op, outermost
from profreport.reports.analysis.results import StepCopies
from profreport.reports.analysis.steps import StepWindows

#: Copy directions between host and device, in the order they are reported.
DIRECTIONS = (concepts.HTOD, concepts.DTOH)
#: A copy under 64 KiB moves too little to be batch data (an image batch is megabytes): a scalar
#: or a small tensor made on the other side each step, paying launch and DMA setup (~10 us).
SMALL_COPY_BYTES = 64 * 2**10
#: Launching operators kept per direction (most copies first).
TOP_LAUNCHERS = 3
#: The launcher of copies launched outside every recorded operator.
NO_OPERATOR = "(no operator)"
#: The launcher of copies linked to no launch call (no correlation id, or no call recorded
#: with it): which operator launched them is unknown.
NO_LAUNCH_CALL = "(no launch call)"


def _launchers(profile: Profile, copies: pd.DataFrame, steps: int) -> list[tuple[str, float]]:
    """The outermost CPU ops that launched ``copies`` (their launching runtime calls in column
    ``call``), with copies per step, most first; NO_OPERATOR for copies launched outside
    every recorded op, NO_LAUNCH_CALL for copies linked to no launch call."""
    ops = outermost(profile.table("cpu_ops"))
    calls = copies["call"].to_numpy()
    where = launching_op(profile, ops, calls)
    names = np.append(ops["name"].to_numpy(object), NO_OPERATOR)[where]
    names[calls < 0] = NO_LAUNCH_CALL
    counts = pd.Series(names).value_counts()
    return [(str(name), count / steps) for name, count in counts.head(TOP_LAUNCHERS).items()]


def step_copies(profile: Profile, windows: StepWindows | None) -> StepCopies | None:
    """Host-to-device and device-to-host copies launched inside the step windows, per step,
    those linked to no launch call by the step they started in (said, with how many); None
    without steps or copies."""
    if windows is None or not profile.has("memcpy"):
        return None
    memcpy = profile.table("memcpy")
    mine = launched_in_windows(profile, "memcpy", windows) \
        & memcpy["kind"].isin(DIRECTIONS).to_numpy()
    rows = np.flatnonzero(mine)
    copies = memcpy.iloc[rows].assign(call=launch_calls(profile, "memcpy")[rows])
    if copies.empty:
        return None
    steps = windows.count
    by_kind = {kind: copies[copies["kind"] == kind] for kind in DIRECTIONS}
    blocking = by_kind[concepts.DTOH]["dst_kind"] == concepts.PAGEABLE
    return StepCopies(
        origin=profile.kind, steps=steps,
        copies_per_step={kind: len(part) / steps for kind, part in by_kind.items()},
        small_per_step={kind: int(part["bytes"].between(0, SMALL_COPY_BYTES - 1).sum()) / steps
                        for kind, part in by_kind.items()},
        bytes_per_step={kind: int(part["bytes"].clip(lower=0).sum()) // steps
                        for kind, part in by_kind.items()},
        ns_per_step={kind: int((part["end"] - part["start"]).sum()) // steps
                     for kind, part in by_kind.items()},
        launchers={kind: _launchers(profile, part, steps) if profile.has("cpu_ops") else []
                   for kind, part in by_kind.items() if not part.empty},
        blocking_per_step=int(blocking.sum()) / steps,
        longest={kind: _longest(part) for kind, part in by_kind.items() if not part.empty},
        training=_training(profile), records_operators=profile.meta.records_torch_spans,
        launches_unknown=counted_by_start(unlinked(
            profile, "memcpy", mine, "between host and device that ran in the steps")))


def _training(profile: Profile) -> bool | None:
    """Whether the profile's steps train: autograd engine ops or optimizer steps recorded; None
    when the profile records no operators to tell (nsys)."""
    if not profile.has("cpu_ops"):
        return None
    return bool(concepts.is_backward_op(profile.table("cpu_ops")["name"]).any()
                or not spans_where(profile, concepts.is_optimizer_step_span).empty)


def _longest(copies: pd.DataFrame) -> tuple[int, int]:
    """Start and end of the longest of ``copies``."""
    row = copies.loc[(copies["end"] - copies["start"]).idxmax()]
    return int(row["start"]), int(row["end"])
