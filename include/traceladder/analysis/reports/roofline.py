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

The ops ``unified_perf_summary.csv`` models and no sheet holds (torch.compile Triton kernels,
and any model with no sheet of its own) come from its rows (``GFLOPS``, ``Data Moved (MB)``,
``operation_count``, ``Kernel Time (µs)_sum``); the ``model`` column names the file.

Peaks: FP8 rows (``Compute Spec`` with fp8) use the dense FP8 peak, every other row the dense BF16
matrix peak; bandwidth is the HBM peak (:mod:`..perf_model.device_peaks`). The top ops with no
model anywhere (flash-attn, aiter, TransformerEngine ops, Primus's own Triton kernels and
attention backends, ...) are listed as ``no model`` with their time, the reason, and no
recoverable time: unknown is not zero.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..model.table import Table
from ..perf_model.device_peaks import DevicePeak
from ..perf_model.triton import PREFIXES as TRITON_PREFIXES
from .unified_perf import CSV_NAME as UNIFIED_CSV

__all__ = [
    "CSV_NAME",
    "COLUMNS",
    "DEFAULT_SHARE",
    "roofline",
    "write_csv",
    "sheet_category",
    "unified_category",
    "no_model_reason",
]

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
    "model",  # the file its figures come from, or "none: <why>"
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


def no_model_reason(name: str) -> str:
    """Why an op has no figures: said per kind, as the seed's main targets are these."""
    low = name.lower()
    if name.startswith(TRITON_PREFIXES):
        return "torch.compile Triton kernel whose launch args give no element counts to model"
    if any(w in low for w in ("attn", "attention", "gluon")):
        return (
            "attention backend with no perf model anywhere (Primus's triton_v1, gluon_v3 and turbo "
            "backends: TraceLens v1.0.0 models none of them)"
        )
    if "triton" in low:
        return "hand-written Triton kernel: no perf model anywhere (TraceLens v1.0.0 models only torch.compile's)"
    return "no perf model for this op"


def _sheet_work(sheets: dict[str, Table]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(op, category, source file, row) of every perf-model sheet row."""
    out = []
    for sheet, table in sheets.items():
        if table.empty or _KT not in table.columns:
            continue
        cat = sheet_category(sheet)
        for r in table.records():
            out.append((str(r["name"]), cat, f"{sheet}.csv", r))
    return out


def _unified_work(modelled: list[dict[str, Any]], taken: set[str]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """The same for ``unified_perf_summary.csv``'s modelled rows whose op no sheet holds
    (torch.compile Triton kernels, and any model with no sheet of its own), in sheet columns."""
    out = []
    for r in modelled:
        name = str(r["name"])
        if name in taken:
            continue
        row = {
            "name_count": r.get("operation_count"),
            "GFLOPS_first": r.get("GFLOPS"),
            "Data Moved (MB)_first": r.get("Data Moved (MB)"),
            _KT: r.get(_KT),
            "Compute Spec": r.get("Compute Spec"),
        }
        out.append((name, unified_category(str(r.get("op category") or "")), UNIFIED_CSV, row))
    return out


def unified_category(cat: str) -> str:
    """A unified row's ``op category`` in the roofline's words (GEMM -> gemm, SDPA_* -> attention)."""
    return sheet_category(cat) if cat.upper().startswith(("GEMM", "SDPA")) else cat.lower()


def roofline(
    sheets: dict[str, Table],
    top_ops: list[tuple[str, float]],
    peak: DevicePeak | None,
    steps: int,
    share: float = DEFAULT_SHARE,
    modelled: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Rows per modelled op (by kernel time), then the top ops with no model.

    ``sheets``: sheet name -> table (GEMM and the perf sheets); ``top_ops``: (name, direct
    kernel µs) of the ops summary's top rows; ``modelled``: ``unified_perf_summary.csv``'s rows
    with a model (:func:`..unified_perf.modelled_rows`), taken for the ops no sheet holds."""
    steps = max(steps, 1)
    ops: dict[tuple[str, str], dict[str, Any]] = {}
    work = _sheet_work(sheets)
    work += _unified_work(modelled or [], {name for name, _, _, _ in work})
    for name, cat, source, r in work:
        n = _num(r.get("name_count"))
        flops = _num(r.get("GFLOPS_first")) * 1e9 * n
        nbytes = _num(r.get("Data Moved (MB)_first")) * 2**20 * n
        us = _num(r.get(_KT))
        if not (us > 0) or math.isnan(flops):
            continue
        acc = ops.setdefault(
            (name, cat), {"flops": 0.0, "bytes": 0.0, "us": 0.0, "t_f": 0.0, "t_b": 0.0, "t_roof": 0.0, "src": []}
        )
        if source not in acc["src"]:
            acc["src"].append(source)
        acc["flops"] += flops
        acc["us"] += us
        if not math.isnan(nbytes):
            acc["bytes"] += nbytes
        if peak:
            fp8 = "fp8" in str(r.get("Compute Spec") or "").lower()
            t_f = flops / ((peak.fp8_tflops if fp8 else peak.bf16_tflops) * 1e12) * 1e6
            t_b = (nbytes / (peak.hbm_tbps * 1e12) * 1e6) if not math.isnan(nbytes) else 0.0
            acc["t_f"] += t_f
            acc["t_b"] += t_b
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
            "model": " ".join(a["src"]),
        }
        if peak:
            roof = a["t_roof"]
            row["bound"] = "compute" if a["t_f"] >= a["t_b"] else "memory"
            row["pct_of_bound"] = roof / a["us"] * 100
            row["recoverable_ms"] = max(0.0, a["us"] - roof / share) / 1e3 / steps
        rows.append(row)
    modelled_names = {name for name, _ in ops}
    for name, us in top_ops:
        if name not in modelled_names and us > 0:
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
                    "model": f"none: {no_model_reason(name)}",
                }
            )
    return rows


def write_csv(rows: list[dict[str, Any]], out_dir: Path) -> Table:
    table = Table.from_records(rows, list(COLUMNS))
    table.write_csv(Path(out_dir) / CSV_NAME)
    return table
