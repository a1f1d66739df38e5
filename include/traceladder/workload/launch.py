"""Rank processes: spawn one per EP rank, and fail fast if any of them fails.

Torch-free on purpose. The parent uses the standard library's spawn context (the same machinery
torch.multiprocessing.spawn wraps) so it never imports torch itself: that saves ~2 s of a ~5 s run
on 2 cores, since the children import torch in parallel anyway.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import traceback
from collections.abc import Sequence
from multiprocessing.process import BaseProcess
from types import FrameType

from .quiet import pinning_enabled
from .settings import Settings


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank_entry(rank: int, settings: Settings, port: int) -> None:
    """Child process body: any exception → traceback on stderr and exit 1 at once (no slow
    interpreter/gloo teardown that could leave peers waiting)."""
    code = 0
    try:
        from .train import run_rank

        run_rank(rank, settings, port)
    except BaseException:  # noqa: BLE001 - a rank must never die silently
        print(f"[proxy] rank {rank} failed:", file=sys.stderr)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_local(settings: Settings) -> int:
    """World size 1: no process group, collectives degenerate to local ops, run in this process."""
    try:
        from .train import run_rank

        run_rank(0, settings, 0)
    except Exception:  # noqa: BLE001 - a rank must never die silently
        print("[proxy] rank 0 failed:", file=sys.stderr)
        traceback.print_exc()
        return 1
    return 0


def spawn(settings: Settings) -> int:
    world = settings.world_size
    # One math thread per rank (quiet.settle pins it): oversubscription makes step times meaningless.
    threads = 1 if pinning_enabled() else max(1, (os.cpu_count() or 1) // world)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    procs = [
        ctx.Process(target=_rank_entry, args=(r, settings, port), name=f"proxy-rank{r}", daemon=True)
        for r in range(world)
    ]
    for p in procs:
        p.start()

    def stop(signum: int, _frame: FrameType | None) -> None:
        _terminate(procs)
        sys.exit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return _monitor(procs)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _monitor(procs: Sequence[BaseProcess]) -> int:
    alive = list(procs)
    while alive:
        multiprocessing.connection.wait([p.sentinel for p in alive])
        for p in [p for p in alive if not p.is_alive()]:
            p.join()
            alive.remove(p)
            if p.exitcode != 0:
                print(f"[proxy] {p.name} exited with {p.exitcode}; stopping the other ranks", file=sys.stderr)
                _terminate(alive)
                return 1
    return 0


def _terminate(procs: Sequence[BaseProcess]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()
