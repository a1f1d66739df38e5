"""The positive control: `--extra_work_pct P` adds real work to every iteration.

The work is a matmul whose FLOPs are P% of the step's model FLOPs (`model_flops_per_step`: the
matmuls of forward and backward), fixed when the run starts, so every iteration of every run
does exactly the same extra work. It is compute, not a sleep: it slows the step the way a slower
kernel would, and it appears in a trace as the `extra_work` region. The step-time change it really
causes is measured, not assumed (the proxy's matmul efficiency differs from the model's).
"""

from __future__ import annotations

import torch
from torch.autograd.profiler import record_function

from .metrics import model_flops_per_step
from .settings import Settings

_K = 256  # inner and output width of the extra matmul
_MAX_ROWS = 4096  # rows per chunk, to bound the buffers


class ExtraWork:
    def __init__(self, s: Settings) -> None:
        flops = s.extra_work_pct / 100.0 * model_flops_per_step(s)
        rows = int(round(flops / (2 * _K * _K)))
        self.flops = 2.0 * rows * _K * _K
        gen = torch.Generator().manual_seed(s.seed + 7)
        self._b = torch.randn(_K, _K, generator=gen) / _K**0.5
        self._chunks = [torch.randn(min(_MAX_ROWS, rows - i), _K, generator=gen) for i in range(0, rows, _MAX_ROWS)]
        self._out = [torch.empty(c.shape[0], _K) for c in self._chunks]

    def __call__(self) -> None:
        if not self._chunks:
            return
        with record_function("extra_work"):
            for a, out in zip(self._chunks, self._out):
                torch.mm(a, self._b, out=out)
