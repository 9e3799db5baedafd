"""Command-line options of ``run-and-report`` (filled in by the runner)."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

from profreport.argtypes import positive_int
from profreport.runner.launch import PROFILERS
from profreport.runner.variants import (
    CPU_DEFAULT_VARIANTS,
    GPU_DEFAULT_VARIANTS,
    WORKLOADS,
    variant_registry,
)

#: Training iterations per launch by default: enough for stable figures, and the default three
#: variants under all profilers finish in under 3 minutes on 2 CPU cores.
DEFAULT_STEPS = 12
#: Width of the variant list in ``--help`` (argparse's own default for an 80-column terminal).
HELP_WIDTH = 78
#: Column where each variant's description starts in that list.
VARIANT_COLUMN = 17


class KeepLinesFormatter(argparse.HelpFormatter):
    """Wraps one-line descriptions as usual; keeps a text that holds line breaks as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """The text filled to ``width``, or line by line when it is laid out already."""
        if "\n" not in text:
            return super()._fill_text(text, width, indent)
        return "".join(indent + line for line in text.splitlines(keepends=True))


def variants_epilog() -> str:
    """Every variant with one line of what it does, and the default sets, for ``--help``."""
    lines = ["variants (for --variants):"]
    for variant in variant_registry().values():
        lines.append(textwrap.fill(variant.description, HELP_WIDTH,
                                   initial_indent=f"  {variant.name:<{VARIANT_COLUMN - 2}}",
                                   subsequent_indent=" " * VARIANT_COLUMN))
    default = (f"default: {','.join(GPU_DEFAULT_VARIANTS)} on a GPU; "
               f"{','.join(CPU_DEFAULT_VARIANTS)} on a CPU, plus amp where the CPU has native "
               "bf16 (avx512_bf16 or amx_bf16; elsewhere bf16 is emulated and slower than fp32)")
    return "\n".join([*lines, "", textwrap.fill(default, HELP_WIDTH)]) + "\n"


def parse_profilers(text: str) -> tuple[str, ...]:
    """``"kernprof,nsys"`` -> ``("kernprof", "nsys")``, refusing unknown names."""
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [name for name in names if name not in PROFILERS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown profiler {', '.join(unknown)}; choose from {', '.join(PROFILERS)}")
    return names


def parse_counts(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``: distinct whole numbers of at least 1, in order."""
    counts = tuple(dict.fromkeys(positive_int(part.strip()) for part in text.split(",")
                                 if part.strip()))
    if not counts:
        raise argparse.ArgumentTypeError(f"expected process counts such as 1,2,4, got {text!r}")
    return counts


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add run-and-report's own options to ``parser``, and the variant list to its help."""
    parser.formatter_class = KeepLinesFormatter
    parser.epilog = variants_epilog()
    parser.add_argument("--workload", choices=WORKLOADS, default="mnist",
                        help="built-in training to run (default: %(default)s)")
    parser.add_argument("--variants", metavar="LIST",
                        help="comma-separated variants, listed below (default: depends on the "
                             "device, see below)")
    parser.add_argument("--data-dir", type=Path, metavar="DIR",
                        help="folder with MNIST IDX files (MNIST/raw layout); generated data "
                             "otherwise")
    parser.add_argument("--steps", type=positive_int, default=DEFAULT_STEPS,
                        help="training iterations per launch (default: %(default)s)")
    parser.add_argument("--runs-dir", type=Path, metavar="DIR",
                        help="where run folders go (default: OUT/runs)")
    parser.add_argument("--profilers", type=parse_profilers, default=PROFILERS, metavar="LIST",
                        help="comma-separated: kernprof,torch,nsys (default: all three)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where to train (default: %(default)s: CUDA when a GPU is visible)")
    parser.add_argument("--script", type=Path, metavar="PATH",
                        help="profile your own training script instead; its arguments follow --")
    parser.add_argument("script_args", nargs="*", metavar="-- ARGS",
                        help="arguments for --script, after --")
    parser.add_argument("--vary", action="append", metavar="NAME=V1,V2",
                        help="--script: run it once per value, adding --NAME VALUE (spelled as "
                             "its argparse spells NAME) to its arguments; repeat for every "
                             "combination")
    parser.add_argument("--vary-args", action="append", metavar="ARGS",
                        help="--script: one more run with these arguments added (repeatable)")
    parser.add_argument("--emit-slurm", type=Path, metavar="DIR",
                        help="write one sbatch script per run and submit_all.sh; run nothing")
    parser.add_argument("--nodes", type=positive_int, default=1,
                        help="nodes of the ddp variant or of --script (inside a Slurm "
                             "allocation, or with --emit-slurm; default: %(default)s)")
    parser.add_argument("--nproc", type=positive_int,
                        help="processes per node: of the ddp variant (default: 2), of --script "
                             "(default: 1, torchrun from 2), the most per node for --scaling")
    parser.add_argument("--scaling", type=parse_counts, metavar="LIST",
                        help="run the variant (or script) at each process count, e.g. 1,2,4: "
                             "weak scaling (the batch per process stays); torchrun, gloo on "
                             "the CPU and nccl on GPUs")
    parser.add_argument("--strong", action="store_true",
                        help="--scaling: keep the global batch fixed instead (strong scaling)")
    parser.add_argument("--bucket-cap-mb", type=float, default=None,
                        help="DDP gradient bucket size in MB (default: DDP's own, a 1 MiB "
                             "first bucket then 25 MiB; any value given, 25 too, sizes the "
                             "first bucket alike)")
    parser.add_argument("--no-broadcast-buffers", action="store_true",
                        help="DDP: do not broadcast buffers at every forward")
