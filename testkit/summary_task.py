"""The ladder DAG's summary and publish tasks run as the DAG runs them, on a generated week of
rungs (:mod:`testkit.year_history`), with the S3 requests each makes counted
(:mod:`testkit.s3_requests`). Used by ``benchmarks/bench_scale.py`` and
``tests/integration/test_summary_reads.py``."""

from __future__ import annotations

import json
import time
from typing import Any


def summary_task(writer: Any, client: Any, bucket: str, ladder: str, week: int) -> dict[str, Any]:
    """Write week ``week``'s rungs, then run the summary and publish tasks as the DAG does."""
    from testkit.s3_requests import RequestCounter
    from testkit.year_history import object_count
    from traceladder.core import layout
    from traceladder.summary.publish import publish_latest, write_summary

    written = writer.write_rungs(ladder, week)
    store = writer.reader_for(ladder)  # a fresh S3 store, as a task has
    run = written["run"]
    with RequestCounter(client) as summary_requests:
        t0 = time.perf_counter()
        plan = json.loads(store.get_bytes(f"{run}/{layout.PLAN_OBJECT}"))  # tasks._stored_plan
        ref = write_summary(store, run, plan, written["stamp"])
        summary_s = time.perf_counter() - t0
    with RequestCounter(client) as publish_requests:
        t0 = time.perf_counter()
        entry = publish_latest(store, layout.ladder_prefix(writer.prefix, ladder), ref)
        publish_s = time.perf_counter() - t0
    objects, size = object_count(client, bucket, layout.ladder_prefix(writer.prefix, ladder))
    history = json.loads(store.get_bytes(ref["summary_json"])).get("history") or {}
    return {
        "week": week + 1,
        "history_runs": week,
        "summary_s": summary_s,
        "publish_s": publish_s,
        "summary_requests": summary_requests.total,
        "summary_by_op": dict(summary_requests.by_op),
        "summary_by_kind": dict(summary_requests.by_kind),
        "publish_requests": publish_requests.total,
        "publish_by_kind": dict(publish_requests.by_kind),
        "objects": objects,
        "bytes": size,
        "run": run,
        "entry": entry,
        "history_points": max((len(r.get("run_ids") or []) for r in history.get("rungs", [])), default=None),
        "change_points": sum(len(r.get("change_points") or []) for r in history.get("rungs", [])),
        "regressions": ref["regressions"],
    }
