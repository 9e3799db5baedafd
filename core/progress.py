"""Progress of reading the input files: a one-line bar on the terminal (bytes read, files done),
and nothing at all when stdout or stderr is not a terminal (a pipe, a file, CI).

Bytes read are measured, not guessed: on Linux, the read offset of every open descriptor on a
file being read, in this process and in its worker processes (``/proc/PID/fdinfo``); elsewhere
the sizes of the files done.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from profreport.units import nbytes

#: The bar appears only once reading has taken this long, so quick runs stay quiet.
SHOW_AFTER_S = 1.0
#: Seconds between two redraws.
REDRAW_S = 0.25
#: Width of the bar itself, in characters.
BAR_WIDTH = 24
PROC = Path("/proc")


class ReadProgress:
    """What the analysis reports while it reads files; this base reports nowhere."""

    def start(self, files: list[Path]) -> None:
        """Files about to be read."""

    def file_done(self, file: Path) -> None:
        """One of the started files is read."""

    def close(self) -> None:
        """Reading is over."""


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it (Linux ``/proc/PID/task/TID/children``)."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        for task in (PROC / str(current) / "task").glob("*/children"):
            try:
                queue += [int(child) for child in task.read_text().split()]
            except (OSError, ValueError):
                continue
    return found


def _offsets(files: set[Path]) -> dict[Path, int]:
    """The furthest read offset of any open descriptor on each of ``files``, in this process
    and its children."""
    offsets: dict[Path, int] = {}
    for pid in process_tree(os.getpid()):
        for fd in (PROC / str(pid) / "fd").glob("*"):
            try:
                target = Path(os.readlink(fd))
                if target not in files:
                    continue
                info = (PROC / str(pid) / "fdinfo" / fd.name).read_text()
            except OSError:
                continue
            position = int(info.split("pos:", 1)[1].split()[0]) if "pos:" in info else 0
            offsets[target] = max(offsets.get(target, 0), position)
    return offsets


class TerminalProgress(ReadProgress):
    """The bar on ``stream``, redrawn by a background thread while files are read."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self._stream = stream
        self._sizes: dict[Path, int] = {}
        self._done: set[Path] = set()
        #: The furthest offset seen in each file (a descriptor closed at the end reads as 0).
        self._offsets: dict[Path, int] = {}
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = False

    def start(self, files: list[Path]) -> None:
        """Count the files' sizes and start redrawing."""
        with self._lock:
            for file in files:
                try:
                    self._sizes[file.resolve()] = file.stat().st_size
                except OSError:
                    continue
        if self._thread is None:
            self._thread = threading.Thread(target=self._redraw, name="profreport-progress",
                                            daemon=True)
            self._thread.start()

    def file_done(self, file: Path) -> None:
        """Count a file as read."""
        with self._lock:
            self._done.add(file.resolve())

    def reading(self) -> bool:
        """Whether some started file is not read yet."""
        with self._lock:
            return bool(set(self._sizes) - self._done)

    def line(self) -> str:
        """The bar as text: bytes read of the total, files done, elapsed time."""
        with self._lock:
            sizes, done = dict(self._sizes), set(self._done)
        reading = set(sizes) - done
        for file, offset in (_offsets(reading) if reading and PROC.is_dir() else {}).items():
            self._offsets[file] = max(self._offsets.get(file, 0), offset)
        read = sum(sizes[f] for f in done if f in sizes) + sum(
            min(self._offsets.get(f, 0), sizes[f]) for f in reading)
        total = sum(sizes.values())
        share = read / total if total else 0.0
        filled = int(share * BAR_WIDTH)
        return (f"reading [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
                f"{nbytes(read)} / {nbytes(total)}, {len(done & set(sizes))}/"
                f"{len(sizes)} files, {time.monotonic() - self._started:.0f} s")

    def _redraw(self) -> None:
        """Redraw the line every REDRAW_S once SHOW_AFTER_S have passed while files are read;
        clear it while none is."""
        while not self._stop.wait(REDRAW_S):
            if not self.reading():
                self._clear()
            elif time.monotonic() - self._started >= SHOW_AFTER_S:
                self._stream.write("\r" + self.line() + "\x1b[K")
                self._stream.flush()
                self._shown = True

    def _clear(self) -> None:
        """Erase the line if it is shown."""
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False

    def close(self) -> None:
        """Stop redrawing and clear the line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._clear()


def read_progress() -> ReadProgress:
    """A terminal bar when stdout and stderr are both terminals, else a silent one."""
    if sys.stdout.isatty() and sys.stderr.isatty():
        return TerminalProgress(sys.stderr)
    return ReadProgress()
