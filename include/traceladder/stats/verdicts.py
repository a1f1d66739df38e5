"""From a plan and its rung results to the block model's figures: each rung's `vs_parent`, the
lens overheads paired within lens blocks, and the model's own numbers (df, variances) for the
summary. The statistics themselves are in stats/model.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from traceladder.core.documents import spec_purpose
from traceladder.stats.model import CONFIDENCE, POWER, BlockFit, Run, fit_blocks, log_or_none, t_quantile, verdict
from traceladder.stats.sequential import Design, critical_t, target_reached, worst

BATCH_SWITCHES = {"global_batch"}
STEP, TOKENS = "step_ms", "tokens_per_sec_per_gpu"
CPU_STEP, CPU_TOKENS = "step_cpu_ms", "tokens_per_cpu_s_per_gpu"
# The ladder's `metric` → (step figure, batch rungs' figure, the per-iteration values of the step figure)
VERDICT_METRICS = {
    "wall": (STEP, TOKENS, "step_ms_values"),
    "cpu": (CPU_STEP, CPU_TOKENS, "step_cpu_ms_values"),
}
STEP_METRICS = {STEP, CPU_STEP}
# How a verdict names its figure: (what, unit in a sentence, unit in a table cell)
METRIC_WORDS = {
    STEP: ("step time", "ms/step", "ms"),
    TOKENS: ("tokens/s/GPU", "tokens/s/GPU", "tok/s"),
    CPU_STEP: ("step CPU time", "CPU ms/step", "CPU ms"),
    CPU_TOKENS: ("tokens per CPU-second per GPU", "tokens/CPU-s/GPU", "tok/CPU-s"),
}
# Where a verdict on `metric: cpu` is shown, it says what that figure cannot see.
CPU_METRIC_CAVEAT = (
    "Verdicts judge the slowest rank's compute-thread CPU time (metric: cpu): it is blind to "
    "communication (collectives run on gloo's thread and the wait for a peer is off-CPU), so it "
    "cannot see what a dispatcher or overlap change does to communication, nor stragglers."
)


def plan_metric(plan: dict[str, Any]) -> str:
    """The ladder's verdict metric as the plan records it (plans before it: wall)."""
    return "cpu" if plan.get("metric") == "cpu" else "wall"


def spec_block(spec: dict[str, Any]) -> int:
    return int(spec["block"] if spec.get("block") is not None else spec["repeat"])


def _runs(
    plan: dict[str, Any],
    results: dict[str, dict[str, Any]],
    keep: Callable[[dict[str, Any]], bool],
    metric: str,
    treatment: Callable[[dict[str, Any]], str] = lambda s: s["rung"],
    values: str = "step_ms_values",
) -> list[Run]:
    """The ok runs whose spec `keep` accepts, as design cells; `treatment(spec)` names the cell.
    A failed run is simply a missing cell."""
    out = []
    for spec in plan["specs"]:
        result = results.get(spec["rung_id"])
        if not keep(spec) or not result or result.get("status") != "ok":
            continue
        y = log_or_none(result.get(metric))
        if y is None:
            continue
        iters = tuple(math.log(v) for v in result.get(values) or () if v and v > 0)
        out.append(Run(spec_block(spec), treatment(spec), y, iters))
    return out


def measured(plan: dict[str, Any], results: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each rung's measure runs (any status), for the table's per-rung columns."""
    out: dict[str, list[dict[str, Any]]] = {}
    for spec in plan["specs"]:
        if spec_purpose(spec) == "measure" and spec["rung_id"] in results:
            out.setdefault(spec["rung"], []).append(results[spec["rung_id"]])
    return out


def _model(fit: BlockFit, critical_z: float | None = None) -> dict[str, Any]:
    def pct(var: float | None) -> float | None:
        return None if var is None else 100 * math.sqrt(var)

    adjusted = {"critical_t": critical_t(critical_z, fit.df) if fit.df > 0 else None} if critical_z else {}
    return {
        **adjusted,
        "df": fit.df,
        "runs": sum(fit.counts.values()),
        "blocks": len(fit.blocks),
        "missing_cells": fit.missing,
        "t975": t_quantile(0.5 + CONFIDENCE / 2, fit.df) if fit.df > 0 else None,
        "t80": t_quantile(POWER, fit.df) if fit.df > 0 else None,
        "residual_ms": fit.mse,
        "iteration_var": fit.iter_var,
        "iterations_per_run": fit.mean_iters,
        "run_sd_pct": pct(fit.run_var),
        "between_run_sd_pct": pct(fit.between_run_var),
        "iteration_sd_pct": pct(fit.iter_var),
    }


def rung_verdicts(
    plan: dict[str, Any], results: dict[str, dict[str, Any]], critical_z: float | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """rung → vs_parent for every rung with a parent, and the model's figures per metric (the
    ladder's verdict metric: wall or cpu). `critical_z`: an adaptive ladder's look (its intervals
    and MDEs use that critical value, stats/sequential.py); None: the fixed 95%."""
    step, tokens, values = VERDICT_METRICS[plan_metric(plan)]
    fits = {metric: fit_blocks(_runs(plan, results, _measure, metric, values=values)) for metric in (step, tokens)}
    info: dict[str, dict[str, Any]] = {}
    for spec in plan["specs"]:
        info.setdefault(spec["rung"], spec)
    out = {}
    for rung, spec in info.items():
        parent = spec.get("parent")
        if parent is None:
            continue
        metric = tokens if spec.get("switch") in BATCH_SWITCHES else step
        fit = fits[metric]
        if parent not in fit.counts or rung not in fit.counts:
            out[rung] = verdict(fit.contrast(rung, parent), math.nan, metric, metric == tokens, critical_z)
            continue
        level = math.exp(fit.level(parent))
        out[rung] = verdict(fit.contrast(rung, parent), level, metric, metric == tokens, critical_z)
    return out, {metric: _model(fit, critical_z) for metric, fit in fits.items()}


# --- adaptive repeats (stats/sequential.py) ---------------------------------------------------------


def adaptive_design(plan: dict[str, Any]) -> Design | None:
    """The plan's adaptive design (plan.json `adaptive`), or None for a fixed number of blocks."""
    doc = plan.get("adaptive")
    return Design.from_dict(doc) if doc else None


def _first_blocks(plan: dict[str, Any], blocks: int) -> dict[str, Any]:
    """The plan as it stood after its first `blocks` measure blocks (the adaptive ladder's
    measure blocks are blocks 0..max-1); lens and profile runs stay out of the verdicts anyway."""
    keep = [s for s in plan["specs"] if not _measure(s) or spec_block(s) < blocks]
    return {**plan, "specs": keep}


def sequential_look(plan: dict[str, Any], results: dict[str, dict[str, Any]], blocks: int) -> dict[str, Any]:
    """The stopping rule after `blocks` measure blocks: every non-root rung's MDE at this look's
    critical value, and whether each is at or below the target."""
    design = adaptive_design(plan)
    if design is None:
        raise ValueError("the plan has no adaptive repeats")
    critical_z = design.z_at(blocks)
    verdicts, _ = rung_verdicts(_first_blocks(plan, blocks), results, critical_z)
    mdes: dict[str, float | None] = {rung: v["mde_pct"] for rung, v in verdicts.items()}
    return {
        "blocks": blocks,
        "critical_z": critical_z,
        "mde_pct": mdes,
        "worst_mde_pct": worst(mdes),
        "target_mde_pct": design.target_mde_pct,
        "target_reached": target_reached(mdes, design.target_mde_pct),
    }


def apply_stop(plan: dict[str, Any], stop: dict[str, Any] | None) -> dict[str, Any]:
    """The plan as it ran: after an early stop (`stop`, the record the DAG's check stored), the
    measure blocks it skipped are left out, so their runs are neither failures nor cells."""
    if not stop:
        return plan
    return {**_first_blocks(plan, int(stop["blocks"])), "stop": stop}


def sequential_verdicts(
    plan: dict[str, Any], results: dict[str, dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any], dict[str, Any] | None]:
    """`rung_verdicts`, and for an adaptive plan at the look where it stopped (its critical value)
    with the summary's `repeats`: blocks run of planned, why it stopped, every look's worst MDE."""
    design = adaptive_design(plan)
    if design is None:
        return (*rung_verdicts(plan, results), None)
    stop = plan.get("stop")
    ran = int(stop["blocks"]) if stop else design.max_blocks
    critical_z = design.z_at(ran)
    verdicts, model = rung_verdicts(plan, results, critical_z)
    looks = [sequential_look(plan, results, n) for n in design.looks if n <= ran]
    reached = target_reached({r: v["mde_pct"] for r, v in verdicts.items()}, design.target_mde_pct)
    target = f"{design.target_mde_pct:g}%"
    if stop:
        why = "target_reached"
        sentence = (
            f"{ran} of {design.max_blocks} planned blocks ran: stopped once every rung's MDE was {target} or less"
        )
    else:
        why = "max_reached"
        sentence = f"{ran} of {design.max_blocks} planned blocks ran, the maximum" + (
            f": every rung's MDE reached {target} or less only at the last"
            if reached
            else f", some MDE still above {target}"
        )
    sequential = {
        **design.as_dict(),
        "blocks_run": ran,
        "blocks_planned": design.max_blocks,
        "stopped": why,
        "critical_z_used": critical_z,
        "looks": [{k: look[k] for k in ("blocks", "critical_z", "worst_mde_pct", "target_reached")} for look in looks],
        "sentence": sentence,
    }
    return verdicts, model, sequential


def lens_overheads(
    plan: dict[str, Any], results: dict[str, dict[str, Any]], lens_rung: str
) -> dict[str, dict[str, Any]]:
    """lens → step-time ratio to the unprofiled run of the same block, with its 95% interval.
    Lens blocks hold a `none` run of the lens rung; plans without lens blocks pair by repeat."""
    runs = _runs(
        plan, results, lambda s: s["rung"] == lens_rung and spec_purpose(s) == "lens", STEP, lambda s: s["lens"]
    )
    if not any(r.treatment == "none" for r in runs):  # an older plan: the measure runs pair by repeat
        runs += _runs(plan, results, lambda s: s["rung"] == lens_rung and _measure(s), STEP, lambda s: "none")
    fit = fit_blocks(runs)
    out = {}
    for lens in fit.treatments:
        if lens == "none" or "none" not in fit.counts:
            continue
        c = fit.contrast(lens, "none")
        interval = c.interval()
        out[lens] = {
            "mean": math.exp(c.diff),
            "ci95": [math.exp(interval[0]), math.exp(interval[1])] if interval else None,
            "n": c.n_a,
            "df": c.df,
        }
    return out


def _measure(spec: dict[str, Any]) -> bool:
    return spec_purpose(spec) == "measure"


def verdict_findings(summary: dict[str, Any]) -> list[str]:
    """The verdict sentences: what each rung bought against its parent, and what could not be seen."""
    rows = [r for r in summary["rungs"] if r.get("vs_parent")]
    out = []
    called = [r for r in rows if r["vs_parent"]["verdict"] in ("faster", "slower")]
    for r in sorted(called, key=lambda r: -abs(r["vs_parent"]["delta_pct"])):
        v = r["vs_parent"]
        what, unit, _ = METRIC_WORDS.get(v["metric"], METRIC_WORDS[STEP])
        out.append(
            f"{r['rung']} ({r['switch']}={r['value']}) is {v['verdict']} than {r['parent']}: {what} "
            f"{v['delta_pct']:+.1f}% ({v['delta']:+.1f} {unit}, 95% CI {v['ci95'][0]:+.1f} to {v['ci95'][1]:+.1f})."
        )
    quiet = [r for r in rows if r["vs_parent"]["verdict"] == "no_change"]
    if quiet:
        out.append(
            "No change detected against the parent (smallest change these runs could see at 80% power): "
            + ", ".join(f"{r['rung']} (MDE {r['vs_parent']['mde_pct']:.1f}%)" for r in quiet)
            + "."
        )
    single = [r["rung"] for r in rows if r["vs_parent"]["verdict"] == "single_run"]
    if single:
        out.append(f"No verdict (fewer than two ok runs on a side): {', '.join(single)}.")
    repeats = summary.get("repeats")
    if repeats:
        out.append(
            f"Adaptive repeats: {repeats['sentence']}. Looking after every block from {repeats['min_blocks']} on "
            f"spends the 5% false-call rate over the looks (Lan-DeMets, O'Brien-Fleming type), so the intervals "
            f"and MDEs use the critical value of the look where it stopped: z {repeats['critical_z_used']:.2f}, "
            f"not 1.96."
        )
    if summary.get("metric") == "cpu" and rows:
        out.append(CPU_METRIC_CAVEAT)
    return out
