"""``kernel_summary.csv`` (TraceLens v1.0.0 ``--enable_kernel_summary``), GPU traces only.

Every event of category ``kernel`` (linked or not; memcpy/memset are not kernels here)
is grouped by (Parent op category, Parent cpu_op, Kernel name, Kernel stream):
  * Parent cpu_op: the first cpu_op above the kernel's runtime launch (no ``execute``
    skipping here), else the launch call's name; empty for an unlinked kernel;
  * Parent op category: that cpu_op's op category (with the first-kernel fallback when
    the cpu_op is itself a launcher, as TraceLens has annotated it by then); with no
    cpu_op, ``graph`` for a graph launch, ``runtime`` for another launch call, empty for
    an unlinked kernel.
Columns: duration sum/count/mean/min/max (us), percent of all kernels' time and percent
of the timeline's total_time.  TraceLens has a ``Parent cpu_op`` column only when some
kernel has a cpu_op above it (its kernel table gets the key from the cpu_op), so a
GPU-only trace's report has none.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..model.events import EventTable
from ..model.table import Table, pandas_desc_order
from .gpu_timeline import Timeline
from ..model.op_categories import categorize_op
from ..model.vec import dense_codes, first_up
from .ops_summary import Launchers

__all__ = ["COLUMNS", "kernel_summary_table", "write_csv"]

DUR = "Kernel duration (µs)"
GROUP_COLS = ["Parent op category", "Parent cpu_op", "Kernel name", "Kernel stream"]
COLUMNS = GROUP_COLS + [
    f"{DUR}_sum",
    f"{DUR}_count",
    f"{DUR}_mean",
    f"{DUR}_min",
    f"{DUR}_max",
    "Percent of kernels time (%)",
    "Percent of total time (%)",
]


def kernel_summary_table(t: EventTable, total_time_us: float, launchers: Launchers | None = None) -> Table:
    tree = t.call_tree()
    kidx = np.flatnonzero(t.is_cat("kernel") & ~np.isnan(t.dur))
    if kidx.size == 0:
        return Table(list(COLUMNS))
    # parent info per distinct launch call: the first cpu_op at or above it, as
    # (category, name) codes into ``strs`` (-1: None)
    rt = tree.gpu_runtime[kidx]
    rts, inv = np.unique(rt, return_inverse=True)
    linked = rts >= 0
    cpu = np.full(rts.shape, -1, dtype=np.int64)
    cpu[linked] = first_up(tree.host_parent, rts[linked], t.cat == t.cat_code("cpu_op"))
    has = cpu >= 0
    with_parent = bool(has.any())  # the column exists only when a kernel has a cpu_op parent
    strs: dict[str, int] = {}
    catc = np.full(rts.size, -1, dtype=np.int64)
    namec = np.full(rts.size, -1, dtype=np.int64)
    if with_parent:
        # a launcher's category as annotated (its first-kernel fallback), else by name
        lc = np.full(len(t), -1, dtype=np.int64)
        if launchers is not None and launchers.idx.size:
            lc[launchers.idx] = [strs.setdefault(c, len(strs)) if c else -1 for c in launchers.categories]
        c = cpu[has]
        cc = lc[c]
        by_name = cc < 0
        if by_name.any():
            u, ui = np.unique(t.name[c[by_name]], return_inverse=True)
            ucat = [strs.setdefault(categorize_op(t.names[x]), len(strs)) for x in u.tolist()]
            cc[by_name] = np.asarray(ucat, dtype=np.int64)[ui.reshape(-1)]
        catc[has] = cc
        namec[has] = t.name[c]
    rt_only = linked & ~has
    if rt_only.any():  # launched with no cpu_op above: graph / runtime, by the launch call's name
        u, ui = np.unique(t.name[rts[rt_only]], return_inverse=True)
        ucat = []
        for x in u.tolist():
            lname = t.names[x]
            low = lname.lower()
            cat = (
                "graph"
                if ("cudagraph" in low or "graphlaunch" in low)
                else ("runtime" if lname and low != "nan" else None)
            )
            ucat.append(-1 if cat is None else strs.setdefault(cat, len(strs)))
        catc[rt_only] = np.asarray(ucat, dtype=np.int64)[ui.reshape(-1)]
        namec[rt_only] = t.name[rts[rt_only]]
    if not with_parent:
        namec[:] = -1
    rt_code = dense_codes(catc, namec)
    names_of = list(strs)
    info: dict[int, tuple[str | None, str | None]] = {}
    uc, ufirst = np.unique(rt_code, return_index=True)
    for code, ca, na in zip(uc.tolist(), catc[ufirst].tolist(), namec[ufirst].tolist()):
        info[code] = (None if ca < 0 else names_of[ca], None if na < 0 else t.names[na])
    stream = t.stream[kidx]
    # groupby(dropna=False) on (parent info, kernel name, stream): None is a key like any other
    gcode = dense_codes(rt_code[inv.reshape(-1)], t.name[kidx], stream)
    _, first, ginv = np.unique(gcode, return_index=True, return_inverse=True)
    ginv = ginv.reshape(-1)
    by_first = np.argsort(first, kind="stable")  # groups in order of first appearance
    dur = t.dur[kidx]
    total_k = float(dur.sum())
    order = np.argsort(ginv, kind="stable")
    bounds = np.searchsorted(ginv[order], np.arange(first.size + 1))
    rows = []
    for gi in by_first.tolist():
        j0 = int(first[gi])
        d = dur[order[bounds[gi] : bounds[gi + 1]]]
        n = d.size
        sm = math.fsum(d.tolist())  # pandas' group sums are compensated (Kahan)
        cat, parent = info[rt_code[inv[j0]]]
        s = int(stream[j0])
        key = (cat, parent, t.names[t.name[kidx[j0]]], None if s < 0 else t.streams[s])
        rows.append(
            [
                *(key if with_parent else (key[0], *key[2:])),
                sm,
                n,
                sm / n,
                float(d.min()),
                float(d.max()),
                sm / total_k * 100 if total_k > 0 else float("nan"),
                sm / total_time_us * 100 if total_time_us else float("nan"),
            ]
        )
    group_cols = GROUP_COLS if with_parent else [c for c in GROUP_COLS if c != "Parent cpu_op"]
    nk = len(group_cols)
    # streams: ints, or float64 when some kernel has none (pandas' dtype for the key)
    float_cols = frozenset({"Kernel stream"}) if bool((stream < 0).any()) else frozenset()
    rows = [rows[i] for i in pandas_desc_order([r[nk] for r in rows]).tolist()]
    return Table(group_cols + COLUMNS[len(GROUP_COLS) :], rows, float_cols)


def write_csv(t: EventTable, tl: Timeline, out_dir: Path, launchers: Launchers | None = None) -> Table:
    total_us = (tl.metrics_us["total_time"] / 1e3) * 1e3  # TraceLens goes through ms
    table = kernel_summary_table(t, total_us, launchers)
    table.write_csv(Path(out_dir) / "kernel_summary.csv")
    return table
