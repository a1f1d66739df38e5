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
    groups: dict[int, list[int]] = {}
    for i, s in sorted(oa.seq.items()):
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
