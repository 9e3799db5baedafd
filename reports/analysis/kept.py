"""Results kept beside a profile while it lives: what several metrics read of the same large
table (a join, a union, the names' codes) is made once per profile, not once per metric."""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

import numpy as np
import pandas as pd

from profreport.allocator import giving_back_memory
from profreport.concepts import name_codes, per_distinct
from profreport.model import Profile, narrowest_int, position_dtype
from profreport.reports.analysis import intervals as iv

T_co = TypeVar("T_co", covariant=True)

#: id(profile) -> (a weak reference to it, the ids of its tables when filled, its results).
_KEPT: dict[int, tuple[weakref.ref, tuple[int, ...], dict[Hashable, Any]]] = {}


def _kept(profile: Profile) -> dict[Hashable, Any]:
    """The results kept for ``profile``: emptied when its tables are replaced, dropped when it
    is garbage-collected."""
    key, tables = id(profile), tuple(map(id, profile.tables.values()))
    entry = _KEPT.get(key)
    if entry is None or entry[0]() is not profile or entry[1] != tables:
        entry = (weakref.ref(profile, lambda _, key=key: _KEPT.pop(key, None)), tables, {})
        _KEPT[key] = entry
    return entry[2]


class Kept(Protocol[T_co]):
    """A :func:`per_profile` function: called, its kept result; ``beside``, that result started
    on a thread of its own; ``forget``, that result let go."""

    def __call__(self, profile: Profile, /, *args: Hashable) -> T_co:
        """The result for ``profile`` and ``args``."""

    def beside(self, profile: Profile, /, *args: Hashable) -> None:
        """Start making the result for ``profile`` and ``args``."""

    def forget(self, profile: Profile, /, *args: Hashable) -> None:
        """Let go of the result for ``profile`` and ``args`` (made again if asked again)."""


def per_profile(make: Callable[..., T_co]) -> Kept[T_co]:
    """``make(profile, *args)`` computed once per profile and hashable ``args``, then kept while
    the profile lives and its tables stay the same objects; ``.beside(profile, *args)`` starts
    making it on a thread of its own, so that the analysis goes on meanwhile (numpy lets go of
    the interpreter in its sorts and searches)."""

    @functools.wraps(make)
    def kept(profile: Profile, *args: Hashable) -> T_co:
        """The kept result, made on first use (or awaited, when it is being made beside)."""
        results = _kept(profile)
        key = (make, *args)
        if key not in results:
            results[key] = make(profile, *args)
        if isinstance(results[key], Future):
            results[key] = results[key].result()
        return results[key]

    def beside(profile: Profile, *args: Hashable) -> None:
        """Start making the kept result on the kept-results thread (one, started on first
        use); the first to ask for it waits for it."""
        results = _kept(profile)
        key = (make, *args)
        if key not in results:
            if not _BESIDE:
                _BESIDE.append(ThreadPoolExecutor(1, thread_name_prefix="profreport-kept"))
            results[key] = _BESIDE[0].submit(giving_back_memory(make), profile, *args)

    def forget(profile: Profile, *args: Hashable) -> None:
        """Let go of the kept result (awaited first, when it is being made beside): for a
        large one whose last reader is done, so that the rest of the analysis runs without
        it."""
        result = _kept(profile).pop((make, *args), None)
        if isinstance(result, Future):
            result.result()

    kept.beside = beside  # type: ignore[attr-defined]
    kept.forget = forget  # type: ignore[attr-defined]
    return kept  # type: ignore[return-value]


#: The one thread that makes kept results beside the analysis (see :func:`per_profile`).
_BESIDE: list[ThreadPoolExecutor] = []


def _forked() -> None:
    """In a forked worker process: forget the executor (its thread is the parent's; the worker
    starts its own) and the results it was still making (no thread here would finish them)."""
    _BESIDE.clear()
    for _, _, results in _KEPT.values():
        for key in [key for key, value in results.items() if isinstance(value, Future)]:
            del results[key]


os.register_at_fork(after_in_child=_forked)


@per_profile
def table_name_codes(profile: Profile, table: str) -> tuple[np.ndarray, pd.Series]:
    """:func:`name_codes` of a table's ``name`` column (codes in the narrowest dtype), made once
    per profile: 4.5 M NVTX range names are hashed once, not once per question asked of them."""
    codes, distinct = name_codes(profile.table(table)["name"])
    return codes.astype(narrowest_int(np.array([-1, len(distinct)])), copy=False), distinct


@per_profile
def _distinct_classified(profile: Profile, table: str,
                         classify: Callable[[pd.Series], pd.Series]) -> np.ndarray:
    """Whether ``classify`` selects each distinct name of ``table`` (the last: a row without
    one), kept: asked once per profile, however many metrics ask (on a 10 M-kernel export the
    zero_grad and DDP predicates were each run four times over 26 k distinct range names)."""
    _, distinct = table_name_codes(profile, table)
    return np.asarray(per_distinct(np.arange(len(distinct) + 1), distinct, classify),
                      dtype=bool)


def classified(profile: Profile, table: str,
               classify: Callable[[pd.Series], pd.Series]) -> np.ndarray:
    """Which rows of ``table`` ``classify`` (a concepts predicate) selects by name, asked once
    per distinct name and profile (:func:`_distinct_classified`, spread by the kept codes)."""
    return _distinct_classified(profile, table, classify)[table_name_codes(profile, table)[0]]


def classified_rows(profile: Profile, table: str, classify: Callable[[pd.Series], pd.Series]
                    ) -> np.ndarray:
    """The positions of the rows of ``table`` that ``classify`` selects (:func:`classified`),
    found :data:`intervals.BLOCK_ROWS` rows at a time: no mask as long as the table (17 M
    runtime calls: 17 MB) for the few rows chosen."""
    codes = table_name_codes(profile, table)[0]
    chosen = _distinct_classified(profile, table, classify)
    dtype = position_dtype(len(codes))
    return np.concatenate([np.empty(0, dtype)] + [
        np.flatnonzero(chosen[codes[block]]).astype(dtype) + block.start
        for block in iv.blocks(len(codes))])


def classified_at(profile: Profile, table: str, classify: Callable[[pd.Series], pd.Series],
                  rows: np.ndarray) -> np.ndarray:
    """:func:`classified` for the ``rows`` (positions) of ``table`` only: no array as long as
    the table (17 M runtime calls: 17 MB) for the few rows asked."""
    codes = table_name_codes(profile, table)[0]
    return _distinct_classified(profile, table, classify)[codes[rows]]
