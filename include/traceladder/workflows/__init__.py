"""traceladder's own DAGs, built from the provider's parts (traceladder.airflow): the ladder DAGs
(ladder.py) and their task bodies (ladder_tasks.py), the triage DAG (triage.py), its task bodies
(triage_tasks.py) and its runs on each backend (triage_backends.py), retention, the TraceLens
container step, the retry policies, and the ladder files' discovery. The top-level `dags/` files
only call the builders here."""
