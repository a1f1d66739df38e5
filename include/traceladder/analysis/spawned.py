"""Analyse one trace in a fresh interpreter, for a caller that has threads of its own.

An Airflow task runs inside a task runner that has threads, so it must not fork (a forked
copy of a threaded process can deadlock on a lock some other thread held).  It may *spawn*:
``subprocess`` starts a new interpreter by fork+exec, with nothing run between the two but
the exec, which is safe with threads (and, unlike ``multiprocessing``, also inside a
daemonic Celery or pool worker).  The new interpreter has no threads, so it analyses the
trace as the CLI does, with the second CPU (a forked child, core/child_process.py): the same
files, faster. The fork, spawn and parent-death helpers are core/child_process.py's.

:class:`SpawnedAnalysis` starts the child at once, so its imports run while the caller
fetches the trace; :meth:`SpawnedAnalysis.run` then hands it the work and waits.  The child
dies with the thread that started it (``PR_SET_PDEATHSIG``; an Airflow task runs in its
main thread), and leaving the ``with`` block kills and reaps it.  A bad trace raises the
same :class:`TraceError` as in one process; anything else raises ``RuntimeError`` with the
child's one-line reason.  Where no CPU is free at the moment (one CPU, or a worker busy with
other tasks), :func:`analysis_runner` runs the trace in the caller instead: a second
interpreter would only add its start-up.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from traceladder.core.errors import first_line

from traceladder.core.child_process import cpu_free_now, die_with_parent, kill_child, spare_cpu, spawn_module

from .model.events import TraceError

__all__ = ["AnalysisRunner", "SpawnedAnalysis", "analysis_runner", "cpu_free_now"]

# the folder that holds the traceladder package: the child must import this same copy
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class AnalysisRunner(Protocol):
    def run(self, trace_path: Path, out_dir: Path, data: bytearray | None = None, **options: Any) -> dict[str, Any]:
        """``data``: the trace's bytes, in memory; a runner that needs the file writes them to
        ``trace_path`` first."""


class InProcessAnalysis:
    """:func:`analyze_trace` in the caller, in one process (no fork).  A trace already in
    memory is read from there: no temporary file to write and map again (0.03-0.4 s for the
    145 MB bench trace here, more while other tasks write to the same disk)."""

    def run(self, trace_path: Path, out_dir: Path, data: bytearray | None = None, **options: Any) -> dict[str, Any]:
        from .analyzers.trace import analyze_trace

        return analyze_trace(trace_path, out_dir, split=False, data=data, **options)


class SpawnedAnalysis:
    """A fresh interpreter waiting for one trace to analyse (see the module's docstring)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = spawn_module(__name__, _PACKAGE_ROOT)

    def run(self, trace_path: Path, out_dir: Path, data: bytearray | None = None, **options: Any) -> dict[str, Any]:
        if self.proc is None:
            raise RuntimeError("this spawned analysis was already used")
        if data is not None:  # the child reads the file
            Path(trace_path).write_bytes(data)
        proc, self.proc = self.proc, None
        request = {"trace": str(trace_path), "out": str(out_dir), "options": options}
        try:
            out, _ = proc.communicate(json.dumps(request).encode())
        finally:
            kill_child(proc)
        try:
            msg = json.loads(out) if out else {}
        except ValueError:
            msg = {}
        if "result" in msg:
            result: dict[str, Any] = msg["result"]
            return result
        if "trace_error" in msg:
            raise TraceError(trace_path, msg["trace_error"])
        if "error" in msg:
            raise RuntimeError(f"in the spawned analysis process: {msg['error']}")
        raise RuntimeError(f"the spawned analysis process stopped with no result (exit code {proc.returncode})")

    def close(self) -> None:
        """Stop a child whose work is no longer wanted (the caller failed first)."""
        if self.proc is not None:
            proc, self.proc = self.proc, None
            kill_child(proc)

    def __enter__(self) -> SpawnedAnalysis:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


@contextmanager
def analysis_runner(spawn: bool | None = None) -> Iterator[AnalysisRunner]:
    """A runner for one trace: spawned (started now) when a second CPU is free now
    (:func:`cpu_free_now`), else in the caller.  ``spawn`` forces one or the other."""
    if spawn is None:
        spawn = cpu_free_now()
    if not spawn:
        yield InProcessAnalysis()
        return
    with SpawnedAnalysis() as runner:
        yield runner


def _serve(parent: int) -> int:
    """In the child: wait for the request on stdin, analyse, answer on stdout."""
    die_with_parent(parent)
    from .analyzers.trace import analyze_trace  # the imports overlap the caller's download

    raw = sys.stdin.buffer.read()
    if not raw:  # the caller gave up before sending work
        return 0
    req = json.loads(raw)
    try:
        msg: dict[str, Any] = {
            "result": analyze_trace(Path(req["trace"]), Path(req["out"]), split=spare_cpu(), **req["options"])
        }
    except TraceError as exc:
        msg = {"trace_error": exc.reason}
    except Exception as exc:  # noqa: BLE001 - reported to the caller, which raises it
        msg = {"error": first_line(exc, typed=True)}
    sys.stdout.buffer.write(json.dumps(msg).encode())
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_serve(int(sys.argv[1])))
