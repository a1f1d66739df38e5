"""The triage DAG's task bodies on a real S3 (SeaweedFS) and a real webhook receiver: which
suspects a DAG run takes, a re-trigger while another DAG run triages the group starts nothing and
says so, a refused approval is recorded `not approved` (triage.json and report.html), a finished
triage is not started again, and the message reaches an HTTP server the test starts."""

from __future__ import annotations

import copy
import uuid
from pathlib import Path

import pytest
import yaml

from testkit.results import store_measured_run
from testkit.triage_docs import step, store_suspect_summary, suspect, suspect_fields, triage_doc
from tests.integration.webhook import WebhookReceiver
from tests.unit.config.test_validate import MINIMAL
from traceladder.config.loader import CONFIG_DIR
from traceladder.triage.from_ladder import TriageError
from traceladder.workflows.triage_tasks import (
    TriageParams,
    claim,
    notify_outcome,
    record_outcome,
    triage_run_id,
    weekly_triage_conf,
)
from traceladder.core.documents import TriageDoc
from traceladder.triage import record

pytestmark = pytest.mark.triage


@pytest.fixture
def seeded(airflow_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A ladder file whose run w5 has one suspect (fusions, slower than w4), stored in S3 as a
    published run stores it: plan.json, each rung's metrics.json and spec.json, summary.json."""
    from traceladder.airflow.ladders import ladder_store
    from traceladder.plan.build import build_plan

    ladder = f"triage-wire-{uuid.uuid4().hex[:8]}"  # the session's S3 is shared: each test its own ladder
    data = copy.deepcopy(MINIMAL)
    data["ladder"] = ladder
    data["builds"] = [{"name": f"n{i}", "created": f"2026-11-2{i}T02:00:00Z"} for i in range(2)]
    data["build"] = "n1"
    data["triage"] = {"approve": True, "budget_blocks": 4}
    ladders = tmp_path / "ladders"
    ladders.mkdir()
    # each test its own alerts (the session's S3 is shared, and one build change is one alert)
    clusters = yaml.safe_load((CONFIG_DIR / "clusters.yaml").read_text())
    clusters["alerts"] = {"prefix": f"alerts-{ladder}"}
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump(clusters))
    monkeypatch.setenv("TRACELADDER_CLUSTERS_FILE", str(tmp_path / "clusters.yaml"))
    (ladders / f"{ladder}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(ladders))
    loaded, store = ladder_store(ladder)
    prefix = loaded.cluster.storage.prefix
    spec = build_plan(loaded, rungs=["fusions"], lens="none", repeats=1)[0].to_dict()
    for run_id, build, step_ms in (("w4", "n0", 100.0), ("w5", "n1", 130.0)):
        provenance = {"build": build, "host": "h1"}
        store_measured_run(store, prefix, ladder, run_id, spec, step_ms, provenance, {**spec, "build": build})
    store_suspect_summary(store, prefix, ladder, suspect_fields(delta_pct=30.0))
    return store, ladder


def _record_a_confirm(store, ladder: str) -> None:
    """triage.json as the `confirm` task leaves it: running, its confirm recorded."""
    doc = triage_doc(suspect(), ladder=ladder, state="running", label=None, steps=[step()], group=["fusions"])
    record.save(store, record.keys("traceladder", ladder, "w5", "fusions")[0], doc)


def test_a_retrigger_while_a_triage_runs_starts_nothing_and_a_refusal_is_recorded(seeded, monkeypatch) -> None:
    store, ladder = seeded
    params = TriageParams(ladder=ladder, bad_run="w5")
    first = claim(params, "triage__a", is_live=lambda run_id: True)
    assert first["start"] is True and first["rungs"] == ["fusions"] and first["approve"] is True
    # a second DAG run while the first is live: nothing, and the reason names the holder
    second = claim(params, "manual__b", is_live=lambda run_id: run_id == "triage__a")
    assert second["start"] is False and second["reason"] == "being triaged by DAG run triage__a: nothing started"
    # the holder is gone (failed, cleared): the next DAG run takes the group over and resumes it
    assert claim(params, "manual__c", is_live=lambda run_id: False)["start"] is True
    # a rejected (or timed-out) approval: triage.json and report.html say `not approved`, and
    # give the command that reruns the confirm the `confirm` task recorded
    _record_a_confirm(store, ladder)
    (out,) = record_outcome(params, ["fusions"], "Reject", None, "manual__c")
    doc = TriageDoc.from_json(store.get_bytes(out["key"]), out["key"])
    assert (doc.state, doc.label) == ("not approved", "not approved")
    assert (doc.dag_run_id, doc.metric, doc.alpha) == ("manual__c", "wall", 0.05)
    assert doc.builds is not None and (doc.builds.good, doc.builds.bad) == ("n0", "n1")
    assert doc.reproduce == {"confirm": f"traceladder triage repro --ladder {ladder} --run w5 --rung fusions --step 0"}
    assert b"not approved" in store.get_bytes(out["report"])
    # a finished triage is never started again, whoever asks
    done = claim(params, "manual__d", is_live=lambda run_id: False)
    assert done["start"] is False and done["reason"] == "already triaged (fusions: not approved): nothing started"


def test_the_alerts_notice_reaches_the_webhook_once_and_holds_no_secret(seeded, monkeypatch) -> None:
    store, ladder = seeded
    params = TriageParams(ladder=ladder, bad_run="w5")
    found = claim(params, "triage__a", is_live=lambda run_id: True)
    _record_a_confirm(store, ladder)
    record_outcome(params, ["fusions"], None, "failed")  # the triage task failed: recorded `failed`
    with WebhookReceiver() as webhook:
        monkeypatch.setenv("AIRFLOW_CONN_TRACELADDER_NOTIFY", webhook.connection())
        assert notify_outcome(params, ["fusions"]) == 1
        assert notify_outcome(params, ["fusions"]) == 0  # one notice per alert
    (message,) = webhook.received
    text = message["text"]
    assert text.startswith(f"traceladder alert {found['alert']}: failed in {ladder}/fusions (run w5)")
    assert "error: the triage task ended failed" in text
    assert text.splitlines()[-1] == f"alert: http://localhost:8080/traceladder/alerts/{found['alert']}"
    assert "{" not in text  # no JSON in a notice
    assert "run-rung" not in text
    assert f"rerun confirm: traceladder triage repro --ladder {ladder} --run w5 --rung fusions --step 0" in text
    import os

    secret = os.environ.get("AWS_SECRET_ACCESS_KEY") or "no-secret-set"
    assert secret not in text


def test_the_weekly_conf_names_the_suspects_and_a_deterministic_run(seeded) -> None:
    _store, ladder = seeded
    ref = {"run_id": "scheduled__2026-12-07T03:00:00+00:00", "ladder": ladder, "suspects": [{"rung": "fusions"}]}
    with pytest.raises(TriageError, match="no suspect for rung attention"):
        claim(TriageParams(ladder=ladder, bad_run="w5", rung="attention"), "x", lambda r: False)
    assert weekly_triage_conf(ladder, {**ref, "suspects": []}, {"ok": True}) is None
    assert weekly_triage_conf(ladder, ref, None) is None  # nothing published: nothing to triage
    conf = weekly_triage_conf(ladder, ref, {"ok": True})
    assert conf is not None and conf["suspects"] == ["fusions"]
    assert (
        conf["trigger_run_id"]
        == triage_run_id(ladder, ref["run_id"])
        == f"triage__{ladder}__scheduled__2026-12-07T03-00-00-00-00"
    )


def test_a_second_ladder_on_the_same_build_change_links_to_the_alert_and_starts_nothing(
    seeded, tmp_path, monkeypatch
) -> None:
    """Two ladders, one build change (n0 -> n1): the first claims and owns the alert, the second's
    suspect links to it and starts no triage; `force` starts one anyway."""
    from traceladder.airflow.ladders import alert_store, ladder_store
    from traceladder.plan.build import build_plan

    store, ladder = seeded
    first = claim(TriageParams(ladder=ladder, bad_run="w5"), "triage__a", is_live=lambda run_id: False)
    assert first["start"] is True
    other = f"{ladder}-b"
    data = yaml.safe_load((tmp_path / "ladders" / f"{ladder}.yaml").read_text())
    (tmp_path / "ladders" / f"{other}.yaml").write_text(yaml.safe_dump({**data, "ladder": other}, sort_keys=False))
    loaded, store_b = ladder_store(other)
    prefix = loaded.cluster.storage.prefix
    spec = build_plan(loaded, rungs=["fusions"], lens="none", repeats=1)[0].to_dict()
    for run_id, build, step_ms in (("w4", "n0", 100.0), ("w5", "n1", 131.0)):
        provenance = {"build": build, "host": "h1"}
        store_measured_run(store_b, prefix, other, run_id, spec, step_ms, provenance, {**spec, "build": build})
    store_suspect_summary(store_b, prefix, other, suspect_fields(delta_pct=31.0))
    second = claim(TriageParams(ladder=other, bad_run="w5"), "triage__b", is_live=lambda run_id: False)
    assert second["start"] is False and second["alert"] == first["alert"]
    assert second["reason"] == f"covered by alert {first['alert']} (untriaged): nothing started"
    _, alerts_ = alert_store()
    got = alerts_.read(str(first["alert"]))
    assert got is not None
    assert [(m.ladder, m.role) for m in got[0].members] == [(ladder, "triaged"), (other, "linked")]
    forced = claim(TriageParams(ladder=other, bad_run="w5", force=True), "triage__c", is_live=lambda run_id: False)
    assert forced["start"] is True and forced["alert"] == first["alert"]


def test_two_triages_of_one_cause_at_once_create_one_alert_on_s3(seeded) -> None:
    """S3's conditional writes (SeaweedFS here): two suspect groups of one build change, on two
    ladders, assigned at the same moment: one creates the alert, the other links to it."""
    import threading

    from traceladder.airflow.ladders import alert_store
    from traceladder.triage import alerts
    from testkit.triage_docs import build_change, suspect

    _, store = alert_store()
    barrier, results = threading.Barrier(2), []

    def assign(ladder: str) -> None:
        s = suspect(run_id="w5", diff=build_change("n0", "n1"))
        group = [(s, alerts.member_of(s, ladder, "traceladder", "traceladder", "triaged", "wall"))]
        barrier.wait()
        doc, owns = alerts.assign(store, group, lambda rung: f"{ladder}/{rung}", f"triage__{ladder}")
        results.append((doc.id, owns))

    threads = [threading.Thread(target=assign, args=(name,)) for name in ("race-a", "race-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({alert_id for alert_id, _ in results}) == 1 and sorted(owns for _, owns in results) == [False, True]
    (alert,) = alerts.all_alerts(store)
    assert sorted(m.ladder for m in alert.members) == ["race-a", "race-b"]


def test_the_approval_estimates_the_bisections_device_hours(seeded) -> None:
    """The approval's body (issue 59): the confirm took 4 blocks of runs of 50 s; the catalog has 2
    builds from n0 to n1, so 1 search step and the pair (2 steps) of 4 A/B blocks, and the
    explanation's 2 profiled runs: 2 x 2 x 4 + 2 = 18 runs x 50 s x 1 device = 0.25 device-hours."""
    from traceladder.workflows.triage_tasks import bisection_estimate

    store, ladder = seeded
    doc = triage_doc(
        suspect(),
        ladder=ladder,
        state="running",
        label=None,
        group=["fusions"],
        steps=[step(blocks=4, runs=8, run_s=400.0)],
    )
    record.save(store, record.keys("traceladder", ladder, "w5", "fusions")[0], doc)
    said = bisection_estimate(TriageParams(ladder=ladder, bad_run="w5"), [{"rung": "fusions", "state": "running"}])
    assert said == (
        "about 0.25 device-hours (2 steps of 4 A/B blocks over 2 candidates (the build catalog) and 2 profiled "
        "runs: 18 runs of ~50 s on 1 device(s))"
    )
