"""GEMM and attention rates per shape (``shape_rates`` in analysis.json; docs/whats-left.md).

Read from the reports already written: the GEMM shapes are analysis.json's ``gemm`` list
(``GEMM.csv``'s rows by kernel time, or by op duration on a CPU trace), the attention calls the
rows of the SDPA perf sheets (``SDPA_fwd.csv``, ``SDPA_bwd.csv``). Each row keeps its sheet's
own rates (``TFLOPS/s_mean``, ``TB/s_mean``: the mean over the calls, as TraceLens writes them)
and gives their share of the device's peak: the dense FP8 matrix peak for an FP8 row, the dense
BF16 one otherwise (as the roofline), and the HBM peak for the bytes.

The device is the trace's ``deviceProperties`` name, else the ladder's cluster, else unknown
(:func:`..perf_model.device_peaks.device_from_trace`); ``device_from`` says which.
"""

from __future__ import annotations

from typing import Any

from ..model.table import Table
from ..model.values import finite
from ..perf_model.device_peaks import DevicePeak

__all__ = ["TOP_SHAPES", "shape_rates", "device_from"]

TOP_SHAPES = 10
_KT = "Kernel Time (µs)_sum"
# the SDPA sheets' shape params, as "B=1 N_Q=141 ..." (TraceLens's column names)
_SDPA_PARAMS = ("B", "N_Q", "H_Q", "N_KV", "H_KV", "d_h_qk", "d_h_v", "causal")


def device_from(peak: DevicePeak | None, how: str, device: str | None) -> str:
    """Which source named the device: ``trace``, ``cluster``, ``unknown`` or ``cpu``."""
    if device == "cpu":
        return "cpu"
    if peak is None:
        return "unknown"
    return "trace" if how.startswith("deviceProperties") else "cluster"


def _with_peak(row: dict[str, Any], spec: str, peak: DevicePeak | None) -> dict[str, Any]:
    fp8 = "fp8" in spec.lower() or "float8" in str(row.get("dtype") or "").lower()
    tflops = peak.fp8_tflops if (peak and fp8) else peak.bf16_tflops if peak else None
    row["peak_tflops"] = tflops
    row["peak_name"] = ("FP8" if fp8 else "BF16") if peak else None
    tf, tb = row["tflops"], row["tbps"]
    row["pct_of_peak_tflops"] = tf / tflops * 100 if (tflops and tf is not None) else None
    row["pct_of_peak_tbps"] = tb / peak.hbm_tbps * 100 if (peak and tb is not None) else None
    return row


def _gemm_rows(gemm: list[dict[str, Any]], peak: DevicePeak | None, steps: int, top: int) -> list[dict[str, Any]]:
    out = []
    for g in gemm[:top]:
        shape = f"M={g.get('M')} N={g.get('N')} K={g.get('K')}"
        if g.get("B") not in (None, 1):
            shape += f" B={g['B']}"
        row = {
            "op": g["name"],
            "shape": shape,
            "dtype": g.get("dtype"),
            "calls": g.get("count"),
            "time_ms": g.get("time_ms"),
            "ms_per_step": (g.get("time_ms") or 0.0) / steps,
            "tflops": g.get("tflops_mean"),
            "tbps": g.get("tbps_mean"),
        }
        out.append(_with_peak(row, str(g.get("compute_spec") or ""), peak))
    return out


def _attention_rows(sheets: dict[str, Table], peak: DevicePeak | None, steps: int, top: int) -> list[dict[str, Any]]:
    rows = []
    for sheet, table in sheets.items():
        if not sheet.upper().startswith("SDPA") or table.empty:
            continue
        for r in table.records():
            us = finite(r.get(_KT)) or 0.0
            shape = " ".join(f"{p}={r[f'param: {p}']}" for p in _SDPA_PARAMS if r.get(f"param: {p}") is not None)
            dtype = str(r.get("param: dtype_A_B") or "").split("'")
            row = {
                "op": str(r["name"]),
                "sheet": sheet,
                "shape": shape,
                "dtype": dtype[1] if len(dtype) > 1 else None,
                "calls": int(finite(r.get("name_count")) or 0),
                "time_ms": us / 1e3,
                "ms_per_step": us / 1e3 / steps,
                "tflops": finite(r.get("TFLOPS/s_mean")),
                "tbps": finite(r.get("TB/s_mean")),
            }
            rows.append(_with_peak(row, str(r.get("Compute Spec") or ""), peak))
    rows.sort(key=lambda x: -x["time_ms"])
    return rows[:top]


def shape_rates(
    gemm: list[dict[str, Any]],
    sheets: dict[str, Table],
    peak: DevicePeak | None,
    how: str,
    *,
    device: str | None,
    steps: int | None,
    top: int = TOP_SHAPES,
) -> dict[str, Any]:
    """``{"device", "device_from", "device_note", "gemm": [...], "attention": [...]}``; each row
    ``{"op", "shape", "dtype", "calls", "time_ms", "ms_per_step", "tflops", "tbps",
    "peak_tflops", "peak_name", "pct_of_peak_tflops", "pct_of_peak_tbps"}`` (attention rows also
    name their ``sheet``). A CPU trace's GEMM rates are by op duration, with no peak."""
    n = max(steps or 1, 1)
    on_gpu = device != "cpu"
    peak = peak if on_gpu else None
    return {
        "device": peak.name if peak else None,
        "device_from": device_from(peak, how, device),
        "device_note": how if on_gpu else "CPU trace: GEMM rates by op duration, no device peak",
        "gemm": _gemm_rows(gemm, peak, n, top),
        "attention": _attention_rows(sheets, peak, n, top),
    }
