"""Ladders under a real `airflow scheduler` (LocalExecutor), not `dag.test()`: the stack that
`make up` starts (traceladder.embedded.local_stack), on free ports, with two tiny ladders.

One stack and two DAG runs at once for the module: a REST trigger of `traceladder-trigger`
(two rungs, one repeat, a lens) and the scheduled run that the scheduler creates when the
weekly DAG of a small ladder is unpaused. The tests then read the runs back through the REST API:
their states, their task instances' pools and times (no two rungs of one host overlap: the pool
at work, which `dag.test()` ignores), and their XCom sizes."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.stack_harness import (
    keep_logs,
    overlaps,
    parse_time,
    ran_rung_slots,
    start_stack,
    stored_rung_ids,
)

pytestmark = pytest.mark.scheduler

TRIGGERED = "sched-trig"  # run through the REST trigger
SCHEDULED = "sched-weekly"  # its weekly DAG unpaused; "0 3 * * 1" fires at once (catchup=False)
CONF = {"ladder": TRIGGERED, "rungs": ["baseline", "fusions"], "repeats": 1, "lens": "torch_rank0"}
HOST_POOL = "traceladder-localhost"
XCOM_CEILING = 64 * 1024  # bytes per XCom value; Postgres jsonb takes 255 MB, MySQL's default packet 64 MB


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("scheduler")
    workloads = tmp / "workloads"  # the warm launchers' records and logs (runner/forkserver_client.py)
    stack = start_stack(
        tmp, {TRIGGERED: {}, SCHEDULED: {"schedule": "0 3 * * 1"}}, {"TRACELADDER_WORKLOADS_DIR": str(workloads)}
    )
    try:
        t0 = time.monotonic()
        trig_dag, weekly_dag = "traceladder-trigger", f"traceladder-{SCHEDULED}"
        assert not stack.dag_runs(weekly_dag), "a paused DAG already has runs"
        trig_run = stack.trigger(trig_dag, CONF)
        stack.unpause(weekly_dag)
        deadline = time.monotonic() + 180
        while not (weekly := stack.dag_runs(weekly_dag)) and time.monotonic() < deadline:
            time.sleep(2)
        assert weekly, f"the scheduler created no run of {weekly_dag} within 180 s of the unpause"
        weekly_run = weekly[0]["dag_run_id"]
        out = {"stack": stack, "created_s": time.monotonic() - t0, "weekly_listing": weekly, "workloads": workloads}
        for key, dag_id, run_id in (("trigger", trig_dag, trig_run), ("weekly", weekly_dag, weekly_run)):
            state = stack.wait_for_run(dag_id, run_id, timeout_s=1500)
            ladder = TRIGGERED if key == "trigger" else SCHEDULED
            out[key] = {
                "dag_id": dag_id,
                "run_id": run_id,
                "state": state,
                "rung_ids": stored_rung_ids(stack, ladder, run_id),
                "tis": stack.task_instances(dag_id, run_id),
                "xcoms": stack.xcom_sizes(dag_id, run_id),
            }
        out["wall_s"] = time.monotonic() - t0
        yield out
    finally:
        keep_logs(stack, "test_scheduler")
        stack.stop()


def _states(run: dict[str, Any]) -> dict[tuple[str, int], str]:
    return {(ti["task_id"], ti["map_index"]): ti["state"] for ti in run["tis"]}


def _rungs(run: dict[str, Any]) -> list[dict[str, Any]]:
    return ran_rung_slots(run["tis"], HOST_POOL)


def test_rest_trigger_runs_the_conf_to_success(runs: dict[str, Any]) -> None:
    run = runs["trigger"]
    assert run["state"] == "success", _states(run)
    rungs = _rungs(run)
    # two rungs, one repeat, every one through the lens
    assert len(rungs) == 2 and all(ti["state"] == "success" for ti in rungs), rungs
    assert run["rung_ids"] == ["baseline.torch_rank0.p0", "fusions.torch_rank0.p0"]
    analyses = [ti for ti in run["tis"] if ti["task_id"] == "analyze"]
    assert len(analyses) == 2 and all(ti["state"] == "success" for ti in analyses), _states(run)


def test_unpaused_weekly_dag_gets_its_scheduled_run(runs: dict[str, Any]) -> None:
    listing = runs["weekly_listing"]
    assert len(listing) == 1 and listing[0]["run_type"] == "scheduled", listing
    run = runs["weekly"]
    assert run["state"] == "success", _states(run)
    assert len(_rungs(run)) == len(run["rung_ids"]) and {"baseline.none.r0", "fusions.none.r0"} <= set(
        run["rung_ids"]
    ), run["rung_ids"]
    published = [ti for ti in run["tis"] if ti["task_id"] == "publish"]
    assert published and published[0]["state"] == "success"


def test_rungs_of_one_host_never_overlap(runs: dict[str, Any]) -> None:
    """Both runs' rungs share the host's one-slot pool: their [start, end] never intersect,
    although the executor ran other tasks side by side (parallelism 4)."""
    rungs = _rungs(runs["trigger"]) + _rungs(runs["weekly"])
    assert len(rungs) == len(runs["trigger"]["rung_ids"]) + len(runs["weekly"]["rung_ids"]) >= 4
    intervals = [(parse_time(ti["start_date"]), parse_time(ti["end_date"]), ti["task_id"]) for ti in rungs]
    assert overlaps(intervals) == [], intervals
    others = [
        ti
        for r in ("trigger", "weekly")
        for ti in runs[r]["tis"]
        if ti["pool"] != HOST_POOL and ti["start_date"] and ti["end_date"] and not ti["task_id"].endswith(".done")
    ]
    side_by_side = overlaps(
        [(parse_time(t["start_date"]), parse_time(t["end_date"]), f"{t['task_id']}[{t['map_index']}]") for t in others]
    )
    assert side_by_side, "no two default-pool tasks overlapped: the pool check above proves nothing"


def test_xcom_values_stay_small(runs: dict[str, Any]) -> None:
    sizes = {**runs["trigger"]["xcoms"], **runs["weekly"]["xcoms"]}
    assert sizes and max(sizes.values()) < XCOM_CEILING, sizes


def test_each_runs_warm_launcher_served_its_rungs_and_is_gone_when_the_run_ends(runs: dict[str, Any]) -> None:
    """Under LocalExecutor each rung is its own task process: the first rung of a DAG run starts
    the run's launcher, later rungs fork from it, and the run's last task stops it."""
    folder = runs["workloads"] / "launchers"
    logs = [p.read_text() for p in sorted(folder.glob("*.log"))]
    serving = [int(m) for text in logs for m in re.findall(r"\[warm\] launcher (\d+) serving", text)]
    assert len(serving) >= 2, logs  # one per DAG run (two ran side by side)
    forked = sum(text.count("] workload ") for text in logs) // 2  # a started and an exited line each
    assert forked >= len(runs["trigger"]["rung_ids"]) + len(runs["weekly"]["rung_ids"]), logs  # none ran cold
    assert list(folder.glob("*.json")) == []  # every record went with its launcher
    for pid in serving:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", f"launcher {pid} runs on"
