"""The C scanner of Kineto event batches (parsers/_kineto_scan.c) against msgspec's structs.

Every trace here is read both ways and the columns compared whole; each irregular shape the
scanner gives a batch up on is one test, which checks the reason it gave and that msgspec then
read the batch as it always has (its lenient rules, drops and errors).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import pytest

from profreport.errors import InputError
from profreport.parsers import kineto_columns, kineto_stream

_kineto_scan = pytest.importorskip("profreport.parsers._kineto_scan",
                                   reason="the C scanner is not built (no C compiler at install)")

KERNEL = (b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1700000000000.5,'
          b' "dur": 3.25, "args": {"device": 0, "stream": 7, "correlation": 11}}')
LAUNCH = (b'{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, '
          b'"ts": 1699999999999.0, "dur": 2, "args": {"correlation": 11}}')
FLOW = (b'{"ph": "f", "id": 11, "pid": 0, "tid": 7, "ts": 1700000000000.5, "cat": "ac2g", '
        b'"name": "ac2g", "bp": "e"}')


def _trace(folder: Path, *events: bytes) -> Path:
    """A trace file holding ``events`` (raw JSON texts) as its event array."""
    path = folder / "trace.json"
    path.write_bytes(b'{"schemaVersion": 1, "traceEvents": [' + b",\n".join(events) + b"]}")
    return path


def _columns(path: Path) -> str:
    """Everything the reader kept of the trace at ``path``, as one comparable text (or the
    error it refused the trace with)."""
    try:
        _, builder = kineto_stream.read_trace(path)
    except InputError as exc:
        return f"refused: {exc}"
    names, threads = builder.names.values(), kineto_columns.thread_numbers(builder.threads)
    kept = {name: {key: value.tolist() for key, value in store.joined().items()}
            for name, store in builder.stores.items()}
    kept.update(flows=builder.flows().to_dict("list"), names=names.tolist(),
                threads=builder.threads.values().tolist(), cats=builder.cats.values().tolist(),
                details=builder.details.values().tolist(),
                metadata=msgspec.json.encode(builder.metadata),
                memory=builder.memory.frame().to_dict("list"),
                op_inputs=builder.op_inputs.frame(names, threads).to_dict("list"),
                with_inputs=sorted(builder.with_inputs), dropped=dict(builder.dropped),
                events=builder.events)
    return repr(kept)


def _both_ways(path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The trace read with the C scanner and with msgspec alone: the same columns, returned."""
    scanned = _columns(path)
    with monkeypatch.context() as patch:
        patch.setattr(kineto_columns, "_kineto_scan", None)
        decoded = _columns(path)
    assert scanned == decoded
    return scanned


def _reason(*events: bytes) -> str | None:
    """Why the scanner gives up the batch of ``events``; None when it reads it."""
    result = _kineto_scan.Scanner().scan(b"[" + b",".join(events) + b"]")
    return result if isinstance(result, str) else None


def test_plain_events_are_scanned_into_the_same_columns(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch, its flow and its kernel, with a name holding escapes: the scanner reads the
    batch (gives nothing up) and keeps what msgspec keeps."""
    named = KERNEL.replace(b'"name": "k"', b'"name": "k<\\"\\\\\\/\\t>"')
    assert _reason(LAUNCH, FLOW, named) is None
    kept = _both_ways(_trace(tmp_path, LAUNCH, FLOW, named), monkeypatch)
    assert "k<\"\\\\/\\t>" in kept and "'flow': [11]" in kept


def test_scanned_times_read_as_python_floats() -> None:
    """ts and dur as the scanner reads them are Python's float() of the text, as msgspec reads
    them, for decimals of every length (the short ones computed in C, the long ones by
    CPython's reader)."""
    chance = random.Random(7)
    texts = [f"{chance.randrange(10 ** 16)}.{chance.randrange(10 ** chance.randrange(1, 12))}"
             for _ in range(3000)]
    texts += ["0", "-0.0", "1e3", "1.5E-7", "123456789012345678", "9007199254740993",
              "0.1", "4458676522690.655", "1700000000000000.001"]
    events = [b'{"ph": "X", "ts": %s, "dur": %s}' % (text.encode(), text.encode())
              for text in texts]
    text = b"[" + b",".join(events) + b"]"
    columns, count, _ = _kineto_scan.Scanner().scan(text)
    scanned = kineto_columns.ScannedBatch(text, columns, count, kineto_columns.Vocabulary())
    assert scanned.ts.tolist() == [float(text) for text in texts]
    assert scanned.dur.tolist() == [float(text) for text in texts]
    # msgspec's path reads them so too.
    assert [msgspec.json.decode(text, type=float) for text in texts] == list(map(float, texts))


@pytest.mark.parametrize(("event", "reason"), [
    (KERNEL.replace(b'"name": "k"', b'"name": "\\u006b"'), "a \\u escape in a string"),
    (KERNEL.replace(b'"stream": 7', b'"stream": "0o7"'),
     "an args id or size that is no plain int64"),
    (KERNEL.replace(b'"stream": 7', b'"stream": " 7"'),
     "an args id or size that is no plain int64"),
    (KERNEL.replace(b'"stream": 7', b'"stream": "007"'),
     "an args id or size that is no plain int64"),
    (KERNEL.replace(b'"stream": 7', b'"stream": "-1"'),
     "an args id or size that is no plain int64"),
    (KERNEL.replace(b'"correlation": 11', b'"correlation": 11.5'),
     "an args id or size that is no plain int64"),
    (KERNEL.replace(b'"correlation": 11', b'"correlation": -5'),
     "an args id or size that is no plain int64"),
    (KERNEL.replace(b'"correlation": 11', b'"correlation": 9223372036854775808'),
     "an args id or size that is no plain int64"),
    (KERNEL.replace(b'"device": 0', b'"device": true'),
     "an args id or size that is no plain int64"),
    (KERNEL.replace(b'"ts": 1700000000000.5', b'"ts": "1700000000000.5"'),
     "a value that is no number where a time or bandwidth is read"),
    (KERNEL.replace(b'"dur": 3.25', b'"dur": 1e999'), "a number no double holds"),
    (KERNEL.replace(b'"dur": 3.25', b'"dur": 12345678901234567890123'),
     "an integer too long to read as a double here"),
    (KERNEL.replace(b'"tid": 7', b'"tid": 7.5'),
     "a pid or tid that is no integer, string or null"),
    (KERNEL.replace(b'"pid": 0', b'"pid": 1234567890123456789012'),
     "a pid or tid integer too long to read here"),
    (KERNEL.replace(b'"name": "k"', b'"name": 5'), "a ph, cat or name that is no string or null"),
    (KERNEL.replace(b'"args": {', b'"args": [{').replace(b"}}", b"}]}"),
     "args that is no object or null"),
    (KERNEL.replace(b'"stream": 7', b'"stream": 7, "stream": 8'), "an args key written twice"),
    (KERNEL.replace(b'"dur": 3.25', b'"dur": 3.25, "dur": 4'), "an event key written twice"),
    (KERNEL.replace(b'"stream": 7', b'"str\\u0065am": 8'), "a \\u escape in a string"),
    (KERNEL.replace(b'"stream": 7', b'"str\\team": 8'), "an escape in an args key"),
    (KERNEL.replace(b'"dur": 3.25', b'"d\\tur": 8'), "an escape in an event key"),
    (FLOW.replace(b'"id": 11', b'"id": 11.0'), "a flow id that is no plain int64"),
    (KERNEL.replace(b'"name": "k"', b'"name": "k\xc3"'), "invalid UTF-8 in a string"),
    (KERNEL.replace(b'"args": {', b'"args": {"deep": ' + b"[" * 70 + b"]" * 70 + b", "),
     "nesting deeper than the scan follows"),
])
def test_irregular_events_are_left_to_msgspec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              event: bytes, reason: str) -> None:
    """An event outside the scanner's plain shape gives its batch up, for the reason named,
    and msgspec reads that batch as it always has: the same columns and drops either way."""
    assert _reason(LAUNCH, event) == reason
    _both_ways(_trace(tmp_path, LAUNCH, event, FLOW), monkeypatch)


@pytest.mark.parametrize(("written", "stream"), [(b'"0x7"', 7), (b'"0X1F"', 31), (b'"12"', 12),
                                                (b'"0"', 0)])
def test_ids_written_as_strings_are_scanned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            written: bytes, stream: int) -> None:
    """Stream ids and byte counts written as text (ROCm's hex stream ids, MTIA's decimal
    stream_id, ROCm runtime calls' bytes) are scanned as the numbers msgspec's path reads
    (Python's int(text, 0)): the kernel is kept on its stream, nothing dropped."""
    kernel = KERNEL.replace(b'"stream": 7', b'"stream": ' + written)
    assert _reason(kernel) is None
    kept = _both_ways(_trace(tmp_path, kernel), monkeypatch)
    assert f"'stream': [{stream}]" in kept and "'dropped': {}" in kept


def test_an_element_that_is_no_object_is_refused_either_way(tmp_path: Path) -> None:
    """A number among the events: the scanner gives the batch up and msgspec's path refuses
    the trace, naming the element's byte."""
    assert _reason(KERNEL, b"5") == "an element of traceEvents that is no object"
    with pytest.raises(InputError, match="an element of traceEvents is a number"):
        kineto_stream.read_trace(_trace(tmp_path, KERNEL, b"5"))


def test_damaged_json_is_refused_either_way(tmp_path: Path) -> None:
    """A missing comma between two members: the scanner gives the batch up as invalid JSON and
    msgspec's path raises the trace's error."""
    damaged = KERNEL.replace(b'"dur": 3.25,', b'"dur": 3.25')
    assert _reason(damaged) == "invalid JSON: no comma or closing bracket after a value"
    with pytest.raises(InputError, match="invalid JSON"):
        kineto_stream.read_trace(_trace(tmp_path, damaged))


def test_every_cut_of_a_batch_is_given_up_not_misread() -> None:
    """Each prefix of a batch (as a cut in the wrong place leaves one) is given up as invalid
    JSON: the scanner reads no byte past the text it was handed, whatever it ends in."""
    text = b"[" + b",".join([LAUNCH, FLOW, KERNEL]) + b"]"
    scanner = _kineto_scan.Scanner()
    for end in range(len(text)):
        assert isinstance(scanner.scan(text[:end]), str)
    assert not isinstance(scanner.scan(text), str)


def test_no_buffer_is_a_python_error() -> None:
    """What is no contiguous bytes-like object raises TypeError or BufferError, no crash."""
    scanner = _kineto_scan.Scanner()
    with pytest.raises(TypeError):
        scanner.scan("[]")
    with pytest.raises(BufferError):
        scanner.scan(memoryview(b"[{}, {}]")[::2])
    assert scanner.scan(bytearray(b"[]"))[1] == 0


def test_metadata_memory_and_inputs_are_taken_from_the_text(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Metadata events, [memory] instants, an operator's inputs, a sync kind and a collective's
    message, which the scanner leaves as text, read the same as msgspec's structs."""
    events = [
        {"name": "thread_name", "ph": "M", "pid": 9, "tid": 9, "args": {"name": "main"}},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 9, "tid": 9, "ts": 1.7e12,
         "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Total Allocated": 512,
                  "Total Reserved": 2048, "Addr": 140000000}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 9, "tid": 9, "ts": 1.7e12,
         "dur": 5, "args": {"Input type": ["float", "float"], "Input Dims": [[4, 8], [8, 2]],
                            "Input Strides": [[8, 1], [2, 1]]}},
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7,
         "ts": 1.7e12 + 9, "dur": 1, "args": {"cuda_sync_kind": "Stream Sync", "device": 0,
                                               "stream": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 9, "tid": 9,
         "ts": 1.7e12 + 20, "dur": 4, "args": {"In msg nelems": 1024, "dtype": "Float",
                                                "Collective name": "allreduce"}},
    ]
    assert _reason(*(json.dumps(e).encode() for e in events)) is None
    kept = _both_ways(_trace(tmp_path, *(json.dumps(e).encode() for e in events)), monkeypatch)
    assert "'Stream Sync'" in kept and "'allreduce'" in kept and "(4, 8)" in kept
