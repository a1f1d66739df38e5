"""Adaptive repeats: a group-sequential design over a ladder's blocks (docs/statistics-adaptive.md).

A ladder with `repeats: {min: m, max: M, target_mde_pct: P}` plans M blocks and looks at its
data after block n = m, m+1, ..., M. At each look every non-root rung's verdict is computed
with that look's critical value; the ladder stops at the first look where every MDE is <= P.

The false-call rate stays at alpha because each look has its own critical value, chosen so that
under no effect the chance that |Z_n| crosses c_n at ANY look is alpha (Lan and DeMets 1983,
two-sided, O'Brien-Fleming-type spending). Whatever rule picks the look that is reported, a
false call there is a crossing at some look, so its probability is at most alpha.

`budget_s: B` adds a time rule: before a block, the ladder also stops when one more block, as
long as the longest so far, would end more than B seconds after the plan. That stop is decided by
the clock, not by the rungs' differences, so the look where it happens is made the final
analysis and spends all the alpha the earlier looks left (Lan and DeMets' final look). Given a
stopping block chosen independently of the contrasts, a crossing at some look has probability
exactly alpha. The blocks' lengths are the runs' own times, summed over every rung, so the
independence is close, not exact (docs/statistics-adaptive.md, "A time budget").

The model, so the numbers can be redone by hand:
- information fraction of look n: t_n = n / M (information grows with the blocks);
- under no effect Z_n = B(t_n) / sqrt(t_n), B a standard Brownian motion: increments between
  looks are independent N(0, t_n - t_{n-1});
- alpha spent by information t, alpha/2 on each side: a(t) = 2 [2 - 2 Phi(z_{1-alpha/4} / sqrt(t))],
  so a(1) = alpha (gsDesign's `sfLDOF` with its one-sided alpha = alpha/2, `test.type = 2`);
- c_n solves P(|Z_k| < c_k for k < n, |Z_n| >= c_n) = a(t_n) - a(t_{n-1}); the first look is
  closed-form: c = Phi^-1(1 - a(t_1)/2); later looks integrate the sub-density of B on the
  continuation region numerically (Armitage, McPherson and Rowe's recursion);
- on the t scale (the block model estimates its variance), the same one-sided tail: the critical
  t is the t(df) quantile whose upper tail equals 1 - Phi(c_n). Intervals are diff +- t_crit * se
  and the MDE is (t_crit + t(power, df)) * se.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy import optimize, stats

from traceladder.core.documents import AdaptiveRecord, JSONObject

ALPHA = 0.05
SPENDING = "lan_demets_obf"
# The recursion integrates B over |b| <= this many sd of B(t): what lies beyond is below 1e-30.
_SPAN_SD = 12.0
_GRID = 801  # odd: Simpson's rule


def obf_spending(t: float, alpha: float = ALPHA) -> float:
    """Two-sided alpha spent by information fraction t (0 < t <= 1), alpha/2 per side, each side
    by Lan-DeMets' O'Brien-Fleming-type function: 2 * (2 - 2 Phi(z_{1-alpha/4} / sqrt t))."""
    if t <= 0:
        return 0.0
    return float(4 * stats.norm.sf(stats.norm.isf(alpha / 4) / math.sqrt(min(t, 1.0))))


def hsd_spending(t: float, alpha: float = ALPHA, gamma: float = -4.0) -> float:
    """Two-sided alpha spent by information fraction t by Hwang, Shih and DeCani's family:
    alpha (1 - e^(-gamma t)) / (1 - e^(-gamma)); gamma -4 spends more early than O'Brien-Fleming
    (gsDesign's `sfHSD`), which lets a large change stop at the first looks."""
    if t <= 0:
        return 0.0
    t = min(t, 1.0)
    return alpha * math.expm1(-gamma * t) / math.expm1(-gamma)


SPENDING_FUNCTIONS: dict[str, Callable[[float, float], float]] = {"obf": obf_spending, "hsd": hsd_spending}


def _simpson_weights(n: int, h: float) -> np.ndarray:
    w = np.ones(n)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return w * h / 3


def _exit_prob(b: float, grid: np.ndarray, mass: np.ndarray, s: float) -> float:
    """P(continue to here, then |B(t)| >= b), B(t) = B(t_prev) + N(0, s^2)."""
    tails = stats.norm.sf((b - grid) / s) + stats.norm.cdf((-b - grid) / s)
    return float(np.sum(mass * tails))


@lru_cache(maxsize=2048)  # the ladder-wide rules ask for a few levels per look
def boundaries(
    fractions: tuple[float, ...], alpha: float = ALPHA, last_is_final: bool = False, spending: str = "obf"
) -> tuple[float, ...]:
    """Two-sided critical values c_n on the Z scale at information fractions `fractions`
    (increasing, the last <= 1), spending `alpha` by the O'Brien-Fleming-type function (`spending`
    "obf") or Hwang-Shih-DeCani's with gamma -4 ("hsd").
    `last_is_final`: the last look is the final analysis (a stop that does not depend on the data,
    such as a time budget), so it spends all the alpha the earlier looks left (Lan and DeMets)."""
    if not fractions or any(b <= a for a, b in zip(fractions, fractions[1:])) or fractions[0] <= 0:
        raise ValueError(f"information fractions must increase from above 0, got {fractions}")
    out: list[float] = []
    spent = 0.0
    # The sub-density of B(t_prev) on the continuation region: grid points and quadrature mass.
    grid: np.ndarray | None = None
    mass = np.zeros(0)
    prev_t = 0.0
    for i, t in enumerate(fractions):
        final = last_is_final and i == len(fractions) - 1
        target = (alpha if final else SPENDING_FUNCTIONS[spending](t, alpha)) - spent
        spent += target
        if grid is None:
            c = float(stats.norm.isf(target / 2)) if target > 0 else math.inf
        else:
            s = math.sqrt(t - prev_t)
            hi = _SPAN_SD * math.sqrt(t)
            if target <= 0 or _exit_prob(hi, grid, mass, s) >= target:
                # Nothing left to spend (or less than the integration can resolve): the marginal
                # boundary, which only errs on the safe side.
                c = float(stats.norm.isf(target / 2)) if target > 0 else math.inf
            else:
                b = optimize.brentq(lambda b: _exit_prob(b, grid, mass, s) - target, 1e-9, hi, xtol=1e-10)  # noqa: B023 - used at once
                c = b / math.sqrt(t)
        out.append(c)
        # Carry the sub-density of B(t) over |B| < c sqrt(t) to the next look.
        half = min(c * math.sqrt(t), _SPAN_SD * math.sqrt(t))
        new_grid = np.linspace(-half, half, _GRID)
        if grid is None:
            dens = stats.norm.pdf(new_grid, scale=math.sqrt(t))
        else:
            s = math.sqrt(t - prev_t)
            dens = (stats.norm.pdf((new_grid[:, None] - grid[None, :]) / s) / s) @ mass
        mass = _simpson_weights(_GRID, new_grid[1] - new_grid[0]) * dens
        grid, prev_t = new_grid, t
    return tuple(out)


@lru_cache(maxsize=4096)
def critical_t(c_z: float, df: int) -> float:
    """The t(df) critical value with the same one-sided tail as c_z: t.isf(1 - Phi(c_z), df)."""
    return float(stats.t.isf(stats.norm.sf(c_z), df))


@dataclass(frozen=True)
class Design:
    """A plan's adaptive repeats: looks after blocks min..max, each with its critical value."""

    min_blocks: int
    max_blocks: int
    target_mde_pct: float
    alpha: float = ALPHA
    budget_s: float | None = None  # seconds from the plan by which the measure blocks must end
    critical_z: tuple[float, ...] = field(init=False)

    def __post_init__(self) -> None:
        if not 1 <= self.min_blocks <= self.max_blocks:
            raise ValueError(f"need 1 <= min <= max blocks, got {self.min_blocks}, {self.max_blocks}")
        object.__setattr__(self, "critical_z", boundaries(self.fractions, self.alpha))

    @property
    def looks(self) -> tuple[int, ...]:
        """The block counts after which the rule looks."""
        return tuple(range(self.min_blocks, self.max_blocks + 1))

    @property
    def fractions(self) -> tuple[float, ...]:
        return tuple(n / self.max_blocks for n in self.looks)

    def z_at(self, blocks: int) -> float:
        """The critical value for an analysis after `blocks` blocks. Fewer than min (runs that
        never came): the first look's, the largest, so the claim stays within alpha."""
        index = min(max(blocks, self.min_blocks), self.max_blocks) - self.min_blocks
        return self.critical_z[index]

    def final_z_at(self, blocks: int) -> float:
        """The critical value when the look after `blocks` blocks is made the final analysis for
        a reason the contrasts do not decide (the time budget): it spends all the alpha that the
        looks before it left. At `max_blocks` it is z_at's."""
        if blocks >= self.max_blocks:
            return self.z_at(blocks)
        looks = range(self.min_blocks, max(blocks, self.min_blocks) + 1)
        return boundaries(tuple(n / self.max_blocks for n in looks), self.alpha, last_is_final=True)[-1]

    def as_dict(self) -> JSONObject:
        """plan.json's `adaptive` record."""
        budget = (
            f", or as soon as another block would end more than {self.budget_s:g} s after the plan "
            "(that look then spends the alpha left)"
            if self.budget_s
            else ""
        )
        doc: JSONObject = {
            "min_blocks": self.min_blocks,
            "max_blocks": self.max_blocks,
            "target_mde_pct": self.target_mde_pct,
            "alpha": self.alpha,
            "spending": SPENDING,
            "looks": [*self.looks],
            "information": [round(t, 6) for t in self.fractions],
            "critical_z": [round(c, 6) for c in self.critical_z],
            "rule": (
                f"after each block from {self.min_blocks} on, stop once every non-root rung's MDE "
                f"(80% power, at that look's critical value) is <= {self.target_mde_pct:g}%{budget}; "
                f"else run all {self.max_blocks} blocks"
            ),
        }
        if self.budget_s:
            doc["budget_s"] = self.budget_s
        return doc

    @classmethod
    def from_dict(cls, doc: object) -> Design:
        """From plan.json's `adaptive` record, or the plan's rule (plan.build.adaptive_plan)."""
        rec = AdaptiveRecord.from_dict(doc, "plan.json: adaptive")
        return cls(
            rec.min_blocks,
            rec.max_blocks,
            float(rec.target_mde_pct),
            float(ALPHA if rec.alpha is None else rec.alpha),
            None if rec.budget_s is None else float(rec.budget_s),
        )


def over_budget(planned_at: float, budget_s: float, block_starts: Sequence[float], now: float) -> bool:
    """The time rule: one more block, as long as the longest finished one, would end more than
    `budget_s` seconds after the plan. A block lasts from its first run's start to the next
    block's (the last one's: to `now`, this look), so the task start-ups, the uploads and the look
    count. `planned_at`, `block_starts` (finished blocks, in order) and `now`: epoch seconds.
    No timed block yet: no call."""
    if not block_starts:
        return False
    edges = [*block_starts, now]
    return now + max(b - a for a, b in zip(edges, edges[1:])) > planned_at + budget_s


def target_reached(mde_pcts: Mapping[str, float | None], target_pct: float) -> bool:
    """The stopping decision: every judged rung has an MDE, and each is <= the target. A rung
    with no MDE (fewer than two ok runs on a side) keeps the ladder running."""
    return bool(mde_pcts) and all(m is not None and m <= target_pct for m in mde_pcts.values())


def worst(mde_pcts: Mapping[str, float | None]) -> float | None:
    """The largest MDE (None when some rung has none)."""
    values: Sequence[float | None] = list(mde_pcts.values())
    if not values or any(v is None for v in values):
        return None
    return max(v for v in values if v is not None)


# --- the ladder-wide rule over a ladder's comparisons ------------------------------------------------
#
# A ladder judges k comparisons (its non-root rungs that have an interval) at once. `per_rung` tests
# each at alpha; the other two control the false calls over the ladder (docs/statistics.md, "Calls
# over the whole ladder"). Each rung's evidence is its repeated p-value at the look where the ladder
# stopped: the smallest level a' whose critical value at that look (the design spending a', or for a
# fixed design the two-sided z_{1-a'/2}) its |t| clears. On the t scale "p <= a'" is
# "t.sf(|t|, df) <= Phi(-c(a'))", so the rule compares each rung's one-sided tail with the tails
# of a few critical values and never needs the p-value itself:
# - holm: step-down. Sort the tails; the j-th smallest (j = 1..k) is called while it clears the
#   level alpha / (k - j + 1). With the looks this is Maurer and Bretz's graphical approach with
#   equal weights on a complete graph: each rung's hypothesis gets alpha/k of spending, and a
#   called rung passes its share to the rest, so the next is tested at the look's boundary for
#   alpha / (k - 1), and so on. Closed testing gives the family-wise rate alpha whatever look the
#   ladder stops at (a false call needs a true null to cross its boundary at some look).
# - benjamini_hochberg: step-up. R is the largest j whose j-th smallest tail clears j * alpha / k;
#   the R smallest are called. The false discovery rate is alpha for independent or positively
#   dependent p-values at a fixed look; across the looks (a data-dependent stop) it is shown by
#   simulation (benchmarks/bench_calls.py).
# The MDE (shown, and used by the adaptive stop) is at the rule's first step, alpha / k: the
# smallest change a rung is called at with 80% power when no other rung is, which does not depend
# on the other rungs' effects. The interval a rung shows is the one at the level that decided the
# last call, so it excludes 0 exactly for the called rungs: holm alpha / (k - R) (alpha when all
# are called), benjamini_hochberg R * alpha / k (Benjamini and Yekutieli's false-coverage-rate
# interval; alpha / k when none is called), per_rung alpha.

CORRECTIONS = ("benjamini_hochberg", "holm", "per_rung")
DEFAULT_CORRECTION = "holm"  # why: docs/statistics.md, "Why Holm is the default"
CORRECTION_NAMES = {"benjamini_hochberg": "Benjamini–Hochberg", "holm": "Holm", "per_rung": "per rung"}


@dataclass(frozen=True)
class LadderCalls:
    """The rule's outcome over one ladder's comparisons."""

    rule: str
    comparisons: int  # k: the comparisons judged together
    called: frozenset[str]
    interval_level: float  # the two-sided level of every interval shown (alpha for per_rung)
    mde_level: float  # the level of the MDEs shown and of the adaptive stop


def mde_level(rule: str, comparisons: int, alpha: float = ALPHA) -> float:
    """The level of a rung's MDE under the rule: alpha / k, or alpha per rung."""
    if rule not in CORRECTIONS:
        raise ValueError(f"correction {rule!r} is not one of {', '.join(CORRECTIONS)}")
    return alpha if rule == "per_rung" else alpha / max(comparisons, 1)


def ladder_calls(
    tails: Mapping[str, float],
    tail_at: Callable[[float], float],
    rule: str,
    alpha: float = ALPHA,
) -> LadderCalls:
    """Which comparisons the rule calls. `tails`: each comparison's one-sided tail
    t.sf(|t|, df) at the reporting look; `tail_at(level)`: the one-sided tail Phi(-c) of that
    look's critical value c for a design spending `level` in all (decreasing levels give smaller
    tails). A comparison with a tail at or below tail_at(level) clears that level."""
    k = len(tails)
    order = sorted(tails, key=lambda r: (tails[r], r))
    if rule == "per_rung":
        called = [r for r in order if tails[r] <= tail_at(alpha)]
        return LadderCalls(rule, k, frozenset(called), alpha, alpha)
    if rule == "holm":
        n = 0
        while n < k and tails[order[n]] <= tail_at(alpha / (k - n)):
            n += 1
        level = alpha / (k - n) if n < k else alpha
    elif rule == "benjamini_hochberg":
        n = next((j for j in range(k, 0, -1) if tails[order[j - 1]] <= tail_at(j * alpha / k)), 0)
        level = max(n, 1) * alpha / max(k, 1)
    else:
        raise ValueError(f"correction {rule!r} is not one of {', '.join(CORRECTIONS)}")
    return LadderCalls(rule, k, frozenset(order[:n]), level, mde_level(rule, k, alpha))


@lru_cache(maxsize=4096)
def look_z(design: Design | None, blocks: int, final: bool, level: float) -> float:
    """The critical value on Z of the look after `blocks` blocks for a design that spends `level`
    in all: the fixed design's z_{1-level/2}; an adaptive one's boundary at that look (`final`: the
    look the time budget made the last, spending what the earlier looks left)."""
    if design is None:
        return float(stats.norm.isf(level / 2))
    at_level = Design(design.min_blocks, design.max_blocks, design.target_mde_pct, level, design.budget_s)
    return at_level.final_z_at(blocks) if final else at_level.z_at(blocks)
