"""Primus log lines fuzzed from the real line shapes (FACTS.md "Primus"). Their contract differs
from the files': a bad log never crashes the runner, it becomes the result's `error` through
`PrimusLogError` (one line)."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from traceladder.runner.primus_log import PrimusLogError, StepMetrics, parse_iterations, summarize

from .common import assert_one_line, fuzz_settings

pytestmark = [pytest.mark.faults, pytest.mark.fuzz]

# The segments Primus prints, with {} where a number goes (current, v26.5.1 and v26.4 shapes).
SEGMENTS = [
    "iteration {}/{}",
    "consumed samples: {}",
    "elapsed time per iteration (ms): {}/{}",
    "compute per GPU (TFLOP/s/GPU): {} (avg {})",
    "throughput per GPU (TFLOP/s/GPU): {}/{}",
    "tokens/s/GPU inst/harmonic mean: {}/{}",
    "tokens per GPU (tokens/s/GPU): {}/{}",
    "global batch size: {}",
    "lm loss: {}",
    "hip mem usage/free/total/usage_ratio: {}GB/166.61GB/287.98GB/42.15%",
    "rocm mem usage/free/total/usage_ratio: {}MiB/1GB/2GB/3%",
    "rank-{} rocm max mem usage/usage_ratio: {}TB/44.48%",
]
NUMBERS = st.one_of(
    st.integers(-5, 40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "-inf", "1e999", "1e-999", ".5", "5.", "+3", "", "x", "9" * 5000, "0" * 400 + "7"]),
)


@st.composite
def log_line(draw: st.DrawFn) -> str:
    picked = draw(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=8))
    parts = [seg.format(*(draw(NUMBERS) for _ in range(seg.count("{}")))) for seg in picked]
    prefix = draw(
        st.sampled_from(["", "INFO [trainer.py:42][rank-7/8][DEBUG] [x] : ", "[2026-10-08 14:03:21] ", "Iteration "])
    )
    return prefix + " | ".join(parts) + draw(st.sampled_from(["", " |", "\r", "\x00", "\ufffd"]))


LOGS = st.lists(log_line() | st.text(max_size=60), max_size=25)


def _contract(lines: list[str], skip: int, window: tuple[int, int] | None) -> None:
    try:
        metrics = summarize(parse_iterations(lines), skip_iterations=skip, window=window)
    except PrimusLogError as exc:
        assert_one_line(str(exc))
        return
    assert isinstance(metrics, StepMetrics)
    assert metrics.step_ms is not None and not math.isnan(metrics.step_ms)


@fuzz_settings(200)
@given(lines=LOGS, skip=st.integers(-1, 6), window=st.none() | st.tuples(st.integers(-2, 10), st.integers(-2, 10)))
@example(lines=["iteration " + "9" * 5000 + "/10 | elapsed time per iteration (ms): 5.0/5.0"], skip=0, window=None)
@example(
    lines=["iteration 3/10 | elapsed time per iteration (ms): 5.0 | global batch size: " + "9" * 5000],
    skip=0,
    window=None,
)
def test_primus_log_lines(lines: list[str], skip: int, window: tuple[int, int] | None) -> None:
    _contract(lines, skip, window)
