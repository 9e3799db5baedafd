"""Top-N tables: the names with the most time, with their call counts and shares."""

from __future__ import annotations

import numpy as np
import pandas as pd

from profreport.concepts import name_codes
from profreport.reports.analysis.results import TopItem

#: How many kernels, CPU ops and source lines are kept for display.
TOP_KERNELS = 10
TOP_OPS = 10
TOP_LINES = 20


def ranked(spans: pd.DataFrame, key: str, limit: int, total_ns: int,
           exclusive: bool) -> list[TopItem]:
    """The ``limit`` names with the most ``ns`` (calls: the ``outer`` rows), with their share of
    ``total_ns``."""
    if spans.empty:
        return []
    codes, distinct = name_codes(spans[key])
    named = np.flatnonzero(codes >= 0)
    ns = np.zeros(len(distinct), dtype=np.int64)
    np.add.at(ns, codes[named], spans["ns"].to_numpy(np.int64)[named])
    count = np.bincount(codes[named[spans["outer"].to_numpy(bool)[named]]],
                        minlength=len(distinct))
    first = np.full(len(distinct), len(codes))  # each name's first row; none: not there
    np.minimum.at(first, codes[named], named)
    # Most time first, then most calls, then the name seen first.
    top = sorted(np.flatnonzero(first < len(codes)).tolist(),
                 key=lambda code: (-ns[code], -count[code], first[code]))[:limit]
    return [TopItem(name=str(distinct.iloc[code]), total_ns=int(ns[code]),
                    count=int(count[code]), share=float(ns[code]) / max(total_ns, 1),
                    exclusive=exclusive) for code in top]
