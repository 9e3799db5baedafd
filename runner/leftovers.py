"""A launch's processes found by their mark wherever they run: their CPU time, and those left
running once it ended (nsys's agent), ended.

``nsys profile`` starts its agent (``nsys --start-agent``) as a daemon: init is its parent and
the session is its own, so no process group, session or parent chain of the launch reaches it.
When a capture goes wrong (``nsys profile`` killed, or a capture that never ends: without perf
events nsys 2022.4's agent spins on CPU sampling), the agent is left running, a core busy for
hours. It keeps the environment it was started with, so a launch under nsys gets a variable
that names that launch alone (:data:`LAUNCH_MARK`). Whatever still carries it once the launch
has ended and :data:`LEFTOVER_GRACE_S` has passed is left over from that launch and is ended.
Another launch's process carries another value, and another user's process cannot have its
environment read, so neither is ever signalled.
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from pathlib import Path
from types import TracebackType

#: The environment variable whose value names one launch (:func:`new_mark`).
LAUNCH_MARK = "PROFREPORT_LAUNCH"
#: Seconds a launch's processes get to end by themselves once it has returned: nsys's agent
#: exits about a second after ``nsys profile`` does.
LEFTOVER_GRACE_S = 5.0
#: Seconds between asking the leftovers to end (SIGTERM) and killing them (SIGKILL).
TERMINATE_WAIT_S = 2.0
#: Seconds between two reads of /proc while waiting.
POLL_S = 0.1
#: The words of a leftover's command line its line names (``nsys --start-agent``).
NAMED_WORDS = 2
PROC = Path("/proc")
#: Seconds between two samples of the marked processes' CPU time while a launch runs: what a
#: process uses after its last sample is missed, at most this much CPU time per process (a
#: launch of a minute on 2 CPUs, with its 4 processes, loses under 2% of its 120 CPU seconds).
CPU_SAMPLE_S = 0.5
# In /proc/PID/stat, after the command's closing parenthesis: the fields' positions of user
# and system time (clock ticks) and of the start time (which tells a reused pid apart).
_UTIME, _STIME, _STARTTIME = 11, 12, 19


def new_mark() -> str:
    """A value of :data:`LAUNCH_MARK` that names one launch alone."""
    return secrets.token_hex(16)


def marked_environment(mark: str) -> dict[str, str]:
    """This process's environment with :data:`LAUNCH_MARK` set to ``mark``, for a launch."""
    return {**os.environ, LAUNCH_MARK: mark}


def carries_mark(pid: int, mark: str) -> bool:
    """Whether process ``pid`` was started with the launch's mark in its environment (False
    for a process that is gone, a zombie, or another user's, whose environment is unreadable)."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{LAUNCH_MARK}={mark}".encode() in environ.split(b"\0")


def marked_processes(mark: str) -> list[int]:
    """The live processes started with ``mark`` in their environment, this one excepted."""
    try:
        entries = list(PROC.iterdir())
    except OSError:  # no /proc (not Linux): no process to find
        return []
    own = os.getpid()
    pids = (int(entry.name) for entry in entries if entry.name.isdigit())
    return sorted(pid for pid in pids if pid != own and carries_mark(pid, mark))


def command_of(pid: int) -> str:
    """The first words of the command line of process ``pid`` (program name without its
    folder), or ``?`` once it is gone."""
    try:
        words = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")[:NAMED_WORDS]
    except OSError:
        return "?"
    names = [os.fsdecode(word) for word in words if word]
    return " ".join([Path(names[0]).name, *names[1:]]) if names else "?"


def signal_marked(pid: int, mark: str, signum: int) -> None:
    """Send ``signum`` to ``pid`` if it still carries ``mark``, through a pidfd opened before
    the check, so a pid that a new process took meanwhile is never signalled."""
    try:
        handle = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if carries_mark(pid, mark):
            signal.pidfd_send_signal(handle, signum)
    except OSError:
        pass  # it ended between the check and the signal
    finally:
        os.close(handle)


def wait_for_marked(mark: str, seconds: float) -> list[int]:
    """Wait up to ``seconds`` for the processes carrying ``mark`` to end; those still running."""
    deadline = time.monotonic() + seconds
    while True:
        left = marked_processes(mark)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(POLL_S)


def end_leftovers(mark: str, launcher: str) -> str | None:
    """End the processes the launch marked ``mark`` left running (SIGTERM, then SIGKILL for
    those still there after TERMINATE_WAIT_S); one line saying which, or None when it left
    none."""
    left = wait_for_marked(mark, LEFTOVER_GRACE_S)
    if not left:
        return None
    named = ", ".join(f"{command_of(pid)} (pid {pid})" for pid in left)
    for pid in left:
        signal_marked(pid, mark, signal.SIGTERM)
    stubborn = wait_for_marked(mark, TERMINATE_WAIT_S)
    for pid in stubborn:
        signal_marked(pid, mark, signal.SIGKILL)
    survivors = wait_for_marked(mark, TERMINATE_WAIT_S)
    how = "SIGTERM, then SIGKILL" if stubborn else "SIGTERM"
    line = (f"{launcher} left {len(left)} process(es) running after the launch ended: "
            f"{named}; ended ({how})")
    if survivors:
        line += f"; still running: pid {', '.join(map(str, survivors))}"
    return line


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name, or None once it is gone."""
    try:
        return (PROC / str(pid) / "stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    except (OSError, IndexError, UnicodeDecodeError):
        return None


class MarkedCpu:
    """The CPU time of every process that carries a launch's mark, sampled in a thread while
    the launch runs: nsys runs the profiled program under a launcher whose CPU time never comes
    back to the runner when it is reaped, and its agent in a session of its own. Each
    process's own user and system time (never its children's, which are marked and counted
    themselves) as last sampled; a process is told apart from a later one that reuses its pid
    by its start time."""

    def __init__(self, mark: str) -> None:
        self._mark = mark
        self._marked: dict[tuple[int, str], bool] = {}
        self._cpu_ticks: dict[tuple[int, str], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)

    def __enter__(self) -> MarkedCpu:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _sample_until_stopped(self) -> None:
        """Sample every CPU_SAMPLE_S until stopped, and once more then."""
        while not self._stop.wait(CPU_SAMPLE_S):
            self.sample()
        self.sample()

    def sample(self) -> None:
        """Read the CPU time of each live process carrying the mark (its environment is read
        once per process)."""
        try:
            pids = [int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]
        except OSError:
            return
        for pid in pids:
            fields = _stat_fields(pid)
            if fields is None or len(fields) <= _STARTTIME:
                continue
            key = (pid, fields[_STARTTIME])
            if key not in self._marked:
                self._marked[key] = carries_mark(pid, self._mark)
            if self._marked[key]:
                self._cpu_ticks[key] = int(fields[_UTIME]) + int(fields[_STIME])

    def cpu_s(self) -> float:
        """CPU seconds the marked processes used, as last sampled."""
        return sum(self._cpu_ticks.values()) / os.sysconf("SC_CLK_TCK")
