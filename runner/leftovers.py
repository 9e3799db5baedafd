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

Every launch is marked (a plain run's orphaned DataLoader worker, a helper a script forks and
leaves, are its processes too). While it runs, the runner is the subreaper of its processes
(``prctl PR_SET_CHILD_SUBREAPER``): nsys's agent, and any process whose parent ends first, is
reparented to the runner instead of init, so the CPU time of every process of the launch that
ends comes back to the runner, however short-lived (:class:`MarkedCpu`).
"""

from __future__ import annotations

import ctypes
import os
import resource
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
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
#: Seconds between two samples of the marked processes while a launch runs. Only a marked
#: process outside the runner's tree (whose parent is neither marked nor the runner), or every
#: process where prctl cannot make the runner a subreaper, counts as last sampled: what it
#: uses after that is missed, at most this much CPU time per process.
CPU_SAMPLE_S = 0.5
#: Reads of /proc the final count makes at most (a few ms each) to find one flanked by reads in
#: which no marked process ended: a launch whose processes end without pause for longer is
#: counted from its last reads, a process ended meanwhile left to its reaper (never twice).
SETTLE_READS = 20
#: prctl(2) options: make the calling process the reaper of its descendants' orphans; read it.
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
# In /proc/PID/stat, after the command's closing parenthesis: the fields' positions of the
# state, the parent's pid, the flags, user and system time, the user and system time of the
# children it reaped (with theirs; clock ticks) and the start time (which tells a reused pid
# apart).
_STATE, _PPID, _FLAGS, _UTIME, _STIME, _CUTIME, _CSTIME, _STARTTIME = 0, 1, 6, 11, 12, 13, 14, 19
#: The kernel's flag of a process that is exiting (``PF_EXITING`` in /proc/PID/stat's flags):
#: its memory and environment may be gone while it is not a zombie yet.
PF_EXITING = 0x4
#: Seconds the runner waits for an adopted process that is exiting to become a zombie it can
#: reap (a few ms: its memory being freed), so that a leftover just ended is not left unreaped.
EXITING_WAIT_S = 2.0
#: Seconds between two looks at an exiting process.
EXITING_POLL_S = 0.01
#: A process told apart from a later one that reuses its pid: (pid, start time).
ProcessKey = tuple[int, str]


def new_mark() -> str:
    """A value of :data:`LAUNCH_MARK` that names one launch alone."""
    return secrets.token_hex(16)


def marked_environment(mark: str) -> dict[str, str]:
    """This process's environment with :data:`LAUNCH_MARK` set to ``mark``, for a launch."""
    return {**os.environ, LAUNCH_MARK: mark}


def carries_mark(pid: int, mark: str) -> bool:
    """Whether process ``pid`` was started with the launch's mark in its environment (False
    for a process that is gone, a zombie, or another user's, whose environment is unreadable).
    A process whose main thread has ended while others run on (its /proc entry a zombie, its
    environment unreadable there) is read through one of those threads."""
    entry = f"{LAUNCH_MARK}={mark}".encode()
    for environ_file in _process_files(pid, "environ"):
        try:
            return entry in environ_file.read_bytes().split(b"\0")
        except OSError:
            continue
    return False


def _process_files(pid: int, name: str) -> Iterator[Path]:
    """The /proc file ``name`` of process ``pid``: its own, then each of its threads' (read
    there once its main thread has ended)."""
    yield PROC / str(pid) / name
    try:
        threads = sorted((PROC / str(pid) / "task").iterdir())
    except OSError:
        return
    yield from (thread / name for thread in threads if thread.name != str(pid))


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
    for cmdline in _process_files(pid, "cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")[:NAMED_WORDS]
        except OSError:
            continue
        names = [os.fsdecode(word) for word in words if word]
        if names:
            return " ".join([Path(names[0]).name, *names[1:]])
    return "?"


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


def rusage_cpu_s(who: int) -> float:
    """User + system CPU seconds of this process (RUSAGE_SELF) or its reaped children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _prctl() -> Callable[..., int] | None:
    """The C library's prctl, or None where it has none (not Linux)."""
    return getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


def set_subreaper(on: bool) -> bool:
    """Make this process the subreaper of its descendants (or stop); whether prctl did."""
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0


def is_subreaper() -> bool:
    """Whether this process is a subreaper now."""
    prctl, value = _prctl(), ctypes.c_int(0)
    return prctl is not None and prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0,
                                       0) == 0 and value.value != 0


@dataclass(frozen=True)
class _Sampled:
    """A marked process as read: its own CPU ticks, those of the children it reaped, its
    parent, and the sample it was last seen in."""

    own: int
    reaped: int
    parent: int
    parent_key: ProcessKey | None
    round: int = 0


#: One read of /proc: each marked process's CPU ticks then, by its key.
_Reading = dict[ProcessKey, _Sampled]


class MarkedCpu:
    """The CPU time of the processes that carry a launch's mark: a launch's processes may run
    outside the runner's tree (nsys runs the profiled program under a launcher, and its agent
    in a session of its own) or outlive their parent (a DataLoader worker, a helper forked
    and left), so RUSAGE_CHILDREN alone misses them. While the launch runs, the runner is their
    subreaper: a process whose parent ends is reparented to the runner, not init. The kernel
    adds a process's CPU time, with that of the children it reaped, to the parent that reaps
    it, so when the launch returns each of its processes that ended is counted once (however
    short its life): in the runner's RUSAGE_CHILDREN (the orphans it adopted are reaped
    first), or in the reaped time of a marked process still there, whose own and reaped time
    are read then from /proc/PID/stat. Those reads are not one atomic snapshot: a process
    read and then reaped before its parent is read would count twice, one reaped before it is
    read and after its parent was, not at all. So the count is made from a read that is
    flanked by two others in which no marked process ended (:data:`SETTLE_READS`). The marked
    processes are also sampled every CPU_SAMPLE_S: one whose parent was neither marked nor the
    runner counts as last sampled, and where prctl fails each counts its own time as last
    sampled. A child whose parent ignores SIGCHLD is reaped by the kernel, which then adds its
    time to no one: it is missed."""

    def __init__(self, mark: str) -> None:
        self._mark = mark
        self._marked: dict[ProcessKey, bool] = {}
        self._sampled: dict[ProcessKey, _Sampled] = {}
        self._round = 0
        self._reaped_s = 0.0
        #: Marked processes read in the last round that ended before the read after it: their
        #: time is their reaper's (or, reaped after their reaper was read, missed).
        self._ended: set[ProcessKey] = set()
        #: The runner's children before the launch (never reaped here), None until entered.
        self._before: set[ProcessKey] | None = None
        self._was_subreaper = self._subreaper = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)

    def __enter__(self) -> MarkedCpu:
        self._before = set(self._children())
        self._was_subreaper = is_subreaper()
        self._subreaper = set_subreaper(True)
        self._reaped_s = rusage_cpu_s(resource.RUSAGE_CHILDREN)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        """Once the launch has returned: reap the orphans it left ended, read what the runner
        reaped, and read the marked processes still there."""
        self._stop.set()
        self._thread.join()
        self.reap_adopted()
        self._reaped_s = rusage_cpu_s(resource.RUSAGE_CHILDREN) - self._reaped_s
        self._final_sample()
        if self._subreaper and not self._was_subreaper:
            set_subreaper(False)

    def _sample_until_stopped(self) -> None:
        """Sample every CPU_SAMPLE_S until stopped."""
        while not self._stop.wait(CPU_SAMPLE_S):
            self.sample()

    def _children(self) -> dict[ProcessKey, list[str]]:
        """The runner's children now, with their stat fields."""
        own = os.getpid()
        return {(pid, fields[_STARTTIME]): fields for pid, fields in _process_stats().items()
                if int(fields[_PPID]) == own}

    def reap_adopted(self) -> None:
        """Reap the runner's ended children that the launch left it (orphans it adopted as
        subreaper; never one it had before the launch, nor before it was entered), waiting up
        to EXITING_WAIT_S for those that are exiting (a leftover just ended) to end."""
        if self._before is None:
            return
        deadline = time.monotonic() + EXITING_WAIT_S
        while True:
            exiting = False
            for key, fields in self._children().items():
                if key in self._before:
                    continue
                if fields[_STATE] == "Z":
                    exiting = not _reap(key[0]) or exiting
                else:
                    exiting = exiting or bool(int(fields[_FLAGS]) & PF_EXITING)
            if not exiting or time.monotonic() >= deadline:
                return
            time.sleep(EXITING_POLL_S)

    def sample(self) -> None:
        """Read the CPU time of each process carrying the mark, as one round."""
        self._record(self._read(), set())

    def _final_sample(self) -> None:
        """The last round, read as the launch returns: a read between two others such that no
        marked process ended from the first of the three to the last (so none ended while it
        was read). Past SETTLE_READS, the last but one, each of its processes that ended
        before the last read left to its reaper: counted at most once, maybe missed."""
        reads, made = [self._read(), self._read(), self._read()], 3
        while made < SETTLE_READS and not (_steady(*reads[:2]) and _steady(*reads[1:])):
            reads, made = [*reads[1:], self._read()], made + 1
        counted, after = reads[1:]
        self._record(counted, set(counted) - set(after))

    def _read(self) -> _Reading:
        """Each process carrying the mark now, with its CPU ticks (its environment read once
        per process; one that ended before it was seen carries it when its parent does)."""
        stats = _process_stats()
        keys = {pid: (pid, fields[_STARTTIME]) for pid, fields in stats.items()}
        reading: _Reading = {}
        for pid in sorted(stats, key=lambda pid: stats[pid][_STATE] == "Z"):
            fields, key = stats[pid], keys[pid]
            parent = int(fields[_PPID])
            if key not in self._marked:
                self._marked[key] = (carries_mark(pid, self._mark) if fields[_STATE] != "Z"
                                     else self._marked.get(keys.get(parent, (0, "")), False))
            if self._marked[key]:
                reading[key] = _Sampled(int(fields[_UTIME]) + int(fields[_STIME]),
                                        int(fields[_CUTIME]) + int(fields[_CSTIME]), parent,
                                        keys.get(parent))
        return reading

    def _record(self, reading: _Reading, ended: set[ProcessKey]) -> None:
        """Keep ``reading`` as the latest round; ``ended``: its processes known to have ended
        (and maybe been reaped) after it was read."""
        self._round += 1
        self._ended = ended
        for key, sampled in reading.items():
            self._sampled[key] = replace(sampled, round=self._round)

    def _counted_by_kernel(self, sampled: _Sampled) -> bool:
        """Whether an ended process's time reached, by reaping, the runner or a marked
        process (its parent was one of them when last sampled)."""
        return sampled.parent == os.getpid() or (
            sampled.parent_key is not None and self._marked.get(sampled.parent_key, False))

    def cpu_s(self) -> float:
        """CPU seconds the launch's processes used, as of when it returned."""
        if not self._subreaper:
            return sum(s.own for s in self._sampled.values()) / os.sysconf("SC_CLK_TCK")
        ticks = sum(s.own + s.reaped for key, s in self._sampled.items()
                    if (s.round == self._round and key not in self._ended)
                    or not self._counted_by_kernel(s))
        return self._reaped_s + ticks / os.sysconf("SC_CLK_TCK")


def _reap(pid: int) -> bool:
    """Reap child ``pid``, a zombie, without waiting; False while it cannot be reaped yet: a
    process whose main thread ended first reads as a zombie until its last thread has ended."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:  # reaped meanwhile by whoever started it
        return True


def _steady(earlier: _Reading, later: _Reading) -> bool:
    """Whether every marked process of ``earlier`` is still there in ``later`` (none ended and
    was reaped between the two reads)."""
    return earlier.keys() <= later.keys()


def _process_stats() -> dict[int, list[str]]:
    """The /proc/PID/stat fields (after the command's name) of every process now, read from
    the highest pid down: a child (mostly of a higher pid than its parent) reaped during the
    read was then reaped before its parent was read, and counts there. A process gone before
    its turn is left out."""
    try:
        pids = [int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]
    except OSError:
        return {}
    stats = {pid: _stat_fields(pid) for pid in sorted(pids, reverse=True)}
    return {pid: fields for pid, fields in stats.items()
            if fields is not None and len(fields) > _STARTTIME}
