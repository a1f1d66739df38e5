"""The warm launcher: `python -m traceladder.workload.forkserver NAME [--idle-s N]`.

A measure run's start-up is mostly the ranks importing torch (~2.5 s of a ~6 s run on 2 cores).
This process imports torch and the workload once, then serves requests on the abstract Unix
socket NAME (only from its own user: SO_PEERCRED). Per request it forks a fresh child that
becomes `python -m traceladder.workload <args>`: its own session, the request's stdout fd, env
and cwd, RNG and thread state as in a fresh interpreter; the child forks its rank processes
(fork, not spawn: they inherit the imported torch).

The launcher itself runs no torch op and starts no thread (a fork copies only the calling
thread, so a thread's locks or pools would be broken in the child): it checks that it is alone
before it serves. It exits when idle for --idle-s seconds, on a `stop` request or SIGTERM.
The idle limit is its lease on the DAG run: every rung (a request) and every `look` between
blocks (a `ping`) renews it, so a DAG run killed between tasks, which no task of its own outlives
to stop the launcher, takes the launcher with it within the lease (runner/forkserver_client.py).

Protocol, one request per connection: the client sends one JSON line {"args", "env", "cwd"}
with its output fd (SCM_RIGHTS); the launcher answers {"pid": N} once the child runs, then
{"exit": code} when it ends (code as subprocess.Popen reports it: -signal if killed).
A {"stop": true} request ends the launcher; a {"ping": true} request renews its lease and is
answered {"alive": true}.
"""

from __future__ import annotations

import argparse
import array
import json
import os
import random
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
from types import FrameType
from typing import Any

# numpy (imported by torch) starts an OpenBLAS thread pool at import; one thread means no pool.
# A cold rank has OMP_NUM_THREADS=1 (launch.spawn sets it), which OpenBLAS reads the same way.
_BLAS_ENV = "OPENBLAS_NUM_THREADS"
_MAX_REQUEST = 4 * 1024 * 1024


def _thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


def _import_workload() -> None:
    """Everything a rank imports, and the profiler's lazy import of torch._inductor (~1.4 s a
    profiled run would pay); restores the environment it changed."""
    previous = os.environ.get(_BLAS_ENV)
    os.environ[_BLAS_ENV] = "1"
    try:
        import torch
        import torch._inductor.config
        import torch.distributed  # noqa: F401

        from . import __main__, launch, train  # noqa: F401
    finally:
        if previous is None:
            os.environ.pop(_BLAS_ENV, None)
        else:
            os.environ[_BLAS_ENV] = previous


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def _read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One JSON line and the fds sent with its first bytes."""
    data, fds = b"", list[int]()
    fd_size = array.array("i").itemsize
    while not data.endswith(b"\n"):
        msg, anc, _flags, _addr = conn.recvmsg(65536, socket.CMSG_SPACE(4 * fd_size))
        if not msg:
            break
        data += msg
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(array.array("i", payload[: len(payload) - len(payload) % fd_size]))
        if len(data) > _MAX_REQUEST:
            break
    return json.loads(data.decode()), fds


def _status_code(status: int) -> int:
    """A wait status as subprocess.Popen.returncode spells it."""
    return os.waitstatus_to_exitcode(status)


class Launcher:
    def __init__(self, name: str, idle_s: float) -> None:
        self.name, self.idle_s = name, idle_s
        self.children: dict[int, socket.socket] = {}  # workload pid -> its client's connection
        self.last_active = time.monotonic()
        self.stopping = False
        self.import_env = dict(os.environ)  # what libgomp and OpenBLAS read at import
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind("\0" + name)
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.selector = selectors.DefaultSelector()

    def serve(self) -> int:
        def stop(_signum: int, _frame: FrameType | None) -> None:
            self.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        selector = self.selector
        selector.register(self.sock, selectors.EVENT_READ)
        print(f"[warm] launcher {os.getpid()} serving {self.name!r} (idle exit after {self.idle_s:g} s)", flush=True)
        while not self.stopping:
            for _key, _events in selector.select(timeout=0.2):
                self._accept()
            self._reap()
            if not self.children and time.monotonic() - self.last_active > self.idle_s:
                print(f"[warm] launcher {os.getpid()} idle for {self.idle_s:g} s: exiting", flush=True)
                break
        selector.close()
        self.sock.close()
        for conn in self.children.values():  # their workloads run on in their own sessions
            conn.close()
        return 0

    def _accept(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except BlockingIOError:
            return
        self.last_active = time.monotonic()
        conn.setblocking(True)
        conn.settimeout(10)
        fds: list[int] = []
        try:
            if _peer_uid(conn) != os.getuid():
                conn.close()
                return
            request, fds = _read_request(conn)
            if request.get("ping"):  # the lease renewed (last_active, above): nothing to run
                conn.sendall(b'{"alive": true}\n')
                conn.close()
                return
            if request.get("stop"):
                self.stopping = True
                conn.sendall(b'{"stopping": true}\n')
                conn.close()
                return
            if len(fds) != 1:
                raise ValueError(f"expected one output fd, got {len(fds)}")
            pid = self._fork(request, fds[0], conn)
        except Exception as exc:  # noqa: BLE001 - a bad request must not end the launcher
            try:
                conn.sendall((json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n").encode())
            except OSError:
                pass
            conn.close()
            return
        finally:
            for fd in fds:
                os.close(fd)
        try:
            conn.sendall((json.dumps({"pid": pid}) + "\n").encode())
        except OSError:
            pass  # the client went away; the workload still runs, its group is the client's to stop
        self.children[pid] = conn
        print(f"[warm] workload {pid} started in {request['cwd']}", flush=True)

    def _fork(self, request: dict[str, Any], out_fd: int, conn: socket.socket) -> int:
        args = [str(a) for a in request["args"]]
        env = {str(k): str(v) for k, v in dict(request["env"]).items()}
        cwd = str(request["cwd"])
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 1
            try:
                conn.close()  # the client's end of it must see EOF if the launcher dies
                code = self._become_workload(args, env, cwd, out_fd)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # noqa: BLE001 - the child must never return into the loop
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        return pid

    def _become_workload(self, args: list[str], env: dict[str, str], cwd: str, out_fd: int) -> int:
        """In the forked child: leave the launcher's state, then run the workload's main()."""
        os.setsid()  # its own session: the runner's deadline kills the whole group
        self.selector.close()
        self.sock.close()
        for conn in self.children.values():
            conn.close()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        reset_process_state(self.import_env)
        from . import launch
        from .__main__ import main

        launch.use_fork()
        sys.argv = [f"{sys.executable} -m traceladder.workload", *args]
        return main(args)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            self.last_active = time.monotonic()
            if conn is None:
                continue
            print(f"[warm] workload {pid} exited with {_status_code(status)}", flush=True)
            try:
                conn.sendall((json.dumps({"exit": _status_code(status)}) + "\n").encode())
            except OSError:
                pass
            conn.close()


def reset_process_state(import_env: dict[str, str]) -> None:
    """What a fresh interpreter would have, where a fork would otherwise carry the launcher's:
    fresh entropy for `random`, numpy's global RNG and torch's default generator (a fresh
    interpreter seeds each from the OS), and torch's intra-op pool sized from this request's
    OMP_NUM_THREADS (libgomp read the launcher's at import)."""
    import torch

    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    torch.seed()
    wanted = os.environ.get("OMP_NUM_THREADS", "")
    if wanted != import_env.get("OMP_NUM_THREADS", "") and wanted.isdigit() and int(wanted) > 0:
        torch.set_num_threads(int(wanted))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m traceladder.workload.forkserver")
    parser.add_argument("name", help="the abstract Unix socket name to serve")
    parser.add_argument("--idle-s", type=float, default=7.0, help="exit after this many idle seconds (its lease)")
    opts = parser.parse_args(argv)
    _import_workload()
    threads = _thread_count()
    if threads != 1:  # a fork would copy a half-held lock or a dead pool: refuse to serve
        print(f"[warm] the imports started {threads - 1} thread(s); not serving", file=sys.stderr, flush=True)
        return 3
    try:
        launcher = Launcher(opts.name, opts.idle_s)
    except OSError as exc:  # the name is taken: another launcher serves it
        print(f"[warm] cannot serve {opts.name!r}: {exc}", file=sys.stderr, flush=True)
        return 4
    return launcher.serve()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown with torch loaded (~0.7 s, nothing to keep)
