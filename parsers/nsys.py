"""Nsight Systems: ``.nsys-rep`` reports and their SQLite exports, read into tidy tables.

A ``.nsys-rep`` (or older ``.qdrep``) is converted once with ``nsys export --type sqlite`` into
a cache folder, keyed by the report's content and the nsys version, and reused while the report is
unchanged. The export is then read with SQL joins into the tables of :mod:`profreport.model`.

The export schema changes between Nsight Systems versions (2022.4 writes schema 3.0.0 with
``EXPORT_META_DATA``; 2023.4 writes 3.7.x and 2024.2 writes 3.11.x with ``META_DATA_EXPORT``,
``META_DATA_CAPTURE`` and extra columns), so every table and column is looked up in
``sqlite_master`` and ``PRAGMA table_info`` first; a table the export lacks is left out.

Kernel, runtime and NVTX range names (and range domains) are pandas categoricals (sorted
categories, one integer code per row): an export holds millions of rows but a few hundred names,
so the analysis classifies and groups each distinct name once instead of hashing a million
strings per question.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from profreport import concepts
from profreport.errors import InputError, MissingToolError, UnsupportedFormatError
from profreport.executors import cpu_share
from profreport.inputs import EVENT_TIMES
from profreport.model import (
    ID_COLUMNS,
    PROCESS_CORRELATIONS,
    TABLE_SCHEMAS,
    NsysMeta,
    Profile,
    categorical,
    conform,
    distinct_ids,
    empty_table,
    id_categorical,
    ids_at,
    in_start_order,
    narrowed,
    narrowed_ids,
    nothing_recorded,
    process_label,
)

if TYPE_CHECKING:  # the registry imports this module, never the other way round
    from profreport.parsers import ParseOptions
from profreport.parsers import NSYS_REPORT_MAGIC, sqlite_pages
from profreport.parsers.repeats import (
    masked_numbers,
    phases_per_step,
    steps_from_repeats,
    unrecorded_names_reason,
)
from profreport.text import MAX_ERROR_NAME, elide, error_text

NSYS_MISSING = ("nsys is not installed; needed to read .nsys-rep: run scripts/setup.sh --system, "
                "or pass a .sqlite export")
SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")

# Bytes at each end of a report searched for the version of Nsight Systems that wrote it (2022.4
# writes it in its last kB, among the session's metadata).
WRITER_PROBE_BYTES = 1 << 20
# The writer's version as nsys records it: ``2022.4.2.1-df9881f``.
_WRITER_VERSION = re.compile(rb"(20\d\d\.\d+\.\d+(?:\.\d+)?-[0-9A-Za-z]+)")
_VERSION_NUMBERS = re.compile(r"\d+(?:\.\d+)+")
# Where scripts/nsys_newer_export.sh leaves the nsys of an unpacked nsight-systems package.
NSYS_TOOL_GLOB = "*/**/target-linux-x64/nsys"
# How much of each end of a report goes into its cache key: enough to change with any re-record,
# cheap on GB-sized reports (the size and mtime cover edits in the middle).
FINGERPRINT_BYTES = 1 << 20
# Bump to invalidate every cached export when the way profreport exports changes.
CACHE_FORMAT = "1"

# Rows with times outside inputs.EVENT_TIMES cannot come from a real capture; they are dropped
# and counted (Profile.meta.dropped and a note), so the analysis only ever sees possible times.
# nsys times count ns from the capture's clock origin.
MAX_EVENT_NS = EVENT_TIMES.max_duration_ns
MAX_TIMESTAMP_NS = EVENT_TIMES.max_time_ns

# globalTid packs the process id and thread id in two 24-bit fields (nsys export docs), and the
# ids of the hardware (host) and VM the process ran on in the 16 bits above them.
_ID_SHIFT = 24
_ID_MASK = 0xFFFFFF
_HOST_SHIFT = 48
# A process as globalTid names it: its pid with the host and VM bits above (40 bits), kept as the
# tables' pid when the capture spans several hosts or VMs, whose pids may collide.
_PROCESS_MASK = (1 << (_HOST_SHIFT - _ID_SHIFT + 16)) - 1

# NVTX event types, by their names in ENUM_NSYS_EVENT_TYPE: push/pop and start/end ranges, their
# NVTXT twins, and the domain-create event that names a domainId. Marks are instants, not
# ranges: only those of concepts.RANK_DOMAIN are read, for the rank each process records (see
# runner.launch.record_rank).
NVTX_RANGE_TYPE_NAMES = ("NvtxPushPopRange", "NvtxStartEndRange", "NvtxtPushPopRange",
                         "NvtxtStartEndRange")
NVTX_MARK_NAME = "NvtxMark"
NVTX_DOMAIN_CREATE_NAME = "NvtxDomainCreate"
_EVENT_TYPE_TABLE = "ENUM_NSYS_EVENT_TYPE"
# When the capture stopped (``duration``, ns from its start as the events' times are): nsys ends
# a range still open then at that time (2022.4, checked on a capture whose last range was never
# popped), so such a range's real end is unrecorded.
_ANALYSIS_TABLE = "ANALYSIS_DETAILS"
# Ranges still open at the capture's end named in their note at most.
OPEN_RANGES_NAMED = 3
# NVTX domains a library owns whose every range is one call of that library (NCCL annotates each
# ncclAllReduce, ncclGroupStart... in its domain "NCCL"): no pass of the program's loop, so never
# a step by repetition. Other domains, the user's own included, stay candidates: a domain's name
# does not say whether its ranges are calls or passes.
LIBRARY_DOMAINS = frozenset({"NCCL"})
# The code of an event type the export's enum does not name: no event carries it.
_NO_EVENT_TYPE = -1


@dataclass(frozen=True)
class NvtxTypes:
    """The eventType codes of NVTX ranges, marks and domain creation in one export."""

    ranges: tuple[int, ...]
    mark: int
    domain_create: int


# The codes of 2022.4 to 2024.2 (checked in the enum tables of their exports), for an export
# without ENUM_NSYS_EVENT_TYPE.
NVTX_TYPES = NvtxTypes(ranges=(59, 60, 70, 71), mark=34, domain_create=75)

# The tables whose presence makes an SQLite file an nsys export.
_STRING_TABLE = "StringIds"
_EXPORT_META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
_CAPTURE_META_TABLE = "META_DATA_CAPTURE"

# nsys's own enum codes (the ids of ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND and
# ENUM_CUPTI_SYNC_TYPE in 2022.4 and 2023.4), used when an export lacks those tables.
MEMCPY_OPER_CODES = {0: "UNKNOWN", 1: "HTOD", 2: "DTOH", 3: "HTOA", 4: "ATOH", 5: "ATOA",
                     6: "ATOD", 7: "DTOA", 8: "DTOD", 9: "HTOH", 10: "PTOP", 11: "UVM_HTOD",
                     12: "UVM_DTOH", 13: "UVM_DTOD"}
MEMORY_KIND_CODES = {0: "PAGEABLE", 1: "PINNED", 2: "DEVICE", 3: "ARRAY", 4: "MANAGED",
                     5: "DEVICE_STATIC", 6: "MANAGED_STATIC", 7: "UNKNOWN"}
SYNC_TYPE_CODES = {0: "UNKNOWN", 1: "EVENT_SYNCHRONIZE", 2: "STREAM_WAIT_EVENT",
                   3: "STREAM_SYNCHRONIZE", 4: "CONTEXT_SYNCHRONIZE"}
# Read the activity tables (kernels, runtime, copies, memsets, syncs) from the SQLite pages
# (parsers/sqlite_pages.py); SQL otherwise.
NATIVE_READER = True
# Threads decoding an export's pages at most: numpy releases the GIL only inside its calls, so
# past a few threads they wait for it more than they decode, and each keeps two chunks in hand.
PAGE_THREADS = 4


# The id columns of GPU activity rows; a missing one becomes -1 (unknown).
_GPU_IDS = ["device", "stream", "correlation"]
_ENUM_TABLES = {"memcpy": "ENUM_CUDA_MEMCPY_OPER", "memory": "ENUM_CUDA_MEM_KIND",
                "sync": "ENUM_CUPTI_SYNC_TYPE"}

# ENUM_CUDA_DEV_MEM_EVENT_OPER: the operation code of a release in CUDA_GPU_MEMORY_USAGE_EVENTS
# (0 is an allocation), used when the export lacks the enum table.
MEMORY_RELEASE_CODE = 1
_MEMORY_OPER_TABLE = "ENUM_CUDA_DEV_MEM_EVENT_OPER"
# Memory kinds that live on the GPU; the others (pinned, pageable) are host memory.
DEVICE_MEMORY_KINDS = frozenset({"Device", "Array", "Managed"})

# Enum tokens onto profreport's vocabulary (concepts.COPY_KINDS / MEMORY_KINDS): CUDA arrays are
# device memory, unified-memory migrations keep their direction.
COPY_KIND_OF_TOKEN = {"HTOD": "HtoD", "HTOA": "HtoD", "UVM_HTOD": "HtoD",
                      "DTOH": "DtoH", "ATOH": "DtoH", "UVM_DTOH": "DtoH",
                      "DTOD": "DtoD", "ATOA": "DtoD", "ATOD": "DtoD", "DTOA": "DtoD",
                      "UVM_DTOD": "DtoD", "HTOH": "HtoH", "PTOP": "PtoP"}
MEMORY_KIND_OF_TOKEN = {"PAGEABLE": "Pageable", "PINNED": "Pinned", "DEVICE": "Device",
                        "DEVICE_STATIC": "Device", "ARRAY": "Array", "MANAGED": "Managed",
                        "MANAGED_STATIC": "Managed"}

# An enum row's name is ``<PREFIX>_KIND_<TOKEN>`` or ``<PREFIX>_TYPE_<TOKEN>``.
_ENUM_TOKEN = re.compile(r"^.*?_(?:KIND|TYPE)_")
# The first table a query reads, named in the error when the database is damaged.
_QUERIED_TABLE = re.compile(r"\bFROM\s+\"?(\w+)")
# nsys prints progress bars on the same stream as its errors.
_PROGRESS_LINE = re.compile(r"^(?:Exporting|Processing) \d+ events")


def parse(path: Path, *, cache_dir: Path | None = None, nsys: Path | None = None) -> Profile:
    """Read an nsys report (exported through the cache, with ``nsys`` or :func:`exporting_nsys`)
    or an nsys SQLite export."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path)
    if _is_sqlite(path):
        return read_export(path, source=path)
    if not path.name.endswith(REPORT_SUFFIXES) and not _is_report(path):
        raise InputError("not an Nsight Systems report (.nsys-rep) nor an SQLite export", path)
    export = export_report(path, cache_dir=cache_dir, nsys=nsys)
    return read_export(export, source=path)


def parse_input(path: Path, options: ParseOptions) -> Profile:
    """The registry's entry point (``parsers.FORMATS``): :func:`parse` with its options."""
    return parse(path, cache_dir=options.cache_dir, nsys=options.nsys)


def read_export(export_path: Path, *, source: Path | None = None) -> Profile:
    """Read the tables of an nsys SQLite export; ``source`` is the report it came from."""
    source = source or export_path
    with contextlib.closing(_Export.open(export_path, source)) as export:
        try:
            tables = _read_tables(export)
        except (ValueError, TypeError, OverflowError) as exc:
            raise InputError(f"damaged nsys export: a column holds values of the wrong type "
                             f"({exc})", source) from None
        meta = _export_meta(export)
    meta.recorded_ranks = recorded_ranks(export.rank_marks)
    meta.refused_rank_marks = refused_rank_marks(export.rank_marks)
    meta.export_path = str(export_path)
    # Nsight Systems times are ns since the session started: its timeline's zero.
    meta.time_zero_ns = 0
    meta.dropped = dict(export.dropped)
    meta.notes = [dropped_note(table, count) for table, count in export.dropped.items()]
    meta.notes += export.lacking_notes
    meta.notes += [export.open_ranges_note] if export.open_ranges_note else []
    _nvtx_structure(tables, meta)
    meta.empty = nothing_recorded(tables, sum(export.dropped.values()))
    return Profile(path=source, kind="nsys", tool_version=meta.exporter_version,
                   rank=_capture_rank(tables, meta), tables=tables, meta=meta)


# --- the export cache -------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/profreport/nsys``, or ``~/.cache/profreport/nsys``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "profreport" / "nsys"


def export_report(report: Path, *, cache_dir: Path | None = None,
                  nsys: Path | None = None) -> Path:
    """The cached SQLite export of ``report``, made with ``nsys export`` when not cached yet, by
    ``nsys`` or else :func:`exporting_nsys`; a report written by a newer Nsight Systems than that
    is refused with one line saying what to do."""
    tool = str(nsys) if nsys is not None else exporting_nsys(report)
    version = nsys_version(tool)
    _check_writer(report, version)
    folder = cache_dir or default_cache_dir()
    target = folder / cache_name(report, version)
    if target.is_file():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=".tmp.sqlite", dir=folder)
    except OSError as exc:
        raise InputError(f"cannot write the nsys export cache {folder}: {exc.strerror or exc}",
                         report) from None
    os.close(fd)
    try:
        _run_export(tool, report, Path(tmp))
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return target


@functools.lru_cache(maxsize=8)
def nsys_version(nsys: str) -> str:
    """The version ``nsys --version`` prints (``2022.4.2.1-df9881f``), or "unknown"."""
    try:
        out = subprocess.run([nsys, "--version"], capture_output=True, text=True, check=False)
    except OSError:
        return "unknown"
    match = re.search(r"version\s+(\S+)", out.stdout)
    return match.group(1) if match else "unknown"


def default_tools_dir() -> Path:
    """Where newer Nsight Systems are unpacked for profreport (scripts/nsys_newer_export.sh):
    ``$XDG_CACHE_HOME/profreport/nsys-tools``, or ``~/.cache/profreport/nsys-tools``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "profreport" / "nsys-tools"


def nsys_tools() -> list[str]:
    """Every nsys profreport may export with: the one on PATH and those unpacked under
    :func:`default_tools_dir`."""
    found = [shutil.which("nsys")]
    tools = default_tools_dir()
    if tools.is_dir():
        found += sorted(str(p) for p in tools.glob(NSYS_TOOL_GLOB) if os.access(p, os.X_OK))
    return [tool for tool in dict.fromkeys(found) if tool]


def exporting_nsys(report: Path) -> str:
    """The nsys to export ``report`` with: the one on PATH when its release is at least the
    report writer's (or the writer is not recorded), so that one report exports the same on
    every machine with that nsys whatever else is unpacked; else the newest of
    :func:`nsys_tools`. MissingToolError when there is none."""
    tools = nsys_tools()
    if not tools:
        raise MissingToolError(NSYS_MISSING, report)
    on_path = shutil.which("nsys")
    written = writer_version(report)
    if on_path and (written is None or
                    version_key(nsys_version(on_path))[:2] >= version_key(written)[:2]):
        return on_path
    return max(tools, key=lambda tool: version_key(nsys_version(tool)))


def version_key(version: str) -> tuple[int, ...]:
    """``2023.4.1.97-abc`` as ``(2023, 4, 1, 97)`` for ordering; ``()`` when unknown."""
    match = _VERSION_NUMBERS.match(version)
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def writer_version(report: Path) -> str | None:
    """The Nsight Systems version that wrote ``report``, as recorded near its end (or start)."""
    try:
        size = report.stat().st_size
        with open(report, "rb") as handle:
            handle.seek(max(size - WRITER_PROBE_BYTES, 0))
            tail = handle.read(WRITER_PROBE_BYTES)
            handle.seek(0)
            head = handle.read(WRITER_PROBE_BYTES)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", report) from None
    match = _WRITER_VERSION.search(tail) or _WRITER_VERSION.search(head)
    return match.group(1).decode() if match else None


def _check_writer(report: Path, version: str) -> None:
    """UnsupportedFormatError when ``report`` was written by a newer year.release of Nsight
    Systems than the nsys of ``version`` (an older nsys cannot export it)."""
    written = writer_version(report)
    if written is None or not version_key(version):
        return
    if version_key(written)[:2] > version_key(version)[:2]:
        raise UnsupportedFormatError(
            f"written by nsys {_release(written)}; this nsys is {_release(version)}: export it "
            "with a newer nsys, `nsys export --type sqlite`, and pass the .sqlite (or unpack a "
            "newer one with scripts/nsys_newer_export.sh, or name one with --nsys PATH)", report)


def _release(version: str) -> str:
    """``2023.4.1.97-abc`` -> ``2023.4``."""
    return ".".join(str(part) for part in version_key(version)[:2])


def cache_name(report: Path, version: str) -> str:
    """The cache file name of ``report``'s export: its stem plus a key of content and version."""
    digest = hashlib.sha256(f"{CACHE_FORMAT}|{version}|".encode())
    digest.update(report_fingerprint(report).encode())
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", report.name.rsplit(".", 1)[0])[:80]
    return f"{stem}-{digest.hexdigest()[:24]}.sqlite"


def report_fingerprint(report: Path) -> str:
    """A hash of the report's size, mtime, first and last MiB: changes whenever it is rewritten."""
    try:
        info = report.stat()
        digest = hashlib.sha256(f"{info.st_size}|{info.st_mtime_ns}|".encode())
        with open(report, "rb") as handle:
            digest.update(handle.read(FINGERPRINT_BYTES))
            handle.seek(max(info.st_size - FINGERPRINT_BYTES, 0))
            digest.update(handle.read(FINGERPRINT_BYTES))
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", report) from None
    return digest.hexdigest()


def _run_export(nsys: str, report: Path, output: Path) -> None:
    """Run ``nsys export`` of ``report`` into ``output``; InputError with nsys's last error."""
    command = [nsys, "export", "--type", "sqlite", "--quiet", "true", "--force-overwrite", "true",
               "--output", str(output), str(report)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace",
                              check=False)
    except OSError as exc:
        raise MissingToolError(f"cannot run nsys: {exc.strerror or exc}", report) from None
    if done.returncode != 0 or not _is_sqlite(output):
        reason = _last_error_line(done.stderr + "\n" + done.stdout)
        raise InputError(f"nsys export failed: {reason or f'exit status {done.returncode}'}",
                         report)


def _last_error_line(text: str) -> str:
    """The last line nsys printed that is not a progress bar."""
    lines = [line.strip() for line in re.split(r"[\r\n]+", text)]
    lines = [line for line in lines if line and not _PROGRESS_LINE.match(line)]
    return lines[-1] if lines else ""


def _starts_with(path: Path, magic: bytes) -> bool:
    """Whether ``path`` starts with ``magic`` (False when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(magic)) == magic
    except OSError:
        return False


def _is_report(path: Path) -> bool:
    """Whether ``path`` starts with the Nsight Systems report header."""
    return _starts_with(path, NSYS_REPORT_MAGIC)


def _is_sqlite(path: Path) -> bool:
    """Whether ``path`` starts with the SQLite header."""
    return _starts_with(path, SQLITE_MAGIC)


# --- reading the export -----------------------------------------------------------------------


class _Export:
    """A read-only connection to one nsys export and what its schema holds."""

    def __init__(self, conn: sqlite3.Connection, source: Path, tables: set[str],
                 path: Path | None = None) -> None:
        """Wrap an open connection; use :meth:`open`."""
        self.conn = conn
        self.path = path
        self.source = source
        self.tables = tables
        self._columns: dict[str, set[str]] = {}
        #: Rows dropped per profreport table for impossible times (see MAX_EVENT_NS).
        self.dropped: dict[str, int] = {}
        #: The processes that made runtime calls, sorted, when correlation ids are qualified by
        #: process (:func:`_qualified`): set once the runtime calls show more than one; else None.
        self.launching: np.ndarray | None = None
        #: The bits of a globalTid (shifted down by 24) that name a process: the pid's, and the
        #: host and VM ids above it when the export's processes ran on several (see _pid_mask).
        self.pid_mask = _ID_MASK
        #: The texts of the NVTX marks of concepts.RANK_DOMAIN, (pid, text), set by _ranges.
        self.rank_marks: list[tuple[int, str]] = []
        #: Notes on the figures left unknown by columns this export's schema lacks (lacking).
        self.lacking_notes: list[str] = []
        #: The note on the NVTX ranges left out for being open at the capture's end, if any.
        self.open_ranges_note: str | None = None

    @classmethod
    def open(cls, export_path: Path, source: Path) -> _Export:
        """Open ``export_path`` read-only and check that it is an nsys export."""
        if not _is_sqlite(export_path):
            raise InputError("not an SQLite database (nor an nsys export)", source)
        uri = f"{Path(export_path).resolve().as_uri()}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True)
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        except sqlite3.Error as exc:
            raise InputError(f"unreadable SQLite database: {exc}", source) from None
        tables = {row[0] for row in rows}
        if _STRING_TABLE not in tables or not any(
                name.startswith("TARGET_INFO_") or name in _EXPORT_META_TABLES for name in tables):
            conn.close()
            raise InputError("an SQLite database, but not an Nsight Systems export "
                             "(no StringIds / TARGET_INFO_* tables)", source)
        return cls(conn, Path(source), tables, Path(export_path))

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def columns(self, table: str) -> set[str]:
        """The column names of ``table`` (empty when the export lacks it)."""
        if table not in self._columns:
            rows = self.conn.execute(f'PRAGMA table_info("{table}")').fetchall()
            self._columns[table] = {row[1] for row in rows}
        return self._columns[table]

    def usable(self, table: str, required: tuple[str, ...]) -> bool:
        """Whether ``table`` exists; raise when it exists without the ``required`` columns."""
        if table not in self.tables:
            return False
        missing = sorted(set(required) - self.columns(table))
        if missing:
            raise UnsupportedFormatError(
                f"nsys export schema {self.schema_version()}: table {table} lacks {missing}",
                self.source)
        return True

    def lacking(self, table: str, optional: tuple[str, ...], unknown: str) -> set[str]:
        """The ``optional`` columns that ``table`` lacks; when some, a note says that ``unknown``
        (what they tell) is unknown, and why: other nsys versions export other columns."""
        missing = set(optional) - self.columns(table)
        if missing:
            self.lacking_notes.append(
                f"nsys export schema {self.schema_version()}: table {table} lacks "
                f"{sorted(missing)}: {unknown} unknown")
        return missing

    def query(self, sql: str) -> pd.DataFrame:
        """Run ``sql`` and return its rows; a damaged database becomes an InputError naming the
        table read and SQLite's reason (pandas would quote the whole query)."""
        try:
            return pd.read_sql_query(sql, self.conn)
        except (sqlite3.Error, pd.errors.DatabaseError) as exc:
            reason = exc.__cause__ if isinstance(exc.__cause__, sqlite3.Error) else exc
            table = _QUERIED_TABLE.search(sql)
            where = f" (table {table.group(1)})" if table else ""
            raise InputError(f"damaged nsys export{where}: {reason}", self.source) from None

    @functools.cached_property
    def strings(self) -> dict[int, str]:
        """StringIds as a dict id -> text."""
        rows = self.query("SELECT id, value FROM StringIds")
        return dict(zip(rows["id"].tolist(), rows["value"].tolist(), strict=True))

    @functools.cached_property
    def nvtx_types(self) -> NvtxTypes:
        """The NVTX event type codes the export's ENUM_NSYS_EVENT_TYPE gives them (by name; a
        type it does not name is not read), or those of the nsys versions known when it lacks
        the table or names none of them."""
        if _EVENT_TYPE_TABLE not in self.tables or \
                not {"id", "name"} <= self.columns(_EVENT_TYPE_TABLE):
            return NVTX_TYPES
        rows = self.query(f"SELECT id, name FROM {_EVENT_TYPE_TABLE}")
        code = dict(zip(rows["name"].astype(str), rows["id"].astype(int), strict=True))
        if not any(name in code for name in (*NVTX_RANGE_TYPE_NAMES, NVTX_MARK_NAME,
                                             NVTX_DOMAIN_CREATE_NAME)):
            return NVTX_TYPES
        return NvtxTypes(ranges=tuple(code[name] for name in NVTX_RANGE_TYPE_NAMES
                                      if name in code),
                         mark=code.get(NVTX_MARK_NAME, _NO_EVENT_TYPE),
                         domain_create=code.get(NVTX_DOMAIN_CREATE_NAME, _NO_EVENT_TYPE))

    def native_parts(self, table: str, columns: list[str], reduce: _ChunkReduce,
                     texts: tuple[str, ...] = ()) -> list[_Part] | None:
        """``reduce`` of each chunk of ``table``'s rows read from its pages (its integer
        ``columns``' values and value kinds of sqlite_pages, and the strings of the ``texts``
        columns, by column name): each of the parts it returns joined over the chunks, in row
        order, as they come; None when a column is missing or the page reader cannot read the
        table (SQL is used instead)."""
        if self.path is None or not NATIVE_READER or \
                not {*columns, *texts} <= self.columns(table):
            return None
        root = self.conn.execute("SELECT rootpage FROM sqlite_master WHERE type = 'table' "
                                 "AND name = ?", (table,)).fetchone()
        order = [row[1] for row in self.conn.execute(f'PRAGMA table_info("{table}")')]
        wanted = [order.index(col) for col in columns]
        text_columns = tuple(order.index(col) for col in texts)

        def named(chunk: sqlite_pages.Columns) -> tuple[_Part, ...]:
            """The chunk reduced, its columns called by name; rows that spilled onto overflow
            pages make the whole table SQL's."""
            if len(chunk.spilled):
                raise sqlite_pages.PageFormatError("a row spills onto overflow pages")
            return reduce({col: chunk.values.pop(i) for col, i in zip(columns, wanted,
                                                                      strict=True)},
                          {col: chunk.kinds.pop(i) for col, i in zip(columns, wanted,
                                                                     strict=True)},
                          {col: chunk.texts.pop(order.index(col)) for col in texts})
        try:
            reader = sqlite_pages.PageReader(self.path)
            try:
                leaves = reader.leaf_pages(int(root[0]))
                return _joined(reader.reduced(leaves, wanted, text_columns, named,
                                              threads=min(cpu_share(), PAGE_THREADS)),
                               sqlite_pages.chunk_count(leaves))
            finally:
                reader.close()
        except (sqlite_pages.PageFormatError, OSError, TypeError):
            return None
        except ValueError as exc:  # a column of the wrong type: the table named
            raise ValueError(f"table {table}: {exc}") from None

    def name_value(self, table: str) -> dict[str, str]:
        """A ``name``/``value`` metadata table as a dict (the first value of repeated names)."""
        if table not in self.tables or not {"name", "value"} <= self.columns(table):
            return {}
        rows = self.query(f'SELECT name, value FROM "{table}"')
        return dict(rows.drop_duplicates("name").itertuples(index=False, name=None))

    def schema_version(self) -> str:
        """EXPORT_SCHEMA_VERSION from the export's metadata, or "unknown"."""
        for table in _EXPORT_META_TABLES:
            version = self.name_value(table).get("EXPORT_SCHEMA_VERSION")
            if version:
                return str(version)
        return "unknown"


def _read_tables(export: _Export) -> dict[str, pd.DataFrame]:
    """Every table the export holds, keyed by profreport table name. The runtime calls are read
    first: they tell whether correlation ids must be qualified by process."""
    export.pid_mask = _pid_mask(export)
    runtime = _runtime(export)
    if runtime is not None:
        launching = pd.unique(ids_at(runtime["pid"], runtime["correlation"].to_numpy() >= 0))
        launching = launching[launching >= 0]  # an unknown process is none
        if len(launching) > 1:
            export.launching = np.sort(launching)
            runtime["correlation"] = _qualified(runtime["correlation"].to_numpy(),
                                                runtime["pid"].to_numpy(), export.launching)
    readers = {"kernels": _kernels, "memcpy": _memcpy, "memset": _memset,
               "runtime": lambda _: runtime, "sync": _sync, "ranges": _ranges, "osrt": _osrt,
               "devices": _devices, "threads": _threads, "memory": _memory}
    tables = {name: frame for name, read in readers.items()
              if (frame := read(export)) is not None}
    if "ranges" in tables:
        tables["ranges"] = _ended_ranges(export, tables["ranges"])
        tables["steps"] = steps_from_ranges(tables["ranges"])
        tables["dataloader"] = dataloader_from_ranges(tables["ranges"], tables["steps"])
    return tables


def _capture_ends(export: _Export) -> list[int]:
    """When the capture stopped (each VM's, ANALYSIS_DETAILS.duration), in the events' ns; none
    where the export does not record it."""
    if "duration" not in export.columns(_ANALYSIS_TABLE):
        return []
    rows = export.query(f"SELECT DISTINCT duration FROM {_ANALYSIS_TABLE} "
                        "WHERE typeof(duration) = 'integer'")
    return [int(end) for end in rows["duration"]]


def _ended_ranges(export: _Export, ranges: pd.DataFrame) -> pd.DataFrame:
    """``ranges`` less those still open when the capture stopped, which nsys ends at the
    capture's end (_capture_ends): their real end is unrecorded (a step cut by ``--duration``,
    a range never popped), so they are no step, phase or fetch of a known length; a note
    counts and names them."""
    still_open = ranges["end"].isin(_capture_ends(export)).to_numpy()
    if not still_open.any():
        return ranges
    names = pd.unique(ranges["name"].to_numpy(dtype=object)[still_open]).tolist()
    shown = ", ".join(f"'{error_text(name)}'" for name in names[:OPEN_RANGES_NAMED])
    more = f" and {len(names) - OPEN_RANGES_NAMED:,} more" if len(names) > OPEN_RANGES_NAMED \
        else ""
    count = int(still_open.sum())
    export.open_ranges_note = (
        f"nsys: {count:,} NVTX range{'s' if count > 1 else ''} still open when the capture "
        f"stopped ({shown}{more}), which nsys ends at the capture's end: their end is "
        "unknown, so they are left out")
    return ranges[~still_open].reset_index(drop=True)


def _nvtx_structure(tables: dict[str, pd.DataFrame], meta: NsysMeta) -> None:
    """What a capture's steps are, in a note (NsysMeta.steps_note): its ``step N`` ranges, said
    when ranges lie inside them (their phases); or, when its NVTX ranges name no step, the
    program's range that repeats is the step and the ranges inside it its phases (a library's
    range is one call of it, and a range of no recorded name no evidence of a pass: no step;
    where only those are, the steps are unknown and the note says why). The analysis adds the
    phases' time per step, over the steps the per-step figures count (steps.phases_text)."""
    ranges = tables.get("ranges")
    if ranges is None or ranges.empty:
        return
    if not tables["steps"].empty:
        if not phases_per_step(ranges, tables["steps"]).empty:
            _steps_note(meta, f"the {len(tables['steps']):,} steps are NVTX ranges named as "
                              "steps")
        return
    own = _program_ranges(ranges)
    steps, span = steps_from_repeats(own, "nvtx", masked_numbers)
    if span is None:
        calls, reasons = _library_calls(ranges), []
        if calls.any():
            domains = ", ".join(sorted(map(str, pd.unique(ranges["domain"].to_numpy()[calls]))))
            reasons.append(f"the {int(calls.sum()):,} ranges in the NVTX domain of a library "
                           f"({domains}) are each one call of it, not a pass of the training loop")
        reasons += filter(None, [unrecorded_names_reason(own, "ranges")])
        if reasons:
            _steps_note(meta, f"no NVTX range is named as a step and none of the program's own "
                              f"repeats as one: {' and '.join(reasons)}, so the steps are unknown")
        return
    tables["steps"], meta.step_span = steps, span
    _steps_note(meta, f"no NVTX range is named as a step: the {len(steps):,} steps are the "
                      f"repeated range '{span}'")


def _library_calls(ranges: pd.DataFrame) -> np.ndarray:
    """Which NVTX ranges are in a library's domain (LIBRARY_DOMAINS): each one library call."""
    return ranges["domain"].isin(LIBRARY_DOMAINS).to_numpy()


def _program_ranges(ranges: pd.DataFrame) -> pd.DataFrame:
    """The NVTX ranges that may be the program's steps by repetition: those of no library's
    domain (LIBRARY_DOMAINS)."""
    return ranges[~_library_calls(ranges)]


def _steps_note(meta: NsysMeta, note: str) -> None:
    """Add the note saying what the steps are (NsysMeta.steps_note)."""
    meta.notes.append(note)
    meta.steps_note = note


def dropped_note(table: str, count: int) -> str:
    """The note telling how many rows of ``table`` were dropped for impossible times."""
    return (f"nsys: {count:,} {table} rows dropped: times that no capture records (not integer "
            f"ns, {EVENT_TIMES.reason})")


def _checked_times(alias: str) -> str:
    """SELECT items ``start``, ``end`` (0 when invalid) and ``valid`` for table alias ``alias``."""
    start, end = f"{alias}.start", f"{alias}.end"
    valid = (f"(typeof({start}) = 'integer' AND typeof({end}) = 'integer' AND {start} >= 0 "
             f"AND {end} >= {start} AND {end} <= {MAX_TIMESTAMP_NS} "
             f"AND {end} - {start} <= {MAX_EVENT_NS})")
    return (f"CASE WHEN {valid} THEN {start} ELSE 0 END AS start, "
            f"CASE WHEN {valid} THEN {end} ELSE 0 END AS end, {valid} AS valid")


def _valid_rows(export: _Export, name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without the rows whose times are impossible; their count is kept."""
    bad = frame["valid"] == 0
    if bad.any():
        export.dropped[name] = export.dropped.get(name, 0) + int(bad.sum())
        frame = frame[~bad]
    return frame.drop(columns="valid").reset_index(drop=True)


def _pid_mask(export: _Export) -> int:
    """The export's :attr:`_Export.pid_mask`: the pid's bits, and the host and VM bits above
    them when its process table (PROCESSES, and the threads of ThreadNames) names processes of
    more than one host or VM."""
    hosts = [f'SELECT "{column}" >> {_HOST_SHIFT} AS host FROM "{table}"'
             for table, column in (("PROCESSES", "globalPid"), ("ThreadNames", "globalTid"))
             if column in export.columns(table)]
    if not hosts:
        return _ID_MASK
    found = export.query(f"SELECT COUNT(DISTINCT host) AS hosts FROM ({' UNION '.join(hosts)})")
    return _PROCESS_MASK if int(found["hosts"].iloc[0]) > 1 else _ID_MASK


def _decoded_tid(export: _Export, column: str) -> str:
    """SQL selecting ``pid`` (as :attr:`_Export.pid_mask` says) and ``tid`` decoded from a
    globalTid column."""
    return (f"{_decoded_pid(export, column)} AS pid, ({column} & {_ID_MASK}) AS tid")


def _decoded_pid(export: _Export, column: str) -> str:
    """SQL of the process a globalTid or globalPid column names (:attr:`_Export.pid_mask`)."""
    return f"(({column} >> {_ID_SHIFT}) & {export.pid_mask})"


def _string(export: _Export, table: str, column: str, alias: str) -> tuple[str, str]:
    """SELECT expression and JOIN that resolve a StringIds id column (NULL when absent)."""
    if column not in export.columns(table):
        return f"NULL AS {alias}", ""
    return (f"{alias}_s.value AS {alias}",
            f"LEFT JOIN StringIds AS {alias}_s ON {alias}_s.id = t.{column}")


@dataclass
class _Part:
    """What a table reader keeps of one chunk of rows: its columns by name, in row order, and
    how many rows it dropped for impossible times."""

    columns: dict[str, np.ndarray]
    dropped: int = 0


#: A table reader's reduction of one chunk (integer values, value kinds and texts by column)
#: into one or more parts.
_ChunkReduce = Callable[[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]],
                        tuple[_Part, ...]]


# CUPTI numbers correlation ids per process, from 1 and below 2**32, so two processes traced in
# one capture reuse them. When more than one process made runtime calls, each id is qualified
# by its process in every table, index * PROCESS_CORRELATIONS + id, the index being the
# process's place among those that made runtime calls (a process, host and VM bits included,
# takes 40 bits: too many to stand beside the id itself): a join on correlation ids then never
# pairs one process's launch with another's GPU work (model.PROCESS_CORRELATIONS).


def _qualified(correlation: np.ndarray, pids: np.ndarray, launching: np.ndarray) -> np.ndarray:
    """Correlation ids qualified by process (``launching``: the processes that made runtime
    calls, sorted); an unknown id stays -1, and every other process (-1, unknown, included)
    takes the index after them, whose ids no runtime call holds."""
    index = np.searchsorted(launching, pids).astype(np.int64)
    index[launching[np.minimum(index, len(launching) - 1)] != pids] = len(launching)
    return np.where(correlation < 0, -1, index * PROCESS_CORRELATIONS + correlation)


def _process_column(export: _Export, table: str) -> list[str]:
    """``["globalPid"]`` when ``table``'s correlation ids must be qualified by process and it
    records them, else ``[]``."""
    return (["globalPid"] if export.launching is not None
            and "globalPid" in export.columns(table) else [])


def _gpu_ids(export: _Export, values: dict[str, np.ndarray], kinds: dict[str, np.ndarray]
             ) -> tuple[_Part, np.ndarray]:
    """A chunk of GPU activity: times, device, stream and correlation (qualified by process
    when the chunk holds ``globalPid``), and which rows were kept."""
    kept, picked = _timed_part(values, kinds, _GPU_ID_COLUMNS)
    if export.launching is not None and "globalPid" in values:
        pids, _ = _pid_tid(_ids(values, kinds, "globalPid", picked).astype(np.int64),
                           export.pid_mask)
        kept.columns["correlation"] = _qualified(kept.columns["correlation"], pids,
                                                 export.launching)
    return kept, picked


def _sql_correlation(export: _Export, table: str, unknown: str) -> str:
    """SELECT items ``correlation`` of a GPU activity table, and the process that
    :func:`_sql_qualified` qualifies it by when it must be; NULL (-1, unknown) where the table
    lacks correlationId, noted as ``unknown`` (see _Export.lacking)."""
    if export.lacking(table, ("correlationId",), unknown):
        return "NULL AS correlation"
    if not _process_column(export, table):
        return "t.correlationId AS correlation"
    return f"t.correlationId AS correlation, {_decoded_pid(export, 't.globalPid')} AS process"


#: What a GPU activity table without correlationId leaves unknown.
_LAUNCHED_BY = "which runtime call launched each {} is"


def _sql_optional(export: _Export, table: str, column: str, unknown: str,
                  alias: str | None = None) -> str:
    """SELECT item ``t.column AS alias`` (the column's own name by default), or NULL (unknown,
    noted as ``unknown``: see _Export.lacking) where ``table`` lacks the column."""
    value = "NULL" if export.lacking(table, (column,), unknown) else f"t.{column}"
    return f"{value} AS {alias or column}"


def _sql_qualified(export: _Export, frame: pd.DataFrame) -> pd.DataFrame:
    """A GPU activity table read through SQL with its correlation ids qualified as
    :func:`_gpu_ids` qualifies them (its ``process`` column, when selected, dropped)."""
    if "process" not in frame or export.launching is None:
        return frame
    correlation = frame["correlation"].fillna(-1).to_numpy(np.int64)
    frame["correlation"] = _qualified(correlation, frame.pop("process").fillna(-1).to_numpy(
        np.int64), export.launching)
    return frame


def _possible(values: dict[str, np.ndarray], kinds: dict[str, np.ndarray],
              integers: Iterable[str]) -> np.ndarray:
    """Which rows have possible times (the rule of :func:`_checked_times`). An ``integers``
    column holding text or reals is a damaged export."""
    start, end = values["start"], values["end"]
    with np.errstate(over="ignore"):
        valid = ((kinds["start"] == sqlite_pages.INTEGER) & (kinds["end"] == sqlite_pages.INTEGER)
                 & (start >= 0) & (end >= start) & (end <= MAX_TIMESTAMP_NS)
                 & (end - start <= MAX_EVENT_NS))
    for column in integers:
        kind = kinds[column]
        if ((kind != sqlite_pages.INTEGER) & (kind != sqlite_pages.NULL)).any():
            raise ValueError(f"{column} holds text or real values")
    return valid


def _ids(values: dict[str, np.ndarray], kinds: dict[str, np.ndarray], column: str,
         rows: np.ndarray) -> np.ndarray:
    """An integer id column at ``rows`` (a mask or positions), -1 where it is NULL, in its
    narrowest dtype (ids of a chunk are small; concatenation widens to the widest chunk's)."""
    return narrowed(np.where(kinds[column][rows] == sqlite_pages.NULL, -1, values[column][rows]))


def _timed_part(values: dict[str, np.ndarray], kinds: dict[str, np.ndarray],
                ids: dict[str, str], rows: np.ndarray | None = None
                ) -> tuple[_Part, np.ndarray]:
    """A chunk's rows with possible times, start, end and the id columns ``ids`` (export column
    -> table column), and which rows they are. Without ``rows`` every row is a candidate and
    every column but the times must hold integers; with it, only those rows are and only the
    times are checked."""
    valid = _possible(values, kinds, [column for column in kinds if column not in
                                      ("start", "end")] if rows is None else ())
    candidate = np.ones(len(valid), dtype=bool) if rows is None else rows
    picked = valid & candidate
    columns = {"start": values["start"][picked], "end": values["end"][picked]}
    columns.update({alias: _ids(values, kinds, column, picked) for column, alias in ids.items()})
    return _Part(columns, int((candidate & ~valid).sum())), picked


class _Growing:
    """A column filled part after part in place. Its capacity grows by ``ndarray.resize``
    (realloc: for arrays this large the C library remaps the pages instead of copying them), so
    a column is never held twice. A part of a wider dtype widens the column; object columns are
    joined at the end."""

    def __init__(self, parts: int) -> None:
        """An empty column that ``parts`` parts will fill."""
        self.parts = parts
        self.array: np.ndarray | None = None
        self.objects: list[np.ndarray] = []
        self.size = 0

    def extend(self, part: np.ndarray) -> None:
        """Append ``part``, growing the capacity by half when it is full (the first part sizes
        it for every part, with room to spare: room never filled is never touched)."""
        if part.dtype == object:
            self.objects.append(part)
            return
        if self.array is None:
            self.array = np.empty(max(len(part) * self.parts * 9 // 8, 1), dtype=part.dtype)
        elif np.promote_types(self.array.dtype, part.dtype) != self.array.dtype:
            wider = np.empty(len(self.array), np.promote_types(self.array.dtype, part.dtype))
            wider[: self.size] = self.array[: self.size]  # the room beyond stays untouched
            self.array = wider
        end = self.size + len(part)
        if end > len(self.array):
            self.array.resize(max(end, len(self.array) * 3 // 2), refcheck=False)
        self.array[self.size:end] = part
        self.size = end

    def done(self) -> np.ndarray:
        """The column, its capacity cut to what is filled (growing zero-fills the capacity, so
        it is resident; cutting a block this large gives the pages back without a copy)."""
        if self.objects:
            return np.concatenate(self.objects)
        assert self.array is not None
        self.array.resize(self.size, refcheck=False)
        return self.array


def _joined(parts: Iterator[tuple[_Part, ...]], chunks: int) -> list[_Part]:
    """Each of the ``chunks`` chunks' parts joined column by column as the chunks come (a
    chunk's arrays are let go once copied), its dropped rows summed."""
    columns: list[dict[str, _Growing]] = []
    dropped: list[int] = []
    for chunk in parts:
        if not columns:
            columns = [{name: _Growing(chunks) for name in part.columns} for part in chunk]
            dropped = [0] * len(chunk)
        for at, part in enumerate(chunk):
            for name, growing in columns[at].items():
                growing.extend(part.columns.pop(name))
            dropped[at] += part.dropped
    return [_Part({name: growing.done() for name, growing in grown.items()}, count)
            for grown, count in zip(columns, dropped, strict=True)]


def _counted(export: _Export, name: str, part: _Part) -> dict[str, np.ndarray]:
    """The columns of a joined table part in start order (stable: stored order among equal
    starts; a table stored out of order is reordered one column at a time); its dropped rows
    counted under ``name``."""
    if part.dropped:
        export.dropped[name] = export.dropped.get(name, 0) + part.dropped
    return in_start_order(part.columns)


def _pid_tid(tids: np.ndarray, pid_mask: int) -> tuple[np.ndarray, np.ndarray]:
    """Process (``pid_mask``: :attr:`_Export.pid_mask`) and thread ids decoded from globalTids
    (or globalPids: thread id 0), -1 for an unknown (negative) one, the thread ids written over
    ``tids`` (no temporary column per step); the one decoder of the page reader's tables, as
    :func:`_decoded_tid` is SQL's."""
    unknown = tids < 0
    pids = tids >> _ID_SHIFT
    pids &= pid_mask
    pids[unknown] = -1
    tids &= _ID_MASK
    tids[unknown] = -1
    return pids, tids


def _categorical_names(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """``frame`` with its ``columns`` of names held as categoricals."""
    for column in columns:
        codes, distinct = pd.factorize(frame[column].to_numpy(dtype=object))
        frame[column] = categorical(list(distinct), codes)
    return frame


class _Vocabulary:
    """Distinct integer keys (StringIds ids, pairs of them) numbered in the order first met,
    shared by the threads reading a table's chunks: each row's key becomes a small code while
    its chunk is decoded, and each distinct key is named once at the end."""

    def __init__(self) -> None:
        """An empty vocabulary."""
        self.number: dict[int, int] = {}
        self._lock = threading.Lock()

    def codes(self, keys: np.ndarray) -> np.ndarray:
        """The code of each of ``keys`` (keys met for the first time are numbered)."""
        at, distinct = pd.factorize(keys)
        with self._lock:
            numbers = [self.number.setdefault(key, len(self.number)) for key in distinct.tolist()]
        return narrowed(np.asarray([*numbers, -1], dtype=np.int32)[at])  # -1: no key

    def in_order(self) -> list[int]:
        """The keys in code order."""
        return list(self.number)


# A kernel's (demangledName, shortName) pair as one key: demangled * _PAIR + short + 1
# (StringIds ids are below 2**31; -1, NULL, becomes 0).
_PAIR = 1 << 32
#: The id columns of GPU activity in the export, and what they are called in the tables.
_GPU_ID_COLUMNS = {"deviceId": "device", "streamId": "stream", "correlationId": "correlation"}
_KERNEL_NAMES = ["demangledName", "shortName"]


def _native_kernels(export: _Export, table: str) -> pd.DataFrame | None:
    """The kernels table from the export's pages, or None (then SQL reads it). Each distinct
    (demangled, short) name pair is numbered while the chunks are decoded and named once."""
    pairs = _Vocabulary()

    def part(values: dict[str, np.ndarray], kinds: dict[str, np.ndarray],
             texts: dict[str, np.ndarray]) -> tuple[_Part]:
        """One chunk: times, ids and the code of each row's name pair."""
        kept, picked = _gpu_ids(export, values, kinds)
        long, short = (_ids(values, kinds, column, picked) for column in _KERNEL_NAMES)
        kept.columns["pair"] = pairs.codes(long.astype(np.int64) * _PAIR + short + 1)
        return (kept,)

    parts = export.native_parts(table, ["start", "end", *_GPU_ID_COLUMNS, *_KERNEL_NAMES,
                                        *_process_column(export, table)], part)
    if parts is None:
        return None
    columns = _counted(export, "kernels", parts[0])
    codes = columns.pop("pair")
    keys = pairs.in_order()
    names, shorts, comm = _kernel_names(
        [export.strings.get(key // _PAIR) for key in keys],
        [export.strings.get(key % _PAIR - 1) for key in keys])
    return _native_table("kernels", {**columns, "name": categorical(names, codes),
                                     "short_name": categorical(shorts, codes),
                                     "is_comm": comm[codes]})


def _native_table(name: str, columns: dict[str, np.ndarray | pd.Categorical]) -> pd.DataFrame:
    """Table ``name`` from the page reader's fresh columns, as ``conform`` gives it (the
    schema's columns in order and dtypes, ids narrowed, names kept as categoricals) but built
    around the columns themselves, only those of another dtype cast: no column of a 10 M-row
    table held twice."""
    schema = TABLE_SCHEMAS[name]
    frame = pd.DataFrame({column: columns[column] for column in schema}, copy=False)
    wrong = {column: dtype for column, dtype in schema.items()
             if frame[column].dtype != dtype and column not in ID_COLUMNS
             and not isinstance(frame[column].dtype, pd.CategoricalDtype)}
    return narrowed_ids(frame.astype(wrong) if wrong else frame)


def _kernel_names(names: list[str | None], shorts: list[str | None]
                  ) -> tuple[list[str], list[str], np.ndarray]:
    """For distinct (demangled, short) name pairs: the name (demangled, else short, else
    :data:`~profreport.concepts.UNRECORDED_NAME`), the short name (recorded, else cut from the
    name) and whether it is a communication kernel."""
    full = [name or short or concepts.UNRECORDED_NAME for name, short in
            zip(names, shorts, strict=True)]
    short = [given or concepts.short_kernel_name(name)
             for name, given in zip(full, shorts, strict=True)]
    comm = concepts.is_comm_kernel(pd.Series(full, dtype=object)).to_numpy(bool)
    return full, short, comm


def _named_kernels(frame: pd.DataFrame) -> pd.DataFrame:
    """Kernels read through SQL, named as :func:`_kernel_names` says, once per distinct pair."""
    pairs = frame[["name", "short_name"]].astype(object)
    codes, unique = pd.factorize(pd.MultiIndex.from_frame(pairs.fillna("\x00")))
    names, shorts, comm = _kernel_names(
        [None if n == "\x00" else n for n in unique.get_level_values(0)],
        [None if n == "\x00" else n for n in unique.get_level_values(1)])
    return conform("kernels", frame.assign(name=categorical(names, codes),
                                           short_name=categorical(shorts, codes),
                                           is_comm=comm[codes]))


def _kernels(export: _Export) -> pd.DataFrame | None:
    """CUPTI_ACTIVITY_KIND_KERNEL with demangled and short names."""
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    if not export.usable(table, ("start", "end", "deviceId", "streamId")):
        return None
    native = _native_kernels(export, table)
    if native is not None:
        return native
    long_sel, long_join = _string(export, table, "demangledName", "name")
    short_sel, short_join = _string(export, table, "shortName", "short_name")
    frame = _sql_qualified(export, _valid_rows(export, "kernels", export.query(
        f"SELECT {_checked_times('t')}, t.deviceId AS device, t.streamId AS stream, "
        f"{_sql_correlation(export, table, _LAUNCHED_BY.format('kernel'))}, {long_sel}, "
        f"{short_sel} FROM {table} AS t "
        f"{long_join} {short_join} ORDER BY t.start")))
    frame[_GPU_IDS] = frame[_GPU_IDS].fillna(-1)
    return _named_kernels(frame)


def _native_activity(export: _Export, table: str, name: str, extras: list[str]
                     ) -> pd.DataFrame | None:
    """A GPU activity table from the export's pages: start, end, device, stream, correlation
    (-1 when NULL) and the integer ``extras`` (NaN when NULL, as SQL gives them); None when
    the page reader cannot read it (then SQL does)."""
    def part(values: dict[str, np.ndarray], kinds: dict[str, np.ndarray],
             texts: dict[str, np.ndarray]) -> tuple[_Part]:
        """One chunk: times, ids and the extras."""
        kept, valid = _gpu_ids(export, values, kinds)
        kept.columns.update({column: np.where(kinds[column][valid] == sqlite_pages.NULL,
                                              np.nan, values[column][valid])
                             for column in extras})
        return (kept,)

    parts = export.native_parts(table, ["start", "end", *_GPU_ID_COLUMNS, *extras,
                                        *_process_column(export, table)], part)
    return None if parts is None else pd.DataFrame(_counted(export, name, parts[0]),
                                                   copy=False)


def _memcpy(export: _Export) -> pd.DataFrame | None:
    """CUPTI_ACTIVITY_KIND_MEMCPY with copy direction and memory kinds named."""
    table = "CUPTI_ACTIVITY_KIND_MEMCPY"
    if not export.usable(table, ("start", "end", "deviceId", "streamId")):
        return None
    lacking = export.lacking(table, ("srcKind", "dstKind"),
                             "whether host memory was pageable or pinned is")
    kinds = [f"NULL AS {col}" if col in lacking else col for col in ("srcKind", "dstKind")]
    frame = _native_activity(export, table, "memcpy", ["bytes", "copyKind", "srcKind",
                                                       "dstKind"])
    if frame is None:
        frame = _sql_qualified(export, _valid_rows(export, "memcpy", export.query(
            f"SELECT {_checked_times('t')}, deviceId AS device, streamId AS stream, "
            f"{_sql_correlation(export, table, _LAUNCHED_BY.format('copy'))}, "
            f"{_sql_optional(export, table, 'bytes', 'the bytes of each copy are')}, "
            f"{_sql_optional(export, table, 'copyKind', 'the direction of each copy is')}, "
            f"{', '.join(kinds)} "
            f"FROM {table} AS t ORDER BY t.start")))
    frame[_GPU_IDS] = frame[_GPU_IDS].fillna(-1)
    frame["kind"] = _enum_names(export, "memcpy", frame["copyKind"], MEMCPY_OPER_CODES,
                                COPY_KIND_OF_TOKEN)
    for column, alias in (("srcKind", "src_kind"), ("dstKind", "dst_kind")):
        frame[alias] = _enum_names(export, "memory", frame[column], MEMORY_KIND_CODES,
                                   MEMORY_KIND_OF_TOKEN)
    frame["bytes"] = frame["bytes"].fillna(-1)
    return conform("memcpy", frame)


def _memset(export: _Export) -> pd.DataFrame | None:
    """CUPTI_ACTIVITY_KIND_MEMSET."""
    table = "CUPTI_ACTIVITY_KIND_MEMSET"
    if not export.usable(table, ("start", "end", "deviceId", "streamId")):
        return None
    frame = _native_activity(export, table, "memset", ["bytes"])
    if frame is None:
        frame = _sql_qualified(export, _valid_rows(export, "memset", export.query(
            f"SELECT {_checked_times('t')}, deviceId AS device, streamId AS stream, "
            f"{_sql_correlation(export, table, _LAUNCHED_BY.format('memset'))}, "
            f"{_sql_optional(export, table, 'bytes', 'the bytes of each memset are')} "
            f"FROM {table} AS t ORDER BY t.start")))
    frame[_GPU_IDS] = frame[_GPU_IDS].fillna(-1)
    frame["bytes"] = frame["bytes"].fillna(-1)
    return conform("memset", frame)


def _native_runtime(export: _Export, table: str) -> pd.DataFrame | None:
    """The runtime table from the export's pages, or None (then SQL reads it). Names and
    threads (globalTids) are numbered while the chunks are decoded; each distinct name is looked
    up once, and each distinct thread decoded once into the pid and tid categoricals
    (model.id_categorical: 17 M calls of a few dozen threads take 2 bytes a row, not 8)."""
    names, threads = _Vocabulary(), _Vocabulary()

    def part(values: dict[str, np.ndarray], kinds: dict[str, np.ndarray],
             texts: dict[str, np.ndarray]) -> tuple[_Part]:
        """One chunk: times, correlation, and the codes of the thread (globalTid) and name."""
        kept, valid = _timed_part(values, kinds, {"correlationId": "correlation"})
        kept.columns.update({"thread": threads.codes(_ids(values, kinds, "globalTid", valid)),
                             "name": names.codes(_ids(values, kinds, "nameId", valid))})
        return (kept,)

    parts = export.native_parts(table, ["start", "end", "globalTid", "correlationId", "nameId"],
                                part)
    if parts is None:
        return None
    columns = _counted(export, "runtime", parts[0])
    texts = [concepts.strip_api_version(_recorded_name(export, key))
             for key in names.in_order()]
    columns["name"] = categorical(texts, columns["name"])
    _thread_categoricals(export, columns, threads)
    return _native_table("runtime", columns)


def _thread_categoricals(export: _Export, columns: dict[str, np.ndarray | pd.Categorical],
                         threads: _Vocabulary) -> None:
    """The ``thread`` codes of a page reader's table (into ``threads``, the globalTids it met)
    replaced by its pid and tid columns: each distinct globalTid decoded once, the rows'
    codes kept (model.id_categorical)."""
    thread = columns.pop("thread")
    pids, tids = _pid_tid(np.array(threads.in_order(), dtype=np.int64), export.pid_mask)
    columns["pid"], columns["tid"] = id_categorical(pids, thread), id_categorical(tids, thread)


def _runtime(export: _Export) -> pd.DataFrame | None:
    """CUPTI_ACTIVITY_KIND_RUNTIME: CUDA runtime/driver calls, version suffixes stripped."""
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if not export.usable(table, ("start", "end", "globalTid", "nameId")):
        return None
    native = _native_runtime(export, table)
    if native is not None:
        return native
    correlation = _sql_optional(export, table, "correlationId",
                                "which GPU work each runtime call launched is", "correlation")
    frame = _valid_rows(export, "runtime", export.query(
        f"SELECT {_checked_times('t')}, {_decoded_tid(export, 't.globalTid')}, "
        f"{correlation}, s.value AS name FROM {table} AS t "
        f"LEFT JOIN StringIds AS s ON s.id = t.nameId ORDER BY t.start"))
    frame[["pid", "tid", "correlation"]] = frame[["pid", "tid", "correlation"]].fillna(-1)
    frame["name"] = _map_unique(frame["name"].fillna(concepts.UNRECORDED_NAME),
                                concepts.strip_api_version)
    return _id_categoricals(_categorical_names(conform("runtime", frame), ("name",)))


def _id_categoricals(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (read by SQL) with its pid and tid as categoricals, as the page reader holds
    them (:func:`_thread_categoricals`)."""
    for column in ("pid", "tid"):
        codes, ids = pd.factorize(frame[column].to_numpy())
        frame[column] = id_categorical(ids, codes)
    return frame


def _sync(export: _Export) -> pd.DataFrame | None:
    """CUPTI_ACTIVITY_KIND_SYNCHRONIZATION with the sync type named."""
    table = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    if not export.usable(table, ("start", "end", "deviceId", "streamId")):
        return None
    frame = _native_activity(export, table, "sync", ["syncType"])
    if frame is None:
        frame = _sql_qualified(export, _valid_rows(export, "sync", export.query(
            f"SELECT {_checked_times('t')}, deviceId AS device, streamId AS stream, "
            f"{_sql_correlation(export, table, 'which runtime call waited in each sync is')}, "
            f"{_sql_optional(export, table, 'syncType', 'what each sync waited for is')} "
            f"FROM {table} AS t ORDER BY t.start")))
    frame["kind"] = _enum_names(export, "sync", frame["syncType"], SYNC_TYPE_CODES)
    frame[_GPU_IDS] = frame[_GPU_IDS].fillna(-1)
    stream = frame["stream"].to_numpy(np.int64)
    # A sync that waited on no stream (concepts.UNSET_STREAM) reads -1 like every unknown id:
    # its int64 column held a million syncs in 8 bytes each instead of one.
    frame["stream"] = narrowed(concepts.recorded_streams(stream))
    return conform("sync", frame)


_RANGE_COLUMNS = ["start", "end", "eventType", "text", "globalTid", "textId", "domainId"]
#: concepts.UNRECORDED_NAME as an SQL literal: the name of a range of no text and no textId
#: string (see _recorded_name), of a runtime call, OS runtime call or thread whose nameId is NULL
#: or missing from StringIds (a name recorded as '' stays '').
_UNRECORDED_SQL = f"'{concepts.UNRECORDED_NAME}'"


# A range's (domainId, pid) as one key: (domainId + 1) * _PID_KEYS + pid (a pid takes 40 bits
# at most, see _PROCESS_MASK).
_PID_KEYS = _PROCESS_MASK + 1


def _range_part(names: _Vocabulary, domains: _Vocabulary, threads: _Vocabulary, pid_mask: int,
                types: NvtxTypes, values: dict[str, np.ndarray], kinds: dict[str, np.ndarray],
                texts: dict[str, np.ndarray]) -> tuple[_Part, _Part, _Part]:
    """One chunk of NVTX events: its ranges (times, the codes of the thread: its globalTid, of
    the name: its text, else its textId, and of its (domainId, pid)), its domain-create events
    (domainId, pid, text) and its marks in a domain (domainId, pid, text or textId)."""
    global_tids = np.where(kinds["globalTid"] == sqlite_pages.NULL, -1, values["globalTid"])
    pids, tids = _pid_tid(global_tids.copy(), pid_mask)
    has_text = kinds["text"] == sqlite_pages.TEXT
    in_domain = kinds["domainId"] == sqlite_pages.INTEGER
    created = (values["eventType"] == types.domain_create) & in_domain & has_text
    creates = _Part({"domain": values["domainId"][created], "pid": pids[created],
                     "text": texts["text"][created]})
    marked = ((values["eventType"] == types.mark) & in_domain & (values["domainId"] != 0)
              & (pids >= 0))
    marks = _Part({"domain": values["domainId"][marked], "pid": pids[marked],
                   "text": np.where(has_text[marked], texts["text"][marked],
                                    _ids(values, kinds, "textId", marked).astype(object))})
    is_range = (np.isin(values["eventType"], types.ranges)
                & (kinds["eventType"] == sqlite_pages.INTEGER)
                & (kinds["end"] != sqlite_pages.NULL) & (tids >= 0))
    ranges, picked = _timed_part(values, kinds, {}, rows=is_range)
    text_ids = _ids(values, kinds, "textId", picked).astype(object)
    keys = np.where(has_text[picked], texts["text"][picked], text_ids)
    domain_keys = ((_ids(values, kinds, "domainId", picked).astype(np.int64) + 1) * _PID_KEYS
                   + pids[picked])
    ranges.columns.update({"thread": threads.codes(global_tids[picked]),
                           "name": names.codes(keys), "domain": domains.codes(domain_keys)})
    return ranges, creates, marks


def _native_ranges(export: _Export, table: str) -> pd.DataFrame | None:
    """The NVTX ranges from the export's pages (as :func:`_ranges` selects them), or None. Names,
    domains and threads are numbered while the chunks are decoded and named (decoded) once
    each: pid and tid are categoricals as the runtime table's are (4.5 M ranges of a few
    threads: a byte a row each, not 4)."""
    if not set(_RANGE_COLUMNS) <= export.columns(table):
        return None
    names, domains, threads = _Vocabulary(), _Vocabulary(), _Vocabulary()
    parts = export.native_parts(table, _RANGE_COLUMNS, functools.partial(
        _range_part, names, domains, threads, export.pid_mask, export.nvtx_types),
        texts=("text",))
    if parts is None:
        return None
    columns, creates = _counted(export, "ranges", parts[0]), parts[1].columns
    domain_of = _domain_names(creates)
    marks = parts[2].columns
    export.rank_marks = [
        (int(pid), key if isinstance(key, str) else export.strings.get(key) or "")
        for domain, pid, key in zip(marks["domain"].tolist(), marks["pid"].tolist(),
                                    marks["text"].tolist(), strict=True)
        if domain_of.get((domain, pid)) == concepts.RANK_DOMAIN]
    texts = [_recorded_name(export, key) for key in names.in_order()]
    domain_texts = [domain_of.get((key // _PID_KEYS - 1, key % _PID_KEYS), "")
                    for key in domains.in_order()]
    columns["name"] = categorical(texts, columns["name"])
    columns["domain"] = categorical(domain_texts, columns["domain"])
    _thread_categoricals(export, columns, threads)
    return _native_table("ranges", columns)


def _recorded_name(export: _Export, key: str | int) -> str:
    """A name from its key (a range's text, else its textId; a runtime call's nameId):
    :data:`~profreport.concepts.UNRECORDED_NAME` where it has neither text nor an id that
    StringIds holds (nsys recorded no name for it), as the SQL reader names it."""
    text = key if isinstance(key, str) else export.strings.get(key)
    return concepts.UNRECORDED_NAME if text is None else text


def _domain_names(creates: dict[str, np.ndarray]) -> dict[tuple[int, int], str]:
    """The name of each (domainId, pid) from its domain-create events (the least text)."""
    frame = pd.DataFrame({"domain": creates.get("domain", np.empty(0, np.int64)),
                          "pid": creates.get("pid", np.empty(0, np.int64)),
                          "text": pd.Series(creates.get("text", np.empty(0, object)),
                                            dtype=object)})
    return {(int(d), int(p)): str(t)
            for (d, p), t in frame.groupby(["domain", "pid"])["text"].min().items()}


def _ranges(export: _Export) -> pd.DataFrame | None:
    """NVTX push/pop and start/end ranges: text or textId, domain from domain-create events."""
    table = "NVTX_EVENTS"
    if not export.usable(table, ("start", "end", "eventType", "globalTid")):
        return None
    if export.lacking(table, ("domainId",), "the NVTX domain of each range (and the rank "
                      f"marks of domain {concepts.RANK_DOMAIN}) is"):
        return _domainless_ranges(export, table)
    native = _native_ranges(export, table)
    if native is not None:
        return native
    text, text_id, text_join = _range_texts(export, table)
    types = export.nvtx_types
    range_types = _range_types(export)
    domains = (f"WITH domains AS (SELECT domainId, {_decoded_pid(export, 'globalTid')} AS pid, "
               f"MIN({text}) AS domain FROM {table} AS t WHERE eventType = "
               f"{types.domain_create} GROUP BY 1, 2) ")
    joins = (f"FROM {table} AS t {text_join} LEFT JOIN domains AS d ON d.domainId = t.domainId "
             f"AND d.pid = {_decoded_pid(export, 't.globalTid')} ")
    frame = export.query(
        f"{domains}SELECT {_checked_times('t')}, {_decoded_tid(export, 't.globalTid')}, "
        f"COALESCE({text}, {text_id}, {_UNRECORDED_SQL}) AS name, "
        f"COALESCE(d.domain, '') AS domain {joins}"
        f"WHERE t.eventType IN ({range_types}) AND t.end IS NOT NULL "
        f"AND t.globalTid IS NOT NULL ORDER BY t.start")
    marks = export.query(
        f"{domains}SELECT {_decoded_pid(export, 't.globalTid')} AS pid, "
        f"COALESCE({text}, {text_id}, '') AS text {joins}WHERE t.eventType = {types.mark} "
        f"AND t.globalTid IS NOT NULL AND d.domain = '{concepts.RANK_DOMAIN}'")
    export.rank_marks = list(marks.itertuples(index=False, name=None))
    return _id_categoricals(_categorical_names(conform("ranges", _valid_rows(
        export, "ranges", frame)), ("name", "domain")))


def _domainless_ranges(export: _Export, table: str) -> pd.DataFrame:
    """NVTX ranges of an export whose NVTX_EVENTS has no domainId: as :func:`_ranges` reads
    them, each range's domain unknown (empty) and no rank marks."""
    text, text_id, text_join = _range_texts(export, table)
    frame = export.query(
        f"SELECT {_checked_times('t')}, {_decoded_tid(export, 't.globalTid')}, "
        f"COALESCE({text}, {text_id}, {_UNRECORDED_SQL}) AS name, '' AS domain "
        f"FROM {table} AS t {text_join} "
        f"WHERE t.eventType IN ({_range_types(export)}) AND t.end IS NOT NULL "
        f"AND t.globalTid IS NOT NULL ORDER BY t.start")
    return _categorical_names(conform("ranges", _valid_rows(export, "ranges", frame)),
                              ("name", "domain"))


def _range_texts(export: _Export, table: str) -> tuple[str, str, str]:
    """SQL for a range's text, its textId's string and the join that string needs (NULL and
    no join where the export lacks the column)."""
    cols = export.columns(table)
    text = "t.text" if "text" in cols else "NULL"
    text_id = "s.value" if "textId" in cols else "NULL"
    text_join = "LEFT JOIN StringIds AS s ON s.id = t.textId" if "textId" in cols else ""
    return text, text_id, text_join


def _range_types(export: _Export) -> str:
    """The eventType codes of NVTX ranges, as an SQL list."""
    return ", ".join(str(code) for code in export.nvtx_types.ranges)


def _osrt(export: _Export) -> pd.DataFrame | None:
    """OSRT_API: OS runtime calls (``--trace=osrt``)."""
    table = "OSRT_API"
    if not export.usable(table, ("start", "end", "globalTid", "nameId")):
        return None
    frame = export.query(
        f"SELECT {_checked_times('t')}, {_decoded_tid(export, 't.globalTid')}, "
        f"COALESCE(s.value, {_UNRECORDED_SQL}) AS name "
        f"FROM {table} AS t LEFT JOIN StringIds AS s ON s.id = t.nameId ORDER BY t.start")
    return conform("osrt", _valid_rows(export, "osrt", frame))


def _devices(export: _Export) -> pd.DataFrame | None:
    """TARGET_INFO_GPU (id as CUPTI deviceId, name, memory, SM count, compute capability)."""
    table = "TARGET_INFO_GPU"
    if not export.usable(table, ("id", "name")):
        return None
    cols = export.columns(table)
    optional = {"memory_bytes": "totalMemory", "sm_count": "smCount",
                "compute_major": "computeMajor", "compute_minor": "computeMinor"}
    selected = ", ".join(f"{column if column in cols else '-1'} AS {name}"
                         for name, column in optional.items())
    frame = export.query(f"SELECT DISTINCT id AS device, name, {selected} "
                         f"FROM {table} ORDER BY id")
    frame[list(optional)] = frame[list(optional)].fillna(-1)
    return conform("devices", frame.drop_duplicates("device"))


def _memory(export: _Export) -> pd.DataFrame | None:
    """CUDA_GPU_MEMORY_USAGE_EVENTS (``--cuda-memory-usage=true``): driver allocations.

    These are the CUDA driver's allocations and releases, which for PyTorch are the caching
    allocator's segments: the running sum is reserved memory (``counts`` = ``reserved``).
    """
    table = "CUDA_GPU_MEMORY_USAGE_EVENTS"
    if not export.usable(table, ("start", "globalPid", "deviceId", "bytes", "memKind",
                                 "memoryOperationType")):
        return None
    address = "address" if "address" in export.columns(table) else "-1"
    frame = export.query(
        f"SELECT start AS time, {_decoded_pid(export, 'globalPid')} AS pid, deviceId, "
        f"bytes, memoryOperationType, memKind, {address} AS addr "
        f"FROM {table} ORDER BY start")
    on_device = _enum_names(export, "memory", frame["memKind"], MEMORY_KIND_CODES,
                            MEMORY_KIND_OF_TOKEN).isin(DEVICE_MEMORY_KINDS)
    released = frame["memoryOperationType"] == _memory_release_code(export)
    frame["bytes"] = frame["bytes"].where(~released, -frame["bytes"])
    frame["device"] = frame["deviceId"].where(on_device, -1)
    frame["device_kind"] = on_device.map({True: "cuda", False: "cpu"})
    frame[["addr", "device"]] = frame[["addr", "device"]].fillna(-1)
    frame = frame.assign(tid=-1, total_allocated=-1, total_reserved=-1, counts="reserved")
    return conform("memory", frame)


def _memory_release_code(export: _Export) -> int:
    """The memoryOperationType of a release, from the export's enum table when it has one."""
    if _MEMORY_OPER_TABLE in export.tables and {"id", "name"} <= export.columns(
            _MEMORY_OPER_TABLE):
        rows = export.query(f"SELECT id, name FROM {_MEMORY_OPER_TABLE}")
        releases = rows.loc[rows["name"].astype(str).str.endswith("DEALLOCATION"), "id"]
        if not releases.empty:
            return int(releases.iloc[0])
    return MEMORY_RELEASE_CODE


def _threads(export: _Export) -> pd.DataFrame | None:
    """ThreadNames: names of the traced threads, pid/tid decoded from globalTid."""
    table = "ThreadNames"
    if not export.usable(table, ("nameId", "globalTid")):
        return None
    frame = export.query(
        f"SELECT {_decoded_tid(export, 't.globalTid')}, "
        f"COALESCE(s.value, {_UNRECORDED_SQL}) AS name "
        f"FROM {table} AS t LEFT JOIN StringIds AS s ON s.id = t.nameId")
    return conform("threads", frame.drop_duplicates(["pid", "tid"], keep="last"))


def steps_from_ranges(ranges: pd.DataFrame) -> pd.DataFrame:
    """``step N`` ranges of the thread that has the most of them (the first such thread in
    (pid, tid) order on a tie), one row per step number."""
    steps = concepts.step_marks(ranges)
    if steps.empty:
        return empty_table("steps")
    steps = steps[concepts.stepping_thread(steps)]
    return conform("steps", concepts.one_row_per_step(steps).assign(origin="nvtx"))


def dataloader_from_ranges(ranges: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Ranges that mark fetching the next batch (concepts.is_dataloader_span), every loader's
    (which fed training, the analysis tells: reports.analysis.dataloader), of the process whose
    ``steps`` they are when there are steps: in a capture of several processes (torchrun under
    nsys) another rank's waits are not this one's."""
    loader = ranges[concepts.is_dataloader_span(ranges["name"]).to_numpy()]
    if not steps.empty:
        loader = loader[loader["pid"].to_numpy() == steps["pid"].iloc[0]]
    return conform("dataloader", loader)


#: The tables whose rows belong to the process that launched them (through the correlation id of
#: its runtime call), and those whose rows name their process.
_LAUNCHED_TABLES = ("kernels", "memcpy", "memset", "sync")
_PROCESS_TABLES = ("runtime", "ranges", "osrt", "threads", "memory")
#: The launched tables that are GPU work: a process that launched none of it (only syncs, or
#: calls such as cudaGetDeviceCount) has none of its own.
_WORK_TABLES = ("kernels", "memcpy", "memset")


def process_profiles(profile: Profile) -> list[Profile]:
    """One profile per process of an nsys capture that has work of its own (GPU work its
    runtime calls launched) or that recorded its rank, or, in a capture where none did, that
    marks ``step N`` ranges, in pid order, to be read as the ranks of a job; ``[profile]`` when
    at most one process has (a launcher's OS calls are no work, nor a worker's runtime calls
    that launched nothing: a DataLoader or compile worker's cudaGetDeviceCount, nor a range
    repeated as a step: DataLoader workers run the same code as ranks do), or when the capture
    is one rank already (its rank given by the manifest, or recorded): then a note names the
    processes read together.
    A process's GPU rows are those its runtime calls launched (correlation ids are its own,
    see _qualified), whatever the device; rows whose launch was not recorded are no process's,
    and a note counts them. A process's rank and world size are those it recorded (see
    member_ranks); else its rank is unknown: an export records neither a process's environment
    (torchrun's RANK) nor its arguments. The tables are moved into the parts one at a time
    (``profile`` is left without them), so a large capture is never held twice."""
    ranges, runtime = profile.table("ranges"), profile.table("runtime")
    if len(_pid_bounds(profile.tables)) <= 1:
        return [profile]  # one process: no table of 10^7 pids hashed, nor ranges copied
    recorded = profile.meta.recorded_ranks if isinstance(profile.meta, NsysMeta) else {}
    refused = profile.meta.refused_rank_marks if isinstance(profile.meta, NsysMeta) else {}
    callers = set(distinct_ids(runtime["pid"]).tolist())
    marked, spans = _stepped_processes(ranges)
    candidates = np.array(sorted(callers.union(marked, spans, recorded) - {-1}))
    owners = {name: _launching_member(profile.tables[name], runtime, candidates)
              for name in _LAUNCHED_TABLES if name in profile.tables}
    launched = {int(at) for name in _WORK_TABLES if name in owners
                for at in np.unique(owners[name]) if at >= 0}
    anchored = [at for at, pid in enumerate(candidates.tolist())
                if at in launched or pid in recorded]
    chosen = anchored or [at for at, pid in enumerate(candidates.tolist()) if pid in marked]
    members = candidates[chosen]
    stepping = dict.fromkeys(marked, concepts.STEP_RANGE_FORMAT.format(n="N")) | spans
    lone = {pid: span for pid, span in stepping.items() if pid not in members}
    idle = sorted(callers.intersection(candidates.tolist()) - set(members.tolist()) - set(lone))
    if len(members) < 2 or profile.rank is not None:
        if len(members) == 1 and lone and set(profile.table("steps")["pid"]) - set(members):
            _steps_of(profile, [int(members[0])])
        elif not len(members) and lone:
            lone = _lone_steps(profile, lone)
        if len(members) == 1 and profile.rank is None and isinstance(profile.meta, NsysMeta):
            profile.rank = _own_rank(profile.meta, int(members[0]))
        profile.meta.notes += _whole_notes(profile.rank, members.tolist()) + _no_rank_notes(
            idle, lone, "these figures", bool(anchored))
        return [profile]
    place = np.full(len(candidates) + 1, -1, dtype=np.int16)  # -1 (no caller) reads the last
    place[chosen] = np.arange(len(members), dtype=np.int16)
    owners = {name: place[owner] for name, owner in owners.items()}
    lost = ", ".join(f"{count:,} {name} rows" for name, owner in owners.items()
                     if (count := int((owner < 0).sum())))
    del ranges, runtime  # the tables are let go as they are moved
    tables: list[dict[str, pd.DataFrame]] = [{} for _ in members]
    for name in [name for name in profile.tables if name in (*_PROCESS_TABLES, *owners)]:
        frame = profile.tables.pop(name)
        owner = owners.pop(name) if name in owners else _member_of(members,
                                                                     frame["pid"].to_numpy())
        for at, mine in enumerate(tables):
            mine[name] = conform(name, frame[owner == at])
    said = (f"one of the {len(members)} processes of this capture with work of their own "
            f"({', '.join(map(process_label, members.tolist()))}), read as the ranks of one job; ")
    lost_said = (f"; {lost} were launched by no recorded runtime call, so they are in no "
                 "process's figures" if lost else "")
    idle_said = "".join(f"; {note}" for note in _no_rank_notes(
        idle, lone, "no process's figures", bool(anchored)))
    return [_process_part(profile, int(pid), mine, rank, said + rank_said + (
        ": it is named by its pid" if rank is None else "") + lost_said + idle_said)
            for pid, mine, (rank, rank_said) in zip(
                members.tolist(), tables, member_ranks(members.tolist(), recorded, refused),
                strict=True)]


def _no_rank_notes(idle: list[int], lone: dict[int, str], where: str,
                   anchored: bool) -> list[str]:
    """Why the processes of a capture that are no rank are none, and that their rows are in
    ``where``: ``idle`` made runtime calls that launched no GPU work; ``lone`` (pid: the range
    it repeats) launched none and recorded no rank: no rank where another process did
    (``anchored``: a DataLoader worker annotating each sample, its workers running the same
    code), nor where no other process repeats its range; several repeating one range in a
    capture where none did are of unknown role (ranks run the same code, and so do the workers
    of one DataLoader)."""
    notes = [f"{', '.join(map(process_label, idle))}: runtime calls that launched no GPU work, "
             f"and no steps, so no rank of the job; their calls are in {where}"] if idle else []
    sharing: dict[str, list[int]] = {}
    for pid, span in sorted(lone.items()):
        sharing.setdefault(span, []).append(pid)
    for span, pids in sharing.items():
        named, one = ", ".join(map(process_label, pids)), len(pids) == 1
        repeated = (f"its range '{span}' repeats" if one else
                    f"each repeats the range '{span}'") + " as a step would"
        if anchored:
            neither = ("it launched no GPU work and recorded no rank" if one else
                       "none of them launched GPU work or recorded its rank")
            notes.append(f"{named}: {repeated}, but {neither}, as another process of the "
                         f"capture did, so {'it is no rank' if one else 'they are no ranks'} "
                         "of the job (a DataLoader worker annotating each sample; the workers "
                         f"of one DataLoader run the same code); {'its' if one else 'their'} "
                         f"ranges are in {where}")
        elif one:
            notes.append(f"{named}: {repeated}, but in no other process, and it launched no GPU "
                         f"work, so it is no rank of the job; its ranges are in {where}")
        else:
            notes.append(f"{named}: {repeated}, and no process of the capture launched GPU "
                         "work or recorded its rank, so whether they are the ranks of one job "
                         "or the workers of one DataLoader (both run the same code) is "
                         f"unknown: they are not read as a job; their ranges are in {where}")
    return notes


def _steps_of(profile: Profile, pids: list[int]) -> None:
    """The steps and DataLoader ranges of a capture read whole, found again in the ranges of
    ``pids``, the processes whose steps they are (none: the steps are unknown): the repeated
    range of another (a DataLoader worker annotating each sample, busier than the training) is
    no step of it."""
    tables, meta = profile.tables, profile.meta
    if meta.steps_note is not None:
        meta.notes = [note for note in meta.notes if note != meta.steps_note]
        meta.steps_note = None
    own = {"ranges": tables["ranges"][np.isin(tables["ranges"]["pid"].to_numpy(), pids)]}
    own["steps"], meta.step_span = steps_from_ranges(own["ranges"]), None
    _nvtx_structure(own, meta)
    tables["steps"] = own["steps"]
    tables["dataloader"] = dataloader_from_ranges(tables["ranges"], own["steps"])


def _lone_steps(profile: Profile, lone: dict[int, str]) -> dict[int, str]:
    """The steps of a capture read whole where no process launched GPU work, recorded its rank
    or marked ``step N``, and ``lone`` (pid: its range) repeat ranges: the range that holds
    some of every other's ranges and none of whose ranges another holds (a training step holds
    the samples a DataLoader worker loads meanwhile; a sample holds no step) is the step; when
    none does, a note says the step source is ambiguous and the steps are unknown. Returns the
    processes of ``lone`` whose notes are still to be said (not one whose range is the step)."""
    ranges = profile.table("ranges")
    sharing: dict[str, list[int]] = {}
    for pid, span in sorted(lone.items()):
        sharing.setdefault(span, []).append(pid)
    extents = {span: _repeat_extents(ranges, pids) for span, pids in sharing.items()}
    holds = {span: {other for other in extents if other != span
                    and _holds_some(extents[span], extents[other])} for span in extents}
    step = [span for span in extents if len(holds[span]) == len(extents) - 1
            and not any(span in held for held in holds.values())]
    if not step:
        _steps_of(profile, [])
        profile.meta.notes.append(
            "the step source is ambiguous: " + ", ".join(
                f"{', '.join(map(process_label, pids))}'s range '{span}'"
                for span, pids in sharing.items()) + " repeat as a step would, none holds the "
            "others' ranges, and no process launched GPU work or recorded its rank, so the "
            "steps are unknown")
        return {}
    _steps_of(profile, sharing[step[0]])
    return {pid: span for pid, span in lone.items()
            if span != step[0] or len(sharing[span]) > 1}


def _repeat_extents(ranges: pd.DataFrame, pids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The (starts, ends), by start, of the range that repeats as a step in the ranges of
    ``pids`` (on its busiest thread, see _nvtx_structure)."""
    own = _program_ranges(ranges)
    steps = steps_from_repeats(own[np.isin(own["pid"].to_numpy(), pids)], "nvtx",
                               masked_numbers)[0].sort_values("start")
    return steps["start"].to_numpy(np.int64), steps["end"].to_numpy(np.int64)


def _holds_some(outer: tuple[np.ndarray, np.ndarray], inner: tuple[np.ndarray, np.ndarray]
                ) -> bool:
    """Whether some range of ``inner`` lies within one of ``outer`` (both (starts, ends) by
    start, ``outer``'s ranges one after another)."""
    if not len(outer[0]):
        return False
    at = np.searchsorted(outer[0], inner[0], side="right") - 1
    inside = (at >= 0) & (outer[1][np.maximum(at, 0)] >= inner[1])
    return bool(inside.any())


def _whole_notes(rank: int | None, members: list[int]) -> list[str]:
    """The note of a capture of several processes with work of their own read whole as the one
    ``rank`` it is (none otherwise)."""
    if rank is None or len(members) < 2:
        return []
    return [f"this capture is rank {rank}: its {len(members)} processes with work of their own "
            f"({', '.join(map(process_label, members))}) are read together as that rank"]


def _pid_bounds(tables: dict[str, pd.DataFrame]) -> set[int]:
    """The least and the greatest pid the NVTX ranges and runtime calls name: one when they are
    one process's, none without rows (found without hashing a table of 10^7 pids)."""
    columns = [_held_ids(tables[name]["pid"]) for name in ("ranges", "runtime")
               if name in tables and len(tables[name])]
    return {int(end) for column in columns for end in (column.min(), column.max())}


def _held_ids(column: pd.Series) -> np.ndarray:
    """An id column's values to take the least and greatest of: a categorical's distinct ones
    (model.distinct_ids), another's as they are (no hashing)."""
    return distinct_ids(column) if isinstance(column.dtype, pd.CategoricalDtype) \
        else column.to_numpy()


def _capture_rank(tables: dict[str, pd.DataFrame], meta: NsysMeta) -> int | None:
    """The rank of a capture whose ranges and runtime calls are one process's (see _own_rank);
    None otherwise (a capture of several takes its ranks in process_profiles)."""
    if not meta.recorded_ranks and not meta.refused_rank_marks:
        return None
    pids = _pid_bounds(tables)
    return _own_rank(meta, pids.pop()) if len(pids) == 1 else None


def _own_rank(meta: NsysMeta, pid: int) -> int | None:
    """The rank of a capture whose one process with work of its own, ``pid``, recorded its
    rank (nsys run by each rank, as the runner does on each node of a multi-node job, beside a
    launcher or a DataLoader worker): its world size set in ``meta`` and a note saying so (or
    why not, when it recorded several or a mark that is no rank); None when it recorded none."""
    if pid not in meta.recorded_ranks and pid not in meta.refused_rank_marks:
        return None
    rank, said = member_ranks([pid], meta.recorded_ranks, meta.refused_rank_marks)[0]
    meta.notes.append(f"{process_label(pid)}, the capture's one process with work of its own: "
                      f"{said}")
    if rank is None:
        return None
    meta.world_size, meta.distributed = rank[1], True
    return rank[0]


def recorded_ranks(marks: Iterable[tuple[int, str]]) -> dict[int, list[tuple[int, int]]]:
    """The distinct (rank, world size) of each process's marks of concepts.RANK_DOMAIN
    (``(pid, text)``, texts that are no rank left out), by pid, in order."""
    found: dict[int, set[tuple[int, int]]] = {}
    for pid, text in marks:
        rank = concepts.rank_of_mark(text)
        if rank is not None:
            found.setdefault(pid, set()).add(rank)
    return {pid: sorted(ranks) for pid, ranks in sorted(found.items())}


def refused_rank_marks(marks: Iterable[tuple[int, str]]) -> dict[int, tuple[str, int]]:
    """The marks of concepts.RANK_DOMAIN (``(pid, text)``) that are no rank
    (concepts.rank_of_mark: ``rank 5 of 4``, a world size past MAX_WORLD_SIZE), by pid: the
    first such text each process recorded, cut to what a note quotes, and how many it
    recorded."""
    found: dict[int, tuple[str, int]] = {}
    for pid, text in marks:
        if concepts.rank_of_mark(text) is None:
            first, count = found.get(pid, (elide(str(text), 4 * MAX_ERROR_NAME), 0))
            found[pid] = (first, count + 1)
    return dict(sorted(found.items()))


def _refused_said(refused: tuple[str, int]) -> str:
    """Why a process whose rank marks are no rank (``refused``: the first, and how many; see
    refused_rank_marks) has no rank, the mark quoted as an error line quotes a name."""
    text, count = refused
    marks = "a mark" if count == 1 else f"{count:,} marks"
    first = "" if count == 1 else "the first "
    rule = concepts.RANK_MARK_FORMAT.format(rank="R", world_size="W")
    return (f"its rank is unknown: it recorded {marks} in domain '{concepts.RANK_DOMAIN}' that "
            f"{'is' if count == 1 else 'are'} no rank, {first}{error_text(repr(text))} (a rank "
            f"mark is '{rule}', R below W, W at most {concepts.MAX_WORLD_SIZE:,})")


def member_ranks(members: list[int], recorded: dict[int, list[tuple[int, int]]],
                 refused: dict[int, tuple[str, int]] | None = None
                 ) -> list[tuple[tuple[int, int] | None, str]]:
    """For each process of a capture (``members``, pids), the (rank, world size) it recorded
    (:func:`recorded_ranks`) and the sentence saying so; None, and why, when it recorded none,
    only marks that are no rank (``refused``, :func:`refused_rank_marks`), several, or one that
    another process recorded too (no two processes are one rank)."""
    claims: dict[tuple[int, int], list[int]] = {}
    for pid in members:
        for rank in recorded.get(pid, []):
            claims.setdefault(rank, []).append(pid)
    out: list[tuple[tuple[int, int] | None, str]] = []
    for pid in members:
        ranks = recorded.get(pid, [])
        names = [concepts.rank_mark_name(*rank) for rank in ranks]
        if not ranks and refused and pid in refused:
            out.append((None, _refused_said(refused[pid])))
        elif not ranks:
            mark = concepts.RANK_MARK_FORMAT.format(rank="R", world_size="W")
            out.append((None, "its rank is unknown (it recorded none, as profreport's runner "
                              f"does with an NVTX mark '{mark}' in domain "
                              f"'{concepts.RANK_DOMAIN}', and an nsys export records no "
                              "process's environment, where torchrun's RANK is)"))
        elif len(ranks) > 1:
            out.append((None, f"its rank is unknown: it recorded {len(ranks)} different ranks "
                              f"({', '.join(names)}), so none is taken"))
        elif len(claims[ranks[0]]) > 1:
            others = [process_label(other) for other in claims[ranks[0]] if other != pid]
            out.append((None, f"its rank is unknown: it recorded {names[0]}, as "
                              f"{' and '.join(others)} did, so neither is taken"))
        else:
            out.append((ranks[0], f"it recorded its rank, {names[0]} (an NVTX mark in domain "
                                  f"'{concepts.RANK_DOMAIN}')"))
    return out


def _stepped_processes(ranges: pd.DataFrame) -> tuple[set[int], dict[int, str]]:
    """The processes whose NVTX ranges mark steps, ``step N`` ranges; and, in a capture where
    no range is named as a step, the processes whose own ranges repeat as a step does (see
    _nvtx_structure), with the name of that range: whether they are ranks depends on the
    capture's other evidence (see process_profiles)."""
    marked = concepts.step_marks(ranges)["pid"]
    if len(marked):
        return set(marked.tolist()), {}
    own = _program_ranges(ranges)
    return set(), {pid: span for pid in pd.unique(own["pid"]).tolist() if (
        span := steps_from_repeats(own[own["pid"].to_numpy() == pid], "nvtx",
                                   masked_numbers)[1])}


def _process_part(profile: Profile, pid: int, tables: dict[str, pd.DataFrame],
                  rank: tuple[int, int] | None, said: str) -> Profile:
    """The profile of process ``pid`` of ``profile``'s capture, from its own ``tables``: its
    steps and DataLoader ranges found again in its own ranges, the devices shared, its ``rank``
    and world size when it recorded them, the note ``said`` and the capture's notes of rows
    dropped."""
    if "devices" in profile.tables:
        tables["devices"] = profile.tables["devices"]
    meta = replace(profile.meta, step_span=None, notes=[
        *(dropped_note(table, count) for table, count in profile.meta.dropped.items()),
        f"{process_label(pid)}: {said}"])
    if rank is not None:
        meta.world_size, meta.distributed = rank[1], True
    if "ranges" in tables:
        tables["steps"] = steps_from_ranges(tables["ranges"])
        tables["dataloader"] = dataloader_from_ranges(tables["ranges"], tables["steps"])
        _nvtx_structure(tables, meta)
    meta.empty = nothing_recorded(tables)
    return Profile(path=profile.path, kind=profile.kind, tool_version=profile.tool_version,
                   rank=rank[0] if rank is not None else None, tables=tables, meta=meta,
                   process=pid)


def _launching_member(table: pd.DataFrame, runtime: pd.DataFrame,
                      members: np.ndarray) -> np.ndarray:
    """For each row of a GPU table, the place among ``members`` (sorted pids) of the process
    of the runtime call with its correlation id (-1 where none was recorded)."""
    calls = runtime[runtime["correlation"].to_numpy() >= 0]
    ids = calls["correlation"].to_numpy(np.int64)
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    callers = _member_of(members, calls["pid"].to_numpy()[order])
    keys = table["correlation"].to_numpy(np.int64)
    if len(ids) == 0:
        return np.full(len(keys), -1, dtype=np.int16)
    place = np.minimum(np.searchsorted(ids, keys), len(ids) - 1)
    return np.where((ids[place] == keys) & (keys >= 0), callers[place], np.int16(-1))


def _member_of(members: np.ndarray, pids: np.ndarray) -> np.ndarray:
    """The place of each of ``pids`` among ``members`` (sorted), -1 for a pid that is none."""
    at = np.minimum(np.searchsorted(members, pids), len(members) - 1).astype(np.int16)
    return np.where(members[at] == pids, at, np.int16(-1))


def _enum_names(export: _Export, enum: str, codes: pd.Series, fallback: dict[int, str],
                vocabulary: dict[str, str] | None = None) -> pd.Series:
    """Enum codes as names, from the export's ENUM_* table when present, else nsys's codes, as
    a categorical (a million copies of a few kinds take a byte each, not an 8-byte pointer).

    With a ``vocabulary`` each enum token is mapped onto it ("unknown" when not in it); without
    one the token is returned in lower case (``stream_synchronize``).
    """
    table = _ENUM_TABLES[enum]
    tokens = fallback
    if table in export.tables and {"id", "name"} <= export.columns(table):
        rows = export.query(f"SELECT id, name FROM {table}")
        tokens = {int(code): _ENUM_TOKEN.sub("", str(name))
                  for code, name in zip(rows["id"], rows["name"], strict=True)}
    if vocabulary is None:
        names = {code: token.lower() for code, token in tokens.items()}
    else:
        names = {code: vocabulary.get(token, concepts.UNKNOWN_KIND)
                 for code, token in tokens.items()}
    return codes.map(names).fillna(concepts.UNKNOWN_KIND).astype("category")


def _map_unique(values: pd.Series, func: Callable[[str], str]) -> pd.Series:
    """Apply a scalar string function once per distinct value (names repeat 10^4-10^6 times)."""
    uniques = pd.unique(values)
    return values.map(dict(zip(uniques, (func(str(value)) for value in uniques), strict=True)))


def _export_meta(export: _Export) -> NsysMeta:
    """Exporter version, export schema and capture facts for Profile.meta."""
    meta_table = next((name for name in _EXPORT_META_TABLES if name in export.tables), None)
    exported = export.name_value(meta_table) if meta_table else {}
    capture = export.name_value(_CAPTURE_META_TABLE)
    return NsysMeta(
        exporter_version=_text_or_none(exported.get("EXPORT_PRODUCT_VERSION")),
        export_schema=_text_or_none(exported.get("EXPORT_SCHEMA_VERSION")),
        export_meta_table=meta_table,
        capture={key: value for key, value in capture.items()
                 if not key.startswith("PROCESS_0:ENVIRONMENT_VARIABLE")})


def _text_or_none(value: object) -> str | None:
    """A recorded value as text, None when absent."""
    return None if value is None else str(value)
