"""The shared run index the summary and the UI both read (summary/index.py writes it,
summary/collect.py reads it by core/documents.py's index rule): legacy and per-run entries, strays
skipped, a bad legacy index refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceladder.core.documents import SummaryRef
from traceladder.core.errors import ArtifactStoreError
from traceladder.storage.artifacts import DirArtifactSink, ladder_prefix
from traceladder.summary import collect, index


def _write(store: DirArtifactSink, key: str, doc: object) -> None:
    store.put_bytes(key, json.dumps(doc).encode(), "application/json")


def test_run_index_reads_legacy_and_per_run_entries_and_skips_strays(tmp_path: Path) -> None:
    store = DirArtifactSink(tmp_path, "tl", "lad")
    base = ladder_prefix("tl", "lad")
    _write(store, f"{base}/index.json", {"runs": [{"run_id": "old", "published_at": "2026-01-01"}, "stray"]})
    index.put_entry(store, base, SummaryRef(run_id="new", logical_date="2026-02-01"))
    index.put_entry(store, base, SummaryRef(run_id="whatif", logical_date="2026-03-01", params={"rungs": ["a"]}))
    _write(store, f"{base}/runs/junk.json", ["not", "an", "entry"])
    entries = collect.list_entries(store, base)
    assert [e.run_id for e in entries] == ["old", "new", "whatif"]
    assert [e.is_what_if for e in entries] == [False, False, True]
    newest = index.newest_full(entries)
    assert newest is not None and newest.run_id == "new"


def test_run_index_refuses_a_legacy_index_without_runs(tmp_path: Path) -> None:
    store = DirArtifactSink(tmp_path, "tl", "lad")
    base = ladder_prefix("tl", "lad")
    _write(store, f"{base}/index.json", {"runs": "nope"})
    with pytest.raises(ArtifactStoreError, match="has no runs list"):
        collect.list_entries(store, base)


def test_the_index_rule_leaves_out_rows_without_a_run_id_and_skips_bad_ones_only_when_asked() -> None:
    from traceladder.core.documents import DocumentError, entries_from, legacy_rows

    rows = legacy_rows({"runs": [{"run_id": "a", "published_at": "1"}, {"run_id": ""}, {"run_id": 3}]}, "i.json")
    rows += [({"run_id": "b", "logical_date": 5}, "runs/b.json"), ({"run_id": "a", "published_at": "2"}, "runs/a.json")]
    # an empty or non-string run_id is a stray object; a later row of the same run wins
    assert [(e.run_id, e.published_at) for e in entries_from(rows, skip_bad=True)] == [("a", "2")]
    with pytest.raises(DocumentError, match=r"^runs/b.json: logical_date: expected str, got int$"):
        entries_from(rows)
    assert legacy_rows(None, "i.json") == []  # no older index: nothing to read
