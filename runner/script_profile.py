"""Running the user's own, unmodified training script: every launch of a script goes through here.

``python -m profreport.runner.script_profile --mode MODE [...] -- SCRIPT ARGS`` runs the script as
``__main__`` with its arguments untouched, in every mode:

- a bare ``@profile`` works: kernprof puts its line profiler in the builtins; elsewhere a no-op
  ``profile`` builtin stands in for it, as kernprof's own ``line_profiler.profile`` does;
- step markers: PyTorch's global optimizer-step hook marks the end of each iteration (the first
  optimizer seen only, so a GAN's two optimizers still make whole iterations). The marks give
  the plain run's steps/s, drive ``prof.step()`` under torch.profiler and open an NVTX range
  ``step N`` per iteration under nsys, where each rank of a torchrun job also marks its rank
  (``rank 1 of 2``, from torchrun's RANK and WORLD_SIZE: see launch.record_rank); a step
  runs from where the loop asks for its batch to where it asks for the next, and the last one
  ends where the training loop ends (FirstOptimizerStepper), not at the script's end; a loop fed
  by no DataLoader has its steps run from the model's forward to the optimizer step;
- the DataLoader the script trains from (the one whose batches feed ``backward()``, or one
  made anew whose pass starts where its passes start; a validation loader is not it) is
  watched, so its batch size, workers and pinning are recorded as the run's knobs (what the
  script really did, not what it was told), and only its fetches with autograd on are the
  DataLoader wait a profile records;
- under kernprof, when the script has no ``@profile`` of its own, every function it defines is
  line-profiled through a decorator under a name no script uses (``from torch.profiler import
  profile`` in the script cannot collide with it);
- under torch.profiler (``profile_memory=True``), unless ``--own-profiler`` says the script drives
  torch.profiler itself, which must not be wrapped a second time.

Each process writes its steps and loader to ``--result`` (``{rank}`` in the name: one per rank).
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import json
import os
import sys
import time
import types
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter, _DatasetKind
from torch.utils.hooks import RemovableHandle

from profreport import concepts
from profreport.fileio import write_text
from profreport.runner.launch import PROFILER_WAIT, PROFILER_WARMUP, record_rank
from profreport.runner.script_scan import scan_script
from profreport.units import NS_PER_S

MODES = ("none", "kernprof", "torch", "nsys")
#: The decorator name the line-profiling transform adds: one no script defines.
LINE_PROFILE_NAME = "__profreport_line_profile__"


def _unchanged(function: Any) -> Any:
    """kernprof's ``@profile`` outside kernprof: returns the function as it is."""
    return function


def install_profile_builtin() -> None:
    """A no-op ``profile`` builtin, unless kernprof has put its line profiler there."""
    if not hasattr(builtins, "profile"):
        builtins.profile = _unchanged  # type: ignore[attr-defined]


@dataclass
class LoaderUse:
    """The knobs of the DataLoaders over one dataset (a loader made anew each epoch over the
    same dataset is the same one; so is one over a new dataset that takes over the training
    role: StepMarks.loader_key) and how many batches the script took from them; the knobs
    are those of the loader whose batch last fed a ``backward()`` (one over the same dataset
    that only evaluates, under ``no_grad``, never sets them), the first one's until then."""

    batch_size: int | None
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    #: Batches each worker loads ahead (None without workers).
    prefetch_factor: int | None = None
    #: Batches fetched while autograd was on (a fetch under ``no_grad`` feeds no training step).
    batches: int = 0
    #: ``backward()`` calls whose last batch fetched before them came from these loaders.
    fed_backward: int = 0


@dataclass
class StepMarks:
    """End time of each iteration (perf_counter_ns) and the loaders used, as the hooks saw them."""

    ends_ns: list[int] = field(default_factory=list)
    #: The loaders used, by the id of their dataset.
    loaders: dict[int, LoaderUse] = field(default_factory=dict)
    #: At each mark, the batches each loader had yielded so far (by dataset id).
    batches_at: list[dict[int, int]] = field(default_factory=list)
    #: The first optimizer's learning rate at its first step.
    lr: float | None = None
    #: ``--record-loss``: the value of the last one-element tensor ``backward()`` was called on
    #: before each step (the loss), and that latest value.
    losses: list[float] = field(default_factory=list)
    last_backward: float | None = None

    #: The loader of the last batch fetched while autograd was on (by dataset id), the
    #: knobs of the DataLoader it came from (loader_knobs) and where its pass started
    #: (pass_site).
    last_fetch: int | None = None
    last_knobs: dict[str, Any] = field(default_factory=dict)
    last_site: tuple[tuple[types.CodeType, int], ...] | None = None
    #: Where the passes of the loader whose batch last fed a ``backward()`` start: the
    #: training loop.
    training_site: tuple[tuple[types.CodeType, int], ...] | None = None

    def loader_key(self, loader: DataLoader, site: tuple[tuple[types.CodeType, int], ...]
                   ) -> int:
        """The key (a dataset id) of the LoaderUse that ``loader``'s pass starting at ``site``
        counts in, made when new: its dataset's, where a loader over the same dataset has
        been seen (one made anew each epoch); else, for a pass started with autograd on where
        the training loader's passes start (the training loop, over a dataset made anew each
        epoch), the training loader's, which this loader now is; else a loader of its own."""
        key = id(loader.dataset)
        if key not in self.loaders:
            training = self.training_loader() if site == self.training_site \
                and torch.is_grad_enabled() else None
            self.loaders[key] = training or LoaderUse(**loader_knobs(loader))
        return key

    def training_loader(self) -> LoaderUse | None:
        """The loader whose batches fed the most ``backward()`` calls (the one the script trains
        from, not a validation loader however many batches it yields); without a backward seen,
        the one the script took the most batches from. (Several datasets' keys may hold the one
        training loader: loader_key.)"""
        return max(self.loaders.values(), key=lambda use: (use.fed_backward, use.batches),
                   default=None)

    def trains_from(self, key: int) -> bool:
        """Whether a fetch from loader ``key`` now is a training fetch: autograd is on and the
        loader's batches have fed a backward, or no loader's have yet (the fetches before the
        first step)."""
        if not torch.is_grad_enabled():
            return False
        training = self.training_loader()
        return training is None or training.fed_backward == 0 or \
            self.loaders[key].fed_backward > 0

    def fed_backward(self) -> None:
        """A ``backward()`` call: the loader of the last batch fetched with autograd on fed it,
        its knobs are that DataLoader's, and where its pass started is the training loop."""
        use = self.loaders.get(self.last_fetch) if self.last_fetch is not None else None
        if use is not None:
            use.fed_backward += 1
            self.training_site = self.last_site
            for name, value in self.last_knobs.items():
                setattr(use, name, value)

    def mark(self) -> None:
        """Mark the end of an iteration: its time, and the batches each loader had yielded."""
        self.ends_ns.append(time.perf_counter_ns())
        self.batches_at.append({key: use.batches for key, use in self.loaders.items()})

    def batches_per_step(self) -> float | None:
        """Batches the training loader yielded per step between the first and the last mark
        (4 when the script accumulates gradients over 4 batches); None without two marks or a
        loader, or when the loader yielded nothing between them (the steps take no batches
        from it)."""
        loader = self.training_loader()
        if loader is None or len(self.batches_at) < 2:
            return None
        key = next(key for key, use in self.loaders.items() if use is loader)
        taken = self.batches_at[-1].get(key, 0) - self.batches_at[0].get(key, 0)
        return taken / (len(self.batches_at) - 1) if taken > 0 else None

    def result(self, rank: int, world_size: int, local_world_size: int = 1) -> dict[str, Any]:
        """What this process saw: steps, their durations after the first, steps/s, loader; and
        the job's processes on its node (``local_world_size``), which share the node's CPUs."""
        ends = self.ends_ns
        step_ns = [later - earlier for earlier, later in zip(ends[:-1], ends[1:], strict=True)]
        steps_per_s = len(step_ns) / (sum(step_ns) / NS_PER_S) if step_ns and sum(step_ns) else None
        loader = self.training_loader()
        return {"rank": rank, "world_size": world_size,
                "local_world_size": local_world_size, "steps": len(ends),
                "step_ns": step_ns, "steps_per_s": steps_per_s,
                "loader": asdict(loader) if loader else None, "lr": self.lr,
                "batches_per_step": self.batches_per_step(),
                "losses": self.losses,
                "torch_threads": torch.get_num_threads()}


class FirstOptimizerStepper:
    """An optimizer-step hook: marks the first optimizer's steps, and places the step boundaries
    that advance the profiler and the NVTX step ranges.

    A step runs from where the training loop asks for its batch to where it asks for the next:
    its fetch, forward, backward, optimizer step and what the loop does after that step
    (zeroing gradients, logging), the same in every epoch. The hook marks where an iteration's
    optimizer step ends (StepMarks.mark); the boundary after it is the next training fetch
    (watch_loaders), or the loop's end: the start of the fetch with which a loader that knows
    its length ends its pass (no step opens there), a fetch raising StopIteration, or the loop
    letting go of the pass's iterator (it breaks off: CPython frees the iterator there, or the
    LoopIterator standing for one its loader keeps). Over a
    loader that cannot know its length (pass_length), the next step opens when the
    fetch returns a batch, since it may raise StopIteration instead: such a step does not hold
    its fetch (the ``dataloader`` range before it does), and the fetch that ends the pass is
    no step. The next pass over the training loader (another epoch) opens the next step as it
    starts, so what runs between two epochs (the fetch that ends one, a validation) is no
    step's, and neither is what the script does after its loop. A loop fed by no DataLoader
    (data made in the loop) has its steps run from a module's forward to the optimizer step
    (iteration_ends)."""

    def __init__(self, marks: StepMarks, profiler: Any | None, nvtx_ranges: bool) -> None:
        """Record into ``marks``; step ``profiler`` and NVTX ranges when given."""
        self.marks = marks
        self.profiler = profiler
        self.nvtx = __import__("nvtx") if nvtx_ranges else None
        self.optimizer_id: int | None = None
        #: Whether a step's range (and ProfilerStep span) is open.
        self.in_step = False
        #: Whether an iteration was marked whose step boundary is yet to come.
        self.pending = False
        #: Whether a training batch was fetched since the last mark (the loop is fed by a
        #: DataLoader, whose next fetch is the boundary).
        self.fetched = False
        #: Whether the next step opens when the fetch under way returns a batch (its loader
        #: cannot know whether it has one).
        self.open_on_batch = False
        #: What ends the loop when it lets go of the latest pass's iterator.
        self.release: weakref.finalize | None = None
        #: Whether a loop fed by no DataLoader opens its steps at a module's forward (else at
        #: its optimizer steps), and the hook awaiting that forward (iteration_ends).
        self.opens_at_forward = True
        self.next_forward: RemovableHandle | None = None

    def __call__(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Called by PyTorch after every ``optimizer.step()``."""
        if self.optimizer_id is None:
            self.optimizer_id = id(optimizer)
            lr = optimizer.param_groups[0].get("lr") if optimizer.param_groups else None
            self.marks.lr = float(lr) if isinstance(lr, int | float) else None
        if id(optimizer) != self.optimizer_id:
            return
        self.marks.mark()
        if self.marks.last_backward is not None:
            self.marks.losses.append(self.marks.last_backward)
        self.pending = True
        if not self.fetched:  # no DataLoader feeds the loop
            self.iteration_ends()
        self.fetched = False

    def iteration_ends(self) -> None:
        """An iteration of a loop fed by no DataLoader (its batches sliced by hand) is marked:
        its step ends at its optimizer step, and the next opens at the next forward of a module
        under autograd (forward_starts), the first sign of another iteration, so none opens
        after the loop's last. A loop that ran a whole iteration with no such forward (a model
        of bare tensors) opens its next steps at its optimizer steps instead."""
        if self.next_forward is not None:  # none came since the last mark
            self.opens_at_forward = False
        self.boundary(open_next=not self.opens_at_forward)
        if self.opens_at_forward:
            self.next_forward = register_module_forward_pre_hook(self.forward_starts)

    def forward_starts(self, module: torch.nn.Module, args: Any) -> None:
        """A module's forward pre-hook: under autograd, the step awaiting it opens."""
        if torch.is_grad_enabled() and self.next_forward is not None:
            self.next_forward.remove()
            self.next_forward = None
            self.open()

    def boundary(self, open_next: bool) -> None:
        """A step boundary: close the open step, step the profiler's schedule once per iteration
        marked since the last boundary, and open the next step when ``open_next``."""
        self.close()
        if self.profiler is not None:  # ProfilerStep#N spans are opened here (open)
            steps, self.profiler.record_steps = self.profiler.record_steps, False
            while self.profiler.step_num < len(self.marks.ends_ns):
                self.profiler.step()
            self.profiler.record_steps = steps
        self.pending = False
        if open_next:
            self.open()

    def fetch_starts(self, left: int | None) -> None:
        """A training fetch starts, with ``left`` batches still to come from its iterator (None
        when its loader cannot know): the step boundary when an iteration was marked since the
        last one, where no step opens when the fetch is sure to end the pass (none left), and
        the next opens as the fetch returns a batch when it may end the pass (left unknown)."""
        self.fetched = True
        if left == 0:
            self.loop_ends()
        elif self.pending:
            self.boundary(open_next=left is not None)
            self.open_on_batch = left is None

    def fetch_returns(self) -> None:
        """A training fetch returned a batch: the step waiting for it opens."""
        if self.open_on_batch:
            self.open_on_batch = False
            self.open()

    def loop_ends(self) -> None:
        """The training loop ends: the open step ends, and no step opens."""
        self.open_on_batch = False
        if self.in_step or self.pending:
            self.boundary(open_next=False)

    def pass_starts(self, length_known: bool) -> None:
        """The training loader is iterated again (another epoch): the step that starts with
        it opens, when a step was marked before (as its first fetch returns a batch when the
        loader cannot know its length), ending the open step when an iteration was marked
        since it opened (a loop that ended unseen: its iterator kept)."""
        if self.marks.ends_ns and (self.pending or not self.in_step):
            self.boundary(open_next=length_known)
            self.open_on_batch = not length_known

    def watch_pass(self, iterator: _BaseDataLoaderIter | LoopIterator | None) -> None:
        """Follow the latest pass over the training loader (None: no more): the loop ends when it
        lets go of the pass's ``iterator``, as CPython frees it when the loop breaks off (or
        after its StopIteration, when the loop has ended already). A loader that keeps its
        iterator (persistent workers) hands the loop a LoopIterator of its own to let go of;
        an iterator the script itself keeps (``it = iter(loader)``) ends nothing."""
        if self.release is not None:
            self.release.detach()
        self.release = None if iterator is None else weakref.finalize(iterator, self.loop_ends)
        if self.release is not None:
            self.release.atexit = False

    def open(self) -> None:
        """Open step ``N`` (N steps marked so far): its NVTX range, and ProfilerStep#N when
        the profiler records its steps."""
        if self.nvtx is not None:
            self.nvtx.push_range(concepts.step_range_name(len(self.marks.ends_ns)))
        if self.profiler is not None and self.profiler.record_steps:
            span = torch.autograd.profiler.record_function(
                f"ProfilerStep#{self.profiler.step_num}")
            span.__enter__()
            self.profiler.step_rec_fn = span
        self.in_step = True

    def close(self) -> None:
        """Close the open step's NVTX range and the open ProfilerStep span, if any; a step
        awaiting a forward no longer opens."""
        if self.next_forward is not None:
            self.next_forward.remove()
            self.next_forward = None
        if self.nvtx is not None and self.in_step:
            self.nvtx.pop_range()
        span = getattr(self.profiler, "step_rec_fn", None) if self.profiler else None
        if span is not None:  # torch.profiler's next step or stop then exits none twice
            span.__exit__(None, None, None)
            self.profiler.step_rec_fn = None
        self.in_step = False


def pass_length(source: DataLoader | _BaseDataLoaderIter) -> int | None:
    """Batches a pass over a DataLoader (or made by its iterator) yields; None when the loader
    cannot know: an IterableDataset's length is the dataset's own claim, and a sampler may have
    none (an endless one, whose loop ends by breaking off)."""
    if source._dataset_kind != _DatasetKind.Map:
        return None
    try:
        return len(source._index_sampler)
    except TypeError:
        return None


def batches_left(iterator: _BaseDataLoaderIter) -> int | None:
    """Batches ``iterator`` has yet to yield; None when its loader cannot know (pass_length)."""
    total = pass_length(iterator)
    return None if total is None else total - iterator._num_yielded


def pass_site(frame: types.FrameType | None) -> tuple[tuple[types.CodeType, int], ...]:
    """Where a pass over a DataLoader starts: the code and line of each frame of the call stack
    from ``frame``, the one asking for the iterator, out (the loop, and what runs it)."""
    site = []
    while frame is not None:
        site.append((frame.f_code, frame.f_lineno))
        frame = frame.f_back
    return tuple(site)


def loader_knobs(loader: DataLoader) -> dict[str, Any]:
    """The knobs of one DataLoader, as LoaderUse records them."""
    return {"batch_size": loader.batch_size, "num_workers": loader.num_workers,
            "pin_memory": bool(loader.pin_memory),
            "persistent_workers": bool(loader.persistent_workers),
            "prefetch_factor": loader.prefetch_factor}


class LoopIterator:
    """The iterator of a pass over a DataLoader that keeps it for its next pass (persistent
    workers), as the loop gets it: the loader's own, behind a reference only the loop holds,
    so the loop letting go of it (breaking off) frees this one (FirstOptimizerStepper.watch_pass)
    while the workers live on. It yields the loader's batches and reads as its iterator (its
    attributes are the iterator's; an ``isinstance`` check of its class is not)."""

    def __init__(self, iterator: _BaseDataLoaderIter) -> None:
        """Stand for ``iterator``."""
        self.iterator = iterator

    def __iter__(self) -> LoopIterator:
        """The loop's iterator is itself."""
        return self

    def __next__(self) -> Any:
        """The loader's next batch."""
        return next(self.iterator)

    def __len__(self) -> int:
        """The batches of the loader's pass."""
        return len(self.iterator)

    def __getattr__(self, name: str) -> Any:
        """Anything else, the loader's iterator's."""
        return getattr(self.iterator, name)


@contextlib.contextmanager
def watch_loaders(marks: StepMarks, stepper: FirstOptimizerStepper) -> Any:
    """Count the batches each DataLoader yields, and note its knobs, while the script runs; under
    nsys (the ``stepper``'s ``nvtx`` module), each fetch of a batch for training is an NVTX
    ``dataloader`` range, so the capture records the wait, which the ``step N`` ranges hold
    (they start where the loop asks for their batch; just after its fetch, over a loader that
    cannot know its length). Any other fetch (a validation loader's, or one under ``no_grad``:
    see StepMarks.trains_from) is a range, and a torch.profiler span, named
    concepts.OTHER_LOADER_RANGE: visible, and no DataLoader wait.
    The training loader's fetches and passes place the step boundaries (FirstOptimizerStepper):
    the first fetch after an optimizer step starts the next step, a new pass opens the step it
    starts, the end of one closes the open step."""
    original_iter, original_next = DataLoader.__iter__, _BaseDataLoaderIter.__next__
    nvtx = stepper.nvtx

    def iterate(loader: DataLoader) -> Any:
        site = pass_site(sys._getframe(1))
        key = marks.loader_key(loader, site)
        training = marks.trains_from(key)
        if training:
            # before its workers start: the step waits for them
            stepper.pass_starts(pass_length(loader) is not None)
        iterator = original_iter(loader)
        iterator._profreport_loader = key  # type: ignore[union-attr]
        iterator._profreport_knobs = loader_knobs(loader)  # type: ignore[union-attr]
        iterator._profreport_site = site  # type: ignore[union-attr]
        iterator._profreport_span = iterator._profile_name  # type: ignore[union-attr]
        kept = getattr(loader, "_iterator", None) is iterator  # for the loader's next pass
        loop_iterator = LoopIterator(iterator) if kept else iterator
        if training:
            stepper.watch_pass(loop_iterator)
        return loop_iterator

    def next_batch(iterator: _BaseDataLoaderIter) -> Any:
        key = getattr(iterator, "_profreport_loader", None)
        if key not in marks.loaders:  # an iterator made before the script ran
            return original_next(iterator)
        training = marks.trains_from(key)
        iterator._profile_name = iterator._profreport_span if training \
            else concepts.OTHER_LOADER_RANGE
        name = concepts.DATALOADER_RANGE if training else concepts.OTHER_LOADER_RANGE
        if training:
            stepper.fetch_starts(batches_left(iterator))
        try:
            with nvtx.annotate(name) if nvtx is not None else contextlib.nullcontext():
                batch = original_next(iterator)
        except StopIteration:
            if training:
                stepper.loop_ends()
            raise
        if torch.is_grad_enabled():
            marks.loaders[key].batches += 1
            marks.last_fetch, marks.last_knobs = key, iterator._profreport_knobs
            marks.last_site = iterator._profreport_site
        if training:
            stepper.fetch_returns()
        return batch

    DataLoader.__iter__ = iterate  # type: ignore[method-assign]
    _BaseDataLoaderIter.__next__ = next_batch  # type: ignore[method-assign]
    try:
        yield
    finally:
        stepper.watch_pass(None)
        DataLoader.__iter__ = original_iter  # type: ignore[method-assign]
        _BaseDataLoaderIter.__next__ = original_next  # type: ignore[method-assign]


@contextlib.contextmanager
def watch_backward(marks: StepMarks, record_loss: bool) -> Any:
    """Note which loader fed each ``backward()`` (StepMarks.fed_backward) and, with
    ``record_loss``, the value of each one-element tensor it is called on (the loss)."""
    original = torch.autograd.backward

    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        marks.fed_backward()
        if record_loss and isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
            marks.last_backward = float(tensors.detach())
        return original(tensors, *args, **kwargs)

    torch.autograd.backward = backward
    try:
        yield
    finally:
        torch.autograd.backward = original


class LineProfileEveryFunction(ast.NodeTransformer):
    """Adds the line-profiling decorator (under :data:`LINE_PROFILE_NAME`) to every function."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        """Decorate a function, innermost (so it profiles the function's own body)."""
        self.generic_visit(node)
        decorator = ast.copy_location(ast.Name(id=LINE_PROFILE_NAME, ctx=ast.Load()), node)
        node.decorator_list.append(decorator)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]


def compile_script(script: Path, line_profile_all: bool) -> types.CodeType:
    """The script's code under its absolute path (the line profile names the real file); with
    ``line_profile_all``, every function it defines decorated for the line profiler."""
    source = script.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(script))
    if line_profile_all:
        tree = ast.fix_missing_locations(LineProfileEveryFunction().visit(tree))
    return compile(tree, str(script), "exec", dont_inherit=True)


def run_as_main(code: types.CodeType, script: Path, extra_globals: dict[str, Any]) -> None:
    """Execute ``code`` as the ``__main__`` module, as ``python script.py`` would."""
    module = types.ModuleType("__main__")
    module.__dict__.update({"__file__": str(script), "__builtins__": builtins, **extra_globals})
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)
    finally:
        sys.modules["__main__"] = saved


def torch_profiler(trace_dir: Path, active: int, rank: int) -> torch.profiler.profile:
    """torch.profiler on the optimizer-step schedule, recording memory, writing gzipped traces."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=PROFILER_WAIT, warmup=PROFILER_WARMUP,
                                         active=active, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            str(trace_dir), worker_name=f"rank{rank}", use_gzip=True),
        record_shapes=True, profile_memory=True)


@dataclass(frozen=True)
class ScriptLaunch:
    """One launch of the script in this process."""

    script: Path
    script_args: list[str]
    mode: str = "none"
    trace_dir: Path | None = None
    active: int = 5
    own_profiler: bool = False
    result: str | None = None
    record_loss: bool = False


def run_script(launch: ScriptLaunch, marks: StepMarks) -> None:
    """Run the script as ``__main__`` in this launch's mode, marking its steps in ``marks``."""
    install_profile_builtin()
    script = launch.script.resolve()
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if launch.mode == "nsys":
        record_rank(rank, world_size)
    wrap = launch.mode == "torch" and not launch.own_profiler and launch.trace_dir is not None
    profiler = torch_profiler(launch.trace_dir, launch.active, rank) if wrap else None
    stepper = FirstOptimizerStepper(marks, profiler, nvtx_ranges=launch.mode == "nsys")
    line_profile_all = launch.mode == "kernprof" and not scan_script(script).has_profile_decorator
    code = compile_script(script, line_profile_all)
    extra = {LINE_PROFILE_NAME: builtins.profile} if line_profile_all else {}  # type: ignore
    sys.argv = [str(script), *launch.script_args]
    sys.path.insert(0, str(script.parent))
    handle = register_optimizer_step_post_hook(stepper)
    try:
        # the profiler outermost: no pass's release steps it once it has stopped
        with profiler if profiler is not None else contextlib.nullcontext(), \
                watch_loaders(marks, stepper), watch_backward(marks, launch.record_loss):
            run_as_main(code, script, extra)
    finally:
        handle.remove()
        stepper.close()


def write_result(marks: StepMarks, template: str) -> None:
    """Write this process's step marks to ``template`` with its rank filled in."""
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # torchrun's processes on this node
    write_text(Path(template.format(rank=rank)),
               json.dumps(marks.result(rank, world_size, local), indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--mode MODE [--trace-dir DIR --active K --own-profiler --result PATH]
    SCRIPT ARGS...``; exits as the script does."""
    parser = argparse.ArgumentParser(prog="python -m profreport.runner.script_profile")
    parser.add_argument("--mode", choices=MODES, default="none")
    parser.add_argument("--trace-dir", type=Path)
    parser.add_argument("--active", type=int, default=5)
    parser.add_argument("--own-profiler", action="store_true")
    parser.add_argument("--result", help="where to write the step marks; {rank} is replaced")
    parser.add_argument("--record-loss", action="store_true",
                        help="record the loss (what backward() was called on) at each step")
    parser.add_argument("script", type=Path)
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    launch = ScriptLaunch(args.script, args.script_args, args.mode, args.trace_dir, args.active,
                          args.own_profiler, args.result, args.record_loss)
    if args.mode == "torch" and not args.own_profiler and args.trace_dir is None:
        parser.error("--mode torch needs --trace-dir (or --own-profiler)")
    marks = StepMarks()
    try:
        run_script(launch, marks)
    except SystemExit as exc:  # the script's own sys.exit(): exit as it asked
        if exc.code not in (0, None):
            raise
    if launch.result:
        write_result(marks, launch.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
