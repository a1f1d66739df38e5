"""The deployment's alerts (core/alerts.py `AlertDoc`): one per cause, found by cause keys, kept
in one place every ladder reaches, changed only by compare-and-swap.

**Where.** ``<alerts.prefix>/alerts/<id>.json`` in ``alerts.bucket`` through ``alerts.conn_id``
(the clusters file's ``alerts:``; default ``traceladder-alerts/`` in the ``traceladder`` bucket):
every ladder of a deployment reads the one clusters file, so a ladder with another prefix or
bucket finds the same alerts.

**Causes.** A suspect has two keys (`cause_keys`): its window (bucket, prefix, ladder, rung and
its last good run: a prediction-bound flag in week N and the change point called in week N+1
share it) and, when an image, build or setting differs, the change itself (the same build change
on two ladders shares it). A triage adds ``culprit:<name>`` per culprit, and an alert whose
culprit another alert already names is merged into that one.

**One writer wins.** A new alert's id comes from its first cause (`a-<sha1>`, then `-2`, `-3`...
when a closed alert holds the id), written with ``If-None-Match: *``; every update is
read-modify-write with ``If-Match: <ETag>``, retried on a conflict. Two triages of one cause at
once both try the same id: one creates it, the other reads it and links to it."""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from traceladder.config.models import AlertSettings
from traceladder.core.alerts import PRODUCT_USER, AlertChange, AlertDoc, AlertMember, AlertTriage
from traceladder.core.codec import DocumentError
from traceladder.core.documents import TriageDoc, TriageSuspect
from traceladder.core.errors import TraceladderError

ALERTS_FOLDER = "alerts"
CAS_ATTEMPTS = 8
NOT_COVERING_LABELS = ("not reproduced", "insufficient data")
# a one-line outcome in the weekly notice instead of a notice of its own (issue 59, item 3)
QUIET_LABELS = ("not reproduced", "insufficient data")


class AlertStoreError(TraceladderError, RuntimeError):
    """The alerts' store failed or holds a bad alert: one line naming the bucket and key."""


class AlertConflict(TraceladderError):
    """Another writer changed the alert first (its ETag moved): read it again and retry."""


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# ---- the stores: S3 (compare-and-swap by ETag) and a directory (the same rules, for tests and demos)


class AlertStore:
    """Alerts as objects ``<prefix>/alerts/<id>.json``; `create` refuses an existing id and
    `replace` an alert changed since it was read (`AlertConflict`)."""

    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix.strip("/")

    def key(self, alert_id: str) -> str:
        return f"{self.prefix}/{ALERTS_FOLDER}/{alert_id}.json"

    def where(self, alert_id: str | None = None) -> str:
        return f"s3://{self.bucket}/{self.key(alert_id) if alert_id else self.prefix + '/' + ALERTS_FOLDER + '/'}"

    def _fail(self, what: str, alert_id: str | None, exc: BaseException) -> AlertStoreError:
        from traceladder.core.errors import first_line

        return AlertStoreError(f"alerts: {what} {self.where(alert_id)}: {first_line(exc)}")

    def read(self, alert_id: str) -> tuple[AlertDoc, str] | None:
        """The alert and its ETag (None: there is none)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.key(alert_id))
            body = got["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise self._fail("reading", alert_id, exc) from None
        except BotoCoreError as exc:
            raise self._fail("reading", alert_id, exc) from None
        return _parse(body, self.where(alert_id)), str(got["ETag"])

    def ids(self) -> list[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        folder = f"{self.prefix}/{ALERTS_FOLDER}/"
        out: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=folder):
                out += [
                    o["Key"][len(folder) : -len(".json")]
                    for o in page.get("Contents", [])
                    if o["Key"].endswith(".json")
                ]
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("listing", None, exc) from None
        return out

    def _put(self, doc: AlertDoc, condition: dict[str, str]) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        body = doc.to_json().encode()
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self.key(doc.id), Body=body, ContentType="application/json", **condition
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise AlertConflict(doc.id) from None
            raise self._fail("writing", doc.id, exc) from None
        except BotoCoreError as exc:
            raise self._fail("writing", doc.id, exc) from None

    def create(self, doc: AlertDoc) -> bool:
        """Write a new alert; False when its id is taken."""
        try:
            self._put(doc, {"IfNoneMatch": "*"})
        except AlertConflict:
            return False
        return True

    def replace(self, doc: AlertDoc, etag: str) -> None:
        self._put(doc, {"IfMatch": etag})


class DirAlertStore(AlertStore):
    """The same store in a directory (tests, the demo without S3): `create` is O_EXCL and
    `replace` checks the content's hash under a lock, as strict as S3's conditional writes."""

    def __init__(self, root: str | os.PathLike[str], prefix: str = "traceladder-alerts") -> None:
        super().__init__(None, "dir", prefix)
        self.root = Path(root)

    def where(self, alert_id: str | None = None) -> str:
        return str(self.root / (self.key(alert_id) if alert_id else f"{self.prefix}/{ALERTS_FOLDER}"))

    def _path(self, alert_id: str) -> Path:
        return self.root / self.key(alert_id)

    def read(self, alert_id: str) -> tuple[AlertDoc, str] | None:
        try:
            body = self._path(alert_id).read_bytes()
        except FileNotFoundError:
            return None
        return _parse(body, self.where(alert_id)), hashlib.md5(body).hexdigest()  # noqa: S324 - an ETag

    def ids(self) -> list[str]:
        folder = self.root / self.prefix / ALERTS_FOLDER
        return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []

    def _put(self, doc: AlertDoc, condition: dict[str, str]) -> None:
        path = self._path(doc.id)
        path.parent.mkdir(parents=True, exist_ok=True)
        body = doc.to_json().encode()
        with open(path.parent / ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if "IfNoneMatch" in condition and path.exists():
                raise AlertConflict(doc.id)
            if "IfMatch" in condition:
                current = path.read_bytes() if path.exists() else b""
                if hashlib.md5(current).hexdigest() != condition["IfMatch"]:  # noqa: S324 - an ETag
                    raise AlertConflict(doc.id)
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(body)
            tmp.replace(path)


def _parse(body: bytes, where: str) -> AlertDoc:
    try:
        return AlertDoc.from_json(body, where)
    except DocumentError as exc:
        raise AlertStoreError(str(exc)) from None


def store_for(settings: AlertSettings, client: Any) -> AlertStore:
    """The deployment's alert store on an S3 client (airflow/ladders.py `alert_store` makes it
    from `settings.conn_id`; the Ladders page from its own client)."""
    return AlertStore(client, settings.effective_bucket, settings.prefix)


def all_alerts(store: AlertStore) -> list[AlertDoc]:
    """Every alert, newest first; one that went away between the list and the read is left out."""
    found = [got[0] for got in (store.read(i) for i in store.ids()) if got is not None]
    return sorted(found, key=lambda a: (a.created_at, a.id), reverse=True)


def update(store: AlertStore, alert_id: str, change: Callable[[AlertDoc], AlertDoc | None]) -> AlertDoc:
    """Read, change and write back with If-Match, again on a conflict; `change` returns None to
    leave the alert as it is. The alert as stored after."""
    for _ in range(CAS_ATTEMPTS):
        got = store.read(alert_id)
        if got is None:
            raise AlertStoreError(f"alerts: no alert {alert_id} ({store.where(alert_id)})")
        doc, etag = got
        changed = change(doc)
        if changed is None:
            return doc
        changed = replace(changed, updated_at=now())
        try:
            store.replace(changed, etag)
        except AlertConflict:
            continue
        return changed
    raise AlertStoreError(f"alerts: {store.where(alert_id)} kept changing under {CAS_ATTEMPTS} attempts")


# ---- causes and members


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]  # noqa: S324 - a name, not a secret


def change_key(suspect: TriageSuspect) -> str | None:
    """The change a suspect's runs differ by (image, build and spec fields that can be bisected),
    the same whichever ladder sees it; None when nothing bisectable differs."""
    fields = sorted(
        (d.section, d.field, json.dumps(d.good, sort_keys=True), json.dumps(d.bad, sort_keys=True))
        for d in suspect.diff
        if d.bisectable and d.section in ("image", "build", "spec")
    )
    return f"change:{_digest(json.dumps(fields))}" if fields else None


def window_key(member: AlertMember) -> str:
    return f"window:{member.bucket}/{member.prefix}/{member.ladder}/{member.rung}/{member.good_run_id}"


def cause_keys(suspect: TriageSuspect, member: AlertMember) -> list[str]:
    change = change_key(suspect)
    return [window_key(member)] + ([change] if change else [])


def change_text(suspect: TriageSuspect) -> str:
    """What differs, in words: `build n0 -> n1; spec model_args.extra_work_pct 0 -> 300`."""
    parts = [
        f"{d.section} {d.field} {_short(d.good)} -> {_short(d.bad)}"
        for d in suspect.diff
        if d.bisectable and d.section in ("image", "build", "spec")
    ]
    return (
        "; ".join(parts[:4]) + (f" (+{len(parts) - 4} more)" if len(parts) > 4 else "") if parts else "no change found"
    )


def _short(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def member_of(
    suspect: TriageSuspect, ladder: str, bucket: str, prefix: str, role: str, metric: str | None
) -> AlertMember:
    return AlertMember(
        ladder=ladder,
        run_id=suspect.run_id,
        rung=suspect.rung,
        good_run_id=suspect.good_run_id,
        reason=suspect.reason,
        direction=suspect.direction,
        delta_pct=suspect.delta_pct,
        role=role,
        bucket=bucket,
        prefix=prefix,
        metric=metric,
        added_at=now(),
    )


def covering(alert: AlertDoc) -> bool:
    """Whether a new suspect of the alert's cause links to it: an open status, not recovered or
    merged, and a triage that did not end `not reproduced` or `insufficient data`."""
    label = alert.triage.label if alert.triage else None
    return alert.covering and label not in NOT_COVERING_LABELS


# ---- what the triage DAG asks


def assign(
    store: AlertStore,
    group: Sequence[tuple[TriageSuspect, AlertMember]],
    triage_key: Callable[[str], str],
    dag_run_id: str | None,
    force: bool = False,
) -> tuple[AlertDoc, bool]:
    """The alert of one ladder run's suspect group, and whether this group triages it.

    A covering alert that shares a cause gets the group's members (`linked`, unless the alert's
    triage is this very group's: a retried DAG run is its owner) and the group starts no triage;
    with `force` it triages again (its members `triaged`). Otherwise a new alert is created,
    owned by this group (`triage_key(rung)` names its triage.json)."""
    members = [m for _, m in group]
    causes = list(dict.fromkeys(k for s, m in group for k in cause_keys(s, m)))
    first_suspect, first = group[0]
    # the triage this group would run (its first rung's triage.json)
    ours = AlertTriage(
        ladder=first.ladder, run_id=first.run_id, rung=first.rung, key=triage_key(first.rung), dag_run_id=dag_run_id
    )
    covered = next((a for a in all_alerts(store) if covering(a) and set(a.causes) & set(causes)), None)
    if covered is None:
        primary = change_key(first_suspect) or window_key(first)
        base = f"a-{_digest(primary)}"
        kind = "improvement" if first_suspect.direction == "faster" else "regression"
        for generation in range(1, 100):
            alert_id = base if generation == 1 else f"{base}-{generation}"
            at = now()
            fresh = AlertDoc(
                id=alert_id,
                kind=kind,
                status="untriaged",
                title=f"{first.ladder}/{first.rung} {first_suspect.direction} {first_suspect.delta_pct:+.1f}% "
                f"({change_text(first_suspect)})",
                causes=causes,
                change=change_text(first_suspect),
                members=members,
                triage=ours,
                history=[
                    AlertChange(what="created", by=PRODUCT_USER, at=at, value=f"{first.ladder} run {first.run_id}")
                ],
                created_at=at,
                updated_at=at,
            )
            if store.create(fresh):
                return fresh, True
            got = store.read(alert_id)
            if got is not None and covering(got[0]):  # another triage of this cause won the race
                covered = got[0]
                break
        else:
            raise AlertStoreError(f"alerts: no free id for {base} in {store.where()}")
    owner = covered.triage is not None and any(
        (covered.triage.ladder, covered.triage.run_id) == (m.ladder, m.run_id) for m in members
    )
    role = "triaged" if owner or force else "linked"

    def link(doc: AlertDoc) -> AlertDoc | None:
        fresh = [replace(m, role=role) for m in members if not any(m.same_suspect(o) for o in doc.members)]
        if not fresh and not force:
            return None
        at = now()
        history = [
            AlertChange(what="linked", by=PRODUCT_USER, at=at, value=f"{m.ladder}/{m.rung} run {m.run_id}")
            for m in fresh
        ]
        triage = doc.triage
        if force:
            triage = ours
        causes_now = list(dict.fromkeys([*doc.causes, *causes]))
        return replace(
            doc, members=[*doc.members, *fresh], causes=causes_now, triage=triage, history=[*doc.history, *history]
        )

    linked = update(store, covered.id, link)
    return linked, owner or force


def owned_by(store: AlertStore, ladder: str, run_id: str) -> AlertDoc | None:
    """The alert whose triage is this ladder run's (None: none, e.g. a triage from before alerts)."""
    return next(
        (
            a
            for a in all_alerts(store)
            if a.triage is not None and (a.triage.ladder, a.triage.run_id) == (ladder, run_id)
        ),
        None,
    )


def record_triage(store: AlertStore, alert_id: str, doc: TriageDoc, report_key: str, repro: str | None) -> AlertDoc:
    """A finished triage on its alert: label, figure and level, size and interval, culprits. Not
    reproduced makes the alert `invalid` (the product's change, in its history); a culprit that
    another covering alert already names merges this alert into that one."""
    from traceladder.triage.record import confirm_step

    step = confirm_step(doc)
    metric, level = doc.metric, (100 * (1 - doc.alpha) if doc.alpha is not None else None)

    def put(alert: AlertDoc) -> AlertDoc | None:
        at = now()
        triage = AlertTriage(
            ladder=doc.ladder,
            run_id=doc.run_id,
            rung=doc.rung,
            key=alert.triage.key if alert.triage else "",
            report_key=report_key,
            dag_run_id=alert.triage.dag_run_id if alert.triage else None,
            label=doc.label,
            metric=metric,
            level_pct=level,
            delta_pct=step.delta_pct if step else None,
            interval_pct=step.interval_pct if step else None,
            culprits=list(doc.culprits),
            conclusion=doc.conclusion,
            repro=repro,
        )
        history = [*alert.history, AlertChange(what="triaged", by=PRODUCT_USER, at=at, value=doc.label or doc.state)]
        status = alert.status
        if doc.label == "not reproduced" and alert.status == "untriaged":
            history.append(AlertChange(what="status", by=PRODUCT_USER, at=at, value="invalid", previous=status))
            status = "invalid"
        causes = list(dict.fromkeys([*alert.causes, *(f"culprit:{c.name}" for c in doc.culprits)]))
        return replace(alert, triage=triage, status=status, history=history, causes=causes)

    alert = update(store, alert_id, put)
    culprits = {f"culprit:{c.name}" for c in doc.culprits}
    older = next(
        (
            a
            for a in all_alerts(store)
            if a.id != alert.id and covering(a) and culprits & set(a.causes) and a.created_at <= alert.created_at
        ),
        None,
    )
    return merge(store, alert, older) if older is not None else alert


def merge(store: AlertStore, alert: AlertDoc, into: AlertDoc) -> AlertDoc:
    """Rungs that share a culprit are one alert: `alert`'s members join `into`, `alert` points to it."""
    at = now()

    def absorb(doc: AlertDoc) -> AlertDoc:
        fresh = [m for m in alert.members if not any(m.same_suspect(o) for o in doc.members)]
        note = AlertChange(what="merged", by=PRODUCT_USER, at=at, value=f"{alert.id} (shares a culprit)")
        causes = list(dict.fromkeys([*doc.causes, *alert.causes]))
        return replace(doc, members=[*doc.members, *fresh], causes=causes, history=[*doc.history, note])

    merged = update(store, into.id, absorb)
    update(
        store,
        alert.id,
        lambda doc: replace(
            doc,
            merged_into=into.id,
            history=[*doc.history, AlertChange(what="merged", by=PRODUCT_USER, at=at, value=f"into {into.id}")],
        ),
    )
    return merged


def mark_notice(store: AlertStore, alert_id: str, notice: str) -> bool:
    """Record that a notice was sent; False when it already was (so each is sent once)."""
    sent: list[bool] = []

    def add(doc: AlertDoc) -> AlertDoc | None:
        sent.clear()
        if notice in doc.notices:
            sent.append(False)
            return None
        sent.append(True)
        return replace(doc, notices=[*doc.notices, notice])

    update(store, alert_id, add)
    return sent[0]


# ---- a person's change (the Ladders page)


def set_fields(
    store: AlertStore,
    alert_id: str,
    user: str,
    status: str | None = None,
    issue_url: str | None = None,
    note: str | None = None,
) -> AlertDoc:
    """A sheriff's change: the status, the issue link or the note, each kept in the history with
    the user and the time. A value equal to the current one adds nothing."""

    def change(doc: AlertDoc) -> AlertDoc | None:
        at = now()
        history = list(doc.history)
        values: dict[str, Any] = {}
        for what, name, value in (
            ("status", "status", status),
            ("issue", "issue_url", issue_url),
            ("note", "note", note),
        ):
            if value is None or value == getattr(doc, name):
                continue
            history.append(AlertChange(what=what, by=user, at=at, value=value, previous=getattr(doc, name)))
            values[name] = value
        return replace(doc, history=history, **values) if values else None

    return update(store, alert_id, change)


# ---- recovery: the numbers come back


def recovered_run(run_ids: Sequence[str], values: Sequence[float], member: AlertMember, runs: int) -> str | None:
    """The run that ends the first `runs` runs in a row, after the member's run, that all lie
    inside the 99% prediction bound of the good segment (the runs up to its last good run since
    the change point before it, as the suspect rule took it); None while there are none."""
    from traceladder.stats.history import detect, prediction_bound

    if member.good_run_id not in run_ids or member.run_id not in run_ids:
        return None
    good, bad = run_ids.index(member.good_run_id), run_ids.index(member.run_id)
    before = detect(list(values[: good + 1]))
    start = before[-1].index if before else 0
    bound = prediction_bound(values[start : good + 1])
    if bound is None:
        return None
    streak = 0
    for i in range(bad + 1, len(values)):
        streak = streak + 1 if bound.low <= math.log(values[i]) <= bound.high else 0
        if streak == runs:
            return run_ids[i]
    return None


def mark_recovered(store: AlertStore, alert_id: str, run_id: str, runs: int) -> AlertDoc | None:
    """Mark the alert recovered at `run_id`, once (None: it already was)."""
    done: list[AlertDoc] = []

    def change(doc: AlertDoc) -> AlertDoc | None:
        done.clear()
        if doc.recovered_at is not None:
            return None
        at = now()
        note = AlertChange(
            what="recovered", by=PRODUCT_USER, at=at, value=f"{runs} runs in a row inside the bound, to {run_id}"
        )
        marked = replace(doc, recovered_at=at, recovered_run=run_id, history=[*doc.history, note])
        done.append(marked)
        return marked

    update(store, alert_id, change)
    return done[0] if done else None
