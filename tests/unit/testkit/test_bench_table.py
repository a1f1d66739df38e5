"""Issue 29, item 12 and 11: the reference directory has one source that an environment variable
overrides, and a bench run leaves its table in a generated figures file."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from testkit.bench_table import Row, format_table, write_run_figures
from tests.conftest import REFERENCE_DIR, REPO_ROOT, reference_dir_from


def test_the_reference_dir_is_beside_the_repository_unless_the_environment_says_otherwise(tmp_path: Path) -> None:
    assert reference_dir_from({}) == REPO_ROOT.parent / "shared" / "reference"
    assert reference_dir_from({"TRACELADDER_REFERENCE_DIR": str(tmp_path)}) == tmp_path
    assert reference_dir_from({"TRACELADDER_REFERENCE_DIR": ""}) == REPO_ROOT.parent / "shared" / "reference"
    assert REFERENCE_DIR == reference_dir_from(os.environ)


def test_the_reference_dir_fixture_gives_the_one_the_tests_parametrize_over(reference_dir: Path) -> None:
    assert reference_dir == REFERENCE_DIR
    assert (reference_dir / "tracelens-v1.0.0").is_dir(), f"no tracelens-v1.0.0 under {reference_dir}"


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
