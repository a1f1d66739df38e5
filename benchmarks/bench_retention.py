"""Retention (issue 30) on a year of one ladder in a real SeaweedFS: 52 weekly runs of the seed's
shape (10 measured rungs with a log, three lens rungs with 8 rank traces each: torch_all_ranks,
rocprofv3 and rocm_trace_lite, their analyses, the summary and the index). Traces are shrunk to
1 KB as stored; their manifests record the real size (150 MB per rank, rocprofv3's JSON), so the
figures give both. Policy: the issue's `{traces: 8w, heavy_traces: 4w, logs: 26w}`.

Figures: the dry run's and the removal's wall time, the objects and bytes removed (as recorded and
as stored), the S3 requests of each pass, and a second pass (nothing left to do) against the
object count under the ladder's prefix."""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from benchmarks.common import Context, Row
from traceladder.core.documents import SummaryRef

WEEKS = 52  # --quick: 13
MEASURED = 10
LENSES = ("torch_all_ranks", "rocprofv3", "rocm_trace_lite")
RANKS = 8
REAL_TRACE_BYTES = 150 * 2**20
STORED_TRACE_BYTES = 1024
POLICY = {"traces": "8w", "heavy_traces": "4w", "logs": "26w"}


def _write_year(store: Any, weeks: int, now: datetime) -> int:
    from traceladder.summary import index as run_index

    ns = store.namespace
    count = 0

    def put(key: str, body: bytes) -> tuple[str, int, str]:
        nonlocal count
        store.put_bytes(key, body)
        count += 1
        return key, len(body), hashlib.sha256(body).hexdigest()

    for week in range(weeks, 0, -1):
        run_id = f"scheduled__{(now - timedelta(weeks=week)).date().isoformat()}"
        run = f"{ns}{run_id}"
        rungs = [(f"r{i}.none.r0", "none") for i in range(MEASURED)] + [(f"r9.{lens}.l0", lens) for lens in LENSES]
        for rung_id, lens in rungs:
            rung = f"{run}/{rung_id}"
            objects = [put(f"{rung}/spec.json", json.dumps({"lens": lens}).encode())]
            objects.append(put(f"{rung}/metrics.json", b'{"status": "ok"}'))
            objects.append(put(f"{rung}/log.txt.gz", b"l" * 4096))
            if lens != "none":
                for rank in range(RANKS):
                    key, _, sha = put(f"{rung}/traces/rank{rank}.json.gz", bytes([rank]) * STORED_TRACE_BYTES)
                    objects.append((key, REAL_TRACE_BYTES, sha))  # the real size, as the runner recorded it
                for name in ("analysis.json", "gpu_timeline.csv", "ops_summary.csv"):
                    objects.append(put(f"{rung}/analysis/rank0/{name}", b"a" * 2048))
            manifest = {"schema": 1, "objects": [{"key": k, "size": s, "sha256": h} for k, s, h in sorted(objects)]}
            put(f"{rung}/manifest.json", json.dumps(manifest).encode())
        put(f"{run}/plan.json", b"{}")
        for name in ("summary.json", "summary.md", "report.html", "charts/step_ms.png"):
            put(f"{run}/summary/{name}", b"s" * 4096)
        when = (now - timedelta(weeks=week)).isoformat()
        run_index.publish(store, ns.rstrip("/"), SummaryRef(run_id=run_id, logical_date=when))
        count += 1
    return count


def bench_retention(ctx: Context) -> list[Row]:
    from traceladder.embedded.embedded_s3 import EmbeddedS3
    from traceladder.storage.artifacts import S3ArtifactStore
    from traceladder.storage.retention import Policy, apply_ladder

    weeks = 13 if ctx.quick else WEEKS
    now = datetime.now(timezone.utc)
    server = EmbeddedS3(ctx.scratch / "s3", bucket="traceladder").start()
    try:
        client = server.client()
        requests = [0]
        client.meta.events.register("before-send.s3", lambda **_: requests.__setitem__(0, requests[0] + 1))
        store = S3ArtifactStore(client, server.bucket, "traceladder", "bench-year")
        t0 = time.perf_counter()
        objects = _write_year(store, weeks, now)
        write_s = time.perf_counter() - t0
        policy = Policy.from_mapping(POLICY)
        rows = [Row("retention", "history written", objects, "objects", "", None, f"{weeks} weeks in {write_s:.0f} s")]
        for label, dry in (("dry run", True), ("removal", False), ("second pass", False)):
            requests[0] = 0
            t0 = time.perf_counter()
            totals = apply_ladder(store, policy, dry_run=dry, now=now, emit=lambda _line: None)
            wall = time.perf_counter() - t0
            detail = (
                f"{totals.objects} objects, {totals.bytes / 2**30:.1f} GiB as recorded, "
                f"{totals.stored_bytes / 2**20:.1f} MiB as stored, {requests[0]} S3 requests"
            )
            rows.append(Row("retention", f"{label} time", wall, "s", "", None, detail))
        return rows
    finally:
        server.stop()


SECTIONS = [bench_retention]
