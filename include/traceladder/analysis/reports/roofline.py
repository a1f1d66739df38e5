"""``roofline.csv`` (GPU traces only): how far each modelled op is from the device's roofline.

The work comes from the perf-model sheets the analysis already writes (``GEMM.csv`` and the
:mod:`.perf_sheets` sheets: SDPA, elementwise, normalisation, reduce, convolution). Each sheet row
is one shape of one op: FLOPs ``GFLOPS_first`` x 1e9 and bytes ``Data Moved (MB)_first`` x 2^20
per call, ``name_count`` calls, ``Kernel Time (µs)_sum`` of kernel time. Per op (all its shapes):

* ``achieved_tflops`` / ``achieved_tbps``: total FLOPs / bytes over total kernel time;
* per shape, the roofline time is max(FLOPs / peak FLOP/s, bytes / peak bandwidth); the op's
  ``bound`` is ``compute`` when its FLOP time is the larger sum, else ``memory``;
* ``pct_of_bound``: roofline time / kernel time x 100;
* ``recoverable_ms`` (per step): kernel time less roofline time / share, when positive (an op at
  ``share`` of its bound, 0.7 by default, has nothing left to recover).

Peaks: FP8 rows (``Compute Spec`` with fp8) use the dense FP8 peak, every other row the dense BF16
matrix peak; bandwidth is the HBM peak (:mod:`..perf_model.device_peaks`). The top ops with no
sheet row (flash-attn, aiter, TransformerEngine and primus-turbo ops, Triton kernels, ...) are
listed as ``no model`` with their time and no recoverable time: unknown is not zero.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..model.table import Table
from ..perf_model.device_peaks import DevicePeak

__all__ = ["CSV_NAME", "COLUMNS", "DEFAULT_SHARE", "roofline", "write_csv", "sheet_category"]

CSV_NAME = "roofline.csv"
COLUMNS = [
    "op",
    "category",
    "achieved_tflops",
    "achieved_tbps",
    "peak_tflops",
    "peak_tbps",
    "bound",
    "pct_of_bound",
    "recoverable_ms",
    "ms_per_step",
]
DEFAULT_SHARE = 0.7
_KT = "Kernel Time (µs)_sum"


def sheet_category(sheet: str) -> str:
    s = sheet.lower()
    if s.startswith("gemm"):
        return "gemm"
    if s.startswith("sdpa"):
        return "attention"
    if "elementwise" in s:
        return "elementwise"
    return s.split("_")[0]  # normalization, reduce, conv


def _num(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x


def roofline(
    sheets: dict[str, Table],
    top_ops: list[tuple[str, float]],
    peak: DevicePeak | None,
    steps: int,
    share: float = DEFAULT_SHARE,
) -> list[dict[str, Any]]:
    """Rows per modelled op (by kernel time), then the top ops with no model.

    ``sheets``: sheet name -> table (GEMM and the perf sheets); ``top_ops``: (name, direct
    kernel µs) of the ops summary's top rows."""
    steps = max(steps, 1)
    ops: dict[tuple[str, str], dict[str, float]] = {}
    for sheet, table in sheets.items():
        if table.empty or _KT not in table.columns:
            continue
        cat = sheet_category(sheet)
        spec_col = "Compute Spec" in table.columns
        for r in table.records():
            n = _num(r.get("name_count"))
            flops = _num(r.get("GFLOPS_first")) * 1e9 * n
            nbytes = _num(r.get("Data Moved (MB)_first")) * 2**20 * n
            us = _num(r.get(_KT))
            if not (us > 0) or math.isnan(flops):
                continue
            acc = ops.setdefault((str(r["name"]), cat), {"flops": 0.0, "bytes": 0.0, "us": 0.0, "t_f": 0.0, "t_b": 0.0})
            acc["flops"] += flops
            acc["us"] += us
            if not math.isnan(nbytes):
                acc["bytes"] += nbytes
            if peak:
                fp8 = spec_col and "fp8" in str(r.get("Compute Spec") or "").lower()
                t_f = flops / ((peak.fp8_tflops if fp8 else peak.bf16_tflops) * 1e12) * 1e6
                t_b = (nbytes / (peak.hbm_tbps * 1e12) * 1e6) if not math.isnan(nbytes) else 0.0
                acc["t_f"] += t_f
                acc["t_b"] += t_b
                acc.setdefault("t_roof", 0.0)
                acc["t_roof"] += max(t_f, t_b)
    rows = []
    for (name, cat), a in sorted(ops.items(), key=lambda kv: -kv[1]["us"]):
        row: dict[str, Any] = {
            "op": name,
            "category": cat,
            "achieved_tflops": a["flops"] / (a["us"] * 1e-6) / 1e12,
            "achieved_tbps": a["bytes"] / (a["us"] * 1e-6) / 1e12 if a["bytes"] else None,
            "peak_tflops": peak.bf16_tflops if peak else None,
            "peak_tbps": peak.hbm_tbps if peak else None,
            "bound": None,
            "pct_of_bound": None,
            "recoverable_ms": None,
            "ms_per_step": a["us"] / 1e3 / steps,
        }
        if peak:
            roof = a["t_roof"]
            row["bound"] = "compute" if a["t_f"] >= a["t_b"] else "memory"
            row["pct_of_bound"] = roof / a["us"] * 100
            row["recoverable_ms"] = max(0.0, a["us"] - roof / share) / 1e3 / steps
        rows.append(row)
    modelled = {name for name, _ in ops}
    for name, us in top_ops:
        if name not in modelled and us > 0:
            rows.append(
                {
                    "op": name,
                    "category": "",
                    "achieved_tflops": None,
                    "achieved_tbps": None,
                    "peak_tflops": peak.bf16_tflops if peak else None,
                    "peak_tbps": peak.hbm_tbps if peak else None,
                    "bound": "no model",
                    "pct_of_bound": None,
                    "recoverable_ms": None,
                    "ms_per_step": us / 1e3 / steps,
                }
            )
    return rows


def write_csv(rows: list[dict[str, Any]], out_dir: Path) -> Table:
    table = Table.from_records(rows, list(COLUMNS))
    table.write_csv(Path(out_dir) / CSV_NAME)
    return table
