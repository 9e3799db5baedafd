"""One command measured the same way for every benchmark here: wall time, CPU time, peak memory.

- wall: from start to exit, interpreter start-up included;
- CPU: user + system seconds of the command and every process below it (``wait4``'s usage);
- peak: the larger of the command's own peak resident set (the kernel's exact high-water mark,
  ``ru_maxrss``, its waited-for workers included) and the largest proportional set size of it
  and every process below it together, sampled from ``/proc`` every :data:`SAMPLE_S` (a page a
  forked worker shares with its parent is counted once, where adding up resident sets would
  count it in both).
"""

from __future__ import annotations

import os
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


def run_measured(command: list[str], timeout_s: float | None = None) -> Measured:
    """Run ``command`` in a session of its own and measure it (see the module docstring);
    its whole session is killed after ``timeout_s``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True)
        sampled, stop = [0.0], threading.Event()

        def sample() -> None:
            while not stop.wait(SAMPLE_S):
                sampled[0] = max(sampled[0], tree_pss_mb(process.pid))

        stopped: list[str] = []

        def kill() -> None:
            stopped.append(f"did not finish in {timeout_s:.0f} s")
            os.killpg(process.pid, signal.SIGKILL)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        timer = threading.Timer(timeout_s, kill) if timeout_s else None
        if timer is not None:
            timer.start()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        if timer is not None:
            timer.cancel()
        stop.set()
        sampler.join()
        out.seek(0)
        err.seek(0)
        return Measured(wall_s=wall, cpu_s=usage.ru_utime + usage.ru_stime,
                        peak_mb=max(usage.ru_maxrss / 1024, sampled[0]),
                        returncode=process.returncode,
                        stdout=out.read().decode(errors="replace"),
                        stderr=err.read().decode(errors="replace"),
                        stopped=stopped[0] if stopped else None)
