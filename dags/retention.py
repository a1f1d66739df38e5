"""`traceladder-retention`: applies each cluster's `storage.retention` weekly (docs/operations.md)."""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task


@dag(
    dag_id="traceladder-retention",
    schedule="@weekly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["traceladder", "maintenance"],
    doc_md=__doc__,
)
def traceladder_retention() -> None:
    @task(retries=2)
    def apply_retention() -> dict:
        # imported here: the DAG file stays cheap to parse
        from traceladder.workflows.retention import retention_task

        return retention_task()

    apply_retention()


traceladder_retention()
