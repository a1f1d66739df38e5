"""A `backend: slurm` ladder under the real scheduler and triggerer (the `make up` stack,
traceladder.embedded.local_stack) on the real test Slurm cluster (issue 27).

One stack for the module, two runs of the trigger DAG:
* a whole small ladder (one 2-node rung) through to a published summary, while the test watches the
  rung's task instance sit `deferred` as its job runs;
* a long rung that a user marks failed through the REST API while it is deferred: the trigger's
  on_kill cancels the job, and no process of the job is left on the nodes.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.stack_harness import keep_logs, start_stack, stored_rung_ids
from testkit.tiny_proxy import TINY_MODEL


from traceladder.airflow.hooks.slurm import parse_job

pytestmark = [pytest.mark.slurm, pytest.mark.scheduler]

REPO = Path(__file__).resolve().parents[2]
CLUSTER, SSH_CONN = "slurm-test", "traceladder_slurm_test"  # as in test_slurm.py
POOL = f"traceladder-{CLUSTER}"
LADDER = "sched-slurm"
LONG = "sched-slurm-long"
TRIGGER_DAG = "traceladder-trigger"
RUNG = {
    "backend": "slurm",
    "cluster": CLUSTER,
    "nnodes": 2,
    "rungs": [{"name": "baseline"}],
    "lenses": {"rung": "baseline", "use": ["none"], "every_rung": None},
}


def _clusters_file(tmp: Path, work: Path) -> Path:
    runner = f"env PYTHONPATH={REPO / 'include'} {sys.executable} -m traceladder.cli"
    doc = {
        "schema": 1,
        "clusters": {
            CLUSTER: {
                "backend": "slurm",
                "storage": {"conn_id": "traceladder_s3", "bucket": "traceladder", "prefix": "traceladder"},
                "hosts": [{"name": CLUSTER, "pool": POOL, "ssh_conn_id": SSH_CONN}],
                "slurm": {
                    "partition": "p",
                    "container_runtime": "direct",
                    "workload": "proxy",
                    "runner_command": runner,
                    "work_dir": str(work),
                    "poll_s": 1,
                },
            }
        },
    }
    path = tmp / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _rung_ti(stack, run_id: str) -> dict[str, Any] | None:
    tis = [ti for ti in stack.task_instances(TRIGGER_DAG, run_id) if ti["pool"] == POOL and ti["state"] != "skipped"]
    return tis[0] if tis else None


def _wait_deferred(stack, run_id: str, timeout_s: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    seen = None
    while time.monotonic() < deadline:
        stack.check_alive()
        seen = _rung_ti(stack, run_id)
        if seen is not None and seen["state"] == "deferred":
            return seen
        if seen is not None and seen["state"] in ("success", "failed", "upstream_failed"):
            break
        time.sleep(0.5)
    raise AssertionError(f"the rung never showed deferred: {seen}")


def _running_job(cluster, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = cluster.run("squeue", "-h", "-t", "R", "-o", "%i").stdout.split()
        if out:
            return out[0]
        time.sleep(0.3)
    raise AssertionError("no job ever ran")


def _job_processes(cluster, job_id: str) -> list[int]:
    """Pids whose environment holds this cluster's SLURM_CONF and this job's id."""
    marks = (f"SLURM_CONF={cluster.conf}\0".encode(), f"SLURM_JOB_ID={job_id}\0".encode())
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                environ = (proc / "environ").read_bytes()
            except OSError:
                continue
            if all(m in environ for m in marks):
                found.append(int(proc.name))
    return found


@pytest.fixture(scope="module")
def runs(slurm_cluster, s3_server, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("slurm-sched")
    clusters = _clusters_file(tmp, tmp / "shared")
    conn = json.dumps(slurm_cluster.ssh_connection())
    env = {"TRACELADDER_CLUSTERS_FILE": str(clusters), f"AIRFLOW_CONN_{SSH_CONN.upper()}": conn}
    mp = pytest.MonkeyPatch()
    mp.setenv("TRACELADDER_CLUSTERS_FILE", str(clusters))  # the pools the stack imports
    t0 = time.monotonic()
    long_model = {"base": {"model_args": {**TINY_MODEL, "train_iters": 100000}}}
    try:
        # the session's S3 server (a SeaweedFS of its own would add ~30 s of start and stop)
        ladders = {LADDER: RUNG, LONG: {**RUNG, "nnodes": 1, **long_model}}
        stack = start_stack(tmp, ladders, extra_env=env, s3=s3_server)
    finally:
        mp.undo()
    try:
        out: dict[str, Any] = {"stack": stack, "cluster": slurm_cluster, "started_s": time.monotonic() - t0}
        # 1. a whole ladder, watched while its job runs
        run_id = stack.trigger(TRIGGER_DAG, {"ladder": LADDER, "repeats": 1})
        out["deferred"] = _wait_deferred(stack, run_id)
        out["job_while_deferred"] = parse_job(
            slurm_cluster.scontrol("show", "job", "-o", _running_job(slurm_cluster)).stdout
        )
        out["ladder"] = {"run_id": run_id, "state": stack.wait_for_run(TRIGGER_DAG, run_id, timeout_s=600)}
        out["ladder"]["rung_ids"] = stored_rung_ids(stack, LADDER, run_id)
        out["ladder_s"] = time.monotonic() - t0 - out["started_s"]
        # 2. a long rung marked failed from the REST API while deferred
        run_id = stack.trigger(TRIGGER_DAG, {"ladder": LONG, "repeats": 1})
        ti_id = _wait_deferred(stack, run_id)
        job = _running_job(slurm_cluster)
        # A trigger the triggerer has not started yet is dropped without on_kill: mark the rung
        # failed only once a triggerer runs it (the REST TI's triggerer_job).
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            ti_now = _rung_ti(stack, run_id) or {}
            if ti_now.get("triggerer_job"):
                break
            time.sleep(0.5)
        time.sleep(3)  # one poll of the trigger: its job id is known to the running trigger
        deadline = time.monotonic() + 90  # srun's steps start late on a loaded 2-core box
        while not _job_processes(slurm_cluster, job) and time.monotonic() < deadline:
            time.sleep(0.3)
        out["cancel"] = {"job": job, "processes_before": _job_processes(slurm_cluster, job)}
        stack._call(
            "PATCH",
            f"/api/v2/dags/{TRIGGER_DAG}/dagRuns/{run_id}/taskInstances/{ti_id['task_id']}",
            json={"new_state": "failed"},
        )
        deadline = time.monotonic() + 120
        state = ""
        while time.monotonic() < deadline:
            state = parse_job(slurm_cluster.scontrol("show", "job", "-o", job).stdout).state
            if state == "CANCELLED" and not _job_processes(slurm_cluster, job):
                break
            time.sleep(0.5)
        out["cancel"].update(state=state, processes_after=_job_processes(slurm_cluster, job))
        # the rung's own state (the run's later tasks, collect to publish, are the first run's checks)
        rung = [ti for ti in stack.task_instances(TRIGGER_DAG, run_id) if ti["task_id"] == ti_id["task_id"]]
        out["cancel"]["ti_state"] = rung[0]["state"] if rung else None
        out["all_s"] = time.monotonic() - t0
        print(f"[slurm-sched] stack {out['started_s']:.0f} s, ladder {out['ladder_s']:.0f} s, all {out['all_s']:.0f} s")
        yield out
    finally:
        keep_logs(stack, "test_slurm_scheduler")
        stack.stop()


def test_a_slurm_ladder_runs_deferred_to_a_published_summary(runs: dict[str, Any]) -> None:
    assert runs["deferred"]["pool"] == POOL
    job = runs["job_while_deferred"]
    assert (job.state, job.nodes) == ("RUNNING", "n[1-2]")
    ladder = runs["ladder"]
    assert ladder["state"] == "success", ladder
    assert ladder["rung_ids"] == ["baseline.none.r0"]
    stack = runs["stack"]
    client = stack.s3.client()
    from traceladder.storage.artifacts import safe_key_part

    key = f"traceladder/{LADDER}/{safe_key_part(ladder['run_id'])}/summary/summary.json"
    summary = json.loads(client.get_object(Bucket=stack.s3.bucket, Key=key)["Body"].read())
    assert summary["ladder"] == LADDER


def test_marking_a_deferred_rung_failed_cancels_its_job(runs: dict[str, Any]) -> None:
    cancel = runs["cancel"]
    assert cancel["processes_before"], "the job's processes were never seen"
    assert cancel["state"] == "CANCELLED" and cancel["processes_after"] == []
    assert cancel["ti_state"] == "failed"
