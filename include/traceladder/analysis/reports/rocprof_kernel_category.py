"""``kernel_summary_by_category.csv`` for rocprofv3 / RPD traces (TraceLens v1.0.0).

Rules of ``RocprofAnalyzer.get_df_kernel_summary_by_category``: kernels grouped by
:func:`~.rocprof_kernel_summary.categorize_kernel`; ``Count``; ``total_direct_kernel_time_ms``
= ns sum / 1000 (UNIT QUIRK, matched on purpose: labelled ms, holds us);
``Percentage (%)`` of all kernels; ``Cumulative Percentage (%)`` is the running sum in
category-name order, taken before the sort by time (descending), as in TraceLens.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..model.table import Table
from .rocprof_kernel_summary import KernelFrame, categorize_kernel, groups

__all__ = ["COLUMNS", "category_frame", "write_csv"]

COLUMNS = ["op category", "Count", "total_direct_kernel_time_ms", "Percentage (%)", "Cumulative Percentage (%)"]


def category_frame(kf: KernelFrame) -> Table:
    if not kf.codes.size:
        return Table(list(COLUMNS))
    cats, durs = groups(kf, categorize_kernel)
    ms = np.asarray([d.sum() / 1000.0 for d in durs], dtype=np.float64)  # the quirk
    total = ms.sum()
    pct = ms / total * 100.0 if total > 0 else np.zeros_like(ms)
    cum = np.cumsum(pct)  # category order, before the sort
    order = sorted(range(len(cats)), key=lambda i: -ms[i])  # stable, as sort_values(kind="stable")
    rows = [[cats[i], int(durs[i].size), float(ms[i]), float(pct[i]), float(cum[i])] for i in order]
    return Table(list(COLUMNS), rows)


def write_csv(kf: KernelFrame, out_dir: Path) -> Table:
    table = category_frame(kf)
    table.write_csv(Path(out_dir) / "kernel_summary_by_category.csv")
    return table
