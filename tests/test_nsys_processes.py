"""One Nsight Systems capture holding several processes (torchrun under nsys, one export of
several hosts): exports built by hand, one process at a time, as nsys writes them."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profreport.parsers import nsys

MS = 10**6


@dataclass
class Process:
    """One traced process: its pid and the host (hardware) id nsys packs above it, its
    ``step N`` NVTX ranges and DataLoader ranges ``(start, end, text)``, and its kernel launches
    ``(launch start, kernel start, kernel end, correlation id, device)``."""

    pid: int
    host: int = 1
    ranges: list[tuple[int, int, str]] = field(default_factory=list)
    launches: list[tuple[int, int, int, int, int]] = field(default_factory=list)

    @property
    def global_pid(self) -> int:
        """The process as nsys serialises it (globalPid: thread id 0)."""
        return (self.host << 48) | (self.pid << 24)

    @property
    def global_tid(self) -> int:
        """Its main thread (tid = pid) as nsys serialises it."""
        return self.global_pid | self.pid


def write_export(path: Path, processes: list[Process]) -> Path:
    """An nsys SQLite export of ``processes``: PROCESSES and ThreadNames name them, each
    launch is a cudaLaunchKernel runtime call on the process's main thread and a kernel
    carrying the process's globalPid and the call's correlation id (CUPTI numbers them per
    process, so two processes reuse them)."""
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);"
            "CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT);"
            "CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);"
            "CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, "
            "globalTid INTEGER);"
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, "
            "streamId INT, correlationId INT, globalPid INT, demangledName INT, shortName INT);"
            "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, globalTid INT, "
            "correlationId INT, nameId INT);"
            "CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, globalTid INT, "
            "domainId INT, text TEXT, textId INT);"
            "INSERT INTO StringIds VALUES (0, 'cudaLaunchKernel_v7000'), (1, 'gemm_kernel'), "
            "(2, 'python');"
            "INSERT INTO EXPORT_META_DATA VALUES ('EXPORT_SCHEMA_VERSION', '2.7.1');")
        for proc in processes:
            conn.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python')", (proc.global_pid,
                                                                             proc.pid))
            conn.execute("INSERT INTO ThreadNames VALUES (2, 0, ?)", (proc.global_tid,))
            conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, 0, ?, NULL)",
                             [(s, e, proc.global_tid, text) for s, e, text in proc.ranges])
            conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, 0)",
                             [(at, at + 5_000, proc.global_tid, corr)
                              for at, _, _, corr, _ in proc.launches])
            conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES "
                             "(?, ?, ?, 7, ?, ?, 1, 1)",
                             [(start, end, device, corr, proc.global_pid)
                              for _, start, end, corr, device in proc.launches])
    return path


def _launches(device: int, count: int = 4) -> list[tuple[int, int, int, int, int]]:
    """``count`` launches of 1 ms kernels on ``device``, correlation ids 1, 2, 3... as CUPTI
    gives them in each process."""
    return [(i * 10 * MS, i * 10 * MS + MS, i * 10 * MS + 2 * MS, i + 1, device)
            for i in range(count)]


def test_colliding_pids_of_two_hosts_keep_their_own_launches(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """One export of two hosts whose training processes both have pid 7 and number their
    correlation ids 1, 2, 3, 4: the process is the pid with its host bits, so each kernel is
    joined to its own host's launch (the 24-bit pid alone read one process launching on both
    GPUs, each kernel joined to two calls)."""
    from profreport.reports.analysis.gpu import max_devices_per_process
    from profreport.reports.analysis.launches import launch_pairs

    path = write_export(tmp_path / "two_hosts.sqlite",
                        [Process(7, host=1, launches=_launches(device=0)),
                         Process(7, host=2, launches=_launches(device=1))])
    profile = nsys.parse(path)
    runtime, kernels = profile.table("runtime"), profile.table("kernels")
    assert sorted(runtime["pid"].unique()) == [(1 << 24) | 7, (2 << 24) | 7]
    assert (runtime["tid"] == 7).all()
    pairs = sum(len(rows) for rows, _ in launch_pairs(profile, "kernels"))
    assert pairs == len(kernels) == 8  # one launch per kernel, not two
    assert max_devices_per_process(profile) == 1
    launched = kernels[["correlation", "device"]].merge(runtime[["correlation", "pid"]])
    assert launched.groupby("device")["pid"].unique().map(list).tolist() == [
        [(1 << 24) | 7], [(2 << 24) | 7]]
    monkeypatch.setattr(nsys, "NATIVE_READER", False)
    through_sql = nsys.parse(path)
    for name in ("kernels", "runtime", "ranges"):
        pd.testing.assert_frame_equal(profile.table(name), through_sql.table(name))


def test_one_host_keeps_its_pids_and_ids(tmp_path: Path) -> None:
    """Two processes of one host: pids as the OS gave them (no host bits), the first launching
    process's correlation ids as CUPTI recorded them, the second's qualified above 2**32."""
    path = write_export(tmp_path / "one_host.sqlite",
                        [Process(7, launches=_launches(device=0)),
                         Process(9, launches=_launches(device=1))])
    profile = nsys.parse(path)
    runtime = profile.table("runtime")
    assert sorted(runtime["pid"].unique()) == [7, 9]
    ids = runtime.groupby("pid")["correlation"].apply(list).to_dict()
    assert ids == {7: [1, 2, 3, 4], 9: [2**32 + 1, 2**32 + 2, 2**32 + 3, 2**32 + 4]}
    assert np.array_equal(np.sort(profile.table("kernels")["correlation"].to_numpy()),
                          np.sort(runtime["correlation"].to_numpy()))
