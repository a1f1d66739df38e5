"""The cold path's deadline (runner/rung.execute): the workload's whole group gets SIGTERM, and
SIGKILL 5 s later if it lingers (core.process_group.end_group); the rung reports the timeout, the
log says so, and the workload's orphan record goes once it is reaped."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from traceladder.runner import orphans
from traceladder.runner.forkserver_client import WorkloadRun
from traceladder.runner.rung import execute


@pytest.fixture(autouse=True)
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "records"
    monkeypatch.setenv(orphans.ENV_DIR, str(folder))
    return folder


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_workload_past_its_deadline_gets_sigterm(tmp_path: Path, records: Path) -> None:
    log = tmp_path / "log.txt"
    t0 = time.monotonic()
    code, timed_out = execute(WorkloadRun(["sh", "-c", "echo started; exec sleep 300"], {}, tmp_path, log, 1.0))
    assert (code, timed_out) == (-signal.SIGTERM, True)
    assert time.monotonic() - t0 < 5  # it obeyed SIGTERM: no 5 s grace spent
    text = log.read_text()
    assert "started" in text and "deadline of 1 s reached; the rung was stopped" in text
    assert not list(records.glob("*.json")), "the reaped workload's record stayed"


def test_a_workload_ignoring_sigterm_is_killed_with_its_group_after_the_grace(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # the leader and its child ignore SIGTERM; the child is not waited for: only the group's SIGKILL ends it
    script = f"trap '' TERM; sleep 300 & echo $! > {pidfile}; while :; do sleep 0.1; done"
    t0 = time.monotonic()
    code, timed_out = execute(WorkloadRun(["sh", "-c", script], {}, tmp_path, tmp_path / "log.txt", 1.0))
    took = time.monotonic() - t0
    assert (code, timed_out) == (-signal.SIGKILL, True)
    assert 1.0 + 5.0 <= took < 1.0 + 5.0 + 5.0  # the deadline, the 5 s grace, then SIGKILL
    child = int(pidfile.read_text())
    until = time.monotonic() + 5
    while _alive(child) and time.monotonic() < until:
        time.sleep(0.05)
    assert not _alive(child), "the workload's child outlived the deadline"
