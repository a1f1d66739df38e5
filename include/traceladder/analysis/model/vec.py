"""Small numpy building blocks that replace per-event Python dicts and loops on the
analysis hot path: dense codes for tuples of int columns, "last one wins" maps, and
walks up the host tree one level at a time for all events at once."""

from __future__ import annotations

import numpy as np

__all__ = ["dense_codes", "LastWins", "first_up"]


def dense_codes(*cols: np.ndarray) -> np.ndarray:
    """One int64 code per row of the int columns ``cols``: equal tuples, equal codes;
    codes are dense (0..k-1) and ordered as the tuples sort."""
    n = len(cols[0])
    code = np.zeros(n, dtype=np.int64)
    for c in cols:
        if n == 0:
            break
        _, ci = np.unique(np.asarray(c), return_inverse=True)
        code = code * (int(ci.max()) + 1) + ci.reshape(-1)
        _, code = np.unique(code, return_inverse=True)  # re-densify: no overflow however many columns
        code = code.reshape(-1).astype(np.int64, copy=False)
    return code


class LastWins:
    """``dict(zip(keys, values))`` for int keys (a later equal key overwrites an earlier
    one), queried for many keys at once."""

    def __init__(self, keys: np.ndarray, values: np.ndarray):
        rk = np.asarray(keys)[::-1]
        self.keys, first = np.unique(rk, return_index=True)
        self.values = np.asarray(values)[::-1][first]

    def get(self, q: np.ndarray, default: int = -1) -> np.ndarray:
        """The value of each query key (``default`` where absent)."""
        q = np.asarray(q)
        out = np.full(q.shape, default, dtype=self.values.dtype if self.values.size else np.int64)
        if not self.keys.size or not q.size:
            return out
        at = np.minimum(np.searchsorted(self.keys, q), self.keys.size - 1)
        hit = self.keys[at] == q
        out[hit] = self.values[at[hit]]
        return out

    def has(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q)
        if not self.keys.size:
            return np.zeros(q.shape, dtype=bool)
        at = np.minimum(np.searchsorted(self.keys, q), self.keys.size - 1)
        return self.keys[at] == q


def first_up(
    parent: np.ndarray,
    start: np.ndarray,
    stop: np.ndarray,
    through: np.ndarray | None = None,
    max_steps: int | None = None,
) -> np.ndarray:
    """For each event in ``start``, the first event at or above it (following ``parent``)
    where ``stop`` is True; -1 when the walk reaches a root first.  With ``through``,
    the walk also ends (with -1) at the first event that is neither ``stop`` nor
    ``through``; with ``max_steps``, after that many events looked at."""
    cur = np.asarray(start, dtype=np.int64).copy()
    out = np.full(cur.shape, -1, dtype=np.int64)
    active = np.flatnonzero(cur >= 0)
    steps = 0
    while active.size and (max_steps is None or steps < max_steps):
        steps += 1
        c = cur[active]
        hit = stop[c]
        out[active[hit]] = c[hit]
        go = ~hit if through is None else (~hit & through[c])
        active = active[go]
        nxt = parent[cur[active]]
        cur[active] = nxt
        active = active[nxt >= 0]
    return out
