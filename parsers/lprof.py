"""line_profiler's ``.lprof`` files, read with an unpickler that runs nothing from the file.

An ``.lprof`` is a pickled ``LineStats(timings, unit)``: ``timings`` maps
``(filename, first_lineno, function_name)`` to ``[(lineno, nhits, total_time), ...]`` and
``unit`` is seconds per timer tick. The class lives at a different path in each era of
line_profiler; those paths are the only globals the unpickler admits, and each becomes the plain
:class:`_PickledLineStats` here, never line_profiler's own class.

The file names inside are whatever wrote the pickle: a source line is shown only from a regular
Python source file inside the ``.lprof``'s folder, its run folder (the nearest folder above it
with a ``manifest.json``) or ``--source-root``; anything else (``/etc/passwd``, ``/proc``,
``../..``) is refused and ``Profile.meta.notes`` says which source was not shown and why.

A loop header shown counting passes (``for step in range(steps):``) fetches nothing: the
DataLoader wait is then the body line that fetches each batch from a DataLoader's iterator
(``batch = next(it)`` after ``it = iter(train_loader)``), or unknown when the source does not
show where the batch comes from.

Without its source, the training loop is still found from the hit counts: a ``for``/``while``
header runs once more per call than its body (the last test that ends the loop), so a line whose
hits equal the next line's hits plus the function's calls is a loop header; when that header
takes more time than any line of its body, the time goes into fetching the next item, which for
a training loop is the DataLoader. ``Profile.meta.loop`` records the line, the evidence and
how sure that is.
"""

from __future__ import annotations

import bisect
import io
import math
import os
import pickle
import re
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from profreport.concepts import is_training_function
from profreport.errors import InputError
from profreport.inputs import (
    MAX_LINE_ENTRIES,
    open_input,
    shown_source,
    source_lines,
    source_refusal,
)
from profreport.manifest import MANIFEST_NAME
from profreport.model import (
    LprofFunction,
    LprofMeta,
    Profile,
    SourceHidden,
    TrainingLoop,
    conform,
)
from profreport.pysource import (
    ModuleSources,
    SourceScopes,
    assigned_value,
    counts_passes,
    dataloader_origin,
    fetched_iterator,
    is_dataloader_loop_line,
    is_loop_line,
    is_sync_point_line,
    loop_iterable,
    named_only,
    opens_no_loop,
)

if TYPE_CHECKING:  # the registry imports this module, never the other way round
    from profreport.parsers import ParseOptions
from profreport.text import error_text

#: Where each era of line_profiler defines the pickled class, and the era that path tells.
LINESTATS_CLASS_PATHS: dict[tuple[str, str], str] = {
    ("line_profiler", "LineStats"): "line_profiler 1.x/2.x",
    # 2.x defines LineStats in its top-level Cython module _line_profiler (2018 and before).
    ("_line_profiler", "LineStats"): "line_profiler 2.x",
    ("line_profiler._line_profiler", "LineStats"): "line_profiler 4.x/5.0",
    ("line_profiler.line_profiler", "LineStats"): "line_profiler 3.x or 5.1+",
}
# kernprof always pickles with HIGHEST_PROTOCOL, which is 2 even on Python 2.
MIN_PICKLE_PROTOCOL = 2
# Python 2's kernprof pickles file and function names as byte strings (SHORT_BINSTRING): they are
# UTF-8 text on every system it ran on; a byte that is not shows as U+FFFD rather than failing.
PY2_STRING_ENCODING = "utf-8"
# A whole program profiled line by line is a few MB. Each line entry takes at least 7 bytes of
# pickle, so 32 MiB also bounds the unpickled objects (~100 B per entry) to a few hundred MB.
MAX_LPROF_BYTES = 32 * 1024 * 1024
# How many folders above the .lprof are searched for the run folder's manifest.json.
RUN_FOLDER_DEPTH = 3
# Lines between where a function's code starts (its first decorator) and its ``def``.
MAX_DECORATOR_LINES = 50
# A ``def`` line and the name it defines; a function name that is an identifier (not
# ``<lambda>`` or ``<module>``) has one.
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)")
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")
# Recorded names like ``<string>`` or ``<ipython-input-3-...>`` have no file behind them.
_NO_FILE = re.compile(r"^<.*>$")
# The tables hold int64: larger counts or times cannot come from a real profile.
INT64_MAX = 2**63 - 1

Timings = dict[tuple[str, int, str], list[tuple[int, int, int]]]


class _PickledLineStats:
    """Plain stand-in the unpickler builds instead of line_profiler's ``LineStats``."""

    state: object = None

    def __setstate__(self, state: object) -> None:
        """Keep the pickled attribute dict for validation; run nothing else."""
        self.state = state


class _LprofUnpickler(pickle.Unpickler):
    """An unpickler that admits only the LineStats class paths and refuses every other global."""

    class_path: tuple[str, str] | None = None

    def find_class(self, module: str, name: str) -> type:
        """Return the stand-in for a LineStats path; refuse anything else before it loads."""
        if (module, name) not in LINESTATS_CLASS_PATHS:
            raise InputError(f"refused: the file asks to load {module}.{name}, "
                             "which a .lprof never holds")
        self.class_path = (module, name)
        return _PickledLineStats


def _unpickle(path: Path) -> tuple[Timings, float, tuple[str, str], int]:
    """Read ``path`` safely: its timings, unit, LineStats class path and pickle protocol."""
    try:
        with open_input(path) as handle:
            data = handle.read(MAX_LPROF_BYTES + 1)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from None
    if len(data) > MAX_LPROF_BYTES:
        data = None
    if data is None:
        raise InputError(f"larger than {MAX_LPROF_BYTES >> 20} MiB: not a line_profiler file",
                         path)
    if len(data) < 2 or data[0] != pickle.PROTO[0] or data[1] < MIN_PICKLE_PROTOCOL:
        raise InputError("not a line_profiler .lprof (no pickle header)", path)
    unpickler = _LprofUnpickler(io.BytesIO(data), encoding=PY2_STRING_ENCODING, errors="replace")
    try:
        stats = unpickler.load()
    except InputError as exc:
        raise InputError(str(exc), path) from None
    except Exception as exc:  # any failure of a damaged pickle: one line, never a traceback
        raise InputError(f"damaged .lprof ({type(exc).__name__}: {exc})", path) from None
    if not isinstance(stats, _PickledLineStats) or unpickler.class_path is None:
        raise InputError("not a line_profiler .lprof (the pickle holds no LineStats)", path)
    timings, unit = _validated(stats.state, path)
    return timings, unit, unpickler.class_path, data[1]


def _is_int(value: object) -> bool:
    """Whether ``value`` is a true int (not a bool) that fits the tables' unsigned int64 range."""
    return type(value) is int and 0 <= value <= INT64_MAX


def _validated(state: object, path: Path) -> tuple[Timings, float]:
    """The timings and unit of a LineStats state, once every field has its documented type."""
    if not isinstance(state, dict) or not {"timings", "unit"} <= state.keys():
        raise InputError("malformed .lprof: LineStats without timings and unit", path)
    timings, unit = state["timings"], state["unit"]
    if type(unit) is not float or not math.isfinite(unit) or unit <= 0:
        raise InputError(f"malformed .lprof: timer unit {unit!r} is not a positive float", path)
    if not isinstance(timings, dict):
        raise InputError("malformed .lprof: timings is not a dict", path)
    MAX_LINE_ENTRIES.check(sum(len(v) if isinstance(v, list) else 0
                               for v in timings.values()), path)
    for key, lines in timings.items():
        if not (type(key) is tuple and len(key) == 3 and type(key[0]) is str
                and _is_int(key[1]) and type(key[2]) is str):
            raise InputError(f"malformed .lprof: function key {error_text(repr(key))} is not "
                             "(file, first line, name)", path)
        if type(lines) is not list or not all(
                type(row) is tuple and len(row) == 3 and _is_int(row[0])
                and _is_int(row[1]) and _is_int(row[2]) for row in lines):
            raise InputError(f"malformed .lprof: lines of {error_text(key[2])} are not "
                             "(line, hits, time) integer triples", path)
    longest = max((row[2] for lines in timings.values() for row in lines), default=0)
    if longest * unit * 1e9 >= INT64_MAX:
        raise InputError("malformed .lprof: a line time beyond 292 years", path)
    return timings, unit


def _parts(recorded: str) -> list[str]:
    """Path components of a recorded filename, whichever OS wrote it."""
    return [part for part in re.split(r"[\\/]+", recorded) if part]


def _trailing_match(candidate: Path, parts: list[str]) -> int:
    """How many trailing components ``candidate`` shares with the recorded path."""
    count = 0
    for mine, theirs in zip(reversed(candidate.parts), reversed(parts), strict=False):
        if mine != theirs:
            break
        count += 1
    return count


def source_roots(lprof_path: Path, source_root: Path | None) -> list[Path]:
    """Folders a source may be read from: the .lprof's, its run folder's, ``--source-root``."""
    here = lprof_path.resolve().parent
    roots = [here]
    run = next((folder for folder in list(here.parents)[:RUN_FOLDER_DEPTH]
                if (folder / MANIFEST_NAME).is_file()), None)
    roots += [folder for folder in (run, source_root) if folder is not None]
    return roots


def _candidates(recorded: str, lprof_path: Path, source_root: Path | None) -> list[Path]:
    """Where a recorded file may be: as recorded, beside the .lprof, then under the root
    (best trailing-path match first); absolute, as inputs.source_refusal would read a
    relative path from the .lprof's folder, not from the working directory."""
    parts = _parts(recorded)
    here = lprof_path.absolute().parent
    found = [Path(recorded) if Path(recorded).is_absolute() else here / recorded,
             here / parts[-1]]
    if source_root is not None and source_root.is_dir():
        matches = sorted(p for p in source_root.absolute().rglob(parts[-1]) if p.is_file())
        found += sorted(matches, key=lambda p: -_trailing_match(p, parts))[:1]
    return found


def find_source(recorded: str, lprof_path: Path, source_root: Path | None
                ) -> tuple[Path | None, SourceHidden | None]:
    """The source file a recorded filename names, or None and why it is not shown.

    Tried as recorded, beside the .lprof, then under ``source_root``; a candidate counts only
    when it exists and may be shown (see :func:`~profreport.inputs.source_refusal`); the last
    one refused says why none is shown.
    """
    if _NO_FILE.match(recorded) or not _parts(recorded):
        return None, SourceHidden("nameless", "the profile names no file")
    roots = source_roots(lprof_path, source_root)
    refusal = None
    for candidate in _candidates(recorded, lprof_path, source_root):
        if not os.path.lexists(candidate) and ".." not in candidate.parts:
            continue
        refusal = source_refusal(candidate, roots, lprof_path)
        if refusal is None:
            return candidate, None
    if refusal is None:
        return None, SourceHidden("absent", "not found beside the .lprof (pass --source-root)")
    return None, SourceHidden("outside" if refusal.outside else "refused", refusal.reason)


def source_mismatch(source: list[str], first_lineno: int, function: str,
                    linenos: list[int], end: int | None) -> str | None:
    """Why a source file is not the one profiled (edited since), judged against what the profile
    recorded for ``function``: its lines exist, the function is defined where it started, no
    line recorded with hits is blank or a comment, and every one lies inside the definition
    (which ends at line ``end``, where the source parses). None when it matches."""
    past = [n for n in linenos if n > len(source)]
    if past:
        return f"line {max(past)} is recorded but the file has {len(source):,} lines"
    name = function.rsplit(".", 1)[-1]  # line_profiler 4.1+ records methods as ``DS.load``
    if _IDENTIFIER.match(name) and _defined_name(source, first_lineno) != name:
        return f"{function}() is not defined at line {first_lineno}"
    empty = next((n for n in linenos if not source[n - 1].strip()
                  or source[n - 1].lstrip().startswith("#")), None)
    if empty is not None:
        return f"line {empty} is recorded with hits but holds no code"
    outside = next((n for n in linenos if end is not None and not first_lineno <= n <= end),
                   None)
    if outside is not None:
        return (f"line {outside} is recorded for {function}(), which spans lines "
                f"{first_lineno}-{end}")
    return None


def _defined_name(source: list[str], first_lineno: int) -> str | None:
    """The name of the function whose code starts at ``first_lineno``: its ``def`` there, or
    past the decorators that start there (line_profiler records a decorated function's first
    decorator line); None when that line opens neither (the file gained or lost lines above)."""
    lines = source[first_lineno - 1:first_lineno - 1 + MAX_DECORATOR_LINES]
    if not lines or not (lines[0].lstrip().startswith("@") or _DEF.match(lines[0])):
        return None
    return next((found.group(1) for found in map(_DEF.match, lines) if found), None)


def _changed_sources(timings: Timings, scopes: _Scopes) -> dict[str, str]:
    """Why each source file found no longer matches the profile (see :func:`source_mismatch`),
    by recorded file: the first function of it that does not match."""
    changed: dict[str, str] = {}
    for (file, first, function), rows in sorted(timings.items()):
        source = scopes.sources.get(file)
        if not source or file in changed:
            continue
        parsed = scopes[file]
        reason = source_mismatch(source, first, function, [row[0] for row in rows],
                                 None if parsed is None else parsed.function_end(first))
        if reason:
            changed[file] = reason
    return changed


def _source_table(sources: dict[str, list[str] | None]) -> pd.DataFrame:
    """Every line of every source file found: file, lineno (1-based), source."""
    frames = [pd.DataFrame({"file": file, "lineno": range(1, len(lines) + 1), "source": lines})
              for file, lines in sources.items() if lines]
    columns = {"file": "object", "lineno": "int64", "source": "object"}
    return pd.concat(frames, ignore_index=True).astype(columns) if frames else pd.DataFrame(
        {name: pd.Series(dtype=dtype) for name, dtype in columns.items()})


_FUNCTION_KEY = ["file", "first_lineno", "function"]


class _Scopes(dict[str, SourceScopes | None]):
    """The parsed scopes of each shown source file, parsed when first asked for, and of the
    modules they import, read where they may be shown (``roots``, inputs.shown_source)."""

    def __init__(self, sources: dict[str, list[str] | None], paths: dict[str, Path | None],
                 roots: list[Path], owner: Path) -> None:
        super().__init__()
        self.sources = sources
        self.paths = paths
        self.modules = ModuleSources(partial(shown_source, roots=roots, owner=owner))

    def __missing__(self, file: str) -> SourceScopes | None:
        source = self.sources.get(file)
        self[file] = SourceScopes(source, self.paths.get(file), self.modules) if source else None
        return self[file]


def _lines_table(timings: Timings, unit: float, sources: dict[str, list[str] | None],
                 scopes: _Scopes) -> pd.DataFrame:
    """The ``lines`` table: one row per recorded line, times in ns, share of its function."""
    keys = list(timings)
    frame = pd.DataFrame(
        [(file, function, first, *row) for (file, first, function) in keys
         for row in timings[(file, first, function)]],
        columns=["file", "function", "first_lineno", "lineno", "hits", "ticks"])
    frame["time_ns"] = ticks_to_ns(frame["ticks"], unit)
    frame["time_per_hit_ns"] = (frame["time_ns"] // frame["hits"].clip(lower=1)).astype("int64")
    total = frame.groupby(_FUNCTION_KEY)["time_ns"].transform("sum")
    frame["function_share"] = (frame["time_ns"] / total.where(total > 0)).fillna(0.0)
    frame = frame.merge(_source_table(sources), on=["file", "lineno"], how="left")
    frame["source"] = frame["source"].astype("object").where(frame["source"].notna(), None)
    frame["is_sync_point"] = frame["source"].map(is_sync_point_line).astype(bool)
    frame = frame.sort_values(_FUNCTION_KEY + ["lineno"], kind="stable").reset_index(drop=True)
    frame["statement"] = statements(frame, scopes)
    frame["is_dataloader_loop"] = loops_over_loaders(frame, scopes)
    frame["is_loop_header"] = loop_headers(frame)
    return frame


def statements(frame: pd.DataFrame, scopes: _Scopes) -> pd.Series:
    """What each line's source is read as when telling loops apart: the line itself, or, for
    the first line of a loop header written over several lines (``for i, b in
    enumerate(train_loader,``), the whole header on one line (SourceScopes.loop_headers), since
    that line alone is no statement. The ``source`` shown stays the line as written."""
    statement = frame["source"].copy()
    for file, rows in frame.groupby("file", sort=False).groups.items():
        around = scopes[str(file)]
        if around is None or not around.loop_headers:
            continue
        headers = frame.loc[rows, "lineno"].map(around.loop_headers)
        statement[headers.index[headers.notna()]] = headers[headers.notna()]
    return statement


def loops_over_loaders(frame: pd.DataFrame, scopes: _Scopes) -> pd.Series:
    """Lines the source shows looping over a DataLoader (``frame`` sorted by function, line;
    pysource.is_dataloader_loop_line): a ``for`` whose line names one (``for x, y in
    train_loader:``), or over a name that a line of its function before it assigns one (``dl =
    DataLoader(ds)``, then ``for x, y in dl:``), else the scopes around its function do (an
    enclosing function's or the module's ``dl``), as _assigned_origin reads them."""
    named = pd.Series(False, index=frame.index)
    for index in frame.index[frame["statement"].map(is_loop_line).astype(bool)]:
        named[index] = is_dataloader_loop_line(
            frame.loc[index, "statement"], partial(_assigned_origin, frame, index, scopes=scopes))
    return named


def _assigned_origin(frame: pd.DataFrame, index: int, name: str, scopes: _Scopes
                     ) -> str | None:
    """What the source shows assigned to ``name`` where the line at ``index`` uses it: its
    function's last assignment before it, else the scopes around its function (the file
    parsed once, see pysource.SourceScopes). In a file that does not parse whole, the last of
    its function's lines shown before it that assigns ``name`` (``it = iter(train_loader)``,
    each line read alone); None when no line shown does (a parameter, a line not profiled)."""
    row = frame.loc[index]
    around = scopes[str(row["file"])]
    if around is not None and around.parsed:
        return around.assigned(int(row["first_lineno"]), int(row["lineno"]), name)
    rows = _function_rows(frame, index)
    assigned = [value for value in (assigned_value(source, name)
                                    for source in rows.loc[rows.index < index, "source"])
                if value is not None]
    return assigned[-1] if assigned else None


def ticks_to_ns(ticks: pd.Series, unit: float) -> pd.Series:
    """Timer ticks as int64 ns: an exact integer product when a tick is a whole number of ns
    (line_profiler 4+ counts ns; a float product would lose the last digits of long times)."""
    per_tick = unit * 1e9
    whole = round(per_tick)
    if whole >= 1 and math.isclose(per_tick, whole, rel_tol=1e-9):
        return ticks.astype("int64") * whole
    return (ticks.astype("float64") * per_tick).round().astype("int64")


def loop_headers(frame: pd.DataFrame) -> pd.Series:
    """Lines whose hit counts are those of a loop header (``frame`` sorted by function, line).

    A loop entered ``n`` times (the hits of the line before it) whose body ran ``m`` times has
    its header hit ``m + n`` times: once more per entry, for the test that ends it (``m`` when
    every entry left through ``break``/``return``). The body runs more often than the line
    before the loop, which no straight-line code does. A loop that opens its function has no
    line before it: it is a header where its source line is shown opening a loop. A line the
    source shows to be a statement that opens no loop is never one.
    """
    by_function = frame.groupby(_FUNCTION_KEY, sort=False)["hits"]
    before, body = by_function.shift(1), by_function.shift(-1)
    hits = frame["hits"]
    counted = (body > before) & (hits >= body) & (hits <= body + before)
    # A loop that opens its function has no line before it to count its entries: the source
    # shown says it is a loop, and its first body line must still run in its passes.
    shown = frame["statement"].map(is_loop_line).astype(bool) & before.isna() & (body > 0) \
        & (hits >= body)
    # A line the source shows to be another statement is no header, though its counts fit
    # (the line after ``except StopIteration: break`` follows a line run once).
    return ((counted | shown) & ~frame["statement"].map(opens_no_loop).astype(bool)).astype(bool)


def _body_hits(iterations: int, entries: int) -> int:
    """The fewest hits of a line that runs in every pass of a loop: each entry's last pass may
    stop at a ``break`` (``while True: ... next(it) ... break``), so such a line runs at least
    once per pass but one per entry; a line after the loop runs once per entry, so fewer."""
    return max(iterations - entries, entries + 1)


def _entries(frame: pd.DataFrame, header: int, iterations: int) -> tuple[int, bool]:
    """How many times the loop at ``header`` was entered, and whether every entry left early.

    An entry that runs the loop to its end tests the header once more than the body runs; one
    left through break/return does not. So the extra hits count the entries, and none extra
    means every entry left early (then the line before tells the entries). The line before
    cannot count them first: an enclosing loop's header (over epochs) runs once more than it
    enters this loop.
    """
    hits = int(frame.loc[header, "hits"])
    if hits != iterations:
        return hits - iterations, False
    same = header - 1 in frame.index and all(
        frame.loc[header - 1, key] == frame.loc[header, key] for key in _FUNCTION_KEY)
    return (int(frame.loc[header - 1, "hits"]) if same else 1), True


def _iterations(frame: pd.DataFrame, header: int) -> int:
    """The passes of the loop at ``header``: how often its first body line began. That is the
    line's hits, unless it is itself an inner loop's header, hit once per pass of the inner
    loop and once more per entry: then the inner loop's entries, one per pass of this one."""
    first = header + 1
    if bool(frame.loc[first, "is_loop_header"]):  # the inner body's line is in the function
        return _entries(frame, first, _iterations(frame, first))[0]
    return int(frame.loc[first, "hits"])


def _function_rows(frame: pd.DataFrame, line: int) -> pd.DataFrame:
    """The rows of the function of row ``line`` (``frame`` sorted by function, line, with a
    RangeIndex, as parse builds it): a run of rows, found by bisection, not by comparing every
    row (a profile may time thousands of loops, each asking)."""
    columns = [frame[key].to_numpy() for key in _FUNCTION_KEY]

    def key(at: int) -> tuple[object, ...]:
        return tuple(column[at] for column in columns)

    rows, own = range(len(frame)), key(line)
    return frame.iloc[bisect.bisect_left(rows, own, key=key):
                      bisect.bisect_right(rows, own, key=key)]


def _body(frame: pd.DataFrame, header: int, iterations: int, entries: int) -> pd.DataFrame:
    """The rows of a loop's body: the later lines of its function that run in every pass (see
    _body_hits)."""
    rows = _function_rows(frame, header)
    return rows[(rows.index > header) & (rows["hits"] >= _body_hits(iterations, entries))]


def loop_lines(lines: pd.DataFrame, loop: TrainingLoop) -> pd.DataFrame:
    """The rows of a ``lines`` table (as parse builds it) that ``loop`` runs in its passes: its
    header and the body lines that run in every pass (see _body)."""
    frame = lines.reset_index(drop=True)
    header = frame.index[(frame["file"] == loop.file) & (frame["function"] == loop.function)
                         & (frame["lineno"] == loop.lineno)]
    if not len(header):
        return frame.iloc[0:0]
    return pd.concat([frame.loc[[header[0]]],
                      _body(frame, header[0], loop.iterations, loop.entries)])


def _loop_of(frame: pd.DataFrame, header: int) -> TrainingLoop:
    """A loop header's facts: entries, iterations, its time, and its body's; the DataLoader wait
    is the header's time until the source says otherwise (see _counting_loop)."""
    row = frame.loc[header]
    iterations = _iterations(frame, header)
    entries, ended_by_break = _entries(frame, header, iterations)
    body = _body(frame, header, iterations, entries)
    times = body["time_ns"].to_numpy()
    largest = int(times.argmax()) if len(times) else None
    return TrainingLoop(file=str(row["file"]), function=str(row["function"]),
                        lineno=int(row["lineno"]), hits=int(row["hits"]), iterations=iterations,
                        entries=entries, ended_by_break=ended_by_break,
                        time_ns=int(row["time_ns"]), body_ns=int(times.sum()),
                        largest_body_line_ns=0 if largest is None else int(times[largest]),
                        largest_body_lineno=None if largest is None
                        else int(body["lineno"].to_numpy()[largest]),
                        steps=int(body["hits"].min()) if ended_by_break and not body.empty
                        else iterations,
                        wait_lineno=int(row["lineno"]), wait_ns=int(row["time_ns"]))


def _counting_loop(frame: pd.DataFrame, header: int, loop: TrainingLoop,
                   scopes: _Scopes) -> TrainingLoop:
    """A loop whose header the source shows counting passes (``for step in range(steps):``).

    Its header fetches nothing, so its time is no DataLoader wait. The batch is fetched in the
    body (``batch = next(it)``): when the source shows that iterator to be a DataLoader's
    (``it = iter(train_loader)`` before the loop, or a name such as ``loader_iter``), the wait
    is that line's time (confidence high); when it does not show where the iterator comes from
    (medium), or no body line fetches (the function's name alone says it trains: low), the loop
    is still the training loop, its passes the steps, but the DataLoader wait is unknown.
    """
    fetch = _batch_fetch(frame, header, loop, scopes)
    counted = replace(loop, evidence="source", source_shown=True, counts_passes=True,
                      wait_lineno=None, wait_ns=0)
    if fetch is None:
        named = is_training_function(loop.function)
        return replace(counted, training_name=named, dataloader=named,
                       confidence="low" if named else "none")
    row, iterator, origin, loader = fetch
    counted = replace(counted, dataloader=True, fetch_lineno=int(row["lineno"]),
                      fetch_from=iterator, fetch_origin=origin, confidence="medium")
    if not loader:
        return counted
    named = named_only(iterator, partial(_assigned_origin, frame, header, scopes=scopes))
    return replace(counted, confidence="high", wait_lineno=int(row["lineno"]),
                   wait_ns=int(row["time_ns"]), evidence="name" if named else "source",
                   named_by=iterator if named else None)


def _batch_fetch(frame: pd.DataFrame, header: int, loop: TrainingLoop, scopes: _Scopes
                 ) -> tuple[pd.Series, str, str | None, bool] | None:
    """The body line of a loop counting passes that fetches its batch: the line, the iterator
    it fetches from (``it`` of ``next(it)``), what the source shows that to be, and whether
    that is a DataLoader's (pysource.dataloader_origin). The first line fetching from a
    DataLoader's iterator, else the first fetching from one whose origin the source does not
    show (a parameter: it may be a DataLoader's); a ``next()`` of what the source shows to be
    something else (``next(model.parameters())``, ``next(iter([0.1, 0.01]))``) fetches no
    batch. None when no line fetches one."""
    assigned = partial(_assigned_origin, frame, header, scopes=scopes)
    unseen = None
    for _, row in _body(frame, header, loop.iterations, loop.entries).iterrows():
        iterator = fetched_iterator(row["source"])
        origin, verdict = dataloader_origin(iterator, assigned) if iterator else (None, False)
        if verdict:
            return row, str(iterator), origin, True
        if verdict is None and unseen is None:
            unseen = (row, str(iterator), origin, False)
    return unseen


def _counts_around_a_loop(frame: pd.DataFrame, header: int, headers: list[int]) -> bool:
    """Whether the loop at ``header`` is shown counting passes (``for epoch in range(3):``)
    around another loop header: its passes are the inner loop's entries, and the batches are
    fetched by the inner loop, which is the training loop."""
    if not counts_passes(frame.loc[header, "statement"]):
        return False
    loop = _loop_of(frame, header)
    body = _body(frame, header, loop.iterations, loop.entries).index
    return any(inner in body for inner in headers if inner != header)


def training_loop(frame: pd.DataFrame, scopes: _Scopes) -> TrainingLoop | None:
    """The training loop among the loop headers (the one with the most time in itself and its
    body), whether its header is the line that fetches batches, the evidence, how sure.

    With the source shown, a ``for`` over a DataLoader says so (confidence high), and such a
    loop is taken before any other. A header shown counting passes (``for step in
    range(steps):``) fetches nothing: its body's fetch tells the wait (see _counting_loop), and
    around another loop (over epochs) it gives way to that loop.
    Without the source, or when the line shown names no DataLoader (``for x, y in
    self.dl:``), two signs say that the header fetches batches: it takes more time than any
    line of its body (``next(loader)`` runs in the header), and the function's name says it
    trains. Both: medium confidence; one: low; none: the loop is recorded but not taken for the
    DataLoader loop.
    """
    headers = [i for i in frame.index[frame["is_loop_header"] | frame["is_dataloader_loop"]]
               if i + 1 in frame.index]
    if not headers:
        return None
    # A loop the source shows iterating over a DataLoader is the one, though an outer loop
    # (over epochs) holds more time; so is a loop inside one shown counting passes.
    marked = [i for i in headers if frame.loc[i, "is_dataloader_loop"]]
    loop = max((_loop_of(frame, i) for i in marked or headers
                if not _counts_around_a_loop(frame, i, headers)),
               key=lambda item: item.time_ns + item.body_ns)
    header = frame.index[(frame["file"] == loop.file) & (frame["function"] == loop.function)
                         & (frame["lineno"] == loop.lineno)][0]
    row = frame.loc[header]
    if bool(row["is_dataloader_loop"]):
        iterable = loop_iterable(row["statement"])
        named = iterable is not None and named_only(
            iterable, partial(_assigned_origin, frame, header, scopes=scopes))
        return replace(loop, evidence="name" if named else "source",
                       named_by=iterable if named else None, dataloader=True, confidence="high")
    if counts_passes(row["statement"]):
        return _counting_loop(frame, header, loop, scopes)
    largest = loop.time_ns > loop.largest_body_line_ns
    named = is_training_function(loop.function)
    return replace(loop, evidence="hit counts", header_is_largest=largest,
                   source_shown=row["source"] is not None,
                   training_name=named, dataloader=largest or named,
                   confidence={2: "medium", 1: "low", 0: "none"}[int(largest) + int(named)])


def _mark_loader(frame: pd.DataFrame, loop: TrainingLoop | None) -> pd.DataFrame:
    """Flag the line whose time is the DataLoader wait (the training loop's header, or the body
    line fetching from a DataLoader's iterator) as the DataLoader line."""
    if loop is not None and loop.dataloader and loop.wait_lineno is not None:
        frame.loc[(frame["file"] == loop.file) & (frame["function"] == loop.function)
                  & (frame["lineno"] == loop.wait_lineno), "is_dataloader_loop"] = True
    return frame


#: Why a line profile that times no line holds nothing to analyse.
NO_LINES = ("nothing to analyse: the line profile times no line: kernprof -l times only the "
            "functions decorated with @profile that ran, so a training loop at module level is "
            "in none (move it into a function)")


def _note(function: LprofFunction, hidden: SourceHidden) -> str:
    """The note saying that a function's source is not shown, and why."""
    return (f"source of {error_text(function.function)} "
            f"({error_text(function.file)}) not shown: {hidden.reason}")


#: The DataLoader calls a note names by line at most (a source may hold any number).
LOADER_CALLS_NAMED = 3


def _loader_knobs(scopes: _Scopes) -> tuple[dict[str, object], str]:
    """The DataLoader knobs the ``DataLoader(...)`` calls of the shown sources and of the
    modules beside them their loaders were followed into (``from data import make_loader``:
    ModuleSources.followed) all give alike (a knob two calls set apart is not the run's), and
    where the calls are (``train.py line 12``, ``data.py line 7``); ``({}, "")`` when they show
    no such call. Read from the syntax tree, never run."""
    shown = [file for file, lines in scopes.sources.items() if lines]
    files = {str(where.resolve()) for file in shown
             for where in (scopes.paths.get(file),) if where is not None}
    calls = [(file, line, knobs) for file in shown
             for line, knobs in scopes[file].loader_calls]  # type: ignore[union-attr]
    calls += [(str(path), line, knobs) for path, module in scopes.modules.followed.items()
              if str(path.resolve()) not in files for line, knobs in module.loader_calls]
    if not calls:
        return {}, ""
    agreed = {name: value for name, value in calls[0][2].items()
              if all(name in knobs and knobs[name] == value for _, _, knobs in calls)}
    where = ", ".join(f"{error_text(Path(file).name)} line {line}"
                      for file, line, _ in calls[:LOADER_CALLS_NAMED])
    more = len(calls) - LOADER_CALLS_NAMED
    return agreed, where + (f" and {more:,} more" if more > 0 else "")


def parse(path: Path, *, source_root: Path | None = None) -> Profile:
    """Parse a line_profiler ``.lprof`` into a Profile with the ``lines`` table."""
    path = Path(path)
    timings, unit, class_path, protocol = _unpickle(path)
    located = {file: find_source(file, path, source_root) for file, _, _ in timings}
    sources = {file: source_lines(where) for file, (where, _) in located.items()}
    scopes = _Scopes(sources, {file: where for file, (where, _) in located.items()},
                     source_roots(path, source_root), path)
    # A file edited since it was profiled would put other lines beside the times, and steer
    # the search for the training loop: it is not shown.
    for file, reason in _changed_sources(timings, scopes).items():
        sources[file] = None
        located[file] = None, SourceHidden("edited", f"it no longer matches the profile: {reason}")
        scopes[file] = None
    functions = [LprofFunction(file=file, function=name, first_lineno=first,
                               source_path=None if located[file][0] is None
                               else str(located[file][0]), source_hidden=located[file][1])
                 for file, first, name in sorted(timings)]
    frame = _lines_table(timings, unit, sources, scopes)
    loop = training_loop(frame, scopes)
    loader_knobs, loader_calls = _loader_knobs(scopes)
    meta = LprofMeta(unit=unit, functions=functions, pickle_protocol=protocol,
                     class_path=".".join(class_path), loop=loop, loader_knobs=loader_knobs,
                     loader_calls=loader_calls,
                     notes=[_note(f, f.source_hidden) for f in functions if f.source_hidden],
                     empty=None if not frame.empty else NO_LINES)
    return Profile(path=path, kind="lprof", tool_version=LINESTATS_CLASS_PATHS[class_path],
                   tables={"lines": conform("lines", _mark_loader(frame, loop))}, meta=meta)


def parse_input(path: Path, options: ParseOptions) -> Profile:
    """The registry's entry point (``parsers.FORMATS``): :func:`parse` with its options."""
    return parse(path, source_root=options.source_root)
