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
    assert dag.get_task("triage").retries >= 1
    assert dag.get_task("triage").upstream_task_ids == {"approval", "no_approval"}
    assert {"triage", "approval", "gate"} <= dag.get_task("record").upstream_task_ids


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
