"""Fault 1 on the docker backend (issue 19): S3 goes away in the middle of a docker rung's upload.

The runner runs inside the rung's container, which is removed when the rung ends, so its spool
must be on the host: ``RungDockerOperator`` bind-mounts the worker's ``TRACELADDER_SPOOL_DIR``
into the container at the same path. A loopback proxy between the container (host network) and
SeaweedFS is cut after the first PUT and stays cut past the retry budget: the task fails with the
runner's one line, the container is gone, and the rung's sealed artifacts wait in the host's
folder. S3 comes back; the task's retry (a new container) uploads them, same keys, checksums
verified, without running the rung again."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.integration.conftest import STANDIN_DEVICES, STANDIN_GPUS, docker_cli  # tests/integration/conftest.py
from testkit.tiny_rung import verified_objects
from testkit.tcp_proxy import CutProxy
from tests.integration.test_docker_images import NOFILE, _rung_operator, _TI

pytestmark = [pytest.mark.docker, pytest.mark.faults]

LADDER, HOST, RUN = "docker-spool", "retry-host", "spool-check"  # _rung_operator names the host retry-host


@pytest.fixture
def proxy(s3_server):
    p = CutProxy(s3_server.s3_port)
    yield p
    p.close()


@pytest.fixture
def spool_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, airflow_home, s3_server, standin_images, proxy):
    """One unprofiled rung of a docker ladder on this machine's daemon, whose containers reach S3
    through ``proxy`` (clusters + ladders in tmp)."""
    from traceladder.config import find_ladder, load_ladder
    from traceladder.config.loader import CONFIG_DIR
    from traceladder.plan.build import build_plan

    storage = {"conn_id": "traceladder_s3", "bucket": s3_server.bucket, "prefix": "traceladder"}
    host = {"name": HOST, "pool": f"traceladder-{HOST}", "docker_url": "unix:///var/run/docker.sock"}
    clusters = {
        "schema": 1,
        "clusters": {
            "spool": {
                "backend": "docker",
                "runner_image": standin_images.runner,
                "storage": {**storage, "worker_endpoint_url": proxy.url},
                "gpus_per_node": STANDIN_GPUS,
                "hosts": [{**host, "devices": STANDIN_DEVICES}],
            }
        },
    }
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump(clusters))
    (tmp_path / "ladders").mkdir()
    seed = CONFIG_DIR / "ladders" / "deepseek-v4-flash-mi350x.yaml"
    ladder = {"schema": 1, "extends": str(seed), "ladder": LADDER, "cluster": "spool", "repeats": 1}
    ladder.update(timeout_s=60, rungs=[{"name": "baseline"}], lenses=None)
    (tmp_path / "ladders" / f"{LADDER}.yaml").write_text(yaml.safe_dump(ladder))
    monkeypatch.setenv("TRACELADDER_CLUSTERS_FILE", str(tmp_path / "clusters.yaml"))
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(tmp_path / "ladders"))
    monkeypatch.setenv("TRACELADDER_CONTAINER_NOFILE", str(NOFILE))
    (spec,) = build_plan(load_ladder(find_ladder(LADDER)))
    return json.loads(spec.to_json())


def _spooled(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file()
    }


def test_docker_rung_spools_on_the_host_and_the_retry_uploads(
    spool_spec: dict, proxy: CutProxy, s3_server, docker_engine, tmp_path: Path, monkeypatch
) -> None:
    from airflow.sdk.exceptions import AirflowException

    spool = tmp_path / "host-spool"  # the worker's folder, on this (the daemon's) host
    monkeypatch.setenv("TRACELADDER_SPOOL_DIR", str(spool))
    monkeypatch.setenv("TRACELADDER_S3_RETRY_BUDGET_S", "2")
    prefix = f"traceladder/{LADDER}/{RUN}/{spool_spec['rung_id']}"
    context = {"dag": SimpleNamespace(dag_id="spool-dag"), "ti": _TI()}

    proxy.cut_after_puts(1)
    started = time.monotonic()
    with pytest.raises(AirflowException) as err:
        _rung_operator(spool_spec, docker_engine.unix_url, run_id=RUN).execute(context)
    first_s = time.monotonic() - started
    message = str(err.value)
    assert proxy.cut_at is not None, "the path was never cut"
    assert str(spool / prefix) in message and "task's retry uploads them" in message, message
    # the container is gone; what it made is on the host, sealed
    left = docker_cli("ps", "-a", "--filter", f"label=traceladder.run={RUN}", "--format", "{{.Names}}")
    assert left.stdout.split() == []
    assert (spool / f"{prefix}.complete").is_file()
    spooled = _spooled(spool / prefix)
    assert {"log.txt.gz", "metrics.json", "spec.json", "manifest.json"} <= set(spooled), spooled
    assert json.loads((spool / prefix / "metrics.json").read_text())["status"] == "ok"

    # S3 is back; the task's retry is a new container that finds the spool and only uploads it
    proxy.heal()
    monkeypatch.setenv("TRACELADDER_S3_RETRY_BUDGET_S", "60")
    started = time.monotonic()
    result = _rung_operator(spool_spec, docker_engine.unix_url, run_id=RUN).execute(context)
    recovery_s = time.monotonic() - started
    assert result["status"] == "ok", result
    objects = verified_objects(s3_server.client(), s3_server.bucket, prefix)
    assert set(objects) == set(spooled) - {"manifest.json"}, "the retry writes the same keys"
    assert all(objects[k] == spooled[k] for k in objects), "an object differs from the spooled one: rerun?"
    assert not (spool / prefix).exists() and not (spool / f"{prefix}.complete").exists()
    print(f"docker spool: first try {first_s:.1f} s (cut), retry uploaded {len(objects)} objects in {recovery_s:.1f} s")
