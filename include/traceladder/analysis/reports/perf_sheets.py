"""TraceLens v1.0.0's perf-model sheets other than GEMM (GPU traces with host ops).

Sheets: ``UnaryElementwise``, ``BinaryElementwise``, ``Normalization`` (fwd and bwd ops
in one table) and ``Reduce_fwd/_bwd``, ``SDPA_fwd/_bwd``, ``CONV_fwd/_bwd``, and the
inference-library sheets ``RMSNorm_fwd``, ``RoPE_fwd``, ``InferenceAttention_fwd`` (their
models have no backward, so no ``_bwd`` sheet).  vLLM's attention op also gets its step label
(:func:`step_annotations`), which its model reads.  A sheet
with no rows is not written (TraceLens writes no empty sheet).

Rules (TraceLens ``generate_perf_report_pytorch`` + ``TreePerfAnalyzer.
build_df_perf_metrics`` / ``summarize_df_perf_metrics``; formulas in
:mod:`traceladder.analysis.perf_model`):

* rows: every event whose name has a perf model, in file order; an op whose model
  raises (missing or odd args) is dropped, as TraceLens drops it;
* kernel time: busy time of the GPU events launched below the op (as GEMM.csv);
* ``_fwd`` tables: the family's ops with their forward model, except
  ``aten::convolution_backward``, which TraceLens moves to ``CONV_bwd``;
* ``_bwd`` tables: ops that own autograd backward events (see
  :mod:`traceladder.analysis.model.autograd_links`), timed by the kernels below the backward
  events linked anywhere in the op's subtree, with the backward model; forward conv
  ops are dropped from ``CONV_bwd``, then the ``convolution_backward`` rows follow;
* summary: grouped by name + the ``param:`` columns as text (pandas 3 ``astype(str)``:
  missing values stay empty, an int column with a gap prints as floats), the same
  aggregates and order as GEMM.csv.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import perf_model as pm
from ..perf_model import inference
from ..model.autograd_links import bwd_links
from ..model.events import EventTable
from ..model.op_args import op_args
from ..model.table import Table, concat, sort_desc_then_asc
from ._shared import param_text, stats
from .gemm import ARG_COLS, subtree_kernels
from ..model.intervals import grouped_busy
from ..model.vec import dense_codes
from .ops_unique_args import kernel_details, brief_kernel_details

__all__ = ["perf_frames", "write_csvs"]


def _op_events(t: EventTable) -> np.ndarray:
    codes = [i for i, n in enumerate(t.names) if n in pm.MODELS]
    if not codes:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(np.isin(t.name, np.asarray(codes, dtype=np.int32)) & t.is_cat("cpu_op"))


def _kernels_by_op(t: EventTable, n: int, groups: np.ndarray, kernels: np.ndarray):
    """Busy time per op, and each op's kernels by start time."""
    ks = t.ts[kernels]
    busy = grouped_busy(groups, ks, ks + t.dur[kernels], n)
    order = np.lexsort((ks, groups)) if groups.size else np.empty(0, np.int64)
    g_sorted, k_sorted = groups[order], kernels[order]
    bounds = np.searchsorted(g_sorted, np.arange(n + 1))
    return busy, k_sorted, bounds


def _bwd_kernels(t: EventTable, ops: np.ndarray, links: dict[int, list[int]]):
    """(op position, GPU event) for the kernels of the backward events linked in each
    op's subtree, and which ops own backward events themselves."""
    pos = np.full(len(t), -1, dtype=np.int64)
    pos[ops] = np.arange(ops.size)
    hp = t.call_tree().host_parent
    owner_g: list[int] = []
    owner_b: list[int] = []
    for f, bs in links.items():
        a = f
        while a >= 0:  # every op above (or at) the linked forward event
            if pos[a] >= 0:
                owner_g.extend([int(pos[a])] * len(bs))
                owner_b.extend(bs)
            a = int(hp[a])
    own = np.zeros(ops.size, dtype=bool)
    linked = np.fromiter(links.keys(), dtype=np.int64, count=len(links))
    own[pos[linked][pos[linked] >= 0]] = True
    if not owner_b:
        return np.empty(0, np.int64), np.empty(0, np.int64), own
    # de-duplicate (op, bwd event) pairs: TraceLens collects a set per op
    pairs = np.unique(np.stack([np.asarray(owner_g), np.asarray(owner_b)], axis=1), axis=0)
    bevs = np.unique(pairs[:, 1])
    bg, bk = subtree_kernels(t, bevs)  # bg: position in bevs
    bpos = np.searchsorted(bevs, pairs[:, 1])
    # join pairs (op, bwd) with (bwd, kernel)
    order = np.argsort(bg, kind="stable")
    bg, bk = bg[order], bk[order]
    lo = np.searchsorted(bg, bpos, side="left")
    hi = np.searchsorted(bg, bpos, side="right")
    cnt = hi - lo
    g = np.repeat(pairs[:, 0], cnt)
    k = bk[np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])] if cnt.sum() else np.empty(0, np.int64)
    return g.astype(np.int64), k.astype(np.int64), own


@dataclass
class Rows:
    """The ops of one table, columnar: per op its event, model group and kernel time;
    per model group (same op name and raw shape args) its params and metrics."""

    ops: np.ndarray  # event index, UID order
    grp: np.ndarray  # model group of each op
    busy: np.ndarray  # kernel busy time (us)
    kall: np.ndarray  # GPU events of all ops: op j's are kall[klo[j]:khi[j]], by start
    klo: np.ndarray
    khi: np.ndarray
    groups: list[tuple[str, dict, float, float | None, str, dict]]  # name, params, GFLOPS, bytes, spec, args

    def kernels(self, js: list[int]) -> list[np.ndarray]:
        k, lo, hi = self.kall, self.klo, self.khi
        return [k[lo[j] : hi[j]] for j in js]

    def arrays(self) -> dict[str, np.ndarray]:
        """Per-op TraceLens perf metrics (``compute_perf_metrics``), as arrays."""
        g = self.grp.tolist()
        gflops = np.asarray([self.groups[x][2] for x in g], dtype=np.float64)
        nb = np.asarray([np.nan if self.groups[x][3] is None else self.groups[x][3] for x in g], dtype=np.float64)
        bt = self.busy
        with np.errstate(divide="ignore", invalid="ignore"):
            return {
                "GFLOPS": gflops,
                "Kernel Time (µs)": bt,
                "TFLOPS/s": np.where(bt > 0, (gflops / 1e3) / (bt / 1e6), np.nan),
                "Data Moved (MB)": nb / (1024 * 1024),
                "FLOPS/Byte": np.where(nb > 0, (gflops * 1e9) / nb, np.nan),
                "TB/s": np.where(bt > 0, (nb / 1e12) / (bt / 1e6), np.nan),
            }


def step_annotations(t: EventTable, ops: np.ndarray) -> tuple[np.ndarray, list[str | None]]:
    """The step label of each op TraceLens annotates (vLLM's attention op): the first
    ``*user_annotation`` range, by start time, that holds the op (starting no later, ending
    strictly later). Per op a code into the returned labels; 0 (None) for the others."""
    labels: list[str | None] = [None]
    code = np.zeros(ops.size, dtype=np.int64)
    target = [i for i, n in enumerate(t.names_of(ops)) if n.startswith(inference.ANNOTATED_PREFIX)]
    if not target:
        return code, labels
    cats = [c for c in t.cats if c and "user_annotation" in c]
    ann = np.flatnonzero(t.is_cat(*cats) & ~np.isnan(t.ts) & ~np.isnan(t.dur)) if cats else np.empty(0, np.int64)
    uids = np.asarray([t.uid_of(i) for i in ann.tolist()], dtype=np.int64)
    ann = ann[np.lexsort((uids, t.ts[ann]))]  # by start, file order among equal starts
    a_lo, a_hi = t.ts[ann], t.ts[ann] + t.dur[ann]
    seen: dict[str, int] = {}
    for j in target:
        e = int(ops[j])
        inside = np.flatnonzero((a_lo <= t.ts[e]) & (t.ts[e] + t.dur[e] < a_hi))
        if inside.size:
            label = t.name_of(int(ann[inside[0]]))
            code[j] = seen.setdefault(label, len(labels))
            if code[j] == len(labels):
                labels.append(label)
    return code, labels


def _rows(t: EventTable, ops: np.ndarray, bwd: bool, links=None) -> Rows:
    """Perf-model rows for ``ops`` (UID order); ops whose model fails are dropped."""
    oa = op_args(t)
    keys = oa.keys(ops)
    codes = t.name[ops]
    ann_code, labels = step_annotations(t, ops)
    groups: list[tuple] = []
    # one model evaluation per distinct (name, raw args, step label), in order of first appearance
    _, first, inv = np.unique(dense_codes(codes, keys, ann_code), return_index=True, return_inverse=True)
    gof = np.full(first.size, -1, dtype=np.int64)
    for u in np.argsort(first, kind="stable").tolist():
        j = int(first[u])
        name = t.names[codes[j]]
        a = oa.args(int(keys[j]))
        if ann_code[j] or name in inference.ATTENTION_OPS:  # the attention models read the step label
            a = {**a, inference.ANNOTATION_KEY: labels[int(ann_code[j])]}
        model = pm.MODELS[name]
        try:
            p = model.params(name, a)
            flops, nbytes, cspec = model.metrics(name, p, bwd, a) if model.wants_args else model.metrics(name, p, bwd)
            gof[u] = len(groups)
            groups.append((name, p, flops / 1e9, nbytes, cspec, a))
        except Exception:  # noqa: BLE001, S112 - TraceLens drops ops whose perf model fails
            continue
    grp = gof[inv.reshape(-1)] if ops.size else np.empty(0, np.int64)
    keep = grp >= 0
    ops, grp = ops[keep], grp[keep]
    n = ops.size
    if bwd:
        gi, kernels, own = _bwd_kernels(t, ops, links)
        keep = own  # TraceLens skips ops without backward events of their own
    else:
        gi, kernels = subtree_kernels(t, ops)
        keep = np.ones(n, dtype=bool)
    busy, k_sorted, bounds = _kernels_by_op(t, n, gi, kernels)
    sel = np.flatnonzero(keep)
    return Rows(ops[sel], grp[sel], busy[sel], k_sorted, bounds[:-1][sel], bounds[1:][sel], groups)


def _first_of(vals: np.ndarray) -> float:
    ok = vals[~np.isnan(vals)]
    return float(ok[0]) if ok.size else math.nan


def summarize(t: EventTable, rows: Rows) -> Table:
    if rows.ops.size == 0:
        return Table([])
    # model groups in use, in order of first appearance (pandas' column order)
    used, seen = [], set()
    for g in rows.grp.tolist():
        if g not in seen:
            seen.add(g)
            used.append(g)
    params = [rows.groups[g][1] for g in used]
    keys: list[str] = []
    for p in params:
        for k in p:
            if k not in keys:
                keys.append(k)
    text = {k: param_text(params, k) for k in keys}
    sg_of: dict[int, int] = {}
    sg_key: dict[tuple, int] = {}
    for u, g in enumerate(used):
        key = (rows.groups[g][0],) + tuple(text[k][u] for k in keys)
        sg_of[g] = sg_key.setdefault(key, len(sg_key))
    sg = np.fromiter((sg_of[g] for g in rows.grp.tolist()), dtype=np.int64, count=rows.ops.size)
    arr = rows.arrays()
    gflops, tflops, mb, fpb, tbs = (arr[c] for c in ("GFLOPS", "TFLOPS/s", "Data Moved (MB)", "FLOPS/Byte", "TB/s"))
    bt = rows.busy
    meta = t.metadata.get("by_pid_tid", {})
    out = []
    order = np.argsort(sg, kind="stable")
    bounds = np.searchsorted(sg[order], np.arange(len(sg_key) + 1))
    for key, s in sg_key.items():
        js = order[bounds[s] : bounds[s + 1]]  # ops of this row, UID order
        rec: dict[str, Any] = {"name": key[0]}
        for k, v in zip(keys, key[1:]):
            rec[f"param: {k}"] = v
        rec["GFLOPS_first"] = _first_of(gflops[js])
        rec["Data Moved (MB)_first"] = _first_of(mb[js])
        rec["FLOPS/Byte_first"] = _first_of(fpb[js])
        for m, arr in (("TB/s", tbs), ("TFLOPS/s", tflops)):
            st = stats(arr[js])
            for k in ("mean", "median", "std", "min", "max"):
                rec[f"{m}_{k}"] = st[k]
        i0 = int(rows.ops[js[0]])
        pid, tid = t.pids[t.pid[i0]], t.tids[t.tid[i0]]
        pmeta = meta.get(pid, {})
        rec["process_name_first"] = pmeta.get(0, {}).get("process_name", "Unknown")
        rec["process_label_first"] = pmeta.get(0, {}).get("process_labels", "Unknown")
        rec["thread_name_first"] = pmeta.get(tid, {}).get("thread_name", "Unknown")
        rec["Compute Spec"] = rows.groups[int(rows.grp[js[0]])][4]
        ks = kernel_details(t, rows.kernels(js.tolist()))
        rec["kernel_details__summarize_kernel_stats"] = str(ks) if ks else None
        trk = brief_kernel_details(ks)
        rec["trunc_kernel_details"] = str(trk) if trk else None
        gs = rows.grp[js].tolist()
        for c in ARG_COLS:
            rec[f"{c}_first"] = next((rows.groups[g][5][c] for g in gs if rows.groups[g][5].get(c) is not None), None)
        kt = bt[js]
        st = stats(kt)
        for k in ("mean", "median", "std", "min", "max", "sum"):
            rec[f"Kernel Time (µs)_{k}"] = st[k]
        rec["name_count"] = int(js.size)
        rec["UID_first"] = t.uid_of(i0)
        out.append(rec)
    return sort_desc_then_asc(Table.from_records(out), "Kernel Time (µs)_sum", "UID_first")


def _subset(rows: Rows, mask: np.ndarray) -> Rows:
    sel = np.flatnonzero(mask)
    return Rows(rows.ops[sel], rows.grp[sel], rows.busy[sel], rows.kall, rows.klo[sel], rows.khi[sel], rows.groups)


def model_rows(t: EventTable) -> Rows:
    """Forward rows of every modelled op (one kernel walk), kept in the table's cache
    (the sheets and unified_perf_summary.csv share them)."""
    got = t._cat_cache.get(("perf_rows",))
    if got is None:
        got = t._cat_cache[("perf_rows",)] = _rows(t, _op_events(t), False)
    return got


def perf_frames(t: EventTable) -> dict[str, Table]:
    """Sheet name -> summary frame, for the sheets that have rows."""
    ops = _op_events(t)
    if ops.size == 0:
        return {}
    names = t.names_of(ops)
    fam = np.asarray([pm.MODELS[n].sheet for n in names])
    all_rows = model_rows(t)
    row_fam = np.asarray([pm.MODELS[all_rows.groups[g][0]].sheet for g in all_rows.grp.tolist()])
    out: dict[str, Table] = {}
    for sheet in pm.SHEETS:
        if (row_fam == sheet).any():
            out[sheet] = summarize(t, _subset(all_rows, row_fam == sheet))
    for sheet in pm.SPLIT_SHEETS:
        sel = np.flatnonzero(fam == sheet)
        if not sel.size:
            continue
        rows = _subset(all_rows, row_fam == sheet)
        is_bwd_op = np.isin(
            t.name[rows.ops], np.asarray([t.names.index(n) for n in pm.BWD_OPS if n in t.names] or [-1])
        )
        out[f"{sheet}_fwd"] = summarize(t, _subset(rows, ~is_bwd_op))
        skip = {n for n in pm.FWD_ONLY_OPS | pm.BWD_OPS}
        bsel = np.asarray([j for j in sel.tolist() if names[j] not in skip], dtype=np.int64)
        bwd_df = Table([])
        if bsel.size:
            links = bwd_links(t)
            if links:
                bwd_df = summarize(t, _rows(t, ops[bsel], True, links))
        tail = summarize(t, _subset(rows, is_bwd_op))
        out[f"{sheet}_bwd"] = (
            concat(bwd_df, tail) if not bwd_df.empty and not tail.empty else (tail if bwd_df.empty else bwd_df)
        )
    return {k: v for k, v in out.items() if not v.empty}


def write_csvs(t: EventTable, out_dir: Path) -> dict[str, Table]:
    frames = perf_frames(t)
    for sheet, df in frames.items():
        df.write_csv(Path(out_dir) / f"{sheet}.csv")
    return frames


def headlines(frames: dict[str, Table]) -> dict[str, dict[str, Any]]:
    """analysis.json's ``perf_sheets``: per sheet, the op count, kernel time and the
    achieved rates over the whole sheet (total modelled work / total kernel time)."""
    res: dict[str, dict[str, Any]] = {}

    def col(df: Table, c: str) -> np.ndarray:
        return np.asarray([np.nan if v is None else v for v in df.column(c)], dtype=np.float64)

    for sheet, df in frames.items():
        cnt = col(df, "name_count")
        secs = float(np.nansum(col(df, "Kernel Time (µs)_sum"))) / 1e6
        gflop = float(np.nansum(col(df, "GFLOPS_first") * cnt))
        mb = col(df, "Data Moved (MB)_first")
        known = ~np.isnan(mb)
        tbytes = float(np.sum(mb[known] * cnt[known])) * 1024 * 1024 / 1e12
        top = df.records(1)[0]
        res[sheet] = {
            "ops": int(cnt.sum()),
            "shapes": len(df.rows),
            "kernel_time_ms": secs * 1e3,
            "tflops_per_s": gflop / 1e3 / secs if secs > 0 else None,
            "tb_per_s": tbytes / secs if secs > 0 and known.any() else None,
            "top": {
                "name": str(top["name"]),
                "count": int(top["name_count"]),
                "kernel_time_ms": float(top["Kernel Time (µs)_sum"]) / 1e3,
            },
        }
    return res
