"""The rates per shape of a What's-left entry: the top GEMM shapes and attention calls of the
rung's rank-0 trace, by time, from its analysis.json's ``shape_rates``
(analysis/reports/shape_rates.py; docs/whats-left.md). Pure: no I/O.

:func:`entry_rates` picks the rows the summary keeps; :func:`rate_tables` gives the same
headings and cells to summary.md, report.html and the Ladders page."""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from traceladder.core.documents import JSONObject, JSONValue, TraceAnalysis
from traceladder.core.summary_parts import ShapeRates, summary_part

__all__ = ["TOP_SHAPES", "RateTable", "entry_rates", "device_line", "rate_tables", "markdown", "html", "read_rates"]

TOP_SHAPES = 5
_FROM = {
    "trace": "named by the trace's device properties",
    "cluster": "the ladder's cluster (the trace names no device in the peak table)",
}


def entry_rates(a: TraceAnalysis) -> JSONObject | None:
    """The part of ``shape_rates`` the summary keeps (the top rows of each), or None where the
    analysis has none (an older one, or a trace with neither)."""
    r = a.shape_rates
    if not r:
        return None
    gemm, attention = r.get("gemm"), r.get("attention")
    kept = {k: v[:TOP_SHAPES] for k, v in (("gemm", gemm), ("attention", attention)) if isinstance(v, list)}
    return {**r, **kept} if any(kept.values()) else None


def device_line(r: ShapeRates) -> str:
    """Which device the peak shares use, and where it came from."""
    if r.device_from == "cpu":
        return "CPU trace: GEMM rates by op duration, no device peak."
    if r.device is None:
        return f"Peak share: unknown device ({r.device_note or 'no device named'})."
    return f"Peak share of the {r.device}, {_FROM.get(r.device_from or '', r.device_from or '')} ({r.device_note})."


@dataclass(frozen=True)
class RateTable:
    title: str
    header: list[str]
    rows: list[list[str]]


def _f(v: object, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def _cells(row: JSONObject) -> list[str]:
    peak = f" of {row.get('peak_name')}" if row.get("peak_name") else ""
    share = _f(row.get("pct_of_peak_tflops"), ".1f")
    return [
        str(row.get("op")),
        str(row.get("shape")),
        str(row.get("dtype") or "-"),
        _f(row.get("calls"), "d"),
        _f(row.get("ms_per_step"), ".3f"),
        _f(row.get("tflops"), ".2f"),
        f"{share}%{peak}" if share != "-" else "-",
        _f(row.get("tbps"), ".3f"),
        f"{_f(row.get('pct_of_peak_tbps'), '.1f')}%" if row.get("pct_of_peak_tbps") is not None else "-",
    ]


_HEADER = ["op", "shape", "dtype", "calls", "ms/step", "TFLOP/s", "% of peak", "TB/s", "% of HBM peak"]


def rate_tables(r: ShapeRates | None) -> list[RateTable]:
    """The GEMM and attention tables (only those with rows)."""
    if r is None:
        return []
    out = []
    for title, rows in (("Top GEMM shapes by time", r.gemm), ("Top attention calls by time", r.attention)):
        if rows:
            out.append(RateTable(title, _HEADER, [_cells(x) for x in rows]))
    return out


def markdown(r: ShapeRates | None) -> list[str]:
    """summary.md's lines for one entry's rates."""
    tables = rate_tables(r)
    if r is None or not tables:
        return []
    lines = ["", device_line(r)]
    for tb in tables:
        lines += ["", f"{tb.title}:", "", "| " + " | ".join(tb.header) + " |", "|" + "---|" * len(tb.header)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in tb.rows]
    return lines


def read_rates(value: JSONValue) -> ShapeRates | None:
    """An entry's stored ``rates`` as its class (None where it has none)."""
    return summary_part(ShapeRates, value, "headroom: rates")


def html(value: JSONValue) -> Markup:
    """report.html's (and the Ladders page's) tables for one entry's stored ``rates``."""
    r = read_rates(value)
    tables = rate_tables(r)
    if r is None or not tables:
        return Markup("")
    out = [Markup('<p class="noise">{}</p>').format(device_line(r))]
    for tb in tables:
        head = Markup("").join(Markup("<th>{}</th>").format(h) for h in tb.header)
        body = Markup("").join(
            Markup("<tr>{}</tr>").format(Markup("").join(Markup("<td>{}</td>").format(c) for c in row))
            for row in tb.rows
        )
        out.append(Markup("<p>{}:</p><table><tr>{}</tr>{}</table>").format(tb.title, head, body))
    return Markup("\n").join(out)
