"""Render a summary dict as Markdown (summary.md, and the table `make demo` prints)."""

from __future__ import annotations

from typing import Any

from traceladder.stats.verdicts import CPU_METRIC_CAVEAT, VERDICT_METRICS, plan_metric
from traceladder.summary.render.fmt import fmt_change, fmt_est


def ladder_table(summary: dict[str, Any]) -> str:
    cpu = summary.get("metric") == "cpu"
    head = (
        "| rung | change | step ms (95% CI) |"
        + (" step CPU ms (95% CI) |" if cpu else "")
        + f" tokens/s/GPU | vs parent{' on CPU time' if cpu else ''} (95% CI) | speedup vs root "
        "| peak mem GB | runs ok |"
    )
    lines = [head, "|---" * (9 if cpu else 8) + "|"]
    for row in summary["rungs"]:
        change = f"{row['switch']}={row['value']}" if row["switch"] else "(root)"
        vs_parent = fmt_change(row.get("vs_parent"))
        mem = f"{row['peak_mem_gb']:.2f}" if row["peak_mem_gb"] is not None else "-"
        speed = f"{row['speedup_vs_root']['mean']:.2f}x" if row["speedup_vs_root"] else "-"
        flag = "" if row["ok"] == row["runs"] else " FAILED"
        lines.append(
            f"| {row['rung']} | {change} | {fmt_est(row['step_ms'])} |"
            + (f" {fmt_est(row.get('step_cpu_ms'))} |" if cpu else "")
            + f" {fmt_est(row['tokens_per_sec_per_gpu'], 0)} "
            f"| {vs_parent} | {speed} | {mem} | {row['ok']}/{row['runs']}{flag} |"
        )
    step_metric = VERDICT_METRICS[plan_metric(summary)][0]
    model = summary.get("model", {}).get(step_metric)
    if model and model.get("df"):
        what = (
            "the slowest rank's compute-thread CPU time (tokens per CPU-second for batch rungs)"
            if cpu
            else "step time (tokens/s/GPU for batch rungs)"
        )
        lines += [
            "",
            f"vs parent: randomised block model on log {what}, "
            f"{model['runs']} runs in {model['blocks']} blocks, {model['df']} residual df, run-level sd "
            f"{model['run_sd_pct']:.1f}%; MDE at 80% power.",
        ]
        if cpu:
            lines.append(CPU_METRIC_CAVEAT)
    repeats = summary.get("repeats")
    if repeats:  # adaptive repeats: how many blocks ran of how many planned, and why
        lines += [
            "",
            f"Adaptive repeats: {repeats['sentence']}; intervals and MDEs at that look's critical value, "
            f"z {repeats['critical_z_used']:.2f} (docs/statistics-adaptive.md).",
        ]
    return "\n".join(lines)


def lens_table(summary: dict[str, Any]) -> str:
    if not summary["lenses"]:
        return "(no lenses in this run)"
    lines = [
        "| lens | step ms (95% CI) | overhead vs unprofiled (paired, 95% CI) | traces | runs ok |",
        "|---|---|---|---|---|",
    ]
    for lens in summary["lenses"]:
        lines.append(
            f"| {lens['lens']} | {fmt_est(lens['step_ms'])} | {fmt_est(lens['overhead_ratio'], 2)} "
            f"| {lens['traces']} | {lens['ok']}/{lens['runs']} |"
        )
    return "\n".join(lines)


def to_markdown(summary: dict[str, Any]) -> str:
    parts = [
        f"# traceladder: {summary['ladder']}, run {summary['run_id']}",
        "",
        "## Ladder",
        ladder_table(summary),
        "",
        f"## Lenses (on {summary.get('lens_rung') or '-'})",
        lens_table(summary),
    ]
    profile = summary.get("profile")
    if profile and profile.get("timeline"):
        tl, tp = profile["timeline"], profile.get("timeline_percent") or {}
        parts += [
            "",
            f"## Where the time went ({profile['lens']}, {profile['rung_id']}, "
            f"{profile.get('device', 'gpu').upper()} timeline)",
            "| part | ms | % |",
            "|---|---|---|",
        ]
        for key in ("computation_time", "exposed_comm_time", "exposed_memcpy_time", "idle_time", "total_time"):
            if key in tl:
                parts.append(f"| {key} | {tl[key]:.2f} | {tp.get(key, 0):.1f} |")
        if profile.get("regions"):
            parts += ["", "| region | ms |", "|---|---|"] + [
                f"| {k} | {v:.2f} |" for k, v in sorted(profile["regions"].items(), key=lambda kv: -kv[1])
            ]
        if profile.get("top_ops"):
            parts += ["", "| top op | ms | % | count |", "|---|---|---|---|"] + [
                f"| {op['name']} | {op['time_ms']:.2f} | {op['percent']:.1f} | {op['count']} |"
                for op in profile["top_ops"][:10]
            ]
    coll = summary.get("collectives")
    if coll and coll["by_collective"]:
        parts += [
            "",
            f"## Collectives across ranks ({coll['rung_id']}, {coll['world_size']} ranks, "
            f"{(coll.get('device') or 'gpu').upper()})",
            "| collective | count | latency µs (mean) | bus GiB/s | start skew µs (mean / max) | straggler "
            "| others waited ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in coll["by_collective"]:
            bw = f"{c['bus_bw_gbs_mean']:.3f}" if c["bus_bw_gbs_mean"] is not None else "-"
            parts.append(
                f"| {c['name']} | {c['count']} | {c['latency_mean_us']:.1f} | {bw} "
                f"| {c['start_skew_mean_us']:.1f} / {c['start_skew_max_us']:.1f} "
                f"| rank {c['straggler_rank']} | {c['others_waited_ms']:.1f} |"
            )
    from traceladder.summary.whats_left import markdown as whats_left_md

    parts += whats_left_md(summary.get("headroom"))
    from traceladder.summary.attribution import markdown as attribution_md

    parts += attribution_md(summary.get("attribution") or [])
    from traceladder.summary.render.history import history_markdown

    parts += history_markdown(summary.get("history"))
    parts += ["", "## Findings"] + [f"- {f}" for f in summary["findings"]]
    if summary["failures"]:
        parts += ["", "## Failed runs"] + [
            f"- {f['rung_id']}: {f['status']}: {f['error']}" for f in summary["failures"]
        ]
    return "\n".join(parts) + "\n"
