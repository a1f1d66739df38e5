"""The attribution waterfall (matplotlib, Agg): per rung, its delta against its parent split by
category. charts.py owns the figure style and PNG export; this draws the one chart."""

from __future__ import annotations

from typing import Any, Callable

import matplotlib.pyplot as plt

from traceladder.core.summary_parts import AttributionEntry

MAX_CATEGORIES = 8  # the largest movers over the ladder get their own colour; the rest are "other categories"
GAP = "gap to busy time"


def _deltas(e: AttributionEntry) -> dict[str, float]:
    """An entry's per-category delta, µs per step."""
    return e.category_deltas_us


def _series(entries: list[AttributionEntry]) -> tuple[list[str], list[dict[str, float]]]:
    totals: dict[str, float] = {}
    for e in entries:
        for name, us in _deltas(e).items():
            totals[name] = totals.get(name, 0.0) + abs(us)
    keep = [n for n, _ in sorted(totals.items(), key=lambda kv: -kv[1])[:MAX_CATEGORIES]]
    rows = []
    for e in entries:
        row = {n: 0.0 for n in keep}
        rest = 0.0
        for name, us in _deltas(e).items():
            if name in row:
                row[name] += us / 1e3
            else:
                rest += us / 1e3
        if rest:
            row["other categories"] = rest
        row[GAP] = e.residual_us / 1e3
        rows.append(row)
    names = keep + (["other categories"] if any("other categories" in r for r in rows) else []) + [GAP]
    return names, rows


def draw(entries: list[AttributionEntry], ladder: str, png: Callable[[Any], bytes]) -> bytes | None:
    if not entries:
        return None
    names, rows = _series(entries)
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(entries) + 2), 4.2))
    for i, (e, row) in enumerate(zip(entries, rows)):
        up = down = 0.0
        alpha = 0.45 if e.indicative else 1.0
        for j, name in enumerate(names):
            v = row.get(name, 0.0)
            if not v:
                continue
            bottom = up if v > 0 else down
            ax.bar(
                i,
                v,
                bottom=bottom,
                color="#d0d7de" if name == GAP else colours(j % 10),
                alpha=alpha,
                hatch="//" if name == GAP else None,
                edgecolor="white",
                linewidth=0.5,
                label=name if i == 0 or not any(rows[k].get(name) for k in range(i)) else None,
            )
            if v > 0:
                up += v
            else:
                down += v
        ax.plot(
            i,
            (e.busy_time_delta_us or 0.0) / 1e3,
            "o",
            color="black",
            markersize=5,
            label="busy-time delta" if i == 0 else None,
        )
        if e.noise:  # what two profiled runs of one rung differ by, around the op-time delta
            ax.errorbar(
                i + 0.3,
                (e.kernel_time_delta_us or 0.0) / 1e3,
                yerr=e.noise.half_width_us / 1e3,
                fmt="_",
                color="dimgray",
                capsize=3,
                linewidth=1,
                label="op-time delta, ±95% range of two profiled runs",
            )
    ax.axhline(0, color="black", linewidth=0.8)
    labels = [
        f"{e.rung}\nvs {e.parent}"
        + (f"\n(per {e.parent}'s tokens)" if (e.work_ratio or 1.0) != 1.0 else "")
        + ("\n(indicative)" if e.indicative else "")
        for e in entries
    ]
    ax.set_xticks(range(len(entries)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("Δ ms per profiled step (batch rungs: per parent's tokens)", fontsize=8)
    ax.set_title(f"{ladder}: why each rung moved (by category, from traces)")
    ax.grid(axis="y", alpha=0.3)
    handles, labs = ax.get_legend_handles_labels()
    seen: dict[str, Any] = {}
    for h, lab in zip(handles, labs):
        seen.setdefault(lab, h)
    ax.legend(seen.values(), seen.keys(), fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return png(fig)
