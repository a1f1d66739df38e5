"""No orphaned workload on the local backend (issue 27): the runner starts the proxy in a session
of its own, so a SIGKILLed runner leaves it running; the next rung's preflight stops it
(runner/orphans.py), and leaves a workload whose runner still runs alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from testkit.tiny_proxy import TINY_MODEL

from traceladder.config.loader import CONFIG_DIR

REPO = Path(__file__).resolve().parents[2]


def _ladder(folder: Path, train_iters: int) -> Path:
    doc = {
        "schema": 1,
        "extends": str(CONFIG_DIR / "ladders" / "proxy-local.yaml"),
        "ladder": f"orphans-{train_iters}",
        "warmup_iters": 1,
        "timeout_s": 300,
        "base": {"model_args": {**TINY_MODEL, "train_iters": train_iters}},
        "rungs": [{"name": "baseline"}],
        "lenses": {"rung": "baseline", "use": ["none"], "every_rung": None},
    }
    path = folder / f"orphans-{train_iters}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _run_rung(ladder: Path, out: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "traceladder.cli", "run-rung", "--ladder", str(ladder), "--rung", "baseline"]
    return subprocess.Popen(
        [*argv, "--lens", "none", "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_next_rung_stops_a_workload_whose_runner_was_killed(tmp_path: Path) -> None:
    records = tmp_path / "workloads"
    env = {**os.environ, "PYTHONPATH": str(REPO / "include"), "TRACELADDER_WORKLOADS_DIR": str(records)}
    runner = _run_rung(_ladder(tmp_path, 5000), tmp_path / "out1", env)
    pgid = None
    try:
        deadline = time.monotonic() + 60
        while pgid is None and time.monotonic() < deadline:
            found = list(records.glob("*.json")) if records.is_dir() else []
            pgid = json.loads(found[0].read_text())["pgid"] if found else None
            time.sleep(0.2)
        assert pgid is not None, "the runner recorded no workload"
        assert json.loads(next(records.glob("*.json")).read_text())["runner_pid"] == runner.pid
        # Held still first: an orphan dies by itself at its first output line after its runner (the
        # pipe's reader) is gone, ~2-3 s here, sooner than a loaded machine starts the next rung.
        # A stopped group is as alive to the sweep as a running one, and SIGKILL ends it alike.
        os.killpg(pgid, signal.SIGSTOP)
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=10)
        time.sleep(1)
        assert _alive(pgid), "the workload died with its runner: nothing to test"  # the orphan exists
        # the next rung on this host: its preflight stops the orphan before its own workload starts
        second = _run_rung(_ladder(tmp_path, 8), tmp_path / "out2", env)
        out, _ = second.communicate(timeout=120)
        assert second.returncode == 0, out[-2000:]
        assert f"stopped an orphaned workload (process group {pgid}) whose runner {runner.pid} is gone" in out
        deadline = time.monotonic() + 10
        while _alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(pgid)
        assert list(records.glob("*.json")) == []  # the second rung's own record went when it was reaped
    finally:
        if runner.poll() is None:
            runner.kill()
        if pgid is not None and _alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


def test_a_workload_whose_runner_lives_is_left_alone(tmp_path: Path, monkeypatch) -> None:
    from traceladder.runner import orphans

    monkeypatch.setenv("TRACELADDER_WORKLOADS_DIR", str(tmp_path))
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        path = orphans.record(sleeper.pid)  # this test process is the live runner
        assert path is not None and orphans.stop_orphans() == [] and _alive(sleeper.pid) and path.exists()
        doc = json.loads(path.read_text())
        path.write_text(json.dumps({**doc, "runner_start": "0"}))  # a runner whose pid was reused: gone
        assert orphans.stop_orphans() == [sleeper.pid] and not path.exists()
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
