"""``short_kernels_summary.csv`` and ``short_kernel_histogram.csv``: TraceLens v1.0.0's
``--short_kernel_study`` (``get_dfs_short_kernels`` in Reporting/generate_perf_report_pytorch.py).

Rules, from that source:
  * kernels: every event of category ``kernel`` (linked or not), short when its duration
    is below ``threshold_us`` (10 us);
  * histogram: ``numpy.histogram`` of the short durations with 100 bins, columns
    ``bin_start,bin_end,count``; only the header when there are none;
  * summary, grouped by ``Kernel name`` alone on a GPU-only trace (no ``cpu_op`` /
    ``python_func`` event), else by (Parent cpu_op, Input dims, Input strides, Concrete
    Inputs, Kernel name): the parent is the first ``cpu_op`` above the kernel's launch
    call, and its ``Input Dims`` / ``Input Strides`` / ``Concrete Inputs`` args are shown
    as Python tuples.  pandas' groupby drops a row whose key has a missing part, so a
    kernel with no parent cpu_op, or a parent lacking one of those args, is in the
    histogram but not in the summary;
  * per group: duration sum, count, mean, and the sum as a percent of the timeline's
    total_time; sorted by sum descending, then the other columns ascending;
  * an empty summary is written as pandas writes an empty frame: one empty line; when
    there are short kernels but every row is dropped (no shapes recorded), pandas' empty
    aggregate keeps its two-level header (``Kernel duration (µs)`` x3, then
    ``sum,count,mean``), written as two lines.

No pandas here: the groups are small and a dict does the grouping.
"""

from __future__ import annotations

import csv
from pathlib import Path

import msgspec
import numpy as np

from ..model.vec import dense_codes
from ..model.events import EventTable
from ..model.op_args import op_args

__all__ = ["THRESHOLD_US", "BINS", "is_gpu_only", "parent_cpu_ops", "short_kernel_tables", "write_csvs"]

THRESHOLD_US = 10.0
BINS = 100
HIST_COLUMNS = ["bin_start", "bin_end", "count"]
_SUM = "Short Kernel duration (µs) sum"
STAT_COLUMNS = [
    _SUM,
    "Short Kernel count",
    "Short Kernel duration (µs) mean",
    "Short Kernel duration (µs) percent of total time",
]
KEY_COLUMNS = ["Parent cpu_op", "Input dims", "Input strides", "Concrete Inputs", "Kernel name"]


def is_gpu_only(t: EventTable) -> bool:
    """TraceLens's ``check_gpu_only``: no event of category ``cpu_op`` or ``python_func``."""
    return not bool(t.is_cat("cpu_op", "python_func").any())


def parent_cpu_ops(t: EventTable, kernels: np.ndarray) -> np.ndarray:
    """For each kernel, the first cpu_op at or above its launch call (-1 when none),
    walking the host tree for all kernels at once (one step per tree level)."""
    tree = t.call_tree()
    cur = tree.gpu_runtime[kernels].copy()
    is_cpu = t.cat == t.cat_code("cpu_op")
    active = np.flatnonzero(cur >= 0)
    active = active[~is_cpu[cur[active]]]
    while active.size:
        nxt = tree.host_parent[cur[active]]
        cur[active] = nxt
        active = active[nxt >= 0]
        active = active[~is_cpu[cur[active]]]
    return cur


def _as_tuple(v):
    return tuple(_as_tuple(x) for x in v) if isinstance(v, list) else v


def short_kernel_tables(
    t: EventTable, total_time_us: float, gpu_only: bool, threshold_us: float = THRESHOLD_US, bins: int = BINS
):
    """(histogram rows, summary header, summary rows), rows as lists of Python values."""
    kidx = np.flatnonzero(t.is_cat("kernel"))
    dur = t.dur[kidx]
    short = dur < threshold_us  # NaN compares False
    kidx, dur = kidx[short], dur[short]
    if kidx.size == 0:
        return [], [], []
    counts, edges = np.histogram(dur, bins=bins)
    hist = [list(r) for r in zip(edges[:-1].tolist(), edges[1:].tolist(), counts.tolist())]

    if gpu_only:
        header = ["Kernel name"] + STAT_COLUMNS
        kcode = t.name[kidx].astype(np.int64)
        keep = np.ones(kidx.size, dtype=bool)
        shown_of: list[tuple] = []
    else:
        header = KEY_COLUMNS + STAT_COLUMNS
        parents = parent_cpu_ops(t, kidx)
        uniq, pinv = np.unique(parents, return_inverse=True)
        text: dict[bytes, str | None] = {}

        def cell(b: bytes) -> str | None:
            if not b:  # absent
                return None
            got = text.get(b, 0)
            if got == 0:
                v = msgspec.json.decode(b)
                got = text[b] = None if v is None else str(_as_tuple(v))
            return got

        # each distinct (parent name, shown args) gets a code; -1: the row is dropped.  The
        # parents' args are read through the shared op-args keys (one decode per trace)
        shown: dict[tuple, int] = {}
        pcode = np.full(uniq.size, -1, dtype=np.int64)
        real = np.flatnonzero(uniq >= 0)
        if real.size:
            oa = op_args(t)
            pk = oa.keys(uniq[real])
            pn = t.name[uniq[real]]
            _, cfirst, cinv = np.unique(dense_codes(pn, pk), return_index=True, return_inverse=True)
            ccode = np.full(cfirst.size, -1, dtype=np.int64)
            for c, j in enumerate(cfirst.tolist()):
                parts = oa.raw_parts(int(pk[j]))
                vals = (cell(parts[0]), cell(parts[2]), cell(parts[3]))  # dims, strides, concrete
                # a missing (None) key part drops the row, as pandas' groupby does
                if None not in vals:
                    ccode[c] = shown.setdefault((t.names[pn[j]], *vals), len(shown))
            pcode[real] = ccode[cinv.reshape(-1)]
        shown_of = list(shown)
        kp = pcode[pinv.reshape(-1)]
        keep = kp >= 0
        kcode = dense_codes(kp, t.name[kidx])
    if not keep.any():
        # every row dropped: pandas' agg of an empty groupby keeps only its two-level
        # column header, which to_csv writes as two lines
        agg = "Kernel duration (µs)"
        return hist, [agg, agg, agg], [["sum", "count", "mean"]]
    rows = []
    if keep.any():
        kk, kd, kc = kidx[keep], dur[keep], kcode[keep]
        _, first, ginv = np.unique(kc, return_index=True, return_inverse=True)
        ginv = ginv.reshape(-1)
        cnts = np.bincount(ginv, minlength=first.size)
        # sequential sums in kernel order (as ``+=`` in a loop): each group starts from
        # its first value, then np.add.at adds the rest one by one, in index order
        sums = kd[first].copy()
        rest = np.ones(kd.size, dtype=bool)
        rest[first] = False
        np.add.at(sums, ginv[rest], kd[rest])
        total_ms = total_time_us / 1e3  # TraceLens goes through the timeline's ms
        kpk = kp[keep] if not gpu_only else kc
        for gi in np.argsort(first, kind="stable").tolist():  # first-appearance order, as groupby(sort=False)
            j0 = int(first[gi])
            kn = t.names[t.name[kk[j0]]]
            key = (kn,) if gpu_only else (*shown_of[int(kpk[j0])], kn)
            sm, c = float(sums[gi]), int(cnts[gi])
            pct = sm / (total_ms * 1e3) * 100 if total_ms else float("nan")
            rows.append([*key, sm, c, sm / c, pct])
    nk = len(header) - len(STAT_COLUMNS)
    # sum descending, then count, mean, percent ascending (a stable sort)
    rows.sort(key=lambda r: (-r[nk], r[nk + 1], r[nk + 2], r[nk + 3]))
    return hist, header, rows


def _write(path: Path, header: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="") as fh:
        if not header:
            fh.write("\n")  # pandas' to_csv of an empty frame
            return
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def write_csvs(t: EventTable, total_time_us: float, out_dir: Path, gpu_only: bool) -> list[list]:
    """Write both files into out_dir; return the summary rows."""
    hist, header, rows = short_kernel_tables(t, total_time_us, gpu_only)
    out_dir = Path(out_dir)
    _write(out_dir / "short_kernel_histogram.csv", HIST_COLUMNS, hist)
    _write(out_dir / "short_kernels_summary.csv", header, rows)
    return rows
