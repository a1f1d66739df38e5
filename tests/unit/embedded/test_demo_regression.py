"""What `make demo-regression` runs before it runs anything: its weeks (as few as the suspect rule
needs, then the newest build), the injected builds named from the catalog, each week's ladder file,
and a catalog too short for the rule named in one line."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from traceladder.config import load_ladder
from traceladder.config.loader import CONFIG_DIR
from traceladder.embedded.demo_regression import (
    GOOD_WEEKS,
    LADDER,
    DemoRegressionError,
    injected_builds,
    largest_first,
    weeks_of,
    write_week_ladder,
)

pytestmark = pytest.mark.triage
PACKAGED = CONFIG_DIR / "ladders" / f"{LADDER}.yaml"


def test_the_weeks_run_the_oldest_builds_then_the_newest() -> None:
    loaded = load_ladder(PACKAGED)
    weeks = weeks_of(loaded)
    assert len(weeks) == GOOD_WEEKS + 1 == 5
    assert [w.build for w in weeks] == [
        "nightly-2026-11-01",
        "nightly-2026-11-08",
        "nightly-2026-11-15",
        "nightly-2026-11-22",
        "nightly-2026-12-01",
    ]
    assert weeks[0].logical_date == datetime(2026, 11, 2, 3, tzinfo=timezone.utc)
    assert all(b.logical_date - a.logical_date for a, b in zip(weeks, weeks[1:]))
    # the two injected builds lie between the last good week's build and the newest; 11-29 adds
    # (100 + 100) / (100 + 30) = 1.54 in its own A/B, 11-27 1.30: the larger first
    assert injected_builds(loaded) == ["nightly-2026-11-27", "nightly-2026-11-29"]
    assert largest_first(loaded, injected_builds(loaded)) == ["nightly-2026-11-29", "nightly-2026-11-27"]
    assert loaded.ladder.build == weeks[-1].build


def test_a_weeks_ladder_file_sets_its_build(tmp_path: Path) -> None:
    path = write_week_ladder(tmp_path, "nightly-2026-11-15", repeats=2)
    loaded = load_ladder(path)
    assert loaded.ladder.ladder == LADDER and loaded.ladder.build == "nightly-2026-11-15"
    assert loaded.ladder.repeats == 2 and len(loaded.ladder.builds) == 9


def test_a_catalog_too_short_for_the_rule_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / f"{LADDER}.yaml"
    path.write_text(
        f"extends: {PACKAGED}\n"
        "builds:\n"  # a list replaces the parent's
        "  - {name: a, created: 2026-11-08T02:00:00Z}\n"
        "  - {name: b, created: 2026-11-09T02:00:00Z}\n"
        "build: b\n"
    )
    with pytest.raises(DemoRegressionError) as info:
        weeks_of(load_ladder(path))
    message = str(info.value)
    assert message.startswith("demo-regression: ladder proxy-regression: builds: needs at least 6 builds")
    assert len(message.splitlines()) == 1
