"""Issue 29, item 11: a bench run leaves its table in a generated figures file
(testkit/bench_table.py)."""

from __future__ import annotations

import datetime
from pathlib import Path

from testkit.bench_table import Row, format_table, write_run_figures


def test_a_bench_run_writes_its_table_to_a_figures_file(tmp_path: Path) -> None:
    rows = [Row("analyze", "vs orjson.loads", 0.514, "x", "<= 0.55x", True, "pairs 0.42-0.55")]
    table = format_table(rows)
    started = datetime.datetime(2026, 12, 2, 5, 7, tzinfo=datetime.timezone.utc)
    path = write_run_figures(tmp_path / "figures", ["--only", "analyze"], ["analyze"], table, started, (1.0, 0.5, 0.25))
    assert path == tmp_path / "figures" / "2026-12-02-bench-0507-analyze.md"
    text = path.read_text()
    assert "`python -m benchmarks --only analyze`" in text
    assert "1.00/0.50/0.25 at the start" in text
    assert table in text and "0.514x" in text
