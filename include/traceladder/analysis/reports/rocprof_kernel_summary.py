"""``kernel_summary.csv`` for rocprofv3 / RPD traces: TraceLens v1.0.0's rocprof report.

Rules of ``RocprofAnalyzer.get_df_kernel_summary`` (``rocprof_analysis.py``):
  * every kernel dispatch, grouped by kernel name (TraceLens's truncated name);
  * count, sum, mean, median, std (sample, ddof=1: empty for a single call), min, max
    of the duration ``end - start``;
  * ``Percentage (%)`` = sum / all kernels' sum * 100; ``Cumulative Percentage (%)`` is
    the running sum of that **in name order** (it is taken before the sort by time,
    as TraceLens does), then rows are sorted by sum, descending;
  * ``Category`` from :func:`categorize_kernel`.

UNIT QUIRK (matched on purpose, as the reference README asks): TraceLens never converts
the rocprofv3 durations from ns, so the columns labelled ``(µs)`` hold **nanoseconds**
and ``Total Kernel Time (ms)`` = sum / 1000 holds **microseconds**.  We compute on the
integer ns of the source (``metadata["ns_start"/"ns_end"]``) and write them under the
same labels; analysis.json converts to real ms instead.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..model.events import EventTable
from .gpu_timeline import is_comm_name

__all__ = ["COLUMNS", "categorize_kernel", "kernel_frame", "kernel_summary_frame", "write_csv"]

COLUMNS = [
    "name",
    "Count",
    "Mean Kernel Time (µs)",
    "Median Kernel Time (µs)",
    "Std Kernel Time (µs)",
    "Min Kernel Time (µs)",
    "Max Kernel Time (µs)",
    "Percentage (%)",
    "Cumulative Percentage (%)",
    "Total Kernel Time (ms)",
    "Category",
]


def categorize_kernel(name: str) -> str:
    """TraceLens v1.0.0 ``_categorize_kernel``: first matching pattern wins."""
    low = name.lower()
    if any(x in low for x in ("gemm", "matmul", "cijk")):
        return "GEMM"
    if "elementwise" in low:
        return "Elementwise"
    if "reduce" in low or "sum" in low:
        return "Reduction"
    if "conv" in low:
        return "Convolution"
    if "norm" in low:
        return "Normalization"
    if any(x in low for x in ("flash", "attn", "fmha")):
        return "Attention"
    if "copy" in low or "memcpy" in low:
        return "Memory"
    if is_comm_name(low):
        return "COMM"
    return "Other"


def kernel_frame(t: EventTable) -> pd.DataFrame:
    """One row per kernel dispatch: ``name`` and ``dur`` (int64 ns)."""
    kidx = np.flatnonzero(t.is_cat("kernel"))
    dur = t.metadata["ns_end"][kidx] - t.metadata["ns_start"][kidx]
    return pd.DataFrame({"name": t.names_of(kidx), "dur": dur})


def kernel_summary_frame(kf: pd.DataFrame) -> pd.DataFrame:
    if kf.empty:
        return pd.DataFrame(columns=COLUMNS)
    g = kf.groupby("name")["dur"].agg(["count", "sum", "mean", "median", "std", "min", "max"])
    g.columns = [
        "Count",
        "Total Kernel Time (µs)",
        "Mean Kernel Time (µs)",
        "Median Kernel Time (µs)",
        "Std Kernel Time (µs)",
        "Min Kernel Time (µs)",
        "Max Kernel Time (µs)",
    ]
    g = g.reset_index()
    total = g["Total Kernel Time (µs)"].sum()
    g["Percentage (%)"] = (g["Total Kernel Time (µs)"] / total * 100.0) if total > 0 else 0
    g["Cumulative Percentage (%)"] = g["Percentage (%)"].cumsum()  # name order, before the sort
    g = g.sort_values(by="Total Kernel Time (µs)", ascending=False, kind="stable").reset_index(drop=True)
    # the quirk: ns sum / 1000 under an "ms" label (really us)
    g["Total Kernel Time (ms)"] = g["Total Kernel Time (µs)"] / 1000.0
    g = g.drop(columns=["Total Kernel Time (µs)"])
    g["Category"] = g["name"].map(categorize_kernel)
    return g[COLUMNS]


def write_csv(kf: pd.DataFrame, out_dir: Path) -> pd.DataFrame:
    df = kernel_summary_frame(kf)
    df.to_csv(Path(out_dir) / "kernel_summary.csv", index=False)
    return df
