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

from pathlib import Path

import numpy as np
import pandas as pd

from ..events import EventTable
from .gpu_timeline import Timeline
from .ops_summary import Launchers, categorize_op

__all__ = ["COLUMNS", "kernel_summary_frame", "write_csv"]

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


def kernel_summary_frame(t: EventTable, total_time_us: float, launchers: Launchers | None = None) -> pd.DataFrame:
    tree = t.call_tree()
    kidx = np.flatnonzero(t.is_cat("kernel") & ~np.isnan(t.dur))
    if kidx.size == 0:
        return pd.DataFrame(columns=COLUMNS)
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
        if cur >= 0:
            name = t.names[t.name[cur]]
            cat = launcher_cat.get(cur) or categorize_op(name)
            res = (cat, name)
            with_cpu_op.append(cur)
        else:
            lname = t.names[t.name[r]]
            low = lname.lower()
            cat = "graph" if ("cudagraph" in low or "graphlaunch" in low) else ("runtime" if lname and low != "nan" else None)
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
    df = pd.DataFrame(
        {
            "Parent op category": pd.Series(cats, dtype=object),
            "Parent cpu_op": pd.Series(parents, dtype=object),
            "Kernel name": t.names_of(kidx),
            "Kernel stream": pd.Series(streams).infer_objects() if any(s is not None for s in streams) else pd.Series(streams, dtype=object),
            DUR: t.dur[kidx],
        }
    )
    group_cols = GROUP_COLS if with_cpu_op else [c for c in GROUP_COLS if c != "Parent cpu_op"]
    agg = df.groupby(group_cols, dropna=False).agg({DUR: ["sum", "count", "mean", "min", "max"]})
    agg.columns = ["_".join(c).strip() for c in agg.columns.values]
    agg = agg.reset_index()
    total_k = df[DUR].sum()
    agg["Percent of kernels time (%)"] = agg[f"{DUR}_sum"] / total_k * 100 if total_k > 0 else np.nan
    agg["Percent of total time (%)"] = agg[f"{DUR}_sum"] / total_time_us * 100 if total_time_us else np.nan
    agg = agg.sort_values(by=f"{DUR}_sum", ascending=False)
    agg = agg.reset_index(drop=True)
    return agg[group_cols + COLUMNS[len(GROUP_COLS):]]


def write_csv(t: EventTable, tl: Timeline, out_dir: Path, launchers: Launchers | None = None) -> pd.DataFrame:
    total_us = (tl.metrics_us["total_time"] / 1e3) * 1e3  # TraceLens goes through ms
    df = kernel_summary_frame(t, total_us, launchers)
    df.to_csv(Path(out_dir) / "kernel_summary.csv", index=False)
    return df
