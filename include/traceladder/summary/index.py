"""The ladder's index of published runs: one object per run, `<ladder>/runs/<run_id>.json`, found
by listing. Each publish writes only its own object, so concurrent publishes of one ladder (the
weekly DAG and a triggered run) cannot drop each other's entry, as a read-modify-write of one
shared `index.json` could. Entries of the older `index.json` are still read.

`latest.json` names the newest full run (not a what-if run) by logical date. It is rewritten from
the listing and checked again after each write, so a late publish of an older run never leaves it
pointing backwards, whatever order concurrent publishers finish in.

The entries are read by `summary/collect.list_entries` (the index's one reading rule), which
this module's check after a write uses too."""

from __future__ import annotations

from datetime import datetime, timezone

from traceladder.core.documents import IndexEntry, SummaryRef
from traceladder.core.layout import LATEST_OBJECT
from traceladder.core.layout import entry_key as layout_entry_key
from traceladder.storage.artifacts import ArtifactNotFoundError, ArtifactSink
from traceladder.summary.collect import IndexReads, list_entries

LATEST_ROUNDS = 5


def entry_key(ladder_prefix: str, run_id: str) -> str:
    return layout_entry_key(ladder_prefix, run_id)


def put_entry(store: ArtifactSink, ladder_prefix: str, summary_ref: SummaryRef) -> IndexEntry:
    entry = IndexEntry.of(summary_ref, datetime.now(timezone.utc).isoformat(timespec="seconds"))
    store.put_bytes(entry_key(ladder_prefix, entry.run_id), entry.to_json().encode(), "application/json")
    return entry


def newest_full(entries: list[IndexEntry]) -> IndexEntry | None:
    full = [e for e in entries if not e.is_what_if]
    return max(full, key=IndexEntry.order_key) if full else None


def _read_latest(store: ArtifactSink, key: str) -> IndexEntry | None:
    try:
        return IndexEntry.from_json(store.get_bytes(key), key)
    except ArtifactNotFoundError:
        return None


def update_latest(store: ArtifactSink, ladder_prefix: str) -> IndexEntry | None:
    """Point latest.json at the newest full run, and check again after writing: a concurrent
    publisher that read an older listing may have written after us; the last one to check
    always sees every entry written before its own latest.json write."""
    key = f"{ladder_prefix}/{LATEST_OBJECT}"
    newest = None
    seen: IndexReads = {}  # a check after a write reads only the entries written since
    for _ in range(LATEST_ROUNDS):
        newest = newest_full(list_entries(store, ladder_prefix, seen))
        if newest is None:
            return None
        current = _read_latest(store, key)
        if current is not None and current.run_id == newest.run_id:
            return current
        if current is not None and current.order_key() > newest.order_key():
            return current  # points at a newer run than this listing knows: leave it
        store.put_bytes(key, newest.to_json().encode(), "application/json")
    return newest


def publish(store: ArtifactSink, ladder_prefix: str, summary_ref: SummaryRef) -> IndexEntry:
    """Record the run (its own object), then move latest.json if it is the newest full run."""
    entry = put_entry(store, ladder_prefix, summary_ref)
    if not entry.is_what_if:
        update_latest(store, ladder_prefix)
    return entry
