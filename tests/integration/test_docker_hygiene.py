"""The docker preflight stops a *running* traceladder container whose task instance Airflow no
longer runs (issue 27, "no orphaned work"), against the real dockerd: found by its labels; one
whose task instance runs, one without task-instance labels and one of another host stay. The
lookup the operator gives it (the Task SDK's `get_ti_count`) is checked inside a real Airflow task."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from traceladder.airflow.hooks import docker_hygiene as hygiene


def _start(cli, image: str, host: str, ti: tuple[str, str, str, int] | None) -> str:
    labels = {hygiene.MANAGED_LABEL: "true", hygiene.HOST_LABEL: host}
    if ti is not None:
        labels.update(hygiene.ti_labels(*ti))
    container = cli.create_container(
        image=image,
        command=["sleep", "600"],
        labels=labels,
        host_config=cli.create_host_config(network_mode="none", auto_remove=False),
    )
    cli.start(container["Id"])
    return container["Id"]


@pytest.mark.docker
def test_a_running_container_of_a_task_that_no_longer_runs_is_stopped(docker_engine, standin_images):
    import docker

    cli = docker.APIClient(base_url=os.environ["DOCKER_HOST"], timeout=60)
    host = f"hygiene-{uuid.uuid4().hex[:8]}"
    running_ti = ("traceladder-proxy-local", "manual__1", "block_00.rungs_h", 0)
    dead_ti = ("traceladder-proxy-local", "manual__1", "block_00.rungs_h", 1)
    ids: dict[str, str] = {}
    try:
        ids["alive"] = _start(cli, standin_images.base, host, running_ti)
        ids["dead"] = _start(cli, standin_images.base, host, dead_ti)
        ids["unlabelled"] = _start(cli, standin_images.base, host, None)
        ids["other_host"] = _start(cli, standin_images.base, host + "-b", dead_ti)
        asked: list[tuple[str, str, str, int]] = []

        def ti_running(dag_id: str, run_id: str, task_id: str, map_index: int) -> bool:
            asked.append((dag_id, run_id, task_id, map_index))
            return (dag_id, run_id, task_id, map_index) == running_ti

        removed = hygiene.stop_dead_tasks(cli, host, ti_running)
        assert len(removed) == 1
        assert sorted(asked) == sorted([running_ti, dead_ti])  # the labels carried the task instance
        left = {c["Id"]: c["State"] for c in cli.containers(all=True, filters={"label": hygiene.MANAGED_LABEL})}
        assert ids["dead"] not in left
        assert all(left.get(ids[k]) == "running" for k in ("alive", "unlabelled", "other_host"))

        # a lookup that fails never stops anything
        def broken(*_: object) -> bool:
            raise RuntimeError("execution API unreachable")

        assert hygiene.stop_dead_tasks(cli, host, broken) == []
        assert cli.inspect_container(ids["alive"])["State"]["Running"]
    finally:
        for cid in ids.values():
            try:
                cli.remove_container(cid, force=True)
            except docker.errors.NotFound:
                pass


_PROBE_DAG = textwrap.dedent(
    """
    import pendulum
    from airflow.sdk import dag, task

    @dag(dag_id="ti-probe", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
    def ti_probe():
        @task
        def first():
            return "done"

        @task
        def probe(**context):
            from traceladder.airflow.operators.docker import ti_running as _ti_running

            running, ti = _ti_running(context), context["ti"]
            return {
                "itself": running(ti.dag_id, ti.run_id, ti.task_id, -1),
                "finished": running(ti.dag_id, ti.run_id, "first", -1),
                "other_run": running(ti.dag_id, "no-such-run", ti.task_id, -1),
            }

        first() >> probe()

    ti_probe()
    """
)


def test_the_operators_lookup_asks_airflow_whether_a_task_instance_runs(airflow_home, tmp_path):
    """In a real task (``dag.test()`` in its own process: the DAG folder is read at import)."""
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "ti_probe.py").write_text(_PROBE_DAG)
    script = (
        "import json; from airflow.dag_processing.dagbag import DagBag\n"
        "bag = DagBag(dag_folder=%r); assert bag.import_errors == {}, bag.import_errors\n"
        "run = bag.get_dag('ti-probe').test()\n"
        "ti = next(t for t in run.get_task_instances() if t.task_id == 'probe')\n"
        "print('PROBE', str(run.state), json.dumps(ti.xcom_pull(task_ids='probe')))\n" % str(folder)
    )
    include = Path(__file__).resolve().parents[2] / "include"
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(folder), "PYTHONPATH": str(include)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    line = next((x for x in done.stdout.splitlines() if x.startswith("PROBE ")), "")
    assert line, done.stderr[-2000:]
    _, state, found = line.split(" ", 2)
    assert state == "success" and json.loads(found) == {"itself": True, "finished": False, "other_run": False}
