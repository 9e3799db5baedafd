"""Checks that need each kernel or copy linked to the call that launched it (the correlation id):
when a profile records no such id (an nsys table without correlationId, Kineto events without
``args.correlation``), the check is said to be unknown and why, in the typed results and every
renderer, instead of reading as "no problem"."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from profreport.parsers import parse_file
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.findings import RunContext, find_all
from profreport.reports.analysis.launches import (
    CALLS_UNRECORDED,
    NO_CORRELATION_IDS,
    NO_RUNTIME_CALLS,
    link_gaps,
    unlinked,
)
from profreport.reports.render.html import render_html
from profreport.reports.render.json import render_json
from profreport.reports.render.markdown import render_markdown

sys.path.insert(0, str(Path(__file__).parent))
from conftest import cpu_event, device_event, kineto_trace, write_nsys_export  # noqa: E402

MS, US = 1_000_000, 1000


def _blocking_copy_export(path: Path, kinds: tuple[int, int, int] = (2, 2, 0),
                          idle_copy: bool = False) -> Path:
    """4 steps of 100 ms (NVTX ranges of 90 ms): each launches a 48 ms kernel at 2 ms, then
    reads 4 bytes back with a cudaMemcpyAsync into pageable memory from 3 ms, which returns at
    51 ms, after its copy (50 to 50.5 ms) on the kernel's stream: the CPU is blocked 48% of each
    step. ``kinds``: the copies' copyKind, srcKind and dstKind instead; ``idle_copy``: each step
    also copies with a cudaMemcpyAsync from 60 ms to 60.03 ms, its copy (60.01 to 60.02 ms) on
    the stream left idle since 50.5 ms."""
    kernels, runtime, copies = [], [], []
    for i in range(4):
        t, c = i * 100 * MS, i * 10
        runtime += [(t + 1 * MS, t + 1 * MS + 10 * US, c + 1, "cudaLaunchKernel_v7000"),
                    (t + 3 * MS, t + 51 * MS, c + 2, "cudaMemcpyAsync_v3020")]
        kernels.append((t + 2 * MS, t + 50 * MS, c + 1, "conv_kernel"))
        copies.append((t + 50 * MS, t + 50 * MS + 500 * US, c + 2, *kinds))
        if idle_copy:
            runtime.append((t + 60 * MS, t + 60 * MS + 30 * US, c + 3, "cudaMemcpyAsync_v3020"))
            copies.append((t + 60 * MS + 10 * US, t + 60 * MS + 20 * US, c + 3, *kinds))
    steps = [(i * 100 * MS, i * 100 * MS + 90 * MS, f"step {i}") for i in range(4)]
    write_nsys_export(path, kernels, steps, runtime)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, "
                     "streamId INT, correlationId INT, bytes INT, copyKind INT, srcKind INT, "
                     "dstKind INT)")
        # copyKind 2: device-to-host; srcKind 2: device, dstKind 0: pageable host memory
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 7, ?, 4, ?, ?, "
                         "?)", copies)
    return path


def test_blocking_copies_with_their_correlation_ids_are_a_sync_stall(tmp_path: Path) -> None:
    """The export as nsys 2022.4 writes it: each cudaMemcpyAsync is linked to its pageable
    device-to-host copy and blocks 48 ms of the 100 ms step: SYNC_STALL, nothing unknown."""
    run = analyze_paths([_blocking_copy_export(tmp_path / "linked.sqlite")],
                        AnalyzeOptions()).runs[0]
    syncs = run.metrics.syncs
    assert [(c.name, c.calls_per_step, c.ns_per_step) for c in syncs.calls] == [
        ("cudaMemcpyAsync DtoH to pageable", 1, 48 * MS)]
    assert syncs.copies_unknown is None
    found = {f.id for f in run.findings}
    assert "SYNC_STALL" in found and "LAUNCH_LINKS_UNKNOWN" not in found


@pytest.mark.parametrize(("kinds", "calls"), [
    # copyKind 1: host-to-device, srcKind 1: pinned host memory, dstKind 2: device
    ((1, 1, 2), [("cudaMemcpyAsync HtoD (returned after its copy ended)", 1, 48 * MS)]),
    ((2, 2, 0), [("cudaMemcpyAsync DtoH to pageable", 2, 48 * MS + 30 * US)])])
def test_a_copy_call_blocked_only_behind_work_queued_on_its_stream(
        tmp_path: Path, kinds: tuple[int, int, int], calls: list[tuple[str, int, int]]) -> None:
    """Each step's two cudaMemcpyAsync calls both returned only after their copy ended. A
    pinned host-to-device one blocked where its copy was queued behind the kernel still running
    as the call began (48 ms); the one whose copy ran inside it on the idle stream waited for
    nothing queued (its 30 us are copy time) and was counted a blocking call: 2 a step. A
    device-to-host one into pageable memory blocks on the idle stream too."""
    run = analyze_paths([_blocking_copy_export(tmp_path / "queued.sqlite", kinds, True)],
                        AnalyzeOptions()).runs[0]
    syncs = run.metrics.syncs
    assert [(c.name, c.calls_per_step, c.ns_per_step) for c in syncs.calls] == calls
    assert syncs.copies_unknown is None


@pytest.mark.parametrize(("table", "rows"), [("CUPTI_ACTIVITY_KIND_MEMCPY", "copies"),
                                             ("CUPTI_ACTIVITY_KIND_RUNTIME", "runtime calls")])
def test_blocking_copies_without_correlation_ids_are_unknown(tmp_path: Path, table: str,
                                                             rows: str) -> None:
    """The same export whose copies or runtime calls lack correlationId (another nsys
    version's schema): no copy call can be linked to its copy, so the 48% the CPU blocks was
    in no figure, SYNC_STALL was absent and only a parser note said a column was missing. The
    blocking is now said to be unknown, with why, in the results, in a finding and in every
    renderer."""
    path = _blocking_copy_export(tmp_path / "unlinked.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute(f"ALTER TABLE {table} DROP COLUMN correlationId")
    report = analyze_paths([path], AnalyzeOptions())
    run = report.runs[0]
    why = ("the copy calls that block only when their copy goes device-to-host into pageable "
           "memory or ends before they return behind queued work (cudaMemcpyAsync), 1 per "
           "step, cannot be judged: "
           "the Nsight Systems profile "
           f"records no correlation id on its {rows}, the evidence that links each launch call "
           "to the copies it launched")
    assert run.metrics.syncs.calls == [] and run.metrics.syncs.copies_unknown == why
    found = {f.id: f for f in run.findings}
    assert "SYNC_STALL" not in found
    evidence = f"time the CPU blocked in copy calls (SYNC_STALL): unknown, {why}"
    # Without the runtime calls' ids no kernel is linked either: the launch delay is unknown.
    delay = ("launch delay and kernels launched behind queued work: unknown, the Nsight "
             "Systems profile records no correlation id on its runtime calls, the evidence that "
             "links each launch call to the kernels it launched")
    assert [e.text for e in found["LAUNCH_LINKS_UNKNOWN"].evidence] == [evidence] + (
        [delay] if rows == "runtime calls" else [])
    assert evidence.replace("_", "\\_") in render_markdown(report)
    assert evidence in render_html(report)
    data = json.loads(render_json(report))["runs"][0]["findings"]
    assert evidence in [e["text"] for f in data for e in f["evidence"]]


def test_a_sync_stall_found_without_the_copies_says_they_are_unknown(tmp_path: Path) -> None:
    """The export without the copies' correlationId whose steps also sync for 30 ms
    (cudaStreamSynchronize at 60 ms): SYNC_STALL stands on the sync alone (30% of the step),
    and its evidence says that the copy calls could not be counted, so the stall may be
    longer."""
    path = _blocking_copy_export(tmp_path / "stall.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY DROP COLUMN correlationId")
        name = conn.execute("SELECT COALESCE(MAX(id), -1) + 1 FROM StringIds").fetchone()[0]
        conn.execute("INSERT INTO StringIds VALUES (?, 'cudaStreamSynchronize_v3020')", (name,))
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?)",
                         [(i * 100 * MS + 60 * MS, i * 100 * MS + 90 * MS, (1 << 24) | 1,
                           i * 10 + 3, name) for i in range(4)])
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    syncs = run.metrics.syncs
    assert [(c.name, c.ns_per_step) for c in syncs.calls] == [
        ("cudaStreamSynchronize", 30 * MS)]
    stall = next(f for f in run.findings if f.id == "SYNC_STALL")
    assert stall.evidence[-1].text == (
        f"time the CPU blocked in copy calls (SYNC_STALL): unknown, {syncs.copies_unknown}")
    assert syncs.copies_unknown.startswith("the copy calls that block only when their copy "
                                           "goes device-to-host into pageable memory or "
                                           "ends before they return behind queued work "
                                           "(cudaMemcpyAsync), 1 per step, cannot be judged")


def _optimizer_trace(path: Path, correlated: bool) -> Path:
    """3 ProfilerSteps of 10 ms, each with an SGD step span launching 60 kernels (one per
    parameter, none multi-tensor), their launch calls and kernels correlated or not."""
    events, corr = [], 1
    for n in range(3):
        ts = 1000 + n * 10_000
        events += [cpu_event(f"ProfilerStep#{n}", ts, 10_000, cat="user_annotation"),
                   cpu_event("Optimizer.step#SGD.step", ts + 5000, 4000,
                             cat="user_annotation")]
        for k in range(60):
            ids = {"correlation": corr} if correlated else {}
            events += [cpu_event("cudaLaunchKernel", ts + 5010 + 60 * k, 5, cat="cuda_runtime",
                                 **ids),
                       device_event("void at::native::vectorized_elementwise_kernel<4>",
                                    ts + 5020 + 60 * k, 40, device=0, stream=7, **ids)]
            corr += 1
    return kineto_trace(path, events)


def test_optimizer_kernels_without_correlation_ids_are_unknown(tmp_path: Path) -> None:
    """Kineto events with ``args.correlation``: 60 kernels per SGD step, OPTIMIZER_NOT_FUSED.
    The same events without it linked no kernel to its launch: '0 kernels per step (one
    kernel per tensor)' in the key metrics and no finding, as if the optimizer were fine. Now
    the count is unknown and why, in the metrics and a finding, in every renderer."""
    linked = analyze_paths([_optimizer_trace(tmp_path / "linked.pt.trace.json", True)],
                           AnalyzeOptions()).runs[0]
    assert linked.metrics.kernel_mix.optimizer_kernels_per_step == 60
    assert linked.metrics.kernel_mix.launches_unknown is None
    assert {"OPTIMIZER_NOT_FUSED"} <= {f.id for f in linked.findings}
    assert "LAUNCH_LINKS_UNKNOWN" not in {f.id for f in linked.findings}
    report = analyze_paths([_optimizer_trace(tmp_path / "unlinked.pt.trace.json", False)],
                           AnalyzeOptions())
    mix = report.runs[0].metrics.kernel_mix
    why = ("the torch.profiler profile records no correlation id on its runtime calls, the "
           "evidence that links each launch call to the kernels it launched")
    assert (mix.optimizer_kernels_per_step, mix.launches_unknown) == (None, why)
    found = {f.id: f for f in report.runs[0].findings}
    assert "OPTIMIZER_NOT_FUSED" not in found
    evidence = f"kernels launched inside each optimizer step (OPTIMIZER_NOT_FUSED): unknown, {why}"
    assert [e.text for e in found["LAUNCH_LINKS_UNKNOWN"].evidence][0] == evidence
    markdown = render_markdown(report)
    assert f"| Optimizer (SGD) kernels per step | unknown: {why} |" in markdown
    assert evidence.replace("_", "\\_") in markdown and evidence in render_html(report)
    data = json.loads(render_json(report))["runs"][0]
    assert data["metrics"]["kernel_mix"]["launches_unknown"] == why
    assert evidence in [e["text"] for f in data["findings"] for e in f["evidence"]]


def test_optimizer_kernels_without_runtime_calls_are_unknown(tmp_path: Path) -> None:
    """The optimizer trace with its kernels correlated but no ``cuda_runtime`` event at all (a
    trace that recorded the GPU's activity, not the calls that launched it): nothing links a
    kernel to the SGD step's span, which read '0 kernels per step' and raised no finding. Now
    the count is unknown, because no runtime call was recorded."""
    path = _optimizer_trace(tmp_path / "no_runtime.pt.trace.json", True)
    trace = json.loads(path.read_text())
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e["cat"] != "cuda_runtime"]
    path.write_text(json.dumps(trace))
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    mix = run.metrics.kernel_mix
    why = ("the torch.profiler profile records no runtime calls, the calls that launched its "
           "kernels")
    assert (mix.optimizer_kernels_per_step, mix.launches_unknown) == (None, why)
    found = {f.id: f for f in run.findings}
    assert "OPTIMIZER_NOT_FUSED" not in found
    assert found["LAUNCH_LINKS_UNKNOWN"].evidence[0].text.endswith(f"unknown, {why}")


def test_an_nsys_export_without_its_runtime_table_says_the_kernels_launches_are_unknown(
        tmp_path: Path) -> None:
    """An nsys export of kernels with no CUPTI_ACTIVITY_KIND_RUNTIME table (traced without the
    CUDA API): which call launched each kernel is unknown, said with why."""
    path = _blocking_copy_export(tmp_path / "no_runtime.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    profile = parse_file(path)
    assert unlinked(profile, "kernels") == (
        "the Nsight Systems profile records no runtime calls, the calls that launched its "
        "kernels")



@pytest.mark.parametrize(("lacking", "why", "gaps"), [
    ("runtime", "records no runtime calls, the calls that launched its copies",
     {NO_RUNTIME_CALLS}),
    ("call ids", "records no correlation id on its runtime calls, the evidence that links each "
     "launch call to the copies it launched", {NO_CORRELATION_IDS}),
    ("copy ids", "records no correlation id on its copies, the evidence that links each launch "
     "call to the copies it launched", {NO_CORRELATION_IDS}),
    ("some", "records no launch call for 2 of the 4 copies (1 with no correlation id, 1 with "
     "one that no recorded runtime call carries)", {NO_CORRELATION_IDS, CALLS_UNRECORDED}),
])
def test_the_sentence_and_the_gaps_of_unlinked_copies_read_the_same_facts(
        tmp_path: Path, lacking: str, why: str, gaps: set[str]) -> None:
    """The blocking-copy export without its runtime table, without the calls' or the copies'
    ids, or with one copy's id NULL and another's carried by no call: the sentence saying why
    the copies' launch calls are unknown (unlinked) and what the profile lacks (link_gaps,
    which picks LAUNCH_LINKS_UNKNOWN's fix) name the same gap."""
    path = _blocking_copy_export(tmp_path / "gap.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute({
            "runtime": "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME",
            "call ids": "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = NULL",
            "copy ids": "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET correlationId = NULL",
            "some": "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET correlationId = CASE start "
                    f"WHEN {50 * MS} THEN NULL WHEN {150 * MS} THEN correlationId + 1000 "
                    "ELSE correlationId END"}[lacking])
    profile = parse_file(path)
    assert unlinked(profile, "memcpy") == f"the Nsight Systems profile {why}"
    assert link_gaps(profile) == gaps


def _partly_correlated_trace(path: Path, linked: int) -> Path:
    """The optimizer trace whose SGD steps launch 60 kernels each, of which only the first
    ``linked`` kernels (and their launch calls) record their correlation id."""
    trace = json.loads(_optimizer_trace(path, True).read_text())
    kernels = [e for e in trace["traceEvents"] if e["cat"] == "kernel"]
    calls = [e for e in trace["traceEvents"] if e["cat"] == "cuda_runtime"]
    for n, (call, kernel) in enumerate(zip(calls, kernels, strict=True)):
        if n % 60 >= linked:
            del call["args"]["correlation"], kernel["args"]["correlation"]
    path.write_text(json.dumps(trace))
    return path


def test_an_optimizer_count_short_of_the_verdict_with_unlinked_kernels_is_unknown(
        tmp_path: Path) -> None:
    """40 of the 60 kernels of each SGD step are linked to their launch calls: the count read
    40 per step, under OPTIMIZER_KERNELS_MANY (50), and no finding, though the 20 kernels per
    step with no launch call may be the optimizer's too. Now it is a lower bound, the 20
    unlinked ones per step said, and since they could reach the verdict, the count is said
    to be unknown in LAUNCH_LINKS_UNKNOWN and every renderer."""
    report = analyze_paths([_partly_correlated_trace(tmp_path / "partial.pt.trace.json", 40)],
                           AnalyzeOptions())
    mix = report.runs[0].metrics.kernel_mix
    why = ("the torch.profiler profile records no launch call for 60 of the 180 kernels that "
           "may have been launched inside an optimizer step (60 with no correlation id, "
           "0 with one that no recorded runtime call carries)")
    assert (mix.optimizer_kernels_per_step, mix.optimizer_unlinked_per_step,
            mix.optimizer_unknown) == (40, 20, why)
    found = {f.id: f for f in report.runs[0].findings}
    assert "OPTIMIZER_NOT_FUSED" not in found
    evidence = ("kernels launched inside each optimizer step (OPTIMIZER_NOT_FUSED): unknown, "
                f"between 40 and 60 per step, {why}")
    assert [e.text for e in found["LAUNCH_LINKS_UNKNOWN"].evidence] == [evidence]
    markdown = render_markdown(report)
    assert ("| Optimizer (SGD) kernels per step | at least 40 (one kernel per tensor); 20 more "
            f"per step may be: {why} |") in markdown
    assert evidence in render_html(report)
    data = json.loads(render_json(report))["runs"][0]
    assert data["metrics"]["kernel_mix"]["optimizer_unlinked_kernels_per_step"] == 20


def test_an_optimizer_count_past_the_verdict_with_unlinked_kernels_is_a_lower_bound(
        tmp_path: Path) -> None:
    """55 of the 60 kernels linked: 55 per step already makes OPTIMIZER_NOT_FUSED, whatever the
    5 unlinked ones are: the finding says 'at least' and why, and nothing is unknown."""
    run = analyze_paths([_partly_correlated_trace(tmp_path / "partial.pt.trace.json", 55)],
                        AnalyzeOptions()).runs[0]
    found = {f.id: f for f in run.findings}
    assert "LAUNCH_LINKS_UNKNOWN" not in found
    texts = [e.text for e in found["OPTIMIZER_NOT_FUSED"].evidence]
    assert texts[0].startswith("at least 55 kernels launched inside each optimizer step")
    why = run.metrics.kernel_mix.optimizer_unknown
    assert texts[1] == f"kernels whose launch is unknown: {why}"
    assert "at least 55 kernels per step" in found["OPTIMIZER_NOT_FUSED"].title


def test_blocking_copies_some_without_correlation_ids_are_unknown(tmp_path: Path) -> None:
    """The blocking-copy export whose last two steps' copies have a NULL correlationId (an nsys
    table with the column, some rows without a value): only the first two steps' copy calls
    were judged blocking, the other two silently not. Now those are said to be unjudged,
    with how many copies lack the link."""
    path = _blocking_copy_export(tmp_path / "partial.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET correlationId = NULL "
                      "WHERE start >= 200000000")
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    syncs = run.metrics.syncs
    assert [(c.name, c.calls_per_step) for c in syncs.calls] == [
        ("cudaMemcpyAsync DtoH to pageable", 0.5)]
    assert syncs.copies_unknown == (
        "the copy calls that block only when their copy goes device-to-host into pageable "
        "memory or ends before they return behind queued work (cudaMemcpyAsync), 0.5 per "
        "step, cannot be judged: "
        "the Nsight Systems profile records no launch call for 2 of the 4 copies that may have "
        "been launched in or after the steps (2 with no correlation id, 0 with one that no "
        "recorded runtime call carries)")
    stall = next(f for f in run.findings if f.id == "SYNC_STALL")
    assert stall.evidence[-1].text.endswith(syncs.copies_unknown)


def test_idle_gaps_ended_by_unlinked_kernels_are_no_launch_wait(tmp_path: Path) -> None:
    """The optimizer trace's GPU idles 7.1 ms of each 10 ms step until a kernel launched during
    the gap arrives: linked, that is a launch wait, HOST_LAUNCH_BOUND. Without correlation ids
    each kernel's launch was taken to be its own start, so every such gap read as a launch wait
    and HOST_LAUNCH_BOUND fired on no evidence; the launch delay and queued share were absent
    with nothing said. Now those gaps are unexplained, the time that may have waited for a
    launch and why in IdleCauses, the launch delay unknown and why, in every renderer."""
    linked = analyze_paths([_optimizer_trace(tmp_path / "linked.pt.trace.json", True)],
                           AnalyzeOptions()).runs[0]
    assert linked.metrics.gpu_idle.idle_ns_per_step["launch"] == 7_133_333
    assert linked.metrics.gpu_idle.launch_unknown is None
    assert linked.metrics.launch.launches_unknown is None
    assert "HOST_LAUNCH_BOUND" in {f.id for f in linked.findings}
    report = analyze_paths([_optimizer_trace(tmp_path / "unlinked.pt.trace.json", False)],
                           AnalyzeOptions())
    run = report.runs[0]
    idle, launch = run.metrics.gpu_idle, run.metrics.launch
    none = ("the torch.profiler profile records no correlation id on its runtime calls, the "
            "evidence that links each launch call to the kernels it launched")
    assert idle.idle_ns_per_step == {"data": 0, "sync": 0, "launch": 0, "unexplained": 7_600_000}
    assert (idle.launch_unknown_ns_per_step, idle.launch_unknown) == (
        7_133_333, "180 idle gaps end with work linked to no launch call that may have been "
                   f"launched during the gap: {none}")
    assert (launch.queued_launch_fraction, launch.launches_unknown) == (None, none)
    found = {f.id: f for f in run.findings}
    assert "HOST_LAUNCH_BOUND" not in found
    texts = [e.text for e in found["LAUNCH_LINKS_UNKNOWN"].evidence]
    assert texts[1:] == [
        "GPU idle time waiting for launches (HOST_LAUNCH_BOUND): unknown for 7.1 ms per step, "
        f"counted as unexplained, {idle.launch_unknown}",
        f"launch delay and kernels launched behind queued work: unknown, {none}"]
    markdown = render_markdown(report)
    assert f"| Launch delay and kernels launched behind queued work | unknown: {none} |" in markdown
    assert texts[1].replace("_", "\\_") in markdown and texts[1] in render_html(report)
    data = json.loads(render_json(report))["runs"][0]["metrics"]
    assert (data["idle_launch_unknown_ms_per_step"], data["idle_launch_unknown_reason"],
            data["launch_delay_unknown_reason"]) == (7.133, idle.launch_unknown, none)


def test_a_launch_bound_gpu_with_some_unlinked_kernels_says_more_may_wait(
        tmp_path: Path) -> None:
    """55 of each SGD step's 60 kernels linked: the launch waits the linked ones end make
    HOST_LAUNCH_BOUND; the gaps the 5 unlinked ones end are unexplained, the finding says
    they may wait for launches too, and the launch delay says which kernels it leaves out."""
    report = analyze_paths([_partly_correlated_trace(tmp_path / "partial.pt.trace.json", 55)],
                           AnalyzeOptions())
    run = report.runs[0]
    idle, launch = run.metrics.gpu_idle, run.metrics.launch
    assert idle.launch_unknown_ns_per_step == 100_000  # 5 gaps of 20 us per step
    assert idle.launch_unknown.startswith("15 idle gaps end with work linked to no launch call")
    stall = next(f for f in run.findings if f.id == "HOST_LAUNCH_BOUND")
    assert ("0.1 ms more idle time per step, counted as unexplained, may wait for launches too: "
            f"{idle.launch_unknown}") in [e.text for e in stall.evidence]
    assert launch.launches_unknown == (
        "the torch.profiler profile records no launch call for 15 of the 180 kernels that ran "
        "in the steps (15 with no correlation id, 0 with one that no recorded runtime call "
        "carries)")
    assert ("| Kernels the launch delay and queued share leave out (linked to no launch call) | "
            f"{launch.launches_unknown} |") in render_markdown(report)


def _comm_trace(path: Path, correlated: int) -> Path:
    """3 ProfilerSteps of 10 ms, each launching two NCCL all-reduce kernels of 1 ms; only the
    first ``correlated`` of the six kernels and their launch calls record a correlation id."""
    events, n = [], 0
    for step in range(3):
        ts = 1000 + step * 10_000
        events.append(cpu_event(f"ProfilerStep#{step}", ts, 10_000, cat="user_annotation"))
        for k in range(2):
            ids = {"correlation": n + 1} if n < correlated else {}
            events += [cpu_event("cudaLaunchKernel", ts + 100 + 4000 * k, 5, cat="cuda_runtime",
                                 **ids),
                       device_event("ncclKernel_AllReduce_RING_LL_Sum_float",
                                    ts + 200 + 4000 * k, 1000, device=0, stream=9, **ids)]
            n += 1
    return kineto_trace(path, events)


def test_collective_calls_without_their_launch_say_how_they_were_counted(
        tmp_path: Path) -> None:
    """Collective calls per step are counted by the step that launched each NCCL kernel. Two
    of the six kernels have no launch call linked: they were counted by the step they ran in
    with nothing said; now CommStats says so and why, in every renderer."""
    linked = analyze_paths([_comm_trace(tmp_path / "linked.pt.trace.json", 6)],
                           AnalyzeOptions()).runs[0].metrics.comm
    assert (linked.calls_per_step, linked.calls_unknown) == (2, None)
    report = analyze_paths([_comm_trace(tmp_path / "partial.pt.trace.json", 4)],
                           AnalyzeOptions())
    comm = report.runs[0].metrics.comm
    why = ("each counted by the step it started in: the torch.profiler profile records no "
           "launch call for 2 of the 6 kernels that communicate (2 with no correlation id, 0 "
           "with one that no recorded runtime call carries)")
    assert (comm.calls_per_step, comm.calls_unknown) == (2, why)
    assert f"| Collective calls per step | 2 ({why}) |" in render_markdown(report)
    assert json.loads(render_json(report))["runs"][0]["metrics"][
        "comm_calls_unknown_reason"] == why


def _sync_bound_export(path: Path) -> Path:
    """4 steps of 100 ms: each launches an 8 ms kernel at 1 ms (running 2 to 10 ms), then
    blocks in cudaStreamSynchronize from 1.5 ms until just after it ends; the GPU then idles
    till the next step: sync-bound, the call waiting for the one kernel queued."""
    kernels, runtime = [], []
    for i in range(4):
        t, c = i * 100 * MS, i * 10
        runtime += [(t + 1 * MS, t + 1 * MS + 10 * US, c + 1, "cudaLaunchKernel_v7000"),
                    (t + 1500 * US, t + 10 * MS + 10 * US, c + 2, "cudaStreamSynchronize_v3020")]
        kernels.append((t + 2 * MS, t + 10 * MS, c + 1, "conv_kernel"))
    steps = [(i * 100 * MS, i * 100 * MS + 90 * MS, f"step {i}") for i in range(4)]
    return write_nsys_export(path, kernels, steps, runtime)


def test_the_work_a_sync_waited_for_is_at_least_the_linked_work(tmp_path: Path) -> None:
    """The sync-bound verdict says what the blocking call waited for: the GPU work queued when
    it began. With the kernels' correlationId NULL, the queued kernel was taken to be launched
    at its own start, after the call began, and the verdict said 'with nothing queued on the
    GPU when it began', which the profile does not show. Now SyncStats says why the queue is a
    lower bound and the verdict claims no empty queue."""
    linked = analyze_paths([_sync_bound_export(tmp_path / "linked.sqlite")],
                           AnalyzeOptions()).runs[0]
    assert linked.verdict == "sync-bound" and linked.metrics.syncs.queued_unknown is None
    assert ", which waited for the 1 GPU operations queued before it;" in linked.verdict_reason
    path = _sync_bound_export(tmp_path / "unlinked.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL")
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    syncs = run.metrics.syncs
    assert run.verdict == "sync-bound" and syncs.calls[0].queued == (0, 0)
    assert syncs.queued_unknown == (
        "the Nsight Systems profile records no correlation id on its kernels, the evidence that "
        "links each launch call to the kernels it launched")
    assert run.verdict_reason.endswith("blocked in cudaStreamSynchronize")


def _copying_trace(path: Path, correlated: int) -> Path:
    """3 ProfilerSteps of 10 ms, each with six aten::copy_ ops launching a 4-byte host-to-device
    copy (cudaMemcpyAsync inside the op); only the first ``correlated`` of the 18 copies and
    their calls record a correlation id."""
    events, n = [], 0
    for step in range(3):
        ts = 1000 + step * 10_000
        events.append(cpu_event(f"ProfilerStep#{step}", ts, 10_000, cat="user_annotation"))
        for k in range(6):
            at = ts + 100 + 1500 * k
            ids = {"correlation": n + 1} if n < correlated else {}
            events += [cpu_event("aten::copy_", at, 50),
                       cpu_event("cudaMemcpyAsync", at + 10, 20, cat="cuda_runtime", **ids),
                       device_event("Memcpy HtoD (Pageable -> Device)", at + 40, 2,
                                    cat="gpu_memcpy", device=0, stream=7, bytes=4, **ids)]
            n += 1
    return kineto_trace(path, events)


def test_copies_linked_to_no_launch_call_have_an_unknown_launcher(tmp_path: Path) -> None:
    """Which operator launched each host-to-device copy comes through its launch call. Six of
    the 18 copies have none linked: they were listed as launched by 'no recorded operator',
    outside every recorded op, which the profile does not show; now as linked to no launch
    call, in the results and in HOST_DEVICE_COPIES_PER_STEP's evidence."""
    linked = analyze_paths([_copying_trace(tmp_path / "linked.pt.trace.json", 18)],
                           AnalyzeOptions()).runs[0].metrics.step_copies
    assert linked.launchers["HtoD"] == [("aten::copy_", 6)]
    run = analyze_paths([_copying_trace(tmp_path / "partial.pt.trace.json", 12)],
                        AnalyzeOptions()).runs[0]
    assert run.metrics.step_copies.launchers["HtoD"] == [("aten::copy_", 4),
                                                         ("(no launch call)", 2)]
    copies = next(f for f in run.findings if f.id == "HOST_DEVICE_COPIES_PER_STEP")
    assert ("launched (runtime call joined by correlation id) inside: aten::copy_ (4 per step), "
            "unknown, linked to no launch call (2 per step)") in [e.text for e in copies.evidence]


def _linear_trace_unlinking(path: Path, kernel: str) -> Path:
    """test_op_checks' fp32 linear trace on an A100 (a 400 us GEMM and a 100 us elementwise
    kernel per step) whose ``kernel`` kernels and their launch calls record no correlation id."""
    from test_op_checks import A100, linear_trace

    trace = json.loads(linear_trace(path, "float", [A100]).read_text())
    unlinked_ids = {e["args"]["correlation"] for e in trace["traceEvents"]
                    if e["cat"] == "kernel" and e["name"] == kernel}
    for event in trace["traceEvents"]:
        if event.get("args", {}).get("correlation") in unlinked_ids:
            del event["args"]["correlation"]
    path.write_text(json.dumps(trace))
    return path


def test_an_fp32_share_that_unlinked_kernels_could_carry_is_unknown(tmp_path: Path) -> None:
    """The GEMMs the fp32 linear launches (80% of compute-kernel time) have no launch call
    linked: they counted as launched by no call, the fp32 share read 0% and
    FP32_ON_TENSOR_CORES was silently absent. Now OpPrecision says how much kernel time no
    call is linked to and why, and LAUNCH_LINKS_UNKNOWN says the share is unknown."""
    report = analyze_paths([_linear_trace_unlinking(tmp_path / "t.json", "gemm_128x64")],
                           AnalyzeOptions())
    run = report.runs[0]
    p = run.metrics.op_precision
    why = ("the torch.profiler profile records no launch call for 2 of the 4 kernels in the "
           "steps (2 with no correlation id, 0 with one that no recorded runtime call carries)")
    assert (p.kernel_ns["fp32"], p.unlinked_kernel_ns, p.launches_unknown) == (0, 800_000, why)
    found = {f.id: f for f in run.findings}
    assert "FP32_ON_TENSOR_CORES" not in found
    evidence = ("compute-kernel time fp32 matmuls/convolutions launched (FP32_ON_TENSOR_CORES): "
                f"unknown, between 0.0% and 80%, {why}")
    assert evidence in [e.text for e in found["LAUNCH_LINKS_UNKNOWN"].evidence]
    assert evidence in render_html(report)


def test_an_fp32_share_past_the_threshold_with_unlinked_kernels_says_at_least(
        tmp_path: Path) -> None:
    """The elementwise kernels unlinked instead: the linked GEMMs already make 80%,
    FP32_ON_TENSOR_CORES stands and says the unlinked kernel time may add to it."""
    run = analyze_paths([_linear_trace_unlinking(tmp_path / "t.json",
                                                 "vectorized_elementwise_kernel")],
                        AnalyzeOptions()).runs[0]
    p = run.metrics.op_precision
    assert (p.kernel_ns["fp32"], p.unlinked_kernel_ns) == (800_000, 200_000)
    found = {f.id: f for f in run.findings}
    assert ("at least that: 0.1 ms per step of compute kernels, linked to no launch call, may be "
            f"fp32 calls' too: {p.launches_unknown}") in [
                e.text for e in found["FP32_ON_TENSOR_CORES"].evidence]
    assert "LAUNCH_LINKS_UNKNOWN" not in found


def _two_gpu_trace(path: Path, linked: tuple[int, ...]) -> Path:
    """3 ProfilerSteps of 10 ms of one process (as nn.DataParallel runs) launching a 2 ms
    kernel on GPU 0 and one on GPU 1 each; the launches on the GPUs in ``linked`` record their
    correlation ids, the others none."""
    events, corr = [], 1
    for n in range(3):
        ts = 1000 + n * 10_000
        events.append(cpu_event(f"ProfilerStep#{n}", ts, 10_000, cat="user_annotation"))
        for device in (0, 1):
            ids = {"correlation": corr} if device in linked else {}
            events += [cpu_event("cudaLaunchKernel", ts + 100 + 10 * device, 5,
                                 cat="cuda_runtime", **ids),
                       device_event("gemm_kernel", ts + 200, 2000, pid=device, device=device,
                                    **ids)]
            corr += 1
    return kineto_trace(path, events)


def test_gpus_one_process_drives_are_unknown_without_the_launch_links(tmp_path: Path) -> None:
    """One process launches kernels on GPUs 0 and 1: linked, 2 GPUs and DATAPARALLEL_NOT_DDP.
    With no kernel linked to its launch call the figure was every GPU of the table, 2, and the
    finding said 'one process launched kernels on 2 GPUs' on no evidence (they may be two
    processes'); now it is unknown and why, no DATAPARALLEL_NOT_DDP, and LAUNCH_LINKS_UNKNOWN
    says so. With GPU 0's launches linked alone it is at least 1, unknown."""
    linked = analyze_paths([_two_gpu_trace(tmp_path / "linked.pt.trace.json", (0, 1))],
                           AnalyzeOptions()).runs[0]
    assert (linked.metrics.max_devices_per_process,
            linked.metrics.devices_per_process_unknown) == (2, None)
    found = {f.id: f for f in linked.findings}
    assert "one process launched kernels on 2 GPUs" in [
        e.text for e in found["DATAPARALLEL_NOT_DDP"].evidence]
    assert "LAUNCH_LINKS_UNKNOWN" not in found
    none = analyze_paths([_two_gpu_trace(tmp_path / "none.pt.trace.json", ())],
                         AnalyzeOptions()).runs[0]
    why = ("the torch.profiler profile records no correlation id on its runtime calls, the "
           "evidence that links each launch call to the kernels it launched")
    assert (none.metrics.max_devices_per_process,
            none.metrics.devices_per_process_unknown) == (None, why)
    found = {f.id: f for f in none.findings}
    assert "DATAPARALLEL_NOT_DDP" not in found
    assert ("GPUs one process launched kernels on (DATAPARALLEL_NOT_DDP): unknown, "
            f"{why}") in [e.text for e in found["LAUNCH_LINKS_UNKNOWN"].evidence]
    half = analyze_paths([_two_gpu_trace(tmp_path / "half.pt.trace.json", (0,))],
                         AnalyzeOptions()).runs[0]
    why = ("the torch.profiler profile records no launch call for 3 of the 6 kernels that ran "
           "in the steps (3 with no correlation id, 0 with one that no recorded runtime call "
           "carries)")
    assert (half.metrics.max_devices_per_process,
            half.metrics.devices_per_process_unknown) == (1, why)
    found = {f.id: f for f in half.findings}
    assert "DATAPARALLEL_NOT_DDP" not in found
    assert ("GPUs one process launched kernels on (DATAPARALLEL_NOT_DDP): unknown, at least 1, "
            f"{why}") in [e.text for e in found["LAUNCH_LINKS_UNKNOWN"].evidence]


def test_kernels_and_copies_per_step_say_how_unlinked_ones_are_counted(tmp_path: Path) -> None:
    """The blocking-copy export (a kernel and a 4-byte device-to-host copy launched in each of
    4 steps) with its last two steps' kernels and copies holding a NULL correlationId: those
    were put in the step they started in on the GPU with nothing said, as if linked. The
    counts stay (each starts inside the step that launched it here), and the metrics row,
    report.json and the copies finding say those linked to no launch call are counted by the
    step they started in, with how many and why."""
    path = _blocking_copy_export(tmp_path / "partial.sqlite")
    with sqlite3.connect(path) as conn:
        for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_KERNEL"):
            conn.execute(f"UPDATE {table} SET correlationId = NULL WHERE start >= 200000000")
    report = analyze_paths([path], AnalyzeOptions())
    m = report.runs[0].metrics
    kernels = ("those linked to no launch call counted by the step they started in: the Nsight "
               "Systems profile records no launch call for 2 of the 4 kernels that ran in the "
               "steps (2 with no correlation id, 0 with one that no recorded runtime call "
               "carries)")
    assert (m.launch.kernels_per_step, m.launch.kernels_unknown) == (1, kernels)
    assert f"| Kernels per step | 1 ({kernels}) |" in render_markdown(report)
    data = json.loads(render_json(report))["runs"][0]["metrics"]
    assert data["kernels_per_step_unknown_reason"] == kernels
    copies = ("those linked to no launch call counted by the step they started in: the Nsight "
              "Systems profile records no launch call for 2 of the 4 copies between host and "
              "device that ran in the steps (2 with no correlation id, 0 with one that no "
              "recorded runtime call carries)")
    assert (m.step_copies.copies_per_step["DtoH"], m.step_copies.launches_unknown) == (1, copies)
    # Two reads back per step make HOST_DEVICE_COPIES_PER_STEP, whose evidence says it.
    doubled = dataclasses.replace(m.step_copies, copies_per_step={"HtoD": 0, "DtoH": 2})
    found = {f.id: f for f in find_all(dataclasses.replace(m, step_copies=doubled),
                                       RunContext())}
    assert f"copies per step: {copies}" in [
        e.text for e in found["HOST_DEVICE_COPIES_PER_STEP"].evidence]
    linked = analyze_paths([_blocking_copy_export(tmp_path / "linked.sqlite")],
                           AnalyzeOptions()).runs[0].metrics
    assert (linked.launch.kernels_unknown, linked.step_copies.launches_unknown) == (None, None)


def _orphans_after_the_optimizer_trace(path: Path) -> Path:
    """3 ProfilerSteps of 10 ms, each with an SGD step span (5 to 9 ms) launching 60 kernels,
    then, after the span, a launch call at 9.5 ms and 2 kernels; the runtime calls of the
    span's last kernel and of the second kernel after it are missing, their kernels keeping
    their correlation ids (CUPTI counts the ids up as the calls are made)."""
    events = []
    for n in range(3):
        ts, corr = 1000 + n * 10_000, 100 * n + 1
        events += [cpu_event(f"ProfilerStep#{n}", ts, 10_000, cat="user_annotation"),
                   cpu_event("Optimizer.step#SGD.step", ts + 5000, 4000,
                             cat="user_annotation")]
        launches = [(ts + 5010 + 60 * k, ts + 5020 + 60 * k) for k in range(60)]
        launches += [(ts + 9500, ts + 9600), (ts + 9510, ts + 9700)]
        for k, (at, starts) in enumerate(launches):
            if k not in (59, 61):
                events.append(cpu_event("cudaLaunchKernel", at, 5, cat="cuda_runtime",
                                        correlation=corr + k))
            events.append(device_event("void at::native::vectorized_elementwise_kernel<4>",
                                       starts, 40, device=0, stream=7, correlation=corr + k))
    return kineto_trace(path, events)


def test_unlinked_kernels_launched_after_the_optimizer_span_are_none_of_its(
        tmp_path: Path) -> None:
    """Each step's last optimizer kernel and a kernel after the span have no recorded launch
    call. The optimizer's kernel may be the span's (the call before its id began inside it);
    the other was launched after the call of the id below it began, at 9.5 ms, after the
    span ended at 9 ms, so it cannot be the span's. It was counted as maybe the optimizer's
    (its latest launch, its start, came after a span began: 'between 59 and 61'); now the
    bound counts only the first."""
    mix = analyze_paths([_orphans_after_the_optimizer_trace(tmp_path / "o.pt.trace.json")],
                        AnalyzeOptions()).runs[0].metrics.kernel_mix
    assert (mix.optimizer_kernels_per_step, mix.optimizer_unlinked_per_step) == (59, 1)
    assert mix.optimizer_unknown == (
        "the torch.profiler profile records no launch call for 3 of the 180 kernels that may "
        "have been launched inside an optimizer step (0 with no correlation id, 3 with one "
        "that no recorded runtime call carries)")


@pytest.mark.parametrize("lacking", ["ids", "calls"])
def test_the_fix_for_unlinked_work_names_what_the_profile_lacks(tmp_path: Path,
                                                                 lacking: str) -> None:
    """The blocking-copy export with its copies' correlationId dropped (another nsys version's
    schema), or with each kernel's id one that no recorded call carries (its call made before
    the capture recorded calls, or dropped): LAUNCH_LINKS_UNKNOWN's fix told both to profile
    with the correlation ids kept, which the second already records. It now names what each
    profile lacks: the ids, or the calls of ids the work carries."""
    path = _blocking_copy_export(tmp_path / f"{lacking}.sqlite")
    with sqlite3.connect(path) as conn:
        if lacking == "ids":
            conn.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY DROP COLUMN correlationId")
        else:
            conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = "
                         "correlationId + 1000")
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    fix = {f.id: f for f in run.findings}["LAUNCH_LINKS_UNKNOWN"].recommendation
    assert run.metrics.launch_link_gaps == (
        ("no correlation ids",) if lacking == "ids" else ("calls unrecorded",))
    assert fix.startswith("Profile with the correlation ids kept" if lacking == "ids" else
                          "The unlinked GPU work carries correlation ids that no recorded call "
                          "holds")
    assert ("correlation ids kept" in fix) == (lacking == "ids")
