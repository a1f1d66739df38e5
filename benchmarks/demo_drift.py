"""Drift inside a block, on finished demos: `python -m benchmarks.demo_drift [--aa N] [--statistic S] DEMO_DIR ...`

A demo's local copy (`.traceladder/demo/<ladder>/<run id>/`) holds every run's `metrics.json`.
From those this rebuilds the plan's measure specs and judges them with the summary's own code
(`stats.verdicts.rung_verdicts`) under each `drift` (none, linear, quadratic). It prints, per fit,
the run-level sd (and its between-run and iteration parts), the residual df, and each rung's
effect against its parent (`*`: called) with its MDE.

`--aa N`: an A/A check on the demo's real noise. Each run keeps its time and block, but its
rung's effect is taken out (the rung's LS mean under the quadratic fit, subtracted from every
iteration), and the rung names are shuffled within each block, N times. Every parent pair is then
an A/A comparison whose noise is the demo's own: its drift, its slow spells, its iterations. It
prints the share of those comparisons called under each fit, and their median MDE. The
permutations of one demo share its noise, so they are not independent trials: the rate is a
check that real drift does not break a fit's calibration, without a binomial interval.

`--statistic median|mean` (a `metric: cpu` demo): each run's CPU figures remade from its
per-iteration values with that statistic first (the tokens per CPU-second too), so demos run
before and after the mean became the CPU figure are judged alike. Each demo then also prints a
model-free check of precision: the contrasts fitted on the first and the second half of the
blocks, and the RMS of their differences (about 0.82 x the run sd at 6 + 6 blocks when the model's
sd is right, whatever the statistic).
"""

from __future__ import annotations

from testkit.results import typed
import glob
import json
import math
import sys
from pathlib import Path

import numpy as np

DRIFTS = ("none", "linear", "quadratic")


def load_demo(demo: Path, statistic: str | None = None) -> tuple[dict, dict[str, dict]]:
    """The demo's measure runs as a plan (specs) and its results, keyed by rung id; with
    `statistic`, their CPU figures remade with it (`with_cpu_statistic`)."""
    results: dict[str, dict] = {}
    specs = []
    for path in sorted(glob.glob(str(demo / "*" / "metrics.json"))):
        m = json.loads(Path(path).read_text())
        if m.get("purpose") != "measure":
            continue
        results[m["rung_id"]] = m
        specs.append({k: m.get(k) for k in ("rung_id", "rung", "parent", "block", "repeat", "purpose", "switch")})
    if not specs:
        raise SystemExit(f"{demo}: no measure run's metrics.json (is this a demo's local copy?)")
    metric = "cpu" if any(m.get("step_cpu_ms") for m in results.values()) else "wall"
    if statistic:
        results = {k: with_cpu_statistic(m, statistic) for k, m in results.items()}
    return {"metric": metric, "specs": specs}, results


def with_cpu_statistic(m: dict, statistic: str) -> dict:
    """A run's CPU figures over its iterations' CPU times by `statistic`: step_cpu_ms, and its
    tokens per CPU-second (tokens per rank per step: tokens/s/GPU x step time, whole tokens)."""
    values = m.get("step_cpu_ms_values") or []
    if not values or m.get("status") != "ok" or m.get("tokens_per_sec_per_gpu") is None:
        return m
    cpu_ms = float(np.median(values)) if statistic == "median" else float(np.mean(values))
    tokens = round(m["tokens_per_sec_per_gpu"] * m["step_ms"] / 1000)
    return {
        **m,
        "step_cpu_ms": cpu_ms,
        "tokens_per_cpu_s_per_gpu": tokens / (cpu_ms / 1000),
        "step_cpu_statistic": statistic,  # so the fit floors it as that statistic
    }


def split_half_rms(plan: dict, results: dict[str, dict]) -> float:
    """RMS over rungs of (contrast on the first half of the blocks - on the second), in %."""
    blocks = sorted({int(s["block"]) for s in plan["specs"]})
    halves = (blocks[: len(blocks) // 2], blocks[len(blocks) // 2 :])
    effects = []
    for half in halves:
        sub = {**plan, "specs": [s for s in plan["specs"] if int(s["block"]) in half]}
        verdicts, _ = judge(sub, results, "quadratic")
        effects.append({r: math.log1p(v["delta_pct"] / 100) for r, v in verdicts.items() if v["delta_pct"] is not None})
    diffs = [effects[0][r] - effects[1][r] for r in effects[0] if r in effects[1]]
    return 100 * math.sqrt(float(np.mean(np.square(diffs))))


def judge(plan: dict, results: dict[str, dict], drift: str) -> tuple[dict, dict]:
    from traceladder.stats.verdicts import VERDICT_METRICS, rung_verdicts

    verdicts, model = rung_verdicts({**plan, "drift": drift}, typed(results))
    return verdicts, model[VERDICT_METRICS[plan["metric"]][0]]


def refit_lines(demo: Path, statistic: str | None = None) -> list[str]:
    plan, results = load_demo(demo, statistic)
    lines = [
        f"{demo.name}: {len(results)} measure runs, metric {plan['metric']}"
        + (f", CPU figure: {statistic}" if statistic else "")
        + f"; split-half RMS {split_half_rms(plan, results):.2f}%"
    ]
    for drift in DRIFTS:
        verdicts, model = judge(plan, results, drift)
        effects = " ".join(
            f"{rung} {v['delta_pct']:+.1f}%{'*' if v['verdict'] in ('faster', 'slower') else ''}"
            f" (MDE {v['mde_pct']:.0f})"
            for rung, v in verdicts.items()
            if v["delta_pct"] is not None and v["mde_pct"] is not None
        )
        lines.append(
            f"  drift {drift:9s} run sd {model['run_sd_pct']:4.1f}% (between {model['between_run_sd_pct']:.1f}, "
            f"iterations {model['iteration_sd_pct']:.1f}) {model['df']} df | {effects}"
        )
    return lines


def relabelled(plan: dict, results: dict[str, dict], rng: np.random.Generator) -> dict[str, dict]:
    """The results with each rung's effect removed and rung names shuffled within blocks; every
    figure the verdicts read (step, tokens, per-iteration values) is scaled alike."""
    from traceladder.stats.verdicts import VERDICT_METRICS, measure_fits

    step, tokens, values, _ = VERDICT_METRICS[plan["metric"]]
    levels = {
        figure: {r: fit.level(r) for r in fit.treatments}
        for figure, fit in measure_fits({**plan, "drift": "quadratic"}, typed(results)).items()
    }
    by_block: dict[int, list[dict]] = {}
    for spec in plan["specs"]:
        by_block.setdefault(int(spec["block"]), []).append(spec)
    out: dict[str, dict] = {}
    for specs in by_block.values():
        names = [s["rung"] for s in specs]
        shuffled = list(rng.permutation(names))
        for spec, new_rung in zip(specs, shuffled):
            m = dict(results[spec["rung_id"]])
            for figure, per_iter in ((step, values), (tokens, None)):
                level = levels[figure].get(spec["rung"])
                if level is None or m.get(figure) is None:
                    continue
                scale = math.exp(-level)
                m[figure] = m[figure] * scale
                if per_iter and m.get(per_iter):
                    m[per_iter] = [v * scale for v in m[per_iter]]
            out[f"{new_rung}@{spec['rung_id']}"] = m
    return out


def aa_lines(demos: list[Path], permutations: int, statistic: str | None = None) -> list[str]:
    rng = np.random.default_rng(20261203)
    calls = {d: 0 for d in DRIFTS}
    mdes: dict[str, list[float]] = {d: [] for d in DRIFTS}
    comparisons = 0
    for demo in demos:
        plan, results = load_demo(demo, statistic)
        for _ in range(permutations):
            shuffled = relabelled(plan, results, rng)
            specs = []
            for key in shuffled:
                rung, rung_id = key.split("@", 1)
                base = next(s for s in plan["specs"] if s["rung_id"] == rung_id)
                parent = next(s["parent"] for s in plan["specs"] if s["rung"] == rung)
                switch = next(s["switch"] for s in plan["specs"] if s["rung"] == rung)
                specs.append({**base, "rung_id": key, "rung": rung, "parent": parent, "switch": switch})
            aa_plan = {**plan, "specs": specs}
            for drift in DRIFTS:
                verdicts, _ = judge(aa_plan, shuffled, drift)
                judged = [v for v in verdicts.values() if v["mde_pct"] is not None]
                calls[drift] += sum(v["verdict"] in ("faster", "slower") for v in judged)
                mdes[drift] += [v["mde_pct"] for v in judged]
            comparisons += len(judged)
    lines = [f"A/A by relabelling: {len(demos)} demos x {permutations} shuffles, {comparisons} comparisons per fit"]
    for drift in DRIFTS:
        lines.append(
            f"  drift {drift:9s} called {calls[drift]}/{comparisons} = {100 * calls[drift] / comparisons:.1f}% "
            f"(nominal 5%), median MDE {float(np.median(mdes[drift])):.1f}%"
        )
    return lines


def main(argv: list[str]) -> int:
    permutations, statistic = 0, None
    while argv[:1] in (["--aa"], ["--statistic"]):
        if len(argv) < 2:
            print(f"demo_drift: {argv[0]} needs a value", file=sys.stderr)
            return 2
        if argv[0] == "--aa":
            permutations = int(argv[1])
        elif argv[1] in ("median", "mean"):
            statistic = argv[1]
        else:
            print(f"demo_drift: --statistic: {argv[1]!r} is not median or mean", file=sys.stderr)
            return 2
        argv = argv[2:]
    if not argv:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    demos = [Path(a) for a in argv]
    for demo in demos:
        print("\n".join(refit_lines(demo, statistic)))
    if permutations:
        print("\n".join(aa_lines(demos, permutations, statistic)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
