"""The summary's "What's left" section (``headroom`` in summary.json): the ranked targets of the
lens rung and of the ladder's final rung, from their rank-0 trace analyses (docs/whats-left.md).

The final rung is the end of the longest parent chain of non-batch rungs (``recompute_off`` in
both shipped ladders). When it is the lens rung there is one entry; when it has no trace the entry
says so. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping

from traceladder.analysis.api import is_accumulate_origin
from traceladder.core.documents import JSONObject, JSONValue, RungResult, TraceAnalysis, spec_purpose
from traceladder.core.summary_parts import whats_left_entries
from traceladder.stats.verdicts import BATCH_SWITCHES, plan_specs
from traceladder.summary import shape_rates

__all__ = ["TOP_TARGETS", "final_rung", "whats_left_section", "markdown", "TARGET_KEYS"]

TOP_TARGETS = 5
TARGET_KEYS = ("kind", "target", "ms_per_step", "pct_of_step", "why", "recoverable_ms", "sentence")
_PROFILED_LENSES = ("torch_rank0", "torch_all_ranks")


def final_rung(specs: list[JSONObject]) -> str | None:
    """The deepest non-batch rung by parent links (the first of equals in plan order)."""
    info: dict[str, JSONObject] = {}
    for s in specs:
        info.setdefault(str(s["rung"]), s)
    keep = {r for r, s in info.items() if s.get("switch") not in BATCH_SWITCHES}

    def depth(rung: str) -> int:
        n, seen = 0, set()
        while rung in keep and rung not in seen:
            seen.add(rung)
            parent = info[rung].get("parent")
            if parent is None or parent not in keep:
                return n
            rung, n = str(parent), n + 1
        return n

    return max(keep, key=lambda r: (depth(r), -list(info).index(r)), default=None)


def _rung_analysis(
    rung: str, results: Mapping[str, RungResult], analyses: Mapping[str, TraceAnalysis], purposes: dict[str, str]
) -> tuple[TraceAnalysis, str, str] | None:
    """The rank-0 analysis of the rung's first profiled run with the What's-left rows (stored as
    ``headroom``): (analysis, lens, trace key). Lens runs (the full window) before every_rung's
    attribution runs (which may profile fewer steps)."""
    order = sorted(
        results.values(),
        key=lambda r: (purposes.get(r.rung_id) != "lens", r.repeat, r.rung_id),
    )
    for lens in _PROFILED_LENSES:
        for result in order:
            if result.rung != rung or result.lens != lens or not result.ok:
                continue
            for key in result.traces:
                a = analyses.get(str(key))
                if a and a.rank in (0, None) and a.headroom is not None:
                    return a, lens, str(key)
    return None


def whats_left_section(
    plan: Mapping[str, JSONValue],
    results: Mapping[str, RungResult],
    analyses: Mapping[str, TraceAnalysis],
    lens_rung: str | None,
) -> list[JSONValue]:
    """``[{"rung", "role", "lens", "trace", "device", "steps", "mean_step_ms", "targets", "note"}]``."""
    final = final_rung(plan_specs(plan))
    purposes = {str(s["rung_id"]): spec_purpose(s) for s in plan_specs(plan) if "rung_id" in s}
    covered: list[tuple[str, str]] = []
    if lens_rung:
        covered.append((lens_rung, "lens rung" + (" and final rung" if lens_rung == final else "")))
    if final and final != lens_rung:
        covered.append((final, "final rung"))
    out: list[JSONValue] = []
    for rung, role in covered:
        found = _rung_analysis(rung, results, analyses, purposes)
        if found is None:
            out.append(
                {
                    "rung": rung,
                    "role": role,
                    "lens": None,
                    "targets": [],
                    "note": f"{rung} has no analysed rank-0 torch trace in this run: nothing to rank.",
                }
            )
            continue
        a, lens, key = found
        rows = a.headroom or []
        note = (
            "CPU trace: no device peak, so no recoverable time (ops by self time on the compute thread)."
            if a.device == "cpu"
            else ""
            if a.roofline_device
            else "Unknown device: no peak, so no recoverable time."
        )
        out.append(
            {
                "rung": rung,
                "role": role,
                "lens": lens,
                "trace": key,
                "device": a.device,
                "steps": a.steps,
                "mean_step_ms": a.mean_step_ms,
                "roofline_device": a.roofline_device,
                "roofline_share": a.roofline_share,
                "targets": [{k: t.get(k) for k in TARGET_KEYS} for t in rows[:TOP_TARGETS]],
                # the best row of each kind the top 5 lacks, so every kind of finding shows
                "other_kinds": _other_kinds(rows),
                "note": note,
                **({"rates": rates} if (rates := shape_rates.entry_rates(a)) else {}),  # GEMM, attention
            }
        )
    return out


# over _other_kinds' rows: the first of each kind the top 5 lacks, and the first AccumulateGrad add
OTHER_KINDS_HEADING = "Beyond the top 5:"


def _other_kinds(rows: list[JSONObject]) -> list[JSONValue]:
    """The best row of each kind the top 5 lacks, and the first AccumulateGrad origin wherever it
    ranks (the seed's largest leftover: grads added under AccumulateGrad, on the expert weights)."""
    seen = {t["kind"] for t in rows[:TOP_TARGETS]}
    accumulate = any(is_accumulate_origin(t) for t in rows[:TOP_TARGETS])
    out: list[JSONValue] = []
    for t in rows[TOP_TARGETS:]:
        first_accumulate = not accumulate and is_accumulate_origin(t)
        if t["kind"] not in seen or first_accumulate:
            seen.add(t["kind"])
            accumulate = accumulate or first_accumulate
            out.append({k: t.get(k) for k in TARGET_KEYS})
    return out


def markdown(section: JSONValue) -> list[str]:
    """summary.md's lines for the section (the demo prints them)."""
    if not section:
        return []
    lines = ["", "## What's left"]
    for e in whats_left_entries(section):
        head = f"### {e.rung} ({e.role}"
        head += f", {e.lens}, {str(e.device or 'gpu').upper()} trace)" if e.lens else ")"
        lines += ["", head]
        if e.note:
            lines.append(e.note)
        targets = e.targets
        if not targets:
            lines += shape_rates.markdown(e.rates)
            continue
        steps, step_ms = e.steps, e.mean_step_ms
        window = f"{steps} profiled step(s)" + (f", mean step {step_ms:.1f} ms" if step_ms else "")
        lines += [
            f"Top {len(targets)} targets ({window}):",
            "",
            "| # | kind | target | ms/step | % of step | recoverable ms/step |",
            "|---|---|---|---|---|---|",
        ]
        for i, t in enumerate(targets, 1):
            pct = f"{t['pct_of_step']:.1f}" if t.get("pct_of_step") is not None else "-"
            rec = f"{t['recoverable_ms']:.2f}" if t.get("recoverable_ms") is not None else "-"
            lines.append(f"| {i} | {t['kind']} | {t['target']} | {t['ms_per_step']:.2f} | {pct} | {rec} |")
        lines.append("")
        lines += [f"{i}. {t['sentence']}" for i, t in enumerate(targets, 1)]
        if e.other_kinds:
            lines += ["", OTHER_KINDS_HEADING] + [f"- {t['sentence']}" for t in e.other_kinds]
        lines += shape_rates.markdown(e.rates)
    return lines
