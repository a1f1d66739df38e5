"""The triage's message: one per finished triage, through the regression notice's webhook
(regression.py `post_webhook`, the `traceladder_notify` connection). It carries the label, the
rung, the size with its interval, the first bad candidate, the attribution's sentence and a
command that reproduces each end; never a secret (the specs hold no credentials)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseNotifier

from traceladder.airflow.notifications.regression import DEFAULT_CONN_ID, post_webhook
from traceladder.core.documents import TriageDoc


def triage_message(doc: TriageDoc, report_key: str | None = None) -> str:
    """The message's text, lines in a fixed order (a chat shows them as they are)."""
    s = doc.suspect
    confirm = next((t for t in doc.steps if t.kind == "confirm" and t.rung == doc.rung), None)
    size = f"suspect {s.direction} {s.delta_pct:+.1f}%"
    if confirm is not None and confirm.delta_pct is not None:
        interval = confirm.interval_pct
        size = f"{confirm.delta_pct:+.1f}%" + (f" ({interval[0]:+.1f}% to {interval[1]:+.1f}%)" if interval else "")
    lines = [
        f"traceladder {doc.ladder} run {doc.run_id}: {doc.label or doc.state} in {doc.rung}",
        f"size: {size} against {s.good_run_id}",
        f"first bad: {doc.first_bad or 'none'}" + (f" (last good: {doc.last_good})" if doc.last_good else ""),
    ]
    lines += [f"culprit: {c.name} {c.share_text()} (last good: {c.last_good})" for c in doc.culprits]
    if doc.conclusion:
        lines.append(doc.conclusion)
    if doc.explanation is not None and (doc.explanation.sentence or doc.explanation.error):
        lines.append(f"attribution: {doc.explanation.sentence or doc.explanation.error}")
    if doc.error:
        lines.append(f"error: {doc.error}")
    lines += [f"reproduce {end}: {command}" for end, command in doc.reproduce.items()]
    if report_key:
        lines.append(f"report: {report_key}")
    return "\n".join(lines)


class TriageNotifier(BaseNotifier):
    """Post a finished triage's message.

    :param doc: the rung's triage document (triage.json).
    :param report_key: its report.html's key, named in the message.
    :param conn_id: an HTTP connection holding the webhook URL; missing means "log only".
    """

    def __init__(self, doc: TriageDoc, report_key: str | None = None, conn_id: str = DEFAULT_CONN_ID) -> None:
        super().__init__()
        self.doc, self.report_key, self.conn_id = doc, report_key, conn_id

    def notify(self, context: Any) -> None:
        post_webhook(triage_message(self.doc, self.report_key), self.conn_id, "triage message")
