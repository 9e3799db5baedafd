"""Running untrusted code (a student's training script) inside walls: Debian's ``bubblewrap``.

Every command runs under ``bwrap`` with new mount, network, PID, IPC, UTS and cgroup namespaces
(and a user namespace when the grader is not root) and an empty root in which only these are
mounted: the system (``/usr``, ``/etc``, ``/sys``) and the folders the caller names (the
interpreter, the venv, profreport's own packages, the rubric's data) read-only, one folder
read-write (the submission's copy), a private ``/tmp`` and ``$HOME`` (tmpfs), a minimal ``/dev``
and the sandbox's own ``/proc``. A root grader's sandbox drops to ``nobody`` (uid 65534) with
``setpriv`` once the mounts are made: no capabilities, ``no_new_privs``, and a uid that owns no
file of the machine (a user namespace would map it back to root, the owner of ``/etc/shadow``).
Limits are set before it starts with ``setrlimit``: CPU seconds, address space, file size, open
files, processes (``RLIMIT_NPROC``, which binds every uid but root) and no core dumps. At the
wall-clock limit bwrap and the PID namespace's init are killed, which takes every process inside
with it, those that made their own session included, and the grader waits until they are gone.

A wall that cannot be built here is a :class:`SandboxError` ("sandbox unavailable: ...") before
anything runs: untrusted code never runs without its walls.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from profreport.errors import RunError

#: The user the code runs as inside the sandbox.
NOBODY = 65534
#: System folders mounted read-only in every sandbox (those that exist; merged-/usr links kept).
SYSTEM_FOLDERS = ("/usr", "/etc", "/sys", "/opt")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32")
#: profreport's packages, mounted read-only so the runner's wrappers run inside.
PACKAGES = ("profreport", "profreport.runner", "profreport.parsers", "profreport.reports",
            "profreport.templates")
#: GPU device nodes passed through when present.
GPU_DEVICES = ("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidia4", "nvidia5", "nvidia6",
               "nvidia7", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
#: Seconds a killed sandbox's PID namespace gets to empty (the kernel's SIGKILL of every process
#: in it): a hang guard only, it takes milliseconds.
NAMESPACE_EXIT_TIMEOUT_S = 30
#: Seconds the probe of the sandbox may take.
PROBE_TIMEOUT_S = 30
#: The private home inside the sandbox (on its private /tmp).
SANDBOX_HOME = "/tmp/home"
#: A root grader's namespaces: every one but the user namespace (see the module's docstring).
ROOT_NAMESPACES = ("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                   "--unshare-cgroup-try")
#: Run first inside a root grader's sandbox: become nobody, with no capability left to regain.
DROP_TO_NOBODY = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                  "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--")


class SandboxError(RunError):
    """A wall of the sandbox cannot be built on this machine."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"sandbox unavailable: {reason}")


@dataclass(frozen=True)
class Limits:
    """What the code in one sandbox may use."""

    #: Wall-clock seconds before the whole process group is killed.
    wall_s: float = 900.0
    #: CPU seconds of each process (RLIMIT_CPU).
    cpu_s: int = 1800
    #: Address space of each process (RLIMIT_AS): torch on CPU maps ~2 GB before training.
    memory_bytes: int = 8 << 30
    #: Processes and threads of the sandbox (DataLoader workers and torch's threads count).
    processes: int = 512
    #: Largest file it may write (RLIMIT_FSIZE): an nsys report of a few minutes fits.
    file_bytes: int = 2 << 30
    #: Open files per process.
    open_files: int = 4096


@dataclass(frozen=True)
class Sandbox:
    """One sandbox: the folder it may write, the folders it may read, its limits."""

    writable: Path
    readable: tuple[Path, ...] = ()
    limits: Limits = field(default_factory=Limits)
    #: Extra environment variables (PATH, HOME, TMPDIR and the locale are set already).
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Finished:
    """How a sandboxed command ended."""

    #: Exit status (negative: the signal that ended it), None when it could not start.
    status: int | None
    wall_s: float
    #: Why the grader stopped it ("wall-clock limit of 30 s"), else None.
    killed: str | None = None


def interpreter_folders() -> tuple[Path, ...]:
    """The folders this Python needs: the venv (``sys.prefix``) and the installation it points
    at (``sys.base_prefix``), resolved."""
    folders = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
               Path(sys.executable).resolve().parent.parent}
    return tuple(sorted(folders))


def package_folders() -> tuple[Path, ...]:
    """The folders profreport's packages load from (an editable install's source folders)."""
    found: set[Path] = set()
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            found.add(Path(location).resolve())
    return tuple(sorted(found))


def limit_setter(limits: Limits) -> Callable[[], None]:
    """What the child does before exec: the resource limits (inherited by everything inside)."""
    def apply() -> None:
        for which, value in ((resource.RLIMIT_CPU, limits.cpu_s),
                             (resource.RLIMIT_AS, limits.memory_bytes),
                             (resource.RLIMIT_FSIZE, limits.file_bytes),
                             (resource.RLIMIT_NOFILE, limits.open_files),
                             (resource.RLIMIT_NPROC, limits.processes),
                             (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(which, (value, value))
    return apply


def _system_mounts() -> list[str]:
    """Read-only system folders and the merged-/usr links, as they are on this machine."""
    args: list[str] = []
    for folder in SYSTEM_FOLDERS:
        if Path(folder).is_dir():
            args += ["--ro-bind", folder, folder]
    for link in SYSTEM_LINKS:
        path = Path(link)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), link]
        elif path.is_dir():
            args += ["--ro-bind", link, link]
    return args


def _parents(paths: list[Path]) -> list[str]:
    """The folders leading to each mount point, made searchable by everyone (bwrap would make
    them 0700, which the sandbox's user could not cross)."""
    system = {Path(folder) for folder in (*SYSTEM_FOLDERS, *SYSTEM_LINKS, "/tmp")}
    ancestors = {parent for path in paths for parent in path.parents
                 if parent != Path("/") and parent not in system}
    return [arg for folder in sorted(ancestors) for arg in ("--perms", "0755", "--dir",
                                                             str(folder))]


def bwrap_command(sandbox: Sandbox, command: list[str], cwd: Path,
                  info_fd: int | None = None) -> list[str]:
    """The ``bwrap`` command line running ``command`` in ``cwd`` inside ``sandbox``; with
    ``info_fd``, bwrap writes there the pid of the sandbox's first process (its PID
    namespace's init) as JSON."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxError("bubblewrap (bwrap) is not installed (apt-get install bubblewrap)")
    root = os.geteuid() == 0
    args = [bwrap, *(ROOT_NAMESPACES if root else ["--unshare-all"]), "--die-with-parent",
            "--new-session", "--hostname", "sandbox", *_system_mounts(), "--perms", "1777",
            "--tmpfs", "/tmp", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm",
            "--proc", "/proc", "--perms", "0777", "--dir", SANDBOX_HOME]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    for device in GPU_DEVICES:
        if Path("/dev", device).exists():
            args += ["--dev-bind", f"/dev/{device}", f"/dev/{device}"]
    readable = sorted({*interpreter_folders(), *package_folders(),
                       *(path.resolve() for path in sandbox.readable)})
    writable = sandbox.writable.resolve()
    args += _parents([*readable, writable])
    for folder in readable:
        args += ["--ro-bind", str(folder), str(folder)]
    args += ["--bind", str(writable), str(writable), "--chdir", str(cwd.resolve()), "--clearenv"]
    path = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
    for key, value in (("PATH", path), ("HOME", SANDBOX_HOME), ("TMPDIR", "/tmp"),
                       ("LANG", "C.UTF-8"), ("PYTHONDONTWRITEBYTECODE", "1"), *sandbox.env):
        args += ["--setenv", key, value]
    return [*args, "--", *(DROP_TO_NOBODY if root else []), *command]


def _own_for_nobody(folder: Path) -> None:
    """Give the writable folder to the sandbox's user (a root grader's files map to nobody's
    only when the grader is not root)."""
    if os.geteuid() != 0:
        return
    for parent, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(parent, name), NOBODY, NOBODY)
    os.chown(folder, NOBODY, NOBODY)


def _namespace_init(info_read: int) -> int | None:
    """A pidfd of the sandbox's PID-namespace init, read from bwrap's ``--info-fd`` JSON (None
    when bwrap exited before writing it)."""
    data = b""
    while chunk := os.read(info_read, 4096):
        data += chunk
    try:
        return os.pidfd_open(int(json.loads(data)["child-pid"]))
    except (ValueError, KeyError, TypeError, OSError):
        return None


def _kill_sandbox(process: subprocess.Popen, init_pidfd: int | None) -> int:
    """Kill bwrap and the sandbox's PID namespace; return once every process in it is gone.

    ``--new-session`` puts the namespace's init outside bwrap's process group, so killing the
    group kills bwrap only and the init follows later, by its parent-death signal: a process
    inside could still write after bwrap is reaped. The init is killed too and waited for: it
    exits only after the kernel has killed and reaped every process of its namespace.
    """
    os.killpg(process.pid, signal.SIGKILL)
    if init_pidfd is not None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(init_pidfd, signal.SIGKILL)
        select.select([init_pidfd], [], [], NAMESPACE_EXIT_TIMEOUT_S)
    return process.wait()


def run_sandboxed(sandbox: Sandbox, command: list[str], cwd: Path, stdout: Path,
                  stderr: Path) -> Finished:
    """Run ``command`` in the sandbox, output into the two files (outside the sandbox's view
    unless they lie in its writable folder); at the wall-clock limit every process in it is
    killed before this returns."""
    info_read, info_write = os.pipe()
    argv = bwrap_command(sandbox, command, cwd, info_write)
    _own_for_nobody(sandbox.writable)
    started = time.perf_counter()
    init_pidfd = None
    try:
        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                       start_new_session=True, pass_fds=(info_write,),
                                       preexec_fn=limit_setter(sandbox.limits))
            os.close(info_write)
            info_write = None
            init_pidfd = _namespace_init(info_read)
            killed = None
            try:
                status = process.wait(timeout=sandbox.limits.wall_s)
            except subprocess.TimeoutExpired:
                status = _kill_sandbox(process, init_pidfd)
                killed = f"wall-clock limit of {sandbox.limits.wall_s:g} s"
    except OSError as exc:
        raise RunError(f"cannot start the sandbox: {exc}") from None
    finally:
        for fd in (info_read, info_write, init_pidfd):
            if fd is not None:
                os.close(fd)
    return Finished(status, time.perf_counter() - started, killed)


@cache
def probe() -> None:
    """Build one sandbox and run ``true`` in it; SandboxError saying which wall failed."""
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"profreport-probe-{uuid.uuid4().hex[:8]}"
    scratch.mkdir(mode=0o700)
    try:
        done = run_sandboxed(Sandbox(scratch, limits=Limits(wall_s=PROBE_TIMEOUT_S)),
                             [sys.executable, "-c", "import os; open('ok', 'w').write('1')"],
                             scratch, scratch / "out", scratch / "err")
        if done.status != 0 or not (scratch / "ok").is_file():
            why = (scratch / "err").read_text(errors="replace").strip().splitlines()
            raise SandboxError(f"bwrap could not start ({why[-1] if why else done.status}); "
                               "it needs unprivileged user namespaces "
                               "(sysctl kernel.unprivileged_userns_clone=1) or root")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
