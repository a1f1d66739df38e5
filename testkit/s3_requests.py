"""Count the S3 requests a boto3 client makes (botocore's ``before-parameter-build`` event: once
per API call, so once per page of a listing, with the call's own parameters), by operation and
by what they read."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any


def kind_of(key: str) -> str:
    """What a key is, by its place in the layout (storage/layout.py), for the per-kind counts."""
    parts = key.split("/")
    if "/runs/" in f"/{key}" or key.endswith("/runs"):
        return "index entry (runs/)"
    if "/summary/" in f"/{key}/":
        return "summary/"
    if "/analysis/" in f"/{key}/":
        return "analysis/"
    if parts[-1] in ("metrics.json", "manifest.json", "plan.json", "latest.json", "spec.json", "stop.json"):
        return parts[-1]
    return "other"


class RequestCounter:
    """``with RequestCounter(client) as counts:`` ... ``counts.total``, ``counts.by_op``."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.by_op: Counter[str] = Counter()
        self.by_kind: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, event_name: str, params: dict[str, Any] | None = None, **_: Any) -> None:
        op = event_name.rsplit(".", 1)[-1]
        key = str((params or {}).get("Key") or (params or {}).get("Prefix") or "")
        with self._lock:
            self.by_op[op] += 1
            self.by_kind[f"{op} {kind_of(key)}"] += 1

    def __enter__(self) -> "RequestCounter":
        self.client.meta.events.register("before-parameter-build.s3", self._count)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.meta.events.unregister("before-parameter-build.s3", self._count)

    @property
    def total(self) -> int:
        return sum(self.by_op.values())
