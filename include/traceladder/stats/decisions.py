"""The triage's sequential decisions (docs/statistics-adaptive.md, "Confirming a suspect" and
"Bisecting by size"): interleaved A/B blocks, B the candidate and A the good end, B minus A in the
block model of stats/model.py on the log scale (the caller fits it: triage/confirm.py `look_at`),
looked at after each block.

Two rules share the looks, each judging an interval against the suspect's log size s (its sign is
its direction):
- `confirm` (is the change real?): `confirmed` when the interval excludes 0 on the suspect's side
  (efficacy); `not reproduced` when it lies short of FUTILITY_FRACTION * s (futility, non-binding:
  the boundaries ignore it, so it can only lower the false-confirmation rate);
- `size` (which end does a bisection candidate look like?): Wald's sequential probability ratio
  test of "no change" (0) against "the change" (s), on B minus A's normal likelihood. Its log
  likelihood ratio at a look is LLR = s (diff - s/2) / se^2 (diff and se from the block model, so
  se^2 = Var(diff) shrinks as 1/n and LLR grows as n): `confirmed` (like the bad end) once
  LLR >= log((1 - beta) / alpha), `not reproduced` (like the good end) once LLR <= log(beta / (1 - alpha)),
  alpha = beta = SIZE_ERROR. The line between the two is s/2, halfway between the ends; a
  candidate that carries only part of s (one of two culprits) goes to the half it lies in, more
  slowly the nearer it lies to s/2. Expected blocks at a true 0 or s: about
  log(99) * 2 Var_block / s^2 (Wald), 4 to 5 for +15% at the proxy's CPU-time noise.
Neither rule decides at the last look: `insufficient`, with `blocks_to_decide`'s estimate.

The looks: after blocks n = CONFIRM_MIN_BLOCKS..N (N the per-step budget), information n / N, the
two-sided alpha spent by Hwang-Shih-DeCani's function with gamma -4, alpha (1 - e^(4t)) / (1 - e^4)
(stats/sequential.py `boundaries`): z = 3.28 at block 3 of 16, against O'Brien-Fleming's 5.05.

The variance: the block model's run variance v on d df, from the confirm's own runs. With the
rung's history (the ladder runs' block-model residual: v_h on d_h df), the pooled
(d v + d_h v_h) / (d + d_h) on d + d_h df is used when v <= v_h, else v on d df: the look never
claims less noise than the confirm's own runs show, and borrows the history's df when it is at
least as noisy. The interval is diff +- t_crit * se, t_crit the t(df) quantile with the tail of
the look's z (`critical_t`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from traceladder.core.documents import JSONObject, TriageLook
from traceladder.stats.sequential import boundaries, critical_t

CONFIRMED, NOT_REPRODUCED, INSUFFICIENT = "confirmed", "not reproduced", "insufficient"
CONFIRM_VERDICTS = (CONFIRMED, NOT_REPRODUCED, INSUFFICIENT)
CONFIRM_ALPHA = 0.05  # two-sided; a confirmation is one side of it
CONFIRM_MIN_BLOCKS = 3  # the first look: 2 df from the block model's residual
FUTILITY_FRACTION = 0.5  # "not reproduced": the interval lies short of this share of the suspect's size
SIZE_FRACTION = 0.5  # a bisection step's line: s/2
SIZE_ERROR = 0.01  # the size rule's alpha and beta: each wrong-way call's rate at a true 0 or s
SIZE_BOUND = math.log((1 - SIZE_ERROR) / SIZE_ERROR)  # Wald's bound on the LLR: log 99 = 4.60
CONFIRM_SPENDING = "hsd"
RULES = ("confirm", "size")


@dataclass(frozen=True)
class NoiseHistory:
    """The rung history's run-to-run variance of log step time and its df (the block model's residual
    over the ladder runs behind the suspect)."""

    run_var: float
    df: int

    def as_dict(self) -> JSONObject:
        return {"run_sd_pct": 100 * math.sqrt(self.run_var), "df": self.df}


def pooled_variance(run_var: float | None, df: int, history: NoiseHistory | None) -> tuple[float | None, int, str]:
    """(variance, df, source) a look uses: its own, or pooled with the history's (module doc)."""
    if history is None or history.df < 1 or run_var is None or run_var > history.run_var:
        return run_var, df, "confirm"
    total = df + history.df
    return (df * run_var + history.df * history.run_var) / total, total, "pooled with history"


@dataclass(frozen=True)
class ConfirmLook:
    """One look after `blocks` A/B blocks: B minus A on the log scale, its interval at the look's
    critical value (None: not estimable yet), and the stop it makes (None: go on)."""

    blocks: int
    diff: float
    se: float | None
    df: int
    critical_z: float
    interval: tuple[float, float] | None
    stop: str | None
    rule: str = "confirm"
    variance: str = "confirm"  # where the variance came from (pooled_variance's source)
    llr: float | None = None  # the size rule's log likelihood ratio

    def as_look(self) -> TriageLook:
        """The look as triage.json records it: B minus A and its interval in %."""

        def pct(x: float) -> float:
            return 100.0 * math.expm1(x)

        return TriageLook(
            blocks=self.blocks,
            delta_pct=pct(self.diff) if math.isfinite(self.diff) else None,
            interval_pct=[pct(self.interval[0]), pct(self.interval[1])] if self.interval else None,
            df=self.df,
            critical_z=self.critical_z,
            stop=self.stop,
            rule=self.rule,
            variance=self.variance,
            llr=round(self.llr, 4) if self.llr is not None else None,
        )


def confirm_critical_z(blocks: int, max_blocks: int, alpha: float = CONFIRM_ALPHA, final: bool = False) -> float:
    """The critical value of a look after `blocks` blocks: Hwang-Shih-DeCani spending over looks
    CONFIRM_MIN_BLOCKS..max_blocks at information n / max_blocks. `final`: no block follows (the
    time or triage budget made this look the last one), so it spends the alpha left."""
    first = min(CONFIRM_MIN_BLOCKS, max_blocks)
    looks = tuple(n / max_blocks for n in range(first, max(blocks, first) + 1))
    return boundaries(looks, alpha, last_is_final=final or blocks >= max_blocks, spending=CONFIRM_SPENDING)[-1]


def _oriented(interval: tuple[float, float], suspect_log: float) -> tuple[float, float]:
    """The interval with the suspect's direction made positive."""
    lo, hi = interval
    return (lo, hi) if suspect_log >= 0 else (-hi, -lo)


def confirm_stop(interval: tuple[float, float] | None, suspect_log: float, last: bool) -> str | None:
    """The `confirm` rule's stop (module doc)."""
    if interval is not None:
        low, high = _oriented(interval, suspect_log)
        if low > 0:
            return CONFIRMED
        if high < FUTILITY_FRACTION * abs(suspect_log):
            return NOT_REPRODUCED
    return INSUFFICIENT if last else None


def size_llr(diff: float, se: float, suspect_log: float) -> float:
    """The size rule's log likelihood ratio of "the change s" against "no change": s (diff - s/2) / se^2
    (the sign of s orients it, so a faster suspect works alike)."""
    return suspect_log * (diff - SIZE_FRACTION * suspect_log) / se**2


def size_stop(llr: float | None, last: bool) -> str | None:
    """The `size` rule's stop from a look's LLR (None: not estimable yet)."""
    if llr is not None:
        if llr >= SIZE_BOUND:
            return CONFIRMED
        if llr <= -SIZE_BOUND:
            return NOT_REPRODUCED
    return INSUFFICIENT if last else None


def confirm_look(
    diff: float,
    se: float | None,
    df: int,
    blocks: int,
    suspect_log: float,
    max_blocks: int,
    alpha: float = CONFIRM_ALPHA,
    final: bool = False,
    rule: str = "confirm",
    variance: str = "confirm",
) -> ConfirmLook:
    """A look after `blocks` A/B blocks from the B minus A contrast (`diff`, `se`, `df`, the
    variance already pooled by the caller): its interval at the look's critical value and the stop
    by `rule`. `final`: no block follows (a budget ran out)."""
    if rule not in RULES:
        raise ValueError(f"decision rule {rule!r} is not one of {', '.join(RULES)}")
    last = final or blocks >= max_blocks
    z = confirm_critical_z(blocks, max_blocks, alpha, final=last)
    interval = llr = None
    if blocks >= CONFIRM_MIN_BLOCKS and se is not None and df >= 1:
        half = critical_t(z, df) * se
        interval = (diff - half, diff + half)
        llr = size_llr(diff, se, suspect_log) if rule == "size" and se > 0 else None
    stop = size_stop(llr, last) if rule == "size" else confirm_stop(interval, suspect_log, last)
    return ConfirmLook(blocks, diff, se, df, z, interval, stop, rule, variance, llr)


def blocks_to_decide(look: ConfirmLook, suspect_log: float) -> int | None:
    """About how many more blocks an undecided look needed. `size`: the LLR grows as the blocks
    (se^2 shrinks as 1/n), so n |LLR_bound / LLR| - n. `confirm`: the half-width shrinks as
    1/sqrt(n), so n (half-width / distance)^2 - n, the distance from the estimate to the line it is
    farther from (0 for efficacy, FUTILITY_FRACTION * s for futility). None: no estimate to scale."""
    if look.rule == "size":
        if not look.llr:
            return None
        return max(1, math.ceil(look.blocks * SIZE_BOUND / abs(look.llr) - look.blocks))
    if look.interval is None:
        return None
    low, high = _oriented(look.interval, suspect_log)
    estimate = (low + high) / 2
    distance = max(estimate, FUTILITY_FRACTION * abs(suspect_log) - estimate)
    if distance <= 0:
        return None
    half = (high - low) / 2
    return max(1, math.ceil(look.blocks * (half / distance) ** 2 - look.blocks))


@dataclass(frozen=True)
class Share:
    """The share of the confirmed change s that one candidate pair carries: the pair's B minus A
    over s, with its interval over s (s taken as known: the confirm's estimate)."""

    share: float
    low: float
    high: float

    @classmethod
    def of(cls, diff: float, interval: tuple[float, float], total_log: float) -> Share:
        lo, hi = sorted((interval[0] / total_log, interval[1] / total_log))
        return cls(diff / total_log, lo, hi)

    def as_dict(self) -> JSONObject:
        return {"share_pct": 100 * self.share, "share_interval_pct": [100 * self.low, 100 * self.high]}
