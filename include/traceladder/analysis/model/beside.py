"""Do part of one trace's analysis in a forked child while the parent does the rest.

On a machine with a spare CPU, :func:`beside` forks once: the child shares the parent's
memory (copy on write: the event table, or the trace's bytes), does its part (decodes
half of the events, or writes a report) and sends its result back pickled through a
pipe, while the parent does the rest.  With ``enabled=False`` (one CPU, no ``fork``, or
a caller with threads of its own), or when ``fork`` itself fails, the work runs in the
parent, in ``result()``, with the same outputs.

Only a process with no threads of its own turns it on: the CLI (``traceladder analyze`` on one
trace at a time) and the interpreter an Airflow task spawns (:mod:`.spawned`).  A pool worker
keeps to one process; forking a process with threads is unsafe.
The same program is on both ends of the pipe, so its pickles are trusted.  The child
dies with the parent (``PR_SET_PDEATHSIG`` on Linux), and a parent that fails first
kills and reaps it.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .events import TraceError

__all__ = ["Beside", "beside", "spare_cpu"]

_PR_SET_PDEATHSIG = 1


def spare_cpu() -> bool:
    """True when this process can fork and may use more than one CPU (its affinity, and
    its cgroup's CPU quota where there is one)."""
    if not hasattr(os, "fork"):
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity (macOS)
        cpus = os.cpu_count() or 1
    try:  # cgroup v2: "<quota> <period>", or "max <period>"
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        if quota != "max":
            cpus = min(cpus, int(quota) // int(period))
    except (OSError, ValueError):
        pass
    return cpus > 1


class Beside:
    """The work running beside the caller: a forked child, or a call kept for later."""

    def __init__(self, work: Callable[[], Any], trace: Path, enabled: bool) -> None:
        self.work = work
        self.trace = trace
        self.pid = 0
        self.fd = -1
        self.done = False
        if enabled:
            self._fork()

    def _fork(self) -> None:
        parent = os.getpid()
        read_fd, write_fd = os.pipe()
        # no Ctrl-C between the fork and the parent knowing its child (or in the child
        # before it is inside its own exit path)
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            pid = os.fork()
        except OSError:  # no memory or no process slot: the work runs here instead
            os.close(read_fd)
            os.close(write_fd)
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            return
        if pid == 0:
            try:
                die_with_parent(parent)
                signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
                os.close(read_fd)
                _child(self.work, write_fd)
            finally:
                # no atexit handlers, no flush of buffers inherited from the parent
                os._exit(0)
        self.pid, self.fd = pid, read_fd
        try:
            os.close(write_fd)
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)  # a held Ctrl-C is raised here
        except BaseException:
            self.stop()
            raise

    def result(self) -> Any:
        """The work's result; its TraceError or failure is raised here, in the caller."""
        if self.done:
            raise RuntimeError("result() was already taken")
        self.done = True
        if not self.pid:
            return self.work()
        with os.fdopen(self.fd, "rb") as fh:
            self.fd = -1
            data = fh.read()
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        if not data or status != 0:
            raise RuntimeError(f"the second analysis process stopped with no result ({_status_text(status)})")
        msg = pickle.loads(data)  # noqa: S301 - from our own forked child
        if "trace_error" in msg:
            raise TraceError(self.trace, msg["trace_error"])
        if "error" in msg:
            raise RuntimeError(f"in the second analysis process: {msg['error']}")
        return msg["result"]

    def stop(self) -> None:
        """Stop a child whose result is no longer wanted (the caller failed first)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.pid:
            pid, self.pid = self.pid, 0
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):  # already gone
                pass


def _child(work: Callable[[], Any], write_fd: int) -> None:
    """In the child: do the work and write its pickled outcome; a result that cannot be
    written reaches the parent as no result."""
    try:
        msg: dict[str, Any] = {"result": work()}
    except TraceError as exc:
        msg = {"trace_error": exc.reason}
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        msg = {"error": f"{type(exc).__name__}: {exc}"}
    try:
        view = memoryview(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))
        while view:
            view = view[os.write(write_fd, view) :]
    except BaseException:  # noqa: BLE001
        os._exit(1)


def die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when its parent dies (no orphan keeps writing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


@contextmanager
def beside(work: Callable[[], Any], trace: Path, enabled: bool) -> Iterator[Beside]:
    """Start ``work`` beside the caller; ``result()`` inside the block collects it, and
    leaving the block by an exception stops it."""
    side = Beside(work, trace, enabled)
    try:
        yield side
    finally:
        side.stop()
