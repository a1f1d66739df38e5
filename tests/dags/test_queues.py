"""Queue routing on the serialized DAGs (what the scheduler and a Celery worker see): every task
in a host's pool has that host's name as its queue; every other task the default queue."""

from __future__ import annotations

from pathlib import Path

from traceladder.config import load_clusters

DAGS = Path(__file__).resolve().parents[2] / "dags"


def test_rung_tasks_go_to_their_hosts_queue_and_the_rest_to_the_default() -> None:
    from airflow.configuration import conf
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    host_by_pool = {h.pool: h.name for c in load_clusters().clusters.values() for h in c.hosts}
    default_queue = conf.get("operators", "default_queue")
    routed = 0
    for dag_id, dag in DagBag(dag_folder=str(DAGS)).dags.items():
        for task in DagSerialization.from_dict(DagSerialization.to_dict(dag)).tasks:
            if task.pool in host_by_pool:
                assert task.queue == host_by_pool[task.pool], f"{dag_id}.{task.task_id} on queue {task.queue}"
                routed += 1
            else:
                assert task.queue == default_queue, f"{dag_id}.{task.task_id} on queue {task.queue}"
    assert routed >= 3
