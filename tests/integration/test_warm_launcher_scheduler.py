"""The warm launcher of a DAG run killed between tasks ends within 10 s of the run (#53), under a
real scheduler (the LocalStack harness, LocalExecutor).

A run of a two-block tiny ladder starts; once its first rung runs (and so its launcher serves), the
host's pool is shrunk to no slot, so the next rung waits in the scheduler when that one ends: the
run is then between tasks, with its launcher idle. The run is marked failed through the REST API
(as a user in the UI would), so no later task of it runs and `ladder_status` never stops the
launcher. The launcher process must be gone within 10 s of the run's end_date as Airflow stored it
(before #53 it lived out a 120 s idle limit)."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.integration.stack_harness import keep_logs, parse_time, start_stack
from traceladder.embedded.local_stack import StackError
from traceladder.runner import orphans

pytestmark = pytest.mark.scheduler

LADDER = "warm-killed"
DAG = f"traceladder-{LADDER}"
POOL = "traceladder-localhost"
BOUND_S = 10.0


def _launchers(folder: Path) -> list[dict]:
    docs = [orphans.read_launcher(path) for path in sorted(folder.glob("*.json"))]
    return [doc for doc in docs if doc is not None]


def _patch(stack, path: str, **kwargs) -> None:
    """A REST PATCH, again on a 5xx: SQLite, busy with the scheduler, may refuse a write."""
    for attempt in range(5):
        try:
            stack._call("PATCH", path, **kwargs)
            return
        except StackError as exc:
            if "HTTP 5" not in str(exc) or attempt == 4:
                raise
            time.sleep(0.5)


def _until(what: str, timeout_s: float, check, poll_s: float = 0.3):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(poll_s)
    pytest.fail(f"{what}: not within {timeout_s:.0f} s")


def test_the_launcher_of_a_run_killed_between_tasks_ends_within_10_s(tmp_path: Path) -> None:
    workloads = tmp_path / "workloads"
    stack = start_stack(tmp_path, {LADDER: {"repeats": 2}}, {"TRACELADDER_WORKLOADS_DIR": str(workloads)})
    try:
        stack.unpause(DAG)
        run_id = stack.trigger(DAG, {})
        rungs = lambda: [ti for ti in stack.task_instances(DAG, run_id) if ".rungs_localhost_" in ti["task_id"]]  # noqa: E731

        _until("a first rung running", 900, lambda: [ti for ti in rungs() if ti["state"] == "running"])
        pool = stack._call("GET", f"/api/v2/pools/{POOL}")
        body = {"name": POOL, "slots": 0, "include_deferred": pool["include_deferred"]}
        _patch(stack, f"/api/v2/pools/{POOL}", params={"update_mask": "slots"}, json=body)
        # between tasks: the rung that ran is done, the next one waits for a pool slot

        def between_tasks() -> list[dict]:
            tis = rungs()
            return [] if any(t["state"] == "running" for t in tis) else [t for t in tis if t["state"] == "success"]

        done = _until("the running rung's end", 600, between_tasks)
        launchers = _launchers(workloads / "launchers")
        assert len(launchers) == 1 and orphans.launcher_alive(launchers[0]), (launchers, done)
        launcher = launchers[0]
        assert launcher["run_id"] == run_id, launcher

        _patch(stack, f"/api/v2/dags/{DAG}/dagRuns/{run_id}", json={"state": "failed"})
        run = stack._call("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}")
        assert run["state"] == "failed" and run["end_date"], run
        ended = parse_time(run["end_date"]).timestamp()
        _until(
            f"launcher {launcher['pid']} gone", BOUND_S + 30, lambda: not orphans.launcher_alive(launcher), poll_s=0.1
        )
        outlived_s = time.time() - ended
        print(f"launcher {launcher['pid']} gone {outlived_s:.1f} s after its DAG run's end_date")
        assert outlived_s <= BOUND_S, f"launcher {launcher['pid']} outlived its DAG run by {outlived_s:.1f} s"
        # and no task of the run ran after the run ended: nothing but the lease stopped it
        later = [
            ti["task_id"]
            for ti in stack.task_instances(DAG, run_id)
            if ti["start_date"]
            and parse_time(ti["start_date"]) > datetime.fromtimestamp(ended, parse_time(run["end_date"]).tzinfo)
        ]
        assert later == [], later
    except BaseException:
        keep_logs(stack, "warm-launcher-killed-run")
        raise
    finally:
        stack.stop()
