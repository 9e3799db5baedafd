"""Every vendor and shape torch.profiler writes: hand-built traces of each, and the HTA corpus."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from profreport.commands import _summary_lines
from profreport.executors import ExecutorOptions
from profreport.model import DataLoaderIterators
from profreport.parsers import kineto, kineto_stream
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.results import RunAnalysis
from profreport.reports.render.display import metric_groups
from profreport.reports.render.json import metrics_json, render_json
from profreport.reports.render.markdown import render_markdown

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TRAINING_PID, cpu_event, device_event, kineto_trace  # noqa: E402

# Every test reads its traces both ways: the C scanner and msgspec (conftest.scan_passes).
pytestmark = pytest.mark.usefixtures("scan_passes")


def test_rocm_hex_streams(tmp_path: Path) -> None:
    """ROCm writes ``args.stream`` as a hex string; HIP launches correlate to their kernels."""
    events = [
        cpu_event("ProfilerStep#3", 100, 50, cat="user_annotation"),
        cpu_event("hipLaunchKernel", 110, 5, cat="cuda_runtime", correlation=11),
        cpu_event("hipMemcpyAsync", 120, 5, cat="cuda_runtime", correlation=12),
        device_event("Cijk_Ailk_Bljk_SB_MT64x64x8", 118, 20, device=1, stream="0x1f",
                     correlation=11),
        device_event("Memcpy HtoD", 130, 4, cat="gpu_memcpy", device=1, stream="0x0",
                     correlation=12, bytes=4096),
    ]
    profile = kineto.parse(kineto_trace(tmp_path / "rocm.json", events))
    kernels, memcpy = profile.table("kernels"), profile.table("memcpy")
    assert kernels[["device", "stream", "correlation"]].values.tolist() == [[1, 31, 11]]
    assert memcpy[["stream", "kind", "bytes"]].values.tolist() == [[0, "HtoD", 4096]]
    runtime = profile.table("runtime").set_index("correlation")["name"]
    assert runtime[kernels["correlation"].iloc[0]] == "hipLaunchKernel"
    assert profile.meta.dropped == {}


def test_cuda_graph_launch_correlates_every_kernel(tmp_path: Path) -> None:
    """The kernels of one replayed CUDA graph share the correlation id of its cudaGraphLaunch."""
    events = [cpu_event("ProfilerStep#1", 0, 100, cat="user_annotation"),
              cpu_event("cudaGraphLaunch", 10, 8, cat="cuda_runtime", correlation=77)]
    events += [device_event(f"graph_kernel_{i}", 20 + 10 * i, 5, device=0, stream=7, correlation=77)
               for i in range(3)]
    profile = kineto.parse(kineto_trace(tmp_path / "graph.json", events))
    kernels = profile.table("kernels")
    launches = kernels.merge(profile.table("runtime"), on="correlation")
    assert len(kernels) == 3 and launches["name_y"].eq("cudaGraphLaunch").all()


def test_flow_events_give_missing_correlations(tmp_path: Path) -> None:
    """A device event without ``args.correlation`` takes the id of the ac2g flow ending on it."""
    events = [
        cpu_event("cudaLaunchKernel", 10, 3, cat="cuda_runtime", correlation=42),
        {"ph": "s", "id": 42, "pid": TRAINING_PID, "tid": TRAINING_PID, "ts": 10, "cat": "ac2g",
         "name": "ac2g"},
        device_event("k", 15, 2, device=0, stream=7),
        {"ph": "f", "id": 42, "pid": 0, "tid": 7, "ts": 15, "cat": "ac2g", "name": "ac2g",
         "bp": "e"},
        device_event("unlinked", 30, 2, device=0, stream=7),
    ]
    kernels = kineto.parse(kineto_trace(tmp_path / "flows.json", events)).table("kernels")
    assert kernels.set_index("name")["correlation"].to_dict() == {"k": 42, "unlinked": -1}


def test_nanosecond_timestamps(tmp_path: Path) -> None:
    """Fractional microseconds (ns resolution) give exact integer nanoseconds."""
    events = [cpu_event("ProfilerStep#7", 4458676522690.655, 156.777, cat="user_annotation"),
              device_event("k", 4458676522700.001, 0.999, device=0, stream=7, correlation=1)]
    profile = kineto.parse(kineto_trace(tmp_path / "ns.json", events, displayTimeUnit="ns",
                                        traceName="ns.json",
                                        baseTimeNanoseconds=1711964646000000000))
    step, kernel = profile.table("steps").iloc[0], profile.table("kernels").iloc[0]
    assert (step["start"], step["end"]) == (4458676522690655, 4458676522847432)
    assert (kernel["start"], kernel["end"]) == (4458676522700001, 4458676522701000)
    assert profile.meta.display_time_unit == "ns" and profile.meta.trace_name == "ns.json"
    assert profile.meta.base_time_ns == 1711964646000000000


def test_no_rank_and_no_distributed_info(tmp_path: Path) -> None:
    """Without distributedInfo, or with one lacking a rank, the rank is unknown (None)."""
    events = [cpu_event("ProfilerStep#1", 0, 10, cat="user_annotation")]
    bare = kineto.parse(kineto_trace(tmp_path / "bare.json", events))
    assert bare.rank is None and bare.meta.distributed_info == {}
    assert bare.meta.world_size is None
    norank = kineto.parse(kineto_trace(tmp_path / "norank.json", events,
                                       distributedInfo={"backend": "nccl", "world_size": 4}))
    assert norank.rank is None and norank.meta.world_size == 4
    assert norank.meta.backend == "nccl"


def test_steps_from_optimizer_without_profiler_steps(tmp_path: Path) -> None:
    """No ProfilerStep: iterations run from one optimizer step's end to the next one's."""
    events = []
    for i in range(4):
        start = 1000 * i
        events += [cpu_event("aten::mm", start, 600),
                   cpu_event("Optimizer.step#SGD.step", start + 700, 200)]
    profile = kineto.parse(kineto_trace(tmp_path / "opt.json", events))
    steps = profile.table("steps")
    assert steps["origin"].eq("optimizer").all() and steps["number"].tolist() == [1, 2, 3]
    assert steps["start"].tolist() == [900_000, 1_900_000, 2_900_000]
    assert (steps["end"] - steps["start"]).eq(1_000_000).all()
    assert profile.meta.notes == [  # the report says where its steps came from
        "no ProfilerStep span: the 3 steps run from the end of one optimizer step to the end "
        "of the next (the time before the first one's end is no step's)"]


def test_an_optimizer_step_annotated_twice_is_one_step(tmp_path: Path) -> None:
    """HTA's DDP trace without its ProfilerStep spans: each iteration's optimizer step is
    recorded twice, a user's ``## optimizer ##`` annotation around torch's
    ``Optimizer.step#SGD.step`` (ending 40 us apart). The steps were every end, 7 of them
    alternating 40 us and 960 us (a 0.5 ms mean step); they are the 3 iterations of 1 ms."""
    events = []
    for i in range(4):
        start = 1000 * i
        events += [cpu_event("aten::mm", start, 600),
                   cpu_event("## optimizer ##", start + 700, 200, cat="user_annotation"),
                   cpu_event("Optimizer.step#SGD.step", start + 710, 150,
                             cat="user_annotation"),
                   cpu_event("aten::add_", start + 720, 100)]
    profile = kineto.parse(kineto_trace(tmp_path / "nested.json", events))
    steps = profile.table("steps")
    assert steps["start"].tolist() == [900_000, 1_900_000, 2_900_000]
    assert (steps["end"] - steps["start"]).eq(1_000_000).all()
    assert profile.meta.notes == [
        "no ProfilerStep span: the 3 steps run from the end of one optimizer step to the end "
        "of the next (the time before the first one's end is no step's)"]


def several_optimizers_note(first: str) -> str:
    """The note of 3 steps taken from the first of several optimizers, of class ``first``."""
    return (f"no ProfilerStep span: the 3 steps run from the end of one step of the first "
            f"optimizer, {first}, to the end of its next (the trace's optimizer steps are those "
            "of several optimizers: one step of each is one iteration; the time before the "
            "first one's end is no step's)")


def test_steps_of_two_optimizers_are_whole_iterations(tmp_path: Path) -> None:
    """A GAN's discriminator (SGD) and generator (Adam) step once each per 1 ms iteration: the
    steps run between the first optimizer's steps (as the runner's step marks count them), 3
    whole iterations, not 7 half ones; two optimizers of one class stay indistinguishable."""
    def gan(second: str) -> list[dict]:
        return [event for i in range(4) for event in (
            cpu_event("aten::mm", 1000 * i, 300),
            cpu_event("Optimizer.step#SGD.step", 1000 * i + 300, 100),
            cpu_event("aten::mm", 1000 * i + 400, 300),
            cpu_event(f"Optimizer.step#{second}.step", 1000 * i + 700, 200))]

    profile = kineto.parse(kineto_trace(tmp_path / "gan.json", gan("Adam")))
    steps = profile.table("steps")
    assert steps["start"].tolist() == [400_000, 1_400_000, 2_400_000]
    assert (steps["end"] - steps["start"]).eq(1_000_000).all()
    assert profile.meta.notes == [several_optimizers_note("SGD")]
    # Two optimizers of one class whose steps run no operator and no DataLoader fetch: nothing
    # tells them apart (see the test below for what does).
    alike = kineto.parse(kineto_trace(tmp_path / "alike.json", gan("SGD"))).table("steps")
    assert len(alike) == 7


@pytest.mark.parametrize("tells", ["operators", "fetches"])
def test_two_optimizers_of_one_class_are_one_iteration(tmp_path: Path, tells: str) -> None:
    """A GAN whose discriminator and generator are both Adam, stepping once each per 1 ms
    iteration, no ProfilerStep: the steps were every optimizer step, 7 half iterations. An
    iteration fetches one batch (2 steps between fetches), or, without DataLoader spans, each
    optimizer's step runs its own operators (2 and 3 parameters' updates; the first step of
    each also creates its state): 3 whole iterations of 1 ms, from the first optimizer's
    steps."""
    events = []
    for i in range(4):
        at = 1000 * i
        if tells == "fetches":
            events.append(cpu_event("enumerate(DataLoader)#_SingleProcessDataLoaderIter."
                                    "__next__", at, 50, cat="user_annotation"))
        events += [cpu_event("aten::mm", at + 50, 250),
                   cpu_event("Optimizer.step#Adam.step", at + 300, 100, cat="user_annotation"),
                   cpu_event("aten::mm", at + 400, 300),
                   cpu_event("Optimizer.step#Adam.step", at + 700, 200, cat="user_annotation")]
        if tells == "operators":
            events += [cpu_event("aten::zeros_like", at + 301 + 5 * p, 2)
                       for p in range(4 if i == 0 else 0)]
            events += [cpu_event("aten::add_", at + 320 + 10 * p, 5) for p in range(2)]
            events += [cpu_event("aten::add_", at + 720 + 10 * p, 5) for p in range(3)]
    profile = kineto.parse(kineto_trace(tmp_path / f"{tells}.json", events))
    steps = profile.table("steps")
    assert steps["start"].tolist() == [400_000, 1_400_000, 2_400_000]
    assert (steps["end"] - steps["start"]).eq(1_000_000).all()
    assert profile.meta.notes == [several_optimizers_note("Adam")]


def test_two_optimizers_of_one_class_alike_in_their_updates_are_said_to_alternate(
        tmp_path: Path) -> None:
    """A real CPU GAN trace's shape (torch 2.13, no DataLoader, no ProfilerStep): generator
    and discriminator both Adam over 4 parameters each, so their steps run the same updates;
    the discriminator's turn runs the discriminator twice, the generator's once. Nothing tells
    the optimizers apart, so the 23 steps of 12 iterations were every optimizer step, and the
    note said nothing of it. The operators the steps' windows hold alternate (298 and 374 in
    the real trace; 4 and 3 here), so a note says an iteration may be 2 of these steps; one
    optimizer's loop, running the same operators every step, gets no such note."""
    events = []
    for i in range(8):
        at = 1000 * i
        events += [cpu_event("aten::addmm", at + 20 + 50 * k, 40) for k in range(3)]
        events.append(cpu_event("Optimizer.step#Adam.step", at + 300, 100, cat="user_annotation"))
        events += [cpu_event("aten::add_", at + 310 + 20 * p, 5) for p in range(4)]
        events += [cpu_event("aten::addmm", at + 450 + 50 * k, 40) for k in range(2)]
        events.append(cpu_event("Optimizer.step#Adam.step", at + 700, 100, cat="user_annotation"))
        events += [cpu_event("aten::add_", at + 710 + 20 * p, 5) for p in range(4)]
    profile = kineto.parse(kineto_trace(tmp_path / "gan.json", events))
    assert len(profile.table("steps")) == 15
    assert profile.meta.notes[1] == (
        "the operators the steps run repeat every 2 steps (6, 7 operators in turn), as 2 "
        "optimizers of one class taking turns do (a GAN's generator and discriminator): if so, "
        "an iteration is 2 of these steps and takes 2 times the step time shown; nothing the "
        "steps record names the optimizer each belongs to")
    one = [event for event in events if event["ts"] % 1000 < 450]
    single = kineto.parse(kineto_trace(tmp_path / "one.json", one))
    assert len(single.table("steps")) == 7 and len(single.meta.notes) == 1


def test_one_optimizer_alternating_heads_steps_once_per_fetch(tmp_path: Path) -> None:
    """One Adam over a trunk and two heads trained on alternate batches (multi-task training;
    a real torch 2.13 CPU trace of that shape read 7 steps of 16 iterations): its steps run 10
    and 14 operators by turns, a period that two optimizers would show, but every fetch is
    followed by one optimizer step, so each step is one iteration: 5 steps of 1 ms, not 2."""
    events = []
    for i in range(6):
        at = 1000 * i
        events += [cpu_event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                             at, 50, cat="user_annotation"),
                   cpu_event("aten::mm", at + 50, 600),
                   cpu_event("Optimizer.step#Adam.step", at + 700, 250, cat="user_annotation")]
        events += [cpu_event("aten::add_", at + 701 + 10 * p, 5)
                   for p in range(10 if i % 2 else 14)]
    steps = kineto.parse(kineto_trace(tmp_path / "heads.json", events)).table("steps")
    assert steps["start"].tolist() == [950_000 + 1_000_000 * i for i in range(5)]
    assert (steps["end"] - steps["start"]).eq(1_000_000).all()


def test_steps_come_from_profiler_steps_alone_beside_a_users_step_ranges(
        tmp_path: Path) -> None:
    """schedule(wait=1, warmup=2, active=3) around a loop that opens record_function(f"step
    {i}") itself: ProfilerStep#3-#5, each holding the user's 'step 0'-'step 2' after a 200 µs
    fetch. The steps are the 3 ProfilerStep spans, all of origin ProfilerStep (the fetch inside
    them, no wait between them), not 6 overlapping steps numbered 0-5 of two origins."""
    events = []
    for i in range(3):
        start = 1000 * i
        events += [cpu_event(f"ProfilerStep#{i + 3}", start, 1000, cat="user_annotation"),
                   cpu_event(f"step {i}", start + 200, 790, cat="user_annotation"),
                   cpu_event("aten::mm", start + 210, 700)]
    path = kineto_trace(tmp_path / "both.json", events)
    steps = kineto.parse(path).table("steps")
    assert steps["number"].tolist() == [3, 4, 5] and steps["origin"].eq("ProfilerStep").all()
    assert steps["start"].tolist() == [0, 1_000_000, 2_000_000]
    metrics = analyze_paths([path], AnalyzeOptions()).runs[0].metrics
    assert (metrics.steps.count, metrics.steps.mean_ns) == (3, 1_000_000)
    assert metrics.breakdown is not None and metrics.breakdown.parts_ns["dataloader"] == 0


def test_steps_from_repeated_top_level_op(tmp_path: Path) -> None:
    """No ProfilerStep nor optimizer: the top-level annotation (record_function) that repeats
    most marks iterations, each from its start to the next one's; an operator runs after each,
    the last one's too, so the last pass goes on past its span and is no step."""
    events = [cpu_event("warmup", 0, 50, cat="user_annotation")]
    for i in range(5):
        start = 100 + 300 * i
        events += [cpu_event("train_step", start, 250, cat="user_annotation"),
                   cpu_event("aten::mm", start + 10, 200),
                   cpu_event("aten::mm", start + 260, 10)]
    profile = kineto.parse(kineto_trace(tmp_path / "repeat.json", events))
    steps = profile.table("steps")
    assert steps["origin"].eq("repeated op").all() and len(steps) == 4
    assert profile.meta.step_span == "train_step"
    assert steps["start"].tolist() == [(100 + 300 * i) * 1000 for i in range(4)]
    assert steps["end"].iloc[-1] == (100 + 300 * 4) * 1000
    assert profile.meta.notes == [
        "no ProfilerStep span or optimizer step: the 4 steps are the repeated span "
        "'train_step', each from its start to the next one's",
        "the last 'train_step' span (250.0 µs) is no step: its process records after it what "
        "every earlier pass recorded past its span ('aten::mm'), so its pass goes on past it "
        "and its end is unrecorded"]


#: One 20 ms iteration's record_function ranges (name, offset, duration in µs), the backward
#: the longest: the span the steps come from.
PHASES = (("forward", 0, 4000), ("backward", 4000, 10_000), ("opt_update", 15_000, 3000))


def _passes(passes: int = 5, length: int = 20_000) -> list[dict]:
    """``passes`` iterations of ``length`` µs, each holding the user annotations PHASES with an
    operator inside each; the last pass's backward launches a kernel that runs 3 ms past its
    end."""
    events = []
    for i in range(passes):
        for name, offset, dur in PHASES:
            at = length * i + offset
            events += [cpu_event(name, at, dur, cat="user_annotation"),
                       cpu_event("aten::mm", at + 10, dur - 20)]
    name, offset, dur = PHASES[1]
    at = length * (passes - 1) + offset
    return events + [
        cpu_event("cudaLaunchKernel", at + 20, 10, cat="cuda_runtime", correlation=7),
        device_event("gemm_kernel", at + dur - 1000, 4000, correlation=7, stream=7, device=0)]


def test_the_last_repeated_span_is_no_step_when_its_pass_goes_on_after_it(
        tmp_path: Path) -> None:
    """Five 20 ms iterations of record_function ranges forward (4 ms), backward (10 ms, the
    span repeating most by time: the steps) and opt_update (3 ms), no ProfilerStep nor
    optimizer step: each step runs from one backward's start to the next one's, but the last
    backward's pass goes on after it (its opt_update is recorded): its window's end is
    unrecorded, so it is no step. Cut at its own end, it was a 10 ms step: 'Mean step 18.0
    ms', min 10 ms, of iterations of 20 ms."""
    path = kineto_trace(tmp_path / "phases.json", _passes())
    profile = kineto.parse(path)
    steps = profile.table("steps")
    assert profile.meta.step_span == "backward"
    assert steps["start"].tolist() == [4_000_000 + 20_000_000 * i for i in range(4)]
    assert steps["end"].tolist() == [24_000_000 + 20_000_000 * i for i in range(4)]
    assert profile.meta.notes == [
        "no ProfilerStep span or optimizer step: the 4 steps are the repeated span "
        "'backward', each from its start to the next one's",
        "the last 'backward' span (10.0 ms) is no step: its process records after it what "
        "every earlier pass recorded past its span ('aten::mm', 'opt_update'), so its pass "
        "goes on past it and its end is unrecorded"]
    stats = _analyzed(path).metrics.steps
    assert stats is not None and (stats.count, stats.mean_ns, stats.min_ns) == (
        4, 20_000_000, 20_000_000)


def test_the_last_repeated_span_is_a_step_when_nothing_is_recorded_after_it(
        tmp_path: Path) -> None:
    """The same iterations with the trace ending at the last backward: no CPU work after it
    (its kernel, launched inside it, runs on after it and is its own), so it is kept, to its
    own end, as HTA's MTIA inference trace's last task is; the others hold their opt_update
    and the next forward past their span, which it lacks: the spread of step windows leaves it
    out, and the note says how it was measured."""
    events = [e for e in _passes()
              if not (e["name"] in ("opt_update", "aten::mm") and e["ts"] >= 95_000)]
    path = kineto_trace(tmp_path / "phases.json", events)
    profile = kineto.parse(path)
    steps = profile.table("steps")
    assert len(steps) == 5 and steps["end"].iloc[-1] == 94_000_000
    stats = _analyzed(path).metrics.steps
    assert stats is not None and stats.window_ns == (20_000_000,) * 4
    assert profile.meta.notes == [
        "no ProfilerStep span or optimizer step: the 5 steps are the repeated span "
        "'backward', each from its start to the next one's, the last to its own end: no work "
        "of its process is recorded after it, so it lacks what the others hold past their span"]
    assert not profile.meta.steps_hold_passes


def _whole_passes(passes: int = 5) -> list[dict]:
    """``passes`` 10 ms ``train_step`` record_function ranges 12 ms apart, each holding its
    iteration (an aten::mm): nothing is recorded between them."""
    events = []
    for i in range(passes):
        events += [cpu_event("train_step", 12_000 * i, 10_000, cat="user_annotation"),
                   cpu_event("aten::mm", 12_000 * i + 100, 9000)]
    return events


#: The note of _whole_passes' 5 steps, each holding its pass, the last one kept whole.
WHOLE_PASSES_NOTE = (
    "no ProfilerStep span or optimizer step: the 5 steps are the repeated span 'train_step', "
    "each from its start to the next one's, the last to its own end: no work is recorded "
    "between the spans, so each holds its whole pass")


def test_a_last_repeated_span_holding_its_whole_pass_is_a_whole_step(tmp_path: Path) -> None:
    """Five ``train_step`` ranges with nothing recorded between them: each holds its whole
    pass, so the last, measured to its own end, is as whole as the others and counts in the
    spread of step windows (12 ms four times, then 10 ms); it was left out of it, as a last
    NVTX ``step N`` range without its fetch is, and the note said every step ran to the next
    one's start."""
    path = kineto_trace(tmp_path / "whole.json", _whole_passes())
    profile = kineto.parse(path)
    assert len(profile.table("steps")) == 5 and profile.meta.steps_hold_passes
    assert profile.meta.notes == [WHOLE_PASSES_NOTE]
    metrics = _analyzed(path).metrics
    assert metrics.steps is not None
    assert metrics.steps.window_ns == (12_000_000,) * 4 + (10_000_000,)
    assert metrics.shape is not None and metrics.shape.step_window is not None
    assert (metrics.shape.step_window.count, metrics.shape.step_window.min_ns) == (
        5, 10_000_000)


def test_work_after_repeated_spans_holding_their_passes_is_none_of_the_last_pass(
        tmp_path: Path) -> None:
    """The same five ranges, then an evaluation (an ``evaluate`` range holding an aten::mm)
    and the profiler's teardown (cudaDeviceSynchronize): the ranges hold their passes (nothing
    is recorded between them), so what follows the last is other work, and the last is a whole
    step. It was no step: any work after it was taken for its pass going on."""
    events = _whole_passes() + [
        cpu_event("evaluate", 60_000, 5000, cat="user_annotation"),
        cpu_event("aten::mm", 60_100, 4000),
        cpu_event("cudaDeviceSynchronize", 66_000, 50, cat="cuda_runtime", correlation=9)]
    path = kineto_trace(tmp_path / "teardown.json", events)
    profile = kineto.parse(path)
    assert len(profile.table("steps")) == 5 and profile.meta.steps_hold_passes
    assert profile.meta.notes == [WHOLE_PASSES_NOTE]
    stats = _analyzed(path).metrics.steps
    assert stats is not None and len(stats.window_ns) == 5


def _passes_with_updates(updates: tuple[str, ...], after: list[dict]) -> list[dict]:
    """Five 8 ms ``train_step`` ranges 12 ms apart, each followed by a 2 ms operator, the
    update (``updates`` in turn), the last one by the events ``after`` instead."""
    events = []
    for i in range(5):
        events += [cpu_event("train_step", 12_000 * i, 8000, cat="user_annotation"),
                   cpu_event("aten::mm", 12_000 * i + 100, 7000)]
        if i < 4:
            events.append(cpu_event(updates[i % len(updates)], 12_000 * i + 9000, 2000))
    return events + after


#: The profiler's teardown after the last pass: it synchronises the device.
TEARDOWN = [cpu_event("cudaDeviceSynchronize", 57_000, 50, cat="cuda_runtime", correlation=9)]


def test_work_after_the_last_repeated_span_that_no_pass_went_on_with_is_other_work(
        tmp_path: Path) -> None:
    """Every pass runs aten::add_ after its ``train_step`` range, but only the profiler's
    teardown follows the last: none of what every pass went on with, so the last pass ended
    at its range's end and it is a step, to its own end, which lacks the aten::add_ the others
    hold: the spread of step windows leaves it out. It was no step."""
    path = kineto_trace(tmp_path / "updates.json",
                        _passes_with_updates(("aten::add_",), TEARDOWN))
    profile = kineto.parse(path)
    assert len(profile.table("steps")) == 5 and not profile.meta.steps_hold_passes
    assert profile.meta.notes == [
        "no ProfilerStep span or optimizer step: the 5 steps are the repeated span "
        "'train_step', each from its start to the next one's, the last to its own end: what "
        "its process records after it, none of what every earlier pass recorded past its "
        "span, is other work, so it lacks what the others hold past their span"]
    stats = _analyzed(path).metrics.steps
    assert stats is not None and stats.window_ns == (12_000_000,) * 4


def test_work_after_the_last_repeated_span_is_its_pass_when_no_work_follows_every_span(
        tmp_path: Path) -> None:
    """The passes run aten::add_ and aten::sub in turn after their range: no work follows every
    one, so nothing tells the last pass going on from other work, and the teardown after it is
    taken for its pass: the last range is no step, as any work after it made it before."""
    profile = kineto.parse(kineto_trace(tmp_path / "turns.json", _passes_with_updates(
        ("aten::add_", "aten::sub"), TEARDOWN)))
    assert len(profile.table("steps")) == 4
    assert profile.meta.notes[1:] == [
        "the last 'train_step' span (8.0 ms) is no step: work is recorded after it and none "
        "follows every earlier span, to tell its pass from other work, so its pass goes on "
        "past it and its end is unrecorded"]


def test_python_functions_after_the_last_repeated_span_are_its_pass_going_on(
        tmp_path: Path) -> None:
    """with_stack records the Python functions each pass runs after its ``train_step`` range
    (``train.py(41): log_metrics``), the last one's too, and nothing else after it: the
    process runs the pass's Python code, so the last pass goes on past its range and it is no
    step. Python functions were no work: the last range was a step, measured to its own end
    as if nothing followed. Without them after the last range, it is kept, but lacks the
    Python work the others hold past their range."""
    def log(at: int) -> dict:
        """The pass's Python function, 1 ms at ``at`` µs."""
        return cpu_event("train.py(41): log_metrics", at, 1000, cat="python_function")

    events = _passes_with_updates(("aten::add_",), [])
    events = [e for e in events if e["name"] != "aten::add_"]
    events += [log(12_000 * i + 9000) for i in range(4)]
    profile = kineto.parse(kineto_trace(tmp_path / "python.json", events + [log(57_000)]))
    assert len(profile.table("steps")) == 4
    assert profile.meta.notes[1:] == [
        "the last 'train_step' span (8.0 ms) is no step: its process records after it what "
        "every earlier pass recorded past its span ('train.py(#): log_metrics'), so its pass "
        "goes on past it and its end is unrecorded"]
    kept = kineto.parse(kineto_trace(tmp_path / "kept.json", events))
    assert len(kept.table("steps")) == 5 and not kept.meta.steps_hold_passes


def test_a_last_fetch_whose_pass_goes_on_is_no_evaluation_step(tmp_path: Path) -> None:
    """torch's DataLoader span repeats as the steps (forward, backward and optimizer recorded
    as operators only): the last fetch's pass goes on after it (its forward and backward are
    recorded), so it is no step, not a step holding only its fetch that was said to be
    'Evaluation-only steps: 1 step (no backward pass or optimizer step)' and counted among
    'the 6 steps' while 5 were measured."""
    fetch = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    events = []
    for i in range(6):
        at = 20_000 * i
        events += [cpu_event(fetch, at, 8000, cat="user_annotation"),
                   cpu_event("aten::mm", at + 8000, 4000),
                   cpu_event("autograd::engine::evaluate_function: MmBackward0", at + 12_500,
                             4000),
                   cpu_event("aten::add_", at + 17_000, 2000)]
    path = kineto_trace(tmp_path / "loader.json", events)
    profile = kineto.parse(path)
    assert len(profile.table("steps")) == 5
    assert profile.meta.notes == [
        "no ProfilerStep span or optimizer step: the 5 steps are the repeated span "
        f"'{fetch}', each from its start to the next one's",
        f"the last '{fetch}' span (8.0 ms) is no step: its process records after it what "
        "every earlier pass recorded past its span ('aten::add_', 'aten::mm', "
        "'autograd::engine::evaluate_function: MmBackward#'), so its pass goes on past it and "
        "its end is unrecorded"]
    run = _analyzed(path)
    assert run.metrics.steps is not None and run.metrics.steps.count == 5
    assert run.metrics.steps.mean_ns == 20_000_000
    assert run.metrics.shape is not None and run.metrics.shape.evaluating == ()


def _train_steps_beside_unnamed_spans(named: bool) -> list[dict]:
    """10 passes 1 ms apart, each a 400 us ``train_step`` record_function range (when
    ``named``) holding an aten::mm, then 3 top-level user annotations of 150 us whose name the
    profiler did not record (no ``name`` key, or null): 30 spans of 4.5 ms in all against the
    ``train_step`` ranges' 4 ms."""
    events = []
    for step in range(10):
        base = 1000 * step
        if named:
            events += [cpu_event("train_step", base, 400, cat="user_annotation"),
                       cpu_event("aten::mm", base + 10, 300)]
        for index in range(3):
            unnamed = cpu_event("", base + 450 + 150 * index, 140, cat="user_annotation")
            unnamed["name"] = None
            events.append(unnamed if index else {key: value for key, value in unnamed.items()
                                                 if key != "name"})
    return events


def test_a_span_of_unrecorded_name_is_no_step(tmp_path: Path) -> None:
    """No ProfilerStep nor optimizer step: 10 ``train_step`` ranges and 30 top-level spans of
    no recorded name, which take more time. A span whose name the profiler did not record
    says nothing of what it was, no evidence of a pass of the loop: the steps are the
    ``train_step`` ranges; with the unnamed spans alone the steps are unknown, a note saying
    why. The 30 spans, '(name unrecorded)' alike, were the steps (the repeated span
    '(name unrecorded)': 30 steps of 315 us on average), with or without ``train_step``."""
    profile = kineto.parse(kineto_trace(tmp_path / "named.json",
                                        _train_steps_beside_unnamed_spans(named=True)))
    steps = profile.table("steps")
    assert profile.meta.step_span == "train_step" and steps["origin"].eq("repeated op").all()
    # The last train_step is no step: the unnamed spans after it are its pass going on.
    assert steps["start"].tolist() == [1_000_000 * step for step in range(9)]
    assert profile.meta.notes[0] == (
        "no ProfilerStep span or optimizer step: the 9 steps are the repeated span "
        "'train_step', each from its start to the next one's")
    assert profile.meta.notes[1:] == [
        "the last 'train_step' span (400.0 µs) is no step: its process records after it what "
        "every earlier pass recorded past its span ('(name unrecorded)'), so its pass goes on "
        "past it and its end is unrecorded"]
    alone = kineto.parse(kineto_trace(tmp_path / "unnamed.json",
                                      _train_steps_beside_unnamed_spans(named=False)))
    assert alone.table("steps").empty and alone.meta.step_span is None
    assert alone.meta.notes == [
        "no ProfilerStep span, optimizer step or repeated span of a recorded name: the 30 spans "
        "whose name the profiler did not record are no evidence of a pass of the training "
        "loop, so the steps are unknown"]


def test_cpu_only_trace_has_no_device_tables(tmp_path: Path) -> None:
    """A CPU-only trace: operators and steps, empty device tables, no dropped records."""
    events = [cpu_event("ProfilerStep#1", 0, 100, cat="user_annotation"),
              cpu_event("aten::add", 5, 3)]
    profile = kineto.parse(kineto_trace(tmp_path / "cpu.json", events))
    assert profile.table("kernels").empty and profile.table("sync").empty
    assert profile.table("cpu_ops")["name"].tolist() == ["aten::add"]


def test_mtia_device_work_in_hand_built_trace(tmp_path: Path) -> None:
    """MTIA: runtime calls, command-processor executions as kernels, DMAs as copies."""
    events = [
        cpu_event("runFunction - job_prep_and_submit_for_execution", 10, 5, cat="mtia_runtime",
                  correlation=5, device=17, stream_id="101"),
        device_event("remote", 20, 30, cat="mtia_ccp_events", pid=17, tid=3536, stream=101,
                     correlation=5),
        device_event("dma_request", 60, 4, cat="mtia_ccp_events", pid=17, tid=3672, stream=105,
                     direction="DEVICE_TO_HOST", size=1024),
        device_event("event_wait", 70, 9, cat="mtia_ccp_events", pid=17, tid=3774, stream=108),
    ]
    profile = kineto.parse(kineto_trace(tmp_path / "mtia.json", events))
    kernels = profile.table("kernels")
    assert kernels[["name", "device", "stream", "correlation"]].values.tolist() == [
        ["remote", 17, 101, 5]]
    assert profile.table("memcpy")[["kind", "src_kind", "bytes", "device"]].values.tolist() == [
        ["DtoH", "Device", 1024, 17]]
    assert profile.table("sync")[["kind", "stream"]].values.tolist() == [["event_wait", 108]]
    assert profile.table("runtime")["correlation"].tolist() == [5]


@pytest.mark.corpus
def test_mtia_corpus_trace(corpus: Path) -> None:
    """HTA's MTIA inference trace: device work lands in the kernel, copy and sync tables."""
    profile = kineto.parse(corpus / "hta" / "mtia_inference_rank_0.json.gz")
    kernels = profile.table("kernels")
    assert kernels["name"].value_counts().to_dict() == {"remote": 37, "merge": 36, "pe_exe": 24}
    assert kernels["device"].eq(17).all()
    memcpy = profile.table("memcpy")
    assert memcpy["kind"].value_counts().to_dict() == {"DtoH": 450, "HtoD": 427}
    assert len(profile.table("sync")) == 48 + 291
    assert len(profile.table("runtime")) == 823
    assert profile.table("devices")[["device", "name"]].values.tolist() == [[17, "ARTEMIS"]]
    assert profile.rank is None and profile.meta.distributed_info == {}
    steps = profile.table("steps")
    assert steps["origin"].eq("repeated op").all() and len(steps) == 12
    assert profile.meta.dropped == {}


@pytest.mark.corpus
def test_rank_not_found_corpus_trace(corpus: Path) -> None:
    """distributedInfo without a rank: rank unknown, one ProfilerStep#1009 of 75.473 ms."""
    profile = kineto.parse(corpus / "hta" / "rank_not_found.json.gz")
    assert profile.rank is None and profile.meta.backend == "nccl"
    steps = profile.table("steps")
    assert steps["number"].tolist() == [1009]
    assert int(steps["end"].iloc[0] - steps["start"].iloc[0]) == 75_473_000
    assert profile.table("kernels").empty


@pytest.mark.corpus
def test_triton_corpus_trace(corpus: Path) -> None:
    """One Triton kernel of 1.76 us, launched by cuLaunchKernel, in a 13.3 s step."""
    profile = kineto.parse(corpus / "hta" / "triton_example.json.gz")
    kernel = profile.table("kernels").iloc[0]
    assert kernel["name"] == "triton_poi_fused_add_cos_sin_0"
    assert kernel["end"] - kernel["start"] == 1760
    runtime = profile.table("runtime").set_index("correlation")["name"]
    assert runtime[kernel["correlation"]] == "cuLaunchKernel"
    step = profile.table("steps").iloc[0]
    assert round((step["end"] - step["start"]) / 1e9, 1) == 13.3


@pytest.mark.corpus
def test_cuda_event_sync_corpus_trace(corpus: Path) -> None:
    """CUPTI sync records go to ``sync``; the pageable DtoH copy keeps its kinds and size."""
    profile = kineto.parse(corpus / "hta" / "cuda_event_sync.json.gz")
    sync = profile.table("sync")
    assert sorted(sync["kind"]) == ["Context Sync", "Event Sync", "Event Sync", "Stream Sync"]
    assert (sync["end"] - sync["start"]).max() == 33_000
    copy = profile.table("memcpy").iloc[0]
    assert (copy["kind"], copy["dst_kind"], copy["bytes"]) == ("DtoH", "Pageable", 1)
    runtime = profile.table("runtime")["name"]
    assert {"cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize"} <= set(
        runtime)


@pytest.mark.corpus
def test_dataloader_iterator_kind(corpus: Path) -> None:
    """The DataLoader iterator in the trace says whether worker processes were used."""
    w0 = kineto.parse(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    w4 = kineto.parse(corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz")
    assert w0.meta.dataloader.workers == "single-process"
    assert w4.meta.dataloader == DataLoaderIterators(
        "multi-process", multi_process_next_calls=6, single_process_next_calls=0)


# --- shapes met in the wild (issue 19, item 7) -------------------------------------------------

def _analyzed(path: Path) -> RunAnalysis:
    """The one run ``profreport analyze PATH`` makes of a file (in this process)."""
    options = AnalyzeOptions(executor=ExecutorOptions(processes=1))
    (run,) = analyze_paths([path], options).runs
    return run


def test_earliest_kineto_format(tmp_path: Path) -> None:
    """January 2021 (``autograd.profiler.profile(use_kineto=True)``): capitalised categories,
    no device block, no ``ProfilerStep``, string tids, ``Input dims`` spelt lower-case."""
    tid = "1441273664"
    events = []
    for step in range(4):
        base = 1000.0 * step
        events += [
            cpu_event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", base, 200,
                      cat="Operator"),
            cpu_event("aten::conv2d", base + 300, 100, cat="Operator",
                      **{"Input dims": [[32, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], []]}),
            cpu_event("cudaLaunchKernel", base + 310, 10, cat="Runtime", correlation=step + 1),
            device_event("implicit_convolve_sgemm", base + 330, 60, cat="Kernel", pid=0,
                         tid="stream 7", device=0, stream=7, correlation=step + 1),
            cpu_event("Optimizer.step#SGD.step", base + 600, 150, cat="Operator"),
        ]
    for event in events:
        event["tid"] = tid if event["cat"] != "Kernel" else event["tid"]
    profile = kineto.parse(kineto_trace(tmp_path / "2021.pt.trace.json", events))
    assert profile.meta.dialect == "2021" and profile.table("devices").empty
    assert len(profile.table("kernels")) == 4 and set(profile.table("cpu_ops")["tid"]) == {
        int(tid)}
    steps = profile.table("steps")
    assert set(steps["origin"]) == {"optimizer"} and len(steps) == 3
    inputs = profile.table("op_inputs")
    assert inputs["input_dims"].iloc[0][:2] == ((32, 3, 224, 224), (64, 3, 7, 7))
    assert profile.meta.dataloader.workers == "single-process"
    assert _analyzed(tmp_path / "2021.pt.trace.json").verdict != "unknown"


@pytest.mark.parametrize("dims_key", ["Input Dims", "Input dims"])
def test_a_2021_range_with_an_operators_name_is_told_by_its_inputs(tmp_path: Path,
                                                                   dims_key: str) -> None:
    """The 2021 format (torch 1.8-1.9: every CPU span an ``Operator``) under record_shapes: a
    user's ``record_function("forward")`` and ``record_function("model::stage")`` take C++-like
    names and were read as operators (a 'forward' op with 300 µs of self time). The profiler
    writes one Input Dims entry per argument a RecordFunction was entered with; the dispatcher
    enters every operator with its arguments, ``record_function`` with none: names that never
    recorded an input are ranges. The autograd engine's evaluate_function record, entered with
    none too, stays an operator. Without recorded inputs (record_shapes off) nothing tells
    them apart: the names alone decide, as before. A range whose Input Dims is JSON null
    listed no input (it read as an operator that recorded one)."""
    engine = "autograd::engine::evaluate_function: AddBackward0"
    events = []
    for step in range(3):
        base = 1000.0 * step
        events += [
            cpu_event("forward", base, 500, cat="Operator"),
            cpu_event("model::stage", base + 10, 200, cat="Operator"),
            cpu_event("aten::conv2d", base + 20, 100, cat="Operator",
                      **{dims_key: [[8, 3, 32, 32], [16, 3, 3, 3], [], [], [], [], []]}),
            cpu_event("aten::empty", base + 250, 5, cat="Operator", **{dims_key: [[], [], []]}),
            cpu_event(engine, base + 600, 100, cat="Operator"),
            cpu_event("AddBackward0", base + 610, 80, cat="Operator",
                      **{dims_key: [[8, 16, 30, 30]]}),
            cpu_event("Optimizer.step#SGD.step", base + 800, 150, cat="Operator")]
    profile = kineto.parse(kineto_trace(tmp_path / "shapes.pt.trace.json", events))
    assert profile.meta.dialect == "2021"
    assert set(profile.table("cpu_ops")["name"]) == {"aten::conv2d", "aten::empty", engine,
                                                    "AddBackward0"}
    assert set(profile.table("ranges")["name"]) == {"forward", "model::stage",
                                                   "Optimizer.step#SGD.step"}
    for event in events:  # an Input Dims of JSON null lists no input, as a missing one
        if event["name"] in ("forward", "model::stage"):
            event["args"][dims_key] = None
    nulls = kineto.parse(kineto_trace(tmp_path / "nulls.pt.trace.json", events))
    assert set(nulls.table("ranges")["name"]) == {"forward", "model::stage",
                                                 "Optimizer.step#SGD.step"}
    for event in events:
        event["args"].pop(dims_key, None)
    bare = kineto.parse(kineto_trace(tmp_path / "bare.pt.trace.json", events))
    assert set(bare.table("ranges")["name"]) == {"Optimizer.step#SGD.step"}
    assert {"forward", "model::stage"} <= set(bare.table("cpu_ops")["name"])


def test_inputs_recorded_in_every_part_of_a_trace_read_in_parallel_tell_the_ranges(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2021 trace read in parts by several processes: each part's operators that recorded
    inputs are joined (kineto_columns.ColumnBuilder.absorb) by name, so an operator met only in
    a later part (``aten::op5``) stays an operator, and ``forward`` is a range in every part."""
    events = []
    for step in range(6):
        base = 1000.0 * step
        events += [cpu_event("forward", base, 500, cat="Operator"),
                   cpu_event(f"aten::op{step}", base + 20, 100, cat="Operator",
                             **{"Input Dims": [[8, 3, 32, 32]]})]
    path = kineto_trace(tmp_path / "parts.pt.trace.json", events)
    monkeypatch.setattr(kineto_stream, "PARALLEL_MIN_BYTES", path.stat().st_size // 3)
    monkeypatch.setattr(kineto_stream, "SPLIT_PROBE_BYTES", 1024)
    if len(kineto_stream._parallel_ranges(path, 30, path.stat().st_size)) < 2:
        pytest.skip("one CPU: the trace is read in one part")
    profile = kineto.parse(path)
    assert set(profile.table("cpu_ops")["name"]) == {f"aten::op{step}" for step in range(6)}
    assert set(profile.table("ranges")["name"]) == {"forward"}


def test_compute_properties_name_the_devices(tmp_path: Path) -> None:
    """Some Kineto builds list the accelerators under ``computeProperties``."""
    props = [{"id": 0, "name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 16945512448,
              "computeMajor": 7, "computeMinor": 0, "numSms": 80}]
    events = [cpu_event("ProfilerStep#1", 0, 100, cat="user_annotation"),
              device_event("k", 10, 20, device=0, stream=7, correlation=1)]
    profile = kineto.parse(kineto_trace(tmp_path / "v100.json", events, computeProperties=props))
    devices = profile.table("devices")
    assert devices[["device", "name", "sm_count", "compute_major"]].values.tolist() == [
        [0, "Tesla V100-SXM2-16GB", 80, 7]]
    assert profile.meta.device_properties == props


def test_gpu_events_without_cpu_ops_give_a_report(tmp_path: Path) -> None:
    """A trace of device activity only (CPU tracing off): kernels are read and the verdict says
    why it cannot attribute the idle time."""
    events = [device_event(f"k{i % 3}", 1000.0 + 50 * i, 30, device=0, stream=7, correlation=i + 1)
              for i in range(40)]
    path = kineto_trace(tmp_path / "gpu_only.json", events)
    profile = kineto.parse(path)
    assert len(profile.table("kernels")) == 40 and profile.table("cpu_ops").empty
    assert profile.meta.empty is None
    run = _analyzed(path)
    assert run.verdict == "unknown" and "no step markers" in run.verdict_reason


def test_one_optimizer_step_is_said_to_make_no_step(tmp_path: Path) -> None:
    """One training step profiled without schedule (torch 2.13 records no ProfilerStep span
    then): its one optimizer step makes no step, which runs from one optimizer step's end to
    the next's; the reason read 'no step markers (..., an optimizer step, ...)' beside it."""
    path = kineto_trace(tmp_path / "single.json", [
        cpu_event("aten::mm", 1000, 500),
        cpu_event("Optimizer.step#Adam.step", 1600, 200, cat="user_annotation")])
    run = _analyzed(path)
    assert run.metrics.steps is None and run.verdict == "unknown"
    assert "two optimizer steps (a step runs from one's end to the next's)" in run.verdict_reason


def test_nearly_empty_trace_is_said_to_be_empty(tmp_path: Path) -> None:
    """A few runtime calls over 9 s and nothing else: nothing to analyse (an nsys capture of OS
    runtime calls alone reads the same), never a bottleneck, and never called 'empty'."""
    events = [cpu_event(name, ts, 5, cat="cuda_runtime", correlation=i) for i, (name, ts) in
              enumerate([("cudaGetDeviceCount", 0.0), ("cudaGetDevice", 5e6),
                         ("cudaStreamIsCapturing", 9e6)])]
    path = kineto_trace(tmp_path / "cut.json", events)
    profile = kineto.parse(path)
    assert profile.meta.empty == (
        "nothing to analyse: no kernels, copies, operators, ranges, steps or lines recorded "
        "(only 3 runtime calls over 9,000.0 ms): the profiler traced none of them, or the "
        "capture ended before the first iteration")
    run = _analyzed(path)
    assert run.verdict == "unknown" and run.verdict_reason == profile.meta.empty
    assert run.findings == []


def test_wild_2021_resnet50_trace(corpus: Path) -> None:
    """pytorch/kineto's January 2021 sample: ResNet-50, batch 32, num_workers 0, one GPU."""
    profile = kineto.parse(corpus / "wild" /
                           "kineto2021_autograd_api_resnet50_nw0_worker0.pt.trace.json.gz")
    assert profile.meta.dialect == "2021" and profile.table("devices").empty
    assert profile.meta.dataloader.workers == "single-process"
    first_conv = profile.table("op_inputs").query("name == 'aten::conv2d'").iloc[0]
    assert first_conv["input_dims"][0] == (32, 3, 224, 224)  # batch 32 of 224x224 images
    assert len(profile.table("kernels")) == 9329 and profile.meta.empty is None


@pytest.mark.parametrize(("name", "steps_ms"), [
    ("tracelens_mi300x_resnet_actckpt_rank0of8.json.gz", [16.8, 16.0, 15.9]),
    ("jh_rtx3080_toymodel_num-workers-0-batch-size-16.json.gz", [1.8, 1.3, 1.4]),
])
def test_wild_traces_have_their_published_steps(corpus: Path, name: str,
                                                steps_ms: list[float]) -> None:
    """The step times the traces' authors published (TraceLens: ProfilerStep#15-17; the RTX
    3080 sandbox: ProfilerStep#2-4)."""
    steps = kineto.parse(corpus / "wild" / name).table("steps")
    measured = ((steps["end"] - steps["start"]) / 1e6).round(1).tolist()
    assert measured == steps_ms  # to the 0.1 ms they were published with


def test_rocm_copies_are_classified_by_their_recorded_kind(tmp_path: Path) -> None:
    """Host-to-device copies were 'none recorded' on AMD traces: ROCm names its copy
    activities ``CopyHostToDevice`` (roctracer) or records the direction only in ``args.kind``
    (``HtoD``, or hipMemcpyKind's number); the recorded kind decides, in concepts.copy_kinds."""
    events = [cpu_event("ProfilerStep#1", 0, 1000, cat="user_annotation")]
    copies = [("CopyHostToDevice", {}, "HtoD"),
              ("Memcpy", {"kind": "HtoD"}, "HtoD"),
              ("Memcpy", {"kind": 1}, "HtoD"),
              ("Memcpy DtoD (Device -> Device)", {"kind": "DtoD"}, "DtoD"),
              ("CopyDeviceToHost", {"kind": "2"}, "DtoH"),
              ("Memcpy", {"kind": 4}, "unknown")]
    for i, (name, args, _) in enumerate(copies):
        events += [cpu_event("hipMemcpyAsync", 10 + 100 * i, 5, cat="cuda_runtime",
                             correlation=i + 1, kind="1"),
                   device_event(name, 20 + 100 * i, 10, cat="gpu_memcpy", device=0, stream="0x0",
                                correlation=i + 1, bytes=1 << 20, **args)]
    path = kineto_trace(tmp_path / "rocm_copies.json", events)
    memcpy = kineto.parse(path).table("memcpy")
    assert memcpy["kind"].tolist() == [kind for _, _, kind in copies]
    copied = _analyzed(path).metrics.copies
    assert copied is not None and copied.h2d_bytes == 3 << 20


def test_mi300x_copies_are_all_device_to_device(corpus: Path) -> None:
    """The TraceLens MI300X trace records 550 copies, every one ``args.kind`` DtoD (its 366
    hipMemcpyAsync calls all carry kind 3): no host-to-device copy is recorded there."""
    profile = kineto.parse(corpus / "wild" / "tracelens_mi300x_resnet_actckpt_rank0of8.json.gz")
    assert profile.table("memcpy")["kind"].value_counts().to_dict() == {"DtoD": 550}


def _construction() -> list[dict]:
    """The events of building 8 Linear layers: each one's weight and bias Parameter made
    (aten::empty, aten::detach over detach), then initialised (aten::uniform_, 90 µs for the
    weight, 2 µs for the bias); 877 µs from the first operator's start to the last one's end."""
    events, ts = [], 0.0
    for _ in range(8):
        for _parameter in ("weight", "bias"):
            events += [cpu_event("aten::empty", ts, 1), cpu_event("aten::detach", ts + 2, 2),
                       cpu_event("detach", ts + 2.5, 1)]
            ts += 5
        events += [cpu_event("aten::uniform_", ts, 90), cpu_event("aten::uniform_", ts + 95, 2)]
        ts += 100
    return events


def test_an_operator_repeated_while_a_model_is_built_is_no_step(tmp_path: Path) -> None:
    """A trace of model construction only: each Linear layer's Parameter made (aten::empty,
    aten::detach over detach) and initialised (aten::uniform_ for its weight and its bias).
    aten::uniform_ repeats 16 times and takes the most time, but one operator repeats per
    parameter: no pass of a loop is recorded, so no steps and the verdict is unknown."""
    path = kineto_trace(tmp_path / "construct.json", _construction())
    profile = kineto.parse(path)
    assert profile.table("steps").empty and profile.meta.step_span is None
    run = _analyzed(path)
    assert run.metrics.steps is None
    assert run.verdict == "unknown" and "two optimizer steps" in run.verdict_reason


def test_an_operator_of_any_namespace_is_no_step(tmp_path: Path) -> None:
    """A library's own operator (fbgemm::, a custom mylib::) is recorded under the operators'
    category as aten's are: 6 top-level calls of mylib::fused_gelu, the most time of the trace,
    mark no pass of a loop (a list of aten-like namespaces had taken them for 6 steps), while
    the user's record_function('forward') around each pass does."""
    events = [cpu_event("mylib::fused_gelu", 200 * i, 150) for i in range(6)]
    assert kineto.parse(kineto_trace(tmp_path / "ops.json", events)).table("steps").empty
    events += [cpu_event("forward", 200 * i + 160, 30, cat="user_annotation") for i in range(6)]
    profile = kineto.parse(kineto_trace(tmp_path / "marked.json", events))
    assert profile.meta.step_span == "forward" and len(profile.table("steps")) == 6


def test_a_trace_without_steps_lists_its_top_operators_over_the_profiled_span(
        tmp_path: Path) -> None:
    """Model construction only: no steps, so no share of step time, but the report still says
    where the time went: the operators by self time over the profiled span (877 µs), the share's
    basis carried in the result and said in the report's share column and its JSON."""
    report = analyze_paths([kineto_trace(tmp_path / "construct.json", _construction())],
                           AnalyzeOptions(executor=ExecutorOptions(processes=1)))
    (run,) = report.runs
    assert run.metrics.steps is None and run.metrics.top_ops_share_of == "profiled span"
    top = run.metrics.top_ops[0]
    assert (top.name, top.total_ns, top.count) == ("aten::uniform_", 736_000, 16)
    assert top.share == pytest.approx(736 / 877)
    assert ("| # | Operator | Self time | Calls | Share of the profiled span |"
            in render_markdown(report))
    assert json.loads(render_json(report))["runs"][0]["top_ops_share_of"] == "profiled span"


def test_the_operators_share_the_profiled_span_the_gpus_busy_share_is_over(
        tmp_path: Path) -> None:
    """Model construction (877 µs of operators), then a kernel launched at 880 µs and waited for
    by cudaDeviceSynchronize until 1877 µs: the profile watched 1877 µs, as the GPU's busy share
    says (its 'profiled span'). aten::uniform_'s 736 µs are 39% of it; they were 84%, over the
    operators' own first start to last end, which the report called the profiled span too."""
    events = _construction() + [
        cpu_event("cudaLaunchKernel", 880, 5, cat="cuda_runtime", correlation=1),
        device_event("init_kernel", 890, 980, correlation=1, stream=7, device=0),
        cpu_event("cudaDeviceSynchronize", 886, 991, cat="cuda_runtime", correlation=2)]
    (run,) = analyze_paths([kineto_trace(tmp_path / "construct.json", events)],
                           AnalyzeOptions(executor=ExecutorOptions(processes=1))).runs
    assert run.metrics.steps is None and run.metrics.top_ops_share_of == "profiled span"
    assert (run.metrics.gpu.span, run.metrics.gpu.window_ns) == ("profiled span", 1_877_000)
    top = run.metrics.top_ops[0]
    assert (top.name, top.total_ns) == ("aten::uniform_", 736_000)
    assert top.share == pytest.approx(736 / 1877)


def test_a_second_trace_without_a_rank_is_said_to_be_left_out(tmp_path: Path) -> None:
    """tensorboard_trace_handler writes one file per profiling cycle of one process, neither with
    a rank: the figures come from the first; the report says the second's steps are not in
    them, instead of dropping them without a word."""
    run = tmp_path / "cycles"
    run.mkdir()
    for cycle, first_step in enumerate((2, 6)):
        events = [event for i in range(3) for event in (
            cpu_event(f"ProfilerStep#{first_step + i}", 10_000 * cycle + 1000 * i, 900,
                      cat="user_annotation"),
            cpu_event("aten::mm", 10_000 * cycle + 1000 * i + 10, 800))]
        kineto_trace(run / f"host_1.{cycle}.pt.trace.json", events)
    analysed = _analyzed(run)
    assert analysed.metrics.steps is not None and analysed.metrics.steps.count == 3
    assert analysed.notes == [
        "host_1.1.pt.trace.json: its 3 steps are not in the per-step figures, which come from "
        "host_1.0.pt.trace.json (neither records a rank, so they are not read as ranks of one "
        "job; analyse it alone for its own figures)"]


def test_a_second_trace_of_one_rank_is_said_to_be_left_out(tmp_path: Path) -> None:
    """A 2-rank DDP run under tensorboard_trace_handler with schedule(repeat=2) writes two
    files per rank, each recording its rank: the figures of each rank come from its first;
    the second's steps were dropped without a word (real torch 2.13 gloo traces)."""
    run = tmp_path / "cycles"
    run.mkdir()
    for rank in (0, 1):
        for cycle, first_step in enumerate((2, 7)):
            events = [event for i in range(3) for event in (
                cpu_event(f"ProfilerStep#{first_step + i}", 10_000 * cycle + 1000 * i,
                          900 + 50 * rank, cat="user_annotation"),
                cpu_event("aten::mm", 10_000 * cycle + 1000 * i + 10, 800))]
            kineto_trace(run / f"host_{rank}.{cycle}.pt.trace.json", events,
                         distributedInfo={"backend": "gloo", "rank": rank, "world_size": 2})
    analysed = _analyzed(run)
    assert analysed.metrics.steps is not None and analysed.metrics.steps.count == 3
    assert analysed.notes == [
        f"host_{rank}.1.pt.trace.json: its 3 steps are not in the per-step figures, which come "
        f"from host_{rank}.0.pt.trace.json (both record rank {rank}: the profiling cycles of one "
        "process, or two runs; analyse it alone for its own figures)" for rank in (0, 1)]


def test_a_trace_without_a_rank_beside_ranked_traces_is_none_of_the_job(tmp_path: Path) -> None:
    """A folder with rank 0's and rank 1's traces of a 2-rank gloo job (ProfilerStep spans of
    0.9 and 0.95 ms) and a single-process trace recording no rank (1.5 ms steps), named to sort
    first: the run's per-step figures came from the single-process trace (15 x 198.0 ms on the
    real torch 2.13 traces, beside 'the findings below come from rank 0's profile' and the
    ranks' 20.5 ms) and nothing said that rank 0's steps were left out. They come from rank 0
    now, and a note names the trace left out."""
    run = tmp_path / "job"
    run.mkdir()
    for name, rank, length in (("a_single", None, 1500), ("rank0", 0, 900), ("rank1", 1, 950)):
        events = [event for i in range(4) for event in (
            cpu_event(f"ProfilerStep#{2 + i}", 1000 + 2000 * i, length, cat="user_annotation"),
            cpu_event("aten::mm", 1000 + 2000 * i + 10, length - 100))]
        header = {} if rank is None else {
            "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2}}
        kineto_trace(run / f"{name}.pt.trace.json", events, **header)
    analysed = _analyzed(run)
    assert analysed.metrics.steps is not None
    assert (analysed.metrics.steps.count, analysed.metrics.steps.mean_ns) == (4, 900_000)
    assert analysed.metrics.per_rank_step_ns == {0: 900_000, 1: 950_000}
    assert analysed.notes == [
        "a_single.pt.trace.json: its 4 steps are not in the per-step figures, which come from "
        "rank0.pt.trace.json (it records no rank, beside 2 traces of the same profiler "
        "recording one: another run's trace, or a process outside the job; analyse it alone "
        "for its own figures)"]


def test_an_empty_closing_profiler_step_is_no_step(tmp_path: Path) -> None:
    """torch 2.13 under schedule(wait=0, warmup=0, active=2) recorded ProfilerStep#2 (the
    iteration, 2.7 ms) and ProfilerStep#3 (18.7 µs, nothing in it: prof.step() opened it as the
    profiler stopped). Taken for a step, it made #2 look like start-up ('Step 2 is start-up',
    142x the later steps' median) and the per-step figures those of an empty span ('1 x 18.7
    µs ... 100% of the step ... cannot attribute'); alone, it read as a step of nothing."""
    events = [cpu_event("ProfilerStep#2", 1000, 2700, cat="user_annotation"),
              cpu_event("aten::mm", 1010, 2600),
              cpu_event("ProfilerStep#3", 3730, 18.7, cat="user_annotation")]
    run = _analyzed(kineto_trace(tmp_path / "first.json", events))
    assert run.metrics.steps is not None and run.metrics.steps.count == 1
    assert run.metrics.steps.mean_ns == 2_700_000 and run.verdict == "compute-bound"
    assert "STARTUP" not in {f.id for f in run.findings}
    assert ("first.json: ProfilerStep#3, the last step span (18.7 µs), holds nothing: "
            "prof.step() opened it as the profiler stopped, so it is no step") in run.notes
    alone = kineto.parse(kineto_trace(tmp_path / "alone.json", events[2:]))
    assert alone.table("steps").empty and alone.meta.empty is not None


def test_a_closing_profiler_step_holding_only_freed_memory_is_no_step(tmp_path: Path) -> None:
    """The runner's DDP ranks under profile_memory=True (schedule(wait=1, warmup=1, active=4),
    6 steps): ProfilerStep#6 lasted 68.4 ms holding no operator, only the 4 ``[memory]``
    events of the CPU allocator releasing tensors as the profiler stopped. Taken for a step, it
    made each step's 2 all-reduces read '1.6 all-reduces per step' and its emptiness joined
    the per-step figures."""
    memory = [{"ph": "i", "s": "t", "name": "[memory]", "pid": TRAINING_PID,
               "tid": TRAINING_PID, "ts": 5000 + 10 * i,
               "args": {"Device Type": 0, "Device Id": -1, "Bytes": -4096}} for i in range(4)]
    events = [event for i in range(2) for event in (
        cpu_event(f"ProfilerStep#{2 + i}", 1000 + 2000 * i, 1900, cat="user_annotation"),
        cpu_event("aten::mm", 1010 + 2000 * i, 1800))]
    events += [cpu_event("ProfilerStep#4", 5000, 68_400, cat="user_annotation"), *memory]
    run = _analyzed(kineto_trace(tmp_path / "rank0.json", events))
    assert run.metrics.steps is not None and run.metrics.steps.count == 2
    assert run.metrics.steps.mean_ns == 1_900_000
    assert ("rank0.json: ProfilerStep#4, the last step span (68.4 ms), holds nothing: "
            "prof.step() opened it as the profiler stopped, so it is no step") in run.notes


def test_annotations_that_count_the_passes_are_the_steps(tmp_path: Path) -> None:
    """An inference loop annotated record_function(f"batch {i}"), no ProfilerStep nor
    optimizer: each name differs by its counter, so the annotations are grouped with their
    numbers masked (as NVTX ranges are) and are the steps; aten::addmm repeats as often and
    takes more time, but it is an operator. The last batch's addmm runs after its annotation:
    its pass goes on past it, so it is no step."""
    events = []
    for i in range(4):
        start = 1000 * i
        events += [cpu_event(f"batch {i}", start, 300, cat="user_annotation"),
                   cpu_event("aten::addmm", start + 400, 500)]
    profile = kineto.parse(kineto_trace(tmp_path / "batches.json", events))
    steps = profile.table("steps")
    assert profile.meta.step_span == "batch #" and steps["origin"].eq("repeated op").all()
    assert steps["start"].tolist() == [1_000_000 * i for i in range(3)]


def _step_labels(path: Path) -> tuple[str, list[str]]:
    """The terminal summary's steps line and the key-metrics labels of the steps' source, each
    label after the JSON's ``steps_marker``."""
    run = _analyzed(path)
    (group,) = [g for g in metric_groups(run.metrics) if g.origin == "kineto"]
    marker = metrics_json(run.metrics)["steps_marker"]
    return _summary_lines(run)[1], [marker] + [row.label for row in group.rows[:3]]


def test_steps_found_without_a_marker_are_called_what_they_are(tmp_path: Path) -> None:
    """Steps found from optimizer steps or a repeated span are no annotated range: the summary
    and the key metrics say what the steps are, from the steps table's origin; steps that
    ProfilerStep spans mark keep their label."""
    optimizer, batches, marked = [], [], []
    for i in range(4):
        start = 1000 * i
        optimizer += [cpu_event("aten::mm", start, 600),
                      cpu_event("Optimizer.step#SGD.step", start + 700, 200)]
        batches += [cpu_event(f"batch {i}", start, 900, cat="user_annotation"),
                    cpu_event("aten::addmm", start + 10, 800)]
        marked += [cpu_event(f"ProfilerStep#{i}", start, 900, cat="user_annotation"),
                   cpu_event("aten::addmm", start + 10, 800)]
    line, labels = _step_labels(kineto_trace(tmp_path / "optimizer.json", optimizer))
    assert line.startswith("  steps: 3 × 1.0 ms optimizer step to optimizer step (kineto, ")
    assert labels == ["optimizer step to optimizer step", "Steps measured",
                      "Mean step (optimizer step to optimizer step)", "Step p50 / p90"]
    line, labels = _step_labels(kineto_trace(tmp_path / "batches.json", batches))
    assert line.startswith("  steps: 4 × 1.0 ms repeated span 'batch #' (kineto, ")
    assert labels[:1] + labels[2:] == ["repeated span 'batch #'",
                                       "Mean step (repeated span 'batch #')", "Step p50 / p90"]
    line, labels = _step_labels(kineto_trace(tmp_path / "marked.json", marked))
    assert line.startswith("  steps: 4 × 0.9 ms annotated range (kineto, ")
    assert labels[:1] + labels[2:] == ["annotated range", "Mean annotated step (its range alone)",
                                       "Annotated step p50 / p90"]


def test_a_cpu_only_run_is_told_of_no_gpu(tmp_path: Path) -> None:
    """A CPU-only training trace (no device events) with a single-process DataLoader and
    convolutions recorded without shapes: the loader evidence says the model waits, not a GPU,
    and the operator checks ask for record_shapes without sending the run to a GPU (the bias
    check reads shapes only)."""
    events = []
    for step in range(4):
        base = 1000.0 * step
        events += [cpu_event(f"ProfilerStep#{step}", base, 1000, cat="user_annotation"),
                   cpu_event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                             base + 1, 300, cat="user_annotation"),
                   cpu_event("aten::conv2d", base + 320, 500),
                   cpu_event("aten::batch_norm", base + 830, 50)]
    run = _analyzed(kineto_trace(tmp_path / "cpu.json", events))
    found = {f.id: f for f in run.findings}
    texts = [e.text for f in run.findings for e in f.evidence]
    assert any(t.endswith("loaded in the training process while the model waits") for t in texts)
    assert not any("GPU waits" in t for t in texts)
    assert found["OP_CHECKS_UNKNOWN"].recommendation.startswith(
        "Profile a few steps with torch.profiler(record_shapes=True): ")


def test_the_top_cpu_operator_is_given_as_a_share_of_the_step(tmp_path: Path) -> None:
    """Four 1 ms steps, each with 0.8 ms of aten::mm: its 3.2 ms over the four steps is 80% of
    step time. The evidence leads with the share and says the time is over every step measured,
    never '3.2 ms' beside a 1 ms step as if it were one step's."""
    events = []
    for step in range(4):
        events += [cpu_event(f"ProfilerStep#{step}", 1000.0 * step, 1000, cat="user_annotation"),
                   cpu_event("aten::mm", 1000.0 * step + 100, 800)]
    finding = {f.id: f for f in _analyzed(kineto_trace(tmp_path / "mm.json", events)).findings}[
        "COMPUTE_BOUND"]
    assert ("top CPU operator by self time aten::mm: 80% of step time (3.2 ms in 4 calls over "
            "the steps measured)") in [e.text for e in finding.evidence]


@pytest.mark.parametrize(("launch", "library"), [("hipLaunchKernel", "RCCL"),
                                                 ("cudaLaunchKernel", "NCCL")])
def test_communication_names_the_library_the_trace_records(tmp_path: Path, launch: str,
                                                           library: str) -> None:
    """Three 10 ms steps, each a 3 ms GEMM then a 4 ms all-reduce kernel named as RCCL keeps
    NCCL's names (``ncclDevKernel_Generic``): launched through HIP (an AMD GPU) the kernels are
    RCCL's, and the finding and the metric row said 'NCCL'; launched through CUDA, NCCL's."""
    events = []
    for k in range(3):
        base = 1000 + 10_000 * k
        events += [cpu_event(f"ProfilerStep#{k}", base, 10_000, cat="user_annotation"),
                   cpu_event(launch, base + 100, 10, cat="cuda_runtime", correlation=10 * k + 1),
                   cpu_event(launch, base + 200, 10, cat="cuda_runtime", correlation=10 * k + 2),
                   device_event("Cijk_Ailk_Bljk_SB_MT64x64x8", base + 300, 3000, device=0,
                                stream=7, correlation=10 * k + 1),
                   device_event("ncclDevKernel_Generic(ncclDevComm*, unsigned long, ncclWork*)",
                                base + 3400, 4000, device=0, stream=9, correlation=10 * k + 2)]
    (run,) = analyze_paths([kineto_trace(tmp_path / "ddp.json", events)], AnalyzeOptions(
        executor=ExecutorOptions(processes=1))).runs
    assert run.metrics.comm is not None and run.metrics.comm.library == library
    finding = next(f for f in run.findings if f.id == "COMM_OVERHEAD")
    assert finding.evidence[0].text.startswith(f"{library} kernels take 40% of step time")
    rows = [row.label for group in metric_groups(run.metrics) for row in group.rows]
    assert f"Communication per step, GPU ({library})" in rows


def _copy_loop(name: str, **copy_args: int) -> list[dict]:
    """Four 1 ms ProfilerStep spans, each copying once (300 µs on the GPU, a copy event named
    ``name`` with ``copy_args``) and then running a 200 µs kernel."""
    events = []
    for i in range(4):
        t = 1000 + 1000 * i
        events += [cpu_event(f"ProfilerStep#{i + 1}", t, 990, cat="user_annotation"),
                   cpu_event("cudaMemcpyAsync", t + 10, 10, cat="cuda_runtime",
                             correlation=900 + i),
                   device_event(name, t + 20, 300, cat="gpu_memcpy", device=0, stream=7,
                                correlation=900 + i, **copy_args),
                   cpu_event("cudaLaunchKernel", t + 350, 10, cat="cuda_runtime",
                             correlation=100 + i),
                   device_event("gemm_kernel", t + 360, 200, device=0, stream=7,
                                correlation=100 + i)]
    return events


def _h2d_row(run: RunAnalysis) -> str:
    """The key-metrics value of the host-to-device copies."""
    return next(row.value for group in metric_groups(run.metrics) for row in group.rows
                if row.label == "Host-to-device copies")


def test_host_to_device_copies_without_a_size_are_not_none(tmp_path: Path) -> None:
    """Four pageable HtoD copies (1.2 ms) whose events carry no ``bytes``: the breakdown gave
    them 300 µs of each step, and the key metrics said 'Host-to-device copies: none recorded'
    (the row asked for bytes) and 0 B from pageable memory. They are copies of unrecorded size,
    whose pageable share is unknown; with one of the four sized, 'at least' its bytes."""
    run = _analyzed(kineto_trace(tmp_path / "unsized.json",
                                 _copy_loop("Memcpy HtoD (Pageable -> Device)")))
    copies = run.metrics.copies
    assert copies is not None
    assert (copies.h2d_unsized, copies.h2d_bytes, copies.h2d_ns) == (4, 0, 1_200_000)
    assert copies.h2d_pageable_bytes is None and copies.h2d_pinned_bytes is None
    why = "the profile records no size for 4 of its 4 host-to-device copies"
    assert copies.h2d_kinds_unknown == why
    assert _h2d_row(run) == (
        f"size unrecorded in 1.2 ms (from pageable or pinned memory: unknown, {why})")
    assert "PAGEABLE_MEMCPY" not in {f.id for f in run.findings}
    assert metrics_json(run.metrics)["h2d_unsized_copies"] == 4
    events = _copy_loop("Memcpy HtoD (Pageable -> Device)")
    events[2]["args"]["bytes"] = 1 << 20
    one = _analyzed(kineto_trace(tmp_path / "one_sized.json", events))
    assert _h2d_row(one).startswith("at least 1.0 MiB in 1.2 ms (from pageable or pinned "
                                    "memory: unknown, the profile records no size for 3 of its "
                                    "4 host-to-device copies)")


def _split_model(dataparallel: bool) -> list[dict]:
    """One process, three 1 ms steps, each an aten::mm launching a 250 µs kernel on GPU 0 then
    one on GPU 1; with nn.DataParallel's Scatter and Gather around them if asked."""
    events = []
    for n in range(3):
        at = 1000 + 1000 * n
        events.append(cpu_event(f"ProfilerStep#{n + 1}", at, 990, cat="user_annotation"))
        if dataparallel:
            events += [cpu_event("Scatter", at + 5, 10), cpu_event("Gather", at + 900, 10)]
        for device in (0, 1):
            correlation = 10 * n + device + 1
            events += [cpu_event("aten::mm", at + 20 + 300 * device, 50),
                       cpu_event("cudaLaunchKernel", at + 30 + 300 * device, 10,
                                 cat="cuda_runtime", correlation=correlation),
                       device_event("gemm_kernel", at + 50 + 300 * device, 250, pid=device,
                                    device=device, stream=7, correlation=correlation)]
    return events


@pytest.mark.parametrize("dataparallel", [False, True])
def test_one_process_on_two_gpus_is_dataparallel_only_with_its_functions(
        tmp_path: Path, dataparallel: bool) -> None:
    """One process, three 1 ms steps, each an aten::mm on GPU 0 then one on GPU 1 (a model
    split over two GPUs: layers .to('cuda:1'), a device_map), operators recorded: the report
    said 'The model uses nn.DataParallel' (high) and advised DDP, from the two GPUs alone.
    DataParallel's forward runs its Scatter and Gather functions, which the trace would
    record beside the operators: with them it is DataParallel; without, it is not."""
    run = _analyzed(kineto_trace(tmp_path / "split.json", _split_model(dataparallel)))
    assert run.metrics.max_devices_per_process == 2
    assert ("DATAPARALLEL_NOT_DDP" in {f.id for f in run.findings}) is dataparallel


@pytest.mark.parametrize("shapes", [True, False])
def test_a_rocm_trace_recording_dtypes_is_not_told_to_record_them(tmp_path: Path,
                                                                   shapes: bool) -> None:
    """An MI300X trace under record_shapes=True (bf16 matmuls launching a hipBLASLt GEMM, as
    the TraceLens MI300X trace records them): the precision check is unknown because the
    check does not model AMD matrix cores, and the fix said 'Profile a few steps with
    torch.profiler(record_shapes=True) on the GPU', which the trace already did and which
    answers nothing there. Without the dtypes recorded, that is still the fix."""
    inputs = {"Input type": ["c10::BFloat16", "c10::BFloat16"],
              "Input Dims": [[512, 512], [512, 512]]} if shapes else {}
    events = []
    for i in range(4):
        t = 1000 + 1000 * i
        events += [cpu_event(f"ProfilerStep#{i + 1}", t, 990, cat="user_annotation"),
                   cpu_event("aten::mm", t + 10, 100, **inputs),
                   cpu_event("hipLaunchKernel", t + 20, 10, cat="cuda_runtime",
                             correlation=100 + i),
                   device_event("Cijk_Ailk_Bljk_BBS_BH_MT128x128x64_MI32x32x8x1", t + 50, 800,
                                device=0, stream=7, correlation=100 + i)]
    run = _analyzed(kineto_trace(tmp_path / "mi300x.json", events, deviceProperties=[
        {"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 205822885888}]))
    finding = {f.id: f for f in run.findings}["OP_CHECKS_UNKNOWN"]
    assert finding.evidence[0].text == (
        "fp32 matmuls/convolutions on tensor cores: unknown, " + (
            "the trace is from a ROCm (AMD) GPU, whose matrix cores this check does not model"
            if shapes else "the trace's 4 matmul/convolution calls carry no 'Input type' "
            "(torch.profiler ran without record_shapes=True)"))
    assert finding.recommendation == (
        "No profiling option answers these checks: the trace records the operators' input "
        "dtypes; why each is unknown is said above." if shapes else
        "Profile a few steps with torch.profiler(record_shapes=True) on the GPU: the "
        "operators' input dtypes and shapes answer these checks.")


def test_a_trace_whose_every_record_is_dropped_is_not_said_to_trace_nothing(
        tmp_path: Path) -> None:
    """Every timed event of a trace at a negative time (Kineto clamps its own to the base time;
    a converted or edited trace may not): all are dropped as impossible, and the verdict said
    'the profiler traced none of them', which the file contradicts. It says they may be among
    the records dropped."""
    events = [cpu_event("ProfilerStep#1", -5000.5, 990, cat="user_annotation"),
              cpu_event("aten::mm", -4990, 100),
              cpu_event("cudaLaunchKernel", -4980, 10, cat="cuda_runtime", correlation=1),
              device_event("gemm_kernel", -4950, 600, device=0, stream=7, correlation=1)]
    profile = kineto.parse(kineto_trace(tmp_path / "negative.json", events))
    assert profile.meta.dropped == {"ts outside the possible range": 4}
    assert profile.meta.empty == (
        "nothing to analyse: no kernels, copies, operators, ranges, steps or lines recorded: "
        "the profiler traced none of them, or the capture ended before the first iteration, or "
        "they are among the 4 records dropped for impossible values (see the notes)")


def test_two_gpus_windows_are_said_to_be_two(tmp_path: Path) -> None:
    """The split model's two GPUs, each busy 750 µs of the 2.99 ms of steps: the GPU window is
    their windows summed (5.98 ms), and the report read 'GPU busy 25.1% of 6.0 ms' and 'cover
    1.5 ms of the 6.0 ms GPU window' of a 3 ms profile; it says 2 GPUs × 3.0 ms, and the JSON
    the devices its window adds up."""
    run = _analyzed(kineto_trace(tmp_path / "split.json", _split_model(False)))
    gpu = run.metrics.gpu
    assert gpu is not None and (gpu.window_ns, gpu.busy_ns) == (5_980_000, 1_500_000)
    rows = {row.label: row.value for group in metric_groups(run.metrics) for row in group.rows}
    assert rows["GPU busy"] == "25.1% of 2 GPUs × 3.0 ms (1.5 ms busy)"
    low = {f.id: f for f in run.findings}["LOW_GPU_UTIL"]
    assert low.evidence[0].text == ("kernels, copies and memsets cover 1.5 ms of the 2 GPUs × "
                                    "3.0 ms GPU window")
    assert (metrics_json(run.metrics)["gpu_window_ms"],
            metrics_json(run.metrics)["gpu_window_devices"]) == (5.98, 2)
