"""From a plan and its rung results to the block model's figures: each rung's `vs_parent`, the
lens overheads paired within lens blocks, and the model's own numbers (df, variances) for the
summary. The statistics themselves are in stats/model.py."""

from __future__ import annotations

import math
from dataclasses import replace
from collections.abc import Callable, Iterable, Mapping

from traceladder.core import layout
from traceladder.core.documents import JSONObject, JSONValue, RungResult, StopRecord, as_int, as_objects, spec_purpose
from traceladder.core.summary_parts import AdaptiveRepeats, LadderCalls, RungChange, summary_part, summary_rungs
from scipy.stats import norm
from scipy.stats import t as student_t

from traceladder.stats.model import (
    CONFIDENCE,
    DRIFT_DEGREES,
    POWER,
    BlockFit,
    Contrast,
    Run,
    fit_blocks,
    log_or_none,
    is_call,
    t_quantile,
    verdict,
)
from traceladder.stats.sequential import (
    ALPHA,
    CORRECTION_NAMES,
    CORRECTIONS,
    Design,
    critical_t,
    ladder_calls,
    look_z,
    mde_level,
    target_reached,
    worst,
)

BATCH_SWITCHES = {"global_batch"}
STEP, TOKENS = "step_ms", "tokens_per_sec_per_gpu"
CPU_STEP, CPU_TOKENS = "step_cpu_ms", "tokens_per_cpu_s_per_gpu"
# The ladder's `metric` → (step figure, batch rungs' figure, the per-iteration values of the step
# figure, the result field that says what a run's figure is over them, stats.model.RUN_STATISTICS;
# None: always the median). Wall time is Primus's median step; CPU time is the run's mean, its CPU
# cost per step (runner/primus_log.summarize), and a median in runs from before that.
VERDICT_METRICS = {
    "wall": (STEP, TOKENS, "step_ms_values", None),
    "cpu": (CPU_STEP, CPU_TOKENS, "step_cpu_ms_values", "step_cpu_statistic"),
}
STEP_METRICS = {STEP, CPU_STEP}
# How a verdict names its figure: (what, unit in a sentence, unit in a table cell)
METRIC_WORDS = {
    STEP: ("step time", "ms/step", "ms"),
    TOKENS: ("tokens/s/GPU", "tokens/s/GPU", "tok/s"),
    CPU_STEP: ("step CPU time", "CPU ms/step", "CPU ms"),
    CPU_TOKENS: ("tokens per CPU-second per GPU", "tokens/CPU-s/GPU", "tok/CPU-s"),
}


def change_pct_interval(vs: RungChange) -> tuple[float, float] | None:
    """A `vs_parent`'s 95% interval in % of the parent, the scale the verdict is judged on:
    `ci95_pct`, or for a summary from before it, its `ci95` over the parent's level (which
    `delta` / `delta_pct` give back)."""
    pct = vs.ci95_pct
    if pct is not None and len(pct) == 2:
        lo, hi = pct
        return (lo, hi) if lo is not None and hi is not None else None
    ci, delta, delta_pct = vs.ci95, vs.delta, vs.delta_pct
    if not (ci is not None and len(ci) == 2 and delta and delta_pct):
        return None
    lo, hi = ci
    if lo is None or hi is None:
        return None
    level = 100 * delta / delta_pct  # delta = level * delta_pct / 100
    return 100 * lo / level, 100 * hi / level


def not_called_over_ladder(vs: RungChange) -> bool:
    """A rung that a test of it on its own would call, but the ladder-wide rule does not."""
    return vs.verdict == "no_change" and vs.per_rung is not None and vs.per_rung.called


def per_rung_words(vs: RungChange) -> str:
    """The per-rung call of a rung not called over the ladder: `faster -5.6% [-10.7%, -0.1%]`."""
    own = vs.per_rung
    if own is None:
        raise ValueError("a rung change without a per-rung call")
    interval = change_pct_interval(own)
    ci = f" [{interval[0]:+.1f}%, {interval[1]:+.1f}%]" if interval else ""
    return f"{change_word(replace(own, metric=vs.metric))} {vs.delta_pct or 0.0:+.1f}%{ci}"


def interval_label(summary: Mapping[str, JSONValue]) -> str:
    """What the shown verdict intervals are: `95% CI`, or under a ladder-wide rule the level that
    decided its last call (`98.75% CI, Holm`; docs/statistics.md, "Calls over the whole ladder");
    a ladder with no comparison names no rule."""
    calls = summary_part(LadderCalls, summary.get("calls"), "summary.json: calls")
    if calls is None or calls.per_rung or not calls.comparisons:
        return "95% CI"
    level = calls.interval_level or ALPHA
    return f"{f'{100 * (1 - level):.2f}'.rstrip('0').rstrip('.')}% CI, {calls.name}"


def change_word(vs: RungChange) -> str:
    """How a call reads: `faster`/`slower` for a step figure, `higher`/`lower` for a batch rung's
    throughput (the stored verdict stays `faster`/`slower` for both)."""
    word = str(vs.verdict)
    if vs.metric in STEP_METRICS or word not in ("faster", "slower"):
        return word
    return "higher" if word == "faster" else "lower"


# Where a verdict on `metric: cpu` is shown, it says what that figure cannot see.
CPU_METRIC_CAVEAT = (
    "Verdicts judge the slowest rank's compute-thread CPU time (metric: cpu): it is blind to "
    "communication (collectives run on gloo's thread and the wait for a peer is off-CPU), so it "
    "cannot see what a dispatcher or overlap change does to communication, nor stragglers."
)


def plan_metric(plan: Mapping[str, JSONValue]) -> str:
    """The ladder's verdict metric as the plan records it (plans before it: wall)."""
    return "cpu" if plan.get("metric") == "cpu" else "wall"


def plan_drift(plan: Mapping[str, JSONValue]) -> str:
    """The plan's drift terms (`drift` in the ladder; plans before it: none)."""
    drift = str(plan.get("drift") or "none")
    if drift not in DRIFT_DEGREES:
        raise ValueError(f"plan.json drift: {drift!r} is not one of {', '.join(DRIFT_DEGREES)}")
    return drift


def spec_block(spec: Mapping[str, JSONValue]) -> int:
    return as_int(spec["block"] if spec.get("block") is not None else spec["repeat"])


def plan_specs(plan: Mapping[str, JSONValue]) -> list[JSONObject]:
    """The plan's specs (plan.json `specs`, each as `RunnerSpec.to_json` writes it)."""
    return as_objects(plan["specs"])


def _runs(
    plan: Mapping[str, JSONValue],
    results: Mapping[str, RungResult],
    keep: Callable[[JSONObject], bool],
    metric: str,
    treatment: Callable[[JSONObject], str] = lambda s: str(s["rung"]),
    values: str = "step_ms_values",
) -> list[Run]:
    """The ok runs whose spec `keep` accepts, as design cells; `treatment(spec)` names the cell.
    A failed run is simply a missing cell."""
    out = []
    for spec in plan_specs(plan):
        result = results.get(str(spec["rung_id"]))
        if not keep(spec) or result is None or not result.ok:
            continue
        y = log_or_none(result.figure(metric))
        if y is None:
            continue
        iters = tuple(math.log(v) for v in result.iteration_values(values) if v and v > 0)
        out.append(Run(spec_block(spec), treatment(spec), y, iters, _midpoint(result)))
    return out


def _midpoint(result: RungResult) -> float | None:
    """When a run ran: the middle of its start and end (epoch s), for the drift terms."""
    start, end = result.started_at, result.ended_at
    return None if start is None or end is None else (start + end) / 2


def measured(plan: Mapping[str, JSONValue], results: Mapping[str, RungResult]) -> dict[str, list[RungResult]]:
    """Each rung's measure runs (any status), for the table's per-rung columns."""
    out: dict[str, list[RungResult]] = {}
    for spec in plan_specs(plan):
        rung_id = str(spec["rung_id"])
        if spec_purpose(spec) == "measure" and rung_id in results:
            out.setdefault(str(spec["rung"]), []).append(results[rung_id])
    return out


def _model(fit: BlockFit, drift: str, critical_z: float | None = None) -> JSONObject:
    def pct(var: float | None) -> float | None:
        return None if var is None else 100 * math.sqrt(var)

    adjusted: JSONObject = {"critical_t": critical_t(critical_z, fit.df) if fit.df > 0 else None} if critical_z else {}
    return {
        **adjusted,
        "df": fit.df,
        "runs": sum(fit.counts.values()),
        "blocks": len(fit.blocks),
        "missing_cells": fit.missing,
        "drift": drift,
        "drift_terms": fit.drift_terms,
        "run_statistic": fit.statistic,
        "t975": t_quantile(0.5 + CONFIDENCE / 2, fit.df) if fit.df > 0 else None,
        "t80": t_quantile(POWER, fit.df) if fit.df > 0 else None,
        "residual_ms": fit.mse,
        "iteration_var": fit.iter_var,
        "iterations_per_run": fit.mean_iters,
        "run_sd_pct": pct(fit.run_var),
        "between_run_sd_pct": pct(fit.between_run_var),
        "iteration_sd_pct": pct(fit.iter_var),
    }


def _run_statistic(results: Mapping[str, RungResult], figure: str, field: str | None) -> str:
    """What the runs' `figure` is over their iterations, as each result records it in `field`:
    the mean only where every run that has the figure says so (a summary built again over runs
    from before the mean keeps their median and its floor)."""
    if field is None:
        return "median"
    assert field == "step_cpu_statistic", field  # the one field that records it (VERDICT_METRICS)
    said = {r.step_cpu_statistic for r in results.values() if r.ok and r.figure(figure) is not None}
    return "mean" if said == {"mean"} else "median"


def measure_fits(plan: Mapping[str, JSONValue], results: Mapping[str, RungResult]) -> dict[str, BlockFit]:
    """The block model of the measure runs on the plan's verdict metric: its step figure and its
    batch rungs' figure, each fitted with the plan's drift terms."""
    step, tokens, values, recorded = VERDICT_METRICS[plan_metric(plan)]
    degree = DRIFT_DEGREES[plan_drift(plan)]
    statistic = _run_statistic(results, step, recorded)
    return {
        metric: fit_blocks(_runs(plan, results, _measure, metric, values=values), degree, statistic)
        for metric in (step, tokens)
    }


Comparison = tuple[Contrast, float, str, bool]  # rung minus parent, the parent's level, metric, higher is better


def _comparisons(
    plan: Mapping[str, JSONValue], results: Mapping[str, RungResult]
) -> tuple[dict[str, Comparison], dict[str, BlockFit]]:
    """rung → its contrast with its parent on the plan's verdict metric (batch rungs: tokens), and
    the block fits per metric."""
    step, tokens, _, _ = VERDICT_METRICS[plan_metric(plan)]
    fits = measure_fits(plan, results)
    info: dict[str, JSONObject] = {}
    for spec in plan_specs(plan):
        info.setdefault(str(spec["rung"]), spec)
    out: dict[str, Comparison] = {}
    for rung, spec in info.items():
        if spec.get("parent") is None:
            continue
        parent = str(spec["parent"])
        metric = tokens if spec.get("switch") in BATCH_SWITCHES else step
        fit = fits[metric]
        level = math.exp(fit.level(parent)) if parent in fit.counts and rung in fit.counts else math.nan
        out[rung] = (fit.contrast(rung, parent), level, metric, metric == tokens)
    return out, fits


def rung_verdicts(
    plan: Mapping[str, JSONValue], results: Mapping[str, RungResult], critical_z: float | None = None
) -> tuple[dict[str, JSONObject], JSONObject]:
    """rung → vs_parent for every rung with a parent, each tested on its own (per rung), and the
    model's figures per metric (the ladder's verdict metric: wall or cpu). `critical_z`: an
    adaptive ladder's look (its intervals and MDEs use that critical value, stats/sequential.py);
    None: the fixed 95%."""
    comparisons, fits = _comparisons(plan, results)
    out = {rung: verdict(c, level, metric, up, critical_z) for rung, (c, level, metric, up) in comparisons.items()}
    drift = plan_drift(plan)
    model: JSONObject = {metric: _model(fit, drift, critical_z) for metric, fit in fits.items()}
    return out, model


def plan_correction(plan: Mapping[str, JSONValue]) -> str:
    """The plan's ladder-wide rule (`correction` in the ladder; plans before it: per_rung, as
    they were judged)."""
    rule = str(plan.get("correction") or "per_rung")
    if rule not in CORRECTIONS:
        raise ValueError(f"plan.json correction: {rule!r} is not one of {', '.join(CORRECTIONS)}")
    return rule


def _tails(comparisons: Mapping[str, Comparison]) -> dict[str, float]:
    """Each judged comparison's one-sided tail t.sf(|d / se|, df): the rule's evidence. A rung
    without an interval (fewer than two ok runs on a side) is not judged, so not counted in k."""
    return {
        rung: float(student_t.sf(abs(c.diff) / c.se, c.df))
        for rung, (c, level, _, _) in comparisons.items()
        if c.se is not None and c.se > 0 and math.isfinite(c.diff) and math.isfinite(level)
    }


def _pct(log_value: float | None) -> float | None:
    return None if log_value is None else 100 * math.expm1(log_value)


def ladder_verdicts(
    plan: Mapping[str, JSONValue],
    results: Mapping[str, RungResult],
    design: Design | None = None,
    blocks: int = 0,
    final: bool = False,
) -> tuple[dict[str, JSONObject], JSONObject, JSONObject]:
    """rung → vs_parent under the plan's ladder-wide rule (`correction`), the model's figures,
    and the summary's `calls` record. `design`, `blocks`, `final`: the adaptive look where the
    ladder stopped (stats/sequential.look_z); None: a fixed design. Each vs_parent keeps the
    per-rung call, interval and MDE under `per_rung` (docs/statistics.md, "Calls over the whole
    ladder")."""
    alpha = design.alpha if design else ALPHA
    rule = plan_correction(plan)
    own_z = look_z(design, blocks, final, alpha) if design else None  # None: the fixed 95% (t.975)
    comparisons, fits = _comparisons(plan, results)
    per_rung = {rung: verdict(c, level, metric, up, own_z) for rung, (c, level, metric, up) in comparisons.items()}
    model: JSONObject = {metric: _model(fit, plan_drift(plan), own_z) for metric, fit in fits.items()}
    tails = _tails(comparisons)
    calls = ladder_calls(tails, lambda level: float(norm.sf(look_z(design, blocks, final, level))), rule, alpha)
    interval_z = look_z(design, blocks, final, calls.interval_level)
    mde_z = look_z(design, blocks, final, calls.mde_level)
    out: dict[str, JSONObject] = {}
    for rung, (c, level, metric, up) in comparisons.items():
        own = per_rung[rung]
        if rule == "per_rung" or rung not in tails:
            v: JSONObject = dict(own)
        else:
            v = verdict(c, level, metric, up, interval_z)
            v["verdict"] = ("faster" if (c.diff > 0) == up else "slower") if rung in calls.called else "no_change"
            v["mde_pct"] = _pct(c.mde_at(mde_z))
        v["per_rung"] = {k: own[k] for k in ("verdict", "ci95", "ci95_pct", "mde_pct")}
        out[rung] = v
    missed = sorted(r for r in tails if is_call(per_rung[r]) and r not in calls.called)
    record: JSONObject = {
        "rule": rule,
        "name": CORRECTION_NAMES[rule],
        "alpha": alpha,
        "comparisons": calls.comparisons,
        "called": [*sorted(calls.called)],
        "not_called_over_ladder": [*missed],
        "interval_level": calls.interval_level,
        "interval_z": interval_z,
        "mde_level": calls.mde_level,
        "mde_z": mde_z,
        "per_rung_z": own_z if own_z is not None else look_z(None, 0, False, alpha),
        "sentence": calls_sentence(
            rule, alpha, calls.comparisons, len(calls.called), calls.interval_level, interval_z, calls.mde_level, mde_z
        ),
    }
    ladder_mde, own_mde = _median_mde(out.values()), _median_mde(per_rung.values())
    if rule != "per_rung" and ladder_mde is not None and own_mde is not None:
        # what the rule costs in resolution, said where it is stated
        record["sentence"] = (
            f"{record['sentence']}; what it costs: a median MDE of {ladder_mde:.1f}% against {own_mde:.1f}% "
            "for a rung tested alone"
        )
    return out, model, record


def _median_mde(verdicts: Iterable[Mapping[str, JSONValue]]) -> float | None:
    mdes = sorted(m for v in verdicts if (m := RungChange.from_dict(v).mde_pct) is not None)
    if not mdes:
        return None
    half = len(mdes) // 2
    return mdes[half] if len(mdes) % 2 else (mdes[half - 1] + mdes[half]) / 2


def calls_sentence(
    rule: str, alpha: float, k: int, called: int, interval_level: float, interval_z: float, level: float, z: float
) -> str:
    """The rule in one sentence, with its levels, so a reader can redo it; "" with no comparison
    (a one-rung ladder: no verdict, so no rule to state)."""
    if k == 0:
        return ""
    if rule == "per_rung":
        return (
            f"each verdict is a two-sided test at {100 * alpha:g}% (per rung): a rung that does not move is still "
            f"called faster or slower up to 1 time in {1 / alpha:.0f}, so over these {k} comparisons up to "
            f"{k * alpha:.2f} such calls are expected"
        )
    rate = "false discovery rate" if rule == "benjamini_hochberg" else "family-wise false-call rate"
    step = (
        f"the j-th smallest p-value is called up to the largest j with p <= j x {100 * alpha:g}%/{k}"
        if rule == "benjamini_hochberg"
        else f"the j-th smallest p-value is called while p <= {100 * alpha:g}%/({k} - j + 1)"
    )
    return (
        f"calls are controlled over the ladder's {k} comparisons by {CORRECTION_NAMES[rule]} at a {100 * alpha:g}% "
        f"{rate} ({step}): {called} called; each interval is at the level that decided the last call, "
        f"{100 * interval_level:.2f}% (z {interval_z:.2f}), and each MDE at {100 * level:.2f}% (z {z:.2f}), the level "
        f"a rung must clear when no other rung is called"
    )


# --- adaptive repeats (stats/sequential.py) ---------------------------------------------------------


def adaptive_design(plan: Mapping[str, JSONValue]) -> Design | None:
    """The plan's adaptive design (plan.json `adaptive`), or None for a fixed number of blocks."""
    doc = plan.get("adaptive")
    return Design.from_dict(doc) if doc else None


def _first_blocks(plan: Mapping[str, JSONValue], blocks: int) -> JSONObject:
    """The plan as it stood after its first `blocks` measure blocks (the adaptive ladder's
    measure blocks are blocks 0..max-1); lens and profile runs stay out of the verdicts anyway."""
    keep: list[JSONValue] = [s for s in plan_specs(plan) if not _measure(s) or spec_block(s) < blocks]
    return {**plan, "specs": keep}


def sequential_look(
    plan: Mapping[str, JSONValue], results: Mapping[str, RungResult], blocks: int, *, final: bool = False
) -> JSONObject:
    """The stopping rule after `blocks` measure blocks: every non-root rung's MDE at this look's
    critical value for the ladder-wide rule's MDE level, and whether each is at or below the
    target. `final`: the look the time budget made the last, at the critical value that spends
    the alpha left (Design.final_z_at)."""
    design = adaptive_design(plan)
    if design is None:
        raise ValueError("the plan has no adaptive repeats")
    comparisons, _ = _comparisons(_first_blocks(plan, blocks), results)
    # the MDEs at the rule's level (alpha / k over the ladder, alpha per rung): never the effects
    critical_z = look_z(design, blocks, final, mde_level(plan_correction(plan), len(_tails(comparisons)), design.alpha))
    mdes: dict[str, float | None] = {rung: _pct(c.mde_at(critical_z)) for rung, (c, _, _, _) in comparisons.items()}
    return {
        "blocks": blocks,
        "critical_z": critical_z,
        "mde_pct": dict(mdes),
        "worst_mde_pct": worst(mdes),
        "target_mde_pct": design.target_mde_pct,
        "target_reached": target_reached(mdes, design.target_mde_pct),
    }


def measure_block_starts(plan: Mapping[str, JSONValue], results: Mapping[str, RungResult]) -> list[float]:
    """When each measure block with a timed run began (its earliest metrics.json `started_at`,
    epoch s), in block order: the time budget's look ahead (stats/sequential.over_budget)."""
    starts: dict[int, float] = {}
    for spec in plan_specs(plan):
        result = results.get(str(spec["rung_id"]))
        start = result.started_at if result is not None else None
        if _measure(spec) and start is not None:
            block = spec_block(spec)
            starts[block] = min(start, starts.get(block, start))
    return [starts[b] for b in sorted(starts)]


def apply_stop(plan: JSONObject, stop: JSONObject | None) -> JSONObject:
    """The plan as it ran: after an early stop (`stop`, the record the DAG's check stored), the
    measure blocks it skipped are left out, so their runs are neither failures nor cells."""
    if not stop:
        return plan
    return {**_first_blocks(plan, StopRecord.from_dict(stop, layout.STOP_OBJECT).blocks), "stop": stop}


def sequential_verdicts(
    plan: Mapping[str, JSONValue], results: Mapping[str, RungResult]
) -> tuple[dict[str, JSONObject], JSONObject, JSONObject | None, JSONObject]:
    """`ladder_verdicts` (the plan's ladder-wide rule, and its `calls` record), and for an
    adaptive plan at the look where it stopped (its critical values) with the summary's
    `repeats`: blocks run of planned, why it stopped, every look's worst MDE."""
    design = adaptive_design(plan)
    if design is None:
        verdicts, model, calls = ladder_verdicts(plan, results)
        return verdicts, model, None, calls
    stop = summary_part(StopRecord, plan.get("stop"), "plan.json: stop")
    ran = stop.blocks if stop else design.max_blocks
    budget_stop = stop is not None and stop.reason == "budget"
    critical_z = design.final_z_at(ran) if budget_stop else design.z_at(ran)
    verdicts, model, calls = ladder_verdicts(plan, results, design, ran, budget_stop)
    looks = [sequential_look(plan, results, n, final=budget_stop and n == ran) for n in design.looks if n <= ran]
    reached = target_reached({r: RungChange.from_dict(v).mde_pct for r, v in verdicts.items()}, design.target_mde_pct)
    target = f"{design.target_mde_pct:g}%"
    if budget_stop:
        why = "budget"
        sentence = (
            f"{ran} of {design.max_blocks} planned blocks ran: another would have ended more than "
            f"{design.budget_s:g} s after the plan (the time budget), "
            + (f"every rung's MDE {target} or less" if reached else f"some MDE still above {target}")
            + "; this look is the last, so its critical value uses all of the 5% false-call rate the earlier "
            "looks left unused"
        )
    elif stop:
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
    sequential: JSONObject = {
        **design.as_dict(),
        "blocks_run": ran,
        "blocks_planned": design.max_blocks,
        "stopped": why,
        "critical_z_used": critical_z,
        "looks": [{k: look[k] for k in ("blocks", "critical_z", "worst_mde_pct", "target_reached")} for look in looks],
        "sentence": sentence,
    }
    return verdicts, model, sequential, calls


def lens_overheads(
    plan: Mapping[str, JSONValue], results: Mapping[str, RungResult], lens_rung: str
) -> dict[str, JSONObject]:
    """lens → step-time ratio to the unprofiled run of the same block, with its 95% interval.
    Lens blocks hold a `none` run of the lens rung; plans without lens blocks pair by repeat."""
    runs = _runs(
        plan, results, lambda s: s["rung"] == lens_rung and spec_purpose(s) == "lens", STEP, lambda s: str(s["lens"])
    )
    if not any(r.treatment == "none" for r in runs):  # an older plan: the measure runs pair by repeat
        runs += _runs(plan, results, lambda s: s["rung"] == lens_rung and _measure(s), STEP, lambda s: "none")
    fit = fit_blocks(runs)
    out: dict[str, JSONObject] = {}
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


def _measure(spec: Mapping[str, JSONValue]) -> bool:
    return spec_purpose(spec) == "measure"


def verdict_findings(summary: Mapping[str, JSONValue]) -> list[str]:
    """The verdict sentences: what each rung bought against its parent, and what could not be seen."""
    rows = [(r, r.vs_parent) for r in summary_rungs(summary["rungs"]) if r.vs_parent]
    out = []
    called = [(r, v) for r, v in rows if v.called]
    label = interval_label(summary)
    for r, v in sorted(called, key=lambda rv: -abs(rv[1].delta_pct or 0.0)):
        what, unit, _ = METRIC_WORDS.get(str(v.metric), METRIC_WORDS[STEP])
        delta_pct, delta = v.delta_pct or 0.0, v.delta or 0.0
        interval = change_pct_interval(v)
        ci = f"{label} {interval[0]:+.1f}% to {interval[1]:+.1f}%; " if interval else ""
        head = f"{r.rung} ({r.switch}={r.value})"
        if v.metric in STEP_METRICS:
            head += f" is {v.verdict} than {r.parent}: {what}"
        else:
            head += f" has {change_word(v)} {what} than {r.parent}:"
        out.append(f"{head} {delta_pct:+.1f}% ({ci}{delta:+.1f} {unit}).")
    quiet = [(r, v) for r, v in rows if v.verdict == "no_change"]
    if quiet:
        out.append(
            "No change detected against the parent (smallest change these runs could see at 80% power): "
            + ", ".join(f"{r.rung} (MDE {v.mde_pct or 0.0:.1f}%)" for r, v in quiet)
            + "."
        )
    calls = summary_part(LadderCalls, summary.get("calls"), "summary.json: calls")
    missed = [(r, v) for r, v in quiet if not_called_over_ladder(v)]
    if calls and missed:
        out.append(
            f"Not called over the ladder ({calls.name}), though a test of the rung on its own would call it: "
            + "; ".join(f"{r.rung} {per_rung_words(v)}" for r, v in missed)
            + "."
        )
    single = [r.rung for r, v in rows if v.verdict == "single_run"]
    if single:
        out.append(f"No verdict (fewer than two ok runs on a side): {', '.join(single)}.")
    repeats = summary_part(AdaptiveRepeats, summary.get("repeats"), "summary.json: repeats")
    if repeats:
        critical_z_used = repeats.critical_z_used or 0.0
        out.append(
            f"Adaptive repeats: {repeats.sentence}. Looking after every block from {repeats.min_blocks} on "
            f"spends the 5% false-call rate over the looks (Lan-DeMets, O'Brien-Fleming type), so a rung tested "
            f"on its own uses the critical value of the look where it stopped: z {critical_z_used:.2f}, "
            f"not 1.96"
            + (
                "; the ladder-wide rule spends its levels over the looks the same way."
                if calls and calls.rule != "per_rung"
                else "."
            )
        )
    rule = calls.stated_rule if calls else ""
    if rule:
        out.append(f"{rule[:1].upper()}{rule[1:]}.")
    if summary.get("metric") == "cpu" and rows:
        out.append(CPU_METRIC_CAVEAT)
    return out
