"""One command measured the same way for every benchmark here: wall time, CPU time, peak memory.

- wall: from start to exit, interpreter start-up included;
- CPU: user + system seconds of the command and every process below it (``wait4``'s usage);
- peak: the larger of the command's own peak resident set and the largest proportional set
  size of it and every process below it together, sampled from ``/proc`` every
  :data:`SAMPLE_S` (a page a forked worker shares with its parent is counted once, where
  adding up resident sets would count it in both). Its own peak is the kernel's exact
  high-water mark (``ru_maxrss``) when that exceeds the harness's: a child starts with its
  parent's mark, so below it the mark may be the harness's, and the sampled ``VmHWM`` (which
  starts afresh at exec, and may miss a last spike) is taken instead.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from profreport.progress import PROC, process_tree

#: Seconds between two samples of a measured process tree's memory.
SAMPLE_S = 0.05


@dataclass(frozen=True)
class Measured:
    """What one command took, how it ended and what it printed."""

    wall_s: float
    cpu_s: float
    peak_mb: float
    returncode: int
    stdout: str
    stderr: str
    #: Why it was stopped (the time limit), else None.
    stopped: str | None = None


def tree_pss_mb(pid: int) -> float:
    """Proportional set size of ``pid`` and every process below it together, in MB."""
    total_kb = 0
    for member in process_tree(pid):
        try:
            text = (PROC / str(member) / "smaps_rollup").read_text()
        except OSError:
            continue
        total_kb += next((int(line.split()[1]) for line in text.splitlines()
                          if line.startswith("Pss:")), 0)
    return total_kb / 1024


def own_peak_mb(pid: int) -> float:
    """The peak resident set of ``pid`` since it started its program (``VmHWM``), in MB; 0
    once it is gone."""
    try:
        text = (PROC / str(pid) / "status").read_text()
    except OSError:
        return 0.0
    return next((int(line.split()[1]) for line in text.splitlines()
                 if line.startswith("VmHWM:")), 0) / 1024


def run_measured(command: list[str], timeout_s: float | None = None) -> Measured:
    """Run ``command`` in a session of its own and measure it (see the module docstring);
    its whole session is killed after ``timeout_s``, and whatever it left running when it ends
    (a daemonised helper would load the next measurement)."""
    harness_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True)
        peaks, stop, reaped = [0.0, 0.0], threading.Event(), threading.Lock()
        stopped: list[str] = []

        def sample() -> None:
            while not stop.wait(SAMPLE_S):
                peaks[0] = max(peaks[0], own_peak_mb(process.pid))
                peaks[1] = max(peaks[1], tree_pss_mb(process.pid))

        def kill() -> None:
            with reaped:
                if process.returncode is None:
                    stopped.append(f"did not finish in {timeout_s:.0f} s")
                    _kill_session(process.pid)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        timer = threading.Timer(timeout_s, kill) if timeout_s else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            # Ended but not reaped: its pid, and so its session, stay its own while the rest of
            # the session is killed.
            os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
        finally:
            if timer is not None:
                timer.cancel()
            stop.set()
            _kill_session(process.pid)
        with reaped:
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        wall = time.perf_counter() - started
        sampler.join()
        out.seek(0)
        err.seek(0)
        return Measured(wall_s=wall, cpu_s=usage.ru_utime + usage.ru_stime,
                        peak_mb=max(_own_peak_mb(usage, harness_mb, peaks[0]), peaks[1]),
                        returncode=process.returncode,
                        stdout=out.read().decode(errors="replace"),
                        stderr=err.read().decode(errors="replace"),
                        stopped=stopped[0] if stopped else None)


def _own_peak_mb(usage: resource.struct_rusage, harness_mb: float, sampled_mb: float) -> float:
    """The command's own peak (see the module docstring): its exact mark when it is above the
    harness's, else the sampled one."""
    exact_mb = usage.ru_maxrss / 1024
    return exact_mb if exact_mb > harness_mb else sampled_mb


def _kill_session(pid: int) -> None:
    """Kill every process left in the session ``pid`` leads (none: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
