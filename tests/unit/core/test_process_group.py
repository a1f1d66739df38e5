"""A server's process group (traceladder.core.process_group), on real processes: the group's children
go down with the leader, a leader that ignores SIGTERM is killed after the grace period."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from traceladder.core.process_group import end_group, group_alive, kill_group, start_group, stop_group


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0) until its parent (init, here) reaps it
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _child_pid(path: Path) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text.strip():
            return int(text)
        time.sleep(0.05)
    raise AssertionError(f"{path} never got the child's pid")


def test_the_group_goes_down_with_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # the child ignores SIGTERM and is not waited for: only the group's SIGKILL reaches it
    script = f"trap '' TERM; sleep 300 & echo $! > {pidfile}; exit 0"
    with open(tmp_path / "log", "ab") as log:
        proc = start_group(["sh", "-c", script], log, tmp_path)
    child = _child_pid(pidfile)
    proc.wait(timeout=10)  # the leader is gone; its child still runs in the group
    assert os.getpgid(child) == proc.pid and _alive(child)
    assert stop_group(proc, grace_s=0.5)
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _start_leader_ignoring_sigterm(tmp_path: Path) -> subprocess.Popen[bytes]:
    """A group leader that has set its SIGTERM trap (so only SIGKILL ends it)."""
    ready = tmp_path / "ready"
    with open(tmp_path / "log", "ab") as log:
        proc = start_group(["sh", "-c", f"trap '' TERM; touch {ready}; while :; do sleep 0.1; done"], log, tmp_path)
    while not ready.exists():
        time.sleep(0.05)
    return proc


def test_a_leader_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    proc = _start_leader_ignoring_sigterm(tmp_path)
    t0 = time.monotonic()
    assert stop_group(proc, grace_s=1.0)
    assert 1.0 <= time.monotonic() - t0 < 10
    assert proc.returncode == -signal.SIGKILL


def test_a_recorded_group_is_found_and_killed_by_its_id(tmp_path: Path) -> None:
    """What the local backend's orphan handling does with a recorded process group id."""
    pidfile = tmp_path / "child.pid"
    with open(tmp_path / "log", "ab") as log:
        proc = start_group(["sh", "-c", f"sleep 300 & echo $! > {pidfile}; wait"], log, tmp_path)
    child = _child_pid(pidfile)
    assert group_alive(proc.pid)
    assert kill_group(proc.pid)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _reaped(proc: subprocess.Popen[bytes], waits: list[float]) -> Callable[[float], bool]:
    """end_group's `ended`: the leader's exit status, noting each wait it was given."""

    def ended(timeout_s: float) -> bool:
        waits.append(timeout_s)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    return ended


def test_end_group_stops_at_sigterm_when_the_group_obeys(tmp_path: Path) -> None:
    with open(tmp_path / "log", "ab") as log:
        proc = start_group(["sleep", "300"], log, tmp_path)
    waits: list[float] = []
    assert end_group(proc.pid, _reaped(proc, waits), grace_s=5.0, kill_wait_s=5.0)
    assert proc.returncode == -signal.SIGTERM and waits == [5.0]  # no SIGKILL, no second wait


def test_end_group_sigkills_after_the_grace_and_waits_again(tmp_path: Path) -> None:
    proc = _start_leader_ignoring_sigterm(tmp_path)
    waits: list[float] = []
    t0 = time.monotonic()
    assert end_group(proc.pid, _reaped(proc, waits), grace_s=0.5, kill_wait_s=5.0)
    assert 0.5 <= time.monotonic() - t0 < 5
    assert proc.returncode == -signal.SIGKILL and waits == [0.5, 5.0]


def test_end_group_still_waits_when_the_group_is_gone(tmp_path: Path) -> None:
    """The warm launcher may have reaped the workload before our signal: its exit reply still comes."""
    with open(tmp_path / "log", "ab") as log:
        proc = start_group(["true"], log, tmp_path)
    proc.wait(timeout=10)  # reaped: no group left to signal
    assert not group_alive(proc.pid)
    asked: list[float] = []

    def reported(timeout_s: float) -> bool:
        asked.append(timeout_s)
        return True

    assert end_group(proc.pid, reported) and asked == [5.0]
