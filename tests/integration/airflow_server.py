"""A real ``airflow api-server`` for tests: its own temporary AIRFLOW_HOME, a migrated SQLite
database, the repo's DAGs serialized into it, this repo's plugins, SimpleAuthManager with users
``admin`` (Admin) and ``viewer`` (Viewer) whose passwords the test chooses, on a free loopback port.

    server = AirflowApiServer(home, extra_env={"AIRFLOW_CONN_TRACELADDER_S3": ...})
    server.start()            # db migrate, dags reserialize, api-server, poll /api/v2/monitor/health
    server.token("admin")     # a JWT from POST /auth/token
    server.stop()             # SIGTERM, then SIGKILL of its process group

The server's environment is the test process's minus every ``AIRFLOW*``, ``TRACELADDER_*`` and
``AWS_*`` variable, plus what is set here and in ``extra_env``: nothing leaks in from other tests,
and S3 is reachable only through the connection the test gives.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_BIN = str(Path(sys.executable).with_name("airflow"))
USERS = {"admin": "admin", "viewer": "viewer"}  # user: role


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class AirflowServerError(RuntimeError):
    pass


class AirflowApiServer:
    def __init__(
        self,
        home: Path,
        extra_env: dict[str, str] | None = None,
        startup_timeout_s: float = 120,
        prepare: bool = True,
        passwords: dict[str, str] | None = None,
    ) -> None:
        """``prepare=False`` reuses a home another server prepared (its database and passwords:
        pass that server's ``passwords``)."""
        self.home = Path(home)
        self.prepare = prepare
        self.host = "127.0.0.1"
        self.port = free_port(self.host)
        self.url = f"http://{self.host}:{self.port}"
        self.passwords = dict(passwords) if passwords else {user: secrets.token_urlsafe(12) for user in USERS}
        self.jwt_secret = secrets.token_urlsafe(64)
        self.secret_key = secrets.token_urlsafe(32)
        self.startup_timeout_s = startup_timeout_s
        self.log_path = self.home / f"api-server-{self.port}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TRACELADDER_", "AWS_"))}
        self.env = {
            **base,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in USERS.items()),
            "AIRFLOW__API__HOST": self.host,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__EXPOSE_CONFIG": "False",
            "AIRFLOW__API_AUTH__JWT_SECRET": self.jwt_secret,
            "AIRFLOW__API__SECRET_KEY": self.secret_key,
            **(extra_env or {}),
        }

    # ---- lifecycle
    def _airflow(self, *args: str, timeout: float = 180) -> None:
        proc = subprocess.run([AIRFLOW_BIN, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise AirflowServerError(f"airflow {' '.join(args)} exited {proc.returncode}: {' | '.join(tail)}")

    def start(self) -> "AirflowApiServer":
        self.home.mkdir(parents=True, exist_ok=True)
        if self.prepare:
            (self.home / "simple_auth_manager_passwords.json.generated").write_text(json.dumps(self.passwords))
            self._airflow("db", "migrate")
            self._airflow("dags", "reserialize")  # DagModel rows, so the trigger DAG can be triggered
        self._log = open(self.log_path, "ab")
        self._proc = subprocess.Popen(
            [AIRFLOW_BIN, "api-server"],
            env=self.env,
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.startup_timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise AirflowServerError(f"api-server exited {self._proc.returncode}; log: {self.log_tail()}")
            try:
                resp = httpx.get(f"{self.url}/api/v2/monitor/health", timeout=2)
                if resp.status_code == 200:
                    return self
                last = f"HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            time.sleep(0.3)
        self.stop()
        raise AirflowServerError(f"api-server on {self.url} not healthy after {self.startup_timeout_s:.0f} s ({last}); log: {self.log_tail()}")

    def stop(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                try:
                    os.killpg(self._proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    self._proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    try:
                        os.killpg(self._proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    self._proc.wait(timeout=10)
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    # ---- clients
    def token(self, user: str) -> str:
        resp = httpx.post(f"{self.url}/auth/token", json={"username": user, "password": self.passwords[user]}, timeout=30)
        if resp.status_code != 201:
            raise AirflowServerError(f"POST /auth/token for {user}: HTTP {resp.status_code} {resp.text[:200]}")
        return resp.json()["access_token"]

    def client(self, user: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token(user)}"} if user else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)
