"""Adaptive repeats (issue 25, item 4): the ladder field, the plan, the alpha-spending critical
values checked by hand and against published tables, the stopping decision on hand-made runs,
the summary's account of the stop, and a seeded simulation of the false-call rate."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from testkit.results import typed
from traceladder.config import LadderConfigError, load_ladder
from traceladder.config.loader import CONFIG_DIR
from traceladder.core.env_vars import MAX_REPEATS
from traceladder.plan.build import adaptive_plan, build_plan
from traceladder.plan.grid import check_blocks, host_counts, weekly_grid
from traceladder.stats.sequential import Design, boundaries, critical_t, obf_spending, over_budget, target_reached
from traceladder.stats.verdicts import apply_stop, measure_block_starts, sequential_look, sequential_verdicts
from traceladder.summary.build import build_summary
from traceladder.summary.render.html import to_html
from traceladder.summary.render.markdown import to_markdown

from tests.unit.config.test_validate import MINIMAL, write

ADAPTIVE = {"min": 3, "max": 6, "target_mde_pct": 5}


def _sf(x: float) -> float:
    """1 - Phi(x) by the error function: no scipy in the hand checks."""
    return 0.5 * math.erfc(x / math.sqrt(2))


# --- the ladder field ---------------------------------------------------------------------------


def test_repeats_takes_a_number_or_an_adaptive_mapping(tmp_path: Path) -> None:
    data = copy.deepcopy(MINIMAL)
    data["repeats"] = 4
    fixed = load_ladder(write(tmp_path, data)).ladder
    assert (fixed.repeats, fixed.adaptive, fixed.planned_blocks, fixed.lens_repeats) == (4, None, 4, 4)
    data["repeats"] = ADAPTIVE
    ladder = load_ladder(write(tmp_path, data)).ladder
    assert ladder.adaptive is not None and (ladder.adaptive.min, ladder.adaptive.max) == (3, 6)
    assert (ladder.planned_blocks, ladder.lens_repeats, ladder.repeats_label) == (6, 3, "3-6 adaptive")
    data["repeats"] = {**ADAPTIVE, "budget_s": 450}
    assert load_ladder(write(tmp_path, data)).ladder.repeats_label == "3-6 adaptive, 450 s budget"


@pytest.mark.parametrize(
    ("repeats", "field", "reason"),
    [
        ({"min": 1, "max": 4, "target_mde_pct": 5}, "repeats.min", "greater than or equal to 2"),
        ({"min": 4, "max": 3, "target_mde_pct": 5}, "repeats", "max (3) must be at least min (4)"),
        (
            {"min": 3, "max": MAX_REPEATS + 1, "target_mde_pct": 5},
            "repeats.max",
            f"less than or equal to {MAX_REPEATS}",
        ),
        ({"min": 3, "max": 5, "target_mde_pct": 0}, "repeats.target_mde_pct", "greater than 0"),
        ({"min": 3, "max": 5, "target_mde_pct": 100}, "repeats.target_mde_pct", "less than 100"),
        ({"min": 3, "max": 5}, "repeats.target_mde_pct", "Field required"),
        ({"min": 3, "max": 5, "target_mde_pct": 5, "maximum": 9}, "repeats.maximum", "unknown key"),
        ({"min": 3, "max": 5, "target_mde_pct": 5, "budget_s": 0}, "repeats.budget_s", "greater than 0"),
        ({"min": 3, "max": 5, "target_mde_pct": 5, "budget_s": "soon"}, "repeats.budget_s", "valid number"),
        (0, "repeats", "greater than or equal to 1"),
        ("three", "repeats", "valid integer"),
    ],
)
def test_bad_repeats_give_one_line_naming_the_field(tmp_path: Path, repeats: Any, field: str, reason: str) -> None:
    data = copy.deepcopy(MINIMAL)
    data["repeats"] = repeats
    path = write(tmp_path, data)
    with pytest.raises(LadderConfigError) as info:
        load_ladder(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {field}: ") and reason in message and "\n" not in message


# --- the plan -----------------------------------------------------------------------------------


def _adaptive_seed_ladder(tmp_path: Path):
    """The seed ladder with adaptive repeats (its rungs, lenses and every-rung block as they are)."""
    path = tmp_path / "adaptive.yaml"
    body = {"extends": str(CONFIG_DIR / "ladders" / "proxy-local.yaml"), "ladder": "adaptive", "repeats": ADAPTIVE}
    path.write_text(json.dumps(body))  # JSON is YAML
    return load_ladder(path)


def test_adaptive_ladder_plans_max_measure_blocks_then_min_lens_blocks(tmp_path: Path) -> None:
    loaded = _adaptive_seed_ladder(tmp_path)
    specs = build_plan(loaded, seed=3)
    measure = sorted({s.block for s in specs if s.purpose == "measure"})
    assert measure == list(range(6))  # max measure blocks, first in the run order
    assert len({s.block for s in specs if s.purpose == "lens"}) == 3  # lens blocks: min
    assert weekly_grid(loaded)["localhost"] == [10] * 6 + [3] * 3 + [10]
    assert check_blocks([loaded]) == [3, 4, 5]  # a look before each block the rule may skip
    # `extends` deep-merges the mapping: proxy-local's time budget stays
    assert adaptive_plan(loaded) == {"min_blocks": 3, "max_blocks": 6, "target_mde_pct": 5.0, "budget_s": 450.0}
    # a number from the trigger form keeps its meaning: that many blocks, no stopping rule
    assert adaptive_plan(loaded, repeats=2) is None
    assert max(s.block for s in build_plan(loaded, repeats=2, seed=3) if s.purpose == "measure") == 1
    # a profiling lens makes no verdicts: min blocks, no rule
    assert adaptive_plan(loaded, lens="torch_rank0") is None
    assert len(host_counts(build_plan(loaded, lens="torch_rank0", seed=3))["localhost"]) == 3


def test_cli_plan_states_the_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from traceladder.cli.main import main

    _adaptive_seed_ladder(tmp_path)
    assert main(["plan", str(tmp_path / "adaptive.yaml")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    critical = ", ".join(f"{c:.3f}" for c in Design(3, 6, 5.0).critical_z)
    assert last.startswith("adaptive repeats: after each block from 3 on, stop once every non-root rung's MDE")
    assert last.endswith(f"else run all 6 blocks (critical z by look: {critical})")


# --- the critical values ------------------------------------------------------------------------


def test_spending_function_by_hand() -> None:
    z = 2.241403  # z_{1 - 0.05/4}, from a normal table
    for t in (0.25, 0.5, 0.6, 1.0):
        assert obf_spending(t) == pytest.approx(4 * _sf(z / math.sqrt(t)), rel=1e-5)
    assert obf_spending(1.0) == pytest.approx(0.05, abs=1e-9)
    assert obf_spending(0.0) == 0.0


def test_boundaries_match_the_published_table() -> None:
    """Five equally spaced looks, two-sided 5%: Lan-DeMets O'Brien-Fleming-type as gsDesign's
    sfLDOF gives it (one-sided alpha 0.025, test.type 2) and Jennison & Turnbull tabulate."""
    got = boundaries(tuple(k / 5 for k in range(1, 6)))
    assert got == pytest.approx((4.8769, 3.3569, 2.6803, 2.2898, 2.0310), abs=5e-4)


def test_first_two_looks_by_hand() -> None:
    design = Design(3, 5, 5.0)  # looks after 3, 4, 5 blocks: t = 0.6, 0.8, 1
    c1, c2, _ = design.critical_z
    spent1, spent2 = obf_spending(0.6), obf_spending(0.8)
    # look 1 spends a(0.6) by itself: c1 = Phi^-1(1 - a(0.6) / 2)
    assert 2 * _sf(c1) == pytest.approx(spent1, rel=1e-9)
    # look 2: P(|Z1| < c1, |Z2| >= c2) = a(0.8) - a(0.6), with corr(Z1, Z2) = sqrt(0.6 / 0.8)
    rho = math.sqrt(0.6 / 0.8)
    both = stats.multivariate_normal(mean=[0, 0], cov=[[1, rho], [rho, 1]])

    def box(a: float, b: float) -> float:  # P(|Z1| < a, |Z2| < b)
        return float(both.cdf([a, b]) - both.cdf([-a, b]) - both.cdf([a, -b]) + both.cdf([-a, -b]))

    crossed_second = (1 - 2 * _sf(c1)) - box(c1, c2)
    assert crossed_second == pytest.approx(spent2 - spent1, abs=2e-5)


def test_any_look_crosses_with_probability_alpha() -> None:
    """Brownian motion at the looks of min 3, max 8: |Z| crosses some look's value 5% of the time."""
    design = Design(3, 8, 5.0)
    rng = np.random.default_rng(7)
    t = np.array(design.fractions)
    b = np.cumsum(rng.normal(size=(200_000, len(t))) * np.sqrt(np.diff(t, prepend=0.0)), axis=1)
    crossed = (np.abs(b / np.sqrt(t)) >= np.array(design.critical_z)).any(axis=1).mean()
    assert crossed == pytest.approx(0.05, abs=0.0025)
    assert list(design.critical_z) == sorted(design.critical_z, reverse=True)  # strict early, near 1.96 at the end


def _crossing_rate(fractions: np.ndarray, critical: np.ndarray, seed: int = 7) -> float:
    """How often |Z| crosses some look's critical value, Brownian motion at those fractions."""
    rng = np.random.default_rng(seed)
    b = np.cumsum(rng.normal(size=(200_000, len(fractions))) * np.sqrt(np.diff(fractions, prepend=0.0)), axis=1)
    return float((np.abs(b / np.sqrt(fractions)) >= critical).any(axis=1).mean())


def test_a_look_the_time_budget_ends_spends_the_alpha_left() -> None:
    """Stopped by the clock after 5 of 8 planned blocks: looks 3 and 4 keep their values, look 5
    spends the rest, so some look still crosses 5% of the time, not the 0.9% that look 5's own
    value would give; at max it is the planned final look."""
    design = Design(3, 8, 5.0, budget_s=400.0)
    assert design.final_z_at(8) == design.z_at(8)
    final = design.final_z_at(5)
    assert 1.96 < final < design.z_at(5)
    t = np.array([3 / 8, 4 / 8, 5 / 8])
    early = np.array(design.critical_z[:2])
    assert _crossing_rate(t, np.append(early, final)) == pytest.approx(0.05, abs=0.0025)
    assert _crossing_rate(t, np.append(early, design.z_at(5))) < 0.012
    # a look before min (runs that never came) is min's look made final: one look, all of alpha
    assert design.final_z_at(2) == pytest.approx(1.959964, abs=1e-5)
    doc = design.as_dict()
    assert doc["budget_s"] == 400.0 and "more than 400 s after the plan" in str(doc["rule"])
    assert Design.from_dict(doc) == design and "budget_s" not in Design(3, 8, 5.0).as_dict()


def test_time_budget_rule_by_hand() -> None:
    """Another block as long as the longest so far (start to next start; the last to now) must end
    by the budget; no timed block yet, no call."""
    starts = [1010.0, 1050.0, 1093.0]  # blocks of 40 and 43 s, the third running 40 s to `now`
    assert not over_budget(1000.0, 450.0, starts, now=1133.0)  # 1133 + 43 = 1176 <= 1450
    assert not over_budget(1000.0, 176.0, starts, now=1133.0)  # ends at the budget exactly: goes on
    assert over_budget(1000.0, 175.5, starts, now=1133.0)
    assert over_budget(1000.0, 450.0, [1010.0, 1050.0], now=1400.0)  # the last block, 350 s to now
    assert not over_budget(1000.0, 1.0, [], now=5000.0)


def test_t_scale_keeps_the_tail_and_design_record() -> None:
    assert critical_t(1.959964, 18) == pytest.approx(stats.t.ppf(0.975, 18), rel=1e-5)
    assert critical_t(2.5, 10**7) == pytest.approx(2.5, abs=1e-4)
    assert critical_t(11.0, 9) < math.inf  # a first look far out stays finite on the t scale
    design = Design(3, 5, 4.0)
    assert design.z_at(2) == design.critical_z[0] and design.z_at(9) == design.critical_z[-1]
    doc = design.as_dict()
    assert doc["looks"] == [3, 4, 5] and doc["information"] == [0.6, 0.8, 1.0] and doc["spending"] == "lan_demets_obf"
    assert Design.from_dict(doc) == design


# --- the stopping decision on hand-made runs ----------------------------------------------------

# Two rungs, four planned blocks (min 2): `fast` runs 10% under `base`, with these offsets per block.
OFFSETS = [0.02, -0.01, 0.03, -0.02]


def _hand_made(target: float) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    specs, results = [], {}
    for block, offset in enumerate(OFFSETS):
        for position, (rung, parent, ms) in enumerate(
            (("base", None, 100.0), ("fast", "base", 90.0 * math.exp(offset)))
        ):
            rung_id = f"{rung}.none.r{block}"
            specs.append(
                {
                    "rung_id": rung_id,
                    "rung": rung,
                    "parent": parent,
                    "switch": "fusions" if parent else None,
                    "value": True if parent else None,
                    "lens": "none",
                    "purpose": "measure",
                    "block": block,
                    "position": position,
                    "repeat": block,
                }
            )
            results[rung_id] = {
                "rung_id": rung_id,
                "rung": rung,
                "lens": "none",
                "repeat": block,
                "status": "ok",
                "step_ms": ms,
                "tokens_per_sec_per_gpu": 1000 / ms,
                "peak_mem_gb": 1.0,
                "traces": [],
            }
    design = Design(2, 4, target).as_dict()
    return {"ladder": "hand", "run_id": "r1", "metric": "wall", "adaptive": design, "specs": specs}, results


def _hand_mde(blocks: int, design: Design) -> float:
    """Two rungs in complete blocks: se = sd(d) / sqrt(n) of the per-block log differences d."""
    d = np.log(0.9) + np.array(OFFSETS[:blocks])
    df = blocks - 1
    t_crit = stats.t.isf(_sf(design.z_at(blocks)), df)
    return 100 * math.expm1((t_crit + stats.t.ppf(0.8, df)) * d.std(ddof=1) / math.sqrt(blocks))


def test_stopping_decision_on_hand_made_runs() -> None:
    plan, results = _hand_made(target=11.0)
    design = Design(2, 4, 11.0)
    looks = {n: sequential_look(plan, typed(results), n) for n in (2, 3)}
    for n, look in looks.items():
        assert look["mde_pct"]["fast"] == pytest.approx(_hand_mde(n, design), rel=1e-6)
    # 1 df at two blocks: an MDE in the thousands of %; at three blocks about 10.6% <= 11%
    assert not looks[2]["target_reached"] and looks[3]["target_reached"]
    assert target_reached({"a": 4.0, "b": 5.0}, 5.0) and not target_reached({"a": 4.0, "b": None}, 5.0)
    assert not target_reached({}, 5.0)


def test_summary_after_a_stop_and_after_max() -> None:
    plan, results = _hand_made(target=11.0)
    stopped = apply_stop(plan, sequential_look(plan, typed(results), 3))
    assert {s["block"] for s in stopped["specs"]} == {0, 1, 2}  # the skipped block is no run at all
    ran = {k: v for k, v in results.items() if not k.endswith("r3")}
    summary = build_summary(stopped, typed(ran), {})
    repeats = summary["repeats"]
    assert (repeats["blocks_run"], repeats["blocks_planned"], repeats["stopped"]) == (3, 4, "target_reached")
    assert summary["failed_rungs"] == []
    fast = summary["rungs"][1]["vs_parent"]
    assert fast["mde_pct"] == pytest.approx(_hand_mde(3, Design(2, 4, 11.0)), rel=1e-6)
    assert fast["verdict"] == "faster"
    text = to_markdown(summary)
    assert "Adaptive repeats: 3 of 4 planned blocks ran: stopped once every rung's MDE was 11% or less" in text
    assert "3 of 4 planned blocks ran" in to_html(summary, {})

    plan, results = _hand_made(target=1.0)  # never reached: all four blocks
    verdicts, _, repeats, _ = sequential_verdicts(plan, typed(results))
    assert repeats is not None and (repeats["blocks_run"], repeats["stopped"]) == (4, "max_reached")
    assert repeats["sentence"] == "4 of 4 planned blocks ran, the maximum, some MDE still above 1%"
    assert [look["blocks"] for look in repeats["looks"]] == [2, 3, 4]
    assert verdicts["fast"]["mde_pct"] == pytest.approx(_hand_mde(4, Design(2, 4, 1.0)), rel=1e-6)
    wider = verdicts["fast"]["ci95"][1] - verdicts["fast"]["ci95"][0]
    fixed, _, none, _ = sequential_verdicts({k: v for k, v in plan.items() if k != "adaptive"}, typed(results))
    assert none is None and wider > fixed["fast"]["ci95"][1] - fixed["fast"]["ci95"][0]  # z 2.01 > 1.96


# --- the false-call rate, simulated -------------------------------------------------------------


def test_block_spans_and_the_summary_after_a_budget_stop() -> None:
    plan, results = _hand_made(target=1.0)
    plan["adaptive"] = Design(2, 4, 1.0, budget_s=100.0).as_dict()
    for rung_id, result in results.items():  # block b's runs from 100 b, the fast rung 5 s later
        block, late = int(rung_id.rsplit("r", 1)[1]), 5.0 * rung_id.startswith("fast")
        result["started_at"], result["ended_at"] = 100.0 * block + late, 100.0 * block + late + 25.0
    assert measure_block_starts(plan, typed(results)) == [0.0, 100.0, 200.0, 300.0]

    stop = {**sequential_look(plan, typed(results), 3, final=True), "reason": "budget"}
    ran = {k: v for k, v in results.items() if not k.endswith("r3")}
    summary = build_summary(apply_stop(plan, stop), typed(ran), {})
    repeats = summary["repeats"]
    final = Design(2, 4, 1.0).final_z_at(3)
    assert (repeats["blocks_run"], repeats["stopped"], repeats["critical_z_used"]) == (3, "budget", final)
    assert repeats["looks"][-1]["critical_z"] == final and repeats["looks"][0]["critical_z"] == Design(2, 4, 1.0).z_at(
        2
    )
    d = np.log(0.9) + np.array(OFFSETS[:3])
    mde = 100 * math.expm1((stats.t.isf(_sf(final), 2) + stats.t.ppf(0.8, 2)) * d.std(ddof=1) / math.sqrt(3))
    assert summary["rungs"][1]["vs_parent"]["mde_pct"] == pytest.approx(mde, rel=1e-6)
    assert "3 of 4 planned blocks ran: another would have ended more than 100 s after the plan" in to_markdown(summary)
    assert "some MDE still above 1%" in repeats["sentence"]
    # the final look's value is lower than the planned one: every MDE may reach the target there
    plan["adaptive"] = Design(2, 4, 99.0, budget_s=100.0).as_dict()
    stop = {**sequential_look(plan, typed(results), 3, final=True), "reason": "budget"}
    assert (
        "every rung's MDE 99% or less" in build_summary(apply_stop(plan, stop), typed(ran), {})["repeats"]["sentence"]
    )


def test_simulated_false_call_rate_stays_near_nominal() -> None:
    """A/A ladders (three rungs, no true effect) under the fitted proxy noise, adaptive repeats
    min 3, max 6, a target that stops some ladders early and not others: the rate of false calls
    on one rung per ladder stays at or under 5% (Clopper-Pearson)."""
    from traceladder.stats.model import clopper_pearson
    from testkit.simulation.noise import load_proxy_noise
    from testkit.simulation.simulate import blocked_shape, one_per_ladder, simulate_adaptive

    model = load_proxy_noise().scaled(0.03)
    shape = blocked_shape(["a", "b", "c"], [("b", "a"), ("c", "b")], blocks=6, schedules=20)
    design = Design(3, 6, 7.0)
    outcomes = simulate_adaptive(model, shape, design, ladders=800, seed=11)
    stops = [o.blocks for o in outcomes]
    assert min(stops) == 3 and max(stops) == 6  # the rule really decides: some stop early, some not
    calls, n = one_per_ladder([o.verdicts for o in outcomes], seed=12)
    low, high = clopper_pearson(calls, n)
    assert low <= 0.05 and high <= 0.075, (calls, n)


def test_simulated_budget_stop_is_the_final_analysis() -> None:
    """The simulation's time budget (proxy-local's demos stop on it): a ladder stopped after 4
    of 6 planned blocks by the clock is judged at the value that spends the alpha left, so the
    A/A false-call rate is the nominal 5%, not the 4th look's smaller share."""
    from traceladder.stats.model import clopper_pearson
    from testkit.simulation.noise import load_proxy_noise
    from testkit.simulation.simulate import blocked_shape, one_per_ladder, simulate_adaptive

    model = load_proxy_noise().scaled(0.03)
    shape = blocked_shape(["a", "b", "c"], [("b", "a"), ("c", "b")], blocks=6, schedules=20)
    design = Design(3, 6, 0.1)  # a target no ladder reaches: the budget decides
    outcomes = simulate_adaptive(model, shape, design, ladders=800, seed=13, budget_blocks=(4,))
    assert {(o.blocks, o.target_reached) for o in outcomes} == {(4, False)}
    assert design.final_z_at(4) < design.z_at(4)
    calls, n = one_per_ladder([o.verdicts for o in outcomes], seed=14)
    low, high = clopper_pearson(calls, n)
    assert low <= 0.05 <= high, (calls, n)
