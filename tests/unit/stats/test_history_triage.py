"""The triage's statistics: the suspect rule's prediction bound and the confirm's stops."""

from __future__ import annotations

from testkit.results import index_entries
import math

import numpy as np
import pytest
from scipy import stats

from traceladder.core.summary_parts import LadderHistory
from traceladder.stats.history import (
    SUSPECT_LEVEL,
    evaluate,
    history_findings,
    prediction_bound,
    suspect,
    suspect_sentence,
)
from traceladder.stats.model import Run, fit_blocks
from traceladder.triage.confirm import look_at
from traceladder.stats.decisions import (
    CONFIRM_MIN_BLOCKS,
    CONFIRMED,
    INSUFFICIENT,
    NOT_REPRODUCED,
    SIZE_BOUND,
    NoiseHistory,
    blocks_to_decide,
    confirm_critical_z,
    confirm_look,
    confirm_stop,
    pooled_variance,
    size_llr,
    size_stop,
)
from traceladder.stats.sequential import boundaries, critical_t

pytestmark = pytest.mark.triage


def test_prediction_bound_is_the_t_prediction_interval_by_hand() -> None:
    segment = [100.0, 102.0, 98.0, 101.0, 99.0, 100.5, 99.5, 100.0, 101.5, 98.5]
    z = np.log(segment)
    m, mean, sd = len(z), z.mean(), z.std(ddof=1)
    half = stats.t.ppf(0.995, m - 1) * sd * math.sqrt(1 + 1 / m)
    bound = prediction_bound(segment)
    assert bound is not None and bound.df == 9 and SUSPECT_LEVEL == 0.99
    assert bound.low == pytest.approx(mean - half) and bound.high == pytest.approx(mean + half)
    assert prediction_bound(segment[:2]) is None  # too few runs to bound anything


def test_suspect_by_bound_either_direction_and_not_inside() -> None:
    flat = [100.0, 102.0, 98.0, 101.0, 99.0, 100.5, 99.5, 100.0, 101.5, 98.5]
    assert suspect([*flat, 100.8]) is None
    slow = suspect([*flat, 110.0])
    assert slow is not None and slow.reason == "prediction bound" and slow.direction == "slower"
    assert slow.good_index == len(flat) - 1 and slow.delta_pct == pytest.approx(9.9, abs=0.2)
    fast = suspect([*flat, 90.0])
    assert fast is not None and fast.direction == "faster" and fast.delta_pct < 0


def test_suspect_by_a_newly_called_change_point() -> None:
    rng = np.random.default_rng(3)
    before = list(100 * np.exp(rng.normal(0, 0.005, 12)))
    after = list(130 * np.exp(rng.normal(0, 0.005, 3)))
    # the first run after the step: beyond the bound of the flat runs before it
    first = suspect(before + after[:1])
    assert first is not None and first.reason == "prediction bound" and first.direction == "slower"
    # the change point called one run after the step (two runs after it seen), last good = the run before
    two = suspect(before + after[:2])
    assert two is not None and two.reason == "change point" and two.good_index == len(before) - 1
    assert two.change_point is not None and two.change_point.delta_pct == pytest.approx(30, abs=2)
    # a run later the change is no longer new, and the segment since it is too short for a bound
    assert suspect(before + after) is None


def test_confirm_critical_values_are_the_spending_boundaries() -> None:
    z = [confirm_critical_z(n, 10) for n in range(CONFIRM_MIN_BLOCKS, 11)]
    expected = boundaries(tuple(n / 10 for n in range(CONFIRM_MIN_BLOCKS, 11)), 0.05, spending="hsd")
    assert z == pytest.approx(list(expected))
    assert z[0] > z[-1] > 1.96  # strict early, near 2 at the end
    # Hwang-Shih-DeCani, gamma -4, by hand at the first look (closed form): 3 of 16 blocks
    spent = 0.05 * math.expm1(4 * 3 / 16) / math.expm1(4)
    assert confirm_critical_z(3, 16) == pytest.approx(stats.norm.isf(spent / 2)) == pytest.approx(3.28, abs=0.01)
    # a time-budget stop at block 5 spends what is left: below look 5's planned value
    assert confirm_critical_z(5, 10, final=True) < confirm_critical_z(5, 10)


def test_confirm_stops_in_each_direction() -> None:
    s = math.log(1.15)
    assert confirm_stop((0.01, 0.2), s, last=False) == CONFIRMED
    assert confirm_stop((-0.05, 0.06), s, last=False) == NOT_REPRODUCED  # excludes s/2 = 0.07
    assert confirm_stop((-0.05, 0.09), s, last=False) is None
    assert confirm_stop((-0.05, 0.09), s, last=True) == INSUFFICIENT
    assert confirm_stop((-0.2, -0.01), s, last=False) == NOT_REPRODUCED  # a change the other way
    assert confirm_stop((-0.2, -0.01), -s, last=False) == CONFIRMED  # a faster suspect
    assert confirm_stop((-0.06, 0.05), -s, last=False) == NOT_REPRODUCED
    assert confirm_stop(None, s, last=True) == INSUFFICIENT


def test_a_bisection_step_is_a_likelihood_ratio_of_0_against_s() -> None:
    s = math.log(1.15)  # the line is s/2 = 0.0699; Wald's bound log 99 = 4.60
    assert SIZE_BOUND == pytest.approx(math.log(99))
    # by hand: LLR = s (diff - s/2) / se^2
    assert size_llr(0.12, 0.03, s) == pytest.approx(s * (0.12 - s / 2) / 0.03**2)
    assert size_stop(size_llr(0.12, 0.03, s), last=False) == CONFIRMED  # 7.8: like the bad end
    assert size_stop(size_llr(0.01, 0.02, s), last=False) == NOT_REPRODUCED  # -20.9: like the good end
    # a change that excludes 0 but carries little of s looks like the good end
    assert size_stop(size_llr(0.02, 0.005, s), last=False) == NOT_REPRODUCED
    assert confirm_stop((0.01, 0.03), s, last=False) == CONFIRMED  # what the old rule called it
    assert size_stop(size_llr(0.08, 0.03, s), last=False) is None  # 1.6: undecided
    assert size_stop(size_llr(0.08, 0.03, s), last=True) == INSUFFICIENT
    assert size_stop(size_llr(-0.14, 0.03, -s), last=False) == CONFIRMED  # a faster suspect
    assert size_stop(None, last=True) == INSUFFICIENT


def test_the_history_lends_its_df_only_when_at_least_as_noisy() -> None:
    history = NoiseHistory(run_var=0.004, df=20)
    var, df, source = pooled_variance(0.002, 2, history)
    assert (var, df, source) == (pytest.approx((2 * 0.002 + 20 * 0.004) / 22), 22, "pooled with history")
    assert pooled_variance(0.009, 2, history) == (0.009, 2, "confirm")  # noisier than the history: its own
    assert pooled_variance(0.002, 2, None) == (0.002, 2, "confirm")
    # +30% on CPU time (run sd 6.8%) at block 3 with the history's df: se = 0.068 * sqrt(2/3)
    se = 0.068 * math.sqrt(2 / 3)
    look = confirm_look(math.log(1.30), se, 22, 3, math.log(1.30), 16)
    assert look.stop == CONFIRMED
    own = confirm_look(math.log(1.30), se, 2, 3, math.log(1.30), 16)  # 2 df alone: t_crit ~ 7.6
    assert own.stop is None


def test_an_undecided_step_says_how_many_more_blocks() -> None:
    s = math.log(1.15)
    look = confirm_look(0.08, 0.02, 10, 8, s, 8, rule="size")  # LLR 3.5 at the last look
    assert look.stop == INSUFFICIENT and look.llr == pytest.approx(size_llr(0.08, 0.02, s))
    assert blocks_to_decide(look, s) == math.ceil(8 * SIZE_BOUND / look.llr - 8)


def _runs(diffs: list[float], level: float = math.log(100)) -> list[Run]:
    out = []
    for b, d in enumerate(diffs):
        noise = 0.01 * ((b % 3) - 1)
        out += [Run(b, "A", level + noise), Run(b, "B", level + noise + d)]
    return out


def test_confirm_look_on_the_block_model() -> None:
    s = math.log(1.15)
    clear = look_at(_runs([0.14, 0.15, 0.13, 0.14]), s, max_blocks=8)
    assert clear.stop == CONFIRMED and clear.blocks == 4 and clear.df == 3
    assert clear.interval is not None and clear.interval[0] > 0
    null = look_at(_runs([0.001, -0.002, 0.0015, -0.001]), s, max_blocks=8)
    assert null.stop == NOT_REPRODUCED
    early = look_at(_runs([0.14, 0.15]), s, max_blocks=8)  # under CONFIRM_MIN_BLOCKS: no interval
    assert early.interval is None and early.stop is None
    ran_out = look_at(_runs([0.2, -0.1, 0.15]), s, max_blocks=3)
    assert ran_out.stop == INSUFFICIENT
    recorded = ran_out.as_look()  # as triage.json records it
    assert recorded.stop == INSUFFICIENT and recorded.blocks == 3 and recorded.interval_pct is not None
    assert recorded.delta_pct == pytest.approx(100 * math.expm1(ran_out.diff))
    # by hand: the interval is diff +- critical_t(z, df) * se of the block model's contrast
    fit = fit_blocks(_runs([0.14, 0.15, 0.13, 0.14]), statistic="median").contrast("B", "A")
    half = critical_t(confirm_critical_z(4, 8), fit.df) * fit.se
    assert clear.interval == pytest.approx((fit.diff - half, fit.diff + half))


def test_evaluate_records_suspects_with_their_last_good_run() -> None:
    flat = [100.0, 102.0, 98.0, 101.0, 99.0, 100.5, 99.5, 100.0, 101.5, 98.5]

    def entry(i: int, ms: float) -> dict:
        rungs = {"r": {"step_ms": {"mean": ms, "ci95": None, "n": 3}, "step_cpu_ms": None}}
        return {"run_id": f"w{i}", "logical_date": f"2026-01-{i + 1:02d}", "points": {"metric": "wall", "rungs": rungs}}

    history = evaluate(index_entries([entry(i, v) for i, v in enumerate([*flat, 111.0])]))
    (found,) = history.suspects
    assert found.rung == "r" and found.run_id == "w10" and found.good_run_id == "w9"
    assert found.direction == "slower" and found.reason == "prediction bound"
    assert any("this run (111.0 ms) lies beyond the 99% prediction bound" in line for line in history_findings(history))
    assert evaluate(index_entries([entry(i, v) for i, v in enumerate([*flat, 100.2])])).suspects == []


def _weekly(values: list[float], rung: str = "r") -> LadderHistory:
    """The history of weekly runs w0, w1, ... of one rung whose mean step time is each value."""

    def entry(i: int, ms: float) -> dict:
        rungs = {rung: {"step_ms": {"mean": ms, "ci95": None, "n": 3}, "step_cpu_ms": None}}
        return {"run_id": f"w{i}", "logical_date": f"2026-01-{i + 1:02d}", "points": {"metric": "wall", "rungs": rungs}}

    return evaluate(index_entries([entry(i, v) for i, v in enumerate(values)]))


def test_a_suspect_by_the_bound_is_named_with_its_bound_and_last_good_run_not_as_no_regression() -> None:
    flat = [100.0, 102.0, 98.0, 101.0, 99.0, 100.5, 99.5, 100.0, 101.5, 98.5]
    history = _weekly([*flat, 111.0])
    (found,) = history.suspects
    # the bound by hand, in ms: the flat runs' 99% prediction interval of one more run
    z = np.log(flat)
    half = stats.t.ppf(0.995, len(z) - 1) * z.std(ddof=1) * math.sqrt(1 + 1 / len(z))
    low, high, mean = (math.exp(z.mean() + k * half) for k in (-1, 1, 0))
    assert found.bound is not None and found.bound.runs == len(flat) and found.bound.level == SUSPECT_LEVEL
    assert (found.bound.low, found.bound.high) == (pytest.approx(low), pytest.approx(high))
    sentence = suspect_sentence(history, found)
    assert sentence == (
        f"No change point called yet in r's step time, but this run (111.0 ms) lies beyond the 99% prediction "
        f"bound of the {len(flat)} runs before it ({low:.1f} to {high:.1f} ms): slower, "
        f"{100 * (111.0 / mean - 1):+.1f}% against their mean; last good run w9. "
        "A suspect, sent to the triage to be confirmed side by side."
    )
    # the findings name it and say no "no new regression" beside it
    lines = history_findings(history)
    assert sentence in lines and not any("No new step-time regression" in line for line in lines)
    # without a suspect, the history says nothing was called
    quiet = _weekly([*flat, 100.2])
    assert quiet.suspects == [] and history_findings(quiet)[0].startswith("No new step-time regression")


def test_a_suspect_by_a_new_change_point_names_its_first_run_and_size() -> None:
    rng = np.random.default_rng(3)
    before = list(100 * np.exp(rng.normal(0, 0.005, 12)))
    after = list(130 * np.exp(rng.normal(0, 0.005, 2)))
    history = _weekly(before + after)
    (found,) = history.suspects
    assert found.reason == "change point" and found.change_point is not None
    cp = found.change_point
    assert history.rungs[0].run_ids[cp.index] == f"w{len(before)}" and found.good_run_id == f"w{len(before) - 1}"
    lo, hi = cp.ci95_pct
    assert suspect_sentence(history, found) == (
        f"A new change point in r's step time from run w{len(before)} on: slower, {cp.delta_pct:+.1f}% "
        f"(95% CI {lo:+.1f}% to {hi:+.1f}%, p {cp.p_value:.1g}); last good run w{len(before) - 1}. "
        "A suspect, sent to the triage to be confirmed side by side."
    )
    assert cp.delta_pct == pytest.approx(30, abs=2)


def test_a_suspect_by_the_bound_after_an_earlier_change_point_says_no_new_one() -> None:
    rng = np.random.default_rng(3)
    before = list(100 * np.exp(rng.normal(0, 0.005, 12)))
    after = list(130 * np.exp(rng.normal(0, 0.005, 8)))
    history = _weekly([*before, *after, 160.0])
    (found,) = history.suspects
    assert found.reason == "prediction bound" and history.rungs[0].change_points
    assert suspect_sentence(history, found).startswith("No new change point in r's step time, but this run (160.0 ms)")
