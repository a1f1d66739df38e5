"""The positive control: `--extra_work_pct P` adds real work to every iteration.

The work is a matmul (rows x 256 @ 256 x 256, fp32), real compute that slows the step the way a
slower kernel would and shows in a trace as the `extra_work` region, never a sleep. Its size is
fixed once per run, after the warm-up, to P% of the step's compute time: the last warm-up
iteration's time over the measured time of one matmul row, averaged over the ranks (one tiny
all-reduce) so every rank does the same work. From then on every iteration does exactly that work.

Why time and not FLOPs: the proxy's small ops run at a few GFLOP/s while a 256-wide matmul runs
at tens, so P% of the model's FLOPs would add only a small fraction of P% to the step. Sized by
time, P=10 aims at +10% step time; the bench (`extra_work`) measures what it really adds.
Iterations up to the calibration (the warm-up) carry no extra work.

`--extra_work_basis cpu` sizes it on the warm-up step's compute-thread CPU time (the slowest
rank's) instead of its wall time: what a `metric: cpu` ladder judges, so P=30 aims at +30% there
(on the tiny proxy the wall step is about three times its CPU time, so a wall basis overshoots).

`--extra_work_region NAME` records the work under that region name instead of `extra_work`: a
build of the catalog (issue 51) that slows one named region does so with this real work, and the
attribution names the region it slowed.
"""

from __future__ import annotations

import time

import torch
from torch.autograd.profiler import record_function

from .comm import Comm
from .proxy_config import ProxyConfig

_K = 256  # inner and output width of the extra matmul
# Rows per matmul, the same in the probe and the work, so the probe's per-row time is the work's
# (a 4096-row block no longer fits the cache and costs about twice as much per row here).
_ROWS = 512


class ExtraWork:
    def __init__(self, s: ProxyConfig) -> None:
        self.pct = s.extra_work_pct
        self.region = s.extra_work_region
        self.rows = 0
        self.flops = 0.0
        self._gen = torch.Generator().manual_seed(s.seed + 7)
        self._b = torch.randn(_K, _K, generator=self._gen) / _K**0.5
        self._chunks: list[torch.Tensor] = []
        self._out: list[torch.Tensor] = []

    @property
    def enabled(self) -> bool:
        return self.pct > 0

    def row_seconds(self) -> float:
        """Measured seconds per matmul row (best of a few probes, after one to warm the kernel)."""
        a, out = torch.full((_ROWS, _K), 0.01), torch.empty(_ROWS, _K)
        torch.mm(a, self._b, out=out)
        times = []
        for _ in range(5):
            t = time.perf_counter()
            torch.mm(a, self._b, out=out)
            times.append(time.perf_counter() - t)
        return sorted(times)[2] / _ROWS  # the median: what a matmul costs as the machine runs now

    def calibrate(self, step_seconds: float, comm: Comm, row_seconds: float | None = None) -> None:
        """Fix the work: pct% of `step_seconds` worth of rows, the same on every rank."""
        if not self.enabled:
            return
        per_row = row_seconds if row_seconds is not None else self.row_seconds()
        rows = torch.tensor([self.pct / 100.0 * step_seconds / max(per_row, 1e-12)], dtype=torch.float64)
        rows = comm.all_reduce_(rows) / comm.world
        self.rows = max(1, int(round(float(rows[0]))))
        self.flops = 2.0 * self.rows * _K * _K
        # One input block reused for every chunk (memory stays at 1 MiB whatever the size); constant
        # values, since they do not change a matmul's speed.
        full, rest = divmod(self.rows, _ROWS)
        block = torch.full((min(self.rows, _ROWS), _K), 0.01)
        self._chunks = [block] * full + ([block[:rest]] if rest else [])
        self._out = [torch.empty(min(self.rows, _ROWS), _K)]

    def __call__(self) -> None:
        if not self._chunks:
            return
        with record_function(self.region):
            for a in self._chunks:
                torch.mm(a, self._b, out=self._out[0][: a.shape[0]])
