"""Argument types shared by the command line's parsers (``profreport`` and the runner's options)."""

from __future__ import annotations

import argparse
import sys


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


class DeprecatedAlias(argparse.Action):
    """An old option name that still works, saying on stderr which name replaced it."""

    def __init__(self, *args: object, replacement: str, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.replacement = replacement

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"profreport: {option_string} is deprecated; use {self.replacement}",
              file=sys.stderr)
        setattr(namespace, self.dest, values)
