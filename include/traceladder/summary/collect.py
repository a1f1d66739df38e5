"""Read a run's rung results back from the artifact store, in plan order. A rung whose task died
before it stored anything still appears, as failed."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from traceladder.core import layout
from traceladder.core.documents import JSONObject, JSONValue, PlanDoc, RungResult, spec_purpose
from traceladder.storage.artifacts import ArtifactIntegrityError, ArtifactSink, run_prefix

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
