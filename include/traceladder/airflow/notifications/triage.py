"""The alert's notices (issue 59): one when its triage confirms a change, one when it recovers,
through the regression notice's webhook (regression.py `post_webhook`, the `traceladder_notify`
connection). A notice names the figure judged and the interval's level, the size with its
interval, each culprit with its share, the command that reruns the A/B, and links to the alert on
the Ladders page; it carries no JSON and never a secret. A `not reproduced` or `insufficient data`
triage is one line of the ladder's next weekly notice (`outcome_line`) unless the ladder asks for
full notices (`triage.notices: all`)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseNotifier

from traceladder.airflow.notifications.regression import DEFAULT_CONN_ID, post_webhook
from traceladder.config.models import AlertSettings
from traceladder.core.alerts import AlertDoc
from traceladder.core.documents import TriageDoc

# the Ladders page's mount (ui/__init__.py URL_PREFIX; tests check the two agree)
ALERTS_PATH = "/traceladder/alerts"
DEFAULT_BASE_URL = "http://localhost:8080"


def alert_url(settings: AlertSettings, alert_id: str) -> str:
    """The alert's page: the clusters file's `alerts.base_url`, else Airflow's `[api] base_url`."""
    base = settings.base_url
    if not base:
        from airflow.configuration import conf

        base = conf.get("api", "base_url", fallback=None) or DEFAULT_BASE_URL
    return f"{base.rstrip('/')}{ALERTS_PATH}/{alert_id}"


def alert_message(alert: AlertDoc, doc: TriageDoc, url: str) -> str:
    """The alert's notice, lines in a fixed order (a chat shows them as they are)."""
    s = doc.suspect
    where = f"{doc.ladder}/{doc.rung}"
    lines = [
        f"traceladder alert {alert.id}: {doc.label or doc.state} in {where} (run {doc.run_id})",
        f"size: {alert.size_text()} against run {s.good_run_id}",
    ]
    if doc.culprits:
        lines += [f"culprit: {c.name} {c.share_text()} of the change (last good: {c.last_good})" for c in doc.culprits]
    elif doc.first_bad:
        lines.append(f"first bad: {doc.first_bad}" + (f" (last good: {doc.last_good})" if doc.last_good else ""))
    if doc.conclusion:
        lines.append(doc.conclusion)
    if doc.explanation is not None and (doc.explanation.sentence or doc.explanation.error):
        lines.append(f"attribution: {doc.explanation.sentence or doc.explanation.error}")
    if doc.error:
        lines.append(f"error: {doc.error}")
    # `traceladder triage repro` of the confirm and each culprit's pair; a triage.json from before
    # it holds `run-rung` commands with a spec's JSON: those stay in its report
    lines += [f"rerun {step}: {command}" for step, command in doc.reproduce.items() if _is_repro(command)]
    lines.append(f"alert: {url}")
    return "\n".join(lines)


def _is_repro(command: object) -> bool:
    return isinstance(command, str) and command.startswith("traceladder triage repro ")


def recovered_message(alert: AlertDoc, runs: int, url: str) -> str:
    return (
        f"traceladder alert {alert.id} recovered: {alert.title}: the last {runs} runs (to {alert.recovered_run}) "
        f"are back inside the good runs' 99% prediction bound. Status: {alert.status}. {url}"
    )


def outcome_line(alert: AlertDoc, url: str) -> str:
    """A quiet triage's line in the weekly notice: `not reproduced` or `insufficient data`."""
    t = alert.triage
    label = t.label if t else "triaged"
    where = f"{t.rung} run {t.run_id}" if t else alert.title
    return f"triage of {where}: {label} ({alert.size_text()}); {url}"


class AlertNotifier(BaseNotifier):
    """Post an alert's notice.

    :param alert: the alert (alerts/<id>.json) as its triage left it.
    :param doc: the triage of its main rung (triage.json).
    :param url: the alert's page on the Ladders page.
    :param conn_id: an HTTP connection holding the webhook URL; missing means "log only".
    """

    def __init__(self, alert: AlertDoc, doc: TriageDoc, url: str, conn_id: str = DEFAULT_CONN_ID) -> None:
        super().__init__()
        self.alert, self.doc, self.url, self.conn_id = alert, doc, url, conn_id

    def notify(self, context: Any) -> None:
        post_webhook(alert_message(self.alert, self.doc, self.url), self.conn_id, "alert notice")
