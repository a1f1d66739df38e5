"""Local rungs through a warm launcher: torch imported once per DAG run, a fresh fork per rung.

The launcher (workload/forkserver.py) is started by the first local rung of a DAG run on this host and
found by the later ones through a name derived from the run's key (dag_id/run_id, from the task
process's AIRFLOW_CTX_* variables; outside a DAG run the rung runs cold). Its end: the DAG's last
task stops it (stop_run), it exits when idle for TRACELADDER_WARM_IDLE_S, and the preflight sweep
(orphans.stop_stale_launchers) stops one that outstayed its idle limit.

The idle limit is a lease, short (7 s) because a DAG run killed or marked failed between tasks
runs no task of its own again: nothing stops its launcher but the lease, so it outlives the run by
at most that after its last rung ended (#53; it was 120 s). The run's own tasks keep it: each
rung renews it (its request, and its workload's end), and
the adaptive `look` between blocks renews it at its start and end (keep_alive), so the hand-offs
between rungs (~0.4 s each in the demo, docs/figures/2026-12-04-bench-1712-demo_split.md) stay
far inside it. A longer pause (a rung's retry delay) lets it go; the next rung starts a new one.

The rung's contract is the cold subprocess's: its output goes to the rung's log (and echo) line
by line, the exit code is the workload's (-signal when killed), the deadline kills the
workload's whole process group, and the workload is recorded for the orphan sweep while it runs.
When the launcher cannot be started or does not answer, run() returns None and says why in one
line: the rung then runs cold. TRACELADDER_WARM_LAUNCHER=0 turns it off.

A launcher forks only while idle between rungs, and a run's first rung waits for it to serve
(~4-7 s, once), so its start-up never overlaps a measured run.
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from traceladder.core import env_vars
from traceladder.core.process_group import end_group, kill_group
from traceladder.runner import orphans

START_TIMEOUT_S = 90.0  # the launcher's imports take ~4-7 s on 2 busy cores
REPLY_TIMEOUT_S = 30.0  # a serving launcher answers a request at once; silence means it is stuck
_started: list[subprocess.Popen[bytes]] = []  # launchers this process started, reaped when they end
_WORKLOAD_MODULE = ["-m", "traceladder.workload"]


@dataclass(frozen=True)
class WorkloadRun:
    """One run of a rung's workload, warm (run()) or cold (rung.execute): its command, extra
    environment and folder, the log its output is teed to (and `echo`), its deadline, and the
    list a failed log write goes to (the output is still drained)."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log_path: Path
    deadline_s: float
    echo: TextIO | None = None
    write_errors: list[OSError] = field(default_factory=list)

    @property
    def workload_args(self) -> list[str] | None:
        """The arguments of a `python -m traceladder.workload ...` command (None: another command)."""
        return self.argv[3:] if self.argv[1:3] == _WORKLOAD_MODULE else None


def enabled(env: Mapping[str, str] | None = None) -> bool:
    return (env_vars.WARM_LAUNCHER.get(env) or "1").strip() != "0"


def key_for(dag_id: str, run_id: str) -> str:
    return f"{dag_id}/{run_id}"


def dag_run(env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """This task's DAG run (Airflow exports it to the task process), or None outside a DAG run:
    a one-shot runner gains nothing from a launcher, and could not bound its lifetime by a run."""
    env = os.environ if env is None else env
    dag_id, run_id = env.get("AIRFLOW_CTX_DAG_ID"), env.get("AIRFLOW_CTX_DAG_RUN_ID")
    return (dag_id, run_id) if dag_id and run_id else None


def run_key(env: Mapping[str, str] | None = None) -> str | None:
    run = dag_run(env)
    return key_for(*run) if run is not None else None


def key_hash(key: str) -> str:
    """Short and unique per records folder and key (two test suites on one host never meet)."""
    return hashlib.sha256(f"{orphans.records_dir().resolve()}|{key}".encode()).hexdigest()[:16]


def socket_name(key: str) -> str:
    return f"traceladder-warm-{os.getuid()}-{key_hash(key)}"


def _connect(name: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect("\0" + name)
    except OSError:
        sock.close()
        return None
    return sock


def _reap_started() -> None:
    for proc in list(_started):
        if proc.poll() is not None:
            _started.remove(proc)


def _start(key: str) -> tuple[socket.socket | None, str]:
    """Start this key's launcher and wait until it serves; (connection, why not)."""
    name, digest = socket_name(key), key_hash(key)
    idle_s = float(env_vars.WARM_IDLE_S.get() or 7)
    folder = orphans.launchers_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        log = orphans.launcher_log_path(digest).open("ab")  # the sweep removes it a day after it is gone
    except OSError as exc:
        return None, f"cannot write its log in {folder}: {exc}"
    with log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "traceladder.workload.forkserver", name, "--idle-s", f"{idle_s:g}"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not in the task's group: later tasks of the run use it
        )
    _started.append(proc)
    orphans.record_launcher(
        digest,
        {
            "pid": proc.pid,
            "key": key,
            "dag_id": (dag_run() or ("", ""))[0],
            "run_id": (dag_run() or ("", ""))[1],
            "idle_s": idle_s,
            "starter_pid": os.getpid(),
            "starter_start": orphans._start_time(os.getpid()),
        },
    )
    until = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < until:
        if proc.poll() is not None:
            return None, f"it exited with {proc.returncode} while starting (see {log.name})"
        conn = _connect(name)
        if conn is not None:
            return conn, ""
        time.sleep(0.05)
    orphans.stop_launcher(orphans.launcher_path(digest))
    return None, f"it did not serve within {START_TIMEOUT_S:g} s"


def _launcher(key: str) -> tuple[socket.socket | None, str]:
    """A connection to this key's launcher, started if there is none; (connection, why not)."""
    _reap_started()
    path = orphans.launcher_path(key_hash(key))
    conn = _connect(socket_name(key))
    if conn is not None:
        path.touch(exist_ok=True)  # the sweep's measure of use
        return conn, ""
    doc = orphans.read_launcher(path)
    if doc is not None:  # this run had one: it died, or runs but does not serve
        orphans.stop_launcher(path, doc)  # and the next rung starts a fresh one
        return None, f"launcher {doc['pid']} does not answer"
    return _start(key)


def _send_request(conn: socket.socket, args: list[str], env: dict[str, str], cwd: Path, out_fd: int) -> None:
    payload = (json.dumps({"args": args, "env": env, "cwd": str(cwd)}) + "\n").encode()
    conn.sendmsg([payload[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [out_fd]))])
    conn.sendall(payload[1:])


class _Replies:
    """The launcher's JSON lines on the connection."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.buffer = conn, b""

    def next(self, timeout_s: float | None) -> dict[str, object] | None:
        """The next reply; None when the launcher closed the connection; TimeoutError past timeout_s."""
        self.conn.settimeout(timeout_s)
        while b"\n" not in self.buffer:
            chunk = self.conn.recv(4096)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        reply = json.loads(line)
        return reply if isinstance(reply, dict) else None


def run(work: WorkloadRun, say: Callable[[str], None] | None = None) -> tuple[int | None, bool] | None:
    """A `python -m traceladder.workload <args>` command through this run's launcher, as rung.execute
    runs it cold; (exit code, timed out), or None (said through `say`) when the launcher is unavailable."""
    args = work.workload_args
    if args is None:
        raise ValueError(f"not a traceladder.workload command: {work.argv[:3]}")
    key = run_key()
    if key is None:
        return None
    conn, why = _launcher(key)
    if conn is None:
        _say(say, f"[traceladder] warm launcher unavailable ({why}); running the workload cold")
        return None
    read_fd, write_fd = os.pipe()
    replies = _Replies(conn)
    try:
        try:
            _send_request(conn, args, {**os.environ, **work.env}, work.cwd, write_fd)
            os.close(write_fd)
            write_fd = -1
            reply = replies.next(REPLY_TIMEOUT_S)
        except (OSError, ValueError) as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        if reply is None or "pid" not in reply:
            why = "closed the connection" if reply is None else str(reply.get("error"))
            if reply is None or "Timeout" in why:  # stuck or dying: the next rung starts a fresh one
                orphans.stop_launcher(orphans.launcher_path(key_hash(key)))
            _say(say, f"[traceladder] warm launcher refused the rung ({why}); running the workload cold")
            return None
        pid = int(reply["pid"])  # type: ignore[call-overload]
        return _follow(pid, replies, read_fd, work)
    finally:
        conn.close()
        if write_fd >= 0:
            os.close(write_fd)


def start_tee(lines: Iterable[str], log: TextIO | None, echo: TextIO | None, errors: list[OSError]) -> threading.Thread:
    """A daemon thread copying the workload's output lines to the rung's log (until a write fails:
    that error goes to `errors`, and the output is still drained) and to `echo`. The cold path
    (rung.execute) and the warm one share it."""

    def pump() -> None:
        for line in lines:
            if log is not None and not errors:
                try:
                    log.write(line)
                except OSError as exc:
                    errors.append(exc)
            if echo is not None:
                echo.write(line)
                echo.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    return reader


def _follow(pid: int, replies: _Replies, read_fd: int, work: WorkloadRun) -> tuple[int | None, bool]:
    """Tee the workload's output, keep the deadline, return (exit code, timed out)."""
    errors, deadline_s = work.write_errors, work.deadline_s
    running = orphans.record(pid)  # its own session: pgid == pid; the sweep stops it if we die
    out = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
    code: int | None = None
    timed_out = False
    try:
        log = work.log_path.open("w", encoding="utf-8", errors="replace", buffering=1)
    except OSError as exc:
        errors.append(exc)
        log = None

    reader = start_tee(out, log, work.echo, errors)
    lost = False
    try:
        try:
            reply = replies.next(deadline_s)
        except TimeoutError:
            timed_out = True
            reply = _kill(pid, replies)
        if reply is None:  # the launcher died: no exit status will come; stop the workload
            lost = True
            kill_group(pid)
        else:
            code = int(reply["exit"])  # type: ignore[call-overload]
    except (OSError, ValueError, KeyError):
        lost = True
        kill_group(pid)
    reader.join(timeout=10)
    if log is not None:
        try:
            if timed_out and not errors:
                log.write(f"[traceladder] deadline of {deadline_s:.0f} s reached; the rung was stopped\n")
            if lost and not errors:
                log.write("[traceladder] the warm launcher died during the run; the workload was stopped\n")
            log.close()
        except OSError as exc:
            errors.append(exc)
    if not reader.is_alive():  # else a grandchild holds the pipe; the daemon thread drains it
        out.close()
    if code is not None or lost:
        orphans.forget(running)
    return code, timed_out


def _kill(pid: int, replies: _Replies) -> dict[str, object] | None:
    """The cold path's deadline (end_group: SIGTERM to the group, 5 s, SIGKILL, 5 s), waiting on
    the launcher's exit reply instead of our own child; that reply (None: the launcher closed)."""
    got: list[dict[str, object] | None] = []

    def replied(timeout_s: float) -> bool:
        try:
            got.append(replies.next(timeout_s))
        except TimeoutError:
            return False
        return True

    end_group(pid, replied)
    return got[0] if got else None


def keep_alive(dag_id: str, run_id: str) -> bool:
    """Renew the lease of this DAG run's launcher on this host, if one serves; whether one did.
    Starts none, and never fails the task: a launcher that lapsed is started again by the next rung."""
    conn = _connect(socket_name(key_for(dag_id, run_id)))
    if conn is None:
        return False
    with conn:
        try:
            conn.sendall(b'{"ping": true}\n')
            reply = _Replies(conn).next(REPLY_TIMEOUT_S)
        except (OSError, ValueError):
            return False
    with contextlib.suppress(OSError):  # the sweep's measure of use (no record: nothing to mark)
        os.utime(orphans.launcher_path(key_hash(key_for(dag_id, run_id))))
    return bool(reply and reply.get("alive"))


def stop_run(dag_id: str, run_id: str) -> bool:
    """Stop the launcher of this DAG run on this host (the DAG's last task); whether one ran."""
    stopped = orphans.stop_launcher(orphans.launcher_path(key_hash(key_for(dag_id, run_id))))
    _reap_started()  # one this process started (dag.test) is its zombie now: reap it
    return stopped


@contextlib.contextmanager
def warm_runs(dag_id: str, run_id: str) -> Iterator[None]:
    """Local rungs run in this process meanwhile go through one warm launcher, keyed as a DAG run's
    tasks key theirs (a process outside any task names itself by `dag_id` and `run_id`: the
    demo's triage, `traceladder triage repro`); the launcher is stopped after."""
    names = {"AIRFLOW_CTX_DAG_ID": dag_id, "AIRFLOW_CTX_DAG_RUN_ID": run_id}
    before = {k: os.environ.get(k) for k in names}
    os.environ.update(names)
    try:
        yield
    finally:
        stop_run(dag_id, run_id)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _say(say: Callable[[str], None] | None, line: str) -> None:
    if say is not None:
        say(line)
