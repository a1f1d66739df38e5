"""Store a run's summary with the ladder's history verdicts (change points over its published
runs, stats/history.py); then record the run in the ladder's index and point
`<prefix>/<ladder>/latest.json` at the newest full run (summary/index.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone
from collections.abc import Mapping

from traceladder.core.documents import (
    IndexEntry,
    JSONObject,
    PlanDoc,
    Summary,
    SummaryRef,
    RankCollectives,
    RungResult,
    TraceAnalysis,
    as_object,
)
from traceladder.core.summary_parts import HistoryPoint, HistorySuspect, LadderHistory
from traceladder.core import layout
from traceladder.core.errors import ArtifactStoreError
from traceladder.storage.artifacts import ArtifactSink
from traceladder.summary import index as run_index
from traceladder.summary.build import build_summary, findings
from traceladder.summary.collect import read_many, read_results
from traceladder.stats.history import evaluate, regression_lines, run_points
from traceladder.summary.render.perf_csv import perf_csv
from traceladder.summary.render.markdown import to_markdown


def read_analyses(store: ArtifactSink, results: Mapping[str, RungResult]) -> dict[str, TraceAnalysis]:
    from traceladder.analysis.api import analysis_key

    def read(trace_key: str) -> TraceAnalysis | None:
        key = analysis_key(trace_key)
        return TraceAnalysis.from_json(store.get_bytes(key), key) if store.exists(key) else None

    keys = [k for result in results.values() for k in result.traces]
    return {k: a for k, a in zip(keys, read_many(read, keys)) if a is not None}


def _with_triages(store: ArtifactSink, ladder_prefix: str, history: LadderHistory) -> LadderHistory:
    """Each change point with its triage result (the label, else the state of the triage.json of
    its rung in its first run after), so the history shows it beside the change point."""
    found: dict[tuple[str, str], str] = {}
    for rung in history.rungs:
        for c in rung.change_points:
            key = layout.triage_key(f"{ladder_prefix}/{c.run_id}", c.rung)
            try:
                if store.exists(key):
                    # label and state only: a partial triage.json (one still running) shows too
                    doc = as_object(json.loads(store.get_bytes(key)))
                    found[(c.rung, c.run_id)] = str(doc.get("label") or doc.get("state"))
            except (ArtifactStoreError, ValueError):  # a triage that cannot be read is left out
                continue
    if not found:
        return history

    def triaged(c: HistoryPoint) -> HistoryPoint:
        label = found.get((c.rung, c.run_id))
        return c if label is None else replace(c, triage=label)

    return replace(
        history,
        rungs=[replace(r, change_points=[triaged(c) for c in r.change_points]) for r in history.rungs],
        regressions=[triaged(c) for c in history.regressions],
    )


def history_entries(store: ArtifactSink, ladder_prefix: str, current: IndexEntry) -> list[IndexEntry]:
    """The full runs published before this one (by logical date), oldest first, then this one.
    What-if runs from the trigger form (any Params) are never part of a history."""
    earlier = []
    for entry in run_index.list_entries(store, ladder_prefix):
        if entry.run_id == current.run_id or entry.is_what_if:
            continue
        if entry.order_key() >= current.order_key():
            continue
        if entry.points is None:  # published before entries carried their points
            if not entry.summary_json or not store.exists(entry.summary_json):
                continue
            summary = Summary.from_json(store.get_verified(entry.summary_json), entry.summary_json)
            entry = replace(entry, points=run_points(summary.to_dict()))
        earlier.append(entry)
    return earlier + [current]


def read_collectives(store: ArtifactSink, results: Mapping[str, RungResult]) -> dict[str, RankCollectives]:
    from traceladder.analysis.api import collectives_key

    found: dict[str, RankCollectives] = {}
    for result in results.values():
        key = collectives_key(result.prefix) if result.prefix else None
        if key and len(result.traces) > 1 and store.exists(key):
            found[result.rung_id] = RankCollectives.from_json(store.get_bytes(key), key)
    return found


def write_summary(
    store: ArtifactSink, run_prefix: str, plan: JSONObject, logical_date: str | None = None
) -> JSONObject:
    from traceladder.summary.render.charts import render_charts
    from traceladder.summary.render.html import to_html

    results = read_results(store, plan)
    analyses = read_analyses(store, results)
    summary = build_summary(plan, results, analyses, read_collectives(store, results))
    from traceladder.summary.attribution import attribute_stored  # why each rung moved (issue 14)

    summary["attribution"] = [*attribute_stored(store, layout.summary_prefix(run_prefix), plan, summary, results)]
    logical_date = logical_date or datetime.now(timezone.utc).isoformat(timespec="seconds")
    points = run_points(summary)
    what_if = PlanDoc.from_dict(plan).what_if_params()
    if not what_if:
        current = IndexEntry(
            run_id=str(plan["run_id"]), logical_date=logical_date, published_at=logical_date, points=points
        )
        ladder_prefix = run_prefix.rsplit("/", 1)[0]
        history = _with_triages(store, ladder_prefix, evaluate(history_entries(store, ladder_prefix, current)))
        summary["history"] = history.to_dict()
        summary["findings"] = [*findings(summary)]
    else:
        history = None
    stored = Summary.from_dict(summary)  # checked before anything is written
    base = layout.summary_prefix(run_prefix)
    charts = render_charts(summary)
    for name, png in charts.items():
        store.put_bytes(layout.chart_key(run_prefix, name), png, "image/png")
    store.put_bytes(f"{base}/{layout.SUMMARY_JSON}", stored.to_json().encode(), "application/json")
    store.put_bytes(f"{base}/{layout.SUMMARY_MD}", to_markdown(summary).encode(), "text/markdown")
    store.put_bytes(f"{base}/{layout.REPORT_HTML}", to_html(summary, charts).encode(), "text/html")
    store.put_bytes(
        f"{base}/{layout.PERF_CSV}", perf_csv(plan, results).encode(), "text/csv"
    )  # madengine's, for its dashboards
    store.write_manifest(base)
    traces = [k for r in results.values() for k in r.traces]
    unanalysed = [k for k in traces if k not in analyses]
    return SummaryRef(
        params=what_if,
        unanalysed_traces=unanalysed,
        run_id=str(plan["run_id"]),
        summary_json=f"{base}/{layout.SUMMARY_JSON}",
        summary_md=f"{base}/{layout.SUMMARY_MD}",
        report_html=f"{base}/{layout.REPORT_HTML}",
        failed_rungs=[*stored.failed_rungs],
        logical_date=logical_date,
        points=points,
        regressions=sorted({r.rung for r in history.regressions}) if history else [],
        regression_calls=regression_lines(history),
        provenance_changes=[*history.since_last.provenance_changes] if history and history.since_last else [],
        suspects=[_suspect_ref(x) for x in (history.suspects if history else [])],
    ).to_dict()


def _suspect_ref(s: HistorySuspect) -> JSONObject:
    """A suspect as the summary reference carries it: its numbers' detail left out."""
    ref: JSONObject = {"rung": s.rung, "direction": s.direction, "reason": s.reason, "delta_pct": s.delta_pct}
    ref["good_run_id"] = s.good_run_id
    return ref


def publish_latest(store: ArtifactSink, ladder_prefix: str, summary_ref: JSONObject) -> JSONObject:
    """Record the run in the index; move latest.json only for a full run of the ladder."""
    return run_index.publish(store, ladder_prefix, SummaryRef.from_dict(summary_ref)).to_dict()
