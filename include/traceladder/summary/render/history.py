"""The history part of summary.md and report.html: change points per rung (the calls) and
"since last week", a view of the same data (figures only; no call is made from two runs)."""

from __future__ import annotations


from jinja2 import Environment, select_autoescape

from traceladder.core.documents import JSONValue
from traceladder.core.summary_parts import LadderHistory
from traceladder.stats.history import suspect_lines
from traceladder.stats.verdicts import METRIC_WORDS, STEP
from traceladder.summary.render.fmt import fmt_est


def read_history(found: JSONValue) -> LadderHistory | None:
    """A summary's ``history`` as its class (None: the summary has none, e.g. a what-if run)."""
    return LadderHistory.from_dict(found, "summary.json: history") if found else None


def _est(est: JSONValue) -> str:
    """An estimate as stored (``{"mean", "ci95", "n"}``) in a table cell."""
    return fmt_est(est if isinstance(est, dict) and est else None)


def _levels(h: LadderHistory) -> str:
    recent = f", newest {h.recent_runs} runs p < {h.alpha_recent:g}" if h.alpha_recent else ""
    return f"{h.test}-test p < {h.alpha:g}{recent}"


def history_notes(found: LadderHistory | JSONValue) -> list[str]:
    """The sentences under the History heading, beside its change-point table, in summary.md,
    report.html and the Ladders page alike: each suspect's (rung, direction, size, reason, last
    good run), or, with no suspect and no change point, that none was found. A suspect is never
    met by "no change point": a run beyond the prediction bound says so in its own sentence."""
    history = found if isinstance(found, LadderHistory) else read_history(found)
    if history is None:
        return []
    suspects = suspect_lines(history)
    if suspects:
        return suspects
    if any(rung.change_points for rung in history.rungs):
        return []
    what = METRIC_WORDS.get(history.metric, METRIC_WORDS[STEP])[0]
    return [f"No change point in any rung's {what}."]


def change_rows(history: LadderHistory) -> list[dict[str, str]]:
    rows = []
    for rung in history.rungs:
        for c in rung.change_points:
            lo, hi = c.ci95_pct
            rows.append(
                {
                    "rung": c.rung,
                    "run_id": c.run_id,
                    "direction": c.direction,
                    "size": f"{c.delta_pct:+.1f}% ({lo:+.1f}% to {hi:+.1f}%)",
                    "p": f"{c.p_value:.1g}",
                    "provenance": "; ".join(str(p) for p in c.provenance_changes) or "-",
                    "call": ("REGRESSION (new)" if c.regression else ("earlier" if c.direction == "slower" else "-"))
                    + (f"; triage: {c.triage}" if c.triage else ""),
                }
            )
    return rows


def history_markdown(history: LadderHistory | None) -> list[str]:
    if not history:
        return []
    parts = ["", f"## History ({len(history.runs)} full runs, change points, {_levels(history)})"]
    rows = change_rows(history)
    if rows:
        parts += [
            "| rung | first run after | direction | step time change (95% CI) | p | provenance change | call |",
            "|---|---|---|---|---|---|---|",
        ]
        parts += [
            f"| {r['rung']} | {r['run_id']} | {r['direction']} | {r['size']} | {r['p']} | "
            f"{r['provenance']} | {r['call']} |"
            for r in rows
        ]
    for i, note in enumerate(history_notes(history)):
        parts += [note] if i == 0 and not rows else ["", note]  # each its own paragraph, after a table too
    last = history.since_last
    if last:
        parts += [
            "",
            f"### Since {last.previous_run_id} (figures; the calls are the change points above)",
            "| rung | before ms | now ms | change |",
            "|---|---|---|---|",
        ]
        parts += [
            f"| {r['rung']} | {_est(r['previous'])} | {_est(r['current'])} | {r['delta_pct']:+.1f}% |"
            for r in last.rungs
        ]
        parts += [f"- provenance changed: {p}" for p in last.provenance_changes]
    return parts


_HTML = """<h2>History <small>({{ h.runs | length }} full runs; change points, {{ levels }})</small></h2>
{% if trend %}<img alt="trend.png" src="{{ trend }}">{% endif %}
{% if rows %}<table id="change-points"><tr><th>rung</th><th>first run after</th><th>direction</th>\
<th>step time change (95% CI)</th><th>p</th><th>provenance change</th><th>call</th></tr>
{% for r in rows %}<tr><td>{{ r.rung }}</td><td>{{ r.run_id }}</td><td>{{ r.direction }}</td><td>{{ r.size }}</td>\
<td>{{ r.p }}</td><td>{{ r.provenance }}</td><td{% if r.call.startswith('REGRESSION') %} class="failed"{% endif %}>\
{{ r.call }}</td></tr>{% endfor %}</table>
{% endif %}
{% for note in notes %}<p class="{{ 'history-suspect' if h.suspects else 'history-none' }}">{{ note }}</p>{% endfor %}
{% if h.since_last %}<h3>Since {{ h.since_last.previous_run_id }} <small>(figures; the calls are the change points \
above)</small></h3>
<table><tr><th>rung</th><th>before ms</th><th>now ms</th><th>change</th></tr>{% for r in h.since_last.rungs %}<tr>\
<td>{{ r.rung }}</td><td>{{ r.previous | est }}</td><td>{{ r.current | est }}</td><td>{{ '%+.1f%%' % r.delta_pct }}\
</td></tr>{% endfor %}</table>
{% for p in h.since_last.provenance_changes %}<p class="failed">Provenance changed: {{ p }}</p>{% endfor %}{% endif %}
"""
_ENV = Environment(autoescape=select_autoescape(default=True))
_ENV.filters["est"] = _est
_TEMPLATE = _ENV.from_string(_HTML)


def history_html(history: LadderHistory | None, trend_uri: str | None = None) -> str:
    """An HTML fragment (autoescaped); empty without a history."""
    if not history:
        return ""
    return _TEMPLATE.render(
        h=history, rows=change_rows(history), notes=history_notes(history), trend=trend_uri, levels=_levels(history)
    )
