"""The block model and its verdicts against independent computations: a least-squares fit in
another parameterisation, scipy's two-sample t interval, and the noncentral-t power of the MDE."""

from __future__ import annotations

from testkit.results import typed
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from testkit.simulation.noise import NoiseModel, blocked_schedule, fit_noise, simulate_runs
from traceladder.stats.model import (
    mad_factor,
    robust_iter_var,
    MEDIAN_EFFICIENCY,
    Run,
    clopper_pearson,
    compare_samples,
    fit_blocks,
    two_sample,
    verdict,
)


def _design(rng: np.random.Generator, blocks: int, rungs: int, drop: set[tuple[int, int]] = frozenset()) -> list[Run]:
    truth = rng.normal(0, 0.2, size=rungs)
    shift = rng.normal(0, 0.1, size=blocks)
    return [
        Run(b, f"r{t}", float(6 + truth[t] + shift[b] + rng.normal(0, 0.03)))
        for b in range(blocks)
        for t in range(rungs)
        if (b, t) not in drop
    ]


def _effects_coded(runs: list[Run], a: str, b: str) -> tuple[float, float, int]:
    """The same model with sum-to-zero effects, solved by lstsq: diff, se, df."""
    blocks = sorted({r.block for r in runs})
    treats = sorted({r.treatment for r in runs})
    x = np.zeros((len(runs), 1 + len(blocks) - 1 + len(treats) - 1))
    for i, r in enumerate(runs):
        x[i, 0] = 1
        bi, ti = blocks.index(r.block), treats.index(r.treatment)
        x[i, 1 : len(blocks)] = -1 if bi == len(blocks) - 1 else np.eye(len(blocks) - 1)[bi] if len(blocks) > 1 else []
        tcols = slice(len(blocks), len(blocks) + len(treats) - 1)
        x[i, tcols] = -1 if ti == len(treats) - 1 else np.eye(len(treats) - 1)[ti]
    y = np.array([r.y for r in runs])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    df = len(runs) - x.shape[1]
    mse = float(np.sum((y - x @ coef) ** 2) / df)

    def effect_vec(t: str) -> np.ndarray:
        v = np.zeros(x.shape[1])
        ti = treats.index(t)
        v[len(blocks) :] = -1 if ti == len(treats) - 1 else np.eye(len(treats) - 1)[ti]
        return v

    c = effect_vec(a) - effect_vec(b)
    return float(c @ coef), math.sqrt(mse * float(c @ np.linalg.inv(x.T @ x) @ c)), df


@pytest.mark.parametrize("drop", [set(), {(0, 1), (2, 3), (1, 1)}])
def test_block_fit_matches_an_independent_least_squares(drop: set[tuple[int, int]]) -> None:
    runs = _design(np.random.default_rng(3), blocks=4, rungs=5, drop=drop)
    fit = fit_blocks(runs)
    assert fit.df == len(runs) - (1 + 3 + 4) and fit.missing == len(drop)
    for a, b in (("r1", "r0"), ("r3", "r2"), ("r4", "r1")):
        diff, se, df = _effects_coded(runs, a, b)
        c = fit.contrast(a, b)
        assert c.diff == pytest.approx(diff) and c.se == pytest.approx(se) and c.df == df


def test_run_variance_is_floored_by_its_iterations() -> None:
    # Two rungs whose runs agree exactly after block effects: the residual is 0, the iterations are not.
    iters = (math.log(99.0), math.log(100.0), math.log(101.0), math.log(100.0))
    runs = [Run(b, t, 4.6 + 0.01 * b + (0.05 if t == "b" else 0.0), iters) for b in range(3) for t in ("a", "b")]
    fit = fit_blocks(runs)
    assert fit.mse == pytest.approx(0.0, abs=1e-20)
    # By hand: the logs' median is log(100); |deviations| sorted are 0, 0, 0.00995, 0.01005, so
    # MAD = (0 + 0.00995) / 2 ~ 0.0050, and the floor is (pi/2) (c_4 MAD)^2 / 4.
    logs = np.asarray(iters)
    mad = float(np.median(np.abs(logs - np.median(logs))))
    assert mad == pytest.approx(0.00498, abs=1e-4)
    iter_var = (mad_factor(4) * mad) ** 2
    assert fit.iter_var == pytest.approx(iter_var)
    assert fit.run_var == pytest.approx(MEDIAN_EFFICIENCY * iter_var / 4) and fit.run_var > 0
    assert fit.contrast("b", "a").se == pytest.approx(math.sqrt(2 * fit.run_var / 3))


def test_a_mean_figure_is_floored_by_the_sample_variance_of_its_iterations() -> None:
    # metric: cpu's run figure is the log of its iterations' mean: Var(mean) = sigma^2 / m with
    # sigma^2 every iteration's (a stretched one too), so by the delta method the floor is the
    # iterations' squared coefficient of variation / m: here 0.0195 / 4, where the variance of
    # the logs (0.0173) would be 12% low under this right skew.
    values = (99.0, 100.0, 101.0, 130.0)
    iters = tuple(math.log(v) for v in values)
    runs = [Run(b, t, 4.6 + 0.01 * b + (0.05 if t == "b" else 0.0), iters) for b in range(3) for t in ("a", "b")]
    fit = fit_blocks(runs, statistic="mean")
    by_hand = float(np.var(values, ddof=1)) / float(np.mean(values)) ** 2
    assert by_hand == pytest.approx(0.0195, abs=1e-4) and float(np.var(iters, ddof=1)) == pytest.approx(
        0.0173, abs=1e-4
    )
    assert fit.iter_var == pytest.approx(by_hand) and fit.run_var == pytest.approx(by_hand / 4)
    assert fit.run_var > fit_blocks(runs).run_var  # the median's floor ignores the stretched one
    with pytest.raises(ValueError, match="run statistic 'mode'"):
        fit_blocks(runs, statistic="mode")


@pytest.mark.parametrize("n", [3, 6, 12])
def test_mad_factor_makes_the_scaled_mad_unbiased_for_the_variance(n: int) -> None:
    # An independent draw (another seed than mad_factor's): E[(c_n MAD)^2] = sigma^2 = 4.
    x = np.random.default_rng(7).normal(0.0, 2.0, size=(60_000, n))
    mad = np.median(np.abs(x - np.median(x, axis=1, keepdims=True)), axis=1)
    assert float(np.mean((mad_factor(n) * mad) ** 2)) == pytest.approx(4.0, rel=0.03)
    assert mad_factor(400) == pytest.approx(1.4826, rel=0.01)  # the large-sample constant


def test_a_stretched_iteration_does_not_raise_the_floor() -> None:
    # The run's figure is the median, which one iteration stretched by another tenant leaves alone;
    # the floor is the median's variance, so it must barely move either: the MAD of six values
    # shifts by one rank (x2.2 here), where the sample variance grows x400.
    calm = tuple(math.log(v) for v in (100.0, 101.0, 99.0, 100.5, 99.5, 100.0))
    spiked = calm[:5] + (math.log(160.0),)
    assert robust_iter_var(spiked) < 2.5 * robust_iter_var(calm)
    assert float(np.var(spiked, ddof=1)) > 400 * float(np.var(calm, ddof=1))


def test_two_sample_matches_scipy_and_the_mde_has_its_power() -> None:
    a, b = [6.00, 6.05, 5.97, 6.02], [6.10, 6.08, 6.15]
    c = two_sample(a, b)
    ref = scipy_stats.ttest_ind(b, a).confidence_interval(0.95)
    assert c.interval() == pytest.approx((ref.low, ref.high))
    # At a true difference equal to the MDE, a two-sided 5% t test has ~80% power (noncentral t).
    delta = c.mde() / c.se
    t975 = scipy_stats.t.ppf(0.975, c.df)
    power = scipy_stats.nct.sf(t975, c.df, delta) + scipy_stats.nct.cdf(-t975, c.df, delta)
    assert 0.78 <= power <= 0.82
    pooled = two_sample(a, b, pooled_var=0.002, pooled_df=18)
    assert pooled.df == c.df + 18
    # The same comparison in ms, as week over week uses it.
    vs = compare_samples([math.exp(v) for v in a], [math.exp(v) for v in b])
    level = math.exp(np.mean(a))
    assert vs["verdict"] == "slower" and vs["delta"] == pytest.approx(level * math.expm1(c.diff))
    assert vs["ci95"] == pytest.approx([level * math.expm1(ref.low), level * math.expm1(ref.high)])


def test_verdict_directions_and_single_runs() -> None:
    runs = [
        Run(k, t, 6.0 + (0.2 if t == "slow" else 0.0) + 0.01 * ((k * 7 + len(t)) % 3))
        for k in range(3)
        for t in ("base", "slow")
    ]
    fit = fit_blocks(runs)
    step = verdict(fit.contrast("slow", "base"), 400.0, "step_ms", higher_is_better=False)
    assert step["verdict"] == "slower" and step["delta"] == pytest.approx(
        400.0 * math.expm1(fit.contrast("slow", "base").diff)
    )
    assert (
        verdict(fit.contrast("slow", "base"), 400.0, "tokens_per_sec_per_gpu", higher_is_better=True)["verdict"]
        == "faster"
    )
    one = fit_blocks([r for r in runs if r.block == 0 or r.treatment == "base"])
    single = verdict(one.contrast("slow", "base"), 400.0, "step_ms", False)
    assert single["verdict"] == "single_run" and single["mde_pct"] is None and single["ci95"] is None


def test_clopper_pearson_is_exact() -> None:
    lo, hi = clopper_pearson(5, 100)
    assert scipy_stats.binom.sf(4, 100, lo) == pytest.approx(0.025, rel=1e-6)
    assert scipy_stats.binom.cdf(5, 100, hi) == pytest.approx(0.025, rel=1e-6)


def test_noise_fit_recovers_a_known_model() -> None:
    rng = np.random.default_rng(11)
    truth = NoiseModel(
        level=6.5,
        phi=0.7,
        sigma_eta=0.05,
        sigma_white=0.03,
        position_effects=(0.0,) * 5,
        residuals=tuple(rng.normal(0, 0.04, size=600)),
        iterations=6,
    )
    runs = simulate_runs(truth, blocked_schedule(["x"], 400, seed=1), {}, rng)
    fit = fit_noise([np.exp(r.iter_logs).tolist() for r in runs], block_size=5)
    assert fit.phi == pytest.approx(0.7, abs=0.12)
    assert fit.sigma_eta == pytest.approx(0.05, rel=0.3)
    assert fit.run_sd == pytest.approx(truth.run_sd, rel=0.15)
    scaled = fit.scaled(0.015)
    assert scaled.run_sd == pytest.approx(0.015) and scaled.phi == fit.phi


# --- drift terms inside blocks ----------------------------------------------------------------------


def _drifting(rng: np.random.Generator, blocks: int, rungs: int, noise: float, slope: float) -> list[Run]:
    """Shuffled complete blocks whose runs slow down through each block (a quadratic in time,
    as the VM's speed moved within a demo's blocks), with known rung effects 0.05 apart."""
    runs, clock = [], 0.0
    for b in range(blocks):
        shift, start = rng.normal(0, 0.1), clock
        for t in rng.permutation(rungs):
            clock += 4.0 + rng.random()  # a run takes 4-5 s
            s = (clock - start) / (4.5 * rungs)  # 0 to about 1 through the block
            y = 6 + 0.05 * t + shift + slope * (s + 0.5 * s * s) + rng.normal(0, noise)
            runs.append(Run(b, f"r{t}", float(y), at=clock))
    return runs


def _raw_time_fit(runs: list[Run], degree: int, a: str, b: str) -> tuple[float, float, int]:
    """The drift model in another parameterisation: one-hot blocks and no intercept, raw times
    and their powers per block (uncentred), solved by lstsq: diff, se, df."""
    blocks = sorted({r.block for r in runs})
    treats = sorted({r.treatment for r in runs})
    width = len(blocks) + len(treats) - 1 + degree * len(blocks)
    x = np.zeros((len(runs), width))
    start = {blk: min(r.at or 0.0 for r in runs if r.block == blk) for blk in blocks}  # seconds into the block
    for i, r in enumerate(runs):
        bi, ti = blocks.index(r.block), treats.index(r.treatment)
        x[i, bi] = 1
        if ti:
            x[i, len(blocks) + ti - 1] = 1
        for k in range(degree):
            x[i, len(blocks) + len(treats) - 1 + degree * bi + k] = ((r.at or 0.0) - start[r.block]) ** (k + 1)
    y = np.array([r.y for r in runs])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    df = len(runs) - x.shape[1]
    mse = float(np.sum((y - x @ coef) ** 2) / df)
    c = np.zeros(width)
    for t, sign in ((a, 1.0), (b, -1.0)):
        if treats.index(t):
            c[len(blocks) + treats.index(t) - 1] += sign
    return float(c @ coef), math.sqrt(mse * float(c @ np.linalg.pinv(x.T @ x) @ c)), df


@pytest.mark.parametrize("degree", [1, 2])
def test_drift_fit_matches_an_independent_least_squares(degree: int) -> None:
    runs = _drifting(np.random.default_rng(11), blocks=4, rungs=6, noise=0.02, slope=0.2)
    fit = fit_blocks(runs, drift=degree)
    assert fit.drift_terms == degree * 4
    assert fit.df == len(runs) - (1 + 3 + 5) - degree * 4
    for a, b in (("r1", "r0"), ("r5", "r2")):
        diff, se, df = _raw_time_fit(runs, degree, a, b)
        c = fit.contrast(a, b)
        assert c.diff == pytest.approx(diff, abs=1e-9) and c.se == pytest.approx(se, rel=1e-6) and c.df == df


def test_drift_terms_remove_the_trend_that_blocks_take_as_noise() -> None:
    rng = np.random.default_rng(5)
    plain_sd, drift_sd, plain_err, drift_err = [], [], [], []
    for _ in range(40):
        runs = _drifting(rng, blocks=6, rungs=8, noise=0.02, slope=0.25)
        plain, drift = fit_blocks(runs), fit_blocks(runs, drift=2)
        plain_sd.append(math.sqrt(plain.mse or 0.0))
        drift_sd.append(math.sqrt(drift.mse or 0.0))
        plain_err.append(abs(plain.contrast("r7", "r0").diff - 0.35))
        drift_err.append(abs(drift.contrast("r7", "r0").diff - 0.35))
    # the quadratic trend is the model's own shape, so the residual falls to the noise (2%)
    assert float(np.median(drift_sd)) == pytest.approx(0.02, rel=0.2)
    assert float(np.median(plain_sd)) > 3 * float(np.median(drift_sd))
    assert float(np.mean(drift_err)) < float(np.mean(plain_err)) / 2
    # levels (what a delta is stated against) are at each block's average time: over the rungs of
    # complete blocks they average to the runs' mean, as without drift terms
    fit = fit_blocks(runs, drift=2)
    levels = [fit.level(f"r{t}") for t in range(8)]
    assert float(np.mean(levels)) == pytest.approx(float(np.mean([r.y for r in runs])))


def test_blocks_too_small_or_untimed_get_no_drift_terms() -> None:
    rng = np.random.default_rng(2)
    small = _drifting(rng, blocks=3, rungs=4, noise=0.02, slope=0.2)  # 4 runs: a quadratic needs 5
    assert fit_blocks(small, drift=2).drift_terms == 0
    assert fit_blocks(small, drift=1).drift_terms == 3
    untimed = [Run(r.block, r.treatment, r.y) for r in _drifting(rng, blocks=3, rungs=6, noise=0.02, slope=0.2)]
    fit, plain = fit_blocks(untimed, drift=2), fit_blocks(untimed)
    assert fit.drift_terms == 0 and fit.df == plain.df
    assert fit.contrast("r3", "r0").diff == pytest.approx(plain.contrast("r3", "r0").diff)


def test_the_plan_chooses_the_drift_terms_and_the_summary_model_names_them() -> None:
    from traceladder.stats.verdicts import rung_verdicts

    runs = _drifting(np.random.default_rng(8), blocks=3, rungs=6, noise=0.02, slope=0.2)
    specs, results = [], {}
    for r in runs:
        rung_id = f"{r.treatment}.none.r{r.block}"
        parent = None if r.treatment == "r0" else "r0"
        specs.append(
            {"rung_id": rung_id, "rung": r.treatment, "parent": parent, "block": r.block, "purpose": "measure"}
        )
        at = r.at or 0.0
        results[rung_id] = {"status": "ok", "step_ms": math.exp(r.y), "started_at": at - 2, "ended_at": at + 2}
        results[rung_id] |= {"rung_id": rung_id, "rung": r.treatment, "lens": "none", "repeat": r.block}
    for drift, terms in (("none", 0), ("linear", 3), ("quadratic", 6)):
        verdicts, model = rung_verdicts({"drift": drift, "specs": specs}, typed(results))
        assert model["step_ms"]["drift"] == drift and model["step_ms"]["drift_terms"] == terms
        if drift == "quadratic":  # r5 is 25% slower than r0, against 2% noise once the trend is out
            assert verdicts["r5"]["verdict"] == "slower"
    with pytest.raises(ValueError, match="plan.json drift: 'cubic'"):
        rung_verdicts({"drift": "cubic", "specs": specs}, typed(results))
