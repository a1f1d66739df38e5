"""The ladder's trend chart: each rung's run-level step time across the ladder's full runs, with
95% intervals, change points marked (red: slower, green: faster; dashed: called before)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from traceladder.core.summary_parts import LadderHistory

SLOWER, FASTER, POINT = "#b42318", "#2a9d8f", "#264653"


def trend_png(history: LadderHistory | None, png: Callable[[Any], bytes]) -> bytes | None:
    """Small multiples, one panel per rung; None with fewer than two runs."""
    if not history or len(history.runs) < 2:
        return None
    import matplotlib.pyplot as plt  # charts.py, the caller, has chosen the Agg backend

    rungs = history.rungs
    cols = min(3, len(rungs))
    rows = math.ceil(len(rungs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.6 * rows), squeeze=False)
    order = {run: i for i, run in enumerate(history.runs)}
    for ax, rung in zip(axes.flat, rungs):
        x = [order[r] for r in rung.run_ids]
        # every run of a series has its step time (run_points keeps only rungs that have one)
        y = [s.mean if s else math.nan for s in rung.step_ms]
        err = [(s.ci95 or 0.0) if s else 0.0 for s in rung.step_ms]
        ax.errorbar(x, y, yerr=err, fmt="o-", ms=3, lw=1, capsize=2, color=POINT)
        for c in rung.change_points:
            at = order[c.run_id] - 0.5
            ax.axvline(
                at,
                color=SLOWER if c.direction == "slower" else FASTER,
                linestyle="-" if c.regression or c.direction == "faster" else "--",
                lw=1.2,
            )
            ax.annotate(f"{c.delta_pct:+.1f}%", (at, max(y)), fontsize=7, ha="left", va="top")
        ax.set_title(rung.rung, fontsize=9)
        ax.set_ylabel("ms / step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(rungs) :]:
        ax.axis("off")
    fig.suptitle(f"Step time per run ({len(history.runs)} full runs, oldest left; lines: change points)", fontsize=10)
    fig.tight_layout()
    return png(fig)
