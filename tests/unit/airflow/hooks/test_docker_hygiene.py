"""Spool housekeeping (issue 30 item 5), on real folders and a real sink: a flush leaves no empty
folders, and the preflight's step reports a sealed spool older than ``spool.max_age``, uploads it
and removes it once stored (a failed upload keeps it)."""

from __future__ import annotations

import json
import os
import re
import time
from datetime import timedelta
from pathlib import Path

import pytest

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


# ---- the preflight's answers as classes (issue 57): the check container's line, the image, the
# host's containers; a fake of docker-py's APIClient answers as the daemon does


class _Cli:
    def __init__(self, line: str, rows: list[dict] | None = None) -> None:
        self.line, self.rows, self.removed = line, rows or [], []

    def ping(self) -> bool:
        return True

    def version(self) -> dict:
        return {"Version": "28.2.2"}

    def inspect_image(self, image: str) -> dict:
        return {"Id": "sha256:" + "1" * 64, "RepoDigests": ["registry/x@sha256:" + "2" * 64]}

    def create_host_config(self, **kwargs: object) -> dict:
        return dict(kwargs)

    def create_container(self, **kwargs: object) -> dict:
        return {"Id": "c1"}

    def start(self, container: str) -> None:
        pass

    def wait(self, container: str, timeout: int) -> dict:
        return {"StatusCode": 0}

    def logs(self, container: str, stdout: bool, stderr: bool) -> bytes:
        return self.line.encode() if stdout else b""

    def remove_container(self, container: str, force: bool) -> None:
        self.removed.append(container)

    def containers(self, all: bool, filters: dict) -> list[dict]:
        return self.rows


def _preflight(cli: _Cli, gpus: int | None = None) -> object:
    from traceladder.airflow.hooks.docker_hygiene import preflight

    return preflight(cli, host="h1", url="unix://", image="x", devices=[], min_free_gb=1, labels={}, gpus_per_node=gpus)


def test_the_preflight_answers_a_host_check() -> None:
    from traceladder.airflow.hooks.docker_hygiene import GpuCheck, HostCheck

    gpus = {"tool": "amd-smi", "count": 2, "busy": [], "error": None}
    found = _preflight(_Cli(json.dumps({"missing": [], "free_gb": 50.5, "gpus": gpus})), gpus=2)
    assert isinstance(found, HostCheck)
    assert (found.daemon, found.image_id, found.image_digest) == (
        "28.2.2",
        "sha256:" + "1" * 64,
        "registry/x@sha256:" + "2" * 64,
    )
    assert found.image == found.image_id and found.free_gb == 50.5
    assert found.gpus == GpuCheck(tool="amd-smi", count=2)
    assert json.loads(found.to_json())["gpus"] == gpus  # the task log's line


def test_the_gpu_check_refuses_a_busy_or_short_or_blind_host() -> None:
    from traceladder.airflow.hooks.docker_hygiene import HostCheckError

    busy = [{"gpu": 0, "pid": 4242, "name": "python3"}, {"gpu": None, "pid": "17", "name": "rccl"}]
    answers = {
        "GPU preflight: GPUs are busy: python3 (pid 4242) on GPU 0, rccl (pid 17) on GPU None": {
            "tool": "amd-smi",
            "count": 2,
            "busy": busy,
            "error": None,
        },
        "GPU preflight: rocm-smi sees 1 GPU(s), GPUS_PER_NODE is 2": {"tool": "rocm-smi", "count": 1, "busy": []},
        "GPU preflight: no GPU is visible in the rung's container (neither is on PATH)": {
            "tool": None,
            "count": None,
            "busy": [],
            "error": "neither is on PATH",
        },
    }
    for message, gpus in answers.items():
        with pytest.raises(HostCheckError, match=rf"^host h1: {re.escape(message)}$"):
            _preflight(_Cli(json.dumps({"missing": [], "free_gb": 50, "gpus": gpus})), gpus=2)
    with pytest.raises(HostCheckError, match=r"^host h1: GPU preflight: no GPU is visible in the rung's container$"):
        _preflight(_Cli(json.dumps({"missing": [], "free_gb": 50})), gpus=2)  # an image without the GPU part


def test_an_answer_that_does_not_read_is_one_line() -> None:
    from traceladder.airflow.hooks.docker_hygiene import HostCheckError

    with pytest.raises(HostCheckError, match=r"^host h1: the check container could not run \(.*free_gb: missing\)$"):
        _preflight(_Cli('{"missing": []}'))
    with pytest.raises(HostCheckError, match=r"^host h1: devices missing in the container: \['/dev/kfd'\]$"):
        _preflight(_Cli('{"missing": ["/dev/kfd"], "free_gb": 50}'))


def test_managed_containers_are_read_from_the_daemons_rows() -> None:
    from traceladder.airflow.hooks.docker_hygiene import ManagedContainer, remove_orphans

    rows = [
        {"Id": "a" * 64, "Names": ["/traceladder-x"], "State": "exited", "Labels": {"traceladder.run": "r1"}},
        {"Id": "b" * 64, "Names": None, "State": "running", "Labels": None},
        {"Id": "c" * 64, "State": "dead"},
    ]
    assert ManagedContainer.listed(rows[0]) == ManagedContainer(
        "a" * 64, "traceladder-x", "exited", {"traceladder.run": "r1"}
    )
    assert ManagedContainer.listed(rows[1]) == ManagedContainer("b" * 64, "b" * 12, "running", {})
    cli = _Cli("", rows)
    assert remove_orphans(cli, "h1", keep=["c" * 64]) == ["traceladder-x"]  # running ones stay
    assert cli.removed == ["a" * 64]
