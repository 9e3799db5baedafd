"""Each wall of the sandbox (runner/sandbox.py) proven by a hostile script run inside it.

The limits are tight (a few processes, 1 GB of address space, seconds of wall time) so that a
wall that failed could not hurt this shared machine: the fork bomb stops at 200 forks on its own,
the 100 GB allocation only reserves address space (nothing is touched), and every run has a
wall-clock limit.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from profreport.runner.sandbox import Limits, Sandbox, SandboxError, probe, run_sandboxed

pytestmark = pytest.mark.usefixtures("sandbox_available")

TIGHT = Limits(wall_s=30, cpu_s=20, memory_bytes=1 << 30, processes=64, file_bytes=1 << 20)


def class_folder(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A class: alice's copy (the writable one), bob's folder with a secret, the grader's files."""
    alice, bob, grader = tmp_path / "alice", tmp_path / "bob", tmp_path / "grader"
    for folder in (alice, bob, grader):
        folder.mkdir()
    (bob / "secret.txt").write_text("bob's answer")
    (grader / "gradebook.csv").write_text("student,total\n")
    return alice, bob, grader


def hostile(tmp_path: Path, code: str, limits: Limits = TIGHT) -> tuple[int | None, str, str,
                                                                        str | None]:
    """Run ``code`` with Python in alice's sandbox: status, stdout, stderr, why it was killed."""
    alice = tmp_path / "alice"
    (alice / "hostile.py").write_text(textwrap.dedent(code))
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    done = run_sandboxed(Sandbox(alice, limits=limits), [sys.executable, "hostile.py"], alice,
                         out, err)
    return done.status, out.read_text(), err.read_text(), done.killed


def test_no_network(tmp_path: Path) -> None:
    """Neither the internet nor a server listening on the grader's own loopback is reachable."""
    class_folder(tmp_path)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        status, out, err, _ = hostile(tmp_path, f"""
            import socket
            for host, port in (("1.1.1.1", 80), ("127.0.0.1", {port})):
                try:
                    socket.create_connection((host, port), timeout=3)
                    print("CONNECTED", host)
                except OSError as exc:
                    print("refused", host, exc.errno)
            """)
    finally:
        server.close()
    assert status == 0, err
    assert "CONNECTED" not in out
    assert out.count("refused") == 2


def test_writes_only_its_own_copy(tmp_path: Path) -> None:
    """$HOME, the system, the venv and the grader's files are read-only or absent; /tmp and
    HOME are private (nothing written there appears outside); the copy itself is writable."""
    alice, _, grader = class_folder(tmp_path)
    home = Path.home()
    status, out, err, _ = hostile(tmp_path, f"""
        import os, sys
        for path in ({str(home / "pwned")!r}, "/usr/pwned", {str(grader / "pwned")!r},
                     os.path.join(sys.prefix, "pwned"), "/etc/pwned"):
            try:
                open(path, "w").write("x")
                print("WROTE", path)
            except OSError as exc:
                print("refused", path, exc.strerror)
        open("/tmp/private", "w").write("x")
        open(os.path.join(os.environ["HOME"], "private"), "w").write("x")
        open("mine.txt", "w").write("x")
        print("home is", os.environ["HOME"])
        """)
    assert status == 0, err
    assert "WROTE" not in out and out.count("refused") == 5
    assert not (home / "pwned").exists() and not (grader / "pwned").exists()
    assert not Path(sys.prefix, "pwned").exists() and not Path("/usr/pwned").exists()
    assert not Path("/tmp/private").exists()
    assert (alice / "mine.txt").read_text() == "x"


def test_data_folder_is_read_only(tmp_path: Path) -> None:
    """The rubric's data folder is readable inside, and cannot be changed."""
    alice, _, _ = class_folder(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("1,2\n")
    (alice / "hostile.py").write_text(textwrap.dedent(f"""
        print(open({str(data / "train.csv")!r}).read().strip())
        try:
            open({str(data / "train.csv")!r}, "w").write("poisoned")
        except OSError as exc:
            print("refused", exc.strerror)
        """))
    done = run_sandboxed(Sandbox(alice, (data,), TIGHT), [sys.executable, "hostile.py"], alice,
                         tmp_path / "out.txt", tmp_path / "err.txt")
    assert done.status == 0, (tmp_path / "err.txt").read_text()
    out = (tmp_path / "out.txt").read_text()
    assert out.startswith("1,2") and "refused Read-only file system" in out
    assert (data / "train.csv").read_text() == "1,2\n"


def test_cannot_read_another_student(tmp_path: Path) -> None:
    """Bob's folder (a sibling of alice's copy) is not in the sandbox at all; /etc/shadow
    cannot be read."""
    _, bob, _ = class_folder(tmp_path)
    status, out, err, _ = hostile(tmp_path, f"""
        import os
        for path in ({str(bob / "secret.txt")!r}, {str(bob)!r}, "/etc/shadow"):
            try:
                print("READ", path, open(path).read()[:20] if os.path.isfile(path)
                      else os.listdir(path))
            except OSError as exc:
                print("refused", path, exc.strerror)
        print("siblings", os.listdir(os.path.dirname(os.getcwd())))
        """)
    assert status == 0, err
    assert "READ" not in out and "bob" not in out.split("siblings")[1], out


def test_fork_bomb_stops_at_the_process_limit(tmp_path: Path) -> None:
    """Forking without end (bounded to 200 here) stops at the sandbox's process limit."""
    class_folder(tmp_path)
    limits = Limits(wall_s=30, cpu_s=20, memory_bytes=1 << 30, processes=16)
    status, out, err, _ = hostile(tmp_path, """
        import os, time
        children = 0
        for _ in range(200):
            try:
                pid = os.fork()
            except OSError as exc:
                print("fork refused", exc.strerror)
                break
            if pid == 0:
                time.sleep(3)
                os._exit(0)
            children += 1
        print("children", children)
        """, limits)
    assert status == 0, err
    children = int(out.split("children")[1])
    assert "fork refused" in out and children < 16, out


def test_cannot_allocate_100_gb(tmp_path: Path) -> None:
    """Reserving 100 GB of address space (no page touched) fails at the memory limit."""
    class_folder(tmp_path)
    status, out, err, _ = hostile(tmp_path, """
        import mmap
        try:
            block = mmap.mmap(-1, 100 << 30)
            print("ALLOCATED", len(block))
        except (OSError, MemoryError) as exc:
            print("refused", type(exc).__name__)
        """)
    assert status == 0, err
    assert "refused" in out and "ALLOCATED" not in out


def test_sleeping_forever_is_killed_with_its_children(tmp_path: Path) -> None:
    """A script that sleeps forever, with a child in a session of its own that keeps writing,
    is killed at the wall-clock limit, the child with it."""
    alice, _, _ = class_folder(tmp_path)
    limits = Limits(wall_s=3, cpu_s=20, memory_bytes=1 << 30, processes=16)
    started = time.monotonic()
    _, _, err, killed = hostile(tmp_path, """
        import os, time
        if os.fork() == 0:
            os.setsid()
            while True:
                open("heartbeat", "w").write(str(time.time()))
                time.sleep(0.1)
        time.sleep(10**6)
        """, limits)
    assert killed == "wall-clock limit of 3 s", err
    # A hang guard, not a speed limit: the script would sleep for 11 days, so returning at all
    # shows the kill; the reason above says it came at the wall-clock limit.
    assert time.monotonic() - started < 60
    beat = (alice / "heartbeat").stat().st_mtime
    time.sleep(1)
    assert (alice / "heartbeat").stat().st_mtime == beat


def test_cpu_and_file_size_limits(tmp_path: Path) -> None:
    """A busy loop is stopped at its CPU seconds; a file past the size limit is refused."""
    class_folder(tmp_path)
    status, out, _, _ = hostile(tmp_path, """
        try:
            open("big", "wb").write(b"x" * (2 << 20))
            print("WROTE 2 MB")
        except OSError as exc:
            print("refused", exc.strerror)
        """)
    assert status == 0 and "refused File too large" in out
    limits = Limits(wall_s=30, cpu_s=1, memory_bytes=1 << 30, processes=16)
    status, _, _, killed = hostile(tmp_path, "while True: pass\n", limits)
    # bwrap, the sandbox's init, exits 128 + the signal that ended the script (SIGXCPU or
    # SIGKILL at the hard limit).
    assert status in (128 + signal.SIGKILL, 128 + signal.SIGXCPU) and killed is None


def test_cannot_delete_the_graders_files(tmp_path: Path) -> None:
    """Deleting the grader's gradebook, the venv's interpreter or the system fails."""
    _, _, grader = class_folder(tmp_path)
    status, out, err, _ = hostile(tmp_path, f"""
        import os, shutil, sys
        for path in ({str(grader)!r}, sys.prefix, "/usr/bin"):
            shutil.rmtree(path, ignore_errors=True)
        try:
            os.remove(os.path.realpath(sys.executable))
            print("REMOVED")
        except OSError as exc:
            print("refused", exc.strerror)
        """)
    assert status == 0, err
    assert (grader / "gradebook.csv").is_file() and Path(sys.executable).exists()
    assert "REMOVED" not in out and Path("/usr/bin/env").exists()


def test_runs_as_nobody_without_capabilities(tmp_path: Path) -> None:
    """Inside, no capability is left and (for a root grader) the uid owns no file outside."""
    class_folder(tmp_path)
    status, out, err, _ = hostile(tmp_path, """
        import os
        caps = dict(line.split(":\\t") for line in open("/proc/self/status").read().splitlines()
                    if line.startswith("Cap"))
        print(os.getuid(), caps["CapEff"].strip(), caps["CapBnd"].strip())
        """)
    assert status == 0, err
    uid, effective, bounding = out.split()
    assert int(effective, 16) == 0 and int(bounding, 16) == 0
    assert os.geteuid() != 0 or uid == "65534"


def test_no_bwrap_fails_loudly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without bubblewrap, nothing runs: one line saying the sandbox is unavailable."""
    monkeypatch.setenv("PATH", str(tmp_path))
    (tmp_path / "alice").mkdir()
    with pytest.raises(SandboxError, match="sandbox unavailable: bubblewrap"):
        run_sandboxed(Sandbox(tmp_path / "alice"), [sys.executable, "-c", "print(1)"],
                      tmp_path / "alice", tmp_path / "o", tmp_path / "e")
    probe.cache_clear()
    with pytest.raises(SandboxError, match="sandbox unavailable"):
        probe()
    probe.cache_clear()


def test_shared_memory_and_nsys_work_inside(tmp_path: Path, nsys_available: str) -> None:
    """What training needs still works: POSIX shared memory (DataLoader workers pass batches
    through /dev/shm, a private tmpfs here) and Nsight Systems, whose agent talks through it."""
    alice, _, _ = class_folder(tmp_path)
    status, out, err, _ = hostile(tmp_path, """
        from multiprocessing import shared_memory
        block = shared_memory.SharedMemory(create=True, size=1 << 20)
        block.buf[0] = 7
        print("shm", block.buf[0])
        block.close()
        block.unlink()
        """, Limits(wall_s=60, cpu_s=60, memory_bytes=4 << 30, processes=256))
    assert status == 0 and "shm 7" in out, err
    (alice / "tiny.py").write_text("print(sum(range(10)))\n")
    done = run_sandboxed(Sandbox(alice, limits=Limits(wall_s=300, processes=256)),
                         [nsys_available, "profile", "--trace=osrt", "--sample=none",
                          "--cpuctxsw=none", "-o", str(alice / "tiny"), sys.executable,
                          "tiny.py"], alice, tmp_path / "out.txt", tmp_path / "err.txt")
    assert done.status == 0, (tmp_path / "err.txt").read_text()[-2000:]
    assert (alice / "tiny.nsys-rep").is_file()
