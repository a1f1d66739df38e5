"""Read a run's rung results back from the artifact store, in plan order. A rung whose task died
before it stored anything still appears, as failed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceladder.core.documents import JSONObject, JSONValue, RungResult, spec_purpose
from traceladder.core import layout
from traceladder.storage.artifacts import ArtifactIntegrityError, ArtifactSink, run_prefix


def read_results(store: ArtifactSink, plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    prefix = run_prefix(plan["specs"][0]["storage_prefix"], plan["ladder"], plan["run_id"]) if plan["specs"] else ""
    results: dict[str, dict[str, Any]] = {}
    for spec in plan["specs"]:
        key = f"{prefix}/{spec['rung_id']}/{layout.METRICS_OBJECT}"
        if store.exists(key):
            try:
                results[spec["rung_id"]] = RungResult.from_json(store.get_verified(key), key).to_dict()
                continue
            except ArtifactIntegrityError as exc:  # e.g. the rung died before its manifest
                error = f"its metrics.json cannot be verified: {exc}"
        else:
            error = "the rung stored no result (its task died first)"
        results[spec["rung_id"]] = _missing(plan["run_id"], spec, error)
    return results


def _missing(run_id: str, spec: Mapping[str, JSONValue], error: str) -> JSONObject:
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
    ).to_dict()
