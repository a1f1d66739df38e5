"""A real Airflow on this machine for the demo and the tests: an AIRFLOW_HOME in a git-ignored
folder, a migrated SQLite database, the pools from clusters.yaml, and `dag.test()` of a DAG
from the repo's dags/ folder. The S3 connection comes from the environment, never from code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from traceladder.core.documents import JSONObject
from traceladder.config.loader import REPO_ROOT, load_clusters
from traceladder.core.errors import TraceladderError

DAGS_FOLDER = REPO_ROOT / "dags"
PLUGINS_FOLDER = REPO_ROOT / "plugins"


class AirflowSetupError(TraceladderError, RuntimeError):
    """The local Airflow could not be prepared (migrate, pools, a DAG that does not load)."""


def airflow_env(home: Path, s3_env: dict[str, str], s3_conn_json: str) -> dict[str, str]:
    """Environment for an Airflow that uses this repo's DAGs and the given S3 server."""
    return {
        **s3_env,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW_CONN_TRACELADDER_S3": s3_conn_json,
    }


def pools_document() -> dict[str, JSONObject]:
    """`airflow pools import` input: one single-slot pool per worker host."""
    pools: dict[str, JSONObject] = {}
    for name, cluster in load_clusters().clusters.items():
        for host in cluster.hosts:
            pools[host.pool] = {
                "slots": 1,
                "description": f"traceladder: rungs on {host.name} ({name})",
                # a deferred Slurm rung still holds its cluster's slot (one rung at a time)
                "include_deferred": cluster.backend == "slurm",
            }
    return pools


def _airflow(args: list[str], env: dict[str, str]) -> None:
    airflow_bin = Path(sys.executable).with_name("airflow")
    proc = subprocess.run([str(airflow_bin), *args], env={**os.environ, **env}, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise AirflowSetupError(f"airflow {' '.join(args)} failed: {tail[0]}")


def prepare(home: Path, env: dict[str, str]) -> None:
    """Migrate the database and import the pools (deploy-time work; tasks never touch the DB)."""
    home.mkdir(parents=True, exist_ok=True)
    _airflow(["db", "migrate"], env)
    pools_file = home / "pools.json"
    pools_file.write_text(json.dumps(pools_document(), indent=1))
    _airflow(["pools", "import", str(pools_file)], env)


def dag_test(dag_id: str, run_conf: JSONObject | None = None, logical_date: datetime | None = None) -> Any:
    """Run one DAG in-process with `dag.test()`; the caller has set the Airflow environment
    before anything imported airflow. `logical_date`: the run's (default: now), e.g. a past week's
    for a history. Returns the DagRun."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS_FOLDER))
    dag = bag.get_dag(dag_id)
    if dag is None:
        errors = "; ".join(f"{Path(f).name}: {e.strip().splitlines()[-1]}" for f, e in bag.import_errors.items())
        raise AirflowSetupError(f"no DAG {dag_id!r} in {DAGS_FOLDER} ({errors or 'no import errors'})")
    if logical_date is None:
        return dag.test(run_conf=run_conf)
    return dag.test(run_conf=run_conf, logical_date=logical_date)
