"""A rung and its parent stepped alternately in the same two rank processes.

``python -m benchmarks.proxy_paired [--unit=moe_layer] [--child-first] ITERS SEED PARENT_JSON
CHILD_JSON`` (each ``[argv, env]``) starts the two gloo ranks that a proxy-local run starts,
builds both models in each (workload.train.Trainer; the parent first unless ``--child-first``),
and runs ITERS iterations. Each iteration steps both models once. The orders come in balanced
couples: a random one drawn from SEED (the same on both ranks, since every step holds
collectives), then its reverse. A step's figure is the slowest rank's compute-thread CPU time,
as ``metric: cpu`` judges a run. Rank 0 prints one JSON line of per-iteration
``[parent_s, child_s]``. ``--unit=moe_layer`` steps one MoE layer of each rung (LAYER_PASSES
forward and backward passes) in place of the whole model: what a dispatcher or expert path
costs on its own.

Why: between two runs the VM's speed moves by 5-15% (docs/statistics.md), so separate runs need
many blocks to place a 5% effect. The two steps of an iteration are 0.1-0.5 s apart, and a speed
change that slow hits both alike. What one such process pair cannot show is what is fixed for
the pair: the heap's layout, which model was built first, where the ranks run. The bench
therefore runs several pairs, alternating the build order, and takes its interval over them.
"""

from __future__ import annotations

import gc
import json
import os
import random
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traceladder.workload.comm import Comm
    from traceladder.workload.metrics import PeakMemory
    from traceladder.workload.proxy_config import ProxyConfig


#: forward and backward passes of one MoE layer per timed unit (``--unit=moe_layer``)
LAYER_PASSES = 5


def _moe_layer(s: ProxyConfig, comm: Comm, rank: int) -> Callable[[int, PeakMemory], object]:
    """One MoE layer of the rung (router, dispatch, experts, combine) at its sizes: each call runs
    LAYER_PASSES forward and backward passes on this rank's tokens."""
    import torch

    from traceladder.workload.moe import MoE

    torch.manual_seed(0)
    layer = MoE(s, comm)
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.02)
    x0 = torch.randn(s.seq_length, s.hidden_size, generator=torch.Generator().manual_seed(rank))
    token_ids = torch.arange(s.seq_length) + rank * s.seq_length

    def passes(_it: int, _memory: PeakMemory) -> None:
        for _ in range(LAYER_PASSES):
            x = x0.clone().requires_grad_()
            layer(x, token_ids).sum().backward()

    return passes


def balanced_orders(iters: int, seed: int) -> list[tuple[int, int]]:
    """Which model steps first in each iteration: a seeded random order, then its reverse, so
    either goes first equally often and a cost of going first or second cancels."""
    rng = random.Random(seed)
    orders: list[tuple[int, int]] = []
    while len(orders) < iters:
        first = rng.randrange(2)
        orders += [(first, 1 - first), (1 - first, first)]
    return orders[:iters]


def paired_rank(
    rank: int, runs: list[tuple[list[str], dict[str, str]]], port: int, iters: int, seed: int, unit: str, build: str
) -> None:
    """`runs`: each model's (argv, environment), as the runner starts its run (the switches set
    both). `unit`: "step" (a whole training step) or "moe_layer". `build`: "parent" or "child"
    first. Ends the process with os._exit, as a proxy rank does (no slow teardown)."""
    import torch

    from traceladder.workload import launch, train
    from traceladder.workload.proxy_config import parse

    def body() -> None:
        settings = [parse(argv, {**os.environ, **env}) for argv, env in runs]
        train._preload(settings[1], rank)  # rank_process preloads the first's
        with train.rank_process(rank, settings[0], port) as (comm, memory, _):
            make = (
                (lambda s: train.Trainer(s, comm, rank).step)
                if unit == "step"
                else (lambda s: _moe_layer(s, comm, rank))
            )
            built = {v: make(settings[v]) for v in ((0, 1) if build == "parent" else (1, 0))}
            steps = [built[0], built[1]]
            gc.disable()  # Megatron's --manual-gc, as proxy-local runs
            gc.collect()
            clock = train._Clock(memory)
            per_iter: list[list[float]] = []
            for it, order in enumerate(balanced_orders(iters, seed), start=1):
                cpu = [0.0, 0.0]
                for v in order:
                    clock.cpu_lap()
                    steps[v](it, memory)
                    cpu[v] = clock.cpu_lap()
                slowest = comm.all_gather(torch.tensor([cpu], dtype=torch.float64)).max(0).values
                per_iter.append([float(x) for x in slowest])
            if rank == 0:
                print("PAIRED " + json.dumps(per_iter), flush=True)

    launch.exit_after(body, f"[proxy_paired] rank {rank}")


def main(argv: list[str]) -> int:
    from traceladder.workload import launch

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as launch.spawn sets it before a rank imports torch
    unit, build = "step", "parent"
    while argv and argv[0].startswith("--"):
        flag, argv = argv[0], argv[1:]
        if flag.startswith("--unit="):
            unit = flag.split("=", 1)[1]
        elif flag == "--child-first":
            build = "child"
        else:
            print(f"proxy_paired: unknown flag {flag}", file=sys.stderr)
            return 2
    iters, seed = int(argv[0]), int(argv[1])
    runs = [json.loads(argv[2]), json.loads(argv[3])]
    port = launch.free_port()
    ctx = launch._context()
    procs = [
        ctx.Process(
            target=paired_rank, args=(r, runs, port, iters, seed, unit, build), name=f"paired-rank{r}", daemon=True
        )
        for r in range(2)
    ]
    # the proxy's own launcher: a rank that fails stops the other, SIGTERM stops both
    return launch._start_and_monitor(procs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
