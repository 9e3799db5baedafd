"""Which DataLoader fetches of a torch.profiler trace are the training loop's wait, and which
fetch is no step: hand-built Kineto traces of a validation loop run inside the profiled
window, and of loops whose last ``__next__`` found the end of the data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from profreport.executors import ExecutorOptions
from profreport.parsers import kineto
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.results import RunAnalysis
from profreport.reports.render.json import render_json
from profreport.reports.render.markdown import render_markdown

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TRAINING_PID, cpu_event, kineto_trace  # noqa: E402

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
    assert len(profile.table("dataloader")) == 4
    assert profile.meta.dataloader.workers == "multi-process"
    run = _analyzed(path)
    assert run.metrics.steps is not None and run.metrics.steps.count == 4
    assert run.metrics.dataloader_fraction == pytest.approx(4000 / 60_000)
    assert run.verdict != "loader-bound"
    assert ("train.pt.trace.json: 9 of 13 DataLoader fetches (16.1 ms) fed no training: no "
            "backward pass or optimizer step follows any of them before the next fetch (an "
            "evaluation loop's, or the fetch that found the end of the data), so they are no "
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


@pytest.mark.parametrize(("with_profiler_steps", "label"),
                         [(True, "ProfilerStep#4, the last step (40.0 µs)"),
                          (False, "step 5, the last step (30.0 µs)")])
def test_the_fetch_that_ends_the_loop_is_no_step(tmp_path: Path, with_profiler_steps: bool,
                                                 label: str) -> None:
    """The last ``__next__`` of an inference loop raised StopIteration: no batch, no work
    after it. In its own ProfilerStep span, or as the last occurrence of the fetch span that
    marks the steps (no ProfilerStep, no optimizer), it was a fifth step of 30-40 µs (a step
    of nothing but waiting: 4 steps of 1 ms and one of a fetch). The four passes are the steps,
    waiting 200 µs of each 1 ms: 20%."""
    path = kineto_trace(tmp_path / "infer.json", _inference(with_profiler_steps))
    steps = kineto.parse(path).table("steps")
    assert (steps["start"] // 1_000_000).tolist() == [0, 1, 2, 3]
    run = _analyzed(path)
    assert run.metrics.steps is not None and run.metrics.steps.count == 4
    assert run.metrics.dataloader_fraction == pytest.approx(0.2)
    assert (f"infer.json: {label}, holds only the DataLoader fetch that ended the loop (30.0 "
            "µs: no work is recorded after it, so it returned no batch), so it is no step, and "
            "its fetch no DataLoader wait") in run.notes
    assert ("infer.json: the trace records no backward pass or optimizer step, so nothing "
            "tells a training loop's DataLoader fetches from another loop's (a validation "
            "loop's): the DataLoader wait counts every fetch inside the steps, whichever "
            "loop's") in run.notes


def test_a_last_step_that_works_after_its_fetch_is_a_step(tmp_path: Path) -> None:
    """A profiler stopped by its schedule after a pass whose fetch returned a batch: the work
    after the fetch makes it a step, whatever its span holds."""
    events = _inference(with_profiler_steps=False)[:-1]
    profile = kineto.parse(kineto_trace(tmp_path / "cut.json", events))
    assert len(profile.table("steps")) == 4
    assert not any("ended the loop" in note for note in profile.meta.notes)


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
