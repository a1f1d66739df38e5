"""The artifact store (storage/artifacts.py), against a real SeaweedFS; the server itself is
tests/unit/embedded/test_embedded_s3.py."""

from __future__ import annotations

import gzip
import hashlib
import json
import time
import uuid
from pathlib import Path

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from traceladder.storage.artifacts import (
    ArtifactIntegrityError,
    ArtifactKeyError,
    ArtifactNotFoundError,
    ArtifactStoreError,
    DirArtifactSink,
    S3ArtifactStore,
    rung_prefix,
    s3_client_from_env,
    safe_key_part,
)
from traceladder.embedded.embedded_s3 import free_ports

RUN_ID = "manual__2026-11-29T10:00:00+00:00"


def _ladder() -> str:
    """A ladder name of its own per test, so tests sharing the session server never collide."""
    return f"lad-{uuid.uuid4().hex[:10]}"


def _store(s3_server, client=None, ladder=None) -> S3ArtifactStore:
    return S3ArtifactStore(client or s3_server.client(), s3_server.bucket, "traceladder", ladder or _ladder())


def _all_keys(client, bucket: str) -> list[str]:
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return sorted(keys)


def _assert_one_line(exc: BaseException, *must_contain: str) -> None:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text, text
    for part in must_contain:
        assert part in text, f"{part!r} not in {text!r}"


def _write_rung(sink, rp: str, trace: Path) -> None:
    sink.put_bytes(f"{rp}/log.txt.gz", gzip.compress(b"iteration 1/10 | elapsed\n", mtime=0))
    sink.put_json(f"{rp}/metrics.json", {"step_ms": 239.8, "tokens_per_sec_per_gpu": 17079})
    sink.put_file(f"{rp}/traces/rank0.pytorch.json.gz", trace, gzip=True)
    sink.put_file(f"{rp}/traces/rank1.raw.json", trace)


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory) -> Path:
    """A 12 MB trace-like JSON file (bigger than boto3's 8 MB multipart threshold)."""
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    with open(path, "wb") as f:
        f.write(b'{"traceEvents": [\n')
        for i in range(240_000):
            f.write(b'{"ph":"X","cat":"kernel","name":"k%d","ts":%d,"dur":%d},\n' % (i % 911, i * 7, i % 13))
        f.write(b"{}]}\n")
    assert path.stat().st_size > 9 * 1024 * 1024
    return path


# ---- keys --------------------------------------------------------------------------------------
def test_safe_key_part_and_rung_prefix():
    assert safe_key_part(RUN_ID) == "manual__2026-11-29T10-00-00-00-00"
    assert safe_key_part("fusions.none.r0") == "fusions.none.r0"
    assert safe_key_part("a b/c\\d%2e") == "a-b-c-d-2e"
    assert safe_key_part("..") == "--" and safe_key_part(".") == "-"
    with pytest.raises(ArtifactKeyError):
        safe_key_part("")
    assert (
        rung_prefix("traceladder", "proxy-local", "manual__2026-11-29T10-00-00", "fusions.none.r0")
        == "traceladder/proxy-local/manual__2026-11-29T10-00-00/fusions.none.r0"
    )
    assert rung_prefix("/team/traceladder/", "x:y", RUN_ID, "r/0") == (
        "team/traceladder/x-y/manual__2026-11-29T10-00-00-00-00/r-0"
    )


# ---- S3 store ----------------------------------------------------------------------------------
def test_put_get_list_exists_and_layout(s3_server, s3_client, trace_file):
    ladder = _ladder()
    store = _store(s3_server, s3_client, ladder)
    rp = store.rung_prefix(RUN_ID, "fusions.none.r0")
    assert rp == f"traceladder/{ladder}/manual__2026-11-29T10-00-00-00-00/fusions.none.r0"
    assert rp == rung_prefix("traceladder", ladder, RUN_ID, "fusions.none.r0")
    _write_rung(store, rp, trace_file)

    assert store.list(rp) == [
        f"{rp}/log.txt.gz",
        f"{rp}/metrics.json",
        f"{rp}/traces/rank0.pytorch.json.gz",
        f"{rp}/traces/rank1.raw.json",
    ]
    assert store.list(rp + "/traces/") == [f"{rp}/traces/rank0.pytorch.json.gz", f"{rp}/traces/rank1.raw.json"]
    assert store.exists(f"{rp}/metrics.json") and not store.exists(f"{rp}/nothing.json")
    assert json.loads(store.get_bytes(f"{rp}/metrics.json"))["step_ms"] == 239.8
    raw = trace_file.read_bytes()
    assert gzip.decompress(store.get_bytes(f"{rp}/traces/rank0.pytorch.json.gz")) == raw
    assert store.get_bytes(f"{rp}/traces/rank1.raw.json") == raw
    head = s3_client.head_object(Bucket=s3_server.bucket, Key=f"{rp}/traces/rank0.pytorch.json.gz")
    assert head["ContentType"] == "application/gzip"
    # sizes and hashes were tracked while writing, and match what S3 holds
    for key, (size, sha) in store.written().items():
        body = s3_client.get_object(Bucket=s3_server.bucket, Key=key)["Body"].read()
        assert (len(body), hashlib.sha256(body).hexdigest()) == (size, sha)
    with pytest.raises(ArtifactNotFoundError) as ei:
        store.get_bytes(f"{rp}/missing.txt")
    _assert_one_line(ei.value, f"{rp}/missing.txt", s3_server.endpoint_url)


def test_manifest_is_verified_on_read(s3_server, s3_client, trace_file):
    store = _store(s3_server, s3_client)
    rp = store.rung_prefix(RUN_ID, "baseline.none.r0")
    other = store.rung_prefix(RUN_ID, "other.none.r0")
    _write_rung(store, rp, trace_file)
    store.put_bytes(f"{other}/log.txt.gz", b"not in rp's manifest")
    mkey = store.write_manifest(rp)
    assert mkey == f"{rp}/manifest.json"
    manifest = json.loads(store.get_bytes(mkey))
    assert manifest["schema"] == 1
    keys = [o["key"] for o in manifest["objects"]]
    assert keys == sorted(keys) and len(keys) == 4 and all(k.startswith(rp + "/") for k in keys)
    assert set(manifest["objects"][0]) == {"key", "size", "sha256"}

    for key in keys:  # nested (traces/) objects find the manifest of their rung folder
        assert store.get_verified(key) == store.get_bytes(key)
        buffer = store.get_verified_buffer(key)  # the analysis task's read: one writable buffer
        assert isinstance(buffer, bytearray) and buffer == store.get_bytes(key)

    victim = f"{rp}/metrics.json"
    good = store.get_bytes(victim)
    same_size = good.replace(b"239.8", b"999.9")
    assert len(same_size) == len(good) and same_size != good
    s3_client.put_object(Bucket=s3_server.bucket, Key=victim, Body=same_size)
    for read in (store.get_verified, store.get_verified_buffer):
        with pytest.raises(ArtifactIntegrityError) as ei:
            read(victim)
        _assert_one_line(ei.value, victim, "sha256")
    s3_client.put_object(Bucket=s3_server.bucket, Key=victim, Body=good + b" ")
    for read in (store.get_verified, store.get_verified_buffer):
        with pytest.raises(ArtifactIntegrityError) as ei:
            read(victim)
        _assert_one_line(ei.value, victim, "size")

    # an object the manifest does not list, and a rung without a manifest
    stray = f"{rp}/stray.txt"
    s3_client.put_object(Bucket=s3_server.bucket, Key=stray, Body=b"x")
    with pytest.raises(ArtifactIntegrityError, match="not listed"):
        store.get_verified(stray)
    with pytest.raises(ArtifactIntegrityError, match="no manifest.json"):
        store.get_verified(f"{other}/log.txt.gz")


def test_rerun_overwrites_and_yields_identical_manifest(s3_server, trace_file, tmp_path):
    ladder = _ladder()
    first = _store(s3_server, ladder=ladder)
    rp = first.rung_prefix(RUN_ID, "megamoe.none.r0")
    _write_rung(first, rp, trace_file)
    m1 = first.get_bytes(first.write_manifest(rp))

    second = _store(s3_server, ladder=ladder)  # a fresh process re-running the same rung
    _write_rung(second, rp, trace_file)
    m2 = second.get_bytes(second.write_manifest(rp))
    assert m1 == m2
    assert b"time" not in m1.lower()

    # a changed object overwrites the old one and the manifest follows it
    changed = tmp_path / "changed.json"
    changed.write_bytes(trace_file.read_bytes()[:1000])
    second.put_file(f"{rp}/traces/rank1.raw.json", changed)
    second.write_manifest(rp)
    assert second.get_verified(f"{rp}/traces/rank1.raw.json") == changed.read_bytes()
    assert len(second.list(rp)) == 5  # 4 objects + manifest, nothing duplicated


BAD_KEYS = [
    "traceladder/other-ladder/run/rung/log.txt",
    "other-prefix/{ladder}/run/rung/log.txt",
    "traceladder/{ladder}/../other-ladder/run/log.txt",
    "traceladder/{ladder}/run/../../../etc/passwd",
    "traceladder/{ladder}/run/./rung/log.txt",
    "traceladder/{ladder}/run//log.txt",
    "/traceladder/{ladder}/run/rung/log.txt",
    "traceladder/{ladder}/run/%2e%2e/%2e%2e/other/x",
    "traceladder/{ladder}/run/%2E%2E%2Fescape",
    "traceladder/{ladder}/run/..%2f..%2fescape",
    "traceladder/{ladder}/run/%252e%252e/x",
    "traceladder/{ladder}/run\\..\\x",
    "traceladder/{ladder}/run/rung name/log.txt",
    "traceladder/{ladder}",
    "traceladder/{ladder}/",
    "",
]


@pytest.mark.parametrize("template", BAD_KEYS)
def test_writes_outside_the_ladder_prefix_are_refused(s3_server, s3_client, tmp_path, template):
    ladder = _ladder()
    store = _store(s3_server, s3_client, ladder)
    key = template.format(ladder=ladder)
    src = tmp_path / "f.txt"
    src.write_text("x")
    before = _all_keys(s3_client, s3_server.bucket)
    for write in (
        lambda: store.put_bytes(key, b"x"),
        lambda: store.put_file(key, src),
        lambda: store.put_file(key, src, gzip=True),
    ):
        with pytest.raises(ArtifactKeyError) as ei:
            write()
        _assert_one_line(ei.value)
        if key:
            assert repr(key) in str(ei.value) or key in str(ei.value)
    assert _all_keys(s3_client, s3_server.bucket) == before
    assert store.written() == {}


def test_manifest_outside_the_ladder_is_refused(s3_server):
    store = _store(s3_server)
    with pytest.raises(ArtifactKeyError, match="outside"):
        store.write_manifest("traceladder/someone-else/run/rung")
    with pytest.raises(ArtifactKeyError):
        store.write_manifest(f"{store.namespace}run/../x")


def test_anonymous_and_wrong_credentials_are_refused(s3_server, s3_client):
    store = _store(s3_server, s3_client)
    key = store.put_bytes(f"{store.rung_prefix('r', 'g')}/a.txt", b"secret data")
    anon = boto3.client(
        "s3",
        endpoint_url=s3_server.endpoint_url,
        region_name="us-east-1",
        config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1}),
    )
    for call in (
        lambda: anon.list_buckets(),
        lambda: anon.list_objects_v2(Bucket=s3_server.bucket),
        lambda: anon.get_object(Bucket=s3_server.bucket, Key=key),
        lambda: anon.put_object(Bucket=s3_server.bucket, Key=key, Body=b"overwritten"),
    ):
        with pytest.raises(ClientError) as ei:
            call()
        assert ei.value.response["Error"]["Code"] == "AccessDenied"
    assert store.get_bytes(key) == b"secret data"

    env = dict(s3_server.env(), AWS_SECRET_ACCESS_KEY="not-the-secret")
    wrong = S3ArtifactStore(s3_client_from_env(env), s3_server.bucket, "traceladder", store.ladder)
    with pytest.raises(ArtifactStoreError) as ei:
        wrong.get_bytes(key)
    _assert_one_line(ei.value, key, s3_server.endpoint_url, "SignatureDoesNotMatch")
    assert ei.value.__cause__ is None and ei.value.__suppress_context__


def test_missing_bucket_is_an_error(s3_server, s3_client):
    store = S3ArtifactStore(s3_client, "no-such-bucket-here", "traceladder", _ladder())
    key = f"{store.rung_prefix('r', 'g')}/a.txt"
    for call in (
        lambda: store.put_bytes(key, b"x"),
        lambda: store.get_bytes(key),
        store.check,
        lambda: store.exists(key),
    ):
        with pytest.raises(ArtifactStoreError) as ei:
            call()
        _assert_one_line(ei.value, "no-such-bucket-here", s3_server.endpoint_url)
    assert "no-such-bucket-here" not in [b["Name"] for b in s3_client.list_buckets()["Buckets"]]


def test_unreachable_endpoint_is_one_line_error(s3_server):
    (port,) = free_ports(1)
    env = dict(s3_server.env(), TRACELADDER_S3_ENDPOINT=f"http://127.0.0.1:{port}")
    store = S3ArtifactStore(s3_client_from_env(env), s3_server.bucket, "traceladder", _ladder())
    t0 = time.monotonic()
    with pytest.raises(ArtifactStoreError) as ei:
        store.put_bytes(f"{store.rung_prefix('r', 'g')}/a.txt", b"x")
    assert time.monotonic() - t0 < 20
    _assert_one_line(ei.value, f"127.0.0.1:{port}", s3_server.bucket, "unreachable")
    assert ei.value.__cause__ is None


def test_env_client_and_airflow_connection(s3_server, monkeypatch):
    env = s3_server.env()
    assert set(env) == {
        "TRACELADDER_S3_ENDPOINT",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_DEFAULT_REGION",
        "TRACELADDER_S3_BUCKET",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ladder = _ladder()
    store = S3ArtifactStore.from_env(ladder)
    key = store.put_bytes(f"{store.rung_prefix('r', 'g')}/a.txt", b"via env")

    conn = json.loads(s3_server.airflow_conn_uri_json())
    assert conn["conn_type"] == "aws"
    assert conn["login"] == s3_server.access_key and conn["password"] == s3_server.secret_key
    assert conn["extra"]["endpoint_url"] == s3_server.endpoint_url
    assert conn["extra"]["region_name"] == "us-east-1"
    monkeypatch.setenv("AIRFLOW_CONN_TRACELADDER_S3", s3_server.airflow_conn_uri_json())
    from traceladder.airflow.ladders import s3_client  # the tasks' and the retention DAG's one builder

    hook_client = s3_client("traceladder_s3")
    via_hook = S3ArtifactStore(hook_client, s3_server.bucket, "traceladder", ladder)
    assert via_hook.get_bytes(key) == b"via env"
    rp = via_hook.rung_prefix("r", "g2")
    via_hook.put_bytes(f"{rp}/b.txt", b"via hook")
    via_hook.write_manifest(rp)
    assert store.get_verified(f"{rp}/b.txt") == b"via hook"


# ---- local folder sink -------------------------------------------------------------------------
def test_dir_sink_has_the_same_layout_and_manifest(s3_server, s3_client, tmp_path, trace_file):
    ladder = _ladder()
    s3_store = _store(s3_server, s3_client, ladder)
    dir_sink = DirArtifactSink(tmp_path / "out", "traceladder", ladder)
    rp = s3_store.rung_prefix(RUN_ID, "gbs16.torch_rank0.r1")
    assert dir_sink.rung_prefix(RUN_ID, "gbs16.torch_rank0.r1") == rp
    for sink in (s3_store, dir_sink):
        _write_rung(sink, rp, trace_file)
        sink.write_manifest(rp)
    assert dir_sink.list(rp) == s3_store.list(rp)
    files = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert files == s3_store.list(rp)
    assert dir_sink.get_bytes(f"{rp}/manifest.json") == s3_store.get_bytes(f"{rp}/manifest.json")
    assert dir_sink.get_verified(f"{rp}/traces/rank0.pytorch.json.gz") == s3_store.get_bytes(
        f"{rp}/traces/rank0.pytorch.json.gz"
    )
    assert dir_sink.get_verified_buffer(f"{rp}/traces/rank0.pytorch.json.gz") == bytearray(
        s3_store.get_bytes(f"{rp}/traces/rank0.pytorch.json.gz")
    )
    (tmp_path / "out" / rp / "metrics.json").write_text('{"step_ms": 1}')
    for read in (dir_sink.get_verified, dir_sink.get_verified_buffer):
        with pytest.raises(ArtifactIntegrityError, match="metrics.json"):
            read(f"{rp}/metrics.json")
    (tmp_path / "out" / rp / "traces" / "rank0.pytorch.json.gz").unlink()  # listed, then lost
    with pytest.raises(ArtifactNotFoundError, match="no artifact"):
        dir_sink.get_verified_buffer(f"{rp}/traces/rank0.pytorch.json.gz")
    with pytest.raises(ArtifactKeyError):
        dir_sink.put_bytes(f"traceladder/elsewhere/{RUN_ID}/x", b"x")
    assert not (tmp_path / "out" / "traceladder" / "elsewhere").exists()


def test_dir_sink_without_ladder_still_refuses_traversal(tmp_path):
    sink = DirArtifactSink(tmp_path / "out")
    rp = rung_prefix("traceladder", "proxy-local", RUN_ID, "r0")
    sink.put_text(f"{rp}/log.txt", "hello")
    assert (tmp_path / "out" / rp / "log.txt").read_text() == "hello"
    for bad in ("../escape.txt", "a/../../escape.txt", "%2e%2e/escape.txt", "/tmp/escape.txt"):
        with pytest.raises(ArtifactKeyError):
            sink.put_bytes(bad, b"x")
    assert not (tmp_path / "escape.txt").exists()
    with pytest.raises(ArtifactNotFoundError):
        sink.get_bytes(f"{rp}/missing.txt")
