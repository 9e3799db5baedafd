"""Argument types shared by the command line's parsers (``profreport`` and the runner's options)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value
