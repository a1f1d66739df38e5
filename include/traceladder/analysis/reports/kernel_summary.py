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

from ..events import EventTable
from ..table import Table, pandas_desc_order
from .gpu_timeline import Timeline
from ..common.op_categories import categorize_op
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
    launcher_cat: dict[int, str] = {}
    if launchers is not None:
        launcher_cat = dict(zip(launchers.idx.tolist(), launchers.categories))
    cpu_op = t.cat_code("cpu_op")
    host_parent = tree.host_parent
    memo: dict[int, tuple[str | None, str | None]] = {}
    with_cpu_op: list[int] = []  # the column exists only when a kernel has a cpu_op parent

    def parent_info(r: int) -> tuple[str | None, str | None]:
        got = memo.get(r)
        if got is not None:
            return got
        cur = r
        while cur >= 0 and t.cat[cur] != cpu_op:
            cur = int(host_parent[cur])
        cat: str | None
        res: tuple[str | None, str | None]
        if cur >= 0:
            name = t.names[t.name[cur]]
            cat = launcher_cat.get(cur) or categorize_op(name)
            res = (cat, name)
            with_cpu_op.append(cur)
        else:
            lname = t.names[t.name[r]]
            low = lname.lower()
            cat = (
                "graph"
                if ("cudagraph" in low or "graphlaunch" in low)
                else ("runtime" if lname and low != "nan" else None)
            )
            res = (cat, lname)
        memo[r] = res
        return res

    cats: list[str | None] = []
    parents: list[str | None] = []
    for r in tree.gpu_runtime[kidx].tolist():
        if r < 0:
            cats.append(None)
            parents.append(None)
        else:
            c, p = parent_info(r)
            cats.append(c)
            parents.append(p)
    streams = [None if s < 0 else t.streams[s] for s in t.stream[kidx].tolist()]
    with_parent = bool(with_cpu_op)
    group_cols = GROUP_COLS if with_parent else [c for c in GROUP_COLS if c != "Parent cpu_op"]
    # groupby(dropna=False): None is a key like any other
    groups: dict[tuple, list[int]] = {}
    for j, key in enumerate(
        zip(cats, parents, t.names_of(kidx), streams) if with_parent else zip(cats, t.names_of(kidx), streams)
    ):
        groups.setdefault(key, []).append(j)
    dur = t.dur[kidx]
    total_k = float(dur.sum())
    rows = []
    for key, members in groups.items():
        d = dur[members]
        sm = math.fsum(d.tolist())  # pandas' group sums are compensated (Kahan)
        rows.append(
            [
                *key,
                sm,
                len(members),
                sm / len(members),
                float(d.min()),
                float(d.max()),
                sm / total_k * 100 if total_k > 0 else float("nan"),
                sm / total_time_us * 100 if total_time_us else float("nan"),
            ]
        )
    nk = len(group_cols)
    # streams: ints, or float64 when some kernel has none (pandas' dtype for the key)
    float_cols = frozenset({"Kernel stream"}) if any(s is None for s in streams) else frozenset()
    rows = [rows[i] for i in pandas_desc_order([r[nk] for r in rows]).tolist()]
    return Table(group_cols + COLUMNS[len(GROUP_COLS) :], rows, float_cols)


def write_csv(t: EventTable, tl: Timeline, out_dir: Path, launchers: Launchers | None = None) -> Table:
    total_us = (tl.metrics_us["total_time"] / 1e3) * 1e3  # TraceLens goes through ms
    table = kernel_summary_table(t, total_us, launchers)
    table.write_csv(Path(out_dir) / "kernel_summary.csv")
    return table
