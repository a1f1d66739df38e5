"""The summary's writing step: a run's summary with the ladder's history verdicts (change points
over its published runs, stats/history.py) stored; then the run recorded in the ladder's index and
`<prefix>/<ladder>/latest.json` pointed at the newest full run (summary/index.py). Every stored
input is read by summary/collect.py; nothing here reads."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from traceladder.core.documents import IndexEntry, JSONObject, PlanDoc, Summary, SummaryRef
from traceladder.core.summary_parts import HistorySuspect
from traceladder.core import layout
from traceladder.storage.artifacts import ArtifactSink
from traceladder.summary import index as run_index
from traceladder.summary.build import build_summary, findings
from traceladder.summary.collect import earlier_entries, read_analyses, read_collectives, read_results, with_triages
from traceladder.stats.history import evaluate, regression_lines, run_points
from traceladder.summary.render.perf_csv import perf_csv
from traceladder.summary.render.markdown import to_markdown


def write_summary(
    store: ArtifactSink, run_prefix: str, plan: JSONObject, logical_date: str | None = None
) -> JSONObject:
    """Summarize one run (the DAG's summary task, `workflows/ladder_tasks.summarize_run`), in this order:

    1. collect (summary/collect.py): the rung results, their trace analyses, the multi-rank
       collectives and, for a full run, the ladder's earlier runs from its index;
    2. build (summary/build.py, stats/history.py): the summary, and for a full run its history
       verdicts and findings; the change points' triage labels are read then (collect.with_triages:
       which change points there are is known only once the history is evaluated);
    3. attribute (summary/attribution.py): why each rung moved, from each trace's stored reports
       (collect.read_reports); each comparison's files are stored as it is made;
    4. render: summary.json, summary.md, report.html, the charts and perf.csv;
    5. publish: those stored, then the summary's manifest.

    Returns the summary reference (SummaryRef) that `publish_latest` records in the index."""
    from traceladder.summary.attribution import attribute_stored  # why each rung moved (issue 14)
    from traceladder.summary.lens_runs import lens_runs_parts
    from traceladder.summary.render.charts import render_charts
    from traceladder.summary.render.html import to_html

    logical_date = logical_date or datetime.now(timezone.utc).isoformat(timespec="seconds")
    what_if = PlanDoc.from_dict(plan).what_if_params()
    ladder_prefix = run_prefix.rsplit("/", 1)[0]
    current = IndexEntry(run_id=str(plan["run_id"]), logical_date=logical_date, published_at=logical_date)

    # collect
    results = read_results(store, plan)
    analyses = read_analyses(store, results)
    collectives = read_collectives(store, results)
    earlier = None if what_if else earlier_entries(store, ladder_prefix, current)

    # build
    summary = build_summary(plan, results, analyses, collectives)
    points = run_points(summary)
    history = None
    if earlier is not None:
        history = with_triages(store, ladder_prefix, evaluate([*earlier, replace(current, points=points)]))
        summary["history"] = history.to_dict()
        summary["findings"] = [*findings(summary)]

    # attribute
    summary["attribution"] = [*attribute_stored(store, layout.summary_prefix(run_prefix), plan, summary, results)]
    summary.update(lens_runs_parts(store, plan, summary, results, analyses))  # kernel names, rungs not explained

    # render
    stored = Summary.from_dict(summary)  # checked before anything is written
    base = layout.summary_prefix(run_prefix)
    charts = render_charts(summary)
    files = [  # (key, bytes, content type), stored in this order
        *((layout.chart_key(run_prefix, name), png, "image/png") for name, png in charts.items()),
        (f"{base}/{layout.SUMMARY_JSON}", stored.to_json().encode(), "application/json"),
        (f"{base}/{layout.SUMMARY_MD}", to_markdown(summary).encode(), "text/markdown"),
        (f"{base}/{layout.REPORT_HTML}", to_html(summary, charts).encode(), "text/html"),
        (f"{base}/{layout.PERF_CSV}", perf_csv(plan, results).encode(), "text/csv"),  # madengine's, for its dashboards
    ]

    # publish
    for key, data, content_type in files:
        store.put_bytes(key, data, content_type)
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
