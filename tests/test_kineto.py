"""The torch.profiler (Kineto) parser against the real corpus traces and traces made here."""

from __future__ import annotations

import codecs
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from profreport.errors import InputError, UnsupportedFormatError
from profreport.parsers import detect_format, kineto, kineto_stream

# Every test reads its traces both ways: the C scanner and msgspec (conftest.scan_passes).
pytestmark = pytest.mark.usefixtures("scan_passes")

# A CPU-only training loop under torch.profiler with a schedule: 2 skipped steps, then 5 active
# ones that span a single-process and a two-worker DataLoader, with a gloo all_reduce per
# parameter in a one-process group.
CPU_TRACE_SCRIPT = """
import sys
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
data = TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loaders = [DataLoader(data, batch_size=16), DataLoader(data, batch_size=16, num_workers=2)]
with profile(activities=[ProfilerActivity.CPU], with_stack=True,
             schedule=schedule(wait=1, warmup=1, active=5, repeat=1),
             on_trace_ready=lambda prof: prof.export_chrome_trace(sys.argv[1])) as prof:
    for loader in loaders:
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            for param in model.parameters():
                dist.all_reduce(param.grad)
            optimizer.step()
            optimizer.zero_grad()
            prof.step()
dist.destroy_process_group()
"""
ACTIVE_STEPS = 5
PARAMETERS = 2  # weight and bias of the Linear layer: one all_reduce each per step


def _ms(frame) -> float:
    """Total duration of a table's rows in milliseconds."""
    return float((frame["end"] - frame["start"]).sum()) / 1e6


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh torch.profiler trace of a CPU training loop, written by this torch."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("kineto") / "cpu.pt.trace.json.gz"
    subprocess.run([sys.executable, "-c", CPU_TRACE_SCRIPT, str(out)], check=True,
                   capture_output=True, timeout=300)
    return out


def _write_trace(path: Path, events: list[dict], **header) -> Path:
    """Write a small Kineto-shaped trace with the given events and top-level members."""
    document = {"schemaVersion": 1, "deviceProperties": [], **header, "traceEvents": events}
    path.write_text(json.dumps(document, indent=1))
    return path


@pytest.mark.corpus
def test_resnet50_single_process_loader(corpus: Path) -> None:
    """num_workers=0: six ProfilerSteps of ~1049 ms, ~416 ms of it waiting for the DataLoader."""
    profile = kineto.parse(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    steps, loader = profile.table("steps"), profile.table("dataloader")
    assert profile.kind == "kineto" and profile.meta.dialect == "2021"
    assert profile.tool_version == "kineto schema 1 (2021 trace format)"
    assert profile.rank is None
    assert steps["number"].tolist() == [5, 6, 7, 8, 9, 10]
    assert steps["origin"].eq("ProfilerStep").all()
    assert _ms(steps) == pytest.approx(1048.976, abs=0.01)
    assert set(loader["name"]) == {"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"}
    assert len(loader) == 6
    assert _ms(loader) == pytest.approx(415.791, abs=0.01)
    assert len(profile.table("kernels")) == 8772
    assert len(profile.table("memset")) == 312
    assert len(profile.table("runtime")) == 11923
    # 23,646 Operator events: 6 ProfilerStep spans and the program's 18 DataLoader, zero_grad
    # and optimizer-step spans are ranges (concepts.is_program_span).
    assert len(profile.table("cpu_ops")) == 23622
    assert profile.table("ranges")["name"].str.startswith(
        ("ProfilerStep#", "enumerate(DataLoader)#", "Optimizer.")).all()
    assert len(profile.table("ranges")) == 24
    assert not profile.table("kernels")["is_comm"].any()
    assert profile.table("devices")["name"].tolist() == ["Tesla V100-DGXS-32GB"] * 4
    assert profile.table("devices")["sm_count"].tolist() == [80] * 4


@pytest.mark.corpus
def test_resnet50_copies_and_times(corpus: Path) -> None:
    """Copies carry direction, memory kinds and bytes; times are exact integer nanoseconds."""
    profile = kineto.parse(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    memcpy = profile.table("memcpy")
    assert len(memcpy) == 12
    assert set(memcpy[["kind", "src_kind", "dst_kind"]].itertuples(index=False, name=None)) == {
        ("HtoD", "Pageable", "Device")}
    assert int(memcpy["bytes"].sum()) == 115_607_040
    first = memcpy.iloc[0]
    # {"ts": 1623142623529248, "dur": 1940, "args": {"stream": 7, "correlation": 34417}}
    assert (first["start"], first["end"]) == (1623142623529248000, 1623142623531188000)
    assert (first["device"], first["stream"], first["correlation"]) == (0, 7, 34417)
    runtime = profile.table("runtime")
    assert runtime.loc[runtime["correlation"] == 34417, "name"].tolist() == ["cudaMemcpyAsync"]
    kernels = profile.table("kernels")
    assert kernels["short_name"].iloc[0] == "computeOffsetsKernel"


@pytest.mark.corpus
def test_resnet50_multi_process_loader(corpus: Path) -> None:
    """num_workers=4: the DataLoader waits shrink to ~8.5 ms of ~838 ms."""
    profile = kineto.parse(corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz")
    steps, loader = profile.table("steps"), profile.table("dataloader")
    assert len(steps) == 6
    assert _ms(steps) == pytest.approx(838.152, abs=0.01)
    assert set(loader["name"]) == {
        "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"}
    assert _ms(loader) == pytest.approx(8.522, abs=0.01)
    assert len(profile.table("kernels")) == 8868
    assert profile.table("devices")["name"].iloc[0] == "Tesla V100-DGXS-32GB"


@pytest.mark.corpus
def test_nccl_trace(corpus: Path) -> None:
    """HTA's NCCL trace: rank 0 of 2, NCCL kernels flagged as comm, CPU collectives found."""
    profile = kineto.parse(corpus / "hta" / "nccl_data.json.gz")
    assert profile.rank == 0
    assert profile.meta.world_size == 2 and profile.meta.backend == "nccl"
    assert profile.meta.dialect == "current"
    assert profile.tool_version == "kineto schema 1 (current trace format), nccl 2.17.1"
    kernels = profile.table("kernels")
    assert len(kernels) == 2700
    comm = kernels[kernels["is_comm"]]
    assert comm["short_name"].astype(object).value_counts().to_dict() == {
        "ncclKernel_AllReduce_RING_LL_Sum_float": 15,
        "ncclKernel_Broadcast_RING_LL_Sum_int8_t": 6}
    assert comm["name"].str.startswith("ncclKernel_").all()
    collectives = profile.table("cpu_collectives")["name"].value_counts().to_dict()
    assert collectives["c10d::allreduce_"] == 15 and collectives["nccl:all_reduce"] == 15
    assert collectives["c10d::broadcast_"] == 6 and collectives["nccl:broadcast"] == 6
    assert profile.table("steps")["number"].tolist() == [4, 5, 6]
    memcpy = profile.table("memcpy")
    assert len(memcpy) == 960 and memcpy["kind"].eq("DtoD").all()
    assert len(profile.table("memset")) == 114
    assert len(profile.table("runtime")) == 8740
    for table in ("cpu_ops", "runtime"):  # a byte a row, the ids as the threads table has them
        for column in ("pid", "tid"):
            ids = profile.table(table)[column]
            assert ids.array.codes.dtype == "int8" and str(ids.to_numpy().dtype) == "int32"
    assert set(profile.table("cpu_ops")["tid"].astype(int)) == {2910249, 2919752}
    assert profile.table("devices")["name"].iloc[0] == "NVIDIA A100-PG509-200"
    assert len(profile.table("devices")) == 8
    threads = profile.table("threads")
    assert "thread 2919752 (pt_autograd_0)" in set(threads["name"])


def test_fresh_cpu_trace(cpu_trace: Path) -> None:
    """This torch's CPU trace: one step per active step, both loaders, gloo collectives."""
    assert detect_format(cpu_trace).kind == "kineto"
    profile = kineto.parse(cpu_trace)
    assert profile.rank == 0 and profile.meta.world_size == 1
    assert profile.meta.backend == "gloo" and profile.meta.dialect == "current"
    steps = profile.table("steps")
    assert len(steps) == ACTIVE_STEPS
    assert steps["number"].diff().dropna().eq(1).all()
    assert steps["tid"].nunique() == 1
    loader_names = set(profile.table("dataloader")["name"])
    assert loader_names == {"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                            "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"}
    collectives = profile.table("cpu_collectives")["name"].value_counts().to_dict()
    assert collectives == {"c10d::allreduce_": ACTIVE_STEPS * PARAMETERS,
                           "gloo:all_reduce": ACTIVE_STEPS * PARAMETERS}
    assert profile.table("kernels").empty and profile.table("devices").empty
    assert not profile.table("cpu_ops").empty
    assert profile.table("threads")["name"].str.contains("pt_gloo_runloop").any()


def test_small_batches_give_the_same_tables(cpu_trace: Path, monkeypatch) -> None:
    """Cutting the event array into many tiny batches changes nothing in the tables."""
    whole = kineto.parse(cpu_trace)
    monkeypatch.setattr(kineto_stream, "READ_CHUNK", 3000)
    monkeypatch.setattr(kineto_stream, "BATCH_BYTES", 5000)
    monkeypatch.setattr(kineto_stream, "CUT_WINDOW", 256)
    pieces = kineto.parse(cpu_trace)
    for name, table in whole.tables.items():
        assert table.equals(pieces.tables[name]), name


def test_cut_inside_strings_and_exact_times(tmp_path: Path, monkeypatch) -> None:
    """Event gaps inside names do not split events; fractional microseconds stay exact."""
    tricky = 'aten::odd}, {"name": "x"}]'
    events = [
        {"ph": "X", "cat": "cpu_op", "name": tricky, "pid": 1, "tid": 2,
         "ts": 4458676522690.655, "dur": 156.777, "args": {"Input Dims": [[{"a": 1}]]}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0,
         "tid": 7, "ts": 10.5, "dur": 2.0,
         "args": {"device": 1, "stream": 7, "correlation": 3, "memory bandwidth (GB/s)": 4.0}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}},
    ] * 50
    path = _write_trace(tmp_path / "tricky.json", events, traceName="tricky")
    monkeypatch.setattr(kineto_stream, "READ_CHUNK", 700)
    monkeypatch.setattr(kineto_stream, "BATCH_BYTES", 900)
    profile = kineto.parse(path)
    ops = profile.table("cpu_ops")
    assert len(ops) == 50 and set(ops["name"]) == {tricky}
    assert ops["start"].iloc[0] == 4458676522690655
    assert ops["end"].iloc[0] == 4458676522690655 + 156777
    memcpy = profile.table("memcpy")
    assert len(memcpy) == 50
    assert memcpy.iloc[0][["kind", "src_kind", "dst_kind"]].tolist() == ["DtoH", "Device",
                                                                         "Pinned"]
    assert memcpy["bytes"].iloc[0] == 8000  # 4 GB/s for 2 us
    assert profile.table("threads").to_dict("records") == [{"pid": 1, "tid": 2, "name": "main"}]
    assert profile.meta.trace_name == "tricky"


def test_truncated_gzip(cpu_trace: Path, tmp_path: Path) -> None:
    """A .json.gz cut short is refused with a one-line message naming the file."""
    damaged = tmp_path / "cut.json.gz"
    data = cpu_trace.read_bytes()
    damaged.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="truncated gzip") as caught:
        kineto.parse(damaged)
    assert caught.value.path == str(damaged)


def test_truncated_plain_json(cpu_trace: Path, tmp_path: Path) -> None:
    """A plain .json cut inside traceEvents is refused."""
    text = gzip.decompress(cpu_trace.read_bytes())
    damaged = tmp_path / "cut.json"
    damaged.write_bytes(text[: len(text) // 2])
    with pytest.raises(InputError, match="truncated trace") as caught:
        kineto.parse(damaged)
    assert caught.value.path == str(damaged)


def test_invalid_json_says_where(cpu_trace: Path, tmp_path: Path) -> None:
    """Garbage in the middle of the event array is reported with its byte offset."""
    text = gzip.decompress(cpu_trace.read_bytes())
    where = text.index(b'"ph"', len(text) // 2)
    damaged = tmp_path / "garbled.json"
    damaged.write_bytes(text[:where] + b"@@" + text[where + 2:])
    with pytest.raises(InputError, match=f"invalid JSON at byte {where}") as caught:
        kineto.parse(damaged)
    assert caught.value.path == str(damaged)
    assert "\n" not in caught.value.one_line()


def test_json_without_trace_events(tmp_path: Path) -> None:
    """Valid JSON that is not a trace, and an unknown schemaVersion, are refused."""
    other = tmp_path / "config.json"
    other.write_text(json.dumps({"model": "resnet", "note": "traceEvents is not a key here"}))
    with pytest.raises(InputError, match="no traceEvents|without traceEvents"):
        kineto.parse(other)
    future = _write_trace(tmp_path / "future.json", [], schemaVersion=99)
    with pytest.raises(UnsupportedFormatError, match="schemaVersion 99"):
        kineto.parse(future)


def test_empty_event_list(tmp_path: Path) -> None:
    """A trace with no events gives empty tables with the right columns."""
    profile = kineto.parse(_write_trace(tmp_path / "empty.json", []))
    assert profile.table("kernels").empty and profile.table("steps").empty
    assert list(profile.table("steps").columns) == ["number", "start", "end", "pid", "tid",
                                                    "origin"]


@pytest.mark.parametrize("name", ["bom.json", "bom.json.gz"])
def test_a_trace_opening_with_a_byte_order_mark_is_read(tmp_path: Path, name: str) -> None:
    """A trace saved with a UTF-8 byte order mark before its JSON (a Windows editor's or
    PowerShell's UTF-8), plain or gzip-compressed, is a Kineto trace and reads as one: it was
    'not a profile profreport knows (unknown content)'."""
    from profreport.parsers import detect_format

    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10,
               "dur": 5}]
    text = codecs.BOM_UTF8 + json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    assert detect_format(path).name == "kineto"
    assert kineto.parse(path).table("cpu_ops")["name"].tolist() == ["aten::mm"]
