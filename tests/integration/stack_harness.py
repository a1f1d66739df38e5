"""The real-scheduler harness for tests: ``LocalStack`` (traceladder.embedded.local_stack) on free
ports in a temporary folder, with a temporary ladders folder of tiny ladders that the DAG files
read. The scheduler tests and the fault tests both start their stacks through ``start_stack``.

    stack = start_stack(tmp_path, {"sched-small": {...ladder fields...}})
    ...  stack.trigger(...), stack.wait_for_run(...), stack.task_instances(...)
    stack.stop()

In CI a stack that cannot start fails the test (``needs.unavailable``); elsewhere it skips with
the reason only when the machine lacks Airflow or SeaweedFS, never on a startup error."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from testkit.needs import unavailable
from traceladder.embedded.local_stack import AIRFLOW_BIN, LocalStack
from traceladder.config.loader import CONFIG_DIR
from testkit.tiny_proxy import TINY_LENS, TINY_MODEL

# The shipped proxy ladder, shrunk to what a scheduler test needs (the fault tests' sizes): one
# layer, four experts, a 32-token sequence, four iterations, a short profiler window, one repeat.
# The scheduler tests check scheduling, not the proxy, so its 8-layer, 256-expert model is waste.
TINY = {
    "schema": 1,
    "extends": str(CONFIG_DIR / "ladders" / "proxy-local.yaml"),
    "repeats": 1,
    "warmup_iters": 1,
    "timeout_s": 300,
    "base": {"model_args": TINY_MODEL},
    "switches": {
        "lens": {
            "values": {
                "torch_rank0": TINY_LENS,
                "torch_all_ranks": TINY_LENS,
            }
        }
    },
    "rungs": [{"name": "baseline"}, {"name": "fusions", "parent": "baseline", "set": {"fusions": True}}],
    "lenses": {"rung": "fusions", "use": ["none"]},
}


def write_ladders(folder: Path, ladders: dict[str, dict[str, Any]]) -> Path:
    """One YAML per ladder: ``TINY`` with the given fields over it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, extra in ladders.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump({**TINY, "ladder": name, **extra}, sort_keys=False))
    return folder


def start_stack(
    tmp: Path, ladders: dict[str, dict[str, Any]], extra_env: dict[str, str] | None = None, **kwargs: Any
) -> LocalStack:
    """A started stack (S3 + api-server, scheduler, dag-processor, triggerer) whose DAGs are the
    given tiny ladders plus the trigger DAG. ``kwargs`` go to ``LocalStack``."""
    from traceladder.embedded.embedded_s3 import find_weed_binary

    if not Path(AIRFLOW_BIN).exists():
        unavailable(f"no airflow CLI beside {AIRFLOW_BIN}")
    try:
        find_weed_binary()
    except Exception as exc:  # noqa: BLE001 (its message is the reason)
        unavailable(str(exc))
    ladders_dir = write_ladders(tmp / "ladders", ladders)
    env = {"TRACELADDER_LADDERS_DIR": str(ladders_dir), **(extra_env or {})}
    stack = LocalStack(tmp / "stack", extra_env=env, **kwargs)
    try:
        stack.start()
    except BaseException:
        keep_logs(stack, "startup-failed")
        raise
    return stack


def keep_logs(stack: LocalStack, label: str) -> None:
    """Copy the components' logs to test-artifacts/ (CI keeps that folder)."""
    src = stack.home / "logs" / "stack"
    if src.is_dir():
        dest = Path(__file__).resolve().parents[2] / "test-artifacts" / "stack-logs" / label
        shutil.copytree(src, dest, dirs_exist_ok=True)


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def overlaps(intervals: list[tuple[datetime, datetime, str]]) -> list[tuple[str, str]]:
    """Pairs of (label, label) whose [start, end] intervals intersect."""
    ordered = sorted(intervals)
    found = []
    for (_s1, e1, a), (s2, _e2, b) in zip(ordered, ordered[1:]):
        if s2 < e1:
            found.append((a, b))
    return found


def stored_rung_ids(stack: LocalStack, ladder: str, run_id: str) -> list[str]:
    """The rung ids a run stored a metrics.json for (rung slots are plain tasks, named by their
    place in the block grid; what ran in them is in S3)."""
    from traceladder.storage.artifacts import safe_key_part

    client = stack.s3.client()
    prefix = f"traceladder/{ladder}/{safe_key_part(run_id)}/"
    keys = [
        o["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=stack.s3.bucket, Prefix=prefix)
        for o in page.get("Contents", [])
    ]
    return sorted(
        k[len(prefix) :].split("/", 1)[0]
        for k in keys
        if k.endswith("/metrics.json") and k.count("/") == prefix.count("/") + 1
    )


def ran_rung_slots(tis: list[dict[str, Any]], pool: str) -> list[dict[str, Any]]:
    """The rung slots of a run that ran a rung (empty slots are skipped)."""
    return [ti for ti in tis if ti["pool"] == pool and ti["state"] in ("success", "failed")]
