"""The A/A test in execution order: the noise model fitted to real back-to-back proxy runs (slow
spells as AR(1) over consecutive runs, a position-in-block effect, resampled iteration noise) is
replayed on the shuffled block schedules plan.py makes for proxy-local, and the block model's
verdicts on rungs that differ in nothing must stay within the false-call bound."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources

import pytest

from testkit.simulation.noise import DATA_FILE, refit
from testkit.simulation.simulate import every_call, ladder_shape, one_per_ladder, simulate_verdicts
from testkit.simulation.noise import load_proxy_noise
from traceladder.stats.model import clopper_pearson

LADDERS = 6000  # at a true 5.2% (every rung's rate with drift terms), the upper bound sits near 5.8%
SCHEDULES = 200  # distinct run ids, so distinct shuffles, as real runs get
BOUND = 0.065  # upper Clopper-Pearson bound on the false-call rate (the target)


@pytest.fixture(scope="module")
def shape():
    return ladder_shape("proxy-local", schedules=SCHEDULES)


def _calls(verdicts: list[dict[str, dict[str, object]]]) -> tuple[int, int, int]:
    """(ladders with a call on one rung drawn at random per ladder, ladders, calls over every rung)."""
    k, n = one_per_ladder(verdicts, seed=1)
    return k, n, every_call(verdicts)[0]


def test_noise_model_is_the_fit_of_its_runs() -> None:
    doc = json.loads(resources.files("testkit.simulation").joinpath(DATA_FILE).read_text())
    assert len(doc["runs"]) >= 40 and doc["how"] and doc["command"]
    stored, again = load_proxy_noise(), refit(doc)
    assert again.phi == pytest.approx(stored.phi, abs=1e-4)
    assert again.sigma_eta == pytest.approx(stored.sigma_eta, rel=1e-3, abs=1e-6)
    assert again.run_sd == pytest.approx(stored.run_sd, rel=1e-3)
    assert stored.run_sd > 0 and len(stored.position_effects) == doc["block_size"]


@pytest.mark.slow
def test_aa_false_call_rate_in_execution_order(shape) -> None:
    model = load_proxy_noise()
    verdicts = simulate_verdicts(model, shape, LADDERS, seed=20261130)
    k, n, every = _calls(verdicts)
    lo, hi = clopper_pearson(k, n)
    pairs = len(shape.pairs)
    print(
        f"A/A ({'plan.py' if shape.from_plan else 'fallback'} schedules): {k}/{n} ladders call their drawn rung "
        f"(95% CI {lo:.3f}-{hi:.3f}); every rung: {every}/{n * pairs}"
    )
    assert hi <= BOUND
    assert every / (n * pairs) <= BOUND  # the other rungs too (not independent, so no interval)
    assert k > 0  # a test that can never call anything would pass this bound trivially


@pytest.mark.slow
def test_aa_bound_holds_with_failed_runs_and_three_times_the_position_effect(shape) -> None:
    model = load_proxy_noise()
    harsher = replace(model, position_effects=tuple(3 * p for p in model.position_effects))
    # 4,000 ladders: under this harsher model the rate is about 5.6% (90,000 simulated calls), so
    # 2,000 would put the interval's upper end at the bound by chance alone
    verdicts = simulate_verdicts(harsher, shape, 4000, seed=7, drop=0.1)
    k, n, _ = _calls(verdicts)
    assert clopper_pearson(k, n)[1] <= BOUND


def test_the_model_is_not_trivial_rung_after_rung_order_breaks_the_bound() -> None:
    """The same noise on the old schedule (each rung's repeats back to back) makes the pooled
    analysis call A/A differences far too often: the slow spells are what blocks are for."""
    from testkit.simulation.noise import Slot
    from testkit.simulation.simulate import LadderShape

    model = load_proxy_noise()
    shape = ladder_shape("proxy-local", schedules=1)
    rungs = list(dict.fromkeys(s.treatment for s in shape.schedules[0]))
    back_to_back = tuple(Slot(k, i, r) for i, r in enumerate(rungs) for k in range(3))
    verdicts = simulate_verdicts(model, LadderShape(shape.pairs, (back_to_back,), False), 400, seed=3)
    k, n, every = _calls(verdicts)
    assert every / (n * len(shape.pairs)) > BOUND
