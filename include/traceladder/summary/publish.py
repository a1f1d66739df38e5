"""Store a run's summary, then point `<prefix>/<ladder>/latest.json` at it — last, so a reader
never sees half a run — and record the run in the ladder's index for week-over-week lookups."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from traceladder.storage.artifacts import ArtifactSink
from traceladder.summary.build import build_summary, findings
from traceladder.summary.collect import read_results
from traceladder.summary.compare import compare_runs
from traceladder.summary.render import to_markdown

INDEX_OBJECT = "index.json"
LATEST_OBJECT = "latest.json"


def read_analyses(store: ArtifactSink, results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    from traceladder.analysis.stored import analysis_key

    analyses = {}
    for result in results.values():
        for trace_key in result.get("traces") or []:
            key = analysis_key(trace_key)
            if store.exists(key):
                analyses[trace_key] = json.loads(store.get_bytes(key))
    return analyses


def previous_summary(store: ArtifactSink, ladder_prefix: str, run_id: str) -> dict[str, Any] | None:
    """The newest earlier full run of this ladder, found through the index (no listing). What-if
    runs from the trigger form (any Params) are never the baseline of a weekly comparison."""
    index_key = f"{ladder_prefix}/{INDEX_OBJECT}"
    if not store.exists(index_key):
        return None
    earlier = [r for r in json.loads(store.get_bytes(index_key))["runs"] if r["run_id"] != run_id and not r.get("params")]
    if not earlier:
        return None
    newest = max(earlier, key=lambda r: r["published_at"])
    return json.loads(store.get_verified(newest["summary_json"])) if store.exists(newest["summary_json"]) else None


def read_collectives(store: ArtifactSink, results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    from traceladder.analysis.stored import collectives_key

    found = {}
    for result in results.values():
        key = collectives_key(result["prefix"]) if result.get("prefix") else None
        if key and len(result.get("traces") or []) > 1 and store.exists(key):
            found[result["rung_id"]] = json.loads(store.get_bytes(key))
    return found


def write_summary(store: ArtifactSink, run_prefix: str, plan: dict[str, Any]) -> dict[str, Any]:
    from traceladder.summary.charts import render_charts
    from traceladder.summary.html import to_html

    results = read_results(store, plan)
    analyses = read_analyses(store, results)
    summary = build_summary(plan, results, analyses, read_collectives(store, results))
    from traceladder.summary.attribution import attribute_stored  # why each rung moved (issue 14)

    summary["attribution"] = attribute_stored(store, f"{run_prefix}/summary", plan, summary, results)
    full_run = not _what_if(plan.get("params"))
    previous = previous_summary(store, run_prefix.rsplit("/", 1)[0], plan["run_id"]) if full_run else None
    if previous is not None:
        summary["comparison"] = compare_runs(summary, previous)
        summary["findings"] = findings(summary)
    base = f"{run_prefix}/summary"
    charts = render_charts(summary)
    for name, png in charts.items():
        store.put_bytes(f"{base}/charts/{name}", png, "image/png")
    store.put_bytes(f"{base}/summary.json", json.dumps(summary, indent=1).encode(), "application/json")
    store.put_bytes(f"{base}/summary.md", to_markdown(summary).encode(), "text/markdown")
    store.put_bytes(f"{base}/report.html", to_html(summary, charts).encode(), "text/html")
    store.write_manifest(base)
    comparison = summary.get("comparison") or {}
    unanalysed = [k for r in results.values() for k in r.get("traces") or [] if k not in analyses]
    return {
        "params": {k: v for k, v in (plan.get("params") or {}).items() if _what_if({k: v})},
        "unanalysed_traces": unanalysed,
        "run_id": plan["run_id"], "summary_json": f"{base}/summary.json", "summary_md": f"{base}/summary.md",
        "report_html": f"{base}/report.html", "failed_rungs": summary["failed_rungs"],
        "regressions": comparison.get("regressions", []), "provenance_changes": comparison.get("provenance_changes", []),
    }


def _what_if(params: dict[str, Any] | None) -> bool:
    """Params that change what a run measures (a trigger-form run); the ladder's defaults don't."""
    return any(v not in (None, "", [], "ladder") for k, v in (params or {}).items() if k != "ladder")


def publish_latest(store: ArtifactSink, ladder_prefix: str, summary_ref: dict[str, Any]) -> dict[str, Any]:
    """Record the run in the index; move latest.json only for a full run of the ladder."""
    entry = {**summary_ref, "published_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    index_key = f"{ladder_prefix}/{INDEX_OBJECT}"
    index = json.loads(store.get_bytes(index_key)) if store.exists(index_key) else {"schema": 1, "runs": []}
    index["runs"] = [r for r in index["runs"] if r["run_id"] != entry["run_id"]] + [entry]
    store.put_bytes(index_key, json.dumps(index, indent=1).encode(), "application/json")
    if not entry.get("params"):
        store.put_bytes(f"{ladder_prefix}/{LATEST_OBJECT}", json.dumps(entry, indent=1).encode(), "application/json")
    return entry
