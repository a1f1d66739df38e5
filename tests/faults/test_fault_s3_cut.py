"""Fault 1: S3 goes away in the middle of a rung's upload (a loopback proxy between the runner and
its SeaweedFS is cut after the first PUT). Within the retry budget the runner finishes; past it,
the artifacts wait in the host's spool and the task's retry uploads them without running the rung
again. Either way everything is in S3 under the same keys, checksum-verified."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from traceladder.runner.rung import run_rung
from traceladder.storage.artifacts import ArtifactStoreError, S3ArtifactStore, rung_prefix, s3_client_from_env

from testkit.tiny_rung import tiny_spec, verified_objects
from testkit.tcp_proxy import CutProxy

pytestmark = pytest.mark.faults
LADDER = "faults-s3"


@pytest.fixture
def proxy(s3_server):
    p = CutProxy(s3_server.s3_port)
    yield p
    p.close()


def _store(s3_server, proxy: CutProxy) -> S3ArtifactStore:
    # few client-side retries: the runner's own backoff is what is under test
    client = s3_client_from_env(
        {**s3_server.env(), "TRACELADDER_S3_ENDPOINT": proxy.url},
        connect_timeout=2,
        read_timeout=10,
        retries={"max_attempts": 1, "mode": "standard"},
    )
    return S3ArtifactStore(client, s3_server.bucket, "traceladder", LADDER)


def test_cut_within_the_retry_budget_finishes(s3_server, proxy: CutProxy, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRACELADDER_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("TRACELADDER_S3_RETRY_BUDGET_S", "60")
    spec = tiny_spec(LADDER)
    proxy.cut_after_puts(1, heal_after_s=3.0)
    echo = io.StringIO()
    result = run_rung(spec, "cut-within", _store(s3_server, proxy), echo=echo)
    assert result["status"] == "ok", result["error"]
    assert proxy.cut_at is not None and proxy.healed_at is not None, "the path was never cut"
    assert "retrying in" in echo.getvalue()
    objects = verified_objects(
        s3_server.client(), s3_server.bucket, rung_prefix("traceladder", LADDER, "cut-within", spec.rung_id)
    )
    assert {"log.txt.gz", "metrics.json", "spec.json", "traces/rank0.pt.trace.json.gz"} <= set(objects)
    assert not any((tmp_path / "spool").rglob("*.gz")), "the spool is emptied after the upload"
    print(
        f"fault 1 (within budget): cut for {proxy.healed_at - proxy.cut_at:.1f} s, "
        f"done {time.monotonic() - proxy.cut_at:.2f} s after the cut"
    )


def test_cut_past_the_budget_spools_and_the_retry_uploads(
    s3_server, proxy: CutProxy, tmp_path: Path, monkeypatch
) -> None:
    spool = tmp_path / "spool"
    monkeypatch.setenv("TRACELADDER_SPOOL_DIR", str(spool))
    monkeypatch.setenv("TRACELADDER_S3_RETRY_BUDGET_S", "2")
    spec = tiny_spec(LADDER)
    prefix = rung_prefix("traceladder", LADDER, "cut-past", spec.rung_id)
    proxy.cut_after_puts(1)
    with pytest.raises(ArtifactStoreError) as err:
        run_rung(spec, "cut-past", _store(s3_server, proxy), echo=None)
    message = str(err.value)
    assert "\n" not in message and str(spool) in message and "task's retry uploads them" in message
    spooled = {p.relative_to(spool / prefix).as_posix() for p in (spool / prefix).rglob("*") if p.is_file()}
    assert {"log.txt.gz", "metrics.json", "spec.json", "manifest.json", "traces/rank0.pt.trace.json.gz"} <= spooled

    # S3 is back; the task's retry: the same call, which must not run the workload again
    proxy.heal()
    monkeypatch.setenv("TRACELADDER_S3_RETRY_BUDGET_S", "60")
    echo = io.StringIO()
    started = time.monotonic()
    result = run_rung(spec, "cut-past", _store(s3_server, proxy), echo=echo)
    recovery_s = time.monotonic() - started
    assert result["status"] == "ok" and "the rung was not run again" in echo.getvalue()
    assert recovery_s < 15, f"the retry took {recovery_s:.1f} s: did it rerun the rung?"
    objects = verified_objects(s3_server.client(), s3_server.bucket, prefix)
    assert set(objects) == spooled - {"manifest.json"}, "the retry writes the same keys"
    assert not (spool / prefix).exists()
    print(f"fault 1 (past budget): retry uploaded {len(objects)} objects in {recovery_s:.2f} s")
