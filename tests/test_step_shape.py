"""Start-up and the shape of the per-step figures (reports.analysis.shape) on hand-built Kineto
traces: a trace of start-up only, one long first step before steady steps, and DataLoader
stalls every Nth step over a small steady wait."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from profreport.commands import _summary_lines
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.render.json import render_json
from profreport.reports.render.markdown import render_markdown

sys.path.insert(0, str(Path(__file__).parent))
from conftest import cpu_event, kineto_trace, write_nsys_export  # noqa: E402

KERNEL = "volta_sgemm_128x64_nn"
LOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def write_trace(path: Path, steps: list[tuple[int, int, list[str]]],
                busy_in_wait: bool = False, first: int = 0) -> Path:
    """A trace of ProfilerStep spans, one per ``(wait_us, compute_us, setup_calls)``: the step
    opens with a DataLoader span of ``wait_us``, then the setup runtime calls, then one kernel
    of ``compute_us`` launched by cudaLaunchKernel (joined by correlation id). With
    ``busy_in_wait``, a kernel runs through the middle 80% of every wait over 10 ms (another
    task on the GPU then). The spans count from ``ProfilerStep#first``."""
    events, ts, corr = [], 1000, 1
    for n, (wait_us, compute_us, setup) in enumerate(steps):
        if busy_in_wait and wait_us > 10_000:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": 1, "tid": 1, "ts": ts + 2, "dur": 5,
                           "args": {"correlation": 500000 + n}})
            events.append({"ph": "X", "cat": "kernel", "name": "eval_kernel", "pid": 0,
                           "tid": 7, "ts": ts + wait_us // 10, "dur": wait_us * 8 // 10,
                           "args": {"correlation": 500000 + n, "stream": 7, "device": 0}})
        step_us = wait_us + compute_us + 50 + 10 * len(setup)
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{first + n}",
                       "pid": 1, "tid": 1, "ts": ts, "dur": step_us, "args": {}})
        events.append({"ph": "X", "cat": "user_annotation", "name": LOADER, "pid": 1,
                       "tid": 1, "ts": ts + 1, "dur": max(wait_us - 2, 1), "args": {}})
        at = ts + wait_us
        for name in setup:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1,
                           "ts": at, "dur": 8, "args": {"correlation": 100000 + corr}})
            at, corr = at + 10, corr + 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 1, "ts": at, "dur": 5, "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": "kernel", "name": KERNEL, "pid": 0, "tid": 7,
                       "ts": at + 10, "dur": compute_us,
                       "args": {"correlation": corr, "stream": 7, "device": 0}})
        corr += 1
        ts += step_us
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


SETUP = ["cuInit", "cuDevicePrimaryCtxRetain"] + ["cudaMalloc"] * 6


def test_loading_gpu_code_is_start_up_work(tmp_path: Path) -> None:
    """A step whose runtime calls load kernel images (cuModuleLoadData, cuLibraryLoadData: CUDA's
    lazy loading at a kernel's first launch) besides the allocator's growth: the loads were
    not counted as set-up calls, so STARTUP named only the allocations."""
    loads = ["cuModuleLoadData", "cuLibraryLoadData", "cuModuleLoadData"]
    path = write_trace(tmp_path / "lazy.pt.trace.json", [(400, 3000, loads + ["cudaMalloc"])])
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    assert run.metrics.shape.warmup.setup_calls == {"cuModuleLoadData": 2, "cudaMalloc": 1,
                                                    "cuLibraryLoadData": 1}
    found = next(f for f in run.findings if f.id == "STARTUP")
    assert "cuModuleLoadData ×2, cuLibraryLoadData ×1, cudaMalloc ×1" in found.evidence[0].text


def test_a_trace_of_start_up_only_says_so(tmp_path: Path) -> None:
    """One step holding context creation and allocator growth is start-up only: a high
    STARTUP finding naming the calls, and the step is still the only one measured."""
    path = write_trace(tmp_path / "first.pt.trace.json", [(400, 3000, SETUP)])
    report = analyze_paths([path], AnalyzeOptions())
    run = report.runs[0]
    warmup = run.metrics.shape.warmup
    assert warmup.only and warmup.number == 0
    assert warmup.setup_calls == {"cudaMalloc": 6, "cuDevicePrimaryCtxRetain": 1, "cuInit": 1}
    found = next(f for f in run.findings if f.id == "STARTUP")
    assert found.severity == "high" and "start-up only" in found.title
    assert "cudaMalloc ×6, cuDevicePrimaryCtxRetain ×1, cuInit ×1" in found.evidence[0].text
    assert run.metrics.steps.count == 1
    assert run.verdict_reason.endswith("; but the profile shows start-up only (one step holding "
                                       "set-up calls), so this is not the steady state of "
                                       "training")
    data = json.loads(render_json(report))["runs"][0]["metrics"]["step_shape"]
    assert data["warmup"]["startup_only"] is True


def one_iteration(path: Path, backward_kernel_us: int = 50) -> Path:
    """One training iteration traced without schedule (no ProfilerStep span; one optimizer
    step bounds no step): a 400 µs DataLoader span from 1001 µs, context creation and
    allocator growth, a 300 µs kernel, then from 4400 µs a backward op launching a kernel of
    ``backward_kernel_us`` at 4420 µs and the optimizer step (4520-4580 µs)."""
    write_trace(path, [(400, 300, SETUP)])
    trace = json.loads(path.read_text())
    events = [e for e in trace["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    events += [{**cpu_event("autograd::engine::evaluate_function: MmBackward0", 4400, 100),
                "pid": 1, "tid": 1},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                "tid": 1, "ts": 4410, "dur": 5, "args": {"correlation": 900}},
               {"ph": "X", "cat": "kernel", "name": KERNEL, "pid": 0, "tid": 7, "ts": 4420,
                "dur": backward_kernel_us,
                "args": {"correlation": 900, "stream": 7, "device": 0}},
               {**cpu_event("Optimizer.step#SGD.step", 4520, 60, cat="user_annotation"),
                "pid": 1, "tid": 1}]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def test_one_iteration_traced_without_a_schedule_is_start_up_only(tmp_path: Path) -> None:
    """One training iteration traced without schedule (see one_iteration): context creation and
    allocator growth, then one kernel. It holds no step, and was reported as 'no step markers'
    with the advice that the trace shows no CPU activity around the GPU's idle time (busy
    350 us of 2.98 ms), while it records all of it; it is start-up only."""
    path = one_iteration(tmp_path / "one.pt.trace.json")
    report = analyze_paths([path], AnalyzeOptions())
    run = report.runs[0]
    assert run.metrics.steps is None
    warmup = run.metrics.shape.warmup
    assert warmup.only and warmup.number is None
    assert warmup.duration_ns == 3_579_000  # the first DataLoader span to the optimizer's end
    found = next(f for f in run.findings if f.id == "STARTUP")
    assert found.severity == "high"
    assert found.title.startswith("The profile shows start-up only: it holds no step (3.6 ms "
                                  "profiled)")
    assert found.evidence[0].text == ("the 3.6 ms profiled hold no step and these set-up calls: "
                                      "cudaMalloc ×6, cuDevicePrimaryCtxRetain ×1, cuInit ×1")
    idle = next(f for f in run.findings if f.id == "LOW_GPU_UTIL")
    assert idle.severity == "medium"  # 9.8% busy, but in set-up: not training's steady state
    assert "CPU activity" not in idle.recommendation
    assert idle.recommendation.startswith("The profile shows start-up only")
    # The verdict is unknown: the start-up is said beside its reason, not set against it.
    assert run.verdict_reason == ("GPU busy 9.8% but no step markers to attribute the idle time; "
                                  "and the profile shows start-up only (no step, set-up calls "
                                  "recorded), so this is not the steady state of training")
    assert "| Start-up | 3.6 ms (no step: start-up only) |" in render_markdown(report)


def test_start_up_only_lasts_the_profiled_span_the_gpu_is_measured_over(
        tmp_path: Path) -> None:
    """One iteration traced without schedule whose last kernel (4420-4820 µs) ends after the
    optimizer step (4580 µs): the profile watched 1001-4820 µs, the GPU's busy share is over
    those 3.819 ms, and so is the start-up it shows (3.579 ms before, to the last CPU event's
    end, while the GPU said 3.819 ms profiled)."""
    run = analyze_paths([one_iteration(tmp_path / "one.pt.trace.json", backward_kernel_us=400)],
                        AnalyzeOptions()).runs[0]
    assert run.metrics.steps is None
    warmup = run.metrics.shape.warmup
    assert warmup.only and warmup.span == (1_001_000, 4_820_000)
    assert warmup.duration_ns == run.metrics.gpu.window_ns == 3_819_000
    assert run.metrics.gpu.span == "profiled span"


def test_pageable_copies_of_a_start_up_profile_are_set_up(tmp_path: Path) -> None:
    """A profile of start-up only (context creation, allocator growth, one kernel, no step)
    that copies 128 MiB host-to-device from pageable memory (the model's weights moved to the
    GPU): PAGEABLE_MEMCPY is low and says the copies are one-off set-up, which pinning does not
    speed up; it advised pin_memory in the DataLoader at medium, as for batches copied every
    step."""
    path = write_trace(tmp_path / "weights.pt.trace.json", [(400, 300, SETUP)])
    trace = json.loads(path.read_text())
    events = [e for e in trace["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1,
                "tid": 1, "ts": 4400, "dur": 20, "args": {"correlation": 950}},
               {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
                "pid": 0, "tid": 7, "ts": 4410, "dur": 11_000,
                "args": {"correlation": 950, "stream": 7, "device": 0, "bytes": 128 << 20}}]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    assert run.metrics.shape.warmup.only
    found = next(f for f in run.findings if f.id == "PAGEABLE_MEMCPY")
    assert found.severity == "low"
    assert found.recommendation.startswith(
        "The profile shows start-up only (see the start-up finding): its 128.0 MiB of pageable "
        "H2D copies are one-off set-up")



def test_a_long_first_step_is_left_out_of_the_per_step_figures(tmp_path: Path) -> None:
    """A first step of 20.5 ms (context creation, 20 ms of first fill) before five steady
    steps of 1.15 ms: it is start-up, the per-step figures cover the five (mean 1.15 ms, shown
    half up as 1.2 ms, wait 0.1 ms) and the report says which step was left out."""
    steady = [(100, 1000, [])] * 5
    path = write_trace(tmp_path / "run.pt.trace.json", [(20000, 400, SETUP)] + steady)
    report = analyze_paths([path], AnalyzeOptions())
    run = report.runs[0]
    warmup = run.metrics.shape.warmup
    assert warmup.number == 0 and not warmup.only
    assert warmup.duration_ns == 20_530_000 and warmup.others_median_ns == 1_150_000
    assert warmup.setup_calls["cuInit"] == 1
    assert run.metrics.steps.count == 5 and run.metrics.steps.mean_ns == 1_150_000
    assert run.metrics.breakdown.step_ns == 1_150_000
    # The DataLoader span of 100 - 2 µs in a step of 100 + 1000 + 50 µs: 98 / 1150.
    assert run.metrics.dataloader_fraction == pytest.approx(98 / 1150, rel=1e-9)
    assert (run.verdict, run.verdict_reason) == ("compute-bound",
                                                 "GPU busy 87% of the step windows")
    found = next(f for f in run.findings if f.id == "STARTUP")
    assert found.severity == "info" and found.title.startswith("Step 0 is start-up")
    assert warmup.loader_fill == (19_998_000, 98_000)
    assert found.evidence[1].text.startswith("its DataLoader spans take 20.0 ms against a median "
                                             "of 98.0 µs in the later steps")
    text = render_markdown(report)
    assert "Start-up | 20.5 ms (step 0, left out of the per-step figures)" in text
    # Each step time says which it is: the annotated range, start to next start, the window.
    assert "| Mean annotated step (its range alone) | 1.2 ms |" in text
    assert "| Wall time per step (start to next start) | 1.2 ms |" in text
    assert "Step window, mean (start to next start; the last step its range)" in text
    assert _summary_lines(run)[1] == ("  steps: 5 × 1.2 ms annotated range (kineto, 1.2 ms start "
                                      "to next start, median window 1.2 ms)")


def test_start_to_next_start_of_two_steps_is_said_to_be_one_interval(tmp_path: Path) -> None:
    """Two steps (1.15 ms and 1.35 ms: waits of 100 and 300 µs): the wall time per step, start
    to next start, is step 0's start to step 1's alone, 1.15 ms (1.2 ms shown); the report
    stated it like a mean of several. It says so where it shows it (key metrics, the terminal
    summary, report.json's wall_step_intervals); three steps give two intervals and no such
    word."""
    path = write_trace(tmp_path / "two.pt.trace.json", [(100, 1000, []), (300, 1000, [])])
    report = analyze_paths([path], AnalyzeOptions())
    assert ("| Wall time per step (start to next start) | 1.2 ms (one interval: a single "
            "measurement) |") in render_markdown(report)
    steps = report.runs[0].metrics.steps
    assert (steps.count, steps.wall_mean_ns, steps.wall_intervals) == (2, 1_150_000, 1)
    assert _summary_lines(report.runs[0])[1] == (
        "  steps: 2 × 1.3 ms annotated range (kineto, 1.2 ms start to next start over one "
        "interval, median window 1.3 ms)")
    assert json.loads(render_json(report))["runs"][0]["metrics"]["wall_step_intervals"] == 1
    three = analyze_paths([write_trace(tmp_path / "three.pt.trace.json",
                                       [(100, 1000, []), (300, 1000, []), (100, 1000, [])])],
                          AnalyzeOptions())
    assert three.runs[0].metrics.steps.wall_intervals == 2
    assert ("| Wall time per step (start to next start) | 1.3 ms |"
            in render_markdown(three))


def test_a_long_first_step_after_a_schedules_skipped_steps_is_no_start_up(
        tmp_path: Path) -> None:
    """schedule(wait=2, warmup=1, active=10): the first step recorded is ProfilerStep#3, the
    process having run steps 0-2 (its start-up, the DataLoader workers' first fill) unrecorded.
    A real CPU run's first recorded step took 169.2 ms against a median of 17.9 ms, with no
    set-up call in it, and read 'Step 3 is start-up' with 'the loader's first fill (worker
    start-up, first batches)'. It is still left out of the per-step figures, but said to be the
    first step profiled, not start-up; a step 0 keeps the start-up reading."""
    steps = [(5_000, 164_000, [])] + [(2_600, 15_300, [])] * 8
    run = analyze_paths([write_trace(tmp_path / "sched.pt.trace.json", steps, first=3)],
                        AnalyzeOptions()).runs[0]
    warmup = run.metrics.shape.warmup
    assert (warmup.number, warmup.steps_before, warmup.after_startup) == (3, 3, True)
    assert run.metrics.steps.count == 8
    found = next(f for f in run.findings if f.id == "STARTUP")
    assert found.title == ("Step 3, the first step profiled, takes 9.4× the later steps' median "
                           "and is left out of the per-step figures; it is not the process's "
                           "start-up.")
    assert found.evidence[1].text.startswith("the profiler counted steps 0-2 before it without "
                                             "recording them (ProfilerStep#3 is the first")
    assert "first fill (worker start-up" not in " ".join(e.text for e in found.evidence)
    text = render_markdown(analyze_paths([tmp_path / "sched.pt.trace.json"], AnalyzeOptions()))
    assert "| First step profiled | 169.1 ms (step 3, left out of the per-step figures) |" in text
    json_warmup = json.loads(render_json(analyze_paths([tmp_path / "sched.pt.trace.json"],
                                                       AnalyzeOptions())))
    assert json_warmup["runs"][0]["metrics"]["step_shape"]["warmup"]["steps_before"] == 3
    (tmp_path / "zero").mkdir()
    zero = analyze_paths([write_trace(tmp_path / "zero" / "t.pt.trace.json", steps)],
                         AnalyzeOptions()).runs[0]
    assert next(f for f in zero.findings if f.id == "STARTUP").title == (
        "Step 0 is start-up, left out of the per-step figures.")


def test_a_first_fill_without_workers_names_no_worker_start_up(tmp_path: Path) -> None:
    """A real --script run (num_workers=0 recorded from its DataLoader): its first step took
    311.4 ms against a median of 50.5 ms, its DataLoader spans 3.4 ms against 0.3 ms, and the
    finding blamed 'worker start-up' of a loader that had no workers. With workers it still
    does; without them it names the training process loading the first batches."""
    from profreport.parsers import parse_file
    from profreport.reports.analysis.findings import RunContext, find_all
    from profreport.reports.analysis.metrics import compute_run_metrics

    steps = [(3_400, 308_000, [])] + [(300, 50_200, [])] * 8
    metrics = compute_run_metrics([parse_file(write_trace(tmp_path / "t.pt.trace.json", steps))])

    def fill(**knobs: object) -> str:
        found = next(f for f in find_all(metrics, RunContext(knobs=knobs)) if f.id == "STARTUP")
        return found.evidence[1].text

    assert fill(num_workers=2).endswith("the loader's first fill (worker start-up, first "
                                        "batches)")
    assert fill(num_workers=0).endswith(
        "the loader's first batches, loaded in the training process (no workers: its "
        "iterator's creation, the dataset's first reads)")


def test_torch_compile_compiling_before_the_first_step_is_start_up(tmp_path: Path) -> None:
    """A real CPU trace of a model torch.compile'd inside the profiled loop (torch 2.13): its
    first iteration spent 6,351 ms in Dynamo's entire_frame_compile and 3,194 ms in
    entire_backward_compile, 9.6 s of a 9.6 s trace, before 15 steps of 0.8 ms; the report
    said nothing of it (the steps, from the optimizer's, leave that time out). It is start-up
    before the first step now, named by those spans, with torch.compile in the advice."""
    events = [cpu_event("entire_frame_compile", 10_000, 6_351_000),
              cpu_event("aten::mm", 6_362_000, 500),
              cpu_event("entire_backward_compile", 6_369_000, 3_194_000),
              cpu_event("Optimizer.step#SGD.step", 9_565_000, 100, cat="user_annotation")]
    for i in range(1, 16):
        at = 9_565_000 + 800 * i
        events += [cpu_event("aten::mm", at - 700, 500),
                   cpu_event("Optimizer.step#SGD.step", at, 100, cat="user_annotation")]
    run = analyze_paths([kineto_trace(tmp_path / "compiled.json", events)],
                        AnalyzeOptions()).runs[0]
    warmup = run.metrics.shape.warmup
    assert warmup.number is None and warmup.setup_calls == {"entire_backward_compile": 1,
                                                             "entire_frame_compile": 1}
    found = next(f for f in run.findings if f.id == "STARTUP")
    assert found.title == ("The profile begins with start-up before its first step, left out of "
                           "the per-step figures.")
    assert "torch.compile compiling the model at its first forward and backward" in \
        found.recommendation


def test_a_recompile_inside_the_steps_is_named_and_its_spans_are_no_operators(
        tmp_path: Path) -> None:
    """A real CPU trace (torch 2.13) of a compiled model over 2 epochs of 500 samples in
    batches of 32: the smaller last batch made torch.compile compile again inside step 15
    (10.0 s of entire_frame_compile and entire_backward_compile; the other steps 1.1 ms). The
    report read 'top CPU operator by self time async_compile.wait (dynamo_timed): 70% of step
    time ... even compiled: a smaller model or input is the remaining lever', and nothing named
    the recompile. The compiler's spans and the operators inside them are no top operators
    now, and RECOMPILED names the step and says the means hold the compiling."""
    events = []
    for i in range(20):
        at = 1_000 + 1_100 * i + (10_000_000 if i > 15 else 0)
        if i == 15:
            events += [cpu_event("entire_frame_compile", at, 6_500_000),
                       cpu_event("async_compile.wait (dynamo_timed)", at + 10, 6_000_000),
                       cpu_event("entire_backward_compile", at + 6_500_100, 3_499_000)]
            at += 10_000_000
        events += [cpu_event("aten::mm", at, 700),
                   cpu_event("Optimizer.step#SGD.step", at + 800, 100, cat="user_annotation")]
    run = analyze_paths([kineto_trace(tmp_path / "recompile.json", events)],
                        AnalyzeOptions()).runs[0]
    assert run.metrics.shape.compiling == ((15, 9_999_000_000),)
    assert [op.name for op in run.metrics.top_ops] == ["aten::mm"]
    found = next(f for f in run.findings if f.id == "RECOMPILED")
    assert found.title == ("torch.compile compiled again inside 1 of the profiled steps "
                           "(9999.0 ms): it is left out of the per-step figures over the other "
                           "18 steps.")
    assert found.evidence[1].text == "the step windows' median is 1.1 ms: the steady steps"
    data = json.loads(render_json(analyze_paths([tmp_path / "recompile.json"], AnalyzeOptions())))
    assert data["runs"][0]["metrics"]["step_shape"]["compiling"] == [
        {"step": 15, "ms": 9999.0, "left_out": True}]


def _recompiling_steps(path: Path, steps: int, recompiling: int) -> Path:
    """``steps`` ProfilerSteps of 1 ms on the CPU (0.7 ms of aten::mm each), step
    ``recompiling`` compiling for 200 ms more (Dynamo's entire_frame_compile)."""
    events, at = [], 1_000
    for n in range(steps):
        length = 201_000 if n == recompiling else 1_000
        events.append(cpu_event(f"ProfilerStep#{n}", at, length, cat="user_annotation"))
        if n == recompiling:
            events.append(cpu_event("entire_frame_compile", at + 10, 200_000))
        events.append(cpu_event("aten::mm", at + length - 900, 700))
        at += length
    return kineto_trace(path, events)


def test_a_recompiling_step_is_left_out_of_the_per_step_figures(tmp_path: Path) -> None:
    """Ten ProfilerSteps of 1 ms (0.7 ms of aten::mm) on the CPU, step 5 recompiling for
    200 ms (Dynamo's entire_frame_compile): the mean step read 21.0 ms and the breakdown's
    compute 20.7 ms per step, the compiling counted as the model's work. Step 5 is left out
    now: 9 steps of 1 ms, 0.7 ms of it compute, and the report says which step was left out
    and why."""
    path = _recompiling_steps(tmp_path / "recompile.json", 10, 5)
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    m = run.metrics
    assert m.shape.compiling == ((5, 200_000_000),) and m.shape.compiling_left_out
    assert (m.steps.count, m.steps.mean_ns, m.steps.wall_mean_ns) == (9, 1_000_000, 1_000_000)
    assert [number for number, _ in m.steps.range_by_number] == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert m.breakdown.step_ns == 1_000_000 and m.breakdown.parts_ns["compute"] == 700_000
    assert m.shape.step_window.count == 9  # a ProfilerStep span is a whole step, the last too
    found = next(f for f in run.findings if f.id == "RECOMPILED")
    assert found.title == ("torch.compile compiled again inside 1 of the profiled steps "
                           "(200.0 ms): it is left out of the per-step figures over the other "
                           "9 steps.")
    assert "torch.compile recompiling | 200.0 ms in 1 step (left out of the per-step figures)" \
        in render_markdown(analyze_paths([path], AnalyzeOptions()))


def _drawn_steps(path: Path) -> tuple[int, list[tuple[str, str, int, int]]]:
    """Where the run's timeline starts (ns) and the steps it draws, as (category, label, start,
    end) in time order (neighbouring steps of one category merged: ``2 × step 2``)."""
    timeline = analyze_paths([path], AnalyzeOptions()).runs[0].timeline
    return timeline.origin_ns, [
        (s.category, s.label, s.start_ns, s.end_ns)
        for s in sorted(timeline.segments, key=lambda s: s.start_ns)
        if s.category in ("step", "left_out_step")]


def test_the_timeline_draws_steps_that_follow_one_another_around_the_median(
        tmp_path: Path) -> None:
    """Ten steps of 1 ms, step 5 recompiling for 200 ms: the timeline's three typical steps
    were the kept windows 4, 6 and 7, so its span crossed step 5 and drew it, 200 ms of
    compiling, as an ordinary training step among them. It draws steps 2, 3 and 4 now: the
    nearest three that follow one another."""
    path = _recompiling_steps(tmp_path / "recompile.json", 10, 5)
    assert _drawn_steps(path) == (3_000_000, [("step", "3 × step 2", 0, 3_000_000)])


def test_the_timeline_marks_a_step_left_out_that_it_must_draw(tmp_path: Path) -> None:
    """Four steps, step 1 recompiling: the three kept steps (0, 2, 3) all show, and step 1
    between them with them; it read "step 1", a training step like the others. It is drawn as
    a step left out now, named with why, and the chart's legend says so."""
    from profreport.reports.render.charts import timeline_figure

    path = _recompiling_steps(tmp_path / "recompile.json", 4, 1)
    assert _drawn_steps(path) == (1_000_000, [
        ("step", "step 0", 0, 1_000_000),
        ("left_out_step", "step 1 (left out: torch.compile compiling again)", 1_000_000,
         202_000_000),
        ("step", "2 × step 2", 202_000_000, 204_000_000)])
    figure = timeline_figure(analyze_paths([path], AnalyzeOptions()).runs[0].timeline)
    assert "Step left out of the per-step figures" in {trace.name for trace in figure.data}


def test_a_time_in_a_step_left_out_names_that_step_and_why(tmp_path: Path) -> None:
    """A start-up step 0 (20.5 ms, context creation) before five steady steps of 1.15 ms, step 3
    recompiling (Dynamo's entire_frame_compile): both are left out of the windows, and a time
    inside either (a GPU idle gap's start, say) read "outside steps" and "between steps". It is
    inside that step, left out, and says why."""
    from profreport.parsers import kineto
    from profreport.reports.analysis.steps import step_windows, where_in_steps

    steady = [(100, 1000, [])] * 5
    path = write_trace(tmp_path / "run.pt.trace.json", [(20000, 400, SETUP)] + steady)
    document = json.loads(path.read_text())  # step 3 runs from 23,830 to 24,980 µs
    document["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "entire_frame_compile",
                                    "pid": 1, "tid": 1, "ts": 24_000, "dur": 300, "args": {}})
    path.write_text(json.dumps(document))
    windows = step_windows(kineto.parse(path))
    assert windows.numbers.tolist() == [1, 2, 4, 5]
    assert where_in_steps(np.array([5_000_000, 24_100_000, 23_000_000]),
                          np.array([5_000_001, 24_100_001, 23_000_001]), windows) == [
        "inside step 0 (left out: start-up)",
        "inside step 3 (left out: torch.compile compiling again)", "inside step 2"]


def test_periodic_stalls_are_named_apart_from_the_steady_wait(tmp_path: Path) -> None:
    """Every 4th step waits 30 ms for data, the others 0.2 ms, over 1 ms of compute: the mean
    calls it loader-bound, and the spread says it is 4 stalls of 30 ms every 4th step (where
    they lie) over a steady 0.2 ms wait."""
    steps = [(30000 if n % 4 == 3 else 200, 1000, []) for n in range(17)]
    path = write_trace(tmp_path / "stalls.pt.trace.json", steps)
    report = analyze_paths([path], AnalyzeOptions())
    run = report.runs[0]
    wait = run.metrics.shape.dataloader_wait
    assert wait.count == 17 and wait.outlier_count == 4 and wait.period == 4
    assert [o.number for o in sorted(wait.outliers, key=lambda o: o.number)] == [3, 7, 11, 15]
    # The DataLoader span covers the wait but its first and last µs.
    assert wait.median_ns == 198_000 and wait.steady_ns == 198_000
    assert wait.outlier_range_ns == (29_998_000, 29_998_000)
    stalls = next(f for f in run.findings if f.id == "DATA_STALLS")
    assert "every 4th step stalls for 30.0 ms," in stalls.title
    assert "step 3 at" in stalls.evidence[0].text and stalls.evidence[0].at is not None
    loader = next(f for f in run.findings if f.id == "LOADER_BOUND")
    assert "of that in stalls" in loader.title and "each step" not in loader.title


def test_a_group_of_stalls_is_not_split_by_the_stall_limit(tmp_path: Path) -> None:
    """The waits of a real CPU run whose 2 DataLoader workers cannot keep up (torch.profiler,
    ProfilerStep#3-12; each worker loads a batch in 160 ms): every 2nd step waits 133-140 ms,
    the others 29-35 ms. The limit, 4 x the 35 ms median, took the 140.3 ms wait alone for a
    stall ('1 of 9 steps stall ... 34.6 ms (median) over the other 8 steps', three of which
    waited 134-138 ms); the waits within a factor of two of it are that stall recurring. The
    last step's 133.3 ms stall counts too (a ProfilerStep span holds its own fetch), and with
    5 of 10 steps stalling the limit is 4 x the lower middle wait, 35 ms: the median of the
    even count, 84.2 ms, lies between the groups and hid every stall."""
    waits = [30_200, 136_400, 29_300, 140_300, 35_000, 134_300, 34_200, 137_800, 29_900, 133_300]
    path = write_trace(tmp_path / "workers.pt.trace.json", [(w, 700, []) for w in waits])
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    wait = run.metrics.shape.dataloader_wait
    assert (wait.count, wait.outlier_count, wait.period) == (10, 5, 2)
    assert sorted(o.number for o in wait.outliers) == [1, 3, 5, 7, 9]
    assert wait.outlier_range_ns == (133_298_000, 140_298_000)
    stalls = next(f for f in run.findings if f.id == "DATA_STALLS")
    assert "every 2nd step stalls for 133.3 ms–140.3 ms" in stalls.title
    assert stalls.recommendation.startswith(
        "A stall every 2nd step is what a DataLoader whose workers cannot keep up does")


def test_sc22_stalls_every_second_step(corpus: Path, nsys_available: str) -> None:
    """The sc22 1-GPU baseline: its 88% DataLoader share is 28 stalls of 1.24-1.61 s, one every
    2nd step (the longest before step 15, 9.90 s into the capture), over a 0.09 ms median wait at
    the other 30 step boundaries: said in LOADER_BOUND and DATA_STALLS, not "88% of each step"."""
    run = analyze_paths([corpus / "nsys" / "sc22_1gpu_baseline.nsys-rep"],
                        AnalyzeOptions()).runs[0]
    wait = run.metrics.shape.dataloader_wait
    assert (wait.count, wait.outlier_count, wait.period) == (58, 28, 2)
    assert wait.outlier_range_ns == (1_237_849_608, 1_606_961_826)
    assert wait.steady_ns == 89_021 and wait.outliers[0].number == 15
    assert wait.outliers[0].span[0] == 9_902_663_292  # 9.90 s into the capture
    loader = next(f for f in run.findings if f.id == "LOADER_BOUND")
    assert "each step" not in loader.title and "in stalls" in loader.title
    assert any("every 2nd step" in e.text for e in loader.evidence)
    stalls = next(f for f in run.findings if f.id == "DATA_STALLS")
    assert stalls.title.startswith("The DataLoader wait is stalls, not a steady wait: every 2nd "
                                   "step stalls")


def test_a_first_step_within_a_spread_loop_is_not_start_up(tmp_path: Path) -> None:
    """A first step of 2.6 ms, 2.3x the median 1.1 ms step, in a loop where 4 of 12 later steps
    take 5.1 ms (a real --script run on a shared CPU: step 1 of 1.1 ms called start-up with 6
    steps over 2.3 ms): it is within the loop's spread, no start-up, every step is measured."""
    steps = [(100, 1000, [])] * 8 + [(100, 5000, [])] * 4
    path = write_trace(tmp_path / "run.pt.trace.json", [(100, 2500, [])] + steps)
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    assert run.metrics.shape.warmup is None
    assert run.metrics.steps.count == 13
    assert "STARTUP" not in {f.id for f in run.findings}


def test_kineto2021_first_iteration_is_named_as_start_up(corpus: Path) -> None:
    """The January 2021 trace records the first iteration before its first optimizer step
    (4.49 s, 66 cudaMalloc calls while the allocator grows): STARTUP says so, and the five steps
    found between optimizer steps stay the per-step figures."""
    path = corpus / "wild" / "kineto2021_autograd_api_resnet50_nw0_worker0.pt.trace.json.gz"
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    warmup = run.metrics.shape.warmup
    assert warmup.number is None and warmup.setup_calls == {"cudaMalloc": 66}
    assert warmup.duration_ns == 4_489_840_000
    assert run.metrics.steps.count == 5
    found = next(f for f in run.findings if f.id == "STARTUP")
    assert found.severity == "info" and "before the first step" in found.evidence[0].text


def test_stalls_with_the_gpu_at_work_are_another_task(tmp_path: Path) -> None:
    """The same stalls, but with the GPU busy through 80% of each (an evaluation pass on the
    GPU): the stalls are named another task between the steps, not a wait for data; without
    that work the GPU waits with the loop (0% busy during the stalls)."""
    steps = [(30000 if n % 4 == 3 else 200, 1000, []) for n in range(17)]
    idle = analyze_paths([write_trace(tmp_path / "idle.pt.trace.json", steps)],
                         AnalyzeOptions()).runs[0]
    assert idle.metrics.shape.dataloader_wait.outlier_gpu_busy == 0.0
    stalls = next(f for f in idle.findings if f.id == "DATA_STALLS")
    assert stalls.evidence[-1].text == ("during the stalls the GPU is busy 0.0% of the time: it "
                                        "waits with the training loop")
    busy = analyze_paths([write_trace(tmp_path / "busy.pt.trace.json", steps, True)],
                         AnalyzeOptions()).runs[0]
    # The eval kernel's 24,000 µs (80% of 30,000) inside the DataLoader span of 29,998 µs.
    assert busy.metrics.shape.dataloader_wait.outlier_gpu_busy == pytest.approx(24_000 / 29_998,
                                                                                rel=1e-9)
    stalls = next(f for f in busy.findings if f.id == "DATA_STALLS")
    assert stalls.recommendation.startswith("The GPU works through the stalls, so they are "
                                            "another task between the training steps")


def cpu_steps(path: Path, name: str, steps: int, range_us: int, period_us: int,
              op_us: int) -> Path:
    """A CPU-only trace of ``steps`` step ranges (``name`` formatted with the step number) of
    ``range_us``, one every ``period_us``, each holding one aten::mm of ``op_us``."""
    starts = [1000 + n * period_us for n in range(steps)]
    return kineto_trace(path, [event for n, ts in enumerate(starts) for event in (
        cpu_event(name.format(n), ts, range_us, cat="user_annotation"),
        cpu_event("aten::mm", ts + 10, op_us))])


def test_the_sliver_between_profiler_steps_is_no_dataloader_wait(tmp_path: Path) -> None:
    """prof.step() closes ProfilerStep#N and opens #N+1 back to back: the loop fetches its next
    batch inside a step, and the 20 µs between two spans (the profiler's own work) is no
    DataLoader wait. A loop without any DataLoader, four steps of 1 ms of work: no wait."""
    path = cpu_steps(tmp_path / "no_loader.json", "ProfilerStep#{}", 4, 1000, 1020, 950)
    metrics = analyze_paths([path], AnalyzeOptions()).runs[0].metrics
    assert metrics.steps is not None and metrics.steps.wall_mean_ns == 1_020_000
    assert metrics.dataloader_fraction == 0.0
    assert metrics.shape is not None and metrics.shape.dataloader_wait is None
    assert metrics.breakdown is not None and metrics.breakdown.parts_ns["dataloader"] == 0


def test_one_step_gives_a_verdict_of_low_confidence_and_says_why(tmp_path: Path) -> None:
    """One ProfilerStep of CPU work (as schedule(active=1) around a first step gives): the
    step may hold one-off work that a CPU profile records no set-up call for, so the verdict's
    confidence is low whatever its margin, and a note says why."""
    path = cpu_steps(tmp_path / "one.json", "ProfilerStep#{}", 1, 10_000, 10_000, 9000)
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    # aten::mm's 9 ms of the 10 ms step: 90%, 30 points past COMPUTE_BOUND_SHARE (60%).
    assert (run.verdict, run.verdict_reason) == (
        "compute-bound", "the model's CPU operators take 90% of step time")
    assert run.verdict_margin == pytest.approx(0.30, rel=1e-9)
    assert run.verdict_confidence == "low"
    assert run.notes == [ONE_STEP_NOTE]


#: The note of a profile of one step.
ONE_STEP_NOTE = ("only 1 step measured: one step cannot show the steady state, neither whether "
                 "it is a typical step or holds one-off work (a first step builds optimizer "
                 "state, picks its kernels, grows the allocator's pool) nor how the steps vary "
                 "(no p50, p90 or spread is given), so the verdict's confidence is low at most; "
                 "profile several steps after the first")


def test_one_step_claims_no_spread(tmp_path: Path) -> None:
    """A trace cut to one ProfilerStep (0.4 ms fetch, 3 ms kernel, no set-up call): its p50,
    p90, min and max, the step window's and the DataLoader wait's median and p90 were all that
    one step ("16.0 ms / 16.0 ms" on the MI300X trace cut to step 16): one value is no spread.
    None is given, and the note says one step cannot show the steady state."""
    path = write_trace(tmp_path / "one.pt.trace.json", [(400, 3000, [])])
    report = analyze_paths([path], AnalyzeOptions())
    run = report.runs[0]
    steps, shape = run.metrics.steps, run.metrics.shape
    assert steps.count == 1 and steps.mean_ns == 3_450_000
    assert (steps.p50_ns, steps.p90_ns, steps.min_ns, steps.max_ns) == (None, None, None, None)
    assert shape.warmup is None and shape.step_window is None and shape.dataloader_wait is None
    assert run.notes[-1] == ONE_STEP_NOTE
    text = render_markdown(report)
    assert "p90" not in text.replace(ONE_STEP_NOTE, "")
    data = json.loads(render_json(report))["runs"][0]["metrics"]
    assert data["step_time_ms"] == {"mean": 3.45, "p50": None, "p90": None, "min": None,
                                    "max": None}
    assert data["step_shape"]["step_window_ms"] is None


def test_the_time_between_a_users_step_ranges_is_no_fetch_torch_profiler_did_not_see(
        tmp_path: Path) -> None:
    """record_function(f"step {i}") ranges in a torch.profiler trace: the profiler records the
    DataLoader iterator's spans on its own, so the 200 µs between two ranges of a loop that
    has none is no DataLoader wait (it was counted as one, as the time between NVTX 'step N'
    ranges is)."""
    path = cpu_steps(tmp_path / "user_steps.json", "step {}", 4, 800, 1000, 780)
    metrics = analyze_paths([path], AnalyzeOptions()).runs[0].metrics
    assert metrics.breakdown is not None and metrics.breakdown.parts_ns["dataloader"] == 0
    assert metrics.dataloader_fraction == 0.0


def test_a_users_step_ranges_wait_for_data_only_in_the_dataloader_spans(tmp_path: Path) -> None:
    """A real shape (torch 2.13, record_function("step {i}") around the body, a thread joined
    after it, a DataLoader with 2 workers): 6 steps of 1 ms, each followed by a 1 ms
    _MultiProcessingDataLoaderIter.__next__ span and 50 ms of a join the profiler records
    nothing of. The wait is the DataLoader spans, 1 ms per step; it read 98% of the step
    waiting for data, loader-bound."""
    events = []
    for n in range(6):
        ts = 1000 + n * 52_000
        events += [cpu_event(f"step {n}", ts, 1000, cat="user_annotation"),
                   cpu_event("aten::mm", ts + 10, 950),
                   cpu_event(LOADER, ts + 51_000, 1000, cat="user_annotation")]
    run = analyze_paths([kineto_trace(tmp_path / "joined.json", events)],
                        AnalyzeOptions()).runs[0]
    assert run.metrics.breakdown is not None
    assert run.metrics.breakdown.parts_ns["dataloader"] == 5 * 1_000_000 // 6
    # Steps from 1 ms to 5 x 52 + 1 + 1 ms: 261 ms over 6 steps, 43.5 ms each.
    assert run.metrics.breakdown.step_ns == 43_500_000
    # The 5 DataLoader spans of 1 ms between the steps, of those 261 ms: 5 / 261.
    assert run.metrics.dataloader_fraction == pytest.approx(5 / 261, rel=1e-9)
    assert run.verdict == "unknown" and "LOADER_BOUND" not in {f.id for f in run.findings}


def test_steps_cut_at_the_optimizers_step_ends_count_their_last_step_whole(
        tmp_path: Path) -> None:
    """No ProfilerStep span (the legacy torch.autograd.profiler.profile API): the steps run
    from one optimizer step's end to the next, so the last one is a whole iteration too. 5
    optimizer steps make 4 steps of 1, 1, 1 and 5 ms: wall time per step is 2 ms and 4
    windows are measured (it read '0.9 ms start to next start' beside a 2.3 ms mean step on
    the real trace, the last step's 6.7 ms left out)."""
    events, end = [], 1000
    for gap in (0, 1000, 1000, 1000, 5000):
        end += gap
        events += [cpu_event("aten::mm", end - 500, 300),
                   cpu_event("Optimizer.step#SGD.step", end - 100, 100, cat="user_annotation")]
    metrics = analyze_paths([kineto_trace(tmp_path / "legacy.json", events)],
                            AnalyzeOptions()).runs[0].metrics
    assert metrics.steps is not None and metrics.steps.count == 4
    assert metrics.steps.mean_ns == metrics.steps.wall_mean_ns == 2_000_000
    assert metrics.shape is not None and metrics.shape.step_window.count == 4
    assert metrics.shape.step_window.max_ns == 5_000_000


def test_steps_found_by_repetition_keep_the_counter_their_names_carry(tmp_path: Path) -> None:
    """An inference loop annotated record_function(f"batch {i}") from 0 (real torch 2.13,
    no_grad): its first pass, 'batch 0', is start-up and the report says 'Step 0', the range
    the trace shows (it said 'Step 1', counting the passes from 1)."""
    events = []
    for n, (at, length) in enumerate([(0, 3600), (3700, 200), (4000, 200), (4300, 200),
                                      (4600, 200), (4900, 200)]):
        events += [cpu_event(f"batch {n}", 1000 + at, length, cat="user_annotation"),
                   cpu_event("aten::mm", 1000 + at + 5, length - 10)]
    run = analyze_paths([kineto_trace(tmp_path / "batches.json", events)],
                        AnalyzeOptions()).runs[0]
    assert run.metrics.shape is not None and run.metrics.shape.warmup is not None
    assert run.metrics.shape.warmup.number == 0
    assert any(f.title == "Step 0 is start-up, left out of the per-step figures."
               for f in run.findings)


def nsys_beside_kineto(folder: Path, nsys_waits: list[int],  # type: ignore[no-untyped-def]
                       recompiling: int | None = None):
    """The run of ``folder`` holding an NVTX-only nsys export, one 'step N' range of 1 ms after
    a 'dataloader' range of each of ``nsys_waits`` (ns), and a CPU Kineto trace of 8
    ProfilerSteps of 5 ms, each waiting 3 ms in a DataLoader span before 1.9 ms of aten::mm;
    step ``recompiling`` holds 80 µs of Dynamo's entire_frame_compile after it."""
    ranges, at = [], 0
    for n, wait in enumerate(nsys_waits):
        ranges += [(at, at + wait, "dataloader"), (at + wait, at + wait + 1_000_000, f"step {n}")]
        at += wait + 1_000_000
    write_nsys_export(folder / "nsys.sqlite", [], ranges)
    events, ts = [], 1000
    for n in range(8):
        events += [cpu_event(f"ProfilerStep#{n}", ts, 5000, cat="user_annotation"),
                   cpu_event(LOADER, ts + 1, 3000, cat="user_annotation"),
                   cpu_event("aten::mm", ts + 3010, 1900)]
        if n == recompiling:
            events.append(cpu_event("entire_frame_compile", ts + 4915, 80))
        ts += 5000
    kineto_trace(folder / "cpu.pt.trace.json", events)
    return analyze_paths([folder], AnalyzeOptions()).runs[0]


def test_stalls_of_one_profiler_are_no_share_of_anothers_wait(tmp_path: Path) -> None:
    """One CPU-only run profiled twice: nsys (NVTX ranges only) sees every 4th of 17 steps
    stall 30 ms for data, torch.profiler a steady 3 ms wait of 5 ms steps. The DataLoader share
    comes from torch.profiler (its operators attribute the step) and the stalls from nsys (its
    steps): LOADER_BOUND's title gives torch.profiler's share alone, never 'N% of that in
    stalls' of nsys's wait."""
    run = nsys_beside_kineto(tmp_path, [30_000_000 if n % 4 == 3 else 200_000
                                        for n in range(17)])
    assert run.metrics.shape.origin == "nsys" and run.metrics.dataloader_origin == "kineto"
    assert run.metrics.shape.dataloader_wait.outlier_count == 4
    loader = next(f for f in run.findings if f.id == "LOADER_BOUND")
    assert loader.title == "The training loop spends 60% of each step waiting for data."


def test_trace_profilers_that_disagree_are_told_apart_by_their_steps(tmp_path: Path) -> None:
    """nsys times 40 steps waiting 0.1 ms each, torch.profiler 8 steps waiting 3 ms of 5 ms:
    they disagree, and no line_profiler is there to blame; the fix names the steps each timed
    and trusts the one over more steps."""
    run = nsys_beside_kineto(tmp_path, [100_000] * 40)
    finding = next(f for f in run.findings if f.id == "SOURCES_DISAGREE")
    assert "line_profiler" not in finding.recommendation
    assert finding.recommendation.startswith(
        "The trace profilers measured different windows (Nsight Systems 40 steps of 1.0 ms; "
        "torch.profiler 8 steps of 5.0 ms): ")
    assert "take the figure of Nsight Systems, over more steps" in finding.recommendation


def test_the_agreement_says_which_profiler_left_recompiling_steps_out(tmp_path: Path) -> None:
    """torch.profiler's step 5 recompiles (Dynamo's entire_frame_compile), so its figures leave
    it out; nsys records no compiling and leaves none out, and each profiler traced its own run
    of the training, so no step of one is matched to the other's: the agreement finding says
    the two compare different steps (it said nothing of it)."""
    run = nsys_beside_kineto(tmp_path, [3_000_000] * 10, recompiling=5)
    assert run.metrics.steps_by_origin[1].recompiling_left_out == (5,)
    finding = next(f for f in run.findings if f.id == "SOURCES_AGREE")
    assert [e.text for e in finding.evidence if e.origin == "kineto"][-1] == (
        "torch.profiler's step figures leave out 1 step in which torch.compile compiled again "
        "(step 5); Nsight Systems's leave out none, so they hold any recompile of their run")


def test_a_recompile_only_torch_profiler_saw_is_named_when_nsys_gives_the_figures(
        tmp_path: Path) -> None:
    """The run's step figures come from nsys, which records no compiling, so RECOMPILED (read
    from the run's step shape) said nothing of torch.profiler's recompiling step 5: it names
    that step now, and that the run's figures may hold such a recompile."""
    run = nsys_beside_kineto(tmp_path, [3_000_000] * 10, recompiling=5)
    assert run.metrics.steps.origin == "nsys"
    found = next(f for f in run.findings if f.id == "RECOMPILED")
    assert found.title == ("torch.compile compiled again inside 1 of torch.profiler's profiled "
                           "steps: the run's per-step figures, Nsight Systems's, record no "
                           "compiling and may hold it.")
    assert found.evidence[0].text.endswith("in step 5, left out of torch.profiler's per-step "
                                           "figures")
    (tmp_path / "plain").mkdir()
    assert not any(f.id == "RECOMPILED" for f in nsys_beside_kineto(
        tmp_path / "plain", [3_000_000] * 10).findings)


def test_stall_advice_knows_the_workers_persist(tmp_path: Path) -> None:
    """Two isolated 30 ms stalls in 17 steps: the fix blames an epoch start's worker restart
    only where persistent_workers is not already set."""
    from profreport.parsers import parse_file
    from profreport.reports.analysis.findings import RunContext, find_all
    from profreport.reports.analysis.metrics import compute_run_metrics

    steps = [(30000 if n in (4, 11) else 200, 1000, []) for n in range(17)]
    metrics = compute_run_metrics([parse_file(write_trace(tmp_path / "t.pt.trace.json",
                                                          steps))])

    def fix(**knobs: object) -> str:
        found = find_all(metrics, RunContext(knobs=knobs))
        return next(f for f in found if f.id == "DATA_STALLS").recommendation

    assert fix().startswith("Isolated stalls are one-off events: an epoch start (the workers "
                            "restart unless persistent_workers=True), evaluation")
    assert fix(persistent_workers=True).startswith(
        "Isolated stalls are one-off events: an epoch start (persistent_workers=True is set, so "
        "not the workers restarting), evaluation")


def test_start_up_is_judged_against_the_last_profiler_step_too(tmp_path: Path) -> None:
    """ProfilerSteps of 25, 10, 10 and 30 ms: each span holds its whole iteration, the last
    one too (3550f46), but start-up was judged against the later steps less the last, 10 and
    10 ms, and the 25 ms first step was dropped as start-up. Against 10, 10 and 30 ms it lies
    within the loop's spread: every step counts."""
    steps = [(100, length, []) for length in (25_000, 10_000, 10_000, 30_000)]
    run = analyze_paths([write_trace(tmp_path / "t.pt.trace.json", steps)],
                        AnalyzeOptions()).runs[0]
    assert run.metrics.shape.warmup is None
    assert run.metrics.steps.count == 4


def test_stalls_in_consecutive_steps_have_no_period(tmp_path: Path) -> None:
    """Steps 5-8 of 10 wait 6 ms, the others 1.5 ms (the quick start's baseline on a 2-CPU
    machine, its only worker slowed for a while): the title read 'every 1st step stalls' and
    the advice 'with 1 workers each batch arrives late once per round'. Stalls one step apart
    are a stretch of slow steps, not a recurrence: no period is claimed."""
    steps = [(6000 if n in (5, 6, 7, 8) else 1500, 50_000, []) for n in range(10)]
    run = analyze_paths([write_trace(tmp_path / "t.pt.trace.json", steps)],
                        AnalyzeOptions()).runs[0]
    wait = run.metrics.shape.dataloader_wait
    assert (wait.outlier_count, wait.period) == (4, None)
    titles = " ".join(f.title for f in run.findings)
    assert "every 1st" not in titles and "1 workers" not in titles


def test_frequent_stalls_without_a_period_are_workers_falling_behind(tmp_path: Path) -> None:
    """6 of 17 steps stall 30 ms at no fixed spacing: not 'isolated one-off events'. With
    DataLoader workers they are the workers falling behind; with num_workers=0 the training
    process loading some batches slower; when the run does not say, only what is measured."""
    import dataclasses

    from profreport.reports.analysis.findings import RunContext, find_all
    from profreport.reports.analysis.results import RunMetrics

    steps = [(30000 if n in (1, 2, 5, 9, 10, 14) else 200, 1000, []) for n in range(17)]
    run = analyze_paths([write_trace(tmp_path / "t.pt.trace.json", steps)],
                        AnalyzeOptions()).runs[0]
    wait = run.metrics.shape.dataloader_wait
    assert (wait.outlier_count, wait.count, wait.period) == (6, 17, None)
    assert run.metrics.loader_in_process is False  # worker-process DataLoader spans

    def advice(metrics: RunMetrics = run.metrics, **knobs: object) -> str:
        found = find_all(metrics, RunContext(knobs=knobs))
        return next(f for f in found if f.id == "DATA_STALLS").recommendation

    assert advice() == advice(num_workers=2)
    assert advice(num_workers=2).startswith(
        "Stalls in 35% of the steps with no period are the workers falling behind: a batch "
        "comes late whenever the worker making it has not finished")
    assert advice(num_workers=0).startswith(
        "Stalls in 35% of the steps with no period, with no DataLoader workers (num_workers=0): "
        "the training process loads some batches slower than others")
    unknown = advice(dataclasses.replace(run.metrics, loader_in_process=None))
    assert unknown.startswith("Stalls in 35% of the steps with no period: some batches arrive "
                              "later than others")
    assert "the profile does not say whether the DataLoader has workers" in unknown


def test_the_timeline_names_the_profiler_it_draws(tmp_path: Path) -> None:
    """The timeline draws the steps of the profiler that times them (nsys here) while the
    breakdown beside it is torch.profiler's: its title names which."""
    from profreport.reports.render.charts import timeline_figure

    run = nsys_beside_kineto(tmp_path, [3_000_000] * 10)
    assert run.timeline.source == "nsys" and run.metrics.breakdown.origin == "kineto"
    title = timeline_figure(run.timeline).layout.title.text
    assert title.startswith("Timeline of a few steps (Nsight Systems; ms from the start")


def test_verdict_follows_the_trace_profiler_over_more_steps_when_they_disagree(
        tmp_path: Path) -> None:
    """nsys times 40 steps waiting 0.1 ms of 1.1 ms, torch.profiler 8 steps waiting 3 ms of
    5 ms: they disagree on the DataLoader wait (9.1% against 60%), so the breakdown, the
    DataLoader share and the verdict take nsys's figure, over more steps, as SOURCES_DISAGREE's
    advice says (they took torch.profiler's, whose operators attribute the step better: a
    loader-bound verdict the advice below it told the reader not to trust)."""
    run = nsys_beside_kineto(tmp_path, [100_000] * 40)
    metrics = run.metrics
    assert metrics.dataloader_origin == "nsys" and metrics.breakdown.origin == "nsys"
    assert metrics.dataloader_fraction == metrics.dataloader_fraction_by_origin["nsys"]
    assert round(metrics.dataloader_fraction, 2) == round(0.1 / 1.1, 2)
    assert run.verdict != "loader-bound"
    finding = next(f for f in run.findings if f.id == "SOURCES_DISAGREE")
    assert "The verdict and the breakdown take the figure of Nsight Systems, over more steps" \
        in finding.recommendation
    (tmp_path / "agree").mkdir()
    agreeing = nsys_beside_kineto(tmp_path / "agree", [3_000_000] * 40)
    assert agreeing.metrics.dataloader_origin == "kineto" and agreeing.verdict == "loader-bound"


def test_periodic_stalls_name_workers_only_where_there_are_some(tmp_path: Path) -> None:
    """A stall every 4th step: with 4 workers, a round of workers that cannot keep up (or a
    periodic task); with num_workers=0 there is no round of workers to blame."""
    from profreport.reports.analysis.findings import RunContext, find_all

    steps = [(30000 if n % 4 == 3 else 200, 1000, []) for n in range(21)]
    run = analyze_paths([write_trace(tmp_path / "t.pt.trace.json", steps)],
                        AnalyzeOptions()).runs[0]
    assert run.metrics.shape.dataloader_wait.period == 4

    def advice(**knobs: object) -> str:
        found = find_all(run.metrics, RunContext(knobs=knobs))
        return next(f for f in found if f.id == "DATA_STALLS").recommendation

    assert advice(num_workers=4).startswith(
        "A stall every 4th step is what a DataLoader whose workers cannot keep up does")
    assert advice(num_workers=0).startswith(
        "With no DataLoader workers (num_workers=0), a stall every 4th step is a periodic task")


def test_time_between_repeated_ranges_is_no_dataloader_wait(tmp_path: Path) -> None:
    """An NVTX-only capture of an inference loop over a list: 20 ranges 'batch i' of 2 ms, 0.2
    ms apart but 5 ms after every 5th. No name marks them as steps and no DataLoader range is
    there, so the time between them is no DataLoader wait (it read 31% of the step waiting for
    data, with 'stalls ... the workers falling behind' of a loop that has no DataLoader)."""
    run = _batch_ranges(tmp_path)
    assert run.metrics.steps.count >= 19 and not run.metrics.dataloader_fraction
    assert not {"DATA_STALLS", "LOADER_BOUND"} & {f.id for f in run.findings}


def test_a_capture_without_dataloader_ranges_does_not_know_the_wait(tmp_path: Path) -> None:
    """The same capture records no DataLoader range and no fetch between its ranges: nsys
    records only the ranges the program opened, so the DataLoader share is unknown (null), and
    so is the breakdown's DataLoader part (they read 0%, 'DataLoader wait 0 ms')."""
    run = _batch_ranges(tmp_path)
    assert run.metrics.dataloader_fraction is None and run.metrics.dataloader_origin is None
    assert run.metrics.dataloader_fraction_by_origin == {}
    assert "dataloader" not in run.metrics.breakdown.measured


def test_an_unknown_verdict_says_the_time_lies_between_the_step_ranges(tmp_path: Path) -> None:
    """A real CPU capture (nsys --trace=osrt,nvtx) of a loop opening 'epoch e batch i' ranges
    inside 'for i, (x, y) in enumerate(dl):': each range 1.5 ms, one every 20.6 ms. The verdict
    said only that '100% of the step is time Nsight Systems cannot attribute'; 93% of it lies
    between the ranges, where that loop fetches its batches, and the verdict now says so. A
    capture whose ranges cover most of their steps gets no such clause."""
    ranges = [(20_600_000 * n, 20_600_000 * n + 1_500_000, f"epoch {n // 16} batch {n % 16}")
              for n in range(32)]
    write_nsys_export(tmp_path / "nsys.sqlite", [], ranges)
    run = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    assert run.verdict == "unknown" and run.verdict_reason == (
        "100% of the step is time Nsight Systems cannot attribute (no GPU events, CPU operators "
        "or source lines); the step ranges cover 7.3% of the time from one's start to the next "
        "(1.5 ms of 20.6 ms): 93% lies between them, outside every range the loop opened (a loop "
        "that opens its ranges after 'for x in loader:' fetches its batches there)")
    (tmp_path / "dense").mkdir()
    assert "between them" not in _batch_ranges(tmp_path / "dense").verdict_reason


def _batch_ranges(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The run of an NVTX-only capture of 20 ranges 'batch i' of 2 ms, 0.2 ms apart but 5 ms
    after every 5th."""
    ranges, at = [], 0
    for n in range(20):
        ranges.append((at, at + 2_000_000, f"batch {n}"))
        at += 2_000_000 + (5_000_000 if n % 5 == 4 else 200_000)
    write_nsys_export(tmp_path / "nsys.sqlite", [], ranges)
    return analyze_paths([tmp_path], AnalyzeOptions()).runs[0]


def test_the_last_profiler_step_counts_in_the_per_step_figures(tmp_path: Path) -> None:
    """ProfilerStep spans hold their own fetch (``prof.step()`` closes one and opens the next),
    so the last one is as whole as the others. A real CPU trace (torch 2.13, num_workers=2,
    ProfilerStep#2-8 after a start-up step) read 'the wait per step has median 8.7 ms ... over
    6 steps' beside 7 steps measured: its last step's 25.2 ms wait was left out of the spread
    (median 14.8 ms over the 7)."""
    waits = [2_470, 2_710, 1_990, 14_750, 19_580, 15_320, 25_200]
    path = write_trace(tmp_path / "workers.pt.trace.json", [(w, 5_000, []) for w in waits])
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    shape = run.metrics.shape
    assert run.metrics.steps.count == shape.dataloader_wait.count == 7
    assert shape.step_window.count == 7
    assert shape.dataloader_wait.median_ns == 14_748_000
    assert shape.step_window.max_ns == 25_200_000 + 5_000_000 + 50_000


def test_an_idle_gap_across_a_step_boundary_says_so(tmp_path: Path) -> None:
    """Step 2 waits 3 ms for data before its kernel: the GPU idles from the end of step 1's
    kernel (35 µs before step 1 ends) into step 2. That gap spans the boundary; it read
    "inside step 1". A gap that ends in the step it began in is still inside it."""
    from profreport.parsers import kineto
    from profreport.reports.analysis.steps import step_windows, where_in_steps

    steps = [(100, 1000, []), (100, 1000, []), (3000, 1000, []), (100, 1000, [])]
    path = write_trace(tmp_path / "run.pt.trace.json", steps)
    gaps = analyze_paths([path], AnalyzeOptions()).runs[0].metrics.gpu.largest_gaps
    assert (gaps[0].duration_ns, gaps[0].where) == (3_050_000, "from step 1 into step 2")
    windows = step_windows(kineto.parse(path))
    start = int(windows.range_starts[1])
    assert where_in_steps(np.array([start, start]), np.array([start + 10, start + 10**9]),
                          windows) == ["inside step 1", "from step 1 past its end"]


def test_two_step_ranges_make_no_stall_of_the_fetch_only_one_of_them_holds(
        tmp_path: Path) -> None:
    """An nsys capture of two 9 ms ``step N`` ranges 2 ms apart: the loop fetched between them
    (2 ms: 10% of the two windows), but the last window is its range alone, kept so that two
    remain, and its fetch after it is not recorded. DATA_STALLS read '1 of 2 steps stall for
    2.0 ms, the other steps wait 0.0 ms (median)'; one window holding a fetch gives no spread
    of the wait, so no stall."""
    ms = 10**6
    path = write_nsys_export(tmp_path / "two.sqlite", [],
                             [(0, 9 * ms, "step 0"), (11 * ms, 20 * ms, "step 1")])
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    assert run.metrics.dataloader_fraction == pytest.approx(0.1)
    assert run.metrics.shape.dataloader_wait is None
    assert "DATA_STALLS" not in [f.id for f in run.findings]
