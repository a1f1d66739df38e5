"""The embedded S3 server (embedded/embedded_s3.py), a real SeaweedFS: a fast stop that keeps the
data, a restart on the same folder, the `s3-server` command, and one-line errors for a server that
exits early, never answers or finds its port taken."""

from __future__ import annotations

import gzip
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from botocore.exceptions import BotoCoreError

from tests.conftest import REPO_ROOT
from tests.unit.storage import test_artifacts as artifacts_tests
from tests.unit.storage.test_artifacts import RUN_ID, _assert_one_line, _write_rung
from traceladder.embedded.embedded_s3 import EmbeddedS3, EmbeddedS3Error, free_ports
from traceladder.storage.artifacts import ArtifactStoreError, S3ArtifactStore, s3_client_from_env

INCLUDE = REPO_ROOT / "include"
trace_file = artifacts_tests.trace_file  # the artifact tests' 12 MB trace-like file, a fixture here too


@pytest.mark.service  # starts SeaweedFS itself
def test_embedded_s3_stops_fast_keeps_data_and_restarts(tmp_path, trace_file):
    server = EmbeddedS3(tmp_path / "s3", bucket="restart-test")
    server.start()
    try:
        assert server.start_seconds is not None and server.start_seconds < 30
        assert set(server.ports) >= {"volume.port", "master.port.grpc", "filer.port.grpc", "s3.port.grpc"}
        assert 8080 not in server.ports.values()
        store = S3ArtifactStore(server.client(), server.bucket, "traceladder", "proxy-local")
        rp = store.rung_prefix(RUN_ID, "baseline.none.r0")
        _write_rung(store, rp, trace_file)
        store.write_manifest(rp)
        endpoint = server.endpoint_url
        secret = server.secret_key
        old_ports = dict(server.ports)
    finally:
        server.stop()
    assert server.stop_seconds is not None and server.stop_seconds < 5
    assert not server.running()
    for port in old_ports.values():
        assert not list(Path("/tmp").glob(f"seaweedfs-*-{port}.sock"))

    # the stopped endpoint: one line naming it, nothing deleted (checked after the restart)
    with pytest.raises(ArtifactStoreError) as ei:
        store.put_bytes(f"{rp}/late.txt", b"x")
    _assert_one_line(ei.value, endpoint, "restart-test", f"{rp}/late.txt")

    assert secret not in (tmp_path / "s3" / "weed.log").read_text(errors="replace")
    ident = tmp_path / "s3" / "s3_identities.json"
    assert stat.S_IMODE(ident.stat().st_mode) == 0o600

    again = EmbeddedS3(tmp_path / "s3", bucket="restart-test")
    with again:
        assert again.secret_key == secret  # the key pair survives a restart on the same folder
        store2 = S3ArtifactStore(again.client(), again.bucket, "traceladder", "proxy-local")
        for key in store.written():
            assert store2.get_verified(key) == store2.get_bytes(key)
        assert gzip.decompress(store2.get_bytes(f"{rp}/traces/rank0.pytorch.json.gz")) == trace_file.read_bytes()
        assert not store2.exists(f"{rp}/late.txt")
        store2.put_bytes(f"{rp}/after-restart.txt", b"ok")
        assert store2.get_bytes(f"{rp}/after-restart.txt") == b"ok"


@pytest.mark.service  # starts SeaweedFS itself
def test_s3_server_cli(tmp_path):
    (port,) = free_ports(1)
    d = tmp_path / "cli"
    env = dict(os.environ, PYTHONPATH=str(INCLUDE))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from traceladder.cli.main import main; sys.exit(main(['s3-server', *sys.argv[1:]]))",
            "--dir",
            str(d),
            "--bucket",
            "cli-bucket",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}" in line and "cli-bucket" in line, (
            line,
            proc.stderr.read() if proc.poll() is not None else "",
        )
        creds_path = d / "credentials.env"
        assert str(creds_path) in line and "AWS_SECRET_ACCESS_KEY" in line
        assert stat.S_IMODE(creds_path.stat().st_mode) == 0o600
        values = dict(ln.split("=", 1) for ln in creds_path.read_text().splitlines() if ln and not ln.startswith("#"))
        values = {k: v.strip("'") for k, v in values.items()}
        assert values["AWS_SECRET_ACCESS_KEY"] not in line
        assert values["TRACELADDER_S3_ENDPOINT"] == f"http://127.0.0.1:{port}"
        assert (
            json.loads(values["AIRFLOW_CONN_TRACELADDER_S3"])["extra"]["endpoint_url"]
            == values["TRACELADDER_S3_ENDPOINT"]
        )
        client = s3_client_from_env(values)
        client.put_object(Bucket="cli-bucket", Key="k", Body=b"v")
        assert client.get_object(Bucket="cli-bucket", Key="k")["Body"].read() == b"v"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=20)
        assert rc == 0 and time.monotonic() - t0 < 10
        assert "stopped" in proc.stdout.read()
        with pytest.raises(BotoCoreError):
            s3_client_from_env(values, retries={"max_attempts": 1}).list_buckets()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _fake_weed(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-weed"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_embedded_s3_that_exits_early_names_the_log(tmp_path):
    weed = _fake_weed(tmp_path, 'echo "F1129 master.go:1 something broke" >&2; exit 3')
    server = EmbeddedS3(tmp_path / "s3", weed_binary=weed)
    with pytest.raises(EmbeddedS3Error) as ei:
        server.start()
    _assert_one_line(ei.value, "exited with code 3", str(tmp_path / "s3" / "weed.log"), "something broke")
    assert not server.running()


def test_embedded_s3_that_never_answers_names_port_and_log(tmp_path):
    weed = _fake_weed(tmp_path, "exec sleep 60")
    server = EmbeddedS3(tmp_path / "s3", weed_binary=weed, startup_timeout_s=1.5)
    t0 = time.monotonic()
    with pytest.raises(EmbeddedS3Error) as ei:
        server.start()
    assert time.monotonic() - t0 < 15
    port = server.ports["s3.port"]
    _assert_one_line(ei.value, f"port {port}", "did not answer", str(tmp_path / "s3" / "weed.log"))
    assert not server.running()


def test_embedded_s3_refuses_a_busy_fixed_port(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(EmbeddedS3Error, match=f"127.0.0.1:{port} is already in use"):
            EmbeddedS3(tmp_path / "s3", s3_port=port).start()
