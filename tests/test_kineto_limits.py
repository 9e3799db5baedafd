"""Hostile and malformed Kineto traces: bad records dropped and counted, limits with one line,
linear time on inputs built to be slow, parallel decoding identical to the sequential one."""

from __future__ import annotations

import gzip
import json
import signal
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from profreport import concepts
from profreport.errors import InputError
from profreport.executors import ExecutorOptions
from profreport.inputs import Limit
from profreport.parsers import kineto, kineto_columns, kineto_stream
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

# Every test reads its traces both ways: the C scanner and msgspec (conftest.scan_passes).
pytestmark = pytest.mark.usefixtures("scan_passes")

# Seconds a hostile input may take before the test fails: linear parsing needs a few; the
# quadratic or unbounded behaviour these inputs provoke took minutes.
HOSTILE_BUDGET_S = 60
MB = 1 << 20


@contextmanager
def _time_budget(seconds: int) -> Iterator[None]:
    """Fail the test when the block runs longer than ``seconds``."""
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _event(name: str = "aten::mm", ts: float = 10.0, dur: float = 5.0, **extra) -> dict:
    """One CPU operator event."""
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            **extra}


def _write(path: Path, events: list, **header) -> Path:
    """A trace with the given events and top-level members."""
    path.write_text(json.dumps({"schemaVersion": 1, **header, "traceEvents": events}))
    return path


def _gzip_members(parts: list[tuple[bytes, int]]) -> bytes:
    """A gzip file of concatenated members, each ``(text, repeats)`` compressed once and
    repeated: huge decompressed sizes from a small file, built in milliseconds."""
    out = b""
    for text, repeats in parts:
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        out += (packer.compress(text) + packer.flush()) * repeats
    return out


def test_bad_values_are_dropped_and_counted(tmp_path: Path) -> None:
    """Missing/negative/impossible times (a null ts is a missing one), ids >= 2^64, wrong types:
    dropped, counted, no crash."""
    bad = [
        {"ph": "X", "cat": "cpu_op", "name": "no ts", "pid": 1, "tid": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "no dur", "pid": 1, "tid": 1, "ts": 1},
        _event("negative", dur=-5),
        _event("int64 max", dur=2**63 - 1),
        _event("far future", ts=1e30),
        _event("huge correlation", cat="cuda_runtime", args={"correlation": 2**64}),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0,
         "tid": 7, "ts": 1, "dur": 1, "args": {"bytes": 2**64 + 5, "correlation": 3}},
        _event(12345),
        _event("null ts", ts=None),
    ]
    good = [_event("ProfilerStep#1", cat="user_annotation", ts=0, dur=100), _event()]
    profile = kineto.parse(_write(tmp_path / "bad.json", bad + good,
                                  distributedInfo="rank 0 of 8"))
    assert profile.table("cpu_ops")["name"].tolist() == ["aten::mm"]
    assert profile.table("memcpy").empty and profile.table("runtime").empty
    assert profile.meta.dropped == {
        "no ts": 2, "no dur": 1, "negative dur": 1, "dur longer than possible": 1,
        "ts outside the possible range": 1, "correlation is not an int64": 1,
        "bytes is not an int64": 1, "name of an unexpected type": 1,
        "distributedInfo is not an object": 1}
    assert profile.rank is None and profile.meta.distributed_info == {}
    assert len(profile.table("steps")) == 1


def test_an_event_without_a_name_says_its_name_is_unrecorded(tmp_path: Path) -> None:
    """A kernel and an operator without ``name`` are named '(name unrecorded)'
    (concepts.UNRECORDED_NAME, as an nsys kernel of NULL name is), where they were named '',
    and the kernel is no communication kernel by that name."""
    kernel = {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 20, "dur": 3,
              "args": {"device": 0, "stream": 7, "correlation": 1}}
    operator = {key: value for key, value in _event().items() if key != "name"}
    profile = kineto.parse(_write(tmp_path / "unnamed.json", [kernel, operator, _event()]))
    kernels = profile.table("kernels")
    assert kernels["name"].astype(str).tolist() == [concepts.UNRECORDED_NAME]
    assert kernels["is_comm"].tolist() == [False]
    assert profile.table("cpu_ops")["name"].astype(str).tolist() == [
        concepts.UNRECORDED_NAME, "aten::mm"]


def _null_named_steps(steps: int) -> list[dict]:
    """``steps`` ProfilerStep spans of 1 ms, each running an operator of JSON null name and
    ``aten::mm``, and launching a 40 us kernel of null name and a 60 us ``gemm``."""
    events = []
    for step in range(steps):
        base, launch = 1000.0 * step, {"ph": "X", "cat": "cuda_runtime",
                                       "name": "cudaLaunchKernel", "pid": 1, "tid": 1}
        events += [
            _event(f"ProfilerStep#{step}", cat="user_annotation", ts=base, dur=1000),
            _event(None, ts=base + 10, dur=30), _event("aten::mm", ts=base + 50, dur=30),
            {**launch, "ts": base + 20, "dur": 5, "args": {"correlation": 2 * step}},
            {**launch, "ts": base + 60, "dur": 5, "args": {"correlation": 2 * step + 1}},
            {"ph": "X", "cat": "kernel", "name": None, "pid": 0, "tid": 7, "ts": base + 100,
             "dur": 40, "args": {"device": 0, "stream": 7, "correlation": 2 * step}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": base + 200,
             "dur": 60, "args": {"device": 0, "stream": 7, "correlation": 2 * step + 1}}]
    return events


def _written_to_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reading: str,
                     traces: dict[str, list[dict]]) -> list[Path]:
    """Each of ``traces`` (stem -> events) written to be read as ``reading`` says: plain, gzip,
    or plain and cut into byte ranges read by worker processes (the test skipped on one CPU,
    where it is read in one part)."""
    paths = []
    for stem, trace in traces.items():
        text = json.dumps({"schemaVersion": 1, "traceEvents": trace}, indent=1).encode()
        path = tmp_path / (f"{stem}.json.gz" if reading == "gzip" else f"{stem}.json")
        path.write_bytes(gzip.compress(text) if reading == "gzip" else text)
        paths.append(path)
    if reading == "parallel":
        monkeypatch.setattr(kineto_stream, "PARALLEL_MIN_BYTES", paths[0].stat().st_size // 3)
        monkeypatch.setattr(kineto_stream, "SPLIT_PROBE_BYTES", 4096)
        if len(kineto_stream._parallel_ranges(paths[0], 30, paths[0].stat().st_size)) < 2:
            pytest.skip("one CPU: the trace is read in one part")
    return paths


@pytest.mark.parametrize("reading", ["plain", "gzip", "parallel"])
def test_an_event_of_null_name_reads_as_one_without_a_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reading: str) -> None:
    """A kernel and an operator whose ``name`` is JSON null read exactly as ones without
    ``name``: kept, named '(name unrecorded)', no communication kernel by that name, in the
    kernel time and counts, nothing dropped; in a plain trace, a gzip one and one read in byte
    ranges by worker processes. They were dropped and counted as 'name of an unexpected
    type', so a step held 1 kernel of 60 us where it launched 2 running 100 us."""
    events = _null_named_steps(40)
    unnamed = [{key: value for key, value in event.items()
                if key != "name" or value is not None} for event in events]
    paths = _written_to_read(tmp_path, monkeypatch, reading, {"null": events,
                                                              "unnamed": unnamed})
    null, unnamed_profile = map(kineto.parse, paths)
    assert null.meta.dropped == {} and null.meta.notes == []
    kernels = null.table("kernels")
    assert kernels["name"].astype(str).tolist() == [concepts.UNRECORDED_NAME, "gemm"] * 40
    assert not kernels["is_comm"].any()
    assert int((kernels["end"] - kernels["start"]).sum()) == 40 * 100_000
    assert null.table("cpu_ops")["name"].astype(str).tolist() == [
        concepts.UNRECORDED_NAME, "aten::mm"] * 40
    for name, table in unnamed_profile.tables.items():
        assert table.equals(null.tables[name]), name
    launch = analyze_paths([paths[0]], AnalyzeOptions(
        executor=ExecutorOptions(processes=1))).runs[0].metrics.launch
    assert launch is not None
    assert (launch.kernels_per_step, launch.gpu_kernel_ns_per_step) == (2, 100_000)


def _device_work(name: str, cat: str, ts: float, args: dict | None) -> dict:
    """One event of device work on stream 7 of GPU 0, 20 us long."""
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 20,
            "args": args}


def _runtime_call(name: str, ts: float, correlation: int, tid: int | None = 1) -> dict:
    """One runtime call of process 1, 5 us long."""
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": ts,
            "dur": 5, "args": {"correlation": correlation}}


def _null_field_steps(steps: int) -> list[dict]:
    """``steps`` ProfilerStep spans, each with JSON null in every field of an event the
    profiler may leave unrecorded: an operator's pid, a launch's tid, a kernel's correlation
    (its ``ac2g`` flow carries it, after one of null id), a kernel's device and stream, a
    kernel's whole ``args``, a copy's ``bytes`` (its ``size`` says 4096), a memset's ``size``
    and ``stream_id``, a memory event's tid and another's ``args``; and events of null ``ph``,
    ``cat``, ``ts`` and ``dur``. The trace opens with a thread_name event of null ``args`` and
    a process_name one of null pid."""
    events: list[dict] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": None},
        {"ph": "M", "name": "process_name", "pid": None, "args": {"name": "python"}}]
    for step in range(steps):
        base, first = 1000.0 * step, 4 * step
        flow = {"ph": "f", "pid": 0, "tid": 7, "ts": base + 100, "cat": "ac2g", "name": "ac2g",
                "bp": "e"}
        memory = {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1}
        events += [
            _event(f"ProfilerStep#{step}", cat="user_annotation", ts=base, dur=1000),
            _event("aten::mm", ts=base + 10, dur=30, pid=None),
            _runtime_call("cudaLaunchKernel", base + 20, first, tid=None),
            _runtime_call("cudaLaunchKernel", base + 26, first + 1),
            _runtime_call("cudaLaunchKernel", base + 32, first + 2),
            _runtime_call("cudaMemcpyAsync", base + 38, first + 3),
            _device_work("gemm", "kernel", base + 100,
                         {"device": 0, "stream": 7, "correlation": None}),
            {**flow, "id": None}, {**flow, "id": first},
            _device_work("relu", "kernel", base + 130,
                         {"device": None, "stream": None, "correlation": first + 1}),
            _device_work("softmax", "kernel", base + 160, None),
            _device_work("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", base + 190, {
                "device": 0, "stream": 7, "correlation": first + 3, "bytes": None,
                "size": 4096}),
            _device_work("Memset (Device)", "gpu_memset", base + 220, {
                "device": 0, "stream": 7, "bytes": 512, "size": None, "stream_id": None}),
            {**memory, "tid": None, "ts": base + 40,
             "args": {"Device Type": 1, "Device Id": 0, "Bytes": 1024, "Addr": 7}},
            {**memory, "tid": 1, "ts": base + 45, "args": None},
            {**_event("phase unrecorded", ts=base + 50), "ph": None},
            _event("category unrecorded", ts=base + 55, cat=None),
            _event("time unrecorded", ts=None), _event("duration unrecorded", dur=None)]
    return events


@pytest.mark.parametrize("reading", ["plain", "gzip", "parallel"])
def test_a_null_field_reads_as_a_missing_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reading: str) -> None:
    """JSON null in an event's pid, tid, ``args``, args' correlation, device, stream,
    stream_id, bytes or size, ph, cat, ts or dur reads exactly as the key missing: the tables,
    drops and notes equal those of the same trace with every null key removed, in a plain
    trace, a gzip one and one read in byte ranges. Device work is kept: 3 kernels, a copy of
    4096 bytes (its ``size``) and a memset a step, the kernel of null correlation linked by
    its flow; an event of null ph or cat is left out quietly, as one without them is, and one
    of null ts or dur is dropped as 'no ts'/'no dur'. Before, each null dropped its event as
    '... of an unexpected type' or '... is not an int64' (a step kept 1 of its 3 kernels and
    no copy), and a thread_name event of null args was dropped."""
    events = _null_field_steps(40)
    missing = [{key: value for key, value in event.items() if value is not None}
               | ({"args": {key: value for key, value in event["args"].items()
                            if value is not None}} if event.get("args") else {})
               for event in events]
    paths = _written_to_read(tmp_path, monkeypatch, reading, {"null": events,
                                                              "missing": missing})
    null, without = map(kineto.parse, paths)
    assert null.meta.dropped == {"no ts": 40, "no dur": 40}
    assert null.meta.notes == without.meta.notes
    for name, table in without.tables.items():
        assert table.equals(null.tables[name]), name
    kernels = null.table("kernels")
    assert kernels["name"].astype(str).tolist() == ["gemm", "relu", "softmax"] * 40
    assert kernels["correlation"].tolist() == [
        value for step in range(40) for value in (4 * step, 4 * step + 1, -1)]
    assert kernels["stream"].tolist() == [7, -1, -1] * 40
    assert null.table("memcpy")["bytes"].tolist() == [4096] * 40
    assert null.table("memset")["bytes"].tolist() == [512] * 40
    assert null.table("cpu_ops")["pid"].tolist() == [-1] * 40
    assert null.table("runtime")["tid"].tolist() == [-1, 1, 1, 1] * 40
    assert null.table("memory")["bytes"].tolist() == [1024, 0] * 40
    assert null.table("cpu_ops")["name"].astype(str).tolist() == ["aten::mm"] * 40


def test_a_world_size_past_any_job_is_not_usable(tmp_path: Path) -> None:
    """distributedInfo with world size 10^20 and rank 2^40 (a damaged header): neither is a
    job's (concepts.MAX_WORLD_SIZE), both left out and counted. Before, report.json gave that
    21-digit world size and the rank, where nsys rank marks past the bound were already no rank."""
    profile = kineto.parse(_write(tmp_path / "dist.json", [_event()],
                                  distributedInfo={"rank": 1 << 40, "world_size": 10 ** 20}))
    assert profile.rank is None and profile.meta.world_size is None
    assert profile.meta.dropped == {"distributedInfo.rank is not usable": 1,
                                    "distributedInfo.world_size is not usable": 1}


def test_bad_distributed_values(tmp_path: Path) -> None:
    """A rank outside the world, a world size of zero: unknown, and counted."""
    profile = kineto.parse(_write(tmp_path / "dist.json", [_event()],
                                  distributedInfo={"rank": 9, "world_size": 8,
                                                   "backend": ["nccl"]}))
    assert profile.rank is None and profile.meta.world_size == 8
    assert profile.meta.dropped == {"distributedInfo.rank is not usable": 1,
                                               "distributedInfo.backend is not usable": 1}


@pytest.mark.parametrize("where", ["top", "args"])
def test_deep_nesting_is_one_line(tmp_path: Path, where: str) -> None:
    """JSON nested 10^6 deep at the top level or inside args: one InputError, no RecursionError."""
    depth = 10**6
    nested = b"[" * depth + b"]" * depth
    if where == "top":
        text = nested
    else:
        text = (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"x": '
                + nested + b"}}]}")
    path = tmp_path / f"deep_{where}.json"
    path.write_bytes(text)
    with pytest.raises(InputError, match="nested deeper"):
        kineto.parse(path)


def test_many_decoy_keys_before_the_event_array(tmp_path: Path) -> None:
    """300,000 nested "traceEvents" keys before the real one are scanned in linear time."""
    decoys = b",".join([b'{"traceEvents": 1}'] * 300_000)
    path = tmp_path / "decoys.json"
    path.write_bytes(b'{"decoy": [' + decoys + b'], "traceEvents": '
                     + json.dumps([_event()]).encode() + b"}")
    assert path.stat().st_size > 4 * MB
    with _time_budget(HOSTILE_BUDGET_S):
        profile = kineto.parse(path)
    assert profile.table("cpu_ops")["name"].tolist() == ["aten::mm"]


def _with_element(path: Path, element: str, at: int, events: int, packed: bool = False
                  ) -> tuple[Path, int]:
    """A trace of ``events`` CPU operators with the JSON ``element`` put before event ``at``
    (after the last when ``at`` is ``events``), gzipped when ``packed``; and that element's
    byte in the trace text."""
    head = '{"schemaVersion": 1, "traceEvents": ['
    event = json.dumps(_event())
    before = ", ".join([event] * at + [""]) if at else ""
    text = head + before + ", ".join([element] + [event] * (events - at)) + "]}"
    path.write_bytes(gzip.compress(text.encode()) if packed else text.encode())
    return path, len(head) + len(before)


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("at", [0, 2, 3], ids=["first", "middle", "last"])
@pytest.mark.parametrize(("element", "kind"), [
    ("null", "null"), ("5", "a number"), ('"x"', "a string"), ("[{}]", "an array"),
    ("true", "a boolean")])
def test_an_element_that_is_no_event_object_is_named_where_it_is(
        tmp_path: Path, element: str, kind: str, at: int, packed: bool) -> None:
    """traceEvents holding null, a number, a string, an array or a boolean among its events:
    one line saying so and giving the element's byte, wherever it is and whether the file is
    gzipped. Last in the array, it read as 'truncated trace: the file ends inside traceEvents'
    (the array's end was looked for after a ``}``); before an event, it was dropped as an
    'event of an unexpected type' and the trace read on."""
    path, byte = _with_element(tmp_path / ("t.json.gz" if packed else "t.json"), element,
                               at, events=3, packed=packed)
    with pytest.raises(InputError) as caught:
        kineto.parse(path)
    assert caught.value.one_line() == (
        f"{path}: an element of traceEvents is {kind}, not an event object (at byte {byte} "
        "of the trace text)")


@pytest.mark.parametrize("where", ["middle", "last"])
def test_an_element_that_is_no_event_object_in_parallel_ranges(tmp_path: Path,
                                                              where: str) -> None:
    """A plain trace just large enough to be read in two byte ranges (one here, one by a
    worker process, on two cores or more) gives the same line as a small one: a null in the
    first range or last in the array of the second, its byte in the whole file."""
    event = len(json.dumps(_event())) + 2
    events = 2 * kineto_stream.PARALLEL_MIN_BYTES // event + 100
    at = events // 4 if where == "middle" else events
    path, byte = _with_element(tmp_path / "big.json", "null", at, events)
    ranges = kineto_stream._parallel_ranges(path, 37, path.stat().st_size)
    assert len(ranges) == 2 or kineto_stream.cpu_share() < 2
    with pytest.raises(InputError) as caught:
        kineto.parse(path)
    assert caught.value.one_line() == (
        f"{path}: an element of traceEvents is null, not an event object (at byte {byte} "
        "of the trace text)")


def test_gzip_with_one_600_mb_name(tmp_path: Path) -> None:
    """A ~600 KB gzip holding one 600 MB name stops at the event size limit, quickly."""
    path = tmp_path / "name.json.gz"
    path.write_bytes(_gzip_members([(b'{"traceEvents": [{"ph": "X", "name": "', 1),
                                    (b"a" * MB, 600), (b'", "ts": 1, "dur": 1}]}', 1)]))
    assert path.stat().st_size < MB
    with _time_budget(HOSTILE_BUDGET_S), pytest.raises(InputError,
                                                       match="bytes in one event"):
        kineto.parse(path)


def test_gzip_with_2_gb_of_whitespace(tmp_path: Path) -> None:
    """A ~2 MB gzip with 2 GB of whitespace between two events stops early with one line."""
    path = tmp_path / "blank.json.gz"
    path.write_bytes(_gzip_members([(b'{"traceEvents": [' + json.dumps(_event()).encode()
                                     + b",", 1), (b" " * MB, 2048),
                                    (json.dumps(_event()).encode() + b"]}", 1)]))
    assert path.stat().st_size < 3 * MB
    with _time_budget(HOSTILE_BUDGET_S), pytest.raises(InputError, match="too large"):
        kineto.parse(path)


def test_long_name_is_refused(tmp_path: Path) -> None:
    """A 100,000-character kernel name exceeds the name limit: one line saying so."""
    path = _write(tmp_path / "long.json", [_event("k" * 100_000, cat="kernel")])
    with pytest.raises(InputError, match="characters in one name") as caught:
        kineto.parse(path)
    assert len(caught.value.one_line()) < 400


def test_event_count_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More events than the limit: refused with the limit's reason."""
    monkeypatch.setattr(kineto_columns, "MAX_EVENTS", Limit("events", 10, "a test limit"))
    with pytest.raises(InputError, match=r"too large: 20 events .*\(a test limit\)"):
        kineto.parse(_write(tmp_path / "many.json", [_event()] * 20))


def test_decompression_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gzip that expands past its allowance is refused as a decompression bomb."""
    monkeypatch.setattr(kineto_stream, "decompressed_limit", lambda compressed: MB)
    path = tmp_path / "big.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": [_event(ts=i) for i in range(20_000)]}, handle)
    with pytest.raises(InputError, match="decompression bomb"):
        kineto.parse(path)


def test_parallel_ranges_match_sequential(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain trace decoded in byte ranges by worker processes gives the same tables."""
    events = []
    for step in range(40):
        base = step * 1000.0
        events += [_event(f"ProfilerStep#{step}", cat="user_annotation", ts=base, dur=900),
                   _event("aten::mm", ts=base + 1, dur=5),
                   {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                    "tid": 1, "ts": base + 2, "dur": 1, "args": {"correlation": step}},
                   {"ph": "X", "cat": "kernel", "name": f"k{step % 3}", "pid": 0, "tid": 7,
                    "ts": base + 4, "dur": 3, "args": {"stream": 7, "correlation": step}},
                   {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1,
                    "args": {"name": "main"}}]
    path = tmp_path / "plain.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events,
                                "traceName": "plain"}, indent=1))
    sequential = kineto.parse(path)
    monkeypatch.setattr(kineto_stream, "PARALLEL_MIN_BYTES", path.stat().st_size // 3)
    monkeypatch.setattr(kineto_stream, "SPLIT_PROBE_BYTES", 4096)
    assert len(kineto_stream._parallel_ranges(path, 30, path.stat().st_size)) >= 2 or (
        len(kineto_stream.os.sched_getaffinity(0)) < 2)
    parallel = kineto.parse(path)
    for name, table in sequential.tables.items():
        assert table.equals(parallel.tables[name]), name
    assert sequential.meta == parallel.meta
    assert len(parallel.table("steps")) == 40


def test_read_ahead_thread_ends_with_the_parse(tmp_path: Path) -> None:
    """A gzip trace refused near its start, with megabytes still to inflate, leaves no reading
    thread behind (the thread would otherwise wait forever to hand over the next chunk)."""
    import threading

    events = json.dumps([_event(ts=i) for i in range(100_000)]).encode()
    path = tmp_path / "garbled.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": @@}, ' + events[1:] + b"}"))
    before = threading.active_count()
    with pytest.raises(InputError, match="invalid JSON"):
        kineto.parse(path)
    assert threading.active_count() == before
    assert not any(t.name == "kineto-prefetch" for t in threading.enumerate())


def test_batches_wait_for_their_block_compact(tmp_path: Path) -> None:
    """A batch's rows wait for the rest of their block in the narrowest dtypes, the end held as
    the duration (a block's worth of batches in int64 was 5 MB a group, in each range worker
    too): 3,000 launches of one thread and 3,000 kernels of one stream keep 1 byte an id, 2
    a duration, 2 a correlation; only the start is int64."""
    launches = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4000,
                 "tid": 4001, "ts": 1.7e12 + 10 * i, "dur": 4, "args": {"correlation": i}}
                for i in range(3000)]
    kernels = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                "ts": 1.7e12 + 10 * i + 5, "dur": 30.5, "args": {"device": 0, "stream": 7,
                                                                 "correlation": i}}
               for i in range(3000)]
    builder = kineto_columns.ColumnBuilder(tmp_path / "t.json")
    builder.add(kineto_columns.BatchReader().decoded(
        kineto_stream._EVENTS_DECODER.decode(json.dumps(launches + kernels))))
    for store in ("runtime", "kernel"):
        (waiting,) = builder.stores[store]._pending
        assert {key: str(value.dtype) for key, value in waiting.items()} == {
            "name": "int8", "pid": "int8", "tid": "int8", "start": "int64", "device": "int8",
            "stream": "int8", "correlation": "int16", "bytes": "int8", "detail": "int8",
            "dur": "int16"}
    columns = builder.stores["kernel"].columns()
    assert columns.end[-1] - columns.start[-1] == 30_500 and columns.end.dtype == "int64"


def test_unusable_ids_of_device_work_are_dropped_and_counted(tmp_path: Path) -> None:
    """A bool correlation among ints (numpy reads it as 1), a stream of -3, a device of 2^40 or
    "cuda:0": each event dropped and counted in the notes, not kept or read as another id; the
    kernels with usable ids stay."""
    def kernel(ts: float, **args: object) -> dict:
        return {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": ts,
                "dur": 1, "args": {"device": 0, "stream": 7, "correlation": 5, **args}}

    events = [_event("ProfilerStep#1", cat="user_annotation", ts=0, dur=100),
              kernel(10, correlation=9), kernel(12, correlation=True), kernel(14, stream=-3),
              kernel(16, device=2**40), kernel(18, device="cuda:0"), kernel(20, device=1)]
    profile = kineto.parse(_write(tmp_path / "ids.json", events))
    kernels = profile.table("kernels")
    assert kernels[["device", "stream", "correlation"]].values.tolist() == [[0, 7, 9], [1, 7, 5]]
    assert profile.meta.dropped == {"correlation is not an int64": 1,
                                    "stream is not an int64": 1,
                                    "device is not a device number below 65,536": 2}
    assert "2 records dropped: device is not a device number below 65,536" in profile.meta.notes
