"""Fault 5: a truncated trace and a corrupt gzip in S3, beside a good one. Each bad trace's
analysis fails with one line naming its S3 object; the good one is analysed; the summary is
written and names both bad ones; everything stored is still in S3, checksum-verified."""

from __future__ import annotations

import gzip
import json

import pytest

from traceladder.analysis.model.events import TraceError
from traceladder.analysis.stored import analyze_stored
from traceladder.storage.artifacts import S3ArtifactStore, run_prefix
from traceladder.summary.publish import write_summary

from tests.conftest import REFERENCE_DIR

from testkit.tiny_rung import tiny_spec, verified_objects

pytestmark = pytest.mark.faults
LADDER = "faults-traces"
BERT = REFERENCE_DIR / "derived" / "gaunernst_bert-small-uncased__1016001__gpu_only.json.gz"


def test_bad_traces_fail_alone_and_the_summary_names_them(s3_server) -> None:
    assert BERT.is_file(), f"{BERT}: reference trace missing"
    store = S3ArtifactStore(s3_server.client(), s3_server.bucket, "traceladder", LADDER)
    run_id = "bad-traces"
    spec = tiny_spec(LADDER)
    prefix = f"{run_prefix('traceladder', LADDER, run_id)}/{spec.rung_id}"
    good = BERT.read_bytes()
    raw = gzip.decompress(good)
    # what a rung killed mid-write leaves (a valid gzip of half a JSON), and a gzip cut in two
    traces = {
        "rank0.pt.trace.json.gz": good,
        "rank1.pt.trace.json.gz": gzip.compress(raw[: len(raw) // 2], mtime=0),
        "rank2.pt.trace.json.gz": good[: len(good) // 3],
    }
    keys = []
    for name, body in traces.items():
        keys.append(store.put_bytes(f"{prefix}/traces/{name}", body, "application/gzip"))
    result = {
        "run_id": run_id,
        "ladder": LADDER,
        "rung": spec.rung,
        "rung_id": spec.rung_id,
        "lens": spec.lens,
        "repeat": 0,
        "switch": None,
        "value": None,
        "parent": None,
        "status": "ok",
        "exit_code": 0,
        "step_ms": 12.5,
        "step_ms_values": [12.0, 12.5, 13.0],
        "tokens_per_sec_per_gpu": 100.0,
        "tflops": None,
        "peak_mem_gb": 1.0,
        "iterations_used": [2, 3, 4],
        "traces": keys,
        "error": None,
        "prefix": prefix,
        "wall_s": 1.0,
        "provenance": {},
    }
    store.put_bytes(f"{prefix}/metrics.json", json.dumps(result).encode(), "application/json")
    store.put_bytes(f"{prefix}/spec.json", spec.to_json().encode(), "application/json")
    store.write_manifest(prefix)
    before = verified_objects(s3_server.client(), s3_server.bucket, prefix)

    failed = {}
    for key in keys:
        try:
            analyze_stored(store, key)
        except TraceError as exc:
            failed[key] = str(exc)
    assert sorted(failed) == keys[1:], failed
    for key, message in failed.items():
        assert "\n" not in message and message.startswith(f"s3://{s3_server.bucket}/{key}"), message
    assert "truncated" in failed[keys[2]] or "gzip" in failed[keys[2]], failed[keys[2]]

    plan = {"schema": 1, "ladder": LADDER, "run_id": run_id, "params": {}, "specs": [json.loads(spec.to_json())]}
    ref = write_summary(store, run_prefix("traceladder", LADDER, run_id), plan)
    assert sorted(ref["unanalysed_traces"]) == keys[1:], ref
    assert verified_objects(s3_server.client(), s3_server.bucket, prefix) == before, (
        "nothing stored was lost or changed"
    )
    analysis = json.loads(store.get_verified(f"{prefix}/analysis/rank0/analysis.json"))
    assert analysis, "the good trace was analysed"
