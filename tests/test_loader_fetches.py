"""Which DataLoader fetches are the training loop's wait, by one rule for every format
(reports.analysis.dataloader.training_fetches), and which fetch is no step: hand-built Kineto
traces and nsys exports (torch's spans as the NVTX ranges emit_nvtx opens) of a validation
loop run inside the profiled window, and of loops that end or break off after their last
``__next__``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from profreport.executors import ExecutorOptions
from profreport.parsers import kineto, nsys
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.closing import closing_fetch
from profreport.reports.analysis.dataloader import training_fetches
from profreport.reports.analysis.results import RunAnalysis
from profreport.reports.analysis.steps import step_label, step_windows
from profreport.reports.render.json import render_json
from profreport.reports.render.markdown import render_markdown

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TRAINING_PID, cpu_event, kineto_trace, write_nsys_export  # noqa: E402

TRAIN_FETCH = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
EVAL_FETCH = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _analyzed(path: Path) -> RunAnalysis:
    """The one run ``profreport analyze PATH`` makes of a file (in this process)."""
    (run,) = analyze_paths([path], AnalyzeOptions(executor=ExecutorOptions(processes=1))).runs
    return run


def _training_step(number: int, base: int, length: int, fetch: int = 1000) -> list[dict]:
    """One ProfilerStep of ``length`` µs from ``base``: a ``fetch`` µs fetch of the training
    loader, the forward, the backward on autograd's device thread, and the optimizer step."""
    work = base + fetch - 1000  # where the forward's work is laid out from
    backward = cpu_event("autograd::engine::evaluate_function: MmBackward0", work + 4200, 2000)
    backward["tid"] = TRAINING_PID + 1
    return [cpu_event(f"ProfilerStep#{number}", base, length, cat="user_annotation"),
            cpu_event(TRAIN_FETCH, base + 10, fetch, cat="user_annotation"),
            cpu_event("aten::mm", work + 1100, 3000), backward,
            cpu_event("Optimizer.step#SGD.step", work + 6300, 500, cat="user_annotation")]


def test_a_validation_loop_inside_the_steps_is_no_dataloader_wait(tmp_path: Path) -> None:
    """Four training steps of 10 ms each waiting 1 ms for a batch (4 of 60 ms: 6.7%), the last
    one then evaluating: 8 fetches of 2 ms from a single-process validation loader, each
    followed by a forward alone (no_grad: no backward, no optimizer step), and the fetch that
    ended that loop. Counted as wait, they made the run read 33% DataLoader wait, loader-bound,
    and the loader both kinds of iterator."""
    events = [e for k in range(3) for e in _training_step(k, 1000 + 10_000 * k, 10_000)]
    events += _training_step(3, 31_000, 30_000)
    for j in range(8):
        at = 38_000 + 2400 * j
        events += [cpu_event(EVAL_FETCH, at, 2000, cat="user_annotation"),
                   cpu_event("aten::mm", at + 2000, 400)]
    events.append(cpu_event(EVAL_FETCH, 38_000 + 2400 * 8, 50, cat="user_annotation"))
    path = kineto_trace(tmp_path / "train.pt.trace.json", events)
    profile = kineto.parse(path)
    assert len(profile.table("dataloader")) == 13  # the parser's table: every fetch recorded
    assert len(training_fetches(profile).fetches) == 4
    run = _analyzed(path)
    assert run.metrics.loader_in_process is False  # the training loader's worker iterator
    assert run.metrics.steps is not None and run.metrics.steps.count == 4
    assert run.metrics.dataloader_fraction == pytest.approx(4000 / 60_000)
    assert run.verdict != "loader-bound"
    assert ("train.pt.trace.json: 9 of 13 DataLoader fetches (16.1 ms) fed no training: no "
            "backward pass or optimizer step follows any of them before the next fetch (an "
            "evaluation loop's, or the last fetch of a loop that ended or broke off after it), so "
            "they are no "
            "DataLoader wait") in run.notes


def _inference(with_profiler_steps: bool) -> list[dict]:
    """An inference loop over 4 batches (a 200 µs fetch, then a 600 µs forward, every 1 ms)
    and the 30 µs fetch that raised StopIteration; with ``with_profiler_steps``, each pass in
    the ProfilerStep span prof.step() opened, the last one holding that fetch alone."""
    events = []
    for k in range(5):
        base = 1000 * k
        if with_profiler_steps:
            events.append(cpu_event(f"ProfilerStep#{k}", base, 1000 if k < 4 else 40,
                                    cat="user_annotation"))
        events.append(cpu_event(EVAL_FETCH, base + 1, 200 if k < 4 else 30,
                                cat="user_annotation"))
        if k < 4:
            events.append(cpu_event("aten::addmm", base + 250, 600))
    return events


@pytest.mark.parametrize(("with_profiler_steps", "label", "number"),
                         [(True, "ProfilerStep#4, the last step (40.0 µs)", 4),
                          (False, "step 5, the last step (30.0 µs)", 5)])
def test_the_fetch_that_ends_the_loop_is_no_step(tmp_path: Path, with_profiler_steps: bool,
                                                 label: str, number: int) -> None:
    """The last ``__next__`` of an inference loop raised StopIteration: no batch, no work
    after it. In its own ProfilerStep span, or as the last occurrence of the fetch span that
    marks the steps (no ProfilerStep, no optimizer), it was a fifth step of 30-40 µs (a step
    of nothing but waiting: 4 steps of 1 ms and one of a fetch). The four passes are the steps,
    waiting 200 µs of each 1 ms: 20%. The parser's table keeps the fifth step; the step
    windows leave it out, named with why."""
    path = kineto_trace(tmp_path / "infer.json", _inference(with_profiler_steps))
    profile = kineto.parse(path)
    assert len(profile.table("steps")) == 5
    windows = step_windows(profile)
    assert windows is not None and (windows.range_starts // 1_000_000).tolist() == [0, 1, 2, 3]
    assert windows.closing == number and windows.left_out[-1][0] == number
    run = _analyzed(path)
    assert run.metrics.steps is not None and run.metrics.steps.count == 4
    assert run.metrics.dataloader_fraction == pytest.approx(0.2)
    assert (f"infer.json: {label}, holds only a DataLoader fetch (30.0 µs) and no work is "
            "recorded after it before the trace ends, so it is no step, and its fetch no "
            "DataLoader wait") in run.notes
    assert ("infer.json: the trace records no backward pass or optimizer step, so nothing "
            "tells a training loop's DataLoader fetches from another loop's (a validation "
            "loop's): the DataLoader wait counts every fetch inside the steps, whichever "
            "loop's") in run.notes


def test_the_fetch_that_ends_the_loop_is_no_step_whatever_marks_it(tmp_path: Path) -> None:
    """The inference loop's passes in a user's ``step N`` ranges, the last one (40 µs) opened
    before the fetch that raised StopIteration: the range itself counted as work, so it was a
    fifth step. And in ProfilerStep spans followed by the empty span prof.step() opens as the
    profiler stops: dropping that span left ProfilerStep#4, holding only the fetch, a fifth
    step. Both are four passes now, each with its note."""
    events = [{**e, "name": f"step {e['name'][len('ProfilerStep#'):]}"}
              if e["name"].startswith("ProfilerStep#") else e for e in _inference(True)]
    run = _analyzed(kineto_trace(tmp_path / "user.json", events))
    assert run.metrics.steps is not None and run.metrics.steps.count == 4
    assert ("user.json: step 4, the last step (40.0 µs), holds only a DataLoader fetch (30.0 "
            "µs) and no work is recorded after it before the trace ends, so it is no step, and "
            "its fetch no DataLoader wait") in run.notes
    events = [*_inference(True), cpu_event("ProfilerStep#5", 4100, 20, cat="user_annotation")]
    run = _analyzed(kineto_trace(tmp_path / "stopped.json", events))
    assert run.metrics.steps is not None and run.metrics.steps.count == 4
    notes = [note for note in run.notes if "ProfilerStep#" in note]
    assert [note.split(",")[0] for note in notes] == ["stopped.json: ProfilerStep#5",
                                                      "stopped.json: ProfilerStep#4"]
    assert "holds nothing" in notes[0] and "holds only a DataLoader fetch (30.0 µs)" in notes[1]


def test_a_last_step_that_works_after_its_fetch_is_a_step(tmp_path: Path) -> None:
    """A profiler stopped by its schedule after a pass whose fetch returned a batch: the work
    after the fetch makes it a step, whatever its span holds; in ProfilerStep spans it is the
    fourth step. Where the fetch span marks the steps, that work after the last fetch says its
    pass goes on past it: its end is unrecorded, so the parser leaves it out (it was a fourth
    step of the 200 µs fetch alone) and the three passes before it are the steps."""
    marked = [e for e in _inference(with_profiler_steps=True) if e["ts"] < 4000]
    profile = kineto.parse(kineto_trace(tmp_path / "marked.json", marked))
    windows = step_windows(profile)
    assert closing_fetch(profile) is None and windows is not None and windows.count == 4
    events = _inference(with_profiler_steps=False)[:-1]
    profile = kineto.parse(kineto_trace(tmp_path / "cut.json", events))
    windows = step_windows(profile)
    assert closing_fetch(profile) is None and windows is not None and windows.count == 3
    assert profile.meta.notes[-1] == (
        f"the last '{EVAL_FETCH}' span (200.0 µs) is no step: its process records after it "
        "what every earlier pass recorded past its span ('aten::addmm'), so its pass goes on "
        "past it and its end is unrecorded")


def test_a_loop_that_breaks_off_after_a_fetch_keeps_its_steps(tmp_path: Path) -> None:
    """``for i, batch in enumerate(loader): if i == 4: break``: four training passes of 10 ms,
    then a 1 ms fetch that returned a batch, on which the loop broke off, in the ProfilerStep
    span prof.step() opened. The note read "it returned no batch": the trace shows only a fetch
    with no work after it before it ends. The four passes stay the steps, the last one too,
    each waiting 1 ms of its 10; where the optimizer's steps mark the steps (no ProfilerStep
    span), the fetch lies after the last of them, which stays a step."""
    events = [e for k in range(4) for e in _training_step(k, 1000 + 10_000 * k, 10_000)]
    events += [cpu_event("ProfilerStep#4", 41_000, 1100, cat="user_annotation"),
               cpu_event(TRAIN_FETCH, 41_010, 1000, cat="user_annotation")]
    run = _analyzed(kineto_trace(tmp_path / "break.json", events))
    assert run.metrics.steps is not None
    assert [n for n, _ in run.metrics.steps.range_by_number] == [0, 1, 2, 3]
    assert run.metrics.dataloader_fraction == pytest.approx(0.1)
    assert ("break.json: ProfilerStep#4, the last step (1.1 ms), holds only a DataLoader fetch "
            "(1.0 ms) and no work is recorded after it before the trace ends, so it is no step, "
            "and its fetch no DataLoader wait") in run.notes
    assert not any("returned no batch" in note for note in run.notes)
    spans = [e for e in events if not e["name"].startswith("ProfilerStep#")]
    by_optimizer = kineto.parse(kineto_trace(tmp_path / "optimizer.json", spans))
    steps = by_optimizer.table("steps")
    assert steps["number"].tolist() == [1, 2, 3] and int(steps["end"].iloc[-1]) == 37_800_000
    assert closing_fetch(by_optimizer) is None


def test_an_inference_loop_that_breaks_off_after_a_fetch_keeps_its_passes(
        tmp_path: Path) -> None:
    """The inference loop broken off on its fifth batch, its fetch (200 µs, like the others)
    returning one, the fetch span marking the steps: the four passes are the steps, and the
    note says only what the trace shows."""
    events = _inference(with_profiler_steps=False)[:-1]
    events.append(cpu_event(EVAL_FETCH, 4001, 200, cat="user_annotation"))
    run = _analyzed(kineto_trace(tmp_path / "break.json", events))
    assert run.metrics.steps is not None and run.metrics.steps.count == 4
    assert run.metrics.dataloader_fraction == pytest.approx(0.2)
    assert ("break.json: step 5, the last step (200.0 µs), holds only a DataLoader fetch (200.0 "
            "µs) and no work is recorded after it before the trace ends, so it is no step, and "
            "its fetch no DataLoader wait") in run.notes


def _evaluation_step(number: int, base: int) -> list[dict]:
    """One 2 ms ProfilerStep of an evaluation loop that calls prof.step() too: a 500 µs fetch
    of the validation loader and a 1 ms forward, no backward, no optimizer step."""
    return [cpu_event(f"ProfilerStep#{number}", base, 2000, cat="user_annotation"),
            cpu_event(EVAL_FETCH, base + 10, 500, cat="user_annotation"),
            cpu_event("aten::mm", base + 600, 1000)]


def test_a_step_that_only_evaluates_is_left_out_of_the_per_step_figures(tmp_path: Path) -> None:
    """Three training steps of 10 ms (a 1 ms fetch, forward, backward, optimizer step), then
    16 ProfilerSteps of 2 ms over the validation loop (a fetch and a forward each): they counted
    as training steps, and step 0, 10 ms against their 2 ms median, as start-up: 18 steps of
    2.9 ms mean. The 16 evaluation steps are left out now, named with why, and start-up is
    judged among the training steps: 3 steps of 10 ms, none start-up."""
    events = [e for k in range(3) for e in _training_step(k, 1000 + 10_000 * k, 10_000)]
    events += [e for k in range(16) for e in _evaluation_step(3 + k, 31_000 + 2000 * k)]
    path = kineto_trace(tmp_path / "train.pt.trace.json", events)
    m = _analyzed(path).metrics
    assert m.steps is not None and m.shape is not None
    assert (m.steps.count, m.steps.mean_ns, m.steps.wall_mean_ns) == (3, 10_000_000, 10_000_000)
    assert [number for number, _ in m.steps.range_by_number] == [0, 1, 2]
    assert m.shape.evaluating == tuple(range(3, 19)) and m.shape.warmup is None
    assert m.dataloader_fraction == pytest.approx(0.1)
    markdown = render_markdown(analyze_paths([path], AnalyzeOptions()))
    assert ("Evaluation-only steps | 16 steps (no backward pass or optimizer step: left out of "
            "the per-step figures)") in markdown
    data = json.loads(render_json(analyze_paths([path], AnalyzeOptions())))
    assert data["runs"][0]["metrics"]["step_shape"]["evaluating"] == list(range(3, 19))


@pytest.mark.parametrize("training", [False, True])
def test_without_a_backward_pass_no_step_is_told_to_evaluate(tmp_path: Path,
                                                             training: bool) -> None:
    """Where no step records the backward pass nothing tells evaluating from training: an
    inference loop's steps all count, and so do steps of which only some record an optimizer
    step (it may step once every few passes, accumulating gradients)."""
    events = [e for k in range(6) for e in _evaluation_step(k, 1000 + 2000 * k)]
    if training:
        events += [cpu_event("Optimizer.step#SGD.step", 1000 + 2000 * k + 1700, 200,
                             cat="user_annotation") for k in (1, 3, 5)]
    m = _analyzed(kineto_trace(tmp_path / "loop.json", events)).metrics
    assert m.steps is not None and m.shape is not None
    assert (m.steps.count, m.shape.evaluating) == (6, ())


def test_the_last_training_step_before_evaluation_steps_is_a_whole_window(
        tmp_path: Path) -> None:
    """Six training steps of 10 ms, the last waiting 41 ms for its batch (a 50 ms step), then
    16 evaluation-only ProfilerSteps. The last kept window was left out of the spread as if it
    were only its own range, though the evaluation steps after it make it reach the next
    recorded step's start (whole): the spread read 5 windows of 10 ms and no stall, the 41 ms
    wait averaged into the mean alone. It counts 6 windows now, and the stall is step 5."""
    events = [e for k in range(5) for e in _training_step(k, 1000 + 10_000 * k, 10_000)]
    events += _training_step(5, 51_000, 50_000, fetch=41_000)
    events += [e for k in range(16) for e in _evaluation_step(6 + k, 101_000 + 2000 * k)]
    m = _analyzed(kineto_trace(tmp_path / "train.pt.trace.json", events)).metrics
    assert m.steps is not None and m.shape is not None and m.shape.dataloader_wait is not None
    assert m.shape.evaluating == tuple(range(6, 22)) and m.shape.warmup is None
    assert m.steps.window_ns == (10_000_000,) * 5 + (50_000_000,)
    assert (m.shape.step_window.count, m.shape.step_window.max_ns) == (6, 50_000_000)
    assert [(o.number, o.value_ns) for o in m.shape.dataloader_wait.outliers] == [
        (5, 41_000_000)]


def test_start_up_is_judged_against_the_last_training_step_when_evaluation_follows(
        tmp_path: Path) -> None:
    """Training steps of 25, 10 and 30 ms (the last waiting 21 ms for its batch), then 16
    evaluation-only steps: start-up was judged against step 1 alone (the last window taken
    for its own range), so step 0, 2.5 times it, was start-up and left out. Step 2's window is
    whole (the evaluation steps follow it): the median of 10 and 30 ms is 20 ms, step 0 is
    within the loop's spread, and all three steps count."""
    events = _training_step(0, 1000, 25_000, fetch=16_000)
    events += _training_step(1, 26_000, 10_000)
    events += _training_step(2, 36_000, 30_000, fetch=21_000)
    events += [e for k in range(16) for e in _evaluation_step(3 + k, 66_000 + 2000 * k)]
    m = _analyzed(kineto_trace(tmp_path / "train.pt.trace.json", events)).metrics
    assert m.steps is not None and m.shape is not None
    assert m.shape.warmup is None
    assert [number for number, _ in m.steps.range_by_number] == [0, 1, 2]


#: A microsecond in the ns of an nsys export.
US = 1000


def _emitted(name: str, op_id: int) -> str:
    """A record_function's name as torch.autograd.profiler.emit_nvtx names its NVTX range."""
    return f"{name}, op_id = {op_id}"


def _nvtx_training_step(number: int, base: int, length: int,
                        recorded: bool = True) -> list[tuple]:
    """The NVTX ranges of one training step of ``length`` µs from ``base`` under emit_nvtx: the
    user's ``step N`` range, a 1 ms fetch of the training loader, the forward and, when
    ``recorded``, the backward pass and the optimizer step (emit_nvtx off for them: none)."""
    at, op = base * US, 10 * number
    ranges = [(at, at + length * US, f"step {number}"),
              (at + 10 * US, at + 1010 * US, _emitted(TRAIN_FETCH, op + 1)),
              (at + 1100 * US, at + 4100 * US, _emitted(f"aten::mm, seq = {number}", op + 2))]
    if recorded:
        ranges += [(at + 4200 * US, at + 6200 * US, _emitted(
                       f"autograd::engine::evaluate_function: MmBackward0, seq = {number}",
                       op + 3)),
                   (at + 6300 * US, at + 6800 * US, _emitted("Optimizer.step#SGD.step", op + 4))]
    return ranges


def _nvtx_validation_loop(base: int, recorded: bool = True) -> list[tuple]:
    """Inside the last training step: 8 fetches of 2 ms from a single-process validation
    loader from ``base`` µs, each followed by a forward alone (no_grad), and the 50 µs fetch
    that ended that loop, after 3 training steps of 10 ms and a 4th of 30 ms."""
    ranges = [r for k in range(3) for r in _nvtx_training_step(k, 1000 + 10_000 * k, 10_000,
                                                                 recorded)]
    ranges += _nvtx_training_step(3, 31_000, 30_000, recorded)
    for j in range(8):
        at = (base + 2400 * j) * US
        ranges += [(at, at + 2000 * US, _emitted(EVAL_FETCH, 100 + 2 * j)),
                   (at + 2000 * US, at + 2400 * US, _emitted(f"aten::mm, seq = {50 + j}",
                                                             101 + 2 * j))]
    at = (base + 2400 * 8) * US
    return sorted([*ranges, (at, at + 50 * US, _emitted(EVAL_FETCH, 200))])


def test_a_validation_loop_in_an_nsys_capture_is_no_dataloader_wait(tmp_path: Path) -> None:
    """The Kineto test's loop captured by nsys under emit_nvtx: torch's spans are NVTX ranges
    (``enumerate(DataLoader)#...__next__, op_id = 12``). The nsys path took every fetch range
    for training wait: 20.1 of 60 ms, 33%, loader-bound. The rule the Kineto path follows
    tells the 9 validation fetches now: 4 ms of 60, 6.7%."""
    path = write_nsys_export(tmp_path / "train.sqlite", [], _nvtx_validation_loop(38_000))
    run = _analyzed(path)
    assert run.metrics.steps is not None and run.metrics.steps.count == 4
    assert run.metrics.dataloader_fraction == pytest.approx(4000 / 60_000)
    assert run.verdict != "loader-bound"
    assert run.metrics.loader_in_process is False
    assert ("train.sqlite: 9 of 13 DataLoader fetches (16.1 ms) fed no training: no backward "
            "pass or optimizer step follows any of them before the next fetch (an evaluation "
            "loop's, or the last fetch of a loop that ended or broke off after it), so they are no "
            "DataLoader wait") in run.notes


def test_an_nsys_capture_of_no_backward_range_keeps_every_fetch(tmp_path: Path) -> None:
    """The same loop captured without emit_nvtx around the backward pass and the optimizer
    step: nothing the capture records tells the validation fetches from the training ones, so
    every fetch counts (20.1 ms of the 60 ms steps), and a note says why."""
    path = write_nsys_export(tmp_path / "train.sqlite", [],
                             _nvtx_validation_loop(38_000, recorded=False))
    run = _analyzed(path)
    assert run.metrics.dataloader_fraction == pytest.approx(20_050 / 60_000)
    assert ("train.sqlite: the capture records no backward pass or optimizer step (no NVTX "
            "range of either, as torch.autograd.profiler.emit_nvtx records them), so nothing "
            "tells a training loop's DataLoader fetches from another loop's (a validation "
            "loop's): the DataLoader wait counts every fetch inside the steps, whichever "
            "loop's") in run.notes


def test_the_runners_fetch_ranges_need_no_note(tmp_path: Path) -> None:
    """profreport's runner opens its ``dataloader`` range only around a fetch for training (any
    other it names ``dataloader (not training)``): a capture of those ranges and no backward
    range counts them all, with no note that nothing tells them apart."""
    ranges = [(k * 10_000 * US, (k + 1) * 10_000 * US, f"step {k}") for k in range(4)]
    ranges += [(k * 10_000 * US + 10, k * 10_000 * US + 1000 * US, "dataloader")
               for k in range(4)]
    run = _analyzed(write_nsys_export(tmp_path / "runner.sqlite", [], sorted(ranges)))
    assert run.metrics.dataloader_fraction == pytest.approx((1000 * US - 10) / (10_000 * US))
    assert not any("records no backward pass" in note for note in run.notes)


def test_evaluation_only_steps_of_an_nsys_capture_are_left_out(tmp_path: Path) -> None:
    """Three training steps of 10 ms, then 16 ``step N`` ranges of 2 ms over the validation
    loop (a fetch and a forward each) in an emit_nvtx capture: the backward ranges tell the 16
    evaluation-only steps, left out as in a Kineto trace, and their fetches are no wait."""
    ranges = [r for k in range(3) for r in _nvtx_training_step(k, 1000 + 10_000 * k, 10_000)]
    for k in range(3, 19):
        at = (31_000 + 2000 * (k - 3)) * US
        ranges += [(at, at + 2000 * US, f"step {k}"),
                   (at + 10 * US, at + 510 * US, _emitted(EVAL_FETCH, 100 + k)),
                   (at + 600 * US, at + 1600 * US, _emitted("aten::mm", 200 + k))]
    run = _analyzed(write_nsys_export(tmp_path / "train.sqlite", [], sorted(ranges)))
    m = run.metrics
    assert m.steps is not None and m.shape is not None
    assert (m.steps.count, m.steps.mean_ns) == (3, 10_000_000)
    assert m.shape.evaluating == tuple(range(3, 19)) and m.shape.warmup is None
    assert m.dataloader_fraction == pytest.approx(0.1)
    assert ("train.sqlite: 16 of 19 DataLoader fetches (8.0 ms) fed no training: no backward "
            "pass or optimizer step follows any of them before the next fetch (an evaluation "
            "loop's, or the last fetch of a loop that ended or broke off after it), so they are no "
            "DataLoader wait") in run.notes


def _nsys_loop_to_its_end(fetch: str) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """The NVTX ranges, kernels and runtime calls of a loop whose ``step N`` range opens before
    its fetch (``fetch``: torch's emit_nvtx name, the runner's, a user's), as profreport's
    runner annotates it: four steps of 9 ms, 10 ms apart (a 990 µs fetch, a launch, a 6.8 ms
    kernel), then ``step 4`` (500 µs), opened for the fetch that raised StopIteration (390 µs),
    closed as the loop ended, nothing after it."""
    ranges, kernels, runtime = [], [], []
    for k in range(4):
        at = k * 10_000 * US
        ranges += [(at, at + 9000 * US, f"step {k}"), (at + 10 * US, at + 1000 * US, fetch)]
        runtime.append((at + 1100 * US, at + 1150 * US, k + 1, "cudaLaunchKernel"))
        kernels.append((at + 1200 * US, at + 8000 * US, k + 1, "gemm_kernel"))
    ranges += [(40_000 * US, 40_500 * US, "step 4"), (40_010 * US, 40_400 * US, fetch)]
    return ranges, kernels, runtime


@pytest.mark.parametrize("fetch", [_emitted(EVAL_FETCH, 9), "dataloader", "data_loading"])
def test_the_fetch_that_ends_the_loop_in_an_nsys_capture_is_no_step(tmp_path: Path,
                                                                   fetch: str) -> None:
    """The last ``step N`` range of an nsys capture holds only the fetch that raised
    StopIteration: it was a fifth step of 500 µs beside four of 9 ms (the mean step 7.3 ms,
    the DataLoader wait 8.35 of 40.5 ms, 20.6%). It is no step now, as in a Kineto trace: four
    steps of 9 ms, whose wait is their fetches, 3.96 of 39 ms, 10.2% (the 1 ms between the
    ranges is no fetch: the capture records the fetches, inside the ranges); the notes say so,
    the phases' too. The parser's table keeps it."""
    ranges, kernels, runtime = _nsys_loop_to_its_end(fetch)
    path = write_nsys_export(tmp_path / "infer.sqlite", kernels, sorted(ranges), runtime)
    run = _analyzed(path)
    assert run.metrics.steps is not None
    assert (run.metrics.steps.count, run.metrics.steps.mean_ns) == (4, 9_000_000)
    assert [n for n, _ in run.metrics.steps.range_by_number] == [0, 1, 2, 3]
    assert run.metrics.dataloader_fraction == pytest.approx(4 * 990 / 39_000)
    assert ("infer.sqlite: step 4, the last step (500.0 µs), holds only a DataLoader fetch "
            "(390.0 µs) and no work is recorded after it before the trace ends, so it is no step, "
            "and its fetch no DataLoader wait") in run.notes
    assert any(note.startswith(
        "infer.sqlite: the 5 steps are NVTX ranges named as steps; inside each of the 4 steps "
        "the per-step figures count (step 4, only a DataLoader fetch, no work after it, left "
        "out): ") and note.endswith(" 1.0 ms per step") for note in run.notes)
    profile = nsys.parse(path)
    assert len(profile.table("steps")) == 5
    windows = step_windows(profile)
    assert windows is not None and windows.closing == 4
    assert step_label(4, windows) == "step 4 (left out: only a DataLoader fetch, no work after it)"


@pytest.mark.parametrize("after", ["runtime", "osrt"])
def test_work_after_the_last_fetch_of_an_nsys_capture_keeps_its_step(tmp_path: Path,
                                                                     after: str) -> None:
    """The same loop, a CUDA runtime call (a synchronize) or an OS runtime call (a write,
    ``--trace=osrt``) recorded on the process's thread after the last fetch: the capture
    shows work after it, so the last range stays a step (five steps) and no note says
    otherwise."""
    ranges, kernels, runtime = _nsys_loop_to_its_end("dataloader")
    osrt = []
    if after == "runtime":
        runtime.append((40_450 * US, 40_480 * US, 5, "cudaDeviceSynchronize"))
    else:
        osrt.append((40_450 * US, 40_480 * US, "write"))
    path = write_nsys_export(tmp_path / "cut.sqlite", kernels, sorted(ranges), runtime, osrt)
    run = _analyzed(path)
    assert run.metrics.steps is not None and run.metrics.steps.count == 5
    assert not any("holds only a DataLoader fetch" in note for note in run.notes)


def test_a_trace_without_steps_says_nothing_of_a_wait_inside_them(tmp_path: Path) -> None:
    """A trace cut before its first step ends: a 1.5 s first fetch (the workers starting), then
    a forward's convolution and ReLU, no ProfilerStep, no backward or optimizer. There are no
    steps and no DataLoader wait figure, yet a note said the wait 'counts every fetch inside
    the steps'; now no note speaks of the wait or of steps."""
    events = [cpu_event(TRAIN_FETCH, 1000, 1_500_000, cat="user_annotation"),
              cpu_event("aten::conv2d", 1_501_100, 300_000),
              cpu_event("aten::relu", 1_801_200, 100_000)]
    run = _analyzed(kineto_trace(tmp_path / "cut.json", events))
    assert (run.metrics.steps, run.metrics.dataloader_fraction) == (None, None)
    assert not [note for note in run.notes if "DataLoader" in note or "step" in note]


def _epochs_with_validation(fetch: str, validation: str) -> list[tuple]:
    """The NVTX ranges of two epochs of four ``step N`` ranges of 10 ms each, as the runner
    closing a step at its optimizer step ranged them: between two steps 800 µs of post-step
    work and the next step's 200 µs fetch (ranged ``fetch``), and after the first epoch, before
    that fetch, 100 ms of validation, its five 100 µs fetches ranged ``validation``."""
    ranges, at = [], 1000 * US
    for k in range(8):
        gap = 100_000 * US if k == 4 else 0
        ranges += [(at + gap - 200 * US, at + gap, fetch),
                   (at + gap, at + gap + 10_000 * US, f"step {k}")]
        ranges += [(at + (20_000 + 10_000 * j) * US, at + (20_100 + 10_000 * j) * US, validation)
                   for j in range(5) if gap]
        at += gap + 11_000 * US
    return sorted(ranges)


def test_a_capture_recording_its_fetches_counts_no_other_gap_as_wait(tmp_path: Path) -> None:
    """Steps whose ranges leave out the time after the optimizer step: the capture records
    each fetch (the runner's ``dataloader`` ranges, 200 µs), so the rest of the time between
    the ranges is other work (post-step work, 100 ms of validation after the first epoch), as
    in a torch.profiler trace. Counted whole as the loop fetching, the wait was 107 of the 187
    ms of windows (57%, loader-bound, step 3 waiting 101 ms); it is the 7 fetches inside the
    windows, 1.4 ms (0.7%), 200 µs in every step."""
    path = write_nsys_export(tmp_path / "epochs.sqlite", [],
                             _epochs_with_validation("dataloader",
                                                     "dataloader (not training)"))
    run = _analyzed(path)
    m = run.metrics
    assert m.steps is not None and m.shape is not None and m.shape.dataloader_wait is not None
    assert m.steps.count == 8
    assert m.dataloader_fraction == pytest.approx(1400 / 187_000)
    assert run.verdict != "loader-bound"
    wait = m.shape.dataloader_wait
    assert (wait.count, wait.median_ns, wait.max_ns, wait.total_ns) == (7, 200 * US, 200 * US,
                                                                        1400 * US)
    windows = step_windows(nsys.parse(path))
    assert windows is not None and not windows.fetch_between


def test_a_capture_of_no_training_fetch_waits_for_none(tmp_path: Path) -> None:
    """The same loop with every fetch ranged ``dataloader (not training)`` (the runner's name
    for a fetch feeding no training: under no_grad, say): the capture records the fetches and
    none fed training, so the wait is known, and none; the gaps between the ranges were
    counted as the loop fetching (57%)."""
    path = write_nsys_export(tmp_path / "epochs.sqlite", [],
                             _epochs_with_validation("dataloader (not training)",
                                                     "dataloader (not training)"))
    assert _analyzed(path).metrics.dataloader_fraction == 0.0
