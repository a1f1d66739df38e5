"""The UI reads a run's summary.json through the artifact store's manifest check, on a real
SeaweedFS: a stored summary reads back, a tampered one is one line naming the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceladder.core import layout
from traceladder.storage.artifacts import ArtifactStoreError, S3ArtifactStore, run_prefix, safe_key_part
from traceladder.ui.data import LadderEntry, LadderStore

PREFIX, LADDER, RUN = "traceladder", "ui-verified", "manual__2026-11-30T10:00:00+00:00"


def _publish(s3_server, summary: dict) -> tuple[S3ArtifactStore, str]:
    store = S3ArtifactStore(s3_server.client(), s3_server.bucket, PREFIX, LADDER)
    base = layout.summary_prefix(run_prefix(PREFIX, LADDER, RUN))
    key = f"{base}/{layout.SUMMARY_JSON}"
    store.put_bytes(key, json.dumps(summary).encode(), "application/json")
    store.write_manifest(base)
    return store, key


def test_the_ui_reads_a_verified_summary_and_refuses_a_tampered_one(s3_server) -> None:
    summary = {"schema": 2, "ladder": LADDER, "run_id": RUN, "rungs": [{"rung": "base", "runs": 3}]}
    _, key = _publish(s3_server, summary)
    entry = LadderEntry(
        file=LADDER, path=Path(f"{LADDER}.yaml"), name=LADDER, conn_id="unused", bucket=s3_server.bucket, prefix=PREFIX
    )
    ui = LadderStore(entry, client=s3_server.client())
    assert ui.summary(safe_key_part(RUN)) == summary

    tampered = {**summary, "rungs": [{"rung": "base", "runs": 4}]}
    s3_server.client().put_object(Bucket=s3_server.bucket, Key=key, Body=json.dumps(tampered).encode())
    with pytest.raises(ArtifactStoreError, match="fails its manifest check") as err:
        ui.summary(safe_key_part(RUN))
    assert "\n" not in str(err.value) and "manifest" in str(err.value)


def test_the_ui_lists_streams_and_fails_through_the_artifact_store(s3_server) -> None:
    store, key = _publish(s3_server, {"schema": 2, "ladder": LADDER, "run_id": RUN, "rungs": []})
    run = safe_key_part(RUN)
    base = f"{PREFIX}/{LADDER}"
    for i in range(4):
        store.put_bytes(f"{base}/{run}/r{i}/metrics.json", json.dumps({"i": i}).encode())
    entry = LadderEntry(
        file=LADDER, path=Path(f"{LADDER}.yaml"), name=LADDER, conn_id="unused", bucket=s3_server.bucket, prefix=PREFIX
    )
    ui = LadderStore(entry, client=s3_server.client())
    everything = sorted(k[len(base) + 1 :] for k in store.list(f"{base}/{run}"))
    assert ui.run_files(run) == (everything, False)
    assert ui.list(run, limit=3) == (everything[:3], True)  # the page says the listing stopped
    chunks, length = ui.open(key[len(base) + 1 :])
    body = b"".join(chunks)
    assert length == len(body) and json.loads(body)["ladder"] == LADDER
    with pytest.raises(ArtifactStoreError) as err:  # the store's one line: the key and the endpoint
        ui.get_json(f"{run}/r9/metrics.json")
    assert f"{base}/{run}/r9/metrics.json" in str(err.value) and s3_server.endpoint_url in str(err.value)
