"""Every DAG file imports cleanly, without heavy imports, and every rung task is in its host's
pool on the serialized DAG (what the scheduler sees)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from traceladder.config import load_clusters

DAGS = Path(__file__).resolve().parents[2] / "dags"
HEAVY = ("torch", "pandas", "matplotlib", "scipy", "numpy")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_dag_files_import_without_errors(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert {"traceladder-proxy-local", "traceladder-deepseek-v4-flash-mi350x", "traceladder-trigger"} <= set(dagbag.dag_ids)


@pytest.mark.parametrize("dag_file", sorted(DAGS.glob("*.py")), ids=lambda p: p.name)
def test_dag_file_has_no_heavy_imports(dag_file: Path) -> None:
    code = (
        "import runpy, sys; runpy.run_path(sys.argv[1]); "
        f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(dag_file)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1:] in ([], [""]), f"{dag_file.name} imports {proc.stdout.strip()}"


def test_weekly_dags_follow_their_ladder(dagbag) -> None:
    dag = dagbag.dags["traceladder-deepseek-v4-flash-mi350x"]
    assert dag.catchup is False and dag.max_active_runs == 1
    assert dag.schedule == "0 3 * * 1"
    assert {t.task_id for t in dag.tasks} >= {"plan", "collect_traces", "analyze", "summary", "publish", "ladder_status"}
    summary = dag.get_task("summary")
    assert summary.trigger_rule == "all_done" and dag.get_task("collect_traces").trigger_rule == "all_done"


def test_rung_tasks_use_their_hosts_pool_when_serialized(dagbag) -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    pools = {h.name: h.pool for c in load_clusters().clusters.values() for h in c.hosts}
    checked = 0
    for dag_id, dag in dagbag.dags.items():
        restored = DagSerialization.from_dict(DagSerialization.to_dict(dag))
        for task in restored.tasks:
            if task.task_id.startswith("rungs_"):
                host = task.task_id.removeprefix("rungs_")
                assert task.pool == pools[host], f"{dag_id}.{task.task_id} in pool {task.pool}"
                checked += 1
    assert checked >= 3


def test_trigger_dag_params_form(dagbag) -> None:
    dag = dagbag.dags["traceladder-trigger"]
    params = dag.params
    assert set(params.keys()) == {"ladder", "rungs", "lens", "repeats", "override"}
    assert "proxy-local" in params.get_param("ladder").schema["enum"]
    assert "rocprofv3" in params.get_param("lens").schema["enum"]
    assert dag.schedule is None
