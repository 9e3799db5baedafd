"""One Nsight Systems capture holding several processes (torchrun under nsys, one export of
several hosts): exports built by hand, one process at a time, as nsys writes them."""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profreport import concepts
from profreport.parsers import nsys
from profreport.reports.analysis.steps import phases_text

MS = 10**6


@dataclass
class Process:
    """One traced process: its pid and the host (hardware) id nsys packs above it, its
    ``step N`` NVTX ranges and DataLoader ranges ``(start, end, text)``, its kernel launches
    ``(launch start, kernel start, kernel end, correlation id, device)`` and its NVTX marks
    ``(domain, text)`` ('' the default domain)."""

    pid: int
    host: int = 1
    ranges: list[tuple[int, int, str]] = field(default_factory=list)
    launches: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    marks: list[tuple[str, str]] = field(default_factory=list)

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
    process, so two processes reuse them); a mark is recorded as nsys 2022.4 records nvtx
    0.2.11's ``nvtx.mark(text, domain=...)``: a domain-create event naming the process's
    domainId, and the mark (no end) in it, its text a registered string."""
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
            _write_marks(conn, proc)
    return path


def _write_marks(conn: sqlite3.Connection, proc: Process) -> None:
    """``proc``'s NVTX marks: each named domain created once (domainIds 1, 2... per process),
    each text a StringIds row."""
    domains = {name: at for at, name in enumerate(dict.fromkeys(
        name for name, _ in proc.marks if name), start=1)}
    conn.executemany("INSERT INTO NVTX_EVENTS VALUES (0, NULL, 75, ?, ?, ?, NULL)",
                     [(proc.global_tid, at, name) for name, at in domains.items()])
    for at, (domain, text) in enumerate(proc.marks, start=1):
        string = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM StringIds").fetchone()[0]
        conn.execute("INSERT INTO StringIds VALUES (?, ?)", (string, text))
        conn.execute("INSERT INTO NVTX_EVENTS VALUES (?, NULL, 34, ?, ?, NULL, ?)",
                     (at * 1000, proc.global_tid, domains.get(domain, 0), string))


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
    assert max_devices_per_process(profile) == (1, None)
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


def _stepped(pid: int, step_ms: int, *, host: int = 1, device: int = 0,
             steps: int = 6) -> Process:
    """A training process: ``steps`` 'step N' ranges of ``step_ms`` (a 2 ms DataLoader range
    before each), one kernel of ``step_ms`` / 2 launched at the start of each step on
    ``device``."""
    ranges, launches = [], []
    for i in range(steps):
        start = i * (step_ms + 2) * MS
        ranges += [(start, start + 2 * MS, "dataloader"),
                   (start + 2 * MS, start + (step_ms + 2) * MS, f"step {i}")]
        launch = start + 3 * MS
        launches.append((launch, launch + MS, launch + MS + step_ms * MS // 2, i + 1, device))
    return Process(pid, host=host, ranges=ranges, launches=launches)


def _report(path: Path):  # type: ignore[no-untyped-def]
    """``analyze`` of one export, in this process."""
    from profreport.executors import ExecutorOptions
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    return analyze_paths([path], AnalyzeOptions(executor=ExecutorOptions(processes=1)))


def test_two_stepped_processes_are_two_ranks_of_unknown_rank(tmp_path: Path) -> None:
    """torchrun under nsys, two GPU ranks in one capture (each launches on its own device,
    correlation ids 1, 2, 3... in both): one profile per process, each with its own steps,
    DataLoader ranges and kernels, analysed as the ranks of a job named by pid (the capture
    records no rank); the job's pace is the slower process's (it took process 7's steps and
    kept process 9's kernels in its figures). torchrun's own process is no rank."""
    path = write_export(tmp_path / "two_ranks.sqlite",
                        [Process(3), _stepped(7, 20, device=0), _stepped(9, 40, device=1)])
    parts = nsys.process_profiles(nsys.parse(path))
    assert [(p.process, p.rank) for p in parts] == [(7, None), (9, None)]
    # torchrun's own process (pid 3, a thread and nothing else) is in neither.
    assert [set(p.table("threads")["pid"]) for p in parts] == [{7}, {9}]
    for part, device, step_ms in zip(parts, (0, 1), (20, 40), strict=True):
        steps, kernels = part.table("steps"), part.table("kernels")
        assert len(steps) == 6 and set(steps["pid"]) == {part.process}
        assert set((steps["end"] - steps["start"]) // MS) == {step_ms}
        assert len(part.table("dataloader")) == 6
        assert len(kernels) == 6 and set(kernels["device"]) == {device}
        assert len(part.table("runtime")) == 6
        assert not any("stay in the figures" in note for note in part.meta.notes)
    report = _report(path)
    run = report.runs[0]
    job = run.job
    assert job is not None
    assert [(r.rank, r.process, r.label) for r in job.ranks] == [
        (None, 7, "pid 7"), (None, 9, "pid 9")]
    from profreport.reports.render.html import render_html
    from profreport.reports.render.json import render_json
    from profreport.reports.render.markdown import render_markdown

    markdown = render_markdown(report)
    assert "| pid 9 (slowest) | " in markdown and "| pid 7 | " in markdown
    assert "Pid 9 is a straggler: 42.0 ms per step" in markdown
    assert "<tr><td>pid 9 (slowest)</td>" in render_html(report)
    ranks = json.loads(render_json(report))["runs"][0]["job"]["ranks"]
    assert [(r["rank"], r["process"]) for r in ranks] == [(None, 7), (None, 9)]
    assert [r.step_ns // MS for r in job.ranks] == [22, 42]
    assert job.slowest == "pid 9" and job.slowest_rank is None and job.straggler
    assert job.verdict_reason.startswith("pid 9, the slowest, takes 42.0 ms per step against "
                                         "22.0 ms for the other ranks (+90.9%)")
    assert run.metrics.steps is not None and run.metrics.steps.mean_ns == 20 * MS
    # Each process's step time, by pid (it was {}: no per-rank chart, no imbalance in a study).
    from profreport.reports.analysis.scaling import _imbalance
    from profreport.reports.render.charts import per_rank_figure

    assert run.metrics.per_rank_step_ns == {"pid 7": 22 * MS, "pid 9": 42 * MS}
    assert json.loads(render_json(report))["runs"][0]["metrics"]["per_rank_step_ms"] == {
        "pid 7": 22.0, "pid 9": 42.0}
    figure = per_rank_figure(run)
    assert figure is not None and list(figure.data[0].y) == ["pid 7", "pid 9"]
    assert _imbalance(run) == pytest.approx(42 / 22)
    assert [(Path(i.path).name, i.rank) for i in run.inputs] == [("two_ranks.sqlite", None)]
    assert ("the Nsight Systems figures come from pid 7's profile, one of the 2 processes of "
            "the capture, whose rank it does not record; the other processes' own figures are in "
            "the per-rank verdicts") in run.notes


def test_a_process_without_steps_is_a_rank_with_its_own_gpu_work(tmp_path: Path) -> None:
    """One process marks its steps, the other only launches kernels (no step ranges): the
    second is a rank of its own, and its 6 kernels on device 1 are not in the first's GPU
    figures, which hold only the 6 kernels the stepped process launched."""
    other = Process(9, launches=_launches(device=1, count=6))
    path = write_export(tmp_path / "stepped_and_not.sqlite", [_stepped(7, 20), other])
    stepped, unstepped = nsys.process_profiles(nsys.parse(path))
    assert (stepped.process, unstepped.process) == (7, 9)
    assert unstepped.table("steps").empty and len(unstepped.table("kernels")) == 6
    assert set(stepped.table("kernels")["device"]) == {0}
    run = _report(path).runs[0]
    assert run.job is not None and [r.label for r in run.job.ranks] == ["pid 7", "pid 9"]
    assert [r.step_ns for r in run.job.ranks] == [22 * MS, None]
    assert sum(k.count for k in run.metrics.top_kernels) == 6


def test_colliding_pids_of_two_hosts_are_two_ranks(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Two hosts' training processes both have pid 7: two ranks, named with their host (their
    ranges, calls and kernels read alike by SQL and from the pages)."""
    path = write_export(tmp_path / "two_hosts_steps.sqlite",
                        [_stepped(7, 20, host=1), _stepped(7, 30, host=2)])
    profile = nsys.parse(path)
    with monkeypatch.context() as patched:
        patched.setattr(nsys, "NATIVE_READER", False)
        through_sql = nsys.parse(path)
    for name in ("ranges", "runtime", "kernels", "steps", "dataloader"):
        pd.testing.assert_frame_equal(profile.table(name), through_sql.table(name))
    parts = nsys.process_profiles(profile)
    assert [p.process for p in parts] == [(1 << 24) | 7, (2 << 24) | 7]
    assert [len(p.table("kernels")) for p in parts] == [6, 6]
    assert [len(p.table("steps")) for p in parts] == [6, 6]
    job = _report(path).runs[0].job
    assert job is not None
    assert [r.label for r in job.ranks] == ["pid 7 of host/VM 1", "pid 7 of host/VM 2"]
    assert [r.step_ns // MS for r in job.ranks] == [22, 32]


def test_a_launcher_with_os_calls_only_is_no_rank(tmp_path: Path) -> None:
    """One training process beside torchrun's launcher, which records no steps and no runtime
    calls: the capture is read whole, as before."""
    path = write_export(tmp_path / "one_rank.sqlite", [_stepped(7, 20), Process(3)])
    profile = nsys.parse(path)
    assert nsys.process_profiles(profile) == [profile]
    assert _report(path).runs[0].job is None


#: Two ranks of a gloo job, each marking 6 steps with NVTX 'step N' ranges: rank 0's steps take
#: 20 ms, rank 1's 60 ms (no collective inside a step, so neither waits for the other there);
#: each records its rank as profreport's runner does (launch.record_rank), and writes which pid
#: it is into PIDS_DIR, for the test alone.
_TWO_RANKS = """
import os, sys, time
import nvtx
import torch.distributed as dist
from profreport.runner.launch import record_rank

dist.init_process_group("gloo")
rank = dist.get_rank()
record_rank(rank, dist.get_world_size())
with open(os.path.join(sys.argv[1], f"rank{rank}"), "w") as handle:
    handle.write(str(os.getpid()))
dist.barrier()
for step in range(6):
    nvtx.push_range(f"step {step}")
    time.sleep(0.02 + 0.04 * rank)
    nvtx.pop_range()
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.nsys
@pytest.mark.slow
def test_real_torchrun_capture_reads_as_two_ranks(tmp_path: Path, nsys_available: str) -> None:
    """A real capture of torchrun --nproc_per_node 2 under nsys (--trace=osrt,nvtx, gloo on
    CPU), each rank marking its rank as the runner does: two ranks, each process the rank it
    recorded (nvtx's mark in domain 'profreport', as nsys 2022.4 records it) with its own 6
    steps; rank 1, 60 ms a step, is the slowest and a straggler; torchrun's own process (OS
    calls only) is no rank."""
    import subprocess
    import sys

    from profreport.runner.launch import NSYS_QUIET_OPTIONS

    script = tmp_path / "two_ranks.py"
    script.write_text(_TWO_RANKS, encoding="utf-8")
    report = tmp_path / "two_ranks"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([nsys_available, "profile", "--trace=osrt,nvtx", *NSYS_QUIET_OPTIONS,
                    "--force-overwrite=true", "-o", str(report), sys.executable, "-m",
                    "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
                    str(tmp_path)], check=True, capture_output=True, env=env, timeout=300)
    pids = [int((tmp_path / f"rank{rank}").read_text()) for rank in (0, 1)]
    path = nsys.export_report(report.with_suffix(".nsys-rep"), cache_dir=tmp_path / "cache")
    parts = nsys.process_profiles(nsys.parse(path))
    assert sorted((p.process, p.rank, p.meta.world_size) for p in parts) == sorted(
        (pid, rank, 2) for rank, pid in enumerate(pids))
    assert [len(p.table("steps")) for p in parts] == [6, 6]
    job = _report(path).runs[0].job
    assert job is not None
    assert [(r.label, r.process) for r in job.ranks] == [("rank 0", None), ("rank 1", None)]
    assert job.slowest == "rank 1" and job.slowest_rank == 1 and job.straggler
    assert 60 * MS <= job.ranks[1].step_ns < 90 * MS  # type: ignore[operator]
    assert 20 * MS <= job.ranks[0].step_ns < 50 * MS  # type: ignore[operator]


def test_beside_ranked_traces_the_processes_are_no_further_ranks(tmp_path: Path,
                                                                 fixtures_dir: Path) -> None:
    """A run folder with each rank's torch.profiler trace (they record their rank) and one nsys
    capture of both processes: the job's ranks are the traces' 0 and 1, not four ranks, and the
    Nsight Systems figures come from one process, said to be of unknown rank."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(fixtures_dir / "ddp_gloo" / "trace", run / "trace")
    write_export(run / "nsys.sqlite", [_stepped(7, 20), _stepped(9, 40)])
    analysed = _report(run).runs[0]
    assert analysed.job is not None
    assert [r.label for r in analysed.job.ranks] == ["rank 0", "rank 1"]
    assert ("the Nsight Systems figures come from pid 7's profile, one of the 2 processes of "
            "the capture, whose rank it does not record") in analysed.notes


def test_processes_sharing_a_repeated_range_are_of_unknown_role(tmp_path: Path) -> None:
    """Two CPU processes annotate each pass as 'batch i' (no range named as a step, no runtime
    calls, no rank recorded): ranks run the same code, but so do the workers of one DataLoader,
    so they are no job (they were read as two ranks of unknown rank, as two loader workers
    were); the capture is read whole and a note says their role is unknown."""
    processes = []
    for pid, step_ms in ((7, 20), (9, 30)):
        processes.append(Process(pid, ranges=[(i * step_ms * MS, (i + 1) * step_ms * MS,
                                               f"batch {i}") for i in range(6)]))
    path = write_export(tmp_path / "batches.sqlite", processes)
    _read_whole(path, "pid 7, pid 9: each repeats the range 'batch #' as a step would, and no "
                "process of the capture launched GPU work or recorded its rank, so whether "
                "they are the ranks of one job or the workers of one DataLoader (both run the "
                "same code) is unknown: they are not read as a job; their ranges are in these "
                "figures", step_ms=30)


def test_dataloader_workers_beside_a_gpu_process_are_no_ranks(tmp_path: Path) -> None:
    """A training process repeating 'train_step' (a kernel in each) beside two DataLoader
    workers each repeating 'load_sample' 12 times with no GPU work: the workers run the same
    code, as ranks do, but beside a process that launched GPU work a process with none and no
    rank recorded is no rank (it was a job of 3 ranks: 'pid 7, the slowest, takes 25.0 ms per
    step against 6.5 ms for the other ranks (+284.6%)'); the capture is read whole, its steps
    the training process's."""
    train, worker = _training_and_loading(sample_us=6500)
    other = Process(11, ranges=[(start + 3 * MS, end + 3 * MS, text)
                                for start, end, text in worker.ranges[::2]])
    worker.ranges = worker.ranges[::2]
    path = write_export(tmp_path / "two_workers.sqlite", [train, worker, other])
    _read_whole(path, "pid 9, pid 11: each repeats the range 'load_sample' as a step would, "
                "but none of them launched GPU work or recorded its rank, as another "
                "process of the capture did, so they are no ranks of the job (a DataLoader "
                "worker annotating each sample; the workers of one DataLoader run the same "
                "code); their ranges are in these figures", step_ms=25)
    profile = nsys.parse(path)
    nsys.process_profiles(profile)
    assert (profile.meta.step_span, len(profile.table("steps"))) == ("train_step", 6)


def _marked(process: Process, *texts: str, domain: str = "profreport") -> Process:
    """``process`` with NVTX marks ``texts`` in ``domain``."""
    process.marks += [(domain, text) for text in texts]
    return process


def test_processes_that_record_their_rank_are_those_ranks(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """torchrun under nsys, each rank of profreport's runner marking 'rank R of 2' in domain
    'profreport' (pid 7 is rank 1, pid 9 rank 0; torchrun's own process marks nothing): each
    process's profile has the rank and world size it recorded (read alike from the pages and by
    SQL), the job's ranks are 'rank 0' and 'rank 1', and the detailed figures are rank 0's
    (they were pid 7's, the lowest pid, with the rank unknown)."""
    path = write_export(tmp_path / "ranked.sqlite", [
        Process(3), _marked(_stepped(7, 40, device=1), "rank 1 of 2"),
        _marked(_stepped(9, 20, device=0), "rank 0 of 2")])
    profile = nsys.parse(path)
    assert isinstance(profile.meta, nsys.NsysMeta)
    assert profile.meta.recorded_ranks == {7: [(1, 2)], 9: [(0, 2)]}
    monkeypatch.setattr(nsys, "NATIVE_READER", False)
    assert nsys.parse(path).meta.recorded_ranks == profile.meta.recorded_ranks  # type: ignore[attr-defined]
    monkeypatch.undo()
    parts = nsys.process_profiles(profile)
    assert [(p.process, p.rank, p.meta.world_size) for p in parts] == [(7, 1, 2), (9, 0, 2)]
    assert ("pid 7: one of the 2 processes of this capture with work of their own (pid 7, "
            "pid 9), read as the ranks of one job; it recorded its rank, rank 1 of 2 (an NVTX "
            "mark in domain 'profreport')") in parts[0].meta.notes
    assert parts[0].table("ranges")["name"].tolist().count("rank 1 of 2") == 0  # a mark
    report = _report(path)
    run = report.runs[0]
    job = run.job
    assert job is not None
    assert [(r.rank, r.process, r.label) for r in job.ranks] == [
        (0, None, "rank 0"), (1, None, "rank 1")]
    assert [r.step_ns // MS for r in job.ranks] == [22, 42]  # type: ignore[operator]
    assert job.slowest == "rank 1" and job.slowest_rank == 1 and job.straggler
    assert run.metrics.steps is not None and run.metrics.steps.mean_ns == 20 * MS
    assert sum(k.count for k in run.metrics.top_kernels) == 6  # rank 0's kernels alone
    assert run.metrics.per_rank_step_ns == {0: 22 * MS, 1: 42 * MS}
    assert run.detailed_rank == 0 and run.world_size == 2
    assert [(Path(i.path).name, i.rank) for i in run.inputs] == [("ranked.sqlite", None)]
    assert ("the Nsight Systems figures come from rank 0's profile (pid 9), one of the 2 "
            "processes of the capture; the other processes' own figures are in the per-rank "
            "verdicts") in run.notes
    from profreport.reports.render.json import render_json
    from profreport.reports.render.markdown import render_markdown

    assert "| 1 (slowest) | Balanced | 42.0 ms |" in render_markdown(report)
    ranks = json.loads(render_json(report))["runs"][0]["job"]["ranks"]
    assert [(r["rank"], r["process"]) for r in ranks] == [(0, None), (1, None)]


def test_processes_without_their_own_rank_record_stay_of_unknown_rank(tmp_path: Path) -> None:
    """A foreign capture whose processes mark 'rank 0 of 2' in a domain of their own and in the
    default domain (not profreport's): no rank is read, each process is named by its pid and
    its note says what record was missing."""
    path = write_export(tmp_path / "foreign.sqlite", [
        _marked(_marked(_stepped(7, 20), "rank 0 of 2", domain="myapp"), "rank 0 of 2",
                domain=""),
        _marked(_stepped(9, 40), "rank 1 of 2", domain="myapp")])
    profile = nsys.parse(path)
    assert profile.meta.recorded_ranks == {}  # type: ignore[attr-defined]
    parts = nsys.process_profiles(profile)
    assert [(p.process, p.rank, p.meta.world_size) for p in parts] == [(7, None, None),
                                                                      (9, None, None)]
    assert ("pid 9: one of the 2 processes of this capture with work of their own (pid 7, "
            "pid 9), read as the ranks of one job; its rank is unknown (it recorded none, as "
            "profreport's runner does with an NVTX mark 'rank R of W' in domain "
            "'profreport', and an nsys export records no process's environment, where "
            "torchrun's RANK is): it is named by its pid") in parts[1].meta.notes
    job = _report(path).runs[0].job
    assert job is not None and [r.label for r in job.ranks] == ["pid 7", "pid 9"]


def test_a_process_recording_two_ranks_stays_of_unknown_rank(tmp_path: Path) -> None:
    """One process marks two different ranks, and two others both mark rank 2: none of those
    three is given a rank (each note says why); the process with a rank of its own keeps it,
    and the job holds all four."""
    path = write_export(tmp_path / "contradicting.sqlite", [
        _marked(_stepped(7, 20), "rank 0 of 4", "rank 1 of 4", "rank 0 of 4"),
        _marked(_stepped(8, 20), "rank 2 of 4"), _marked(_stepped(9, 20), "rank 2 of 4"),
        _marked(_stepped(10, 30), "rank 3 of 4", "not a rank")])
    parts = nsys.process_profiles(nsys.parse(path))
    assert [(p.process, p.rank) for p in parts] == [(7, None), (8, None), (9, None), (10, 3)]
    assert parts[0].meta.notes[-1].endswith(
        "its rank is unknown: it recorded 2 different ranks (rank 0 of 4, rank 1 of 4), so "
        "none is taken: it is named by its pid")
    assert parts[1].meta.notes[-1].endswith(
        "its rank is unknown: it recorded rank 2 of 4, as pid 9 did, so neither is taken: it "
        "is named by its pid")
    run = _report(path).runs[0]
    job = run.job
    assert job is not None
    assert [r.label for r in job.ranks] == ["rank 3", "pid 7", "pid 8", "pid 9"]
    assert list(run.metrics.per_rank_step_ns.items()) == [
        (3, 32 * MS), ("pid 7", 22 * MS), ("pid 8", 22 * MS), ("pid 9", 22 * MS)]


def test_a_capture_of_one_rank_is_that_rank(tmp_path: Path) -> None:
    """nsys run on each node of a multi-node job (the runner's srun nsys ... torchrun), one rank
    per node: each capture holds torchrun's process and one rank, which marked 'rank R of 2'.
    Each capture is the rank it recorded (world size 2, a note saying so), and the two
    captures of one run folder are ranks 0 and 1 of one job (the second was left out of every
    figure as a second capture of no rank)."""
    run = tmp_path / "run"
    run.mkdir()
    for node, (pid, step_ms) in enumerate(((7, 20), (7, 30))):
        write_export(run / f"nsys.node{node}.sqlite",
                     [Process(3), _marked(_stepped(pid, step_ms), f"rank {node} of 2")])
    profile = nsys.parse(run / "nsys.node1.sqlite")
    assert (profile.rank, profile.meta.world_size, profile.meta.distributed) == (1, 2, True)
    assert profile.meta.notes == ["pid 7, the capture's one process with work of its own: it "
                                  "recorded its rank, rank 1 of 2 (an NVTX mark in domain "
                                  "'profreport')"]
    assert nsys.process_profiles(profile) == [profile]
    analysed = _report(run).runs[0]
    assert analysed.job is not None
    assert [(r.label, r.step_ns // MS) for r in analysed.job.ranks] == [  # type: ignore[operator]
        ("rank 0", 22), ("rank 1", 32)]
    assert analysed.detailed_rank == 0 and analysed.world_size == 2
    assert [(Path(i.path).name, i.rank) for i in analysed.inputs] == [
        ("nsys.node0.sqlite", 0), ("nsys.node1.sqlite", 1)]
    assert not any("are not in the per-step figures" in note for note in analysed.notes)
    contradicting = write_export(tmp_path / "two_ranks_one_process.sqlite",
                                 [_marked(_stepped(7, 20), "rank 0 of 2", "rank 1 of 2")])
    profile = nsys.parse(contradicting)
    assert (profile.rank, profile.meta.world_size) == (None, None)
    assert profile.meta.notes == ["pid 7, the capture's one process with work of its own: its "
                                  "rank is unknown: it recorded 2 different ranks (rank 0 of 2, "
                                  "rank 1 of 2), so none is taken"]


def _with_device_count(path: Path, pid: int) -> Path:
    """``path`` with one cudaGetDeviceCount call by process ``pid`` (no GPU work follows it)."""
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO StringIds VALUES (99, 'cudaGetDeviceCount_v3020')")
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, 1, 99)",
                     (MS, MS + 100, Process(pid).global_tid))
    return path


def test_a_process_whose_runtime_calls_launched_nothing_is_no_rank(tmp_path: Path) -> None:
    """One training process beside one that made a single cudaGetDeviceCount call and launched
    no GPU work: no job (it was a job of 2 ranks, 'pid 9 unknown', the ranks said to disagree);
    the capture is read whole, a note naming the other process."""
    path = _with_device_count(write_export(tmp_path / "worker.sqlite",
                                           [_stepped(7, 20), Process(9)]), 9)
    _read_whole(path, "pid 9: runtime calls that launched no GPU work, and no steps, so no rank "
                "of the job; their calls are in these figures", step_ms=20)


def test_a_capture_of_one_rank_beside_a_worker_is_that_rank(tmp_path: Path) -> None:
    """nsys run on each node, one rank per node, each capture also holding a DataLoader worker:
    one that made a cudaGetDeviceCount call on node 0, one annotating each sample on node 1.
    Each capture is still the rank its one process with work of its own recorded (both were
    read whole with no rank, so the run was two captures of no rank, the second left out of
    the per-step figures)."""
    run = tmp_path / "run"
    run.mkdir()
    worker = Process(9, ranges=[(i * 7 * MS, i * 7 * MS + 5 * MS, "load_sample")
                                for i in range(24)])
    _with_device_count(write_export(run / "nsys.node0.sqlite", [
        Process(3), _marked(_stepped(7, 20), "rank 0 of 2"), Process(9)]), 9)
    write_export(run / "nsys.node1.sqlite",
                 [Process(3), _marked(_stepped(7, 30), "rank 1 of 2"), worker])
    for node in (0, 1):
        profile = nsys.parse(run / f"nsys.node{node}.sqlite")
        assert nsys.process_profiles(profile) == [profile]
        assert (profile.rank, profile.meta.world_size, profile.meta.distributed) == (
            node, 2, True)
        assert (f"pid 7, the capture's one process with work of its own: it recorded its "
                f"rank, rank {node} of 2 (an NVTX mark in domain 'profreport')"
                ) in profile.meta.notes
    analysed = _report(run).runs[0]
    assert analysed.job is not None and analysed.world_size == 2
    assert [(r.label, r.step_ns // MS) for r in analysed.job.ranks] == [  # type: ignore[operator]
        ("rank 0", 22), ("rank 1", 32)]
    assert [(Path(i.path).name, i.rank) for i in analysed.inputs] == [
        ("nsys.node0.sqlite", 0), ("nsys.node1.sqlite", 1)]


def test_the_detailed_note_counts_the_processes_of_its_own_capture(tmp_path: Path) -> None:
    """Two node captures of two ranks each ('rank R of 4', one rank per GPU): the detailed
    figures are rank 0's, one of the 2 processes of its capture (the note counted the 4
    processes of both captures)."""
    run = tmp_path / "run"
    run.mkdir()
    for node in range(2):
        write_export(run / f"nsys.node{node}.sqlite", [
            Process(3), _marked(_stepped(7, 20 + node * 5, device=0), f"rank {2 * node} of 4"),
            _marked(_stepped(9, 22 + node * 5, device=1), f"rank {2 * node + 1} of 4")])
    analysed = _report(run).runs[0]
    assert analysed.job is not None and analysed.world_size == 4
    assert [n for n in analysed.notes if "Nsight Systems figures" in n] == [
        "the Nsight Systems figures come from rank 0's profile (pid 7), one of the 2 processes "
        "of the capture; the other processes' own figures are in the per-rank verdicts"]


def test_without_gpu_work_the_step_is_the_range_holding_the_others(tmp_path: Path) -> None:
    """A CPU training process repeating 'train_step' (6 x 25 ms) beside a DataLoader worker
    repeating 'load_sample' (24 x 6.5 ms, busier), neither launching GPU work nor recording
    a rank: the training steps hold the samples loaded meanwhile, no sample holds a step, so
    the steps are the 6 'train_step' (they were the worker's 24 samples, and pid 7 was said to
    be no rank); only the worker is said to be no rank. When neither range holds the other's
    (each overlaps the next), the step source is ambiguous: a note names both and the steps
    are unknown."""
    train = Process(7, ranges=[(i * 25 * MS, (i + 1) * 25 * MS, "train_step")
                               for i in range(6)])
    worker = Process(9, ranges=[(i * 7 * MS, i * 7 * MS + 6500 * 1000, "load_sample")
                                for i in range(24)])
    profile = nsys.parse(write_export(tmp_path / "cpu.sqlite", [train, worker]))
    assert nsys.process_profiles(profile) == [profile]
    assert (profile.meta.step_span, len(profile.table("steps"))) == ("train_step", 6)
    assert profile.meta.notes == [
        "no NVTX range is named as a step: the 6 steps are the repeated range 'train_step'",
        "pid 9: its range 'load_sample' repeats as a step would, but in no other process, and "
        "it launched no GPU work, so it is no rank of the job; its ranges are in these figures"]
    worker.ranges = [(i * 30 * MS + 20 * MS, i * 30 * MS + 35 * MS, "load_sample")
                     for i in range(6)]
    train.ranges = [(i * 30 * MS, i * 30 * MS + 25 * MS, "train_step") for i in range(6)]
    path = write_export(tmp_path / "ambiguous.sqlite", [train, worker])
    profile = nsys.parse(path)
    assert nsys.process_profiles(profile) == [profile]
    assert (profile.meta.step_span, len(profile.table("steps"))) == (None, 0)
    assert profile.meta.notes == [
        "the step source is ambiguous: pid 7's range 'train_step', pid 9's range 'load_sample' "
        "repeat as a step would, none holds the others' ranges, and no process launched GPU "
        "work or recorded its rank, so the steps are unknown"]
    assert _report(path).runs[0].metrics.steps is None


#: A CPU training loop marking each step 'train_step' (16 batches of 4) from a DataLoader of
#: two workers, each marking every sample it loads 'load_sample' (4 ms each).
_TWO_WORKERS = """
import time
import nvtx
import torch
from torch.utils.data import DataLoader, Dataset

class Samples(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        with nvtx.annotate("load_sample"):
            time.sleep(0.004)
            return torch.randn(32)

if __name__ == "__main__":
    model = torch.nn.Linear(32, 32)
    for batch in DataLoader(Samples(), batch_size=4, num_workers=2):
        with nvtx.annotate("train_step"):
            model(batch).sum().backward()
            time.sleep(0.01)
"""


@pytest.mark.nsys
def test_real_capture_of_two_loader_workers_is_no_job(tmp_path: Path, nsys_available: str
                                                      ) -> None:
    """A real capture (nsys --trace=osrt,nvtx, forked workers traced) of a CPU training loop
    whose DataLoader's two workers mark each sample: the workers, repeating one range as
    ranks would, are no job (they were read as two ranks of 32 'steps', the samples, and the
    training process was none); the capture is read whole, its steps the 16 'train_step',
    a note saying the workers' role is unknown."""
    import re
    import subprocess
    import sys

    from profreport.runner.launch import NSYS_QUIET_OPTIONS

    script = tmp_path / "two_workers.py"
    script.write_text(_TWO_WORKERS, encoding="utf-8")
    report = tmp_path / "two_workers"
    subprocess.run([nsys_available, "profile", "--trace=osrt,nvtx", *NSYS_QUIET_OPTIONS,
                    "--trace-fork-before-exec=true", "--force-overwrite=true", "-o", str(report),
                    sys.executable, str(script)], check=True, capture_output=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    path = nsys.export_report(report.with_suffix(".nsys-rep"), cache_dir=tmp_path / "cache")
    profile = nsys.parse(path)
    assert len(set(profile.table("ranges")["pid"])) == 3
    assert nsys.process_profiles(profile) == [profile]
    assert (profile.meta.step_span, len(profile.table("steps"))) == ("train_step", 16)
    assert [n for n in profile.meta.notes if re.fullmatch(
        r"pid \d+, pid \d+: each repeats the range 'load_sample' as a step would, and no "
        r"process of the capture launched GPU work or recorded its rank, so whether they are "
        r".* is unknown: they are not read as a job; their ranges are in these figures", n)]
    assert _report(path).runs[0].job is None


def test_a_process_marking_steps_beside_a_gpu_process_is_named(tmp_path: Path) -> None:
    """A process marking 'step N' ranges with no GPU work and no rank recorded, beside a
    training process that launched kernels, is no rank, and a note says so (since b991622 it
    was left out with no word); the capture's steps are the training process's."""
    marking = Process(9, ranges=[(i * 30 * MS, i * 30 * MS + 25 * MS, f"step {i}")
                                 for i in range(6)])
    _read_whole(write_export(tmp_path / "marking.sqlite", [_stepped(7, 20), marking]),
                "pid 9: its range 'step N' repeats as a step would, but it launched no GPU "
                "work and recorded no rank, as another process of the capture did, so it is no "
                "rank of the job (a DataLoader worker annotating each sample; the workers of "
                "one DataLoader run the same code); its ranges are in these figures", step_ms=20)


def _read_whole(path: Path, note: str, step_ms: int) -> None:
    """The capture at ``path`` is read whole, its last note ``note``: no job, its steps of
    ``step_ms``."""
    profile = nsys.parse(path)
    assert nsys.process_profiles(profile) == [profile]
    assert profile.meta.notes[-1] == note
    run = _report(path).runs[0]
    assert run.job is None
    assert run.metrics.steps is not None and run.metrics.steps.mean_ns == step_ms * MS


def test_a_capture_the_manifest_ranks_is_that_one_rank(tmp_path: Path) -> None:
    """A capture the manifest gives rank 1 holding two processes with work of their own: it is
    rank 1, read whole with a note naming both (it was split into two processes of unknown
    rank, and rank 1 was lost); a capture the manifest gives rank 0, whose pid 9 only asked for
    the device, is rank 0 (it was split into pid 7 and pid 9, both of unknown rank)."""
    from profreport.reports.analysis.ranks import RankTask, read_rank

    path = write_export(tmp_path / "nsys.rank1.sqlite", [_stepped(7, 20), _stepped(9, 40)])
    result = read_rank(RankTask(str(path), str(tmp_path), rank=1, whole=True))
    assert result.failure is None
    assert [(s.input.rank, s.input.process) for s in result.summaries] == [(1, None)]
    assert ("this capture is rank 1: its 2 processes with work of their own (pid 7, pid 9) are "
            "read together as that rank") in result.profiles[0].meta.notes
    worker = _with_device_count(write_export(tmp_path / "nsys.rank0.sqlite",
                                             [_stepped(7, 20), Process(9)]), 9)
    result = read_rank(RankTask(str(worker), str(tmp_path), rank=0))
    assert [(s.input.rank, s.input.process) for s in result.summaries] == [(0, None)]


def _training_and_loading(marks: tuple[str, ...] = (), sample_us: int = 5000) -> list[Process]:
    """pid 7 trains, 'train_step' repeated 6 times (25 ms each, a 19 ms kernel launched in
    each); pid 9 annotates each sample it loads, 'load_sample' repeated 24 times (``sample_us``
    each, one every 7 ms), and makes no runtime call (a DataLoader worker); ``marks`` the texts
    of their profreport marks, in that order."""
    train = Process(7, ranges=[(i * 30 * MS, i * 30 * MS + 25 * MS, "train_step")
                               for i in range(6)],
                    launches=[(i * 30 * MS + MS, i * 30 * MS + 2 * MS, i * 30 * MS + 21 * MS,
                               i + 1, 0) for i in range(6)])
    worker = Process(9, ranges=[(i * 7 * MS, i * 7 * MS + sample_us * 1000, "load_sample")
                                for i in range(24)])
    for process, text in zip((train, worker), marks, strict=False):
        _marked(process, text)
    return [train, worker]


def test_a_range_no_other_process_repeats_makes_no_rank(tmp_path: Path) -> None:
    """A training process repeating 'train_step' beside a DataLoader worker repeating
    'load_sample' with no GPU work: the worker is no rank (the job of 2 ranks read 'pid 7, the
    slowest, takes 25.0 ms per step against 5.0 ms (+400.0%)'); the capture is read whole,
    its steps the 'train_step' ranges, and a note says why pid 9 is none; so too when the
    worker's ranges cover more time (6.5 ms each, 156 ms in all against 150 ms), whose 24
    samples were the steps. The same two processes, each recording its rank, are ranks 0
    and 1."""
    note = ("pid 9: its range 'load_sample' repeats as a step would, but it launched no GPU "
            "work and recorded no rank, as another process of the capture did, so it is no rank "
            "of the job (a DataLoader worker annotating each sample; the workers of one "
            "DataLoader run the same code); its ranges are in these figures")
    _read_whole(write_export(tmp_path / "loading.sqlite", _training_and_loading()), note,
                step_ms=25)
    busier = write_export(tmp_path / "busier.sqlite", _training_and_loading(sample_us=6500))
    _read_whole(busier, note, step_ms=25)
    profile = nsys.parse(busier)
    assert profile.meta.step_span == "load_sample"
    nsys.process_profiles(profile)
    assert (profile.meta.step_span, len(profile.table("steps"))) == ("train_step", 6)
    assert [n for n in profile.meta.notes if n.startswith("no NVTX range")] == [
        "no NVTX range is named as a step: the 6 steps are the repeated range 'train_step'"]
    ranked = write_export(tmp_path / "ranked.sqlite",
                          _training_and_loading(("rank 0 of 2", "rank 1 of 2")))
    parts = nsys.process_profiles(nsys.parse(ranked))
    assert [(p.process, p.rank, len(p.table("steps"))) for p in parts] == [(7, 0, 6),
                                                                          (9, 1, 24)]


def _with_memory(path: Path, rows: list[tuple[int, int, int, int]]) -> Path:
    """``path`` with CUDA_GPU_MEMORY_USAGE_EVENTS (``--cuda-memory-usage=true``): device
    allocations ``(start, pid, device, bytes)`` of the processes (host 1)."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER NOT NULL, "
                     "globalPid INTEGER, deviceId INTEGER, address INTEGER, bytes INTEGER, "
                     "memKind INTEGER, memoryOperationType INTEGER)")
        conn.executemany("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (?, ?, ?, 4096, ?, "
                         "2, 0)", [(at, Process(pid).global_pid, device, size)
                                   for at, pid, device, size in rows])
    return path


def test_the_memory_of_each_process_of_a_capture_says_whose_it_is(tmp_path: Path) -> None:
    """torchrun under nsys --cuda-memory-usage=true: each process's device allocations are a
    row of the memory view named by its pid (both rows read 'cuda:N' alone), by its rank and
    pid when it recorded its rank; the per-rank chart's bars say which process each rank is."""
    def capture(name: str, marks: tuple[str, str]) -> Path:
        processes = [_stepped(7, 20, device=0), _stepped(9, 40, device=1)]
        if marks[0]:
            processes = [_marked(p, mark) for p, mark in zip(processes, marks, strict=True)]
        return _with_memory(write_export(tmp_path / name, [Process(3), *processes]),
                            [(3 * MS, 7, 0, 1 << 21), (4 * MS, 9, 1, 1 << 22)])

    from profreport.reports.render.charts import per_rank_figure
    from profreport.reports.render.markdown import render_markdown

    report = _report(capture("pids.sqlite", ("", "")))
    devices = report.runs[0].metrics.memory.devices
    assert [(d.source_label, d.process, d.device) for d in devices] == [
        ("pid 7", 7, 0), ("pid 9", 9, 1)]
    markdown = render_markdown(report)
    assert "| pid 7, cuda:0 | Nsight Systems (reserved) |" in markdown
    assert "| pid 9, cuda:1 | Nsight Systems (reserved) |" in markdown
    report = _report(capture("ranks.sqlite", ("rank 1 of 2", "rank 0 of 2")))
    run = report.runs[0]
    assert [d.source_label for d in run.metrics.memory.devices] == ["rank 1, pid 7",
                                                                    "rank 0, pid 9"]
    assert list(per_rank_figure(run).data[0].y) == ["rank 0, pid 9", "rank 1, pid 7"]
    from profreport.reports.render.html import render_html

    assert "<tr><td>rank 1, pid 7, cuda:0</td>" in render_html(report)


def test_the_steps_note_is_that_of_the_steps_kept(tmp_path: Path) -> None:
    """pid 100 launches kernels in 3 'step i' ranges; pid 200, which launches none, marks 5.
    The capture's steps are found again in pid 100's ranges, and one note says what they are:
    the capture-wide note ('the 5 steps ...') stayed beside the new one ('the 3 steps ...'),
    as it was removed only when it was rebuilt to the same text (steps from repeated ranges)."""
    def process(pid: int, steps: int, launches: bool) -> Process:
        """``steps`` 10 ms 'step i' ranges, each holding a 4 ms 'forward' (and a kernel)."""
        base = (300 - pid) * 1000 * MS
        ranges = [r for i in range(steps) for r in (
            (base + i * 10 * MS, base + i * 10 * MS + 9 * MS, f"step {i}"),
            (base + i * 10 * MS + MS, base + i * 10 * MS + 5 * MS, "forward"))]
        kernels = [(base + i * 10 * MS + 2 * MS, base + i * 10 * MS + 3 * MS,
                    base + i * 10 * MS + 4 * MS, i + 1, 0) for i in range(steps)]
        return Process(pid, ranges=ranges, launches=kernels if launches else [])

    path = write_export(tmp_path / "steps.sqlite", [process(100, 3, True),
                                                    process(200, 5, False)])
    (profile,) = nsys.process_profiles(nsys.parse(path))
    assert len(profile.table("steps")) == 3
    assert [note for note in profile.meta.notes if "steps are NVTX ranges" in note] == [
        "the 3 steps are NVTX ranges named as steps"]
    assert phases_text(profile) == "; inside each: forward 4.0 ms per step"


def test_rank_marks_past_a_world_size_bound_are_no_rank_and_sizes_that_differ_are_said(
        tmp_path: Path) -> None:
    """A mark 'rank 0 of 99999999999999999999' (a 20-digit world size once read into
    report.json), one past MAX_WORLD_SIZE and 'rank 5 of 4' are no rank: those processes'
    ranks are unknown, each note quoting the mark (they read 'it recorded none'; a capture of
    one such process said nothing); two processes recording world sizes 2 and 4 keep them,
    and the run's notes say the profiles disagree (the job's size was the larger, silently)."""
    huge = "9" * 20
    path = write_export(tmp_path / "bounds.sqlite", [
        _marked(_stepped(7, 20), f"rank 0 of {huge}"),
        _marked(_stepped(8, 20), f"rank 1 of {concepts.MAX_WORLD_SIZE + 1}"),
        _marked(_stepped(9, 20), "rank 6 of\u202e 4", "rank 5 of 4")])
    parts = nsys.process_profiles(nsys.parse(path))
    assert [(p.process, p.rank, p.meta.world_size) for p in parts] == [(7, None, None),
                                                                      (8, None, None),
                                                                      (9, None, None)]
    # Each note says the process recorded a mark that is no rank (it read 'it recorded
    # none'), the mark quoted with its control characters escaped.
    rule = "(a rank mark is 'rank R of W', R below W, W at most 1,048,576)"
    assert [next(note.split("; ")[1] for note in p.meta.notes if note.startswith(
        f"pid {p.process}: one of")) for p in parts] == [
        f"its rank is unknown: it recorded a mark in domain 'profreport' that is no rank, "
        f"'rank 0 of {huge}' {rule}: it is named by its pid",
        "its rank is unknown: it recorded a mark in domain 'profreport' that is no rank, "
        f"'rank 1 of 1048577' {rule}: it is named by its pid",
        "its rank is unknown: it recorded 2 marks in domain 'profreport' that are no rank, "
        f"the first 'rank 6 of\\u202e 4' {rule}: it is named by its pid"]
    alone = nsys.parse(write_export(tmp_path / "alone.sqlite",
                                    [_marked(_stepped(7, 20), "rank 5 of 4")]))
    assert alone.rank is None and (
        "pid 7, the capture's one process with work of its own: its rank is unknown: it "
        f"recorded a mark in domain 'profreport' that is no rank, 'rank 5 of 4' {rule}"
        ) in alone.meta.notes
    assert concepts.rank_of_mark(f"rank 1 of {concepts.MAX_WORLD_SIZE}") == (
        1, concepts.MAX_WORLD_SIZE)
    path = write_export(tmp_path / "disagree.sqlite", [
        _marked(_stepped(7, 20), "rank 0 of 2"), _marked(_stepped(8, 20), "rank 1 of 4")])
    run = _report(path).runs[0]
    assert run.world_size == 4
    assert ("the profiles of this run record different world sizes (2 by rank 0; 4 by rank "
            "1): the job's is taken as the largest, 4, and a profile may be of another run"
            ) in run.notes
