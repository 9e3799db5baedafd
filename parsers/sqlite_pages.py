"""Integer columns of an SQLite table read straight from its B-tree pages with numpy.

An nsys export holds tens of millions of activity rows; SQLite's own row-at-a-time interface
(``sqlite3``, and the Arrow readers built on it) spends most of its time per value. This reader
follows the documented file format (https://www.sqlite.org/fileformat2.html) instead: it walks
the table's B-tree to its leaf pages, reads them in chunks, and decodes the cells, varints,
record headers and big-endian integers of every row of a chunk at once, in numpy.

It reads only what it is sure of: a rollback-journal database (no WAL file with content beside
it), UTF-8, table B-trees. Rows whose record spills onto overflow pages are returned by rowid for
the caller to read through SQL. Anything else raises :class:`PageFormatError`, and the caller
falls back to SQL.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HEADER_MAGIC = b"SQLite format 3\x00"
# B-tree page types (file format, section 1.6).
LEAF_TABLE_PAGE = 0x0D
INTERIOR_TABLE_PAGE = 0x05
# Leaf pages decoded at a time: 1024 pages of 4 KiB (~50,000 rows) keep the per-row arrays of a
# chunk within the CPU caches.
CHUNK_PAGES = 1024
# Value kinds returned beside each column.
INTEGER, NULL, OTHER, TEXT = 0, 1, 2, 3
# Texts up to this many bytes are grouped by content in numpy (hash, then a byte-by-byte check)
# so that each distinct text is decoded once; longer ones are decoded one by one.
MAX_GROUPED_TEXT = 128
# FNV-1a's 64-bit prime: the hash that groups texts (every group is checked byte by byte).
_FNV_PRIME = np.uint64(1099511628211)
# Content size of serial types 0..11 (12 and up: blobs and text of (type - 12) // 2 bytes).
_SIZE_OF_TYPE = np.array([0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0], dtype=np.int64)


class PageFormatError(Exception):
    """The file holds something this reader does not decode (the caller falls back to SQL)."""


@dataclass
class Columns:
    """Decoded columns of a table: per requested column its int64 values and value kinds."""

    rowids: np.ndarray
    values: dict[int, np.ndarray]
    kinds: dict[int, np.ndarray]
    #: Rowids of rows stored partly on overflow pages: not decoded here.
    spilled: np.ndarray
    #: Per requested text column: the text of each row (None where the value is no text).
    texts: dict[int, np.ndarray]


def _decode(buf: np.ndarray, pos: int, size: int) -> str:
    """One UTF-8 text of the buffer (undecodable bytes replaced, as they are never a name)."""
    return bytes(buf[pos: pos + size]).decode("utf-8", "replace")


def _same_bytes(buf: np.ndarray, a: np.ndarray, b: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Whether the ``size`` bytes at ``a`` equal those at ``b``, for each row."""
    same = np.ones(len(a), dtype=bool)
    for j in range(int(size.max(initial=0))):
        check = np.flatnonzero(same & (size > j))
        same[check] = buf[a[check] + j] == buf[b[check] + j]
    return same


def _texts(buf: np.ndarray, pos: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The texts of ``size`` bytes at ``pos`` as Python strings, each distinct text decoded
    once (texts repeat: NVTX range names, thread names)."""
    out = np.full(len(pos), None, dtype=object)
    rows = np.flatnonzero(size <= MAX_GROUPED_TEXT)
    length = size[rows]
    digest = length.astype(np.uint64)
    for j in range(int(length.max(initial=0))):
        grow = np.flatnonzero(length > j)
        digest[grow] = (digest[grow] * _FNV_PRIME) ^ buf[pos[rows[grow]] + j].astype(np.uint64)
    _, first, codes = np.unique(digest, return_index=True, return_inverse=True)
    codes = codes.ravel()
    representative = rows[first]
    distinct = np.array([_decode(buf, int(pos[r]), int(size[r])) for r in representative] + [""],
                        dtype=object)[:-1]
    same = (size[representative][codes] == length) & _same_bytes(
        buf, pos[rows], pos[representative][codes], length)
    out[rows[same]] = distinct[codes[same]]
    for row in np.concatenate([rows[~same], np.flatnonzero(size > MAX_GROUPED_TEXT)]):
        out[row] = _decode(buf, int(pos[row]), int(size[row]))
    return out


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


def _windows(buf: np.ndarray) -> np.ndarray:
    """Every 8-byte window of ``buf`` (window i starts at byte i) as one little-endian array:
    a gather from it and a byte swap read 8 big-endian bytes at any positions at once."""
    return np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf, offset=0, strides=(1,))


def _integers(windows: np.ndarray, pos: np.ndarray, types: np.ndarray) -> np.ndarray:
    """Signed integers of serial types 1..6 (and the constants 8, 9; 0 for others) at each
    position: the type's first bytes of the 8-byte window, sign-extended by a right shift."""
    size = _SIZE_OF_TYPE[np.where(types <= 6, types, 0)]
    raw = windows[pos].byteswap().view(np.int64)
    out = np.where(size > 0, raw >> np.where(size > 0, 64 - 8 * size, 0), 0)
    out[types == 9] = 1
    return out


def _serial_types(buf: np.ndarray, start: np.ndarray, columns: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Serial types of the first ``columns`` columns of the records at ``start`` (shape
    columns x rows; 0 = NULL for a column the record lacks) and where each record's body
    begins. One-byte types (every integer and short text) are read at once; the rest per
    varint."""
    header_len, n3 = _varints(buf, start)
    header_end = start + header_len
    at = start[None, :] + n3[None, :] + np.arange(columns)[:, None]
    inside = at < header_end[None, :]
    serial = np.where(inside, buf[np.minimum(at, len(buf) - 1)], 0).astype(np.int64)
    slow = np.flatnonzero((serial >= 0x80).any(axis=0))
    if len(slow):
        pos = start[slow] + n3[slow]
        for column in range(columns):
            present = pos < header_end[slow]
            value, length = _varints(buf, np.where(present, pos, start[slow]))
            serial[column, slow] = np.where(present, value, 0)
            pos = pos + np.where(present, length, 0)
    return serial, header_end


class _Growing:
    """An array filled part after part in place. Its capacity grows by ``ndarray.resize``
    (realloc: for arrays this large the C library remaps the pages instead of copying them), so
    a column is never held twice; capacity never filled is never touched, so it takes no
    memory."""

    def __init__(self, dtype: type, capacity: int) -> None:
        """An empty array of ``dtype`` with room for ``capacity`` values."""
        self.array = np.empty(max(capacity, 1), dtype=dtype)
        self.size = 0

    def extend(self, part: np.ndarray) -> None:
        """Append ``part``, growing the capacity by half when it is full."""
        end = self.size + len(part)
        if end > len(self.array):
            self.array.resize(max(end, len(self.array) * 3 // 2), refcheck=False)
        self.array[self.size:end] = part
        self.size = end

    def done(self) -> np.ndarray:
        """The filled part of the array (a view: cutting the capacity would remap it)."""
        return self.array[: self.size]


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
        buf = np.empty(len(numbers) * size + 16, dtype=np.uint8)
        buf[-16:] = 0
        breaks = np.flatnonzero(np.diff(numbers) != 1) + 1
        for run in np.split(np.arange(len(numbers)), breaks):
            first, count = int(numbers[run[0]]), len(run)
            data = os.pread(self.fd, count * size, (first - 1) * size)
            if len(data) != count * size:
                raise PageFormatError("the file ends inside a table")
            buf[run[0] * size: (run[0] + count) * size] = np.frombuffer(data, dtype=np.uint8)
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
        """Rowids, values and kinds of the ``wanted`` columns of ``count`` pages' rows, and the
        texts of the ``text_columns`` among them."""
        cells = self._cells(buf, count)
        payload, n1 = _varints(buf, cells)
        rowids, n2 = _varints(buf, cells + n1)
        start = cells + n1 + n2
        spills = payload > self.usable - 35
        spilled = rowids[spills]
        keep = ~spills
        start, rowids = start[keep], rowids[keep]
        serial, body = _serial_types(buf, start, max(wanted) + 1)
        sizes = np.where(serial >= 12, (serial - 12) // 2, _SIZE_OF_TYPE[np.minimum(serial, 11)])
        offsets = body[None, :] + np.cumsum(sizes, axis=0) - sizes
        windows = _windows(buf)
        values: dict[int, np.ndarray] = {}
        kinds: dict[int, np.ndarray] = {}
        for column in wanted:
            types = serial[column]
            kind = np.full(len(types), OTHER, dtype=np.int8)
            kind[types == 0] = NULL
            kind[((types >= 1) & (types <= 6)) | (types == 8) | (types == 9)] = INTEGER
            kind[(types >= 13) & (types % 2 == 1)] = TEXT
            pos = np.minimum(offsets[column], len(windows) - 1)
            values[column] = _integers(windows, pos, np.where(kind == INTEGER, types, 0))
            kinds[column] = kind
        texts = {}
        for column in text_columns:
            rows = np.flatnonzero(kinds[column] == TEXT)
            texts[column] = np.full(len(rowids), None, dtype=object)
            texts[column][rows] = _texts(buf, offsets[column][rows], sizes[column][rows])
        return Columns(rowids=rowids, values=values, kinds=kinds, spilled=spilled, texts=texts)

    def table(self, root: int, wanted: list[int], text_columns: tuple[int, ...] = ()
              ) -> Columns:
        """What :meth:`columns` gives, all chunks in one :class:`Columns`: each integer column
        filled in place chunk after chunk (:class:`_Growing`), so that no chunk's arrays are
        held beside the whole column."""
        leaves = self.leaf_pages(root)
        grown: dict[tuple[str, int], _Growing] = {}
        texts: dict[int, list[np.ndarray]] = {column: [] for column in text_columns}
        spilled: list[np.ndarray] = []
        for chunk in self._chunks(leaves, wanted, text_columns):
            if not grown:  # rows per page of the first chunk size every column
                expected = len(chunk.rowids) * len(leaves) // min(len(leaves), CHUNK_PAGES) + 1
                grown = {(part, column): _Growing(dtype, expected + expected // 16)
                         for part, dtype in (("rowids", np.int64), ("values", np.int64),
                                             ("kinds", np.int8))
                         for column in (wanted if part != "rowids" else [-1])}
            grown["rowids", -1].extend(chunk.rowids)
            for column in wanted:
                grown["values", column].extend(chunk.values.pop(column))
                grown["kinds", column].extend(chunk.kinds.pop(column))
            for column in text_columns:
                texts[column].append(chunk.texts[column])
            spilled.append(chunk.spilled)
        if not grown:
            empty = {column: np.empty(0, np.int64) for column in wanted}
            return Columns(rowids=np.empty(0, np.int64), values=empty,
                           kinds={column: np.empty(0, np.int8) for column in wanted},
                           spilled=np.empty(0, np.int64),
                           texts={column: np.empty(0, object) for column in text_columns})
        return Columns(rowids=grown["rowids", -1].done(),
                       values={column: grown["values", column].done() for column in wanted},
                       kinds={column: grown["kinds", column].done() for column in wanted},
                       spilled=np.concatenate(spilled),
                       texts={column: np.concatenate(parts) for column, parts in texts.items()})

    def columns(self, root: int, wanted: list[int], text_columns: tuple[int, ...] = ()
                ) -> Iterator[Columns]:
        """The ``wanted`` columns (0-based positions in the table's definition) of every row of
        the table rooted at ``root``, one chunk of leaf pages at a time; the texts of the
        ``text_columns`` (also in ``wanted``) are decoded too."""
        return self._chunks(self.leaf_pages(root), wanted, text_columns)

    def _chunks(self, leaves: np.ndarray, wanted: list[int], text_columns: tuple[int, ...]
                ) -> Iterator[Columns]:
        """The columns of the rows of the leaf pages ``leaves``, one chunk at a time."""
        for first in range(0, len(leaves), CHUNK_PAGES):
            numbers = leaves[first: first + CHUNK_PAGES]
            buf = self._read_pages(numbers)
            try:
                yield self._decode_chunk(buf, len(numbers), wanted, text_columns)
            except IndexError:
                raise PageFormatError("a record runs past its page") from None


def _has_content(path: Path) -> bool:
    """Whether ``path`` exists and is not empty."""
    try:
        return path.stat().st_size > 0
    except OSError:
        return False
