"""line_profiler metrics: the DataLoader loop line, iterations from its hits, the listings."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from profreport import concepts
from profreport.model import LprofMeta, Profile, SourceHidden, TrainingLoop
from profreport.parsers.lprof import loop_lines
from profreport.reports.analysis.results import (
    BREAKDOWN_PARTS,
    Breakdown,
    FunctionListing,
    LineItem,
    LoopIdentification,
    StepStats,
)
from profreport.reports.analysis.top import TOP_LINES
from profreport.units import ms


def loop_line(lines: pd.DataFrame, loop: TrainingLoop | None) -> LineItem | None:
    """The line of the DataLoader loop (see :func:`dataloader_loop`) whose time is the
    DataLoader wait, its header or the body line that fetches each batch, as a LineItem, the
    row with the most time where several profiles recorded it; None without one, or when the
    wait is unknown."""
    if loop is None or not loop.dataloader or loop.wait_lineno is None or lines.empty:
        return None
    rows = lines[(lines["file"] == loop.file) & (lines["function"] == loop.function)
                 & (lines["lineno"] == loop.wait_lineno)]
    return None if rows.empty else line_item(rows.loc[rows["time_ns"].idxmax()])


def dataloader_loop(profiles: list[Profile]) -> TrainingLoop | None:
    """The DataLoader loop the line_profiler profiles found (``meta.loop``), the one with the
    most time when several did; None when none did."""
    loops = [p.meta.loop for p in profiles if isinstance(p.meta, LprofMeta)
             and p.meta.loop is not None and p.meta.loop.dataloader]
    return max(loops, key=lambda loop: loop.time_ns + loop.body_ns, default=None)


def lprof_step_stats(loop: TrainingLoop | None) -> StepStats | None:
    """Iterations of the DataLoader loop: its body's whole runs (TrainingLoop.steps), each the
    time of the header and the lines that run every iteration over those runs. Only the mean is
    known: the lines hold totals, so no percentile, minimum, maximum or start-to-start time.
    Set-up before the loop and the header's last test, which ends it, are no iteration. None
    without a DataLoader loop."""
    if loop is None or not loop.dataloader or loop.steps <= 0:
        return None
    mean = (loop.time_ns + loop.body_ns) // loop.steps
    return StepStats(origin="lprof", count=loop.steps, mean_ns=mean, p50_ns=None,
                     p90_ns=None, min_ns=None, max_ns=None, marker=concepts.LOOP_PASS)


def lprof_dataloader_fraction(loop: TrainingLoop | None) -> float | None:
    """The DataLoader wait's share of the loop's time (its header's, waiting on
    ``next(loader)``, or the body line's that fetches from a DataLoader's iterator); None
    without a DataLoader loop or when the wait is unknown."""
    if loop is None or not loop.dataloader or loop.wait_lineno is None:
        return None
    return loop.wait_ns / max(loop.time_ns + loop.body_ns, 1)


#: The name of line_profiler's "compute" part: it times lines, so all it knows of the loop
#: besides the DataLoader wait is the rest.
LPROF_REST_LABEL = "Rest of the loop (line_profiler cannot tell compute from other work)"


def lprof_breakdown(loop: TrainingLoop | None, steps: StepStats) -> Breakdown | None:
    """line_profiler: the loop line is DataLoader wait, the rest of the loop is counted as
    compute and named as the rest (LPROF_REST_LABEL: line_profiler cannot split the loop body
    further, the other parts are unmeasured)."""
    share = lprof_dataloader_fraction(loop)
    if share is None:
        return None
    loader = int(steps.mean_ns * share)
    parts_ns = dict.fromkeys(BREAKDOWN_PARTS, 0)
    parts_ns.update(dataloader=loader, compute=steps.mean_ns - loader)
    return Breakdown(origin="lprof", step_ns=steps.mean_ns, parts_ns=parts_ns,
                     measured=frozenset({"dataloader", "compute"}),
                     labels={"compute": LPROF_REST_LABEL})


#: Why a DataLoader found by its name alone is taken for one (pysource.named_only).
NAMED_ONLY = ("only a name says it holds a DataLoader: no line shown assigns that name (a "
              "parameter, an attribute), or the one shown calls a function whose result the "
              "source does not show")


def loop_identification(loop: TrainingLoop | None) -> LoopIdentification | None:
    """How the parser found the DataLoader loop (``Profile.meta.loop`` of an lprof), or None
    when it found none or did not take the loop for the DataLoader's."""
    if loop is None or not loop.dataloader:
        return None
    where = f"{Path(loop.file).name}:{loop.lineno}"
    if loop.counts_passes:
        return _counting_identification(loop, where)
    if loop.evidence == "source":
        return LoopIdentification("source", "high", f"{where} iterates over a DataLoader")
    if loop.evidence == "name":
        return LoopIdentification("name", loop.confidence,
                                  f"{where} iterates over {loop.named_by}: {NAMED_ONLY}")
    exit_by = "left by break" if loop.ended_by_break else "one more hit per entry"
    signs = [f"a loop header ({loop.hits:,} hits for {loop.iterations:,} iterations of "
             f"its body, {exit_by})"]
    if loop.header_is_largest:
        signs.append("it takes more time than any line of its body (the batch is fetched there)")
    elif loop.largest_body_lineno is not None and not loop.source_shown:
        signs.append(f"it takes less time than line {loop.largest_body_lineno} of its body "
                     f"({ms(loop.largest_body_line_ns // max(loop.steps, 1))} a pass): where "
                     "that line fetches the batch (next(it)), the DataLoader wait is its time, "
                     "not the header's")
    if loop.training_name:
        signs.append(f"its function {loop.function}() is named as training")
    shown = ("the line shown names no DataLoader" if loop.source_shown
             else "source not shown")
    return LoopIdentification(
        "hit counts", loop.confidence,
        f"{shown}: {where} taken for the DataLoader loop from hit counts alone, "
        f"{'; '.join(signs)} (confidence {loop.confidence})",
        header_unseen=not loop.source_shown)


def _counting_identification(loop: TrainingLoop, where: str) -> LoopIdentification:
    """How a loop whose header counts passes (``for step in range(steps):``) was taken for the
    training loop, where its DataLoader wait is, or why that is unknown."""
    counts = (f"{where} only counts the passes (a header over range() or a literal, or a while "
              "whose test calls nothing, fetches nothing)")
    if loop.fetch_lineno is None:
        unknown = (f"no line of {loop.function}()'s loop body shown fetches a batch "
                   "(next(...) of a DataLoader's iterator, or of an iterator whose origin is not "
                   "shown), so where the batches come from and the DataLoader's share of the "
                   "step are unknown")
        return LoopIdentification("source", loop.confidence,
                                  f"{counts}; its function {loop.function}() is named as "
                                  f"training; {unknown}", unknown)
    fetch = (f"{Path(loop.file).name}:{loop.fetch_lineno} fetches each batch with "
             f"next({loop.fetch_from})")
    if loop.wait_lineno is not None:
        origin = ("" if loop.fetch_origin == loop.fetch_from
                  else f", {loop.fetch_from} = {loop.fetch_origin}")
        named = f" ({NAMED_ONLY})" if loop.evidence == "name" else ""
        return LoopIdentification("name" if named else "source", loop.confidence,
                                  f"{counts}; {fetch} from a DataLoader{origin}{named}: that "
                                  "line's time is the DataLoader wait")
    shown = (f"no line shown before the loop says what {loop.fetch_from} iterates over"
             if loop.fetch_origin is None
             else f"{loop.fetch_from} = {loop.fetch_origin} names no DataLoader")
    unknown = (f"{fetch}, but {shown}, so the DataLoader's share of the step is unknown")
    return LoopIdentification("source", loop.confidence, f"{counts}; {unknown}", unknown)


def line_item(row: pd.Series) -> LineItem:
    """One line_profiler row of a :func:`line_table` as a LineItem."""
    return LineItem(profile=str(row["profile"]), file=str(row["file"]),
                    function=str(row["function"]), lineno=int(row["lineno"]),
                    hits=int(row["hits"]), time_ns=int(row["time_ns"]),
                    time_per_hit_ns=int(row["time_per_hit_ns"]),
                    share=float(row["function_share"]),
                    source=None if pd.isna(row["source"]) else str(row["source"]),
                    is_dataloader_loop=bool(row["is_dataloader_loop"]),
                    is_sync_point=bool(row["is_sync_point"]))


def profile_labels(profiles: list[Profile]) -> list[str]:
    """How a run's lines and listings name each of its line profiles: the .lprof's path from
    the folder that holds them all, its name alone where one folder holds every one (kernprof's
    ``train.rank0.lprof``, ``train.rank1.lprof``), so two files of one name stay apart."""
    paths = [Path(profile.path).absolute() for profile in profiles]
    if not paths:
        return []
    common = Path(os.path.commonpath([path.parent for path in paths]))
    return [path.relative_to(common).as_posix() for path in paths]


def line_table(profiles: list[Profile]) -> pd.DataFrame:
    """The ``lines`` tables of these line profiles in one, in their order, each row naming its
    profile (``profile``, see :func:`profile_labels`)."""
    tables = [profile.table("lines").assign(profile=label)
              for profile, label in zip(profiles, profile_labels(profiles), strict=True)]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def slowest_loop_line(profile: Profile) -> LineItem | None:
    """The slowest line a line profile's training loop runs in its passes (its header or a body
    line), None when it found no training loop: a line before the loop (building the model,
    joining the process group) is set-up, none of the step's time."""
    loop = profile.meta.loop if isinstance(profile.meta, LprofMeta) else None
    if loop is None or not loop.dataloader or not profile.has("lines"):
        return None
    return next(iter(top_lines(loop_lines(line_table([profile]), loop))), None)


def top_lines(lines: pd.DataFrame) -> list[LineItem]:
    """The lines of a :func:`line_table` with the most time, most first; where times tie, by
    file and line, then in the table's order of profiles (a stable sort)."""
    ordered = lines.sort_values(["time_ns", "file", "lineno"], ascending=[False, True, True],
                                kind="stable")
    return [line_item(row) for _, row in ordered.head(TOP_LINES).iterrows()]


#: A profiled function as one line profile records it: the profile (profile_labels), the
#: function's file, first line and name.
ListingKey = tuple[str, str, int, str]


def hidden_sources(profiles: list[Profile]) -> dict[ListingKey, SourceHidden | None]:
    """Why the source of each function these line profiles time is not shown, as the parser
    of each decided it (LprofFunction.source_hidden), by profile (see :func:`profile_labels`)
    and function; None where it is shown."""
    return {(label, function.file, function.first_lineno, function.function):
            function.source_hidden
            for profile, label in zip(profiles, profile_labels(profiles), strict=True)
            if isinstance(profile.meta, LprofMeta) for function in profile.meta.functions}


def function_listings(lines: pd.DataFrame, hidden: dict[ListingKey, SourceHidden | None]
                      ) -> list[FunctionListing]:
    """Every function each line profile of a :func:`line_table` times, with all its lines in
    order, and why its source is not shown (``hidden``, see :func:`hidden_sources`); the
    profiles in the table's order, each one's slowest function first. A function is the line
    it starts at as line_profiler recorded it (its decorator's, as line_profiler's own listing
    says), two of one name in a file apart.

    Two files timing one function (two ranks, or a run's file beside another's) are two
    measurements: each has its listing, naming its file, as line_profiler shows each file.
    Their lines are neither interleaved (each line twice: the first two rows would no longer
    tell a function opening with a loop, _no_loop_reason) nor summed (two processes' totals
    are no one run's time, the shares and the loop's steps come from one file, and the two
    sources may differ, one edited since).
    """
    order = {label: at for at, label in enumerate(dict.fromkeys(lines["profile"]))}
    listings = []
    for (profile, file, first, function), part in lines.groupby(
            ["profile", "file", "first_lineno", "function"], sort=False):
        part = part.sort_values("lineno", kind="stable")
        listings.append(FunctionListing(
            profile=str(profile), file=str(file), function=str(function),
            first_lineno=int(first), total_ns=int(part["time_ns"].sum()),
            lines=[line_item(row) for _, row in part.iterrows()],
            source_hidden=hidden[(str(profile), str(file), int(first), str(function))]))
    return sorted(listings, key=lambda item: (order[item.profile], -item.total_ns, item.file,
                                              item.function, item.first_lineno))
