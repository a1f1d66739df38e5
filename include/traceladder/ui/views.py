"""What the Ladders page's templates show, one class per view: a ladder in the list
(``LadderView``), a run (``RunView``: its summary, charts, files and what retention removed), a
suspect rung's triage (``TriageRow``, with the alerts that cover it: ``AlertLink``), an alert in
the alerts list (``AlertRow``) and on its page (``AlertView``, its members as ``MemberLink``), and
the keywords each page's template is rendered with (``LaddersPage``, ``ComparePage``). The app
(ui/app.py, ui/alerts.py) fills them from ``data.LadderStore`` and the alert store; the templates
read their attributes (Jinja reads an attribute and a key alike)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import quote
from typing import TYPE_CHECKING, TypedDict

from traceladder.core.alerts import AlertDoc
from traceladder.core.codec import JSONObject, JSONValue
from traceladder.ui.data import LadderEntry, RunRow

if TYPE_CHECKING:
    from jinja2 import Environment
    from markupsafe import Markup


def text(value: JSONValue) -> str | None:
    """A stored document's value as the page prints it (None stays None)."""
    return None if value is None else str(value)


@dataclass(frozen=True)
class AlertLink:
    """An alert beside a triage row on the run page: `alert a-...: untriaged`."""

    id: str
    status: str
    href: str


@dataclass(frozen=True)
class TriageRow:
    """A suspect rung's triage, from its triage.json as stored (``not started`` while there is
    none): state, label, first bad candidate, conclusion and the link to its report.html."""

    rung: str
    state: str | None = "not started"
    label: str | None = None
    first_bad: str | None = None
    conclusion: str | None = None
    report: str | None = None  # the report's URL, once its triage.json is stored
    alerts: tuple[AlertLink, ...] = ()  # the alerts whose members include this run's rung

    @classmethod
    def stored(cls, rung: str, doc: JSONObject, report: str) -> TriageRow:
        return cls(
            rung=rung,
            state=text(doc.get("state")),
            label=text(doc.get("label")),
            first_bad=text(doc.get("first_bad")),
            conclusion=text(doc.get("conclusion")),
            report=report,
        )


@dataclass
class RunView:
    """A published run as a page shows it. ``summary`` is its summary.json as stored (checked by
    its class, data.LadderStore.summary), None with ``error`` saying why; ``version`` its index
    entry's ETag (the links' ``?v=``). The files are keys relative to the ladder's prefix: the
    summary folder's, its charts, and on the run page every artifact by folder with its link
    (href, label) and, per rung folder, what retention removed (key, manifest record)."""

    run_id: str
    version: str = ""
    summary: JSONObject | None = None
    error: str | None = None
    triages: list[TriageRow] = field(default_factory=list)
    summary_files: list[str] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)
    artifacts: dict[str, list[str]] = field(default_factory=dict)
    artifact_links: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    artifacts_truncated: bool = False
    removed: dict[str, list[tuple[str, JSONObject]]] = field(default_factory=dict)
    alerts_error: str | None = None  # why the triage rows' alerts could not be read


@dataclass
class LadderView:
    """One ladder in the list: its file's entry, the runs shown (newest first) of ``runs_total``,
    its latest run with that run's block rendered once (``latest_html``), or why the runs could
    not be read (``error``)."""

    entry: LadderEntry
    runs: list[RunRow] = field(default_factory=list)
    runs_total: int = 0
    latest: RunView | None = None
    latest_html: Markup | str = ""
    error: str | None = None


@dataclass(frozen=True)
class AlertRow:
    """An alert in the alerts list: status, kind, where (ladders, rungs), its size, culprits with
    their shares, when it was made, and whether it recovered or was merged into another."""

    id: str
    href: str
    title: str
    status: str
    kind: str
    ladders: list[str]
    rungs: list[str]
    size: str
    culprits: list[str]  # `name (share 63% [34%, 91%])`
    created_at: str
    recovered_at: str | None
    merged_into: str | None


@dataclass(frozen=True)
class MemberLink:
    """A suspect the alert covers, with its run page's link (None: no ladder file of that name)."""

    ladder: str
    rung: str
    run_id: str
    role: str
    direction: str
    delta_pct: float
    href: str | None


@dataclass(frozen=True)
class StepRow:
    """One bisection step as the table under the chart lists it."""

    kind: str
    rung: str
    good: str
    candidate: str
    verdict: str
    effect: str  # `+12.3% [+8.1%, +16.4%]`, or `-`


@dataclass
class AlertView:
    """An alert's page: the stored alert and what its triage.json adds (the bisection as an SVG
    chart and its steps, the explanation's sentence, the repro commands), who may change it and
    the form's CSRF field; `triage_error` says why the triage.json could not be read."""

    alert: AlertDoc
    size: str
    members: list[MemberLink]
    statuses: tuple[str, ...]
    chart: Markup | str = ""
    steps: list[StepRow] = field(default_factory=list)
    sentence: str | None = None
    repro: list[str] = field(default_factory=list)
    report: str | None = None
    triage_error: str | None = None
    can_edit: bool = False
    csrf: str = ""


class LaddersPage(TypedDict):
    """ladders.html's keywords (the list, and one ladder's page with ``single``)."""

    base: str
    user: str
    ladders: list[LadderView]
    s3_errors: list[str]
    can_trigger: bool
    csrf: str
    trigger_dag_id: str


class ComparePage(TypedDict):
    """compare.html's keywords: the ladder's runs, the two compared (``a``, ``b``), their rows
    (compare.compare_rows) and provenance differences, or why there are none."""

    base: str
    user: str
    entry: LadderEntry
    runs: list[RunRow]
    a: str
    b: str
    rows: list[JSONObject]
    provenance: list[str]
    errors: list[str]
    s3_error: str | None


@lru_cache(maxsize=1)
def page_templates() -> Environment:
    """The Ladders page's Jinja environment: its filters and the summary sections' renderers (no Airflow)."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    from traceladder.summary.attribution import ATTRIBUTION_SCOPE, noise_line
    from traceladder.summary.whats_left import OTHER_KINDS_HEADING
    from traceladder.summary.shape_rates import html as rates_html
    from traceladder.summary.render.fmt import fmt_change, fmt_est, fmt_false_calls, fmt_gb
    from traceladder.summary.render.history import history_notes
    from traceladder.stats.verdicts import interval_label

    env = Environment(
        loader=PackageLoader("traceladder.ui", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["est"] = fmt_est
    env.filters["change"] = fmt_change
    env.filters["gb"] = fmt_gb
    env.filters["false_calls"] = fmt_false_calls  # the rule's sentence, as summary.md and report.html state it
    env.filters["interval_label"] = interval_label  # the verdicts' level and rule, as there too
    env.globals["history_notes"] = history_notes  # the History section's sentences, as there too
    env.filters["urlpart"] = lambda s: quote(str(s), safe="")
    env.filters["urlpath"] = lambda s: quote(str(s), safe="/")
    env.globals["attribution_scope"] = ATTRIBUTION_SCOPE
    env.globals["attribution_noise"] = noise_line
    env.globals["other_kinds_heading"] = OTHER_KINDS_HEADING
    env.globals["shape_rates_html"] = rates_html  # GEMM and attention rates per shape
    from traceladder.summary.lens_runs import html as lens_runs_html  # kernel names, rungs not explained

    env.globals["lens_runs_html"] = lens_runs_html
    from traceladder.plan import trigger_form

    # the form's bounds and pattern, as the trigger DAG's Params have them
    env.globals["trigger_params"] = {
        "repeats_min": trigger_form.REPEATS_MIN,
        "repeats_max": trigger_form.REPEATS_MAX,
        "switch_value": trigger_form.SWITCH_VALUE,
    }
    return env
