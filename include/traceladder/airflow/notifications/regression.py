"""Regression notifications through an Airflow notifier.

The user names a connection (default `traceladder_notify`): an HTTP connection whose host is a
webhook URL (Slack, Teams, a chat bot...). With no such connection the notice is logged, so a
regression is never silent."""

from __future__ import annotations

from traceladder.core.documents import JSONObject, SummaryRef

import json
import logging
from typing import Any

from airflow.sdk import BaseNotifier

log = logging.getLogger(__name__)
DEFAULT_CONN_ID = "traceladder_notify"


class RegressionNotifier(BaseNotifier):
    """Post a one-paragraph notice about a ladder run's regressions.

    :param ladder: the ladder name, for the message.
    :param summary_ref: what the summary task returned (run id, regressions, provenance changes,
        report keys).
    :param conn_id: an HTTP connection holding the webhook URL; missing means "log only".
    :param outcomes: lines after it: triages that ended `not reproduced` or `insufficient data`
        since the ladder's last notice (notifications/triage.py `outcome_line`).
    """

    template_fields = ("ladder",)

    def __init__(
        self, ladder: str, summary_ref: JSONObject, conn_id: str = DEFAULT_CONN_ID, outcomes: list[str] | None = None
    ) -> None:
        super().__init__()
        self.ladder, self.summary_ref, self.conn_id = ladder, summary_ref, conn_id
        self.outcomes = list(outcomes or [])

    def message(self) -> str:
        """The notice; the quiet triages' outcomes since the last notice follow it, a line each."""
        return "\n".join([self._headline(), *self.outcomes])

    def _headline(self) -> str:
        ref = SummaryRef.from_dict(self.summary_ref)
        if ref.suspects:  # the verdict comes in the alert's own notice (notifications/triage.py)
            rungs = ", ".join(dict.fromkeys(str(s.get("rung")) for s in ref.suspects))
            return f"traceladder {self.ladder} run {ref.run_id}: suspects: {rungs} (triage started)"
        if self.outcomes and not (ref.regressions or ref.provenance_changes):
            return f"traceladder {self.ladder} run {ref.run_id}: triage outcomes:"
        parts = [f"traceladder {self.ladder} run {ref.run_id}:"]
        if ref.regression_calls:  # rung, first run after, size with interval, provenance
            parts.append("step-time regression: " + " ".join(ref.regression_calls))
        elif ref.regressions:
            parts.append(f"step-time regression in {', '.join(ref.regressions)}.")
        if ref.provenance_changes:
            parts.append(f"provenance changed ({'; '.join(str(c) for c in ref.provenance_changes)}).")
        parts.append(f"Report: {ref.report_html}")
        return " ".join(parts)

    def notify(self, context: Any) -> None:
        post_webhook(self.message(), self.conn_id, "regression notice")


def post_webhook(text: str, conn_id: str, what: str) -> None:
    """Post `{"text": ...}` to the connection's webhook URL; logged only without one (the
    regression notice and the triage's message both go this way)."""
    url = webhook_url(conn_id)
    if url is None:
        log.warning("%s (no %r connection: logged only)", text, conn_id)
        return
    import urllib.request

    if not url.startswith(("https://", "http://")):
        log.warning("%s (the %r connection is not an http(s) URL: logged only)", text, conn_id)
        return
    body = json.dumps({"text": text}).encode()
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url, data=body, headers=headers)  # noqa: S310 - scheme checked above
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - scheme checked above
        log.info("%s sent through %r: HTTP %s", what, conn_id, response.status)


def webhook_url(conn_id: str) -> str | None:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    if not conn.host:
        return None
    scheme = conn.schema or "https"
    host = conn.host if "://" in conn.host else f"{scheme}://{conn.host}"
    return host + (f":{conn.port}" if conn.port and "://" not in (conn.host or "") else "")
