"""The maintenance work behind the `traceladder-retention` DAG and `traceladder retention`:
which ladders each cluster's retention policy covers, and one pass over them
(the rules themselves are in storage/retention.py; docs/operations.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from traceladder.workflows.discovery import discover
from traceladder.config.models import StorageSettings
from traceladder.storage.artifacts import S3ArtifactStore
from traceladder.storage.retention import Policy, Totals, apply_ladder


@dataclass(frozen=True)
class Target:
    ladder: str
    cluster: str
    storage: StorageSettings
    policy: Policy


def retention_targets(only_ladder: str | None = None) -> list[Target]:
    """Every ladder file whose cluster sets ``storage.retention`` (a ladder without a file is left alone)."""
    targets = []
    for loaded in discover().ladders:
        storage = loaded.cluster.storage
        if storage.retention is None or (only_ladder and loaded.ladder.ladder != only_ladder):
            continue
        policy = Policy.from_mapping(storage.retention.model_dump(), "storage.retention")
        targets.append(Target(loaded.ladder.ladder, loaded.ladder.cluster, storage, policy))
    return targets


def run_retention(
    client_for: Callable[[str], Any],
    *,
    dry_run: bool,
    only_ladder: str | None = None,
    now: datetime | None = None,
    emit: Callable[[str], None] = print,
) -> dict[str, Any]:
    """One pass over every covered ladder; emits a line per key, then the JSON total, and returns it."""
    totals = Totals()
    clients: dict[str, Any] = {}
    for target in retention_targets(only_ladder):
        conn = target.storage.conn_id
        if conn not in clients:
            clients[conn] = client_for(conn)
        store = S3ArtifactStore(clients[conn], target.storage.effective_bucket, target.storage.prefix, target.ladder)
        apply_ladder(store, target.policy, dry_run=dry_run, now=now, emit=emit, totals=totals)
    total = totals.as_dict(dry_run)
    emit(json.dumps(total, sort_keys=True))
    return total


def retention_task(dry_run: bool = False) -> dict[str, Any]:
    """The DAG's task: each cluster's S3 connection through the Amazon provider's hook."""
    from traceladder.airflow.ladders import s3_client

    return run_retention(s3_client, dry_run=dry_run)
