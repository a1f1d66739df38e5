"""`traceladder-trigger`: run any ladder, or part of one, from the Params form in the UI.

An Airflow DAG file: its builder is in traceladder.workflows (Airflow's safe-mode discovery parses
only files that name both "airflow" and "dag", so this docstring does)."""

from traceladder.plan.grid import check_blocks, trigger_grid
from traceladder.workflows.ladder import build_trigger_dag
from traceladder.workflows.discovery import discover
from traceladder.config.models import LENS_NAMES

_found = discover()
trigger_dag = build_trigger_dag(
    [found.ladder.ladder for found in _found.ladders],
    list(LENS_NAMES),
    _found.all_hosts,
    max((found.ladder.timeout_s for found in _found.ladders), default=1800),
    trigger_grid(_found.ladders, [h.name for h in _found.all_hosts]),
    check_blocks(_found.ladders),
)
