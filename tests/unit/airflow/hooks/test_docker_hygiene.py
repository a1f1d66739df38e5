"""Spool housekeeping (issue 30 item 5), on real folders and a real sink: a flush leaves no empty
folders, and the preflight's step reports a sealed spool older than ``spool.max_age``, uploads it
and removes it once stored (a failed upload keeps it)."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

from traceladder.airflow.hooks.docker_hygiene import housekeep_spool, old_sealed_spools
from traceladder.storage.artifacts import DirArtifactSink
from traceladder.storage.spool import SpoolingSink

PREFIX, LADDER = "traceladder", "proxy-local"


def _spool_rung(spool: SpoolingSink, run: str, rung: str, age_days: float) -> str:
    prefix = f"{PREFIX}/{LADDER}/{run}/{rung}"
    spool.put_bytes(f"{prefix}/traces/rank0.json", b"{}" * 100)
    spool.put_json(f"{prefix}/metrics.json", {"status": "ok"})
    spool.write_manifest(prefix)
    spool.seal(prefix)
    marker = spool.folder(prefix).with_name(rung + ".complete")
    then = time.time() - age_days * 86400
    os.utime(marker, (then, then))
    return prefix


def _dirs(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir())


def test_a_flush_leaves_no_empty_folders(tmp_path: Path) -> None:
    target = DirArtifactSink(tmp_path / "s3", PREFIX, LADDER)
    spool = SpoolingSink(target, tmp_path / "spool", budget_s=0)
    first = _spool_rung(spool, "run1", "a.none.r0", 0)
    second = _spool_rung(spool, "run1", "b.none.r0", 0)
    assert spool.flush(first) == 3
    assert _dirs(tmp_path / "spool")[0] == PREFIX  # b's spool keeps the run folder
    assert spool.flush(second) == 3
    assert list((tmp_path / "spool").iterdir()) == []
    assert target.get_verified(f"{second}/metrics.json")


def test_an_old_sealed_spool_is_reported_uploaded_and_removed(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    target = DirArtifactSink(tmp_path / "s3", PREFIX, LADDER)
    spool = SpoolingSink(target, root, budget_s=0)
    old = _spool_rung(spool, "run1", "old.none.r0", 9)
    young = _spool_rung(spool, "run2", "young.none.r0", 1)
    (root / "leftover" / "empty").mkdir(parents=True)
    assert [p for p, _ in old_sealed_spools(root, timedelta(days=7))] == [old]

    lines = housekeep_spool(root, timedelta(days=7), spool.flush, host="h1")
    assert len(lines) == 1
    assert lines[0].startswith(f"host h1: spool {root / old} sealed 9.0 days ago")
    assert lines[0].endswith("uploaded 3 objects and removed it")
    assert target.get_verified(f"{old}/traces/rank0.json") == b"{}" * 100
    assert not (root / old).exists() and (root / young / "metrics.json").exists()
    assert _dirs(root) == [  # only the young spool's folders are left
        PREFIX,
        f"{PREFIX}/{LADDER}",
        f"{PREFIX}/{LADDER}/run2",
        f"{PREFIX}/{LADDER}/run2/young.none.r0",
        f"{PREFIX}/{LADDER}/run2/young.none.r0/traces",
    ]


def test_a_failed_upload_keeps_the_spool_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    (tmp_path / "s3").write_text("a file where the store's folder should be")
    spool = SpoolingSink(DirArtifactSink(tmp_path / "s3", PREFIX, LADDER), root, budget_s=0, log=lambda _: None)
    old = _spool_rung(spool, "run1", "old.none.r0", 30)
    lines = housekeep_spool(root, timedelta(days=7), spool.flush, host="h1")
    assert len(lines) == 1 and "upload failed, kept" in lines[0]
    assert (root / old / "metrics.json").exists()
    assert [p for p, _ in old_sealed_spools(root, timedelta(days=7))] == [old]
