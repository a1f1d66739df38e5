"""What a big ladder puts through XCom stays far below the metadata database's limits.

A 10-rung x 3-repeat plan with lenses (the shipped proxy-local ladder: 36 rung runs) is pushed
the way the ladder DAG pushes it: `plan` returns the specs by host (one `return_value` plus one
key per host, as TaskFlow's multiple outputs), each `specs_<host>` returns its host's list, each
rung returns its result. Every value is serialized with Airflow's own XCom serializer. The XCom
column is JSON (Postgres jsonb: 255 MB per value; MySQL: 64 MB by its default max_allowed_packet;
SQLite: 1 GB). Measured: the 36-run plan's largest value is ~85 KB (a run ~290 KB in all) (ceiling 256 KiB here, a
factor of 250 under MySQL's default); the trigger form's largest plan (50 repeats, 600 runs) is
~1.4 MB per value (ceiling 2 MiB, a factor of 32). Neither needs moving to S3 keys; the plan is
in S3 (plan.json) anyway."""

from __future__ import annotations

import json

from traceladder.config import find_ladder, load_ladder
from traceladder.plan import build_plan
from traceladder.runner.rung import RESULT_KEYS

VALUE_CEILING = 256 * 1024
RUN_CEILING = 1024 * 1024
FORM_MAX_VALUE_CEILING = 2 * 1024 * 1024


def _xcom_bytes(value) -> int:
    from airflow.sdk.serde import serialize

    return len(json.dumps(serialize(value), separators=(",", ":")).encode())


def _pushed(repeats: int) -> dict[str, int]:
    loaded = load_ladder(find_ladder("proxy-local"))
    specs = [json.loads(s.to_json()) for s in build_plan(loaded, repeats=repeats)]
    by_host: dict[str, list] = {h.name: [] for h in loaded.cluster.hosts}
    for spec in specs:
        by_host.setdefault(spec["host"], []).append(spec)
    sizes = {"plan/return_value": _xcom_bytes(by_host)}
    for host, host_specs in by_host.items():
        sizes[f"plan/{host}"] = _xcom_bytes(host_specs)
        sizes[f"specs_{host}/return_value"] = _xcom_bytes(host_specs)
    for spec in specs:
        traces = [f"traceladder/proxy-local/manual__2026-11-30T10-00-00-00-00/{spec['rung_id']}/traces/rank{r}.pt.trace.json.gz" for r in range(8)]
        result = {k: None for k in RESULT_KEYS} | {"rung_id": spec["rung_id"], "status": "ok", "step_ms": 812.25,
                                                  "tokens_per_sec_per_gpu": 1234.5, "peak_mem_gb": 1.9, "traces": traces}
        sizes[f"rung/{spec['rung_id']}"] = _xcom_bytes(result)
    return sizes


def test_ten_rungs_three_repeats_with_lenses_far_below_xcom_limits() -> None:
    sizes = _pushed(repeats=3)
    rung_values = [k for k in sizes if k.startswith("rung/")]
    assert len(rung_values) == 36  # 10 rungs x 3 repeats + 2 lenses x 3 repeats
    largest = max(sizes.values())
    assert largest < VALUE_CEILING, f"largest XCom value {largest} bytes"
    assert sum(sizes.values()) < RUN_CEILING, f"a run's XComs total {sum(sizes.values())} bytes"


def test_the_trigger_forms_largest_plan_maps_within_airflows_limit() -> None:
    """The form allows 50 repeats: the host's expansion stays under [core] max_map_length, and
    its values under the ceiling."""
    from airflow.configuration import conf

    sizes = _pushed(repeats=50)
    mapped = sum(1 for k in sizes if k.startswith("rung/"))
    assert mapped < conf.getint("core", "max_map_length"), mapped
    assert max(sizes.values()) < FORM_MAX_VALUE_CEILING, max(sizes.values())
