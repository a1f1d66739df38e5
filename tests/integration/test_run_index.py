"""The ladder's run index on a real SeaweedFS: concurrent publishes lose nothing, latest.json
follows the logical date and never moves backwards; and published summaries carry the history
verdicts, the trend chart and the regression call."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest

from testkit.results import plan_spec
from traceladder.storage.artifacts import S3ArtifactStore, ladder_prefix, run_prefix, s3_client_from_env
from traceladder.core.documents import SummaryRef
from traceladder.summary import collect, index as run_index

PREFIX = "traceladder"
WORKERS, RUNS_EACH = 4, 3


def _publish_many(env: dict[str, str], bucket: str, ladder: str, worker: int, barrier: Any) -> None:
    store = S3ArtifactStore(s3_client_from_env(env), bucket, PREFIX, ladder)
    barrier.wait()
    for k in range(RUNS_EACH):
        day = 1 + k * WORKERS + worker  # interleaved logical dates across the workers
        ref = {
            "run_id": f"w{worker}-r{k}",
            "logical_date": f"2026-11-{day:02d}T03:00:00+00:00",
            "summary_json": "-",
            "failed_rungs": [],
        }
        run_index.publish(store, ladder_prefix(PREFIX, ladder), SummaryRef.from_dict(ref))


def test_concurrent_publishes_keep_every_run_and_the_newest_latest(s3_server) -> None:
    ladder = "index-race"
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    procs = [
        ctx.Process(target=_publish_many, args=(s3_server.env(), s3_server.bucket, ladder, w, barrier))
        for w in range(WORKERS)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    store = S3ArtifactStore(s3_server.client(), s3_server.bucket, PREFIX, ladder)
    base = ladder_prefix(PREFIX, ladder)
    entries = collect.list_entries(store, base)
    assert sorted(e.run_id for e in entries) == sorted(f"w{w}-r{k}" for w in range(WORKERS) for k in range(RUNS_EACH))
    newest = max(entries, key=lambda e: e.logical_date or "")
    latest = json.loads(store.get_bytes(f"{base}/latest.json"))
    assert latest["run_id"] == newest.run_id == f"w{WORKERS - 1}-r{RUNS_EACH - 1}"

    # A late publish of an older run, and a what-if run with a newer date, leave latest.json alone.
    run_index.publish(
        store, base, SummaryRef(run_id="late", logical_date="2026-10-01T03:00:00+00:00", summary_json="-")
    )
    run_index.publish(
        store,
        base,
        SummaryRef(
            run_id="what-if",
            logical_date="2026-12-30T03:00:00+00:00",
            summary_json="-",
            params={"override": "global_batch=16"},
        ),
    )
    assert json.loads(store.get_bytes(f"{base}/latest.json"))["run_id"] == latest["run_id"]
    assert {"late", "what-if"} <= {e.run_id for e in collect.list_entries(store, base)}


def _store_run(store: S3ArtifactStore, ladder: str, run_id: str, week: int, slow_from: int) -> dict[str, Any]:
    noise = [0.4, -0.8, 0.2, 1.1, -0.5, -1.2, 0.9, 0.0, -0.3, 0.7, -0.9, 0.5, -0.1, 0.8]
    specs = []
    for rung, parent, switch, value, step in (
        ("baseline", None, None, None, 500.0),
        ("fusions", "baseline", "fusions", True, 340.0),
    ):
        for k in range(3):
            spec = plan_spec(rung, parent, switch, value, k, PREFIX)
            specs.append(spec)
            factor = (1 + 0.01 * noise[(week + k) % len(noise)]) * (
                1.08 if rung == "baseline" and week >= slow_from else 1.0
            )
            result = {
                **{f: spec[f] for f in ("rung_id", "rung", "lens", "repeat", "switch", "value", "parent")},
                "status": "ok",
                "step_ms": step * factor,
                "tokens_per_sec_per_gpu": 1e6 / (step * factor),
                "peak_mem_gb": 1.0,
                "traces": [],
                "provenance": {"config_hash": "new" if week >= slow_from else "old"},
            }
            key = f"{run_prefix(PREFIX, ladder, run_id)}/{spec['rung_id']}"
            store.put_json(f"{key}/metrics.json", result)
            store.write_manifest(key)
    return {"ladder": ladder, "run_id": run_id, "params": {}, "specs": specs}


def test_a_later_look_at_the_index_reads_only_new_or_rewritten_entries(s3_server) -> None:
    """What update_latest's check after a write relies on: the listing's ETags say which entries
    changed, so a rewritten entry (a run published again) is read again and nothing else is."""
    store = S3ArtifactStore(s3_server.client(), s3_server.bucket, PREFIX, "index-looks")
    base = ladder_prefix(PREFIX, "index-looks")
    for run_id, day in (("a", 1), ("b", 2)):
        run_index.put_entry(store, base, SummaryRef(run_id=run_id, logical_date=f"2026-11-0{day}"))
    reads: list[str] = []
    real_get = store.get_bytes
    store.get_bytes = lambda key: reads.append(key) or real_get(key)  # type: ignore[method-assign]
    seen: collect.IndexReads = {}

    def look() -> list[tuple[str, str | None]]:
        reads.clear()
        return [(e.run_id, e.logical_date) for e in collect.list_entries(store, base, seen)]

    assert look() == [("a", "2026-11-01"), ("b", "2026-11-02")] and len(reads) == 2
    assert look() == [("a", "2026-11-01"), ("b", "2026-11-02")] and reads == []
    run_index.put_entry(store, base, SummaryRef(run_id="a", logical_date="2026-11-03"))  # published again
    run_index.put_entry(store, base, SummaryRef(run_id="c", logical_date="2026-11-04"))
    assert look() == [("b", "2026-11-02"), ("a", "2026-11-03"), ("c", "2026-11-04")]
    assert sorted(reads) == [run_index.entry_key(base, "a"), run_index.entry_key(base, "c")]


def test_published_summaries_carry_history_verdicts_and_the_trend(s3_server, tmp_path: Path) -> None:
    from traceladder.summary.publish import publish_latest, write_summary

    ladder = "history-e2e"
    store = S3ArtifactStore(s3_server.client(), s3_server.bucket, PREFIX, ladder)
    refs = []
    for week in range(12):
        run_id = f"scheduled__2026-{week + 1:02d}-05"
        plan = _store_run(store, ladder, run_id, week, slow_from=9)
        ref = write_summary(store, run_prefix(PREFIX, ladder, run_id), plan, f"2026-{week + 1:02d}-05T03:00:00+00:00")
        publish_latest(store, ladder_prefix(PREFIX, ladder), ref)
        refs.append(ref)
    called = [(i, r["regressions"]) for i, r in enumerate(refs) if r["regressions"]]
    # Two runs after the change (the newest two beyond the prediction bound of the eight before:
    # docs/statistics-history.md), and only then
    assert called == [(10, ["baseline"])]
    call = refs[10]["regression_calls"][0]
    assert (
        call.startswith("baseline: step time +") and "from run scheduled__2026-10-05" in call and "config_hash" in call
    )
    summary = json.loads(store.get_bytes(refs[11]["summary_json"]))
    assert summary["history"]["runs"][-1] == refs[11]["run_id"] and len(summary["history"]["runs"]) == 12
    html = store.get_bytes(refs[10]["report_html"]).decode()
    assert 'alt="trend.png"' in html and 'id="change-points"' in html and "REGRESSION (new)" in html
    md = store.get_bytes(refs[11]["summary_md"]).decode()
    assert "## History (12 full runs" in md and "### Since scheduled__2026-11-05" in md
    assert store.exists(f"{run_prefix(PREFIX, ladder, refs[11]['run_id'])}/summary/charts/trend.png")


@pytest.fixture
def own_s3(tmp_path: Path):
    """A SeaweedFS of this test's own: it publishes proxy-local runs, which the Ladders page tests
    of the session's server must not see."""
    from traceladder.embedded.embedded_s3 import EmbeddedS3

    server = EmbeddedS3(tmp_path / "s3", bucket="traceladder")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_failed_notice_leaves_the_run_published_and_says_so(own_s3, monkeypatch) -> None:
    """publish_run with a webhook that refuses connections: the entry and latest.json are written,
    and ladder_status fails with the notice's failure, not with "not published"."""
    import socket

    from airflow.sdk.exceptions import AirflowException

    from traceladder.workflows.ladder_tasks import check_rungs, publish_run

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("AIRFLOW_CONN_TRACELADDER_S3", own_s3.airflow_conn_uri_json())
    monkeypatch.setenv("AIRFLOW_CONN_TRACELADDER_NOTIFY", f"http://127.0.0.1:{port}")
    ref = {
        "run_id": "notify-fails",
        "logical_date": "2027-01-01T03:00:00+00:00",
        "summary_json": "-",
        "failed_rungs": [],
        "regressions": ["baseline"],
        "regression_calls": ["baseline: step time +8.0% (95% CI +6.0% to +10.0%) from run x; no provenance change."],
    }
    published = publish_run("proxy-local", "notify-fails", ref)
    assert published["run_id"] == "notify-fails" and published["notify_error"].startswith("URLError")
    store = S3ArtifactStore(own_s3.client(), own_s3.bucket, PREFIX, "proxy-local")
    base = ladder_prefix(PREFIX, "proxy-local")
    assert "notify-fails" in {e.run_id for e in collect.list_entries(store, base)}
    assert json.loads(store.get_bytes(f"{base}/latest.json"))["run_id"] == "notify-fails"
    with pytest.raises(AirflowException) as err:
        check_rungs(ref, published)
    assert "the summary was published, but the regression notice failed: URLError" in str(err.value)
    assert "not published" not in str(err.value)
