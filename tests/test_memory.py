"""Memory events: the ``memory`` table from Kineto (both formats) and nsys, and its analysis."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from profreport.model import Profile
from profreport.parsers import kineto, nsys

RESNET_GPU_MEMORY_EVENTS = 8_220
RESNET_PEAK_ABOVE_START = 2_791_636_480  # bytes: 2.79 GB, 2.60 GiB
V100_MEMORY = 34_084_028_416  # deviceProperties[0].totalGlobalMem


@pytest.fixture(scope="module")
def resnet(corpus: Path) -> Profile:
    """resnet50_num_workers_0 (2021 trace format, profile_memory=True on a V100)."""
    return kineto.parse(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")


def _memory_event(ts: float, size: int, *, device_type: int = 1, device: int = 0,
                  totals: tuple[int, int] | None = None, addr: int | None = None) -> dict:
    """One Kineto ``[memory]`` instant event; ``totals`` (allocated, reserved) make it current."""
    args: dict = {"Device Type": device_type, "Device Id": device, "Bytes": size}
    if totals is not None:
        args.update({"Total Allocated": totals[0], "Total Reserved": totals[1]})
    if addr is not None:
        args["Addr"] = addr
    return {"ph": "i", "s": "t", "name": "[memory]", "pid": 7, "tid": 7, "ts": ts, "args": args}


def _write_trace(path: Path, events: list[dict], devices: list[dict] | None = None) -> Path:
    """A small Kineto-shaped trace holding ``events``."""
    document = {"schemaVersion": 1, "deviceProperties": devices or [], "traceEvents": events}
    path.write_text(json.dumps(document))
    return path


@pytest.mark.corpus
def test_resnet50_memory_events(resnet: Profile) -> None:
    """8,220 GPU allocator events that net out to zero, 2.79 GB above the window's start."""
    memory = resnet.table("memory")
    gpu = memory[memory["device_kind"] == "cuda"]
    assert len(gpu) == RESNET_GPU_MEMORY_EVENTS
    assert set(gpu["device"]) == {0}
    assert int(gpu["bytes"].sum()) == 0
    assert int(gpu["bytes"].cumsum().max()) == RESNET_PEAK_ABOVE_START
    assert (memory["total_allocated"] == -1).all()  # the 2021 format records no totals
    assert set(memory.loc[memory["device_kind"] == "cpu", "device"]) == {-1}
    assert memory["time"].is_monotonic_increasing
    devices = resnet.table("devices")
    assert int(devices.loc[devices["device"] == 0, "memory_bytes"].iloc[0]) == V100_MEMORY


def test_current_format_totals_and_addresses(tmp_path: Path) -> None:
    """Current-format events keep their totals and addresses; fields absent read as unknown."""
    events = [
        _memory_event(10.5, 512, totals=(512, 2 << 20), addr=0x7F00),
        _memory_event(11.0, 4, device_type=0, device=-1, totals=(4, 0), addr=0x10),
        _memory_event(12.25, -512, totals=(0, 2 << 20), addr=0x7F00),
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 13.0},
    ]
    memory = kineto.parse(_write_trace(tmp_path / "t.json", events)).table("memory")
    assert memory["time"].tolist() == [10_500, 11_000, 12_250]
    assert memory["device_kind"].tolist() == ["cuda", "cpu", "cuda"]
    assert memory["device"].tolist() == [0, -1, 0]
    assert memory["bytes"].tolist() == [512, 4, -512]
    assert memory["total_allocated"].tolist() == [512, 4, 0]
    assert memory["total_reserved"].tolist() == [2 << 20, 0, 2 << 20]
    assert memory["addr"].tolist() == [0x7F00, 0x10, 0x7F00]
    assert set(memory["counts"]) == {"allocated"}


def test_trace_without_memory_events(tmp_path: Path) -> None:
    """A trace recorded without profile_memory has an empty memory table."""
    span = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1,
            "dur": 2}
    profile = kineto.parse(_write_trace(tmp_path / "t.json", [span]))
    assert not profile.has("memory")
    assert profile.table("memory").empty


def _add_memory_usage_table(export: Path, rows: list[tuple[int, int, int, int, int, int]]) -> None:
    """CUDA_GPU_MEMORY_USAGE_EVENTS as nsys 2022.4+ writes it, holding ``rows`` of
    (start, globalPid, deviceId, bytes, memKind, memoryOperationType)."""
    with sqlite3.connect(export) as conn:
        conn.execute("CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER NOT NULL, "
                     "globalPid INTEGER, deviceId INTEGER, contextId INTEGER, address INTEGER, "
                     "pc INTEGER, bytes INTEGER, memKind INTEGER, memoryOperationType INTEGER, "
                     "name TEXT, correlationId INTEGER, streamId INTEGER)")
        conn.executemany(
            "INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS (start, globalPid, deviceId, address, "
            "bytes, memKind, memoryOperationType) VALUES (?, ?, ?, 4096, ?, ?, ?)", rows)


@pytest.mark.corpus
def test_nsys_memory_usage_events(corpus: Path, nsys_available: str, nsys_cache_dir: Path,
                                  tmp_path: Path) -> None:
    """nsys driver allocations become reserved-memory changes; absent table, empty memory."""
    report = corpus / "nsys" / "sc22_1gpu_baseline.nsys-rep"
    export = nsys.export_report(report, cache_dir=nsys_cache_dir)
    assert not nsys.parse(export).has("memory")  # recorded without --cuda-memory-usage
    copy = Path(shutil.copy2(export, tmp_path / "with_memory.sqlite"))
    pid = 4242 << 24
    _add_memory_usage_table(copy, [(100, pid, 0, 1 << 21, 2, 0), (200, pid, 0, 1 << 20, 1, 0),
                                   (300, pid, 0, 1 << 21, 2, 1)])
    profile = nsys.parse(copy)
    memory = profile.table("memory")
    assert memory["bytes"].tolist() == [1 << 21, 1 << 20, -(1 << 21)]
    assert memory["device_kind"].tolist() == ["cuda", "cpu", "cuda"]
    assert memory["device"].tolist() == [0, -1, 0]
    assert memory["pid"].tolist() == [4242] * 3
    assert set(memory["counts"]) == {"reserved"}
    assert int(profile.table("devices")["memory_bytes"].iloc[0]) > 0  # TARGET_INFO_GPU
