"""The triage DAG under a real scheduler (traceladder.embedded.local_stack): a ladder run with a
suspect (seeded in S3 as a published run stores it: plan, rung results and specs, summary with
`history.suspects`) is triaged from a REST trigger; the approval (`triage.approve: true`) is
given through the real api-server's HITL endpoint; the confirm runs the tiny proxy for real
(the bad build injects far more work than the bench's +15%, so it stops at its first look); the
webhook message reaches an HTTP server the test starts; a second trigger starts nothing.

Not covered here: the weekly run making the suspect itself (its history) and starting the triage
through `start_triage` (tests/dags/test_triage_dag.py checks that wiring on the parsed DAG)."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from tests.integration.stack_harness import keep_logs, start_stack

pytestmark = [pytest.mark.scheduler, pytest.mark.triage, pytest.mark.service]

LADDER = "triage-sched"
DAG_ID = "traceladder-triage"
BUILDS = [
    {"name": "n0", "created": "2026-11-20T02:00:00Z"},
    # far more than the bench's +15%: the tiny proxy's 3-block confirm resolves it at its first look
    {"name": "n1", "created": "2026-11-21T02:00:00Z", "changes": {"model_args": {"extra_work_pct": 300}}},
]


class _Receiver(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _seed(stack: Any, ladder_file: Any) -> None:
    """Runs w4 (build n0) and w5 (build n1) of rung baseline, and w5's summary naming the suspect."""
    from traceladder.config import load_ladder
    from traceladder.core import layout
    from traceladder.core.documents import PlanDoc, RungResult, Summary
    from traceladder.plan.build import build_plan
    from traceladder.storage.artifacts import S3ArtifactStore
    from traceladder.triage.bisect import apply_build
    from traceladder.triage.engine import catalog

    loaded = load_ladder(ladder_file)
    store = S3ArtifactStore(stack.s3.client(), stack.s3.bucket, "traceladder", LADDER)
    base = build_plan(loaded, rungs=["baseline"], lens="none", repeats=1)[0].to_dict()
    for run_id, build, step_ms in (("w4", "n0", 100.0), ("w5", "n1", 400.0)):
        spec = apply_build(base, catalog(loaded), build)
        run = layout.run_prefix("traceladder", LADDER, run_id)
        store.put_bytes(
            layout.join(run, layout.PLAN_OBJECT), PlanDoc(ladder=LADDER, run_id=run_id, specs=[spec]).to_json().encode()
        )
        rung = layout.join(run, str(spec["rung_id"]))
        result = RungResult(
            run_id=run_id,
            ladder=LADDER,
            rung="baseline",
            rung_id=str(spec["rung_id"]),
            lens="none",
            repeat=0,
            block=0,
            position=0,
            purpose="measure",
            switch=None,
            value=None,
            parent=None,
            status="ok",
            step_ms=step_ms,
            provenance={"build": build, "host": "localhost"},
        )
        store.put_bytes(layout.join(rung, layout.METRICS_OBJECT), result.to_json().encode())
        store.put_bytes(layout.join(rung, layout.SPEC_OBJECT), json.dumps(spec).encode())
    suspect = {
        "rung": "baseline",
        "run_id": "w5",
        "good_run_id": "w4",
        "reason": "prediction bound",
        "direction": "slower",
        "delta_pct": 300.0,
    }
    summary = Summary(ladder=LADDER, run_id="w5", rungs=[], history={"suspects": [suspect]})
    run = layout.run_prefix("traceladder", LADDER, "w5")
    store.put_bytes(layout.join(layout.summary_prefix(run), layout.SUMMARY_JSON), summary.to_json().encode())


def _approve(stack: Any, run_id: str, timeout_s: float = 600) -> dict:
    """Wait for the approval's HITL detail, then answer Approve through PATCH .../hitlDetails."""
    path = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/approval/-1/hitlDetails"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stack.check_alive()
        try:
            stack._call("GET", path)
            break
        except Exception:  # noqa: BLE001 - 404 until the task has deferred
            state = stack._call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")["state"]
            assert state in ("queued", "running"), f"the triage run ended {state} before its approval"
            time.sleep(3)
    else:
        raise AssertionError(f"no approval asked within {timeout_s:.0f} s")
    _await_parked(stack, deadline)
    return stack._call("PATCH", path, json={"chosen_options": ["Approve"], "params_input": {}})


def _await_parked(stack: Any, deadline: float) -> None:
    """Answer only once the scheduler has seen the paused worker exit, as a person would.

    Airflow 3.3 races an answer given in the second after the task parks: the response reschedules
    the task, then the first process's late "success" event marks the re-queued task failed
    ("state changed externally"). The scheduler logs that event, so wait for it."""
    logs = sorted((stack.home / "logs" / "stack").glob("scheduler-*.log"))
    seen = re.compile(r"Received executor event with state success .*task_id='approval'")
    while time.monotonic() < deadline:
        stack.check_alive()
        if any(seen.search(log.read_text(errors="replace")) for log in logs):
            return
        time.sleep(1)
    raise AssertionError("the approval task never parked for input")


def test_a_suspect_is_triaged_approved_over_rest_and_reported_to_the_webhook(tmp_path) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    _Receiver.received = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    notify = {"conn_type": "http", "host": "127.0.0.1", "port": server.server_port, "schema": "http"}
    ladder = {"builds": BUILDS, "build": "n1", "triage": {"approve": True, "budget_blocks": 3}, "metric": "cpu"}
    stack = start_stack(
        tmp_path,
        {LADDER: ladder},
        {"AIRFLOW_CONN_TRACELADDER_NOTIFY": json.dumps(notify), "TRACELADDER_WARM_LAUNCHER": "0"},
    )
    try:
        _seed(stack, tmp_path / "ladders" / f"{LADDER}.yaml")
        stack.unpause(DAG_ID)
        run_id = stack.trigger(DAG_ID, {"ladder": LADDER, "bad_run": "w5"})
        answered = _approve(stack, run_id)
        assert answered["chosen_options"] == ["Approve"]
        state = stack.wait_for_run(DAG_ID, run_id, timeout_s=1200)
        tis = {ti["task_id"]: ti["state"] for ti in stack.task_instances(DAG_ID, run_id)}
        assert state == "success" and tis["triage"] == "success" and tis["no_approval"] == "skipped", tis
        from traceladder.core.documents import TriageDoc

        key = f"traceladder/{LADDER}/w5/triage/baseline/triage.json"
        doc = TriageDoc.from_json(stack.s3.client().get_object(Bucket=stack.s3.bucket, Key=key)["Body"].read(), key)
        assert doc.state == "done" and doc.label == "confirmed regression", doc.steps
        assert doc.steps[0].kind == "confirm" and doc.steps[0].verdict == "confirmed"
        (message,) = _Receiver.received
        assert message["text"].startswith(f"traceladder {LADDER} run w5: confirmed regression in baseline")
        assert "reproduce bad: traceladder run-rung" in message["text"]
        # a second trigger for the same run starts nothing and says so in its suspects task
        again = stack.trigger(DAG_ID, {"ladder": LADDER, "bad_run": "w5"})
        assert stack.wait_for_run(DAG_ID, again, timeout_s=300) == "success"
        tis = {ti["task_id"]: ti["state"] for ti in stack.task_instances(DAG_ID, again)}
        assert tis["triage"] == "skipped" and tis["approval"] == "skipped", tis
        path = f"/api/v2/dags/{DAG_ID}/dagRuns/{again}/taskInstances/suspects/xcomEntries/return_value"
        said = stack._call("GET", path)["value"]
        assert "already triaged (baseline: done): nothing started" in json.dumps(said)
        assert len(_Receiver.received) == 1  # no second verdict
    finally:
        server.shutdown()
        keep_logs(stack, "test_triage_scheduler")
        stack.stop()
