"""Less noise from the proxy itself: fixed thread pools, and each rank's compute thread on its
own core.

`fix_threads` sizes torch's pools before any parallel work: one intra-op thread per rank when
pinning (the ranks share a small host; more threads only oversubscribe it) and one inter-op
thread. `pin_rank` then pins the calling (compute) thread of rank r to core r of the cores the
process may use (round robin when there are more ranks than cores). It runs after the gloo
process group exists, on purpose: Linux affinity is per thread, so gloo's I/O and worker threads,
created by `init_process_group`, keep floating. Pinning them onto their rank's core as well made
the run-level noise about twice as large on an idle 2-core layout (a rank waiting in a collective
then waits for its own core's scheduler slice); docs/statistics.md "Proxy noise" has the figures.
`TRACELADDER_PROXY_PIN=0` leaves affinity and pools to the defaults (the bench's "before").
"""

from __future__ import annotations

import os

PIN_ENV = "TRACELADDER_PROXY_PIN"


def pinning_enabled() -> bool:
    return os.environ.get(PIN_ENV, "1").strip() != "0"


def rank_core(rank: int, allowed: set[int] | None = None) -> int:
    """The core of rank `rank`: its own while there are enough, round robin beyond that."""
    cores = sorted(allowed if allowed is not None else os.sched_getaffinity(0))
    return cores[rank % len(cores)]


def fix_threads(world: int) -> int:
    """Size torch's intra-op and inter-op pools (before any parallel work); returns the
    intra-op thread count."""
    import torch

    threads = 1 if pinning_enabled() else max(1, (os.cpu_count() or 1) // world)
    torch.set_num_threads(threads)
    if pinning_enabled():
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already fixed in this interpreter (world size 1 run twice in-process)
            pass
    return threads


def steady_malloc() -> bool:
    """Keep freed memory in the heap (glibc mallopt): without it every step's big activations are
    fresh mmap()s, whose ~1,200 page faults a step land in the compute thread's CPU time (the
    `metric: cpu` figure) as kernel time that depends on the host, not on the code. The peak
    memory figure counts live bytes (metrics.PeakMemory), which this does not change."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to tune
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 1 << 30)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))


def pin_rank(rank: int) -> str:
    """Pin the calling thread (the rank's compute thread) to its core; a short description."""
    if not pinning_enabled():
        return "unpinned"
    core = rank_core(rank)
    os.sched_setaffinity(0, {core})
    return f"compute thread on core {core}"
