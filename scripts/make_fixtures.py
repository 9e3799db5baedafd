#!/usr/bin/env python
"""Regenerate ``fixtures/``: small real profiles made by profreport's own runner on the CPU.

    .venv/bin/python scripts/make_fixtures.py [--out fixtures] [--only NAME ...]

Three run folders, each with ``manifest.json`` and the profiles it lists:
``loader_heavy`` (no DataLoader workers, elastic + affine augmentation per sample, a quarter-width
MNIST network), ``compute_heavy`` (no augmentation, 1.5x-width network, batch 128) and
``ddp_gloo`` (2 ranks over gloo, one torch.profiler trace per rank). Every profile is parsed
afterwards; the script fails when one does not parse.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from profreport.manifest import load_manifest
from profreport.parsers import parse_file
from profreport.runner.orchestrate import RunOptions, run_variant
from profreport.runner.variants import Variant

REPO = Path(__file__).resolve().parents[1]
#: Few steps keep the whole folder under ~3 MB; the torch.profiler records 4 of them.
FIXTURE_STEPS = 6
ACTIVE_STEPS = 4
ALL_PROFILERS = ("kernprof", "torch", "nsys")

FIXTURES: list[tuple[Variant, dict]] = [
    (Variant("loader_heavy", "no DataLoader workers: the per-sample augmentation runs in the "
             "training loop", {"num_workers": 0}),
     {"augment": True, "width": 0.25, "batch_size": 64, "profilers": ALL_PROFILERS}),
    (Variant("compute_heavy", "cheap loader (no augmentation), 1.5x-width network, batch 128",
             {"num_workers": 1}),
     {"augment": False, "width": 1.5, "batch_size": 128, "profilers": ALL_PROFILERS}),
    (Variant("ddp_gloo", "DistributedDataParallel, 2 ranks over gloo on the CPU",
             {"ddp": True, "nproc": 2, "num_workers": 0}),
     {"augment": False, "width": 0.25, "batch_size": 32, "profilers": ("torch",)}),
]


def make(out: Path, only: set[str] | None = None) -> list[Path]:
    """Run every fixture variant (or those named in ``only``) into ``out``; raises SystemExit
    when one fails."""
    base = RunOptions("mnist", FIXTURE_STEPS, out, ALL_PROFILERS, "cpu", trial_steps=3,
                      active_steps=ACTIVE_STEPS)
    started = time.perf_counter()
    folders = []
    for variant, settings in FIXTURES:
        if only and variant.name not in only:
            continue
        outcome = run_variant(variant, replace(base, **settings), started)
        if outcome.failures:
            raise SystemExit(f"{variant.name} failed: {'; '.join(outcome.failures)}")
        folders.append(outcome.folder)
    return folders


def check(folder: Path) -> None:
    """Parse every artifact the folder's manifest lists; print what each holds."""
    manifest = load_manifest(folder / "manifest.json")
    for artifact in manifest.artifacts:
        profile = parse_file(folder / artifact.path)
        filled = sorted(name for name in profile.tables if profile.has(name))
        print(f"{folder.name}/{artifact.path}: {profile.kind}, tables {', '.join(filled)}")


def main() -> int:
    """Make the fixtures, check them, and print the folder's size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "fixtures")
    parser.add_argument("--only", action="append", metavar="NAME",
                        choices=[variant.name for variant, _ in FIXTURES],
                        help="regenerate only this fixture (repeatable)")
    args = parser.parse_args()
    for folder in make(args.out, set(args.only or ())):
        for log in folder.glob("*.log"):
            log.unlink()
        check(folder)
    size = sum(path.stat().st_size for path in args.out.rglob("*") if path.is_file())
    print(f"{args.out}: {size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
