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
        "route",
        "triage",
        "record",
        "notify",
        # the docker ladder's host (include/configs: deepseek-v4-flash-mi350x on mi350x-01)
        "confirm_on_mi350x-01",
        "triage_on_mi350x-01",
    }
    approval = dag.get_task("approval")
    assert type(approval).__name__ == "ApprovalOperator"
    assert approval.defaults == ["Reject"] and approval.response_timeout is not None
    assert dag.get_task("record").trigger_rule == "all_done"
    assert dag.get_task("triage").retries >= 1 and dag.get_task("confirm").retries >= 1
    assert dag.get_task("route").upstream_task_ids == {"approval", "no_approval"}
    assert dag.get_task("triage").upstream_task_ids == {"route"}
    # the confirm runs before the approval, which gates only the bisection and the explanation
    assert dag.get_task("confirm").upstream_task_ids == {"gate"}
    assert dag.get_task("ask").upstream_task_ids == {"confirm", "confirm_on_mi350x-01"}
    assert approval.upstream_task_ids == {"ask"}
    # record runs whatever happened: no branch and no approval (whose Reject skips its direct
    # downstream tasks) is directly upstream of it
    record = dag.get_task("record")
    assert {"triage", "confirm", "triage_on_mi350x-01", "confirm_on_mi350x-01"} <= record.upstream_task_ids
    assert not {"gate", "ask", "approval", "route"} & record.upstream_task_ids
    assert not {"gate", "ask", "approval", "route"} & dag.get_task("notify").upstream_task_ids


def test_a_docker_ladders_runs_hold_its_hosts_pool(dagbag) -> None:
    """Issue 58, bug 4: the tasks that run a docker ladder's confirm and bisection blocks hold the
    docker host's pool (and take its queue), as the ladder's rung slots do, so a triage and a ladder
    run on one host take turns; local and Slurm ladders keep the plain tasks."""
    dag = dagbag.dags["traceladder-triage"]
    ladder = dagbag.dags["traceladder-deepseek-v4-flash-mi350x"]
    rung_pools = {t.pool for t in ladder.tasks if type(t).__name__ == "RungDockerOperator"}
    assert rung_pools == {"traceladder-mi350x-01"}
    for task_id in ("confirm_on_mi350x-01", "triage_on_mi350x-01"):
        t = dag.get_task(task_id)
        assert (t.pool, t.queue) == ("traceladder-mi350x-01", "mi350x-01"), task_id
        assert t.retries >= 1
    for task_id in ("confirm", "triage", "gate", "ask", "route", "record"):
        assert dag.get_task(task_id).pool == "default_pool", task_id
    assert dag.get_task("triage_on_mi350x-01").upstream_task_ids == {"route"}
    assert dag.get_task("confirm_on_mi350x-01").upstream_task_ids == {"gate"}
    gate = dag.get_task("gate").python_callable
    assert gate({"ladder": "deepseek-v4-flash-mi350x", "start": True}) == ["confirm_on_mi350x-01"]
    assert gate({"ladder": "proxy-slurm", "start": True}) == ["confirm"]
    assert gate({"ladder": "deepseek-v4-flash-mi350x", "start": False}) == []
    from traceladder.workflows.triage import task_ids_for

    hosts = {"deepseek-v4-flash-mi350x": ("mi350x-01", "traceladder-mi350x-01")}
    assert task_ids_for("deepseek-v4-flash-mi350x", hosts) == ("confirm_on_mi350x-01", "triage_on_mi350x-01")
    assert task_ids_for("proxy-slurm", hosts) == task_ids_for("proxy-local", hosts) == ("confirm", "triage")


def test_the_approval_asks_about_the_confirmed_change(dagbag) -> None:
    """The approval's body names each confirm's verdict and size (the confirm task's XCom, which
    `ask` passes on: the confirm is one of several tasks, one per docker host)."""
    approval = dagbag.dags["traceladder-triage"].get_task("approval")
    briefs = [
        {"rung": "baseline", "confirm": "baseline: the confirm: confirmed +212.0% (+150.1% to +290.0%) in 2 blocks"}
    ]

    class TI:
        def xcom_pull(self, task_ids: str, key: str = "return_value") -> object:
            pushed = {("ask", "confirms"): briefs, ("ask", "estimate"): "about 0.42 device-hours (...)"}
            return pushed.get((task_ids, key))

    body = approval.render_template(approval.body, {"ti": TI()})
    assert body.startswith(
        "baseline: the confirm: confirmed +212.0% (+150.1% to +290.0%) in 2 blocks. "
        "The bisection and the explanation will spend about 0.42 device-hours (...)."
    )


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
