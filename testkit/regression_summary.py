"""`make demo-regression`'s flagged week in small (issue 59, item 8): a one-rung ladder judged on
CPU time, four good weeks and a fifth well beyond their 99% prediction bound, built and evaluated
as publish_summary does (summary/build.py, stats/history.py). Used by the summary, history and
Ladders page tests of what that run's pages say."""

from __future__ import annotations

from typing import Any

from testkit.results import index_entries, plan_spec, typed

GOOD_WEEKS_CPU_MS = (36.0, 38.5, 35.2, 37.9)  # their 99% bound ends well under the flagged week
FLAGGED_CPU_MS = 74.0


def one_rung_run(run_id: str, cpu_ms: float, correction: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The demo's ladder in small: the root `baseline` alone, three runs judged on CPU time."""
    specs, results = [], {}
    for k, wobble in enumerate((0.99, 1.0, 1.01)):
        spec = plan_spec("baseline", None, None, None, k, "traceladder")
        specs.append(spec)
        cpu, ms = cpu_ms * wobble, cpu_ms * wobble * 1.2
        results[spec["rung_id"]] = {
            "rung_id": spec["rung_id"],
            "rung": "baseline",
            "lens": "none",
            "repeat": k,
            "status": "ok",
            "step_ms": ms,
            "step_cpu_ms": cpu,
            "step_cpu_ms_values": [cpu] * 4,
            "step_cpu_statistic": "mean",
            "tokens_per_sec_per_gpu": 32000 / ms,
            "tokens_per_cpu_s_per_gpu": 32000 / cpu,
            "peak_mem_gb": 0.006,
            "traces": [],
            "provenance": {"build": "nightly"},
        }
    plan = {"ladder": "proxy-regression", "run_id": run_id, "specs": specs, "metric": "cpu", "correction": correction}
    return plan, results


def flagged_week_summary(correction: str = "holm") -> dict[str, Any]:
    """The flagged week's summary (run `week4`) with its history over the good weeks `week0`..`week3`
    and its findings, as publish_summary builds it."""
    from traceladder.stats.history import evaluate, run_points
    from traceladder.summary.build import build_summary, findings

    weeks: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    for i, cpu_ms in enumerate([*GOOD_WEEKS_CPU_MS, FLAGGED_CPU_MS]):
        plan, results = one_rung_run(f"week{i}", cpu_ms, correction)
        summary = build_summary(plan, typed(results), {})
        weeks.append(
            {"run_id": f"week{i}", "logical_date": f"2026-11-{i + 1:02d}", "points": run_points(summary).to_dict()}
        )
    summary["history"] = evaluate(index_entries(weeks)).to_dict()
    summary["findings"] = findings(summary)
    return summary
