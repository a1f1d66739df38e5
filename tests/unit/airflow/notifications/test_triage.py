"""The weekly notice with suspects is one line; the triage's message holds the label, rung, size
with its interval, first bad, attribution sentence and the command that reruns each step's A/B (issue 59)."""

from __future__ import annotations

import pytest

from traceladder.airflow.notifications.regression import RegressionNotifier
from traceladder.airflow.notifications.triage import triage_message
from testkit.triage_docs import step, suspect, triage_doc
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


def test_the_triage_message_holds_what_the_issue_names() -> None:
    from dataclasses import replace

    from traceladder.triage.record import reproduce_commands

    doc = triage_doc(
        suspect(reason="change point"),
        steps=[step(delta_pct=14.2, interval_pct=[9.8, 18.9], blocks=4)],
        first_bad="nightly-5",
        last_good="nightly-4",
        explanation=Explanation(
            lens="torch_rank0", good="nightly-4", bad="nightly-5", sentence="attention grew by 1.2 ms a step"
        ),
    )
    doc = replace(doc, reproduce=reproduce_commands(doc))
    lines = triage_message(doc, "traceladder/mini/w5/triage/fusions/report.html").splitlines()
    assert lines[0] == "traceladder mini run w5: confirmed regression in fusions"
    assert lines[1] == "size: +14.2% (+9.8% to +18.9%) against w4"
    assert lines[2] == "first bad: nightly-5 (last good: nightly-4)"
    assert "attribution: attention grew by 1.2 ms a step" in lines
    assert "reproduce confirm: traceladder triage repro --ladder mini --run w5 --rung fusions --step 0" in lines
    assert not any("run-rung" in line for line in lines)
    assert lines[-1] == "report: traceladder/mini/w5/triage/fusions/report.html"


def test_an_old_triage_with_run_rung_commands_still_reads_and_shows_them() -> None:
    """triage.json written before `triage repro`: its good/bad `run-rung` commands are shown as they are."""
    from traceladder.core.documents import TriageDoc

    old = triage_doc(suspect(), steps=[step()], reproduce={"good": "traceladder run-rung --spec-json '{}'"})
    back = TriageDoc.from_json(old.to_json())
    assert "reproduce good: traceladder run-rung --spec-json '{}'" in triage_message(back).splitlines()


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
