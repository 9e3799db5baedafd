"""The one shape every parser returns: a :class:`Profile` of named, tidy pandas tables.

All times are integer nanoseconds (``int64``) on the clock of the profile they came from; a
table's ``start``/``end`` columns are comparable with every other table of the same profile.
Converting to milliseconds or seconds happens only when something is displayed. Id columns take
the narrowest signed integer dtype that holds them (:data:`ID_COLUMNS`), and a name column may
be a pandas categorical (both parsers' kernel and runtime names, nsys range names, Kineto
operator names; see :func:`categorical`): a few hundred distinct names over millions of rows.

Tables (a parser leaves out what its format cannot hold; :meth:`Profile.table` then returns an
empty frame with the right columns). The ``stream`` of the GPU tables and ``sync`` is -1 where the
profiler recorded none: CUPTI's unset id (concepts.UNSET_STREAM), as nsys exports it and Kineto
writes it, is no stream, and both parsers read it so (concepts.recorded_streams).

``kernels``        GPU kernels: start, end, device, stream, correlation, name (demangled when the
                   format has it), short_name, is_comm (NCCL/RCCL, see concepts.is_comm_kernel).
``memcpy``         GPU copies: start, end, device, stream, correlation, kind (concepts.COPY_KINDS),
                   bytes (-1 unknown), src_kind, dst_kind (concepts.MEMORY_KINDS).
``memset``         GPU memsets: start, end, device, stream, correlation, bytes.
``runtime``        CUDA runtime/driver API calls on the CPU: start, end, pid, tid, correlation,
                   name (version suffix stripped: ``cudaLaunchKernel``, not ``..._v7000``).
``sync``           GPU synchronization events recorded by CUPTI (nsys): start, end, device,
                   stream, correlation (of the runtime call that waited: cudaStreamSynchronize,
                   cudaEventSynchronize..., -1 unknown), kind.
``ranges``         Annotated CPU ranges (NVTX, torch ``user_annotation``): start, end, pid, tid,
                   name, domain (NVTX domain name, "" for the default one).
``cpu_ops``        Framework operators on the CPU (Kineto ``cpu_op``/``Operator``): start, end,
                   pid, tid, name.
``steps``          Training iterations: number, start, end, pid, tid, origin (``ProfilerStep`` or
                   ``nvtx``); one row per step (see concepts.step_numbers).
``dataloader``     Fetches of the next batch, every loader's: start, end, pid, tid, name (see
                   concepts.is_dataloader_span); which fed training, the DataLoader wait, the
                   analysis tells (reports.analysis.dataloader.training_fetches).
``cpu_collectives`` CPU-side collective calls (gloo, c10d, record_param_comms): start, end, pid,
                   tid, name (see concepts.is_cpu_collective), bytes (what the call sends, from
                   its recorded element count and dtype; -1 unknown), collective (the
                   ``Collective name`` record_param_comms records, None elsewhere).
``osrt``           OS runtime calls (nsys ``--trace=osrt``): start, end, pid, tid, name.
``memory``         Allocator events (Kineto ``[memory]``, nsys CUDA memory usage): time, pid, tid
                   (-1 unknown), device (-1 host), device_kind (``cpu``, ``cuda``...), bytes
                   (signed: + allocation, - release), total_allocated and total_reserved after
                   the event (-1 when the format does not record them), addr (-1 unknown),
                   counts (``allocated``: tensor allocations of the framework's allocator;
                   ``reserved``: driver allocations, i.e. the caching allocator's segments).
``devices``        GPUs: device, name, memory_bytes, sm_count, compute_major, compute_minor (the
                   compute capability, 7.0 = Volta; -1 unknown).
``op_inputs``      Inputs of the operators :func:`concepts.is_input_checked_name` names (matmuls,
                   convolutions, batch norms, pointwise ops), Kineto with ``record_shapes=True``:
                   start, end, pid, tid, name, input_types (tuple of dtype names such as
                   ``float``, ``c10::Half``, "" for a None argument), input_dims (tuple of
                   shapes, each a tuple of ints), input_strides (the same for each tensor's
                   strides, torch 2.1+); each None when the trace did not record it.
``threads``        pid, tid, name (nsys: decoded from globalTid).
``lines``          line_profiler lines: file, function, lineno, hits, time_ns, time_per_hit_ns,
                   function_share (0..1 of the function's total), source (text or None, see
                   parsers.lprof: only from allowed Python files), is_dataloader_loop (from the
                   source, or from the hit counts when it is not shown), is_loop_header (hits =
                   next line's hits + the function's calls), is_sync_point (the source waits for
                   the GPU: ``.item()``, ``.data[0]``...; its time is the GPU work queued before
                   it, see pysource.is_sync_point_line).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from profreport.units import duration

SourceKind = Literal["nsys", "kineto", "lprof"]

#: Columns of small integer ids (GPUs, streams, correlation ids, processes, threads). Each is held
#: in the narrowest signed dtype that fits its values (:func:`narrowest_int`): the schema's
#: ``int64`` is the widest they take. A 10M-row table's ids then take 1 to 4 bytes a row instead
#: of 8; code reading them must not assume int64 (compare, join and index them as they are). The
#: pid and tid of nsys's runtime calls and ranges (17 M and 4.5 M rows, a few dozen threads) are
#: categoricals of those ids (:func:`id_categorical`): read a few rows' with :func:`ids_at`, not
#: the whole column.
ID_COLUMNS = frozenset({"device", "stream", "correlation", "pid", "tid"})
#: CUPTI numbers correlation ids per process, from 1 and below this: where one export holds
#: several processes' runtime calls, the nsys parser qualifies each id by its process above it
#: (index * PROCESS_CORRELATIONS + id), so ids of one process share their high bits.
PROCESS_CORRELATIONS = 1 << 32
#: The signed dtypes an id column may take, narrowest first.
_ID_DTYPES = (np.int8, np.int16, np.int32, np.int64)
# Each of them with its bounds, looked up once (the Kineto reader narrows every column of every
# batch it reads: thousands of lookups a trace).
_ID_BOUNDS = tuple((dtype, int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
                   for dtype in _ID_DTYPES)

_TIME = {"start": "int64", "end": "int64"}
_CPU = {**_TIME, "pid": "int64", "tid": "int64"}
_GPU = {**_TIME, "device": "int64", "stream": "int64", "correlation": "int64"}

TABLE_SCHEMAS: dict[str, dict[str, str]] = {
    "kernels": {**_GPU, "name": "object", "short_name": "object", "is_comm": "bool"},
    "memcpy": {**_GPU, "kind": "object", "bytes": "int64", "src_kind": "object",
               "dst_kind": "object"},
    "memset": {**_GPU, "bytes": "int64"},
    "runtime": {**_CPU, "correlation": "int64", "name": "object"},
    "sync": {**_GPU, "kind": "object"},
    "ranges": {**_CPU, "name": "object", "domain": "object"},
    "cpu_ops": {**_CPU, "name": "object"},
    "steps": {"number": "int64", **_CPU, "origin": "object"},
    "dataloader": {**_CPU, "name": "object"},
    "cpu_collectives": {**_CPU, "name": "object", "bytes": "int64", "collective": "object"},
    "osrt": {**_CPU, "name": "object"},
    "memory": {"time": "int64", "pid": "int64", "tid": "int64", "device": "int64",
               "device_kind": "object", "bytes": "int64", "total_allocated": "int64",
               "total_reserved": "int64", "addr": "int64", "counts": "object"},
    "devices": {"device": "int64", "name": "object", "memory_bytes": "int64",
                "sm_count": "int64", "compute_major": "int64", "compute_minor": "int64"},
    "op_inputs": {**_CPU, "name": "object", "input_types": "object", "input_dims": "object",
                  "input_strides": "object"},
    "threads": {"pid": "int64", "tid": "int64", "name": "object"},
    "lines": {"file": "object", "function": "object", "first_lineno": "int64",
              "lineno": "int64", "hits": "int64",
              "time_ns": "int64", "time_per_hit_ns": "int64", "function_share": "float64",
              "source": "object", "is_dataloader_loop": "bool", "is_loop_header": "bool",
              "is_sync_point": "bool"},
}


#: The tables that give a profile something to analyse: device work, operators, annotated
#: ranges, steps or timed lines. A file with none of them (a few runtime calls, a capture that was
#: cut before the first iteration) is empty, whatever its time span.
SUBSTANCE_TABLES = ("kernels", "memcpy", "memset", "cpu_ops", "ranges", "steps", "lines")
#: What the rows of the other timed tables are called in that sentence.
ROW_WORDS = {"runtime": "runtime calls", "sync": "GPU sync records", "osrt": "OS runtime calls",
             "memory": "allocator events"}


def nothing_recorded(tables: dict[str, pd.DataFrame], dropped: int = 0) -> str | None:
    """Why a file holds nothing to analyse (what it does hold, over which span, and the
    ``dropped`` records its parser refused for impossible values), else None."""
    if any(not tables[name].empty for name in SUBSTANCE_TABLES if name in tables):
        return None
    held = [(name, len(frame)) for name, frame in tables.items()
            if not frame.empty and {"start", "end"} <= set(frame.columns)]
    starts = [int(tables[name]["start"].min()) for name, _ in held]
    ends = [int(tables[name]["end"].max()) for name, _ in held]
    what = ", ".join(f"{count:,} {ROW_WORDS.get(name, f'{name} rows')}" for name, count in held)
    span = f" over {duration(max(ends) - min(starts))}" if held else ""
    return ("nothing to analyse: no kernels, copies, operators, ranges, steps or lines recorded"
            + (f" (only {what}{span})" if held else "")
            + ": the profiler traced none of them, or the capture ended before the first "
            "iteration" + (f", or they are among the {dropped:,} records dropped for impossible "
                           "values (see the notes)" if dropped else ""))


def empty_table(name: str) -> pd.DataFrame:
    """An empty frame with the columns and dtypes of table ``name``."""
    schema = TABLE_SCHEMAS[name]
    return pd.DataFrame({col: pd.Series(dtype=dtype) for col, dtype in schema.items()})


def objects(values: np.ndarray) -> pd.Series:
    """An array of Python objects (names) as an object column, not copied: a DataFrame given the
    bare array infers pandas 3's ``str`` dtype for strings, a checked copy of every row (a
    transient 40 bytes a row), which ``conform`` then casts back to object."""
    return pd.Series(values, dtype=object, copy=False)


def categorical(texts: Sequence[str | None], codes: np.ndarray) -> pd.Categorical:
    """A name column from distinct ``texts`` (repeats allowed, None missing) and each row's
    index into them (-1 missing): a categorical of the texts its rows hold, sorted, its codes in
    the narrowest dtype (one small code per row instead of an 8-byte reference; the parsers
    number names as they read them, so no row's text is hashed)."""
    used = np.flatnonzero(held_codes(codes, len(texts)))
    categories = sorted({texts[at] for at in used.tolist() if texts[at] is not None})
    position = {text: at for at, text in enumerate(categories)}
    remap = np.full(len(texts) + 1, -1, dtype=narrowest_int(np.array([-1, len(categories)])))
    remap[used] = [position.get(texts[at], -1) for at in used.tolist()]  # remap[-1]: code -1
    return pd.Categorical.from_codes(remap[codes], pd.Index(categories, dtype=object))


def id_categorical(ids: np.ndarray, codes: np.ndarray) -> pd.Categorical:
    """An id column of few distinct values over many rows: each row's index ``codes`` into
    ``ids`` (repeats allowed) as a categorical of the ids themselves, sorted, in the dtype
    :func:`narrowed` gives them (``to_numpy`` gives the same values and dtype as the id column
    would have), a small code per row."""
    categories, remap = np.unique(ids, return_inverse=True)
    remap = remap.astype(narrowest_int(np.array([-1, len(categories)])))
    return pd.Categorical.from_codes(one_value_held_once(remap[codes]),
                                     pd.Index(narrowed(categories)))


def ids_at(column: pd.Series, rows: np.ndarray | slice) -> np.ndarray:
    """The values of an id column at ``rows`` (positions or a mask): of a categorical
    (:func:`id_categorical`) from its codes at those rows, never the whole column expanded."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.categories.to_numpy()[column.array.codes[rows]]
    return column.to_numpy()[rows]


def distinct_ids(column: pd.Series) -> np.ndarray:
    """The distinct values of an id column, in the order first met (a categorical's, see
    :func:`id_categorical`: those its rows hold, in category order, found from its codes)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        categories = column.cat.categories
        return categories.to_numpy()[held_codes(column.array.codes, len(categories))]
    return pd.unique(column.to_numpy())


#: Codes counted at a time by :func:`held_codes`: numpy's ``bincount`` widens what it is given to
#: int64, 8 bytes a row (140 MB at once for the 17 M runtime calls of a 10 M-kernel export).
HELD_CODE_ROWS = 1 << 18


def held_codes(codes: np.ndarray, count: int) -> np.ndarray:
    """Which of the codes ``0 .. count - 1`` occur among ``codes`` (-1, a missing value, is
    none of them), counted :data:`HELD_CODE_ROWS` codes at a time."""
    held = np.zeros(count + 1, dtype=bool)  # held[0]: code -1
    for at in range(0, len(codes), HELD_CODE_ROWS):
        shifted = np.add(codes[at:at + HELD_CODE_ROWS], 1, dtype=np.intp)
        held |= np.bincount(shifted, minlength=count + 1).astype(bool)
    return held[1:]


def in_start_order(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A table's columns (``start`` among them) put in start order in place, rows of equal
    starts as they were, one column reordered at a time (each old copy let go before the next
    is made); not touched when already in order, as tables mostly come."""
    start = columns.get("start")
    if start is None or len(start) < 2 or (start[1:] >= start[:-1]).all():
        return columns
    order = np.argsort(start, kind="stable")
    del start
    for column in list(columns):
        columns[column] = columns[column][order]
    return columns


def outermost(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of spans sorted by start, the index of each run of spans nested in or overlapping the
    first (its head), and the run each span belongs to."""
    reach = np.maximum.accumulate(ends)
    first = np.r_[True, starts[1:] >= reach[:-1]]
    return np.flatnonzero(first), np.cumsum(first) - 1


def covered_ns(spans: pd.DataFrame) -> int:
    """The time ``spans`` (of one thread, or threads that take turns) cover, ns."""
    order = np.argsort(spans["start"].to_numpy(np.int64), kind="stable")
    starts, ends = (spans[column].to_numpy(np.int64)[order] for column in ("start", "end"))
    heads, _ = outermost(starts, ends)
    return int((np.maximum.reduceat(ends, heads) - starts[heads]).sum())


def sorted_times(times: np.ndarray) -> np.ndarray:
    """A sorted copy of a time column. numpy's stable sort (timsort for int64) takes a column
    that is nearly in order already (the ends of rows kept in start order, launch times) in
    about one pass: 0.06 s for a 10 M-kernel export's ends and launch times where the default
    introsort took 1.0 s; the values, so the result, are the same."""
    return np.sort(times, kind="stable")


def position_dtype(count: int) -> type:
    """The dtype of positions among (or numbers up to) ``count`` items: int32, half the memory
    of numpy's int64 indexes, unless there are 2**31 of them."""
    return np.int32 if count < np.iinfo(np.int32).max else np.int64


def narrowed(values: np.ndarray) -> np.ndarray:
    """An integer column in the narrowest signed dtype that holds its values (not copied when
    it already has it)."""
    return values.astype(narrowest_int(values), copy=False)


def narrowest_int(values: np.ndarray) -> type:
    """The narrowest signed integer dtype holding every one of ``values`` (int64 when empty)."""
    if len(values) == 0:
        return np.int64
    low, high = int(values.min()), int(values.max())
    return next(dtype for dtype, least, most in _ID_BOUNDS if least <= low and high <= most)


def narrowed_ids(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each id column (:data:`ID_COLUMNS`) in its narrowest integer dtype, in
    place; an id column of another kind (floats after ``fillna``) is made integer first, and
    one holding missing values is refused (ValueError), as ``astype`` refuses them, not cast to
    a meaningless integer. A categorical of ids (:func:`id_categorical`) is kept as it is."""
    for column in ID_COLUMNS.intersection(frame.columns):
        if isinstance(frame[column].dtype, pd.CategoricalDtype):
            continue
        values = frame[column].to_numpy()
        if values.dtype.kind not in "iu":
            if values.dtype.kind == "f" and not np.isfinite(values).all():
                raise ValueError(f"id column {column}: cannot convert non-finite values "
                                 f"(NA or inf) to integer")
            values = values.astype(np.int64)
        dtype = narrowest_int(values)
        held = one_value_held_once(values.astype(dtype, copy=False))
        if held is not values or frame[column].dtype != dtype:
            # A Series on the frame's own index is taken as it is; an array would be copied.
            frame[column] = pd.Series(held, index=frame.index, copy=False)
    return frame


def one_value_held_once(values: np.ndarray) -> np.ndarray:
    """An id column (or a categorical's codes) holding one value throughout, as that value
    broadcast to its length (a read-only view, no memory a row: a one-GPU process's 10 M
    kernels' device, a one-process capture's 17 M runtime calls' pid codes); else as it is."""
    if len(values) < 2 or values.strides == (0,) or values.min() != values.max():
        return values
    return np.broadcast_to(values[:1].copy(), values.shape)


def conform(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """Return ``frame`` with exactly the columns of table ``name``, in order, with their dtypes
    (id columns narrowed from what they hold, never widened to int64 first, see
    :data:`ID_COLUMNS`; a categorical name column kept as it is)."""
    schema = TABLE_SCHEMAS[name]
    missing = [col for col in schema if col not in frame.columns]
    if missing:
        raise ValueError(f"table {name} lacks columns {missing}")
    others = {col: dtype for col, dtype in schema.items() if col not in ID_COLUMNS
              and not (dtype == "object" and isinstance(frame[col].dtype, pd.CategoricalDtype))}
    return narrowed_ids(frame[list(schema)].astype(others).reset_index(drop=True))


@dataclass
class ProfileMeta:
    """What a parser learned about a file besides its tables (every format)."""

    #: Sentences for the report's notes: records dropped, sources not shown...
    notes: list[str] = field(default_factory=list)
    #: Records left out as impossible: reason (Kineto) or table (nsys) -> count.
    dropped: dict[str, int] = field(default_factory=dict)
    #: The file's time zero in its own clock when the format states it (nsys: 0).
    time_zero_ns: int | None = None
    #: World size of the distributed job the file belongs to, when recorded.
    world_size: int | None = None
    #: Whether the file records a distributed setup at all.
    distributed: bool = False
    #: Whether the format records the process group whenever one exists (torch.profiler's
    #: ``distributedInfo``), so that a file without one is a process of a job of one.
    records_process_group: bool = False
    #: Why the file holds nothing to analyse ("no kernels or operators recorded"), else None.
    empty: str | None = None
    #: The repeated span the steps were taken from when no span is named as a step (Kineto: an
    #: operator; nsys: an NVTX range, numbers masked as ``#``); None otherwise.
    step_span: str | None = None
    #: Whether the occurrences of ``step_span`` hold their whole passes: their process records
    #: no work between them (Kineto, see parsers.repeats.PassEnds.holds_pass), so the last
    #: step, to its own end, is as whole as the others.
    steps_hold_passes: bool = False
    #: Whether the format records PyTorch's own spans (its RecordFunction hooks) without the
    #: program asking: the operators, with their inputs under record_shapes, and the DataLoader
    #: iterator's fetches. torch.profiler does; Nsight Systems records the CUDA calls and only
    #: the NVTX ranges the program opens, line_profiler lines.
    records_torch_spans: bool = False


@dataclass(frozen=True)
class DataLoaderIterators:
    """What a trace says about the DataLoader: the iterator kind and its ``__next__`` calls."""

    #: ``multi-process`` (worker processes), ``single-process`` (``num_workers=0``), ``both``
    #: or ``unknown``.
    workers: str = "unknown"
    multi_process_next_calls: int = 0
    single_process_next_calls: int = 0


@dataclass
class KinetoMeta(ProfileMeta):
    """What a torch.profiler trace says besides its events."""

    schema_version: Any = None
    #: ``2021`` (capitalised categories) or ``current``.
    dialect: str = "current"
    #: ``distributedInfo`` with checked values (rank, world_size, backend, nccl_version).
    distributed_info: dict[str, Any] = field(default_factory=dict)
    backend: str | None = None
    #: ``deviceProperties`` (or the older ``computeProperties``) as written.
    device_properties: list[Any] = field(default_factory=list)
    base_time_ns: int = -1
    display_time_unit: str | None = None
    trace_name: str | None = None
    dataloader: DataLoaderIterators = field(default_factory=DataLoaderIterators)
    #: Trace events read.
    events: int = 0


@dataclass
class NsysMeta(ProfileMeta):
    """What an Nsight Systems export says about itself and the capture."""

    export_path: str = ""
    exporter_version: str | None = None
    export_schema: str | None = None
    export_meta_table: str | None = None
    #: ``META_DATA_CAPTURE`` name -> value (newer exports), environment variables left out.
    capture: dict[str, Any] = field(default_factory=dict)
    #: The distinct (rank, world size) each process recorded by its NVTX marks of
    #: concepts.RANK_DOMAIN (``rank 1 of 2``), by pid; empty when none did.
    recorded_ranks: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: The first mark of concepts.RANK_DOMAIN that is no rank (``rank 5 of 4``) each process
    #: recorded, and how many such it recorded, by pid (parsers.nsys.refused_rank_marks).
    refused_rank_marks: dict[int, tuple[str, int]] = field(default_factory=dict)
    #: The note among ``notes`` that says what the steps are and the phases inside them (see
    #: parsers.nsys._nvtx_structure), None without one: replaced when the steps are found again
    #: in some processes' ranges.
    steps_note: str | None = None


#: Why a profiled function's source is not shown: no file found for it ("absent"), the one
#: found edited since profiling ("edited"), it lies outside the folders sources are read from
#: ("outside"), refused otherwise ("refused": no regular Python file, a system folder...), or
#: the profile names no file ("nameless": code run from a string).
HiddenKind = Literal["absent", "edited", "outside", "refused", "nameless"]


@dataclass(frozen=True)
class SourceHidden:
    """Why a profiled function's source is not shown (decided by parsers.lprof.find_source and
    its check against the profile): the kind, and the reason the notes give."""

    kind: HiddenKind
    reason: str


@dataclass(frozen=True)
class LprofFunction:
    """One function a line_profiler file times, and whether its source is shown."""

    file: str
    function: str
    first_lineno: int
    #: The source file shown (an allowed Python file found for it), None when not shown.
    source_path: str | None
    #: Why the source is not shown, None when it is.
    source_hidden: SourceHidden | None


@dataclass(frozen=True)
class TrainingLoop:
    """The loop header line_profiler's counts point at (see parsers.lprof.training_loop): its
    counts and times, and whether, from which evidence and how surely it fetches the batches."""

    file: str
    function: str
    lineno: int
    hits: int
    #: Runs of the loop's body, and entries into the loop (the hits of the line before it).
    iterations: int
    entries: int
    #: The header hit as often as the body runs, never for a last test: every entry left through
    #: break/return.
    ended_by_break: bool
    time_ns: int
    body_ns: int
    largest_body_line_ns: int
    #: The body line that takes ``largest_body_line_ns`` (None without a body line).
    largest_body_lineno: int | None
    #: The passes that ran the whole body, the steps: ``iterations`` less each entry's last pass
    #: when that pass left through a break before the body's last lines (``except
    #: StopIteration: break`` fetched the end of the data and trained nothing).
    steps: int
    #: The line whose time is the DataLoader wait: the header (``next(loader)`` runs in it) or,
    #: for a header that counts passes, the body line fetching each batch from a DataLoader's
    #: iterator; None when the profile cannot tell the wait.
    wait_lineno: int | None
    wait_ns: int
    #: ``source`` (the line shown iterates over a DataLoader, or counts passes: over ``range()``
    #: or a literal, or a ``while`` whose test calls nothing), ``name`` (as ``source``, but only
    #: a name says the DataLoader is one: no assignment shown tells, pysource.named_only) or
    #: ``hit counts`` (no source shown, or a line shown that names no DataLoader).
    evidence: str = "hit counts"
    #: Whether the loop is taken for the DataLoader loop.
    dataloader: bool = False
    #: ``high`` (source), ``medium``, ``low`` or ``none`` (hit counts: how many signs agree).
    confidence: str = "none"
    #: Hit-count signs: the header takes more time than any line of its body; the function's
    #: name says it trains.
    header_is_largest: bool = False
    training_name: bool = False
    #: Whether the header's source line was shown (hit counts then decide because the line
    #: names no DataLoader).
    source_shown: bool = False
    #: The header shown counts passes (over ``range()`` or a literal, or a ``while`` whose test
    #: calls nothing: pysource.counts_passes): it fetches nothing, and the batch is fetched in
    #: the body.
    counts_passes: bool = False
    #: For such a header: the body line that fetches each batch (``batch = next(it)``), the
    #: iterator it fetches from (``it``) and what the source shows that iterator to be
    #: (``iter(train_loader)``; None when it does not show).
    fetch_lineno: int | None = None
    fetch_from: str | None = None
    fetch_origin: str | None = None
    #: With ``name`` evidence: what the header iterates over, or the iterator fetched from,
    #: whose name alone says it holds a DataLoader (``train_loader``, a parameter).
    named_by: str | None = None


@dataclass
class LprofMeta(ProfileMeta):
    """What a line_profiler file says: its unit, functions and the training loop found."""

    #: Seconds per timer tick.
    unit: float = 0.0
    functions: list[LprofFunction] = field(default_factory=list)
    pickle_protocol: int | None = None
    class_path: str = ""
    #: The training loop, None when none was found.
    loop: TrainingLoop | None = None
    #: The DataLoader knobs the shown source gives (pysource.loader_call_knobs), those its
    #: DataLoader(...) calls agree on; empty when it shows none.
    loader_knobs: dict[str, object] = field(default_factory=dict)
    #: Where those calls are (``train.py line 12``).
    loader_calls: str = ""


@dataclass
class Profile:
    """One parsed profile file: where it came from, and its tables."""

    path: Path
    kind: SourceKind
    tool_version: str | None = None
    rank: int | None = None
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    meta: ProfileMeta = field(default_factory=ProfileMeta)
    #: The process this profile holds of a capture of several (an nsys pid, with the host and VM
    #: ids above bit 24 when the capture spans several hosts); None for a whole file.
    process: int | None = None

    def table(self, name: str) -> pd.DataFrame:
        """The table called ``name``, or an empty one with its columns when the file has none."""
        if name not in TABLE_SCHEMAS:
            raise KeyError(f"unknown table {name!r}")
        table = self.tables.get(name)
        return empty_table(name) if table is None else table

    def has(self, name: str) -> bool:
        """Whether the profile holds at least one row of table ``name``."""
        return name in self.tables and not self.tables[name].empty


#: The tables whose rows are what a profile watched the program do, on the CPU and the devices:
#: its device work, runtime calls, operators, annotated ranges, steps and DataLoader fetches (a
#: fetch can be a Python function's span alone). Not the GPU sync records (a wait ends with the
#: work it waits on, or with the call that waits) nor the CPU collective calls (operators or
#: ranges too), nor the OS runtime calls (nsys: every thread's waits and polls, whatever it
#: runs) or the allocator's events (instants, no spans).
PROFILED_TABLES = ("kernels", "memcpy", "memset", "runtime", "cpu_ops", "ranges", "steps",
                   "dataloader")


def profiled_span(profile: Profile) -> tuple[int, int] | None:
    """The profiled span: the first start to the last end of the rows of PROFILED_TABLES (ns),
    what the profiler watched; None when they hold no row. What a profile without steps is
    measured over, where one with steps is measured over its step windows: the GPU's busy share,
    the operators' share of time, start-up only."""
    frames = [profile.table(name) for name in PROFILED_TABLES if profile.has(name)]
    if not frames:
        return None
    return (min(int(f["start"].min()) for f in frames), max(int(f["end"].max()) for f in frames))


#: A process id above this holds the host and VM ids nsys packs above the pid's 24 bits.
PID_BITS = 24


def process_label(process: int) -> str:
    """A process as a report names it: ``pid 4242``, or ``pid 4242 of host/VM 257`` when the
    capture spans several hosts (see Profile.process)."""
    host, pid = process >> PID_BITS, process & ((1 << PID_BITS) - 1)
    return f"pid {pid}" + (f" of host/VM {host}" if host else "")
