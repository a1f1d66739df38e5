"""The ladder verdicts' false-call rate and power (docs/statistics.md "Statistical model").

- verdicts_aa_simulated: >= 6,000 simulated A/A ladders of proxy-local under the execution-order
  noise model fitted to real proxy runs, on plan.py's schedules; one rung per ladder drawn at
  random, so the trials are independent and the Clopper-Pearson interval applies.
- verdicts_aa_real: real A/A ladders (two rungs with identical settings, 3 shuffled blocks),
  each from its own disjoint runs: the 48 stored runs of proxy_noise.json and fresh runs.
- verdicts_aa_ladders (named with --only; ~2 min a ladder): whole real proxy-aa ladders, each a
  `traceladder demo --ladder proxy-aa` (SeaweedFS, Airflow's dag.test(), the adaptive looks, the
  summary), judged on the ladder's verdict metric as the summary judges it: #25's "at most 2 false
  calls in 10 real ladders", with the Clopper-Pearson interval of the rate.
- verdicts_power_real: power from real runs of the positive control. Real ladders of
  proxy-power.yaml (baseline, +5% and +10% extra matmul work) at the default 3 shuffled blocks, each
  judged by the summary's own code (stats/verdicts.py): the fraction of `slower` verdicts per
  rung, the step-time change the control really made (all ladders' runs pooled, >= 30 per rung),
  and the repeats that would give 80% power at +10% from the residual the real runs showed.
- verdicts_power: the same fractions from the noise model, under the fitted model and under the
  same model scaled to the issue's 4% run-level target.
- verdicts_mde: the MDE of every rung of proxy-local at its default repeats.
- verdicts_adaptive: adaptive repeats (docs/statistics-adaptive.md) on proxy-local's plan,
  `{min: 3, max: 5, target_mde_pct: 5}`: the simulated A/A false-call rate (one random rung per
  ladder, Clopper-Pearson; bound: upper end <= 6.5%), the blocks the ladders ran, and the power at
  +5% and +10% on recompute_off. Under the fitted noise and under that noise scaled to 2%
  run-level sd (the issue's target for the verdict metric), where the rule really stops early.

The machine these run on is shared: the fitted noise is that machine's, busy or not (the stored
runs record their load average).
"""

from __future__ import annotations

from testkit.results import typed
import json
import math
import os
import tempfile

import numpy as np

from benchmarks.common import Context, Row, run_demo, run_rung

SIM_LADDERS = 2000
# The fixed-repeats A/A: every rung's simulated rate is 5.0-5.4% (docs/statistics.md, drift inside a block),
# so at 2,000 ladders the interval's upper end lands on the 6.5% bound by chance; 6,000 put it near 5.8%.
AA_SIM_LADDERS = 6000
POWER_LADDERS = 1000
REAL_FRESH_LADDERS = int(os.environ.get("TRACELADDER_BENCH_AA_LADDERS", "4"))  # 6 proxy runs each
AA_DEMO_LADDERS = int(os.environ.get("TRACELADDER_BENCH_AA_DEMO_LADDERS", "10"))
AA_DEMO_MAX_CALLS = 2  # of 10: a calibrated 5% test passes with probability 0.99 (#25)
POWER_REAL_LADDERS = int(os.environ.get("TRACELADDER_BENCH_POWER_LADDERS", "12"))  # 9 proxy runs each
AA_BLOCKS = 3
TARGET_UPPER = 0.065


def _ci(k: int, n: int) -> tuple[float, float]:
    from traceladder.stats.model import clopper_pearson

    return clopper_pearson(k, n)


def _mdes(verdicts: list[dict], rung: str) -> list[float]:
    """The rung's MDE in % over simulated or real ladders, where it has one."""
    from traceladder.core.documents import as_number

    return [x for v in verdicts if (x := as_number(v[rung]["mde_pct"])) is not None]


def bench_verdicts_aa_simulated(ctx: Context) -> list[Row]:
    from testkit.simulation.simulate import every_call, ladder_shape, one_per_ladder, simulate_verdicts
    from testkit.simulation.noise import load_proxy_noise

    model = load_proxy_noise()
    shape = ladder_shape("proxy-local", schedules=200)
    ladders = 400 if ctx.quick else AA_SIM_LADDERS
    verdicts = simulate_verdicts(model, shape, ladders, seed=1)
    k, n = one_per_ladder(verdicts, seed=2)
    lo, hi = _ci(k, n)
    e, m = every_call(verdicts)
    source = (
        "plan.py's shuffled blocks"
        if shape.from_plan
        else "seeded shuffled blocks (plan.py records no design on this branch)"
    )
    return [
        Row(
            "verdicts",
            "A/A false calls, simulated",
            100 * k / n,
            "%",
            f"CI upper <= {100 * TARGET_UPPER:.1f}",
            hi <= TARGET_UPPER,
            f"{k}/{n} ladders (one random rung each), 95% CI {100 * lo:.1f}-{100 * hi:.1f}%; "
            f"every rung {100 * e / m:.1f}% of {m}; {source}; fitted run sd {100 * model.run_sd:.1f}%",
        ),
    ]


def _proxy_runs(count: int, out: str) -> list[dict]:
    return [
        run_rung("--ladder", "proxy-local", "--rung", "recompute_off", "--run-id", f"aab{k}", out=out)
        for k in range(count)
    ]


def _aa_ladders(step_values: list[list[float]], seed: int) -> list[str]:
    """Disjoint A/A ladders from runs in execution order: each consecutive pair of runs is a block
    holding rungs a and b in a shuffled order; AA_BLOCKS blocks per ladder."""
    from traceladder.stats.model import Run, fit_blocks, verdict

    rng = np.random.default_rng(seed)
    per = 2 * AA_BLOCKS
    out = []
    for start in range(0, len(step_values) - per + 1, per):
        runs = []
        for b in range(AA_BLOCKS):
            order = ["a", "b"] if rng.random() < 0.5 else ["b", "a"]
            for p, name in enumerate(order):
                values = step_values[start + 2 * b + p]
                runs.append(Run(b, name, math.log(float(np.median(values))), tuple(math.log(v) for v in values)))
        out.append(str(verdict(fit_blocks(runs).contrast("b", "a"), 1.0, "step_ms", False)["verdict"]))
    return out


def bench_verdicts_aa_real(ctx: Context) -> list[Row]:
    from importlib import resources

    doc = json.loads(resources.files("testkit.simulation").joinpath("proxy_noise.json").read_text())
    stored = _aa_ladders([r["step_ms_values"] for r in doc["runs"]], seed=3)
    fresh: list[str] = []
    fresh_n = 1 if ctx.quick else REAL_FRESH_LADDERS
    if fresh_n:
        with tempfile.TemporaryDirectory(prefix="traceladder-aa-") as tmp:
            runs = [r for r in _proxy_runs(2 * AA_BLOCKS * fresh_n, tmp) if r["status"] == "ok"]
        fresh = _aa_ladders([r["step_ms_values"] for r in runs], seed=4)
    verdicts = stored + fresh
    k = sum(v in ("faster", "slower") for v in verdicts)
    lo, hi = _ci(k, len(verdicts))
    return [
        Row(
            "verdicts",
            "A/A false calls, real proxy runs",
            100 * k / len(verdicts),
            "%",
            "",
            None,
            f"{k}/{len(verdicts)} disjoint A/A ladders (2 rungs x {AA_BLOCKS} shuffled blocks): {len(stored)} from the "
            f"stored runs, {len(fresh)} fresh; 95% CI {100 * lo:.1f}-{100 * hi:.1f}%; shared machine",
        )
    ]


def _aa_demo(out_dir: str) -> dict:
    """One whole proxy-aa ladder through `traceladder demo`; its published summary.json."""
    demo = run_demo("proxy-aa", out_dir)
    return json.loads((demo.local_copy / "summary" / "summary.json").read_text())


def bench_verdicts_aa_ladders(ctx: Context) -> list[Row]:
    count = 2 if ctx.quick else AA_DEMO_LADDERS
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="traceladder-aa-demo-") as tmp:
        for _ in range(count):
            summary = _aa_demo(tmp)
            (aa,) = [r for r in summary["rungs"] if r["rung"] == "aa"]
            model = summary["model"][aa["vs_parent"]["metric"]]
            outcomes.append((aa["vs_parent"], summary["repeats"], model))
    k = sum(v["verdict"] in ("faster", "slower") for v, _, _ in outcomes)
    lo, hi = _ci(k, count)
    per = "; ".join(
        f"{v['verdict']} {v['delta_pct']:+.1f}% (MDE {v['mde_pct']:.1f}%, {r['blocks_run']}/{r['blocks_planned']} "
        f"blocks, z {r['critical_z_used']:.2f}, run sd {m['run_sd_pct']:.1f}%)"
        for v, r, m in outcomes
    )
    return [
        Row(
            "verdicts",
            f"A/A false calls, {count} real proxy-aa ladders",
            float(k),
            "calls",
            f"<= {AA_DEMO_MAX_CALLS} of 10",
            k <= AA_DEMO_MAX_CALLS * count / 10,
            f"{k}/{count} ({100 * k / count:.0f}%, 95% CI {100 * lo:.1f}-{100 * hi:.1f}%), each a whole "
            f"`traceladder demo --ladder proxy-aa` on metric {outcomes[0][0]['metric']}: {per}",
        )
    ]


bench_verdicts_aa_ladders.explicit_only = True  # type: ignore[attr-defined]  # ~2 min a ladder, 10 ladders


def _power(model, shape, pct: float, ladders: int, seed: int) -> tuple[int, int, float]:
    """(slower calls, ladders, median MDE in log units) for recompute_off made pct% slower."""
    from testkit.simulation.simulate import call_rate, log_shift, simulate_verdicts

    rung = "recompute_off"
    verdicts = simulate_verdicts(
        model, shape, ladders, seed=seed, effects={rung: log_shift(pct)}, pairs=[p for p in shape.pairs if p[0] == rung]
    )
    mde = float(np.median([math.log1p(x / 100) for x in _mdes(verdicts, rung)]))
    return (*call_rate(verdicts, rung, ("slower",)), mde)


def _formula_repeats(mde_log: float, repeats: int, pct: float, rungs: int = 10) -> int:
    """Repeats at which the MDE formula reaches pct, with the residual variance the simulated
    ladders showed at `repeats` (se = sqrt(2 V / n), df = (n - 1)(rungs - 1))."""
    from traceladder.stats.model import t_quantile

    def mde(n: int) -> float:
        df = (n - 1) * (rungs - 1)
        return (t_quantile(0.975, df) + t_quantile(0.8, df)) * math.sqrt(2 * var / n)

    df0 = (repeats - 1) * (rungs - 1)
    var = (mde_log / (t_quantile(0.975, df0) + t_quantile(0.8, df0))) ** 2 * repeats / 2
    return next((n for n in range(2, 100000) if mde(n) <= math.log1p(pct / 100)), 100000)


def _repeats_for(model, pct: float, ladders: int, limit: int = 24) -> int | None:
    """The smallest repeats whose simulated power at +pct% is >= 80% (None beyond `limit`)."""
    from testkit.simulation.simulate import ladder_shape

    def ok(n: int) -> bool:
        k, m, _ = _power(model, ladder_shape("proxy-local", repeats=n, schedules=10), pct, ladders, seed=100 + n)
        return k / m >= 0.8

    lo, hi = 1, 2
    while not ok(hi):
        lo, hi = hi, hi * 2
        if hi > limit:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _power_ladder(k: int, out: str) -> tuple[dict, dict[str, dict]]:
    """One real proxy-power ladder: its plan (seed k) and every run's result, in execution order."""
    from traceladder.config.loader import ladders_dir, load_ladder
    from traceladder.plan.build import build_plan, execution_order

    loaded = load_ladder(ladders_dir() / "proxy-power.yaml")
    specs = execution_order(build_plan(loaded, seed=k))
    results = {
        spec.rung_id: run_rung("--spec-json", spec.to_json(), "--run-id", f"power{k}", out=out) for spec in specs
    }
    return {"specs": [json.loads(s.to_json()) for s in specs], "metric": loaded.ladder.metric}, results


def _pooled(ladders: list[tuple[dict, dict[str, dict]]]) -> tuple[dict, dict[str, dict]]:
    """All ladders as one design whose blocks are (ladder, block): the control's real step-time
    change from every run, with each block's drift removed."""
    specs, results = [], {}
    for k, (plan, ladder_results) in enumerate(ladders):
        for spec in plan["specs"]:
            rid = f"{k}/{spec['rung_id']}"
            specs.append({**spec, "rung_id": rid, "block": k * 100 + spec["block"]})
            results[rid] = ladder_results[spec["rung_id"]]
    return {"specs": specs, "metric": ladders[0][0].get("metric", "wall") if ladders else "wall"}, results


def bench_verdicts_power_real(ctx: Context) -> list[Row]:
    from traceladder.core.documents import as_float, as_object
    from traceladder.stats.model import t_quantile
    from traceladder.stats.verdicts import VERDICT_METRICS, change_pct_interval, plan_metric, rung_verdicts

    count = 2 if ctx.quick else POWER_REAL_LADDERS
    with tempfile.TemporaryDirectory(prefix="traceladder-power-") as tmp:
        ladders = [_power_ladder(k, tmp) for k in range(count)]
    calls: dict[str, list[str]] = {"extra5": [], "extra10": []}
    for plan, results in ladders:
        verdicts, _ = rung_verdicts(plan, typed(results))
        for rung, seen in calls.items():
            seen.append(str(verdicts[rung]["verdict"]))
    plan, results = _pooled(ladders)
    pooled, model = rung_verdicts(plan, typed(results))
    fit = as_object(model[VERDICT_METRICS[plan_metric(plan)][0]])
    run_sd = as_float(fit["run_sd_pct"]) / 100
    rungs = 10  # proxy-local's: its block model's residual df at n blocks is (n - 1)(rungs - 1)

    def mde(n: int) -> float:
        df = (n - 1) * (rungs - 1)
        return (t_quantile(0.975, df) + t_quantile(0.8, df)) * run_sd * math.sqrt(2 / n)

    need = next((n for n in range(2, 1000) if mde(n) <= math.log1p(0.10)), 1000)
    load = open("/proc/loadavg").read().split()[0]
    rows = []
    for rung, pct in (("extra5", 5), ("extra10", 10)):
        k, n = sum(v == "slower" for v in calls[rung]), len(calls[rung])
        lo, hi = _ci(k, n)
        cal = pooled[rung]
        runs = sum(1 for s in plan["specs"] if s["rung"] == rung and results[s["rung_id"]].get("status") == "ok")
        ci = change_pct_interval(cal) or (math.nan, math.nan)
        gate = pct == 10
        rows.append(
            Row(
                "verdicts",
                f"power at +{pct}% (real runs)",
                100 * k / n,
                "%",
                ">= 80" if gate else "",
                (k / n >= 0.8) if gate else None,
                f"{k}/{n} real ladders called `slower` at 3 blocks, 95% CI {100 * lo:.1f}-{100 * hi:.1f}%; the control "
                f"really added {cal['delta_pct']:+.1f}% (95% CI {ci[0]:+.1f} to {ci[1]:+.1f}%) over {runs} runs; "
                f"other verdicts {sorted(set(calls[rung]) - {'slower'})}; load {load}",
            )
        )
    rows.append(
        Row(
            "verdicts",
            "repeats for 80% power at +10% (real runs)",
            float(need),
            "",
            "",
            None,
            f"run sd {100 * run_sd:.1f}% from {fit['runs']} real runs (df {fit['df']}); "
            "MDE(n) = (t.975 + t.80)[df = 9(n - 1)] * sd * sqrt(2 / n) <= ln 1.10 for proxy-local's 10 rungs",
        )
    )
    return rows


def bench_verdicts_power(ctx: Context) -> list[Row]:
    from testkit.simulation.simulate import ladder_shape
    from testkit.simulation.noise import load_proxy_noise

    fitted = load_proxy_noise()
    shape = ladder_shape("proxy-local", schedules=100)
    repeats = max(s.block for s in shape.schedules[0]) + 1
    ladders = 200 if ctx.quick else POWER_LADDERS
    rows = []
    for label, model in (("fitted", fitted), ("4% target", fitted.scaled(0.04))):
        mde_log = 0.0
        for pct in (5.0, 10.0):
            k, n, mde_log = _power(model, shape, pct, ladders, seed=int(pct))
            lo, hi = _ci(k, n)
            rows.append(
                Row(
                    "verdicts",
                    f"power at +{pct:.0f}% ({label} noise)",
                    100 * k / n,
                    "%",
                    ">= 80" if pct == 10 and label == "4% target" else "",
                    (k / n >= 0.8) if pct == 10 and label == "4% target" else None,
                    f"{k}/{n} `slower` at {repeats} repeats, 95% CI {100 * lo:.1f}-{100 * hi:.1f}%; run sd "
                    f"{100 * model.run_sd:.1f}%; via the noise model",
                )
            )
        n_sim = _repeats_for(model, 10.0, 100 if ctx.quick else 300)
        n_formula = _formula_repeats(mde_log, repeats, 10.0)
        rows.append(
            Row(
                "verdicts",
                f"repeats for 80% power at +10% ({label} noise)",
                float(n_sim or n_formula),
                "",
                "",
                None,
                (f"simulated: {n_sim}" if n_sim else "beyond 24 by simulation") + f"; the MDE formula with the "
                f"residual seen at {repeats} repeats gives {n_formula}",
            )
        )
    return rows


def bench_verdicts_mde(ctx: Context) -> list[Row]:
    from testkit.simulation.simulate import ladder_shape, simulate_verdicts
    from testkit.simulation.noise import load_proxy_noise

    model = load_proxy_noise()
    shape = ladder_shape("proxy-local", schedules=50)
    verdicts = simulate_verdicts(model, shape, 100 if ctx.quick else 500, seed=5)
    rows = []
    for rung, parent in shape.pairs:
        mdes = _mdes(verdicts, rung)
        rows.append(
            Row(
                "verdicts",
                f"MDE {rung} vs {parent}",
                float(np.median(mdes)),
                "%",
                "",
                None,
                f"median over {len(mdes)} simulated ladders at the default repeats, fitted noise (run sd "
                f"{100 * model.run_sd:.1f}%); at the 4% target {_mde_at(model.scaled(0.04), shape, rung, ctx):.1f}%",
            )
        )
    return rows


def _mde_at(model, shape, rung: str, ctx: Context) -> float:
    from testkit.simulation.simulate import simulate_verdicts

    verdicts = simulate_verdicts(
        model, shape, 50 if ctx.quick else 200, seed=6, pairs=[p for p in shape.pairs if p[0] == rung]
    )
    return float(np.median(_mdes(verdicts, rung)))


ADAPTIVE = (3, 5, 5.0)  # min, max, target MDE %: the first adaptive rule the demo's 10 minutes allowed
PROXY_LOCAL_BUDGET_BLOCKS = (9, 10)  # where its budget stopped the demos of 2026-12-05 (docs/statistics.md)


def _proxy_local_design():  # -> Design
    """proxy-local.yaml's own adaptive repeats, as its plan runs them."""
    from traceladder.config.loader import ladders_dir, load_ladder
    from traceladder.stats.sequential import Design

    rule = load_ladder(ladders_dir() / "proxy-local.yaml").ladder.adaptive
    assert rule is not None, "proxy-local's repeats are adaptive"
    return Design(rule.min, rule.max, rule.target_mde_pct, budget_s=rule.budget_s)


def bench_verdicts_adaptive(ctx: Context) -> list[Row]:
    from traceladder.stats.sequential import Design
    from testkit.simulation.noise import load_proxy_noise
    from testkit.simulation.simulate import ladder_shape, log_shift, one_per_ladder, simulate_adaptive

    fitted = load_proxy_noise()
    aa_n = 400 if ctx.quick else SIM_LADDERS
    power_n = 200 if ctx.quick else POWER_LADDERS
    rows = []
    cases = [
        (Design(*ADAPTIVE), (), "fitted", fitted),
        (Design(*ADAPTIVE), (), "2% noise", fitted.scaled(0.02)),
        # proxy-local's own rule; its demos' budget stopped them after 9 or 10 blocks, at a run sd of 3-7%
        (_proxy_local_design(), PROXY_LOCAL_BUDGET_BLOCKS, "5% noise, proxy-local's rule", fitted.scaled(0.05)),
    ]
    for design, budget_blocks, label, model in cases:
        shape = ladder_shape("proxy-local", repeats=design.max_blocks, schedules=100)
        budget = f", the budget stopping at {' or '.join(map(str, budget_blocks))} blocks" if budget_blocks else ""
        outcomes = simulate_adaptive(model, shape, design, aa_n, seed=21, budget_blocks=budget_blocks)
        k, n = one_per_ladder([o.verdicts for o in outcomes], seed=22)
        lo, hi = _ci(k, n)
        blocks = [o.blocks for o in outcomes]
        spread = ", ".join(f"{b}: {blocks.count(b)}" for b in design.looks)
        rows.append(
            Row(
                "verdicts",
                f"A/A false calls, simulated, adaptive repeats ({label})",
                100 * k / n,
                "%",
                f"CI upper <= {100 * TARGET_UPPER:.1f}",
                hi <= TARGET_UPPER,
                f"{k}/{n} ladders (one random rung each), 95% CI {100 * lo:.1f}-{100 * hi:.1f}%; repeats "
                f"{{min: {design.min_blocks}, max: {design.max_blocks}, target_mde_pct: {design.target_mde_pct:g}}}"
                f"{budget}, critical z {', '.join(f'{c:.3f}' for c in design.critical_z)}; blocks run ({spread}), mean "
                f"{np.mean(blocks):.2f}; run sd {100 * model.run_sd:.1f}%",
            )
        )
        for pct in (5.0, 10.0):
            outcomes = simulate_adaptive(
                model,
                shape,
                design,
                power_n,
                seed=30 + int(pct),
                effects={"recompute_off": log_shift(pct)},
                budget_blocks=budget_blocks,
            )
            k = sum(o.verdicts["recompute_off"]["verdict"] == "slower" for o in outcomes)
            lo, hi = _ci(k, len(outcomes))
            rows.append(
                Row(
                    "verdicts",
                    f"power at +{pct:.0f}%, adaptive repeats ({label})",
                    100 * k / len(outcomes),
                    "%",
                    "",
                    None,
                    f"{k}/{len(outcomes)} `slower` on recompute_off, 95% CI {100 * lo:.1f}-{100 * hi:.1f}%; mean "
                    f"blocks run {np.mean([o.blocks for o in outcomes]):.2f} of {design.max_blocks}; run sd "
                    f"{100 * model.run_sd:.1f}%; via the noise model",
                )
            )
    return rows


SECTIONS = [
    bench_verdicts_aa_simulated,
    bench_verdicts_aa_real,
    bench_verdicts_aa_ladders,
    bench_verdicts_power_real,
    bench_verdicts_power,
    bench_verdicts_mde,
    bench_verdicts_adaptive,
]
