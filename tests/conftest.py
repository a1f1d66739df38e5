"""Shared pytest fixtures for traceladder's tests.

Keep this file to fixtures used by more than one test module; one section per concern.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Mapping

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


# ---- reference traces: real traces with TraceLens's outputs (tracelens-v1.0.0/, derived/), read-only.
# They live beside the repository (../shared/reference) and are never copied into it;
# TRACELADDER_REFERENCE_DIR points elsewhere. Modules that parametrize over the traces at collection
# import REFERENCE_DIR; tests take the `reference_dir` fixture.
def reference_dir_from(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("TRACELADDER_REFERENCE_DIR") or REPO_ROOT.parent / "shared" / "reference")


REFERENCE_DIR = reference_dir_from(os.environ)


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """The reference directory; a missing one fails (the tests that need it are not optional)."""
    if not REFERENCE_DIR.is_dir():
        pytest.fail(f"reference traces not found at {REFERENCE_DIR} (set TRACELADDER_REFERENCE_DIR)")
    return REFERENCE_DIR


# ---- airflow: its settings are read at import, so they are set before collection imports any test
# module (pytest_configure), in a folder removed when the session ends (pytest_unconfigure).
AIRFLOW_HOME = Path()


def pytest_configure(config: pytest.Config) -> None:
    global AIRFLOW_HOME
    AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="traceladder-test-airflow-"))
    os.environ.update(
        {
            "AIRFLOW_HOME": str(AIRFLOW_HOME),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        }
    )


#: fixtures that start a real service: a test that takes one, directly or through another fixture,
#: is marked `service`, and `make test-fast` leaves it out
SERVICE_FIXTURES = frozenset({"s3_server", "airflow_home", "docker_engine", "standin_images", "slurm_cluster"})
#: fixtures that run whole proxy workloads (tens of seconds): their tests are marked `slow`, and
#: `make test-fast` leaves them out too
SLOW_FIXTURES = frozenset({"proxy_runs"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        taken = set(getattr(item, "fixturenames", ()))
        if SERVICE_FIXTURES & taken:
            item.add_marker(pytest.mark.service)
        if SLOW_FIXTURES & taken:
            item.add_marker(pytest.mark.slow)


def pytest_unconfigure(config: pytest.Config) -> None:
    if AIRFLOW_HOME != Path():
        shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_home(s3_server) -> Path:
    """A migrated Airflow database with the pools from clusters.yaml, and the S3 connection
    (from the environment, as a deployment would set it) pointing at the session's S3 server."""
    from traceladder.embedded.local_airflow import airflow_env, prepare

    env = airflow_env(AIRFLOW_HOME, s3_server.env(), s3_server.airflow_conn_uri_json())
    os.environ.update(env)
    prepare(AIRFLOW_HOME, env)
    return AIRFLOW_HOME


# ---- object storage ----------------------------------------------------------------------------
@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    """One real SeaweedFS S3 server (``EmbeddedS3``) for the whole test session.

    It listens on free loopback ports, refuses anonymous requests and has the bucket
    ``traceladder``. Use ``s3_server.env()`` / ``s3_server.airflow_conn_uri_json()`` for clients;
    tests that share it should write under their own ladder name.
    """
    from traceladder.embedded.embedded_s3 import EmbeddedS3

    server = EmbeddedS3(tmp_path_factory.mktemp("s3"), bucket="traceladder")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_client(s3_server):
    """A boto3 S3 client with the session server's credentials (path-style, few retries)."""
    return s3_server.client()


# Each reference trace analysed once per session, for every conformance test that reads it. It lives
# here, not in tests/unit/conftest.py: a third module named `conftest` would shadow
# tests/integration/conftest.py for the tests that import helpers from it.
@pytest.fixture(scope="session")
def produced(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Path]:
    from traceladder.analysis.analyzers.trace import analyze_trace

    cache: dict[Path, Path] = {}

    def get(trace: Path) -> Path:
        if trace not in cache:
            out = tmp_path_factory.mktemp(trace.name.replace(".", "_"))
            analyze_trace(trace, out)
            cache[trace] = out
        return cache[trace]

    return get
