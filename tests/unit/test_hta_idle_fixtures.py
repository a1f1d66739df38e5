"""The GPU idle split equals HTA 0.5.0's ``get_idle_time_breakdown`` on the six PyTorch GPU
reference traces, to 1 µs per category and stream, with both ``include_last_profiler_step``
settings. The fixtures are HTA's own output (tests/fixtures/hta/regenerate.py, run through
../shared/tools/hta_oracle.sh); HTA itself is not installed here or in CI."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.conftest import REFERENCE_DIR
from traceladder.analysis.analyzers.trace import read_trace
from traceladder.analysis.reports.idle_breakdown import gpu_idle

ROOT = Path(__file__).resolve().parents[2]
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
        with open(fixture, newline="") as fh:
            hta = {(int(r["stream"]), r["idle_category"]): r for r in csv.DictReader(fh)}
        ours = {(r[1], r[2]): r for r in gpu_idle(table, 0, include_last)}
        assert ours.keys() == hta.keys(), (fixture.name, sorted(ours), sorted(hta))
        for key, row in hta.items():
            assert abs(ours[key][3] - float(row["idle_time"])) <= 1.0, (fixture.name, key)
            # HTA rounds the ratio to 2 places
            assert abs(ours[key][4] - float(row["idle_time_ratio"])) <= 0.005 + 1e-9, (fixture.name, key)
