"""Top-N tables: the names with the most time, with their call counts and shares."""

from __future__ import annotations

import pandas as pd

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
    grouped = (spans.groupby(key, sort=False).agg(sum=("ns", "sum"), count=("outer", "sum"))
               .sort_values(["sum", "count"], ascending=False).head(limit))
    return [TopItem(name=str(name), total_ns=int(row["sum"]), count=int(row["count"]),
                    share=float(row["sum"]) / max(total_ns, 1), exclusive=exclusive)
            for name, row in grouped.iterrows()]
