"""Writing output files: always to a temporary name in the same folder, then renamed.

A set of files that belong together (a report in several formats) is staged in a temporary
folder and moved into place in one step that Ctrl-C cannot split (:func:`swap_in`), under a lock
on the output folder (:func:`folder_lock`) so two runs never interleave their files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

from profreport.errors import OutputError

#: How long a second run waits for the first to finish writing before it gives up: writing a
#: report set takes seconds, so a lock held this long belongs to a run that is stuck.
LOCK_WAIT_S = 300.0
#: How often a waiting run tries the lock again.
LOCK_POLL_S = 0.2
#: Signals deferred while a report set is moved into place (Ctrl-C, kill).
DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _current_umask() -> int:
    """The process umask (reading it means setting it, so set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside ``path``; rename it onto ``path`` only if the block succeeds."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    binary = "b" in mode
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as handle:
            yield handle
        # mkstemp makes the file private (0600); a report is shared like any file the user makes.
        os.chmod(tmp, 0o666 & ~_current_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically and return the path."""
    with atomic_open(path, "w") as handle:
        handle.write(text)
    return Path(path)


def check_output_folder(folder: Path) -> None:
    """OutputError unless ``folder`` is, or can be made as, a writable folder (checked before
    any work, so an unusable ``--out`` costs nothing)."""
    folder = Path(folder)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        where = "is a file" if existing == folder else f"lies under {existing}, which is a file"
        raise OutputError(f"cannot write the report here: it {where}, not a folder", folder)
    try:  # a real write says more than os.access (root, read-only mounts, /proc)
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as exc:
        what = "" if existing == folder else f" ({existing}, where it would be made)"
        raise OutputError(f"cannot write the report here: the folder is not writable{what}: "
                          f"{exc.strerror or exc}", folder) from None


@contextlib.contextmanager
def folder_lock(folder: Path, on_wait: Callable[[str], None] | None = None,
                wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (made if needed); a second holder waits, saying so
    once through ``on_wait``, and gets an OutputError after ``wait_s`` seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    # The folder itself is locked (flock works on a folder's descriptor): no lock file is left.
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _acquire(fd, folder, on_wait, wait_s)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _acquire(fd: int, folder: Path, on_wait: Callable[[str], None] | None,
             wait_s: float) -> None:
    """Take the lock on ``fd``, polling until ``wait_s`` has passed."""
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        if time.monotonic() >= deadline:
            raise OutputError(f"another profreport has been writing its report here for over "
                              f"{wait_s:.0f} s; wait for it or choose another --out", folder)
        if on_wait is not None and not told:
            on_wait(f"{folder}: another profreport is writing its report here; waiting for it")
            told = True
        time.sleep(LOCK_POLL_S)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C and kill signals until the block ends, then deliver the first one held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in DEFERRED_SIGNALS}
    replaced = [sig for sig, handler in previous.items() if handler is not None]
    for sig in replaced:
        signal.signal(sig, lambda number, frame: held.append(number))
    try:
        yield
    finally:
        for sig in replaced:
            signal.signal(sig, previous[sig])
        if held:
            signal.raise_signal(held[0])


@contextlib.contextmanager
def staging_folder(folder: Path) -> Iterator[Path]:
    """A private temporary folder inside ``folder``, removed with whatever is left in it."""
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".profreport-staging.", dir=folder))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def swap_in(staging: Path, folder: Path, names: Sequence[str],
            stale: Sequence[str] = ()) -> list[Path]:
    """Move ``names`` from ``staging`` into ``folder`` and remove ``stale`` files there, with
    signals deferred so an interrupt leaves the old set or the new one, never a mix."""
    mask = 0o666 & ~_current_umask()
    for name in names:
        os.chmod(staging / name, mask)
    with signals_deferred():
        for name in names:
            os.replace(staging / name, folder / name)
        for name in stale:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(folder / name)
    return [folder / name for name in names]
