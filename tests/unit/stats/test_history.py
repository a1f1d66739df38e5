"""Change points over a ladder's history (stats/history.py): the detector on known series,
regression calls across evaluations, provenance and "since last week", and `traceladder changes`."""

from __future__ import annotations

from testkit.results import index_entries
from traceladder.core.summary_parts import RunPoints
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from traceladder.stats.history import (
    detect,
    evaluate,
    new_regressions,
    provenance_changes,
    regression_lines,
    run_points,
)
from tests.conftest import REPO_ROOT

REPO = REPO_ROOT
# A fixed noise pattern, ±1.2% at most (GPU-like), so the series are known exactly.
NOISE = [0.4, -0.8, 0.2, 1.1, -0.5, -1.2, 0.9, 0.0, -0.3, 0.7, -0.9, 0.5, -0.1, 0.8, -0.6, 0.3]
FLAT = [100 * (1 + 0.01 * e) for e in NOISE]


def geo_delta_pct(before: list[float], after: list[float]) -> float:
    """The size as a reader would compute it: the ratio of geometric means, in percent."""

    def mean_log(xs: list[float]) -> float:
        return sum(math.log(x) for x in xs) / len(xs)

    return 100 * (math.exp(mean_log(after) - mean_log(before)) - 1)


def test_flat_series_and_single_outliers_have_no_change_point() -> None:
    assert detect(FLAT) == []
    middle = list(FLAT)
    middle[9] *= 1.03  # a +3σ week in the middle
    assert detect(middle) == []
    newest = list(FLAT)
    newest[-1] *= 1.04  # and as the newest run
    assert detect(newest) == []


def test_a_step_is_found_at_its_first_run_with_its_size() -> None:
    series = FLAT[:12] + [v * 1.05 for v in FLAT[12:]]
    [cp] = detect(series)
    assert (cp.index, cp.direction) == (12, "slower")
    assert cp.delta_pct == pytest.approx(geo_delta_pct(series[:12], series[12:]), abs=1e-9)
    lo, hi = cp.ci95_pct
    assert lo < cp.delta_pct < hi and lo > 0 and cp.p_value < 0.001
    [down] = detect(FLAT[:8] + [v * 0.9 for v in FLAT[8:]])
    assert (down.index, down.direction) == (8, "faster") and down.delta_pct == pytest.approx(
        geo_delta_pct(FLAT[:8], [v * 0.9 for v in FLAT[8:]]), abs=1e-9
    )


def test_exact_steps_without_noise() -> None:
    [cp] = detect([100.0] * 10 + [110.0] * 5)
    assert (cp.index, cp.direction, cp.p_value) == (10, "slower", 0.0)
    assert cp.delta_pct == pytest.approx(10.0, abs=1e-9)
    assert detect([100.0] * 12) == []
    assert detect([100.0] * 3) == []  # too short for two segments


def test_a_small_persistent_shift_is_called_once_weeks_after_it_happened() -> None:
    """+1.2% at σ≈0.7%: not visible for weeks; called when it becomes significant, then never again."""
    series = [100 * (1 + 0.01 * e) * (1.012 if i >= 20 else 1.0) for i, e in enumerate(NOISE * 3)]
    calls, previous = [], detect(series[:10])
    for week in range(10, len(series)):
        now = detect(series[: week + 1])
        calls += [(week, c.index, c.direction) for c in new_regressions(now, previous)]
        previous = now
    assert len(calls) == 1
    week, index, direction = calls[0]
    assert direction == "slower" and week > 22 and abs(index - 20) <= 2


def test_permutation_form_is_deterministic_for_a_seed() -> None:
    series = FLAT + [v * 1.08 for v in FLAT[:6]]
    a = detect(series, test="permutation", seed=7)
    assert a == detect(series, test="permutation", seed=7)
    assert [(c.index, c.direction) for c in a] == [(16, "slower")]
    with pytest.raises(ValueError, match="test must be one of"):
        detect(series, test="bogus")


# ---- short newest segments (issue 28) ---------------------------------------------------------
# Ten runs alternating ±1% on the log scale: mean 0, and a noise variance known by hand. The pooled
# residual variance is 10a²/9; half the mean squared successive difference, (2a)²/2 = 2a², is the
# larger, so var = 2a² with 9 degrees of freedom.
A = 0.01
ALTERNATING = [100 * math.exp(A if i % 2 == 0 else -A) for i in range(10)]


def _after(*sds: float) -> list[float]:
    return ALTERNATING + [100 * math.exp(k * A) for k in sds]


def test_the_newest_two_runs_are_a_change_when_each_clears_the_prediction_bound() -> None:
    from scipy import stats

    from traceladder.stats.history import ALPHA_TAIL

    se = A * math.sqrt(2 * (1 + 1 / 10))  # prediction sd of one new run: sqrt(var·(1 + 1/n))
    # the less extreme of the two (5a) decides: t = 5a/se = 3.37, df 9
    p_hand = 2 * stats.t.sf(5 * A / se, 9)
    assert p_hand < ALPHA_TAIL
    for tail in ((5, 6), (6, 5)):
        [cp] = detect(_after(*tail))
        assert (cp.index, cp.direction) == (10, "slower") and cp.p_value == pytest.approx(p_hand, rel=1e-9)
    # one far run beside a modest one: the modest one (3.5a, t = 2.36) is within the bound
    assert 2 * stats.t.sf(3.5 * A / se, 9) > ALPHA_TAIL
    assert detect(_after(3.5, 9)) == []


def test_a_short_segment_must_show_the_change_without_its_most_extreme_run() -> None:
    from scipy import stats

    from traceladder.stats.history import ALPHA_RECENT, ALPHA_TRIM

    # [6a, 3a, 3a] after the ten: with the split at 10, var = max(16a²/11, 45a²/11/2) = 45a²/22
    var = 45 * A**2 / 22
    p_mean = 2 * stats.t.sf(4 * A / math.sqrt(var * (1 / 10 + 1 / 3)), 11)  # mean 4a: p 0.0014
    # less the 6a run and the lowest of the ten (-a): means 3a and a/9
    p_trimmed = 2 * stats.t.sf((3 - 1 / 9) * A / math.sqrt(var * (1 / 9 + 1 / 2)), 11)  # p 0.026
    assert p_mean < ALPHA_RECENT and p_trimmed > ALPHA_TRIM
    assert detect(_after(6, 3, 3)) == [] and detect(_after(3, 6, 3)) == []
    # the same mean without an outlying run is a change: 4.5a each, var = 36a²/22, p by hand
    [cp] = detect(_after(4.5, 4.5, 4.5))
    p_step = 2 * stats.t.sf(4.5 * A / math.sqrt(36 * A**2 / 22 * (1 / 10 + 1 / 3)), 11)
    assert cp.index == 10 and cp.p_value == pytest.approx(p_step, rel=1e-9)


def test_a_single_outlying_run_is_never_a_change_as_it_ages() -> None:
    for at in (0, 1, 2):  # +4% (about 5 noise sds) as the newest run, then with ordinary runs after it
        tail = [v * (1.04 if i == at else 1.0) for i, v in enumerate(FLAT[:3])]
        series = FLAT + tail
        assert all(detect(series[:n]) == [] for n in range(len(FLAT) + 1, len(series) + 1))
    step = FLAT + [v * 1.04 for v in FLAT[:2]]
    assert [(c.index, c.direction) for c in detect(step)] == [(16, "slower")]


def _entry(run_id: str, step: dict[str, float], config_hash: str = "abc") -> dict:
    return {
        "run_id": run_id,
        "logical_date": run_id,
        "points": {
            "rungs": {
                rung: {"step_ms": {"mean": v, "ci95": 0.5, "n": 3}, "tokens_per_sec_per_gpu": None}
                for rung, v in step.items()
            },
            "provenance": {"config_hash": config_hash},
        },
    }


def test_evaluate_calls_the_regression_with_its_provenance_change() -> None:
    # +6% (about 8 noise sds) from week 16: called on the second run after the step (week 17),
    # by the newest-two-runs test
    entries = []
    for i, e in enumerate(NOISE + NOISE[:2]):
        slow = 1.06 if i >= 16 else 1.0
        entries.append(
            _entry(
                f"2026-w{i:02d}",
                {"base": 100 * (1 + 0.01 * e) * slow, "fused": 80 * (1 - 0.01 * e)},
                config_hash="def" if i >= 16 else "abc",
            )
        )
    evaluated = evaluate(index_entries(entries))
    history = evaluated.to_dict()
    [call] = history["regressions"]
    assert (call["rung"], call["run_id"], call["direction"]) == ("base", "2026-w16", "slower")
    assert call["provenance_changes"] == ["config_hash: 'abc' -> 'def'"]
    assert [r["change_points"] for r in history["rungs"] if r["rung"] == "fused"] == [[]]
    line = regression_lines(evaluated)[0]
    assert line.startswith("base: step time +") and "from run 2026-w16" in line and "config_hash" in line
    since = history["since_last"]
    assert since["previous_run_id"] == "2026-w16" and {r["rung"] for r in since["rungs"]} == {"base", "fused"}
    # the next weeks, the same change point (now a full segment) is no longer a new call
    entries.append(_entry("2026-w18", {"base": 100 * (1 + 0.01 * NOISE[2]) * 1.06, "fused": 80.0}, "def"))
    later = evaluate(index_entries(entries)).to_dict()
    assert later["regressions"] == [] and [c["run_id"] for c in later["rungs"][0]["change_points"]] == ["2026-w16"]
    entries.append(_entry("2026-w19", {"base": 106.0, "fused": 80.0}, "def"))
    assert evaluate(index_entries(entries)).regressions == []


def test_a_cpu_metric_ladder_finds_its_change_points_on_the_step_cpu_time() -> None:
    # The wall time is flat; the CPU time steps up 6% at week 16: a `metric: cpu` ladder calls it
    # (on week 17, the second run after the step). Two older runs recorded no CPU time: they stay
    # out of the series.
    entries = []
    for i, e in enumerate(NOISE + NOISE[:2]):
        entry = _entry(f"2026-w{i:02d}", {"base": 100 * (1 + 0.01 * e)})
        point = entry["points"]["rungs"]["base"]
        cpu = 50 * (1 + 0.01 * NOISE[-1 - (i % len(NOISE))]) * (1.06 if i >= 16 else 1.0)
        if i >= 2:
            point["step_cpu_ms"] = {"mean": cpu, "ci95": 0.5, "n": 3}
            entry["points"]["metric"] = "cpu"
        entries.append(entry)
    evaluated = evaluate(index_entries(entries))
    history = evaluated.to_dict()
    [rung] = history["rungs"]
    assert history["metric"] == "step_cpu_ms" and rung["run_ids"][0] == "2026-w02"
    assert len(rung["step_cpu_ms"]) == len(rung["step_ms"]) == len(entries) - 2
    [call] = history["regressions"]
    assert (call["run_id"], call["direction"]) == ("2026-w16", "slower")
    assert regression_lines(evaluated)[0].startswith("base: step CPU time +")
    # the same entries judged on wall time: flat, nothing called
    for entry in entries:
        entry["points"].pop("metric", None)
    assert evaluate(index_entries(entries)).regressions == []


def test_a_change_of_the_run_statistic_is_marked_as_a_change_of_method() -> None:
    # A run's figure can be the median or the mean of its iterations (a `metric: cpu` ladder took
    # the mean from 2026-12-04); the history marks the run where the recorded statistic changes,
    # beside the provenance changes. Summaries from before the field record none, and no change
    # is claimed against them (they may hold either figure).
    def summary(statistic: str | None) -> dict:
        fit = {"run_statistic": statistic} if statistic else {}
        return {
            "metric": "cpu",
            "model": {"step_cpu_ms": fit},
            "rungs": [{"rung": "base", "step_ms": {"mean": 100.0}, "step_cpu_ms": {"mean": 50.0}}],
        }

    points = [run_points(summary(s)) for s in (None, "mean", "median", "median", "mean")]
    assert [p.run_statistic for p in points] == [None, "mean", "median", "median", "mean"]
    # an index entry from before the field
    legacy = RunPoints.from_dict({k: v for k, v in points[0].to_dict().items() if k != "run_statistic"})
    changes = provenance_changes([legacy, *points[1:]])
    assert changes == [[], [], ["run_statistic: 'mean' -> 'median'"], [], ["run_statistic: 'median' -> 'mean'"]]
    # the statistic is read from the verdict metric's fit: a wall ladder's step_ms
    wall = {"rungs": [], "model": {"step_ms": {"run_statistic": "median"}, "step_cpu_ms": {"run_statistic": "mean"}}}
    assert run_points(wall).run_statistic == "median"


# ---- the command -------------------------------------------------------------------------------
def _changes(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "include")}
    return subprocess.run(
        [sys.executable, "-m", "traceladder.cli", "changes", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _write_csv(path: Path, runs: int, shift_at: int) -> None:
    lines = ["run_id,rung,step_ms"]
    for r in range(runs):
        for k in range(3):
            e = NOISE[(r + k) % len(NOISE)]
            lines.append(f"run{r:02d},base,{100 * (1 + 0.01 * e) * (1.1 if r >= shift_at else 1.0):.4f}")
            lines.append(f"run{r:02d},fused,{80 * (1 + 0.01 * e):.4f}")
    path.write_text("\n".join(lines) + "\n")


def test_changes_command_prints_the_contract_json(tmp_path: Path) -> None:
    csv_path = tmp_path / "h.csv"
    _write_csv(csv_path, 14, 9)
    proc = _changes(str(csv_path), "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    [cp] = last["change_points"]
    assert set(cp) == {"rung", "run_id", "direction", "delta_pct"}
    assert (cp["rung"], cp["run_id"], cp["direction"]) == ("base", "run09", "slower")
    means = {
        r: sum(
            float(line.split(",")[2])
            for line in csv_path.read_text().splitlines()[1:]
            if line.startswith(f"run{r:02d},base")
        )
        / 3
        for r in range(14)
    }
    assert cp["delta_pct"] == pytest.approx(
        geo_delta_pct([means[r] for r in range(9)], [means[r] for r in range(9, 14)]), abs=1e-3
    )
    assert proc.stdout == _changes(str(csv_path), "--seed", "3").stdout
    perm = _changes(str(csv_path), "--seed", "3", "--test", "permutation")
    assert (
        perm.returncode == 0 and perm.stdout == _changes(str(csv_path), "--seed", "3", "--test", "permutation").stdout
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "{f}: file: no such file"),
        ("run_id,rung\nr1,base\n", "{f}: step_ms: missing column (header has run_id,rung)"),
        ("run_id,rung,step_ms\nr1,base,12.5\nr2,base,fast\n", "{f}: step_ms: line 3: 'fast' is not a positive number"),
        ("run_id,rung,step_ms\nr1,base,-1\n", "{f}: step_ms: line 2: '-1' is not a positive number"),
        ("run_id,rung,step_ms\n,base,12\n", "{f}: run_id: line 2: empty"),
        ("run_id,rung,step_ms\nr1,base\n", "{f}: row: line 2 has 2 fields, the header 3"),
        ("", "{f}: header: empty file, expected columns run_id,rung,step_ms"),
    ],
)
def test_changes_command_rejects_a_bad_file_in_one_line(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "bad.csv"
    if content is not None:
        path.write_text(content)
    proc = _changes(str(path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == message.format(f=path) and "Traceback" not in proc.stderr
