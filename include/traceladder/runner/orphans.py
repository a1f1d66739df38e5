"""No orphaned workload on the local backend (issue 27).

The runner starts the workload in a session of its own (so a deadline can stop the whole group),
which also means a SIGKILLed runner leaves it running: on a shared host, the next rung would
measure that orphan's contention. So every running workload is recorded in a small file (this
host, the runner's pid and start time, the workload's process group), removed when the runner
reaps it; the next rung's preflight stops every recorded group whose runner is gone.

Warm launchers (runner/forkserver_client.py) are recorded here too, one file per DAG run and host: the
preflight drops the record of one that is gone, and stops one whose DAG run is over (when the
caller can ask Airflow: run_over) or that is unused for longer than its idle limit (it should
have exited by itself: it is hung). It also removes the log of a launcher that is gone, a day
after the log's last write.

Standard library only (the runner image imports it).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

from traceladder.core import env_vars
from traceladder.core.documents import JSONObject
from traceladder.core.process_group import group_alive, kill_group
from traceladder.storage.spool import spool_root

ENV_DIR = env_vars.WORKLOADS_DIR.name


def records_dir() -> Path:
    return Path(env_vars.WORKLOADS_DIR.get() or spool_root().parent / "workloads")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (field 22 of /proc/<pid>/stat): tells a live
    runner from a new process that got its pid; None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def record(workload_pgid: int) -> Path | None:
    """Note a started workload; the path to forget() when it is reaped (None if not writable)."""
    folder = records_dir()
    path = folder / f"{socket.gethostname()}-{workload_pgid}.json"
    doc = {
        "host": socket.gethostname(),
        "runner_pid": os.getpid(),
        "runner_start": _start_time(os.getpid()),
        "pgid": workload_pgid,
    }
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
    except OSError:
        return None
    return path


def forget(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def stop_orphans(log: Callable[[str], None] | None = None, run_over: RunOver | None = None) -> list[int]:
    """SIGKILL every recorded workload group on this host whose runner is gone, and stop every
    stale warm launcher; the groups and launcher pids stopped."""
    stopped: list[int] = []
    host = socket.gethostname()
    folder = records_dir()
    for path in sorted(folder.glob(f"{host}-*.json")) if folder.is_dir() else []:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if doc.get("host") != host:
            continue
        runner_pid, pgid = int(doc["runner_pid"]), int(doc["pgid"])
        if doc.get("runner_start") is not None and _start_time(runner_pid) == doc["runner_start"]:
            continue  # its runner still runs (another rung on this host): not an orphan
        if group_alive(pgid) and kill_group(pgid):
            stopped.append(pgid)
            if log is not None:
                what = f"an orphaned workload (process group {pgid})"
                log(f"[traceladder] stopped {what} whose runner {runner_pid} is gone")
        path.unlink(missing_ok=True)
    return stopped + stop_stale_launchers(log, run_over)


# ---- warm launchers ---------------------------------------------------------------------------------
#: Past its idle limit by this much, a launcher that still runs is hung: the sweep stops it.
LAUNCHER_GRACE_S = 30.0
#: How long a gone launcher's log stays after its last write. A day, not the idle limit (120 s by
#: default): the log is what explains a launcher that failed a run, and it must outlast the run's
#: post-mortem; one small log per DAG run and host, so a day of them is little disk.
LAUNCHER_LOG_MAX_AGE_S = 24 * 3600.0


def launchers_dir() -> Path:
    return records_dir() / "launchers"


def launcher_path(key_hash: str) -> Path:
    return launchers_dir() / f"{socket.gethostname()}-{key_hash}.json"


def launcher_log_path(key_hash: str) -> Path:
    """The launcher's stdout and stderr (appended to by each launcher of that DAG run)."""
    return launchers_dir() / f"{socket.gethostname()}-{key_hash}.log"


def record_launcher(key_hash: str, doc: JSONObject) -> Path | None:
    """Note a started launcher (its pid and start time, its key, its starter, its idle limit)."""
    path = launcher_path(key_hash)
    full = {"host": socket.gethostname(), "start": _start_time(int(doc["pid"])), **doc}  # type: ignore[arg-type]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(full))
        tmp.replace(path)
    except OSError:
        return None
    return path


def read_launcher(path: Path) -> JSONObject | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def launcher_alive(doc: JSONObject) -> bool:
    """Whether the recorded launcher process still runs (the same process, not a reused pid)."""
    start, pid = doc.get("start"), int(doc["pid"])  # type: ignore[arg-type]
    if start is None or _start_time(pid) != start:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) runs no more
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_launcher(path: Path, doc: JSONObject | None = None) -> bool:
    """SIGTERM the recorded launcher (SIGKILL if it lingers 2 s) and drop its record; whether it ran."""
    doc = doc if doc is not None else read_launcher(path)
    ran = False
    if doc is not None and launcher_alive(doc):
        pid = int(doc["pid"])  # type: ignore[arg-type]
        ran = True
        try:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                os.kill(pid, sig)
                until = time.monotonic() + 2.0
                while time.monotonic() < until and launcher_alive(doc):
                    time.sleep(0.05)
                if not launcher_alive(doc):
                    break
        except (ProcessLookupError, PermissionError):
            pass
    path.unlink(missing_ok=True)
    return ran


def _has_children(pid: int) -> bool:
    """Whether the process has a live child (a launcher's workload); False when /proc cannot say."""
    try:
        return any(
            Path(f"/proc/{pid}/task/{tid}/children").read_text().split() for tid in os.listdir(f"/proc/{pid}/task")
        )
    except OSError:
        return False


def _launcher_stale(path: Path, doc: JSONObject) -> str | None:
    """Why a live launcher must go, or None."""
    try:
        unused_s = time.time() - path.stat().st_mtime  # the runner touches the record per request
    except OSError:
        return None
    idle_s = float(doc.get("idle_s") or 0)  # type: ignore[arg-type]
    if unused_s > idle_s + LAUNCHER_GRACE_S and not _has_children(int(doc["pid"])):  # type: ignore[arg-type]
        # a launcher with a workload is in use however long the rung runs (its lease is short)
        return f"unused for {unused_s:.0f} s, past its idle limit of {idle_s:g} s"
    return None


#: ``(dag_id, run_id) -> bool``: whether Airflow says that DAG run is over (raises when unknown).
RunOver = Callable[[str, str], bool]


def _run_over(doc: JSONObject, run_over: RunOver | None) -> bool:
    dag_id, run_id = doc.get("dag_id"), doc.get("run_id")
    if run_over is None or not isinstance(dag_id, str) or not isinstance(run_id, str):
        return False
    try:
        return run_over(dag_id, run_id)
    except Exception:  # noqa: BLE001 - unknown is not over: never stop on a failed lookup
        return False


def stop_stale_launchers(log: Callable[[str], None] | None = None, run_over: RunOver | None = None) -> list[int]:
    """Stop every stale warm launcher recorded on this host (its DAG run is over, per
    ``run_over``, or it outstayed its idle limit); the pids stopped."""
    stopped: list[int] = []
    folder = launchers_dir()
    for path in sorted(folder.glob(f"{socket.gethostname()}-*.json")) if folder.is_dir() else []:
        doc = read_launcher(path)
        if doc is None or not launcher_alive(doc):
            path.unlink(missing_ok=True)
            continue
        reason = "its DAG run is over" if _run_over(doc, run_over) else _launcher_stale(path, doc)
        if reason is not None and stop_launcher(path, doc):
            stopped.append(int(doc["pid"]))  # type: ignore[arg-type]
            if log is not None:
                log(f"[traceladder] stopped a warm launcher (pid {doc['pid']}, {doc.get('key')}): {reason}")
    remove_old_launcher_logs()
    return stopped


def remove_old_launcher_logs(max_age_s: float = LAUNCHER_LOG_MAX_AGE_S) -> list[Path]:
    """Remove this host's launcher logs that nothing wrote for ``max_age_s`` and whose launcher is
    gone; the logs removed. A log stays while its record names a live launcher, and while any
    process has it open (a launcher between opening its log and its record, or one that lingers
    after its record was dropped): the age alone never judges a launcher, which writes nothing to
    its log while one long rung runs."""
    folder = launchers_dir()
    now = time.time()
    old: list[Path] = []
    for path in sorted(folder.glob(f"{socket.gethostname()}-*.log")) if folder.is_dir() else []:
        try:
            if now - path.stat().st_mtime <= max_age_s:
                continue
        except OSError:
            continue
        doc = read_launcher(path.with_suffix(".json"))
        if doc is None or not launcher_alive(doc):
            old.append(path)
    if old:  # only then: the scan reads every process's open files
        held = _open_files()
        old = [path for path in old if os.path.realpath(path) not in held]
    for path in old:
        path.unlink(missing_ok=True)
    return old


def _open_files() -> set[str]:
    """The files open in any process we may look into (/proc/<pid>/fd), as real paths."""
    held: set[str] = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            fds = list(fd_dir.iterdir())
        except OSError:  # gone, or another user's
            continue
        for fd in fds:
            try:
                held.add(os.readlink(fd))
            except OSError:
                continue
    return held
