"""Integer columns of an SQLite table read straight from its B-tree pages with numpy.

An nsys export holds tens of millions of activity rows; SQLite's own row-at-a-time interface
(``sqlite3``, and the Arrow readers built on it) spends most of its time per value. This reader
follows the documented file format (https://www.sqlite.org/fileformat2.html) instead: it walks
the table's B-tree to its leaf pages, reads them in chunks, and decodes the cells, varints,
record headers and big-endian integers of every row of a chunk: in one pass in C where the
extension ``parsers/_pages.c`` is built (pyproject.toml builds it where a C compiler is found),
else every row of the chunk at once, step by step, in numpy. Both give the same columns.

It reads only what it is sure of: a rollback-journal database (no WAL file with content beside
it), UTF-8, table B-trees. Rows whose record spills onto overflow pages are returned by rowid for
the caller to read through SQL. Anything else raises :class:`PageFormatError`, and the caller
falls back to SQL.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

try:  # built by pyproject.toml where a C compiler is found; numpy decodes the pages otherwise
    from profreport.parsers import _pages
except ImportError:
    _pages = None

HEADER_MAGIC = b"SQLite format 3\x00"
# B-tree page types (file format, section 1.6).
LEAF_TABLE_PAGE = 0x0D
INTERIOR_TABLE_PAGE = 0x05
# A table leaf's cell keeps at most (usable page size - 35) payload bytes on its page; a larger
# record spills onto overflow pages (file format, section 1.6).
LOCAL_PAYLOAD_RESERVE = 35
# Leaf pages decoded at a time: 512 pages of 4 KiB (~25,000 rows) keep the per-row arrays of a
# chunk within the CPU caches.
CHUNK_PAGES = 512
# Value kinds returned beside each column.
INTEGER, NULL, OTHER, TEXT = 0, 1, 2, 3
# Texts up to this many bytes are grouped by content in numpy (hash, then a byte-by-byte check)
# so that each distinct text is decoded once; longer ones are decoded one by one.
MAX_GROUPED_TEXT = 128
# FNV-1a's 64-bit prime: the hash that groups texts (every group is checked word by word).
_FNV_PRIME = np.uint64(1099511628211)
# Zero bytes after a chunk's last page: a short text or an 8-byte window read at any position
# inside the pages stays inside the buffer.
_PADDING = MAX_GROUPED_TEXT + 8
# Content size of serial types 0..11 (12 and up: blobs and text of (type - 12) // 2 bytes).
_SIZE_OF_TYPE = np.array([0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0], dtype=np.int64)
# Serial types below this fit in one header byte (every integer and text up to 57 bytes): their
# size, kind and integer decoding come from tables indexed by the type.
_ONE_BYTE_TYPES = 256
_TYPES = np.arange(_ONE_BYTE_TYPES)
_SIZE_LUT = np.where(_TYPES >= 12, (_TYPES - 12) // 2,
                     _SIZE_OF_TYPE[np.minimum(_TYPES, 11)]).astype(np.int32)
_IS_STORED_INT = (_TYPES >= 1) & (_TYPES <= 6)
_KIND_LUT = np.select([_TYPES == 0, _IS_STORED_INT | (_TYPES == 8) | (_TYPES == 9),
                       (_TYPES >= 13) & (_TYPES % 2 == 1)], [NULL, INTEGER, TEXT],
                      OTHER).astype(np.int8)
# An integer of serial type 1..6 is the top bytes of the 8-byte window at its position: this
# right shift sign-extends it (0 for other types, whose value comes from _CONSTANT_LUT).
_SHIFT_LUT = np.where(_IS_STORED_INT, 64 - 8 * _SIZE_LUT, 0).astype(np.int64)
_CONSTANT_LUT = np.where(_TYPES == 9, 1, 0).astype(np.int64)
# The top bit of each byte of a little-endian 8-byte window, and each one alone (byte 0 first;
# 0 after them stands for none: a varint of nine bytes).
_TOP_BITS = np.uint64(0x8080808080808080)
_LAST_BYTE_BITS = np.array([1 << (8 * k + 7) for k in range(8)], dtype=np.uint64)
# Each decoding thread's page buffer, reused from chunk to chunk: a fresh 2 MB buffer per chunk
# is fresh pages for the kernel to fault in and zero, a second cost as large as the read itself
# (a 2 GB export is a million page faults). Nothing decoded keeps a view of it.
_THREAD_BUFFERS = threading.local()


#: What a caller's per-chunk reduction gives.
T = TypeVar("T")


#: A chunk's decoded columns: per wanted column its values and kinds, per text column where
#: each row's content lies, its size and the first row holding the same text (-1: no text),
#: and the rowids of the rows that spill.
_Decoded = tuple[dict[int, np.ndarray], dict[int, np.ndarray],
                 dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]], np.ndarray]


class PageFormatError(Exception):
    """The file holds something this reader does not decode (the caller falls back to SQL)."""


@dataclass
class Columns:
    """Decoded columns of a table: per requested column its int64 values and value kinds."""

    values: dict[int, np.ndarray]
    kinds: dict[int, np.ndarray]
    #: Rowids of rows stored partly on overflow pages: not decoded here.
    spilled: np.ndarray
    #: Per requested text column: the text of each row (None where the value is no text).
    texts: dict[int, np.ndarray]


def _decode(buf: np.ndarray, pos: int, size: int) -> str:
    """One UTF-8 text of the buffer (undecodable bytes replaced, as they are never a name)."""
    return bytes(buf[pos: pos + size]).decode("utf-8", "replace")


def _padded_words(buf: np.ndarray, pos: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The ``length`` bytes at each of ``pos``, zero-padded to a multiple of 8 bytes, as one
    row of 64-bit words each (the buffer holds :data:`_PADDING` bytes past its last page)."""
    width = max(-(-int(length.max(initial=0)) // 8) * 8, 8)
    rows = np.lib.stride_tricks.as_strided(buf, shape=(len(buf) - width + 1, width),
                                           strides=(1, 1), writeable=False)
    matrix = rows[pos]
    matrix[np.arange(width) >= length[:, None]] = 0
    return matrix.view(np.uint64)


def _first_of_same(buf: np.ndarray, pos: np.ndarray, size: np.ndarray) -> np.ndarray:
    """For each text of ``size`` bytes at ``pos``, the index of the first with the same bytes
    (its own for a text not grouped). Short texts are grouped by a hash of their 8-byte words
    and every group is checked word by word; longer ones stand alone."""
    first = np.arange(len(pos))
    rows = np.flatnonzero(size <= MAX_GROUPED_TEXT)
    length = size[rows]
    words = _padded_words(buf, pos[rows], length)
    digest = length.astype(np.uint64)
    for word in words.T:
        digest *= _FNV_PRIME
        digest ^= word
    _, firsts, codes = np.unique(digest, return_index=True, return_inverse=True)
    codes = codes.ravel()
    same = (length[firsts][codes] == length) & (words == words[firsts][codes]).all(axis=1)
    first[rows[same]] = rows[firsts[codes[same]]]
    return first


def _texts(buf: np.ndarray, pos: np.ndarray, size: np.ndarray, rows: np.ndarray,
           first: np.ndarray) -> np.ndarray:
    """The texts of ``size`` bytes at ``pos`` of the ``rows`` as Python strings, each distinct
    text decoded once (texts repeat: NVTX range names, thread names): ``first`` gives the row
    holding the first of the same text (its own for that first), so no sort is needed."""
    leads = rows[first[rows] == rows]
    code = np.empty(len(first), dtype=np.int64)
    code[leads] = np.arange(len(leads))
    distinct = np.array([_decode(buf, int(pos[r]), int(size[r])) for r in leads] + [""],
                        dtype=object)[:-1]
    return distinct[code[first[rows]]]


def _be(buf: np.ndarray, pos: np.ndarray, size: int) -> np.ndarray:
    """Big-endian unsigned integers of ``size`` bytes at each position."""
    acc = np.zeros(len(pos), dtype=np.uint64)
    for j in range(size):
        acc = (acc << np.uint64(8)) | buf[pos + j].astype(np.uint64)
    return acc


def _varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SQLite varints at each position: their values and lengths in bytes (1 to 9)."""
    byte = buf[pos].astype(np.int64)
    value = byte & 0x7F
    length = np.ones(len(pos), dtype=np.int64)
    more = np.flatnonzero(byte >= 0x80)
    for i in range(1, 9):
        if len(more) == 0:
            break
        byte = buf[pos[more] + i].astype(np.int64)
        if i == 8:  # the ninth byte contributes all eight bits
            value[more] = (value[more] << 8) | byte
            length[more] += 1
            break
        value[more] = (value[more] << 7) | (byte & 0x7F)
        length[more] += 1
        more = more[byte >= 0x80]
    return value, length


def _varint_lengths(windows: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Lengths in bytes (1 to 9) of the SQLite varints at each position (``windows`` of
    :func:`_windows`), their values not decoded: one past the first of the 8 bytes at each
    position whose top bit is clear, 9 when all eight are set."""
    clear = ~windows[pos] & _TOP_BITS  # top bit of byte k (little-endian window): bit 8k + 7
    clear &= -clear  # only the lowest: the varint's last byte among its first eight
    clear -= np.uint64(1)  # below that bit; none (0) wraps past every bit: nine bytes
    return np.searchsorted(_LAST_BYTE_BITS, clear) + 1


def _windows(buf: np.ndarray) -> np.ndarray:
    """Every 8-byte window of ``buf`` (window i starts at byte i) as one little-endian array:
    a gather from it and a byte swap read 8 big-endian bytes at any positions at once."""
    return np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf, offset=0, strides=(1,))


def _one_byte(types: np.ndarray) -> np.ndarray:
    """Serial types as indexes of the lookup tables (types of two bytes or more, long texts
    and blobs, become 255: a blob, no integer)."""
    if types.dtype == np.uint8:
        return types
    return np.where(types < _ONE_BYTE_TYPES, types, _ONE_BYTE_TYPES - 1).astype(np.uint8)


def _sizes(serial: np.ndarray) -> np.ndarray:
    """Content sizes in bytes of serial types."""
    if serial.dtype == np.uint8:
        return _SIZE_LUT[serial]
    return np.where(serial >= 12, (serial - 12) // 2,
                    _SIZE_OF_TYPE[np.minimum(serial, 11)]).astype(np.int32)


def _kinds(types: np.ndarray) -> np.ndarray:
    """Value kinds (INTEGER, NULL, TEXT, OTHER) of serial types."""
    kind = _KIND_LUT[_one_byte(types)]
    if types.dtype != np.uint8:
        long = types >= _ONE_BYTE_TYPES
        kind[long] = np.where(types[long] % 2 == 1, TEXT, OTHER)
    return kind


def _integers(windows: np.ndarray, pos: np.ndarray, types: np.ndarray) -> np.ndarray:
    """Signed integers of serial types 1..6 (and the constants 8, 9; 0 for others) at each
    position: the type's first bytes of the 8-byte window, sign-extended by a right shift."""
    index = _one_byte(types)
    out = windows[pos].byteswap(inplace=True).view(np.int64)  # the gather is a fresh array
    low, high = int(index.min(initial=1)), int(index.max(initial=1))
    if low == high:  # one type for the whole chunk (ids, times of one width): scalar decoding
        if _IS_STORED_INT[low]:
            out >>= _SHIFT_LUT[low]
            return out
        return np.full(len(out), _CONSTANT_LUT[low])
    out >>= _SHIFT_LUT[index]
    if low >= 1 and high <= 6:  # stored integers of several widths
        return out
    return np.where(_IS_STORED_INT[index], out, _CONSTANT_LUT[index])


def _serial_types(buf: np.ndarray, start: np.ndarray, columns: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Serial types of the first ``columns`` columns of the records at ``start`` (shape
    columns x rows; 0 = NULL for a column the record lacks; uint8 when every type is one byte,
    int64 otherwise) and where each record's body begins. One-byte types (every integer and
    short text) are read at once; the rest per varint."""
    header_len, n3 = _varints(buf, start)
    header_end = start + header_len
    # Each header's first bytes in one gather of ``columns`` bytes per record (a damaged cell
    # cannot read past the buffer), the bytes past the header zeroed (NULL).
    windows = np.lib.stride_tricks.as_strided(buf, shape=(len(buf) - columns + 1, columns),
                                              strides=(1, 1), writeable=False)
    first = windows[np.minimum(start + n3, len(buf) - columns)].T
    inside = np.arange(columns)[:, None] < (header_len - n3)[None, :]
    serial = np.where(inside, first, np.uint8(0))
    slow = np.flatnonzero((serial >= 0x80).any(axis=0))
    if len(slow):
        serial = serial.astype(np.int64)
        pos = start[slow] + n3[slow]
        for column in range(columns):
            present = pos < header_end[slow]
            value, length = _varints(buf, np.where(present, pos, start[slow]))
            serial[column, slow] = np.where(present, value, 0)
            pos = pos + np.where(present, length, 0)
    return serial, header_end


class PageReader:
    """One SQLite database file opened for reading pages."""

    def __init__(self, path: Path) -> None:
        """Read the database header and check that this reader can decode the file."""
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDONLY)
        try:
            header = os.pread(self.fd, 100, 0)
            if len(header) < 100 or not header.startswith(HEADER_MAGIC):
                raise PageFormatError("not an SQLite database")
            size = int.from_bytes(header[16:18], "big")
            self.page_size = 65536 if size == 1 else size
            self.usable = self.page_size - header[20]
            if header[18] == 2 and _has_content(Path(f"{self.path}-wal")):
                raise PageFormatError("the database has a write-ahead log with content")
            if int.from_bytes(header[56:60], "big") not in (0, 1):
                raise PageFormatError("text encoding is not UTF-8")
            self.pages = os.fstat(self.fd).st_size // self.page_size
        except BaseException:
            os.close(self.fd)
            raise

    def close(self) -> None:
        """Close the file."""
        os.close(self.fd)

    def _page(self, number: int) -> bytes:
        """The bytes of page ``number`` (1-based)."""
        if not 1 <= number <= self.pages:
            raise PageFormatError(f"page {number} lies outside the file")
        return os.pread(self.fd, self.page_size, (number - 1) * self.page_size)

    def _page_kind(self, number: int) -> int:
        """The B-tree page type byte of page ``number``."""
        return self._page(number)[100 if number == 1 else 0]

    def _children(self, number: int) -> list[int]:
        """The child page numbers of interior table page ``number``, left to right."""
        page = np.frombuffer(self._page(number) + bytes(8), dtype=np.uint8)
        offset = 100 if number == 1 else 0
        if page[offset] != INTERIOR_TABLE_PAGE:
            raise PageFormatError(f"page {number} is not an interior table B-tree page")
        cells = int(_be(page, np.array([offset + 3]), 2)[0])
        pointers = _be(page, offset + 12 + 2 * np.arange(cells), 2).astype(np.int64)
        if (pointers >= self.page_size).any():
            raise PageFormatError(f"a cell pointer of page {number} lies outside it")
        children = _be(page, pointers, 4).astype(np.int64).tolist()
        return [*children, int(_be(page, np.array([offset + 8]), 4)[0])]

    def leaf_pages(self, root: int) -> np.ndarray:
        """Leaf page numbers of the table B-tree rooted at ``root``, in rowid order.

        Every leaf of a B-tree lies at the same depth, so the tree is read level by level and
        only interior pages are read: the first page of a level tells whether it is the leaves.
        """
        level = [root]
        for _ in range(64):  # a B-tree of 2**32 pages is at most ~32 levels deep
            kind = self._page_kind(level[0])
            if kind == LEAF_TABLE_PAGE:
                return np.array(level, dtype=np.int64)
            if kind != INTERIOR_TABLE_PAGE:
                raise PageFormatError(f"page {level[0]} is not a table B-tree page")
            level = [child for number in level for child in self._children(number)]
        raise PageFormatError("the B-tree is deeper than any real table")

    def _read_pages(self, numbers: np.ndarray) -> np.ndarray:
        """The pages ``numbers`` one after another in one buffer (runs read at once), padded."""
        size = self.page_size
        buf = _thread_buffer(len(numbers) * size + _PADDING)
        buf[-_PADDING:] = 0
        breaks = np.flatnonzero(np.diff(numbers) != 1) + 1
        for run in np.split(np.arange(len(numbers)), breaks):
            first, count = int(numbers[run[0]]), len(run)
            into = memoryview(buf[run[0] * size: (run[0] + count) * size])
            if os.preadv(self.fd, [into], (first - 1) * size) != count * size:
                raise PageFormatError("the file ends inside a table")
        return buf

    def _cells(self, buf: np.ndarray, count: int) -> np.ndarray:
        """Absolute positions in ``buf`` of every cell of ``count`` leaf pages, page order."""
        size = self.page_size
        bases = np.arange(count, dtype=np.int64) * size
        if (buf[bases] != LEAF_TABLE_PAGE).any():
            raise PageFormatError("a leaf of the table is not a table leaf page")
        ncells = _be(buf, bases + 3, 2).astype(np.int64)
        total = int(ncells.sum())
        page_of = np.repeat(np.arange(count), ncells)
        first = np.repeat(np.cumsum(ncells) - ncells, ncells)
        slot = np.arange(total, dtype=np.int64) - first
        pointers = bases[page_of] + 8 + 2 * slot
        offsets = _be(buf, pointers, 2).astype(np.int64)
        if ((offsets < 8) | (offsets >= size)).any():
            raise PageFormatError("a cell pointer lies outside its page")
        return bases[page_of] + offsets

    def _decode_chunk(self, buf: np.ndarray, count: int, wanted: list[int],
                      text_columns: tuple[int, ...] = ()) -> Columns:
        """Values and kinds of the ``wanted`` columns of ``count`` pages' rows, the texts of the
        ``text_columns`` among them, and the rowids of the rows that spill (only the rowids'
        lengths are read for the others: nothing needs them); in C where the extension is
        built, else in numpy."""
        decode = self._numpy_decoded if _pages is None else self._compiled_decoded
        values, kinds, content, spilled = decode(buf, count, wanted, text_columns)
        texts = {}
        for column in text_columns:
            rows = np.flatnonzero(kinds[column] == TEXT)
            texts[column] = np.full(len(kinds[column]), None, dtype=object)
            at, size, first = content[column]
            texts[column][rows] = _texts(buf, at, size, rows, first)
        return Columns(values=values, kinds=kinds, spilled=spilled, texts=texts)

    def _compiled_decoded(self, buf: np.ndarray, count: int, wanted: list[int],
                          text_columns: tuple[int, ...]) -> _Decoded:
        """:meth:`_decode_chunk`'s columns decoded by the C extension (parsers/_pages.c), one
        pass over the cells with the GIL released."""
        cells = int(_be(buf, np.arange(count, dtype=np.int64) * self.page_size + 3, 2).sum())
        values = tuple(np.empty(cells, dtype=np.int64) for _ in wanted)
        kinds = tuple(np.empty(cells, dtype=np.int8) for _ in wanted)
        at, size, first = (tuple(np.empty(cells, dtype=np.int64) if c in text_columns else None
                                 for c in wanted) for _ in range(3))
        spilled = np.empty(cells, dtype=np.int64)
        try:
            rows, spills = _pages.decode(buf, count, self.page_size, self.usable, tuple(wanted),
                                         values, kinds, at, size, first, spilled)
        except ValueError as exc:
            raise PageFormatError(str(exc)) from None
        return ({c: v[:rows] for c, v in zip(wanted, values, strict=True)},
                {c: k[:rows] for c, k in zip(wanted, kinds, strict=True)},
                {c: (a, s, f[:rows]) for c, a, s, f in zip(wanted, at, size, first, strict=True)
                 if c in text_columns},
                spilled[:spills])

    def _numpy_decoded(self, buf: np.ndarray, count: int, wanted: list[int],
                       text_columns: tuple[int, ...]) -> _Decoded:
        """:meth:`_decode_chunk`'s columns decoded in numpy, every row of the chunk at once
        step by step (cells, varints, record headers, integers)."""
        cells = self._cells(buf, count)
        payload, n1 = _varints(buf, cells)
        windows = _windows(buf)
        rowid_at = cells + n1
        start = rowid_at + _varint_lengths(windows, rowid_at)
        spills = payload > self.usable - LOCAL_PAYLOAD_RESERVE
        spilled = _varints(buf, rowid_at[spills])[0]
        start = start[~spills]
        if (start + payload[~spills] > (cells[~spills] // self.page_size + 1) * self.page_size
            ).any():
            raise PageFormatError("a record runs past its page")
        serial, body = _serial_types(buf, start, max(wanted) + 1)
        sizes = _sizes(serial)
        values: dict[int, np.ndarray] = {}
        kinds: dict[int, np.ndarray] = {}
        offsets: dict[int, np.ndarray] = {}
        reached = body  # where each record's next column begins, column after column
        for column in range(max(wanted) + 1):
            if column in wanted:
                offsets[column] = reached
            reached = reached + sizes[column]
        for column in wanted:
            kinds[column] = _kinds(serial[column])
            values[column] = _integers(windows, np.minimum(offsets[column], len(windows) - 1),
                                       serial[column])
        content = {}
        for column in text_columns:
            rows = np.flatnonzero(kinds[column] == TEXT)
            first = np.full(len(start), -1, dtype=np.int64)
            first[rows] = rows[_first_of_same(buf, offsets[column][rows], sizes[column][rows])]
            content[column] = (offsets[column], sizes[column], first)
        return values, kinds, content, spilled

    def reduced(self, leaves: np.ndarray, wanted: list[int], text_columns: tuple[int, ...],
                reduce: Callable[[Columns], T], threads: int = 1) -> Iterator[T]:
        """``reduce`` of each chunk of the rows of the leaf pages ``leaves`` (what
        :meth:`columns` yields), in row order. ``threads`` threads decode and reduce chunks side
        by side (numpy and ``pread`` release the GIL), at most two chunks per thread in hand at
        once, so a table is never held decoded whole: only what ``reduce`` keeps of it, as the
        caller consumes it."""
        chunks = self._chunk_pages(leaves)
        if threads <= 1:
            for numbers in chunks:
                yield reduce(self._decoded(numbers, wanted, text_columns))
            return
        with ThreadPoolExecutor(threads) as pool:
            pending: deque[Future[T]] = deque()
            for numbers in chunks:
                if len(pending) >= 2 * threads:
                    yield pending.popleft().result()
                pending.append(pool.submit(
                    lambda pages: reduce(self._decoded(pages, wanted, text_columns)), numbers))
            while pending:
                yield pending.popleft().result()

    def columns(self, root: int, wanted: list[int], text_columns: tuple[int, ...] = ()
                ) -> Iterator[Columns]:
        """The ``wanted`` columns (0-based positions in the table's definition) of every row of
        the table rooted at ``root``, one chunk of leaf pages at a time; the texts of the
        ``text_columns`` (also in ``wanted``) are decoded too."""
        return self._chunks(self.leaf_pages(root), wanted, text_columns)

    def _chunks(self, leaves: np.ndarray, wanted: list[int], text_columns: tuple[int, ...]
                ) -> Iterator[Columns]:
        """The columns of the rows of the leaf pages ``leaves``, one chunk at a time."""
        for numbers in self._chunk_pages(leaves):
            yield self._decoded(numbers, wanted, text_columns)

    @staticmethod
    def _chunk_pages(leaves: np.ndarray) -> list[np.ndarray]:
        """The leaf page numbers cut into chunks (:func:`chunk_count` of them)."""
        return [leaves[first: first + CHUNK_PAGES] for first in range(0, len(leaves), CHUNK_PAGES)]

    def _decoded(self, numbers: np.ndarray, wanted: list[int], text_columns: tuple[int, ...]
                 ) -> Columns:
        """The columns of the rows of the leaf pages ``numbers`` (one chunk)."""
        buf = self._read_pages(numbers)
        try:
            return self._decode_chunk(buf, len(numbers), wanted, text_columns)
        except IndexError:
            raise PageFormatError("a record runs past its page") from None


def _thread_buffer(size: int) -> np.ndarray:
    """This thread's page buffer, ``size`` bytes of it (grown when it is smaller)."""
    held = getattr(_THREAD_BUFFERS, "buffer", None)
    if held is None or len(held) < size:
        held = _THREAD_BUFFERS.buffer = np.empty(size, dtype=np.uint8)
    return held[:size]


def chunk_count(leaves: np.ndarray) -> int:
    """How many chunks the leaf pages ``leaves`` are read in."""
    return -(-len(leaves) // CHUNK_PAGES)


def _has_content(path: Path) -> bool:
    """Whether ``path`` exists and is not empty."""
    try:
        return path.stat().st_size > 0
    except OSError:
        return False
