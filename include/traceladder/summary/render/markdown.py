"""Render a summary dict as Markdown (summary.md, and the table `make demo` prints)."""

from __future__ import annotations

from collections.abc import Mapping

from traceladder.core.documents import Summary, JSONValue
from traceladder.core.summary_parts import (
    AdaptiveRepeats,
    CollectivesSummary,
    model_fit,
    ProfileWindow,
    attribution_entries,
    summary_lenses,
    summary_part,
    summary_rungs,
)
from traceladder.summary.trace_gate import caveats_markdown, markdown as gate_markdown
from traceladder.stats.verdicts import CPU_METRIC_CAVEAT, VERDICT_METRICS, interval_label, plan_metric
from traceladder.summary.render.fmt import (
    MEANS_VS_MODEL,
    PROFILE_UNITS,
    TERMS,
    adaptive_levels,
    batch_settings,
    fmt_change,
    fmt_est,
    fmt_false_calls,
    fmt_fit,
    fmt_gb,
    fmt_resolution,
    fmt_trend,
)


def ladder_table(summary: Mapping[str, JSONValue]) -> str:
    cpu = summary.get("metric") == "cpu"
    head = (
        "| rung | change | step ms (95% CI) |"
        + (" step CPU ms (95% CI) |" if cpu else "")
        + f" tokens/s/GPU | vs parent{' on CPU time' if cpu else ''} ({interval_label(summary)}) | speedup vs root "
        "| peak mem GB | runs ok |"
    )
    lines = [head, "|---" * (9 if cpu else 8) + "|"]
    for row in summary_rungs(summary["rungs"]):
        change = f"{row.switch}={row.value}" if row.switch else "(root)"
        vs_parent = fmt_change(row.vs_parent)
        speed = f"{row.speedup_vs_root.mean:.2f}x" if row.speedup_vs_root else "-"
        flag = "" if row.ok == row.runs else " FAILED"
        lines.append(
            f"| {row.rung} | {change} | {fmt_est(row.step_ms)} |"
            + (f" {fmt_est(row.step_cpu_ms)} |" if cpu else "")
            + f" {fmt_est(row.tokens_per_sec_per_gpu, 0)} "
            f"| {vs_parent} | {speed} | {fmt_gb(row.peak_mem_gb)} | {row.ok}/{row.runs}{flag} |"
        )
    step_metric = VERDICT_METRICS[plan_metric(summary)][0]
    model = model_fit(summary.get("model"), step_metric)
    if model and model.df:
        stat = str(model.run_statistic or "median")  # summaries from before it: medians
        what = (
            f"each run's {stat} over its iterations of the slowest rank's compute-thread CPU time "
            "(tokens per CPU-second for batch rungs)"
            if cpu
            else f"each run's {stat} step time (tokens/s/GPU for batch rungs)"
        )
        lines += [
            "",
            f"vs parent: randomised block model{fmt_trend(model)} on the log of {what}, {fmt_fit(model)}; "
            "MDE at 80% power"
            + "".join(f"; {x}" for x in [fmt_resolution(summary), fmt_false_calls(summary)] if x)
            + ". "
            + MEANS_VS_MODEL,
        ]
        if cpu:
            lines.append(CPU_METRIC_CAVEAT)
    if batch_settings(summary):
        lines += ["", batch_settings(summary)]
    repeats = summary_part(AdaptiveRepeats, summary.get("repeats"), "summary.json: repeats")
    if repeats:  # adaptive repeats: how many blocks ran of how many planned, and why
        lines += [
            "",
            f"Adaptive repeats: {repeats.sentence}; {adaptive_levels(summary)} (docs/statistics-adaptive.md).",
        ]
    return "\n".join(lines)


def lens_table(summary: Mapping[str, JSONValue]) -> str:
    if not summary["lenses"]:
        return "(no lenses in this run)"
    lines = [
        "| lens | step ms (95% CI) | overhead vs unprofiled (paired, 95% CI) | traces | runs ok |",
        "|---|---|---|---|---|",
    ]
    for lens in summary_lenses(summary["lenses"]):
        lines.append(
            f"| {lens.lens} | {fmt_est(lens.step_ms)} | {fmt_est(lens.overhead_ratio, 2)} "
            f"| {lens.traces} | {lens.ok}/{lens.runs} |"
        )
    return "\n".join(lines)


def to_markdown(summary: Mapping[str, JSONValue]) -> str:
    parts = [
        f"# traceladder: {summary['ladder']}, run {summary['run_id']}",
        *caveats_markdown(summary.get("caveats")),
        "",
        "## Ladder",
        ladder_table(summary),
        "",
        f"## Lenses (on {summary.get('lens_rung') or '-'})",
        lens_table(summary),
    ]
    profile = summary_part(ProfileWindow, summary.get("profile"), "summary.json: profile")
    if profile and profile.timeline:
        tl, tp = profile.timeline, profile.timeline_percent
        parts += [
            "",
            f"## Where the time went ({profile.lens}, {profile.rung_id}, "
            f"{str(profile.device).upper()} timeline)",  # a built profile always names its device
            f"{PROFILE_UNITS}.",
            "",
            "| part | ms | % |",
            "|---|---|---|",
        ]
        for key in ("computation_time", "exposed_comm_time", "exposed_memcpy_time", "idle_time", "total_time"):
            if key in tl:
                parts.append(f"| {key} | {tl[key]:.2f} | {tp.get(key, 0):.1f} |")
        if profile.regions:
            parts += ["", "| region (range wall time) | ms |", "|---|---|"] + [
                f"| {k} | {v:.2f} |" for k, v in sorted(profile.regions.items(), key=lambda kv: -kv[1])
            ]
        if profile.top_ops:
            parts += ["", "| top op | ms | % | count |", "|---|---|---|---|"] + [
                f"| {op['name']} | {op['time_ms']:.2f} | {op['percent']:.1f} | {op['count']} |"
                for op in profile.top_ops[:10]
            ]
    coll = summary_part(CollectivesSummary, summary.get("collectives"), "summary.json: collectives")
    if coll and coll.by_collective:
        parts += [
            "",
            f"## Collectives across ranks ({coll.rung_id}, {coll.world_size} ranks, "
            f"{str(coll.device or 'gpu').upper()})",
            "| collective | count | latency µs (mean) | bus GiB/s | start skew µs (mean / max) | straggler "
            "| others waited ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in coll.by_collective:
            bw = f"{c['bus_bw_gbs_mean']:.3f}" if c["bus_bw_gbs_mean"] is not None else "-"
            parts.append(
                f"| {c['name']} | {c['count']} | {c['latency_mean_us']:.1f} | {bw} "
                f"| {c['start_skew_mean_us']:.1f} / {c['start_skew_max_us']:.1f} "
                f"| rank {c['straggler_rank']} | {c['others_waited_ms']:.1f} |"
            )
    from traceladder.summary.whats_left import markdown as whats_left_md

    targets = summary.get("headroom")
    parts += whats_left_md(targets)
    from traceladder.summary.attribution import markdown as attribution_md

    parts += attribution_md(attribution_entries(summary.get("attribution") or []))
    from traceladder.summary.lens_runs import markdown as lens_runs_md  # kernel names, rungs not explained

    parts += lens_runs_md(summary)
    parts += gate_markdown(summary.get("trace_gate"))
    from traceladder.summary.render.history import history_markdown, read_history

    parts += history_markdown(read_history(summary.get("history")))
    doc = Summary.from_dict(summary)  # the summary as built: its top level read as the class
    parts += ["", "## Findings"] + [f"- {f}" for f in doc.findings]
    if summary["failures"]:
        parts += ["", "## Failed runs"] + [f"- {f['rung_id']}: {f['status']}: {f['error']}" for f in doc.failures]
    parts += ["", "## Terms"] + [f"- **{term}**: {meaning}." for term, meaning in TERMS]
    return "\n".join(parts) + "\n"
