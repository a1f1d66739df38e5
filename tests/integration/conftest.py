"""Fixtures for the Docker Engine tests: one dockerd (unix socket + TLS on TCP) and the stand-in
images, built once per session and cached by a hash of their inputs (docker/images.py).

In CI (CI=true) a missing or unstartable Docker Engine FAILS the docker tests. Outside CI the
fixture starts dockerd itself (docker/dockerd/start.sh, needs root and Debian's docker.io) and
skips, with the reason, only when it cannot."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from testkit.needs import unavailable

REPO = Path(__file__).resolve().parents[2]
START_DOCKERD = REPO / "docker" / "dockerd" / "start.sh"
IMAGES = REPO / "docker" / "images.py"


def _unavailable(reason: str):
    unavailable(f"Docker Engine: {reason}")


@dataclass(frozen=True)
class DockerEngine:
    unix_url: str
    tls_url: str | None
    tls_dir: Path | None

    def tls_files(self) -> dict[str, Path]:
        assert self.tls_dir is not None
        return {
            "ca_cert": self.tls_dir / "ca.pem",
            "client_cert": self.tls_dir / "cert.pem",
            "client_key": self.tls_dir / "key.pem",
        }


@pytest.fixture(scope="session")
def docker_engine() -> DockerEngine:
    if not shutil.which("docker"):
        _unavailable("no docker client on PATH")
    if not shutil.which("dockerd") and subprocess.run(["docker", "version"], capture_output=True).returncode != 0:
        _unavailable("no dockerd (apt-get install -y docker.io) and no daemon answering")
    proc = subprocess.run(["bash", str(START_DOCKERD)], capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        _unavailable(f"docker/dockerd/start.sh failed: {proc.stderr.strip().splitlines()[-1:]}")
    env = {}
    for line in proc.stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export ") :].split("=", 1)
            env[key] = value
    os.environ["DOCKER_HOST"] = env["DOCKER_HOST"]
    tls_dir = Path(env["TRACELADDER_DOCKER_TLS_DIR"]) if env.get("TRACELADDER_DOCKER_TLS_DIR") else None
    return DockerEngine(env["DOCKER_HOST"], env.get("TRACELADDER_DOCKER_TLS_URL"), tls_dir)


@dataclass(frozen=True)
class StandinImages:
    base: str
    primus: str
    runner: str  # with the stand-in rocm_trace_lite wheel installed
    runner_no_rtl: str  # the same runner without any extra wheel
    tracelens: str  # docker/tracelens's scripts with a stand-in TraceLens CLI


@pytest.fixture(scope="session")
def standin_images(docker_engine: DockerEngine) -> StandinImages:
    """The stand-in base (debootstrap'd Debian + python3 + boto3), the stand-in Primus image and
    docker/runner built on it through BASE_IMAGE, with and without the stand-in rtl wheel."""
    proc = subprocess.run([sys.executable, str(IMAGES), "standin"], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"building the stand-in images failed: {proc.stderr[-2000:]}", pytrace=False)
    tags = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    return StandinImages(
        tags["STANDIN_BASE"],
        tags["STANDIN_PRIMUS"],
        tags["RUNNER_IMAGE"],
        tags["RUNNER_IMAGE_NO_RTL"],
        tags["STANDIN_TRACELENS"],
    )


def docker_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


# The docker test clusters' gpus_per_node and devices: the stand-in amd-smi counts the mapped
# render nodes, and /dev/null stands in for /dev/kfd and each render node.
STANDIN_GPUS = 2
STANDIN_DEVICES = ["/dev/null:/dev/kfd", "/dev/null:/dev/dri/renderD128", "/dev/null:/dev/dri/renderD136"]


def standin_docker_cluster(
    runner_image: str, s3_server: Any, hosts: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    """One `backend: docker` cluster of clusters.yaml whose rungs store to the test's S3 server."""
    storage = {
        "conn_id": "traceladder_s3",
        "bucket": s3_server.bucket,
        "prefix": "traceladder",
        "worker_endpoint_url": s3_server.endpoint_url,
    }
    return {
        "backend": "docker",
        "runner_image": runner_image,
        "storage": storage,
        "gpus_per_node": STANDIN_GPUS,
        **extra,
        "hosts": [{"devices": STANDIN_DEVICES, **h} for h in hosts],
    }


# ---- registry: Debian's docker-registry on loopback (tests/integration/registry_server.py), no auth
@pytest.fixture(scope="session")
def open_registry(tmp_path_factory: pytest.TempPathFactory):
    """One registry for the session's triage tests, each under its own repository; storage in a
    temp folder, stopped at the end."""
    from tests.integration.registry_server import start_registry

    work = tmp_path_factory.mktemp("registry")
    registry = start_registry(work / "open", work / "storage")
    yield registry
    registry.stop()


# ---- slurm: one throwaway cluster per session (tests/integration/slurm_cluster.py), stopped at the end.
@pytest.fixture(scope="session")
def slurm_cluster():
    from tests.integration.slurm_cluster import ClusterError, missing_binaries, start_cluster

    missing = missing_binaries()
    if missing:
        unavailable(
            f"Slurm test cluster: missing {', '.join(missing)} (apt-get install -y slurm-wlm munge openssh-server)"
        )
    if os.geteuid() != 0:
        unavailable("Slurm test cluster: slurmd and munged run as root here")
    try:
        cluster = start_cluster()
    except ClusterError as exc:
        unavailable(f"Slurm test cluster did not start: {exc}")
    yield cluster
    cluster.stop()
