"""The vectorised host call stack against TraceLens's rule, walked event by event.

``host_parents`` takes a numpy path for threads whose events nest and walks the rule
for a thread where an event bleeds past its parent's end; both must give the parents
that the rule itself gives (the rule is restated here, over the events in any order).
"""

from __future__ import annotations

import numpy as np
import pytest

from traceladder.analysis.model.host_tree import host_parents


def rule(ts: list[float], te: list[float], thread: list[int]) -> list[int]:
    """TraceLens build_host_call_stack_tree: per thread, events by start (ties in input
    order), a stack with the 1 us bleed tolerance.  Returns each event's parent (input
    positions, -1 for none)."""
    order = sorted(range(len(ts)), key=lambda i: ts[i])
    parent = [-1] * len(ts)
    stacks: dict[int, list[int]] = {}
    for j in order:
        st = stacks.setdefault(thread[j], [])
        while st and ts[j] >= te[st[-1]]:
            st.pop()
        if st and te[j] > te[st[-1]]:
            if te[st[-1]] - ts[j] < 1.0 and len(st) >= 2:
                st.pop()
            else:
                continue
        if st:
            parent[j] = st[-1]
        st.append(j)
    return parent


def vectorised(ts: list[float], te: list[float], thread: list[int]) -> list[int]:
    a_ts, a_te, a_th = np.asarray(ts), np.asarray(te), np.asarray(thread, dtype=np.int64)
    perm = np.lexsort((a_ts, a_th))
    par = host_parents(a_ts[perm], a_te[perm], a_th[perm])
    out = np.full(len(ts), -1, dtype=np.int64)
    has = par >= 0
    out[perm[has]] = perm[par[has]]
    return out.tolist()


def nested(rng: np.random.Generator, t0: float, t1: float, depth: int, out: list[tuple[float, float]]) -> None:
    """Random properly nested intervals inside [t0, t1] (touching, zero-length and
    equal-start ones included)."""
    cur = t0
    while cur < t1 and depth < 6:
        if rng.random() < 0.2:
            out.append((cur, cur))  # zero duration
        length = float(rng.integers(0, 40))
        end = min(t1, cur + length)
        out.append((cur, end))
        if end > cur and rng.random() < 0.7:
            nested(rng, cur, end, depth + 1, out)
        cur = end + float(rng.integers(0, 3))  # 0: the next one starts where this ends


def make(seed: int, bleed: bool) -> tuple[list[float], list[float], list[int]]:
    rng = np.random.default_rng(seed)
    ts: list[float] = []
    te: list[float] = []
    thread: list[int] = []
    for th in range(3):
        iv: list[tuple[float, float]] = []
        nested(rng, 0.0, 400.0, 0, iv)
        if bleed:  # some events end past their enclosing event: by < 1 us and by more
            for k in rng.choice(len(iv), size=max(1, len(iv) // 10), replace=False).tolist():
                s, e = iv[k]
                iv[k] = (s, e + float(rng.choice([0.25, 0.5, 3.0, 20.0])))
        perm = rng.permutation(len(iv))  # file order is not start order
        for k in perm.tolist():
            ts.append(iv[k][0])
            te.append(iv[k][1])
            thread.append(th * 7 + 1)
    return ts, te, thread


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("bleed", [False, True])
def test_host_parents_follow_the_rule(seed, bleed):
    ts, te, thread = make(seed, bleed)
    want = rule(ts, te, thread)
    assert sum(p >= 0 for p in want) > len(ts) // 3  # a real tree, not a flat list
    assert vectorised(ts, te, thread) == want


def test_bleeding_event_cases():
    """The rule's two bleed outcomes: < 1 us past a parent with a grandparent pops the
    parent; otherwise the event is left out of the tree (no parent, never a parent)."""
    ts = [0.0, 10.0, 49.5, 55.0, 100.0, 110.0, 120.0]
    te = [90.0, 50.0, 60.0, 58.0, 150.0, 200.0, 130.0]
    thread = [1] * 7
    want = rule(ts, te, thread)
    assert want == [-1, 0, 0, 2, -1, -1, 4]  # 2 pops 1 and hangs under 0; 5 is left out
    assert vectorised(ts, te, thread) == want


def test_empty():
    assert host_parents(np.empty(0), np.empty(0), np.empty(0, np.int64)).size == 0
