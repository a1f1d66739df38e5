"""The proxy's peak memory (workload.metrics.PeakMemory): the most bytes held at once, not the
heap's extent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from traceladder.workload.metrics import PeakMemory

MiB = 1024**2
INCLUDE = Path(__file__).resolve().parents[2] / "include"


def test_counts_what_is_held_at_a_sample_and_nothing_before() -> None:
    memory = PeakMemory()
    assert memory.peak_bytes() == 0
    held = torch.ones(64 * MiB // 4)
    memory.sample()
    del held
    assert 64 * MiB <= memory.peak_bytes() < 72 * MiB


def test_memory_freed_and_taken_again_does_not_creep() -> None:
    """The heap's extent may grow as blocks are freed and taken again; the peak of live bytes
    is the largest set alive at once."""
    memory = PeakMemory()
    for size in (32, 24, 32, 16, 32, 28, 32, 20, 32, 30):
        block = torch.ones(size * MiB // 4)
        memory.sample()
        del block
    assert 32 * MiB <= memory.peak_bytes() < 40 * MiB


def test_without_mallinfo2_it_falls_back_to_the_peak_rss() -> None:
    """In a fresh interpreter, so that no earlier test's pages set its VmHWM."""
    script = (
        "import torch\n"
        "from traceladder.workload import metrics\n"
        "metrics._mallinfo2 = lambda: None\n"
        "memory = metrics.PeakMemory()\n"
        "before = memory.peak_bytes()\n"
        "held = torch.ones(64 * 1024**2 // 4)\n"
        "print(before, memory.peak_bytes())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(INCLUDE)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    before, after = (int(x) for x in out.stdout.split())
    assert before < 8 * MiB and after - before >= 60 * MiB, (before, after)  # the held pages were touched
