"""``op_origins.csv``: which parent launched each of the top ops, and with which shapes.

For each of the top ops by direct kernel time (by self time on a CPU trace), and each op with
calls under an AccumulateGrad node, every call (a
launcher row of :mod:`.ops_summary`) is charged to its origin, found by walking up the host call
tree from the call's parent:

* ``accumulate_grad``: the first autograd node above it is
  ``autograd::engine::evaluate_function: torch::autograd::AccumulateGrad`` (a gradient added to a
  parameter's ``.grad``); the parent is ``AccumulateGrad``;
* ``backward``: the first autograd node above it is another ``evaluate_function: <Node>``; the
  parent is ``<Node>``, with the forward op it belongs to (autograd's sequence-number link) as
  ``<Node> (of <forward op>)``;
* ``forward``: no autograd node above it, but the call or an op above it is a forward op that
  autograd recorded (it has a backward node); the parent is the nearest op above the call with
  another name (``(top level)`` when none);
* ``host``: anything else (the optimizer, data, collectives' host side); parent as for forward.

``shapes`` lists the call's first input shape (``Input Dims``) by time, with calls per step.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from ..model.autograd_links import seq_pairs
from ..model.events import EventTable
from ..model.table import Table
from ..model.op_args import op_args
from ..model.vec import LastWins, dense_codes, first_up
from .ops_summary import Launchers

__all__ = ["CSV_NAME", "COLUMNS", "ACCUMULATE_GRAD", "op_origins", "write_csv", "origin_sentence"]

CSV_NAME = "op_origins.csv"
COLUMNS = ["op", "parent", "link", "ms_per_step", "pct_of_op", "count", "shapes"]
EVAL_PREFIX = "autograd::engine::evaluate_function: "
ACCUMULATE_GRAD = EVAL_PREFIX + "torch::autograd::AccumulateGrad"
_MAX_SHAPES = 3
_MAX_DEPTH = 64  # host trees are shallow; a cycle in a broken trace must not loop forever


def _first_shape(args: dict) -> str:
    dims = args.get("Input Dims")
    if isinstance(dims, list) and dims and isinstance(dims[0], list):
        return json.dumps(dims[0], separators=(", ", ":"))
    return "[]"


def accumulate_grad_ops(t: EventTable, launchers: Launchers) -> list[str]:
    """The ops some call of which runs under an AccumulateGrad node (nearest autograd node above
    it), by their time there: the gradient accumulation the seed found behind ``aten::add_``."""
    if ACCUMULATE_GRAD not in t.names or launchers.idx.size == 0:
        return []
    is_node = np.zeros(len(t.names), dtype=bool)
    is_node[[c for c, nm in enumerate(t.names) if nm.startswith(EVAL_PREFIX)]] = True
    parent = t.call_tree().host_parent
    node = first_up(parent, parent[launchers.idx], is_node[t.name], max_steps=_MAX_DEPTH)
    under = np.flatnonzero(node >= 0)
    under = under[t.name[node[under]] == t.names.index(ACCUMULATE_GRAD)]
    time: dict[str, float] = defaultdict(float)
    direct = np.asarray(launchers.direct_us, dtype=np.float64)
    for i, us in zip(under.tolist(), direct[under].tolist()):
        time[launchers.names[i]] += us
    return sorted(time, key=lambda op: -time[op])


def op_origins(t: EventTable, launchers: Launchers, top_ops: list[str], steps: int) -> list[dict[str, Any]]:
    """Rows for each op in ``top_ops`` (in that order), its origins by time, descending."""
    if not top_ops or launchers.idx.size == 0:
        return []
    tree = t.call_tree()
    parent = tree.host_parent
    fwd, bwd = seq_pairs(t)
    fwd_of = LastWins(bwd, fwd)  # backward node -> its forward op
    is_fwd = np.zeros(len(t), dtype=bool)
    is_fwd[fwd] = True
    names = t.names
    steps = max(steps, 1)
    top_ops = top_ops + [op for op in accumulate_grad_ops(t, launchers) if op not in top_ops]
    want = set(top_ops)
    pos = [i for i, nm in enumerate(launchers.names) if nm in want]
    calls = launchers.idx[pos]
    direct = np.asarray(launchers.direct_us, dtype=np.float64)[pos]
    # walk up from every call at once, one tree level per step: the first autograd node above,
    # the first op above with another name, and whether a forward op autograd recorded is on the way
    eval_codes = np.asarray([c for c, nm in enumerate(names) if nm.startswith(EVAL_PREFIX)], dtype=np.int64)
    own = t.name[calls]
    node = np.full(calls.size, -1, dtype=np.int64)
    origin = np.full(calls.size, -1, dtype=np.int64)
    forward = is_fwd[calls].copy()
    cur = parent[calls].astype(np.int64)
    active = np.flatnonzero(cur >= 0)
    for _ in range(_MAX_DEPTH):
        if not active.size:
            break
        c = cur[active]
        at_node = np.isin(t.name[c], eval_codes)
        node[active[at_node]] = c[at_node]
        active, c = active[~at_node], c[~at_node]
        first = (origin[active] < 0) & (t.name[c] != own[active])
        origin[active[first]] = c[first]
        forward[active] |= is_fwd[c]
        cur[active] = parent[c]
        active = active[cur[active] >= 0]
    # one group per (op, link, node or origin, forward op) as int columns; the strings are made
    # once per group, the shapes once per distinct Input Dims (OpArgs keys), not per call
    nn = np.where(node >= 0, t.name[np.maximum(node, 0)], -1)
    acc_code = names.index(ACCUMULATE_GRAD) if ACCUMULATE_GRAD in names else -2
    link_code = np.where(node >= 0, np.where(nn == acc_code, 2, 1), np.where(forward, 3, 0))
    fwd_ev = fwd_of.get(node)
    fwd_name = np.where(fwd_ev >= 0, t.name[np.maximum(fwd_ev, 0)], -1)
    org_name = np.where(origin >= 0, t.name[np.maximum(origin, 0)], -1)
    where_code = np.where(node >= 0, np.where(link_code == 2, -3, nn), org_name)
    gid = dense_codes(own, link_code, where_code, np.where(link_code == 1, fwd_name, -1))
    ngroups = int(gid.max()) + 1
    g_us = np.bincount(gid, weights=direct, minlength=ngroups)
    g_n = np.bincount(gid, minlength=ngroups)
    g_first = np.full(ngroups, -1, dtype=np.int64)
    g_first[gid[::-1]] = np.arange(gid.size)[::-1]  # a call of each group
    oa = op_args(t)
    akey = oa.keys(calls)
    sid = dense_codes(gid, akey)
    s_us = np.bincount(sid, weights=direct)
    s_n = np.bincount(sid)
    s_first = np.full(s_us.size, -1, dtype=np.int64)
    s_first[sid[::-1]] = np.arange(sid.size)[::-1]
    link_names = {0: "host", 1: "backward", 2: "accumulate_grad", 3: "forward"}
    groups: dict[tuple[str, str, str], list[Any]] = {}
    shapes: dict[tuple[str, str, str], dict[str, list[float]]] = defaultdict(dict)
    group_key: list[tuple[str, str, str]] = []
    for g in range(ngroups):
        i = int(g_first[g])
        link = link_names[int(link_code[i])]
        if link == "accumulate_grad":
            where = "AccumulateGrad"
        elif link == "backward":
            short = names[int(nn[i])][len(EVAL_PREFIX) :]
            where = f"{short} (of {names[int(fwd_name[i])]})" if fwd_name[i] >= 0 else short
        else:
            where = names[int(org_name[i])] if org_name[i] >= 0 else "(top level)"
        key = (names[int(own[i])], where, link)
        group_key.append(key)
        got = groups.setdefault(key, [0.0, 0])
        got[0] += float(g_us[g])
        got[1] += int(g_n[g])
    for k in range(s_us.size):
        i = int(s_first[k])
        shape = _first_shape(oa.args(int(akey[i])))
        got = shapes[group_key[int(gid[i])]].setdefault(shape, [0.0, 0])
        got[0] += float(s_us[k])
        got[1] += int(s_n[k])
    op_total: dict[str, float] = defaultdict(float)
    for (op, _, _), (us, _) in groups.items():
        op_total[op] += us
    rank = {op: i for i, op in enumerate(top_ops)}
    rows = []
    for key in sorted(groups, key=lambda k: (rank[k[0]], -groups[k][0])):
        us, n = groups[key]
        by_time = sorted(shapes[key].items(), key=lambda kv: -kv[1][0])[:_MAX_SHAPES]
        rows.append(
            {
                "op": key[0],
                "parent": key[1],
                "link": key[2],
                "ms_per_step": us / 1e3 / steps,
                "pct_of_op": us / op_total[key[0]] * 100 if op_total[key[0]] else 0.0,
                "count": n,
                "shapes": "; ".join(f"{shape} x{c / steps:g}/step" for shape, (_, c) in by_time),
            }
        )
    return rows


def origin_sentence(row: dict[str, Any]) -> str:
    """The seed's phrasing: "aten::add_: 71% under AccumulateGrad, on tensors of shape [...]"."""
    under = "AccumulateGrad" if row["link"] == "accumulate_grad" else row["parent"]
    return (
        f"{row['op']}: {row['pct_of_op']:.0f}% under {under} ({row['link']}), "
        f"{row['ms_per_step']:.2f} ms per step, on shapes {row['shapes'] or '-'}"
    )


def write_csv(rows: list[dict[str, Any]], out_dir: Path) -> Table:
    table = Table.from_records(rows, list(COLUMNS))
    table.write_csv(Path(out_dir) / CSV_NAME)
    return table
