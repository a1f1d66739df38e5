"""Read a run's rung results back from the artifact store, in plan order. A rung whose task died
before it stored anything still appears, as failed."""

from __future__ import annotations

import json
from typing import Any

from traceladder.core import layout
from traceladder.storage.artifacts import ArtifactIntegrityError, ArtifactSink, run_prefix


def read_results(store: ArtifactSink, plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    prefix = run_prefix(plan["specs"][0]["storage_prefix"], plan["ladder"], plan["run_id"]) if plan["specs"] else ""
    results: dict[str, dict[str, Any]] = {}
    for spec in plan["specs"]:
        key = f"{prefix}/{spec['rung_id']}/{layout.METRICS_OBJECT}"
        if store.exists(key):
            try:
                results[spec["rung_id"]] = json.loads(store.get_verified(key))
                continue
            except ArtifactIntegrityError as exc:  # e.g. the rung died before its manifest
                error = f"its metrics.json cannot be verified: {exc}"
        else:
            error = "the rung stored no result (its task died first)"
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
