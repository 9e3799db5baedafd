"""The C library's allocator set for numpy work on tables of millions of rows (glibc only).

glibc's ``malloc`` serves a block above its mmap threshold with fresh pages mapped from the
kernel, and gives the free top of its heap back once it exceeds the trim threshold; both start
low (128 KiB) and move at run time. Reading an export chunk by chunk, and the analysis's
block-wise passes, make and free many thousands of arrays of 100 KiB to a few MiB: with the
defaults a large share of them are mapped, faulted in and zeroed page by page, then given back,
again and again (a 2 GB nsys export: a million page faults, 2 s of system time out of 14 s of
CPU). Fixed thresholds keep those blocks in the heap, reused; whole columns (tens of MB) are
still mapped and given back the moment they are freed, so the peak memory does not grow.

numpy asks the kernel for huge pages on every large array (``madvise``); where transparent huge
pages are only given on request (``defrag`` ``madvise``, the common setting), a huge page that is
not free at once is made by compacting memory on the spot, which takes longer than faulting the
same memory in 4 KiB pages when the page cache is full (it is: the export was just read). Filling
700 MB of fresh columns took 0.05 s to 1.2 s with huge pages, 0.26 s every time without.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import numpy as np

P = ParamSpec("P")
T = TypeVar("T")

#: Blocks larger than this are mapped on their own (whole columns of large tables): a chunk's
#: and a block's temporaries (at most 2 MiB: 2**18 int64 rows) stay below it, in the heap.
MMAP_THRESHOLD_BYTES = 4 << 20
#: Free heap top kept before it is given back: about what one chunk's decoding frees at once,
#: so the next chunk reuses it instead of faulting it in again.
TRIM_THRESHOLD_BYTES = 128 << 20
# mallopt parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@functools.cache
def tune_for_large_arrays() -> bool:
    """Set glibc's mmap and trim thresholds and stop numpy asking for huge pages (once per
    process; forked workers inherit them); False where the C library is not glibc or refuses."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols: its C library's among them
        if not hasattr(libc, "gnu_get_libc_version"):  # musl and others: their own malloc
            return False
        _no_huge_pages()
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                    and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    except (OSError, AttributeError):
        return False


def _no_huge_pages() -> None:
    """numpy's ``madvise`` for huge pages off (its ``NUMPY_MADVISE_HUGEPAGE=0``), where this
    numpy has the switch."""
    numpy_core = getattr(np, "_core", None) or np.core  # numpy 2 renamed it
    switch = getattr(numpy_core.multiarray, "_set_madvise_hugepage", None)
    if switch is not None:
        switch(False)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, None where the C library has none."""
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


def give_back_freed_memory() -> None:
    """Return the free pages of the C heap to the system (a no-op without ``malloc_trim``).

    Blocks under the mmap threshold are served from the heap and, under the trim threshold,
    kept there when freed: a step that frees tens of MB of them (a trace's decoded batches, the
    operator nesting's per-thread arrays) would leave them resident while the next step maps its
    own columns beside them; on a 400 MB Kineto trace the analysis then peaked ~30 MB higher.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def giving_back_memory(work: Callable[P, T]) -> Callable[P, T]:
    """``work`` with the heap's free pages given back before and after it (see
    :func:`give_back_freed_memory`): for the steps that handle every row of a large table, so
    that neither what came before nor their own temporaries stay resident beside the next."""

    @functools.wraps(work)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        give_back_freed_memory()
        try:
            return work(*args, **kwargs)
        finally:
            give_back_freed_memory()

    return run
