"""``GEMM.csv``: TraceLens v1.0.0's perf-model sheet for GEMM ops (GPU traces).

Rules (TraceLens ``TreePerfAnalyzer.build_df_perf_metrics`` + ``summarize_df_perf_metrics``
with the GEMM perf models of ``PerfModel/perf_model.py``):

* rows: every event named ``aten::mm`` / ``aten::addmm`` / ``aten::bmm`` /
  ``aten::baddbmm`` / ``aten::_scaled_mm`` (and its aliases), in file order (TraceLens's
  UID).  An event whose args lack the shapes is skipped (TraceLens's perf model raises
  and the row is dropped).
* shapes from ``args``: ``Input Dims`` / ``Input type`` / ``Input Strides``
  (``addmm``/``baddbmm``: inputs 1 and 2, the bias is input 0); ``B`` = 1 unless batched;
  ``transpose`` from the first kernel (by start) whose name is a ROCm Tensile GEMM
  (``C???_A???_B???``: ``_Alik_`` = A transposed, ``_Bjlk_`` = B transposed) or an
  NVIDIA ``nvjet`` kernel (last ``_`` field, ``T``/``N``); absent otherwise.
* kernel time: busy time (interval union) of every GPU event launched anywhere below the
  op in the host call tree; FLOPs = B * (2MNK + MN if bias); bytes = B * (MK + KN + MN
  (+ N if bias)) * bytes per element of A's dtype (``_scaled_mm``: fp8 output is 2
  bytes); TFLOPS/s and TB/s per call, NaN when the op launched nothing.
* grouped by name + every ``param:`` column as text (pandas' ``astype(str)``: a row
  lacking the value leaves it empty, an int column with a gap prints as floats);
  ``_first`` = first non-null value in UID order; mean / median / std
  (n-1) / min / max skip NaN; sorted by ``Kernel Time (µs)_sum`` descending, then
  ``UID_first``.

Column order is TraceLens's: ``name``, the ``param:`` columns in order of first appearance
(``bmm`` puts ``B`` first; the others add it after ``dtype_A_B``), then the metrics.

CPU-only traces get no ``GEMM.csv`` (TraceLens does not run on a trace without GPU
events); :func:`gemm_rates` there uses each op's own duration as its time instead.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..model.events import GPU_CATS, EventTable
from ..model.table import Table
from ..model.intervals import grouped_busy
from ..perf_model import primus
from ..perf_model.common import bpe, precision
from ._shared import param_text

__all__ = ["GEMM_OPS", "gemm_events", "gemm_table", "gemm_rates", "write_csv"]

_PLAIN, _BATCHED, _SCALED = "plain", "batched", "scaled"
# library GEMMs TraceLens models through its extension mapping: weights [N, K], no strides
_A16W16, _VLLM = "aiter_a16w16", "vllm_unquantized"
#: op name -> (kind, index of A in the inputs, has bias)
GEMM_OPS: dict[str, tuple[str, int, bool | None]] = {
    "aten::mm": (_PLAIN, 0, False),
    "aten::addmm": (_PLAIN, 1, True),
    "aten::bmm": (_BATCHED, 0, False),
    "aten::baddbmm": (_BATCHED, 1, True),
    "aten::_scaled_mm": (_SCALED, 0, None),
    "trtllm::cublas_scaled_mm": (_SCALED, 0, None),
    "bitsandbytes::int8_linear_matmul": (_SCALED, 0, None),
    "aiter::gemm_a16w16": (_A16W16, 0, None),
    "vllm::rocm_unquantized_gemm": (_VLLM, 0, None),
    # Primus's hipBLASLt FP8 / MXFP4 GEMMs and TransformerEngine v2's pseudo GEMMs
    **{name: (kind, 0, False) for name, kind in primus.GEMM_KINDS.items()},
}
AGG = ["mean", "median", "std", "min", "max"]

_ROCM_GEMM = re.compile(r"^.*C[a-z]{3}_A[a-z]{3}_B[a-z]{3}.*$")
ARG_COLS = ["Input Dims", "Input type", "Input Strides", "Concrete Inputs"]


def _bpe(dtype: Any) -> int | None:
    return bpe(dtype) if isinstance(dtype, str) else None


def _transpose(kernel_name: str):
    if _ROCM_GEMM.match(kernel_name):
        ta = False if "_Ailk_" in kernel_name else (True if "_Alik_" in kernel_name else None)
        tb = False if "_Bljk_" in kernel_name else (True if "_Bjlk_" in kernel_name else None)
        return (ta, tb)
    if kernel_name.startswith("nvjet"):
        last = kernel_name.split("_")[-1]
        return (last[0] == "T", last[1] == "T")
    return None


def _params(name: str, args: dict) -> dict[str, Any]:
    """TraceLens's ``get_param_details`` (raises on missing shapes, like TraceLens)."""
    kind, a, bias = GEMM_OPS[name]
    if name in primus.GEMM_KINDS:
        return primus.gemm_params(name, args)
    dims = args["Input Dims"]
    if kind in (_A16W16, _VLLM):
        return _library_params(kind, dims, args["Input type"])
    A, Bm = dims[a], dims[a + 1]
    types = args["Input type"]
    dtype_A_B = tuple(types[a : a + 2])
    strides = args.get("Input Strides")
    if strides is None:
        stride_A = stride_B = None
    else:
        stride_A, stride_B = tuple(strides[a]), tuple(strides[a + 1])
    if kind == _BATCHED:
        b, m, k = A
        n = Bm[2]
        return {
            "B": b,
            "M": m,
            "N": n,
            "K": k,
            "bias": bias,
            "stride_A": stride_A,
            "stride_B": stride_B,
            "dtype_A_B": dtype_A_B,
        }
    if kind == _SCALED:
        bias = len(dims) == 3
    return {
        "M": A[0],
        "N": Bm[1],
        "K": A[1],
        "bias": bias,
        "stride_A": stride_A,
        "stride_B": stride_B,
        "dtype_A_B": dtype_A_B,
    }


def _library_params(kind: str, dims: list, types: list) -> dict[str, Any]:
    """x [M, K] and weight [N, K], a bias when input 2 has a shape; ``aiter::gemm_a16w16``
    sets B first and gives the output the input's dtype, vLLM's op the bias's (or none)."""
    has_bias = len(dims) > 2 and len(dims[2]) > 0
    if kind == _A16W16:
        p: dict[str, Any] = {"B": 1}
        dt = (types[0], types[1], types[0])
    else:
        p = {}
        dt = (types[0], types[1], types[2] if len(types) > 2 else "")
    p.update({"M": dims[0][0], "N": dims[1][0], "K": dims[0][1], "bias": has_bias, "dtype_A_B": dt})
    return p


def _flops_bytes(name: str, p: dict) -> tuple[float, float | None]:
    kind = GEMM_OPS[name][0]
    if name in primus.GEMM_KINDS:
        return primus.gemm_flops_bytes(name, p)
    B, M, N, K, bias = p["B"], p["M"], p["N"], p["K"], p["bias"]
    flops = 2 * M * N * K + (M * N if bias else 0)
    dt = p["dtype_A_B"]
    if kind in (_A16W16, _VLLM):
        out = dt[2] if (kind == _A16W16 or bias) else dt[1]
        b_a, b_b, b_out = _bpe(dt[0]), _bpe(dt[1]), _bpe(out)
        if b_a is None or b_b is None or b_out is None:
            return flops, None
        return flops, M * K * b_a + K * N * b_b + M * N * b_out + (N if bias else 0) * b_out
    bpe = _bpe(dt[0])
    out_bpe = bpe
    if kind == _SCALED:
        if bpe is None or _bpe(dt[1]) is None:
            raise ValueError(f"unsupported dtypes {dt}")
        out_bpe = 2 if bpe == 1 else (bpe if bpe in (2, 4) else None)
    nbytes = None
    if bpe is not None and out_bpe is not None:
        nbytes = M * K * bpe + K * N * bpe + M * N * out_bpe + (N if bias else 0) * bpe
    if kind == _BATCHED:
        flops *= B
        nbytes = None if nbytes is None else B * nbytes
    return flops, nbytes


def _compute_spec(p: dict) -> str:
    d = (p.get("dtype_A_B") or (None,))[0]
    prec = precision(d) if isinstance(d, str) and d else None
    return f"matrix_{prec}" if prec else ""


def gemm_events(t: EventTable) -> np.ndarray:
    codes = [i for i, n in enumerate(t.names) if n in GEMM_OPS]
    if not codes:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(np.isin(t.name, np.asarray(codes, dtype=np.int32)))


def subtree_kernels(t: EventTable, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(op position, GPU event) for every GPU event launched below each op."""
    tree = t.call_tree()
    pos = np.full(len(t), -1, dtype=np.int64)
    pos[ops] = np.arange(ops.size)
    gpu_ok = t.is_cat(*GPU_CATS)[tree.pairs_gpu] if tree.pairs_gpu.size else np.zeros(0, bool)
    cur = tree.pairs_rt[gpu_ok]
    kern = tree.pairs_gpu[gpu_ok]
    out_g: list[np.ndarray] = []
    out_k: list[np.ndarray] = []
    hp = tree.host_parent
    while cur.size:
        g = pos[cur]
        hit = g >= 0
        if hit.any():
            out_g.append(g[hit])
            out_k.append(kern[hit])
        nxt = hp[cur]
        keep = nxt >= 0
        cur, kern = nxt[keep], kern[keep]
    if not out_g:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(out_g), np.concatenate(out_k)


def _per_event(t: EventTable, cpu_time: bool = False) -> list[dict]:
    """Per-op GEMM rows; GPU-timed rows are kept in the table's cache (GEMM.csv and
    unified_perf_summary.csv both read them)."""
    if cpu_time:
        return _compute_per_event(t, True)
    got = t._cat_cache.get(("gemm_rows",))
    if got is None:
        got = t._cat_cache[("gemm_rows",)] = _compute_per_event(t, False)
    return got


def _compute_per_event(t: EventTable, cpu_time: bool = False) -> list[dict]:
    ops = gemm_events(t)
    if ops.size == 0:
        return []
    n = ops.size
    if cpu_time:
        busy = np.nan_to_num(t.dur[ops])
        groups = np.empty(0, np.int64)
        kernels = np.empty(0, np.int64)
    else:
        groups, kernels = subtree_kernels(t, ops)
        ks = t.ts[kernels]
        busy = grouped_busy(groups, ks, ks + t.dur[kernels], n)
    # kernels of each op, by start time
    order = np.lexsort((t.ts[kernels], groups)) if groups.size else np.empty(0, np.int64)
    g_sorted, k_sorted = groups[order], kernels[order]
    bounds = np.searchsorted(g_sorted, np.arange(n + 1))
    args = t.decode_args(ops)
    names = t.names_of(ops)
    meta = t.metadata.get("by_pid_tid", {})
    rows = []
    for j in range(n):
        name, a = names[j], args[j]
        try:
            p = _params(name, a)
        except Exception:  # noqa: BLE001, S112 - TraceLens drops ops whose perf model fails
            continue
        kl = k_sorted[bounds[j] : bounds[j + 1]]
        if "B" not in p:
            p["B"] = 1
        for kn in t.names_of(kl):
            tr = _transpose(kn)
            if tr is not None:
                p["transpose"] = tr
                break
        try:
            flops, nbytes = _flops_bytes(name, p)
        except Exception:  # noqa: BLE001, S112 - likewise
            continue
        gflops = flops / 1e9
        bt = float(busy[j])
        i = int(ops[j])
        pid, tid = t.pids[t.pid[i]], t.tids[t.tid[i]]
        pm = meta.get(pid, {})
        row = {
            "name": name,
            "UID": i,
            "process_name": pm.get(0, {}).get("process_name", "Unknown"),
            "process_label": pm.get(0, {}).get("process_labels", "Unknown"),
            "thread_name": pm.get(tid, {}).get("thread_name", "Unknown"),
            **{c: a.get(c) for c in ARG_COLS},
            "GFLOPS": gflops,
            "Kernel Time (µs)": bt,
            "TFLOPS/s": (gflops / 1e3) / (bt / 1e6) if bt > 0 else math.nan,
            "Data Moved (MB)": nbytes / (1024 * 1024) if nbytes is not None else math.nan,
            "FLOPS/Byte": (gflops * 1e9) / nbytes if nbytes else math.nan,
            "TB/s": (nbytes / 1e12) / (bt / 1e6) if (nbytes is not None and bt > 0) else math.nan,
            "Compute Spec": _compute_spec(p),
            "params": p,
            "kernels": kl,
        }
        rows.append(row)
    return rows


def _first(values: list) -> Any:
    for v in values:
        if v is None or (isinstance(v, float) and v != v):
            continue
        return v
    return None


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    a = a[~np.isnan(a)]
    if a.size == 0:
        return {k: math.nan for k in AGG}
    return {
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "std": float(a.std(ddof=1)) if a.size > 1 else math.nan,
        "min": float(a.min()),
        "max": float(a.max()),
    }


def _kernel_stats(t: EventTable, kernel_lists: list[np.ndarray]) -> list[dict]:
    allk = np.concatenate(kernel_lists) if kernel_lists else np.empty(0, np.int64)
    out: dict[tuple, list[float]] = {}
    for nm, s, d in zip(t.names_of(allk), t.stream[allk].tolist(), t.dur[allk].tolist()):
        out.setdefault((nm, None if s < 0 else t.streams[s]), []).append(d)
    res = []
    for (nm, s), ds in out.items():
        st = _stats(ds)
        res.append(
            {
                "name": nm,
                "stream": s,
                "count": len(ds),
                "total_duration_us": float(sum(ds)),
                "mean_duration_us": st["mean"],
                "median_duration_us": st["median"],
                "std_dev_duration_us": st["std"],
                "min_duration_us": st["min"],
                "max_duration_us": st["max"],
            }
        )
    return res


def gemm_table(t: EventTable, rows: list[dict] | None = None) -> Table:
    """The GEMM.csv table (empty when the trace has no GEMM op with shapes)."""
    rows = _per_event(t) if rows is None else rows
    if not rows:
        return Table([])
    param_keys: list[str] = []
    for r in rows:
        for k in r["params"]:
            if k not in param_keys:
                param_keys.append(k)
    # pandas' astype(str) of each param column: a value no row of the column has stays
    # empty (TraceLens leaves ``transpose`` empty where no kernel name gave it)
    params = [r["params"] for r in rows]
    text = [param_text(params, k) for k in param_keys]
    groups: dict[tuple, list[dict]] = {}
    for j, r in enumerate(rows):
        key = (r["name"],) + tuple(col[j] for col in text)
        groups.setdefault(key, []).append(r)
    out = []
    for key, rs in groups.items():
        rec: dict[str, Any] = {"name": key[0]}
        for k, v in zip(param_keys, key[1:]):
            rec[f"param: {k}"] = v
        rec["GFLOPS_first"] = _first([r["GFLOPS"] for r in rs])
        rec["Data Moved (MB)_first"] = _first([r["Data Moved (MB)"] for r in rs])
        rec["FLOPS/Byte_first"] = _first([r["FLOPS/Byte"] for r in rs])
        for m in ("TB/s", "TFLOPS/s"):
            for k, v in _stats([r[m] for r in rs]).items():
                rec[f"{m}_{k}"] = v
        for m in ("process_name", "process_label", "thread_name"):
            rec[f"{m}_first"] = _first([r[m] for r in rs])
        rec["Compute Spec"] = _first([r["Compute Spec"] for r in rs])
        ks = _kernel_stats(t, [r["kernels"] for r in rs])
        rec["kernel_details__summarize_kernel_stats"] = str(ks) if ks else None
        rec["trunc_kernel_details"] = (
            str(
                [
                    {
                        "name": k["name"][:64] + "..." if len(k["name"]) > 64 else k["name"],
                        "stream": k["stream"],
                        "mean_duration_us": round(k["mean_duration_us"], 2),
                    }
                    for k in ks
                ]
            )
            if ks
            else None
        )
        for c in ARG_COLS:
            rec[f"{c}_first"] = _first([r[c] for r in rs])
        kt = [r["Kernel Time (µs)"] for r in rs]
        for k, v in _stats(kt).items():
            rec[f"Kernel Time (µs)_{k}"] = v
        rec["Kernel Time (µs)_sum"] = float(np.nansum(np.asarray(kt, dtype=np.float64)))
        rec["name_count"] = len(rs)
        rec["UID_first"] = t.uid_of(rs[0]["UID"])
        out.append(rec)
    out.sort(key=lambda r: (-r["Kernel Time (µs)_sum"], r["UID_first"]))
    return Table.from_records(out)


def gemm_rates(t: EventTable, cpu_time: bool = False, top: int = 10, rows_frame: Table | None = None) -> list[dict]:
    """Per-shape GEMM rates for analysis.json: the ``top`` shapes by total time.

    ``rows_frame``: an already computed :func:`gemm_table` (GPU traces); ``cpu_time``:
    time each op by its own duration instead of its kernels (CPU-only traces).
    """
    if rows_frame is not None:
        df = rows_frame
    else:
        rows = _per_event(t, cpu_time=cpu_time)
        df = gemm_table(t, rows) if rows else Table([])
    if df.empty:
        return []
    res = []
    for r in df.records(top):
        tf, tb = r["TFLOPS/s_mean"], r.get("TB/s_mean")
        dt = r.get("param: dtype_A_B")
        res.append(
            {
                "name": str(r["name"]),
                "M": _int(r.get("param: M")),
                "N": _int(r.get("param: N")),
                "K": _int(r.get("param: K")),
                "B": _int(r.get("param: B")),
                "dtype": _dtype(dt),
                "count": int(r["name_count"]),
                "time_ms": float(r["Kernel Time (µs)_sum"]) / 1e3,
                "tflops_mean": float(tf) if isinstance(tf, float) and math.isfinite(tf) else None,
                "tbps_mean": float(tb) if isinstance(tb, float) and math.isfinite(tb) else None,
                "compute_spec": r.get("Compute Spec"),
            }
        )
    return res


def _int(v: Any) -> int | None:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return None


def _dtype(v: Any) -> str | None:
    m = re.match(r"\('([^']*)'", str(v)) if v is not None else None
    return m.group(1) if m else None


def write_csv(t: EventTable, out_dir: Path) -> Table:
    """Write GEMM.csv when the trace has GEMM ops (TraceLens writes no empty sheet)."""
    df = gemm_table(t)
    if not df.empty:
        df.write_csv(Path(out_dir) / "GEMM.csv")
    return df
