"""Primus-format iteration lines, the FLOP estimate behind TFLOP/s, and host-memory readings."""

from __future__ import annotations

import ctypes
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from .proxy_config import ProxyConfig

GiB = 1024**3  # Primus's "GB" are GiB (torch.cuda.mem_get_info / 1024**3)


def model_flops_per_step(s: ProxyConfig) -> float:
    """Model FLOPs one rank does per optimizer step, Megatron-style: matmuls only (2·m·n·k), x3 for
    forward + backward (dgrad + wgrad), activation recompute not counted, elementwise work ignored.
    Attention uses the average number of keys a query really sees (window and compressed blocks)."""
    h, n = s.hidden_size, s.hc_mult
    seq, w = s.seq_length, min(s.attn_sliding_window, s.seq_length)
    per_token = 0.0
    for r in s.layer_ratios:
        keys = (w + 1) / 2 if seq <= w else w  # causal window: ~w keys once past the first window
        if r:
            keys += (seq // r) / 2  # completed compressed blocks, on average half of them
        per_token += 2 * h * 3 * h + 2 * h * h  # q, kv, o projections
        per_token += 2 * 2 * h * keys  # scores and weighted values over all heads (heads · d = h)
        per_token += 2 * (2 * n * h * (2 * n + n * n) + 2 * n * h + 2 * n * n * h + 2 * n * h)  # two mHC mixes
        per_token += 2 * h * s.num_experts  # router
        per_token += s.moe_router_topk * 2 * 3 * h * s.moe_ffn_hidden_size  # SwiGLU experts
    per_token += 2 * h * s.vocab_size  # output head
    tokens_per_rank = s.global_batch_size * s.seq_length / s.world_size
    return 3.0 * per_token * tokens_per_rank


def max_rss_bytes() -> int:
    """This process's peak RSS (VmHWM). Not ru_maxrss: Linux carries that across fork+exec, so
    a rank started from a big parent (a test runner, an Airflow worker) would report the parent's."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _MallInfo2(ctypes.Structure):
    # glibc's struct mallinfo2 (2.33+); uordblks (bytes allocated, every arena) and hblkhd (bytes in
    # mmapped blocks) are the two read here
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):  # not glibc, or glibc < 2.33
        return None
    fn.restype = _MallInfo2
    return fn


class PeakMemory:
    """The run's peak memory, the proxy's `rocm max mem usage`: the most bytes its tensors held at
    once, as torch.cuda.max_memory_allocated counts a GPU run's. That is the C heap's live bytes
    (glibc `mallinfo2`: allocated chunks plus mmapped blocks, every arena), the largest of its
    samples where a step's memory peaks (each micro-batch's loss, when its saved activations are
    all alive; each recompute replay; the step's end), above the live bytes when the run started,
    after the imports. Between samples it can only be under the true peak.

    Not the peak RSS (VmHWM): the allocator keeps what it frees (`quiet.steady_malloc`), so the
    heap's extent creeps up by a few MB a step through fragmentation, whatever the rung. In cold
    ranks that creep hid recompute_off's 25 MB of extra saved activations (its VmHWM read 2% below
    megamoe's), while ranks forked by the warm launcher showed them (+20%). A rank's live bytes
    at start also leave out a forked rank's inherited launcher pages. Without mallinfo2 (not
    glibc 2.33+) it falls back to VmHWM above the RSS at start."""

    def __init__(self) -> None:
        self._mallinfo = _mallinfo2()
        self._rss_at_start = current_rss_bytes()
        self._start = self._live()
        self._peak = self._start
        # Time spent sampling, which the step's clocks leave out: ~0.25 ms a sample here, up to
        # 5 a step with recompute on 3 layers against 2 without (1% of a step, not the code's).
        self.cost_s = 0.0
        self.cost_cpu_s = 0.0

    def _live(self) -> int:
        if self._mallinfo is None:
            return 0
        info = self._mallinfo()
        return int(info.uordblks + info.hblkhd)

    def sample(self) -> None:
        """Take the live bytes now into the peak (a few hundred µs: mallinfo2 walks the free lists)."""
        if self._mallinfo is None:
            return
        wall, cpu = time.perf_counter(), time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
        self._peak = max(self._peak, self._live())
        self.cost_cpu_s += time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID) - cpu
        self.cost_s += time.perf_counter() - wall

    def peak_bytes(self) -> int:
        if self._mallinfo is None:
            return max(max_rss_bytes() - self._rss_at_start, 0)
        return max(self._peak - self._start, 0)


def current_rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize()


def meminfo_bytes() -> tuple[int, int]:
    """(available, total) host memory."""
    info: dict[str, int] = {}
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            info[key] = int(rest.split()[0]) * 1024
    return info.get("MemAvailable", info.get("MemFree", 0)), info["MemTotal"]


def _tflops(x: float) -> str:
    # Primus prints .1f; a CPU proxy's TFLOP/s are far below 1, so keep more decimals there
    # (still a plain decimal number, which is all a log parser needs).
    if x >= 100:
        return f"{x:.1f}"
    return f"{x:.3f}" if x >= 1 else f"{x:.6f}"


def _gb(x: float) -> str:
    # Primus prints .2f GB; the proxy's peak (~0.06-0.09 GB) moves by less than its 0.01 GB step, so it
    # keeps more decimals below 1 GB (still a plain decimal, which is all a log parser needs).
    return f"{x / GiB:.2f}" if x >= GiB else f"{x / GiB:.4f}"


@dataclass
class IterationLog:
    """Builds the lines Primus's last rank prints; averages cover iterations > log_avg_skip."""

    s: ProxyConfig
    flops: float = 0.0
    times: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.flops = model_flops_per_step(self.s)

    def line(
        self,
        it: int,
        seconds: float,
        lr: float,
        loss: float,
        grad_norm: float,
        mem_rank: int,
        mem_max: float,
        cpu_seconds: float,
    ) -> str:
        s = self.s
        ts = datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
        head = f"[{ts}] iteration {it:8d}/{s.train_iters:8d} | consumed samples: {it * s.global_batch_size:12d} |"
        tail = (
            f" learning rate: {lr:.6E} | global batch size: {s.global_batch_size:5d} | lm loss: {loss:.6E} |"
            f" loss scale: 1.0 | grad norm: {grad_norm:.3f} | number of skipped iterations: {0:3d} |"
            f" number of nan iterations: {0:3d} |"
        )
        ms = seconds * 1000.0
        # Not in Primus's line: the slowest rank's compute-thread CPU time (`metric: cpu`).
        cpu = f" step cpu time per iteration (ms): {cpu_seconds * 1000.0:.1f} |"
        if it <= s.log_avg_skip_iterations:
            return f"{head} elapsed time per iteration (ms): {ms:.1f} |{cpu}{tail}"
        self.times.append(seconds)
        avg = sum(self.times) / len(self.times)
        tokens = s.global_batch_size * s.seq_length / s.world_size
        harmonic = tokens * len(self.times) / sum(self.times)  # harmonic mean of the per-iter rates
        avail, total = meminfo_bytes()
        used = current_rss_bytes()
        mem = f"{used / GiB:.2f}GB/{avail / GiB:.2f}GB/{total / GiB:.2f}GB/{100.0 * used / total:.2f}%"
        return (
            f"{head} elapsed time per iteration (ms): {ms:.1f}/{avg * 1000.0:.1f} |{cpu}"
            f" compute per GPU (TFLOP/s/GPU): {_tflops(self.flops / seconds / 1e12)}"
            f" (avg {_tflops(self.flops / avg / 1e12)}) |"
            f" tokens/s/GPU inst/harmonic mean: {tokens / seconds:.1f}/{harmonic:.1f} |{tail}"
            f" hip mem usage/free/total/usage_ratio: {mem}  | rocm mem usage/free/total/usage_ratio: {mem} |"
            f" rank-{mem_rank} rocm max mem usage/usage_ratio: "
            f"{_gb(mem_max)}GB/{100.0 * mem_max / total:.2f}%"
        )
