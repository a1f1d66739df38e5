"""CeleryExecutor with a queue per host, on real parts: Debian's redis-server as the broker,
a throwaway Debian PostgreSQL cluster as the metadata database, and two Celery workers with
`--concurrency 1`: one on the host's queue (`localhost`), one on the default queue. A small
ladder runs through the REST trigger; every rung must have run on its host's worker and every
analysis, summary and publish task on the default one (checked from each task instance's queue
and from the workers' own logs, which name each task instance they executed)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from testkit.needs import unavailable
from tests.integration.stack_harness import keep_logs, ran_rung_slots, start_stack, stored_rung_ids
from traceladder.embedded.local_stack import COMPONENTS, CELERY_WORKER

pytestmark = pytest.mark.scheduler

LADDER = "celery-small"
HOST, DEFAULT_QUEUE = "localhost", "default"
HOST_POOL = "traceladder-localhost"
CONF = {"ladder": LADDER, "rungs": ["baseline", "fusions"], "repeats": 1, "lens": "torch_rank0"}


@pytest.fixture(scope="module")
def celery_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from traceladder.embedded.local_services import LocalPostgres, LocalRedis

    for binary in ("redis-server", "initdb"):
        if not shutil.which(binary) and not list(Path("/usr/lib/postgresql").glob(f"*/bin/{binary}")):
            unavailable(f"no {binary} (apt-get install -y redis-server postgresql)")
    try:
        import airflow.providers.celery  # noqa: F401
    except ImportError:
        unavailable("apache-airflow-providers-celery is not installed (requirements.txt)")
    tmp = tmp_path_factory.mktemp("celery")
    with LocalRedis(tmp / "redis") as redis, LocalPostgres() as pg:
        broker_env = {
            "AIRFLOW__CELERY__BROKER_URL": redis.url,
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + pg.url,
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "1",
        }
        workers = (f"{CELERY_WORKER}{HOST}", f"{CELERY_WORKER}{DEFAULT_QUEUE}")
        stack = start_stack(
            tmp,
            {LADDER: {}},
            extra_env=broker_env,
            executor="CeleryExecutor",
            sql_alchemy_conn=pg.url,
            components=(*COMPONENTS, *workers),
        )
        try:
            run_id = stack.trigger("traceladder-trigger", CONF)
            state = stack.wait_for_run("traceladder-trigger", run_id, timeout_s=1500)
            tis = stack.task_instances("traceladder-trigger", run_id)
            logs = {w[len(CELERY_WORKER) :]: stack.log_path(w).read_text(errors="replace") for w in workers}
            yield {"state": state, "tis": tis, "worker_logs": logs, "rung_ids": stored_rung_ids(stack, LADDER, run_id)}
        finally:
            keep_logs(stack, "test_celery")
            stack.stop()


def test_small_ladder_succeeds_under_celery(celery_run: dict[str, Any]) -> None:
    states = {(t["task_id"], t["map_index"]): t["state"] for t in celery_run["tis"]}
    assert celery_run["state"] == "success", states


def test_every_rung_ran_on_its_hosts_worker(celery_run: dict[str, Any]) -> None:
    rungs = ran_rung_slots(celery_run["tis"], HOST_POOL)
    assert len(rungs) == 2 and celery_run["rung_ids"] == ["baseline.torch_rank0.p0", "fusions.torch_rank0.p0"]
    logs = celery_run["worker_logs"]
    for ti in rungs:
        assert ti["queue"] == HOST, ti
        assert ti["id"] in logs[HOST] and ti["id"] not in logs[DEFAULT_QUEUE], ti["task_id"]


def test_analysis_summary_and_publish_ran_on_the_default_worker(celery_run: dict[str, Any]) -> None:
    # the blocks' `done` joins are empty operators: the scheduler marks them, no worker runs them
    ran = [
        t
        for t in celery_run["tis"]
        if t["pool"] != HOST_POOL and t["state"] == "success" and not t["task_id"].endswith(".done")
    ]
    assert {"plan", "analyze", "summary", "publish"} <= {t["task_id"] for t in ran}
    logs = celery_run["worker_logs"]
    for ti in ran:
        assert ti["queue"] == DEFAULT_QUEUE, ti
        assert ti["id"] in logs[DEFAULT_QUEUE] and ti["id"] not in logs[HOST], f"{ti['task_id']}[{ti['map_index']}]"
