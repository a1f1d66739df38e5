"""The compare page's figures: two published runs of one ladder, rung by rung, side by side.
Pure (summaries in, rows out), so the route stays thin and the figures are easy to test."""

from __future__ import annotations

from collections.abc import Mapping

from traceladder.core.documents import JSONObject, JSONValue, as_number, as_object, as_objects


def _mean(est: JSONValue) -> float | None:
    return as_number(est.get("mean")) if isinstance(est, dict) else None


def compare_rows(a: Mapping[str, JSONValue], b: Mapping[str, JSONValue]) -> list[JSONObject]:
    """One row per rung in either run (A's order first): both step times and tokens/s/GPU, and
    B against A in percent. No call is made here: calls come from the history's change points."""
    rows_a = {r["rung"]: r for r in as_objects(a.get("rungs", []))}
    rows_b = {r["rung"]: r for r in as_objects(b.get("rungs", []))}
    names = list(rows_a) + [n for n in rows_b if n not in rows_a]
    out: list[JSONObject] = []
    for name in names:
        ra: JSONObject = rows_a.get(name) or {}
        rb: JSONObject = rows_b.get(name) or {}
        sa, sb = _mean(ra.get("step_ms")), _mean(rb.get("step_ms"))
        out.append(
            {
                "rung": name,
                "step_a": ra.get("step_ms"),
                "step_b": rb.get("step_ms"),
                "tokens_a": ra.get("tokens_per_sec_per_gpu"),
                "tokens_b": rb.get("tokens_per_sec_per_gpu"),
                "delta_pct": 100.0 * (sb / sa - 1) if sa and sb else None,
            }
        )
    return out


def provenance_diff(a: Mapping[str, JSONValue], b: Mapping[str, JSONValue]) -> list[str]:
    pa, pb = as_object(a.get("provenance") or {}), as_object(b.get("provenance") or {})
    return [f"{k}: {pa.get(k)!r} -> {pb.get(k)!r}" for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)]
