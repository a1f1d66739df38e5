"""Write some of a trace's reports in a forked child while the parent writes the others.

After the read, a trace's reports are independent of one another.  On a machine with a
spare CPU, :func:`beside` forks once: the child shares the parent's memory (copy on
write: the event table, or the trace's bytes), does its part (writes its reports into
the same folder, or decodes half of the events) and sends its result back pickled
through a pipe, while the parent does the rest.  With ``enabled=False``
(one CPU, no ``fork``, or a caller with threads of its own) the work runs in the parent,
in ``result()``, with the same outputs.

Only the CLI turns it on (``traceladder analyze`` on one trace at a time): an Airflow task
or a pool worker keeps to one process, as forking a process with threads is unsafe.
The same program is on both ends of the pipe, so its pickles are trusted.
"""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .events import TraceError

__all__ = ["Beside", "beside", "spare_cpu"]


def spare_cpu() -> bool:
    """True when this process may run on more than one CPU and can fork."""
    if not hasattr(os, "fork"):
        return False
    try:
        return len(os.sched_getaffinity(0)) > 1
    except AttributeError:  # no sched_getaffinity (macOS)
        return (os.cpu_count() or 1) > 1


class Beside:
    """The work running beside the caller: a forked child, or a call kept for later."""

    def __init__(self, work: Callable[[], Any], trace: Path, enabled: bool) -> None:
        self.work = work
        self.trace = trace
        self.pid = 0
        self.fd = -1
        if enabled:
            self._fork()

    def _fork(self) -> None:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: do the work, send the result, exit without cleanup
            os.close(read_fd)
            code = 0
            try:
                msg: dict[str, Any] = {"result": self.work()}
            except TraceError as exc:
                msg = {"trace_error": exc.reason}
            except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
                msg = {"error": f"{type(exc).__name__}: {exc}"}
            try:
                data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
                view = memoryview(data)
                while view:
                    view = view[os.write(write_fd, view) :]
            except BaseException:  # noqa: BLE001 - the parent sees no result and says so
                code = 1
            # os._exit: no atexit handlers, no flush of buffers inherited from the parent
            os._exit(code)
        os.close(write_fd)
        self.pid, self.fd = pid, read_fd

    def result(self) -> Any:
        """The work's result; its TraceError or failure is raised here, in the caller."""
        if not self.pid:
            return self.work()
        with os.fdopen(self.fd, "rb") as fh:
            self.fd = -1
            data = fh.read()
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        if not data:
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
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = 0


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
