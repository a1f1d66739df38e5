"""Small-sample statistics for rung figures: a mean with a Student-t 95% interval, and the rule
that decides whether two figures differ ("the intervals separate")."""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats as _scipy_stats

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    mean: float
    half_width: float | None  # None for a single run: no interval is claimed
    n: int

    @property
    def low(self) -> float:
        return self.mean - (self.half_width or 0.0)

    @property
    def high(self) -> float:
        return self.mean + (self.half_width or 0.0)

    def as_dict(self) -> dict[str, float | int | None]:
        return {"mean": self.mean, "ci95": self.half_width, "n": self.n}


def estimate(values: list[float]) -> Estimate | None:
    """Mean ± t(0.975, n−1)·s/√n; honest at n=3, unlike a bootstrap of three values."""
    clean = [v for v in values if v is not None and math.isfinite(v)]
    n = len(clean)
    if n == 0:
        return None
    mean = sum(clean) / n
    if n == 1:
        return Estimate(mean, None, 1)
    sd = math.sqrt(sum((v - mean) ** 2 for v in clean) / (n - 1))
    t = float(_scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1))
    return Estimate(mean, t * sd / math.sqrt(n), n)


def separated(a: Estimate, b: Estimate) -> bool:
    """True when the two intervals do not overlap. Single runs have no interval, so any
    difference between them counts (and is labelled as a single run by the renderer)."""
    return a.high < b.low or b.high < a.low


def ratio(num: Estimate, den: Estimate) -> Estimate:
    """num/den with a first-order (delta-method) interval from the two relative half-widths."""
    value = num.mean / den.mean
    if num.half_width is None or den.half_width is None:
        return Estimate(value, None, min(num.n, den.n))
    rel = math.hypot(num.half_width / num.mean, den.half_width / den.mean)
    return Estimate(value, value * rel, min(num.n, den.n))
