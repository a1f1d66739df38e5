"""A rung and its parent stepped alternately in the same two rank processes.

``python -m benchmarks.proxy_paired ITERS SEED PARENT_JSON CHILD_JSON`` (each ``[argv, env]``) starts the two
gloo ranks that a proxy-local run starts, builds both models in each (workload.train.Trainer),
and runs ITERS iterations. Each iteration steps both models once, in an order drawn from SEED
(the same on both ranks, since every step holds collectives). A step's figure is the slowest
rank's compute-thread CPU time, as ``metric: cpu`` judges a run. Rank 0 prints one JSON line
of per-iteration ``[parent_s, child_s]``.

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

import torch


def paired_rank(rank: int, runs: list[tuple[list[str], dict[str, str]]], port: int, iters: int, seed: int) -> None:
    """`runs`: each model's (argv, environment), as the runner starts its run (the switches set both)."""
    import os

    from traceladder.workload import train
    from traceladder.workload.settings import parse

    settings = [parse(argv, {**os.environ, **env}) for argv, env in runs]
    train._preload(settings[1], rank)  # rank_process preloads the first's
    with train.rank_process(rank, settings[0], port) as (comm, memory, _):
        trainers = [train.Trainer(s, comm, rank) for s in settings]
        gc.disable()  # Megatron's --manual-gc, as proxy-local runs
        gc.collect()
        order = random.Random(seed)
        clock = train._Clock(memory)
        per_iter: list[list[float]] = []
        orders = []
        for it in range(1, iters + 1):
            cpu = [0.0, 0.0]
            seq = order.sample(range(2), 2)
            orders.append(seq[0])
            for v in seq:
                clock.cpu_lap()
                trainers[v].step(it, memory)
                cpu[v] = clock.cpu_lap()
            slowest = comm.all_gather(torch.tensor([cpu], dtype=torch.float64)).max(0).values
            per_iter.append([float(x) for x in slowest])
        if rank == 0:
            print("PAIRED " + json.dumps(per_iter), flush=True)
            print("ORDER " + json.dumps(orders), flush=True)


def main(argv: list[str]) -> int:
    from traceladder.workload import launch

    iters, seed = int(argv[0]), int(argv[1])
    runs = [json.loads(argv[2]), json.loads(argv[3])]
    port = launch.free_port()
    ctx = launch._context()
    procs = [ctx.Process(target=paired_rank, args=(r, runs, port, iters, seed)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return max((p.exitcode or 0) for p in procs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
