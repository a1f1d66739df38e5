"""Faults 2 and 3 under a real scheduler (the LocalStack harness of issue 16), in one ladder run:

- 3: the scheduler is killed (SIGKILL of its process group, which takes LocalExecutor's task
  runners with it) while a rung is in flight, after another finished, and started again. Rungs
  already done are not rerun (try 1); the rung in flight is *run again*, not adopted: LocalExecutor
  cannot adopt, so the new scheduler resets the dead scheduler's task instance at its orphan check
  (`orphaned_tasks_check_interval`, 300 s by default, 15 s here) and schedules it again.
- 2: the task process of an analysis is SIGKILLed mid-analysis. Its retry re-analyses the stored
  trace; the reports and manifest are byte-identical to a clean analysis of the same trace.

Then the summary covers every rung and everything stored matches its manifest."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.integration.ladder_checks import check_manifests, objects
from tests.integration.stack_harness import keep_logs, start_stack
from testkit.tiny_proxy import TINY_MODEL

pytestmark = [pytest.mark.scheduler, pytest.mark.faults]

LADDER = "faults-sched"
DAG = f"traceladder-{LADDER}"
FIELDS = {
    "schedule": None,
    "base": {"model_args": TINY_MODEL},
    "lenses": {"rung": "fusions", "use": ["none", "torch_rank0"]},
    "retries": {"tasks": 3, "rung_infra": 2, "delay_s": 2, "max_delay_s": 10},
}


# The new scheduler resets the dead one's running task instances at its orphan check, once the old
# scheduler job counts as dead: defaults 300 s and 30 s, lowered here.
SCHEDULER_ENV = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
    "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "15",
    "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "10",
}


def _tis(stack, run_id):
    return stack.task_instances(DAG, run_id)


def _wait(stack, run_id, pred, timeout_s: float, what: str, poll_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [ti for ti in _tis(stack, run_id) if pred(ti)]
        if found:
            return found
        time.sleep(poll_s)
    pytest.fail(f"{what}: not within {timeout_s:.0f} s")


def test_scheduler_restart_and_a_killed_analysis(tmp_path: Path) -> None:
    stack = start_stack(tmp_path, {LADDER: FIELDS}, extra_env=SCHEDULER_ENV)
    try:
        stack.unpause(DAG)
        run_id = stack.trigger(DAG, {})
        is_rung = lambda ti: ".rungs_localhost_" in ti["task_id"]  # noqa: E731  (block_<k>.rungs_<host>_<j>)
        _wait(stack, run_id, lambda ti: is_rung(ti) and ti["state"] == "success", 900, "a first rung")
        _wait(stack, run_id, lambda ti: is_rung(ti) and ti["state"] == "running", 600, "a rung in flight", poll_s=0.3)

        # fault 3: the scheduler (and the task runners it started) dies; a new one starts
        t_kill = time.monotonic()
        stack.stop_component("scheduler", sig=signal.SIGKILL, grace_s=1)
        at_kill = [ti for ti in _tis(stack, run_id) if is_rung(ti)]
        # rung slots are plain tasks, one per (block, position): their task ids name them
        done_ids = {ti["task_id"] for ti in at_kill if ti["state"] == "success"}
        in_flight = {ti["task_id"] for ti in at_kill if ti["state"] == "running"}
        assert done_ids and in_flight, [(ti["task_id"], ti["state"]) for ti in at_kill]
        stack.start_component("scheduler")

        # fault 2: SIGKILL an analysis task process while it runs
        running = _wait(
            stack,
            run_id,
            lambda ti: ti["task_id"] == "analyze" and ti["state"] == "running" and ti.get("pid"),
            1200,
            "a running analysis",
            poll_s=0.3,
        )
        victim = running[0]
        os.kill(int(victim["pid"]), signal.SIGKILL)

        state = stack.wait_for_run(DAG, run_id, timeout_s=1500)
        recovery_s = time.monotonic() - t_kill
        tis = _tis(stack, run_id)
        assert state == "success", [(t["task_id"], t["map_index"], t["state"], t["try_number"]) for t in tis]

        rungs = {ti["task_id"]: ti for ti in tis if is_rung(ti)}
        # two measure runs (block 0), the lens block (fusions unprofiled and under torch_rank0) and
        # the every-rung profile block that proxy-local turns on (baseline and fusions profiled)
        assert len(rungs) == 6 and all(ti["state"] == "success" for ti in rungs.values()), rungs
        for rid in done_ids:
            assert rungs[rid]["try_number"] == 1, f"{rid} finished before the restart but ran again"
        for rid in in_flight:  # reset by the new scheduler and run again: retried, not adopted
            assert rungs[rid]["state"] == "success", rungs[rid]
        killed = next(ti for ti in tis if ti["task_id"] == "analyze" and ti["map_index"] == victim["map_index"])
        assert killed["state"] == "success" and killed["try_number"] >= 2, killed

        # the retried analysis equals a clean one: analyse the stored trace again, compare bytes
        from traceladder.analysis.stored import analysis_prefix, analyze_stored
        from traceladder.core.documents import PlanDoc
        from traceladder.workflows.ladder_tasks import gate_expect
        from traceladder.storage.artifacts import DirArtifactSink, S3ArtifactStore, safe_key_part

        client = stack.s3.client()
        prefix = f"traceladder/{LADDER}/{safe_key_part(run_id)}/"
        stored = objects(client, stack.s3.bucket, prefix)
        check_manifests(stored)
        trace_keys = [k for k in stored if "/traces/" in k]
        assert trace_keys
        # the trace gate's expectation, as collect_traces gives it: from each run's plan spec
        specs = {str(s["rung_id"]): s for s in PlanDoc.from_json(stored[f"{prefix}plan.json"]).specs}
        for key in trace_keys:
            clean = DirArtifactSink(tmp_path / "clean")
            store = S3ArtifactStore(client, stack.s3.bucket, "traceladder", LADDER)
            (tmp_path / "clean").mkdir(exist_ok=True)
            clean.put_bytes(key, store.get_verified(key))
            clean.write_manifest(key.rsplit("/traces/", 1)[0])
            analyze_stored(clean, key, expect=gate_expect(specs[key[len(prefix) :].split("/", 1)[0]]))
            out = analysis_prefix(key)
            for path in sorted((tmp_path / "clean" / out).iterdir()):
                assert stored[f"{out}/{path.name}"] == path.read_bytes(), (
                    f"{out}/{path.name} differs from a clean analysis"
                )
        summary = json.loads(stored[f"{prefix}summary/summary.json"])
        assert not summary.get("failed_rungs") and not summary.get("unanalysed_traces"), summary
        rows = {r["rung"]: r for r in summary["rungs"]}  # one row per unprofiled rung, one per lens
        assert rows["baseline"]["ok"] == 1 and rows["fusions"]["ok"] == 1, rows
        assert [(lens["lens"], lens["ok"]) for lens in summary["lenses"]] == [("torch_rank0", 1)], summary["lenses"]
        names = sorted
        print(
            f"faults 2+3: in flight at the restart: {names(in_flight)} "
            f"(tries {[rungs[i]['try_number'] for i in in_flight]}); done before: {names(done_ids)}; "
            f"run finished {recovery_s:.0f} s after the scheduler was killed"
        )
    finally:
        keep_logs(stack, "test_faults_scheduler")
        stack.stop()
