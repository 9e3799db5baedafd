"""A few steps of one run as drawable lanes: GPU streams, idle gaps, CPU steps and data waits.

The chart shows TIMELINE_STEPS steps around the median step (the typical iteration, not warm-up),
following one another where it can (no step the per-step figures leave out between them),
downsampled so the HTML stays small: neighbouring segments of one lane and category closer than
one pixel-equivalent are merged, and at most MAX_SEGMENTS are kept (the longest).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profreport.model import Profile
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.gpu import device_rows, gpu_tables
from profreport.reports.analysis.results import Timeline, TimelineSegment
from profreport.reports.analysis.steps import StepWindows, dataloader_intervals, step_label

#: Steps shown: the median one and its neighbours, enough to see the gap between iterations.
TIMELINE_STEPS = 3
#: A chart is ~1500 px wide; two segments per pixel column is more than the eye can tell apart.
MAX_SEGMENTS = 3000


def _select_span(windows: StepWindows) -> tuple[int, int]:
    """Start and end of TIMELINE_STEPS windows centred on the median-length step, moved to the
    nearest TIMELINE_STEPS that follow one another where a step the windows leave out (a
    recompile, an evaluation-only step) lies between the centred ones."""
    lengths = windows.ends - windows.starts
    median = int(np.argsort(lengths, kind="stable")[len(lengths) // 2])
    shown = min(TIMELINE_STEPS, windows.count)
    centred = max(min(median - TIMELINE_STEPS // 2, windows.count - TIMELINE_STEPS), 0)
    follows = windows.follows()
    firsts = [first for first in range(windows.count - shown + 1)
              if follows[first:first + shown - 1].all()]
    first = min(firsts, key=lambda f: abs(f - centred), default=centred)
    return int(windows.starts[first]), int(windows.ends[first + shown - 1])


def _rows_within(table: pd.DataFrame, low: int, high: int) -> np.ndarray:
    """The positions of the rows of ``table`` that overlap ``[low, high)``, found
    :data:`intervals.BLOCK_ROWS` rows at a time (no masks as long as a 10 M-row table)."""
    start, end = table["start"].to_numpy(), table["end"].to_numpy()
    return np.concatenate([np.empty(0, np.int64)] + [
        np.flatnonzero((end[block] > low) & (start[block] < high)) + block.start
        for block in iv.blocks(len(table))])


def _gpu_segments(profile: Profile, start: int, end: int) -> pd.DataFrame:
    """Kernels, copies and memsets that overlap ``[start, end)``, with lane and category."""
    kernels, memcpy, memset = (table.iloc[_rows_within(table, start, end)]
                               for table in gpu_tables(profile))
    parts = [
        kernels.assign(category=np.where(kernels["is_comm"], "comm", "kernel"),
                       label=kernels["short_name"]),
        memcpy.assign(category="memcpy", label="memcpy " + memcpy["kind"].astype(str)),
        memset.assign(category="memset", label="memset"),
    ]
    parts = [p[["start", "end", "device", "stream", "category", "label"]]
             for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame({"lane": pd.Series(dtype=object), "start": pd.Series(dtype=np.int64),
                             "end": pd.Series(dtype=np.int64), "label": pd.Series(dtype=object),
                             "category": pd.Series(dtype=object)})
    frame = pd.concat(parts, ignore_index=True)
    frame["lane"] = ("GPU " + frame["device"].astype(str) + " stream "
                     + frame["stream"].astype(str))
    return frame[["lane", "start", "end", "label", "category"]]


def _idle_segments(profile: Profile, start: int, end: int) -> pd.DataFrame:
    """Per device, the holes in its activity inside the span (between its first and last busy
    time, as gpu.device_activity's gaps are), from its rows that reach into the span: its whole
    activity is not made again for a few steps (5.8 M intervals, 92 MB for a 10 M-kernel
    export; the analysis let it go, see metrics._add_attributed_metrics)."""
    tables = [t for t in gpu_tables(profile) if not t.empty]
    frames = []
    for device, masks in device_rows(tables):
        holes = _holes_in(tables, masks, start, end)
        frames.append(pd.DataFrame({"lane": f"GPU {device}", "start": holes.starts,
                                    "end": holes.ends, "label": "idle", "category": "idle"}))
    return pd.concat(frames, ignore_index=True)


def _holes_in(tables: list[pd.DataFrame], masks: list[np.ndarray | slice], low: int,
              high: int) -> iv.Intervals:
    """The holes of one device's activity (the ``masks`` of the GPU ``tables``' rows it ran)
    inside ``[low, high)``: that span, cut to the device's first and last busy time where they
    lie in it, less the union of its rows that reach into it (rows of no length busy nothing,
    as in intervals.union), :data:`intervals.BLOCK_ROWS` rows at a time."""
    starts, ends, before, after = [], [], False, False
    for table, mask in zip(tables, masks, strict=True):
        for block in iv.blocks(len(table)):
            start, end = table["start"].to_numpy()[block], table["end"].to_numpy()[block]
            held = end > start
            held &= mask[block] if not isinstance(mask, slice) else True
            before = before or bool((held & (start < low)).any())
            after = after or bool((held & (end > high)).any())
            held &= (end > low) & (start < high)
            starts.append(start[held])
            ends.append(end[held])
    busy = iv.union(np.concatenate(starts), np.concatenate(ends))
    if not len(busy) and not (before and after):
        return iv.EMPTY
    first = low if before else max(low, int(busy.starts[0]))
    last = high if after else min(high, int(busy.ends[-1]))
    if first >= last:
        return iv.EMPTY
    return iv.subtract(iv.Intervals(np.array([first]), np.array([last])), busy)


def _cpu_segments(profile: Profile, windows: StepWindows) -> pd.DataFrame:
    """Step ranges and DataLoader waits on the training thread. Every recorded step is drawn,
    not only those the windows keep: the chart shows what ran in its span, and the windows have
    gaps (a step torch.compile recompiles in, an evaluation-only step, between kept ones) that
    its span may cross; a step the windows leave out is drawn as such (``left_out_step``,
    named with why: steps.step_label)."""
    steps = profile.table("steps")
    waits = dataloader_intervals(profile, windows)
    lane = f"CPU {int(steps['tid'].iloc[0])}" if not steps.empty else "CPU"
    left_out = steps["number"].isin([number for number, _, _ in windows.left_out])
    return pd.concat([
        pd.DataFrame({"lane": lane, "start": steps["start"], "end": steps["end"],
                      "label": [step_label(int(n), windows) for n in steps["number"]],
                      "category": np.where(left_out, "left_out_step", "step")}),
        pd.DataFrame({"lane": lane + " data", "start": waits.starts, "end": waits.ends,
                      "label": "DataLoader wait", "category": "dataloader"}),
    ], ignore_index=True)


def downsample(segments: pd.DataFrame, tolerance_ns: int) -> tuple[pd.DataFrame, int]:
    """Merge same-lane, same-category neighbours closer than ``tolerance_ns``; cap the count.

    Returns the kept segments and how many were dropped by the cap.
    """
    ordered = segments.sort_values(["lane", "category", "start"], kind="stable")
    ordered = ordered.reset_index(drop=True)
    key = ordered["lane"] + "\0" + ordered["category"]
    reach = ordered.groupby(key, sort=False)["end"].cummax()
    new_group = (key != key.shift()) | (ordered["start"] - reach.shift() > tolerance_ns)
    merged = ordered.groupby(new_group.cumsum(), sort=False).agg(
        lane=("lane", "first"), category=("category", "first"), label=("label", "first"),
        start=("start", "min"), end=("end", "max"), count=("start", "size"))
    many = merged["count"] > 1
    merged.loc[many, "label"] = (merged.loc[many, "count"].astype(str) + " × "
                                 + merged.loc[many, "label"])
    kept = merged.assign(length=merged["end"] - merged["start"]).nlargest(MAX_SEGMENTS, "length")
    return kept.sort_values(["lane", "start"], kind="stable"), len(merged) - len(kept)


def build_timeline(profile: Profile, windows: StepWindows) -> Timeline:
    """The timeline of a few typical steps of one profile."""
    start, end = _select_span(windows)
    parts = [_cpu_segments(profile, windows)]
    if any(not t.empty for t in gpu_tables(profile)):
        parts += [_gpu_segments(profile, start, end), _idle_segments(profile, start, end)]
    frame = pd.concat(parts, ignore_index=True)
    frame = frame[(frame["end"] > start) & (frame["start"] < end)]
    frame = frame.assign(start=frame["start"].clip(lower=start), end=frame["end"].clip(upper=end))
    kept, dropped = downsample(frame, max((end - start) // MAX_SEGMENTS, 1))
    segments = [TimelineSegment(lane=str(r.lane), start_ns=int(r.start) - start,
                                end_ns=int(r.end) - start, label=str(r.label),
                                category=str(r.category))
                for r in kept.itertuples(index=False)]
    lanes = sorted(kept["lane"].unique().tolist(), key=lambda lane: (not lane.startswith("CPU"),
                                                                     lane))
    return Timeline(origin_ns=start, segments=segments, lanes=lanes, dropped_segments=dropped,
                    source=profile.kind)
