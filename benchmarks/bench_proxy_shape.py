"""The proxy's calibration against the seed: each proxy-local rung's effect against its parent.

* ``proxy_shape``: ``SHAPE_BLOCKS`` blocks (``--quick``: 2); each block runs every rung of
  proxy-local once (lens none, 2 EP ranks, as a ladder's slot runs it) in a shuffled order. Per
  rung and block: the run's figures as the runner keeps them (``runner.primus_log.summarize``):
  the median over measured iterations of the wall step time, the mean of the slowest rank's
  compute-thread CPU time (``step cpu time per iteration``), and tokens/s/GPU and tokens per
  CPU-second for the batch rungs. The effect of a rung is the mean over blocks of its log
  ratio to its parent in the same block (paired), shown as a percentage with a Student t 95%
  interval over the blocks. Each is checked against its band (issue 25, item 1), on the metric
  the ladder judges (``metric: cpu``); the wall effect is beside it. The table goes to
  ``docs/figures/<date>-proxy_shape.md`` as well, with the CPU model, since the calibration
  depends on it.

* ``proxy_paired``: the same effects, each rung and its parent stepped alternately in the same
  two rank processes (``benchmarks/proxy_paired.py``), so the VM's speed between runs is out of
  the comparison; an A/A row for the instrument's bias. Table: ``docs/figures/<date>-proxy_paired.md``.

* ``moe_layer``: one MoE layer of grouped_gemm against deepep's, and of megamoe against
  grouped_gemm's, alternated the same way: what the dispatch and expert paths cost on their own.

* ``fused_chains``: each fused chain (workload/kernels.py: Sinkhorn, RMSNorm) against its unfused
  op-by-op path, forward and backward of one call at proxy-local's sizes on one core: the median
  over 5 alternating pairs of 200 calls each, as a ratio (fused / unfused) measured in the same run.

``TRACELADDER_BENCH_SHAPE_BLOCKS`` changes the block count. ``TRACELADDER_BENCH_SHAPE_ISA=avx2``
runs every proxy as on an AVX2-only CPU: ATen's kernels dispatch at ``ATEN_CPU_CAPABILITY=avx2``
and oneDNN's (the bf16 matmuls) at ``ONEDNN_MAX_CPU_ISA=AVX2``, and numba compiles the fused
kernels for ``NUMBA_CPU_NAME=haswell``, so no AVX-512, AVX512-BF16 or AMX instruction runs. The
figures file then gets its own name (``-proxy_shape-avx2.md``).
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks import proxy_paired
from benchmarks.bench_proxy_noise import proxy_command, proxy_env, proxy_iterations
from benchmarks.common import REPO, Context, Row, write_section_figures

SHAPE_BLOCKS = int(os.environ.get("TRACELADDER_BENCH_SHAPE_BLOCKS", "5"))
SHAPE_ISA = os.environ.get("TRACELADDER_BENCH_SHAPE_ISA", "").lower()
# What an AVX2-only CPU leaves: ATen's and oneDNN's own ISA caps (both documented switches).
# numba compiles the fused kernels for a named CPU instead of the host (haswell: AVX2 and FMA).
_ISA_ENV = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "NUMBA_CPU_NAME": "haswell"}}

# rung: (parent, seed effect in %, band: (lo, hi) in % of the parent, batch rung?)
# Step rungs: negative is faster. Batch rungs: tokens/s/GPU gain, positive is better.
BANDS: dict[str, tuple[str, float, tuple[float, float], bool]] = {
    "fusions": ("baseline", -38.8, (-100.0, -25.0), False),
    "attn_gluon_v3": ("fusions", -2.9, (-5.0, 5.0), False),
    "attn_turbo": ("attn_gluon_v3", -2.4, (-5.0, 5.0), False),
    "deepep": ("attn_turbo", 1.1, (-5.0, 5.0), False),
    "grouped_gemm": ("deepep", -10.1, (-100.0, -8.0), False),
    "megamoe": ("grouped_gemm", -12.0, (-100.0, -8.0), False),
    "recompute_off": ("megamoe", -7.1, (-100.0, -7.0), False),
    "gbs16": ("recompute_off", 18.3, (10.0, 1000.0), True),
    "gbs32": ("recompute_off", 29.5, (15.0, 1000.0), True),
}


@dataclass
class Measured:
    wall_ms: float
    cpu_ms: float
    tokens_wall: float
    tokens_cpu: float
    peak_gb: float


def _run(rung: str, python: str) -> Measured:
    from traceladder.runner.primus_log import summarize

    args, env, warmup = proxy_command(rung)
    env = {**env, **_ISA_ENV.get(SHAPE_ISA, {})}
    try:
        records = proxy_iterations(args, env, pin=True, python=python)
    except RuntimeError as exc:
        raise RuntimeError(f"{rung}: {exc}") from None
    m = summarize(records, skip_iterations=warmup)
    if m.step_cpu_ms is None or m.tokens_per_sec_per_gpu is None or m.tokens_per_cpu_s_per_gpu is None:
        raise RuntimeError(f"{rung}: the proxy logged no CPU time")
    return Measured(m.step_ms, m.step_cpu_ms, m.tokens_per_sec_per_gpu, m.tokens_per_cpu_s_per_gpu, m.peak_mem_gb or 0)


def _effect(logs: list[float]) -> tuple[float, float, float]:
    """(mean %, lo %, hi %) of paired log ratios: their mean with a Student t 95% interval."""
    from scipy.stats import t as student_t

    mean = statistics.fmean(logs)
    n = len(logs)
    half = float(student_t.ppf(0.975, n - 1)) * statistics.stdev(logs) / math.sqrt(n) if n > 1 else 0.0
    return 100 * math.expm1(mean), 100 * math.expm1(mean - half), 100 * math.expm1(mean + half)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return "unknown"
    name = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "unknown")
    flags = "avx512_bf16" if "avx512_bf16" in text else ("avx512f" if "avx512f" in text else "avx2-only")
    capped = f"; capped to {SHAPE_ISA}: {_ISA_ENV[SHAPE_ISA]}" if SHAPE_ISA in _ISA_ENV else ""
    return f"{name} ({flags}, {os.cpu_count()} cpus{capped})"


def bench_proxy_shape(ctx: Context) -> list[Row]:
    if SHAPE_ISA and SHAPE_ISA not in _ISA_ENV:
        raise RuntimeError(f"TRACELADDER_BENCH_SHAPE_ISA: {SHAPE_ISA!r} is not one of {sorted(_ISA_ENV)}")
    blocks = 2 if ctx.quick else SHAPE_BLOCKS
    rungs = ["baseline", *BANDS]
    rng = random.Random(25)
    data: dict[str, list[Measured]] = {r: [] for r in rungs}
    t0 = time.monotonic()
    for _ in range(blocks):
        order = rungs[:]
        rng.shuffle(order)
        for rung in order:
            data[rung].append(_run(rung, ctx.python))
    cpu = _cpu_model()
    rows, table = [], []
    for rung, (parent, seed, (lo, hi), batch) in BANDS.items():
        if batch:
            cpu_logs = [math.log(a.tokens_cpu / b.tokens_cpu) for a, b in zip(data[rung], data[parent])]
            wall_logs = [math.log(a.tokens_wall / b.tokens_wall) for a, b in zip(data[rung], data[parent])]
        else:
            cpu_logs = [math.log(a.cpu_ms / b.cpu_ms) for a, b in zip(data[rung], data[parent])]
            wall_logs = [math.log(a.wall_ms / b.wall_ms) for a, b in zip(data[rung], data[parent])]
        eff, elo, ehi = _effect(cpu_logs)
        weff, _, _ = _effect(wall_logs)
        ok = lo <= eff <= hi
        what = "tokens/CPU-s gain" if batch else "step CPU time"
        band = f"{lo:+.0f}%..{hi:+.0f}%".replace("+1000%", "inf").replace("-100%", "-inf")
        rows.append(
            Row(
                "proxy_shape",
                f"{rung} vs {parent}, {what}",
                eff,
                "%",
                f"in {band} (seed {seed:+.1f}%)",
                ok,
                f"{eff:+.1f}% [{elo:+.1f}, {ehi:+.1f}], wall {weff:+.1f}%, {blocks} blocks",
            )
        )
        table.append(
            f"| {rung} | {parent} | {seed:+.1f}% | {band} | {eff:+.1f}% [{elo:+.1f}, {ehi:+.1f}] | {weff:+.1f}% "
            f"| {'yes' if ok else 'NO'} |"
        )
    # peak_mem_gb is the run's activation memory (workload.metrics.PeakMemory): the band asks
    # recompute_off to hold at least 10% more of it than its parent (medians over blocks).
    peaks = {r: statistics.median(m.peak_gb for m in data[r]) for r in ("megamoe", "recompute_off")}
    rise = 100 * (peaks["recompute_off"] - peaks["megamoe"]) / peaks["recompute_off"] if peaks["recompute_off"] else 0.0
    rows.append(
        Row(
            "proxy_shape",
            "recompute_off peak memory rise, % of its activation memory",
            rise,
            "%",
            ">= 10 (seed: 117.3 -> 128.1 GB)",
            rise >= 10.0,
            f"median activation memory megamoe {peaks['megamoe']:.3f} GB, "
            f"recompute_off {peaks['recompute_off']:.3f} GB",
        )
    )
    wall = time.monotonic() - t0
    out = write_section_figures(
        f"proxy_shape{'-' + SHAPE_ISA if SHAPE_ISA else ''}",
        [
            "# The proxy's calibration against the seed (`python -m benchmarks --only proxy_shape`)",
            "",
            f"CPU: {cpu}. {blocks} blocks of every proxy-local rung, shuffled, {wall:.0f} s; "
            f"load {'/'.join(f'{x:.2f}' for x in os.getloadavg())} at the end.",
            "Effect: mean over blocks of the paired log ratio to the parent, Student t 95% interval; "
            "CPU = the slowest rank's compute-thread CPU time (batch rungs: tokens per CPU-second).",
            "",
            "| rung | parent | seed | band | proxy, CPU (95% CI) | proxy, wall | in band |",
            "|---|---|---|---|---|---|---|",
            *table,
            "",
            "Activation memory (the most live heap bytes at once above those after the imports, "
            f"workload.metrics.PeakMemory; median over blocks): megamoe "
            f"{peaks['megamoe']:.3f} GB, recompute_off {peaks['recompute_off']:.3f} GB, a rise of {rise:.1f}% "
            "of recompute_off's (band: at least 10%).",
            "",
        ],
    )
    rows.append(Row("proxy_shape", "figures file", float("nan"), "", "", None, str(out.relative_to(REPO))))
    return rows


def _chain_ms(fn: Callable[[], None], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1000 * (time.perf_counter() - t0) / calls


def bench_fused_chains(ctx: Context) -> list[Row]:
    import torch

    from traceladder.workload import ops

    torch.set_num_threads(1)  # as a proxy rank runs
    calls, pairs = (50, 3) if ctx.quick else (200, 5)
    gen = torch.Generator().manual_seed(25)
    logits, sk_grad = torch.randn(512, 4, 4, generator=gen), torch.randn(512, 4, 4, generator=gen)
    rows_x, norm_grad = torch.randn(512, 128, generator=gen), torch.randn(512, 128, generator=gen)
    weight = torch.ones(128, requires_grad=True)
    chains: dict[str, Callable[[bool], Callable[[], None]]] = {
        "Sinkhorn, 20 iterations, [512, 4, 4]": lambda fused: (
            lambda: ops.sinkhorn(logits.clone().requires_grad_(), 20, fused).backward(sk_grad)
        ),
        "RMSNorm [512, 128]": lambda fused: (
            lambda: ops.rms_norm(rows_x.clone().requires_grad_(), weight, 1e-6, fused).backward(norm_grad)
        ),
    }
    rows = []
    for name, make in chains.items():
        fused, unfused = make(True), make(False)
        fused(), unfused()  # warm: allocator, the kernels' first call
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(pairs):
            times[True].append(_chain_ms(fused, calls))
            times[False].append(_chain_ms(unfused, calls))
        ratio = statistics.median(a / b for a, b in zip(times[True], times[False]))
        rows.append(
            Row(
                "fused_chains",
                f"{name}: fused / unfused, forward + backward",
                ratio,
                "x",
                "",
                None,
                f"fused {statistics.median(times[True]):.3f} ms, unfused {statistics.median(times[False]):.3f} ms "
                f"(medians of {pairs} alternating pairs of {calls} calls, 1 thread)",
            )
        )
    return rows


#: iterations of each paired run (the first PAIRED_WARMUP left out: allocator and caches warm),
#: and paired runs (process pairs) per rung
PAIRED_ITERS, PAIRED_WARMUP = int(os.environ.get("TRACELADDER_BENCH_PAIRED_ITERS", "30")), 2
PAIRED_PROCESSES = int(os.environ.get("TRACELADDER_BENCH_PAIRED_PROCESSES", "3"))


Runs = list[tuple[list[str], dict[str, str]]]


def _paired_runs(child: str, parent: str) -> tuple[Runs, float]:
    """The parent's and the child's (proxy argv, environment), as the runner starts them, and
    the ratio of their tokens per step."""
    from traceladder.workload.proxy_config import parse

    runs = []
    for rung in (parent, child):
        args, env, _ = proxy_command(rung)
        if args[:2] != ["-m", "traceladder.workload"]:
            raise RuntimeError(f"{rung}: unexpected proxy command {args[:2]}")
        runs.append((args[2:], {**env, **_ISA_ENV.get(SHAPE_ISA, {})}))
    tokens = [parse(argv, {**os.environ, **env}).global_batch_size for argv, env in runs]
    return runs, tokens[1] / tokens[0]


def _paired(label: str, runs: Runs, iters: int, seed: int, python: str, unit: str, child_first: bool) -> list[float]:
    """Per-iteration log ratios child / parent of the slowest rank's step CPU time, from one
    benchmarks.proxy_paired run of `runs` (parent, child); `label` names them in errors."""
    import json
    import signal
    import subprocess

    env = proxy_env(runs[1][1], pin=True)
    argv = [python, "-m", "benchmarks.proxy_paired", f"--unit={unit}", *(["--child-first"] if child_first else [])]
    argv += [str(iters), str(seed), *(json.dumps(r) for r in runs)]
    # its own session, so a timeout stops the ranks too, not only their launcher
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(f"{label}: proxy_paired ran past 900 s; stopped") from None
    lines = [ln[len("PAIRED ") :] for ln in out.splitlines() if ln.startswith("PAIRED ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{label}: proxy_paired exited {proc.returncode}: {err.strip()[-300:]}")
    pairs = json.loads(lines[0])[PAIRED_WARMUP:]
    return [math.log(c / p) for p, c in pairs]


@dataclass
class PairedEffect:
    """A child's effect against its parent over several process pairs (percent)."""

    effect: float
    lo: float
    hi: float
    per_pair: list[float]  # each process pair's own effect
    iterations: int
    iteration_sd: float  # of an iteration's log ratio, within a pair (mean over pairs)

    def describe(self) -> str:
        return (
            f"{self.effect:+.1f}% [{self.lo:+.1f}, {self.hi:+.1f}] over {len(self.per_pair)} process pairs "
            f"({', '.join(f'{x:+.1f}' for x in self.per_pair)}), {self.iterations} iterations, "
            f"sd of an iteration's log ratio {100 * self.iteration_sd:.1f}%"
        )


def _paired_effect(
    child: str,
    parent: str,
    iters: int,
    processes: int,
    seed: int,
    python: str,
    *,
    unit: str = "step",
    batch: bool = False,
) -> PairedEffect:
    """`processes` proxy_paired runs, the build order alternating; the interval is over their
    means, since what is fixed for a process pair (the heap's layout) varies between them."""
    runs, token_ratio = _paired_runs(child, parent)
    per_process = []
    for k in range(processes):
        logs = _paired(f"{child} vs {parent}", runs, iters, seed + k, python, unit, child_first=k % 2 == 1)
        if batch:  # tokens per CPU-second: more tokens in a step, over its CPU time
            logs = [math.log(token_ratio) - x for x in logs]
        per_process.append(logs)
    means = [statistics.fmean(x) for x in per_process]
    eff, lo, hi = _effect(means)
    return PairedEffect(
        eff,
        lo,
        hi,
        [100 * math.expm1(m) for m in means],
        sum(map(len, per_process)),
        statistics.fmean(statistics.stdev(x) for x in per_process),
    )


def bench_proxy_paired(ctx: Context) -> list[Row]:
    """Each rung against its parent, stepped alternately in the same two rank processes
    (benchmarks/proxy_paired.py), so the VM's speed between runs is out of the comparison; and
    an A/A pair (recompute_off against itself) for the instrument's own bias."""
    iters, processes = (12, 2) if ctx.quick else (PAIRED_ITERS, PAIRED_PROCESSES)
    rows, table = [], []
    t0 = time.monotonic()
    cases = [(rung, *BANDS[rung]) for rung in BANDS] + [("recompute_off", "recompute_off", 0.0, (0.0, 0.0), False)]
    for i, (rung, parent, seed, (lo, hi), batch) in enumerate(cases):
        paired = _paired_effect(rung, parent, iters, processes, 100 * i, ctx.python, batch=batch)
        eff, elo, ehi = paired.effect, paired.lo, paired.hi
        name = "A/A: recompute_off vs itself" if rung == parent else f"{rung} vs {parent}"
        ok = elo <= 0 <= ehi if rung == parent else lo <= eff <= hi
        band = "0 in the interval" if rung == parent else f"{lo:+.0f}%..{hi:+.0f}%"
        band = band.replace("+1000%", "inf").replace("-100%", "-inf")
        what = "tokens/CPU-s gain" if batch else "step CPU time"
        rows.append(
            Row(
                "proxy_paired",
                f"{name}, {what}",
                eff,
                "%",
                band if rung == parent else f"in {band} (seed {seed:+.1f}%)",
                ok,
                paired.describe(),
            )
        )
        table.append(
            f"| {name} | {'' if rung == parent else f'{seed:+.1f}%'} | {band} "
            f"| {eff:+.1f}% [{elo:+.1f}, {ehi:+.1f}] | {', '.join(f'{x:+.1f}' for x in paired.per_pair)} "
            f"| {100 * paired.iteration_sd:.1f}% "
            f"| {'yes' if ok else 'NO'} |"
        )
    out = write_section_figures(
        f"proxy_paired{'-' + SHAPE_ISA if SHAPE_ISA else ''}",
        [
            "# The proxy's calibration, paired in process (`python -m benchmarks --only proxy_paired`)",
            "",
            f"CPU: {_cpu_model()}. Each rung and its parent built in the same two gloo rank processes and "
            f"stepped alternately (balanced orders), {iters} iterations ({PAIRED_WARMUP} left out), in "
            f"{processes} such process pairs per rung with the build order alternating; "
            f"{time.monotonic() - t0:.0f} s in all, load {'/'.join(f'{x:.2f}' for x in os.getloadavg())} "
            "at the end.",
            "Per process pair: the mean over iterations of the log ratio of the two steps' slowest-rank "
            "compute-thread CPU times (batch rungs: tokens per CPU-second). Effect: the mean of those, with "
            "a Student t 95% interval over the process pairs (what is fixed for a pair, such as the heap's "
            "layout, varies between them). The A/A row steps two copies of recompute_off: the instrument's "
            "own bias, whose interval should hold 0.",
            "",
            "| rung | seed | band | proxy, CPU (95% CI) | per process pair | sd of an iteration | in band |",
            "|---|---|---|---|---|---|---|",
            *table,
            "",
        ],
    )
    rows.append(Row("proxy_paired", "figures file", float("nan"), "", "", None, str(out.relative_to(REPO))))
    return rows


def bench_moe_layer(ctx: Context) -> list[Row]:
    """One MoE layer of each rung against its parent's, alternated in the same two rank processes
    (benchmarks/proxy_paired.py --unit=moe_layer): what the expert and dispatch paths cost on the
    compute thread, where the whole step's figure dilutes it."""
    iters, processes = (12, 2) if ctx.quick else (PAIRED_ITERS, PAIRED_PROCESSES)
    rows = []
    for i, (rung, parent) in enumerate([("grouped_gemm", "deepep"), ("megamoe", "grouped_gemm")]):
        paired = _paired_effect(rung, parent, iters, processes, 5000 + 100 * i, ctx.python, unit="moe_layer")
        rows.append(
            Row(
                "moe_layer",
                f"{rung} vs {parent}: one MoE layer, CPU time",
                paired.effect,
                "%",
                "",
                None,
                f"{paired.describe()}; a unit is {proxy_paired.LAYER_PASSES} forward and backward passes",
            )
        )
    return rows


SECTIONS = [bench_proxy_shape, bench_proxy_paired, bench_moe_layer, bench_fused_chains]
