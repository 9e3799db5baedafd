"""Kineto trace text streamed into event batches: chunked reading, cutting, parallel ranges.

Kineto writes one JSON object: a few small members and ``traceEvents``, an array that can hold
millions of events. The text is never loaded whole: a few megabytes are kept at a time, the event
array is cut at event boundaries and each batch is read into columns by the C scanner
(``parsers/_kineto_scan.c``) where it is built, else (and for the batches it gives up) decoded by
msgspec into the structs of :mod:`parsers.kineto_columns`. A large plain ``.json`` is cut into
byte ranges at verified event boundaries and the ranges are decoded in parallel processes, one
per core.

A cut is checked by decoding: a batch that starts at an event and ends at an event's closing
brace decodes as a JSON array exactly when the brace closes a top-level event; a cut inside a
string or a nested object fails at the last byte, and an error earlier than that is real damage.
"""

from __future__ import annotations

import codecs
import gzip
import io
import multiprocessing
import os
import queue
import re
import threading
import zlib
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from profreport.allocator import give_back_freed_memory
from profreport.errors import InputError
from profreport.executors import cpu_share
from profreport.inputs import (
    MAX_DECOMPRESSED_BYTES,
    MAX_EVENT_BYTES,
    MAX_HEADER_BYTES,
    MAX_JSON_DEPTH,
    BoundedReader,
    decompressed_limit,
    open_input,
)
from profreport.parsers.kineto_columns import (
    EVENT_DECODER,
    BatchReader,
    ColumnBuilder,
    Event,
    EventBatch,
)

# Decoders of a batch of events into structs, and of a batch left undecoded (one event:
# kineto_columns.EVENT_DECODER).
_EVENTS_DECODER = msgspec.json.Decoder(list[Event])
_RAW_EVENTS_DECODER = msgspec.json.Decoder(list[msgspec.Raw])

# Uncompressed bytes read at a time; large enough that Python's per-call costs vanish, small
# enough that the text in memory stays a few MB whatever the size of the trace.
READ_CHUNK = 1 << 20
# Target size of one decoded batch of events: its structs live only until they are columns
# (~3.5k events; on a 400 MB trace 2 MB batches cost this process and the worker 8-10 MB more
# each, for no less CPU time; on a 2 GB trace 4 MB batches cost each range worker ~12 MB more).
BATCH_BYTES = 1 << 20
# Tail of the buffer searched first for a cut between two events; events are ~0.3 kB each.
CUT_WINDOW = 64 << 10
# Cuts tried before the buffer is checked for damage: a wrong cut needs "},{" inside a string
# or a nested object, which Kineto's events almost never hold.
MAX_CUT_TRIES = 8
# Chunks a gzip trace is inflated ahead of the decoding: enough to hide the inflation's pauses.
PREFETCH_CHUNKS = 4
# Plain text per parallel range: below this a worker process costs more than it saves.
PARALLEL_MIN_BYTES = 32 << 20
# Plain text per range beyond one range per core: each range's columns come back as one
# message, held twice while it is unpickled (in the worker as it is pickled too), so ranges of
# this size keep that to a few MB whatever the trace's size (64 MB ranges of a 400 MB trace
# held the worker ~6 MB higher at the end, when this process holds the most).
RANGE_BYTES = 32 << 20
# Text searched after a split target for a verified cut between two events.
SPLIT_PROBE_BYTES = 4 << 20

_GZIP_MAGIC = b"\x1f\x8b"
_TRACE_EVENTS_KEY = b'"traceEvents"'
# One JSON token that changes depth or is a string, after any run of other characters.
_HEADER_TOKEN = re.compile(rb'[^"\[\]{}]*("[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}])', re.DOTALL)
_KEY_COLON = re.compile(rb"\s*:\s*(\S)")
_EVENT_GAP = re.compile(rb"\}\s*,\s*\{")
_DECODE_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")
# Where text after a complete JSON value starts (msgspec counts from 1).
_TRAILING_BYTE = re.compile(r"trailing characters \(byte (\d+)\)")
# What lies between two elements of an array, or after its opening bracket.
_ELEMENT_GAP = re.compile(rb"[\s,]*")
# What an element that is no object is, by its first byte.
_JSON_KINDS = {ord("n"): "null", ord("t"): "a boolean", ord("f"): "a boolean",
               ord('"'): "a string", ord("["): "an array"}
_ERROR_FIELD = re.compile(r"at `\$(?:\[\d+\])?\.?([^`]*)`")


def _too_deep(path: Path) -> InputError:
    """The error for JSON nested deeper than the decoder's stack allows."""
    return InputError(f"too large: JSON nested deeper than the decoder's stack where at most "
                      f"{MAX_JSON_DEPTH.value} {MAX_JSON_DEPTH.what} are read "
                      f"({MAX_JSON_DEPTH.reason})", path)


class _TraceText:
    """The trace's text, read forward in chunks and cut into a header and event batches."""

    def __init__(self, handle: BinaryIO, path: Path, builder: ColumnBuilder,
                 offset: int = 0) -> None:
        self._handle = handle
        self._path = path
        self._builder = builder
        self._reader = BatchReader()
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
        offset of the first byte after the bracket. A UTF-8 byte order mark before the text is
        skipped (see parsers.read_head).
        """
        self._fill_to(len(codecs.BOM_UTF8))
        if self._buf.startswith(codecs.BOM_UTF8):
            self._consume(len(codecs.BOM_UTF8))
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

    def batches(self) -> Iterator[EventBatch]:
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

    def _next_batch(self) -> EventBatch | None:
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

    def _last_batch(self) -> EventBatch:
        """Decode the events left at the end of the file and keep the text after the array."""
        close = self._array_close()
        events = None if close is None else self._decode(close)
        if close is not None and events is not None:
            self.suffix = bytes(self._buf[close + 1:])
            self._consume(len(self._buf))
            return events
        self._check_prefix()
        raise InputError("truncated trace: the file ends inside traceEvents", self._path)

    def _array_close(self) -> int | None:
        """The position of the event array's closing bracket in the buffer, found by decoding
        the buffer whole (whatever the elements and the text after it hold); None when the
        array does not close in it."""
        error = self._decode_error()
        if error is None:
            return self._buf.rindex(b"]")
        trailing = _TRAILING_BYTE.search(str(error))
        # The text after the array starts at that byte of "[" + buffer, counted from 1.
        return None if trailing is None else self._buf.rindex(b"]", 0, int(trailing.group(1)) - 2)

    def _decode_error(self) -> msgspec.DecodeError | None:
        """What decoding the buffer as the inside of a JSON array raises (None: it decodes);
        nesting too deep to decode is the trace's error, raised."""
        try:
            with memoryview(self._buf) as view:
                _RAW_EVENTS_DECODER.decode(b"".join((b"[", view)))
        except RecursionError:
            raise _too_deep(self._path) from None
        except msgspec.DecodeError as exc:
            return exc
        return None

    def _decode(self, length: int) -> EventBatch | None:
        """Decode the first ``length`` bytes as an array; None when they end inside an event.

        The C scanner reads the batch where it is built and takes it; msgspec decodes the
        batches it gives up (and refuses the damaged ones)."""
        with memoryview(self._buf) as view:
            text = b"".join((b"[", view[:length], b"]"))
        scanned = self._reader.scanned(text)
        if scanned is not None:
            return scanned
        try:
            return self._reader.decoded(_EVENTS_DECODER.decode(text))
        except RecursionError:
            raise _too_deep(self._path) from None
        except msgspec.ValidationError:
            return self._decode_each(text)
        except msgspec.DecodeError as exc:
            self._raise_if_damaged(exc, len(text) - 1)
            return None

    def _decode_each(self, text: bytes) -> EventBatch | None:
        """Decode a batch holding a value of an unexpected type event by event; the events
        that do not decode are dropped and counted. None when the text is no whole array."""
        try:
            raws = _RAW_EVENTS_DECODER.decode(text)
        except RecursionError:
            raise _too_deep(self._path) from None
        except msgspec.DecodeError as exc:
            self._raise_if_damaged(exc, len(text) - 1)
            return None
        self._refuse_non_events(raws, text)
        events = []
        for raw in raws:
            try:
                events.append(EVENT_DECODER.decode(raw))
            except msgspec.ValidationError as exc:
                field = _ERROR_FIELD.search(str(exc))
                self._builder.drop_unreadable(
                    f"{field.group(1) if field else 'event'} of an unexpected type")
        return self._reader.decoded(events)

    def _refuse_non_events(self, raws: list[msgspec.Raw], text: bytes) -> None:
        """Raise for the first of ``raws`` (the elements of the array ``text``, "[" + buffer...)
        that is no JSON object, naming its byte in the trace text."""
        position = 1
        for raw in raws:
            with memoryview(raw) as element:
                position = _ELEMENT_GAP.match(text, position).end()  # type: ignore[union-attr]
                if element[0] != ord("{"):
                    kind = _JSON_KINDS.get(element[0], "a number")
                    raise InputError(f"an element of traceEvents is {kind}, not an event object "
                                     f"(at byte {self._offset + position - 1} of the trace "
                                     f"text)", self._path)
                position += element.nbytes

    def _check_prefix(self) -> None:
        """Raise if the buffer is not the valid start of a run of events (no cut decoded)."""
        error = self._decode_error()
        if error is not None:
            self._raise_if_damaged(error, len(self._buf) + 1)

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
        for batch in self.batches():
            self._builder.add(batch)


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
    """Byte ranges ``[start, stop)`` of whole events that split the event array: one per core,
    or one per :data:`RANGE_BYTES` of text when that makes more (and each at least
    :data:`PARALLEL_MIN_BYTES`).

    Each cut is a gap between two events verified by decoding the events after it; the last
    range runs to the end of the file. A single range when the file is small, there is one
    core, or no cut holds.
    """
    cores = cpu_share()
    text = size - array_start
    count = min(max(cores, text // RANGE_BYTES), text // PARALLEL_MIN_BYTES) if cores > 1 else 1
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


def _read_range(path: Path, start: int, stop: int | None,
                builder: ColumnBuilder | None = None) -> tuple[ColumnBuilder, bytes]:
    """Decode the whole events in bytes ``[start, stop)`` of a plain trace, or from ``start`` to
    the end of the file when ``stop`` is None, into ``builder`` (a new one in a worker); the
    columns, and the text after the event array (empty but for the last range)."""
    builder = ColumnBuilder(path) if builder is None else builder
    raw = open_input(path) if stop is None else _RangeReader(path, start, stop, b"]")
    with io.BufferedReader(raw, READ_CHUNK) as handle:  # type: ignore[arg-type]
        if stop is None:
            handle.seek(start)
        text = _TraceText(handle, path, builder, offset=start)  # type: ignore[arg-type]
        text.read_all()
    give_back_freed_memory()  # the decoded batches, before the next range's
    return builder, text.suffix


def _worker_context() -> multiprocessing.context.BaseContext:
    """Fork where the platform has it (no re-import in the worker), else spawn."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def read_trace(path: Path) -> tuple[dict[str, Any], ColumnBuilder]:
    """Stream the trace at ``path`` into columns; return its header members and the columns."""
    builder = ColumnBuilder(path)
    handle, plain = _open(path)
    with handle:
        text = _TraceText(handle, path, builder)
        array_start = text.read_prefix()
        size = os.fstat(handle.fileno()).st_size if plain else 0
        ranges = _parallel_ranges(path, array_start, size) if plain else []
        if len(ranges) < 2:
            text.read_all()
            return text.header(), builder
        # One range in every ``cores`` is read here, straight into the columns, the others by
        # ``cores - 1`` workers whose columns are joined in file order: one process fewer than
        # cores (each worker holds tens of MB of its own), none of them idle.
        bounds = [*ranges[:-1], (ranges[-1][0], None)]
        cores = min(len(ranges), cpu_share())
        with ProcessPoolExecutor(cores - 1, mp_context=_worker_context()) as pool:
            parts = [None if index % cores == 0 else pool.submit(_read_range, path, start, stop)
                     for index, (start, stop) in enumerate(bounds)]
            for (start, stop), part in zip(bounds, parts, strict=True):
                if part is None:
                    text.suffix = _read_range(path, start, stop, builder)[1]
                    continue
                other, text.suffix = part.result()
                builder.absorb(other)
                del other
        return text.header(), builder
