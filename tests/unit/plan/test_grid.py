"""The slot grid that makes the block order structural: every run of a plan lands in the slot
of its host, block and position, and a plan that does not fit fails with one line."""

from __future__ import annotations

import json
import logging

import pytest

from traceladder.plan.grid import PlanDoesNotFit, fill_slots, host_counts, slot_key, trigger_grid, weekly_grid
from traceladder.config import find_ladder, load_ladder
from traceladder.plan.build import build_plan, execution_order
from traceladder.core.documents import JSONObject

PROXY = load_ladder(find_ladder("proxy-local"))


def as_dicts(specs) -> list[dict]:
    return [json.loads(s.to_json()) for s in specs]


def test_weekly_grid_is_the_default_plans_shape_whatever_the_seed() -> None:
    grid = weekly_grid(PROXY)
    assert grid == {"localhost": [10] * PROXY.ladder.planned_blocks + [3, 3, 3, 10]}
    for seed in (0, 5, 99):
        assert host_counts(build_plan(PROXY, seed=seed)) == grid


def test_slots_hold_the_runs_in_execution_order() -> None:
    specs = build_plan(PROXY, seed=3)
    grid = weekly_grid(PROXY)
    slots = fill_slots(as_dicts(specs), grid)
    assert len(slots) == sum(grid["localhost"])
    walked = [
        slots[slot_key("localhost", k, j)][0]["rung_id"] for k, n in enumerate(grid["localhost"]) for j in range(n)
    ]
    assert walked == [s.rung_id for s in execution_order(specs)]


def test_a_smaller_plan_leaves_empty_slots_and_a_larger_one_does_not_fit() -> None:
    grid = trigger_grid([PROXY], ["localhost"])
    small = fill_slots(as_dicts(build_plan(PROXY, rungs=["baseline", "fusions"], repeats=1, lens="none", seed=1)), grid)
    assert sorted(k for k, v in small.items() if v) == [slot_key("localhost", 0, 0), slot_key("localhost", 0, 1)]
    with pytest.raises(PlanDoesNotFit, match=r"^plan: block 0 needs 4\+ slots on host 'localhost' but this DAG has 3"):
        fill_slots(as_dicts(build_plan(PROXY, seed=1)), {"localhost": [3] * 7})


def test_a_failed_look_lets_the_ladder_go_on(caplog: pytest.LogCaptureFixture) -> None:
    """A look that cannot read the store must not cost its block's first slot (upstream_failed):
    the ladder goes on, with the error in one logged line and in the look's result."""
    from traceladder.airflow.blocks import continue_or_skip, look_or_go_on

    def unreadable() -> JSONObject:
        raise ConnectionError("S3 at http://127.0.0.1:9 refused the connection\nretries exhausted")

    with caplog.at_level(logging.WARNING, logger="traceladder.airflow.blocks"):
        decision = look_or_go_on(unreadable, 4)
    assert decision == {
        "stop": False,
        "blocks": 4,
        "error": "ConnectionError: S3 at http://127.0.0.1:9 refused the connection",
    }
    assert continue_or_skip(decision) == decision
    assert [r.getMessage() for r in caplog.records] == [
        "adaptive repeats: the look before block 4 failed (ConnectionError: S3 at http://127.0.0.1:9 "
        "refused the connection); the ladder goes on"
    ]
    assert look_or_go_on(lambda: {"stop": True, "blocks": 4}, 4) == {"stop": True, "blocks": 4}
