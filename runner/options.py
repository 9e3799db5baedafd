"""Command-line options of ``run-and-report`` (filled in by the runner)."""

from __future__ import annotations

import argparse


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add run-and-report's own options to ``parser``."""
