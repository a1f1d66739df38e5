"""The weekly notice with suspects is one line, and carries the quiet triages' outcomes a line each;
an alert's notice names the figure, the level, the size with its interval and each culprit's share,
and links its page (issues 51, 59)."""

from __future__ import annotations

import pytest

from traceladder.airflow.notifications.regression import RegressionNotifier
from testkit.triage_docs import build_change, step, suspect, triage_doc
from traceladder.core.documents import Explanation

pytestmark = pytest.mark.triage


def test_the_weekly_notice_with_suspects_is_one_line() -> None:
    ref = {
        "run_id": "w5",
        "regressions": ["fusions"],
        "regression_calls": ["fusions: +15%"],
        "suspects": [{"rung": "fusions"}, {"rung": "deepep"}, {"rung": "fusions"}],
        "report_html": "traceladder/mini/w5/summary/report.html",
    }
    text = RegressionNotifier("mini", ref).message()
    assert text == "traceladder mini run w5: suspects: fusions, deepep (triage started)"
    # no suspects: the notice as it was
    assert "step-time regression: fusions: +15%" in RegressionNotifier("mini", {**ref, "suspects": []}).message()


def test_a_two_culprit_alert_notice_names_metric_level_size_and_shares_and_links_its_page(tmp_path) -> None:
    """Issue 59's done-when: the notice of a two-culprit triage names the figure judged, the
    interval's level, the size with its interval and both culprits with their shares; it links to
    the alert's page and carries no JSON."""
    from dataclasses import replace

    from traceladder.airflow.notifications.triage import alert_message, alert_url
    from traceladder.config.models import AlertSettings
    from traceladder.core.documents import Culprit
    from traceladder.triage import alerts

    store = alerts.DirAlertStore(tmp_path)
    s = suspect(reason="change point", diff=build_change("nightly-1", "nightly-5"))
    member = alerts.member_of(s, "mini", "traceladder", "traceladder", "triaged", "cpu")
    alert, _ = alerts.assign(store, [(s, member)], lambda rung: f"traceladder/mini/w5/triage/{rung}/triage.json", "d1")
    culprits = [
        Culprit(name="nightly-5", last_good="nightly-4", delta_pct=9.6, share_pct=63, share_interval_pct=[34, 91]),
        Culprit(name="nightly-2", last_good="nightly-1", delta_pct=4.9, share_pct=37, share_interval_pct=[9, 66]),
    ]
    doc = triage_doc(
        s,
        steps=[step(delta_pct=14.2, interval_pct=[9.8, 18.9], blocks=4)],
        first_bad="nightly-5",
        last_good="nightly-4",
        culprits=culprits,
        explanation=Explanation(
            lens="torch_rank0", good="nightly-4", bad="nightly-5", sentence="attention grew by 1.2 ms a step"
        ),
    )
    repro = "traceladder triage repro --ladder mini --run w5 --rung fusions --step 0"
    doc = replace(doc, metric="cpu", alpha=0.05, reproduce={"confirm": repro})
    alert = alerts.record_triage(store, alert.id, doc, "traceladder/mini/w5/triage/fusions/report.html", repro)
    url = alert_url(AlertSettings(base_url="https://airflow.example.com/"), alert.id)
    assert url == f"https://airflow.example.com/traceladder/alerts/{alert.id}"
    lines = alert_message(alert, doc, url).splitlines()
    assert lines[0] == f"traceladder alert {alert.id}: confirmed regression in mini/fusions (run w5)"
    assert lines[1] == "size: +14.2% [+9.8%, +18.9%] (CPU time, 95% interval) against run w4"
    assert lines[2] == "culprit: nightly-5 share 63% [34%, 91%] of the change (last good: nightly-4)"
    assert lines[3] == "culprit: nightly-2 share 37% [9%, 66%] of the change (last good: nightly-1)"
    assert "attribution: attention grew by 1.2 ms a step" in lines
    assert f"rerun confirm: {repro}" in lines
    assert lines[-1] == f"alert: {url}"
    text = "\n".join(lines)
    assert "{" not in text and "first bad: none" not in text


def test_a_quiet_outcome_is_one_line_and_the_weekly_notice_carries_it() -> None:
    from traceladder.airflow.notifications.triage import outcome_line
    from traceladder.core.alerts import AlertDoc, AlertTriage

    alert = AlertDoc(
        id="a-1",
        kind="regression",
        status="invalid",
        title="mini/fusions slower +30.0%",
        causes=["window:x"],
        triage=AlertTriage(
            ladder="mini",
            run_id="w5",
            rung="fusions",
            key="k",
            label="not reproduced",
            metric="wall",
            level_pct=95.0,
            delta_pct=0.4,
            interval_pct=[-2.1, 3.0],
        ),
    )
    line = outcome_line(alert, "https://a/traceladder/alerts/a-1")
    assert line == (
        "triage of fusions run w5: not reproduced (+0.4% [-2.1%, +3.0%] (wall time, 95% interval)); "
        "https://a/traceladder/alerts/a-1"
    )
    ref = {"run_id": "w6", "report_html": "r.html"}
    text = RegressionNotifier("mini", ref, outcomes=[line]).message()
    assert text.splitlines() == ["traceladder mini run w6: triage outcomes:", line]


def test_an_old_triage_with_run_rung_commands_still_reads_and_its_notice_holds_no_json() -> None:
    """triage.json written before `triage repro`: its good/bad `run-rung` commands (a spec's JSON)
    stay in triage.json and its report, not in a notice."""
    from traceladder.airflow.notifications.triage import alert_message
    from traceladder.core.alerts import AlertDoc
    from traceladder.core.documents import TriageDoc

    old = triage_doc(suspect(), steps=[step()], reproduce={"good": "traceladder run-rung --spec-json '{}'"})
    back = TriageDoc.from_json(old.to_json())
    alert = AlertDoc(id="a-1", kind="regression", status="untriaged", title="t", causes=[])
    text = alert_message(alert, back, "u")
    assert "run-rung" not in text and "{" not in text


def test_the_history_shows_a_triage_beside_its_change_point(tmp_path) -> None:
    import json

    from traceladder.core import layout
    from traceladder.storage.artifacts import DirArtifactSink
    from traceladder.core.summary_parts import LadderHistory
    from traceladder.summary.collect import with_triages
    from traceladder.summary.render.history import change_rows

    store = DirArtifactSink(tmp_path)
    point = {
        "index": 5,
        "rung": "fusions",
        "run_id": "w5",
        "direction": "slower",
        "ci95_pct": [9.0, 21.0],
        "delta_pct": 15.0,
        "p_value": 0.001,
        "provenance_changes": [],
        "regression": True,
    }
    points = [point, {**point, "run_id": "w9"}]
    history = LadderHistory.from_dict({"alpha": 0.0002, "rungs": [{"rung": "fusions", "change_points": points}]})
    key = layout.triage_key("traceladder/mini/w5", "fusions")
    store.put_bytes(key, json.dumps({"state": "done", "label": "confirmed regression"}).encode())
    history = with_triages(store, "traceladder/mini", history)
    calls = [r["call"] for r in change_rows(history)]
    assert calls == ["REGRESSION (new); triage: confirmed regression", "REGRESSION (new)"]
