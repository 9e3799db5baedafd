"""Processes a launch leaves running after it ended (nsys's agent, in a session of its own) are
found by the launch's mark in their environment and ended; nothing else is touched."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from profreport.runner import leftovers
from profreport.runner.launch import Launch, run_launch
from profreport.runner.leftovers import end_leftovers, marked_environment, new_mark

#: A process that daemonizes as nsys's agent does (fork, new session, fork: init is its parent
#: and no group or session of its starter holds it), writes its pid to argv[1] and sleeps;
#: with argv[2] == "stubborn" it ignores SIGTERM.
DAEMON = """\
import os, signal, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
"""
#: The variable the nsys test puts in the runner's own environment, so that it finds what the
#: capture left without the runner's mark.
TEST_MARK = "PROFREPORT_TEST_CAPTURE"


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is no zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def with_entry(entry: str) -> list[int]:
    """Live processes whose environment holds ``entry`` (``NAME=value``)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if entry.encode() in environ.split(b"\0"):
            found.append(int(proc.name))
    return found


def start_daemon(env: dict[str, str], folder: Path, name: str, stubborn: bool = False) -> int:
    """Start :data:`DAEMON` with ``env``; its pid, once it has detached."""
    pid_file = folder / f"{name}.pid"
    subprocess.run([sys.executable, "-c", DAEMON, str(pid_file), "stubborn" if stubborn else ""],
                   env=env, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=30)
    deadline = time.monotonic() + 30
    while not pid_file.is_file():
        assert time.monotonic() < deadline, "the daemon never wrote its pid"
        time.sleep(0.05)
    return int(pid_file.read_text())


def kill_marked(entry: str) -> None:
    """SIGKILL every process holding ``entry`` in its environment (tests clean up only what
    they started, found by their own mark, whether or not its pid was ever read)."""
    for pid in with_entry(entry):
        with contextlib.suppress(ProcessLookupError):  # ended on its own meanwhile
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Callable[..., int]]:
    """Starts :data:`DAEMON` marked with a launch's mark (``daemon(mark, name, stubborn)``);
    after the test, whatever carries one of those marks is killed, the test passed or not."""
    entries: list[str] = []

    def start(mark: str, name: str, stubborn: bool = False) -> int:
        entries.append(f"{leftovers.LAUNCH_MARK}={mark}")
        return start_daemon(marked_environment(mark), tmp_path, name, stubborn)

    yield start
    for entry in entries:
        kill_marked(entry)
    deadline = time.monotonic() + 30  # SIGKILL is not instant on a loaded machine
    while any(running(pid) for entry in entries for pid in with_entry(entry)):
        assert time.monotonic() < deadline, "a daemon of the test outlived SIGKILL"
        time.sleep(0.05)


def test_the_launchs_daemons_are_ended_and_another_launchs_is_not(
        monkeypatch: pytest.MonkeyPatch, daemon: Callable[..., int]) -> None:
    """Two daemons of this launch, in sessions of their own (one ignores SIGTERM), are ended:
    SIGTERM, then SIGKILL; the daemon of another launch, also marked, runs on."""
    monkeypatch.setattr(leftovers, "LEFTOVER_GRACE_S", 0.5)
    mark, other = new_mark(), new_mark()
    ours = [daemon(mark, "plain"), daemon(mark, "stubborn", stubborn=True)]
    theirs = daemon(other, "theirs")
    assert all(running(pid) for pid in [*ours, theirs])
    assert os.getsid(ours[0]) != os.getsid(0)  # a session of its own
    line = end_leftovers(mark, "nsys")
    assert not any(running(pid) for pid in ours)
    assert running(theirs)
    python = Path(sys.executable).name
    assert line == (f"nsys left 2 process(es) running after the launch ended: "
                    f"{python} -c (pid {min(ours)}), {python} -c (pid {max(ours)}); "
                    "ended (SIGTERM, then SIGKILL)")
    assert end_leftovers(other, "nsys") == (
        f"nsys left 1 process(es) running after the launch ended: {python} -c (pid {theirs}); "
        "ended (SIGTERM)")
    assert not running(theirs)


def test_a_launch_that_left_nothing_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch whose processes all ended: no line, no wait past the first look. The grace is
    set to 120 s, so waiting it out fails the hang guard of 60 s, however loaded the machine."""
    monkeypatch.setattr(leftovers, "LEFTOVER_GRACE_S", 120.0)
    begun = time.monotonic()
    assert end_leftovers(new_mark(), "nsys") is None
    assert time.monotonic() - begun < 60


#: Captures the nsys test tries: about half of them hang here and leave their agent.
HANG_TRIES = 4


def test_without_proc_nothing_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       daemon: Callable[..., int]) -> None:
    """Where /proc does not exist, no process is found and none is signalled: the launch's
    daemon runs on (the runner reads no other table of processes)."""
    mark = new_mark()
    pid = daemon(mark, "daemon")
    monkeypatch.setattr(leftovers, "PROC", tmp_path / "no-proc")
    assert end_leftovers(mark, "nsys") is None and running(pid)


@pytest.mark.nsys
@pytest.mark.slow
def test_the_agent_of_a_killed_capture_is_ended(tmp_path: Path, nsys_available: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A real hung capture: nsys 2022.4 with CPU sampling on, where perf events are not
    available (this container), often never finishes; ``timeout`` kills ``nsys profile`` and
    its agent (``nsys --start-agent``, a daemon in a session of its own) spins on. run_launch
    ends it and says so; before, it ran on (one had used ~77% of a core for 2 hours)."""
    entry = f"{TEST_MARK}={new_mark()}"
    monkeypatch.setenv(*entry.split("=", 1))
    command = ["timeout", "8", nsys_available, "profile", "--force-overwrite=true",
               "-o", str(tmp_path / "hung"), sys.executable, "-c", "pass"]
    try:
        for _ in range(HANG_TRIES):
            record = run_launch(Launch("nsys", command, tmp_path / "nsys.log"))
            assert with_entry(entry) == []
            if record.leftovers is not None:
                assert "nsys --start-agent (pid " in record.leftovers
                return
        pytest.skip(f"none of {HANG_TRIES} captures left its agent running: nothing to end")
    finally:
        kill_marked(entry)


#: A launcher whose CPU-burning children live well under CPU_SAMPLE_S: argv[1] children
#: waited for in turn, then argv[2] orphans (each forked by a child that exits at once, so their
#: parent is gone: the runner adopts them), each spinning for argv[3] CPU seconds. It returns
#: once every orphan has ended (closed its end of a pipe).
LAUNCHER = """\
import os, sys, time
def spin(seconds):
    while time.process_time() < seconds:
        pass
waited, orphans, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
for _ in range(waited):
    pid = os.fork()
    if pid == 0:
        spin(seconds)
        os._exit(0)
    os.waitpid(pid, 0)
done, ending = os.pipe()
for _ in range(orphans):
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            os.close(done)
            spin(seconds)
        os._exit(0)
    os.waitpid(pid, 0)
os.close(ending)
os.read(done, 1)
"""


def zombie_children() -> list[int]:
    """This process's children that ended and were never reaped."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.append(int(proc.name))
    return found


def test_short_lived_children_and_orphans_of_a_launch_are_counted(tmp_path: Path) -> None:
    """Six children waited for and four orphans, each spinning 0.15 s of CPU, none living a
    sample period: the launch used their 1.5 s, and its launcher's start (under 0.5 s more).
    Sampled every 0.5 s, most of it was missed (the launch read 0.75-0.87 s). The runner
    adopted the orphans and reaped them: none is left a zombie, and it is no subreaper after."""
    command = [sys.executable, "-c", LAUNCHER, "6", "4", "0.15"]
    record = run_launch(Launch("nsys", command, tmp_path / "launcher.log"))
    assert record.exit_status == 0, record.error
    assert 1.5 <= record.cpu_s <= 2.0
    assert zombie_children() == []
    assert not leftovers.is_subreaper()
