"""`traceladder triage repro` as a person runs it (issue 59, item 4): the command triage.json records
for a culprit's pair, run as printed in its own process, reruns that step's A/B (two builds of the
catalog, the tiny proxy, the real runner on the local backend) into the scratch prefix, and leaves
every key under the ladder's `<prefix>/<ladder>/` as it was (keys and ETags compared).

Seeded cheaply: the two ladder runs as the runner stores them (plan.json, spec.json, metrics.json:
testkit/results.py) and a triage.json with a two-candidate build bisection (record.save); only the
repro's own runs are real."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.results import store_measured_run
from testkit.triage_docs import build_change, step, suspect, triage_doc
from tests.conftest import REPO_ROOT
from traceladder.config.loader import CONFIG_DIR

pytestmark = [pytest.mark.triage, pytest.mark.service]

BUILDS = [
    {"name": "n0", "created": "2026-11-20T02:00:00Z"},
    {"name": "n1", "created": "2026-11-21T02:00:00Z", "changes": {"model_args": {"extra_work_pct": 50}}},
]


def _etags(client: Any, bucket: str, prefix: str) -> dict[str, str]:
    """Every key under `prefix` with its ETag."""
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out.update({o["Key"]: o["ETag"] for o in page.get("Contents", [])})
    return out


def _seed(s3_server: Any, ladder: str, ladders: Path) -> str:
    """The ladder file, runs w4 (build n0) and w5 (n1) as stored, and w5's triage.json with a
    confirm and the pair n0 -> n1 (the culprit n1). Returns the pair's recorded command."""
    from traceladder.config import load_ladder
    from traceladder.core.documents import Culprit
    from traceladder.plan.build import build_plan
    from traceladder.storage.artifacts import S3ArtifactStore
    from traceladder.triage import record
    from traceladder.triage.bisect import Candidate, apply_build
    from traceladder.triage.from_ladder import catalog

    ladders.mkdir()
    fields = {"extends": str(CONFIG_DIR / "ladders" / "proxy-regression.yaml"), "ladder": ladder}
    fields.update(builds=BUILDS, build="n1", repeats=1)
    (ladders / f"{ladder}.yaml").write_text(yaml.safe_dump(fields, sort_keys=False))
    loaded = load_ladder(ladders / f"{ladder}.yaml")
    prefix = loaded.cluster.storage.prefix
    store = S3ArtifactStore(s3_server.client(), s3_server.bucket, prefix, ladder)
    planned = build_plan(loaded, rungs=["baseline"], lens="none", repeats=1)[0].to_dict()
    for run_id, build, step_ms in (("w4", "n0", 20.0), ("w5", "n1", 30.0)):
        spec = apply_build(planned, catalog(loaded), build)
        store_measured_run(store, prefix, ladder, run_id, spec, step_ms, {"build": build, "host": "h1"})
    candidates = [Candidate(b["name"], "build", {"build": b["name"]}, b["created"]).as_part() for b in BUILDS]
    doc = triage_doc(
        suspect("baseline", diff=build_change("n0", "n1"), delta_pct=50.0),
        ladder=ladder,
        group=["baseline"],
        bisected_on="baseline",
        candidates=candidates,
        steps=[
            step(rung="baseline", delta_pct=48.0, interval_pct=[40.0, 56.0], blocks=3, size_pct=50.0),
            step(
                "pair", rung="baseline", good="n0", candidate="n1", delta_pct=47.0, interval_pct=[39.0, 55.0], blocks=2
            ),
        ],
        culprits=[Culprit(name="n1", last_good="n0", delta_pct=47.0, share_pct=94.0, share_interval_pct=[78, 110])],
    )
    doc = replace(doc, reproduce=record.reproduce_commands(doc))  # as the engine's _finish records it
    record.save(store, record.keys(prefix, ladder, "w5", "baseline")[0], doc)
    return str(doc.reproduce["pair n1"])


def test_the_recorded_command_reruns_a_pair_into_the_scratch_prefix_only(s3_server, tmp_path: Path) -> None:
    ladder = f"repro-{uuid.uuid4().hex[:8]}"  # the session's S3 is shared: its own ladder
    command = _seed(s3_server, ladder, tmp_path / "ladders")
    assert command == f"traceladder triage repro --ladder {ladder} --run w5 --rung baseline --step 1"
    client, bucket = s3_server.client(), s3_server.bucket
    before = _etags(client, bucket, f"traceladder/{ladder}/")
    assert f"traceladder/{ladder}/w5/triage/baseline/triage.json" in before

    # as printed, with the console script; S3 through the workers' connection (AIRFLOW_CONN_*)
    argv = shlex.split(command) + ["--blocks", "1"]
    script = Path(sys.executable).with_name("traceladder")
    argv = [str(script), *argv[1:]] if script.exists() else [sys.executable, "-m", "traceladder.cli", *argv[1:]]
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO_ROOT / 'include'}:{REPO_ROOT}",
        "TRACELADDER_LADDERS_DIR": str(tmp_path / "ladders"),
        "AIRFLOW_CONN_TRACELADDER_S3": s3_server.airflow_conn_uri_json(),
        "TRACELADDER_S3_BUCKET": bucket,
        "TRACELADDER_SPOOL_DIR": str(tmp_path / "spool"),
    }
    started = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    print(f"the repro took {time.monotonic() - started:.1f} s")  # shown with -s: the budget is under a minute
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert f"ladder {ladder} run w5 rung baseline step 1 (pair n0 -> n1)" in lines[0] and "local backend" in lines[0]
    assert lines[1].startswith("A n0: image ") and lines[1].endswith("build n0")
    assert lines[2].startswith("B n1: image ") and lines[2].endswith("build n1")
    assert lines[3] == "recorded: confirmed +47.0% (+39.0% to +55.0%) in 2 blocks"
    verdict = lines[4].removeprefix("rerun:").strip()
    assert verdict.split(" ")[0] in ("confirmed", "not", "insufficient") and "in 1 blocks" in verdict, lines
    assert lines[5].startswith(f"stored under s3://{bucket}/traceladder-scratch/{ladder}/w5-repro-s1-"), lines

    # nothing under the ladder's own prefix changed; both sides' runs are in the scratch prefix
    assert _etags(client, bucket, f"traceladder/{ladder}/") == before
    scratch = _etags(client, bucket, f"traceladder-scratch/{ladder}/")
    metrics = [k for k in scratch if k.endswith("/metrics.json")]
    assert len(metrics) == 2, sorted(scratch)
    for key in metrics:
        side = "A" if "s1-A.b0" in key else "B"
        result = json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())
        assert result["status"] == "ok" and f"triage-baseline.s1-{side}.b0" in key
        assert result["provenance"]["build"] == ("n0" if side == "A" else "n1")
