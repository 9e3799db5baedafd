"""The exception hierarchy; the CLI turns each into one line and an exit code (see cli.main)."""

from __future__ import annotations

from pathlib import Path

from profreport.text import MAX_ERROR_NAME, error_text

#: Exit status when some inputs failed but a report was still written for the others.
EXIT_PARTIAL = 1
#: An error line's message (after the file name) is elided to this many characters.
MAX_ERROR_MESSAGE = 4 * MAX_ERROR_NAME
#: Exit status after Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130
#: Exit status when the reader of stdout went away (`| head`): 128 + SIGPIPE, as a shell reports
#: a command its pipe's reader closed on.
EXIT_BROKEN_PIPE = 141


class ProfreportError(Exception):
    """Base of every error profreport reports to the user as one line."""

    exit_code = 1

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else str(path)

    def one_line(self) -> str:
        """The message as one line after the file it concerns; names elided and neutralised."""
        text = error_text(self.args[0], MAX_ERROR_MESSAGE)
        return f"{error_text(self.path)}: {text}" if self.path else text


class InputError(ProfreportError):
    """An input file is unreadable, damaged, of an unknown kind, or refused as unsafe."""


class NothingReadable(InputError):
    """No input of an analysis could be read; ``failures`` keeps each input's own line (a line
    may hold '; ' itself: "unknown content); it reads: ...")."""

    def __init__(self, failures: list[str]) -> None:
        super().__init__("no input could be read: " + "; ".join(failures))
        self.failures = list(failures)


class UnsupportedFormatError(InputError):
    """An input file is of a known kind but a version or schema profreport cannot read."""


class MissingToolError(ProfreportError):
    """An external tool (nsys, kernprof, torch, chromium) is needed and not installed."""

    exit_code = 3

    @classmethod
    def for_extra(cls, what: str, modules: list[str], extra: str,
                  note: str = "") -> MissingToolError:
        """``WHAT needs A, B, which are not installed: pip install 'profreport[EXTRA]'``."""
        verb = "is" if len(modules) == 1 else "are"
        return cls(f"{what} needs {', '.join(modules)}, which {verb} not installed: "
                   f"pip install 'profreport[{extra}]'{note}")


class UsageError(ProfreportError):
    """The command line asks for something impossible (bad option values, no inputs)."""

    exit_code = 2


class RubricError(ProfreportError):
    """A grading rubric cannot be used: not TOML, an unknown key, or a bad value (with its line)."""

    exit_code = 2


class OutputError(UsageError):
    """The output folder cannot be used: a file, under a file, not writable, or locked."""


class RunError(ProfreportError):
    """A training run launched by run-and-report failed."""


def failure_line(exc: BaseException, path: Path) -> str:
    """One line for any error met while reading or analysing ``path``."""
    if isinstance(exc, ProfreportError):
        return exc.one_line() if exc.path else InputError(str(exc), path).one_line()
    if isinstance(exc, RecursionError):
        reason = "nested too deeply to analyse (RecursionError)"
    elif isinstance(exc, MemoryError):
        reason = "too large to analyse in this machine's memory (MemoryError)"
    else:
        reason = f"cannot read ({type(exc).__name__}: {exc})"
    return InputError(reason, path).one_line()
