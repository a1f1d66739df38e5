"""Does the machine's speed drift inside a block? `python -m benchmarks.demo_drift DEMO_DIR ...`

Refits a finished demo's measure runs (each run's `metrics.json` under the demo's local copy,
`.traceladder/demo/<ladder>/<run id>/`) with the block model and with time terms added, and prints
the residual run-level sd and each optimisation rung's effect against its parent under each fit.
The response is log step CPU time per micro-batch (for the batch rungs that is log tokens per
CPU-second up to a constant, as the verdicts use). Ordinary least squares, numpy only.

- block: rung + block effects (the summary's model, without its iteration-variance floor);
- + linear drift per block: a slope in run time (the run's mid-point) inside each block;
- + quadratic drift per block: a slope and a curvature inside each block;
- time spline, no blocks: rung effects + a piecewise-linear function of time, knots every 20 s.
"""

from __future__ import annotations

import glob
import json
import math
import sys
from pathlib import Path

import numpy as np

PARENT = {
    "fusions": "baseline",
    "attn_gluon_v3": "fusions",
    "attn_turbo": "attn_gluon_v3",
    "deepep": "attn_turbo",
    "grouped_gemm": "deepep",
    "megamoe": "grouped_gemm",
    "recompute_off": "megamoe",
}
MICRO_BATCHES = {"gbs16": 2, "gbs32": 4}


def refit(demo: Path) -> list[str]:
    runs = [json.loads(Path(f).read_text()) for f in glob.glob(str(demo / "*.none.r*" / "metrics.json"))]
    runs = [m for m in runs if m.get("status") == "ok" and m.get("step_cpu_ms")]
    if not runs:
        raise SystemExit(f"{demo}: no measure run with step_cpu_ms (is this a demo's local copy?)")
    rungs = sorted({m["rung"] for m in runs})
    blocks = sorted({m["block"] for m in runs})
    y = np.array([math.log(m["step_cpu_ms"] / MICRO_BATCHES.get(m["rung"], 1)) for m in runs])
    t = np.array([(m["started_at"] + m["ended_at"]) / 2 for m in runs])
    rung_of = np.array([rungs.index(m["rung"]) for m in runs])
    block_of = np.array([blocks.index(m["block"]) for m in runs])
    centred = np.zeros_like(t)
    for b in range(len(blocks)):
        centred[block_of == b] = t[block_of == b] - t[block_of == b].mean()
    rung_cols = [(rung_of == i).astype(float) for i in range(len(rungs))]
    block_cols = [(block_of == b).astype(float) for b in range(1, len(blocks))]
    slopes = [centred * (block_of == b) for b in range(len(blocks))]
    curves = [centred**2 * (block_of == b) for b in range(len(blocks))]
    hinges = [np.maximum(t - k, 0.0) for k in np.arange(t.min(), t.max(), 20.0)[1:]]
    fits = {
        "block": rung_cols + block_cols,
        "+ linear drift per block": rung_cols + block_cols + slopes,
        "+ quadratic drift per block": rung_cols + block_cols + slopes + curves,
        "time spline (20 s knots), no blocks": [*rung_cols, t - t.min(), *hinges],
    }
    lines = [f"{demo.name}: {len(runs)} measure runs, {len(blocks)} blocks"]
    for name, cols in fits.items():
        design = np.column_stack(cols)
        coef, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
        resid = y - design @ coef
        df = len(y) - int(rank)
        sd = math.sqrt(float(resid @ resid) / df)
        effects = " ".join(
            f"{r} {100 * math.expm1(coef[rungs.index(r)] - coef[rungs.index(p)]):+.1f}%"
            for r, p in PARENT.items()
            if r in rungs and p in rungs
        )
        lines.append(f"  {name:38s} run sd {100 * sd:4.1f}% ({df} df) | {effects}")
    return lines


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    for arg in argv:
        print("\n".join(refit(Path(arg))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
