"""Retention on a real SeaweedFS (issue 30 item 1): the dry run, the removals and their manifest
records, what is never removed, and a run SIGKILLed mid-deletion that the next run finishes.

The history is written through the product's own writers (the sink's manifests, the run index and
latest.json); ages come from the index entries' logical dates against a fixed ``now``."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from traceladder.core.documents import SummaryRef
from traceladder.core import layout
from traceladder.storage.artifacts import S3ArtifactStore
from traceladder.summary import index as run_index

pytestmark = pytest.mark.retention

REPO = Path(__file__).resolve().parents[2]
# the clock's now: the DAG judges ages by the clock, the CLI here by --now; weeks apart from seconds
NOW = datetime.now(timezone.utc).replace(microsecond=0)
POLICY = {"traces": "8w", "heavy_traces": "4w", "logs": "26w"}
# (run_id, weeks old, what-if params): the what-if runs are not "full", so latest.json points at
# the oldest run, which must then be kept whole although every limit has passed.
RUNS = [("r40w-latest", 40, {}), ("r30w", 30, {"rungs": "x"}), ("r6w", 6, {"rungs": "x"})]
RUNGS = {"base.torch_rank0": "torch_rank0", "fusions.rocprofv3": "rocprofv3", "deepep.none": "none"}


def _blob(key: str, size: int) -> bytes:
    return hashlib.sha256(key.encode()).digest() * (size // 32 + 1)


def _write_run(store: S3ArtifactStore, run_id: str, weeks: int, params: dict[str, Any]) -> None:
    run = f"{store.namespace}{run_id}"
    for rung_id, lens in RUNGS.items():
        rung = f"{run}/{rung_id}"
        store.put_json(f"{rung}/{layout.SPEC_OBJECT}", {"lens": lens, "rung": rung_id})
        store.put_json(f"{rung}/{layout.METRICS_OBJECT}", {"status": "ok"})
        store.put_bytes(f"{rung}/{layout.LOG_OBJECT}", _blob(rung + "log", 700))
        if lens != "none":
            for rank in range(2):
                store.put_bytes(f"{rung}/traces/rank{rank}.json.gz", _blob(f"{rung}{rank}", 3000))
            store.put_json(f"{rung}/analysis/rank0/analysis.json", {"ops": 1})
        store.write_manifest(rung)
    store.put_json(f"{run}/{layout.PLAN_OBJECT}", {"run_id": run_id})
    store.put_json(f"{run}/summary/summary.json", {"rungs": []})
    when = (NOW - timedelta(weeks=weeks)).isoformat()
    ref = {"run_id": run_id, "logical_date": when, "params": params, "summary_json": f"{run}/summary/summary.json"}
    run_index.publish(store, store.namespace.rstrip("/"), SummaryRef.from_dict(ref))


def _expected_removed(store: S3ArtifactStore) -> set[str]:
    """What the policy names, spelled out per run (not computed by the code under test)."""
    ns = store.namespace
    out = set()
    for rung_id in ("base.torch_rank0", "fusions.rocprofv3"):  # r30w: every trace (> 8w) ...
        out |= {f"{ns}r30w/{rung_id}/traces/rank{r}.json.gz" for r in range(2)}
    out |= {f"{ns}r30w/{rung_id}/log.txt.gz" for rung_id in RUNGS}  # ... and every log (> 26w)
    out |= {f"{ns}r6w/fusions.rocprofv3/traces/rank{r}.json.gz" for r in range(2)}  # heavy only (> 4w)
    return out


def _snapshot(client: Any, bucket: str, prefix: str) -> dict[str, str]:
    """``{key: sha256}`` of everything under the ladder."""
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []) or []:
            body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            out[obj["Key"]] = hashlib.sha256(body).hexdigest()
    return out


@pytest.fixture
def history(s3_server, s3_client, tmp_path, monkeypatch, request):
    """A ladder file on a cluster with the policy, its published history, and the CLI's environment."""
    ladder = "ret-" + request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[-40:]
    clusters = {
        "schema": 1,
        "clusters": {
            "local": {
                "backend": "local",
                "storage": {"bucket": s3_server.bucket, "prefix": "traceladder", "retention": POLICY},
                "hosts": [{"name": "localhost", "pool": "traceladder-localhost"}],
            }
        },
    }
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump(clusters))
    (tmp_path / "ladders").mkdir()
    base = REPO / "include/configs/ladders/proxy-local.yaml"
    (tmp_path / "ladders" / f"{ladder}.yaml").write_text(
        yaml.safe_dump({"schema": 1, "extends": str(base), "ladder": ladder, "schedule": None})
    )
    env = {
        **s3_server.env(),
        "TRACELADDER_CLUSTERS_FILE": str(tmp_path / "clusters.yaml"),
        "TRACELADDER_LADDERS_DIR": str(tmp_path / "ladders"),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    store = S3ArtifactStore(s3_client, s3_server.bucket, "traceladder", ladder)
    for run_id, weeks, params in RUNS:
        _write_run(store, run_id, weeks, params)
    # a run that is not in the index (never published) is never judged
    store.put_bytes(f"{store.namespace}unindexed/base.torch_rank0/traces/rank0.json.gz", b"x" * 100)
    assert json.loads(store.get_bytes(f"{store.namespace}latest.json"))["run_id"] == "r40w-latest"
    return store, env, ladder


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env, "PYTHONPATH": f"{REPO / 'include'}:{REPO}"}
    return subprocess.run(
        [sys.executable, "-m", "traceladder.cli", "retention", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        check=False,
    )


def test_dry_run_lists_each_key_then_a_json_total_and_removes_nothing(history, s3_client):
    store, env, ladder = history
    before = _snapshot(s3_client, store.bucket, store.namespace)
    done = _cli(env, "--dry-run", "--ladder", ladder, "--now", NOW.isoformat())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    listed = {line.split("\t")[0]: int(line.split("\t")[1]) for line in lines[:-1]}
    assert set(listed) == _expected_removed(store)
    total = json.loads(lines[-1])
    assert total["dry_run"] is True and total["objects"] == len(listed)
    assert total["bytes"] == sum(listed.values()) == total["stored_bytes"]
    assert _snapshot(s3_client, store.bucket, store.namespace) == before


def test_removes_what_the_policy_names_records_it_and_keeps_the_rest(history, s3_client):
    store, env, ladder = history
    before = _snapshot(s3_client, store.bucket, store.namespace)
    manifests_before = {k: json.loads(store.get_bytes(k)) for k in before if k.endswith("/manifest.json")}
    done = _cli(env, "--ladder", ladder, "--now", NOW.isoformat())
    assert done.returncode == 0, done.stderr
    after = _snapshot(s3_client, store.bucket, store.namespace)
    expected = _expected_removed(store)
    assert set(before) - set(after) == expected
    changed_manifests = {k for k in after if k.endswith("/manifest.json") and after[k] != before[k]}
    assert {k for k in before if before[k] != after.get(k)} == expected | changed_manifests
    assert changed_manifests == {
        k.rsplit("/traces/", 1)[0].rsplit("/log.txt.gz", 1)[0] + "/manifest.json" for k in expected
    }
    for key in changed_manifests:
        doc = json.loads(store.get_bytes(key))
        old = {o["key"]: o for o in manifests_before[key]["objects"]}
        assert doc["schema"] == 2
        for rec in doc["removed"]:
            assert rec["key"] in expected and rec["key"] not in {o["key"] for o in doc["objects"]}
            assert (rec["bytes"], rec["sha256"]) == (old[rec["key"]]["size"], old[rec["key"]]["sha256"])
            assert rec["policy"] in ("traces", "heavy_traces", "logs") and rec["removed_at"] == NOW.isoformat()
    # the kept objects still pass their manifest check
    store.get_verified(f"{store.namespace}r30w/base.torch_rank0/{layout.METRICS_OBJECT}")
    # a second pass has nothing left to do and rewrites nothing
    again = _cli(env, "--ladder", ladder, "--now", NOW.isoformat())
    assert json.loads(again.stdout.strip().splitlines()[-1])["objects"] == 0
    assert _snapshot(s3_client, store.bucket, store.namespace) == after


# The killer: the real CLI in a subprocess that SIGKILLs itself just before its Nth delete (0: after
# the first manifest is rewritten, before any delete), so the cut is deterministic.
_KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from traceladder.storage import retention
    from traceladder.cli.main import main
    real, calls = retention._delete, [0]
    def dying_delete(store, key):
        if calls[0] == int(os.environ["KILL_AT"]):
            os.kill(os.getpid(), signal.SIGKILL)
        calls[0] += 1
        real(store, key)
    retention._delete = dying_delete
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.parametrize("kill_at", [0, 3])
def test_killed_mid_deletion_the_next_run_finishes_and_loses_nothing_kept(history, s3_client, kill_at):
    store, env, ladder = history
    before = _snapshot(s3_client, store.bucket, store.namespace)
    full = {**os.environ, **env, "PYTHONPATH": f"{REPO / 'include'}:{REPO}", "KILL_AT": str(kill_at)}
    killed = subprocess.run(
        [sys.executable, "-c", _KILLER, "retention", "--ladder", ladder, "--now", NOW.isoformat()],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    cut = _snapshot(s3_client, store.bucket, store.namespace)
    expected = _expected_removed(store)
    kept = {k: v for k, v in before.items() if k not in expected and not k.endswith("/manifest.json")}
    assert all(cut.get(k) == v for k, v in kept.items())  # nothing kept was touched by the cut
    assert len(set(before) - set(cut)) == kill_at  # exactly the deletes before the kill happened
    done = _cli(env, "--ladder", ladder, "--now", NOW.isoformat())
    assert done.returncode == 0, done.stderr
    after = _snapshot(s3_client, store.bucket, store.namespace)
    assert set(before) - set(after) == expected
    assert all(after.get(k) == v for k, v in kept.items())
    records: list[str] = []
    for key in {k for k in after if k.endswith("/manifest.json")}:
        records += [r["key"] for r in json.loads(store.get_bytes(key)).get("removed", [])]
    assert sorted(records) == sorted(expected)  # each removal recorded exactly once


def test_retention_reads_the_run_index_by_its_one_rule(history):
    """The index's reading rule (core.documents.entries_from), as the summary applies it: a stray
    or unreadable entry is left out (its run is never judged); a malformed older index.json or
    latest.json stops the ladder's pass with one line naming the object."""
    from traceladder.core.errors import ArtifactStoreError
    from traceladder.storage.retention import Policy, RetentionError, apply_ladder

    store, _env, _ladder = history
    ns = store.namespace

    def removable() -> set[str]:
        lines: list[str] = []
        apply_ladder(store, Policy.from_mapping(POLICY), dry_run=True, now=NOW, emit=lines.append)
        return {line.split("\t")[0] for line in lines}

    store.put_json(f"{ns}runs/zz-stray.json", {"run_id": ""})
    store.put_json(f"{ns}runs/unindexed.json", {"run_id": "unindexed", "logical_date": 5})  # wrong type
    assert removable() == _expected_removed(store)
    store.put_json(f"{ns}{layout.LEGACY_INDEX}", {"runs": "nope"})
    with pytest.raises(ArtifactStoreError, match=r"/index.json( at \S+)? has no runs list$"):
        removable()
    store.put_json(f"{ns}{layout.LEGACY_INDEX}", {"runs": []})
    store.put_json(f"{ns}{layout.LATEST_OBJECT}", {"run_id": 7})
    with pytest.raises(RetentionError, match=r"^retention: \S+/latest.json( at \S+)?: run_id: expected str, got int$"):
        removable()


def test_the_weekly_dag_applies_the_policy(airflow_home, history, s3_client):
    from traceladder.embedded.local_airflow import dag_test

    store, _env, _ladder = history
    before = _snapshot(s3_client, store.bucket, store.namespace)
    dag_run = dag_test("traceladder-retention")
    assert str(dag_run.state) == "success"
    after = _snapshot(s3_client, store.bucket, store.namespace)
    assert set(before) - set(after) == _expected_removed(store)
