"""How a summary writes an estimate and a change, in Markdown, HTML and the UI alike (its own
module, so the history renderer and markdown.py need not import each other)."""

from __future__ import annotations

from collections.abc import Mapping

from traceladder.core.documents import JSONValue, as_number
from traceladder.core.summary_parts import (
    AdaptiveRepeats,
    BlockModelFit,
    LadderCalls,
    LensRatio,
    RungChange,
    RunEstimate,
    summary_part,
    summary_rungs,
)
from traceladder.stats.verdicts import (
    METRIC_WORDS,
    TOKENS,
    change_pct_interval,
    change_word,
    not_called_over_ladder,
    per_rung_words,
)


def fmt_est(est: RunEstimate | LensRatio | Mapping[str, JSONValue] | None, digits: int = 1) -> str:
    """mean ± half-width, or mean [lo, hi] where the interval is asymmetric (a ratio)."""
    if not est:
        return "-"
    if isinstance(est, (RunEstimate, LensRatio)):
        if est.ci95 is None:
            return f"{est.mean:.{digits}f} (1 run)" if est.n == 1 else f"{est.mean:.{digits}f}"
        if isinstance(est.ci95, list):
            return f"{est.mean:.{digits}f} [{est.ci95[0]:.{digits}f}, {est.ci95[1]:.{digits}f}]"
        return f"{est.mean:.{digits}f} ± {est.ci95:.{digits}f}"
    ci = est.get("ci95")
    if ci is None:
        return f"{est['mean']:.{digits}f} (1 run)" if est.get("n") == 1 else f"{est['mean']:.{digits}f}"
    if isinstance(ci, list):
        return f"{est['mean']:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"
    return f"{est['mean']:.{digits}f} ± {ci:.{digits}f}"


def fmt_gb(gb: JSONValue) -> str:
    """A memory figure in GB to about three significant digits: a GPU's 128.1, a CPU proxy's 0.064."""
    x = as_number(gb)
    if x is None:
        return "-"
    # the unit's decimals chosen on the rounded value, so 9.996 prints "10.0", not "10.00"
    if round(x, 2) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}" if round(x, 3) >= 1 else f"{x:.3f}"


def fmt_change(found: RungChange | Mapping[str, JSONValue] | None, unit: str | None = None) -> str:
    """A `vs_parent` cell: the call, the delta, and the change in % with its 95% interval (the
    scale the verdict is judged on), or the MDE where nothing was seen. A template passes the
    stored JSON: it is read as its class here."""
    if not found:
        return "-"
    vs = found if isinstance(found, RungChange) else RungChange.from_dict(dict(found))
    unit = unit or METRIC_WORDS.get(str(vs.metric), METRIC_WORDS[TOKENS])[2]
    if vs.delta is None:
        return "single run: no verdict"
    change = f"{vs.delta:+.1f} {unit}, {vs.delta_pct:+.1f}%"
    if vs.verdict == "single_run":
        return f"{change}, single run: no verdict"
    pct = change_pct_interval(vs)
    interval = f" [{pct[0]:+.1f}%, {pct[1]:+.1f}%]" if pct else ""
    if vs.verdict == "no_change":
        if not_called_over_ladder(vs):  # a test of the rung alone calls it; the ladder-wide rule does not
            return (
                f"no change detected{interval}, MDE {vs.mde_pct:.1f}%; per rung {per_rung_words(vs)}: "
                "not called over the ladder"
            )
        return f"no change detected{interval}, MDE {vs.mde_pct:.1f}%"
    return f"{change_word(vs)}: {change}{interval}"


def _fit(model: BlockModelFit | Mapping[str, JSONValue]) -> BlockModelFit:
    """A template passes the stored JSON: it is read as its class here."""
    return model if isinstance(model, BlockModelFit) else BlockModelFit.from_dict(dict(model))


def fmt_trend(model: BlockModelFit | Mapping[str, JSONValue]) -> str:
    """The block model's drift terms as a phrase (" with a quadratic time trend inside each block
    (16 terms)"), or "" when it fitted none."""
    fit = _fit(model)
    drift = str(fit.drift or "none")
    return (
        f" with a {drift} time trend inside each block ({fit.drift_terms} terms)"
        if (drift != "none" and fit.drift_terms)
        else ""
    )


def fmt_false_calls(summary: Mapping[str, JSONValue]) -> str:
    """How the verdicts control false calls over the ladder: the `calls` record's sentence, which
    names the rule (Benjamini–Hochberg, Holm), or for a rung-by-rung summary (and those from before
    the record) what the 5% level means over the ladder: a rung that does not move is still called
    1 time in 20, so k comparisons expect k/20 such calls. Rungs judged single_run do not count.
    The Ladders page shows the same sentence (ui/views.page_templates' `false_calls`)."""
    calls = summary_part(LadderCalls, summary.get("calls"), "summary.json: calls")
    if calls and calls.sentence:
        return calls.stated_rule  # "" over no comparison: a one-rung ladder states no rule
    judged = sum(
        1
        for row in summary_rungs(summary.get("rungs") or [])
        if row.vs_parent and row.vs_parent.verdict not in (None, "single_run")
    )
    if not judged:
        return ""
    return (
        "each verdict is a two-sided test at 5%: a rung that does not move is still called faster or slower "
        f"up to 1 time in 20, so over these {judged} comparisons up to {judged / 20:.2f} such calls are expected"
    )


def fmt_resolution(summary: Mapping[str, JSONValue]) -> str:
    """What this run could resolve, said once: the judged rungs' median MDE (and their range);
    a rung that moved less reads "no change detected"."""
    mdes = sorted(
        m
        for row in summary_rungs(summary.get("rungs") or [])
        if row.vs_parent and (m := row.vs_parent.mde_pct) is not None
    )
    if not mdes:
        return ""
    mid = mdes[len(mdes) // 2] if len(mdes) % 2 else (mdes[len(mdes) // 2 - 1] + mdes[len(mdes) // 2]) / 2
    spread = f"; {mdes[0]:.1f}% to {mdes[-1]:.1f}% over the rungs" if mdes[-1] - mdes[0] >= 0.05 else ""
    return (
        f"at this noise these runs resolve a change of about {mid:.1f}% (the median MDE{spread}); "
        "a rung that moved less reads no change detected, whatever it does on a quieter machine"
    )


def batch_settings(summary: Mapping[str, JSONValue]) -> str:
    """The batch rungs' settings where they ran (summary/build.batch_setting), in one line."""
    parts = [
        f"{row.rung} sets {row.batch_setting}" for row in summary_rungs(summary.get("rungs") or []) if row.batch_setting
    ]
    return "Batch rungs: " + "; ".join(parts) + "." if parts else ""


def adaptive_levels(summary: Mapping[str, JSONValue]) -> str:
    """Which critical values an adaptive ladder's verdicts used at the look where it stopped."""
    repeats = summary_part(AdaptiveRepeats, summary.get("repeats"), "summary.json: repeats")
    if repeats is None:
        return ""
    own = f"z {repeats.critical_z_used or 0.0:.2f}"
    calls = summary_part(LadderCalls, summary.get("calls"), "summary.json: calls")
    if calls is None or calls.per_rung:
        return f"intervals and MDEs at that look's critical value, {own}"
    return (
        f"a rung tested alone would use that look's critical value, {own}; {calls.name}'s levels are spent "
        f"over the looks the same way: intervals at z {calls.interval_z or 0.0:.2f}, "
        f"MDEs at z {calls.mde_z or 0.0:.2f}"
    )


def fmt_fit(model: BlockModelFit | Mapping[str, JSONValue]) -> str:
    """The block model's size and noise: runs, blocks, residual df, run-level sd."""
    fit = _fit(model)
    return f"{fit.runs} runs in {fit.blocks} blocks, {fit.df} residual df, run-level sd {fit.run_sd_pct:.1f}%"


# Beside the model line: why a row's plain means and its verdict can disagree.
MEANS_VS_MODEL = (
    "The step columns are plain means of each rung's runs; a verdict compares the model's estimates, "
    "which take out each block's level (and any drift within it), so the two can differ."
)

# Under "Where the time went": what its figures are, beside What's left's per-step ones.
PROFILE_UNITS = (
    "Times in ms over the whole profiled window (every step in it); a region is its ranges' wall time, "
    "waits included; What's left gives figures per step (a region there: its direct op time, backward included)"
)


# The words a first reader of a summary meets undefined; the last section of summary.md and report.html.
TERMS = (
    ("block", "one run of every rung in a random order; a verdict compares a rung with its parent within blocks"),
    (
        "MDE",
        "minimum detectable effect: the smallest change the verdict would have called with 80% probability "
        "(a two-sided test at the ladder-wide rule's first level, 5% over the k comparisons, or at 5% per rung); "
        "a rung with no change detected may still have moved by less",
    ),
    (
        "not called over the ladder",
        "a rung that a 5% test of it alone would call, but the ladder-wide rule (Benjamini–Hochberg's false "
        "discovery rate or Holm's family-wise rate over the ladder's comparisons) does not; its interval and "
        "MDE are shown",
    ),
    (
        "critical value (z)",
        "how many standard errors an interval reaches each side: t(0.975, df) for a ladder that looks once "
        "(about 2.0 with the demo's df); adaptive repeats look after every block, so each look's value is larger "
        "and the false-call rate over all of them stays at 5% (given on the z scale, turned into t for the df)",
    ),
    (
        "lens",
        "how a run is observed (no profiler, the PyTorch profiler on rank 0 or on all ranks, rocprofv3, ...); "
        "a lens's overhead is its runs' step time over the unprofiled runs of the same rung, in the same blocks",
    ),
    (
        "direct op time",
        "an op's own time: the summed durations of the kernels it launched on a GPU trace, its self time on the "
        "compute thread on a CPU trace (the CPU proxy's)",
    ),
    (
        "recoverable time",
        "what an op would save at the device's peak FLOP/s or bandwidth (roofline); a CPU trace has no device "
        "peak, so none",
    ),
    ("indicative", "an attribution whose change the profiles or the verdict cannot resolve; the reason is given"),
)
