"""A real Airflow deployment on this machine: the embedded S3 server plus `airflow api-server`,
`scheduler`, `dag-processor` and `triggerer` (LocalExecutor by default) with the repo's DAGs,
plugin and pools, on free loopback ports. `traceladder up` runs it in the foreground; the
real-scheduler tests (and the fault tests) start it as a fixture.

    stack = LocalStack(Path(".traceladder"))       # S3 in <dir>/s3, Airflow home in <dir>/airflow
    stack.start()                                  # S3, db migrate, pools, reserialize, processes
    with stack.client("admin") as api:             # REST as a SimpleAuthManager user
        run_id = stack.trigger("traceladder-trigger", {"ladder": "proxy-local"})
        stack.wait_for_run("traceladder-trigger", run_id, timeout_s=600)
    stack.stop()                                   # SIGTERM each process group, then SIGKILL

Every component is its own process group, so `stop_component()` / `start_component()` can
restart one of them (the scheduler, say) without touching the others. The processes' environment
is this process's minus every ``AIRFLOW*``, ``TRACELADDER_*`` and ``AWS_*`` variable, plus what
is set here and in ``extra_env``: nothing leaks in from the caller by accident.

State kept in the Airflow home between starts: the SQLite database (or the caller's
``sql_alchemy_conn``), the generated user passwords and the API secrets (mode 0600), so a second
start reuses logins, DAG runs and the S3 objects of the first.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO, Iterable

from traceladder.core.documents import JSONObject
from traceladder.embedded.local_airflow import DAGS_FOLDER, PLUGINS_FOLDER, AirflowSetupError, pools_document
from traceladder.core import env_vars
from traceladder.core.ports import free_port, port_free  # noqa: F401 (re-exported for the tests and up)
from traceladder.core.process_group import start_group, stop_group

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
CELERY_WORKER = "celery-worker:"  # + queue: a component that is a Celery worker on that one queue
USERS = {"admin": "admin", "viewer": "viewer"}  # SimpleAuthManager user: role
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"
SECRETS_FILE = "traceladder-stack-secrets.json"
TERMINAL_RUN_STATES = ("success", "failed")
AIRFLOW_BIN = str(Path(sys.executable).with_name("airflow"))


class StackError(AirflowSetupError):
    """The stack could not start or a component died; the message is one line plus a log tail."""


def _private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


class LocalStack:
    def __init__(
        self,
        state_dir: Path,
        *,
        s3: Any = None,
        with_s3: bool = True,
        components: Iterable[str] = COMPONENTS,
        executor: str = "LocalExecutor",
        extra_env: dict[str, str] | None = None,
        port: int | None = None,
        passwords: dict[str, str] | None = None,
        prepare: bool = True,
        parallelism: int = 4,
        sql_alchemy_conn: str | None = None,
        startup_timeout_s: float = 240,
        home: Path | None = None,
    ) -> None:
        """``s3``: a started-or-not EmbeddedS3 to use (the caller owns it); otherwise, with
        ``with_s3``, one is made in ``<state_dir>/s3`` and owned here. ``home`` overrides the
        Airflow home (``<state_dir>/airflow``). ``prepare=False`` reuses a home another stack
        prepared (pass that stack's ``passwords``)."""
        self.state_dir = Path(state_dir).resolve()
        self.home = Path(home).resolve() if home else self.state_dir / "airflow"
        self.components = tuple(components)
        unknown = {c for c in self.components if c not in COMPONENTS and not c.startswith(CELERY_WORKER)}
        if unknown:
            raise StackError(f"unknown components {sorted(unknown)}; known: {', '.join(COMPONENTS)}")
        self.executor = executor
        self.prepare = prepare
        self.host = "127.0.0.1"
        self.port = port if port else free_port(self.host)
        self.url = f"http://{self.host}:{self.port}"
        self.startup_timeout_s = startup_timeout_s
        self._own_s3 = s3 is None and with_s3
        if self._own_s3:
            from traceladder.embedded.embedded_s3 import EmbeddedS3

            s3 = EmbeddedS3(self.state_dir / "s3", bucket=env_vars.DEFAULT_BUCKET)
        self.s3 = s3
        self._given_passwords = dict(passwords) if passwords else None
        self.passwords: dict[str, str] = {}
        self.jwt_secret = ""
        self.secret_key = ""
        self._extra_env = dict(extra_env or {})
        self._parallelism = parallelism
        self._sql_alchemy_conn = sql_alchemy_conn
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._tokens: dict[str, tuple[str, float]] = {}
        self._logs: dict[str, BinaryIO] = {}  # each service's open log file
        self.env: dict[str, str] = {}

    # ---- environment ---------------------------------------------------------------------------
    def _load_secrets(self) -> None:
        """API secrets and passwords: kept in the home (0600) so a restart keeps the logins."""
        path = self.home / SECRETS_FILE
        saved = json.loads(path.read_text()) if path.is_file() else {}
        self.jwt_secret = saved.get("jwt_secret") or secrets.token_urlsafe(64)
        self.secret_key = saved.get("secret_key") or secrets.token_urlsafe(32)
        _private(path, json.dumps({"jwt_secret": self.jwt_secret, "secret_key": self.secret_key}))
        pw_path = self.home / PASSWORDS_FILE
        if self._given_passwords is not None:
            self.passwords = dict(self._given_passwords)
        elif pw_path.is_file():
            self.passwords = json.loads(pw_path.read_text())
        else:
            self.passwords = {user: secrets.token_urlsafe(12) for user in USERS}
        if self.prepare:
            _private(pw_path, json.dumps(self.passwords))

    def _build_env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", env_vars.PREFIX, "AWS_"))}
        env = {
            **base,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__EXECUTOR": self.executor,
            "AIRFLOW__CORE__PARALLELISM": str(self._parallelism),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in USERS.items()),
            "AIRFLOW__API__HOST": self.host,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__EXPOSE_CONFIG": "False",
            "AIRFLOW__API_AUTH__JWT_SECRET": self.jwt_secret,
            "AIRFLOW__API__SECRET_KEY": self.secret_key,
            # A new ladder file shows up within seconds, not after the 5-minute default.
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        }
        if self._sql_alchemy_conn:
            env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = self._sql_alchemy_conn
        if self.s3 is not None:
            env.update(self.s3.env())
            env["AIRFLOW_CONN_TRACELADDER_S3"] = self.s3.airflow_conn_uri_json()
        env.update(self._extra_env)
        return env

    # ---- lifecycle -----------------------------------------------------------------------------
    def airflow(self, *args: str, timeout: float = 300) -> str:
        """Run one `airflow` CLI command in the stack's environment; its stdout."""
        proc = subprocess.run(
            [AIRFLOW_BIN, *args], env=self.env, cwd=self.home, capture_output=True, text=True, timeout=timeout
        )
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise StackError(f"airflow {' '.join(args)} exited {proc.returncode}: {' | '.join(tail)}")
        return proc.stdout

    def _prepare(self) -> None:
        """Deploy-time work: migrate, pools, DAGs serialized (so they can be triggered at once),
        the trigger DAG unpaused (the weekly DAGs stay paused until someone unpauses them)."""
        self.airflow("db", "migrate")
        pools_file = self.home / "pools.json"
        pools_file.write_text(json.dumps(pools_document(), indent=1))
        self.airflow("pools", "import", str(pools_file))
        self.airflow("dags", "reserialize")
        if "scheduler" in self.components:
            self.airflow("dags", "unpause", "traceladder-trigger")

    def start(self) -> "LocalStack":
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            if self._own_s3 and not self.s3.running():
                self.s3.start()
            self._load_secrets()
            self.env = self._build_env()
            if self.prepare:
                self._prepare()
            for name in self.components:
                self.start_component(name)
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def start_component(self, name: str, args: Iterable[str] = ()) -> subprocess.Popen[bytes]:
        """Start one component (`airflow <name> ...`) in its own process group, logging to
        ``<home>/logs/stack/<name>-<port>.log`` (appended). ``celery-worker:<queue>`` is a Celery
        worker that takes one task at a time from that queue only."""
        if name in self._procs and self._procs[name].poll() is None:
            raise StackError(f"{name} is already running (pid {self._procs[name].pid})")
        if name.startswith(CELERY_WORKER):
            queue = name[len(CELERY_WORKER) :]
            # --skip-serve-logs: several workers on one machine would fight over the log port.
            command = [
                "celery",
                "worker",
                "--queues",
                queue,
                "--concurrency",
                "1",
                "--celery-hostname",
                f"{queue}@%h",
                "--skip-serve-logs",
                *args,
            ]
        else:
            command = [name, *args]
        log_path = self.log_path(name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._logs[name] = open(log_path, "ab")
        self._procs[name] = start_group([AIRFLOW_BIN, *command], self._logs[name], self.home, self.env)
        return self._procs[name]

    def stop_component(self, name: str, sig: int = signal.SIGTERM, grace_s: float = 20) -> None:
        """Signal one component's process group; SIGKILL it after ``grace_s``."""
        proc = self._procs.pop(name, None)
        if proc is not None:  # children that outlived the leader (task runners) go with the group
            stop_group(proc, grace_s, sig)
        log = self._logs.pop(name, None)
        if log is not None:
            log.close()

    def stop(self) -> None:
        """Every component at once (each takes seconds to drain on SIGTERM; one after another,
        a test's teardown waited for their sum), then the S3 server they used."""
        from concurrent.futures import ThreadPoolExecutor

        names = list(self._procs)
        if names:
            with ThreadPoolExecutor(max_workers=len(names)) as pool:
                list(pool.map(self.stop_component, names))
        if self._own_s3 and self.s3 is not None and self.s3.running():
            self.s3.stop()

    def __enter__(self) -> "LocalStack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def pid(self, name: str) -> int | None:
        proc = self._procs.get(name)
        return proc.pid if proc is not None and proc.poll() is None else None

    def log_path(self, name: str) -> Path:
        return self.home / "logs" / "stack" / f"{name.replace(':', '-')}-{self.port}.log"

    def log_tail(self, name: str = "api-server", chars: int = 2000) -> str:
        try:
            return self.log_path(name).read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def check_alive(self) -> None:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise StackError(f"{name} exited {proc.returncode}; log: {self.log_tail(name)}")

    def wait_healthy(self) -> JSONObject:
        """Until /api/v2/monitor/health answers and reports every started component healthy."""
        import httpx

        wanted = {"scheduler": "scheduler", "dag-processor": "dag_processor", "triggerer": "triggerer"}
        deadline = time.monotonic() + self.startup_timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                resp = httpx.get(f"{self.url}/api/v2/monitor/health", timeout=5)
                if resp.status_code == 200:
                    health = resp.json()
                    sick = [
                        c
                        for n, c in wanted.items()
                        if n in self._procs and (health.get(c) or {}).get("status") != "healthy"
                    ]
                    if not sick:
                        return health
                    last = f"not yet healthy: {', '.join(sick)}"
                else:
                    last = f"HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            time.sleep(0.5)
        raise StackError(
            f"stack on {self.url} not healthy after {self.startup_timeout_s:.0f} s ({last}); "
            f"api-server log: {self.log_tail()}"
        )

    # ---- REST clients --------------------------------------------------------------------------
    def token(self, user: str) -> str:
        """A JWT from POST /auth/token, cached for 10 minutes (a busy api-server is slow to sign)."""
        cached = self._tokens.get(user)
        if cached and cached[1] > time.monotonic():
            return cached[0]
        resp = self._retrying(
            lambda http: http.post(f"{self.url}/auth/token", json={"username": user, "password": self.passwords[user]})
        )
        if resp.status_code != 201:
            raise StackError(f"POST /auth/token for {user}: HTTP {resp.status_code} {resp.text[:200]}")
        self._tokens[user] = (resp.json()["access_token"], time.monotonic() + 600)
        return self._tokens[user][0]

    def client(self, user: str | None = None):
        import httpx

        headers = {"Authorization": f"Bearer {self.token(user)}"} if user else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=120)

    def _retrying(self, send: Any, attempts: int = 4) -> Any:
        """One request, retried on a timeout or a refused connection: on a loaded machine the
        api-server can stall for tens of seconds while the scheduler and tasks hold the CPU."""
        import httpx

        for attempt in range(attempts):
            try:
                with httpx.Client(timeout=120) as http:
                    return send(http)
            except (httpx.TimeoutException, httpx.ConnectError):
                if attempt == attempts - 1:
                    raise
                self.check_alive()
                time.sleep(2 * (attempt + 1))

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.token('admin')}"}
        resp = self._retrying(lambda http: http.request(method, f"{self.url}{path}", headers=headers, **kwargs))
        if resp.status_code >= 300:
            raise StackError(f"{method} {path}: HTTP {resp.status_code} {resp.text[:300]}")
        return resp.json() if resp.content else None

    def unpause(self, dag_id: str, paused: bool = False) -> None:
        self._call("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": paused})

    def trigger(self, dag_id: str, conf: JSONObject | None = None) -> str:
        """POST /api/v2/dags/{dag_id}/dagRuns; the new run's id."""
        # The run id is chosen here so that a POST retried after a timeout cannot start two runs.
        run_id = f"manual__{time.strftime('%Y-%m-%dT%H-%M-%S', time.gmtime())}-{secrets.token_hex(3)}"
        body = {"dag_run_id": run_id, "logical_date": None, "conf": conf or {}}
        headers = {"Authorization": f"Bearer {self.token('admin')}"}
        resp = self._retrying(
            lambda http: http.post(f"{self.url}/api/v2/dags/{dag_id}/dagRuns", headers=headers, json=body)
        )
        if resp.status_code not in (200, 409):  # 409: an earlier attempt got through
            raise StackError(f"POST /api/v2/dags/{dag_id}/dagRuns: HTTP {resp.status_code} {resp.text[:300]}")
        return run_id

    def dag_ids(self, tag: str | None = None) -> list[str]:
        params: JSONObject = {"limit": 100, **({"tags": tag} if tag else {})}
        return sorted(d["dag_id"] for d in self._call("GET", "/api/v2/dags", params=params)["dags"])

    def dag_runs(self, dag_id: str) -> list[JSONObject]:
        return list(self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100})["dag_runs"])

    def wait_for_run(self, dag_id: str, run_id: str, timeout_s: float = 900, poll_s: float = 2) -> str:
        """Poll a DAG run until it ends; its final state. Raises if a component dies or time runs out."""
        deadline = time.monotonic() + timeout_s
        state = "unknown"
        while time.monotonic() < deadline:
            self.check_alive()
            state = str(self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"])
            if state in TERMINAL_RUN_STATES:
                return state
            time.sleep(poll_s)
        raise StackError(f"{dag_id} {run_id} still {state} after {timeout_s:.0f} s")

    def task_instances(self, dag_id: str, run_id: str) -> list[JSONObject]:
        """Every task instance of a run (mapped ones one row per map index)."""
        rows: list[JSONObject] = []
        while True:
            page = self._call(
                "GET",
                f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances",
                params={"limit": 100, "offset": len(rows)},
            )
            rows.extend(page["task_instances"])
            if not page["task_instances"] or len(rows) >= page["total_entries"]:
                return rows

    def xcom_sizes(self, dag_id: str, run_id: str) -> dict[tuple[str, int, str], int]:
        """Bytes of every XCom value of a run as the database holds it (the API's raw value), by
        (task, map index, key)."""
        sizes: dict[tuple[str, int, str], int] = {}
        for ti in self.task_instances(dag_id, run_id):
            path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/xcomEntries"
            entries = self._call("GET", path, params={"map_index": ti["map_index"], "limit": 100})["xcom_entries"]
            for entry in entries:
                value = self._call("GET", f"{path}/{entry['key']}", params={"map_index": ti["map_index"]})["value"]
                raw = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
                sizes[(str(ti["task_id"]), int(str(ti["map_index"])), entry["key"])] = len(raw.encode())
        return sizes
