"""report.html: one self-contained page (charts inlined as data URIs), from the summary dict,
with the same number formatting as summary.md."""

from __future__ import annotations

import base64
from collections.abc import Mapping

from jinja2 import Environment, select_autoescape

from traceladder.core.documents import JSONValue
from traceladder.summary.attribution import ATTRIBUTION_SCOPE, fmt_us, noise_line
from traceladder.stats.verdicts import interval_label
from traceladder.summary.whats_left import OTHER_KINDS_HEADING
from traceladder.summary.shape_rates import html as rates_html
from traceladder.summary.lens_runs import html as lens_runs_html
from traceladder.summary.render.fmt import (
    MEANS_VS_MODEL,
    PROFILE_UNITS,
    TERMS,
    fmt_change,
    fmt_est,
    adaptive_levels,
    batch_settings,
    fmt_false_calls,
    fmt_fit,
    fmt_resolution,
    fmt_gb,
    fmt_trend,
)

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>traceladder: {{ s.ladder }} {{ s.run_id }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2rem;color:#1d2430;max-width:1100px}
table{border-collapse:collapse;margin:0.5rem 0 1.5rem}th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:right}
th{background:#f3f5f7}td:first-child,th:first-child{text-align:left}.failed{color:#b42318;font-weight:600}
.noise{color:#6b7280}img{max-width:100%;border:1px solid #e5e7eb;margin:0.5rem 0}
</style></head><body>
<h1>{{ s.ladder }} <small>run {{ s.run_id }}</small></h1>
{% if s.caveats %}<div id="caveats"><strong>Caveats (from the ladder file):</strong><ul>\
{% for c in s.caveats %}<li>{{ c }}</li>{% endfor %}</ul></div>{% endif %}
<h2>Ladder</h2>
{% set cpu = s.metric == 'cpu' %}\
<p id="verdict-metric">Verdicts judge {% if cpu %}the slowest rank's compute-thread CPU time (metric: cpu); \
wall-time figures beside it.{% else %}the wall step time (metric: wall).{% endif %}</p>
{% set m = (s.model or {}).get('step_cpu_ms' if cpu else 'step_ms') or {} %}\
{% if m.df %}<p id="verdict-model">Randomised block model{{ m | trend }} on the log of each run's \
{{ m.run_statistic or 'median' }} over its iterations: {{ m | fit }}; MDE at 80% power\
{% set resolution = s | resolution %}{% if resolution %}; {{ resolution }}{% endif %}\
{% set false_calls = s | false_calls %}{% if false_calls %}; {{ false_calls }}{% endif %}. \
{{ means_vs_model }}</p>{% endif %}
{% set batch = s | batch_settings %}{% if batch %}<p id="batch-settings">{{ batch }}</p>{% endif %}
{% if s.repeats %}<p id="adaptive-repeats">Adaptive repeats: {{ s.repeats.sentence }}; \
{{ s | adaptive_levels }}.</p>{% endif %}
<table id="ladder-table"><tr><th>rung</th><th>change</th><th>step ms (95% CI)</th>\
{% if cpu %}<th>step CPU ms (95% CI)</th>{% endif %}<th>tokens/s/GPU</th>\
<th>vs parent{{ ' on CPU time' if cpu }} ({{ s | interval_label }})</th>\
<th>speedup vs root</th><th>peak mem GB</th><th>runs ok</th></tr>
{% for r in s.rungs %}<tr><td>{{ r.rung }}</td><td>{{ r.switch ~ '=' ~ r.value if r.switch else '(root)' }}</td>
<td>{{ r.step_ms | est }}</td>{% if cpu %}<td>{{ r.step_cpu_ms | est }}</td>{% endif %}\
<td>{{ r.tokens_per_sec_per_gpu | est(0) }}</td>
<td{% if r.vs_parent and r.vs_parent.verdict in ('no_change', 'single_run') %} class="noise"{% endif %}>\
{{ r.vs_parent | change }}</td>
<td>{{ '%.2fx' % r.speedup_vs_root.mean if r.speedup_vs_root else '-' }}</td><td>\
{{ r.peak_mem_gb | gb }}</td>
<td{% if r.ok != r.runs %} class="failed"{% endif %}>{{ r.ok }}/{{ r.runs }}\
{% if r.ok != r.runs %} FAILED{% endif %}</td></tr>
{% endfor %}</table>
{% for name, uri in charts %}<img alt="{{ name }}" src="{{ uri }}">{% endfor %}
<h2>Lenses{% if s.lens_rung %} (on {{ s.lens_rung }}){% endif %}</h2>
{% if s.lenses %}<table><tr><th>lens</th><th>step ms (95% CI)</th><th>overhead vs unprofiled (paired, 95% CI)</th>\
<th>traces</th><th>runs ok</th></tr>
{% for l in s.lenses %}<tr><td>{{ l.lens }}</td><td>{{ l.step_ms | est }}</td><td>{{ l.overhead_ratio | est(2) }}\
</td><td>{{ l.traces }}</td><td>{{ l.ok }}/{{ l.runs }}</td></tr>{% endfor %}
</table>{% else %}<p>No lenses in this run.</p>{% endif %}
{% if s.profile and s.profile.timeline %}\
<h2>Where the time went ({{ s.profile.lens }}, {{ s.profile.rung_id }}, {{ (s.profile.device or 'gpu') | upper }} \
timeline)</h2>
<p class="noise">{{ profile_units }}.</p>
<table><tr><th>part</th><th>ms</th><th>%</th></tr>\
{% for k in ['computation_time','exposed_comm_time','exposed_memcpy_time','idle_time','total_time'] if k in \
s.profile.timeline %}
<tr><td>{{ k }}</td><td>{{ '%.2f' % s.profile.timeline[k] }}</td><td>\
{{ '%.1f' % (s.profile.timeline_percent or {}).get(k, 0) }}</td></tr>{% endfor %}</table>
{% if s.profile.regions %}<table><tr><th>region (range wall time)</th><th>ms</th></tr>\
{% for k, v in s.profile.regions | dictsort(by='value', reverse=true) %}<tr><td>{{ k }}</td><td>{{ '%.2f' % v }}\
</td></tr>{% endfor %}</table>{% endif %}
{% if s.profile.top_ops %}<table><tr><th>top op</th><th>ms</th><th>%</th><th>count</th></tr>\
{% for op in s.profile.top_ops[:10] %}<tr><td>{{ op.name }}</td><td>{{ '%.2f' % op.time_ms }}</td><td>\
{{ '%.1f' % op.percent }}</td><td>{{ op.count }}</td></tr>{% endfor %}</table>{% endif %}
{% endif %}
{% if s.headroom %}<h2 id="whats-left">What's left</h2>
{% for e in s.headroom %}<h3>{{ e.rung }} ({{ e.role }}{% if e.lens %}, {{ e.lens }}, \
{{ (e.device or 'gpu') | upper }} trace{% endif %})</h3>
{% if e.note %}<p class="noise">{{ e.note }}</p>{% endif %}
{% if e.targets %}<table><tr><th>#</th><th>kind</th><th>target</th><th>ms/step</th><th>% of step</th>\
<th>recoverable ms/step</th></tr>
{% for t in e.targets %}<tr><td>{{ loop.index }}</td><td>{{ t.kind }}</td><td>{{ t.target }}</td>\
<td>{{ '%.2f' % t.ms_per_step }}</td><td>{{ '%.1f' % t.pct_of_step if t.pct_of_step is not none else '-' }}</td>\
<td>{{ '%.2f' % t.recoverable_ms if t.recoverable_ms is not none else '-' }}</td></tr>{% endfor %}</table>
<ol>{% for t in e.targets %}<li>{{ t.sentence }}</li>{% endfor %}</ol>{% endif %}
{% if e.other_kinds %}<p>{{ other_kinds_heading }}</p><ul>{% for t in e.other_kinds %}\
<li>{{ t.sentence }}</li>{% endfor %}</ul>{% endif %}
{{ shape_rates_html(e.rates) }}
{% endfor %}{% endif %}
{% if s.attribution %}<h2 id="attribution">Why each rung moved ({{ attribution_scope }})</h2>
{% set noise = attribution_noise(s.attribution) %}{% if noise %}<p class="muted">{{ noise }}</p>{% endif %}
<table><tr><th>rung</th><th>parent</th><th>lens</th><th>&Delta; direct time</th><th>&Delta; busy</th>\
<th>top categories</th><th>vanished / appeared</th></tr>
{% for e in s.attribution %}<tr{% if e.indicative %} class="noise"{% endif %}><td>{{ e.rung }}</td><td>\
{{ e.parent }}</td><td>{{ e.lens }}</td>{% if e.unfit %}<td colspan="4">trace unfit: {{ e.unfit }}</td>\
{% else %}<td>{{ e.kernel_time_delta_us | us }}</td><td>\
{{ e.busy_time_delta_us | us }}</td>
<td>{% for c in e.categories[:3] %}{{ c.name }} {{ c.delta_us | us }}{% if not loop.last %}; {% endif %}{% endfor %}\
</td><td>{{ e.n_vanished }} / {{ e.n_appeared }}</td>{% endif %}</tr>{% endfor %}</table>
<ul>{% for e in s.attribution %}<li{% if e.indicative %} class="noise"{% endif %}>{{ e.sentence }}</li>{% endfor %}\
</ul>{% endif %}
{{ lens_runs_html(s) | safe }}
{% if s.trace_gate %}<h2 id="trace-gate">Trace gate</h2><ul>{% for g in s.trace_gate %}\
<li{% if g.fit == false %} class="failed"{% endif %}>{{ g.rung_id }} {{ g.trace.rsplit('/', 1)[-1] }}: \
{{ 'fit' if g.fit else ('not judged' if g.fit is none else 'UNFIT') }}\
{% if g.fit is not true and g.reasons %}: {{ g.reasons | join('; ') }}{% endif %}</li>{% endfor %}</ul>{% endif %}
{{ history | safe }}
<h2>Findings</h2><ul>{% for f in s.findings %}<li>{{ f }}</li>{% endfor %}</ul>
{% if s.failures %}<h2>Failed runs</h2><ul>{% for f in s.failures %}<li class="failed">\
{{ f.rung_id }}: {{ f.status }}: {{ f.error }}</li>{% endfor %}</ul>{% endif %}
<h2 id="terms">Terms</h2><dl>{% for term, meaning in terms %}<dt>{{ term }}</dt><dd>{{ meaning }}.</dd>\
{% endfor %}</dl>
</body></html>
"""

_ENV = Environment(autoescape=select_autoescape(default=True))
_ENV.filters["est"] = fmt_est
_ENV.filters["change"] = fmt_change
_ENV.filters["us"] = fmt_us
_ENV.filters["gb"] = fmt_gb
_ENV.filters["trend"] = fmt_trend
_ENV.filters["fit"] = fmt_fit
_ENV.filters["false_calls"] = fmt_false_calls
_ENV.filters["adaptive_levels"] = adaptive_levels
_ENV.filters["resolution"] = fmt_resolution
_ENV.filters["interval_label"] = interval_label
_ENV.filters["batch_settings"] = batch_settings
_ENV.globals["attribution_scope"] = ATTRIBUTION_SCOPE
_ENV.globals["profile_units"] = PROFILE_UNITS
_ENV.globals["terms"] = TERMS
_ENV.globals["means_vs_model"] = MEANS_VS_MODEL
_ENV.globals["attribution_noise"] = noise_line
_ENV.globals["other_kinds_heading"] = OTHER_KINDS_HEADING
_ENV.globals["shape_rates_html"] = rates_html
_ENV.globals["lens_runs_html"] = lens_runs_html
_REPORT = _ENV.from_string(_TEMPLATE)


def to_html(summary: Mapping[str, JSONValue], charts: dict[str, bytes]) -> str:
    from traceladder.summary.render.history import history_html, read_history

    uris = [(name, "data:image/png;base64," + base64.b64encode(png).decode()) for name, png in sorted(charts.items())]
    trend = next((uri for name, uri in uris if name == "trend.png"), None)
    history = history_html(read_history(summary.get("history")), trend)
    return _REPORT.render(s=summary, charts=[(n, u) for n, u in uris if n != "trend.png"], history=history)
