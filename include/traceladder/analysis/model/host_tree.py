"""The host call stack (TraceLens v1.0.0 ``BaseTraceToTree.build_host_call_stack_tree``),
for all events at once where the events nest.

TraceLens's rule, per thread, over the events by start time: pop the stack while the
event starts at or after the top's end; if the event then ends after the top, it
"bleeds": with less than 1 us of overlap and two or more events on the stack the top
is popped (and the new top is the parent, unchecked), otherwise the event is left out
of the tree; the top, if any, is the parent; push the event.

When every event ends no later than the top it finds (properly nested events: the
usual case), nothing bleeds, every event is pushed, and the stack is exactly the events
still open at an event's start.  The parent is then the nearest earlier event of the
thread that ends after this one starts, found for all events by a binary descent over
a max table of end times (one numpy step per power of two).  A thread where some event
does bleed is walked by the rule above, event by event.
"""

from __future__ import annotations

import numpy as np

__all__ = ["host_parents"]


def host_parents(ts: np.ndarray, te: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """Parent position (-1: none) of each event; the events are sorted by (thread, start),
    ties in file order; ``ts``/``te`` are start/end times, ``thread`` the thread key."""
    n = ts.size
    if n == 0:
        return np.empty(0, dtype=np.int64)
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = thread[1:] != thread[:-1]
    lo = np.maximum.accumulate(np.where(new, np.arange(n), 0))  # first event of each one's thread
    parent = _nearest_open(ts, te, lo)
    has = parent >= 0
    bad = np.zeros(n, dtype=bool)
    bad[has] = te[has] > te[parent[has]]
    if bad.any():  # some event bleeds: those threads, by the rule itself
        starts = np.flatnonzero(new)
        ends = np.append(starts[1:], n)
        for a, b in zip(starts.tolist(), ends.tolist()):
            if bad[a:b].any():
                w = _walk(ts[a:b].tolist(), te[a:b].tolist())
                parent[a:b] = np.where(w >= 0, w + a, -1)
    return parent


def _nearest_open(ts: np.ndarray, te: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """For each j: the largest k in [lo[j], j) with te[k] > ts[j], else -1."""
    n = ts.size
    levels = [te]  # levels[l][i] = max(te[i : i + 2**l])
    step = 1
    longest = int(np.max(np.arange(n) - lo)) if n else 0
    while step * 2 <= longest:
        prev = levels[-1]
        nxt = prev.copy()
        nxt[: n - step] = np.maximum(prev[: n - step], prev[step:])
        levels.append(nxt)
        step *= 2
    pos = np.arange(n)
    for lvl in range(len(levels) - 1, -1, -1):
        w = 1 << lvl
        at = pos - w
        ok = at >= lo
        ok[ok] = levels[lvl][at[ok]] <= ts[ok]  # the whole block [at, pos) ends by ts: skip it
        pos[ok] = at[ok]
    k = pos - 1
    found = k >= lo
    found[found] = te[k[found]] > ts[found]
    return np.where(found, k, -1)


def _walk(ts: list[float], te: list[float]) -> np.ndarray:
    """One thread, by TraceLens's rule (positions within the thread)."""
    parent = np.full(len(ts), -1, dtype=np.int64)
    st: list[int] = []
    for j in range(len(ts)):
        t0 = ts[j]
        while st and t0 >= te[st[-1]]:
            st.pop()
        if st and te[j] > te[st[-1]]:
            if te[st[-1]] - t0 < 1.0 and len(st) >= 2:
                st.pop()
            else:
                continue
        if st:
            parent[j] = st[-1]
        st.append(j)
    return parent
