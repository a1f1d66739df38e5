"""What the ladder tests read back after `dag.test()`: task states, the stored objects, and the
manifests checked against them."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def task_states(dag_run) -> dict[tuple[str, int], str]:
    return {(ti.task_id, ti.map_index): str(ti.state) for ti in dag_run.get_task_instances()}


def objects(client, bucket: str, prefix: str) -> dict[str, bytes]:
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return {k: client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def check_manifests(stored: dict[str, bytes]) -> list[dict[str, Any]]:
    """Every manifest entry exists with its size and sha256; returns the entries."""
    entries = []
    for key, body in stored.items():
        if key.endswith("/manifest.json"):
            for entry in json.loads(body)["objects"]:
                data = stored[entry["key"]]
                assert len(data) == entry["size"], entry["key"]
                assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["key"]
                entries.append(entry)
    return entries
