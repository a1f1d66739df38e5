"""The ladder's index of published runs: one object per run, `<ladder>/runs/<run_id>.json`, found
by listing. Each publish writes only its own object, so concurrent publishes of one ladder (the
weekly DAG and a triggered run) cannot drop each other's entry, as a read-modify-write of one
shared `index.json` could. Entries of the older `index.json` are still read.

`latest.json` names the newest full run (not a what-if run) by logical date. It is rewritten from
the listing and checked again after each write, so a late publish of an older run never leaves it
pointing backwards, whatever order concurrent publishers finish in."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from traceladder.storage.artifacts import ArtifactNotFoundError, ArtifactSink
from traceladder.storage.layout import LATEST_OBJECT, LEGACY_INDEX, RUNS_FOLDER
from traceladder.storage.layout import entry_key as layout_entry_key
from traceladder.summary.collect import read_many

LATEST_ROUNDS = 5


def entry_key(ladder_prefix: str, run_id: str) -> str:
    return layout_entry_key(ladder_prefix, run_id)


def order_key(entry: dict[str, Any]) -> tuple[str, str]:
    """Runs in logical-date order (entries from before logical dates use their publish time)."""
    return (str(entry.get("logical_date") or entry.get("published_at") or ""), str(entry.get("published_at") or ""))


def is_full(entry: dict[str, Any]) -> bool:
    return not entry.get("params")


def list_entries(store: ArtifactSink, ladder_prefix: str) -> list[dict[str, Any]]:
    """Every published run of the ladder, oldest first."""
    found: dict[str, dict[str, Any]] = {}
    legacy = f"{ladder_prefix}/{LEGACY_INDEX}"
    if store.exists(legacy):
        for entry in json.loads(store.get_bytes(legacy)).get("runs", []):
            found[entry["run_id"]] = entry

    def read(key: str) -> dict[str, Any] | None:
        try:
            return json.loads(store.get_bytes(key))
        except ArtifactNotFoundError:
            return None  # removed between the listing and the read

    keys = [k for k in store.list(f"{ladder_prefix}/{RUNS_FOLDER}") if k.endswith(".json")]
    for entry in read_many(read, keys):  # one GET per run: a year is 52, read 8 at a time
        if entry is not None:
            found[entry["run_id"]] = entry
    return sorted(found.values(), key=order_key)


def put_entry(store: ArtifactSink, ladder_prefix: str, summary_ref: dict[str, Any]) -> dict[str, Any]:
    entry = {"schema": 2, **summary_ref, "published_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    store.put_bytes(entry_key(ladder_prefix, entry["run_id"]), json.dumps(entry, indent=1).encode(), "application/json")
    return entry


def newest_full(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    full = [e for e in entries if is_full(e)]
    return max(full, key=order_key) if full else None


def _read_latest(store: ArtifactSink, key: str) -> dict[str, Any] | None:
    try:
        return json.loads(store.get_bytes(key))
    except ArtifactNotFoundError:
        return None


def update_latest(store: ArtifactSink, ladder_prefix: str) -> dict[str, Any] | None:
    """Point latest.json at the newest full run, and check again after writing: a concurrent
    publisher that read an older listing may have written after us; the last one to check
    always sees every entry written before its own latest.json write."""
    key = f"{ladder_prefix}/{LATEST_OBJECT}"
    newest = None
    for _ in range(LATEST_ROUNDS):
        newest = newest_full(list_entries(store, ladder_prefix))
        if newest is None:
            return None
        current = _read_latest(store, key)
        if current is not None and current.get("run_id") == newest["run_id"]:
            return current
        if current is not None and order_key(current) > order_key(newest):
            return current  # points at a newer run than this listing knows: leave it
        store.put_bytes(key, json.dumps(newest, indent=1).encode(), "application/json")
    return newest


def publish(store: ArtifactSink, ladder_prefix: str, summary_ref: dict[str, Any]) -> dict[str, Any]:
    """Record the run (its own object), then move latest.json if it is the newest full run."""
    entry = put_entry(store, ladder_prefix, summary_ref)
    if is_full(entry):
        update_latest(store, ladder_prefix)
    return entry
