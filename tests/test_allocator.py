"""The allocator thresholds (profreport.allocator): blocks of a few MiB made and freed again and
again are reused from the heap instead of being faulted in anew, and a whole column is still
given back the moment it is freed. Measured in a fresh interpreter (page faults and resident
pages of its own), with and without the tuning."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc",
    reason="the thresholds are glibc's")

#: Rounds of eight 2 MiB arrays made, written and freed together (the shape of a chunk's
#: temporaries), and a 64 MiB column made and freed, in a fresh interpreter.
_CHURN = """
import json, resource, sys
import numpy as np
from profreport.allocator import tune_for_large_arrays
tuned = tune_for_large_arrays() if sys.argv[1] == "tuned" else None
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def resident_pages():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1])
before = faults()
for _ in range(100):
    held = [np.ones(2 << 20, np.uint8) for _ in range(8)]
    del held
churn_faults = faults() - before
column = np.ones(64 << 20, np.uint8)
with_column = resident_pages()
del column
print(json.dumps({"tuned": tuned, "churn_faults": churn_faults,
                  "huge_pages": bool((getattr(np, "_core", None) or np.core)
                                     .multiarray._get_madvise_hugepage()),
                  "column_pages_freed": with_column - resident_pages()}))
"""
#: Pages the churn writes: 100 rounds of 8 arrays of 2 MiB, 4 KiB pages.
_CHURN_PAGES = 100 * 8 * (2 << 20) // 4096
_COLUMN_PAGES = (64 << 20) // 4096


#: Environment variables that set glibc's allocator themselves: left out of the churn's.
_ALLOCATOR_VARIABLES = ("GLIBC_TUNABLES", "MALLOC_")
#: The kernel's transparent huge page mode: under ``always`` the heap itself may take huge
#: pages, so glibc's defaults fault in far fewer pages than the churn writes.
_THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _churn(mode: str) -> dict[str, int]:
    """The churn's figures in a fresh interpreter, tuned or with glibc's defaults."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(_ALLOCATOR_VARIABLES)}
    done = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True,
                          env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _heap_in_small_pages() -> bool:
    """Whether the kernel gives huge pages only on request (``madvise``) or never."""
    try:
        return "[always]" not in _THP_MODE.read_text()
    except OSError:
        return True


def test_tuning_reuses_chunk_sized_blocks_and_frees_columns() -> None:
    tuned = _churn("tuned")
    assert tuned["tuned"] is True
    assert not tuned["huge_pages"]
    assert tuned["churn_faults"] < _CHURN_PAGES // 20
    assert tuned["column_pages_freed"] >= _COLUMN_PAGES * 0.99
    if _heap_in_small_pages():  # the defaults' cost, in the pages the churn writes
        # glibc's defaults give the freed 16 MiB back each round and fault it in again.
        assert _churn("default")["churn_faults"] > _CHURN_PAGES // 2
