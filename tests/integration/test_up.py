"""`traceladder up` (what `make up` runs) as a user runs it: a subprocess in the foreground that
prints the URL and the login; the Ladders page lists the ladders; its trigger endpoint really runs
a ladder under the scheduler; Ctrl-C (SIGINT) stops every process it started; a second `up` on the
same folder reuses the first one's database, logins and runs."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.stack_harness import write_ladders
from traceladder.embedded.local_stack import free_port

pytestmark = pytest.mark.scheduler

LADDER = "up-tiny"


def _start(state: Path, port: int, env: dict[str, str]) -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "traceladder.cli", "up", "--dir", str(state), "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    info: dict[str, str] = {}
    deadline = time.monotonic() + 600
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(
                f"traceladder up exited {proc.wait()} before it was ready: {''.join(lines)[-2000:]}", pytrace=False
            )
        lines.append(line)
        if m := re.match(r"(\w+):\s+(\S+)", line):
            info[m.group(1)] = m.group(2)
        if line.startswith("Login:"):
            info["password"] = re.search(r"admin / (\S+)", line).group(1)
            info["output"] = "".join(lines)
            return proc, info
    proc.kill()
    pytest.fail("traceladder up printed no login within 600 s", pytrace=False)


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the foreground process
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return out


def _listening(port: int) -> bool:
    """Something accepts connections there (a bind test would trip over TIME_WAIT sockets)."""
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _processes_in(home: Path) -> list[int]:
    found = []
    for pid_dir in Path("/proc").iterdir():
        try:
            if pid_dir.name.isdigit() and Path(os.readlink(pid_dir / "cwd")).is_relative_to(home):
                found.append(int(pid_dir.name))
        except OSError:
            continue
    return found


def test_up_serves_the_ladders_page_runs_a_trigger_stops_on_ctrl_c_and_restarts(tmp_path: Path) -> None:
    ladders = write_ladders(tmp_path / "ladders", {LADDER: {}})
    state = tmp_path / "state"
    env = {
        **os.environ,
        "TRACELADDER_LADDERS_DIR": str(ladders),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "include"),
    }
    port = free_port()
    proc, info = _start(state, port, env)
    try:
        url = info["Airflow"]
        assert url == f"http://127.0.0.1:{port}" and info["Ladders"] == f"{url}/plugin/ladders"
        token = httpx.post(
            f"{url}/auth/token", json={"username": "admin", "password": info["password"]}, timeout=120
        ).json()["access_token"]
        api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120)
        page = api.get("/traceladder/", headers={"Accept": "text/html"})
        assert page.status_code == 200 and LADDER in page.text
        started = api.post(
            "/traceladder/trigger", json={"ladder": LADDER, "rungs": ["baseline"], "lens": "none", "repeats": 1}
        )
        assert started.status_code == 200, started.text
        run_id = started.json()["dag_run_id"]
        deadline = time.monotonic() + 900
        while (state_now := api.get(f"/api/v2/dags/traceladder-trigger/dagRuns/{run_id}").json()["state"]) not in (
            "success",
            "failed",
        ):
            assert time.monotonic() < deadline, f"run {run_id} still {state_now}"
            time.sleep(3)
        assert state_now == "success"
        s3_port = int(info["S3"].rsplit(":", 1)[1])
    finally:
        out = _stop(proc)
    assert "[up] stopped" in out
    assert not _listening(port) and not _listening(s3_port)
    assert _processes_in(state) == []

    proc, again = _start(state, port, env)
    try:
        assert again["password"] == info["password"]  # the same logins
        token = httpx.post(
            f"{url}/auth/token", json={"username": "admin", "password": again["password"]}, timeout=120
        ).json()["access_token"]
        runs = httpx.get(
            f"{url}/api/v2/dags/traceladder-trigger/dagRuns", headers={"Authorization": f"Bearer {token}"}, timeout=120
        ).json()
        assert [r["state"] for r in runs["dag_runs"] if r["dag_run_id"] == run_id] == ["success"]  # the same database
    finally:
        _stop(proc)
