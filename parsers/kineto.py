"""torch.profiler (Kineto) traces, ``.json`` or ``.json.gz``: what the events mean, as tables.

Reading is split along its seams, as the nsys parser's is: :mod:`parsers.kineto_stream` streams
the text and cuts it into event batches (in parallel byte ranges for a large plain ``.json``),
:mod:`parsers.kineto_columns` decodes each batch into checked numpy columns, and this module
says what the columns mean: which category is which table, where steps come from, what the
header says about devices and the distributed job.

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
values. A field whose value is JSON null reads as one the event lacks (the profiler recorded
nothing there): an event without ``name`` is kept and named
:data:`~profreport.concepts.UNRECORDED_NAME`, one without ``args`` or an id in them is kept with
that value unknown, one without ``ts``/``dur`` is dropped as such. Limits
(``profreport.inputs``) refuse a file with one line: decompressed size, events, name length, one
event's size, JSON nesting.

``[memory]`` instant events (``profile_memory=True``) go to ``memory`` in both dialects: 2021
ones carry ``Device Type``, ``Device Id`` and ``Bytes``; current ones add ``Total Allocated``,
``Total Reserved`` and ``Addr``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from profreport import concepts
from profreport.allocator import give_back_freed_memory
from profreport.errors import UnsupportedFormatError
from profreport.model import (
    DataLoaderIterators,
    KinetoMeta,
    Profile,
    categorical,
    conform,
    id_categorical,
    nothing_recorded,
    objects,
    process_label,
    sorted_times,
)
from profreport.parsers.kineto_columns import (
    ColumnBuilder,
    Columns,
    Symbols,
    as_int,
    by_time,
    checked_int,
    concat,
    thread_numbers,
)
from profreport.parsers.kineto_stream import read_trace
from profreport.parsers.repeats import (
    PassEnds,
    masked_numbers,
    on_busiest_thread,
    pass_ends,
    steps_from_repeats,
    top_level,
    unrecorded_names_reason,
)
from profreport.text import error_text
from profreport.units import duration

if TYPE_CHECKING:  # the registry imports this module, never the other way round
    from profreport.parsers import ParseOptions

#: Kineto's ``schemaVersion`` values this parser knows (every release so far writes 1).
SUPPORTED_SCHEMA_VERSIONS = frozenset({1})

#: Categories that exist only in the 2021 dialect.
LEGACY_CATS = frozenset({"Operator", "Kernel", "Runtime", "Memcpy", "Memset"})
#: MTIA command-processor events that wait for or mark an event (the ``sync`` table).
ACCELERATOR_SYNC_NAMES = frozenset({"event_wait", "event_record"})
#: MTIA command-processor events that move data (the ``memcpy`` table).
ACCELERATOR_COPY_NAMES = frozenset({"dma_request"})
#: MTIA ``dma_request`` directions as copy kinds, with the memory at each end.
ACCELERATOR_COPY_KINDS = {"HOST_TO_DEVICE": ("HtoD", concepts.UNKNOWN_KIND, "Device"),
                          "DEVICE_TO_HOST": ("DtoH", "Device", concepts.UNKNOWN_KIND),
                          "DEVICE_TO_DEVICE": ("DtoD", "Device", "Device")}
#: Header members that list the accelerators, in the order they are looked for.
DEVICE_LIST_KEYS = ("deviceProperties", "computeProperties")
#: The names a note lists at most (the rest as ``...``): a few tell what they are.
NAMES_SHOWN = 3
#: The stores (:data:`kineto_columns.GROUPS`) the device-side tables and API calls are built from.
DEVICE_GROUPS = frozenset({"kernel", "accelerator", "memcpy", "memset", "sync", "runtime"})


def _check_schema_version(header: dict[str, Any], path: Path) -> None:
    """Refuse a ``schemaVersion`` this parser does not know (a missing one is accepted)."""
    version = header.get("schemaVersion")
    if version is not None and version not in SUPPORTED_SCHEMA_VERSIONS:
        raise UnsupportedFormatError(
            f"Kineto schemaVersion {version!r} is not supported (known: "
            f"{sorted(SUPPORTED_SCHEMA_VERSIONS)})", path)


class _Tables:
    """Builds the Profile tables from a trace's columns and symbol tables."""

    def __init__(self, builder: ColumnBuilder) -> None:
        self.stores = builder.stores
        self.names = builder.names.values()
        self.details = builder.details.values()
        self.thread_numbers = thread_numbers(builder.threads)
        self.metadata = builder.metadata
        self.flows = builder.flows()
        spans = np.concatenate([self.stores[name].distinct_names()
                                for name in ("cpu_op", "annotation")])
        self.is_step = _per_name(self.names, lambda s: concepts.step_numbers(s).notna(),
                                 spans).astype(bool)
        # In the 2021 dialect the Operator category holds the program's spans too (it has no
        # user_annotation): those are ranges, not operators (concepts.is_program_span).
        self.is_range = self.is_step.copy()
        if _dialect(builder.cats) == "2021":
            self.is_range |= _program_spans(self.names, spans, builder.with_inputs)

    def rows(self, store: str) -> Columns:
        """The events of one store: a group of categories or named spans (kineto_columns)."""
        return self.stores[store].columns()

    def release(self, stores: tuple[str, ...]) -> None:
        """Free the columns of ``stores`` (their tables are built)."""
        for store in stores:
            self.stores[store].release()

    def named(self, rows: Columns, wanted: frozenset[str], keep: bool = True) -> Columns:
        """The rows whose name is (``keep``) or is not in ``wanted``."""
        ids = [i for i, name in enumerate(self.names) if name in wanted]
        return rows.take(np.isin(rows.name, ids) == keep)

    def cpu(self, rows: Columns, categorical: bool = False) -> pd.DataFrame:
        """start, end, pid, tid and name of CPU-side events; when asked (the operators and the
        API calls, millions of rows), the names as a categorical (see
        :meth:`categorical_names`) and pid and tid as categoricals of their ids (a one-byte
        code a row where the numbers take 4: :func:`model.id_categorical`)."""
        if categorical:
            return pd.DataFrame({
                "start": rows.start, "end": rows.end,
                "pid": id_categorical(self.thread_numbers, rows.pid),
                "tid": id_categorical(self.thread_numbers, rows.tid),
                "name": self.categorical_names(rows.name)}, copy=False)
        return pd.DataFrame({
            "start": rows.start, "end": rows.end, "pid": self.thread_numbers[rows.pid],
            "tid": self.thread_numbers[rows.tid], "name": objects(self.names[rows.name]),
        }, copy=False)

    def categorical_names(self, ids: np.ndarray, texts: np.ndarray | None = None
                          ) -> pd.Categorical:
        """The names of the name ``ids`` (``texts`` by name id: the trace's names, or names
        made from them) as a categorical of the distinct names among them, sorted (as the nsys
        parser keeps its names): one small code per row instead of an 8-byte reference, made
        from the interned ids without hashing a row."""
        return categorical(self.names if texts is None else texts, ids)

    def gpu(self, rows: Columns) -> pd.DataFrame:
        """start, end, device, stream, correlation and name of device activities.

        The device is ``args.device``, else the event's pid (Kineto files device work under the
        device's number); the correlation is ``args.correlation``, else the ``ac2g`` flow's id.
        """
        pid = self.thread_numbers[rows.pid]
        return pd.DataFrame({
            "start": rows.start, "end": rows.end,
            "device": np.where(rows.device >= 0, rows.device, pid), "stream": rows.stream,
            "correlation": self._correlation(rows),
            "name": objects(self.names[rows.name]),
        }, copy=False)

    def _correlation(self, rows: Columns) -> np.ndarray:
        """Each row's correlation id, from the ``ac2g`` flow ending on it when args lack one."""
        missing = np.flatnonzero(rows.correlation < 0)
        if not len(missing) or self.flows.empty:
            return rows.correlation
        correlation = rows.correlation.astype(np.int64)
        wanted = pd.DataFrame({"pid": rows.pid[missing], "tid": rows.tid[missing],
                               "start": rows.start[missing], "row": missing})
        found = wanted.merge(self.flows.drop_duplicates(["pid", "tid", "start"]),
                             on=["pid", "tid", "start"])
        correlation[found["row"].to_numpy()] = found["flow"].to_numpy()
        return correlation

    def device_tables(self) -> dict[str, pd.DataFrame]:
        """The device-side tables and the API calls, each group's columns freed (and the memory
        given back) as soon as the last table that reads them is built."""
        out = {}
        for table, build, done in (("kernels", self.kernels, ("kernel",)),
                                   ("memcpy", self.memcpy, ("memcpy",)),
                                   ("memset", self.memset, ("memset",)),
                                   ("sync", self.sync, ("sync", "accelerator")),
                                   ("runtime", self.runtime, ("runtime",))):
            out[table] = build()
            self.release(done)
            if table == "sync":  # the last table whose correlations may come from flows
                self.flows = self.flows.iloc[:0]
            give_back_freed_memory()
        return out

    def cpu_ops(self) -> pd.DataFrame:
        """Framework operators, without the ProfilerStep spans and the 2021 dialect's program
        spans (those are ranges)."""
        rows = self.rows("cpu_op")
        return conform("cpu_ops", self.cpu(rows.take(~self.is_range[rows.name]),
                                           categorical=True))

    def ranges(self) -> pd.DataFrame:
        """User annotations, plus ProfilerStep spans recorded as operators and, in the 2021
        dialect, the spans the program opened (``DistributedDataParallel.forward``...: see
        concepts.is_program_span), which that dialect records as operators."""
        ops = self.rows("cpu_op")
        frame = pd.concat([self.cpu(self.rows("annotation")),
                           self.cpu(ops.take(self.is_range[ops.name]))], ignore_index=True)
        frame["domain"] = ""
        return conform("ranges", by_time(frame))

    def kernels(self) -> pd.DataFrame:
        """Device kernels (MTIA's executions too) with short names and communication flag."""
        accelerator = self.rows("accelerator")
        rows = concat(self.rows("kernel"), self.named(
            accelerator, ACCELERATOR_SYNC_NAMES | ACCELERATOR_COPY_NAMES, keep=False))
        frame = self.gpu(rows)
        short = _per_name(self.names, lambda s: s.map(concepts.short_kernel_name), rows.name)
        comm = _per_name(self.names, concepts.is_comm_kernel, rows.name)
        frame["name"] = self.categorical_names(rows.name)
        frame["short_name"] = self.categorical_names(rows.name, short)
        frame["is_comm"] = comm[rows.name].astype(bool)
        return conform("kernels", by_time(frame))

    def memcpy(self) -> pd.DataFrame:
        """Device copies with direction, memory kinds and size."""
        frame = pd.concat([self._named_copies(), self._accelerator_copies()], ignore_index=True)
        return conform("memcpy", by_time(frame))

    def _named_copies(self) -> pd.DataFrame:
        """Device copies: the direction the profiler recorded (``args.kind``, as ROCm writes
        it) or else the one the name says (``Memcpy HtoD (Pageable -> Device)``), classified
        once per distinct name and kind."""
        rows = self.rows("memcpy")
        frame = self.gpu(rows)
        pairs = np.stack([rows.name.astype(np.int64), rows.detail.astype(np.int64)], axis=1)
        distinct, row_part = np.unique(pairs, axis=0, return_inverse=True)
        parts = concepts.copy_kinds(pd.Series(self.names[distinct[:, 0]], dtype=object),
                                    pd.Series(self.details[distinct[:, 1]], dtype=object))
        row_part = row_part.reshape(-1)
        for column in parts.columns:
            frame[column] = parts[column].to_numpy()[row_part]
        frame["bytes"] = rows.bytes
        return frame

    def _accelerator_copies(self) -> pd.DataFrame:
        """MTIA DMA requests: direction in ``args.direction``, size in ``args.size``."""
        rows = self.named(self.rows("accelerator"), ACCELERATOR_COPY_NAMES)
        frame = self.gpu(rows)
        kinds = [ACCELERATOR_COPY_KINDS.get(str(d), (concepts.UNKNOWN_KIND,) * 3)
                 for d in self.details[rows.detail]]
        for index, column in enumerate(("kind", "src_kind", "dst_kind")):
            frame[column] = [kind[index] for kind in kinds]
        frame["bytes"] = rows.bytes
        return frame

    def memset(self) -> pd.DataFrame:
        """GPU memsets with their size."""
        rows = self.rows("memset")
        frame = self.gpu(rows)
        frame["bytes"] = rows.bytes
        return conform("memset", frame)

    def sync(self) -> pd.DataFrame:
        """Device-side synchronisation: CUPTI ``cuda_sync`` records, MTIA event waits/records."""
        rows = concat(self.rows("sync"),
                       self.named(self.rows("accelerator"), ACCELERATOR_SYNC_NAMES))
        frame = self.gpu(rows)
        detail = self.details[rows.detail]
        frame["kind"] = np.where(pd.isna(detail), frame["name"], detail)
        return conform("sync", by_time(frame))

    def runtime(self) -> pd.DataFrame:
        """Runtime and driver calls (CUDA, HIP, MTIA...), names without their version suffix."""
        self.stores["runtime"].in_time_order()  # as the device tables are: unions need no sort
        rows = self.rows("runtime")
        stripped = _per_name(self.names, lambda s: s.map(concepts.strip_api_version), rows.name)
        frame = self.cpu(rows, categorical=True)
        frame["name"] = self.categorical_names(rows.name, stripped)
        frame["correlation"] = rows.correlation
        return conform("runtime", frame)

    def steps(self, ranges: pd.DataFrame, loader: pd.DataFrame
              ) -> tuple[pd.DataFrame, str | None, str | None, tuple[pd.DataFrame, pd.DataFrame]]:
        """One row per iteration, the span name it came from (None for ProfilerStep), the note
        saying why there are none where spans of no recorded name repeat (no evidence of a
        pass: see repeats.steps_from_repeats), else None, and the step marks of the stepping
        thread and those of the other threads, left out (see :func:`_one_process`; both empty
        where the steps come from no marks).

        ``ProfilerStep#N`` spans, else a user's ``step N`` ranges (origin ``step range``; see
        concepts.step_marks), of the thread that records the most (concepts.stepping_thread:
        torch.profiler writes one process's trace, whose ``prof.step()`` is called on one
        thread), when the trace has them; else the stretches between the ends
        of consecutive optimizer steps (one of each optimizer per iteration: see
        _first_optimizers_steps, which reads the DataLoader's ``loader`` spans); else the
        occurrences of the top-level span that repeats most on the busiest thread (numbers
        masked, the one that counts the passes first, as nsys ranges are read) that the
        program opened, never an operator the dispatcher recorded (``aten::``...), each its
        own extent (the parser then takes each from its start to the next one's:
        _repeated_span_steps). ``origin`` says which.
        """
        marks = concepts.step_marks(ranges)
        if not marks.empty:
            mine = concepts.stepping_thread(marks)
            frame = marks[mine]
            origin = (concepts.PROFILER_STEP if concepts.is_profiler_step_span(frame["name"]).all()
                      else "step range")
            return (conform("steps", concepts.one_row_per_step(frame).assign(origin=origin)),
                    None, None, (frame, marks[~mine]))
        # The operators' category (cpu_op; the 2021 dialect's Operator, which holds its
        # annotations too) is the dispatcher's record of one operator, which repeats per layer
        # or parameter (aten::uniform_ while a model is built): only a span the program opened
        # (record_function: user_annotation) marks a pass.
        spans = pd.concat([self.cpu(self.rows("cpu_op")).assign(operator=True),
                           self.cpu(self.rows("annotation")).assign(operator=False)],
                          ignore_index=True)
        optimizer = spans[concepts.is_optimizer_step_span(spans["name"])]
        # One step recorded twice, nested (a user's ``## optimizer ##`` annotation around
        # torch's ``Optimizer.step#SGD.step``, as in HTA's traces), is one step: its outer span.
        optimizer = top_level(on_busiest_thread(optimizer)) if len(optimizer) else optimizer
        if len(optimizer) >= 2:
            return (*_first_optimizers_steps(optimizer, spans, loader), None, (marks, marks))
        steps, span = steps_from_repeats(spans, concepts.REPEATED_SPAN, masked_numbers,
                                         never="operator")
        reason = None if span is not None else unrecorded_names_reason(
            spans[~spans["operator"].to_numpy(bool)], "spans")
        return steps, span, reason and (f"no ProfilerStep span, optimizer step or repeated span "
                                        f"of a recorded name: {reason}, so the steps are "
                                        "unknown"), (marks, marks)

    def named_rows(self, store: str) -> pd.DataFrame:
        """The CPU-side spans picked by name as they were read (``NAMED_SPANS``), by start."""
        rows = self.rows(store)
        frame = self.cpu(rows)
        if store == "cpu_collectives":
            frame = frame.assign(bytes=rows.bytes, collective=objects(self.details[rows.detail]))
        return by_time(frame.drop_duplicates())

    def dataloader(self) -> pd.DataFrame:
        """Fetches of the next batch, every loader's (which fed training, the analysis tells:
        reports.analysis.dataloader), from operators, annotations and Python functions."""
        return conform("dataloader", self.named_rows("dataloader"))

    def python_work(self, steps: pd.DataFrame) -> pd.DataFrame:
        """The Python functions (start, pid, name) that may lie past the occurrences of the
        repeated span the ``steps`` come from: those of its process starting at or after the
        first one's end (work of that process, see repeats.pass_ends); none for steps of
        another origin."""
        ids, since = np.empty(0, dtype=np.int64), 0
        if not steps.empty and steps["origin"].eq(concepts.REPEATED_SPAN).all():
            ids = np.flatnonzero(self.thread_numbers == steps["pid"].iloc[0])
            since = int(steps["end"].iloc[0])
        rows = self.stores["python"].rows_where(
            lambda block: np.isin(block["pid"], ids) & (block["start"] >= since))
        return pd.DataFrame({"start": rows["start"], "pid": self.thread_numbers[rows["pid"]],
                             "name": objects(self.names[rows["name"]])})

    def cpu_collectives(self) -> pd.DataFrame:
        """Collective calls on the CPU (c10d, gloo, nccl, record_param_comms)."""
        return conform("cpu_collectives", self.named_rows("cpu_collectives"))

    def threads(self) -> pd.DataFrame:
        """Thread names from the ``thread_name`` metadata events (the last name wins)."""
        named = [e for e in self.metadata if e.name == "thread_name" and e.args.name is not None]
        frame = pd.DataFrame({
            "pid": [as_int(e.pid) for e in named], "tid": [as_int(e.tid) for e in named],
            "name": [str(e.args.name) for e in named],
        })
        return conform("threads", frame.drop_duplicates(["pid", "tid"], keep="last"))


#: The tables of what the CPU ran, each row one process's (its ``pid``).
HOST_TABLES = ("ranges", "cpu_ops", "dataloader", "cpu_collectives", "op_inputs", "memory")
#: The tables of device work and syncs: whose process they are, only the launch calls linked to
#: them tell (Kineto files a device's work under the device).
WORK_TABLES = ("kernels", "memcpy", "memset", "sync")


def _one_process(frames: dict[str, pd.DataFrame], marks: tuple[pd.DataFrame, pd.DataFrame]
                 ) -> tuple[dict[str, pd.DataFrame], str | None]:
    """The tables of the process whose thread marks the steps (``marks``: its marks, and those
    of the other threads, left out: concepts.stepping_thread), and the note saying what was
    left out; the tables as they are and None where no other thread marks steps.

    Another thread of the same process (another loop's) marks no step, and its rows are read
    with the steps, each stretch of time once. Another process's (another rank's, as in traces
    of several ranks read as one) runs a loop of its own: its fetches, operators and spans are
    left out, and so are its launch calls and the device work on the GPUs only its calls
    launched (:func:`_devices_launched`), so that the step figures are one loop's. Where the
    launch calls do not tell whose some GPU's work is, the calls and every GPU's work are kept
    and the note says the GPU figures read every process's work."""
    mine, others = marks
    if others.empty:
        return frames, None
    pid = int(mine["pid"].iloc[0])
    threads = len(others.groupby(["pid", "tid"], observed=True))
    note = (f"step spans are recorded on {threads + 1} threads: the steps are the "
            f"{len(mine):,} spans of {process_label(pid)} thread {int(mine['tid'].iloc[0])}, "
            f"the thread that records the most; the {len(others):,} of the other "
            f"{'thread' if threads == 1 else 'threads'} (another loop's, or another process's, "
            "as in traces of several ranks read as one) cover the same time and mark no step")
    gone = sorted({int(p) for p in others["pid"].to_numpy()} - {pid})
    if not gone:
        return frames, (f"{note}; the figures over these steps read every thread's rows, each "
                        "stretch of time once")
    theirs, untold = _devices_launched(frames, pid, gone)
    kept = {name: _without(frame, "pid", gone) if name in HOST_TABLES else frame
            for name, frame in frames.items()}
    its = "its" if len(gone) == 1 else "their"
    note += (f"; the rows of {', '.join(map(process_label, gone))} (another process's loop) are "
             f"left out: {its} operators, spans, DataLoader fetches and memory events")
    if untold:
        return kept, (f"{note}, not {its} launch calls: whose the work on {_gpus(untold)} is, no "
                      "launch call tells (it is linked to calls of several processes, or to "
                      "none), so the launch calls and every GPU's work are kept: the CPU "
                      f"figures are {process_label(pid)}'s, the GPU figures read every "
                      "process's work")
    kept["runtime"] = _without(frames["runtime"], "pid", gone)
    for name in WORK_TABLES:
        kept[name] = _without(frames[name], "device", theirs)
    work = f", and the work on {_gpus(theirs)}, which only {its} calls launched" if theirs else ""
    return kept, (f"{note}, {its} launch calls{work}; the figures are "
                  f"{process_label(pid)}'s")


def _devices_launched(frames: dict[str, pd.DataFrame], pid: int, gone: list[int]
                      ) -> tuple[list[int], list[int]]:
    """The devices whose work (kernels, copies, memsets, syncs) was launched by calls of the
    ``gone`` processes alone, and those whose work no launch call tells: none of it is linked
    to a call, or it is linked to calls of another process and of ``pid`` (or of a process that
    is neither). A row is linked to the runtime calls of its correlation id; a row linked to
    none (launched before the trace began) tells nothing."""
    runtime = frames["runtime"]
    calls = pd.DataFrame({"correlation": runtime["correlation"].to_numpy(np.int64),
                          "pid": runtime["pid"].to_numpy(np.int64)})
    work = pd.concat([pd.DataFrame({"device": frames[name]["device"].to_numpy(np.int64),
                                    "correlation": frames[name]["correlation"]
                                    .to_numpy(np.int64)})
                      for name in WORK_TABLES], ignore_index=True)
    linked = work.merge(calls[calls["correlation"] >= 0].drop_duplicates(), on="correlation")
    launchers = linked.groupby("device")["pid"].agg(frozenset).to_dict()
    theirs = sorted(d for d, by in launchers.items() if by <= set(gone))
    untold = sorted(d for d in pd.unique(work["device"]).tolist()
                    if launchers.get(d, frozenset()) != {pid} and d not in theirs)
    return theirs, untold


def _without(frame: pd.DataFrame, column: str, values: list[int]) -> pd.DataFrame:
    """``frame`` less the rows whose ``column`` holds one of ``values``."""
    gone = np.isin(frame[column].to_numpy(), values)
    return frame[~gone].reset_index(drop=True) if gone.any() else frame


def _gpus(devices: list[int]) -> str:
    """Devices as a note names them: ``GPU 1``, ``GPUs 1, 2``."""
    return f"GPU{'s' if len(devices) > 1 else ''} {', '.join(map(str, devices))}"


def _first_optimizers_steps(optimizer: pd.DataFrame, spans: pd.DataFrame, loader: pd.DataFrame
                            ) -> tuple[pd.DataFrame, str | None]:
    """Iterations between the ends of the first optimizer's steps, and its class when the
    spans name several (a GAN's SGD and Adam: one step of each is one iteration, as the
    runner's step marks count them). Optimizers of one class (a GAN's two Adams) are told
    apart by what an iteration holds (:func:`optimizers_per_iteration`): every k-th step; all
    the steps when nothing tells (None for the class then)."""
    optimizer = optimizer.sort_values("start", kind="stable")
    classes = optimizer["name"].map(concepts.optimizer_class)
    first = classes.iloc[0]
    if first is not None and classes.nunique() >= 2 and (classes == first).sum() >= 2:
        return _steps_between_ends(optimizer[(classes == first).to_numpy()]), str(first)
    every = optimizers_per_iteration(optimizer, spans, loader)
    return _steps_between_ends(optimizer.iloc[::every]), (str(first) if every > 1 and first
                                                          else None)


def optimizers_per_iteration(optimizer: pd.DataFrame, spans: pd.DataFrame,
                             loader: pd.DataFrame) -> int:
    """How many optimizer steps (``optimizer``, by start, of one class or unnamed) make one
    iteration: an iteration fetches one batch, so the steps between two DataLoader fetches
    when that count is the same for every fetch some step follows (a validation loop's fetches
    hold none between them and count for nothing; one too: one optimizer whose steps update
    other parameters from batch to batch is still one step per batch); else the period of
    what each step does (the operators it runs: each optimizer updates its own parameters),
    its first period left out (a first step creates the optimizer's state); 1 when neither
    tells."""
    fetched = np.searchsorted(sorted_times(loader["start"].to_numpy(np.int64)),
                              optimizer["start"].to_numpy(np.int64))
    per_fetch = np.unique(np.unique(fetched, return_counts=True)[1][1:-1])
    if len(per_fetch) == 1:
        return int(per_fetch[0])
    return _period(_operators_inside(optimizer, spans))


def _operators_inside(optimizer: pd.DataFrame, spans: pd.DataFrame) -> np.ndarray:
    """How many operators start inside each optimizer step on its thread."""
    ops = spans[spans["operator"].to_numpy(bool)
                & (spans["pid"] == optimizer["pid"].iloc[0]).to_numpy()
                & (spans["tid"] == optimizer["tid"].iloc[0]).to_numpy()
                & ~concepts.is_optimizer_step_span(spans["name"]).to_numpy(bool)]
    starts = sorted_times(ops["start"].to_numpy(np.int64))
    return (np.searchsorted(starts, optimizer["end"].to_numpy(np.int64))
            - np.searchsorted(starts, optimizer["start"].to_numpy(np.int64)))


def _period(values: np.ndarray) -> int:
    """The shortest k > 1 with which ``values`` repeat (from their k-th on, over at least two
    periods) and whose first k differ; 1 when there is none."""
    for k in range(2, len(values) // 3 + 1):
        tail = values[k:]
        if (tail[k:] == tail[:-k]).all() and len(set(tail[:k].tolist())) > 1:
            return k
    return 1


def _alternating_steps_note(steps: pd.DataFrame, span: str | None, cpu_ops: pd.DataFrame
                            ) -> str | None:
    """A note when every optimizer step was taken for an iteration (nothing told several
    optimizers of one class apart: see optimizers_per_iteration) but what the steps run
    alternates: the operators each step's window holds repeat with a period k > 1 (a GAN's
    discriminator step runs the discriminator twice, its generator step once), as k optimizers
    taking turns do; a loop of one optimizer runs the same operators every step. None
    otherwise."""
    if span is not None or not steps["origin"].eq(concepts.OPTIMIZER_STEPS).all():
        return None
    mine = cpu_ops[(cpu_ops["pid"] == steps["pid"].iloc[0]).to_numpy()]
    starts = sorted_times(mine["start"].to_numpy(np.int64))
    held = (np.searchsorted(starts, steps["end"].to_numpy(np.int64))
            - np.searchsorted(starts, steps["start"].to_numpy(np.int64)))
    every = _period(held)
    if every == 1:
        return None
    turns = ", ".join(f"{count:,}" for count in held[every:2 * every])
    return (f"the operators the steps run repeat every {every} steps ({turns} operators in "
            f"turn), as {every} optimizers of one class taking turns do (a GAN's generator and "
            f"discriminator): if so, an iteration is {every} of these steps and takes {every} "
            "times the step time shown; nothing the steps record names the optimizer each "
            "belongs to")


def _steps_between_ends(optimizer: pd.DataFrame) -> pd.DataFrame:
    """Iterations as the time from one optimizer step's end to the next one's end."""
    ends = optimizer["end"].to_numpy()
    frame = pd.DataFrame({"number": np.arange(1, len(ends)), "start": ends[:-1],
                          "end": ends[1:], "pid": optimizer["pid"].iloc[0],
                          "tid": optimizer["tid"].iloc[0],
                          "origin": concepts.OPTIMIZER_STEPS})
    return conform("steps", frame)


def _program_spans(names: np.ndarray, ids: np.ndarray, with_inputs: set[int]) -> np.ndarray:
    """Which of the 2021 dialect's span names ``ids`` are spans the program opened
    (concepts.is_program_span), told by their recorded inputs where the trace records any
    (``with_inputs``: the name ids whose events recorded one); indexed by name id."""
    distinct = np.unique(ids)
    records = np.isin(distinct, np.fromiter(with_inputs, np.int64, len(with_inputs)))
    out = np.zeros(len(names), dtype=bool)
    out[distinct] = concepts.is_program_span(pd.Series(names[distinct], dtype=object),
                                             records if with_inputs else None).to_numpy(bool)
    return out


def _per_name(names: np.ndarray, rule: Any, ids: np.ndarray) -> np.ndarray:
    """Apply a vectorised name ``rule`` once per distinct name among ``ids``; index by name id."""
    distinct = np.unique(ids)
    out = np.empty(len(names), dtype=object)
    out[distinct] = np.asarray(rule(pd.Series(names[distinct], dtype=object)), dtype=object)
    return out


def _header_int(value: Any) -> int:
    """A non-negative int64 from the header, -1 when it is anything else."""
    number = checked_int(value) if not isinstance(value, str) else None
    return -1 if number is None else number


def _device_list(header: dict[str, Any]) -> Any:
    """The header's accelerator list: ``deviceProperties``, or ``computeProperties`` as some
    Kineto builds named it."""
    return next((header[key] for key in DEVICE_LIST_KEYS if key in header), None)


def _devices(header: dict[str, Any]) -> pd.DataFrame:
    """Accelerators listed in ``deviceProperties`` (or ``computeProperties``)."""
    listed = _device_list(header)
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
    # A rank lies inside its world, or, where the world size is not usable, inside any job's.
    ranks = world if 1 <= world <= concepts.MAX_WORLD_SIZE else concepts.MAX_WORLD_SIZE
    checked = {"world_size": world if 1 <= world <= concepts.MAX_WORLD_SIZE else None,
               "rank": rank if 0 <= rank < ranks else None,
               "backend": info.get("backend") if isinstance(info.get("backend"), str) else None,
               "nccl_version": (info.get("nccl_version")
                                if isinstance(info.get("nccl_version"), str) else None)}
    for key in ("world_size", "rank", "backend", "nccl_version"):
        if key in info and checked[key] is None:
            dropped[f"distributedInfo.{key} is not usable"] += 1
    return checked


def _dataloader_meta(loader: pd.DataFrame) -> DataLoaderIterators:
    """What the trace says about the DataLoader: iterator kind and its ``__next__`` calls.

    ``_MultiProcessingDataLoaderIter`` means worker processes (their number is not recorded in
    the trace), ``_SingleProcessDataLoaderIter`` means ``num_workers=0``.
    """
    names = loader["name"].astype(str)
    multi = int(names.str.contains("_MultiProcessingDataLoaderIter").sum())
    single = int(names.str.contains("_SingleProcessDataLoaderIter").sum())
    workers = "multi-process" if multi and not single else (
        "single-process" if single and not multi else ("both" if multi else "unknown"))
    return DataLoaderIterators(workers, multi_process_next_calls=multi,
                               single_process_next_calls=single)


def _dialect(cats: Symbols) -> str:
    """``2021`` when the trace uses the old capitalised categories, else ``current``."""
    return "2021" if any(str(cat) in LEGACY_CATS for cat in cats.values()) else "current"


def _meta(header: dict[str, Any], dialect: str, distributed: dict[str, Any]) -> KinetoMeta:
    """What the analysis may want from the header: distributed setup, devices, clock base."""
    devices = _device_list(header)
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
        records_torch_spans=True, records_process_group=True,
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
    header, builder = read_trace(path)
    give_back_freed_memory()
    _check_schema_version(header, path)
    dialect = _dialect(builder.cats)
    distributed = _distributed(header, builder.dropped)
    tables = _Tables(builder)
    # The operators' tables first (the largest), while the device work is still held compact.
    ranges = tables.ranges()
    fetches = tables.dataloader()
    cpu_ops = tables.cpu_ops()
    steps, step_span, steps_said, marks = tables.steps(ranges, fetches)
    python = tables.python_work(steps)
    collectives = tables.cpu_collectives()
    tables.release(tuple(name for name in tables.stores if name not in DEVICE_GROUPS))
    give_back_freed_memory()
    device = tables.device_tables()
    meta = _meta(header, dialect, distributed)
    meta.dropped = dict(builder.dropped)
    meta.notes = [f"{count:,} records dropped: {reason}"
                  for reason, count in sorted(meta.dropped.items()) if count]
    meta.step_span, meta.events = step_span, builder.events
    frames = {
        **device, "ranges": ranges,
        "cpu_ops": cpu_ops, "steps": steps, "dataloader": fetches,
        "cpu_collectives": collectives,
        "devices": _devices(header), "threads": tables.threads(),
        "memory": builder.memory.frame(),
        "op_inputs": builder.op_inputs.frame(tables.names, tables.thread_numbers),
    }
    frames, one_process = _one_process(frames, marks)
    meta.dataloader = _dataloader_meta(frames["dataloader"])
    frames["steps"], frames["ranges"], closing = _without_closing_span(frames)
    frames["steps"], ends, unended = _repeated_span_steps(frames, python, step_span)
    steps = frames["steps"]
    meta.steps_hold_passes = ends is not None and ends.holds_pass
    if not steps.empty:
        meta.notes += filter(None, [concepts.steps_note(steps["origin"].iloc[0], step_span,
                                                        len(steps), _last_step_text(ends)),
                                    _alternating_steps_note(steps, step_span,
                                                            frames["cpu_ops"])])
    meta.notes += filter(None, [steps_said, one_process])
    meta.notes += closing + unended
    meta.empty = nothing_recorded(frames, sum(meta.dropped.values()))
    give_back_freed_memory()
    return Profile(path=path, kind="kineto",
                   tool_version=_tool_version(header, dialect, distributed),
                   rank=distributed.get("rank"), tables=frames, meta=meta)


def _without_closing_span(frames: dict[str, pd.DataFrame]
                          ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The steps and ranges less a last ProfilerStep span in which nothing is recorded, and the
    note saying so: prof.step() opens the next span as the profiler stops (torch 2.13 under
    schedule(warmup=0) records a ~20 µs ``ProfilerStep#N`` holding no operator after the last
    iteration, or alone), which is no iteration: taken for one, it made the iteration before
    it look like start-up and gave the per-step figures its emptiness. Releases of memory alone
    do not make it one: under profile_memory=True the tensors freed as the loop ends are
    recorded in it (the runner's DDP ranks: a 68 ms span holding 4 ``[memory]`` releases, which
    made 2 all-reduces per step read 1.6); an allocation is work of a step."""
    steps, ranges = frames["steps"], frames["ranges"]
    if steps.empty or not steps["origin"].eq(concepts.PROFILER_STEP).all():
        return steps, ranges, []
    last = steps.iloc[-1]
    start, end = int(last["start"]), int(last["end"])
    itself = (ranges["start"] == start) & (ranges["end"] == end) & concepts.is_profiler_step_span(
        ranges["name"]).to_numpy()
    memory = frames["memory"]
    held = [frame["start"] for name, frame in frames.items()
            if name not in ("steps", "ranges", "memory") and not frame.empty
            and "start" in frame.columns] + [ranges["start"][~itself],
                                             memory["time"][memory["bytes"] > 0]]
    if any(((times >= start) & (times < end)).any() for times in held):
        return steps, ranges, []
    note = (f"ProfilerStep#{int(last['number'])}, the last step span ({duration(end - start)}),"
            " holds nothing: prof.step() opened it as the profiler stopped, so it is no step")
    return steps.iloc[:-1], ranges[~itself.to_numpy()], [note]


def _repeated_span_steps(frames: dict[str, pd.DataFrame], python: pd.DataFrame,
                         span: str | None) -> tuple[pd.DataFrame, PassEnds | None, list[str]]:
    """The steps of a repeated span (the occurrences' own extents, see
    repeats.steps_from_repeats), each from its start to the next one's, what is recorded past
    them (None for steps of another origin) and the note saying when the last is no step. The
    last runs to its own end, and is no step when its pass goes on after it
    (repeats.PassEnds.last_goes_on): cut at its own end it was only that part of its pass, a
    10 ms ``backward`` among 20 ms iterations, or a DataLoader fetch alone, then taken for a
    step that only evaluates though its backward pass ran just after. Past it, the work of its
    process counts: its operators, ranges, runtime calls and collectives
    (concepts.CPU_WORK_TABLES) and its Python functions (``python``: the process runs Python
    code)."""
    steps = frames["steps"]
    if steps.empty or not steps["origin"].eq(concepts.REPEATED_SPAN).all():
        return steps, None, []
    ends = pass_ends(steps, [*(frames[name] for name in concepts.CPU_WORK_TABLES
                               if name in frames), python])
    starts, last_end = steps["start"].to_numpy(np.int64), int(steps["end"].iloc[-1])
    steps = steps.assign(end=np.r_[starts[1:], last_end])
    if not ends.last_goes_on:
        return steps, ends, []
    common = sorted(ends.common & ends.after)
    shown = ", ".join(f"'{error_text(name)}'" for name in common[:NAMES_SHOWN])
    told = (f"its process records after it what every earlier pass recorded past its span "
            f"({shown}{', ...' if len(common) > NAMES_SHOWN else ''})" if common else
            "work is recorded after it and none follows every earlier span, to tell its pass "
            "from other work")
    return steps.iloc[:-1], ends, [
        f"the last '{error_text(str(span))}' span ({duration(last_end - int(starts[-1]))}) is "
        f"no step: {told}, so its pass goes on past it and its end is unrecorded"]


def _last_step_text(ends: PassEnds | None) -> str | None:
    """How the last step of a repeated span is measured when it is kept (to its own end), and
    whether that is its whole pass, for the steps note; None otherwise."""
    if ends is None or ends.last_goes_on:
        return None
    if ends.holds_pass:
        return "no work is recorded between the spans, so each holds its whole pass"
    why = ("no work of its process is recorded after it" if not ends.after else
           "what its process records after it, none of what every earlier pass recorded past "
           "its span, is other work")
    return f"{why}, so it lacks what the others hold past their span"


def parse_input(path: Path, options: ParseOptions) -> Profile:
    """The registry's entry point (``parsers.FORMATS``); no option applies to a trace."""
    return parse(path)
