"""The compare page's figures: two published runs of one ladder, rung by rung, side by side.
Pure (summaries in, rows out), so the route stays thin and the figures are easy to test."""

from __future__ import annotations

from collections.abc import Mapping

from traceladder.core.documents import JSONObject, JSONValue
from traceladder.core.summary_parts import RunEstimate, SummaryRung, summary_rungs


def _stored(est: RunEstimate | None) -> JSONValue:
    return None if est is None else est.to_dict()


def compare_rows(a: Mapping[str, JSONValue], b: Mapping[str, JSONValue]) -> list[JSONObject]:
    """One row per rung in either run (A's order first): both step times and tokens/s/GPU, and
    B against A in percent. No call is made here: calls come from the history's change points."""
    rows_a = {r.rung: r for r in summary_rungs(a.get("rungs", []), "run A's summary.json")}
    rows_b = {r.rung: r for r in summary_rungs(b.get("rungs", []), "run B's summary.json")}
    names = list(rows_a) + [n for n in rows_b if n not in rows_a]
    out: list[JSONObject] = []
    for name in names:
        ra, rb = rows_a.get(name) or SummaryRung(rung=name), rows_b.get(name) or SummaryRung(rung=name)
        sa = ra.step_ms.mean if ra.step_ms else None
        sb = rb.step_ms.mean if rb.step_ms else None
        out.append(
            {
                "rung": name,
                "step_a": _stored(ra.step_ms),
                "step_b": _stored(rb.step_ms),
                "tokens_a": _stored(ra.tokens_per_sec_per_gpu),
                "tokens_b": _stored(rb.tokens_per_sec_per_gpu),
                "delta_pct": 100.0 * (sb / sa - 1) if sa and sb else None,
            }
        )
    return out


def provenance_diff(a: Mapping[str, JSONValue], b: Mapping[str, JSONValue]) -> list[str]:
    pa, pb = a.get("provenance"), b.get("provenance")
    pa, pb = (pa if isinstance(pa, dict) else {}), (pb if isinstance(pb, dict) else {})
    return [f"{k}: {pa.get(k)!r} -> {pb.get(k)!r}" for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)]
