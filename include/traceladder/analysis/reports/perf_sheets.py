"""TraceLens v1.0.0's perf-model sheets other than GEMM (GPU traces with host ops).

Sheets: ``UnaryElementwise``, ``BinaryElementwise``, ``Normalization`` (fwd and bwd ops
in one table) and ``Reduce_fwd/_bwd``, ``SDPA_fwd/_bwd``, ``CONV_fwd/_bwd``.  A sheet
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
  :mod:`traceladder.analysis.autograd_links`), timed by the kernels below the backward
  events linked anywhere in the op's subtree, with the backward model; forward conv
  ops are dropped from ``CONV_bwd``, then the ``convolution_backward`` rows follow;
* summary: grouped by name + the ``param:`` columns as text (pandas 3 ``astype(str)``:
  missing values stay empty, an int column with a gap prints as floats), the same
  aggregates and order as GEMM.csv.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import perf_model as pm
from ..autograd_links import bwd_links
from ..events import GPU_CATS, EventTable
from .gemm import _ARG_COLS, _first, _kernel_stats, _stats, _subtree_kernels
from .gpu_timeline import grouped_busy

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
    bg, bk = _subtree_kernels(t, bevs)  # bg: position in bevs
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


def _rows(t: EventTable, ops: np.ndarray, args: list[dict], bwd: bool, links=None) -> list[dict]:
    n = ops.size
    if bwd:
        groups, kernels, own = _bwd_kernels(t, ops, links)
    else:
        groups, kernels = _subtree_kernels(t, ops)
        own = None
    busy, k_sorted, bounds = _kernels_by_op(t, n, groups, kernels)
    names = t.names_of(ops)
    meta = t.metadata.get("by_pid_tid", {})
    rows = []
    for j in range(n):
        name, a = names[j], args[j]
        model = pm.MODELS[name]
        try:
            p = model.params(name, a)
            flops, nbytes, cspec = model.metrics(name, p, bwd)
        except Exception:  # TraceLens drops ops whose perf model fails
            continue
        if bwd and not own[j]:
            continue
        gflops = flops / 1e9
        bt = float(busy[j])
        i = int(ops[j])
        pid, tid = t.pids[t.pid[i]], t.tids[t.tid[i]]
        pmeta = meta.get(pid, {})
        rows.append({
            "name": name,
            "UID": i,
            "process_name": pmeta.get(0, {}).get("process_name", "Unknown"),
            "process_label": pmeta.get(0, {}).get("process_labels", "Unknown"),
            "thread_name": pmeta.get(tid, {}).get("thread_name", "Unknown"),
            **{c: a.get(c) for c in _ARG_COLS},
            "GFLOPS": gflops,
            "Kernel Time (µs)": bt,
            "TFLOPS/s": (gflops / 1e3) / (bt / 1e6) if bt > 0 else math.nan,
            "Data Moved (MB)": nbytes / (1024 * 1024) if nbytes is not None else math.nan,
            "FLOPS/Byte": (gflops * 1e9) / nbytes if (nbytes is not None and nbytes > 0) else math.nan,
            "TB/s": (nbytes / 1e12) / (bt / 1e6) if (nbytes is not None and bt > 0) else math.nan,
            "Compute Spec": cspec,
            "params": p,
            "kernels": k_sorted[bounds[j]:bounds[j + 1]],
        })
    return rows


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _param_text(rows: list[dict], key: str) -> list[str | None]:
    """pandas 3 ``Series.astype(str)`` of one param column (None = missing)."""
    vals = [r["params"].get(key) for r in rows]
    present = [v for v in vals if not _missing(v)]
    numeric = present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present)
    as_float = numeric and (len(present) < len(vals) or any(isinstance(v, float) for v in present))
    out: list[str | None] = []
    for v in vals:
        if _missing(v):
            out.append(None)
        elif as_float:
            out.append(repr(float(v)))
        else:
            out.append(str(v))
    return out


def summarize(t: EventTable, rows: list[dict]) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame()
    keys: list[str] = []
    for r in rows:
        for k in r["params"]:
            if k not in keys:
                keys.append(k)
    text = {k: _param_text(rows, k) for k in keys}
    groups: dict[tuple, list[int]] = {}
    for j, r in enumerate(rows):
        groups.setdefault((r["name"],) + tuple(text[k][j] for k in keys), []).append(j)
    out = []
    for key, idx in groups.items():
        rs = [rows[j] for j in idx]
        rec: dict[str, Any] = {"name": key[0]}
        for k, v in zip(keys, key[1:]):
            rec[f"param: {k}"] = v
        for m in ("GFLOPS", "Data Moved (MB)", "FLOPS/Byte"):
            rec[f"{m}_first"] = _first([r[m] for r in rs])
        for m in ("TB/s", "TFLOPS/s"):
            for k, v in _stats([r[m] for r in rs]).items():
                rec[f"{m}_{k}"] = v
        for m in ("process_name", "process_label", "thread_name"):
            rec[f"{m}_first"] = _first([r[m] for r in rs])
        rec["Compute Spec"] = _first([r["Compute Spec"] for r in rs])
        ks = _kernel_stats(t, [r["kernels"] for r in rs])
        rec["kernel_details__summarize_kernel_stats"] = str(ks) if ks else None
        rec["trunc_kernel_details"] = str([
            {"name": k["name"][:64] + "..." if len(k["name"]) > 64 else k["name"], "stream": k["stream"],
             "mean_duration_us": round(k["mean_duration_us"], 2)} for k in ks
        ]) if ks else None
        for c in _ARG_COLS:
            rec[f"{c}_first"] = _first([r[c] for r in rs])
        kt = [r["Kernel Time (µs)"] for r in rs]
        for k, v in _stats(kt).items():
            rec[f"Kernel Time (µs)_{k}"] = v
        rec["Kernel Time (µs)_sum"] = float(np.nansum(np.asarray(kt, dtype=np.float64)))
        rec["name_count"] = len(rs)
        rec["UID_first"] = rs[0]["UID"]
        out.append(rec)
    df = pd.DataFrame(out)
    df = df.sort_values(by=["Kernel Time (µs)_sum", "UID_first"], ascending=[False, True], kind="stable")
    return df.reset_index(drop=True)


def perf_frames(t: EventTable) -> dict[str, pd.DataFrame]:
    """Sheet name -> summary frame, for the sheets that have rows."""
    ops = _op_events(t)
    if ops.size == 0:
        return {}
    args = t.decode_args(ops)
    names = t.names_of(ops)
    fam = np.asarray([pm.MODELS[n].sheet for n in names])
    out: dict[str, pd.DataFrame] = {}
    for sheet in pm.SHEETS:
        sel = np.flatnonzero(fam == sheet)
        if sel.size:
            out[sheet] = summarize(t, _rows(t, ops[sel], [args[j] for j in sel], False))
    links = None
    for sheet in pm.SPLIT_SHEETS:
        sel = np.flatnonzero(fam == sheet)
        if not sel.size:
            continue
        fwd_rows = _rows(t, ops[sel], [args[j] for j in sel], False)
        bwd_from_fwd = [r for r in fwd_rows if r["name"] in pm.BWD_OPS]
        fwd_rows = [r for r in fwd_rows if r["name"] not in pm.BWD_OPS]
        out[f"{sheet}_fwd"] = summarize(t, fwd_rows)
        bsel = np.asarray([j for j in sel if names[j] not in pm.FWD_ONLY_OPS and names[j] not in pm.BWD_OPS], dtype=np.int64)
        bwd_df = pd.DataFrame()
        if bsel.size:
            if links is None:
                links = bwd_links(t)
            if links:
                bwd_df = summarize(t, _rows(t, ops[bsel], [args[j] for j in bsel], True, links))
        tail = summarize(t, bwd_from_fwd)
        out[f"{sheet}_bwd"] = pd.concat([bwd_df, tail]) if not bwd_df.empty and not tail.empty else (tail if bwd_df.empty else bwd_df)
    return {k: v for k, v in out.items() if not v.empty}


def write_csvs(t: EventTable, out_dir: Path) -> dict[str, pd.DataFrame]:
    frames = perf_frames(t)
    for sheet, df in frames.items():
        df.to_csv(Path(out_dir) / f"{sheet}.csv", index=False)
    return frames


def headlines(frames: dict[str, pd.DataFrame]) -> dict[str, dict[str, Any]]:
    """analysis.json's ``perf_sheets``: per sheet, the op count, kernel time and the
    achieved rates over the whole sheet (total modelled work / total kernel time)."""
    res: dict[str, dict[str, Any]] = {}
    for sheet, df in frames.items():
        cnt = df["name_count"].to_numpy(dtype=np.float64)
        secs = float(np.nansum(df["Kernel Time (µs)_sum"].to_numpy(dtype=np.float64))) / 1e6
        gflop = float(np.nansum(df["GFLOPS_first"].to_numpy(dtype=np.float64) * cnt))
        mb = df["Data Moved (MB)_first"].to_numpy(dtype=np.float64)
        known = ~np.isnan(mb)
        tbytes = float(np.sum(mb[known] * cnt[known])) * 1024 * 1024 / 1e12
        top = df.iloc[0]
        res[sheet] = {
            "ops": int(cnt.sum()),
            "shapes": int(len(df)),
            "kernel_time_ms": secs * 1e3,
            "tflops_per_s": gflop / 1e3 / secs if secs > 0 else None,
            "tb_per_s": tbytes / secs if secs > 0 and known.any() else None,
            "top": {"name": str(top["name"]), "count": int(top["name_count"]),
                    "kernel_time_ms": float(top["Kernel Time (µs)_sum"]) / 1e3},
        }
    return res
