"""The compose file's scale-out (profile `celery`): Redis, a default-queue worker, and one worker
per worker host of clusters.yaml listening on that host's queue, with CeleryExecutor everywhere
when AIRFLOW_EXECUTOR says so and LocalExecutor otherwise. Checked with docker-compose's own
merge (`config`), not by reading the YAML ourselves."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from traceladder.core.env_vars import COMPOSE_SECRETS
import yaml

from testkit.needs import unavailable
from traceladder.config.loader import load_clusters

pytestmark = pytest.mark.docker

COMPOSE = Path(__file__).resolve().parents[2] / "docker" / "airflow" / "docker-compose.yaml"
SECRETS_FILE = COMPOSE.with_name("docker-compose.secrets.yaml")
# every Airflow command starts through the entrypoint that builds the settings from the secrets
ENTRYPOINT = ["python", "-m", "traceladder.cli.compose_env"]
SECRETS = COMPOSE_SECRETS


def _config(executor: str | None, secrets_dir: Path | None = None) -> dict:
    """The merged services; with ``secrets_dir``, the secrets from its files only (the override)."""
    if not shutil.which("docker-compose"):
        unavailable("docker-compose (apt-get install -y docker-compose)")
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW_EXECUTOR" and k not in SECRETS}
    files = ["-f", str(COMPOSE)]
    if secrets_dir is None:
        env |= {k: "test-value" for k in SECRETS}
    else:
        env["TRACELADDER_SECRETS_DIR"] = str(secrets_dir)
        files += ["-f", str(SECRETS_FILE)]
    if executor:
        env["AIRFLOW_EXECUTOR"] = executor
    out = subprocess.run(
        ["docker-compose", *files, "--profile", "celery", "config"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)["services"]


def test_celery_profile_has_a_worker_per_host_queue() -> None:
    services = _config("CeleryExecutor")
    queues = {}
    for name, svc in services.items():
        command = svc.get("command") or []
        if command[: len(ENTRYPOINT)] == ENTRYPOINT:
            command = command[len(ENTRYPOINT) :]
        if command[:3] == ["airflow", "celery", "worker"]:
            queues[command[command.index("--queues") + 1]] = name
            assert svc["environment"]["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://redis:")
    hosts = {h.name for c in load_clusters().clusters.values() if c.backend == "docker" for h in c.hosts}
    assert hosts and hosts | {"default"} == set(queues), queues
    airflow_services = [s for s in services.values() if "AIRFLOW__CORE__EXECUTOR" in s.get("environment", {})]
    assert {s["environment"]["AIRFLOW__CORE__EXECUTOR"] for s in airflow_services} == {"CeleryExecutor"}
    assert services["redis"]["profiles"] == ["celery"]


def test_local_executor_stays_the_default() -> None:
    services = _config(None)
    assert services["scheduler"]["environment"]["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"


def test_the_secrets_override_mounts_each_secret_file_where_its_file_variable_points(tmp_path: Path) -> None:
    """docker-compose.secrets.yaml: every service that needs a secret gets its file under
    /run/secrets/ and NAME_FILE naming it; the variable itself stays empty (no value in the
    configuration), and every Airflow service starts through the entrypoint that reads them."""
    for name in SECRETS:
        (tmp_path / name.lower()).write_text("from-a-file\n")
    services = _config("CeleryExecutor", tmp_path)
    needs = {"postgres": ["POSTGRES_PASSWORD"], "s3": ["S3_ACCESS_KEY", "S3_SECRET_KEY"]}
    needs["s3-init"] = needs["s3"]
    airflow = [n for n, s in services.items() if (s.get("command") or [])[: len(ENTRYPOINT)] == ENTRYPOINT]
    assert {"airflow-init", "api-server", "scheduler", "dag-processor", "triggerer", "worker-default"} <= set(airflow)
    needs |= {name: list(SECRETS) for name in airflow}
    for service, names in needs.items():
        svc = services[service]
        mounted = {s["source"] for s in svc.get("secrets") or []}
        env = svc["environment"]
        for name in names:
            assert env[f"{name}_FILE"] == f"/run/secrets/{name.lower()}", (service, name)
            assert name.lower() in mounted and not env.get(name), (service, name)
    assert "from-a-file" not in json.dumps(services)


def test_user_defined_network_resolves_service_names(docker_engine, standin_images) -> None:
    """The test Docker Engine runs with --bridge=none --iptables=false; compose's service-name
    networking still needs a user-defined network with DNS: one container reaches another by name."""
    import secrets

    from tests.integration.conftest import docker_cli

    net, server = f"tl-net-{secrets.token_hex(3)}", f"tl-srv-{secrets.token_hex(3)}"
    docker_cli("network", "create", net)
    try:
        docker_cli(
            "run",
            "-d",
            "--rm",
            "--name",
            server,
            "--network",
            net,
            standin_images.base,
            "python3",
            "-m",
            "http.server",
            "8000",
        )
        # patient: on a busy CI machine the server container and the network's DNS can take seconds
        probe = (
            "import time, urllib.request\n"
            "for _ in range(150):\n"
            "    try:\n"
            f"        print(urllib.request.urlopen('http://{server}:8000/', timeout=2).status); break\n"
            "    except OSError: time.sleep(0.2)\n"
        )
        out = docker_cli("run", "--rm", "--network", net, standin_images.base, "python3", "-c", probe, check=False)
        assert out.stdout.strip() == "200", out.stderr
    finally:
        docker_cli("rm", "-f", server, check=False)
        docker_cli("network", "rm", net, check=False)
