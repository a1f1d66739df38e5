"""What the profiled runs tell beyond a lens's overhead (issue 61, items 2 and 5):

- ``kernel_names``: the heavy lens confirms kernel names. The lens block's rocprofv3 trace (the
  whole process) against its torch rank-0 trace (the window), from the reports stored beside
  each (``analysis.api.kernel_names_table``; its module states the matching rule). Not
  rocm-trace-lite: its lite mode skips dispatches that already carry a completion signal.
- ``every_rung``: the cost of the every-rung profile block. Its runs have no unprofiled pair in
  their block, so the cost is extra runs and their wall time, not an overhead ratio.
- ``unexplained``: each ladder rung without a "why it moved" entry, with the reason it has none.

Each is a typed part of ``summary.json``; ``publish.write_summary`` adds them after the
attribution, the renderers show them (``markdown``, ``html``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from typing import ClassVar

from traceladder.core import layout
from traceladder.core.codec import Part, doc_field
from traceladder.core.documents import JSONObject, JSONValue, PlanDoc, RungResult, TraceAnalysis, spec_purpose
from traceladder.core.summary_parts import attribution_entries, summary_rungs
from traceladder.storage.artifacts import ArtifactSink
from traceladder.summary.attribution import TRACE_LENSES, profiled_traces

HEAVY_LENS = "rocprofv3"  # the one lens that records every dispatch of the process
WINDOW_LENS = "torch_rank0"
KERNEL_ROWS_SHOWN = 10


@dataclass(frozen=True, kw_only=True)
class EveryRungCost(Part):
    """The every-rung profile block: its lens, runs (ok of planned) and their wall time."""

    FILE: ClassVar[str] = "every_rung"

    lens: str = doc_field("str")
    runs: int = doc_field("int")
    ok: int = doc_field("int")
    wall_s: float = doc_field("number", default=0.0)
    rungs: list[str] = doc_field("list", default=[])


@dataclass(frozen=True, kw_only=True)
class Unexplained(Part):
    """A ladder rung with no "why it moved" entry, and why."""

    FILE: ClassVar[str] = "unexplained rung"

    rung: str = doc_field("str")
    reason: str = doc_field("str")


def every_rung_cost(plan: Mapping[str, JSONValue], results: Mapping[str, RungResult]) -> EveryRungCost | None:
    specs = [s for s in PlanDoc.from_dict(plan).specs if spec_purpose(s) == "profile"]
    if not specs:
        return None
    runs = [results[str(s["rung_id"])] for s in specs if str(s["rung_id"]) in results]
    return EveryRungCost(
        lens=str(specs[0]["lens"]),
        runs=len(specs),
        ok=sum(r.ok for r in runs),
        wall_s=sum(r.wall_s or 0.0 for r in runs),
        rungs=list(dict.fromkeys(str(s["rung"]) for s in specs)),
    )


def unexplained(
    summary: Mapping[str, JSONValue], results: Mapping[str, RungResult], purposes: dict[str, str]
) -> list[Unexplained]:
    """Each rung of the ladder table that the attribution left out, with the first reason that holds."""
    explained = {e.rung for e in attribution_entries(summary.get("attribution") or [])}
    traces = profiled_traces(results, purposes)
    lenses = " or ".join(TRACE_LENSES)
    out = []
    for row in summary_rungs(summary["rungs"]):
        if row.rung in explained:
            continue
        if row.parent is None:
            reason = "the root: it has no parent to compare with"
        elif row.rung not in traces:
            reason = f"no ok profiled run ({lenses}) of {row.rung}"
        elif row.parent not in traces:
            reason = f"no ok profiled run ({lenses}) of its parent {row.parent}"
        elif not set(traces[row.rung]) & set(traces[row.parent]):
            reason = f"{row.rung} and {row.parent} were profiled under different lenses"
        else:
            reason = "a trace of the pair has no comparable stored reports (not analysed, or a report is missing)"
        out.append(Unexplained(rung=row.rung, reason=reason))
    return out


def _pair(plan: Mapping[str, JSONValue], results: Mapping[str, RungResult]) -> tuple[RungResult, RungResult] | None:
    """The first lens block whose heavy-lens run and torch rank-0 run both stored a trace."""
    specs = [s for s in PlanDoc.from_dict(plan).specs if spec_purpose(s) == "lens"]
    for heavy in specs:
        if heavy["lens"] != HEAVY_LENS:
            continue
        window = next(
            (
                s
                for s in specs
                if s["lens"] == WINDOW_LENS and s["rung"] == heavy["rung"] and s.get("block") == heavy.get("block")
            ),
            None,
        )
        h, w = results.get(str(heavy["rung_id"])), results.get(str(window["rung_id"])) if window else None
        if h and w and h.ok and w.ok and h.traces and w.traces:
            return h, w
    return None


def _train_iters(plan: Mapping[str, JSONValue], run: RungResult) -> int:
    """The steps the heavy lens's process made: its spec's train_iters, else its last iteration used."""
    for s in PlanDoc.from_dict(plan).specs:
        args = s.get("model_args")
        if s["rung_id"] == run.rung_id and isinstance(args, dict) and isinstance(args.get("train_iters"), int):
            return int(args["train_iters"])  # type: ignore[arg-type]
    return max(run.iterations_used, default=1)


def kernel_names(
    store: ArtifactSink,
    plan: Mapping[str, JSONValue],
    results: Mapping[str, RungResult],
    analyses: Mapping[str, TraceAnalysis],
) -> JSONObject | None:
    """The lens block's kernel-names table (``KernelNames`` as JSON), or None without a pair;
    a pair whose reports cannot be read gives ``{"error": ...}`` so the summary says why."""
    from traceladder.analysis.api import KernelNamesError, analysis_prefix, kernel_names_table

    pair = _pair(plan, results)
    if pair is None:
        return None
    heavy, window = pair
    process_key = str(heavy.traces[0])
    window_key = next((str(k) for k in window.traces if "rank0" in str(k).rsplit("/", 1)[-1]), str(window.traces[0]))

    def reader(trace_key: str):
        prefix = analysis_prefix(trace_key)

        def read(name: str) -> bytes | None:
            key = f"{prefix}/{name}"
            return store.get_bytes(key) if store.exists(key) else None

        return read

    analysis = analyses.get(window_key)
    try:
        table = kernel_names_table(
            reader(process_key),
            reader(window_key),
            _train_iters(plan, heavy),
            (analysis.steps if analysis and analysis.steps else 1),
            process_trace=process_key,
            window_trace=window_key,
            rung=heavy.rung,
        )
    except KernelNamesError as exc:
        return {"error": str(exc), "process_trace": process_key, "window_trace": window_key}
    return table.to_dict()


def lens_runs_parts(
    store: ArtifactSink,
    plan: Mapping[str, JSONValue],
    summary: Mapping[str, JSONValue],
    results: Mapping[str, RungResult],
    analyses: Mapping[str, TraceAnalysis],
) -> JSONObject:
    """The summary's ``kernel_names``, ``every_rung`` and ``unexplained``, and its findings with
    the kernel-names finding added."""
    from traceladder.analysis.api import KernelNames

    purposes = {str(s["rung_id"]): spec_purpose(s) for s in PlanDoc.from_dict(plan).specs}
    names = kernel_names(store, plan, results, analyses)
    cost = every_rung_cost(plan, results)
    found = [str(f) for f in summary.get("findings") or []]  # type: ignore[union-attr]
    if names and "error" not in names and (finding := KernelNames.from_dict(names).finding()):
        found.append(finding)
    return {
        "kernel_names": names,
        "every_rung": cost.to_dict() if cost else None,
        "unexplained": [u.to_dict() for u in unexplained(summary, results, purposes)],
        "findings": [*found],
    }


# ---- rendering: summary.md, report.html and the Ladders page show the same lines


def _cost_line(cost: EveryRungCost) -> str:
    return (
        f"Every-rung profile block ({cost.lens}): {cost.runs} extra runs ({cost.ok} ok), "
        f"{cost.wall_s:.0f} s of wall time; no unprofiled run pairs them, so no overhead ratio."
    )


def _names_lines(doc: JSONObject) -> tuple[str, list[tuple[str, str, str, str]], str]:
    """(the heading sentence, the rows shown, the rule) of the kernel-names part."""
    from traceladder.analysis.api import KernelNames

    if "error" in doc:
        return f"No kernel-names table: {doc['error']}", [], ""
    t = KernelNames.from_dict(doc, f"{layout.SUMMARY_JSON}: kernel_names")
    head = (
        f"{t.rung}: the torch window ({t.window_steps} step(s)) sees {t.seen_pct:.1f}% of the full process's kernel "
        f"time per step ({t.process_us_per_step / 1e3:.2f} ms over {t.process_steps} steps, rocprofv3); "
        f"{t.kernels} kernels: " + ", ".join(f"{n} {s}" for s, n in t.counts.items() if n) + "."
    )
    rows = [
        (r.kernel, f"{r.process_us_per_step / 1e3:.3f}", f"{r.share_pct:.1f}", r.status)
        for r in t.rows[:KERNEL_ROWS_SHOWN]
    ]
    return head, rows, f"Matching rule: {t.rule}. A finding is raised above {t.limit_pct:g}% missed."


def markdown(summary: Mapping[str, JSONValue]) -> list[str]:
    lines: list[str] = []
    names = summary.get("kernel_names")
    if isinstance(names, dict):
        head, rows, rule = _names_lines(names)
        lines += ["", "## Kernel names: the heavy lens against the torch window", head]
        if rows:
            lines += ["", "| kernel | ms/step | % of process | in the window |", "|---|---|---|---|"]
            lines += [f"| {k[:90]} | {ms} | {pct} | {status} |" for k, ms, pct, status in rows]
            lines += ["", rule]
    cost = summary.get("every_rung")
    gaps = summary.get("unexplained")
    if cost or gaps:
        lines += ["", '## Rungs with no "why it moved" line']
        if isinstance(cost, dict):
            lines.append(_cost_line(EveryRungCost.from_dict(cost)))
        for g in gaps if isinstance(gaps, list) else []:
            u = Unexplained.from_dict(g)
            lines.append(f"- **{u.rung}**: {u.reason}")
    return lines


def html(summary: Mapping[str, JSONValue]) -> str:
    """The same as ``markdown``, as HTML (escaped here; templates print it ``| safe``)."""
    out: list[str] = []
    names = summary.get("kernel_names")
    if isinstance(names, dict):
        head, rows, rule = _names_lines(names)
        out.append(
            f'<h2 id="kernel-names">Kernel names: the heavy lens against the torch window</h2><p>{escape(head)}</p>'
        )
        if rows:
            out.append("<table><tr><th>kernel</th><th>ms/step</th><th>% of process</th><th>in the window</th></tr>")
            out += [
                f"<tr><td>{escape(k[:90])}</td><td>{ms}</td><td>{pct}</td><td>{escape(s)}</td></tr>"
                for k, ms, pct, s in rows
            ]
            out.append(f'</table><p class="muted">{escape(rule)}</p>')
    cost = summary.get("every_rung")
    gaps = summary.get("unexplained")
    if cost or gaps:
        out.append('<h2 id="unexplained">Rungs with no &quot;why it moved&quot; line</h2>')
        if isinstance(cost, dict):
            out.append(f"<p>{escape(_cost_line(EveryRungCost.from_dict(cost)))}</p>")
        items = [Unexplained.from_dict(g) for g in (gaps if isinstance(gaps, list) else [])]
        out.append(
            "<ul>" + "".join(f"<li><strong>{escape(u.rung)}</strong>: {escape(u.reason)}</li>" for u in items) + "</ul>"
        )
    return "\n".join(out)
