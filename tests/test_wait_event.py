"""The launch delay leaves out the kernels whose stream was told to wait on an event: in DDP the
NCCL stream waits (cudaStreamWaitEvent) on an event recorded on the compute stream, and its
kernels' start-after-launch is that wait, not launch latency (a reviewer's hand-built nsys
export read a launch delay p50 of 2.0 ms against a real launch latency of 50 us). nsys's CUPTI
sync records and Kineto's ``cuda_sync`` events both tell it."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import sys
from pathlib import Path

import pandas as pd
import pytest

from profreport.model import Profile
from profreport.parsers import kineto, parse_file
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.gpu import launch_stats
from profreport.reports.analysis.results import LaunchStats
from profreport.reports.analysis.steps import step_windows
from profreport.reports.render.json import render_json

sys.path.insert(0, str(Path(__file__).parent))
from conftest import cpu_event, device_event, kineto_trace, write_nsys_export  # noqa: E402

US, MS = 1_000, 1_000_000
#: The side (communication) stream; the compute stream is write_nsys_export's 7.
SIDE = 20
#: nsys's CUPTI sync types: STREAM_WAIT_EVENT and STREAM_SYNCHRONIZE (parsers/nsys.py).
STREAM_WAIT_EVENT, STREAM_SYNCHRONIZE = 2, 3
#: CUPTI's invalid value: a sync record whose stream is not recorded.
NO_STREAM = 0xFFFFFFFF


def ddp_export(path: Path, syncs: str | None, stream: int = SIDE) -> Path:
    """Two 10 ms steps. Each launches 2 compute kernels on stream 7 (at 0.1 and 5.1 ms, each
    starting 50 us after its launch call: the real launch latency) and 3 side kernels on stream
    ``SIDE``, each launched 20 us after a cudaStreamWaitEvent call (at 1, 4 and 7 ms) and
    starting 2 ms after its launch, when the compute stream reaches the event; every kernel is
    launched onto an idle stream. ``syncs``: the CUPTI sync records of those calls, on
    ``stream``, with syncType STREAM_WAIT_EVENT ("wait"), STREAM_SYNCHRONIZE ("other"), or no
    sync table at all (None)."""
    kernels, runtime, side, waits = [], [], [], []
    correlation = 1
    for step in range(2):
        at = step * 10 * MS
        for launch in (at + 100 * US, at + 5100 * US):
            runtime.append((launch, launch + 10 * US, correlation, "cudaLaunchKernel_v7000"))
            kernels.append((launch + 50 * US, launch + 150 * US, correlation, "gemm"))
            correlation += 1
        for wait in (at + 1 * MS, at + 4 * MS, at + 7 * MS):
            runtime.append((wait, wait + 10 * US, correlation, "cudaStreamWaitEvent_v3020"))
            waits.append((wait, wait + 10 * US, correlation))
            launch = wait + 20 * US
            runtime.append((launch, launch + 10 * US, correlation + 1, "cudaLaunchKernel_v7000"))
            kernels.append((launch + 2 * MS, launch + 2200 * US, correlation + 1, "allreduce"))
            side.append(correlation + 1)
            correlation += 2
    path = write_nsys_export(path, sorted(kernels), [(0, 10 * MS, "step 0"),
                                                     (10 * MS, 20 * MS, "step 1")], runtime)
    with sqlite3.connect(path) as conn:
        conn.executemany("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = ? "
                         "WHERE correlationId = ?", [(SIDE, c) for c in side])
        if syncs is not None:
            kind = {"wait": STREAM_WAIT_EVENT, "other": STREAM_SYNCHRONIZE}[syncs]
            conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INT, end INT, "
                         "deviceId INT, streamId INT, correlationId INT, syncType INT)")
            conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES "
                             "(?, ?, 0, ?, ?, ?)", [(s, e, stream, c, kind) for s, e, c in waits])
    return path


def stats_of(path: Path) -> LaunchStats:
    """The launch statistics of the export at ``path``."""
    profile = parse_file(path)
    stats = launch_stats(profile, step_windows(profile))
    assert stats is not None and stats.kernels_per_step == 5
    assert stats.queued_launch_fraction == 0
    return stats


def test_kernels_after_a_stream_wait_event_are_left_out_of_the_launch_delay(
        tmp_path: Path) -> None:
    """The 6 side kernels follow a STREAM_WAIT_EVENT record on their stream: their 2 ms are the
    wait for the compute stream, left out and counted; the median is the 4 compute kernels'
    50 us (it read the side kernels' 2 ms, over all 10)."""
    stats = stats_of(ddp_export(tmp_path / "ddp.sqlite", "wait"))
    assert (stats.launch_delay_p50_ns, stats.launch_delay_kernels) == (50 * US, 4)
    assert stats.launch_delay_waited == 6 and stats.waits_recorded
    assert stats.left_out_text() == (
        "6 kernels whose stream was told to wait on an event (cudaStreamWaitEvent) before the "
        "launch left out: they wait for another stream's work")


def report_metrics(path: Path) -> dict:
    """report.json's metrics of the one run of the profile at ``path``."""
    report = analyze_paths([path], AnalyzeOptions(title="t"))
    return json.loads(render_json(report))["runs"][0]["metrics"]


def test_report_json_counts_the_kernels_left_out_for_a_wait(tmp_path: Path) -> None:
    """report.json gives the kernels the launch delay leaves out for their stream's wait
    (metrics.launch_delay_waited_kernels: the 6 side kernels) beside the 4 it is over, and
    those that may have waited (launch_delay_wait_unknown_kernels: none); the count was in the
    key metrics alone."""
    metrics = report_metrics(ddp_export(tmp_path / "ddp.sqlite", "wait"))
    assert (metrics["launch_delay_kernels"], metrics["launch_delay_waited_kernels"],
            metrics["launch_delay_wait_unknown_kernels"]) == (4, 6, 0)


@pytest.mark.parametrize("syncs", ["wait", None])
def test_report_json_gives_every_launch_statistic(tmp_path: Path, syncs: str | None) -> None:
    """report.json holds each figure of the launch statistics, not only those the key metrics
    quote: the profiler they come from, the short-kernel threshold, the kernel and runtime
    call time per step (2 kernels of 0.1 ms and 3 of 0.2 ms a step: 0.8 ms; 8 calls of 10 us:
    0.08 ms), the kernels left out for the clocks' skew (none) and whether the profile records GPU
    sync records at all (without any, a stream's wait is unseen). Those figures were in no
    JSON field."""
    metrics = report_metrics(ddp_export(tmp_path / "ddp.sqlite", syncs))
    assert (metrics["launch_origin"], metrics["short_kernel_threshold_ms"],
            metrics["gpu_kernel_ms_per_step"], metrics["runtime_ms_per_step"]) == (
        "nsys", 0.01, 0.8, 0.08)
    assert metrics["launch_delay_skewed_kernels"] == 0
    assert metrics["launch_delay_waits_recorded"] is (syncs is not None)


def test_a_wait_whose_stream_is_unrecorded_counts_on_every_stream_of_its_device(
        tmp_path: Path) -> None:
    """nsys 2022.4 records cudaStreamWaitEvent's sync with no stream (the sc22 4-GPU DDP
    export): any stream of the device may have waited, so each stream's first kernel launched
    after a wait is left out: the 6 side kernels and 3 compute kernels (those at 5.1 ms after
    the waits at 1 and 4 ms, at 10.1 ms after the one at 7 ms, at 15.1 ms after those at 11 and
    14 ms); the compute kernel at 0.1 ms, launched before any wait, is measured alone."""
    stats = stats_of(ddp_export(tmp_path / "ddp.sqlite", "wait", stream=NO_STREAM))
    assert (stats.launch_delay_p50_ns, stats.launch_delay_kernels) == (50 * US, 1)
    assert stats.launch_delay_waited == 9


@pytest.mark.parametrize("syncs", ["other", None])
def test_without_wait_event_records_the_launch_delay_is_unchanged(
        tmp_path: Path, syncs: str | None) -> None:
    """Sync records of another kind (stream syncs), or none at all: no stream is known to have
    waited, every kernel's delay counts (median 2 ms over 10); without any sync record the
    figure says it may include such waits."""
    stats = stats_of(ddp_export(tmp_path / "ddp.sqlite", syncs))
    assert (stats.launch_delay_p50_ns, stats.launch_delay_kernels) == (2 * MS, 10)
    assert stats.launch_delay_waited == 0 and stats.waits_recorded == (syncs is not None)
    assert stats.left_out_text() == ("" if syncs else (
        "the profile records no GPU sync records, so a stream told to wait on another stream's "
        "work is unseen: the delay may include such waits"))


def with_tables(profile: Profile, **tables: pd.DataFrame) -> Profile:
    """``profile`` with the named tables replaced."""
    return dataclasses.replace(profile, tables={**profile.tables, **tables})


def test_a_runtime_table_out_of_start_order_finds_the_same_kernels(tmp_path: Path) -> None:
    """The launches are compared by their calls' starts, not by the calls' places, where the
    runtime table is not in start order (here reversed): the same 6 side kernels are left
    out, the median is the 4 compute kernels' 50 us."""
    profile = parse_file(ddp_export(tmp_path / "ddp.sqlite", "wait"))
    runtime = profile.table("runtime")
    profile = with_tables(profile, runtime=runtime.iloc[::-1].reset_index(drop=True))
    stats = launch_stats(profile, step_windows(profile))
    assert stats is not None
    assert (stats.launch_delay_p50_ns, stats.launch_delay_kernels) == (50 * US, 4)
    assert stats.launch_delay_waited == 6


def with_side_work(path: Path, unlinked: tuple[int, int],
                   linked: tuple[int, int, int] | None = None) -> LaunchStats:
    """The launch statistics of ``path`` (a ddp_export) with a kernel on the side stream
    running over ``unlinked`` (start, end) whose correlation id no runtime call holds, and,
    with ``linked`` (launch, start, end), one launched by a recorded cudaLaunchKernel."""
    with sqlite3.connect(path) as conn:
        name = conn.execute("SELECT id FROM StringIds WHERE value = 'allreduce'").fetchone()[0]
        rows = [(*unlinked, 999)] + ([(*linked[1:], 998)] if linked else [])
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, ?, ?, ?, ?)",
                         [(s, e, SIDE, c, name, name) for s, e, c in rows])
        if linked:
            call = conn.execute("SELECT id FROM StringIds WHERE value = "
                                "'cudaLaunchKernel_v7000'").fetchone()[0]
            conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, 998, ?)",
                         (linked[0], linked[0] + 10 * US, (1 << 24) | 1, call))
    profile = parse_file(path)
    stats = launch_stats(profile, step_windows(profile))
    assert stats is not None
    return stats


def test_unlinked_work_after_the_wait_leaves_whether_the_next_kernel_waited_unknown(
        tmp_path: Path) -> None:
    """A side-stream kernel linked to no launch call runs 1.005-1.010 ms, after the wait at
    1 ms and before the side kernel launched at 1.02 ms: it may have been enqueued after the
    wait (its launch is unknown, only that it came before 1.005 ms) and waited instead, so
    whether that side kernel waited is unknown: it is left out of the median and counted so,
    not as waited (it was one of 6 said to have waited)."""
    stats = with_side_work(ddp_export(tmp_path / "ddp.sqlite", "wait"), (1005 * US, 1010 * US))
    assert (stats.launch_delay_p50_ns, stats.launch_delay_kernels) == (50 * US, 4)
    assert (stats.launch_delay_waited, stats.launch_delay_wait_unknown) == (5, 1)
    assert stats.left_out_text() == (
        "5 kernels whose stream was told to wait on an event (cudaStreamWaitEvent) before the "
        "launch left out: they wait for another stream's work; 1 kernel whose stream was told "
        "to wait on an event before the launch, behind work linked to no launch call that "
        "started after the wait and may have waited instead, left out: whether they waited is "
        "unknown")


@pytest.mark.parametrize("linked", [None, (500 * US, 1003 * US, 1008 * US)])
def test_unlinked_work_launched_before_the_wait_leaves_the_next_kernel_the_one_that_waited(
        tmp_path: Path, linked: tuple[int, int, int] | None) -> None:
    """A side-stream kernel linked to no launch call that started before the wait (0.95 ms,
    the wait at 1 ms), or after it but ahead of a side kernel launched at 0.5 ms (running
    1.003-1.008 ms: the stream runs its work in launch order), was launched before the wait:
    the side kernel launched at 1.02 ms is still the one that waited, 6 as without it."""
    unlinked = (950 * US, 990 * US) if linked is None else (1001 * US, 1002 * US)
    stats = with_side_work(ddp_export(tmp_path / "ddp.sqlite", "wait"), unlinked, linked)
    assert (stats.launch_delay_p50_ns, stats.launch_delay_kernels) == (50 * US, 4)
    assert (stats.launch_delay_waited, stats.launch_delay_wait_unknown) == (6, 0)


def test_a_copy_launched_after_the_wait_is_the_first_work_instead(tmp_path: Path) -> None:
    """A copy on the side stream launched 5 us after the wait at 1 ms (running 1.010-1.015
    ms, ended before the side kernel's launch call did) is that stream's first work after the
    wait: the side kernel launched at 1.02 ms is no longer left out, its 2 ms joins the
    median (50 us over 5 kernels), 5 left out."""
    profile = parse_file(ddp_export(tmp_path / "ddp.sqlite", "wait"))
    runtime = profile.table("runtime")
    call = pd.DataFrame({"start": [1005 * US], "end": [1008 * US],
                         "pid": runtime["pid"].iloc[:1].to_numpy(),
                         "tid": runtime["tid"].iloc[:1].to_numpy(),
                         "correlation": [100], "name": ["cudaMemcpyAsync"]})
    copy = pd.DataFrame({"start": [1010 * US], "end": [1015 * US], "device": [0],
                         "stream": [SIDE], "correlation": [100], "kind": ["HtoD"],
                         "bytes": [4096], "src_kind": ["Pinned"], "dst_kind": ["Device"]})
    runtime = pd.concat([runtime.astype({"name": str}), call], ignore_index=True).astype(
        {"name": "category", "correlation": runtime["correlation"].dtype})
    profile = with_tables(profile, runtime=runtime.sort_values("start", kind="stable")
                          .reset_index(drop=True), memcpy=copy)
    stats = launch_stats(profile, step_windows(profile))
    assert stats is not None and stats.queued_launch_fraction == 0
    assert (stats.launch_delay_p50_ns, stats.launch_delay_kernels) == (50 * US, 5)
    assert stats.launch_delay_waited == 5


#: The CUDA event id a Kineto trace's waits name (``wait_on_cuda_event_id``): any one.
EVENT_ID = 8


def ddp_trace(path: Path, kind: str, stream: int = SIDE) -> Path:
    """ddp_export's two steps as torch.profiler writes them (times in us): ProfilerStep#N
    spans, cudaLaunchKernel and cudaStreamWaitEvent calls (``cuda_runtime``), the kernels on
    streams 7 and ``SIDE``, and each wait's CUPTI sync record as Kineto writes it: a
    ``cuda_sync`` event on the waiting stream (``stream``) with ``cuda_sync_kind`` ``kind``
    ("Stream Wait Event", or "Stream Sync" for another kind), the stream the event was
    recorded on (``wait_on_stream``: 7) and the call's correlation id."""
    events, correlation = [], 1
    for step in range(2):
        at = step * 10_000
        events.append(cpu_event(f"ProfilerStep#{step}", at, 10_000, cat="user_annotation"))
        for launch in (at + 100, at + 5100):
            events += [cpu_event("cudaLaunchKernel", launch, 10, cat="cuda_runtime",
                                 correlation=correlation),
                       device_event("gemm", launch + 50, 100, stream=7, device=0,
                                    correlation=correlation)]
            correlation += 1
        for wait in (at + 1000, at + 4000, at + 7000):
            launch = wait + 20
            events += [
                cpu_event("cudaStreamWaitEvent", wait, 10, cat="cuda_runtime",
                          correlation=correlation),
                device_event(kind, wait, 10, cat="cuda_sync", tid=SIDE, cuda_sync_kind=kind,
                             wait_on_stream=7, wait_on_cuda_event_record_corr_id=1,
                             wait_on_cuda_event_id=EVENT_ID, stream=stream,
                             correlation=correlation, device=0, context=1),
                cpu_event("cudaLaunchKernel", launch, 10, cat="cuda_runtime",
                          correlation=correlation + 1),
                device_event("allreduce", launch + 2000, 200, tid=SIDE, stream=SIDE, device=0,
                             correlation=correlation + 1)]
            correlation += 2
    return kineto_trace(path, events)


def kineto_stats_of(path: Path) -> LaunchStats:
    """The launch statistics of the Kineto trace at ``path``."""
    profile = kineto.parse(path)
    stats = launch_stats(profile, step_windows(profile))
    assert stats is not None and stats.kernels_per_step == 5
    assert stats.queued_launch_fraction == 0
    return stats


def test_kineto_stream_wait_event_records_leave_the_waiting_kernels_out(tmp_path: Path) -> None:
    """Kineto's "Stream Wait Event" cuda_sync records (its name for CUPTI's STREAM_WAIT_EVENT)
    on the side stream leave its 6 kernels out of the launch delay, as nsys's records do: the
    median is the 4 compute kernels' 50 us."""
    stats = kineto_stats_of(ddp_trace(tmp_path / "ddp.json", "Stream Wait Event"))
    assert (stats.launch_delay_p50_ns, stats.launch_delay_kernels) == (50 * US, 4)
    assert (stats.launch_delay_waited, stats.launch_delay_wait_unknown) == (6, 0)
    assert stats.waits_recorded


def test_kineto_sync_records_of_another_kind_leave_the_launch_delay_whole(
        tmp_path: Path) -> None:
    """Kineto "Stream Sync" records on the side stream tell no stream to wait: every kernel's
    delay counts (median 2 ms over 10), and the trace does record sync records."""
    stats = kineto_stats_of(ddp_trace(tmp_path / "ddp.json", "Stream Sync"))
    assert (stats.launch_delay_p50_ns, stats.launch_delay_kernels) == (2 * MS, 10)
    assert stats.launch_delay_waited == 0 and stats.waits_recorded


def test_a_kineto_wait_whose_stream_is_unset_counts_on_every_stream_of_its_device(
        tmp_path: Path) -> None:
    """Kineto writes CUPTI's unset stream as the uint32 it is, 4294967295 (NO_STREAM; kineto
    before pytorch/kineto#884 did so on its cuda_sync events): the parser reads it as -1,
    unrecorded, as nsys's, so the waits count on every stream of their device as in
    test_a_wait_whose_stream_is_unrecorded_counts_on_every_stream_of_its_device (9 left out,
    the compute kernel at 0.1 ms measured alone). Read as a stream of its own, no kernel ran on
    it: no wait counted, every kernel's 2 ms or 50 us in the median (2 ms over 10)."""
    path = ddp_trace(tmp_path / "ddp.json", "Stream Wait Event", stream=NO_STREAM)
    assert set(kineto.parse(path).table("sync")["stream"]) == {-1}
    stats = kineto_stats_of(path)
    assert (stats.launch_delay_p50_ns, stats.launch_delay_kernels) == (50 * US, 1)
    assert (stats.launch_delay_waited, stats.launch_delay_wait_unknown) == (9, 0)


@pytest.mark.parametrize(("cat", "name", "call"), [
    ("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", "cudaMemcpyAsync"),
    ("gpu_memset", "Memset (Device)", "cudaMemsetAsync")])
def test_unlinked_work_ahead_of_a_copy_launched_before_the_wait_leaves_the_next_kernel_the_one_that_waited(  # noqa: E501
        tmp_path: Path, cat: str, name: str, call: str) -> None:
    """The Kineto ddp trace with, on the side stream, a copy (or memset) launched at 0.5 ms,
    before the wait at 1 ms, that ran 1.003-1.008 ms, and a kernel linked to no launch call
    that ran 1.001-1.002 ms, ahead of it: the stream runs its work in the order it was
    enqueued, so that kernel was enqueued before the copy, before the wait, and the side
    kernel launched at 1.02 ms is still the one that waited: 6 waited, none unknown, as with a
    linked kernel in the copy's place (test_unlinked_work_launched_before_the_wait_leaves_the_
    next_kernel_the_one_that_waited). The bound read only the linked kernels ahead: the
    unlinked kernel counted as perhaps enqueued after the wait, and the side kernel as perhaps
    not having waited (5 and 1)."""
    path = ddp_trace(tmp_path / "ddp.json", "Stream Wait Event")
    document = json.loads(path.read_text())
    document["traceEvents"] += [
        cpu_event(call, 500, 10, cat="cuda_runtime", correlation=900),
        device_event(name, 1003, 5, cat=cat, tid=SIDE, stream=SIDE, device=0, correlation=900,
                     bytes=4096),
        device_event("unlinked", 1001, 1, tid=SIDE, stream=SIDE, device=0)]
    path.write_text(json.dumps(document))
    profile = kineto.parse(path)
    stats = launch_stats(profile, step_windows(profile))
    assert stats is not None
    assert (stats.launch_delay_p50_ns, stats.launch_delay_kernels) == (50 * US, 4)
    assert (stats.launch_delay_waited, stats.launch_delay_wait_unknown) == (6, 0)
