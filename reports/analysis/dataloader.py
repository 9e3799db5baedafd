"""What a DataLoader wait share says: from which share a run is loader-bound, and whether the
shares several profilers measured tell one story. The metrics pick the breakdown's source with
it (metrics._breakdown_source) and the findings read it (LOADER_BOUND, SOURCES_AGREE...), so it
sits below both.
"""

from __future__ import annotations

#: A quarter of every step spent waiting for the next batch is the biggest single loss a run can
#: fix without touching the model, so from here on the run is called loader-bound.
LOADER_BOUND_FRACTION = 0.25
#: Two sources agree about the DataLoader when their wait shares differ by at most this much.
SOURCES_AGREE_DELTA = 0.15


def loader_shares_agree(shares: list[float]) -> bool:
    """Whether profilers' DataLoader wait shares tell one story: within SOURCES_AGREE_DELTA of
    each other, or all on one side of LOADER_BOUND_FRACTION (the same verdict)."""
    return max(shares) - min(shares) <= SOURCES_AGREE_DELTA or \
        len({share >= LOADER_BOUND_FRACTION for share in shares}) == 1
