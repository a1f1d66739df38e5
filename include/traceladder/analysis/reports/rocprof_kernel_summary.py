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

import math
from pathlib import Path
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..model.events import EventTable
from ..model.table import Table
from .gpu_timeline import is_comm_name

__all__ = ["COLUMNS", "KernelFrame", "categorize_kernel", "groups", "kernel_frame", "kernel_summary_frame", "write_csv"]

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


class KernelFrame(NamedTuple):
    """One entry per kernel dispatch: its name's code into ``vocab``, and ``dur`` (int64 ns)."""

    codes: np.ndarray
    vocab: list[str]
    dur: np.ndarray


def kernel_frame(t: EventTable) -> KernelFrame:
    kidx = np.flatnonzero(t.is_cat("kernel"))
    dur = t.metadata["ns_end"][kidx] - t.metadata["ns_start"][kidx]
    return KernelFrame(np.asarray(t.name[kidx], dtype=np.int64), list(t.names), np.asarray(dur, dtype=np.int64))


def groups(kf: KernelFrame, label_of: Callable[[str], str]) -> tuple[list[str], list[np.ndarray]]:
    """The durations grouped by ``label_of(name)``, in file order within a group, the labels
    sorted (as pandas' groupby sorts its keys); grouped on the integer name codes, since
    sorting ~10^5 name strings is slow."""
    used = np.unique(kf.codes)
    used_labels = [label_of(kf.vocab[c]) for c in used.tolist()]
    labels = sorted(set(used_labels))
    index = {lab: i for i, lab in enumerate(labels)}
    lut = np.zeros(len(kf.vocab), dtype=np.int64)
    lut[used] = [index[lab] for lab in used_labels]
    inv = lut[kf.codes]
    order = np.argsort(inv, kind="stable")
    bounds = np.cumsum(np.bincount(inv, minlength=len(labels)))[:-1]
    return labels, np.split(kf.dur[order], bounds)


def _std(d: np.ndarray) -> float:
    """The sample std as pandas' groupby computes it (Welford's running update, in file
    order), so the text matches TraceLens's to the last digit; numpy's two-pass differs there."""
    if d.size < 2:
        return math.nan
    n, mean, m2 = 0, 0.0, 0.0
    for x in d.tolist():
        n += 1
        delta = x - mean
        mean += delta / n
        m2 += delta * (x - mean)
    return math.sqrt(m2 / (n - 1))


def kernel_summary_frame(kf: KernelFrame) -> Table:
    """pandas' ``groupby("name")["dur"].agg([count, sum, mean, median, std, min, max])``."""
    if not kf.codes.size:
        return Table(list(COLUMNS))
    names, durs = groups(kf, str)
    sums_ns = [int(d.sum()) for d in durs]
    sums = np.asarray(sums_ns, dtype=np.float64)
    total = sums.sum()
    pct = sums / total * 100.0 if total > 0 else np.zeros_like(sums)
    cum = np.cumsum(pct)  # name order, before the sort
    order = sorted(range(len(names)), key=lambda i: -sums_ns[i])  # stable, as sort_values(kind="stable")
    rows: list[list[Any]] = []
    for i in order:
        d = durs[i]
        stats = [d.size, float(d.mean()), float(np.median(d)), _std(d), int(d.min()), int(d.max())]
        # the quirk: ns sum / 1000 under an "ms" label (really us)
        rows.append([names[i], *stats, float(pct[i]), float(cum[i]), sums_ns[i] / 1000.0, categorize_kernel(names[i])])
    return Table(list(COLUMNS), rows, frozenset({"Std Kernel Time (µs)"}))


def write_csv(kf: KernelFrame, out_dir: Path) -> Table:
    table = kernel_summary_frame(kf)
    table.write_csv(Path(out_dir) / "kernel_summary.csv")
    return table
