"""A process in a process group of its own: start it, stop it with its children.

The embedded S3 server (``embedded/embedded_s3.py``) and the local Airflow stack
(``dev/local_stack.py``) run their servers this way: a Ctrl+C in our terminal is ours to relay,
and children that outlive the leader (Airflow's task runners) go down with the group. The local
backend's orphan handling (``runner/orphans.py``) finds and kills a recorded group by its id, and
a rung's deadline (``runner/rung.py`` cold, ``runner/forkserver_client.py`` through the warm launcher) ends the
workload's group with ``end_group``. Standard library only (core).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
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


def _signal_pgid(pgid: int, sig: int) -> bool:
    """``sig`` to process group ``pgid``; whether it was delivered (a gone group, or one we may not
    signal, is not an error: the caller judges by what it waits on)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_group(pgid: int) -> bool:
    """SIGKILL process group ``pgid``; whether the signal was delivered."""
    return _signal_pgid(pgid, signal.SIGKILL)


def end_group(pgid: int, ended: Callable[[float], bool], grace_s: float = 5.0, kill_wait_s: float = 5.0) -> bool:
    """SIGTERM to process group ``pgid`` and up to ``grace_s`` for it to end, then SIGKILL and up to
    ``kill_wait_s`` more; whether its end was seen. ``ended(timeout_s)`` waits for whatever reports
    the end (the leader's exit status, or a warm launcher's exit reply) and says whether it came.
    It is called even when a signal finds no group: a leader reaped elsewhere may not have been
    reported yet."""
    _signal_pgid(pgid, signal.SIGTERM)
    if ended(grace_s):
        return True
    kill_group(pgid)
    return ended(kill_wait_s)


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
