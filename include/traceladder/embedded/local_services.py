"""What a CeleryExecutor stack needs beside Airflow, from Debian's packages, on loopback:
``LocalRedis`` (the broker: `redis-server`, no persistence) and ``LocalPostgres`` (the metadata
database: a throwaway cluster made with `initdb` in a temporary folder owned by the `postgres`
user when run as root, trust auth on 127.0.0.1 only). Each is a context manager and stops what
it started; neither touches a system-wide instance."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from traceladder.embedded.local_stack import StackError, free_port


def _binary(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if not found:
        hint = "redis-server" if name == "redis-server" else "postgresql"
        raise StackError(f"no {name} on PATH (apt-get install -y {hint})")
    return found


class LocalRedis:
    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "LocalRedis":
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        log = open(self.dir / "redis.log", "ab")
        self._proc = subprocess.Popen(
            [
                _binary("redis-server"),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
                "--daemonize",
                "no",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 30
        import socket

        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise StackError(f"redis-server exited {self._proc.returncode}; see {self.dir / 'redis.log'}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.2)
        raise StackError(f"redis-server on port {self.port} did not answer PING within 30 s")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
        self._proc = None

    def __enter__(self) -> "LocalRedis":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalPostgres:
    """A throwaway PostgreSQL cluster. As root, its folder (under /tmp, since a pytest temp folder
    is 0700 root) is owned by `postgres` and every command runs as that user."""

    def __init__(self, database: str = "airflow") -> None:
        self.database = database
        self.port = 0
        self.dir: Path | None = None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *args: str, timeout: float = 120) -> None:
        command = list(args)
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd="/")
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise StackError(f"{Path(args[0]).name} exited {proc.returncode}: {' | '.join(tail)}")

    def start(self) -> "LocalPostgres":
        self.dir = Path(tempfile.mkdtemp(prefix="traceladder-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        data = self.dir / "data"
        self.port = free_port()
        self._run(_binary("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync")
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        self._run(
            _binary("pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(self.dir / "postgres.log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        self._run(_binary("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", self.database)
        return self

    def stop(self) -> None:
        if self.dir is None:
            return
        data = self.dir / "data"
        if (data / "postmaster.pid").exists():
            try:
                self._run(_binary("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
            except StackError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def __enter__(self) -> "LocalPostgres":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
