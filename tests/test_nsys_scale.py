"""The fast paths that keep million-row nsys exports cheap give what the plain pandas way gives."""

from __future__ import annotations

import numpy as np
import pandas as pd

from profreport.reports.analysis.gpu import correlated, first_call


def _keys(seed: int, size: int, high: int) -> np.ndarray:
    """Random correlation ids with repeats (and the unknown id -1)."""
    return np.random.default_rng(seed).integers(-1, high, size)


def test_correlated_pairs_are_those_of_an_inner_merge() -> None:
    keys, calls = _keys(1, 5000, 3000), _keys(2, 4000, 3000)
    left, right = correlated(keys, calls)
    merged = pd.DataFrame({"key": keys, "i": np.arange(len(keys))}).merge(
        pd.DataFrame({"key": calls, "j": np.arange(len(calls))}), on="key")
    assert len(left) == len(merged) > len(keys) // 2
    np.testing.assert_array_equal(left, merged["i"].to_numpy())
    np.testing.assert_array_equal(right, merged["j"].to_numpy())
    empty_left, empty_right = correlated(keys, np.empty(0, np.int64))
    assert len(empty_left) == len(empty_right) == 0


def test_first_call_is_the_first_row_of_each_id() -> None:
    keys, calls = _keys(3, 5000, 3000), _keys(4, 4000, 3000)
    first = pd.Series(np.arange(len(calls))).groupby(calls).first()
    expected = pd.Series(keys).map(first).fillna(-1).to_numpy(np.int64)
    np.testing.assert_array_equal(first_call(keys, calls), expected)
    assert (first_call(keys, np.empty(0, np.int64)) == -1).all()
