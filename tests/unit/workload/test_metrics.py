"""The proxy's peak memory (workload.metrics.PeakMemory): the most bytes held at once, not the
heap's extent. The heap's cases run in a fresh interpreter, so that no earlier test's garbage or
pages move their figures."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tests.conftest import REPO_ROOT

MiB = 1024**2
INCLUDE = REPO_ROOT / "include"


def _figures(body: str) -> list[int]:
    """Run `body` after `from traceladder.workload import metrics, quiet` and `import torch`
    (gc off); it prints integers, returned in order."""
    script = "import gc, torch\nfrom traceladder.workload import metrics, quiet\ngc.disable()\n" + body
    env = {**os.environ, "PYTHONPATH": str(INCLUDE)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    return [int(x) for x in out.stdout.split()]


def test_counts_what_is_held_at_a_sample_and_nothing_before() -> None:
    before, after = _figures(
        "memory = metrics.PeakMemory()\n"
        "before = memory.peak_bytes()\n"
        "held = torch.ones(64 * 1024**2 // 4)\n"
        "memory.sample()\n"
        "del held\n"
        "print(before, memory.peak_bytes())\n"
    )
    assert before == 0 and 60 * MiB <= after < 72 * MiB, (before, after)


def test_a_heap_that_keeps_what_it_frees_does_not_creep() -> None:
    """With the heap kept (quiet.steady_malloc, as a rank runs), blocks freed and taken again in
    other sizes grow the heap's extent, which VmHWM follows; the most held at once stays 32 MiB."""
    peak, extent = _figures(
        "quiet.steady_malloc()\n"
        "memory = metrics.PeakMemory()\n"
        "hwm = metrics.max_rss_bytes()\n"
        "for size in (32, 24, 32, 16, 32, 28, 32, 20, 32, 30):\n"
        "    block = torch.ones(size * 1024**2 // 4)\n"
        "    memory.sample()\n"
        "    del block\n"
        "print(memory.peak_bytes(), metrics.max_rss_bytes() - hwm)\n"
    )
    assert 30 * MiB <= peak < 40 * MiB, peak
    assert extent >= peak, (extent, peak)  # the pages touched: never fewer than the bytes held


def test_without_mallinfo2_it_falls_back_to_the_peak_rss() -> None:
    before, after = _figures(
        "metrics._mallinfo2 = lambda: None\n"
        "memory = metrics.PeakMemory()\n"
        "before = memory.peak_bytes()\n"
        "held = torch.ones(64 * 1024**2 // 4)\n"
        "print(before, memory.peak_bytes())\n"
    )
    assert before < 8 * MiB and after >= 60 * MiB, (before, after)  # the held pages were touched


def test_the_step_clocks_leave_out_the_time_the_samples_took() -> None:
    """A sample (mallinfo2) costs ~0.25 ms, up to 5 a step with recompute on: the proxy's
    instrument, which neither the wall nor the CPU lap may count."""
    from traceladder.workload.metrics import PeakMemory
    from traceladder.workload.train import _Clock

    memory = PeakMemory()
    clock = _Clock(memory)
    memory.cost_s, memory.cost_cpu_s = 0.5, 0.25  # as if sampling had taken that long
    assert clock.lap() == pytest.approx(-0.5, abs=0.05) and clock.cpu_lap() == pytest.approx(-0.25, abs=0.05)
    for _ in range(20):
        memory.sample()
    assert memory.cost_s > 0.5 and memory.cost_cpu_s > 0.25
    assert 0 <= clock.lap() < 0.05 and 0 <= clock.cpu_lap() < 0.05  # the samples' own time left out
