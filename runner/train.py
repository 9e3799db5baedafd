"""The training entry point every run-and-report launch runs: ``python -m profreport.runner.train
--config CONFIG.json [--result RESULT.json]``.

The loop reads like the PyTorch tutorials' so that line_profiler shows the DataLoader line; it is
decorated for kernprof only under ``kernprof -l`` (where ``builtins.profile`` exists). Each
iteration is an NVTX range ``step N`` holding a ``dataloader`` range around the batch fetch; each
rank of a distributed job marks its rank once (``rank 1 of 2``, see launch.record_rank). With
``profiler == "torch"`` the loop runs under torch.profiler and writes gzipped Kineto traces.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nvtx
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from profreport import concepts
from profreport.errors import ProfreportError
from profreport.fileio import write_text
from profreport.runner.launch import PROFILER_WAIT, PROFILER_WARMUP, record_rank
from profreport.runner.variants import Knobs
from profreport.runner.workloads import build_workload

#: The first step of a timed run is left out of throughput: it pays worker start-up and warm-up.
WARMUP_STEPS = 1


@dataclass
class TrainConfig:
    """Everything one training launch needs; written as JSON by the runner."""

    workload: str = "mnist"
    steps: int = 20
    batch_size: int = 64
    data_dir: str | None = None
    device: str = "cpu"
    samples: int = 0
    seed: int = 1
    augment: bool = True
    width: float = 1.0
    lr: float = 1.0
    gamma: float = 0.7
    knobs: dict[str, Any] = field(default_factory=dict)
    #: "none" | "kernprof" | "torch" | "nsys": which profiler this launch runs under.
    profiler: str = "none"
    trace_dir: str | None = None
    active_steps: int = 5
    #: Run the Benchy-style io and synthetic trials after the loop (plain launch only).
    trials: bool = False
    trial_steps: int = 8

    @classmethod
    def load(cls, path: Path) -> TrainConfig:
        """Read a config written by :meth:`save`."""
        return cls(**json.loads(path.read_text(encoding="utf-8")))

    def save(self, path: Path) -> Path:
        """Write the config as JSON."""
        return write_text(path, json.dumps(asdict(self), indent=2) + "\n")


@dataclass
class Rank:
    """This process's place in a distributed job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0


def annotated(loader: DataLoader) -> Iterator:
    """Yield the batches of ``loader``; NVTX ``step N`` spans each iteration, ``dataloader``
    each fetch. It fetches the ``len(loader)`` batches the loader holds (the workloads' data
    sets are map-style: the loader knows how many) and never the fetch after them, which
    raises StopIteration: a ``step N`` range opened for that fetch would hold it alone, and the
    OS runtime calls recorded after it as the run writes its result are work after it, so the
    capture would read it as a step of its own."""
    iterator = iter(loader)
    for number in range(len(loader)):
        nvtx.push_range(concepts.step_range_name(number))
        with nvtx.annotate(concepts.DATALOADER_RANGE):
            batch = next(iterator)
        try:
            yield batch
        finally:
            nvtx.pop_range()


def train(model: nn.Module, device: torch.device, train_loader: Iterable,
          optimizer: torch.optim.Optimizer, config: TrainConfig,
          on_step: Callable[[], None]) -> list[float]:
    """Train for ``config.steps`` iterations; returns each iteration's end time (perf_counter)."""
    knobs = Knobs(**config.knobs)
    memory_format = torch.channels_last if knobs.channels_last else torch.contiguous_format
    scaler = torch.amp.GradScaler(device.type, enabled=knobs.amp and device.type == "cuda")
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    model.train()
    step_ends = [time.perf_counter()]
    for batch_idx, (data, target) in enumerate(train_loader):
        data = data.to(device, non_blocking=knobs.non_blocking, memory_format=memory_format)
        target = target.to(device, non_blocking=knobs.non_blocking)
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=amp_dtype, enabled=knobs.amp):
            output = model(data)
            loss = F.nll_loss(output.float(), target)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        on_step()
        step_ends.append(time.perf_counter())
        if batch_idx + 1 >= config.steps:
            break
    return step_ends


if hasattr(builtins, "profile"):
    train = builtins.profile(train)


def samples_per_second(step_ends: list[float], batch_size: int) -> float | None:
    """Throughput over the steps after the warm-up ones; None with too few steps."""
    timed = step_ends[WARMUP_STEPS:]
    if len(timed) < 2 or timed[-1] <= timed[0]:
        return None
    return (len(timed) - 1) * batch_size / (timed[-1] - timed[0])


def step_durations_ns(step_ends: list[float]) -> list[int]:
    """Duration of each step after the warm-up ones, integer ns (the steps throughput counts)."""
    timed = step_ends[WARMUP_STEPS:]
    return [round((end - start) * 1e9) for start, end in zip(timed[:-1], timed[1:], strict=True)]


def choose_device(requested: str, rank: Rank) -> torch.device:
    """The device of this process: CUDA (this rank's GPU) when asked for or when auto finds one."""
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ProfreportError("--device cuda given but no CUDA GPU is visible")
        torch.cuda.set_device(rank.local_rank)
        return torch.device("cuda", rank.local_rank)
    return torch.device("cpu")


def start_distributed(device: torch.device) -> Rank:
    """Join the torchrun job described by the environment (gloo on CPU, nccl on GPU)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Rank()
    backend = "nccl" if device.type == "cuda" else "gloo"
    torch.distributed.init_process_group(backend=backend)
    rank = Rank(torch.distributed.get_rank(), world_size, int(os.environ.get("LOCAL_RANK", "0")))
    record_rank(rank.rank, rank.world_size)
    return rank


def make_loader(dataset: Dataset, config: TrainConfig, rank: Rank) -> DataLoader:
    """A DataLoader with the variant's worker, pinning and sampling knobs."""
    knobs = Knobs(**config.knobs)
    sampler = (DistributedSampler(dataset, rank.world_size, rank.rank, seed=config.seed)
               if rank.world_size > 1 else None)
    return DataLoader(dataset, batch_size=config.batch_size, shuffle=sampler is None,
                      sampler=sampler, num_workers=knobs.num_workers,
                      pin_memory=knobs.pin_memory,
                      persistent_workers=knobs.persistent_workers and knobs.num_workers > 0,
                      generator=torch.Generator().manual_seed(config.seed))


def prepare_model(model: nn.Module, device: torch.device, knobs: Knobs, rank: Rank) -> nn.Module:
    """Move the model and wrap it as the variant asks (channels-last, DDP, DataParallel,
    compile)."""
    memory_format = torch.channels_last if knobs.channels_last else torch.contiguous_format
    model = model.to(device, memory_format=memory_format)
    if rank.world_size > 1:
        device_ids = [device.index] if device.type == "cuda" else None
        # Passed only when off: newer torch deprecates the argument in favour of
        # forward_sync_buffers, whose False still syncs buffers once at start.
        buffers = {} if knobs.broadcast_buffers else {"broadcast_buffers": False}
        # Passed only when given: any bucket_cap_mb, 25 included, makes DDP's first bucket as
        # large as the others (its own default caps the first at 1 MiB to start reducing early).
        buckets = {} if knobs.bucket_cap_mb is None else {"bucket_cap_mb": knobs.bucket_cap_mb}
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=device_ids, **buckets, **buffers)
    elif knobs.dataparallel and device.type == "cuda" and torch.cuda.device_count() > 1:
        model = nn.DataParallel(model)
    if knobs.compile:
        model = torch.compile(model)
    return model


def io_trial(loader: DataLoader, steps: int, batch_size: int) -> float | None:
    """Samples per second of the loader alone (Benchy's IO trial)."""
    ends = [time.perf_counter()]
    for batch_idx, _batch in enumerate(loader):
        ends.append(time.perf_counter())
        if batch_idx + 1 >= steps:
            break
    return samples_per_second(ends, batch_size)


def synthetic_trial(model: nn.Module, device: torch.device, loader: DataLoader,
                    optimizer: torch.optim.Optimizer, config: TrainConfig) -> float | None:
    """Samples per second of the model on one cached batch (Benchy's SYNTHETIC trial)."""
    cached = next(iter(loader))
    batches = [cached] * config.trial_steps
    trial = TrainConfig(**{**asdict(config), "steps": config.trial_steps})
    return samples_per_second(train(model, device, batches, optimizer, trial, _no_op),
                              config.batch_size)


def _no_op() -> None:
    """A step callback that does nothing."""


def torch_profiler(config: TrainConfig, rank: Rank) -> torch.profiler.profile:
    """torch.profiler with the wait/warmup/active schedule, recording memory (``[memory]``
    events), writing gzipped traces per rank."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    schedule = torch.profiler.schedule(wait=PROFILER_WAIT, warmup=PROFILER_WARMUP,
                                       active=config.active_steps, repeat=1)
    handler = torch.profiler.tensorboard_trace_handler(
        str(config.trace_dir), worker_name=f"rank{rank.rank}", use_gzip=True)
    return torch.profiler.profile(activities=activities, schedule=schedule,
                                  on_trace_ready=handler, record_shapes=True,
                                  profile_memory=True)


def run(config: TrainConfig) -> dict[str, Any]:
    """Run one launch as configured; returns throughput, trials and data source (rank 0)."""
    torch.manual_seed(config.seed)
    knobs = Knobs(**config.knobs)
    device = choose_device(config.device, Rank(local_rank=int(os.environ.get("LOCAL_RANK", "0"))))
    rank = start_distributed(device)
    world_samples = config.samples or config.steps * config.batch_size * rank.world_size
    model, dataset, source = build_workload(
        config.workload, Path(config.data_dir) if config.data_dir else None, world_samples,
        config.seed, config.augment, config.width)
    model = prepare_model(model, device, knobs, rank)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=config.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=config.gamma)
    train_loader = make_loader(dataset, config, rank)
    profiling = config.profiler == "torch"
    steps = PROFILER_WAIT + PROFILER_WARMUP + config.active_steps if profiling else config.steps
    config = TrainConfig(**{**asdict(config), "steps": min(steps, config.steps)})
    profiler = torch_profiler(config, rank) if profiling else contextlib.nullcontext()
    with profiler:
        on_step = profiler.step if profiling else _no_op
        step_ends = train(model, device, annotated(train_loader), optimizer, config, on_step)
    scheduler.step()
    result: dict[str, Any] = {"data_source": source, "world_size": rank.world_size,
                              "torch_threads": torch.get_num_threads(),
                              "steps": len(step_ends) - 1,
                              "step_ns": step_durations_ns(step_ends),
                              "throughput_samples_per_s": _global(
                                  samples_per_second(step_ends, config.batch_size), rank)}
    if config.trials:  # on every rank: a DDP model's backward needs all ranks
        full = result["throughput_samples_per_s"]
        io = _global(io_trial(make_loader(dataset, config, rank), config.trial_steps,
                              config.batch_size), rank)
        synthetic = _global(synthetic_trial(model, device, train_loader, optimizer, config),
                            rank)
        result["trials"] = {name: value for name, value in
                            (("io", io), ("synthetic", synthetic), ("full", full))
                            if value is not None}
    if rank.world_size > 1:
        torch.distributed.destroy_process_group()
    return result


def _global(per_rank: float | None, rank: Rank) -> float | None:
    """Throughput of the whole job: this rank's figure times the number of ranks."""
    return None if per_rank is None else per_rank * rank.world_size


def main(argv: list[str] | None = None) -> int:
    """Command line of the training entry point; one-line errors on stderr."""
    parser = argparse.ArgumentParser(prog="python -m profreport.runner.train")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--result", type=Path)
    args = parser.parse_args(argv)
    try:
        config = TrainConfig.load(args.config)
    except (OSError, ValueError, TypeError) as exc:
        print(f"profreport train: error: {args.config}: unreadable config: {exc}",
              file=sys.stderr)
        return 2
    try:
        result = run(config)
    except ProfreportError as exc:
        print(f"profreport train: error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    if args.result and int(os.environ.get("RANK", "0")) == 0:
        write_text(args.result, json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
