"""`traceladder-triage`: confirm, localize and explain a ladder run's suspects (docs/triage.md)."""

from traceladder.airflow.discovery import discover
from traceladder.airflow.triage_dag import build_triage_dag

triage_dag = build_triage_dag([found.ladder.ladder for found in discover().ladders])
