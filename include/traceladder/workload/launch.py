"""Rank processes: spawn one per EP rank, and fail fast if any of them fails.

Torch-free on purpose. The parent uses the standard library's spawn context (the same machinery
torch.multiprocessing.spawn wraps) so it never imports torch itself: that saves ~2 s of a ~5 s run
on 2 cores, since the children import torch in parallel anyway.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import NoReturn

from .quiet import pinning_enabled
from .proxy_config import ProxyConfig


# "spawn" keeps this process torch-free; the warm launcher's child (workload/forkserver.py) has torch
# imported already, and forks its ranks so they inherit it.
_start_method = "spawn"


def use_fork() -> None:
    """Start rank processes with fork (the warm launcher's child, which imported torch)."""
    global _start_method
    _start_method = "fork"


def _context() -> multiprocessing.context.ForkContext | multiprocessing.context.SpawnContext:
    return multiprocessing.get_context("fork") if _start_method == "fork" else multiprocessing.get_context("spawn")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class NodeLaunch:
    """torchrun's multi-node contract, as Primus's launcher passes it: this node starts ranks
    NODE_RANK*GPUS_PER_NODE ... +GPUS_PER_NODE-1 of NNODES*GPUS_PER_NODE, and every rank meets
    at MASTER_ADDR:MASTER_PORT."""

    nnodes: int
    node_rank: int
    gpus_per_node: int
    master_addr: str
    master_port: int

    @property
    def ranks(self) -> range:
        first = self.node_rank * self.gpus_per_node
        return range(first, first + self.gpus_per_node)

    @classmethod
    def from_env(cls, world_size: int, env: Mapping[str, str] | None = None) -> NodeLaunch | None:
        """The node's launch from NNODES, NODE_RANK, GPUS_PER_NODE, MASTER_ADDR and MASTER_PORT;
        None unless NNODES > 1 (one node keeps the single-node launch)."""
        env = os.environ if env is None else env
        try:
            nnodes = int(env.get("NNODES") or 1)
            if nnodes <= 1:
                return None
            launch = cls(
                nnodes=nnodes,
                node_rank=int(env.get("NODE_RANK") or 0),
                gpus_per_node=int(env.get("GPUS_PER_NODE") or 1),
                master_addr=env.get("MASTER_ADDR") or "",
                master_port=int(env.get("MASTER_PORT") or 0),
            )
        except ValueError as exc:
            raise SystemExit(f"[proxy] bad multi-node environment: {exc}") from None
        if launch.nnodes * launch.gpus_per_node != world_size:
            raise SystemExit(
                f"[proxy] NNODES={launch.nnodes} x GPUS_PER_NODE={launch.gpus_per_node} is not the "
                f"world size {world_size} (expert_model_parallel_size)"
            )
        if not 0 <= launch.node_rank < launch.nnodes or not launch.master_addr or launch.master_port <= 0:
            raise SystemExit(
                f"[proxy] multi-node launch needs 0 <= NODE_RANK < NNODES, MASTER_ADDR and MASTER_PORT "
                f"(got NODE_RANK={launch.node_rank}, MASTER_ADDR={launch.master_addr!r}, "
                f"MASTER_PORT={launch.master_port})"
            )
        return launch


def exit_after(body: Callable[[], object], who: str) -> NoReturn:
    """A rank process's end: run `body`, then leave at once with os._exit, any exception as a
    traceback on stderr and exit 1 (no slow interpreter/gloo teardown that could leave peers
    waiting). `who` names the rank in that message."""
    code = 0
    try:
        body()
    except BaseException:  # noqa: BLE001 - a rank must never die silently
        print(f"{who} failed:", file=sys.stderr)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _rank_entry(rank: int, settings: ProxyConfig, port: int, *, master_addr: str | None = None) -> None:
    """Child process body: one rank's training run (`exit_after`)."""

    def body() -> None:
        from .train import run_rank

        if master_addr is None:
            run_rank(rank, settings, port)
        else:  # a node of a multi-node launch: global rank, the first node's rendezvous
            run_rank(rank, settings, port, master_addr=master_addr)

    exit_after(body, f"[proxy] rank {rank}")


def run_local(settings: ProxyConfig) -> int:
    """World size 1: no process group, collectives degenerate to local ops, run in this process."""
    try:
        from .train import run_rank

        run_rank(0, settings, 0)
    except Exception:  # noqa: BLE001 - a rank must never die silently
        print("[proxy] rank 0 failed:", file=sys.stderr)
        traceback.print_exc()
        return 1
    return 0


def spawn(settings: ProxyConfig, *, node: NodeLaunch | None = None) -> int:
    """Start the ranks and watch them. `node` (default: NodeLaunch.from_env, set only when
    NNODES > 1) starts this node's ranks only, with their global rank numbers."""
    node = node if node is not None else NodeLaunch.from_env(settings.world_size)
    if node is not None:
        return _spawn_node(settings, node)
    world = settings.world_size
    # One math thread per rank (quiet.settle pins it): oversubscription makes step times meaningless.
    threads = 1 if pinning_enabled() else max(1, (os.cpu_count() or 1) // world)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    ctx = _context()
    port = free_port()
    procs = [
        ctx.Process(target=_rank_entry, args=(r, settings, port), name=f"proxy-rank{r}", daemon=True)
        for r in range(world)
    ]
    return _start_and_monitor(procs)


def _spawn_node(settings: ProxyConfig, node: NodeLaunch) -> int:
    """One node of a multi-node launch: its GPUS_PER_NODE ranks, numbered globally."""
    threads = 1 if pinning_enabled() else max(1, (os.cpu_count() or 1) // node.gpus_per_node)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    ctx = _context()
    procs = [
        ctx.Process(
            target=_rank_entry,
            args=(r, settings, node.master_port),
            kwargs={"master_addr": node.master_addr},
            name=f"proxy-rank{r}",
            daemon=True,
        )
        for r in node.ranks
    ]
    return _start_and_monitor(procs)


def _start_and_monitor(procs: Sequence[BaseProcess]) -> int:
    """Start the rank processes and wait on them; SIGTERM stops them all first."""
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
