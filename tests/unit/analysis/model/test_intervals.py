"""Interval subtraction with numpy against the walk over both lists (its definition):
the same pieces, in the same order, bit for bit (zero-length and touching intervals,
B pieces that a previous subtraction cut)."""

from __future__ import annotations

import numpy as np
import pytest

from traceladder.analysis.model.intervals import _subtract_walk, merge_intervals, subtract_intervals


def _random(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    s = np.round(rng.uniform(0, 1000, n), 1) * rng.choice([1.0, 1e6], p=[0.8, 0.2]) / 1e0
    d = np.where(rng.random(n) < 0.2, 0.0, np.round(rng.exponential(8, n), 3))
    return s, s + d


@pytest.mark.parametrize("seed", range(20))
def test_subtract_matches_the_walk(seed):
    rng = np.random.default_rng(seed)
    a = merge_intervals(*_random(rng, int(rng.integers(0, 300))))
    b = merge_intervals(*_random(rng, int(rng.integers(1, 300))))
    for bb in (b, _subtract_walk(merge_intervals(*_random(rng, 200)), b)):  # merged, and already cut
        got = subtract_intervals(a, bb)
        want = _subtract_walk(a, bb)
        assert got[0].tolist() == want[0].tolist()
        assert got[1].tolist() == want[1].tolist()


def test_subtract_cases():
    a = (np.array([2.0, 5.0, 9.0]), np.array([3.0, 5.0, 12.0]))  # 5..5 has no length
    b = (np.array([0.0, 4.0, 10.0, 20.0, 30.0]), np.array([1.0, 8.0, 11.0, 20.0, 31.0]))
    got = subtract_intervals(a, b)
    assert list(zip(*(x.tolist() for x in got))) == [(0.0, 1.0), (4.0, 5.0), (5.0, 8.0), (30.0, 31.0)]
    empty = (np.empty(0), np.empty(0))
    assert subtract_intervals(empty, b)[0].tolist() == [0.0, 4.0, 10.0, 30.0]
    assert subtract_intervals(a, empty)[0].size == 0
