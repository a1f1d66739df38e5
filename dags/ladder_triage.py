"""`traceladder-triage`: confirm, localize and explain a ladder run's suspects (docs/triage.md).

An Airflow DAG file: its builder is in traceladder.workflows (Airflow's safe-mode discovery parses
only files that name both "airflow" and "dag", so this docstring does)."""

from traceladder.workflows.discovery import discover
from traceladder.workflows.triage import build_triage_dag

triage_dag = build_triage_dag(discover().ladders)
