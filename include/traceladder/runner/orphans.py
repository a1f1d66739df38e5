"""No orphaned workload on the local backend (issue 27).

The runner starts the workload in a session of its own (so a deadline can stop the whole group),
which also means a SIGKILLed runner leaves it running: on a shared host, the next rung would
measure that orphan's contention. So every running workload is recorded in a small file (this
host, the runner's pid and start time, the workload's process group), removed when the runner
reaps it; the next rung's preflight stops every recorded group whose runner is gone.

Standard library only (the runner image imports it).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path

from traceladder.core import settings
from traceladder.core.process_group import group_alive, kill_group
from traceladder.storage.spool import spool_root

ENV_DIR = settings.WORKLOADS_DIR.name


def records_dir() -> Path:
    return Path(settings.WORKLOADS_DIR.get() or spool_root().parent / "workloads")


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


def stop_orphans(log: Callable[[str], None] | None = None) -> list[int]:
    """SIGKILL every recorded workload group on this host whose runner is gone; the groups stopped."""
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
    return stopped
