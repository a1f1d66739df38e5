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
    """B minus A; A sorted and disjoint (as merge_intervals returns), B sorted by start.

    Each B interval is cut by the A intervals it overlaps (those ending after its start
    and starting before its end): the piece before the first (when it has length), the
    gaps between them, and the piece after the last (when it has length); a B interval
    that meets none is kept whole (when it has length).  The pieces come out in B's
    order, each B interval's left to right, as a walk over both lists gives them
    (a zero-length A interval inside B still cuts it in two, so the summed lengths
    round as that walk's do)."""
    a_s, a_e = np.asarray(a[0], dtype=np.float64), np.asarray(a[1], dtype=np.float64)
    b_s, b_e = np.asarray(b[0], dtype=np.float64), np.asarray(b[1], dtype=np.float64)
    nb = b_s.size
    if nb == 0:
        return np.empty(0), np.empty(0)
    lo = np.searchsorted(a_e, b_s, side="right")  # first A ending after B's start
    hi = np.searchsorted(a_s, b_e, side="left")  # first A starting at or after B's end
    cut = hi > lo
    lo_c = np.minimum(lo, max(a_s.size - 1, 0))
    hi_c = np.maximum(hi - 1, 0)
    first = cut & (a_s[lo_c] > b_s) if a_s.size else np.zeros(nb, bool)
    last = cut & (a_e[hi_c] < b_e) if a_s.size else np.zeros(nb, bool)
    whole = ~cut & (b_s < b_e)
    mid = np.where(cut, hi - lo - 1, 0)
    count = whole.astype(np.int64) + first + mid + last
    total = int(count.sum())
    off = np.cumsum(count) - count
    out_s = np.empty(total, dtype=np.float64)
    out_e = np.empty(total, dtype=np.float64)
    w = np.flatnonzero(whole)
    out_s[off[w]], out_e[off[w]] = b_s[w], b_e[w]
    f = np.flatnonzero(first)
    out_s[off[f]], out_e[off[f]] = b_s[f], a_s[lo[f]]
    if mid.any():
        bi = np.repeat(np.arange(nb), mid)
        m = np.arange(bi.size) - np.repeat(np.cumsum(mid) - mid, mid)
        k = lo[bi] + m
        at = off[bi] + first[bi] + m
        out_s[at], out_e[at] = a_e[k], a_s[k + 1]
    la = np.flatnonzero(last)
    at = off[la] + first[la] + mid[la]
    out_s[at], out_e[at] = a_e[hi[la] - 1], b_e[la]
    return out_s, out_e


def _subtract_walk(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]):
    """B minus A by walking both lists (the definition; tests compare against it)."""
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
