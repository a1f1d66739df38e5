"""Calls over the whole ladder (stats/sequential.ladder_calls; docs/statistics.md, "Calls over the
whole ladder"): Benjamini-Hochberg's step-up and Holm's step-down on p-values worked by hand,
Holm with the adaptive looks as the graphical approach, and what summary.json, summary.md and
report.html say when a rung tested alone would be called and the ladder-wide rule does not."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from testkit.results import typed, typed_run
from traceladder.stats.model import clopper_pearson
from traceladder.stats.sequential import ALPHA, Design, ladder_calls, look_z, mde_level
from traceladder.stats.verdicts import sequential_look, sequential_verdicts
from traceladder.summary.build import build_summary
from traceladder.summary.render.html import to_html
from traceladder.summary.render.markdown import to_markdown


def fixed(level: float) -> float:
    """A fixed design's one-sided tail at a two-sided level: p <= level is tail <= level / 2."""
    return float(norm.sf(norm.isf(level / 2)))


def tails_of(pvalues: dict[str, float]) -> dict[str, float]:
    return {rung: p / 2 for rung, p in pvalues.items()}


def test_benjamini_hochberg_steps_up_and_holm_steps_down_on_p_values_by_hand() -> None:
    # k = 4; BH's thresholds j x 5%/4: 1.25%, 2.5%, 3.75%, 5%; Holm's 5%/(4 - j + 1): 1.25%, 1.67%, 2.5%, 5%
    p = {"a": 0.001, "b": 0.030, "c": 0.035, "d": 0.500}
    bh = ladder_calls(tails_of(p), fixed, "benjamini_hochberg")
    # step-up: b fails its own 2.5%, but c clears 3.75%, so R = 3 and b is called with it
    assert bh.called == {"a", "b", "c"} and bh.comparisons == 4
    assert bh.interval_level == pytest.approx(3 * ALPHA / 4) and bh.mde_level == pytest.approx(ALPHA / 4)
    holm = ladder_calls(tails_of(p), fixed, "holm")
    # step-down: a clears 1.25%; b needs 1.67% and fails, so Holm stops there
    assert holm.called == {"a"} and holm.interval_level == pytest.approx(ALPHA / 3)
    per_rung = ladder_calls(tails_of(p), fixed, "per_rung")
    assert per_rung.called == {"a", "b", "c"} and per_rung.interval_level == per_rung.mde_level == ALPHA


def test_every_p_value_on_its_threshold_line() -> None:
    # p_(j) = j x 4.9%/5 just under BH's j x 5%/5: BH calls all five, Holm only the first
    p = {f"r{j}": j * 0.049 / 5 for j in range(1, 6)}
    assert ladder_calls(tails_of(p), fixed, "benjamini_hochberg").called == set(p)
    holm = ladder_calls(tails_of(p), fixed, "holm")
    assert holm.called == {"r1"}  # r2: 1.96% > 5%/4 = 1.25%
    # nothing called: BH's intervals at 5%/k (Bonferroni's), Holm's too
    none = {r: 0.9 for r in p}
    assert ladder_calls(tails_of(none), fixed, "benjamini_hochberg").interval_level == pytest.approx(ALPHA / 5)
    assert ladder_calls(tails_of(none), fixed, "holm").interval_level == pytest.approx(ALPHA / 5)
    # everything called: Holm's last step is at 5% itself
    assert ladder_calls(tails_of({"a": 1e-6, "b": 0.04}), fixed, "holm").interval_level == ALPHA
    with pytest.raises(ValueError, match="bonferroni"):
        ladder_calls(tails_of(p), fixed, "bonferroni")
    assert mde_level("holm", 9) == mde_level("benjamini_hochberg", 9) == pytest.approx(ALPHA / 9)


def test_holm_across_looks_passes_a_called_rungs_alpha_on_at_the_same_look() -> None:
    """Maurer-Bretz with equal weights on a complete graph: each rung starts with 5%/k of spending;
    once one is called its share goes to the rest, whose boundary at this look is then the
    design's boundary for 5%/(k - 1)."""
    design = Design(3, 11, 5.0, budget_s=450.0)
    k, n = 3, 9

    def tail_at(level: float) -> float:
        return float(norm.sf(look_z(design, n, False, level)))

    z3, z2, z1 = (look_z(design, n, False, ALPHA / m) for m in (3, 2, 1))
    # the boundary at each level is the design's own, spending that level over the same looks
    assert z3 == pytest.approx(Design(3, 11, 5.0, ALPHA / 3).z_at(n))
    assert z1 == pytest.approx(design.z_at(n)) and z3 > z2 > z1
    tails = {"a": float(norm.sf(z3 + 0.1)), "b": float(norm.sf((z3 + z2) / 2)), "c": float(norm.sf(z1 - 0.5))}
    holm = ladder_calls(tails, tail_at, "holm")
    assert holm.called == {"a", "b"}  # b clears 5%/2 only after a passed its 5%/3 on
    assert holm.comparisons == k and holm.interval_level == pytest.approx(ALPHA / 1)
    bonferroni = {r for r, t in tails.items() if t <= tail_at(ALPHA / k)}
    assert bonferroni == {"a"}
    # the budget's final look spends what the earlier looks left at every level
    assert look_z(design, n, True, ALPHA / 3) == pytest.approx(Design(3, 11, 5.0, ALPHA / 3).final_z_at(n))


def test_holm_across_looks_keeps_the_family_wise_rate_under_a_stop_that_chases_a_call() -> None:
    """Three null comparisons seen at looks after 3, 4 and 5 of 5 blocks (Z_n = B(t_n)/sqrt(t_n)),
    and the worst stopping rule: stop at the first look where Holm calls anything. A false call
    there is a crossing of a 5%/3 boundary at some look, so the rate stays at or below 5%."""
    design = Design(3, 5, 5.0)
    rng = np.random.default_rng(53)
    sims, k = 8_000, 3
    steps = np.diff([0.0, *design.fractions])
    paths = np.cumsum(rng.standard_normal((sims, k, len(steps))) * np.sqrt(steps), axis=2)
    z = np.abs(paths) / np.sqrt(np.array(design.fractions))
    false = 0
    for i in range(sims):
        for look, blocks in enumerate(design.looks):

            def tail_at(level: float, blocks: int = blocks) -> float:
                return float(norm.sf(look_z(design, blocks, False, level)))

            calls = ladder_calls({str(j): float(norm.sf(z[i, j, look])) for j in range(k)}, tail_at, "holm")
            if calls.called:
                false += 1
                break
    lo, hi = clopper_pearson(false, sims)
    assert hi <= 0.055, (false, sims, lo, hi)  # at most 5%, within this many draws
    assert false / sims <= ALPHA


RUNGS = ("base", "r1", "r2", "r3", "r4", "r5")


def plan_and_results(r2_pct: float, correction: str | None, blocks: int = 6) -> tuple[dict, dict]:
    """Five rungs against one root in `blocks` blocks (log-normal noise of 3%, seeded): r1 is 30%
    faster, r2 by `r2_pct`, the rest do not move. At -5.5% r2's p-value alone is 3.1%, under 5% but
    over the 2 x 5%/5 = 2% BH asks of it and Holm's 5%/4 after r1."""
    rng = np.random.default_rng(5)
    effects = {"base": 0.0, "r1": -30.0, "r2": r2_pct, "r3": 0.0, "r4": 0.0, "r5": 0.0}
    specs, results = [], {}
    for b in range(blocks):
        level = rng.normal(0, 0.03)
        for rung in RUNGS:
            rid = f"{rung}.none.r{b}"
            root = rung == "base"
            specs.append(
                {
                    "rung": rung,
                    "parent": None if root else "base",
                    "switch": None if root else rung,
                    "value": None if root else True,
                    "lens": "none",
                    "repeat": b,
                    "block": b,
                    "rung_id": rid,
                }
            )
            ms = 300 * math.exp(level + math.log1p(effects[rung] / 100) + rng.normal(0, 0.03))
            results[rid] = {
                "rung_id": rid,
                "rung": rung,
                "lens": "none",
                "repeat": b,
                "status": "ok",
                "step_ms": ms,
                "tokens_per_sec_per_gpu": 1e5 / ms,
                "peak_mem_gb": 0.1,
                "traces": [],
                "provenance": {},
            }
    plan = {"ladder": "t", "run_id": "r", "specs": specs, **({"correction": correction} if correction else {})}
    return plan, results


def test_a_rung_called_alone_but_not_over_the_ladder_is_shown_with_its_interval() -> None:
    plan, results = plan_and_results(-5.5, "benjamini_hochberg")
    summary = build_summary(plan, typed(results), {})
    rows = {r["rung"]: r for r in summary["rungs"]}
    r1, r2 = rows["r1"]["vs_parent"], rows["r2"]["vs_parent"]
    calls = summary["calls"]
    assert calls["rule"] == "benjamini_hochberg" and calls["name"] == "Benjamini–Hochberg"
    assert calls["comparisons"] == 5 and calls["called"] == ["r1"] and calls["not_called_over_ladder"] == ["r2"]
    # the ladder-wide call is vs_parent.verdict, one of the four words; the rung alone is per_rung
    assert r1["verdict"] == "faster" and r2["verdict"] == "no_change"
    assert r2["per_rung"]["verdict"] == "faster" and r2["per_rung"]["ci95_pct"][1] < 0
    # the shown interval is at the level that decided the last call (1 x 5%/5), so it holds 0 here
    assert calls["interval_level"] == pytest.approx(ALPHA / 5) and r2["ci95_pct"][0] < 0 < r2["ci95_pct"][1]
    assert r1["ci95_pct"][1] < 0  # and excludes it for the called rung
    wider = r2["ci95_pct"][1] - r2["ci95_pct"][0]
    assert wider > r2["per_rung"]["ci95_pct"][1] - r2["per_rung"]["ci95_pct"][0]
    # MDEs at 5%/k: larger than the rung's own
    assert r2["mde_pct"] > r2["per_rung"]["mde_pct"] and calls["mde_level"] == pytest.approx(ALPHA / 5)
    assert calls["sentence"].endswith(
        f"what it costs: a median MDE of {r2['mde_pct']:.1f}% against {r2['per_rung']['mde_pct']:.1f}% "
        "for a rung tested alone"
    )  # every rung's MDE is alike in this complete design
    md, html = to_markdown(summary), to_html(summary, {})
    for text in (md, html):
        assert "not called over the ladder" in text and "Benjamini–Hochberg" in text
    line = next(x for x in md.splitlines() if x.startswith("| r2 "))
    per = r2["per_rung"]["ci95_pct"]
    assert (
        f"per rung faster {r2['delta_pct']:+.1f}% [{per[0]:+.1f}%, {per[1]:+.1f}%]: not called over the ladder" in line
    )
    assert any("Not called over the ladder (Benjamini–Hochberg)" in f and "r2 faster" in f for f in summary["findings"])


def test_holm_misses_where_benjamini_hochberg_calls() -> None:
    """The issue's case in small: r2's p-value alone is 1.5%, over Holm's 5%/4 after r1 but under
    BH's 2 x 5%/5."""
    holm = build_summary(*typed_run(plan_and_results(-6.0, "holm")), {})
    bh = build_summary(*typed_run(plan_and_results(-6.0, "benjamini_hochberg")), {})
    assert holm["calls"]["called"] == ["r1"] and holm["calls"]["not_called_over_ladder"] == ["r2"]
    assert bh["calls"]["called"] == ["r1", "r2"] and bh["calls"]["not_called_over_ladder"] == []
    assert "by Holm at a 5% family-wise false-call rate" in to_markdown(holm)
    # the intervals' level said where they are shown: Holm's after one call is 5%/4, BH's after two 2 x 5%/5
    assert "| vs parent (98.75% CI, Holm) |" in to_markdown(holm)
    assert "<th>vs parent (98% CI, Benjamini–Hochberg)</th>" in to_html(bh, {})
    assert any(f.startswith("r2 (r2=True) is faster than base: step time") and "98% CI" in f for f in bh["findings"])
    assert bh["calls"]["interval_level"] == pytest.approx(2 * ALPHA / 5)  # R = 2


def test_per_rung_is_todays_behaviour() -> None:
    plan, results = plan_and_results(-5.5, "per_rung")
    summary = build_summary(plan, typed(results), {})
    assert summary["calls"]["called"] == ["r1", "r2"] and summary["calls"]["not_called_over_ladder"] == []
    for row in summary["rungs"][1:]:
        vs = row["vs_parent"]
        assert {k: vs[k] for k in ("verdict", "ci95", "ci95_pct", "mde_pct")} == vs["per_rung"]
    assert "up to 0.25 such calls are expected" in to_markdown(summary)
    # a plan from before the field was judged per rung, and still is
    old = build_summary(*typed_run(plan_and_results(-5.5, None)), {})
    assert old["calls"]["rule"] == "per_rung"


def test_the_adaptive_stop_reads_the_mdes_at_the_rules_level() -> None:
    plan, results = plan_and_results(-5.5, "holm")
    adaptive = {**plan, "adaptive": Design(3, 6, 5.0).as_dict()}
    look = sequential_look(adaptive, typed(results), 4)
    assert look["critical_z"] == pytest.approx(look_z(Design(3, 6, 5.0), 4, False, ALPHA / 5))
    per_rung = sequential_look({**adaptive, "correction": "per_rung"}, typed(results), 4)
    assert per_rung["critical_z"] == pytest.approx(Design(3, 6, 5.0).z_at(4))
    assert all(look["mde_pct"][r] > per_rung["mde_pct"][r] for r in look["mde_pct"])
    verdicts, _, repeats, calls = sequential_verdicts(adaptive, typed(results))
    assert repeats is not None and repeats["blocks_run"] == 6
    assert calls["mde_z"] == pytest.approx(look_z(Design(3, 6, 5.0), 6, False, ALPHA / 5))
    assert calls["per_rung_z"] == pytest.approx(Design(3, 6, 5.0).z_at(6))


def test_the_ladders_page_names_the_rule_and_the_rung_not_called_over_the_ladder() -> None:
    from traceladder.ui.views import page_templates  # the page's own filters (its rule: fmt_false_calls)

    summary = build_summary(*typed_run(plan_and_results(-5.5, "holm")), {})
    page = str(page_templates().get_template("_macros.html").module.ladder_table(summary))
    assert '<p class="verdict-calls muted">Calls are controlled over the ladder&#39;s 5 comparisons by Holm' in page
    assert "<th>vs parent (98.75% CI, Holm)</th>" in page
    row = page[page.index("<td>r2</td>") :].split("</tr>")[0]
    assert "no change detected" in row and "per rung faster" in row and "not called over the ladder" in row


def test_the_summary_says_what_the_run_resolves_and_what_a_batch_setting_means() -> None:
    from traceladder.summary.build import batch_setting

    proxy = {
        "backend": "local",
        "model_args": {"global_batch_size": 4, "micro_batch_size": 1, "expert_model_parallel_size": 2},
        "docker_env_vars": {"GPUS_PER_NODE": "8"},
    }
    assert batch_setting(proxy) == (
        "global_batch=4 on the CPU proxy's 2 ranks: 2 micro-batch(es) of 1 per rank, "
        "as a global batch of 16 is on 8 GPUs"
    )
    gpus = {**proxy, "backend": "docker", "model_args": {"global_batch_size": 32, "micro_batch_size": 1}}
    assert batch_setting(gpus) == "global_batch=32 over 8 data-parallel ranks: 4 micro-batch(es) of 1 per rank"
    assert batch_setting({"backend": "local", "model_args": {}}) is None

    plan, results = plan_and_results(-5.5, "benjamini_hochberg")
    for spec in plan["specs"]:
        if spec["rung"] == "r5":
            spec.update(proxy, switch="global_batch", value=4)
    summary = build_summary(plan, typed(results), {})
    mdes = sorted(r["vs_parent"]["mde_pct"] for r in summary["rungs"][1:])
    md, html = to_markdown(summary), to_html(summary, {})
    said = f"at this noise these runs resolve a change of about {mdes[2]:.1f}% (the median MDE"
    assert said in md and said in html
    assert "Batch rungs: r5 sets global_batch=4 on the CPU proxy&#39;s 2 ranks" in html
    assert "Batch rungs: r5 sets global_batch=4 on the CPU proxy's 2 ranks: 2 micro-batch(es) of 1 per rank" in md
