"""Store a run's summary, then point `<prefix>/<ladder>/latest.json` at it — last, so a reader
never sees half a run — and record the run in the ladder's index for week-over-week lookups."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from traceladder.storage.artifacts import ArtifactSink
from traceladder.summary.build import build_summary
from traceladder.summary.collect import read_results
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


def write_summary(store: ArtifactSink, run_prefix: str, plan: dict[str, Any]) -> dict[str, Any]:
    results = read_results(store, plan)
    summary = build_summary(plan, results, read_analyses(store, results))
    base = f"{run_prefix}/summary"
    store.put_bytes(f"{base}/summary.json", json.dumps(summary, indent=1).encode(), "application/json")
    store.put_bytes(f"{base}/summary.md", to_markdown(summary).encode(), "text/markdown")
    store.write_manifest(base)
    return {"run_id": plan["run_id"], "summary_json": f"{base}/summary.json", "summary_md": f"{base}/summary.md", "failed_rungs": summary["failed_rungs"]}


def publish_latest(store: ArtifactSink, ladder_prefix: str, summary_ref: dict[str, Any]) -> dict[str, Any]:
    entry = {**summary_ref, "published_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    index_key = f"{ladder_prefix}/{INDEX_OBJECT}"
    index = json.loads(store.get_bytes(index_key)) if store.exists(index_key) else {"schema": 1, "runs": []}
    index["runs"] = [r for r in index["runs"] if r["run_id"] != entry["run_id"]] + [entry]
    store.put_bytes(index_key, json.dumps(index, indent=1).encode(), "application/json")
    store.put_bytes(f"{ladder_prefix}/{LATEST_OBJECT}", json.dumps(entry, indent=1).encode(), "application/json")
    return entry
