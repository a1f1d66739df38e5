"""A process in a process group of its own: start it, stop it with its children.

The embedded S3 server (``dev/embedded_s3.py``) and the local Airflow stack
(``dev/local_stack.py``) run their servers this way: a Ctrl+C in our terminal is ours to relay,
and children that outlive the leader (Airflow's task runners) go down with the group. The local
backend's orphan handling (``runner/orphans.py``) finds and kills a recorded group by its id.
Standard library only (core).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import IO, Mapping, Sequence


def start_group(
    argv: Sequence[str], log: IO[bytes], cwd: Path | str, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``argv`` as the leader of a new process group (session), no stdin, stdout and stderr to ``log``."""
    return subprocess.Popen(
        list(argv),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the process group ``proc`` leads; the leader alone if the group is gone or not ours."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a member (one we may not signal counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int) -> bool:
    """SIGKILL process group ``pgid``; whether the signal was delivered."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop_group(proc: subprocess.Popen[bytes], grace_s: float, sig: int = signal.SIGTERM) -> bool:
    """``sig`` to the group, ``grace_s`` for the leader to exit, then SIGKILL to the group (what
    outlived the leader goes with it); whether the leader was reaped within 10 s of the SIGKILL."""
    if proc.poll() is None:
        signal_group(proc, sig)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    signal_group(proc, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return True
