"""Hand-made rung results (metrics.json as the runner writes it) and plan specs, as the stages take them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from traceladder.core.documents import IndexEntry, RungResult
from traceladder.runner.rung import SPEC_IDENTITY


def typed(results: Mapping[str, Mapping[str, Any]]) -> dict[str, RungResult]:
    """Each result checked as the summary reads a stored metrics.json (``RungResult``)."""
    return {rung_id: RungResult.from_dict(dict(r), f"{rung_id}/metrics.json") for rung_id, r in results.items()}


def typed_run(run: tuple[Any, Mapping[str, Mapping[str, Any]]]) -> tuple[Any, dict[str, RungResult]]:
    """A (plan, results) pair with its results typed."""
    plan, results = run
    return plan, typed(results)


def index_entries(entries: Sequence[Mapping[str, Any]]) -> list[IndexEntry]:
    """Hand-made index entries (``runs/<run_id>.json`` as published) as the history reads them."""
    return [IndexEntry.from_dict(dict(e), f"entry {i}") for i, e in enumerate(entries)]


def plan_spec(
    rung: str, parent: str | None, switch: str | None, value: Any, repeat: int, storage_prefix: str, lens: str = "none"
) -> dict[str, Any]:
    """A plan.json spec of one repeat of a rung, with what the summary reads of it."""
    return {
        "rung": rung,
        "parent": parent,
        "switch": switch,
        "value": value,
        "lens": lens,
        "repeat": repeat,
        "rung_id": f"{rung}.{lens}.r{repeat}",
        "storage_prefix": storage_prefix,
    }


def rung_result(spec: Mapping[str, Any], run_id: str, **fields: Any) -> RungResult:
    """A measured rung's metrics.json for a resolved spec (its identity fields copied), status
    ok unless `fields` say otherwise."""
    values: dict[str, Any] = {"lens": "none", "repeat": 0, "block": 0, "position": 0, "purpose": "measure"}
    values.update({k: spec[k] for k in SPEC_IDENTITY if spec.get(k) is not None})
    values.setdefault("switch", None)
    values.setdefault("value", None)
    values.setdefault("parent", None)
    return RungResult(**{"run_id": run_id, "status": "ok", **values, **fields})


def store_measured_run(
    store: Any,
    prefix: str,
    ladder: str,
    run_id: str,
    spec: Mapping[str, Any],
    step_ms: float,
    provenance: Mapping[str, Any],
    stored_spec: Mapping[str, Any] | None = None,
) -> None:
    """A one-rung ladder run as the runner stores it, for a triage to read: plan.json, and the
    rung's metrics.json and spec.json (`stored_spec`, where it differs from the plan's)."""
    from traceladder.core import layout
    from traceladder.core.documents import PlanDoc

    run = layout.run_prefix(prefix, ladder, run_id)
    plan = PlanDoc(ladder=ladder, run_id=run_id, specs=[dict(spec)])
    store.put_bytes(layout.join(run, layout.PLAN_OBJECT), plan.to_json().encode())
    rung = layout.join(run, str(spec["rung_id"]))
    result = rung_result({**spec, "ladder": ladder}, run_id, step_ms=step_ms, provenance=dict(provenance))
    store.put_bytes(layout.join(rung, layout.METRICS_OBJECT), result.to_json().encode())
    store.put_bytes(layout.join(rung, layout.SPEC_OBJECT), json.dumps(dict(stored_spec or spec)).encode())
