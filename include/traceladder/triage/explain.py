"""Explain a confirmed change: one profiled run each of the good and the first bad candidate with
the ladder's cheapest torch lens, then the existing attribution between them (the analysis
engine's reports, analysis/analyzers/diff.py `compare_reports`, and summary/attribution.py
`entry`): its sentence, its top ops and kernels, and its regions."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from traceladder.core.documents import DocumentError, Explanation, JSONObject, JSONValue, Mover, as_list, as_object
from traceladder.core.summary_parts import DeltaRow, RungChange, SummaryRung
from traceladder.core.errors import TraceladderError
from traceladder.summary.attribution import TRACE_LENSES, TOP, entry, gate_unfit

# run_profiled(spec, side) -> the rank-0 trace file of one profiled run, or None when it wrote none
RunProfiled = Callable[[JSONObject, str], Path | None]


def cheapest_torch_lens(lens_values: Mapping[str, object]) -> str | None:
    """The ladder's cheapest torch lens: rank 0 alone before every rank (TRACE_LENSES' order)."""
    return next((lens for lens in TRACE_LENSES if lens in lens_values), None)


def lens_overlay(measure_spec: Mapping[str, JSONValue], profiled_spec: Mapping[str, JSONValue]) -> JSONObject:
    """What a lens changes in a rung's spec (the plan's profiled spec against its measure spec of the
    same ladder): the lens, purpose, window, iterations and the overrides the lens sets."""
    m_args, p_args = as_object(measure_spec.get("model_args") or {}), as_object(profiled_spec.get("model_args") or {})
    return {
        "lens": profiled_spec["lens"],
        "purpose": "profile",
        "profile_window": profiled_spec.get("profile_window"),
        "train_iters": profiled_spec.get("train_iters"),
        "model_args": {k: v for k, v in p_args.items() if m_args.get(k) != v},
    }


def profiled(spec: Mapping[str, JSONValue], overlay: Mapping[str, JSONValue], side: str) -> JSONObject:
    out: JSONObject = dict(spec)
    out.update({k: v for k, v in overlay.items() if k != "model_args"})
    out["model_args"] = {**as_object(spec.get("model_args") or {}), **as_object(overlay.get("model_args") or {})}
    out.update(repeat=0, block=0, position=0, rung_id=f"triage-{spec.get('rung')}.explain-{side}")
    return out


def explain(
    good_spec: Mapping[str, JSONValue],
    bad_spec: Mapping[str, JSONValue],
    overlay: Mapping[str, JSONValue],
    run_profiled: RunProfiled,
    names: tuple[str, str],
    direction: str,
    work: Path | None = None,
) -> Explanation:
    """Profile both ends and compare them (never raises for a run or a trace that fails: the
    explanation then carries the error)."""
    from traceladder.analysis.api import analyze_trace, compare_reports, reports_from_dir

    lens = str(overlay["lens"])
    work = work or Path(tempfile.mkdtemp(prefix="traceladder-explain-"))
    traces: list[Path] = []
    try:
        for side, spec in (("good", good_spec), ("bad", bad_spec)):
            trace = run_profiled(profiled(spec, overlay, side), side)
            if trace is None:
                raise TraceladderError(f"the profiled run of {names[side == 'bad']} wrote no trace")
            traces.append(trace)
        reports = []
        for side, trace in zip(("good", "bad"), traces):
            analyze_trace(trace, work / side)
            reports.append(reports_from_dir(work / side, names[side == "bad"]))
        # a side the trace gate judged unfit: its reason, and no figure built on it
        if why := gate_unfit({}, *((n, str(t), r) for n, t, r in zip(names, traces, reports))):
            return Explanation(lens=lens, good=names[0], bad=names[1], sentence=f"trace unfit: {why}.")
        comparison = compare_reports(reports[0], reports[1])
    except (TraceladderError, OSError, ValueError) as exc:
        return Explanation(lens=lens, good=names[0], bad=names[1], error=f"{type(exc).__name__}: {exc}")
    verdict = "slower" if direction == "slower" else "faster"
    row = SummaryRung(rung=names[1], parent=names[0], vs_parent=RungChange(verdict=verdict, metric="step_ms"))
    e = entry(row, lens, str(traces[0]), str(traces[1]), comparison)
    doc = comparison.doc
    try:
        return Explanation(
            lens=lens,
            good=names[0],
            bad=names[1],
            sentence=str(e["sentence"]),
            top_ops=[Mover.from_dict(m, f"top_ops[{i}]") for i, m in enumerate(doc.top_ops[:TOP])],
            top_kernels=[Mover.from_dict(m, f"top_kernels[{i}]") for i, m in enumerate(doc.top_kernels[:TOP])],
            regions=[DeltaRow.from_dict(r, f"regions[{i}]") for i, r in enumerate(as_list(e["regions"]))],
        )
    except DocumentError as exc:  # a compare row of another shape: said, never a failed triage
        return Explanation(lens=lens, good=names[0], bad=names[1], error=f"the comparison: {exc}")
