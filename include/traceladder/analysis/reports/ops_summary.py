"""``ops_summary.csv`` and ``ops_summary_by_category.csv`` (TraceLens v1.0.0 semantics).

GPU traces: every GPU event (kernel / gpu_memcpy / gpu_memset) linked to a runtime
launch, except communication kernels, is charged to its *launcher*: the first
``cpu_op`` above the runtime call in the host call tree (a pass-through ``execute``
op is skipped), or the runtime call itself when no cpu_op encloses it.  Per launcher:
``total_direct_kernel_time`` = busy time (interval union) of its own kernels,
``total_subtree_kernel_time`` = busy time of every GPU event launched anywhere below
it (communication included).  Launchers are grouped by name; the op category comes
from TraceLens's op registry, then the ``^triton`` / ``^record_param_comms``
patterns, then the first kernel's name (``void at::native`` + elementwise / reduce /
multi_tensor_apply), else ``other``.

CPU-only traces: the "launchers" are the main thread's cpu_ops (collective stubs
excluded); an op's self time (duration less its child ops: the leaf work it does
itself) stands in for its direct kernel time, its full duration for the subtree time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..model.op_categories import categorize_op
from ..model.events import GPU_CATS, EventTable
from ..model.table import Table, pandas_desc_order
from ..model.intervals import grouped_busy
from ..model.vec import first_up
from .gpu_timeline import CpuSelection, cpu_selection, gpu_event_classes

__all__ = [
    "OPS_SUMMARY_COLUMNS",
    "BY_CATEGORY_COLUMNS",
    "Launchers",
    "gpu_launchers",
    "cpu_launchers",
    "ops_summary_table",
    "ops_summary_by_category_table",
    "categorize_op",
    "write_csvs",
]

OPS_SUMMARY_COLUMNS = [
    "name",
    "total_direct_kernel_time_sum",
    "total_subtree_kernel_time_sum",
    "total_direct_kernel_time_ms",
    "total_subtree_kernel_time_ms",
    "Count",
    "Categories",
    "Percentage (%)",
    "Cumulative Percentage (%)",
]
BY_CATEGORY_COLUMNS = [
    "op category",
    "Count",
    "total_direct_kernel_time_ms",
    "Percentage (%)",
    "Cumulative Percentage (%)",
]


@dataclass
class Launchers:
    """One row per launcher event, in launcher start-time order (TraceLens's order)."""

    idx: np.ndarray  # event index of each launcher
    direct_us: np.ndarray
    subtree_us: np.ndarray
    count: np.ndarray  # number of directly launched GPU events
    names: list[str]
    categories: list[str]
    kernel_idx: list[np.ndarray] | None = None  # direct GPU events per launcher (ts order)

    def frame(self):
        import pandas as pd

        return pd.DataFrame(
            {
                "name": self.names,
                "op category": self.categories,
                "total_direct_kernel_time": self.direct_us,
                "total_subtree_kernel_time": self.subtree_us,
                "direct_kernel_count": self.count,
            }
        )


def gpu_launchers(t: EventTable) -> Launchers:
    tree = t.call_tree()
    cls = gpu_event_classes(t)
    gpu_idx = np.flatnonzero(t.is_cat(*GPU_CATS) & (tree.gpu_runtime >= 0))
    gpu_idx = gpu_idx[~cls["comm"][t.name[gpu_idx]]]
    host_parent = tree.host_parent
    # each launch call's launcher: the first cpu_op above it, through pass-through
    # ``execute`` ops (and python functions); the call itself when another event (or
    # none) comes first
    cpu = t.cat == t.cat_code("cpu_op")
    through = t.cat == t.cat_code("python_function")
    if "execute" in t.names:
        execute = t.name == t.names.index("execute")
        through |= cpu & execute
        cpu &= ~execute
    rts, inv = np.unique(tree.gpu_runtime[gpu_idx], return_inverse=True)
    found = first_up(host_parent, host_parent[rts], cpu, through)
    k_launcher = np.where(found >= 0, found, rts)[inv.reshape(-1)]
    # launcher order: first appearance (kernel file order), then stable sort by start
    uniq, first_pos = np.unique(k_launcher, return_index=True)
    by_first = uniq[np.argsort(first_pos, kind="stable")]
    order = by_first[np.argsort(t.ts[by_first], kind="stable")]
    nL = order.size
    pos = np.full(len(t), -1, dtype=np.int64)
    pos[order] = np.arange(nL)
    g = pos[k_launcher]
    ks = t.ts[gpu_idx]
    ke = ks + t.dur[gpu_idx]
    direct = grouped_busy(g, ks, ke, nL)
    count = np.bincount(g, minlength=nL)

    # subtree: every (runtime, GPU event) link is charged to the runtime and to all of
    # its host ancestors; keep the launchers among them (one tree level per step; the
    # busy time does not depend on the order of a group's intervals)
    sg: list[np.ndarray] = []
    sk: list[np.ndarray] = []
    cur, kern = tree.pairs_rt, tree.pairs_gpu
    while cur.size:
        p = pos[cur]
        hit = p >= 0
        sg.append(p[hit])
        sk.append(kern[hit])
        nxt = host_parent[cur]
        up = nxt >= 0
        cur, kern = nxt[up], kern[up]
    sk_a = np.concatenate(sk) if sk else np.empty(0, np.int64)
    sg_a = np.concatenate(sg) if sg else np.empty(0, np.int64)
    ss = t.ts[sk_a]
    subtree = grouped_busy(sg_a, ss, ss + t.dur[sk_a], nL)

    # kernel details: direct kernels of each launcher by start time (stable)
    korder = np.lexsort((t.ts[gpu_idx], g))  # stable within launcher, kernels in file order
    sorted_k = gpu_idx[korder]
    bounds = np.searchsorted(g[korder], np.arange(nL + 1))
    kernel_lists = [sorted_k[bounds[i] : bounds[i + 1]] for i in range(nL)]
    names = t.names_of(order)
    # op category per distinct (launcher name, first kernel name)
    firstk = np.full(nL, -1, dtype=np.int64)
    has = bounds[1:] > bounds[:-1]
    firstk[has] = t.name[sorted_k[bounds[:-1][has]]]
    memo: dict[tuple[int, int], str] = {}
    cats = []
    for nc, fk, nm in zip(t.name[order].tolist(), firstk.tolist(), names):
        c = memo.get((nc, fk))
        if c is None:
            c = memo[(nc, fk)] = categorize_op(nm, t.names[fk] if fk >= 0 else None)
        cats.append(c)
    return Launchers(order, direct, subtree, count, names, cats, kernel_lists)


def cpu_launchers(t: EventTable, sel: CpuSelection | None = None) -> Launchers:
    """CPU-only traces: each main-thread cpu_op with self time is a "launcher".

    direct time = the op's self time (its duration less its child cpu_ops'), the CPU
    analogue of "kernel time launched directly from it"; subtree time = its duration.
    """
    sel = sel or cpu_selection(t)
    idx = sel.compute_idx
    if idx.size == 0:
        return Launchers(idx, np.empty(0), np.empty(0), np.empty(0, np.int64), [], [])
    tree = t.call_tree()
    par = tree.host_parent[idx]
    child_sum = np.zeros(len(t), dtype=np.float64)
    has = par >= 0
    np.add.at(child_sum, par[has], t.dur[idx[has]])
    s = t.ts[idx]
    incl = (s + t.dur[idx]) - s
    self_t = incl - child_sum[idx]
    keep = self_t > 0
    idx, self_t, incl = idx[keep], self_t[keep], incl[keep]
    order = np.argsort(t.ts[idx], kind="stable")
    idx, self_t, incl = idx[order], self_t[order], incl[order]
    names = t.names_of(idx)
    cats = [categorize_op(n) for n in names]
    return Launchers(idx, self_t, incl, np.ones(idx.size, dtype=np.int64), names, cats, None)


def _cumulative(pcts: list[float]) -> list[float]:
    out, acc = [], 0.0
    for p in pcts:
        acc += p
        out.append(acc)
    return out


T = TypeVar("T", bound=tuple[Any, ...])  # a summary record: (name, ..., time in us, ...)


def _indices_by(keys: Iterable[str]) -> dict[str, list[int]]:
    """Each key's positions, in the order the keys first appear."""
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return groups


def _ranked(recs: list[T], time_at: int) -> tuple[list[T], list[float], list[float]]:
    """The records by their time in us (``rec[time_at]``) descending, as pandas sorts (quicksort
    ties), with each one's percent of the total in ms and the cumulative percent."""
    recs = [recs[i] for i in pandas_desc_order([r[time_at] for r in recs]).tolist()]
    ms = [r[time_at] / 1000 for r in recs]
    total_ms = float(np.sum(ms))
    pct = [x / total_ms * 100 for x in ms]
    return recs, pct, _cumulative(pct)


def ops_summary_table(launchers: Launchers) -> Table:
    """TraceLens get_df_kernel_launchers_summary: group by name (key order), sum /
    count / sorted categories, sort by direct time descending (pandas' quicksort ties),
    then percent and cumulative percent in that order."""
    if launchers.idx.size == 0:
        return Table(list(OPS_SUMMARY_COLUMNS))
    groups = _indices_by(launchers.names)
    direct = np.asarray(launchers.direct_us, dtype=np.float64)
    subtree = np.asarray(launchers.subtree_us, dtype=np.float64)
    recs = [
        (
            nm,
            math.fsum(direct[m].tolist()),
            math.fsum(subtree[m].tolist()),
            len(m),
            str(sorted({launchers.categories[i] for i in m})),
        )
        for nm, m in sorted(groups.items())
    ]
    recs, pct, cum = _ranked(recs, 1)
    rows = [[nm, d, sub, d / 1000, sub / 1000, c, cats, p, cp] for (nm, d, sub, c, cats), p, cp in zip(recs, pct, cum)]
    return Table(list(OPS_SUMMARY_COLUMNS), rows)


def ops_summary_by_category_table(launchers: Launchers) -> Table:
    """TraceLens get_df_kernel_launchers_summary_by_category."""
    if launchers.idx.size == 0:
        return Table(list(BY_CATEGORY_COLUMNS))
    groups = _indices_by(launchers.categories)
    direct = np.asarray(launchers.direct_us, dtype=np.float64)
    recs = [(c, len(groups[c]), math.fsum(direct[groups[c]].tolist())) for c in sorted(groups)]
    recs, pct, cum = _ranked(recs, 2)
    rows = [[c, n, t / 1000, p, cp] for (c, n, t), p, cp in zip(recs, pct, cum)]
    return Table(list(BY_CATEGORY_COLUMNS), rows)


def write_csvs(launchers: Launchers, out_dir: Path) -> tuple[Table, Table]:
    out_dir = Path(out_dir)
    ops = ops_summary_table(launchers)
    bycat = ops_summary_by_category_table(launchers)
    ops.write_csv(out_dir / "ops_summary.csv")
    bycat.write_csv(out_dir / "ops_summary_by_category.csv")
    return ops, bycat
