"""``kernel_summary_by_category.csv`` for rocprofv3 / RPD traces (TraceLens v1.0.0).

Rules of ``RocprofAnalyzer.get_df_kernel_summary_by_category``: kernels grouped by
:func:`~.rocprof_kernel_summary.categorize_kernel`; ``Count``; ``total_direct_kernel_time_ms``
= ns sum / 1000 (UNIT QUIRK, matched on purpose: labelled ms, holds us);
``Percentage (%)`` of all kernels; ``Cumulative Percentage (%)`` is the running sum in
category-name order, taken before the sort by time (descending), as in TraceLens.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .rocprof_kernel_summary import categorize_kernel

__all__ = ["COLUMNS", "category_frame", "write_csv"]

COLUMNS = ["op category", "Count", "total_direct_kernel_time_ms", "Percentage (%)", "Cumulative Percentage (%)"]


def category_frame(kf: pd.DataFrame) -> pd.DataFrame:
    if kf.empty:
        return pd.DataFrame(columns=COLUMNS)
    cat_of = {n: categorize_kernel(n) for n in kf["name"].unique()}
    df = pd.DataFrame({"op category": kf["name"].map(cat_of), "dur": kf["dur"]})
    g = df.groupby("op category")["dur"].agg(["count", "sum"])
    g.columns = ["Count", "total_direct_kernel_time_us"]
    g = g.reset_index()
    g["total_direct_kernel_time_ms"] = g["total_direct_kernel_time_us"] / 1000.0  # the quirk
    g = g.drop(columns=["total_direct_kernel_time_us"])
    total = g["total_direct_kernel_time_ms"].sum()
    g["Percentage (%)"] = (g["total_direct_kernel_time_ms"] / total * 100.0) if total > 0 else 0
    g["Cumulative Percentage (%)"] = g["Percentage (%)"].cumsum()  # category order, before the sort
    g = g.sort_values(by="total_direct_kernel_time_ms", ascending=False, kind="stable").reset_index(drop=True)
    return g[COLUMNS]


def write_csv(kf: pd.DataFrame, out_dir: Path) -> pd.DataFrame:
    df = category_frame(kf)
    df.to_csv(Path(out_dir) / "kernel_summary_by_category.csv", index=False)
    return df
