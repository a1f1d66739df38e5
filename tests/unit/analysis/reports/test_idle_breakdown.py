"""The GPU idle split equals HTA 0.5.0's ``get_idle_time_breakdown`` on the six PyTorch GPU
reference traces, to 1 µs per category and stream, with both ``include_last_profiler_step``
settings. The fixtures are HTA's own output (tests/fixtures/hta/regenerate.py, run through
../shared/tools/hta_oracle.sh); HTA itself is not installed here or in CI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance import compare_idle
from tests.conftest import REFERENCE_DIR, REPO_ROOT
from traceladder.analysis.analyzers.trace import read_trace
from traceladder.analysis.reports.idle_breakdown import gpu_idle

ROOT = REPO_ROOT
FIXTURES = ROOT / "tests" / "fixtures" / "hta"
REFERENCE = REFERENCE_DIR / "tracelens-v1.0.0"
TRACES = sorted(p for p in REFERENCE.glob("*/*.json.gz") if p.parent.name != "rocprof")


def test_six_reference_traces_have_fixtures() -> None:
    assert len(TRACES) == 6, f"expected the six PyTorch GPU reference traces under {REFERENCE}"
    assert len(list(FIXTURES.glob("*.csv"))) == 12


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_idle_split_equals_hta(trace: Path) -> None:
    table = read_trace(trace)
    for include_last in (False, True):
        fixture = (
            FIXTURES
            / f"{trace.parent.name}__{trace.name.removesuffix('.json.gz')}.last_{str(include_last).lower()}.csv"
        )
        assert compare_idle(gpu_idle(table, 0, include_last), fixture) == []


def test_compare_idle_flags_a_microsecond_and_a_missing_row(tmp_path: Path) -> None:
    """The rule the fixtures and the HTA harness (benchmarks/bench_hta_diff.py) share."""
    hta = tmp_path / "hta.csv"
    hta.write_text("rank,stream,idle_category,idle_time,idle_time_ratio\n0,7,other,100,0.8\n0,7,host_wait,25,0.2\n")
    same = [[0, 7, "other", 100.4, 0.8], [0, 7, "host_wait", 25.0, 0.2]]
    assert compare_idle(same, hta) == []
    assert compare_idle([["0", "7", "other", "101.5", "0.8"], same[1]], hta) == [
        "hta.csv: (7, 'other'): ours 101.5 µs (0.8000), HTA 100 µs (0.8000)"
    ]
    assert compare_idle(same[:1], hta)[0].startswith("hta.csv: rows differ")


def test_compare_idle_takes_an_empty_ratio_as_nan(tmp_path: Path) -> None:
    """A stream with no gap (a single event, or back-to-back ones): a ratio of 0/0, left empty by
    HTA's CSV and ours. An empty idle time is no number and differs."""
    hta = tmp_path / "hta.csv"
    hta.write_text("rank,stream,idle_category,idle_time,idle_time_ratio\n0,11,other,0.0,\n")
    assert compare_idle([["0", "11", "other", "0.0", ""]], hta) == []
    assert compare_idle([[0, 11, "other", 0.0, float("nan")]], hta) == []
    assert compare_idle([[0, 11, "other", 0.0, 0.0]], hta) != []
    assert compare_idle([[0, 11, "other", "", ""]], hta) != []
    assert compare_idle([[0, 11, "other", 0.0, ""], [0, 11, "other", 0.0, ""]], hta)[0].startswith(
        "hta.csv: rows differ"
    )
