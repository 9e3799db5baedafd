"""Top-N tables: the names with the most time, with their call counts and shares."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from profreport.concepts import UNRECORDED_NAME, name_codes
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.results import TopItem

#: How many kernels, CPU ops and source lines are kept for display.
TOP_KERNELS = 10
TOP_OPS = 10
TOP_LINES = 20

#: The first row of a name that has none.
_NOT_SEEN = np.iinfo(np.int64).max


def ranked(spans: pd.DataFrame, key: str, limit: int, total_ns: int,
           exclusive: bool) -> list[TopItem]:
    """The ``limit`` names with the most ``ns`` (calls: the ``outer`` rows), with their share of
    ``total_ns``."""
    if spans.empty:
        return []
    codes, distinct = name_codes(spans[key])
    ns = np.zeros(len(distinct) + 1, dtype=np.int64)
    np.add.at(ns, codes, spans["ns"].to_numpy(np.int64))  # code -1 adds to the last slot
    count, first = calls_by_name(codes, len(distinct), spans["outer"].to_numpy(bool))
    return top_items(distinct, ns, count, first, limit, total_ns, exclusive=exclusive)


def calls_by_name(codes: np.ndarray, names: int, calls: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per name code (of ``names`` distinct names; the last slot: rows without a name), how
    many of its rows ``calls`` marks (every row: None), and its first row, a block of
    :data:`intervals.BLOCK_ROWS` rows at a time."""
    count = np.zeros(names + 1, dtype=np.int64)
    first = np.full(names + 1, _NOT_SEEN, dtype=np.int64)
    for block in iv.blocks(len(codes)):
        here = codes[block]
        np.add.at(count, here if calls is None else here[calls[block]], 1)
        named, where = np.unique(here, return_index=True)
        first[named] = np.minimum(first[named], where + block.start)
    return count, first


def top_items(distinct: pd.Series, ns: np.ndarray, count: np.ndarray, first: np.ndarray,
              limit: int, total_ns: int, exclusive: bool = False,
              comm: np.ndarray | None = None) -> list[TopItem]:
    """The ``limit`` names (per code of ``distinct``, the last slot: rows without a name, left
    out) with the most ``ns``, then the most calls, then the first row first (a stable sort of
    the names in the order they appear, as a grouping by name lists them), with their share of
    ``total_ns`` and, given ``comm`` per code, whether they are communication."""
    top = sorted(np.flatnonzero(first[:-1] != _NOT_SEEN).tolist(),
                 key=lambda code: (-ns[code], -count[code], first[code]))[:limit]
    return [TopItem(name=str(distinct.iloc[code]), total_ns=int(ns[code]),
                    count=int(count[code]), share=float(ns[code]) / max(total_ns, 1),
                    exclusive=exclusive, is_comm=comm is not None and bool(comm[code]))
            for code in top]


@dataclass(frozen=True)
class TopKernel:
    """Which of some top kernels takes the most time. The top kernels hold every kernel of
    unrecorded name in one row (concepts.UNRECORDED_NAME), however many kernels that is: when
    that row outweighs the largest named kernel, the top kernel is unknown; a named kernel with
    more time than all of them is the top kernel."""

    #: The kernel with the most time, or the row of the kernels of unrecorded name when it
    #: outweighs every named one (``known`` is then False).
    top: TopItem
    #: The named kernel with the most time when ``top`` is the row of unrecorded name; None
    #: when ``top`` is named or no kernel is.
    largest_named: TopItem | None = None

    @property
    def known(self) -> bool:
        """Whether the top kernel is known: a named kernel outweighs the unnamed ones."""
        return self.top.name != UNRECORDED_NAME


def top_kernel(kernels: list[TopItem]) -> TopKernel | None:
    """Which of ``kernels`` (most time first) takes the most time (:class:`TopKernel`); None
    without any."""
    named = next((k for k in kernels if k.name != UNRECORDED_NAME), None)
    unnamed = next((k for k in kernels if k.name == UNRECORDED_NAME), None)
    if unnamed is not None and (named is None or unnamed.total_ns > named.total_ns):
        return TopKernel(unnamed, named)
    return TopKernel(named) if named is not None else None
