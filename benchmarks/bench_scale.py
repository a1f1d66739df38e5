"""A year of weekly ladders (issue 30): the summary task against the history's length, and the
Ladders page under load. The generated year (testkit/year_history.py: 10 ladders x 52 weeks of
the seed ladder in a real SeaweedFS) is made once and cached under /var/tmp/traceladder-scale by
generator version; ``TRACELADDER_SCALE_CACHE`` names another folder.

* ``summary_scale``: one ladder written week by week into a fresh SeaweedFS; after 1, 13, 26 and
  52 published weeks the next week's rungs are written and the DAG's summary task runs for real
  (``summary.publish.write_summary``: results, analyses, attribution, the history and change
  points over the ladder's index, charts, report) and then its publish (``publish_latest``). For
  each: seconds, S3 requests by operation and by what they read (botocore's ``before-parameter-build``
  events), and the objects under the ladder's prefix. Then the 53rd week of one ladder of the
  generated year (a bucket of ten ladders), the same way; its objects are removed afterwards so
  the cache stays a year. Target: the summary task ≤ 15 s.
* ``page_load``: see testkit/page_load.py.

Figures go to ``docs/figures/<date>-<section>.md``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, Context, Row, write_section_figures
from testkit.summary_task import summary_task

SUMMARY_TARGET_S = 15.0
HISTORY_WEEKS = (1, 13, 26, 52)
YEAR_LADDERS, YEAR_WEEKS = 10, 52


def cache_root() -> Path:
    return Path(os.environ.get("TRACELADDER_SCALE_CACHE", "/var/tmp/traceladder-scale"))  # noqa: S108 - a cache


def _probe(ctx: Context, weeks: tuple[int, ...]) -> list[dict[str, Any]]:
    """One ladder, week by week, in a fresh SeaweedFS; the real tasks at each history length."""
    from testkit.year_history import ladder_files, s3_writer
    from traceladder.embedded.embedded_s3 import EmbeddedS3

    root = ctx.scratch / "summary_scale"
    (ladder,) = ladder_files(root / "ladders", 1)
    os.environ["TRACELADDER_LADDERS_DIR"] = str(root / "ladders")
    s3 = EmbeddedS3(root / "s3", bucket="traceladder")
    s3.start()
    measured = []
    try:
        client = s3.client(max_pool_connections=32)
        writer = s3_writer(s3, client, root)
        entries: list[dict[str, Any]] = []
        try:
            for week in range(max(weeks) + 1):
                if week in weeks:
                    m = summary_task(writer, client, s3.bucket, ladder, week)
                    measured.append(m)
                    entries.append({**m["entry"], "logical_date": m["entry"]["logical_date"]})
                    print(f"bench: summary_scale: {m['history_runs']} weeks before: {m['summary_s']:.1f} s", flush=True)
                else:
                    entries.append(writer.write_summary(ladder, week, writer.write_rungs(ladder, week), entries))
        finally:
            writer.close()
    finally:
        s3.stop()
        os.environ.pop("TRACELADDER_LADDERS_DIR", None)
    return measured


def _year_week(ctx: Context) -> dict[str, Any] | None:
    """The 53rd week of the first ladder of the cached year (10 ladders in the bucket); removed after."""
    from testkit.year_history import cached_year, s3_writer
    from traceladder.embedded.embedded_s3 import EmbeddedS3

    year = cached_year(YEAR_LADDERS, YEAR_WEEKS, cache_root())
    os.environ["TRACELADDER_LADDERS_DIR"] = str(year.ladders_dir)
    s3 = EmbeddedS3(year.s3_dir, bucket="traceladder")
    s3.start()
    try:
        client = s3.client(max_pool_connections=32)
        writer = s3_writer(s3, client, ctx.scratch)
        ladder = year.ladders[0]
        try:
            m = summary_task(writer, client, s3.bucket, ladder, year.weeks)
        finally:
            writer.close()
            _remove_week(client, s3.bucket, writer, ladder, year.weeks)  # the cache stays a year
        m["year"] = {
            "seconds": year.seconds,
            "objects": year.objects,
            "bytes": year.bytes,
            "ladders": len(year.ladders),
        }
        return m
    finally:
        s3.stop()
        os.environ.pop("TRACELADDER_LADDERS_DIR", None)


def _remove_week(client: Any, bucket: str, writer: Any, ladder: str, week: int) -> None:
    """Delete what ``summary_task`` wrote for ``week`` (its run folder and index entry), even
    after a failure half-way, and point latest.json back at the newest run left."""
    from testkit.year_history import _run_id
    from traceladder.core.layout import entry_key, ladder_prefix, run_prefix
    from traceladder.summary.index import update_latest

    run_id = _run_id(week)[0]
    run = run_prefix(writer.prefix, ladder, run_id)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=run + "/"):
        objs = [{"Key": o["Key"]} for o in page.get("Contents", []) or []]
        if objs:
            client.delete_objects(Bucket=bucket, Delete={"Objects": objs})
    client.delete_object(Bucket=bucket, Key=entry_key(ladder_prefix(writer.prefix, ladder), run_id))
    update_latest(writer.reader_for(ladder), ladder_prefix(writer.prefix, ladder))


def _kinds(by_kind: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]))


def bench_summary_scale(ctx: Context) -> list[Row]:
    weeks = (1, 13) if ctx.quick else HISTORY_WEEKS
    probe = _probe(ctx, weeks)
    year = None if ctx.quick else _year_week(ctx)
    rows = []
    for m in probe + ([year] if year else []):
        where = "year bucket (10 ladders)" if m is year else "one ladder"
        rows.append(
            Row(
                "summary_scale",
                f"summary task, {m['history_runs']} weeks of history ({where})",
                m["summary_s"],
                "s",
                f"≤ {SUMMARY_TARGET_S:.0f} s",
                m["summary_s"] <= SUMMARY_TARGET_S,
                f"{m['summary_requests']} S3 requests; {m['objects']} objects under the ladder; "
                f"publish {m['publish_s']:.2f} s, {m['publish_requests']} requests",
            )
        )
    _write_figures(probe, year)
    return rows


def _write_figures(probe: list[dict[str, Any]], year: dict[str, Any] | None) -> None:
    lines = [
        "# The summary task against a year of history (`python -m benchmarks --only summary_scale`)",
        "",
        "The DAG's summary task (`summary.publish.write_summary`, with the plan read first as the task does) and "
        "its publish (`publish_latest`), run for real on the next week of a ladder with 1, 13, 26 and 52 "
        "published weeks (one ladder in a fresh SeaweedFS), then on week 53 of a ladder in the generated year "
        "(testkit/year_history.py: 10 seed ladders x 52 weeks in one bucket). S3 requests are counted with "
        "botocore's `before-parameter-build` events (one per API call; a listing counts one per page of 1,000 keys). "
        f"Target: the summary task ≤ {SUMMARY_TARGET_S:.0f} s. Machine: 2 shared cores, `nice -n 19`.",
        "",
        "| history (weeks) | where | summary task s | publish s | summary requests | publish requests "
        "| objects under the ladder | stored MB | points per rung |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = probe + ([year] if year else [])
    for m in rows:
        lines.append(
            f"| {m['history_runs']} | {'year bucket' if m is year else 'one ladder'} | {m['summary_s']:.2f} | "
            f"{m['publish_s']:.2f} | {m['summary_requests']} | {m['publish_requests']} | {m['objects']} | "
            f"{m['bytes'] / 1e6:.0f} | {m['history_points']} |"
        )
    lines += ["", "## Requests by operation and by what they read", ""]
    for m in rows:
        lines.append(f"- {m['history_runs']} weeks, summary: {_kinds(m['summary_by_kind'])}")
        lines.append(f"- {m['history_runs']} weeks, publish: {_kinds(m['publish_by_kind'])}")
    if len(probe) >= 2:
        a, b = probe[0], probe[-1]
        grow_objects = b["objects"] / max(a["objects"], 1)
        other = {
            k: (a["summary_by_kind"].get(k, 0), b["summary_by_kind"].get(k, 0))
            for k in set(a["summary_by_kind"]) | set(b["summary_by_kind"])
            if "index entry" not in k
        }
        grown = {k: v for k, v in other.items() if v[1] != v[0]}
        lines += [
            "",
            f"From {a['history_runs']} to {b['history_runs']} weeks the objects under the ladder grow "
            f"x{grow_objects:.0f} ({a['objects']} → {b['objects']}). The summary task's reads of index "
            f"entries grow with the runs in the history (one GET per run under `runs/`, plus one listing "
            f"page per 1,000 runs); every other read stays the same: "
            + ("yes" if not grown else "NO, " + ", ".join(f"{k} {v[0]}→{v[1]}" for k, v in grown.items()))
            + ".",
        ]
    if year:
        y = year["year"]
        lines += [
            "",
            f"The generated year: {y['ladders']} ladders, {y['objects']} objects, {y['bytes'] / 1e9:.2f} GB stored, "
            f"generated in {y['seconds'] / 60:.1f} min.",
        ]
    write_section_figures("summary_scale", lines)


# ---- page_load --------------------------------------------------------------------------------
PAGE_VIEWERS, PAGE_SECONDS, PAGE_WORKERS = 20, 60.0, 2
PAGE_TARGET_MS = 500.0


def _page_server(year: Any, s3: Any, home: Path, cache: bool, passwords: dict[str, str] | None) -> Any:
    import sys

    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from airflow_server import AirflowApiServer

    return AirflowApiServer(
        home,
        extra_env={
            "AIRFLOW_CONN_TRACELADDER_S3": s3.airflow_conn_uri_json(),
            "TRACELADDER_LADDERS_DIR": str(year.ladders_dir),
            "TRACELADDER_UI_CACHE": "1" if cache else "0",
            "AIRFLOW__API__WORKERS": str(PAGE_WORKERS),
        },
        prepare=passwords is None,
        passwords=passwords,
    ).start()


def bench_page_load(ctx: Context) -> list[Row]:
    """20 viewers for 60 s on the generated year: before caching (the page's caches off, viewers
    keep nothing) and after (caches on, viewers keep immutable responses and revalidate ETags)."""
    from testkit.page_load import Site, drive
    from testkit.year_history import _run_id, cached_year
    from traceladder.embedded.embedded_s3 import EmbeddedS3

    year = cached_year(YEAR_LADDERS, YEAR_WEEKS, cache_root())
    seconds = 15.0 if ctx.quick else PAGE_SECONDS
    site_runs = {name: [_run_id(w)[0] for w in range(year.weeks)] for name in year.ladders}
    s3 = EmbeddedS3(year.s3_dir, bucket="traceladder")
    s3.start()
    results: dict[str, Any] = {}
    try:
        home = ctx.scratch / "page-load-airflow"
        passwords = None
        for label, cache in (("before caching", False), ("after caching", True)):
            server = _page_server(year, s3, home, cache, passwords)
            passwords = server.passwords
            try:
                load0 = os.getloadavg()[0]
                results[label] = drive(
                    Site(server.url, site_runs),
                    "viewer",
                    passwords["viewer"],
                    viewers=PAGE_VIEWERS,
                    seconds=seconds,
                    max_requests=10_000,
                    browser_cache=cache,
                )
                results[label].load = (load0, os.getloadavg()[0])  # type: ignore[attr-defined]
            finally:
                server.stop()
    finally:
        s3.stop()
    rows = []
    for label, r in results.items():
        p95 = r.p(0.95)
        clean = not r.errors and not r.unauthenticated_served
        # the target is the cached page's; "before caching" is the reference it is measured against
        targeted = label == "after caching"
        rows.append(
            Row(
                "page_load",
                f"p95, {PAGE_VIEWERS} viewers x {seconds:.0f} s, {label}",
                p95,
                "ms",
                f"≤ {PAGE_TARGET_MS:.0f} ms" if targeted else "reference (no errors)",
                (p95 <= PAGE_TARGET_MS and clean) if targeted else clean,
                f"p50 {r.p(0.5):.0f} ms; {r.requests} requests, {len(r.errors)} errors, "
                f"{len(r.unauthenticated_served)}/{r.unauthenticated_sent} unauthenticated served; "
                f"load generator CPU {r.cpu_s:.1f} s of {r.wall_s:.0f} s",
            )
        )
    _write_page_figures(results, seconds, year)
    return rows


def _write_page_figures(results: dict[str, Any], seconds: float, year: Any) -> None:
    from testkit.page_load import TARGETS

    lines = [
        "# The Ladders page under load (`python -m benchmarks --only page_load`)",
        "",
        f"A real `airflow api-server` ({PAGE_WORKERS} workers, `[api] workers`) holding the generated year "
        f"({len(year.ladders)} seed ladders x {year.weeks} weeks, {year.objects} objects in SeaweedFS), driven by "
        f"{PAGE_VIEWERS} concurrent viewers for {seconds:.0f} s (testkit/page_load.py: httpx async, loopback, "
        "one token each from `POST /auth/token`, 0.5-1.5 s think time, a loop over the ladder list, a run's page, "
        "its report and a chart of a random run of a random ladder), and a prober sending the same requests "
        "with no token and a forged one. Before caching: `TRACELADDER_UI_CACHE=0` and viewers keep nothing. After: "
        "the page's caches (parsed ladder files, index entries by listing ETag, summaries by entry ETag) and "
        "viewers that keep `immutable` responses and revalidate ETags (a 304 counts as a request). "
        f"Target p95 ≤ {PAGE_TARGET_MS:.0f} ms. Machine: 2 shared cores, `nice -n 19`; the load average "
        "before and after each run is given, since other jobs shared the cores.",
        "",
        "Before the clock, each page is opened once and the ladder list is asked for 4 at a time until a "
        "round answers within 0.3 s (each api-server worker has its own caches; a server that has been up "
        "has read the indexes once in each), at most 60 s: the warm-up column.",
        "",
        "| run | requests | errors | unauthenticated served / sent | p50 ms | p95 ms | kept by viewers "
        "| generator CPU s | load avg | warm-up s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in results.items():
        load = getattr(r, "load", (float("nan"), float("nan")))
        lines.append(
            f"| {label} | {r.requests} | {len(r.errors)} | {len(r.unauthenticated_served)} / {r.unauthenticated_sent} "
            f"| {r.p(0.5):.0f} | {r.p(0.95):.0f} | {r.from_browser_cache} | {r.cpu_s:.1f} | "
            f"{load[0]:.1f} → {load[1]:.1f} | {r.warm_s:.1f} |"
        )
    lines += ["", "## By page (p50 / p95 ms, requests)", "", "| run | " + " | ".join(TARGETS) + " |"]
    lines.append("|---|" + "---|" * len(TARGETS))
    for label, r in results.items():
        cells = [
            f"{r.p(0.5, t):.0f} / {r.p(0.95, t):.0f} ({len(r.latencies_ms[t])})" if r.latencies_ms[t] else "-"
            for t in TARGETS
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "## Through the run (p95 ms of the requests started in each part, requests)", ""]
    parts = [(0.0, 10.0), (10.0, 30.0), (30.0, seconds + 1)]
    lines.append("| run | " + " | ".join(f"{a:.0f}-{min(b, seconds):.0f} s" for a, b in parts) + " |")
    lines.append("|---|" + "---|" * len(parts))
    for label, r in results.items():
        cells = [f"{q:.0f} ({n})" if n else "-" for q, n in (r.p_between(0.95, a, b) for a, b in parts)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    errors = [e for r in results.values() for e in r.errors[:5]]
    if errors:
        lines += ["", "First errors: " + "; ".join(errors)]
    write_section_figures("page_load", lines)


SECTIONS = [bench_summary_scale, bench_page_load]
