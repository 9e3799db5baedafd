"""Processes a launch leaves running after it ended (nsys's agent, in a session of its own) are
found by the launch's mark in their environment and ended; nothing else is touched."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from profreport.runner import leftovers
from profreport.runner.launch import Launch, run_launch
from profreport.runner.leftovers import MarkedCpu, end_leftovers, marked_environment, new_mark

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


def zombie_children() -> set[int]:
    """This process's children that ended and were never reaped."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.add(int(proc.name))
    return found


@pytest.fixture
def new_zombies() -> Callable[[], set[int]]:
    """This process's zombie children that were not there when the test began (what the test's
    launch left, not an earlier test's)."""
    before = zombie_children()
    return lambda: zombie_children() - before


@pytest.mark.parametrize("profiler", ["none", "kernprof", "torch", "nsys"])
def test_short_lived_children_and_orphans_of_a_launch_are_counted(
        tmp_path: Path, profiler: str, new_zombies: Callable[[], set[int]]) -> None:
    """Six children waited for and four orphans, each spinning 0.15 s of CPU, none living a
    sample period: the launch used their 1.5 s, and its launcher's start (under 0.5 s more).
    Sampled every 0.5 s, most of it was missed (the launch read 0.75-0.87 s). The runner
    adopted the orphans and reaped them: none is left a zombie, and it is no subreaper after.
    So for every launch, not only nsys's: a plain, kernprof or torch.profiler launch read
    0.91-0.96 s, its orphans' 0.6 s lost to init."""
    command = [sys.executable, "-c", LAUNCHER, "6", "4", "0.15"]
    record = run_launch(Launch(profiler, command, tmp_path / "launcher.log"))
    assert record.exit_status == 0, record.error
    assert 1.5 <= record.cpu_s <= 2.0
    assert new_zombies() == set()
    assert not leftovers.is_subreaper()


#: A plain launch whose child forks a worker and exits (the worker's parent is gone: the
#: runner adopts it), as a DataLoader worker is orphaned when its main process dies: the worker
#: spins for argv[1] CPU seconds, says so through a pipe and then waits forever; the launch
#: returns once it has said so, the worker still there.
ORPHANED_WORKER = """\
import os, sys, time
said, saying = os.pipe()
if os.fork() == 0:
    if os.fork() == 0:
        while time.process_time() < float(sys.argv[1]):
            pass
        os.write(saying, b"x")
        time.sleep(300)
    os._exit(0)
os.wait()
os.read(said, 1)
"""


def test_a_plain_launchs_orphaned_worker_is_counted_and_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        new_zombies: Callable[[], set[int]]) -> None:
    """A plain launch leaves a worker spinning 0.8 s of CPU, orphaned, still there when it
    returns: the launch used the 0.8 s (with its start, under 0.5 s more), and the worker is
    ended and named as left over. Before, only nsys launches were marked: the plain run read
    0.05-0.1 s (its worker reparented to init) and the worker ran on."""
    monkeypatch.setattr(leftovers, "LEFTOVER_GRACE_S", 0.5)
    command = [sys.executable, "-c", ORPHANED_WORKER, "0.8"]
    record = run_launch(Launch("none", command, tmp_path / "plain.log"))
    assert record.exit_status == 0, record.error
    assert 0.8 <= record.cpu_s <= 1.3
    python = Path(sys.executable).name
    assert record.leftovers is not None and record.leftovers.startswith(
        f"the plain run left 1 process(es) running after the launch ended: {python} -c (pid ")
    assert record.leftovers.endswith("ended (SIGTERM)")
    assert new_zombies() == set()


#: A launch that leaves an orphan whose main thread ends (pthread_exit) while another thread
#: runs on for argv[1] seconds, then ends the process: until then its /proc entry reads as a
#: zombie that cannot be reaped yet, its environment unreadable there. The launch returns once
#: the main thread has ended.
LEADER_ENDS_FIRST = """\
import ctypes, os, sys, threading, time
said, saying = os.pipe()
if os.fork() == 0:
    if os.fork() == 0:
        def run_on():
            time.sleep(float(sys.argv[1]))
            os._exit(0)
        threading.Thread(target=run_on).start()
        os.write(saying, str(os.getpid()).encode())
        ctypes.CDLL(None).pthread_exit(None)
    os._exit(0)
os.wait()
orphan = os.read(said, 16).decode()
while open(f"/proc/{orphan}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
    time.sleep(0.01)
"""


def test_an_adopted_process_whose_main_thread_ended_first_is_reaped_once_ended(
        new_zombies: Callable[[], set[int]]) -> None:
    """An orphan the launch adopted ended its main thread, its other thread ending 0.5 s later:
    as the launch returns it reads as a zombie that waitpid cannot reap yet. Unmarked (started
    without the launch's mark, so no leftover is looked for), it is waited for as exiting and
    reaped. Before, the runner tried once and went on: the orphan became a zombie of the runner
    for good once its thread ended (one failed every later zombie check in CI)."""
    with MarkedCpu(new_mark()):
        subprocess.run([sys.executable, "-c", LEADER_ENDS_FIRST, "0.5"], check=True,
                       stdin=subprocess.DEVNULL, timeout=30)
    time.sleep(1.0)
    assert new_zombies() == set()


def test_a_leftover_whose_main_thread_ended_is_found_by_its_threads_and_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        new_zombies: Callable[[], set[int]]) -> None:
    """A plain launch leaves an orphan whose main thread ended while another runs on for 300 s:
    its mark is read through that thread, so it is named as left over, ended and reaped.
    Before, its unreadable environment read as no mark: it ran on, unnamed (and, once named,
    its command read as ``?``: the command line is read through the thread too)."""
    monkeypatch.setattr(leftovers, "LEFTOVER_GRACE_S", 0.5)
    command = [sys.executable, "-c", LEADER_ENDS_FIRST, "300"]
    record = run_launch(Launch("none", command, tmp_path / "plain.log"))
    assert record.exit_status == 0, record.error
    python = Path(sys.executable).name
    assert record.leftovers is not None and record.leftovers.startswith(
        f"the plain run left 1 process(es) running after the launch ended: {python} -c (pid ")
    assert record.leftovers.endswith("ended (SIGTERM)")
    assert new_zombies() == set()


#: A launch whose child outlives it and, as their parent, reaps its own children when told: it
#: forks argv[1] children that each spin argv[2] CPU seconds, write their pid to a file in
#: argv[3] and wait to be killed; the child waits for each in turn, and the launch returns once
#: every one has spun (the child and its children are still there).
REAPER = """\
import os, sys, time
count, seconds, folder = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
said, saying = os.pipe()
if os.fork() == 0:
    children = []
    for index in range(count):
        pid = os.fork()
        if pid == 0:
            while time.process_time() < seconds:
                pass
            with open(f"{folder}/child{index}.tmp", "w") as out:
                out.write(str(os.getpid()))
            os.replace(f"{folder}/child{index}.tmp", f"{folder}/child{index}")
            os.write(saying, b"x")
            time.sleep(300)
        children.append(pid)
    with open(f"{folder}/reaper.tmp", "w") as out:
        out.write(str(os.getpid()))
    os.replace(f"{folder}/reaper.tmp", f"{folder}/reaper")
    for pid in children:
        os.waitpid(pid, 0)
    time.sleep(300)
for _ in range(count):
    os.read(said, 1)
"""


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended and been reaped (no /proc entry left)."""
    return not Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize("settle_reads", [leftovers.SETTLE_READS, 3])
def test_a_process_reaped_while_proc_is_read_counts_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settle_reads: int) -> None:
    """Three children of a process the launch left, each spinning 0.4 s of CPU, end one by one
    while the count reads /proc: each read once the launch returned reads a child, the child
    is killed and reaped by its parent, then the rest is read (its parent with the child's
    time among what it reaped). The launch used the children's 1.2 s (and its start, under
    0.3 s more): each counted once, also when the reads never settle (SETTLE_READS 3: the last
    but one read counted, the child that ended after it left to its parent). The count had
    read one /proc snapshot as if atomic: that child twice, 1.60 s."""
    monkeypatch.setattr(leftovers, "SETTLE_READS", settle_reads)
    real_read = leftovers._process_stats
    ending: list[int] = []

    def read_while_one_ends() -> dict[int, list[str]]:
        """/proc read as a child ends midway: its stat first, then everything after it has
        been reaped (only the count's reads, on this thread; the sampler reads as ever)."""
        if threading.current_thread() is not threading.main_thread() or not ending:
            return real_read()
        child = ending.pop(0)
        first = leftovers._stat_fields(child)
        os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not gone(child):
            assert time.monotonic() < deadline, "the child was never reaped"
            time.sleep(0.01)
        assert first is not None
        return {**real_read(), child: first}

    monkeypatch.setattr(leftovers, "_process_stats", read_while_one_ends)
    mark = new_mark()
    command = [sys.executable, "-c", REAPER, "3", "0.4", str(tmp_path)]
    reaper = 0
    try:
        with MarkedCpu(mark) as marked:
            subprocess.run(command, env=marked_environment(mark), check=True, timeout=120)
            while not (tmp_path / "reaper").is_file():
                time.sleep(0.01)
            reaper = int((tmp_path / "reaper").read_text())
            marked.sample()  # the children seen running, as the sampler sees them
            ending += [int((tmp_path / f"child{i}").read_text()) for i in range(3)]
        assert 1.2 <= marked.cpu_s() <= 1.5
        assert ending == []  # each read after the launch returned saw one child end
    finally:
        kill_marked(f"{leftovers.LAUNCH_MARK}={mark}")
        if reaper:
            os.waitpid(reaper, 0)  # adopted by this process, the launch's subreaper
