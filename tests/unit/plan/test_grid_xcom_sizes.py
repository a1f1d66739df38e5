"""What a big ladder puts through XCom stays far below the metadata database's limits.

The shipped proxy-local ladder with 3 repeats (10 rungs x 3 measure blocks, a lens block, the
every-rung profile block: 49 rung runs) is pushed the way the ladder DAG pushes it: `plan` returns
one `[spec]` (or `[]`) per rung slot of the DAG's grid, as TaskFlow's multiple outputs (one
`return_value` plus one key per slot), and each rung slot returns its result. Every value is
serialized with Airflow's own XCom serializer. The XCom column is JSON (Postgres jsonb: 255 MB per
value; MySQL: 64 MB by its default max_allowed_packet; SQLite: 1 GB). The ceilings here are 256 KiB
per value and 1 MiB per run at the default repeats, 2 MiB per value at the trigger form's largest
repeats: neither needs moving to S3 keys; the plan is in S3 (plan.json) anyway."""

from __future__ import annotations

import json

from traceladder.config import find_ladder, load_ladder
from traceladder.plan.build import build_plan
from traceladder.runner.rung import RESULT_KEYS

VALUE_CEILING = 256 * 1024
RUN_CEILING = 1024 * 1024
FORM_MAX_VALUE_CEILING = 2 * 1024 * 1024


def _xcom_bytes(value) -> int:
    from airflow.sdk.serde import serialize

    return len(json.dumps(serialize(value), separators=(",", ":")).encode())


def _pushed(repeats: int) -> dict[str, int]:
    from traceladder.plan.grid import fill_slots, host_counts

    loaded = load_ladder(find_ladder("proxy-local"))
    plan = build_plan(loaded, repeats=repeats)
    specs = [json.loads(s.to_json()) for s in plan]
    slots = fill_slots(specs, host_counts(plan))
    sizes = {"plan/return_value": _xcom_bytes(slots)}
    for key, slot in slots.items():
        sizes[f"plan/{key}"] = _xcom_bytes(slot)
    for spec in specs:
        traces = [
            f"traceladder/proxy-local/manual__2026-11-30T10-00-00-00-00/{spec['rung_id']}/traces/rank{r}.pt.trace.json.gz"
            for r in range(8)
        ]
        result = {k: None for k in RESULT_KEYS} | {
            "rung_id": spec["rung_id"],
            "status": "ok",
            "step_ms": 812.25,
            "tokens_per_sec_per_gpu": 1234.5,
            "peak_mem_gb": 1.9,
            "traces": traces,
        }
        sizes[f"rung/{spec['rung_id']}"] = _xcom_bytes(result)
    return sizes


def test_ten_rungs_three_repeats_with_lenses_far_below_xcom_limits() -> None:
    sizes = _pushed(repeats=3)
    rung_values = [k for k in sizes if k.startswith("rung/")]
    assert len(rung_values) == 49  # 10 rungs x 3 blocks + lens block (3) x 3 + 10 profile runs
    largest = max(sizes.values())
    assert largest < VALUE_CEILING, f"largest XCom value {largest} bytes"
    assert sum(sizes.values()) < RUN_CEILING, f"a run's XComs total {sum(sizes.values())} bytes"


def test_the_trigger_forms_largest_plan_stays_within_the_ceiling() -> None:
    """The form allows TRIGGER_MAX_REPEATS repeats; each slot's value stays under the ceiling."""
    from traceladder.plan.grid import TRIGGER_MAX_REPEATS

    sizes = _pushed(repeats=TRIGGER_MAX_REPEATS)
    assert max(sizes.values()) < FORM_MAX_VALUE_CEILING, max(sizes.values())
