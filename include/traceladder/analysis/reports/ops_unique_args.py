"""``ops_unique_args.csv``: TraceLens v1.0.0's kernel launchers grouped by name and args.

Rules (TraceLens ``TreePerfAnalyzer.get_df_kernel_launchers_unique_args`` with
``agg_metrics=[mean, median, std, min, max]``, ``include_pct=True``):

* rows: the launchers of ``ops_summary.csv`` (start-time order), grouped by the ``str``
  of name, op category, process/thread names and the four args columns (lists as
  tuples; a missing arg is ``None`` for grouping and empty in the output);
* direct / subtree kernel time: mean, median, std (n-1), min, max, sum per group, in
  direct/subtree pairs; ``operation_count``; ``ex_UID`` = the first launcher's event
  index (TraceLens's UID);
* ``kernel_details_summary``: per kernel position (the first launcher's kernels by
  start), the kernel name, stream, count and numpy sum / mean / median / std (n) /
  min / max of the JSON ``dur`` values, sorted by (total, name), as Python's ``str``
  of that list (numpy scalars print as ``np.float64(...)``); launchers with another
  number of kernels are left out of it, as in TraceLens;
* sorted by direct sum descending, then ``ex_UID``; ``Percentage (%)`` of the summed
  direct time and its running total.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..model.vec import dense_codes
from ..model.events import EventTable, Interner
from ..model.op_args import op_args
from ..model.table import Table, add_percentages, sort_desc_then_asc
from ._shared import stats
from .ops_summary import Launchers

__all__ = ["unique_args_frame", "write_csv"]

_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")
_AGG = ("mean", "median", "std", "min", "max", "sum")


def _tuple(v: Any) -> Any:
    return tuple(_tuple(x) for x in v) if isinstance(v, list) else v


def kernel_details(t: EventTable, lists: list[np.ndarray]) -> list[dict] | None:
    """TraceLens ``_summarize_kernel_stats``: numpy statistics per kernel position.

    Each statistic runs along the last (contiguous) axis of a positions x rows array,
    which numpy reduces row by row exactly as it reduces a 1-D array, so the printed
    ``np.float64`` values are TraceLens's to the last bit."""
    lists = [k for k in lists if len(k)]
    if not lists:
        return None
    # the same ops' kernels recur across ops_unique_args, the perf sheets and
    # unified_perf_summary: each distinct set is summarised once per trace
    flat = np.concatenate(lists)
    key = (flat.dtype.str, tuple(map(len, lists)), flat.tobytes())
    cache = t._cat_cache.setdefault(("kernel_summary",), {})
    got = cache.get(key)
    if got is None:
        got = cache[key] = _summarize_kernels(t, lists, flat)
    return got  # shared: callers only print it


def _summarize_kernels(t: EventTable, lists: list[np.ndarray], flat: np.ndarray) -> list[dict]:
    tmpl = lists[0]
    m = len(tmpl)
    same = lists if all(len(k) == m for k in lists) else [k for k in lists if len(k) == m]
    d = np.ascontiguousarray(
        t.dur[flat if same is lists else np.concatenate(same)].reshape(len(same), m).T
    )  # positions x rows
    total, mean, med, std = np.sum(d, axis=1), np.mean(d, axis=1), np.median(d, axis=1), np.std(d, axis=1)
    lo, hi = np.min(d, axis=1), np.max(d, axis=1)
    names = t.names_of(tmpl)
    streams = t.stream[tmpl].tolist()
    out = []
    for i in range(len(tmpl)):
        s = streams[i]
        out.append(
            {
                "name": names[i],
                "stream": None if s < 0 else t.streams[s],
                "count": len(same),
                "total_duration_us": total[i],
                "mean_duration_us": mean[i],
                "median_duration_us": med[i],
                "std_dev_duration_us": std[i],
                "min_duration_us": lo[i],
                "max_duration_us": hi[i],
            }
        )
    out.sort(key=lambda x: (x["total_duration_us"], x["name"]))
    return out


def brief_kernel_details(ks: list[dict] | None) -> list[dict] | None:
    """The kernels of one arg group as TraceLens lists them: names cut at 64 characters, mean in us to 0.01."""
    if not ks:
        return None
    return [
        {
            "name": k["name"][:64] + "..." if len(k["name"]) > 64 else k["name"],
            "stream": k["stream"],
            "mean_duration_us": round(k["mean_duration_us"], 2),
        }
        for k in ks
    ]


def group_by_args(
    t: EventTable, idx: np.ndarray, names: list[str], cats: list[str]
) -> tuple[list[tuple], list[list[int]]]:
    """TraceLens's grouping of rows by the ``str`` of name, category, process/thread
    names and the four args: (values of each group, positions of its rows in order).

    Rows are first bucketed by (name, category, pid, tid, raw args) as int codes, with
    numpy, and each bucket's text key is built once."""
    oa = op_args(t)
    keys = oa.keys(idx)
    meta = t.metadata.get("by_pid_tid", {})
    n = len(names)
    if n == 0:
        return [], []
    nc = Interner().encode(names)
    cc = Interner().encode(cats)
    pids, tids = t.pid[idx], t.tid[idx]
    _, bfirst, binv = np.unique(dense_codes(nc, cc, pids, tids, keys), return_index=True, return_inverse=True)
    groups: dict[tuple, int] = {}
    values: list[tuple] = []
    g_of = np.empty(bfirst.size, dtype=np.int64)
    for b in np.argsort(bfirst, kind="stable").tolist():  # buckets in order of first row
        j = int(bfirst[b])
        pid, tid = t.pids[pids[j]], t.tids[tids[j]]
        pm = meta.get(pid, {})
        a = oa.args(int(keys[j]))
        v = (
            names[j],
            cats[j],
            pm.get(0, {}).get("process_name", "Unknown"),
            pm.get(0, {}).get("process_labels", "Unknown"),
            pm.get(tid, {}).get("thread_name", "Unknown"),
            *(_tuple(a[c]) if c in a else None for c in _ARGS),
        )
        tk = tuple(str(x) for x in v)
        g = groups.get(tk)
        if g is None:
            g = groups[tk] = len(values)
            values.append(v)
        else:  # args "first": the first row that has the field
            old = values[g]
            values[g] = old[:5] + tuple(o if o is not None else w for o, w in zip(old[5:], v[5:]))
        g_of[b] = g
    row_g = g_of[binv.reshape(-1)]
    order = np.argsort(row_g, kind="stable")  # rows of each group, in order
    bounds = np.searchsorted(row_g[order], np.arange(len(values) + 1))
    members = [order[bounds[g] : bounds[g + 1]].tolist() for g in range(len(values))]
    return values, members


def unique_args_frame(t: EventTable, la: Launchers) -> Table:
    n = len(la.names)
    if n == 0:
        return Table([])
    values, members = group_by_args(t, la.idx, la.names, la.categories)
    recs = []
    for v, js in zip(values, members):
        rec: dict[str, Any] = dict(
            zip(("name", "op category", "process_name", "process_label", "thread_name") + _ARGS, v)
        )
        rec["operation_count"] = len(js)
        d = stats(la.direct_us[js])
        s = stats(la.subtree_us[js])
        for a in _AGG:
            rec[f"total_direct_kernel_time_{a}"] = d[a]
            rec[f"total_subtree_kernel_time_{a}"] = s[a]
        rec["ex_UID"] = t.uid_of(la.idx[js[0]])
        ks = kernel_details(t, [la.kernel_idx[j] for j in js]) if la.kernel_idx is not None else None
        rec["kernel_details_summary"] = str(ks) if ks else None
        tr = brief_kernel_details(ks)
        rec["trunc_kernel_details"] = str(tr) if tr else None
        recs.append(rec)
    df = sort_desc_then_asc(Table.from_records(recs), "total_direct_kernel_time_sum", "ex_UID")
    return add_percentages(df, "total_direct_kernel_time_sum")


def write_csv(t: EventTable, la: Launchers, out_dir: Path) -> Table:
    df = unique_args_frame(t, la)
    if not df.empty:
        df.write_csv(Path(out_dir) / "ops_unique_args.csv")
    return df
