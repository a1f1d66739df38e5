"""The ladder's statistics, one model used everywhere (docs/statistics.md "Statistical model").

A randomised complete block design on the log of each run's figure: one effect per block, one per
rung, the residual pooled across every rung of the ladder. Iterations nest in runs: the run's
figure is the unit of analysis, and the within-run iteration spread only floors the run-level
variance (iterations are not independent samples of a rung). The floor follows the figure
(`RUN_STATISTICS`):
- the median of the iterations (wall time, as Primus's step time is read): its spread is measured
  robustly (a scaled MAD per run, `robust_iter_var`), since the median ignores an iteration that
  another tenant or a collector stretched, so the floor must too;
- the mean (`metric: cpu`: CPU time per step over the run): the iterations' squared coefficient
  of variation (the delta method's Var(ln mean) = CV^2 / m), since every iteration counts in a mean.
Missing cells (failed runs) are left out and the same model is fitted by least squares on the
cells that exist (an incomplete-block, intra-block analysis): contrasts stay unbiased and their
standard errors grow to match.

Also here: a two-sample comparison of run-level log figures (week over week reuses it), the
small-sample `Estimate` the table shows per rung. The execution-order noise model that tests and
benchmarks simulate with lives in `testkit/simulation/noise.py`, outside the package.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats as _scipy_stats

from traceladder.core.documents import JSONObject
from traceladder.stats.sequential import critical_t

CONFIDENCE = 0.95
POWER = 0.80
# Var(median of m iid normal values) ~ (pi/2) sigma^2 / m: the floor the iterations put under a run.
MEDIAN_EFFICIENCY = math.pi / 2
# A run's figure over its iterations → Var(figure) / (sigma^2 / m), the floor's factor.
RUN_STATISTICS = {"median": MEDIAN_EFFICIENCY, "mean": 1.0}
VERDICTS = ("faster", "slower", "no_change", "single_run")


@lru_cache(maxsize=256)
def mad_factor(n: int) -> float:
    """c_n with E[(c_n * MAD)^2] = sigma^2 for n iid normal values (MAD about the sample median):
    1.4826^2-ish for large n, larger for small n. Computed once per n by a seeded Monte Carlo of
    40,000 standard-normal samples, so anyone can redo it (test_stats_robust_floor checks it)."""
    if n < 2:
        raise ValueError(f"a MAD needs at least 2 values, got {n}")
    draws = np.random.default_rng(20261202 + n).standard_normal((40_000, n))
    mad = np.median(np.abs(draws - np.median(draws, axis=1, keepdims=True)), axis=1)
    return float(1.0 / math.sqrt(np.mean(mad**2)))


def robust_iter_var(iter_logs: Iterable[float]) -> float:
    """One run's iteration variance on the log scale from its MAD: (c_n * MAD)^2. Equal in
    expectation to the sample variance when iterations are normal; unmoved by a few stretched
    iterations, as the run's median is (Var(median) depends on the density at the centre)."""
    v = np.asarray(list(iter_logs), dtype=float)
    mad = float(np.median(np.abs(v - np.median(v))))
    return (mad_factor(len(v)) * mad) ** 2


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    return float(_scipy_stats.t.ppf(p, df))


# --- per-rung figures for the table ---------------------------------------------------------------


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


def estimate(values: Iterable[float | None]) -> Estimate | None:
    """Mean ± t(0.975, n−1)·s/√n of one rung's runs (the table's "step ms" column)."""
    clean = [v for v in values if v is not None and math.isfinite(v)]
    n = len(clean)
    if n == 0:
        return None
    mean = sum(clean) / n
    if n == 1:
        return Estimate(mean, None, 1)
    sd = math.sqrt(sum((v - mean) ** 2 for v in clean) / (n - 1))
    return Estimate(mean, t_quantile(0.5 + CONFIDENCE / 2, n - 1) * sd / math.sqrt(n), n)


def ratio(num: Estimate, den: Estimate) -> Estimate:
    """num/den with a first-order (delta-method) interval from the two relative half-widths."""
    value = num.mean / den.mean
    if num.half_width is None or den.half_width is None:
        return Estimate(value, None, min(num.n, den.n))
    rel = math.hypot(num.half_width / num.mean, den.half_width / den.mean)
    return Estimate(value, value * rel, min(num.n, den.n))


# --- the block model --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One run's cell in the design: `y` is the log of its figure; `iter_logs` the logs of its
    iterations (may be empty); `at` when it ran (seconds, or its place in the execution order),
    which the drift terms need."""

    block: Hashable
    treatment: str
    y: float
    iter_logs: tuple[float, ...] = ()
    at: float | None = None


# The ladder's `drift` → the degree of the time polynomial fitted inside each block.
DRIFT_DEGREES = {"none": 0, "linear": 1, "quadratic": 2}


@dataclass(frozen=True)
class Contrast:
    """treatment a minus treatment b on the log scale."""

    diff: float
    se: float | None  # None: not estimable with an interval (a side has < 2 runs, or df = 0)
    df: int
    n_a: int
    n_b: int

    def interval(self, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
        if self.se is None:
            return None
        h = t_quantile(0.5 + confidence / 2, self.df) * self.se
        return self.diff - h, self.diff + h

    def mde(self, power: float = POWER, confidence: float = CONFIDENCE) -> float | None:
        """Smallest true log difference a two-sided test at 1−confidence detects with `power`:
        (t(1−α/2, df) + t(power, df)) · se."""
        if self.se is None:
            return None
        return (t_quantile(0.5 + confidence / 2, self.df) + t_quantile(power, self.df)) * self.se

    def interval_at(self, critical_z: float) -> tuple[float, float] | None:
        """The interval at a sequential look (stats/sequential.py): diff +- t_crit * se, with
        t_crit the t(df) value whose upper tail is that of the look's critical value on Z."""
        if self.se is None:
            return None
        h = critical_t(critical_z, self.df) * self.se
        return self.diff - h, self.diff + h

    def mde_at(self, critical_z: float, power: float = POWER) -> float | None:
        """The MDE at a sequential look: (t_crit + t(power, df)) * se."""
        if self.se is None:
            return None
        return (critical_t(critical_z, self.df) + t_quantile(power, self.df)) * self.se


@dataclass(frozen=True)
class BlockFit:
    treatments: tuple[str, ...]
    blocks: tuple[Hashable, ...]
    coef: np.ndarray
    xtx: np.ndarray
    xtx_pinv: np.ndarray
    counts: dict[str, int]
    df: int
    mse: float | None  # pooled residual mean square of run values; None when df = 0
    iter_var: float | None  # pooled within-run variance of log iterations (iteration_var: per statistic)
    iter_df: int
    mean_iters: float
    missing: int  # cells of the complete design with no run
    drift_terms: int = 0  # time-polynomial columns fitted inside blocks (drift_columns)
    statistic: str = "median"  # the run's figure over its iterations (RUN_STATISTICS)

    @property
    def floor(self) -> float:
        """The run-level variance can be no smaller than what its own iterations put there."""
        if self.iter_var is None or self.mean_iters <= 0:
            return 0.0
        return RUN_STATISTICS[self.statistic] * self.iter_var / self.mean_iters

    @property
    def run_var(self) -> float | None:
        """Variance of one run's log figure used for every interval: max(pooled MSE, floor)."""
        if self.mse is None:
            return None
        return max(self.mse, self.floor)

    @property
    def between_run_var(self) -> float | None:
        """The run-to-run component beyond the iterations' (a moment estimate; may be 0)."""
        return None if self.mse is None else max(self.mse - self.floor, 0.0)

    def _row(self, block: Hashable, treatment: str) -> np.ndarray:
        """A cell's row at its block's mean time: the drift columns are centred within the block,
        so they are 0 there and a contrast or level compares rungs at the same moment."""
        row = _design_row(self.blocks, self.treatments, block, treatment)
        return np.concatenate([row, np.zeros(self.drift_terms)])

    def level(self, treatment: str) -> float:
        """LS mean of a treatment on the log scale (averaged over the blocks)."""
        rows = [self._row(b, treatment) for b in self.blocks]
        return float(np.mean(rows, axis=0) @ self.coef)

    def contrast(self, a: str, b: str) -> Contrast:
        n_a, n_b = self.counts.get(a, 0), self.counts.get(b, 0)
        if not n_a or not n_b:
            return Contrast(math.nan, None, self.df, n_a, n_b)
        c = self._row(self.blocks[0], a) - self._row(self.blocks[0], b)
        diff = float(c @ self.coef)
        estimable = np.allclose(self.xtx @ (self.xtx_pinv @ c), c, atol=1e-8)
        var = self.run_var
        if (
            n_a < 2 or n_b < 2 or not var or self.df < 1 or not estimable
        ):  # var 0: runs agree exactly, no interval claimed
            return Contrast(diff, None, self.df, n_a, n_b)
        return Contrast(diff, math.sqrt(var * float(c @ self.xtx_pinv @ c)), self.df, n_a, n_b)


def _design_row(
    blocks: tuple[Hashable, ...], treatments: tuple[str, ...], block: Hashable, treatment: str
) -> np.ndarray:
    """Intercept, block effects (first block the reference), treatment effects (first the reference)."""
    row = np.zeros(1 + len(blocks) - 1 + len(treatments) - 1)
    row[0] = 1.0
    bi, ti = blocks.index(block), treatments.index(treatment)
    if bi:
        row[bi] = 1.0
    if ti:
        row[len(blocks) - 1 + ti] = 1.0
    return row


def drift_columns(runs: list[Run], blocks: tuple[Hashable, ...], degree: int) -> np.ndarray:
    """The in-block drift terms: for each block with at least degree + 3 timed runs, its runs'
    times standardised within the block (s), and for degree 2 also s^2 less its block mean; zero
    outside the block. Each column has mean 0 over its block, so the block effect keeps the
    block's level and a polynomial of degree d costs d residual df per block. A block with fewer
    runs (or an untimed run) gets none: 2 runs left beside the polynomial still inform a contrast."""
    cols: list[np.ndarray] = []
    if degree <= 0:
        return np.zeros((len(runs), 0))
    for block in blocks:
        members = [i for i, r in enumerate(runs) if r.block == block]
        times = [runs[i].at for i in members]
        if len(members) < degree + 3 or any(t is None for t in times):
            continue
        at = np.asarray(times, dtype=float)
        spread = float(np.std(at))
        if spread <= 0:
            continue
        s = (at - at.mean()) / spread
        for power in range(1, degree + 1):
            col = np.zeros(len(runs))
            term = s**power
            col[members] = term - term.mean()
            cols.append(col)
    return np.column_stack(cols) if cols else np.zeros((len(runs), 0))


def iteration_var(iter_logs: Iterable[float], statistic: str = "median") -> float:
    """One run's iteration variance on the log scale, as its figure's floor needs it: robust
    (`robust_iter_var`) under a median; under a mean (the log of the iterations' arithmetic mean),
    the sample variance of the iterations over their mean, CV^2: Var(ln mean) ~ CV^2 / m by the
    delta method, which a right-skewed spread puts above the variance of the logs."""
    if statistic == "mean":
        x = np.exp(np.asarray(list(iter_logs), dtype=float))
        return float(np.var(x / x.mean(), ddof=1))
    return robust_iter_var(iter_logs)


def fit_blocks(runs: list[Run], drift: int = 0, statistic: str = "median") -> BlockFit:
    """Least-squares fit of y = μ + β_block + τ_treatment + e to the runs that exist; with
    `drift` = d > 0, plus a time polynomial of degree d inside each block (`drift_columns`):
    the machine's speed moving within a block, which blocks alone take as noise. `statistic`:
    what each run's y is over its iterations (RUN_STATISTICS), which sets the floor."""
    if statistic not in RUN_STATISTICS:
        raise ValueError(f"run statistic {statistic!r} is not one of {', '.join(RUN_STATISTICS)}")
    blocks = tuple(dict.fromkeys(r.block for r in runs))
    treatments = tuple(dict.fromkeys(r.treatment for r in runs))
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.treatment] = counts.get(r.treatment, 0) + 1
    if not runs:
        return BlockFit(
            (), (), np.zeros(0), np.zeros((0, 0)), np.zeros((0, 0)), {}, 0, None, None, 0, 0.0, 0, 0, statistic
        )
    base = np.array([_design_row(blocks, treatments, r.block, r.treatment) for r in runs])
    trend = drift_columns(runs, blocks, drift)
    x = np.hstack([base, trend])
    y = np.array([r.y for r in runs])
    xtx = x.T @ x
    xtx_pinv = np.linalg.pinv(xtx)
    coef = xtx_pinv @ x.T @ y
    rank = int(np.linalg.matrix_rank(x))
    df = len(runs) - rank
    rss = float(np.sum((y - x @ coef) ** 2))
    mse = rss / df if df > 0 else None
    iter_ss, iter_df, iters = 0.0, 0, []
    for r in runs:
        if len(r.iter_logs) > 1:
            n = len(r.iter_logs)
            iter_ss += (n - 1) * iteration_var(r.iter_logs, statistic)
            iter_df += n - 1
            iters.append(n)
    iter_var = iter_ss / iter_df if iter_df else None
    cells = {(r.block, r.treatment) for r in runs}
    return BlockFit(
        treatments,
        blocks,
        coef,
        xtx,
        xtx_pinv,
        counts,
        df,
        mse,
        iter_var,
        iter_df,
        float(np.mean(iters)) if iters else 0.0,
        len(blocks) * len(treatments) - len(cells),
        trend.shape[1],
        statistic,
    )


# --- verdicts ---------------------------------------------------------------------------------------


def verdict(
    contrast: Contrast, level_b: float, metric: str, higher_is_better: bool, critical_z: float | None = None
) -> JSONObject:
    """The summary's `vs_parent` for a contrast "rung minus parent" on the log scale; `level_b` is
    the parent's level (exp of its LS mean), so `delta` is in the metric's unit. `critical_z`: an
    adaptive ladder's critical value at the look it stopped (stats/sequential.py), else 95%."""
    if not math.isfinite(contrast.diff):
        return {
            "metric": metric,
            "delta": None,
            "ci95": None,
            "ci95_pct": None,
            "delta_pct": None,
            "verdict": "single_run",
            "mde_pct": None,
        }
    delta = level_b * math.expm1(contrast.diff)
    out: JSONObject = {
        "metric": metric,
        "delta": delta,
        "ci95": None,
        "ci95_pct": None,
        "delta_pct": 100 * math.expm1(contrast.diff),
        "verdict": "single_run",
        "mde_pct": None,
    }
    if critical_z is None:
        interval, mde = contrast.interval(), contrast.mde()
    else:
        interval, mde = contrast.interval_at(critical_z), contrast.mde_at(critical_z)
    if interval is None or mde is None:
        return out
    lo, hi = interval
    out["ci95"] = [level_b * math.expm1(lo), level_b * math.expm1(hi)]
    out["ci95_pct"] = [100 * math.expm1(lo), 100 * math.expm1(hi)]
    out["mde_pct"] = 100 * math.expm1(mde)
    if lo > 0 or hi < 0:
        up = lo > 0
        out["verdict"] = "faster" if up == higher_is_better else "slower"
    else:
        out["verdict"] = "no_change"
    return out


def is_call(v: JSONObject) -> bool:
    return v.get("verdict") in ("faster", "slower")


# --- two samples (week over week) -------------------------------------------------------------------


def two_sample(a: list[float], b: list[float], pooled_var: float | None = None, pooled_df: int = 0) -> Contrast:
    """b minus a on run-level log figures (pass logs). The variance is pooled from the two samples,
    and from `pooled_var` with `pooled_df` degrees of freedom where a ladder's block fit gives a
    better one (its df add)."""
    na, nb = len(a), len(b)
    if not na or not nb:
        return Contrast(math.nan, None, 0, nb, na)
    diff = float(np.mean(b) - np.mean(a))
    ss = float(np.sum((np.asarray(a) - np.mean(a)) ** 2) + np.sum((np.asarray(b) - np.mean(b)) ** 2))
    df = na + nb - 2
    if pooled_var is not None and pooled_df > 0:
        ss += pooled_var * pooled_df
        df += pooled_df
    if na < 2 or nb < 2 or df < 1 or ss <= 0:
        return Contrast(diff, None, df, nb, na)
    return Contrast(diff, math.sqrt(ss / df * (1 / na + 1 / nb)), df, nb, na)


def compare_samples(
    before: list[float],
    after: list[float],
    metric: str = "step_ms",
    pooled_var: float | None = None,
    pooled_df: int = 0,
) -> JSONObject:
    """`after` against `before` (run-level figures in the metric's unit, not logs) as a vs_parent-
    shaped verdict: delta in the unit against the geometric mean of `before`."""
    a = [math.log(v) for v in before if v and v > 0]
    b = [math.log(v) for v in after if v and v > 0]
    level = math.exp(float(np.mean(a))) if a else math.nan
    return verdict(two_sample(a, b, pooled_var, pooled_df), level, metric, metric == "tokens_per_sec_per_gpu")


def clopper_pearson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Exact binomial interval for k successes in n trials."""
    ci = _scipy_stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def log_or_none(value: float | None) -> float | None:
    return math.log(value) if value is not None and value > 0 and math.isfinite(value) else None


__all__ = [
    "DRIFT_DEGREES",
    "BlockFit",
    "Contrast",
    "Estimate",
    "Run",
    "clopper_pearson",
    "compare_samples",
    "estimate",
    "fit_blocks",
    "is_call",
    "ratio",
    "t_quantile",
    "two_sample",
    "verdict",
]
