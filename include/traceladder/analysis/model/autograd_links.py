"""Forward op -> autograd backward event links, by TraceLens v1.0.0's rule.

TraceLens ``TraceToTree.link_all_fwd_bwd_events``: events are grouped by their
``Sequence number`` arg (file order); in each group the first event named
``autograd::engine::evaluate_function: ...`` is the backward event, and the forward
op it belongs to is the group's latest-starting event (first one on ties) that is not
on the backward event's pid/tid.  That forward event gets the backward event in its
``bwd_events``.  Only called when a report needs backward rows.
"""

from __future__ import annotations

import numpy as np

from .events import EventTable
from .op_args import op_args

_EVAL_PREFIX = "autograd::engine::evaluate_function:"


def bwd_links(t: EventTable) -> dict[int, list[int]]:
    """forward event index -> backward autograd event indices (empty when none); built
    once per table (kept in its per-trace cache)."""
    got = t._cat_cache.get(("bwd_links",))
    if got is None:
        got = t._cat_cache[("bwd_links",)] = _build(t)
    return got


def _build(t: EventTable) -> dict[int, list[int]]:
    codes = [i for i, n in enumerate(t.names) if n.startswith(_EVAL_PREFIX)]
    if not codes:
        return {}
    is_eval = np.isin(t.name, np.asarray(codes, dtype=np.int32))
    oa = op_args(t)
    oa.all_cpu_ops()
    if oa.seq_slow:  # odd Sequence numbers (null, beyond int64) somewhere: by the rule itself
        seq = dict(zip(oa.seq_events.tolist(), oa.seq_values.tolist()))
        seq.update(oa.seq_slow)
        return _by_rule(t, is_eval, sorted(seq.items()))
    ev, sv = oa.seq_events, oa.seq_values  # file order
    # each group's backward event: its first evaluate_function event
    e = is_eval[ev]
    bseq, bfirst = np.unique(sv[e], return_index=True)
    if not bseq.size:
        return {}
    bwd = ev[e][bfirst]
    # the members of those groups, less those on the backward event's pid/tid
    at = np.searchsorted(bseq, sv)
    at[at >= bseq.size] = 0
    m = bseq[at] == sv
    mev, mb = ev[m], bwd[at[m]]
    ok = ~((t.pid[mev] == t.pid[mb]) & (t.tid[mev] == t.tid[mb])) & (t.ts[mev] > -1.0)
    mev, mgrp = mev[ok], at[m][ok]
    # the forward op: the latest start in the group, the first one (file order) on ties
    order = np.lexsort((mev, -t.ts[mev], mgrp))
    g_sorted = mgrp[order]
    first = np.flatnonzero(np.r_[True, g_sorted[1:] != g_sorted[:-1]]) if g_sorted.size else g_sorted
    leaf = np.full(bseq.size, -1, dtype=np.int64)
    leaf[g_sorted[first]] = mev[order[first]]
    # groups in order of first appearance, as the rule walks them
    uall, gfirst = np.unique(sv, return_index=True)
    appear = np.argsort(gfirst[np.searchsorted(uall, bseq)], kind="stable")
    links: dict[int, list[int]] = {}
    for g in appear.tolist():
        if leaf[g] >= 0:
            links.setdefault(int(leaf[g]), []).append(int(bwd[g]))
    return links


def _by_rule(t: EventTable, is_eval: np.ndarray, seq_items: list[tuple[int, int]]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for i, s in seq_items:
        groups.setdefault(s, []).append(i)
    links: dict[int, list[int]] = {}
    ts = t.ts
    pid, tid = t.pid, t.tid
    for uids in groups.values():
        bwd = next((u for u in uids if is_eval[u]), None)
        if bwd is None:
            continue
        leaf, best = None, -1.0
        for u in uids:
            if pid[u] == pid[bwd] and tid[u] == tid[bwd]:
                continue
            tu = ts[u]
            if tu > best:
                best, leaf = tu, u
        if leaf is not None:
            links.setdefault(leaf, []).append(bwd)
    return links


def seq_pairs(t: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """(forward op, backward node) pairs by autograd's ``Sequence number``, on any thread.

    TraceLens's rule above skips a forward op on the backward node's own thread, which is every
    op of a CPU trace (CPU autograd runs on the calling thread). Here, per sequence number, the
    backward node is the group's first ``evaluate_function`` event (file order) and the forward
    op is the latest-starting other member that starts before it (first in file order on ties).
    For the what's-left reports (regions, origins); cached per table."""
    got = t._cat_cache.get(("seq_pairs",))
    if got is None:
        got = t._cat_cache[("seq_pairs",)] = _seq_pairs(t)
    return got


def _seq_pairs(t: EventTable) -> tuple[np.ndarray, np.ndarray]:
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    codes = [i for i, n in enumerate(t.names) if n.startswith(_EVAL_PREFIX)]
    if not codes:
        return empty
    oa = op_args(t)
    oa.all_cpu_ops()
    ev, sv = oa.seq_events, oa.seq_values
    is_eval = np.isin(t.name[ev], np.asarray(codes, dtype=np.int32))
    bseq, bfirst = np.unique(sv[is_eval], return_index=True)
    if not bseq.size:
        return empty
    bwd = ev[is_eval][bfirst]
    cand, cseq = ev[~is_eval], sv[~is_eval]
    at = np.minimum(np.searchsorted(bseq, cseq), bseq.size - 1)
    ok = (bseq[at] == cseq) & (t.ts[cand] < t.ts[bwd[at]])
    cand, grp = cand[ok], at[ok]
    if not cand.size:
        return empty
    order = np.lexsort((cand, -t.ts[cand], grp))  # per group: latest start, then file order
    g_sorted = grp[order]
    first = np.flatnonzero(np.r_[True, g_sorted[1:] != g_sorted[:-1]])
    return cand[order[first]], bwd[g_sorted[first]]
