"""A second process beside the caller: forked (:func:`forked`) or spawned (:func:`spawn_module`),
the checks for a CPU to run it on, and the rule that it dies with its parent. Standard library
only (core).

**Forked.** :func:`forked` forks once: the child shares the parent's memory (copy on write),
does its part and sends its result back pickled through a pipe, while the parent does the
rest. With ``enabled=False`` (one CPU, no ``fork``, or a caller with threads of its own), or
when ``fork`` itself fails, the work runs in the parent, in ``result()``, with the same outputs.
Only a process with no threads of its own may turn it on: forking a process with threads is
unsafe. The same program is on both ends of the pipe, so its pickles are trusted.

**Spawned.** A caller with threads (an Airflow task runner) must not fork, but may *spawn*:
``subprocess`` starts a new interpreter by fork+exec, with nothing run between the two but the
exec, which is safe with threads (and, unlike ``multiprocessing``, inside a daemonic worker).

Either child dies with its parent (:func:`die_with_parent`, ``PR_SET_PDEATHSIG`` on Linux), and
a parent that fails first kills and reaps it.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Forked", "cpu_free_now", "die_with_parent", "forked", "kill_child", "spare_cpu", "spawn_module"]

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


def cpu_free_now() -> bool:
    """A second CPU that is free at this moment, not only allowed: on a worker that already runs
    other tasks (mapped analysis tasks side by side), a second process would only add its
    start-up and the pipe.  Linux's runnable count (``/proc/loadavg``, this process included)
    must be below the CPUs this process may use."""
    if not spare_cpu():
        return False
    try:
        running = int(open("/proc/loadavg").read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return False
    return running < len(os.sched_getaffinity(0))


def die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when its parent dies (no orphan keeps writing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


class Forked:
    """The work running beside the caller: a forked child, or a call kept for later. An
    exception of a type in ``passes`` crosses back as its ``reason`` (or its text) and is raised
    in the caller as ``rebuild(reason)``; any other failure is a RuntimeError naming ``name``."""

    def __init__(
        self,
        work: Callable[[], Any],
        enabled: bool,
        *,
        passes: tuple[type[Exception], ...] = (),
        rebuild: Callable[[str], BaseException] = RuntimeError,
        name: str = "second process",
    ) -> None:
        self.work = work
        self.passes, self.rebuild, self.name = passes, rebuild, name
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
                self._child(write_fd)
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

    def _child(self, write_fd: int) -> None:
        """In the child: do the work and write its pickled outcome; a result that cannot be
        written reaches the parent as no result."""
        try:
            msg: dict[str, Any] = {"result": self.work()}
        except self.passes as exc:
            msg = {"passed": str(getattr(exc, "reason", exc))}
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
            msg = {"error": f"{type(exc).__name__}: {exc}"}
        try:
            view = memoryview(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))
            while view:
                view = view[os.write(write_fd, view) :]
        except BaseException:  # noqa: BLE001
            os._exit(1)

    def result(self) -> Any:
        """The work's result; its failure is raised here, in the caller."""
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
            raise RuntimeError(f"the {self.name} stopped with no result ({_status_text(status)})")
        msg = pickle.loads(data)  # noqa: S301 - from our own forked child
        if "passed" in msg:
            raise self.rebuild(msg["passed"])
        if "error" in msg:
            raise RuntimeError(f"in the {self.name}: {msg['error']}")
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


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


@contextmanager
def forked(
    work: Callable[[], Any],
    enabled: bool,
    *,
    passes: tuple[type[Exception], ...] = (),
    rebuild: Callable[[str], BaseException] = RuntimeError,
    name: str = "second process",
) -> Iterator[Forked]:
    """Start ``work`` beside the caller; ``result()`` inside the block collects it, and
    leaving the block by an exception stops it."""
    side = Forked(work, enabled, passes=passes, rebuild=rebuild, name=name)
    try:
        yield side
    finally:
        side.stop()


def spawn_module(module: str, package_root: str) -> subprocess.Popen[bytes]:
    """``python -m <module> <this pid>`` in a fresh interpreter that imports the package from
    ``package_root``, with pipes on stdin and stdout (stderr is inherited: the child's warnings
    land in the caller's log). The child is to call :func:`die_with_parent` with that pid."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", module, str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        close_fds=True,
    )


def kill_child(proc: subprocess.Popen[bytes]) -> None:
    """Kill a spawned child if it still runs, reap it and close its pipes."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()
