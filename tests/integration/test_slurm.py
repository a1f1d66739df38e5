"""The slurm backend on a real Slurm cluster (issue 27): one slurmctld, two `slurmd -N n1|n2`, munge
and a login sshd that the session starts (slurm_cluster.py), reached only through an Airflow SSH
connection, as a real site is.

In CI (CI=true) a cluster that cannot start fails these tests; elsewhere they skip with the reason.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from testkit.tiny_proxy import TINY_LENS, TINY_MODEL

from traceladder.config.loader import CONFIG_DIR

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SSH_CONN = "traceladder_slurm_test"
CLUSTER = "slurm-test"


# ---- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture
def slurm_conn(slurm_cluster, monkeypatch: pytest.MonkeyPatch):
    """The login node as an Airflow SSH connection (host, port, user, key file), from the environment."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{SSH_CONN.upper()}", json.dumps(slurm_cluster.ssh_connection()))
    return slurm_cluster


@pytest.fixture
def slurm_ladders(airflow_home, s3_server, slurm_conn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clusters file whose `slurm-test` cluster is the test cluster (direct: the runner from this
    checkout on each node, the CPU proxy as the workload) and an empty ladders folder."""
    runner = f"env PYTHONPATH={REPO / 'include'} {sys.executable} -m traceladder.cli"
    clusters = {
        "schema": 1,
        "clusters": {
            CLUSTER: {
                "backend": "slurm",
                "storage": {"conn_id": "traceladder_s3", "bucket": s3_server.bucket, "prefix": "traceladder"},
                "hosts": [{"name": CLUSTER, "pool": f"traceladder-{CLUSTER}", "ssh_conn_id": SSH_CONN}],
                "slurm": {
                    "partition": "p",
                    "container_runtime": "direct",
                    "workload": "proxy",
                    "runner_command": runner,
                    "work_dir": str(tmp_path / "shared"),
                    "poll_s": 1,
                },
            }
        },
    }
    path = tmp_path / "clusters.yaml"
    path.write_text(yaml.safe_dump(clusters, sort_keys=False))
    monkeypatch.setenv("TRACELADDER_CLUSTERS_FILE", str(path))
    ladders = tmp_path / "ladders"
    ladders.mkdir()
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(ladders))
    return ladders


def write_ladder(folder: Path, name: str, **extra: Any) -> str:
    """A tiny proxy ladder on the test cluster (the scheduler tests' sizes)."""
    doc = {
        "schema": 1,
        "extends": str(CONFIG_DIR / "ladders" / "proxy-local.yaml"),
        "ladder": name,
        "backend": "slurm",
        "cluster": CLUSTER,
        "schedule": None,
        "repeats": 1,
        "warmup_iters": 1,
        "timeout_s": 120,
        "base": {"model_args": TINY_MODEL},
        "switches": {"lens": {"values": {"torch_rank0": TINY_LENS, "torch_all_ranks": TINY_LENS}}},
        "rungs": [{"name": "baseline"}],
        "lenses": {"rung": "baseline", "use": ["none", "torch_rank0"], "every_rung": None},
        **extra,
    }
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return name


def submit_script(cluster, body: str, nodes: int = 1) -> str:
    """A plain batch job through the login node; returns its id."""
    from traceladder.airflow.hooks.slurm import SlurmHook

    path = f"{cluster.root}/jobs/{uuid.uuid4().hex[:8]}.sh"
    with SlurmHook(SSH_CONN) as hook:
        hook.put_file(
            path, f"#!/bin/bash\n#SBATCH -N {nodes}\n#SBATCH --output={cluster.root}/jobs/%j.out\n{body}\n", "700"
        )
        return hook.submit(path)


def wait_state(cluster, job_id: str, want: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        state = cluster.scontrol("show", "job", "-o", job_id).stdout
        if f"JobState={want}" in state:
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} never {want}: {state[:300]}")


def events(trigger, timeout_s: float = 180) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [event.payload async for event in trigger.run()]

    return asyncio.run(asyncio.wait_for(collect(), timeout_s))


def processes_with(marker: str) -> list[int]:
    """Pids whose command line holds marker (a job's process left behind would show here)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def no_process_left(marker: str, timeout_s: float = 15) -> bool:
    deadline = time.monotonic() + timeout_s
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not processes_with(marker)


# ---- the cluster itself -----------------------------------------------------------------------------
def test_the_login_node_runs_a_two_node_job(slurm_cluster) -> None:
    out = slurm_cluster.root / "two.out"
    cmd = f"sbatch -N2 --wait --output={out} --wrap 'srun hostname; echo nodes=$SLURM_JOB_NODELIST'"
    import subprocess

    proc = subprocess.run([*slurm_cluster.ssh_argv(), cmd], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text().split()
    assert lines.count(slurm_cluster.host) == 2 and "nodes=n[1-2]" in lines


def test_the_standin_primus_cli_slurm_mode_runs_on_the_cluster(slurm_cluster) -> None:
    """The stand-in `primus-cli slurm srun|sbatch FLAGS -- direct ... -- train pretrain ...` from
    the login node: srun starts its entry on both nodes with torchrun's variables from the job
    (NODE_RANK 0 and 1, MASTER_ADDR the first node), sbatch runs it as the batch script; a
    missing entry exits 2 with Primus's message before any job is made."""
    import subprocess

    primus = REPO / "testkit" / "standin" / "Primus"
    out = slurm_cluster.root / f"primus-{uuid.uuid4().hex[:6]}"
    config = "examples/megatron/configs/MI355X/deepseek_v4_flash-BF16-pretrain.yaml"
    tail = f"-- direct --log_file {out}/log.txt -- train pretrain --config {config} --train_iters 3"
    # the checkout as Primus's (cwd and PRIMUS_PATH); /dev/null stands for the GPU-less nodes' /dev/kfd
    env = f"mkdir -p {out} && cd {primus} && PRIMUS_PATH={primus} PRIMUS_WORKSPACE={out}/ws"
    env += " STANDIN_KFD=/dev/null GPUS_PER_NODE=1"

    def login(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*slurm_cluster.ssh_argv(), command], capture_output=True, text=True, timeout=60)

    missing = login(f"{env} {primus.parent / 'primus-cli'} slurm srun -N 2")
    assert missing.returncode == 2 and "Missing Primus entry (container|direct)" in missing.stderr
    srun = login(f"{env} {primus.parent / 'primus-cli'} slurm srun -N 2 --output={out}/node%n.out {tail}")
    assert srun.returncode == 0, srun.stderr + (out / "node0.out").read_text()
    for rank in (0, 1):
        text = (out / f"node{rank}.out").read_text()
        assert f"GPUS_PER_NODE=1 NNODES=2 NODE_RANK={rank} MASTER_ADDR=n1 MASTER_PORT=1234" in text, text
        assert "iteration        3/       3" in text and "training done" in text
    sbatch = login(f"{env} {primus.parent / 'primus-cli'} slurm sbatch -N 1 --wait --output={out}/batch.out {tail}")
    assert sbatch.returncode == 0, sbatch.stderr
    assert "NNODES=1 NODE_RANK=0" in (out / "batch.out").read_text()


# ---- the trigger ------------------------------------------------------------------------------------
def test_the_trigger_reports_the_final_state_and_nodes(slurm_conn) -> None:
    from traceladder.airflow.triggers.slurm import SlurmJobTrigger

    job = submit_script(slurm_conn, "sleep 1; exit 3", nodes=2)
    (event,) = events(SlurmJobTrigger(job, SSH_CONN, poll_s=0.5))
    assert event["status"] == "done" and event["job_id"] == job
    assert (event["state"], event["nodes"], event["exit_code"]) == ("FAILED", "n[1-2]", "3:0")


def test_the_triggers_on_kill_cancels_the_job_and_leaves_no_process(slurm_conn) -> None:
    from traceladder.airflow.triggers.slurm import SlurmJobTrigger

    marker = f"tl-kill-{uuid.uuid4().hex[:8]}"
    job = submit_script(slurm_conn, f"exec -a {marker} sleep 300")
    wait_state(slurm_conn, job, "RUNNING")
    deadline = time.monotonic() + 10
    while not processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(marker), "the job's process never started"
    trigger = SlurmJobTrigger(job, SSH_CONN, poll_s=0.5)
    asyncio.run(trigger.on_kill())
    (event,) = events(trigger)
    assert event["state"] == "CANCELLED"
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(marker) == []


def test_the_trigger_rides_out_a_slurmctld_restart(slurm_conn) -> None:
    from traceladder.airflow.triggers.slurm import SlurmJobTrigger

    job = submit_script(slurm_conn, "sleep 6")
    wait_state(slurm_conn, job, "RUNNING")
    trigger = SlurmJobTrigger(job, SSH_CONN, poll_s=0.5, down_grace_s=60)

    async def scenario() -> list[dict[str, Any]]:
        polling = asyncio.ensure_future(_collect(trigger))
        await asyncio.sleep(1)
        await asyncio.to_thread(slurm_conn.stop_ctld)
        await asyncio.sleep(2)  # polls fail meanwhile: the trigger keeps trying
        assert not polling.done()
        await asyncio.to_thread(slurm_conn.restart_ctld)
        return await asyncio.wait_for(polling, 60)

    (event,) = asyncio.run(scenario())
    assert (event["status"], event["state"]) == ("done", "COMPLETED")


async def _collect(trigger) -> list[dict[str, Any]]:
    return [event.payload async for event in trigger.run()]


# ---- the operator -----------------------------------------------------------------------------------
class _TI:
    """What the operator reads of its task instance, the XComs it pushes, and the task states it
    asks for (Airflow's execution API answers those only to a task under a real supervisor: the
    scheduler test covers that path; here `states` plays the metadata database)."""

    def __init__(self, task_id: str, states: dict[tuple[str, str, str], str | None] | None = None) -> None:
        self.dag_id, self.task_id, self.map_index = "traceladder-slurm-op", task_id, -1
        self.xcom: dict[str, Any] = {}
        self.states = states if states is not None else {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def get_task_states(
        self, dag_id: str, run_ids: list[str], task_ids: list[str], map_index: int | None = None
    ) -> dict[str, dict[str, str | None]]:
        """RuntimeTaskInstance.get_task_states's answer: {run_id: {task_id: state}}, known ones only."""
        return {
            run: {task: self.states[(dag_id, run, task)] for task in task_ids if (dag_id, run, task) in self.states}
            for run in run_ids
        }


def _operator(ladder: str, task_id: str, lens: str = "torch_rank0", **kwargs: Any):
    from traceladder.airflow.ladders import open_ladder
    from traceladder.airflow.operators.slurm import SlurmRungOperator
    from traceladder.plan.build import build_plan

    loaded = open_ladder(ladder)
    spec = build_plan(loaded, rungs=["baseline"], lens=lens, repeats=1)[0]
    spec = spec.model_copy(update=kwargs.pop("spec_update", {}))
    op = SlurmRungOperator(
        spec=json.loads(spec.to_json()),
        ssh_conn_id=SSH_CONN,
        task_id=task_id,
        run_id=f"op-{uuid.uuid4().hex[:6]}",
        **kwargs,
    )
    return op, spec


def _defer(op, context: dict[str, Any]):
    from airflow.sdk.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    return deferred.value.trigger


def test_a_retry_reattaches_to_the_job_instead_of_submitting_again(slurm_ladders: Path, slurm_conn, s3_server) -> None:
    from traceladder.airflow.hooks.slurm import job_name

    ladder = write_ladder(slurm_ladders, "slurm-reattach")
    op, spec = _operator(ladder, "rung")
    ti = _TI("rung")
    first = _defer(op, {"ti": ti})
    # the worker "dies" here; the retry runs execute again from the start
    second = _defer(op, {"ti": ti})
    assert second.job_id == first.job_id
    name = job_name(ti.dag_id, op.run_id, ti.task_id, -1)
    listed = slurm_conn.run("squeue", "-h", "--states=all", f"--name={name}", "-o", "%i").stdout.split()
    assert listed == [first.job_id]
    (event,) = events(second)
    result = op.execute_complete({"ti": ti}, event)
    assert result["status"] == "ok" and result["rung_id"] == spec.rung_id and result["traces"]
    assert ti.xcom["slurm"]["state"] == "COMPLETED" and ti.xcom["slurm"]["job_id"] == first.job_id
    metrics = json.loads(
        s3_server.client()
        .get_object(Bucket=s3_server.bucket, Key=f"traceladder/{ladder}/{op.run_id}/{spec.rung_id}/metrics.json")[
            "Body"
        ]
        .read()
    )
    slurm = metrics["provenance"]["slurm"]
    assert slurm["job_id"] == first.job_id and slurm["nodes"] in ("n1", "n2") and slurm["nnodes"] == 1


def test_orphans_are_cancelled_by_the_next_rung_and_the_operators_on_kill_cancels_its_job(
    slurm_ladders: Path, slurm_conn
) -> None:
    """A deferred rung marked failed before a triggerer started its trigger gets no on_kill: its
    job runs on. The next Slurm rung's execute cancels every traceladder job whose task instance
    has finished (its owner is in the job's --comment) and leaves a live one's alone. Then the
    operator's own on_kill (the worker-side windows) cancels the job it submitted."""
    from traceladder.airflow.hooks.slurm import JobOwner, job_name, owner_comment

    dag = "traceladder-slurm-op"
    states: dict[tuple[str, str, str], str | None] = {
        (dag, "r-old", "failed_rung"): "failed",  # marked failed while deferred, before its trigger ran
        (dag, "r-old", "live_rung"): "deferred",
    }
    jobs = {}
    for task in ("failed_rung", "live_rung"):  # what those rungs' operators submitted (name, comment)
        comment = owner_comment(JobOwner(dag, "r-old", task))
        name = job_name(dag, "r-old", task)
        jobs[task] = submit_script(slurm_conn, f"#SBATCH --job-name={name} --comment={comment}\nexec sleep 300")
        wait_state(slurm_conn, jobs[task], "RUNNING")
    ladder = write_ladder(slurm_ladders, "slurm-orphans")
    op, _ = _operator(ladder, "rung")
    own = _defer(op, {"ti": _TI("rung", states)}).job_id
    wait_state(slurm_conn, jobs["failed_rung"], "CANCELLED", timeout_s=5)
    assert "JobState=RUNNING" in slurm_conn.scontrol("show", "job", "-o", jobs["live_rung"]).stdout
    op.on_kill()  # the worker side dies after submitting: the operator cancels its own job
    wait_state(slurm_conn, own, "CANCELLED")
    slurm_conn.run("scancel", jobs["live_rung"])
    assert no_process_left(op.run_id)


def test_a_drained_node_takes_no_rung_and_the_preflight_says_so(slurm_ladders: Path, slurm_conn) -> None:
    from airflow.sdk.exceptions import AirflowException

    ladder = write_ladder(slurm_ladders, "slurm-drained", nnodes=2)
    op, _ = _operator(ladder, "rung")
    slurm_conn.scontrol("update", "nodename=n2", "state=drain", "reason=tl-maintenance")
    try:
        with pytest.raises(AirflowException) as err:
            op.execute({"ti": _TI("rung")})
    finally:
        slurm_conn.scontrol("update", "nodename=n2", "state=resume")
    line = str(err.value)
    assert "\n" not in line and "n2 drained (tl-maintenance)" in line and "needs 2 node(s)" in line


def test_a_rung_over_its_deadline_ends_timeout(slurm_ladders: Path, slurm_conn) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    ladder = write_ladder(slurm_ladders, "slurm-timeout")
    op, spec = _operator(ladder, "rung", spec_update={"timeout_s": 2})
    ti = _TI("rung")
    (event,) = events(_defer(op, {"ti": ti}))
    assert event["state"] == "FAILED"  # the runner's exit status 1: its own result says why
    with pytest.raises(AirflowFailException, match=rf"rung {spec.rung_id} timeout"):
        op.execute_complete({"ti": ti}, event)


def _stored(s3_server, prefix: str) -> set[str]:
    listed = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix)
    return {o["Key"] for o in listed.get("Contents", [])}


@pytest.mark.parametrize("how", ["set-down", "slurmd-killed"])
def test_a_node_lost_mid_rung_fails_it_naming_the_node(slurm_ladders: Path, slurm_conn, s3_server, how: str) -> None:
    """`scontrol ... state=down`, or the node's slurmd SIGKILLed with the job's processes (a node
    losing power; the test cluster's SlurmdTimeout is 5 s): the job ends NODE_FAIL and the rung fails
    with one line naming the node; what the rung stored stays."""
    from airflow.sdk.exceptions import AirflowFailException

    from traceladder.airflow.hooks.slurm import parse_job

    ladder = write_ladder(slurm_ladders, f"slurm-nodefail-{how}")
    op, spec = _operator(ladder, "rung")
    ti = _TI("rung")
    trigger = _defer(op, {"ti": ti})
    wait_state(slurm_conn, trigger.job_id, "RUNNING")
    node = parse_job(slurm_conn.scontrol("show", "job", "-o", trigger.job_id).stdout).nodes
    prefix = f"traceladder/{ladder}/{op.run_id}/"
    try:
        if how == "set-down":
            slurm_conn.scontrol("update", f"nodename={node}", "state=down", "reason=tl-node-lost")
        else:
            deadline = time.monotonic() + 20
            runner = f"--run-id\0{op.run_id}"  # the runner's own argv (srun's holds it in one string)
            while not processes_with(runner) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert slurm_conn.kill_node(node, trigger.job_id), "the job had no process to kill"
        (event,) = events(trigger)
        assert event["state"] == "NODE_FAIL"
        stored = _stored(s3_server, prefix)
        with pytest.raises(AirflowFailException) as err:
            op.execute_complete({"ti": ti}, event)
        assert _stored(s3_server, prefix) == stored
    finally:
        if how == "set-down":
            slurm_conn.scontrol("update", f"nodename={node}", "state=resume")
        else:
            slurm_conn.start_node(node)  # ReturnToService=1: a node lost to silence comes back by itself
        slurm_conn.wait_idle(60)
    line = str(err.value)
    reason = "tl-node-lost" if how == "set-down" else "Not responding"
    assert "\n" not in line and "NODE_FAIL" in line and f"node {node} down" in line and reason in line, line
    assert no_process_left(op.run_id)


def test_a_two_node_proxy_rung_stores_one_result_with_every_global_rank(
    slurm_ladders: Path, slurm_conn, s3_server
) -> None:
    import gzip

    from testkit.tiny_rung import verified_objects

    ladder = write_ladder(slurm_ladders, "slurm-2nodes", nnodes=2)
    op, spec = _operator(ladder, "rung", lens="torch_all_ranks")
    ti = _TI("rung")
    (event,) = events(_defer(op, {"ti": ti}))
    assert (event["state"], event["nodes"]) == ("COMPLETED", "n[1-2]"), event
    result = op.execute_complete({"ti": ti}, event)
    assert result["status"] == "ok", result
    prefix = f"traceladder/{ladder}/{op.run_id}/{spec.rung_id}"
    stored = verified_objects(s3_server.client(), s3_server.bucket, prefix)  # one manifest covers both nodes
    assert {k for k in stored if k.startswith("traces/")} == {
        "traces/rank0.pt.trace.json.gz",
        "traces/rank1.pt.trace.json.gz",
    }
    assert {"metrics.json", "log.txt.gz", "spec.json"} <= set(stored)
    client = s3_server.client()
    metrics = json.loads(client.get_object(Bucket=s3_server.bucket, Key=f"{prefix}/metrics.json")["Body"].read())
    assert metrics["step_ms"] > 0 and len(metrics["step_ms_values"]) > 0
    # the last node (n2) ran the last rank, which printed the Primus lines, and stored the rung
    assert metrics["provenance"]["slurm"] == {"job_id": event["job_id"], "nodes": "n[1-2]", "node": "n2", "nnodes": 2}
    log = gzip.decompress(
        client.get_object(Bucket=s3_server.bucket, Key=f"{prefix}/log.txt.gz")["Body"].read()
    ).decode()
    assert "[proxy] rank 1:" in log and "[traceladder] ---- node 0 of 2 ----" in log
    # the multi-rank analysis, given the rung's ranks per node (TraceLens's --gpus_per_node), puts
    # each rank on its node and marks the 2-node process group's collectives inter_node
    import csv

    from traceladder.airflow.ladders import ladder_store
    from traceladder.workflows.ladder_tasks import ranks_per_node
    from traceladder.analysis.stored import analyze_stored_ranks
    from traceladder.core import layout
    from traceladder.core.documents import RungResult

    traces = sorted(f"{prefix}/{k}" for k in stored if k.startswith("traces/"))
    store = ladder_store(ladder)[1]
    result = RungResult.from_dict(metrics, f"{prefix}/metrics.json")
    joined = analyze_stored_ranks(store, prefix, traces, ranks_per_node(result, len(traces)))
    assert joined["world_size"] == 2
    key = f"{layout.ranks_prefix(prefix)}/nccl_long.csv"
    rows = list(csv.DictReader(store.get_verified(key).decode().splitlines()))
    assert rows and {(r["rank"], r["node_id"]) for r in rows} == {("0", "0"), ("1", "1")}
    assert {r["node_span"] for r in rows} == {"inter_node"}
