"""A rung and its parent stepped alternately in the same two rank processes.

``python -m benchmarks.proxy_paired [--unit=moe_layer] ITERS SEED PARENT_JSON CHILD_JSON`` (each
``[argv, env]``) starts the two gloo ranks that a proxy-local run starts, builds both models in
each (workload.train.Trainer), and runs ITERS iterations. Each iteration steps both models once,
in an order drawn from SEED (the same on both ranks, since every step holds collectives). A step's figure is the slowest
rank's compute-thread CPU time, as ``metric: cpu`` judges a run. Rank 0 prints one JSON line
of per-iteration ``[parent_s, child_s]``. ``--unit=moe_layer`` steps one MoE layer of each rung
(LAYER_PASSES forward and backward passes) in place of the whole model: what a dispatcher or
expert path costs on its own.

Why: between two runs the VM's speed moves by 5-15% (docs/statistics.md), so separate runs need
many blocks to place a 5% effect. Two steps of one iteration are ~0.1 s apart, and a speed
change that slow hits both alike. What this leaves out is what differs only between processes:
start-up, the heap's layout, and one model's caches evicted by the other's step.
"""

from __future__ import annotations

import gc
import json
import random
import sys

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from traceladder.workload.comm import Comm
    from traceladder.workload.metrics import PeakMemory
    from traceladder.workload.settings import Settings


#: forward and backward passes of one MoE layer per timed unit (``--unit moe_layer``)
LAYER_PASSES = 5


def _moe_layer(s: Settings, comm: Comm, rank: int) -> Callable[[int, PeakMemory], object]:
    """One MoE layer of the rung (router, dispatch, experts, combine) at its sizes: each call runs
    LAYER_PASSES forward and backward passes on this rank's tokens."""
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


def paired_rank(
    rank: int, runs: list[tuple[list[str], dict[str, str]]], port: int, iters: int, seed: int, unit: str
) -> None:
    """`runs`: each model's (argv, environment), as the runner starts its run (the switches set
    both). `unit`: "step" (a whole training step) or "moe_layer"."""
    import os

    from traceladder.workload import train
    from traceladder.workload.settings import parse

    settings = [parse(argv, {**os.environ, **env}) for argv, env in runs]
    train._preload(settings[1], rank)  # rank_process preloads the first's
    with train.rank_process(rank, settings[0], port) as (comm, memory, _):
        steps = [train.Trainer(s, comm, rank).step if unit == "step" else _moe_layer(s, comm, rank) for s in settings]
        gc.disable()  # Megatron's --manual-gc, as proxy-local runs
        gc.collect()
        order = random.Random(seed)
        clock = train._Clock(memory)
        per_iter: list[list[float]] = []
        for it in range(1, iters + 1):
            cpu = [0.0, 0.0]
            for v in order.sample(range(2), 2):
                clock.cpu_lap()
                steps[v](it, memory)
                cpu[v] = clock.cpu_lap()
            slowest = comm.all_gather(torch.tensor([cpu], dtype=torch.float64)).max(0).values
            per_iter.append([float(x) for x in slowest])
        if rank == 0:
            print("PAIRED " + json.dumps(per_iter), flush=True)


def main(argv: list[str]) -> int:
    from traceladder.workload import launch

    unit = "step"
    if argv[0].startswith("--unit="):
        unit, argv = argv[0].split("=", 1)[1], argv[1:]
    iters, seed = int(argv[0]), int(argv[1])
    runs = [json.loads(argv[2]), json.loads(argv[3])]
    port = launch.free_port()
    ctx = launch._context()
    procs = [ctx.Process(target=paired_rank, args=(r, runs, port, iters, seed, unit)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return max((p.exitcode or 0) for p in procs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
