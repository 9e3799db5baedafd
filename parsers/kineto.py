"""torch.profiler (Kineto) traces, ``.json`` or ``.json.gz``, read as a stream into tidy tables.

Kineto writes one JSON object: a few small members (``schemaVersion``, ``deviceProperties``,
``distributedInfo``...) and ``traceEvents``, an array that can hold millions of events. The file
is never loaded whole: the reader keeps a few megabytes of text at a time, cuts the event array
at event boundaries, decodes each batch with msgspec into small structs holding only the fields
the analysis uses, and appends them to columns (numpy arrays; names, categories and thread ids
interned to integer ids). The small members before and after the array are decoded once. A large
plain ``.json`` is cut into byte ranges at verified event boundaries and the ranges are decoded in
parallel processes, one per core.

A cut is checked by decoding: a batch that starts at an event and ends at an event's closing
brace decodes as a JSON array exactly when the brace closes a top-level event; a cut inside a
string or a nested object fails at the last byte, and an error earlier than that is real damage.

Every vendor and shape torch.profiler writes is read: the 2021 dialect (``cat`` ``Operator``,
``Kernel``, ``Runtime``, ``Memcpy``, ``Memset``) and the current one (``cpu_op``, ``kernel``,
``cuda_runtime``, ``cuda_driver``, ``gpu_memcpy``, ``gpu_memset``, ``cuda_sync``,
``user_annotation``, ``python_function``); ROCm/HIP (stream ids as hex strings such as ``"0x0"``),
MTIA (``mtia_runtime`` calls, ``mtia_ccp_events`` device work) and other accelerators' runtime
categories; Triton kernels; CPU-only traces; traces without ``distributedInfo``, rank or
``ProfilerStep`` spans (steps then come from the optimizer step or a repeated top-level op, and
the ``steps`` table's ``origin`` says which). ``ProfilerStep#N`` spans go to ``ranges`` (and
``steps``), not ``cpu_ops``, whichever category recorded them. The launch -> device link is kept:
each GPU activity's ``correlation`` is the Kineto ``correlation`` arg, or else the id of the
``ac2g`` flow that ends on it; the launching runtime call carries the same id.

Values are checked at the edge: an event without ``ts``/``dur``, with a negative or impossible
duration, a time outside the int64 nanosecond range or an id/size that is no int64 is dropped and
counted in ``Profile.meta.dropped`` (reason -> count) and its notes; the tables hold only possible
values. Limits (``profreport.inputs``) refuse a file with one line: decompressed size, events,
name length, one event's size, JSON nesting.

``[memory]`` instant events (``profile_memory=True``) go to ``memory`` in both dialects: 2021
ones carry ``Device Type``, ``Device Id`` and ``Bytes``; current ones add ``Total Allocated``,
``Total Reserved`` and ``Addr``.
"""

from __future__ import annotations

import gzip
import io
import multiprocessing
import os
import queue
import re
import threading
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import msgspec
import numpy as np
import pandas as pd

from profreport import concepts
from profreport.errors import InputError, UnsupportedFormatError
from profreport.inputs import (
    EVENT_TIMES,
    MAX_DECOMPRESSED_BYTES,
    MAX_EVENT_BYTES,
    MAX_EVENTS,
    MAX_HEADER_BYTES,
    MAX_JSON_DEPTH,
    MAX_NAME_CHARS,
    BoundedReader,
    Limit,
    decompressed_limit,
    open_input,
)
from profreport.model import KinetoMeta, Profile, conform, empty_table

if TYPE_CHECKING:  # the registry imports this module, never the other way round
    from profreport.parsers import ParseOptions

#: Kineto's ``schemaVersion`` values this parser knows (every release so far writes 1).
SUPPORTED_SCHEMA_VERSIONS = frozenset({1})

# Uncompressed bytes read at a time; large enough that Python's per-call costs vanish, small
# enough that the text in memory stays a few MB whatever the size of the trace.
READ_CHUNK = 1 << 20
# Target size of one decoded batch of events: its structs live only until they are columns.
BATCH_BYTES = 4 << 20
# Tail of the buffer searched first for a cut between two events; events are ~0.3 kB each.
CUT_WINDOW = 64 << 10
# Cuts tried before the buffer is checked for damage: a wrong cut needs "},{" inside a string
# or a nested object, which Kineto's events almost never hold.
MAX_CUT_TRIES = 8
# Chunks a gzip trace is inflated ahead of the decoding: enough to hide the inflation's pauses.
PREFETCH_CHUNKS = 4
# Plain text per parallel range: below this a worker process costs more than it saves.
PARALLEL_MIN_BYTES = 32 << 20
# Text searched after a split target for a verified cut between two events.
SPLIT_PROBE_BYTES = 4 << 20
# Largest value an id or a byte count may have to fit an int64 column.
_INT64_MAX = (1 << 63) - 1

_GZIP_MAGIC = b"\x1f\x8b"
_TRACE_EVENTS_KEY = b'"traceEvents"'
# One JSON token that changes depth or is a string, after any run of other characters.
_HEADER_TOKEN = re.compile(rb'[^"\[\]{}]*("[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}])', re.DOTALL)
_KEY_COLON = re.compile(rb"\s*:\s*(\S)")
_EVENT_GAP = re.compile(rb"\}\s*,\s*\{")
_ARRAY_CLOSE = re.compile(rb"\}\s*\]|\A\s*\]")
_DECODE_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")
_ERROR_FIELD = re.compile(r"at `\$(?:\[\d+\])?\.?([^`]*)`")

#: Event categories (lower-cased) of each table, for every dialect and vendor.
CPU_OP_CATS = frozenset({"cpu_op", "operator"})
KERNEL_CATS = frozenset({"kernel"})
MEMCPY_CATS = frozenset({"gpu_memcpy", "memcpy"})
MEMSET_CATS = frozenset({"gpu_memset", "memset"})
SYNC_CATS = frozenset({"cuda_sync"})
#: Host-side API calls into an accelerator's runtime or driver (CUDA, HIP, MTIA, XPU, others).
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime", "mtia_runtime",
                          "xpu_runtime", "xpu_driver", "privateuse1_runtime",
                          "privateuse1_driver", "glow_runtime"})
#: Device work of accelerators that record it under their own category (MTIA's command processor).
ACCELERATOR_CATS = frozenset({"mtia_ccp_events"})
#: Categories whose events carry device, stream, correlation or size (device work, API calls).
DETAILED_CATS = (KERNEL_CATS | MEMCPY_CATS | MEMSET_CATS | SYNC_CATS | RUNTIME_CATS
                 | ACCELERATOR_CATS)
ANNOTATION_CATS = frozenset({"user_annotation"})
PYTHON_CATS = frozenset({"python_function"})
#: Name of the instant events that record one allocation or release of the framework allocator.
MEMORY_EVENT_NAME = "[memory]"
#: c10::DeviceType codes of a memory event's ``Device Type`` (c10/core/DeviceType.h).
DEVICE_TYPE_NAMES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 19: "mtia"}
#: Categories that exist only in the 2021 dialect.
LEGACY_CATS = frozenset({"Operator", "Kernel", "Runtime", "Memcpy", "Memset"})
#: MTIA command-processor events that wait for or mark an event (the ``sync`` table).
ACCELERATOR_SYNC_NAMES = frozenset({"event_wait", "event_record"})
#: MTIA command-processor events that move data (the ``memcpy`` table).
ACCELERATOR_COPY_NAMES = frozenset({"dma_request"})
#: MTIA ``dma_request`` directions as copy kinds, with the memory at each end.
ACCELERATOR_COPY_KINDS = {"HOST_TO_DEVICE": ("HtoD", "unknown", "Device"),
                          "DEVICE_TO_HOST": ("DtoH", "Device", "unknown"),
                          "DEVICE_TO_DEVICE": ("DtoD", "Device", "Device")}
# A step found by repetition must repeat at least this often: two occurrences are not a loop.
MIN_STEP_REPEATS = 3
#: Where the rows of the ``steps`` table came from, for each way of finding them.
STEP_ORIGINS = ("ProfilerStep", "optimizer", "repeated op")


_NO_RAW = msgspec.Raw()


class _Args(msgspec.Struct, gc=False, frozen=True):
    """The ``args`` fields the analysis reads; every other key is skipped while decoding.

    Ids and sizes are typed loosely (ROCm writes stream ids as hex strings, other writers may
    put anything there) and checked when they become columns.
    """

    device: Any = -1
    stream: Any = -1
    stream_id: Any = -1
    correlation: Any = -1
    bytes: Any = -1
    size: Any = -1
    bandwidth: Any = msgspec.field(default=-1.0, name="memory bandwidth (GB/s)")
    sync_kind: Any = msgspec.field(default=None, name="cuda_sync_kind")
    direction: Any = None
    name: Any = None
    # Memory events' fields, typed loosely: other events may reuse these keys for other values.
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    memory_bytes: Any = msgspec.field(default=None, name="Bytes")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    addr: Any = msgspec.field(default=None, name="Addr")
    # Operators' inputs (``record_shapes=True``), kept as raw JSON text: decoded only for the
    # operators the op_inputs table holds, once per distinct text.
    input_types: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    """One trace event, reduced to the fields the analysis reads."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = float("nan")
    dur: float = float("nan")
    id: Any = None
    args: _Args = _NO_ARGS
_EVENTS_DECODER = msgspec.json.Decoder(list[_Event])
# Field getters that run at C speed over a batch (``map``), instead of a Python loop per field.
_PHASE, _CAT, _NAME = attrgetter("ph"), attrgetter("cat"), attrgetter("name")
_PID, _TID, _TS, _DUR = attrgetter("pid"), attrgetter("tid"), attrgetter("ts"), attrgetter("dur")
_ARGS, _DEVICE = attrgetter("args"), attrgetter("device")
_CORRELATION, _BANDWIDTH = attrgetter("correlation"), attrgetter("bandwidth")
_BYTES, _SIZE = attrgetter("bytes"), attrgetter("size")
_STREAM, _STREAM_ID = attrgetter("stream"), attrgetter("stream_id")
_SYNC_KIND, _DIRECTION = attrgetter("sync_kind"), attrgetter("direction")
_FLOW_ID = attrgetter("id")
# Category of the flows that link a launch to the device work it started.
_LAUNCH_FLOW = "ac2g"
_EVENT_DECODER = msgspec.json.Decoder(_Event)
_RAW_EVENTS_DECODER = msgspec.json.Decoder(list[msgspec.Raw])


class _Ids(dict):  # type: ignore[type-arg]
    """A dict from value to dense id that gives an unseen value the next id on lookup."""

    limit: Limit | None = None
    path: Path | None = None

    def __missing__(self, value: Any) -> int:
        """Add ``value`` (checked against the length limit) with the next id."""
        if self.limit is not None:
            self.limit.check(len(str(value)), self.path)
        self[value] = number = len(self)
        return number


class _Symbols:
    """Interns values (names, categories, thread ids) to dense integer ids."""

    def __init__(self, limit: Limit | None = None, path: Path | None = None) -> None:
        self._ids = _Ids()
        self._ids.limit, self._ids.path = limit, path

    def ids(self, values: Iterable[Any], count: int) -> np.ndarray:
        """The id of each of ``count`` values, adding unseen values to the table."""
        return np.fromiter(map(self._ids.__getitem__, values), np.int32, count=count)

    def remap(self, other: _Symbols) -> np.ndarray:
        """For each id of ``other``, the id of the same value here (added when unseen)."""
        return self.ids(other._ids, len(other._ids))

    def values(self) -> np.ndarray:
        """Every interned value, indexed by id (an object array)."""
        out = np.empty(len(self._ids), dtype=object)
        out[:] = list(self._ids)
        return out

    def lookup(self, wanted: frozenset[str]) -> np.ndarray:
        """Ids of the interned values whose lower-cased text is in ``wanted``."""
        return np.array([i for v, i in self._ids.items() if str(v).lower() in wanted], np.int32)


#: Columns of the complete-duration ("X") events and the symbol table each id column uses.
_SYMBOL_COLUMNS = {"cat": "cats", "name": "names", "pid": "threads", "tid": "threads",
                   "detail": "details"}


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
    detail: np.ndarray

    def take(self, mask: np.ndarray) -> _Columns:
        """The rows where ``mask`` holds."""
        count = int(mask.sum())
        return _Columns(**{key: _fill(value[0] if len(value) else -1, count)
                           if value.strides == (0,) else value[mask]
                           for key, value in vars(self).items()})

    def __len__(self) -> int:
        """The number of rows."""
        return len(self.start)


#: The columns every complete event fills; the others (``_DETAIL_COLUMNS``) only events of
#: ``DETAILED_CATS`` fill, and the other events' rows read -1 there without storing it.
_PLAIN_COLUMNS = ("cat", "name", "pid", "tid", "start", "end")
_DETAIL_COLUMNS = ("device", "stream", "correlation", "bytes", "detail")
_ID_COLUMNS = frozenset({"cat", "name", "pid", "tid", "detail"})


def _fill(value: int, count: int) -> np.ndarray:
    """A read-only column of ``count`` copies of ``value`` that takes no memory."""
    return np.broadcast_to(np.int64(value), (count,))


def _stack(parts: list[dict[str, np.ndarray]], columns: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The batches' columns joined, one column at a time, freeing each batch's copy as it goes."""
    out = {}
    for key in columns:
        dtype = np.int32 if key in _ID_COLUMNS else np.int64
        out[key] = (np.concatenate([part.pop(key) for part in parts]) if parts
                    else np.empty(0, dtype))
    parts.clear()
    return out


def _integers(values: list[Any], absent: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Integer field values as int64 (``absent`` where missing) and where a value was unusable.

    Ints in [0, 2^63) are taken as they are, strings as decimal or hex (``"0x1f"``); anything
    else (a float, a bool, a number >= 2^63, text that is no number) is unusable.
    """
    try:
        column = np.array(values)
    except (TypeError, ValueError, OverflowError):
        column = np.empty(0, dtype=object)
    if len(column) == len(values) and column.dtype.kind == "i" and (
            not len(column) or column.min() >= -1):
        return column.astype(np.int64), np.zeros(len(column), dtype=bool)
    parsed = [_integer(v) for v in values]
    bad = np.array([p is None and v != absent for p, v in zip(parsed, values, strict=True)],
                   dtype=bool)
    return np.array([absent if p is None else p for p in parsed], dtype=np.int64), bad


def _ids_and_sizes(args: list[_Args]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each event's correlation id and where it is unusable; its byte count (``bytes``, else
    ``size``) and where that is unusable."""
    correlation, bad_correlation = _integers(list(map(_CORRELATION, args)))
    copied, bad_bytes = _first_present(_integers(list(map(_BYTES, args))),
                                       _integers(list(map(_SIZE, args))))
    return correlation, bad_correlation, copied, bad_bytes


def _spread(values: np.ndarray, where: np.ndarray, fill: Any) -> np.ndarray:
    """A column as long as ``where``: ``values`` in order where it holds, ``fill`` elsewhere."""
    out = np.full(len(where), fill, dtype=values.dtype)
    out[where] = values
    return out


def _first_present(first: tuple[np.ndarray, np.ndarray],
                   second: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Values and unusable flags of a field, taken from ``second`` where ``first`` is absent."""
    use_second = (first[0] == -1) & ~first[1]
    return (np.where(use_second, second[0], first[0]),
            np.where(use_second, second[1], first[1]))


def _integer(value: Any) -> int | None:
    """One id or size: a non-negative int64, from an int or a decimal/hex string; else None."""
    if isinstance(value, str):
        try:
            value = int(value.strip(), 0)
        except ValueError:
            return None
    if type(value) is not int or not 0 <= value <= _INT64_MAX:
        return None
    return value


def _floats(values: list[Any]) -> np.ndarray:
    """Float field values; NaN where a value is not a number."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([v if isinstance(v, (int, float)) and not isinstance(v, bool)
                         else np.nan for v in values], dtype=np.float64)


class _ColumnBuilder:
    """Turns batches of decoded events into checked columns, keeping metadata events aside."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.names = _Symbols(MAX_NAME_CHARS, path)
        self.phases = _Symbols()
        self.cats = _Symbols()
        self.threads = _Symbols()
        self.details = _Symbols()
        self.metadata: list[_Event] = []
        self.memory = _MemoryEvents()
        self.op_inputs = _OpInputs()
        self.dropped: Counter[str] = Counter()
        self.events = 0
        self._plain: list[dict[str, np.ndarray]] = []
        self._detailed: list[dict[str, np.ndarray]] = []
        self._flows: list[dict[str, np.ndarray]] = []

    def add(self, events: list[_Event]) -> None:
        """Append one batch: "X" events become columns, "M" events are kept as they are."""
        self.events += len(events)
        MAX_EVENTS.check(self.events, self.path)
        phase = self.phases.ids(map(_PHASE, events), len(events))
        spans = list(compress(events, phase == self.phases.ids(["X"], 1)[0]))
        for kind, keep in (("M", self.metadata.extend), ("f", self._add_flows),
                           ("i", self._add_instants)):
            found = phase == self.phases.ids([kind], 1)[0]
            if found.any():
                keep(list(compress(events, found)))
        if spans:
            self._add_spans(spans)

    def _add_instants(self, instants: list[_Event]) -> None:
        """Keep the ``[memory]`` instant events whose time is possible (the others counted)."""
        memory = [e for e in instants if e.name == MEMORY_EVENT_NAME]
        if memory:
            possible = _possible_times(np.fromiter(map(_TS, memory), np.float64, len(memory)))
            self._drop(~possible, "memory event time outside the possible range")
            self.memory.add(list(compress(memory, possible)))

    def _add_spans(self, spans: list[_Event]) -> None:
        """Check and append complete-duration events; count the ones dropped."""
        count = len(spans)
        args = list(map(_ARGS, spans))
        start, end, keep = self._times(np.fromiter(map(_TS, spans), np.float64, count),
                                       np.fromiter(map(_DUR, spans), np.float64, count))
        part = {
            "cat": self.cats.ids(map(_CAT, spans), count),
            "name": self.names.ids(map(_NAME, spans), count),
            "pid": self.threads.ids(map(_PID, spans), count),
            "tid": self.threads.ids(map(_TID, spans), count),
            "start": start, "end": end,
        }
        detailed = np.isin(part["cat"], self.cats.lookup(DETAILED_CATS))
        part.update(self._arg_columns(args, end - start, keep, detailed))
        plain = keep & ~detailed
        self._plain.append({key: part[key][plain] for key in _PLAIN_COLUMNS})
        self.op_inputs.add(self, part, args, keep)
        self._detailed.append({key: value[keep & detailed] for key, value in part.items()})

    def _arg_columns(self, args: list[_Args], duration: np.ndarray, keep: np.ndarray,
                     detailed: np.ndarray) -> dict[str, np.ndarray]:
        """device, stream, correlation, bytes and detail of each ``detailed`` event (the other
        rows read -1: their table stores none of these); events with an id or size that is no
        int64 are counted and taken out of ``keep``, whatever their category."""
        found = list(compress(args, detailed))
        correlation, bad_correlation, copied, bad_bytes = _ids_and_sizes(found)
        copied = _with_bandwidth(copied, _floats(list(map(_BANDWIDTH, found))),
                                 duration[detailed])
        _, other_bad_correlation, _, other_bad_bytes = _ids_and_sizes(
            list(compress(args, ~detailed)))
        bad_correlation = _spread(bad_correlation, detailed, False)
        bad_correlation[~detailed] = other_bad_correlation
        bad_bytes = _spread(bad_bytes, detailed, False)
        bad_bytes[~detailed] = other_bad_bytes
        self._drop(bad_correlation & keep, "correlation is not an int64")
        self._drop(bad_bytes & keep, "bytes is not an int64")
        keep &= ~bad_correlation & ~bad_bytes
        stream = _first_present(_integers(list(map(_STREAM, found))),
                                _integers(list(map(_STREAM_ID, found))))[0]
        return {"device": _spread(_integers(list(map(_DEVICE, found)))[0], detailed, -1),
                "stream": _spread(stream, detailed, -1),
                "correlation": _spread(correlation, detailed, -1),
                "bytes": _spread(copied, detailed, -1),
                "detail": _spread(self._detail(found), detailed,
                                  self.details.ids([None], 1)[0])}

    def _detail(self, args: list[_Args]) -> np.ndarray:
        """Ids of each event's sync kind (``cuda_sync``) or copy direction (MTIA DMA)."""
        kind = self.details.ids(map(_SYNC_KIND, args), len(args))
        direction = self.details.ids(map(_DIRECTION, args), len(args))
        return np.where(kind != self.details.ids([None], 1)[0], kind, direction)

    def _times(self, ts_us: np.ndarray, dur_us: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                     np.ndarray]:
        """Start and end in ns, and which events have possible times (the others counted)."""
        checks = [
            (np.isnan(ts_us), "no ts"), (np.isnan(dur_us), "no dur"),
            (dur_us < 0, "negative dur"),
            (~_possible_times(ts_us), "ts outside the possible range"),
            (~(dur_us * 1000 <= EVENT_TIMES.max_duration_ns), "dur longer than possible"),
        ]
        keep = np.ones(len(ts_us), dtype=bool)
        for failed, reason in checks:
            self._drop(failed & keep, reason)
            keep &= ~failed
        start = _us_to_ns(np.where(keep, ts_us, 0.0))
        return start, start + _us_to_ns(np.where(keep, dur_us, 0.0)), keep

    def _add_flows(self, flows: list[_Event]) -> None:
        """Keep the ends of ``ac2g`` (launch -> GPU) flows: where they land and their id."""
        flows = list(compress(flows, map(_LAUNCH_FLOW.__eq__, map(_CAT, flows))))
        if not flows:
            return
        ids, bad = _integers(list(map(_FLOW_ID, flows)))
        ts = np.fromiter(map(_TS, flows), np.float64, len(flows))
        keep = ~bad & _possible_times(ts)
        self._flows.append({
            "pid": self.threads.ids(map(_PID, flows), len(flows))[keep],
            "tid": self.threads.ids(map(_TID, flows), len(flows))[keep],
            "start": _us_to_ns(np.where(keep, ts, 0.0))[keep], "flow": ids[keep]})

    def _drop(self, mask: np.ndarray, reason: str) -> None:
        """Count the events under ``mask`` as dropped for ``reason``."""
        count = int(mask.sum())
        if count:
            self.dropped[reason] += count

    def drop_unreadable(self, reason: str) -> None:
        """Count one event that could not be decoded at all."""
        self.dropped[reason] += 1
        self.events += 1

    def absorb(self, other: _ColumnBuilder) -> None:
        """Append everything ``other`` read (a later part of the same trace)."""
        maps = {name: getattr(self, name).remap(getattr(other, name))
                for name in set(_SYMBOL_COLUMNS.values())}
        for mine, theirs in ((self._plain, other._plain), (self._detailed, other._detailed)):
            mine.extend({key: maps[_SYMBOL_COLUMNS[key]][value] if key in _SYMBOL_COLUMNS
                         else value for key, value in part.items()} for part in theirs)
        for flow in other._flows:
            self._flows.append({key: maps["threads"][value] if key in ("pid", "tid") else value
                                for key, value in flow.items()})
        self.metadata.extend(other.metadata)
        self.memory.extend(other.memory)
        self.op_inputs.extend(other.op_inputs, maps)
        self.dropped.update(other.dropped)
        self.events += other.events
        MAX_EVENTS.check(self.events, self.path)

    def finish(self) -> tuple[_Columns, _Columns]:
        """All batches as two sets of columns: events of ``DETAILED_CATS``, and the others."""
        plain = _stack(self._plain, _PLAIN_COLUMNS)
        count = len(plain["start"])
        plain.update({key: _fill(-1, count) for key in _DETAIL_COLUMNS})
        return _Columns(**_stack(self._detailed, _PLAIN_COLUMNS + _DETAIL_COLUMNS)), \
            _Columns(**plain)

    def flows(self) -> pd.DataFrame:
        """Where each ``ac2g`` flow ends: pid and tid ids, start (ns) and the flow's id."""
        if not self._flows:
            return pd.DataFrame({key: np.empty(0, np.int64)
                                 for key in ("pid", "tid", "start", "flow")})
        return pd.DataFrame({key: np.concatenate([part[key] for part in self._flows])
                             for key in self._flows[0]})


def _possible_times(ts_us: np.ndarray) -> np.ndarray:
    """Which timestamps (us, NaN where missing) lie in [0, EVENT_TIMES.max_time_ns] once in ns."""
    with np.errstate(invalid="ignore"):
        return (ts_us >= 0) & (ts_us * 1000 <= EVENT_TIMES.max_time_ns)


class _MemoryEvents:
    """The ``[memory]`` instant events of a trace, one numpy array per field and batch."""

    # Each field and its value when an event lacks it (a release's Bytes is negative, so an
    # absent size reads as a change of 0, never as -1 byte).
    _FIELDS = {"device_type": -1, "device_id": -1, "memory_bytes": 0, "total_allocated": -1,
               "total_reserved": -1, "addr": -1}

    def __init__(self) -> None:
        self._parts: list[dict[str, np.ndarray]] = []

    def add(self, found: list[_Event]) -> None:
        """Keep a batch's memory events (their times already checked)."""
        if not found:
            return
        args = list(map(_ARGS, found))
        part = {"time": _us_to_ns(np.fromiter(map(_TS, found), np.float64, len(found))),
                "pid": _thread_column(list(map(_PID, found))),
                "tid": _thread_column(list(map(_TID, found)))}
        for key, absent in self._FIELDS.items():
            part[key] = _int_column(list(map(attrgetter(key), args)), absent)
        self._parts.append(part)

    def extend(self, other: _MemoryEvents) -> None:
        """Append the memory events of a later part of the same trace."""
        self._parts.extend(other._parts)

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


class _OpInputs:
    """The operators :func:`concepts.is_input_checked_op` names, with the raw text of their
    ``Input type`` and ``Input Dims`` interned per distinct pair (a model repeats the same few
    hundred shapes every step)."""

    def __init__(self) -> None:
        self.values = _Symbols()
        #: Per name id: whether the operator's inputs are kept.
        self._checked = np.zeros(0, dtype=bool)
        self._parts: list[dict[str, np.ndarray]] = []

    def _is_checked(self, names: _Symbols, ids: np.ndarray) -> np.ndarray:
        """Whether each name id is a checked operator (names seen first are classified now)."""
        if len(ids) and int(ids.max()) >= len(self._checked):
            new = names.values()[len(self._checked):]
            flags = np.fromiter((isinstance(name, str) and concepts.is_input_checked_name(name)
                                 for name in new), bool, len(new))
            self._checked = np.concatenate([self._checked, flags])
        return self._checked[ids]

    def add(self, builder: _ColumnBuilder, part: dict[str, np.ndarray], args: list[_Args],
            keep: np.ndarray) -> None:
        """Keep the checked operators of one batch of complete events (``part``'s columns)."""
        wanted = keep & np.isin(part["cat"], builder.cats.lookup(CPU_OP_CATS))
        rows = np.flatnonzero(wanted)
        rows = rows[self._is_checked(builder.names, part["name"][rows])]
        if not len(rows):
            return
        pairs = ((bytes(args[i].input_types), bytes(args[i].input_dims)) for i in rows)
        self._parts.append({**{key: part[key][rows] for key in ("name", "pid", "tid", "start",
                                                                  "end")},
                            "inputs": self.values.ids(pairs, len(rows))})

    def extend(self, other: _OpInputs, maps: dict[str, np.ndarray]) -> None:
        """Append the operators of a later part of the same trace (its ids mapped to ours)."""
        inputs = self.values.remap(other.values)
        self._parts.extend({key: inputs[value] if key == "inputs" else
                            maps[_SYMBOL_COLUMNS[key]][value] if key in _SYMBOL_COLUMNS
                            else value for key, value in part.items()} for part in other._parts)

    def frame(self, names: np.ndarray, thread_numbers: np.ndarray) -> pd.DataFrame:
        """The ``op_inputs`` table, sorted by start."""
        if not self._parts:
            return empty_table("op_inputs")
        columns = {key: np.concatenate([part[key] for part in self._parts])
                   for key in self._parts[0]}
        distinct = self.values.values()
        types, dims = np.empty(len(distinct), object), np.empty(len(distinct), object)
        for index, (types_text, dims_text) in enumerate(distinct):
            types[index] = _decoded_inputs(types_text, str)
            dims[index] = _decoded_inputs(dims_text, tuple)
        frame = pd.DataFrame({
            "start": columns["start"], "end": columns["end"],
            "pid": thread_numbers[columns["pid"]], "tid": thread_numbers[columns["tid"]],
            "name": names[columns["name"]], "input_types": types[columns["inputs"]],
            "input_dims": dims[columns["inputs"]]})
        return conform("op_inputs", frame.sort_values("start", kind="stable"))


def _frozen(value: Any) -> Any:
    """A decoded JSON list as nested tuples of ints and strings; ValueError for anything else."""
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return value
    raise ValueError(value)


# The usual shapes of ``Input type`` and ``Input Dims``, decoded at C speed; anything else (a
# TensorList's nested shapes) goes through :func:`_frozen`.
_INPUT_DECODERS = {str: msgspec.json.Decoder(tuple[str, ...]),
                   tuple: msgspec.json.Decoder(tuple[tuple[int, ...], ...])}


def _decoded_inputs(text: bytes, item: type) -> tuple[Any, ...] | None:
    """``Input type``/``Input Dims`` text as a tuple whose items are all ``item`` (str names,
    tuple shapes); None when absent or not of that shape."""
    if not text:
        return None
    try:
        return _INPUT_DECODERS[item].decode(text)
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError:
        return None
    try:
        value = _frozen(msgspec.json.decode(text))
    except (msgspec.DecodeError, ValueError):
        return None
    if not isinstance(value, tuple) or not all(isinstance(v, item) for v in value):
        return None
    return value


def _int_column(values: list[Any], absent: int) -> np.ndarray:
    """:func:`_int_field` of each value, at C speed when all are ints or all are missing."""
    kinds = set(map(type, values))
    if kinds <= {int}:
        try:
            column = np.array(values, dtype=np.int64)
        except OverflowError:
            column = None
        if column is not None and (not len(column) or column.min() >= -_INT64_MAX):
            return column
    elif kinds == {type(None)}:
        return np.full(len(values), absent, dtype=np.int64)
    return np.array([_int_field(value, absent) for value in values], dtype=np.int64)


def _thread_column(values: list[Any]) -> np.ndarray:
    """:func:`_as_int` of each pid or tid, worked out once per distinct value."""
    numbers = {value: _as_int(value) for value in set(values)}
    return np.fromiter(map(numbers.__getitem__, values), np.int64, len(values))


def _int_field(value: Any, absent: int) -> int:
    """An integer field of a memory event (an int64), ``absent`` when missing or unusable."""
    usable = isinstance(value, int) and not isinstance(value, bool) and (
        -_INT64_MAX <= value <= _INT64_MAX)
    return value if usable else absent


def _us_to_ns(micros: np.ndarray) -> np.ndarray:
    """Kineto microseconds (whole or with a fraction) to int64 nanoseconds, exact to the ns.

    The whole and fractional microseconds are converted apart so that epoch-sized integer
    timestamps (~1.6e15 us) keep every digit instead of passing through a float product.
    """
    whole = np.floor(micros)
    return whole.astype(np.int64) * 1000 + np.rint((micros - whole) * 1000).astype(np.int64)


def _too_deep(path: Path) -> InputError:
    """The error for JSON nested deeper than the decoder's stack allows."""
    return InputError(f"too large: JSON nested deeper than the decoder's stack where at most "
                      f"{MAX_JSON_DEPTH.value} {MAX_JSON_DEPTH.what} are read "
                      f"({MAX_JSON_DEPTH.reason})", path)


class _TraceText:
    """The trace's text, read forward in chunks and cut into a header and event batches."""

    def __init__(self, handle: BinaryIO, path: Path, builder: _ColumnBuilder,
                 offset: int = 0) -> None:
        self._handle = handle
        self._path = path
        self._builder = builder
        self._buf = bytearray()
        self._offset = offset  # position of _buf[0] in the uncompressed text
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

    def _fill_to(self, size: int) -> None:
        """Read until the buffer holds ``size`` bytes or the file ends."""
        while len(self._buf) < size and not self._eof:
            self._fill()

    def _consume(self, count: int) -> None:
        """Drop the first ``count`` bytes of the buffer."""
        del self._buf[:count]
        self._offset += count

    def read_prefix(self) -> int:
        """Read up to the opening bracket of ``traceEvents``; refuse what is no trace.

        The members before it are scanned once, token by token, keeping the nesting depth, so
        a key ``traceEvents`` inside a nested object is skipped in linear time. Returns the
        offset of the first byte after the bracket.
        """
        position, depth = 0, 0
        while True:
            token = _HEADER_TOKEN.match(self._buf, position)
            if token is None:
                if self._eof:
                    self._refuse_without_events()
                MAX_HEADER_BYTES.check(len(self._buf), self._path)
                self._fill_to(2 * len(self._buf) + READ_CHUNK)
                continue
            text = token.group(1)
            position = token.end()
            if text in (b"{", b"["):
                depth += 1
            elif text in (b"}", b"]"):
                depth -= 1
            elif depth == 1 and text == _TRACE_EVENTS_KEY:
                opened = self._array_open(position)
                if opened is not None:
                    break
        self.prefix = bytes(self._buf[:position]) + b":"
        self._consume(opened)
        return self._offset

    def _array_open(self, position: int) -> int | None:
        """After a top-level ``"traceEvents"`` string: the end of ``: [``, None if no key."""
        while True:
            colon = _KEY_COLON.match(self._buf, position)
            if colon is not None or self._eof:
                break
            self._fill()
        if colon is None or self._buf[position:colon.start(1)].strip() != b":":
            return None
        if colon.group(1) != b"[":
            raise InputError("traceEvents is not a JSON array", self._path)
        return colon.end()

    def _refuse_without_events(self) -> None:
        """Raise the right error for a whole file that holds no ``traceEvents`` array."""
        try:
            document = msgspec.json.decode(bytes(self._buf))
        except RecursionError:
            raise _too_deep(self._path) from None
        except msgspec.DecodeError as exc:
            raise InputError(f"invalid JSON: {exc}", self._path) from None
        kind = "object" if isinstance(document, dict) else type(document).__name__
        raise InputError(f"not a torch.profiler trace: a JSON {kind} without traceEvents",
                         self._path)

    def batches(self) -> Iterator[list[_Event]]:
        """Yield the events of ``traceEvents`` in decoded batches; then read the suffix."""
        wanted = BATCH_BYTES
        while True:
            self._fill_to(wanted)
            if self._eof:
                yield self._last_batch()
                return
            events = self._next_batch()
            if events is None:
                # No whole event in the buffer: read twice as much before trying again, so
                # that one long event costs linear time.
                MAX_EVENT_BYTES.check(len(self._buf), self._path)
                wanted = 2 * len(self._buf)
            else:
                wanted = BATCH_BYTES
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
        except RecursionError:
            raise _too_deep(self._path) from None
        except msgspec.ValidationError:
            return self._decode_each(text)
        except msgspec.DecodeError as exc:
            self._raise_if_damaged(exc, len(text) - 1)
            return None

    def _decode_each(self, text: bytes) -> list[_Event] | None:
        """Decode a batch holding a value of an unexpected type event by event; the events
        that do not decode are dropped and counted. None when the text is no whole array."""
        try:
            raws = _RAW_EVENTS_DECODER.decode(text)
        except RecursionError:
            raise _too_deep(self._path) from None
        except msgspec.DecodeError as exc:
            self._raise_if_damaged(exc, len(text) - 1)
            return None
        events = []
        for raw in raws:
            try:
                events.append(_EVENT_DECODER.decode(raw))
            except msgspec.ValidationError as exc:
                field = _ERROR_FIELD.search(str(exc))
                self._builder.drop_unreadable(
                    f"{field.group(1) if field else 'event'} of an unexpected type")
        return events

    def _check_prefix(self) -> None:
        """Raise if the buffer is not the valid start of a run of events (no cut decoded)."""
        try:
            with memoryview(self._buf) as view:
                _RAW_EVENTS_DECODER.decode(b"".join((b"[", view)))
        except RecursionError:
            raise _too_deep(self._path) from None
        except msgspec.DecodeError as exc:
            self._raise_if_damaged(exc, len(self._buf) + 1)

    def _raise_if_damaged(self, exc: msgspec.DecodeError, end: int) -> None:
        """Turn a decode error of ``"[" + buffer...`` before byte ``end`` into an InputError.

        An error at ``end`` or a truncation only says the text was cut in the wrong place.
        """
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
        except RecursionError:
            raise _too_deep(self._path) from None
        except msgspec.DecodeError as exc:
            raise InputError(f"invalid JSON after traceEvents: {exc}", self._path) from None
        document.pop("traceEvents", None)
        return document

    def read_all(self) -> None:
        """Decode every remaining event into the builder."""
        for events in self.batches():
            self._builder.add(events)


class _RangeReader(io.RawIOBase):
    """Bytes ``[start, stop)`` of a file, then ``tail``: one range of events, closed as an array."""

    def __init__(self, path: Path, start: int, stop: int, tail: bytes) -> None:
        super().__init__()
        self._file = open_input(path)
        self._file.seek(start)
        self._left = stop - start
        self._tail = tail

    def readable(self) -> bool:
        """Always readable."""
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        """Fill ``buffer`` from the range, then from the tail."""
        if self._left > 0:
            data = self._file.read(min(len(buffer), self._left))
            self._left = self._left - len(data) if data else 0
        else:
            data, self._tail = self._tail[:len(buffer)], self._tail[len(buffer):]
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        """Close the file."""
        self._file.close()
        super().close()


class _Prefetched:
    """A stream read ahead by a background thread, a few chunks at a time.

    Decompression releases the GIL, so a gzip trace is inflated while the events read before
    are decoded. Errors of the reading thread are raised by :meth:`read`.
    """

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._chunks: queue.Queue[bytes | BaseException] = queue.Queue(PREFETCH_CHUNKS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kineto-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """Read chunks until the end of the stream, an error, or :meth:`close`."""
        item: bytes | BaseException = b"-"
        while item and not isinstance(item, BaseException) and not self._stop.is_set():
            try:
                item = self._raw.read(READ_CHUNK)
            except BaseException as exc:  # noqa: BLE001 (handed to the reading thread)
                item = exc
            while not self._stop.is_set():
                try:
                    self._chunks.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue

    def read(self, size: int = -1) -> bytes:
        """The next chunk (any length; empty at the end of the stream)."""
        item = self._chunks.get()
        if isinstance(item, BaseException):
            self._chunks.put(item)
            raise item
        if not item:
            self._chunks.put(item)
        return item

    def close(self) -> None:
        """Stop the reading thread and close the stream."""
        self._stop.set()
        self._thread.join()
        self._raw.close()

    def __enter__(self) -> _Prefetched:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open(path: Path) -> tuple[BinaryIO, bool]:
    """The trace's uncompressed bytes (gzip or plain, judged by the first bytes), size-bounded;
    and whether the file is plain text (so that its byte ranges can be read apart)."""
    raw = open_input(path)
    try:
        compressed = raw.read(2) == _GZIP_MAGIC
        size = os.fstat(raw.fileno()).st_size
        raw.seek(0)
    except OSError as exc:
        raw.close()
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from None
    if not compressed:
        MAX_DECOMPRESSED_BYTES.check(size, path)
        return raw, True
    unpacked = gzip.GzipFile(fileobj=raw, mode="rb")
    bounded = BoundedReader(unpacked, decompressed_limit(size), path)  # type: ignore[arg-type]
    return _Prefetched(io.BufferedReader(bounded, READ_CHUNK)), False  # type: ignore[return-value]


def _parallel_ranges(path: Path, array_start: int, size: int) -> list[tuple[int, int]]:
    """Byte ranges ``[start, stop)`` of whole events that split the event array, one per core.

    Each cut is a gap between two events verified by decoding the events after it; the last
    range runs to the end of the file. A single range when the file is small or no cut holds.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    count = min(cores or 1, (size - array_start) // PARALLEL_MIN_BYTES)
    cuts: list[tuple[int, int]] = []
    with open_input(path) as handle:
        for part in range(1, count):
            cut = _verified_cut(handle, array_start + (size - array_start) * part // count)
            if cut is not None and (not cuts or cut[0] > cuts[-1][1]):
                cuts.append(cut)
    starts = [array_start] + [after for _, after in cuts]
    stops = [before for before, _ in cuts] + [size]
    return list(zip(starts, stops, strict=True))


def _verified_cut(handle: BinaryIO, target: int) -> tuple[int, int] | None:
    """The first gap between two events after ``target``: (end of the event before it, start
    of the event after it), or None when no gap in the probe decodes as one."""
    handle.seek(target)
    probe = handle.read(SPLIT_PROBE_BYTES)
    gaps = list(_EVENT_GAP.finditer(probe))
    for index, gap in enumerate(gaps):
        for later in gaps[index + 1:index + 1 + MAX_CUT_TRIES]:
            try:
                _RAW_EVENTS_DECODER.decode(b"[" + probe[gap.end() - 1:later.start() + 1] + b"]")
            except (msgspec.DecodeError, RecursionError):
                continue
            return target + gap.start() + 1, target + gap.end() - 1
    return None


def _read_range(path: Path, start: int, stop: int) -> _ColumnBuilder:
    """Decode the whole events in bytes ``[start, stop)`` of a plain trace (a worker's part)."""
    builder = _ColumnBuilder(path)
    with io.BufferedReader(_RangeReader(path, start, stop, b"]"), READ_CHUNK) as handle:
        _TraceText(handle, path, builder, offset=start).read_all()  # type: ignore[arg-type]
    return builder


def _worker_context() -> multiprocessing.context.BaseContext:
    """Fork where the platform has it (no re-import in the worker), else spawn."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _read(path: Path) -> tuple[dict[str, Any], _ColumnBuilder]:
    """Stream the trace at ``path`` into columns; return its header members and the columns."""
    builder = _ColumnBuilder(path)
    handle, plain = _open(path)
    with handle:
        text = _TraceText(handle, path, builder)
        array_start = text.read_prefix()
        size = os.fstat(handle.fileno()).st_size if plain else 0
        ranges = _parallel_ranges(path, array_start, size) if plain else []
        if len(ranges) < 2:
            text.read_all()
            return text.header(), builder
        handle.seek(ranges[-1][0])
        last = _TraceText(handle, path, _ColumnBuilder(path), offset=ranges[-1][0])
        last.prefix = text.prefix
        with ProcessPoolExecutor(len(ranges) - 1, mp_context=_worker_context()) as pool:
            parts = [pool.submit(_read_range, path, start, stop) for start, stop in ranges[:-1]]
            last.read_all()
            for part in parts:
                builder.absorb(part.result())
        builder.absorb(last._builder)
        return last.header(), builder


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
    number = _integer(value) if not isinstance(value, int) or value >= 0 else None
    return -1 if number is None else number


class _Tables:
    """Builds the Profile tables from a trace's columns and symbol tables."""

    def __init__(self, builder: _ColumnBuilder) -> None:
        self.detailed, self.plain = builder.finish()
        self.names = builder.names.values()
        self.details = builder.details.values()
        self.cats = builder.cats
        self.thread_numbers = _thread_numbers(builder.threads)
        self.metadata = builder.metadata
        self.flows = builder.flows()
        spans = self.rows(CPU_OP_CATS | ANNOTATION_CATS).name
        self.is_step = _per_name(self.names, lambda s: concepts.step_numbers(s).notna(),
                                 spans).astype(bool)

    def rows(self, cats: frozenset[str]) -> _Columns:
        """The events whose category is in ``cats``."""
        wanted = self.cats.lookup(cats)
        return _concat(self.plain.take(np.isin(self.plain.cat, wanted)),
                       self.detailed.take(np.isin(self.detailed.cat, wanted)))

    def named(self, rows: _Columns, wanted: frozenset[str], keep: bool = True) -> _Columns:
        """The rows whose name is (``keep``) or is not in ``wanted``."""
        ids = [i for i, name in enumerate(self.names) if name in wanted]
        return rows.take(np.isin(rows.name, ids) == keep)

    def cpu(self, rows: _Columns) -> pd.DataFrame:
        """start, end, pid, tid and name of CPU-side events."""
        return pd.DataFrame({
            "start": rows.start, "end": rows.end, "pid": self.thread_numbers[rows.pid],
            "tid": self.thread_numbers[rows.tid], "name": self.names[rows.name],
        })

    def gpu(self, rows: _Columns) -> pd.DataFrame:
        """start, end, device, stream, correlation and name of device activities.

        The device is ``args.device``, else the event's pid (Kineto files device work under the
        device's number); the correlation is ``args.correlation``, else the ``ac2g`` flow's id.
        """
        pid = self.thread_numbers[rows.pid]
        return pd.DataFrame({
            "start": rows.start, "end": rows.end,
            "device": np.where(rows.device >= 0, rows.device, pid), "stream": rows.stream,
            "correlation": self._correlation(rows), "name": self.names[rows.name],
        })

    def _correlation(self, rows: _Columns) -> np.ndarray:
        """Each row's correlation id, from the ``ac2g`` flow ending on it when args lack one."""
        correlation = rows.correlation.copy()
        missing = np.flatnonzero(correlation < 0)
        if not len(missing) or self.flows.empty:
            return correlation
        wanted = pd.DataFrame({"pid": rows.pid[missing], "tid": rows.tid[missing],
                               "start": rows.start[missing], "row": missing})
        found = wanted.merge(self.flows.drop_duplicates(["pid", "tid", "start"]),
                             on=["pid", "tid", "start"])
        correlation[found["row"].to_numpy()] = found["flow"].to_numpy()
        return correlation

    def device_tables(self) -> dict[str, pd.DataFrame]:
        """The device-side tables and the API calls; their columns are released afterwards, so
        that they are not held while the (larger) CPU-side tables are built."""
        out = {"kernels": self.kernels(), "memcpy": self.memcpy(), "memset": self.memset(),
               "sync": self.sync(), "runtime": self.runtime()}
        self.detailed = self.detailed.take(np.zeros(len(self.detailed), dtype=bool))
        return out

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
        """Device kernels (MTIA's executions too) with short names and communication flag."""
        accelerator = self.rows(ACCELERATOR_CATS)
        rows = _concat(self.rows(KERNEL_CATS), self.named(
            accelerator, ACCELERATOR_SYNC_NAMES | ACCELERATOR_COPY_NAMES, keep=False))
        frame = self.gpu(rows)
        short = _per_name(self.names, lambda s: s.map(concepts.short_kernel_name), rows.name)
        comm = _per_name(self.names, concepts.is_comm_kernel, rows.name)
        frame["short_name"] = short[rows.name]
        frame["is_comm"] = comm[rows.name].astype(bool)
        return conform("kernels", frame.sort_values("start", kind="stable"))

    def memcpy(self) -> pd.DataFrame:
        """Device copies with direction, memory kinds and size."""
        frame = pd.concat([self._named_copies(), self._accelerator_copies()], ignore_index=True)
        return conform("memcpy", frame.sort_values("start", kind="stable"))

    def _named_copies(self) -> pd.DataFrame:
        """Copies whose name says the direction: ``Memcpy HtoD (Pageable -> Device)``."""
        rows = self.rows(MEMCPY_CATS)
        frame = self.gpu(rows)
        distinct = np.unique(rows.name)
        parts = concepts.copy_kinds(pd.Series(self.names[distinct], dtype=object))
        row_part = np.searchsorted(distinct, rows.name)
        for column in parts.columns:
            frame[column] = parts[column].to_numpy()[row_part]
        frame["bytes"] = rows.bytes
        return frame

    def _accelerator_copies(self) -> pd.DataFrame:
        """MTIA DMA requests: direction in ``args.direction``, size in ``args.size``."""
        rows = self.named(self.rows(ACCELERATOR_CATS), ACCELERATOR_COPY_NAMES)
        frame = self.gpu(rows)
        kinds = [ACCELERATOR_COPY_KINDS.get(str(d), ("unknown",) * 3)
                 for d in self.details[rows.detail]]
        for index, column in enumerate(("kind", "src_kind", "dst_kind")):
            frame[column] = [kind[index] for kind in kinds]
        frame["bytes"] = rows.bytes
        return frame

    def memset(self) -> pd.DataFrame:
        """GPU memsets with their size."""
        rows = self.rows(MEMSET_CATS)
        frame = self.gpu(rows)
        frame["bytes"] = rows.bytes
        return conform("memset", frame)

    def sync(self) -> pd.DataFrame:
        """Device-side synchronisation: CUPTI ``cuda_sync`` records, MTIA event waits/records."""
        rows = _concat(self.rows(SYNC_CATS),
                       self.named(self.rows(ACCELERATOR_CATS), ACCELERATOR_SYNC_NAMES))
        frame = self.gpu(rows)
        detail = self.details[rows.detail]
        frame["kind"] = np.where(pd.isna(detail), frame["name"], detail)
        return conform("sync", frame.sort_values("start", kind="stable"))

    def runtime(self) -> pd.DataFrame:
        """Runtime and driver calls (CUDA, HIP, MTIA...), names without their version suffix."""
        rows = self.rows(RUNTIME_CATS)
        frame = self.cpu(rows)
        stripped = _per_name(self.names, lambda s: s.map(concepts.strip_api_version), rows.name)
        frame["name"] = stripped[rows.name]
        frame["correlation"] = rows.correlation
        return conform("runtime", frame)

    def steps(self, ranges: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
        """One row per iteration and the span name it came from (None for ProfilerStep).

        ``ProfilerStep#N`` spans when the trace has them; else the stretches between the ends
        of consecutive optimizer steps; else the stretches between consecutive starts of the
        top-level op that repeats most on the busiest thread. ``origin`` says which.
        """
        frame = ranges.assign(number=concepts.step_numbers(ranges["name"])).dropna(
            subset=["number"])
        if not frame.empty:
            frame = concepts.one_row_per_step(frame)
            return conform("steps", frame.assign(origin="ProfilerStep")), None
        spans = pd.concat([self.cpu(self.rows(CPU_OP_CATS)), ranges[["start", "end", "pid",
                                                                    "tid", "name"]]],
                          ignore_index=True)
        optimizer = spans[concepts.is_optimizer_step_span(spans["name"])]
        if len(optimizer) >= 2:
            return _steps_between_ends(_on_busiest_thread(optimizer)), None
        return _steps_from_repeated_op(spans)

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
        named = [e for e in self.metadata if e.name == "thread_name" and e.args.name is not None]
        frame = pd.DataFrame({
            "pid": [_as_int(e.pid) for e in named], "tid": [_as_int(e.tid) for e in named],
            "name": [str(e.args.name) for e in named],
        })
        return conform("threads", frame.drop_duplicates(["pid", "tid"], keep="last"))


def _concat(first: _Columns, second: _Columns) -> _Columns:
    """The rows of both, ``first``'s before ``second``'s."""
    if not len(first) or not len(second):
        return second if not len(first) else first
    return _Columns(**{key: np.concatenate([value, getattr(second, key)])
                       for key, value in vars(first).items()})


def _on_busiest_thread(spans: pd.DataFrame) -> pd.DataFrame:
    """The spans of the thread whose spans cover the most time, sorted by start."""
    busiest = (spans["end"] - spans["start"]).groupby([spans["pid"], spans["tid"]]).sum().idxmax()
    mine = spans[(spans["pid"] == busiest[0]) & (spans["tid"] == busiest[1])]
    return mine.sort_values("start", kind="stable")


def _steps_between_ends(optimizer: pd.DataFrame) -> pd.DataFrame:
    """Iterations as the time from one optimizer step's end to the next one's end."""
    ends = optimizer["end"].to_numpy()
    frame = pd.DataFrame({"number": np.arange(1, len(ends)), "start": ends[:-1],
                          "end": ends[1:], "pid": optimizer["pid"].iloc[0],
                          "tid": optimizer["tid"].iloc[0], "origin": "optimizer"})
    return conform("steps", frame)


def _top_level(spans: pd.DataFrame) -> pd.DataFrame:
    """The spans of one thread that no other span of it encloses."""
    ordered = spans.assign(length=spans["end"] - spans["start"]).sort_values(
        ["start", "length"], ascending=[True, False], kind="stable")
    reach = np.maximum.accumulate(ordered["end"].to_numpy())
    enclosed = np.r_[False, ordered["end"].to_numpy()[1:] <= reach[:-1]]
    return ordered[~enclosed]


def _steps_from_repeated_op(spans: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """Iterations from the top-level op that repeats most (by time) on the busiest thread;
    each runs from one occurrence's start to the next one's (the last to its own end)."""
    if spans.empty:
        return conform("steps", spans.assign(number=0, origin="")), None
    top = _top_level(_on_busiest_thread(spans))
    counts = top.groupby("name")["length"].agg(["size", "sum"])
    repeated = counts[counts["size"] >= MIN_STEP_REPEATS]
    if repeated.empty:
        return conform("steps", spans.iloc[:0].assign(number=0, origin="")), None
    name = str(repeated["sum"].idxmax())
    chosen = top[top["name"] == name]
    starts, ends = chosen["start"].to_numpy(), chosen["end"].to_numpy()
    frame = pd.DataFrame({"number": np.arange(1, len(starts) + 1), "start": starts,
                          "end": np.r_[starts[1:], ends[-1]], "pid": chosen["pid"].to_numpy(),
                          "tid": chosen["tid"].to_numpy(), "origin": "repeated op"})
    return conform("steps", frame), name


def _per_name(names: np.ndarray, rule: Any, ids: np.ndarray) -> np.ndarray:
    """Apply a vectorised name ``rule`` once per distinct name among ``ids``; index by name id."""
    distinct = np.unique(ids)
    out = np.empty(len(names), dtype=object)
    out[distinct] = np.asarray(rule(pd.Series(names[distinct], dtype=object)), dtype=object)
    return out


def _with_bandwidth(copied: np.ndarray, bandwidth: np.ndarray,
                    duration: np.ndarray) -> np.ndarray:
    """Bytes moved: ``args.bytes``, else bandwidth (GB/s) times duration (ns); -1 unknown."""
    from_bandwidth = bandwidth * duration
    with np.errstate(invalid="ignore"):
        usable = (bandwidth > 0) & (from_bandwidth < _INT64_MAX) & (copied < 0)
    estimate = np.rint(np.where(usable, from_bandwidth, 0)).astype(np.int64)
    return np.where(usable, estimate, copied)


def _header_int(value: Any) -> int:
    """A non-negative int64 from the header, -1 when it is anything else."""
    number = _integer(value) if not isinstance(value, str) else None
    return -1 if number is None else number


def _devices(header: dict[str, Any]) -> pd.DataFrame:
    """Accelerators listed in ``deviceProperties``."""
    listed = header.get("deviceProperties")
    props = [p for p in listed if isinstance(p, dict)] if isinstance(listed, list) else []
    frame = pd.DataFrame({
        "device": [_header_int(p.get("id")) for p in props],
        "name": [str(p.get("name", "")) for p in props],
        "memory_bytes": [_header_int(p.get("totalGlobalMem")) for p in props],
        "sm_count": [_header_int(p.get("numSms")) for p in props],
        "compute_major": [_header_int(p.get("computeMajor")) for p in props],
        "compute_minor": [_header_int(p.get("computeMinor")) for p in props],
    })
    return conform("devices", frame)


def _distributed(header: dict[str, Any], dropped: Counter[str]) -> dict[str, Any]:
    """``distributedInfo`` with checked values: rank, world_size, backend, nccl_version.

    A member that is no object, or a value of the wrong type, is left out and counted.
    """
    info = header.get("distributedInfo")
    if info is None:
        return {}
    if not isinstance(info, dict):
        dropped["distributedInfo is not an object"] += 1
        return {}
    world = _header_int(info.get("world_size"))
    rank = _header_int(info.get("rank"))
    checked = {"world_size": world if world >= 1 else None,
               "rank": rank if rank >= 0 and (world < 1 or rank < world) else None,
               "backend": info.get("backend") if isinstance(info.get("backend"), str) else None,
               "nccl_version": (info.get("nccl_version")
                                if isinstance(info.get("nccl_version"), str) else None)}
    for key in ("world_size", "rank", "backend", "nccl_version"):
        if key in info and checked[key] is None:
            dropped[f"distributedInfo.{key} is not usable"] += 1
    return checked


def _dataloader_meta(loader: pd.DataFrame) -> dict[str, Any]:
    """What the trace says about the DataLoader: iterator kind and its ``__next__`` calls.

    ``_MultiProcessingDataLoaderIter`` means worker processes (their number is not recorded in
    the trace), ``_SingleProcessDataLoaderIter`` means ``num_workers=0``.
    """
    names = loader["name"].astype(str)
    multi = int(names.str.contains("_MultiProcessingDataLoaderIter").sum())
    single = int(names.str.contains("_SingleProcessDataLoaderIter").sum())
    workers = "multi-process" if multi and not single else (
        "single-process" if single and not multi else ("both" if multi else "unknown"))
    return {"workers": workers, "multi_process_next_calls": multi,
            "single_process_next_calls": single}


def _dialect(cats: _Symbols) -> str:
    """``2021`` when the trace uses the old capitalised categories, else ``current``."""
    return "2021" if any(str(cat) in LEGACY_CATS for cat in cats.values()) else "current"


def _meta(header: dict[str, Any], dialect: str, distributed: dict[str, Any]) -> KinetoMeta:
    """What the analysis may want from the header: distributed setup, devices, clock base."""
    devices = header.get("deviceProperties")
    return KinetoMeta(
        schema_version=header.get("schemaVersion"),
        dialect=dialect,
        distributed_info=distributed,
        distributed=bool(distributed),
        world_size=distributed.get("world_size"),
        backend=distributed.get("backend"),
        device_properties=devices if isinstance(devices, list) else [],
        base_time_ns=_header_int(header.get("baseTimeNanoseconds")),
        display_time_unit=str(header.get("displayTimeUnit", "")) or None,
        trace_name=str(header["traceName"]) if "traceName" in header else None,
    )


def _tool_version(header: dict[str, Any], dialect: str, distributed: dict[str, Any]) -> str:
    """A one-line description of what wrote the trace."""
    version = header.get("schemaVersion", "unknown")
    text = f"kineto schema {version} ({dialect} trace format)"
    nccl = distributed.get("nccl_version")
    return f"{text}, nccl {nccl}" if nccl else text


def parse(path: Path) -> Profile:
    """Parse one torch.profiler trace (``.json`` or ``.json.gz``) into a Profile."""
    path = Path(path)
    header, builder = _read(path)
    _check_schema_version(header, path)
    dialect = _dialect(builder.cats)
    distributed = _distributed(header, builder.dropped)
    tables = _Tables(builder)
    device = tables.device_tables()
    ranges = tables.ranges()
    steps, step_span = tables.steps(ranges)
    loader = tables.dataloader()
    meta = _meta(header, dialect, distributed)
    meta.dropped = dict(builder.dropped)
    meta.notes = [f"{count:,} records dropped: {reason}"
                  for reason, count in sorted(meta.dropped.items()) if count]
    meta.step_span, meta.events = step_span, builder.events
    meta.dataloader = _dataloader_meta(loader)
    return Profile(
        path=path, kind="kineto", tool_version=_tool_version(header, dialect, distributed),
        rank=distributed.get("rank"),
        tables={
            **device, "ranges": ranges,
            "cpu_ops": tables.cpu_ops(), "steps": steps, "dataloader": loader,
            "cpu_collectives": tables.cpu_collectives(),
            "devices": _devices(header), "threads": tables.threads(),
            "memory": builder.memory.frame(),
            "op_inputs": builder.op_inputs.frame(tables.names, tables.thread_numbers),
        },
        meta=meta,
    )


def parse_input(path: Path, options: ParseOptions) -> Profile:
    """The registry's entry point (``parsers.FORMATS``); no option applies to a trace."""
    return parse(path)
