"""Kineto events decoded into columns: typed msgspec structs, interned symbols, checked values.

A batch of trace events (cut by :mod:`parsers.kineto_stream`, scanned in C by
``parsers/_kineto_scan.c`` or decoded into msgspec structs, both seen as an :class:`EventBatch`)
becomes numpy columns through one shared path: names, categories and thread ids interned to
integer ids, times in int64 ns, ids and sizes checked to fit int64; an event with an impossible
value is dropped and counted by reason. ``[memory]`` instant events and the inputs of checked
operators are kept in their own columns. What the columns mean (which table, which step) is
:mod:`parsers.kineto`'s business.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from profreport import concepts
from profreport.inputs import EVENT_TIMES, MAX_EVENTS, MAX_NAME_CHARS, Limit
from profreport.model import conform, empty_table, in_start_order, narrowed

try:  # built by pyproject.toml where a C compiler is found; msgspec decodes every batch otherwise
    from profreport.parsers import _kineto_scan
except ImportError:
    _kineto_scan = None

# Largest value an id or a byte count may have to fit an int64 column.
_INT64_MAX = (1 << 63) - 1
#: One past the highest device number an event may record: CUDA and HIP number a node's
#: devices from 0 (a C int), and no node holds 65,536 accelerators; a larger one is damage.
MAX_DEVICES = 1 << 16

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
    # The copy direction ROCm records on copies and copy API calls (``DtoD``, ``1``...).
    kind: Any = None
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
    # The 2021 dialect's spelling of the same shapes.
    input_dims_2021: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input dims")
    # Each input tensor's strides (torch 2.1+), which tell its memory format.
    input_strides: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Strides")
    # What a collective sends (record_param_comms): elements, their dtype, the collective.
    msg_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    msg_dtype: Any = msgspec.field(default=None, name="dtype")
    collective: Any = msgspec.field(default=None, name="Collective name")


_NO_ARGS = _Args()


class Event(msgspec.Struct, gc=False):
    """One trace event, reduced to the fields the analysis reads.

    JSON null in a field is the same fact as the key missing (the profiler recorded nothing
    there), and reads the same wherever the field is read: ph and cat as "", pid and tid as -1
    (null shares that value's id in their symbol tables; :func:`as_int` reads it as -1), name
    as concepts.UNRECORDED_NAME, ts and dur as NaN (numpy reads None so), args through
    :func:`_args_of`, an args id or size through :func:`_integers`.
    """

    ph: str | None = ""
    cat: str | None = ""
    name: str | None = None
    pid: int | str | None = -1
    tid: int | str | None = -1
    ts: float | None = float("nan")
    dur: float | None = float("nan")
    id: Any = None
    args: _Args | None = _NO_ARGS
# Field getters that run at C speed over a batch (``map``), instead of a Python loop per field.
_TS, _ARGS, _FLOW_ID = attrgetter("ts"), attrgetter("args"), attrgetter("id")
#: The symbol fields of an event (ph, cat, name, pid, tid), in the scanner's row order.
_SYMBOL_FIELDS = ("ph", "cat", "name", "pid", "tid")
# Category of the flows that link a launch to the device work it started.
_LAUNCH_FLOW = "ac2g"


def _args_of(events: list[Event]) -> list[_Args]:
    """Each event's ``args``; an event whose ``args`` is null is given none, as one without
    ``args`` has (and keeps them, for whoever reads the event later)."""
    args = list(map(_ARGS, events))
    if None in args:  # a scan at C speed; only a trace holding a null args pays more
        for index in [index for index, value in enumerate(args) if value is None]:
            events[index].args = args[index] = _NO_ARGS
    return args


class _Ids(dict):  # type: ignore[type-arg]
    """A dict from value to dense id that gives an unseen value the next id on lookup."""

    limit: Limit | None = None
    path: Path | None = None
    #: The value that None (nothing recorded) is read as, sharing its id; None keeps None a
    #: value of its own.
    unrecorded: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.order: list[Any] = []

    def __missing__(self, value: Any) -> int:
        """Add ``value`` (checked against the length limit) with the next id; None, where it
        is read as :attr:`unrecorded`, takes that value's id and adds no value."""
        if value is None and self.unrecorded is not None:
            self[None] = number = self[self.unrecorded]
            return number
        if self.limit is not None:
            self.limit.check(len(str(value)), self.path)
        self[value] = number = len(self.order)
        self.order.append(value)
        return number


class Symbols:
    """Interns values (names, categories, thread ids) to dense integer ids."""

    def __init__(self, limit: Limit | None = None, path: Path | None = None,
                 unrecorded: Any = None) -> None:
        self._ids = _Ids()
        self._ids.limit, self._ids.path, self._ids.unrecorded = limit, path, unrecorded

    def ids(self, values: Iterable[Any], count: int) -> np.ndarray:
        """The id of each of ``count`` values, adding unseen values to the table."""
        return np.fromiter(map(self._ids.__getitem__, values), np.int32, count=count)

    def remap(self, other: Symbols) -> np.ndarray:
        """For each id of ``other``, the id of the same value here (added when unseen)."""
        return self.ids(other._ids.order, len(other))

    def values(self, since: int = 0) -> np.ndarray:
        """Every interned value from id ``since`` on, indexed by id less ``since`` (objects)."""
        out = np.empty(len(self) - since, dtype=object)
        out[:] = self._ids.order[since:]
        return out

    def __len__(self) -> int:
        """The number of interned values."""
        return len(self._ids.order)

    def lookup(self, wanted: frozenset[str]) -> np.ndarray:
        """Ids of the interned values whose lower-cased text is in ``wanted``."""
        return np.array([i for i, v in enumerate(self._ids.order) if str(v).lower() in wanted],
                        np.int32)


class Vocabulary:
    """The values a reader's codes stand for (code -> value, dense from 0), and for each
    symbol table the id there of each code that has been asked for."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self._ids: dict[Symbols, np.ndarray] = {}

    def ids_in(self, symbols: Symbols, codes: np.ndarray) -> np.ndarray:
        """The id in ``symbols`` of the value each of ``codes`` stands for; values unseen there
        are added in the order they first appear in ``codes``, as :meth:`Symbols.ids` adds
        them (so both readers build the same tables)."""
        known = self._ids.get(symbols, np.empty(0, dtype=np.int32))
        if len(known) < len(self.values):
            known = np.concatenate([known, np.full(len(self.values) - len(known), -1, np.int32)])
            self._ids[symbols] = known
        ids = known[codes]
        unseen = ids < 0
        if unseen.any():
            new, first = np.unique(codes[unseen], return_index=True)
            new = new[np.argsort(first)]
            known[new] = symbols.ids([self.values[code] for code in new.tolist()], len(new))
            ids = known[codes]
        return ids

    def equals(self, codes: np.ndarray, value: Any) -> np.ndarray:
        """Whether the value each of ``codes`` stands for equals ``value``."""
        distinct, inverse = np.unique(codes, return_inverse=True)
        return np.array([self.values[code] == value for code in distinct.tolist()],
                        dtype=bool)[inverse]


class _ValueCodes(dict):  # type: ignore[type-arg]
    """Decoded values to dense codes, the next code given to an unseen value on lookup."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        super().__init__()
        self.vocabulary = vocabulary

    def __missing__(self, value: Any) -> int:
        """Give ``value`` the next code."""
        self[value] = code = len(self.vocabulary.values)
        self.vocabulary.values.append(value)
        return code


class EventBatch:
    """One batch of events as columns, whichever reader read it: the symbol fields as codes of
    the reader's :class:`Vocabulary`, ts and dur in us (NaN where missing). What only some rows
    need (args ids and sizes, texts, whole events) is asked for by row."""

    count: int
    vocabulary: Vocabulary
    symbols: dict[str, np.ndarray]  # ph, cat, name, pid, tid -> int32 codes
    ts: np.ndarray
    dur: np.ndarray

    def integers(self, field: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """An id or size field (of ``args``, or the event's flow ``id``) of ``rows`` as
        :func:`_integers` reads it: values (-1 absent) and where a value was unusable."""
        raise NotImplementedError

    def bandwidth(self, rows: np.ndarray) -> np.ndarray:
        """``args``' memory bandwidth of ``rows`` as :func:`_floats` reads it (-1 absent)."""
        raise NotImplementedError

    def texts(self, field: str, rows: np.ndarray) -> list[bytes]:
        """A raw-JSON ``args`` field of ``rows`` (the operators' inputs), b"" where absent."""
        raise NotImplementedError

    def values(self, field: str, rows: np.ndarray) -> list[Any]:
        """An ``args`` field of ``rows`` as decoded JSON, None where absent."""
        raise NotImplementedError

    def events(self, rows: np.ndarray) -> list[Event]:
        """The events of ``rows`` whole (``args`` as decoded, null included)."""
        raise NotImplementedError

    def args(self, rows: np.ndarray) -> list[_Args]:
        """The ``args`` of ``rows`` (null read as none)."""
        return [_NO_ARGS if a is None else a for a in map(_ARGS, self.events(rows))]


class DecodedBatch(EventBatch):
    """A batch that msgspec decoded into structs."""

    def __init__(self, events: list[Event], codes: _ValueCodes) -> None:
        self.count = count = len(events)
        self.vocabulary = codes.vocabulary
        self._events = events
        self._args = _args_of(events)
        self.symbols = {field: np.fromiter(map(codes.__getitem__, map(attrgetter(field), events)),
                                           np.int32, count) for field in _SYMBOL_FIELDS}
        self.ts = np.fromiter(map(_TS, events), np.float64, count)
        self.dur = np.fromiter(map(attrgetter("dur"), events), np.float64, count)

    def integers(self, field: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """See :meth:`EventBatch.integers`."""
        source = self._events if field == "id" else self._args
        return _integers([getattr(source[row], field) for row in rows.tolist()])

    def bandwidth(self, rows: np.ndarray) -> np.ndarray:
        """See :meth:`EventBatch.bandwidth`."""
        return _floats([self._args[row].bandwidth for row in rows.tolist()])

    def texts(self, field: str, rows: np.ndarray) -> list[bytes]:
        """See :meth:`EventBatch.texts`."""
        return [bytes(getattr(self._args[row], field)) for row in rows.tolist()]

    def values(self, field: str, rows: np.ndarray) -> list[Any]:
        """See :meth:`EventBatch.values`."""
        return [getattr(self._args[row], field) for row in rows.tolist()]

    def events(self, rows: np.ndarray) -> list[Event]:
        """See :meth:`EventBatch.events`."""
        return [self._events[row] for row in rows.tolist()]


#: The scanner's columns (parsers/_kineto_scan.c's ``columns_of``), in their order in its
#: output: name, dtype, and the fields (columns) of that name.
_SCANNED_COLUMNS = (("number", np.float64, ("ts", "dur", "bandwidth")),
                    ("integer", np.int64, ("device", "stream", "stream_id", "correlation",
                                           "bytes", "size", "id")),
                    ("event", np.int64, ("event",)),
                    ("text", np.int64, ("input_types", "input_dims", "input_dims_2021",
                                        "input_strides", "sync_kind", "direction", "kind",
                                        "collective")),
                    ("symbol", np.int32, _SYMBOL_FIELDS))
#: The decoder of one event into its struct.
EVENT_DECODER = msgspec.json.Decoder(Event)


class ScannedBatch(EventBatch):
    """A batch that the C scanner (parsers/_kineto_scan.c) read into columns."""

    def __init__(self, text: bytes, columns: bytes, count: int, vocabulary: Vocabulary) -> None:
        self.count = count
        self.vocabulary = vocabulary
        self._text = text
        self._columns: dict[str, np.ndarray] = {}
        offset = 0
        for kind, dtype, fields in _SCANNED_COLUMNS:
            # "event" and the texts are (first byte, length) pairs.
            shape = (count, 2) if kind in ("event", "text") else (count,)
            for field in fields:
                column = np.frombuffer(columns, dtype, int(np.prod(shape)), offset)
                self._columns[field] = column.reshape(shape)
                offset += column.nbytes
        self.symbols = {field: self._columns[field] for field in _SYMBOL_FIELDS}
        self.ts, self.dur = self._columns["ts"], self._columns["dur"]

    def integers(self, field: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """See :meth:`EventBatch.integers` (the scanner gives unusable values up)."""
        return self._columns[field][rows], np.zeros(len(rows), dtype=bool)

    def bandwidth(self, rows: np.ndarray) -> np.ndarray:
        """See :meth:`EventBatch.bandwidth`."""
        return self._columns["bandwidth"][rows]

    def _present(self, field: str, rows: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
        """Which of ``rows`` (their indices) hold ``field``, and its text there."""
        spans = self._columns[field][rows]
        present = np.flatnonzero(spans[:, 1])
        text = self._text
        return present, [text[start:start + length]
                         for start, length in spans[present].tolist()]

    def texts(self, field: str, rows: np.ndarray) -> list[bytes]:
        """See :meth:`EventBatch.texts`."""
        present, texts = self._present(field, rows)
        if len(present) == len(rows):
            return texts
        out = [b""] * len(rows)
        for index, text in zip(present.tolist(), texts, strict=True):
            out[index] = text
        return out

    def values(self, field: str, rows: np.ndarray) -> list[Any]:
        """See :meth:`EventBatch.values`."""
        out: list[Any] = [None] * len(rows)
        present, texts = self._present(field, rows)
        for index, text in zip(present.tolist(), texts, strict=True):
            out[index] = msgspec.json.decode(text)
        return out

    def events(self, rows: np.ndarray) -> list[Event]:
        """See :meth:`EventBatch.events` (each decoded by msgspec from its text)."""
        text = self._text
        return [EVENT_DECODER.decode(text[start:start + length])
                for start, length in self._columns["event"][rows].tolist()]


class BatchReader:
    """Reads the batches of one stretch of a trace into :class:`EventBatch` es: the C scanner
    where it is built and takes the batch, else msgspec's structs."""

    def __init__(self) -> None:
        self._scanner = None if _kineto_scan is None else _kineto_scan.Scanner()
        self._scanned = Vocabulary()
        self._codes = _ValueCodes(Vocabulary())

    def scanned(self, text: bytes) -> ScannedBatch | None:
        """The JSON array ``text`` scanned in C; None where the scanner is not built or gives
        the batch up (it is then for msgspec to decode, or to refuse)."""
        if self._scanner is None:
            return None
        result = self._scanner.scan(text)
        if isinstance(result, str):
            return None
        rows, count, tokens = result
        self._scanned.values.extend(map(msgspec.json.decode, tokens))
        return ScannedBatch(text, rows, count, self._scanned)

    def decoded(self, events: list[Event]) -> DecodedBatch:
        """Events that msgspec decoded, as a batch."""
        return DecodedBatch(events, self._codes)


#: Columns of the complete-duration ("X") events and the symbol table each id column uses.
_SYMBOL_COLUMNS = {"name": "names", "pid": "threads", "tid": "threads", "detail": "details"}


@dataclass
class Columns:
    """Complete-duration ("X") events of one group of categories, one numpy array per field."""

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

    def take(self, mask: np.ndarray) -> Columns:
        """The rows where ``mask`` holds (these columns themselves when it holds everywhere)."""
        count = int(mask.sum())
        if count == len(self):
            return self
        return Columns(**{key: _fill(value[0] if len(value) else -1, count)
                           if value.strides == (0,) else value[mask]
                           for key, value in vars(self).items()})

    def __len__(self) -> int:
        """The number of rows."""
        return len(self.start)


#: The columns every complete event fills; the others (``_DETAIL_COLUMNS``) only events of
#: ``DETAILED_CATS`` fill, and the other events' rows read -1 there without storing it.
_PLAIN_COLUMNS = ("name", "pid", "tid", "start", "end")
_DETAIL_COLUMNS = ("device", "stream", "correlation", "bytes", "detail")
_ID_COLUMNS = frozenset({"name", "pid", "tid", "detail"})
#: Where an ``ac2g`` flow ends (pid and tid ids, ns) and its id.
_FLOW_COLUMNS = ("pid", "tid", "start", "flow")

#: The groups of categories the tables are built from. Each group's events are kept in columns
#: of their own as they are read, so that no table selects its rows among all the trace's events
#: and each group's columns can be freed once its tables are built. Python functions are kept
#: whole only where :data:`NAMED_SPANS` wants them; events of any other category
#: (``gpu_user_annotation``, ``Trace``...) are checked and counted, not kept.
GROUPS = {"cpu_op": CPU_OP_CATS, "annotation": ANNOTATION_CATS, "python": PYTHON_CATS,
          "kernel": KERNEL_CATS, "accelerator": ACCELERATOR_CATS, "memcpy": MEMCPY_CATS,
          "memset": MEMSET_CATS, "sync": SYNC_CATS, "runtime": RUNTIME_CATS}
#: The columns kept of the groups not kept whole: of a Python function (with_stack's events,
#: the most numerous), its name, process and start, which say when a process runs Python code
#: (the work past a repeated span: repeats.pass_ends), without its thread and end.
_PARTLY_STORED = {"python": ("name", "pid", "start")}
_GROUP_NAMES = tuple(GROUPS)
_GROUP_CODES = {name: code for code, name in enumerate(GROUPS)}
_DETAILED_GROUPS = np.array([code for name, code in _GROUP_CODES.items()
                             if GROUPS[name] & DETAILED_CATS], dtype=np.int8)
#: Spans kept apart by name as they are read, in file order: the groups they are taken from and
#: the rule (on a Series of names) that picks them.
NAMED_SPANS = {"dataloader": (("cpu_op", "annotation", "python"), concepts.is_dataloader_span),
               "cpu_collectives": (("cpu_op", "annotation"), concepts.is_cpu_collective)}
#: The named spans that keep what each one sends: its bytes and the collective it records.
_MESSAGE_SPANS = frozenset({"cpu_collectives"})
#: Rows joined into one block of columns at a time: a batch holds a few thousand events, so a large
#: trace's many small arrays become fewer, compact ones (see :class:`_Store`).
BLOCK_ROWS = 1 << 16


def by_time(frame: pd.DataFrame, column: str = "start") -> pd.DataFrame:
    """``frame`` in ``column`` order, rows of equal times as they were (not copied when it is in
    order already, as a trace's events mostly are)."""
    if frame[column].is_monotonic_increasing:
        return frame
    return frame.sort_values(column, kind="stable")


def _detail_text(value: Any) -> Any:
    """A recorded detail as it is interned: text and integers as they are, anything else (a
    list, an object) as None, so no value an input holds can break the symbol table."""
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None


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


class _Store:
    """One group's rows (or the flows'): columns appended batch by batch and joined into blocks
    of at least :data:`BLOCK_ROWS` rows, then into one when the tables read them.

    A block is compact: each id, size and detail column in the narrowest dtype its values fit
    (a thread or a device id takes 1 byte, a correlation 4), and the end of each event held as
    its duration from the start (4 bytes where it is under 2.1 s); start and end become int64
    nanoseconds again only when the tables read the rows.
    """

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self._block_keys = tuple("dur" if key == "end" else key for key in self.keys)
        self._blocks: list[dict[str, np.ndarray]] = []
        self._pending: list[dict[str, np.ndarray]] = []
        self._pending_rows = 0
        self._joined: dict[str, np.ndarray] | None = None

    def append(self, part: dict[str, np.ndarray]) -> None:
        """Append one batch's rows, compact at once (a block's worth of batches in int64
        columns is 5 MB a group, held in each range worker too)."""
        if "end" in part:
            part["dur"] = part.pop("end") - part["start"]
        self._pending.append({key: value if key == "start" else narrowed(value)
                              for key, value in part.items()})
        self._pending_rows += len(part["start"])
        if self._pending_rows >= BLOCK_ROWS:
            self._flush()

    def _flush(self) -> None:
        """Join the batches appended since the last block into one block."""
        if self._pending:
            # Each part is narrowed already: their join takes the widest of their dtypes, the
            # narrowest that holds every value.
            self._blocks.append(_stack(self._pending, self._block_keys))
            self._pending_rows = 0

    def extend(self, other: _Store, maps: dict[str, np.ndarray]) -> None:
        """Append ``other``'s rows (a later part of the same trace), its symbol ids mapped to
        ours by ``maps`` (symbol table name -> our id of each of its ids)."""
        self._flush()
        other._flush()
        self._blocks.extend({key: narrowed(maps[_SYMBOL_COLUMNS[key]][value])
                             if key in _SYMBOL_COLUMNS else value
                             for key, value in block.items()} for block in other._blocks)
        other.release()

    def joined(self) -> dict[str, np.ndarray]:
        """Every row, one array per key, start and end in int64 (joined on the first call, the
        blocks freed one column at a time, and kept until :meth:`release`)."""
        if self._joined is None:
            self._flush()
            self._joined = _stack(self._blocks, self._block_keys)
            if "dur" in self._joined:
                self._joined["end"] = self._joined["start"] + self._joined.pop("dur")
        return self._joined

    def rows_where(self, test: Callable[[dict[str, np.ndarray]], np.ndarray]
                   ) -> dict[str, np.ndarray]:
        """The rows of each block for which ``test`` (of the block's columns) holds, joined,
        the blocks left as they are (no copy of every row is made)."""
        self._flush()
        blocks = [self._joined] if self._joined is not None else self._blocks
        return _stack([{key: value[held] for key, value in block.items()}
                       for block in blocks if (held := test(block)).any()], self._block_keys)

    def in_time_order(self) -> None:
        """Put the rows in start order, rows of equal starts as they were: one column
        reordered at a time, each one's old copy freed before the next is made."""
        in_start_order(self.joined())

    def columns(self) -> Columns:
        """Every row, as the columns of complete events (those it lacks read -1)."""
        joined = self.joined()
        count = len(joined["start"])
        return Columns(**joined, **{key: _fill(-1, count) for key in _DETAIL_COLUMNS
                                    if key not in joined})

    def distinct_names(self) -> np.ndarray:
        """The name ids of the rows, each once (the blocks left as they are)."""
        self._flush()
        parts = ([self._joined["name"]] if self._joined is not None
                 else [block["name"] for block in self._blocks])
        return np.unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int32)

    def release(self) -> None:
        """Free every row."""
        self._blocks, self._pending, self._pending_rows, self._joined = [], [], 0, None


class _NameFlags:
    """Whether a rule on names holds for each name id, worked out once per name as names come."""

    def __init__(self, rule: Callable[[pd.Series], Any]) -> None:
        self._rule = rule
        self._flags = np.zeros(0, dtype=bool)

    def of(self, names: Symbols, ids: np.ndarray) -> np.ndarray:
        """The rule's answer for each of the name ids ``ids`` of ``names``; names are asked
        only once an id at or past them is (most new names belong to other groups' events)."""
        known = len(self._flags)
        if len(ids) and int(ids.max()) >= known:
            new = self._rule(pd.Series(names.values(known), dtype=object))
            self._flags = np.concatenate([self._flags, np.asarray(new, dtype=bool)])
        return self._flags[ids]


#: The 2021 dialect's category of every CPU span, operators and the program's ranges alike
#: (lower-cased, as Symbols.lookup compares).
_LEGACY_OPERATOR = frozenset({"operator"})


def _records_inputs(dims: bytes, dims_2021: bytes) -> bool:
    """Whether an event's ``Input Dims`` (``Input dims`` in January 2021) lists an input: the
    profiler writes one entry per argument the RecordFunction was entered with (an empty list,
    or no key, for none; null is no key)."""
    return (dims or dims_2021).replace(b" ", b"") not in (b"", b"[]", b"null")


def _input_checked(names: pd.Series) -> np.ndarray:
    """Whether each name is an operator whose inputs the op_inputs table keeps."""
    return np.fromiter((isinstance(name, str) and concepts.is_input_checked_name(name)
                        for name in names), bool, len(names))


def _integers(values: list[Any], absent: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Integer field values as int64 (``absent`` where missing) and where a value was unusable.

    Ints in [0, 2^63) are taken as they are, strings as decimal or hex (``"0x1f"``); None (JSON
    null: nothing recorded) is missing; anything else (a float, a bool, a number >= 2^63, text
    that is no number) is unusable.
    """
    try:
        column = np.array(values)
    except (TypeError, ValueError, OverflowError):
        column = np.empty(0, dtype=object)
    # numpy reads a bool among ints as 0 or 1: such a column takes the checked path.
    if len(column) == len(values) and column.dtype.kind == "i" and (
            not len(column) or column.min() >= -1) and bool not in set(map(type, values)):
        return column.astype(np.int64), np.zeros(len(column), dtype=bool)
    parsed = [checked_int(v) for v in values]
    bad = np.array([p is None and v is not None and v != absent
                    for p, v in zip(parsed, values, strict=True)], dtype=bool)
    return np.array([absent if p is None else p for p in parsed], dtype=np.int64), bad


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


def checked_int(value: Any) -> int | None:
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


class ColumnBuilder:
    """Turns batches of decoded events into checked columns, keeping metadata events aside."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.names = Symbols(MAX_NAME_CHARS, path, concepts.UNRECORDED_NAME)
        # A null phase, category or pid/tid is the value a missing one reads as.
        self.phases = Symbols(unrecorded="")
        self.cats = Symbols(unrecorded="")
        self.threads = Symbols(unrecorded=-1)
        self.details = Symbols()
        self.metadata: list[Event] = []
        self.memory = _MemoryEvents()
        self.op_inputs = _OpInputs()
        #: Name ids of the 2021 dialect's ``Operator`` events that recorded an input (see
        #: :func:`_records_inputs`): every operator the dispatcher or autograd ran does under
        #: ``record_shapes``, a ``record_function`` range never does.
        self.with_inputs: set[int] = set()
        self.dropped: Counter[str] = Counter()
        self.events = 0
        #: Group or named-span store name -> its rows.
        self.stores = {name: _Store(_PARTLY_STORED.get(name, _PLAIN_COLUMNS + (
            _DETAIL_COLUMNS if cats & DETAILED_CATS else ()))) for name, cats in GROUPS.items()}
        self.stores.update({name: _Store(_PLAIN_COLUMNS + (("bytes", "detail") if name in
                                                          _MESSAGE_SPANS else ()))
                            for name in NAMED_SPANS})
        self._named = {name: (np.array([_GROUP_CODES[g] for g in groups], np.int8),
                              _NameFlags(rule)) for name, (groups, rule) in NAMED_SPANS.items()}
        self._group_of = np.zeros(0, dtype=np.int8)
        self._flows = _Store(_FLOW_COLUMNS)

    def add(self, batch: EventBatch) -> None:
        """Append one batch: "X" events become columns, "M" events are kept as they are."""
        self.events += batch.count
        MAX_EVENTS.check(self.events, self.path)
        phase = batch.vocabulary.ids_in(self.phases, batch.symbols["ph"])
        spans = np.flatnonzero(phase == self.phases.ids(["X"], 1)[0])
        for kind, keep in (("M", self._add_metadata), ("f", self._add_flows),
                           ("i", self._add_instants)):
            found = np.flatnonzero(phase == self.phases.ids([kind], 1)[0])
            if len(found):
                keep(batch, found)
        if len(spans):
            self._add_spans(batch, spans)

    def _add_metadata(self, batch: EventBatch, rows: np.ndarray) -> None:
        """Keep metadata events as they are (``args`` null read as none)."""
        found = batch.events(rows)
        _args_of(found)
        self.metadata.extend(found)

    def _add_instants(self, batch: EventBatch, rows: np.ndarray) -> None:
        """Keep the ``[memory]`` instant events whose time is possible (the others counted)."""
        memory = rows[batch.vocabulary.equals(batch.symbols["name"][rows], MEMORY_EVENT_NAME)]
        if len(memory):
            possible = _possible_times(batch.ts[memory])
            self._drop(~possible, "memory event time outside the possible range")
            self.memory.add(batch.events(memory[possible]))

    def _add_spans(self, batch: EventBatch, rows: np.ndarray) -> None:
        """Check and append the complete-duration events at ``rows``; count the ones dropped."""
        vocabulary, symbols = batch.vocabulary, batch.symbols
        start, end, keep = self._times(batch.ts[rows], batch.dur[rows])
        cats = vocabulary.ids_in(self.cats, symbols["cat"][rows])
        group = self._groups(cats)
        part = {
            "name": vocabulary.ids_in(self.names, symbols["name"][rows]),
            "pid": vocabulary.ids_in(self.threads, symbols["pid"][rows]),
            "tid": vocabulary.ids_in(self.threads, symbols["tid"][rows]),
            "start": start, "end": end,
        }
        part.update(self._arg_columns(batch, rows, end - start, keep,
                                      np.isin(group, _DETAILED_GROUPS)))
        self.op_inputs.add(self.names, part, batch, rows,
                           keep & (group == _GROUP_CODES["cpu_op"]))
        legacy = np.flatnonzero(keep & np.isin(cats, self.cats.lookup(_LEGACY_OPERATOR)))
        if len(legacy):
            recorded = list(map(_records_inputs, batch.texts("input_dims", rows[legacy]),
                                batch.texts("input_dims_2021", rows[legacy])))
            self.with_inputs.update(part["name"][legacy[np.array(recorded, dtype=bool)]]
                                    .tolist())
        for code in np.unique(group[keep]).tolist():
            store = self.stores.get(_GROUP_NAMES[code]) if code >= 0 else None
            if store is not None:
                held = keep & (group == code)
                store.append({key: part[key][held] for key in store.keys})
        for name, (codes, flags) in self._named.items():
            held = keep & np.isin(group, codes)
            held[held] = flags.of(self.names, part["name"][held])
            if held.any():
                kept = {key: part[key][held] for key in _PLAIN_COLUMNS}
                if name in _MESSAGE_SPANS:
                    kept.update(self._messages(batch.args(rows[held])))
                self.stores[name].append(kept)

    def _groups(self, cats: np.ndarray) -> np.ndarray:
        """The group of each category id (its index in :data:`GROUPS`, -1 for none)."""
        known = len(self._group_of)
        if len(self.cats) > known:
            new = [next((code for code, members in enumerate(GROUPS.values())
                         if str(cat).lower() in members), -1)
                   for cat in self.cats.values(known)]
            self._group_of = np.concatenate([self._group_of, np.array(new, dtype=np.int8)])
        return self._group_of[cats]

    def _arg_columns(self, batch: EventBatch, rows: np.ndarray, duration: np.ndarray,
                     keep: np.ndarray, detailed: np.ndarray) -> dict[str, np.ndarray]:
        """device, stream, correlation, bytes and detail of each ``detailed`` event of ``rows``
        (the other rows read -1: their table stores none of these); events with an id or size
        that is no int64 are counted and taken out of ``keep``, whatever their category."""
        found = rows[detailed]
        correlation, bad_correlation = batch.integers("correlation", rows)
        copied, bad_bytes = _first_present(batch.integers("bytes", rows),
                                           batch.integers("size", rows))
        copied = _with_bandwidth(copied[detailed], batch.bandwidth(found), duration[detailed])
        device, bad_device = batch.integers("device", found)
        bad_device = _spread(bad_device | (device >= MAX_DEVICES), detailed, False)
        stream, bad_stream = _first_present(batch.integers("stream", found),
                                            batch.integers("stream_id", found))
        bad_stream = _spread(bad_stream, detailed, False)
        for bad, reason in ((bad_correlation, "correlation is not an int64"),
                            (bad_bytes, "bytes is not an int64"),
                            (bad_device, f"device is not a device number below {MAX_DEVICES:,}"),
                            (bad_stream, "stream is not an int64")):
            self._drop(bad & keep, reason)
            keep &= ~bad
        return {"device": _spread(device, detailed, -1),
                "stream": _spread(concepts.recorded_streams(stream), detailed, -1),
                "correlation": np.where(detailed, correlation, -1),
                "bytes": _spread(copied, detailed, -1),
                "detail": _spread(self._detail(batch, found), detailed,
                                  self.details.ids([None], 1)[0])}

    def _messages(self, args: list[_Args]) -> dict[str, np.ndarray]:
        """What each collective call sends (:func:`message_bytes`, -1 unknown) and the
        collective it records (``Collective name``, as a detail id)."""
        return {"bytes": np.fromiter(map(message_bytes, args), np.int64, len(args)),
                "detail": self.details.ids((_detail_text(a.collective) for a in args),
                                           len(args))}

    def _detail(self, batch: EventBatch, rows: np.ndarray) -> np.ndarray:
        """Ids of each event's sync kind (``cuda_sync``), else its copy direction (MTIA DMA's
        ``direction``, else ROCm's ``kind``), each as recorded text."""
        absent = self.details.ids([None], 1)[0]
        detail = np.full(len(rows), absent, dtype=np.int32)
        for field in ("kind", "direction", "sync_kind"):
            values = batch.values(field, rows)
            if values.count(None) == len(values):  # the usual case: no event records it
                continue
            ids = self.details.ids(map(_detail_text, values), len(values))
            detail = np.where(ids != absent, ids, detail)
        return detail

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

    def _add_flows(self, batch: EventBatch, rows: np.ndarray) -> None:
        """Keep the ends of ``ac2g`` (launch -> GPU) flows: where they land and their id."""
        flows = rows[batch.vocabulary.equals(batch.symbols["cat"][rows], _LAUNCH_FLOW)]
        if not len(flows):
            return
        ids, _ = batch.integers("id", flows)
        ts = batch.ts[flows]
        keep = (ids >= 0) & _possible_times(ts)  # a flow of no usable id links nothing
        self._flows.append({
            "pid": batch.vocabulary.ids_in(self.threads, batch.symbols["pid"][flows])[keep],
            "tid": batch.vocabulary.ids_in(self.threads, batch.symbols["tid"][flows])[keep],
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

    def absorb(self, other: ColumnBuilder) -> None:
        """Append everything ``other`` read (a later part of the same trace)."""
        self.cats.remap(other.cats)
        maps = {name: getattr(self, name).remap(getattr(other, name))
                for name in set(_SYMBOL_COLUMNS.values())}
        for name, store in self.stores.items():
            store.extend(other.stores[name], maps)
        self._flows.extend(other._flows, maps)
        self.metadata.extend(other.metadata)
        self.memory.extend(other.memory)
        self.op_inputs.extend(other.op_inputs, maps)
        self.with_inputs.update(maps["names"][sorted(other.with_inputs)].tolist())
        self.dropped.update(other.dropped)
        self.events += other.events
        MAX_EVENTS.check(self.events, self.path)

    def flows(self) -> pd.DataFrame:
        """Where each ``ac2g`` flow ends: pid and tid ids, start (ns) and the flow's id (the
        builder's copy freed)."""
        frame = pd.DataFrame(self._flows.joined(), copy=False)
        self._flows.release()
        return frame


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

    def add(self, found: list[Event]) -> None:
        """Keep a batch's memory events (their times already checked)."""
        if not found:
            return
        args = _args_of(found)
        part = {"time": _us_to_ns(np.fromiter(map(_TS, found), np.float64, len(found))),
                "pid": _thread_column(list(map(attrgetter("pid"), found))),
                "tid": _thread_column(list(map(attrgetter("tid"), found)))}
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
        return conform("memory", by_time(frame, "time"))


class _OpInputs:
    """The operators :func:`concepts.is_input_checked_name` names, with the raw text of their
    ``Input type``, ``Input Dims`` and ``Input Strides`` interned per distinct triple (a model
    repeats the same few hundred shapes every step)."""

    def __init__(self) -> None:
        self.values = Symbols()
        self._checked = _NameFlags(_input_checked)
        self._parts: list[dict[str, np.ndarray]] = []

    def add(self, names: Symbols, part: dict[str, np.ndarray], batch: EventBatch,
            rows: np.ndarray, operators: np.ndarray) -> None:
        """Keep the checked operators among one batch's complete events (``part``'s columns, of
        the batch's ``rows``; ``operators``: the rows that are operators with possible
        values)."""
        held = np.flatnonzero(operators)
        held = held[self._checked.of(names, part["name"][held])]
        if not len(held):
            return
        found = rows[held]
        inputs = zip(batch.texts("input_types", found),
                     (dims or dims_2021 for dims, dims_2021 in
                      zip(batch.texts("input_dims", found),
                          batch.texts("input_dims_2021", found), strict=True)),
                     batch.texts("input_strides", found), strict=True)
        self._parts.append({**{key: part[key][held] for key in ("name", "pid", "tid", "start",
                                                                  "end")},
                            "inputs": self.values.ids(inputs, len(held))})

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
        types, dims, strides = (np.empty(len(distinct), object) for _ in range(3))
        for index, (types_text, dims_text, strides_text) in enumerate(distinct):
            types[index] = _decoded_inputs(types_text, str)
            dims[index] = _decoded_inputs(dims_text, tuple)
            strides[index] = _decoded_inputs(strides_text, tuple)
        frame = pd.DataFrame({
            "start": columns["start"], "end": columns["end"],
            "pid": thread_numbers[columns["pid"]], "tid": thread_numbers[columns["tid"]],
            "name": names[columns["name"]], "input_types": types[columns["inputs"]],
            "input_dims": dims[columns["inputs"]], "input_strides": strides[columns["inputs"]]})
        return conform("op_inputs", by_time(frame))


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
    """``Input type``/``Input Dims``/``Input Strides`` text as a tuple whose items are all
    ``item`` (str names, tuple shapes or strides); None when absent or not of that shape."""
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


def message_bytes(args: _Args) -> int:
    """Bytes one rank sends in a collective call: record_param_comms' ``In msg nelems`` times
    its ``dtype``'s size, else (a backend op such as ``gloo:all_reduce`` under
    ``record_shapes``) its first input's elements times its recorded type's size; -1 when the
    event records neither, or a size past int64 (an impossible value, as elsewhere)."""
    size = concepts.DTYPE_BYTES.get(args.msg_dtype) if isinstance(args.msg_dtype, str) else None
    nelems = checked_int(args.msg_nelems)
    if size is not None and nelems is not None:
        return _sized(nelems, size)
    types = _decoded_inputs(bytes(args.input_types), str)
    dims = _decoded_inputs(bytes(args.input_dims), tuple)
    if not types or not dims or types[0] not in concepts.DTYPE_BYTES \
            or not all(isinstance(d, int) and d >= 0 for d in dims[0]):
        return -1
    return _sized(math.prod(dims[0]), concepts.DTYPE_BYTES[types[0]])


def _sized(count: int, size: int) -> int:
    """``count`` elements of ``size`` bytes, in bytes; -1 when that passes int64."""
    return count * size if count <= _INT64_MAX // size else -1


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
    """:func:`as_int` of each pid or tid, worked out once per distinct value."""
    numbers = {value: as_int(value) for value in set(values)}
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


def as_int(value: Any) -> int:
    """An integer pid/tid (Kineto 2021 writes them as strings), -1 when it is a label."""
    number = checked_int(value) if not isinstance(value, int) or value >= 0 else None
    return -1 if number is None else number


def thread_numbers(symbols: Symbols) -> np.ndarray:
    """Each interned pid/tid as an integer; -1 for labels such as ``stream 7`` or ``Spans``
    (in the narrowest dtype that holds them, as the tables keep them)."""
    return narrowed(np.array([as_int(value) for value in symbols.values()], dtype=np.int64))


def concat(first: Columns, second: Columns) -> Columns:
    """The rows of both, ``first``'s before ``second``'s."""
    if not len(first) or not len(second):
        return second if not len(first) else first
    return Columns(**{key: np.concatenate([value, getattr(second, key)])
                       for key, value in vars(first).items()})


def _with_bandwidth(copied: np.ndarray, bandwidth: np.ndarray,
                    duration: np.ndarray) -> np.ndarray:
    """Bytes moved: ``args.bytes``, else bandwidth (GB/s) times duration (ns); -1 unknown."""
    from_bandwidth = bandwidth * duration
    with np.errstate(invalid="ignore"):
        usable = (bandwidth > 0) & (from_bandwidth < _INT64_MAX) & (copied < 0)
    estimate = np.rint(np.where(usable, from_bandwidth, 0)).astype(np.int64)
    return np.where(usable, estimate, copied)
