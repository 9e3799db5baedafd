"""The input-safety layer every parser goes through: file kinds, limits, path containment.

- :func:`check_regular_file` / :func:`open_input`: only regular files are read; a FIFO, device,
  socket or folder gets one clear line, and opening never blocks on a FIFO (``O_NONBLOCK``, then
  ``fstat`` on the opened descriptor, so the check and the read concern the same file).
- :class:`Limit` and the ``MAX_*`` limits: named bounds with the reason for each; exceeding one is
  an :class:`~profreport.errors.InputError` that says which limit and why.
- :class:`TimeBounds` and :data:`EVENT_TIMES`: the one rule for times no profiler records
  (every format drops and counts such records instead of analysing them).
- :class:`BoundedReader`: a stream that stops with that error after a byte limit (decompression).
- :func:`resolve_inside`: a path an input names (a source file, a manifest artifact) resolved and
  refused unless it lies inside the allowed roots, never in ``/proc``, ``/sys`` or ``/dev``.
- :func:`source_refusal` / :func:`source_lines`: a Python source file shown beside a profile (a
  profiled line's, a module it imports) only when it may be, and read as text, never run.
"""

from __future__ import annotations

import io
import os
import stat
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from profreport.errors import InputError
from profreport.text import error_text, python_lines

#: Folders whose files are never read as inputs or sources: kernel and device views, whose
#: "files" hold the process environment, memory maps and devices, never a profile or a source.
SYSTEM_FOLDERS = (Path("/proc"), Path("/sys"), Path("/dev"))

#: What each non-regular file kind is called in an error line.
_KIND_NAMES = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


@dataclass(frozen=True)
class Limit:
    """A named bound on what one input may hold, with the reason it is safe to refuse beyond it."""

    what: str
    value: int
    reason: str

    def exceeded(self, amount: int) -> str:
        """The error message for ``amount`` over this limit."""
        return (f"too large: {amount:,} {self.what} where at most {self.value:,} are read "
                f"({self.reason})")

    def check(self, amount: int, path: str | Path | None = None) -> None:
        """InputError naming this limit when ``amount`` exceeds it."""
        if amount > self.value:
            raise InputError(self.exceeded(amount), path)


#: Bytes of one decompressed trace: 8 GiB is several times the largest trace a training step
#: produces, and more than this machine's memory can hold as tables.
MAX_DECOMPRESSED_BYTES = Limit(
    "decompressed bytes", 8 << 30,
    "more than any real trace holds; a larger one would exhaust memory")
#: Decompressed/compressed size ratio: JSON traces compress about 10-20x; whitespace or one
#: repeated name compresses ~1000x, which only a crafted file ("gzip bomb") reaches.
MAX_COMPRESSION_RATIO = 200
#: Bytes a gzip input may expand to whatever its size: 256 MiB lets small real traces through.
MIN_DECOMPRESSED_ALLOWANCE = 256 << 20
#: Characters of one name (kernel, op, file): C++ template kernel names reach a few thousand.
MAX_NAME_CHARS = Limit(
    "characters in one name", 65_536,
    "no real kernel, op or file name is this long")
#: Trace events in one file: a 1 GB Kineto trace holds about 5 million.
MAX_EVENTS = Limit(
    "events", 50_000_000,
    "ten times the largest real trace; more would exhaust memory")
#: line_profiler entries (file, line) in one .lprof: a large program has tens of thousands.
MAX_LINE_ENTRIES = Limit(
    "line entries", 1_000_000,
    "a program profiled line by line never has this many timed lines")
#: Nesting depth of JSON values: Kineto's deepest is 4 (traceEvents > event > args > list).
MAX_JSON_DEPTH = Limit(
    "levels of nesting", 64,
    "real traces nest 4 deep; deeper nesting only serves to exhaust the stack")

#: Text before a Kineto trace's ``traceEvents``: a few kB in every trace.
MAX_HEADER_BYTES = Limit("bytes before traceEvents", 64 << 20,
                         "Kineto writes a few kB of members before its event array")
#: One Kineto event's text: real events are well under 100 kB even with shapes and stacks.
MAX_EVENT_BYTES = Limit("bytes in one event or between two", 16 << 20,
                        "real events are well under 100 kB, even with shapes and stacks")


@dataclass(frozen=True)
class TimeBounds:
    """The times a real capture can record; a record outside them is dropped and counted."""

    #: Latest possible time, in ns: int64 with room for ``start + duration``.
    max_time_ns: int
    #: Longest possible single event, in ns.
    max_duration_ns: int
    #: What the times outside the bounds are, for the notes that count them.
    reason: str


#: One bound for every format: no kernel, API call, operator or range of a profiling session
#: lasts a week (sessions last minutes to hours), and 2**62 ns is 146 years past any clock's
#: origin (INT64_MAX, nsys's "never ended" marker, lies beyond it).
EVENT_TIMES = TimeBounds(
    max_time_ns=1 << 62, max_duration_ns=7 * 24 * 3600 * 10**9,
    reason="negative, ending before they start, past 2**62 ns or lasting over a week")


def _kind_name(mode: int) -> str | None:
    """What a non-regular file is called, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KIND_NAMES if test(mode)), "not a regular file")


def not_regular_reason(mode: int) -> str | None:
    """Why a file of this ``st_mode`` is not read, or None when it is a regular file."""
    kind = _kind_name(mode)
    return None if kind is None else f"{kind}, not a regular file: only files are read"


def check_regular_file(path: str | Path) -> os.stat_result:
    """The file's stat when it is a regular file; one-line InputError for anything else."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from None
    reason = not_regular_reason(info.st_mode)
    if reason is not None:
        raise InputError(reason, path)
    return info


def open_input(path: str | Path) -> BinaryIO:
    """Open a regular file for binary reading without ever blocking on a FIFO or device."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from None
    try:
        reason = not_regular_reason(os.fstat(fd).st_mode)
        if reason is not None:
            raise InputError(reason, path)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def decompressed_limit(compressed_bytes: int) -> int:
    """How many bytes a compressed input of this size may expand to."""
    return min(MAX_DECOMPRESSED_BYTES.value,
               max(MIN_DECOMPRESSED_ALLOWANCE, MAX_COMPRESSION_RATIO * compressed_bytes))


class BoundedReader(io.RawIOBase):
    """A read-only stream over ``raw`` that raises InputError once ``limit`` bytes are passed."""

    def __init__(self, raw: BinaryIO, limit: int, path: str | Path | None = None,
                 what: str = "decompressed bytes") -> None:
        super().__init__()
        self._raw, self._limit, self._path, self._what = raw, limit, path, what
        self.consumed = 0

    def readable(self) -> bool:
        """Always readable."""
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        """Fill ``buffer`` from the wrapped stream, counting bytes against the limit."""
        data = self._raw.read(min(len(buffer), self._limit + 1 - self.consumed) or 1)
        self.consumed += len(data)
        if self.consumed > self._limit:
            raise InputError(
                f"too large: more than {self._limit:,} {self._what} (a compressed file that "
                "expands this much is a decompression bomb, not a trace)", self._path)
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        """Close this stream and the wrapped one."""
        self._raw.close()
        super().close()


class RefusedPathError(InputError):
    """A path named inside an input is refused (outside the allowed roots, a system folder)."""

    def __init__(self, named: str | Path, reason: str, owner: str | Path | None = None, *,
                 outside: bool = False) -> None:
        super().__init__(f"refused {error_text(named)!s}: {reason}", owner)
        self.reason = reason
        #: Refused only for lying outside every allowed root (a root holding it would admit it).
        self.outside = outside


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies below it (both already resolved)."""
    return path == folder or folder in path.parents


def resolve_inside(named: str | Path, roots: list[Path] | tuple[Path, ...],
                   base: Path | None = None, owner: str | Path | None = None) -> Path:
    """The real path of ``named`` (relative to ``base``, default the first root) when it lies
    inside one of ``roots``; RefusedPathError (naming ``owner``, the input) otherwise.

    Refused: NUL bytes, any ``..`` component, anything in /proc, /sys or /dev, and symbolic
    links whose target lies outside every root.
    """
    text = str(named)
    if not text or "\x00" in text:
        raise RefusedPathError(named, "not a usable path", owner)
    candidate = Path(text)
    if ".." in candidate.parts:
        raise RefusedPathError(named, "it names a parent folder ('..')", owner)
    if not candidate.is_absolute():
        start = base if base is not None else (roots[0] if roots else None)
        if start is None:
            raise RefusedPathError(named, "a relative path with no folder to read it from", owner)
        candidate = start / candidate
    real = Path(os.path.realpath(candidate))
    if any(_inside(real, folder) or _inside(candidate, folder) for folder in SYSTEM_FOLDERS):
        raise RefusedPathError(named, "system folders (/proc, /sys, /dev) are never read", owner)
    real_roots = [Path(os.path.realpath(root)) for root in roots]
    if not any(_inside(real, root) for root in real_roots):
        link = " (through a symbolic link)" if real != Path(os.path.abspath(candidate)) else ""
        places = ", ".join(error_text(root) for root in real_roots) or "no folder"
        raise RefusedPathError(named, f"it lies outside {places}{link}", owner, outside=True)
    return real


#: Bytes of one source file read for its lines: real modules are far smaller.
MAX_SOURCE_BYTES = 8 * 1024 * 1024
#: Only Python source is ever read as a "source file" (never /etc/passwd and the like).
PYTHON_SUFFIXES = (".py", ".pyw")


@dataclass(frozen=True)
class Refusal:
    """Why a file may not be shown as source, and whether only for lying outside the roots."""

    reason: str
    #: Refused for lying outside every root it may be read from (RefusedPathError.outside).
    outside: bool = False


def source_refusal(candidate: Path, roots: list[Path], owner: Path | None = None
                   ) -> Refusal | None:
    """Why ``candidate`` may not be shown as source (outside ``roots`` or in a system folder,
    see resolve_inside; no regular Python file; over MAX_SOURCE_BYTES), or None when it may."""
    try:
        real = resolve_inside(candidate, roots, owner=owner)
    except RefusedPathError as exc:
        return Refusal(exc.reason, exc.outside)
    if real.suffix not in PYTHON_SUFFIXES:
        return Refusal("not a Python source file (.py)")
    try:
        info = real.stat()
    except OSError as exc:
        return Refusal(f"cannot read: {exc.strerror or exc}")
    if not stat.S_ISREG(info.st_mode):
        return Refusal("not a regular file")
    if info.st_size > MAX_SOURCE_BYTES:
        return Refusal("larger than a source file can be")
    return None


def source_lines(path: Path | None) -> list[str] | None:
    """The lines of a source file, decoded and numbered as Python reads it (text.python_lines);
    None when unreadable."""
    if path is None:
        return None
    try:
        with tokenize.open(path) as handle:  # universal newlines
            return python_lines(handle.read(MAX_SOURCE_BYTES))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def shown_source(path: Path, roots: list[Path], owner: Path | None = None) -> list[str] | None:
    """The lines of the Python source at ``path`` where it may be shown (source_refusal: a
    module a shown source imports, inside the folders it may be read from); None else."""
    return None if source_refusal(path, roots, owner) is not None else source_lines(path)
