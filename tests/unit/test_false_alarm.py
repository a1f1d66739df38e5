"""The regression rule's false-alarm rate, from A/A pairs drawn from a noise model fitted to the
proxy itself: two real proxy runs give the within-run (iteration) and between-run spread."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np

from traceladder.runner.primus_log import parse_iterations, summarize
from traceladder.summary.compare import is_regression
from traceladder.summary.stats import estimate, separated

PAIRS = 2000
REPEATS = 3
ITERS = 10
WARMUP = 2


def proxy_iteration_ms(tmp_path, seed: int) -> list[float]:
    env = {**os.environ, "PRIMUS_WORKSPACE": str(tmp_path / f"ws{seed}")}
    args = ["--expert_model_parallel_size", "1", "--train_iters", str(ITERS), "--log_avg_skip_iterations", str(WARMUP),
            "--num_experts", "16", "--seq_length", "64", "--global_batch_size", "2", "--seed", str(seed)]
    proc = subprocess.run([sys.executable, "-m", "traceladder.workload", *args], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return summarize(parse_iterations(proc.stdout.splitlines()), skip_iterations=WARMUP).step_ms_values


def fit_noise(runs: list[list[float]]) -> tuple[float, float, float]:
    """(log median, within-run log sd, between-run log sd) of iteration times."""
    logs = [np.log(np.asarray(r)) for r in runs]
    within = float(np.sqrt(np.mean([np.var(l, ddof=1) for l in logs])))
    medians = np.array([np.median(l) for l in logs])
    k = len(logs[0])
    between = float(math.sqrt(max(0.0, np.var(medians, ddof=1) - (math.pi / 2) * within**2 / k)))
    return float(np.mean(medians)), within, between


def simulate_run(rng: np.random.Generator, mu: float, within: float, between: float, k: int, shift: float = 0.0) -> list[float]:
    """One ladder run of a rung: REPEATS repeat medians, each the median of k iteration times."""
    return [
        float(np.exp(np.median(rng.normal(mu + shift + rng.normal(0.0, between), within, size=k))))
        for _ in range(REPEATS)
    ]


def rates(mu: float, within: float, between: float, k: int, shift: float, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    regressions = changes = 0
    for _ in range(PAIRS):
        a = estimate(simulate_run(rng, mu, within, between, k))
        b = estimate(simulate_run(rng, mu, within, between, k, shift))
        assert a and b
        regressions += is_regression(a, b)
        changes += separated(a, b)
    return regressions / PAIRS, changes / PAIRS


def test_aa_false_alarm_rate(tmp_path) -> None:
    runs = [proxy_iteration_ms(tmp_path, seed) for seed in (1, 2)]
    mu, within, between = fit_noise(runs)
    k = len(runs[0])
    assert within > 0, runs

    false_regressions, false_changes = rates(mu, within, between, k, shift=0.0, seed=7)
    print(f"noise model: median {math.exp(mu):.1f} ms, within-run log sd {within:.3f}, between-run log sd {between:.3f}; "
          f"A/A over {PAIRS} pairs: regression flagged {false_regressions:.2%}, change claimed {false_changes:.2%}")
    assert false_regressions <= 0.05
    assert false_changes <= 0.05

    # Not a rule that never fires: a slowdown of 10 sigma of a repeat median is usually caught
    # (with three repeats a t interval is wide, so the power is modest by design).
    repeat_sd = math.sqrt(between**2 + (math.pi / 2) * within**2 / k)
    power, _ = rates(mu, within, between, k, shift=10 * repeat_sd, seed=8)
    assert power >= 0.5, power
