"""Interval arithmetic over (starts, ends) arrays in microseconds: the same operations, in the same
order, as TraceLens, so sums agree to the last few bits even with timestamps around 1e12 us."""

from __future__ import annotations

import numpy as np


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals -> sorted disjoint (start, end) arrays; touching ones merge."""
    if len(starts) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, dtype=np.float64)[order]
    e = np.asarray(ends, dtype=np.float64)[order]
    run = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run[:-1]
    b = np.flatnonzero(new)
    return s[b], np.maximum.reduceat(e, b)


def subtract_intervals(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]):
    """B minus A; both sorted and disjoint (as merge_intervals returns)."""
    a_s, a_e = a[0].tolist(), a[1].tolist()
    out_s: list[float] = []
    out_e: list[float] = []
    ai = 0
    na = len(a_s)
    for bs, be in zip(b[0].tolist(), b[1].tolist()):
        cur = bs
        while ai < na and a_e[ai] <= bs:
            ai += 1
        k = ai
        while k < na and a_s[k] < be:
            if a_s[k] > cur:
                out_s.append(cur)
                out_e.append(min(be, a_s[k]))
            cur = max(cur, a_e[k])
            if cur >= be:
                break
            k += 1
        if cur < be:
            out_s.append(cur)
            out_e.append(be)
    return np.asarray(out_s, dtype=np.float64), np.asarray(out_e, dtype=np.float64)


def length(iv: tuple[np.ndarray, np.ndarray]) -> float:
    """Total length of sorted disjoint intervals."""
    return float(sum((iv[1] - iv[0]).tolist()))


def grouped_busy(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray, ngroups: int) -> np.ndarray:
    """Union length of the intervals of each group (TraceLens's per-op busy_time)."""
    out = np.zeros(ngroups, dtype=np.float64)
    if len(groups) == 0:
        return out
    order = np.lexsort((starts, groups))
    g = np.asarray(groups)[order]
    s = np.asarray(starts, dtype=np.float64)[order]
    e = np.asarray(ends, dtype=np.float64)[order]
    # running end within each group (groups are contiguous after the sort)
    run = e.copy()
    starts_g = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    bounds = np.r_[starts_g, len(g)]
    multi = np.flatnonzero(np.diff(bounds) > 1)  # one-interval groups need no running max
    for a, b in zip(bounds[multi].tolist(), bounds[multi + 1].tolist()):
        np.maximum.accumulate(run[a:b], out=run[a:b])
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = (g[1:] != g[:-1]) | (s[1:] > run[:-1])
    b = np.flatnonzero(new)
    seg_len = np.maximum.reduceat(e, b) - s[b]
    seg_g = g[b]
    # sequential per-group sums, in segment order (as Python's sum() does): ufunc.at
    # applies them one by one, in index order
    np.add.at(out, seg_g, seg_len)
    return out
