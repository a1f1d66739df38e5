"""The ladder's trend chart: each rung's run-level step time across the ladder's full runs, with
95% intervals, change points marked (red: slower, green: faster; dashed: called before)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from traceladder.core.documents import JSONValue, as_float, as_list, as_objects

SLOWER, FASTER, POINT = "#b42318", "#2a9d8f", "#264653"


def trend_png(history: Mapping[str, JSONValue] | None, png: Callable[[Any], bytes]) -> bytes | None:
    """Small multiples, one panel per rung; None with fewer than two runs."""
    if not history or len(as_list(history.get("runs", []))) < 2:
        return None
    import matplotlib.pyplot as plt  # charts.py, the caller, has chosen the Agg backend

    rungs = as_objects(history["rungs"])
    cols = min(3, len(rungs))
    rows = math.ceil(len(rungs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.6 * rows), squeeze=False)
    order = {str(run): i for i, run in enumerate(as_list(history["runs"]))}
    for ax, rung in zip(axes.flat, rungs):
        x = [order[str(r)] for r in as_list(rung["run_ids"])]
        step_ms = as_objects(rung["step_ms"])
        y = [as_float(s["mean"]) for s in step_ms]
        err = [as_float(s.get("ci95") or 0.0) for s in step_ms]
        ax.errorbar(x, y, yerr=err, fmt="o-", ms=3, lw=1, capsize=2, color=POINT)
        for c in as_objects(rung["change_points"]):
            at = order[str(c["run_id"])] - 0.5
            ax.axvline(
                at,
                color=SLOWER if c["direction"] == "slower" else FASTER,
                linestyle="-" if c["regression"] or c["direction"] == "faster" else "--",
                lw=1.2,
            )
            ax.annotate(f"{c['delta_pct']:+.1f}%", (at, max(y)), fontsize=7, ha="left", va="top")
        ax.set_title(rung["rung"], fontsize=9)
        ax.set_ylabel("ms / step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(rungs) :]:
        ax.axis("off")
    fig.suptitle(
        f"Step time per run ({len(as_list(history['runs']))} full runs, oldest left; lines: change points)", fontsize=10
    )
    fig.tight_layout()
    return png(fig)
