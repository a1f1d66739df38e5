"""The summary's one reading step: every stored document a summary is made from, read back from
the artifact store (summary/publish.py only writes).

- ``read_results``: the run's rung results (``metrics.json``), in plan order; a rung whose task
  died before it stored anything still appears, as failed;
- ``read_analyses``: each trace's ``analysis.json``; ``read_collectives``: each multi-rank rung's
  ``collectives.json``; ``read_reports``: one trace's stored reports, for the attribution;
- ``list_entries``: the ladder's index of published runs (the index's one reading rule);
  ``earlier_entries``: the full runs a history is made of;
- ``with_triages``: the history's change points with the labels of their triages.

Reads go ``READERS`` at a time (``read_many``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from traceladder.core import layout
from traceladder.core.documents import (
    IndexEntry,
    JSONObject,
    JSONValue,
    PlanDoc,
    RankCollectives,
    RungResult,
    Summary,
    TraceAnalysis,
    as_object,
    entries_from,
    legacy_rows,
    spec_purpose,
)
from traceladder.core.layout import LEGACY_INDEX, RUNS_FOLDER
from traceladder.core.summary_parts import HistoryPoint, LadderHistory
from traceladder.storage.artifacts import (
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ArtifactSink,
    ArtifactStoreError,
    run_prefix,
)

if TYPE_CHECKING:  # pandas stays out of this module's import
    from traceladder.analysis.api import Reports

T = TypeVar("T")
R = TypeVar("R")
# Reads in flight at once: a year-long ladder's summary reads ~300 small objects, and one at a
# time they cost their round trips end to end (issue 30).
READERS = 8


def read_many(read: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[read(item) for item in items]``, READERS at a time, in order (the first error raises)."""
    todo = list(items)
    if len(todo) <= 1:
        return [read(item) for item in todo]
    with ThreadPoolExecutor(min(READERS, len(todo))) as pool:
        return list(pool.map(read, todo))


def read_results(store: ArtifactSink, plan: Mapping[str, JSONValue]) -> dict[str, RungResult]:
    doc = PlanDoc.from_dict(plan)
    specs, run_id = doc.specs, doc.run_id
    prefix = run_prefix(str(specs[0]["storage_prefix"]), doc.ladder, run_id) if specs else ""

    def read(spec: JSONObject) -> RungResult | str:
        """The rung's metrics.json, or why there is none."""
        key = f"{prefix}/{spec['rung_id']}/{layout.METRICS_OBJECT}"
        if not store.exists(key):
            return "the rung stored no result (its task died first)"
        try:
            return RungResult.from_json(store.get_verified(key), key)
        except ArtifactIntegrityError as exc:  # e.g. the rung died before its manifest
            return f"its metrics.json cannot be verified: {exc}"

    results: dict[str, RungResult] = {}
    for spec, found in zip(specs, read_many(read, specs)):
        results[str(spec["rung_id"])] = found if isinstance(found, RungResult) else _missing(run_id, spec, found)
    return results


def _missing(run_id: str, spec: Mapping[str, JSONValue], error: str) -> RungResult:
    """A failed result in metrics.json's shape for a rung that stored none (no prefix)."""
    return RungResult.from_dict(
        {
            "run_id": run_id,
            **{k: spec.get(k) for k in ("ladder", "rung", "rung_id", "lens", "repeat", "switch", "value", "parent")},
            "block": spec.get("block", 0),
            "position": spec.get("position", 0),
            "purpose": spec_purpose(spec),
            "status": "failed",
            "error": error,
        },
        f"the plan's spec {spec.get('rung_id')}",
    )


def read_analyses(store: ArtifactSink, results: Mapping[str, RungResult]) -> dict[str, TraceAnalysis]:
    """Each trace's analysis.json, by trace key (a trace not analysed is left out)."""
    from traceladder.analysis.api import analysis_key

    def read(trace_key: str) -> TraceAnalysis | None:
        key = analysis_key(trace_key)
        return TraceAnalysis.from_json(store.get_bytes(key), key) if store.exists(key) else None

    keys = [k for result in results.values() for k in result.traces]
    return {k: a for k, a in zip(keys, read_many(read, keys)) if a is not None}


def read_collectives(store: ArtifactSink, results: Mapping[str, RungResult]) -> dict[str, RankCollectives]:
    """The multi-rank collectives (collectives.json) of each rung that stored two or more traces."""
    from traceladder.analysis.api import collectives_key

    found: dict[str, RankCollectives] = {}
    for result in results.values():
        key = collectives_key(result.prefix) if result.prefix else None
        if key and len(result.traces) > 1 and store.exists(key):
            found[result.rung_id] = RankCollectives.from_json(store.get_bytes(key), key)
    return found


def read_reports(store: ArtifactSink, trace_key: str) -> Reports | None:
    """One trace's stored reports (its analysis folder's CSVs and analysis.json), as the
    attribution compares them; None when it was not analysed or its reports cannot be compared."""
    from traceladder.analysis.api import CompareError, analysis_prefix, load_reports

    prefix = analysis_prefix(trace_key)
    if not store.exists(f"{prefix}/{layout.ANALYSIS_OBJECT}"):
        return None

    def read(name: str) -> bytes | None:
        key = f"{prefix}/{name}"
        return store.get_bytes(key) if store.exists(key) else None

    try:
        return load_reports(read, trace_key)
    except CompareError:
        return None


def _read_json(store: ArtifactSink, key: str) -> object:
    """The object's JSON; None when it is gone; ArtifactStoreError when it is not JSON."""
    try:
        return json.loads(store.get_bytes(key))
    except ArtifactNotFoundError:
        return None  # removed between the listing and the read
    except ValueError as exc:
        raise ArtifactStoreError(f"{store.describe(key)} is not valid JSON: {exc}", key) from None


# What one publish has read of the index: object key -> (its listing version, the JSON as read).
IndexReads = dict[str, tuple[str | None, object]]


def list_entries(store: ArtifactSink, ladder_prefix: str, seen: IndexReads | None = None) -> list[IndexEntry]:
    """Every published run of the ladder, oldest first, by the index's one reading rule
    (`core.documents.legacy_rows`/`entries_from`, which the Ladders page's cache and retention
    apply too). With `seen`, a caller's earlier reads: each look lists the entries again but reads
    only those that are new or whose listing version changed, and the older `index.json` (which
    nothing writes any more) once."""
    cache: IndexReads = seen if seen is not None else {}
    legacy = f"{ladder_prefix}/{LEGACY_INDEX}"
    if legacy not in cache:
        cache[legacy] = (None, _read_json(store, legacy) if store.exists(legacy) else None)
    rows = legacy_rows(cache[legacy][1], store.describe(legacy))
    listed = store.list_versions(f"{ladder_prefix}/{RUNS_FOLDER}")
    keys = [k for k in listed if k.endswith(".json")]
    fresh = [k for k in keys if listed[k] is None or k not in cache or cache[k][0] != listed[k]]
    # One GET per new or changed run: a year is 52, read READERS at a time.
    docs = read_many(lambda key: _read_json(store, key), fresh)
    cache.update({k: (listed[k], doc) for k, doc in zip(fresh, docs)})
    rows += [(cache[k][1], k) for k in keys]
    return entries_from(rows)


def earlier_entries(store: ArtifactSink, ladder_prefix: str, current: IndexEntry) -> list[IndexEntry]:
    """The full runs published before ``current`` (by logical date), oldest first: the history
    ``current`` joins. What-if runs from the trigger form (any Params) are never part of a history."""
    earlier = []
    for entry in list_entries(store, ladder_prefix):
        if entry.run_id == current.run_id or entry.is_what_if:
            continue
        if entry.order_key() >= current.order_key():
            continue
        if entry.points is None:  # published before entries carried their points
            if not entry.summary_json or not store.exists(entry.summary_json):
                continue
            from traceladder.stats.history import run_points  # numpy and scipy: only for such an entry

            summary = Summary.from_json(store.get_verified(entry.summary_json), entry.summary_json)
            entry = replace(entry, points=run_points(summary.to_dict()))
        earlier.append(entry)
    return earlier


def with_triages(store: ArtifactSink, ladder_prefix: str, history: LadderHistory) -> LadderHistory:
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
