"""Read a run's rung results back from the artifact store, in plan order. A rung whose task died
before it stored anything still appears, as failed."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, TypeVar

from traceladder.storage import layout
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


def read_results(store: ArtifactSink, plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    prefix = run_prefix(plan["specs"][0]["storage_prefix"], plan["ladder"], plan["run_id"]) if plan["specs"] else ""

    def read(spec: dict[str, Any]) -> dict[str, Any] | str:
        key = f"{prefix}/{spec['rung_id']}/{layout.METRICS_OBJECT}"
        if not store.exists(key):
            return "the rung stored no result (its task died first)"
        try:
            return json.loads(store.get_verified(key))
        except ArtifactIntegrityError as exc:  # e.g. the rung died before its manifest
            return f"its metrics.json cannot be verified: {exc}"

    results: dict[str, dict[str, Any]] = {}
    for spec, found in zip(plan["specs"], read_many(read, plan["specs"])):
        if isinstance(found, dict):
            results[spec["rung_id"]] = found
            continue
        error = found
        results[spec["rung_id"]] = {
            **{k: spec[k] for k in ("rung_id", "rung", "lens", "repeat", "switch", "value", "parent")},
            "status": "failed",
            "error": error,
            "traces": [],
            "step_ms": None,
            "tokens_per_sec_per_gpu": None,
            "peak_mem_gb": None,
        }
    return results
