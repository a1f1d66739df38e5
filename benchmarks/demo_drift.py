"""Drift inside a block, on finished demos: `python -m benchmarks.demo_drift [--aa N] DEMO_DIR ...`

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
"""

from __future__ import annotations

import glob
import json
import math
import sys
from pathlib import Path

import numpy as np

DRIFTS = ("none", "linear", "quadratic")


def load_demo(demo: Path) -> tuple[dict, dict[str, dict]]:
    """The demo's measure runs as a plan (specs) and its results, keyed by rung id."""
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
    return {"metric": metric, "specs": specs}, results


def judge(plan: dict, results: dict[str, dict], drift: str) -> tuple[dict, dict]:
    from traceladder.stats.verdicts import VERDICT_METRICS, rung_verdicts

    verdicts, model = rung_verdicts({**plan, "drift": drift}, results)
    return verdicts, model[VERDICT_METRICS[plan["metric"]][0]]


def refit_lines(demo: Path) -> list[str]:
    plan, results = load_demo(demo)
    lines = [f"{demo.name}: {len(results)} measure runs, metric {plan['metric']}"]
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

    step, tokens, values = VERDICT_METRICS[plan["metric"]]
    levels = {
        figure: {r: fit.level(r) for r in fit.treatments}
        for figure, fit in measure_fits({**plan, "drift": "quadratic"}, results).items()
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


def aa_lines(demos: list[Path], permutations: int) -> list[str]:
    rng = np.random.default_rng(20261203)
    calls = {d: 0 for d in DRIFTS}
    mdes: dict[str, list[float]] = {d: [] for d in DRIFTS}
    comparisons = 0
    for demo in demos:
        plan, results = load_demo(demo)
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
    permutations = 0
    if argv[:1] == ["--aa"]:
        permutations, argv = int(argv[1]), argv[2:]
    if not argv:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    demos = [Path(a) for a in argv]
    for demo in demos:
        print("\n".join(refit_lines(demo)))
    if permutations:
        print("\n".join(aa_lines(demos, permutations)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
