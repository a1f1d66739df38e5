"""Retries by default where safe (issue 19): plan, trace collection, analysis, rank join, summary
and publish retry with exponential backoff; rungs retry (infrastructure failures only, decided by
the exception type) as the ladder's `retries:` says; the status leaf never retries."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from traceladder.config import load_ladder
from traceladder.config.loader import CONFIG_DIR

DAGS = Path(__file__).resolve().parents[2] / "dags"
SAFE = ("plan", "collect_traces", "analyze", "join_ranks", "summary", "publish")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


@pytest.mark.parametrize("dag_id", ["traceladder-proxy-local", "traceladder-trigger"])
def test_safe_tasks_retry_with_backoff_and_rungs_on_infrastructure(dagbag, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    for task_id in SAFE:
        task = dag.get_task(task_id)
        assert task.retries == 3 and task.retry_exponential_backoff, task_id
        assert task.retry_delay == timedelta(seconds=30) and task.max_retry_delay == timedelta(seconds=600), task_id
    rungs = [t for t in dag.tasks if ".rungs_" in t.task_id]
    assert rungs and all(t.retries == 2 and t.retry_exponential_backoff for t in rungs)
    assert dag.get_task("ladder_status").retries == 0


def test_the_ladder_file_sets_the_policy(tmp_path: Path) -> None:
    from traceladder.plan.grid import weekly_grid
    from traceladder.workflows.ladder import build_weekly_dag

    ladders = CONFIG_DIR / "ladders"
    doc = yaml.safe_load((ladders / "deepseek-v4-flash-mi350x.yaml").read_text())
    doc["lenses"]["use"] = ["none", "torch_rank0"]
    doc.update(
        ladder="retry-policy",
        backend="local",
        cluster="local",
        retries={"tasks": 1, "rung_infra": 0, "delay_s": 5, "max_delay_s": 60},
    )
    path = tmp_path / "retry-policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    loaded = load_ladder(path)
    dag = build_weekly_dag(
        "retry-policy", None, loaded.cluster.hosts, "", 60, weekly_grid(loaded), loaded.ladder.retries
    )
    assert dag.get_task("analyze").retries == 1 and dag.get_task("analyze").retry_delay == timedelta(seconds=5)
    assert all(t.retries == 0 for t in dag.tasks if ".rungs_" in t.task_id)
    doc["retries"] = {"rung_infra": 11}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(Exception, match=r"retries\.rung_infra"):
        load_ladder(path)
