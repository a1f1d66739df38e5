"""`traceladder demo`: a whole ladder through real Airflow on the embedded default.

Starts SeaweedFS, prepares an Airflow home under `.traceladder/` (git-ignored), runs the
ladder's weekly DAG with `dag.test()`, reads the published summary back from S3, prints it and
then where the rest is (the report, the S3 prefix and its object count; `--list-keys` lists
the keys), keeps a local copy, and stops what it started. `traceladder keys` (`make keys`) lists a
stored run's keys afterwards, from the same S3 data, without running anything."""

from __future__ import annotations

import os
import sys
import time

from traceladder.config.loader import REPO_ROOT

STATE_DIR = REPO_ROOT / ".traceladder"
DEFAULT_LADDER = "proxy-local"


def say(message: str) -> None:
    print(f"[demo] {message}", file=sys.stderr, flush=True)


def run_demo(ladder: str = DEFAULT_LADDER, list_keys: bool = False) -> int:
    from traceladder.embedded.local_airflow import airflow_env, prepare
    from traceladder.config import find_ladder, load_ladder
    from traceladder.embedded.embedded_s3 import EmbeddedS3

    started = time.monotonic()
    loaded = load_ladder(find_ladder(ladder))
    storage = loaded.cluster.storage
    say(
        f"ladder {loaded.ladder.ladder}: {len(loaded.ladder.rungs)} rungs, blocks: {loaded.ladder.repeats_label}; "
        f"lenses {loaded.ladder.lenses.use if loaded.ladder.lenses else []}"
    )
    say("starting the embedded S3 server (SeaweedFS)")
    with EmbeddedS3(STATE_DIR / "s3", bucket=storage.bucket) as s3:
        say(f"S3 at {s3.endpoint_url}, bucket {storage.bucket}")
        env = airflow_env(STATE_DIR / "airflow", s3.env(), s3.airflow_conn_uri_json())
        os.environ.update(env)
        say("preparing Airflow (db migrate, pools)")
        prepare(STATE_DIR / "airflow", env)
        dag_id = f"traceladder-{loaded.ladder.ladder}"
        say(f"running DAG {dag_id} with dag.test(); each rung's log follows")
        from traceladder.embedded.local_airflow import dag_test

        dag_run = dag_test(dag_id)
        say(f"DAG run {dag_run.run_id}: {dag_run.state}")
        return _report(s3, storage.prefix, loaded.ladder.ladder, started, dag_run, list_keys)


def where_the_rest_is(
    bucket: str, run_prefix: str, n_objects: int, local_report: str, latest_line: str, wall_s: float, ladder: str
) -> list[str]:
    """What `make demo` prints after the summary: where the rest of the run is, not every key."""
    keys = "make keys" + ("" if ladder == DEFAULT_LADDER else f" LADDER={ladder}")
    return [
        "",
        f"report: {local_report}",
        f"S3: s3://{bucket}/{run_prefix}/ ({n_objects} objects, kept in .traceladder/s3; `{keys}` lists them)",
        latest_line,
        "browse it: make up (the Airflow UI's Ladders page)",
        f"demo wall time: {wall_s:.0f} s",
    ]


def _report(s3, prefix: str, ladder: str, started: float, dag_run, list_keys: bool = False) -> int:
    from traceladder.core import layout
    from traceladder.core.documents import IndexEntry
    from traceladder.storage.artifacts import S3ArtifactStore, ladder_prefix, safe_key_part

    store = S3ArtifactStore(s3.client(), s3.bucket, prefix, ladder)
    latest_key = f"{ladder_prefix(prefix, ladder)}/{layout.LATEST_OBJECT}"
    latest = IndexEntry.from_json(store.get_bytes(latest_key), latest_key) if store.exists(latest_key) else None
    if latest is None or latest.run_id != safe_key_part(dag_run.run_id) or not latest.summary_json:
        print(f"DAG run {dag_run.run_id} ended {dag_run.state} and published no summary", file=sys.stderr)
        return 1
    if not latest.summary_md:
        print(f"DAG run {dag_run.run_id} published no summary.md", file=sys.stderr)
        return 1
    # the table the summary task rendered from the summary it stored (summary/publish.py)
    summary_md = store.get_verified(latest.summary_md).decode()
    run_prefix, keys = _run_keys(store, latest.summary_json)
    local = STATE_DIR / "demo" / ladder / run_prefix.rsplit("/", 1)[-1]
    local.mkdir(parents=True, exist_ok=True)
    for key in keys:
        if f"/{layout.SUMMARY_FOLDER}/" in key or key.endswith((layout.METRICS_OBJECT, layout.ANALYSIS_OBJECT, ".csv")):
            target = local / key[len(run_prefix) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(store.get_bytes(key))
    if list_keys:
        _print_keys(s3.bucket, run_prefix, keys)
    print(summary_md)
    latest_line = f"latest: s3://{s3.bucket}/{latest_key} -> {latest.summary_json} (local copy: {local})"
    report = str(local / layout.SUMMARY_FOLDER / layout.REPORT_HTML)
    wall_s = time.monotonic() - started
    print("\n".join(where_the_rest_is(s3.bucket, run_prefix, len(keys), report, latest_line, wall_s, ladder)))
    return 0 if str(dag_run.state) == "success" else 1


def list_run_keys(ladder: str = DEFAULT_LADDER, run_id: str | None = None) -> int:
    """Print every S3 key of a stored run of `ladder` (the latest, or `run_id`) from the demo's
    S3 data under .traceladder/s3, starting the embedded server for the listing only."""
    from traceladder.config import find_ladder, load_ladder
    from traceladder.core import layout
    from traceladder.core.documents import IndexEntry
    from traceladder.embedded.embedded_s3 import EmbeddedS3
    from traceladder.storage.artifacts import S3ArtifactStore, ladder_prefix

    loaded = load_ladder(find_ladder(ladder))
    storage = loaded.cluster.storage
    if not (STATE_DIR / "s3").is_dir():
        print(f"no S3 data under {STATE_DIR / 's3'}: run `make demo` first", file=sys.stderr)
        return 1
    with EmbeddedS3(STATE_DIR / "s3", bucket=storage.bucket) as s3:
        store = S3ArtifactStore(s3.client(), s3.bucket, storage.prefix, ladder)
        base = ladder_prefix(storage.prefix, ladder)
        entry_key = f"{base}/{layout.LATEST_OBJECT}" if run_id is None else layout.entry_key(base, run_id)
        if not store.exists(entry_key):
            what = f"run {run_id}" if run_id else "published run"
            print(f"no {what} of ladder {ladder} in s3://{s3.bucket}/{base}/ (.traceladder/s3)", file=sys.stderr)
            return 1
        entry = IndexEntry.from_json(store.get_bytes(entry_key), entry_key)
        if not entry.summary_json:
            print(f"run {entry.run_id} of ladder {ladder} published no summary", file=sys.stderr)
            return 1
        _print_keys(s3.bucket, *_run_keys(store, entry.summary_json))
    return 0


def _run_keys(store, summary_key: str) -> tuple[str, list[str]]:
    """A published run's prefix (its summary key less the summary folder) and every key under it."""
    from traceladder.core import layout

    run_prefix = summary_key.rsplit(f"/{layout.SUMMARY_FOLDER}/", 1)[0]
    return run_prefix, store.list(run_prefix + "/")


def _print_keys(bucket: str, run_prefix: str, keys: list[str]) -> None:
    print(f"S3 objects under s3://{bucket}/{run_prefix}/ ({len(keys)}):")
    for key in keys:
        print(f"  {key}")
