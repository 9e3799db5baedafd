"""line_profiler's ``.lprof`` files, read with an unpickler that runs nothing from the file.

An ``.lprof`` is a pickled ``LineStats(timings, unit)``: ``timings`` maps
``(filename, first_lineno, function_name)`` to ``[(lineno, nhits, total_time), ...]`` and
``unit`` is seconds per timer tick. The class lives at a different path in each era of
line_profiler; those paths are the only globals the unpickler admits, and each becomes the plain
:class:`_PickledLineStats` here, never line_profiler's own class.
"""

from __future__ import annotations

import io
import math
import pickle
import re
import tokenize
from pathlib import Path
from typing import Any

import pandas as pd

from profreport.concepts import is_dataloader_loop_line
from profreport.errors import InputError
from profreport.model import Profile, conform

#: Where each era of line_profiler defines the pickled class, and the era that path tells.
LINESTATS_CLASS_PATHS: dict[tuple[str, str], str] = {
    ("line_profiler", "LineStats"): "line_profiler 1.x/2.x",
    ("line_profiler._line_profiler", "LineStats"): "line_profiler 4.x/5.0",
    ("line_profiler.line_profiler", "LineStats"): "line_profiler 3.x or 5.1+",
}
# kernprof always pickles with HIGHEST_PROTOCOL, which is 2 even on Python 2.
MIN_PICKLE_PROTOCOL = 2
# A whole program profiled line by line is a few MB; anything far larger is not a real .lprof.
MAX_LPROF_BYTES = 64 * 1024 * 1024
# Bounds the work of validation: shared sub-lists could otherwise make it quadratic.
MAX_LINES = 5_000_000
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
        data = path.read_bytes() if path.stat().st_size <= MAX_LPROF_BYTES else None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from None
    if data is None:
        raise InputError(f"larger than {MAX_LPROF_BYTES >> 20} MiB: not a line_profiler file",
                         path)
    if len(data) < 2 or data[0] != pickle.PROTO[0] or data[1] < MIN_PICKLE_PROTOCOL:
        raise InputError("not a line_profiler .lprof (no pickle header)", path)
    unpickler = _LprofUnpickler(io.BytesIO(data))
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
    if sum(len(v) if isinstance(v, list) else 0 for v in timings.values()) > MAX_LINES:
        raise InputError(f"malformed .lprof: more than {MAX_LINES} profiled lines", path)
    for key, lines in timings.items():
        if not (type(key) is tuple and len(key) == 3 and type(key[0]) is str
                and _is_int(key[1]) and type(key[2]) is str):
            raise InputError(f"malformed .lprof: function key {key!r:.80} is not "
                             "(file, first line, name)", path)
        if type(lines) is not list or not all(
                type(row) is tuple and len(row) == 3 and _is_int(row[0])
                and _is_int(row[1]) and _is_int(row[2]) for row in lines):
            raise InputError(f"malformed .lprof: lines of {key[2]} are not "
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


def find_source(recorded: str, lprof_path: Path, source_root: Path | None) -> Path | None:
    """The source file a recorded filename names: as recorded, beside the .lprof, or under root."""
    parts = _parts(recorded)
    if _NO_FILE.match(recorded) or not parts:
        return None
    here = lprof_path.parent
    as_recorded = Path(recorded) if Path(recorded).is_absolute() else here / Path(*parts)
    found = next((c for c in (as_recorded, here / parts[-1]) if c.is_file()), None)
    if found is not None or source_root is None:
        return found
    matches = sorted(p for p in source_root.rglob(parts[-1]) if p.is_file())
    return max(matches, key=lambda p: _trailing_match(p, parts), default=None)


def _source_lines(path: Path | None) -> list[str] | None:
    """The lines of a source file, decoded as Python decodes it; None when unreadable."""
    if path is None:
        return None
    try:
        with tokenize.open(path) as handle:
            return handle.read().splitlines()
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def _source_table(sources: dict[str, list[str] | None]) -> pd.DataFrame:
    """Every line of every source file found: file, lineno (1-based), source."""
    frames = [pd.DataFrame({"file": file, "lineno": range(1, len(lines) + 1), "source": lines})
              for file, lines in sources.items() if lines]
    columns = {"file": "object", "lineno": "int64", "source": "object"}
    return pd.concat(frames, ignore_index=True).astype(columns) if frames else pd.DataFrame(
        {name: pd.Series(dtype=dtype) for name, dtype in columns.items()})


def _lines_table(timings: Timings, unit: float, sources: dict[str, list[str] | None]
                 ) -> pd.DataFrame:
    """The ``lines`` table: one row per recorded line, times in ns, share of its function."""
    keys = list(timings)
    frame = pd.DataFrame(
        [(file, function, first, *row) for (file, first, function) in keys
         for row in timings[(file, first, function)]],
        columns=["file", "function", "first_lineno", "lineno", "hits", "ticks"])
    frame["time_ns"] = (frame["ticks"].astype("float64") * (unit * 1e9)).round().astype("int64")
    frame["time_per_hit_ns"] = (frame["time_ns"] // frame["hits"].clip(lower=1)).astype("int64")
    total = frame.groupby(["file", "first_lineno", "function"])["time_ns"].transform("sum")
    frame["function_share"] = (frame["time_ns"] / total.where(total > 0)).fillna(0.0)
    frame = frame.merge(_source_table(sources), on=["file", "lineno"], how="left")
    frame["source"] = frame["source"].astype("object").where(frame["source"].notna(), None)
    frame["is_dataloader_loop"] = frame["source"].map(is_dataloader_loop_line).astype(bool)
    frame = frame.sort_values(["file", "first_lineno", "lineno"], kind="stable")
    return conform("lines", frame)


def parse(path: Path, *, source_root: Path | None = None) -> Profile:
    """Parse a line_profiler ``.lprof`` into a Profile with the ``lines`` table."""
    path = Path(path)
    timings, unit, class_path, protocol = _unpickle(path)
    located = {file: find_source(file, path, source_root) for file, _, _ in timings}
    sources = {file: _source_lines(where) for file, where in located.items()}
    functions = [{"file": file, "function": name, "first_lineno": first,
                  "source_path": None if located[file] is None else str(located[file])}
                 for file, first, name in sorted(timings)]
    meta: dict[str, Any] = {"unit": unit, "functions": functions, "pickle_protocol": protocol,
                            "class_path": ".".join(class_path)}
    return Profile(path=path, kind="lprof", tool_version=LINESTATS_CLASS_PATHS[class_path],
                   tables={"lines": _lines_table(timings, unit, sources)}, meta=meta)
