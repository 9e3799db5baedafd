"""torch.profiler (Kineto) traces, ``.json`` or ``.json.gz``, read as a stream into tidy tables.

Kineto writes one JSON object: a few small members (``schemaVersion``, ``deviceProperties``,
``distributedInfo``...) and ``traceEvents``, an array that can hold millions of events. The file
is never loaded whole: the reader keeps a few megabytes of text at a time, cuts the event array
at event boundaries, decodes each batch with msgspec into small structs holding only the fields
the analysis uses, and appends them to columns (numpy arrays; names, categories and thread ids
interned to integer ids). The small members before and after the array are decoded once.

A cut is checked by decoding: a batch that starts at an event and ends at an event's closing
brace decodes as a JSON array exactly when the brace closes a top-level event; a cut inside a
string or a nested object fails at the last byte, and an error earlier than that is real damage.

Both dialects are read: the 2021 one (``cat`` ``Operator``, ``Kernel``, ``Runtime``, ``Memcpy``,
``Memset``) and the current one (``cpu_op``, ``kernel``, ``cuda_runtime``, ``cuda_driver``,
``gpu_memcpy``, ``gpu_memset``, ``user_annotation``, ``python_function``). ``ProfilerStep#N``
spans go to ``ranges`` (and ``steps``), not ``cpu_ops``, whichever category recorded them.
``[memory]`` instant events (``profile_memory=True``) go to ``memory`` in both dialects: 2021
ones carry ``Device Type``, ``Device Id`` and ``Bytes``; current ones add ``Total Allocated``,
``Total Reserved`` and ``Addr``.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import numpy as np
import pandas as pd

from profreport import concepts
from profreport.errors import InputError, UnsupportedFormatError
from profreport.model import Profile, conform, empty_table

#: Kineto's ``schemaVersion`` values this parser knows (every release so far writes 1).
SUPPORTED_SCHEMA_VERSIONS = frozenset({1})

# Uncompressed bytes read at a time; large enough that Python's per-call costs vanish, small
# enough that the text in memory stays a few MB whatever the size of the trace.
READ_CHUNK = 256 << 10
# Target size of one decoded batch of events: its structs live only until they are columns.
BATCH_BYTES = 1 << 20
# Tail of the buffer searched first for a cut between two events; events are ~0.3 kB each.
CUT_WINDOW = 64 << 10
# Cuts tried before the buffer is checked for damage: a wrong cut needs "},{" inside a string
# or a nested object, which Kineto's events almost never hold.
MAX_CUT_TRIES = 8
# Members before traceEvents are a few kB in every Kineto trace; this much text without the
# array means the file is some other JSON document.
HEADER_LIMIT = 64 << 20

_GZIP_MAGIC = b"\x1f\x8b"
_TRACE_EVENTS_KEY = b'"traceEvents"'
_ARRAY_OPEN = re.compile(rb'"traceEvents"\s*:\s*(\S)')
_EVENT_GAP = re.compile(rb"\}\s*,\s*\{")
_ARRAY_CLOSE = re.compile(rb"\}\s*\]|\A\s*\]")
_DECODE_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")
_MEMCPY_NAME = re.compile(r"^Memcpy (\w+) \((\w+) -> (\w+)\)")

#: Event categories (lower-cased) of each table, for both trace dialects.
CPU_OP_CATS = frozenset({"cpu_op", "operator"})
KERNEL_CATS = frozenset({"kernel"})
MEMCPY_CATS = frozenset({"gpu_memcpy", "memcpy"})
MEMSET_CATS = frozenset({"gpu_memset", "memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime"})
ANNOTATION_CATS = frozenset({"user_annotation"})
PYTHON_CATS = frozenset({"python_function"})
#: Name of the instant events that record one allocation or release of the framework allocator.
MEMORY_EVENT_NAME = "[memory]"
#: c10::DeviceType codes of a memory event's ``Device Type`` (c10/core/DeviceType.h).
DEVICE_TYPE_NAMES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 19: "mtia"}
#: Categories that exist only in the 2021 dialect.
LEGACY_CATS = frozenset({"Operator", "Kernel", "Runtime", "Memcpy", "Memset"})


class _Args(msgspec.Struct, gc=False):
    """The ``args`` fields the analysis reads; every other key is skipped while decoding."""

    device: int = -1
    stream: int = -1
    correlation: int = -1
    bytes: int = -1
    bandwidth: float = msgspec.field(default=-1.0, name="memory bandwidth (GB/s)")
    name: Any = None
    # Memory events' fields, typed loosely: other events may reuse these keys for other values.
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    memory_bytes: Any = msgspec.field(default=None, name="Bytes")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    addr: Any = msgspec.field(default=None, name="Addr")


class _Event(msgspec.Struct, gc=False):
    """One trace event, reduced to the fields the analysis reads."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = 0.0
    dur: float = 0.0
    args: _Args | None = None


_NO_ARGS = _Args()
_EVENTS_DECODER = msgspec.json.Decoder(list[_Event])


class _Symbols:
    """Interns values (names, categories, thread ids) to dense integer ids."""

    def __init__(self) -> None:
        self._ids: dict[Any, int] = {}

    def ids(self, values: list[Any]) -> np.ndarray:
        """The id of each value, adding unseen values to the table."""
        table = self._ids
        return np.fromiter((table.setdefault(v, len(table)) for v in values), np.int32,
                           count=len(values))

    def values(self) -> np.ndarray:
        """Every interned value, indexed by id (an object array)."""
        out = np.empty(len(self._ids), dtype=object)
        out[:] = list(self._ids)
        return out

    def lookup(self, wanted: frozenset[str]) -> np.ndarray:
        """Ids of the interned values whose lower-cased text is in ``wanted``."""
        return np.array([i for v, i in self._ids.items() if str(v).lower() in wanted], np.int32)


@dataclass
class _Columns:
    """The complete-duration ("X") events of a trace, one numpy array per field."""

    cat: np.ndarray
    name: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    bytes: np.ndarray
    bandwidth: np.ndarray

    def take(self, mask: np.ndarray) -> _Columns:
        """The rows where ``mask`` holds."""
        return _Columns(**{key: value[mask] for key, value in vars(self).items()})


class _ColumnBuilder:
    """Turns batches of decoded events into columns, keeping metadata events aside."""

    def __init__(self) -> None:
        self.names = _Symbols()
        self.cats = _Symbols()
        self.threads = _Symbols()
        self.metadata: list[_Event] = []
        self.memory = _MemoryEvents()
        self._parts: list[dict[str, np.ndarray]] = []

    def add(self, events: list[_Event]) -> None:
        """Append one batch: "X" events become columns, "M" events are kept as they are."""
        spans = [e for e in events if e.ph == "X"]
        self.metadata.extend(e for e in events if e.ph == "M")
        self.memory.add(events)
        if not spans:
            return
        args = [e.args or _NO_ARGS for e in spans]
        start = _us_to_ns(np.array([e.ts for e in spans], dtype=np.float64))
        self._parts.append({
            "cat": self.cats.ids([e.cat for e in spans]),
            "name": self.names.ids([e.name for e in spans]),
            "pid": self.threads.ids([e.pid for e in spans]),
            "tid": self.threads.ids([e.tid for e in spans]),
            "start": start,
            "end": start + _us_to_ns(np.array([e.dur for e in spans], dtype=np.float64)),
            "device": np.array([a.device for a in args], dtype=np.int64),
            "stream": np.array([a.stream for a in args], dtype=np.int64),
            "correlation": np.array([a.correlation for a in args], dtype=np.int64),
            "bytes": np.array([a.bytes for a in args], dtype=np.int64),
            "bandwidth": np.array([a.bandwidth for a in args], dtype=np.float64),
        })

    def finish(self) -> _Columns:
        """All batches as one set of columns."""
        fields = list(_Columns.__dataclass_fields__)
        if not self._parts:
            return _Columns(**{key: np.empty(0, np.int64) for key in fields})
        columns = {key: np.concatenate([part[key] for part in self._parts]) for key in fields}
        self._parts.clear()
        return _Columns(**columns)


class _MemoryEvents:
    """The ``[memory]`` instant events of a trace, one numpy array per field and batch."""

    # Each field and its value when an event lacks it (a release's Bytes is negative, so an
    # absent size reads as a change of 0, never as -1 byte).
    _FIELDS = {"device_type": -1, "device_id": -1, "memory_bytes": 0, "total_allocated": -1,
               "total_reserved": -1, "addr": -1}

    def __init__(self) -> None:
        self._parts: list[dict[str, np.ndarray]] = []

    def add(self, events: list[_Event]) -> None:
        """Keep the memory events of one batch."""
        found = [e for e in events if e.ph == "i" and e.name == MEMORY_EVENT_NAME]
        if not found:
            return
        args = [e.args or _NO_ARGS for e in found]
        part = {"time": _us_to_ns(np.array([e.ts for e in found], dtype=np.float64)),
                "pid": np.array([_as_int(e.pid) for e in found], dtype=np.int64),
                "tid": np.array([_as_int(e.tid) for e in found], dtype=np.int64)}
        for key, absent in self._FIELDS.items():
            part[key] = np.array([_int_field(getattr(a, key), absent) for a in args], np.int64)
        self._parts.append(part)

    def frame(self) -> pd.DataFrame:
        """The ``memory`` table: the framework allocator's events, sorted by time."""
        if not self._parts:
            return empty_table("memory")
        columns = {key: np.concatenate([part[key] for part in self._parts])
                   for key in self._parts[0]}
        kinds = [DEVICE_TYPE_NAMES.get(code, f"device type {code}")
                 for code in columns["device_type"]]
        frame = pd.DataFrame({
            "time": columns["time"], "pid": columns["pid"], "tid": columns["tid"],
            "device": np.where(columns["device_type"] == 0, -1, columns["device_id"]),
            "device_kind": kinds, "bytes": columns["memory_bytes"],
            "total_allocated": columns["total_allocated"],
            "total_reserved": columns["total_reserved"], "addr": columns["addr"],
            "counts": "allocated"})
        return conform("memory", frame.sort_values("time", kind="stable"))


def _int_field(value: Any, absent: int) -> int:
    """An integer field of a memory event, ``absent`` when missing or not an integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) else absent


def _us_to_ns(micros: np.ndarray) -> np.ndarray:
    """Kineto microseconds (whole or with a fraction) to int64 nanoseconds, exact to the ns.

    The whole and fractional microseconds are converted apart so that epoch-sized integer
    timestamps (~1.6e15 us) keep every digit instead of passing through a float product.
    """
    whole = np.floor(micros)
    return whole.astype(np.int64) * 1000 + np.rint((micros - whole) * 1000).astype(np.int64)


class _TraceText:
    """The trace's text, read forward in chunks and cut into a header and event batches."""

    def __init__(self, handle: BinaryIO, path: Path) -> None:
        self._handle = handle
        self._path = path
        self._buf = bytearray()
        self._offset = 0  # position of _buf[0] in the uncompressed text
        self._eof = False
        self.prefix = b""  # the text before the traceEvents array, ending with its key
        self.suffix = b""  # the text after the array's closing bracket

    def _fill(self) -> None:
        """Append the next chunk of text to the buffer; note the end of the file."""
        try:
            chunk = self._handle.read(READ_CHUNK)
        except EOFError:
            raise InputError("truncated gzip file: it ends before its end-of-stream marker",
                             self._path) from None
        except (OSError, zlib.error) as exc:
            raise InputError(f"damaged gzip file: {exc}", self._path) from None
        if chunk:
            self._buf += chunk
        else:
            self._eof = True

    def _consume(self, count: int) -> None:
        """Drop the first ``count`` bytes of the buffer."""
        del self._buf[:count]
        self._offset += count

    def read_prefix(self) -> None:
        """Read up to the opening bracket of ``traceEvents``; refuse what is no trace."""
        search_from = 0
        while True:
            found = self._buf.find(_TRACE_EVENTS_KEY, search_from)
            if found >= 0 and self._is_top_level_key(found):
                break
            if found >= 0:
                search_from = found + 1
                continue
            if self._eof:
                self._refuse_without_events()
            if len(self._buf) > HEADER_LIMIT:
                raise InputError("not a torch.profiler trace: no traceEvents in the first "
                                 f"{HEADER_LIMIT >> 20} MB", self._path)
            search_from = max(0, len(self._buf) - len(_TRACE_EVENTS_KEY))
            self._fill()
        while not self._eof and _ARRAY_OPEN.match(self._buf, found) is None:
            self._fill()
        opened = _ARRAY_OPEN.match(self._buf, found)
        if opened is None or opened.group(1) != b"[":
            raise InputError("traceEvents is not a JSON array", self._path)
        self.prefix = bytes(self._buf[:opened.start()]) + _TRACE_EVENTS_KEY + b":"
        self._consume(opened.end())

    def _is_top_level_key(self, position: int) -> bool:
        """Whether the ``"traceEvents"`` found at ``position`` is a key of the top object."""
        head = bytes(self._buf[:position]) + b'"traceEvents":[]}'
        try:
            return isinstance(msgspec.json.decode(head), dict)
        except msgspec.DecodeError:
            return False

    def _refuse_without_events(self) -> None:
        """Raise the right error for a whole file that holds no ``traceEvents`` array."""
        try:
            document = msgspec.json.decode(bytes(self._buf))
        except msgspec.DecodeError as exc:
            raise InputError(f"invalid JSON: {exc}", self._path) from None
        kind = "object" if isinstance(document, dict) else type(document).__name__
        raise InputError(f"not a torch.profiler trace: a JSON {kind} without traceEvents",
                         self._path)

    def batches(self) -> Iterator[list[_Event]]:
        """Yield the events of ``traceEvents`` in decoded batches; then read the suffix."""
        while True:
            while len(self._buf) < BATCH_BYTES and not self._eof:
                self._fill()
            if self._eof:
                yield self._last_batch()
                return
            events = self._next_batch()
            if events is None:
                self._fill()  # one event larger than the buffer: read on
            else:
                yield events

    def _next_batch(self) -> list[_Event] | None:
        """Decode the longest run of whole events in the buffer, or None if none is whole."""
        for gap in reversed(self._cut_candidates()):
            events = self._decode(gap.start() + 1)
            if events is not None:
                self._consume(gap.end() - 1)
                return events
        self._check_prefix()
        return None

    def _cut_candidates(self) -> list[re.Match[bytes]]:
        """The last few places in the buffer that look like the gap between two events."""
        window = CUT_WINDOW
        while True:
            start = max(0, len(self._buf) - window)
            gaps = list(_EVENT_GAP.finditer(self._buf, start))
            if gaps or start == 0:
                return gaps[-MAX_CUT_TRIES:]
            window *= 4

    def _last_batch(self) -> list[_Event]:
        """Decode the events left at the end of the file and keep the text after the array."""
        for close in list(_ARRAY_CLOSE.finditer(self._buf))[:MAX_CUT_TRIES]:
            events = self._decode(close.start() + 1 if close.group().startswith(b"}") else 0)
            if events is not None:
                self.suffix = bytes(self._buf[close.end():])
                self._consume(len(self._buf))
                return events
        self._check_prefix()
        raise InputError("truncated trace: the file ends inside traceEvents", self._path)

    def _decode(self, length: int) -> list[_Event] | None:
        """Decode the first ``length`` bytes as an array; None when they end inside an event."""
        with memoryview(self._buf) as view:
            text = b"".join((b"[", view[:length], b"]"))
        try:
            return _EVENTS_DECODER.decode(text)
        except msgspec.DecodeError as exc:
            self._raise_if_damaged(exc, len(text) - 1)
            return None

    def _check_prefix(self) -> None:
        """Raise if the buffer is not the valid start of a run of events (no cut decoded)."""
        try:
            with memoryview(self._buf) as view:
                _EVENTS_DECODER.decode(b"".join((b"[", view)))
        except msgspec.DecodeError as exc:
            self._raise_if_damaged(exc, len(self._buf) + 1)

    def _raise_if_damaged(self, exc: msgspec.DecodeError, end: int) -> None:
        """Turn a decode error of ``"[" + buffer...`` before byte ``end`` into an InputError.

        An error at ``end`` or a truncation only says the text was cut in the wrong place.
        """
        if isinstance(exc, msgspec.ValidationError):
            raise UnsupportedFormatError(f"unexpected value in a trace event: {exc}",
                                         self._path) from None
        where = _DECODE_ERROR_BYTE.search(str(exc))
        if where is None or int(where.group(1)) >= end:
            return
        at = self._offset + int(where.group(1)) - 1
        raise InputError(f"invalid JSON at byte {at} of the trace text: {exc}",
                         self._path) from None

    def header(self) -> dict[str, Any]:
        """The top-level members other than ``traceEvents``."""
        try:
            document = msgspec.json.decode(self.prefix + b"[]" + self.suffix)
        except msgspec.DecodeError as exc:
            raise InputError(f"invalid JSON after traceEvents: {exc}", self._path) from None
        document.pop("traceEvents", None)
        return document


def _open(path: Path) -> BinaryIO:
    """The trace's uncompressed bytes, gzip or plain, judged by the first bytes."""
    try:
        with open(path, "rb") as probe:
            magic = probe.read(2)
        if magic == _GZIP_MAGIC:
            return gzip.open(path, "rb")  # type: ignore[return-value]
        return open(path, "rb")  # noqa: SIM115 (the caller closes it)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from None


def _read(path: Path) -> tuple[dict[str, Any], _ColumnBuilder]:
    """Stream the trace at ``path`` into columns; return its header members and the columns."""
    builder = _ColumnBuilder()
    with _open(path) as handle:
        text = _TraceText(handle, path)
        text.read_prefix()
        for events in text.batches():
            builder.add(events)
        return text.header(), builder


def _check_schema_version(header: dict[str, Any], path: Path) -> None:
    """Refuse a ``schemaVersion`` this parser does not know (a missing one is accepted)."""
    version = header.get("schemaVersion")
    if version is not None and version not in SUPPORTED_SCHEMA_VERSIONS:
        raise UnsupportedFormatError(
            f"Kineto schemaVersion {version!r} is not supported (known: "
            f"{sorted(SUPPORTED_SCHEMA_VERSIONS)})", path)


def _thread_numbers(symbols: _Symbols) -> np.ndarray:
    """Each interned pid/tid as an integer; -1 for labels such as ``stream 7`` or ``Spans``."""
    return np.array([_as_int(value) for value in symbols.values()], dtype=np.int64)


def _as_int(value: Any) -> int:
    """An integer pid/tid (Kineto 2021 writes them as strings), -1 when it is a label."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text) if text.lstrip("-").isdigit() else -1


class _Tables:
    """Builds the Profile tables from a trace's columns and symbol tables."""

    def __init__(self, builder: _ColumnBuilder) -> None:
        self.columns = builder.finish()
        self.names = builder.names.values()
        self.cats = builder.cats
        self.thread_numbers = _thread_numbers(builder.threads)
        self.metadata = builder.metadata
        spans = self.rows(CPU_OP_CATS | ANNOTATION_CATS).name
        self.is_step = _per_name(self.names, lambda s: concepts.step_numbers(s).notna(),
                                 spans).astype(bool)

    def rows(self, cats: frozenset[str]) -> _Columns:
        """The events whose category is in ``cats``."""
        return self.columns.take(np.isin(self.columns.cat, self.cats.lookup(cats)))

    def cpu(self, rows: _Columns) -> pd.DataFrame:
        """start, end, pid, tid and name of CPU-side events."""
        return pd.DataFrame({
            "start": rows.start, "end": rows.end, "pid": self.thread_numbers[rows.pid],
            "tid": self.thread_numbers[rows.tid], "name": self.names[rows.name],
        })

    def gpu(self, rows: _Columns) -> pd.DataFrame:
        """start, end, device, stream, correlation and name of GPU activities."""
        return pd.DataFrame({
            "start": rows.start, "end": rows.end, "device": rows.device, "stream": rows.stream,
            "correlation": rows.correlation, "name": self.names[rows.name],
        })

    def cpu_ops(self) -> pd.DataFrame:
        """Framework operators, without the ProfilerStep spans (those are ranges)."""
        rows = self.rows(CPU_OP_CATS)
        return conform("cpu_ops", self.cpu(rows.take(~self.is_step[rows.name])))

    def ranges(self) -> pd.DataFrame:
        """User annotations, plus ProfilerStep spans recorded as operators (2021 dialect)."""
        ops = self.rows(CPU_OP_CATS)
        frame = pd.concat([self.cpu(self.rows(ANNOTATION_CATS)),
                           self.cpu(ops.take(self.is_step[ops.name]))], ignore_index=True)
        frame["domain"] = ""
        return conform("ranges", frame.sort_values("start", kind="stable"))

    def kernels(self) -> pd.DataFrame:
        """GPU kernels with their short names and communication flag."""
        rows = self.rows(KERNEL_CATS)
        frame = self.gpu(rows)
        short = _per_name(self.names, lambda s: s.map(concepts.short_kernel_name), rows.name)
        comm = _per_name(self.names, concepts.is_comm_kernel, rows.name)
        frame["short_name"] = short[rows.name]
        frame["is_comm"] = comm[rows.name].astype(bool)
        return conform("kernels", frame)

    def memcpy(self) -> pd.DataFrame:
        """GPU copies with direction, memory kinds and size."""
        rows = self.rows(MEMCPY_CATS)
        frame = self.gpu(rows)
        distinct = np.unique(rows.name)
        parts = _memcpy_parts(pd.Series(self.names[distinct], dtype=object))
        row_part = np.searchsorted(distinct, rows.name)
        for column in parts.columns:
            frame[column] = parts[column].to_numpy()[row_part]
        frame["bytes"] = _copied_bytes(rows)
        return conform("memcpy", frame)

    def memset(self) -> pd.DataFrame:
        """GPU memsets with their size."""
        rows = self.rows(MEMSET_CATS)
        frame = self.gpu(rows)
        frame["bytes"] = _copied_bytes(rows)
        return conform("memset", frame)

    def runtime(self) -> pd.DataFrame:
        """CUDA runtime and driver calls, names without their version suffix."""
        rows = self.rows(RUNTIME_CATS)
        frame = self.cpu(rows)
        stripped = _per_name(self.names, lambda s: s.map(concepts.strip_api_version), rows.name)
        frame["name"] = stripped[rows.name]
        frame["correlation"] = rows.correlation
        return conform("runtime", frame)

    def steps(self, ranges: pd.DataFrame) -> pd.DataFrame:
        """One row per ProfilerStep#N, on the thread that recorded it."""
        frame = ranges.assign(number=concepts.step_numbers(ranges["name"])).dropna(
            subset=["number"])
        frame = frame.sort_values("start", kind="stable").drop_duplicates("number")
        return conform("steps", frame.assign(origin="ProfilerStep"))

    def named_rows(self, cats: frozenset[str], rule: Any) -> pd.DataFrame:
        """CPU-side events of categories ``cats`` whose name satisfies the vectorised ``rule``."""
        rows = self.rows(cats)
        keep = _per_name(self.names, rule, rows.name).astype(bool)
        frame = self.cpu(rows.take(keep[rows.name]))
        return frame.drop_duplicates().sort_values("start", kind="stable")

    def dataloader(self) -> pd.DataFrame:
        """Waits for the next batch, from operators, annotations and Python functions."""
        cats = CPU_OP_CATS | ANNOTATION_CATS | PYTHON_CATS
        return conform("dataloader", self.named_rows(cats, concepts.is_dataloader_span))

    def cpu_collectives(self) -> pd.DataFrame:
        """Collective calls on the CPU (c10d, gloo, nccl, record_param_comms)."""
        cats = CPU_OP_CATS | ANNOTATION_CATS
        return conform("cpu_collectives", self.named_rows(cats, concepts.is_cpu_collective))

    def threads(self) -> pd.DataFrame:
        """Thread names from the ``thread_name`` metadata events (the last name wins)."""
        named = [e for e in self.metadata if e.name == "thread_name" and e.args is not None]
        frame = pd.DataFrame({
            "pid": [_as_int(e.pid) for e in named], "tid": [_as_int(e.tid) for e in named],
            "name": [str((e.args or _NO_ARGS).name) for e in named],
        })
        return conform("threads", frame.drop_duplicates(["pid", "tid"], keep="last"))


def _per_name(names: np.ndarray, rule: Any, ids: np.ndarray) -> np.ndarray:
    """Apply a vectorised name ``rule`` once per distinct name among ``ids``; index by name id."""
    distinct = np.unique(ids)
    out = np.empty(len(names), dtype=object)
    out[distinct] = np.asarray(rule(pd.Series(names[distinct], dtype=object)), dtype=object)
    return out


def _memcpy_parts(names: pd.Series) -> pd.DataFrame:
    """Copy kind and source/destination memory kinds from names like ``Memcpy HtoD (A -> B)``."""
    parts = names.astype("string").str.extract(_MEMCPY_NAME)
    parts.columns = ["kind", "src_kind", "dst_kind"]
    parts["kind"] = parts["kind"].where(parts["kind"].isin(concepts.COPY_KINDS), "unknown")
    for column in ("src_kind", "dst_kind"):
        parts[column] = parts[column].where(parts[column].isin(concepts.MEMORY_KINDS),
                                            "unknown")
    return parts.astype(object)


def _copied_bytes(rows: _Columns) -> np.ndarray:
    """Bytes moved: ``args.bytes``, else bandwidth (GB/s) times duration (ns); -1 unknown."""
    from_bandwidth = np.where(rows.bandwidth > 0,
                              np.rint(rows.bandwidth * (rows.end - rows.start)), -1)
    return np.where(rows.bytes >= 0, rows.bytes, from_bandwidth).astype(np.int64)


def _devices(header: dict[str, Any]) -> pd.DataFrame:
    """GPUs listed in ``deviceProperties``."""
    props = [p for p in header.get("deviceProperties") or [] if isinstance(p, dict)]
    frame = pd.DataFrame({
        "device": [p.get("id", -1) for p in props], "name": [p.get("name") for p in props],
        "memory_bytes": [p.get("totalGlobalMem", -1) for p in props],
        "sm_count": [p.get("numSms", -1) for p in props],
    })
    return conform("devices", frame)


def _dialect(cats: _Symbols) -> str:
    """``2021`` when the trace uses the old capitalised categories, else ``current``."""
    return "2021" if any(str(cat) in LEGACY_CATS for cat in cats.values()) else "current"


def _meta(header: dict[str, Any], dialect: str) -> dict[str, Any]:
    """What the analysis may want from the header: distributed setup, devices, clock base."""
    distributed = header.get("distributedInfo") or {}
    return {
        "schema_version": header.get("schemaVersion"),
        "dialect": dialect,
        "distributedInfo": distributed,
        "world_size": distributed.get("world_size"),
        "backend": distributed.get("backend"),
        "deviceProperties": header.get("deviceProperties") or [],
        "baseTimeNanoseconds": header.get("baseTimeNanoseconds"),
        "trace_name": header.get("traceName"),
    }


def _tool_version(header: dict[str, Any], dialect: str) -> str:
    """A one-line description of what wrote the trace."""
    version = header.get("schemaVersion", "unknown")
    text = f"kineto schema {version} ({dialect} trace format)"
    nccl = (header.get("distributedInfo") or {}).get("nccl_version")
    return f"{text}, nccl {nccl}" if nccl else text


def parse(path: Path) -> Profile:
    """Parse one torch.profiler trace (``.json`` or ``.json.gz``) into a Profile."""
    path = Path(path)
    header, builder = _read(path)
    _check_schema_version(header, path)
    dialect = _dialect(builder.cats)
    tables = _Tables(builder)
    ranges = tables.ranges()
    rank = (header.get("distributedInfo") or {}).get("rank")
    return Profile(
        path=path, kind="kineto", tool_version=_tool_version(header, dialect),
        rank=int(rank) if rank is not None else None,
        tables={
            "kernels": tables.kernels(), "memcpy": tables.memcpy(), "memset": tables.memset(),
            "runtime": tables.runtime(), "ranges": ranges, "cpu_ops": tables.cpu_ops(),
            "steps": tables.steps(ranges), "dataloader": tables.dataloader(),
            "cpu_collectives": tables.cpu_collectives(),
            "devices": _devices(header), "threads": tables.threads(),
            "memory": builder.memory.frame(),
        },
        meta=_meta(header, dialect),
    )
