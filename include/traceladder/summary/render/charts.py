"""Summary charts (matplotlib, Agg): a waterfall of the ms each rung removed (its vs_parent delta),
and lens overheads."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from traceladder.core.documents import JSONValue
from traceladder.core.summary_parts import attribution_entries, summary_lenses, summary_rungs

WIN, LOSS, NOISE, TOTAL = "#2a9d8f", "#e76f51", "#9aa5b1", "#264653"


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def waterfall_png(summary: Mapping[str, JSONValue]) -> bytes | None:
    """From the root's step time down the optimisation rungs: each bar is the ms a rung removed
    against its parent (its vs_parent delta; grey when no change was detected), with the 95%
    interval of that delta, ending at the last rung's step time."""
    rungs = summary_rungs(summary["rungs"])
    rows = {r.rung: r for r in rungs}
    root = rows.get(str(summary.get("root") or ""))
    if not root or not root.step_ms:
        return None
    chain = [
        r for r in rungs if r.kind == "optimisation" and r.vs_parent and r.vs_parent.delta is not None and r.step_ms
    ]
    if not chain:
        return None
    root_step = root.step_ms
    labels: list[str] = [root.rung]
    bottoms, heights, colours = [0.0], [root_step.mean], [TOTAL]
    errors: list[float] = [root_step.ci95 or 0]
    level = root_step.mean
    tops: list[tuple[int, float, float, float]] = []  # bar index, delta end, interval below/above it
    for row in chain:
        vs = row.vs_parent
        assert vs is not None and vs.delta is not None  # the chain's rows have one
        delta = vs.delta
        removed = -delta
        colour = NOISE if vs.verdict in ("no_change", "single_run") else (WIN if removed > 0 else LOSS)
        labels.append(row.rung)
        bottoms.append(min(level, level - removed))
        heights.append(abs(removed))
        colours.append(colour)
        errors.append(0)
        if vs.ci95:
            end = level - removed
            lo, hi = (float(x or 0.0) for x in vs.ci95[:2])
            tops.append((len(labels) - 1, end, delta - lo, hi - delta))
        level -= removed
    last = chain[-1]
    last_step = last.step_ms
    assert last_step is not None  # the chain's rows have one
    labels.append(f"{last.rung}\n(final)")
    bottoms.append(0.0)
    heights.append(last_step.mean)
    colours.append(TOTAL)
    errors.append(last_step.ci95 or 0)

    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(labels)), 4))
    ax.bar(range(len(labels)), heights, bottom=bottoms, color=colours)
    ends = [0, len(labels) - 1]  # only the two step times carry an interval; the steps are deltas
    ax.errorbar(ends, [heights[i] for i in ends], yerr=[errors[i] for i in ends], fmt="none", capsize=4, color="black")
    if tops:  # each step's delta interval, drawn at the level the step ends on
        ax.errorbar(
            [t[0] for t in tops],
            [t[1] for t in tops],
            yerr=[[t[2] for t in tops], [t[3] for t in tops]],
            fmt="none",
            capsize=3,
            color="#4b5563",
            linewidth=0.8,
        )
    ax.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("ms / step")
    ax.set_title(f"{summary['ladder']}: ms removed per rung vs parent, 95% CI (grey: no change detected)")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def lens_overhead_png(summary: Mapping[str, JSONValue]) -> bytes | None:
    with_ratio = [(lens, lens.overhead_ratio) for lens in summary_lenses(summary["lenses"]) if lens.overhead_ratio]
    if not with_ratio:
        return None
    lenses = [lens for lens, _ in with_ratio]
    ratios = [ratio for _, ratio in with_ratio]
    names = ["none"] + [lens.lens for lens in lenses]
    values = [1.0] + [o.mean for o in ratios]
    cis = [list(o.ci95) if o.ci95 else None for o in ratios]
    errors = [
        [0.0] + [v - c[0] if c else 0.0 for v, c in zip(values[1:], cis)],
        [0.0] + [c[1] - v if c else 0.0 for v, c in zip(values[1:], cis)],
    ]
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(names)), 3.5))
    ax.bar(names, values, yerr=errors, capsize=4, color=[TOTAL] + [WIN] * len(lenses))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel(f"step time / unprofiled ({summary.get('lens_rung')})")
    ax.set_title("Lens overhead, paired within lens blocks (95% CI)")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def render_charts(summary: Mapping[str, JSONValue]) -> dict[str, bytes]:
    """Chart file name → PNG bytes, only for the charts the data supports."""
    from traceladder.summary.render.history import read_history
    from traceladder.summary.render.trend_chart import trend_png

    charts = {
        "waterfall.png": waterfall_png(summary),
        "lens_overhead.png": lens_overhead_png(summary),
        "attribution.png": attribution_png(summary),
        "trend.png": trend_png(read_history(summary.get("history")), _png),
    }
    return {name: png for name, png in charts.items() if png}


def attribution_png(summary: Mapping[str, JSONValue]) -> bytes | None:
    """Each profiled rung's change against its parent, split by category (ms/step, stacked up for
    time added, down for time removed), the gap to busy time as its own hatched part, and a dot
    at the busy-time delta. Pale bars: indicative (the rung's step-time change is not resolved)."""
    from traceladder.summary.render.attribution_chart import draw

    entries = [e for e in attribution_entries(summary.get("attribution") or []) if not e.unfit]  # no figures
    return draw(entries, str(summary.get("ladder", "")), _png)
