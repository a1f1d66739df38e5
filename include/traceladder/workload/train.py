"""One rank's training loop: Megatron-style step (micro-batch accumulation, DP grad all-reduce of the
dense weights, clipped AdamW), Primus's log line from the last rank, and Primus's profiler window."""

from __future__ import annotations

import contextlib
import datetime
import gc
import gzip
import importlib
import math
import os
import shutil
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.autograd.profiler import record_function

from .comm import Comm
from .data import MockData
from .ddp import GradBuffer
from .extra import ExtraWork
from .metrics import IterationLog, PeakMemory
from .model import Model
from .optim import AdamW
from . import recompute
from .quiet import fix_threads, pin_rank, steady_malloc
from .proxy_config import ProxyConfig

# Fault injection for testing the platform's failure handling: rank 0 raises at this iteration.
FAULT_ENV = "TRACELADDER_PROXY_FAIL_AT_ITER"
# Set to 1: the last rank also prints each rank's compute-thread CPU ms per iteration (a noise
# diagnostic for the bench; the log line keeps the slowest rank's figure, the verdict metric).
RANK_CPU_ENV = "TRACELADDER_PROXY_RANK_CPU"
RANK_CPU_PREFIX = "[proxy] compute-thread CPU ms by rank:"


def lr_at(s: ProxyConfig, step: int) -> float:
    """Megatron's scheduler after `step` optimizer steps (linear warmup, then decay to min_lr)."""
    if s.lr_warmup_iters and step <= s.lr_warmup_iters:
        return s.lr * step / s.lr_warmup_iters
    if s.lr_decay_style == "constant":
        return s.lr
    span = max(s.train_iters - s.lr_warmup_iters, 1)
    frac = min(max(step - s.lr_warmup_iters, 0) / span, 1.0)
    coeff = 0.5 * (math.cos(math.pi * frac) + 1.0) if s.lr_decay_style == "cosine" else 1.0 - frac
    return s.min_lr + coeff * (s.lr - s.min_lr)


def make_profiler(s: ProxyConfig, rank: int) -> Any:
    """Primus's torch profiler: iterations profile_step_start .. profile_step_end-1 (1-based) are
    recorded; the trace is written when iteration profile_step_end starts."""
    if not (s.profiling and rank in s.profile_ranks):
        return _NoProfiler()
    start, end = s.profile_step_start, s.profile_step_end
    # prof.step() closes each iteration, so iteration i is profiler step i-1.
    schedule = torch.profiler.schedule(
        wait=max(start - 2, 0), warmup=1 if start >= 2 else 0, active=end - start, repeat=1
    )
    handler = _trace_writer(
        os.path.join(s.workspace, "tensorboard"),
        f"primus-megatron-exp[{s.exp_name}]-rank[{rank}]",
        s.torch_profiler_use_gzip,
    )
    return torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, schedule=schedule, on_trace_ready=handler
    )


# Deflate level of the .gz traces. torch's own .gz export gzips line by line at level 9: 2.0-2.5 s
# of a 1-step proxy trace (29 MB of JSON), against 0.16 s for kineto to write that JSON and 0.08 s
# to compress it at level 3 (2.2 MB rather than 1.4 MB). The proxy's profile and lens runs write
# 16 such traces in a demo; the level changes the file's size, never its content.
TRACE_GZIP_LEVEL = 3


def _preload(s: ProxyConfig, rank: int) -> None:
    """Modules torch imports lazily on a path this run takes, imported before the run's time and
    memory are counted, as a warm launcher's child has them already. The profiler's first start
    imports torch._inductor (and dynamo, ~1.4 s here), which would land in the measured iterations
    when the window opens. torch.autograd.backward with explicit grads, as the recompute replay
    calls it, imports torch.fx.experimental.symbolic_shapes: sympy and ~490 modules, 13 MB of heap
    that a cold rank counted as the run's peak memory."""
    if s.profiling and rank in s.profile_ranks:
        importlib.import_module("torch._inductor.config")
    if s.recomputed_layers() or s.recompute_granularity == "selective":
        importlib.import_module("torch.fx.experimental.symbolic_shapes")


def _trace_writer(directory: str, worker: str, use_gzip: bool) -> Any:
    """Primus's naming, <worker>.<unix ms>.pt.trace.json[.gz] (torch's own tensorboard handler
    now stamps nanoseconds)."""

    def write(prof: torch.profiler.profile) -> None:
        os.makedirs(directory, exist_ok=True)
        stem = os.path.join(directory, f"{worker}.{time.time_ns() // 1_000_000}")
        if not use_gzip:
            prof.export_chrome_trace(f"{stem}.pt.trace.json")
            return
        # kineto writes the JSON under a name the trace collector (*.pt.trace.json*) does not
        # match, so a run killed mid-export leaves no half trace to collect; then it is compressed
        plain = f"{stem}.export-partial.json"
        prof.export_chrome_trace(plain)
        try:
            with (
                open(plain, "rb") as src,
                gzip.open(f"{stem}.pt.trace.json.gz", "wb", compresslevel=TRACE_GZIP_LEVEL) as dst,
            ):
                shutil.copyfileobj(src, dst, 1 << 20)
        finally:
            os.remove(plain)

    return write


class _NoProfiler(contextlib.AbstractContextManager):
    def __exit__(self, *exc: object) -> None:
        return None

    def step(self) -> None:
        pass


def _sync_dense_grads(buffer: GradBuffer, comm: Comm) -> None:
    """EP ranks are DP ranks for the dense weights: one all-reduce (sum) of their grad buffer."""
    if comm.distributed and buffer.flat.numel():
        comm.all_reduce_(buffer.flat)


def _clip(dense: list[torch.nn.Parameter], experts: list[torch.nn.Parameter], max_norm: float, comm: Comm) -> float:
    """Global grad norm (dense grads are replicated, expert grads sharded) and clip to max_norm."""

    def sq(ps: list[torch.nn.Parameter]) -> torch.Tensor:
        grads = [p.grad for p in ps if p.grad is not None]
        return torch.stack(torch._foreach_norm(grads)).pow(2).sum() if grads else torch.zeros(())

    expert_sq = comm.all_reduce_(sq(experts).reshape(1))
    norm = float((sq(dense) + expert_sq[0]).sqrt())
    if max_norm > 0 and norm > max_norm:
        grads = [p.grad for p in dense + experts if p.grad is not None]
        torch._foreach_mul_(grads, max_norm / (norm + 1e-6))
    return norm


def _optimizer(model: Model, s: ProxyConfig) -> AdamW:
    # Megatron: no weight decay on norms and biases (the 1-D parameters).
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return AdamW(
        [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr_at(s, 0),
        betas=(s.adam_beta1, s.adam_beta2),
    )


@contextlib.contextmanager
def rank_process(
    rank: int, s: ProxyConfig, port: int, *, master_addr: str | None = None
) -> Iterator[tuple[Comm, PeakMemory, str]]:
    """This process as rank `rank`: threads, allocator and process group set up, its peak memory
    counted from here; yields (comm, memory, a line saying where it runs). `master_addr`
    (multi-node: the first node's address, torchrun's MASTER_ADDR) replaces the loopback
    rendezvous; None keeps the single-node one."""
    # The run's peak memory is counted from here: the interpreter and torch are not the run's, and
    # a rank forked by the warm launcher shares the launcher's pages (metrics.PeakMemory).
    _preload(s, rank)
    gc.collect()  # the imports' garbage is not the run's: freed later, it would lower the peak
    memory = PeakMemory()
    recompute.after_replay = memory.sample
    threads = fix_threads(s.world_size)
    steady_malloc()
    comm = Comm(rank, s.world_size)
    if comm.distributed:
        if master_addr is None or master_addr in ("127.0.0.1", "localhost"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{master_addr or '127.0.0.1'}:{port}",
            rank=rank,
            world_size=s.world_size,
            timeout=datetime.timedelta(minutes=s.distributed_timeout_minutes),
        )
    placement = pin_rank(rank)  # after the process group: gloo's own threads keep floating
    try:
        yield comm, memory, f"[proxy] rank {rank}: {placement}, {threads} intra-op thread(s)"
    finally:
        if comm.distributed:
            dist.destroy_process_group()


def run_rank(rank: int, s: ProxyConfig, port: int, *, master_addr: str | None = None) -> None:
    """`rank` is the global rank; `master_addr` as rank_process takes it."""
    with rank_process(rank, s, port, master_addr=master_addr) as (comm, memory, placement):
        _train(rank, s, comm, placement, memory)


class Trainer:
    """One model's training state on this rank, and its Megatron step: the micro-batches'
    forward and backward, the dense grads' all-reduce, the clipped AdamW. The training loop steps
    one; the paired calibration bench (benchmarks/proxy_paired.py) alternates two."""

    def __init__(self, s: ProxyConfig, comm: Comm, rank: int) -> None:
        self.s, self.comm = s, comm
        self.model = Model(s, comm)
        self.dense, self.experts = self.model.dense_parameters(), self.model.expert_parameters()
        self.dense_grads, self.expert_grads = GradBuffer(self.dense), GradBuffer(self.experts)  # Megatron's DDP buffers
        self.opt = _optimizer(self.model, s)
        self.data = MockData(s, rank)
        self.extra = ExtraWork(s)  # the positive control (extra_work_pct); nothing when 0
        self.tokens_per_step = s.global_batch_size * s.seq_length
        self.autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=s.bf16)

    def step(self, it: int, memory: PeakMemory) -> tuple[float, float]:
        """Iteration `it` (1-based): (this rank's share of the loss, the global grad norm)."""
        s = self.s
        for group in self.opt.param_groups:
            group["lr"] = lr_at(s, it - 1)
        loss_sum = torch.zeros(())
        for m in range(s.num_micro_batches):
            tokens, labels, token_ids = self.data.micro_batch(it, m)
            with self.autocast:
                logits = self.model(tokens, token_ids)
            # Sum over this micro-batch / all tokens of the global batch: summed over ranks
            # and micro-batches this is the global-batch mean, whatever the world size.
            loss = F.cross_entropy(logits.float(), labels.reshape(-1), reduction="sum") / self.tokens_per_step
            memory.sample()  # the micro-batch's saved activations are all alive here
            loss.backward()
            loss_sum += loss.detach()
        self.extra()
        self.dense_grads.expose()
        self.expert_grads.expose()
        _sync_dense_grads(self.dense_grads, self.comm)
        with record_function("optimizer_step"):
            grad_norm = _clip(self.dense, self.experts, s.clip_grad, self.comm)
            self.opt.step()
            self.dense_grads.zero()
            self.expert_grads.zero()
        memory.sample()
        return float(loss_sum), grad_norm


def _train(rank: int, s: ProxyConfig, comm: Comm, placement: str, memory: PeakMemory) -> None:
    fail_at = int(os.environ.get(FAULT_ENV, "0") or 0)
    rank_cpu = os.environ.get(RANK_CPU_ENV, "").strip() == "1"
    trainer = Trainer(s, comm, rank)
    extra = trainer.extra
    last = rank == s.world_size - 1
    log = IterationLog(s)
    if last:
        print(s.header(), flush=True)
        print(placement, flush=True)
    if s.manual_gc:  # Megatron's --manual-gc: collect now, then only where the interval says
        gc.disable()
        gc.collect()
    with make_profiler(s, rank) as prof:
        clock = _Clock(memory)
        for it in range(1, s.train_iters + 1):
            if it == fail_at and rank == 0:
                raise RuntimeError(f"injected fault at iteration {it} ({FAULT_ENV})")
            if s.manual_gc and s.manual_gc_interval and it % s.manual_gc_interval == 0:
                gc.collect()
            loss_share, grad_norm = trainer.step(it, memory)
            cpu_seconds = clock.cpu_lap()  # before the log's collective, as the wall lap below
            # One small collective for the log: every rank's loss share, its peak memory and its
            # compute-thread CPU time (the slowest rank sets a synchronous step).
            stats = comm.all_gather(
                torch.tensor([[loss_share, float(memory.peak_bytes()), cpu_seconds]], dtype=torch.float64)
            )
            seconds = clock.lap()
            if extra.enabled and it == max(s.log_avg_skip_iterations, 1):  # the last warm-up iteration
                basis = float(stats[:, 2].max()) if s.extra_work_basis == "cpu" else seconds
                extra.calibrate(basis, comm)
                if last:
                    print(
                        f"[proxy] extra_work: {extra.flops / 1e9:.3f} GFLOP per iteration "
                        f"({s.extra_work_pct:g}% of the {basis * 1000:.1f} ms warm-up step, {s.extra_work_basis})",
                        flush=True,
                    )
                clock.lap()  # the calibration itself is in no iteration's time
                clock.cpu_lap()
            if last:
                if rank_cpu:
                    print(
                        f"{RANK_CPU_PREFIX} {' '.join(f'{v * 1000.0:.2f}' for v in stats[:, 2].tolist())}", flush=True
                    )
                top = int(stats[:, 1].argmax())
                print(
                    log.line(
                        it,
                        seconds,
                        lr_at(s, it),
                        float(stats[:, 0].sum()),
                        grad_norm,
                        top,
                        float(stats[top, 1]),
                        float(stats[:, 2].max()),
                    ),
                    flush=True,
                )
            prof.step()
    sys.stdout.flush()


class _Clock:
    """Megatron's interval timer: wall time between consecutive iteration ends; and the compute
    thread's own CPU time over the same span (CLOCK_THREAD_CPUTIME_ID: gloo's threads and the
    wait for a peer are not in it). Both leave out the time the peak-memory samples took, which
    is the proxy's instrument, not its code."""

    def __init__(self, memory: PeakMemory) -> None:
        self._memory = memory
        self._t, self._cost = time.perf_counter(), memory.cost_s
        self._cpu, self._cost_cpu = time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID), memory.cost_cpu_s

    def lap(self) -> float:
        t, cost = time.perf_counter(), self._memory.cost_s
        dt = (t - self._t) - (cost - self._cost)
        self._t, self._cost = t, cost
        return dt

    def cpu_lap(self) -> float:
        c, cost = time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID), self._memory.cost_cpu_s
        dc = (c - self._cpu) - (cost - self._cost_cpu)
        self._cpu, self._cost_cpu = c, cost
        return dc
