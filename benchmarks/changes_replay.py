"""The week-by-week replay shared by both sides of `bench_changes_vs_otava`: numpy and the standard
library only, so that Otava's venv runs the very same code on the same series (this file is also
the worker that venv runs: `python benchmarks/changes_replay.py IN.json OUT.json`).

A detector here is `values -> [(index, slower, delta_pct)]`: the change points of the series so
far (index = the first run after the change). A call is what `stats.history.new_regressions`
makes of them: a slower change point with no slower one within MATCH_RUNS runs in the evaluation
before (the same series without its newest run)."""

from __future__ import annotations

import json
import sys
from typing import Callable, Sequence

MATCH_RUNS = 2  # = stats.history.MATCH_RUNS (the bench checks)

Detector = Callable[[Sequence[float]], list[tuple[int, bool, float]]]


def replay(
    series: Sequence[float], detect: Detector, first: int, change_at: int | None = None
) -> list[tuple[int, int, float]]:
    """Regression calls (runs seen, change-point index, size %) of the evaluations that saw
    `first`..len(series) runs. With `change_at`, only evaluations from the change on are run, and
    the replay stops at the first call within MATCH_RUNS of it: recall and delay need no more, and
    the runs before the change are a flat history (the flat cells measure those)."""
    start = first if change_at is None else max(first, change_at + 1)
    previous = [i for i, slower, _ in detect(series[: start - 1]) if slower] if start - 1 >= 2 else []
    calls = []
    for seen in range(start, len(series) + 1):
        now = detect(series[:seen])
        slower_now = [(i, d) for i, slower, d in now if slower]
        fresh = [(i, d) for i, d in slower_now if not any(abs(i - j) <= MATCH_RUNS for j in previous)]
        calls += [(seen, i, d) for i, d in fresh]
        previous = [i for i, _ in slower_now]
        if change_at is not None and any(abs(i - change_at) <= MATCH_RUNS for i, _ in fresh):
            break
    return calls


def otava_detector(window_len: int, max_pvalue: float, min_magnitude: float) -> Detector:
    """Apache Otava's change points (`otava.analysis.compute_change_points`: E-divisive split in
    sliding windows, then the t-test merge), on the raw values as Otava's users feed it."""
    from otava.analysis import compute_change_points

    def detect(values: Sequence[float]) -> list[tuple[int, bool, float]]:
        if len(values) < 2:
            return []
        cps, _ = compute_change_points(
            list(values), window_len=window_len, max_pvalue=max_pvalue, min_magnitude=min_magnitude
        )
        return [(int(c.index), c.stats.mean_2 > c.stats.mean_1, 100 * c.stats.forward_rel_change()) for c in cps]

    return detect


def _worker(in_path: str, out_path: str) -> None:
    """Replay every job of IN.json through Otava: {"otava": {...options}, "first": n, "jobs":
    [{"series": [...], "change_at": k|null}, ...]} -> [[calls], ...]."""
    with open(in_path, encoding="utf-8") as f:
        spec = json.load(f)
    detect = otava_detector(**spec["otava"])
    out = [replay(job["series"], detect, spec["first"], job.get("change_at")) for job in spec["jobs"]]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
