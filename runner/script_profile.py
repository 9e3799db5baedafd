"""Profiling the user's own, unmodified training script.

``python -m profreport.runner.script_profile --trace-dir DIR --active K -- train.py ARGS`` runs
the script with runpy under torch.profiler; PyTorch's global optimizer-step hook drives
``prof.step()``, counting only the first optimizer seen, so a GAN with two optimizers still gets
whole iterations. :func:`module_level_loader_loop` tells when line_profiler will see nothing.
"""

from __future__ import annotations

import argparse
import ast
import runpy
import sys
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from profreport import concepts
from profreport.runner.train import PROFILER_WAIT, PROFILER_WARMUP


def module_level_loader_loop(path: Path) -> int | None:
    """Line number of a top-level ``for`` loop over a DataLoader (as
    ``concepts.is_dataloader_loop_line`` tells one), else None."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    lines = source.splitlines()
    for node in tree.body:
        if isinstance(node, ast.For | ast.AsyncFor) and \
                concepts.is_dataloader_loop_line(lines[node.lineno - 1]):
            return node.lineno
    return None


class FirstOptimizerStepper:
    """An optimizer-step hook that advances the profiler on the first optimizer's steps only."""

    def __init__(self, profiler: torch.profiler.profile) -> None:
        """Drive ``profiler``."""
        self.profiler = profiler
        self.optimizer_id: int | None = None

    def __call__(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Called by PyTorch after every ``optimizer.step()``."""
        if self.optimizer_id is None:
            self.optimizer_id = id(optimizer)
        if id(optimizer) == self.optimizer_id:
            self.profiler.step()


def run_script(script: Path, script_args: list[str], trace_dir: Path, active: int) -> None:
    """Run ``script`` as ``__main__`` under torch.profiler, stepping on optimizer steps."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiler = torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=PROFILER_WAIT, warmup=PROFILER_WARMUP,
                                         active=active, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            str(trace_dir), worker_name="script", use_gzip=True))
    handle = register_optimizer_step_post_hook(FirstOptimizerStepper(profiler))
    sys.argv = [str(script), *script_args]
    sys.path.insert(0, str(script.resolve().parent))
    try:
        with profiler:
            runpy.run_path(str(script), run_name="__main__")
    finally:
        handle.remove()


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--trace-dir DIR --active K -- SCRIPT ARGS...``."""
    parser = argparse.ArgumentParser(prog="python -m profreport.runner.script_profile")
    parser.add_argument("--trace-dir", type=Path, required=True)
    parser.add_argument("--active", type=int, default=5)
    parser.add_argument("script", type=Path)
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    run_script(args.script, args.script_args, args.trace_dir, args.active)
    return 0


if __name__ == "__main__":
    sys.exit(main())
