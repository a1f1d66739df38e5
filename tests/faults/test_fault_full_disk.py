"""Fault 4: the rung's workspace is on a disk that fills up (a 64 KiB tmpfs). The rung fails with
one line naming the disk; the log written until then is uploaded and kept, checksum-verified."""

from __future__ import annotations

import gzip
import os
import subprocess
from pathlib import Path

import pytest

from traceladder.runner.rung import run_rung
from traceladder.storage.artifacts import S3ArtifactStore, rung_prefix

from testkit.needs import unavailable
from testkit.tiny_rung import tiny_spec, verified_objects

pytestmark = pytest.mark.faults
LADDER = "faults-disk"


@pytest.fixture
def small_disk(tmp_path: Path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        unavailable("mounting a tmpfs needs root")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        unavailable(f"mount -t tmpfs failed: {proc.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_fails_the_rung_naming_the_disk_and_keeps_the_log(
    s3_server, small_disk: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("TRACELADDER_SPOOL_DIR", str(tmp_path / "spool"))  # the host's disk, not the full one
    spec = tiny_spec(LADDER)
    store = S3ArtifactStore(s3_server.client(), s3_server.bucket, "traceladder", LADDER)
    result = run_rung(spec, "full-disk", store, workdir=small_disk, echo=None)
    assert result["status"] == "failed", result
    error = result["error"]
    assert "\n" not in error and error.startswith(f"disk full: {small_disk}"), error
    prefix = rung_prefix("traceladder", LADDER, "full-disk", spec.rung_id)
    objects = verified_objects(s3_server.client(), s3_server.bucket, prefix)
    assert {"log.txt.gz", "metrics.json", "spec.json"} <= set(objects)
    log = gzip.decompress(
        s3_server.client().get_object(Bucket=s3_server.bucket, Key=f"{prefix}/log.txt.gz")["Body"].read()
    )
    assert log, "the log written before the disk filled is kept"
    print(f"fault 4: {error} ({len(log)} bytes of log kept)")
