"""One scheduled DAG per ladder file in include/configs/ladders (`traceladder-<ladder>`).

An Airflow DAG file: its builder is in traceladder.workflows (Airflow's safe-mode discovery parses
only files that name both "airflow" and "dag", so this docstring does)."""

from traceladder.plan.grid import check_blocks, weekly_grid
from traceladder.workflows.ladder import build_weekly_dag
from traceladder.workflows.discovery import discover

for _loaded in discover().ladders:
    _ladder = _loaded.ladder
    globals()[f"traceladder_{_ladder.ladder}"] = build_weekly_dag(
        _ladder.ladder,
        _ladder.schedule,
        _loaded.cluster.hosts,
        _ladder.description,
        _ladder.timeout_s,
        weekly_grid(_loaded),
        _ladder.retries,
        check_blocks([_loaded]),
    )
