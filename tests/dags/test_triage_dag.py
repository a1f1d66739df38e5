"""The triage DAG parses with its Params and tasks, and the ladder DAGs start it after publish
(issue 51)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.triage

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_triage_dag_has_its_params_and_tasks(dagbag) -> None:
    assert dagbag.import_errors == {}
    dag = dagbag.dags["traceladder-triage"]
    assert dag.schedule is None
    assert set(dag.params) >= {"ladder", "rung", "good_run", "bad_run"}
    ladder = dag.params.get_param("ladder")
    assert "proxy-local" in ladder.schema["enum"]
    assert dag.params.get_param("bad_run").schema["minLength"] == 1
    assert dag.params.get_param("rung").schema["type"] == ["null", "string"]
    assert {t.task_id for t in dag.tasks} == {
        "suspects",
        "gate",
        "confirm",
        "ask",
        "approval",
        "no_approval",
        "triage",
        "record",
        "notify",
    }
    approval = dag.get_task("approval")
    assert type(approval).__name__ == "ApprovalOperator"
    assert approval.defaults == ["Reject"] and approval.response_timeout is not None
    assert dag.get_task("record").trigger_rule == "all_done"
    assert dag.get_task("triage").retries >= 1 and dag.get_task("confirm").retries >= 1
    assert dag.get_task("triage").upstream_task_ids == {"approval", "no_approval"}
    # the confirm runs before the approval, which gates only the bisection and the explanation
    assert dag.get_task("confirm").upstream_task_ids == {"gate"}
    assert dag.get_task("ask").upstream_task_ids == {"suspects", "confirm"}
    assert approval.upstream_task_ids == {"ask"}
    # record runs whatever happened: no branch and no approval (whose Reject skips its direct
    # downstream tasks) is directly upstream of it
    record = dag.get_task("record")
    assert {"triage", "confirm"} <= record.upstream_task_ids
    assert not {"gate", "ask", "approval"} & record.upstream_task_ids
    assert not {"gate", "ask", "approval"} & dag.get_task("notify").upstream_task_ids


def test_the_approval_asks_about_the_confirmed_change(dagbag) -> None:
    """The approval's body names each confirm's verdict and size (the confirm task's XCom)."""
    approval = dagbag.dags["traceladder-triage"].get_task("approval")
    briefs = [
        {"rung": "baseline", "confirm": "baseline: the confirm: confirmed +212.0% (+150.1% to +290.0%) in 2 blocks"}
    ]

    class TI:
        def xcom_pull(self, task_ids: str) -> object:
            return briefs if task_ids == "confirm" else None

    body = approval.render_template(approval.body, {"ti": TI()})
    assert body.startswith("baseline: the confirm: confirmed +212.0% (+150.1% to +290.0%) in 2 blocks. The bisection")


def test_triage_dag_survives_serialization(dagbag) -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    restored = DagSerialization.from_dict(DagSerialization.to_dict(dagbag.dags["traceladder-triage"]))
    assert restored.get_task("approval").task_type == "ApprovalOperator"


@pytest.mark.parametrize("dag_id", ["traceladder-proxy-local", "traceladder-trigger"])
def test_ladder_dags_start_the_triage_after_publish(dagbag, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    start = dag.get_task("start_triage")
    assert type(start).__name__ == "TriggerDagRunOperator"
    assert start.trigger_dag_id == "traceladder-triage"
    assert start.skip_when_already_exists is True and start.wait_for_completion is False
    assert "triage_conf" in start.upstream_task_ids
    conf = dag.get_task("triage_conf")
    assert {"summary", "publish"} <= conf.upstream_task_ids
    assert conf.ignore_downstream_trigger_rules is False  # only start_triage skips
