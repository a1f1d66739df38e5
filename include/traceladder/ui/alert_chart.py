"""The alert page's bisection chart, drawn on the server as SVG (no script): the triage's
candidates in order along the x axis, each step's effect (B against A, in %) at its B side as a
dot with its interval as a whisker, and the culprits' slots marked with their shares.

Pure (names and steps in, SVG text out), so the page needs no plotting library and the unit
tests read the figure back as XML."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from traceladder.core.documents import Culprit, TriageStep

# one colour per step kind (TriageStep.kind), and its words in the legend
KIND_COLOURS = {
    "confirm": "#555555",
    "bisect": "#1f77b4",
    "pair": "#d62728",
    "range": "#9467bd",
    "at first bad": "#ff7f0e",
}
SLOT_PX = 44  # one candidate's width
STEP_GAP_PX = 9  # between two steps on one candidate
PLOT_H = 220
LEFT, RIGHT, TOP, BOTTOM = 64, 24, 40, 120  # the margins: y labels, legend, rotated x labels
MIN_PLOT_W = 360


@dataclass(frozen=True)
class Scale:
    """% -> y pixel, over [low, high] padded, with round ticks."""

    low: float
    high: float

    @classmethod
    def over(cls, values: Sequence[float]) -> Scale:
        low, high = min([0.0, *values]), max([0.0, *values])
        pad = max(high - low, 1.0) * 0.08
        return cls(low - pad, high + pad)

    def y(self, pct: float) -> float:
        return TOP + PLOT_H * (self.high - pct) / (self.high - self.low)

    def ticks(self) -> list[float]:
        raw = (self.high - self.low) / 8  # 4 to 8 ticks
        power = 10 ** math.floor(math.log10(raw))
        step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
        first = math.ceil(self.low / step) * step
        return [round(first + i * step, 10) for i in range(int((self.high - first) / step) + 1)]


def slots(candidates: Sequence[str], steps: Sequence[TriageStep]) -> list[str]:
    """The x axis: the candidates in order, then any step's B side that is not one of them (the
    confirm's bad run), in the order the steps name them."""
    out = list(dict.fromkeys(candidates))
    for step in steps:
        if step.candidate not in out:
            out.append(step.candidate)
    return out


def _fmt(pct: float) -> str:
    return f"{pct:+.1f}%"


def _step_title(step: TriageStep) -> str:
    size = _fmt(step.delta_pct) if step.delta_pct is not None else "no size"
    interval = f" [{_fmt(step.interval_pct[0])}, {_fmt(step.interval_pct[1])}]" if step.interval_pct else ""
    return f"{step.kind} on {step.rung}: {step.candidate} vs {step.good}: {step.verdict} {size}{interval}"


def bisection_svg(
    candidates: Sequence[str], steps: Sequence[TriageStep], culprits: Sequence[Culprit], metric: str = "step time"
) -> str:
    """The chart as one ``<svg>`` element (every text escaped). A step without a size (skipped, or
    insufficient before its first look) is a grey cross on the zero line."""
    names = slots(candidates, steps)
    values = [v for s in steps for v in ([s.delta_pct] if s.delta_pct is not None else []) + list(s.interval_pct or [])]
    scale = Scale.over(values)
    width = LEFT + max(MIN_PLOT_W, SLOT_PX * max(len(names), 1)) + RIGHT
    height = TOP + PLOT_H + BOTTOM
    x_of = {name: LEFT + SLOT_PX * (i + 0.5) for i, name in enumerate(names)}
    plot_right = width - RIGHT
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="bisection" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="bisection: each step\'s change, in %">',
        f"<title>The bisection: each step's change of the {escape(metric)}, B against A, with its interval</title>",
    ]
    culprit_names = {c.name for c in culprits}
    for culprit in culprits:
        if culprit.name not in x_of:
            continue
        x = x_of[culprit.name]
        out.append(
            f'<g class="culprit" data-name="{escape(culprit.name)}"><rect x="{x - SLOT_PX / 2:.1f}" y="{TOP}" '
            f'width="{SLOT_PX}" height="{PLOT_H}" fill="#c628281f"/>'
            f'<text x="{x:.1f}" y="{TOP - 6}" text-anchor="middle" font-size="10" fill="#c62828">culprit '
            f"{escape(culprit.share_text().removeprefix('share '))}</text></g>"
        )
    for tick in scale.ticks():
        y = scale.y(tick)
        dash = "" if tick == 0 else ' stroke-dasharray="2,3"'
        out.append(
            f'<line class="{"zero" if tick == 0 else "tick"}" x1="{LEFT}" x2="{plot_right}" y1="{y:.1f}" '
            f'y2="{y:.1f}" stroke="#8888"{dash}/><text x="{LEFT - 6}" y="{y + 3:.1f}" text-anchor="end" '
            f'font-size="10" fill="currentColor">{tick:+g}%</text>'
        )
    out.append(
        f'<text x="14" y="{TOP + PLOT_H / 2:.0f}" font-size="11" fill="currentColor" text-anchor="middle" '
        f'transform="rotate(-90 14 {TOP + PLOT_H / 2:.0f})">B vs A, % ({escape(metric)})</text>'
    )
    # in the steps' order; two steps on one candidate side by side within its slot
    per_slot: dict[str, int] = {}
    for step in steps:
        per_slot[step.candidate] = per_slot.get(step.candidate, 0) + 1
    placed: dict[str, int] = {}
    for step in steps:
        i = placed.get(step.candidate, 0)
        placed[step.candidate] = i + 1
        x = x_of[step.candidate] + (i - (per_slot[step.candidate] - 1) / 2) * STEP_GAP_PX
        out.append(_step_mark(step, x, scale))
    base_y = TOP + PLOT_H
    for name, x in x_of.items():
        label = name if len(name) <= 28 else name[:25] + "..."
        weight = ' font-weight="bold"' if name in culprit_names else ""
        out.append(
            f'<text class="candidate" data-name="{escape(name)}" x="{x:.1f}" y="{base_y + 12}" font-size="10" '
            f'fill="currentColor" text-anchor="end"{weight} transform="rotate(-45 {x:.1f} {base_y + 12})">'
            f"{escape(label)}<title>{escape(name)}</title></text>"
        )
    legend_x = LEFT
    for kind, colour in KIND_COLOURS.items():
        if not any(s.kind == kind for s in steps):
            continue
        out.append(
            f'<circle cx="{legend_x + 4}" cy="12" r="4" fill="{colour}"/><text x="{legend_x + 11}" y="16" '
            f'font-size="10" fill="currentColor">{escape(kind)}</text>'
        )
        legend_x += 18 + 6 * len(kind)
    out.append("</svg>")
    return "".join(out)


def _step_mark(step: TriageStep, x: float, scale: Scale) -> str:
    colour = KIND_COLOURS.get(step.kind, "#555555")
    attrs = (
        f'class="step" data-kind="{escape(step.kind)}" data-candidate="{escape(step.candidate)}" '
        f'data-verdict="{escape(step.verdict)}"'
    )
    title = f"<title>{escape(_step_title(step))}</title>"
    if step.delta_pct is None:
        y = scale.y(0)
        return (
            f'<g {attrs}>{title}<path d="M{x - 4:.1f},{y - 4:.1f}l8,8m0,-8l-8,8" stroke="#888" stroke-width="1.5"/></g>'
        )
    parts = [f'<g {attrs} data-delta="{step.delta_pct:g}">', title]
    if step.interval_pct:
        low, high = (scale.y(v) for v in step.interval_pct)
        parts.append(
            f'<line class="whisker" x1="{x:.1f}" x2="{x:.1f}" y1="{low:.1f}" y2="{high:.1f}" stroke="{colour}" '
            f'stroke-width="2"/><line x1="{x - 3:.1f}" x2="{x + 3:.1f}" y1="{low:.1f}" y2="{low:.1f}" '
            f'stroke="{colour}"/><line x1="{x - 3:.1f}" x2="{x + 3:.1f}" y1="{high:.1f}" y2="{high:.1f}" '
            f'stroke="{colour}"/>'
        )
    filled = step.verdict == "confirmed"
    parts.append(
        f'<circle class="effect" cx="{x:.1f}" cy="{scale.y(step.delta_pct):.1f}" r="4" '
        f'fill="{colour if filled else "none"}" stroke="{colour}" stroke-width="1.5"/></g>'
    )
    return "".join(parts)
