"""Two-estimate regression rule, kept for the A/A bench (benchmarks/bench_aa.py) until the block
model of summary/stats.py replaces it. Week over week no longer compares two runs: the calls come
from change points over the ladder's history (summary/history.py)."""

from __future__ import annotations

from traceladder.summary.stats import Estimate, separated


def is_regression(previous: Estimate, current: Estimate) -> bool:
    if previous.half_width is None or current.half_width is None:
        return False
    return current.mean > previous.mean and separated(previous, current)
