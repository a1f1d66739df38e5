"""The one-value fast path of ``reports._shared.stats`` gives numpy's own numbers, bit for bit."""

from __future__ import annotations

import math

import numpy as np

from traceladder.analysis.reports._shared import _stats, stats


def _bits(v: float) -> str:
    return "nan" if math.isnan(v) else v.hex()


def test_one_value_matches_the_numpy_path_bit_for_bit():
    rng = np.random.default_rng(7)
    values = [-0.0, 0.0, 1.5, -3.3, 5e-324, -5e-324, 1e308, -1e308, math.inf, -math.inf]
    values += rng.normal(0, 1e3, 200).tolist() + rng.exponential(1e-3, 50).tolist()
    for x in values:
        for given in ([x], np.asarray([x]), np.float64(x)):
            fast, ref = stats(given), _stats(np.asarray([x], dtype=np.float64))
            assert fast.keys() == ref.keys()
            assert {k: _bits(v) for k, v in fast.items()} == {k: _bits(v) for k, v in ref.items()}, x
    # a lone -0.0 sums to +0.0 in numpy (its sum starts from 0.0), and the fast path agrees
    assert _bits(stats([-0.0])["sum"]) == _bits(0.0) and _bits(stats([-0.0])["median"]) == _bits(-0.0)


def test_one_nan_is_an_empty_group():
    assert {k: _bits(v) for k, v in stats([math.nan]).items()} == {
        k: _bits(v) for k, v in _stats(np.asarray([math.nan])).items()
    }


def _busy_reference(groups, starts, ends, ngroups):
    """Per group: the union of its intervals, by start, summed segment by segment in Python."""
    out = [0.0] * ngroups
    for g in range(ngroups):
        iv = sorted((s, i, e) for i, (gg, s, e) in enumerate(zip(groups, starts, ends)) if gg == g)
        total, seg = 0.0, None
        for s, _, e in iv:
            if seg is not None and s <= seg[1]:
                seg[1] = max(seg[1], e)
                continue
            if seg is not None:
                total += seg[1] - seg[0]
            seg = [s, e]
        if seg is not None:
            total += seg[1] - seg[0]
        out[g] = total
    return out


def test_grouped_busy_matches_a_plain_union_bit_for_bit():
    from traceladder.analysis.model.intervals import grouped_busy

    rng = np.random.default_rng(11)
    for trial in range(30):
        n, ng = int(rng.integers(1, 300)), int(rng.integers(1, 40))
        groups = rng.integers(0, ng, n)
        starts = np.round(rng.uniform(0, 1e4, n), int(rng.integers(0, 4)))  # ties and touching ends
        ends = starts + np.round(rng.exponential(50, n), 3)
        got = grouped_busy(groups, starts, ends, ng)
        ref = _busy_reference(groups.tolist(), starts.tolist(), ends.tolist(), ng)
        assert [v.hex() for v in got.tolist()] == [v.hex() for v in ref], trial
