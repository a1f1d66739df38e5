"""The "what's left" reports of one trace, written on every analyze (docs/whats-left.md):
``idle_breakdown.csv``, ``step_regions.csv``, ``op_origins.csv``, ``roofline.csv`` (GPU traces)
and ``headroom.csv``; returns what analysis.json carries of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..model.events import EventTable
from ..model.table import Table
from ..perf_model.device_peaks import device_from_trace
from . import whats_left_targets as targets
from . import idle_breakdown as idle
from . import op_origins as oo
from . import roofline as rl
from . import step_regions as sr
from .gpu_timeline import STEP_PREFIX, CpuSelection, Timeline
from .ops_summary import Launchers

__all__ = ["write_reports", "mean_step_ms", "json_safe", "TARGETS_IN_JSON", "INCLUDE_LAST_PROFILER_STEP", "CSV_NAMES"]

TOP_OPS = 10
#: the files these reports add beside TraceLens's (roofline.csv on GPU traces only)
CSV_NAMES = frozenset({idle.CSV_NAME, sr.CSV_NAME, oo.CSV_NAME, rl.CSV_NAME, targets.CSV_NAME})
TARGETS_IN_JSON = 20  # analysis.json keeps the top rows; headroom.csv has them all
#: HTA's ``include_last_profiler_step``: True here, as every other figure of the window counts
#: the last step (on the six reference traces, with at most one step each, both agree)
INCLUDE_LAST_PROFILER_STEP = True


def mean_step_ms(t: EventTable) -> float | None:
    """The mean ``ProfilerStep#N`` range on the host (the longest event of each name)."""
    codes = np.asarray([c for c, n in enumerate(t.names) if n.startswith(STEP_PREFIX)], dtype=np.int64)
    if not codes.size:
        return None
    idx = np.flatnonzero(np.isin(t.name, codes) & t.is_cat("cpu_op", "user_annotation") & ~np.isnan(t.dur))
    if not idx.size:
        return None
    names, inv = np.unique(t.name[idx], return_inverse=True)
    longest = np.zeros(names.size)
    np.maximum.at(longest, inv.reshape(-1), t.dur[idx])
    return float(longest.mean()) / 1e3


def write_reports(
    t: EventTable,
    tl: Timeline,
    launchers: Launchers,
    ops_table: Table,
    sheets: dict[str, Table],
    out_dir: Path,
    *,
    rank: int | None,
    steps: int | None,
    sel: CpuSelection | None,
    share: float = rl.DEFAULT_SHARE,
    gpu_model: str | None = None,
    modelled: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    n_steps = steps or 1
    notes: list[str] = []
    gpu = tl.device == "gpu"
    if gpu:
        idle_rows = idle.gpu_idle(t, rank or 0, include_last=INCLUDE_LAST_PROFILER_STEP)
    else:
        idle_rows = idle.cpu_idle(t, sel, rank or 0) if sel is not None else []
    idle.write_csv(idle_rows, out_dir)
    regions, outside_ms = sr.regions_and_outside(t, launchers, n_steps)
    sr.write_csv(regions, out_dir)
    top = [(str(r["name"]), float(r["total_direct_kernel_time_sum"])) for r in ops_table.records(TOP_OPS)]
    origins = oo.op_origins(t, launchers, [n for n, _ in top], n_steps)
    oo.write_csv(origins, out_dir)
    roof: list[dict[str, Any]] = []
    device_name = None
    if gpu:
        peak, how = device_from_trace(t.metadata, gpu_model)
        device_name = peak.name if peak else None
        notes.append(f"roofline device: {peak.name} ({how})" if peak else f"roofline: {how}")
        roof = rl.roofline(sheets, top, peak, n_steps, share, modelled)
        rl.write_csv(roof, out_dir)
    else:
        notes.append("CPU trace: no device peak, so no roofline.csv and no recoverable time")
    step_ms = mean_step_ms(t)
    rows = targets.ranked_targets(
        steps=n_steps,
        step_ms=step_ms,
        device=tl.device,
        roofline_rows=roof,
        top_ops=top,
        regions=regions,
        idle_rows=idle_rows,
        exposed_comm_ms=tl.metrics_us.get("exposed_comm_time", 0.0) / 1e3,
        origins=origins,
        device_name=device_name,
        share=share,
    )
    targets.write_csv(rows, out_dir)
    return json_safe(
        {
            "step_regions": regions,
            "step_regions_outside_ms_per_step": outside_ms,
            "idle_breakdown": [dict(zip(idle.COLUMNS, r)) for r in idle_rows],
            "op_origins": origins[: TOP_OPS * 3],
            "headroom": top_rows(rows, TARGETS_IN_JSON),
            "mean_step_ms": step_ms,
            "roofline_share": share,
            "roofline_device": device_name,
            "notes": notes,
        }
    )


def top_rows(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The first ``n`` rows, then the first row of each kind not among them and the first
    AccumulateGrad origin (rank order kept): the summary can show every kind of finding, and the
    seed's largest leftover wherever it ranks."""
    top = rows[:n]
    kinds = {r["kind"] for r in top}
    accumulate = any(targets.is_accumulate_origin(r) for r in top)
    for r in rows[n:]:
        if r["kind"] not in kinds or (not accumulate and targets.is_accumulate_origin(r)):
            top.append(r)
            kinds.add(r["kind"])
            accumulate = accumulate or targets.is_accumulate_origin(r)
    return top


def json_safe(v: Any) -> Any:
    """NaN / infinity (an empty stream's ratio) as null: analysis.json stays strict JSON."""
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [json_safe(x) for x in v]
    if isinstance(v, (float, np.floating)):
        return float(v) if np.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    return v
