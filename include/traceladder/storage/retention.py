"""Retention: remove old traces and logs from S3, per the cluster's policy, and record each removal
in the rung's manifest (issue 30; docs/operations.md).

The policy (``storage.retention`` in clusters.yaml) names up to three limits:

* ``traces``: everything under ``<rung_id>/traces/``;
* ``heavy_traces``: the traces of a rung whose lens is rocprofv3 or rocm_trace_lite (its limit
  replaces ``traces`` for those rungs);
* ``logs``: ``<rung_id>/log.txt.gz``.

A run's age is its index entry's logical date (else its publish time). Runs that are not in the
index, and the run ``latest.json`` points at, are never touched; nor is anything else of a run
(metrics.json, spec.json, manifest.json, analysis/, summary/, plan.json, the index).

Crash safety: per rung, the manifest is rewritten first (schema 2: the removed objects move from
``objects`` to ``removed: [{key, bytes, sha256, removed_at, policy}]``), then the objects are
deleted. A run killed between the two finds, next time, keys that its manifest already lists as
removed but that still exist, and deletes them; nothing is recorded twice and nothing kept is ever
a candidate. Standard library and a boto3 client only (the base layer).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterator, Mapping

from traceladder.core import layout
from traceladder.core.documents import (
    DocumentError,
    IndexEntry,
    JSONObject,
    JSONValue,
    as_int,
    as_list,
    as_object,
    entries_from,
    legacy_rows,
)
from traceladder.core.env_vars import DurationError, duration
from traceladder.storage.artifacts import ArtifactNotFoundError, ArtifactStoreError, S3ArtifactStore

# The manifest schema once retention has removed something from the rung (artifacts.py writes 1).
MANIFEST_SCHEMA_REMOVED = 2
HEAVY_LENSES = frozenset({"rocprofv3", "rocm_trace_lite"})
POLICY_FIELDS = ("traces", "heavy_traces", "logs")


class RetentionError(ArtifactStoreError):
    """A bad policy or a store that cannot be read; the message is one line naming the field/key."""


def parse_duration(text: object, field_name: str) -> timedelta:
    """``8w`` / ``30d`` / ``12h`` -> timedelta (core.env_vars.duration); a bad one is a
    RetentionError naming the field."""
    try:
        return duration(text, field_name)
    except DurationError as exc:
        raise RetentionError(str(exc)) from None


@dataclass(frozen=True)
class Policy:
    """Limits per kind; None keeps that kind for ever."""

    traces: timedelta | None = None
    heavy_traces: timedelta | None = None
    logs: timedelta | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, JSONValue] | None, where: str = "storage.retention") -> "Policy":
        if not data:
            return cls()
        unknown = sorted(set(data) - set(POLICY_FIELDS))
        if unknown:
            raise RetentionError(f"{where}.{unknown[0]}: unknown retention field (known: {', '.join(POLICY_FIELDS)})")
        return cls(**{k: parse_duration(v, f"{where}.{k}") for k, v in data.items() if v is not None})

    @property
    def empty(self) -> bool:
        return self.traces is None and self.heavy_traces is None and self.logs is None

    def shortest(self) -> timedelta | None:
        limits = [x for x in (self.traces, self.heavy_traces, self.logs) if x is not None]
        return min(limits) if limits else None

    def may_be_due(self, age: timedelta, has_traces: bool, has_log: bool) -> bool:
        """Whether a rung of this age can hold anything due (before its lens is known). A key that
        an interrupted pass recorded was due then, so it is due now unless the policy grew."""
        trace_limits = [x for x in (self.traces, self.heavy_traces) if x is not None]
        if has_traces and trace_limits and age > min(trace_limits):
            return True
        return has_log and self.logs is not None and age > self.logs

    def rule_for(self, rel: str, lens: str | None) -> tuple[str, timedelta] | None:
        """The policy that may remove a key (relative to its rung folder), or None: kept for ever."""
        if rel.startswith(layout.TRACES_FOLDER + "/"):
            if lens in HEAVY_LENSES and self.heavy_traces is not None:
                return "heavy_traces", self.heavy_traces
            return ("traces", self.traces) if self.traces is not None else None
        if rel == layout.LOG_OBJECT:
            return ("logs", self.logs) if self.logs is not None else None
        return None


def removable_kind(rel: str) -> bool:
    """Only a rung's traces and its log can ever be removed (every other key is kept)."""
    return rel.startswith(layout.TRACES_FOLDER + "/") or rel == layout.LOG_OBJECT


@dataclass
class Removal:
    key: str
    bytes: int  # as the manifest recorded it (the real size), else as stored
    stored_bytes: int  # as S3 lists it
    sha256: str | None
    policy: str


@dataclass
class RungJob:
    rung: str  # the rung folder's key
    removals: list[Removal]  # new removals, not yet in the manifest
    leftovers: list[Removal]  # recorded as removed by an earlier, interrupted run; still stored


@dataclass
class Totals:
    ladders: int = 0
    runs: int = 0
    rungs: int = 0
    objects: int = 0
    bytes: int = 0
    stored_bytes: int = 0
    by_policy: dict[str, int] = field(default_factory=dict)

    def add(self, removal: Removal) -> None:
        self.objects += 1
        self.bytes += removal.bytes
        self.stored_bytes += removal.stored_bytes
        self.by_policy[removal.policy] = self.by_policy.get(removal.policy, 0) + removal.bytes

    def as_dict(self, dry_run: bool) -> JSONObject:
        return {
            "dry_run": dry_run,
            "ladders": self.ladders,
            "runs": self.runs,
            "rungs": self.rungs,
            "objects": self.objects,
            "bytes": self.bytes,
            "stored_bytes": self.stored_bytes,
            "bytes_by_policy": dict(sorted(self.by_policy.items())),
        }


def _parse_time(text: object) -> datetime | None:
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def run_time(entry: IndexEntry) -> datetime | None:
    """When a published run happened: its logical date, else its publish time."""
    for value in (entry.logical_date, entry.published_at):
        if value:
            moment = _parse_time(value)
            if moment is not None:
                return moment
    return None


def _list_sized(store: S3ArtifactStore, prefix: str) -> dict[str, int]:
    """``{key: size}`` under ``prefix/`` (one paginated listing)."""
    sizes: dict[str, int] = {}
    try:
        for page in store.client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=prefix + "/"):
            for obj in page.get("Contents", []) or []:
                sizes[obj["Key"]] = int(obj.get("Size", 0))
    except Exception as exc:  # noqa: BLE001 - any S3 failure becomes one line naming the prefix
        raise RetentionError(f"retention: cannot list {store.describe(prefix)}: {exc}") from None
    return sizes


def _json_or_none(store: S3ArtifactStore, key: str) -> JSONValue:
    try:
        return json.loads(store.get_bytes(key))
    except ArtifactNotFoundError:
        return None
    except ValueError:
        raise RetentionError(f"retention: {store.describe(key)} is not valid JSON") from None


def _rung_lens(store: S3ArtifactStore, rung: str) -> str | None:
    # Only the lens, from a spec of any version: RunnerSpec refuses other schemas and unknown keys
    # (and rung_spec is a layer beside storage), so a newer runner's spec must not stop the pass.
    spec = _json_or_none(store, f"{rung}/{layout.SPEC_OBJECT}")
    return str(spec.get("lens")) if isinstance(spec, dict) and spec.get("lens") else None


def _manifest(store: S3ArtifactStore, rung: str) -> JSONObject:
    doc = _json_or_none(store, f"{rung}/{layout.MANIFEST_NAME}")
    if doc is None:
        return {"schema": MANIFEST_SCHEMA_REMOVED, "objects": []}
    if not isinstance(doc, dict) or not isinstance(doc.get("objects", []), list):
        raise RetentionError(f"retention: {store.describe(f'{rung}/{layout.MANIFEST_NAME}')} is not a manifest")
    return doc


def plan_run(
    store: S3ArtifactStore, run_prefix: str, age: timedelta, policy: Policy
) -> Iterator[tuple[RungJob, JSONObject]]:
    """Per rung folder of the run with something to remove: the job and the rung's manifest."""
    sizes = _list_sized(store, run_prefix)
    by_rung: dict[str, dict[str, int]] = {}
    for key, size in sizes.items():
        rest = key[len(run_prefix) + 1 :]
        rung_id, sep, rel = rest.partition("/")
        if sep and rung_id != layout.SUMMARY_FOLDER and removable_kind(rel):
            by_rung.setdefault(f"{run_prefix}/{rung_id}", {})[key] = size
    for rung, present in sorted(by_rung.items()):
        rels = [k[len(rung) + 1 :] for k in present]
        has_traces = any(rel.startswith(layout.TRACES_FOLDER + "/") for rel in rels)
        if not policy.may_be_due(age, has_traces, layout.LOG_OBJECT in rels):
            continue  # nothing of this rung is old enough under any limit: no read at all
        manifest = _manifest(store, rung)
        recorded = {o.get("key"): o for o in as_list(manifest.get("objects", [])) if isinstance(o, dict)}
        already = removed_in(manifest)
        lens = _rung_lens(store, rung) if has_traces and policy.heavy_traces is not None else None
        job = RungJob(rung, [], [])
        for key, size in sorted(present.items()):
            entry = recorded.get(key) or {}
            if key in already:  # an earlier run recorded it and was stopped before deleting it
                rec = already[key]
                job.leftovers.append(
                    Removal(
                        key, as_int(rec.get("bytes", size)), size, _str_or_none(rec.get("sha256")), str(rec["policy"])
                    )
                )
                continue
            rule = policy.rule_for(key[len(rung) + 1 :], lens)
            if rule is None or age <= rule[1]:
                continue
            job.removals.append(
                Removal(key, as_int(entry.get("size", size)), size, _str_or_none(entry.get("sha256")), rule[0])
            )
        if job.removals or job.leftovers:
            yield job, manifest


def _str_or_none(value: JSONValue) -> str | None:
    return None if value is None else str(value)


def _record(manifest: JSONObject, removals: list[Removal], removed_at: str) -> JSONObject:
    """The manifest after the removals: they move from ``objects`` to ``removed`` (schema 2)."""
    gone = {r.key for r in removals}
    removed: list[JSONValue] = list(as_list(manifest.get("removed", [])))
    removed += [
        {"key": r.key, "bytes": r.bytes, "sha256": r.sha256, "removed_at": removed_at, "policy": r.policy}
        for r in removals
    ]
    return {
        **manifest,
        "schema": max(MANIFEST_SCHEMA_REMOVED, as_int(manifest.get("schema", 1) or 1)),
        "objects": [
            o for o in as_list(manifest.get("objects", [])) if not (isinstance(o, dict) and o.get("key") in gone)
        ],
        "removed": sorted(removed, key=lambda r: str(as_object(r).get("key"))),
    }


def _delete(store: S3ArtifactStore, key: str) -> None:
    """One object; only a trace or a log is ever passed here (checked again by the caller)."""
    try:
        store.client.delete_object(Bucket=store.bucket, Key=key)
    except Exception as exc:  # noqa: BLE001 - any S3 failure becomes one line naming the key
        raise ArtifactStoreError(f"retention: cannot delete {store.describe(key)}: {exc}", key) from None


def _latest_run_id(store: S3ArtifactStore, ladder: str) -> str | None:
    """The run latest.json names; a latest.json that does not read as an index entry stops the
    ladder's pass (its run must be kept whole, so it must be known)."""
    key = f"{ladder}/{layout.LATEST_OBJECT}"
    try:
        return IndexEntry.from_json(store.get_bytes(key), store.describe(key)).run_id or None
    except ArtifactNotFoundError:
        return None
    except DocumentError as exc:
        raise RetentionError(f"retention: {exc}") from None


def _index_entries(store: S3ArtifactStore, ladder: str) -> list[IndexEntry]:
    """The ladder's published runs (``runs/<run_id>.json``, and the older ``index.json``), by the
    run index's one reading rule (``core.documents.entries_from``). An entry that does not read is
    left out: a run retention cannot date is never judged old."""
    legacy = f"{ladder}/{layout.LEGACY_INDEX}"
    rows = legacy_rows(_json_or_none(store, legacy), store.describe(legacy))
    keys = [key for key in _list_sized(store, f"{ladder}/{layout.RUNS_FOLDER}") if key.endswith(".json")]
    rows += [(_json_or_none(store, key), key) for key in keys]
    return entries_from(rows, skip_bad=True)


def apply_ladder(
    store: S3ArtifactStore,
    policy: Policy,
    *,
    dry_run: bool,
    now: datetime | None = None,
    emit: Callable[[str], None] = print,
    totals: Totals | None = None,
) -> Totals:
    """Apply ``policy`` to the store's ladder: one ``key<TAB>bytes<TAB>policy`` line per removed
    (or, dry, removable) key. Returns the totals (added to ``totals`` when given)."""
    totals = totals if totals is not None else Totals()
    totals.ladders += 1
    if policy.empty:
        return totals
    now = now or datetime.now(timezone.utc)
    removed_at = now.isoformat(timespec="seconds")
    ladder = store.namespace.rstrip("/")
    latest = _latest_run_id(store, ladder)
    for entry in sorted(_index_entries(store, ladder), key=lambda e: e.run_id):
        run_id = layout.safe_key_part(entry.run_id)
        when = run_time(entry)
        if run_id == latest or entry.run_id == latest or when is None:
            continue  # latest.json's run is kept whole; an undated run is never judged old
        shortest = policy.shortest()
        if shortest is None or now - when <= shortest:
            continue  # younger than every limit: not even listed
        run_prefix = f"{ladder}/{run_id}"
        touched = False
        for job, manifest in plan_run(store, run_prefix, now - when, policy):
            touched = True
            totals.rungs += 1
            for removal in job.removals + job.leftovers:
                if not removable_kind(removal.key[len(job.rung) + 1 :]):  # never: a kept kind
                    raise RetentionError(f"retention: refusing to delete {removal.key} (not a trace or a log)")
                emit(f"{removal.key}\t{removal.bytes}\t{removal.policy}")
                totals.add(removal)
            if dry_run:
                continue
            if job.removals:  # the record first: a kill after it leaves leftovers, never lost records
                body = json.dumps(_record(manifest, job.removals, removed_at), indent=2, sort_keys=True) + "\n"
                store.put_bytes(f"{job.rung}/{layout.MANIFEST_NAME}", body.encode(), "application/json")
            for removal in job.removals + job.leftovers:
                _delete(store, removal.key)
        totals.runs += int(touched)
    return totals


def removed_in(manifest: object) -> dict[str, JSONObject]:
    """``{key: removal record}`` of a manifest (empty for schema 1 or anything unreadable)."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("removed"), list):
        return {}
    return {str(r["key"]): r for r in manifest["removed"] if isinstance(r, dict) and r.get("key")}
