"""The trace gate in the summary: each trace's verdict, as its analysis stored it (the gate is
judged once, when the trace is analysed: analysis/reports/trace_gate.py), with what only a run's
several traces can say added: ranks the lens records that left no trace. An unfit trace is named
here; the attribution and a triage's explanation say "trace unfit: <reason>" instead of figures.
Also the ladder file's caveats, printed at the top of the summary, the report and the page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from traceladder.core.documents import JSONValue, RungResult, TraceAnalysis, TraceGate, as_object
from traceladder.core.summary_parts import GateRow

# the lens that records every rank where its spec names no profile_ranks
ALL_RANKS_LENS = "torch_all_ranks"
NOT_JUDGED = "analysed before the trace gate"


def unfit_reason(gate: TraceGate | None) -> str | None:
    """An unfit verdict's reasons as one line; None for a fit trace or one never judged."""
    return ("; ".join(gate.reasons) or "unfit") if gate is not None and not gate.fit else None


def _asked_ranks(spec: Mapping[str, JSONValue] | None, lens: str, world: int | None) -> list[int]:
    args = as_object((spec or {}).get("model_args") or {})
    ranks = args.get("profile_ranks")
    if isinstance(ranks, list) and len(ranks) > 1:  # rank 0 alone: nothing for the gate to miss
        return sorted(r for r in ranks if isinstance(r, int))
    return list(range(world)) if lens == ALL_RANKS_LENS and world else []


def missing_ranks(
    run: RungResult, analyses: Mapping[str, TraceAnalysis], spec: Mapping[str, JSONValue] | None
) -> str | None:
    """The ranks a run's lens records that stored no analysed trace, as a reason; None if none."""
    gates = [a.gate for k in run.traces if (a := analyses.get(str(k))) is not None and a.gate is not None]
    world = max((g.world_size for g in gates if g.world_size), default=None)
    asked = _asked_ranks(spec, run.lens, world)
    if not asked:
        return None
    present = {g.rank for g in gates}
    lost = [r for r in asked if r not in present]
    if not lost:
        return None
    return f"ranks missing: {len(lost)} of {len(asked)} (rank {', '.join(map(str, lost))})"


def gate_rows(
    specs: Sequence[Mapping[str, JSONValue]], results: Mapping[str, RungResult], analyses: Mapping[str, TraceAnalysis]
) -> list[JSONValue]:
    """One row per analysed trace of an ok run (a trace with no analysis is reported elsewhere)."""
    by_id = {str(s.get("rung_id")): s for s in specs}
    rows: list[JSONValue] = []
    for run in results.values():
        if not run.ok:
            continue
        lost = missing_ranks(run, analyses, by_id.get(run.rung_id))
        for key in run.traces:
            a = analyses.get(str(key))
            if a is None:
                continue
            gate = a.gate
            reasons = [*gate.reasons] if gate else [NOT_JUDGED]
            if lost:
                reasons.append(lost)
            fit = None if gate is None and not lost else bool((gate is None or gate.fit) and not lost)
            row = GateRow(rung=run.rung, rung_id=run.rung_id, lens=run.lens, trace=str(key), fit=fit, reasons=reasons)
            rows.append(row.to_dict())
    return rows


def unfit_traces(summary: Mapping[str, JSONValue]) -> dict[str, str]:
    """trace key → its reasons, for the summary's unfit traces (the attribution reads this)."""
    found = summary.get("trace_gate")
    rows = [GateRow.from_dict(r) for r in found if isinstance(r, dict)] if isinstance(found, list) else []
    return {r.trace: "; ".join(r.reasons) for r in rows if r.fit is False}


def gate_line(row: GateRow) -> str:
    verdict = "fit" if row.fit else "not judged" if row.fit is None else "UNFIT"
    why = f": {'; '.join(row.reasons)}" if row.reasons and row.fit is not True else ""
    return f"- {row.rung_id} `{row.trace.rsplit('/', 1)[-1]}`: {verdict}{why}"


def markdown(rows: object) -> list[str]:
    """summary.md's section (``rows``: the summary's ``trace_gate``): every trace's verdict, the
    unfit ones first."""
    typed = [GateRow.from_dict(r) for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    if not typed:
        return []
    unfit = sum(r.fit is False for r in typed)
    lines = ["", f"## Trace gate ({len(typed) - unfit} of {len(typed)} traces fit; docs/trace-gate.md)"]
    return lines + [gate_line(r) for r in sorted(typed, key=lambda r: r.fit is not False)]


def caveats_markdown(caveats: object) -> list[str]:
    """The ladder's caveats, for the top of summary.md."""
    if not isinstance(caveats, list) or not caveats:
        return []
    return ["", "**Caveats (from the ladder file):**", *(f"- {c}" for c in caveats), ""]
