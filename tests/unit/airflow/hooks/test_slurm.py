"""The slurm backend's configuration and its pure parts (issue 27): the ladder/cluster schema,
the one-line refusals, the batch script, `scontrol -o` parsing and the trigger's serialisation."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from traceladder.airflow.hooks.slurm import (
    UPLOAD_GRACE_S,
    SlurmError,
    job_name,
    parse_job,
    parse_job_id,
    sbatch_script,
    time_limit_minutes,
    unusable_nodes,
)
from traceladder.config.loader import CONFIG_DIR, LadderConfigError, load_clusters, load_ladder
from traceladder.config.models import SlurmSettings

CLUSTERS = {
    "schema": 1,
    "clusters": {
        "local": {"backend": "local", "hosts": [{"name": "localhost", "pool": "p-local"}]},
        "hpc": {
            "backend": "slurm",
            "hosts": [{"name": "hpc-login", "pool": "traceladder-hpc", "ssh_conn_id": "slurm_hpc"}],
            "gpus_per_node": 8,
            "slurm": {"partition": "mi350x", "account": "perf", "qos": "high", "reservation": "weekly"},
        },
        "hpc-nossh": {"backend": "slurm", "hosts": [{"name": "x", "pool": "p-x"}], "slurm": {}},
    },
}


def _write(tmp_path: Path, ladder: dict, extends: str = "proxy-local.yaml") -> tuple[Path, Path]:
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(yaml.safe_dump(CLUSTERS))
    doc = {"schema": 1, "extends": str(CONFIG_DIR / "ladders" / extends), **ladder}
    path = tmp_path / "l.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path, clusters


def test_a_slurm_ladder_loads_with_its_nodes(tmp_path: Path) -> None:
    # the seed ladder: this file's Slurm cluster runs Primus (its workload), so its keys are Primus's
    seed = "deepseek-v4-flash-mi350x.yaml"
    path, clusters = _write(tmp_path, {"ladder": "s", "backend": "slurm", "cluster": "hpc", "nnodes": 2}, seed)
    loaded = load_ladder(path, load_clusters(clusters))
    assert loaded.ladder.nnodes == 2 and loaded.cluster.slurm is not None
    assert loaded.cluster.slurm.partition == "mi350x" and loaded.cluster.slurm.container_runtime == "docker"


@pytest.mark.parametrize("backend,cluster", [("local", "local")])
def test_nnodes_on_a_single_node_backend_is_refused_naming_the_field(
    tmp_path: Path, backend: str, cluster: str
) -> None:
    path, clusters = _write(tmp_path, {"ladder": "s", "backend": backend, "cluster": cluster, "nnodes": 2})
    with pytest.raises(LadderConfigError) as err:
        load_ladder(path, load_clusters(clusters))
    line = str(err.value)
    assert "\n" not in line and "nnodes" in line and "backend: slurm" in line and str(path) in line


def test_nnodes_on_docker_is_refused_too(tmp_path: Path) -> None:
    path, clusters = _write(tmp_path, {"ladder": "s", "backend": "docker", "cluster": "local", "nnodes": 3})
    with pytest.raises(LadderConfigError, match="nnodes"):
        load_ladder(path, load_clusters(clusters))


def test_a_slurm_cluster_without_an_ssh_connection_is_refused(tmp_path: Path) -> None:
    path, clusters = _write(tmp_path, {"ladder": "s", "backend": "slurm", "cluster": "hpc-nossh"})
    with pytest.raises(LadderConfigError, match="ssh_conn_id"):
        load_ladder(path, load_clusters(clusters))


def test_an_unknown_container_runtime_names_the_field(tmp_path: Path) -> None:
    bad = {**CLUSTERS, "clusters": {"hpc": {**CLUSTERS["clusters"]["hpc"], "slurm": {"container_runtime": "lxc"}}}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(LadderConfigError, match=r"clusters\.hpc\.slurm\.container_runtime"):
        load_clusters(path)


@pytest.mark.parametrize("timeout_s", [10, 60, 61, 300, 1800, 1801])
def test_time_limit_rounds_up_and_outlasts_the_runner(timeout_s: int) -> None:
    minutes = time_limit_minutes(timeout_s)
    assert minutes == math.ceil((timeout_s + UPLOAD_GRACE_S) / 60) and minutes * 60 >= timeout_s + UPLOAD_GRACE_S


def test_the_batch_script_asks_for_whole_exclusive_nodes() -> None:
    settings = SlurmSettings(
        partition="mi350x", account="perf", qos="high", reservation="weekly", extra_sbatch=["--constraint=gfx950"]
    )
    script = sbatch_script(
        settings,
        name="traceladder-abc",
        nnodes=2,
        timeout_s=1800,
        job_dir="/shared/tl/jobs/traceladder-abc",
        node_argv=["run-rung", "--spec-json", '{"a": "b c"}', "--run-id", "r1"],
        environment={"TRACELADDER_S3_BUCKET": "b"},
        gpus_per_node=8,
        image="registry/traceladder/runner:1",
        secrets_file="/shared/tl/jobs/traceladder-abc/secrets.env",
    )
    sbatch = [line.split(" ", 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]
    assert sbatch[:6] == [
        "--job-name=traceladder-abc",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--exclusive",
        "--no-requeue",
        "--time=32",  # 30 minutes of runner deadline + 2 of upload grace
    ]
    for flag in (
        "--partition=mi350x",
        "--account=perf",
        "--qos=high",
        "--reservation=weekly",
        "--gpus-per-node=8",
        "--constraint=gfx950",
    ):
        assert flag in sbatch
    # the first node's NodeAddr is MASTER_ADDR; every node gets its NODE_RANK from Slurm
    assert "scontrol show node -o" in script and "NodeAddr=" in script and 'NODE_RANK="$SLURM_NODEID"' in script
    assert "docker run --rm" in script and "--network=host" in script and "registry/traceladder/runner:1" in script
    assert "AWS_SECRET_ACCESS_KEY=" not in script and "rm -f /shared/tl/jobs/traceladder-abc/secrets.env" in script


def _one_node_script(settings: SlurmSettings, **fields) -> str:
    """The batch script of a one-node, one-minute `run-rung` job with no image and no GPUs."""
    job = {"name": "n", "nnodes": 1, "timeout_s": 60, "job_dir": "/j", "node_argv": ["run-rung"], "environment": {}}
    return sbatch_script(settings, **{**job, "gpus_per_node": None, "image": None, **fields})


def test_direct_runs_the_runner_command_on_the_node() -> None:
    script = _one_node_script(SlurmSettings(container_runtime="direct", runner_command="/opt/tl/bin/traceladder"))
    assert (
        "exec /opt/tl/bin/traceladder run-rung" in script and "docker" not in script and "--gpus-per-node" not in script
    )


def test_a_container_runtime_needs_an_image() -> None:
    with pytest.raises(SlurmError, match="runner image"):
        _one_node_script(SlurmSettings(container_runtime="podman"))


def test_job_names_are_stable_per_task_instance() -> None:
    a = job_name("d", "r", "t", -1)
    assert a == job_name("d", "r", "t", -1) and a != job_name("d", "r", "t", 0) and a != job_name("d", "r2", "t", -1)
    assert len(a) <= 40 and a.startswith("traceladder-")


def test_the_job_comment_names_its_task_instance_and_round_trips() -> None:
    from traceladder.airflow.hooks.slurm import JobOwner, owner_comment, parse_owner

    owner = JobOwner("traceladder-proxy", "manual__2026-12-02T05:00:00+00:00", "rung_b1/x", 3)
    comment = owner_comment(owner)
    assert " " not in comment and comment.count("/") == 3 and parse_owner(comment) == owner
    script = _one_node_script(
        SlurmSettings(container_runtime="direct", runner_command="traceladder"),
        name="traceladder-abc",
        job_dir="/w/jobs/traceladder-abc",
        owner=owner,
    )
    assert f"#SBATCH --comment={comment}" in script.splitlines()
    # a job someone else submitted (no comment, or another's) is never taken for an orphan of ours
    assert parse_owner("") is None and parse_owner("nightly build") is None and parse_owner("ti=a/b/c") is None


def test_scontrol_lines_parse() -> None:
    line = (
        "JobId=42 JobName=traceladder-x UserId=root(0) JobState=NODE_FAIL Reason=NodeDown Dependency=(null) "
        "ExitCode=0:0 NodeList=n[1-2] BatchHost=n1 NumNodes=2"
    )
    job = parse_job(line)
    assert (job.job_id, job.state, job.nodes, job.reason, job.terminal) == (
        "42",
        "NODE_FAIL",
        "n[1-2]",
        "NodeDown",
        True,
    )
    assert not parse_job("JobId=7 JobState=RUNNING NodeList=n1").terminal
    assert parse_job("JobId=7 JobState=CANCELLED+ NodeList=n1").state == "CANCELLED"
    with pytest.raises(SlurmError):
        parse_job("slurm_load_jobs error: Invalid job id specified")
    assert parse_job_id("17\n") == "17" and parse_job_id("17;cluster") == "17"
    with pytest.raises(SlurmError, match="no job id"):
        parse_job_id("sbatch: error: Batch job submission failed")


def test_drained_and_down_nodes_are_unusable() -> None:
    out = "n1 idle none\nn2 drained maintenance window\nn3 down* Not responding\nn4 mixed none\nn5 allocated none\n"
    assert unusable_nodes(out) == {"n2": "drained (maintenance window)", "n3": "down* (Not responding)"}


def test_the_trigger_serialises_only_ids() -> None:
    from traceladder.airflow.triggers.slurm import TRIGGER_PATH, SlurmJobTrigger

    path, kwargs = SlurmJobTrigger("42", "slurm_hpc", poll_s=5).serialize()
    assert path == TRIGGER_PATH and kwargs == {
        "job_id": "42",
        "ssh_conn_id": "slurm_hpc",
        "poll_s": 5.0,
        "down_grace_s": 600.0,
    }
    again = SlurmJobTrigger(**kwargs)
    assert again.serialize() == (path, kwargs)


def test_the_shipped_proxy_slurm_ladder_plans_two_nodes_of_one_rank() -> None:
    from traceladder.config import find_ladder
    from traceladder.plan.build import build_plan

    loaded = load_ladder(find_ladder("proxy-slurm"))
    assert loaded.ladder.nnodes == 2 and loaded.cluster.slurm is not None
    spec = build_plan(loaded, rungs=["baseline"], lens="none", repeats=1)[0]
    # the nodes run the CPU proxy as the local backend does; the job sets NNODES/NODE_RANK/MASTER_*
    assert spec.backend == "local" and spec.model_args["expert_model_parallel_size"] == 2
    assert spec.docker_env_vars["GPUS_PER_NODE"] == "1"
    assert not {"NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"} & set(spec.docker_env_vars)


def test_make_up_passes_the_login_nodes_connection_but_not_the_s3_one() -> None:
    from traceladder.embedded.up import passed_env

    env = {
        "AIRFLOW_CONN_TRACELADDER_SLURM": '{"conn_type": "ssh"}',
        "AIRFLOW_CONN_TRACELADDER_S3": "theirs",
        "TRACELADDER_CLUSTERS_FILE": "/site/clusters.yaml",
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "HOME": "/root",
    }
    assert passed_env(env) == {
        "AIRFLOW_CONN_TRACELADDER_SLURM": '{"conn_type": "ssh"}',
        "TRACELADDER_CLUSTERS_FILE": "/site/clusters.yaml",
    }
