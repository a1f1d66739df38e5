"""An alert (issue 59): one per cause of a regression or an improvement, however many suspects,
weeks, rungs or ladders it reaches. Stored once per deployment, ``<alerts prefix>/alerts/<id>.json``
in the bucket the clusters file's ``alerts:`` names (triage/alerts.py), so every ladder finds it,
whatever its own prefix or bucket.

A sheriff sets its status (Perfherder's workflow, less its bug-tracker states), an issue link and
a note; every change is kept in ``history`` with who made it and when. ``recovered`` is the
product's own mark (chromeperf's): N runs in a row back inside the good segment's 99% bound."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from traceladder.core.codec import Document, _f, _Part
from traceladder.core.documents import Culprit

ALERT_STATUSES = (
    "untriaged",
    "investigating",
    "acknowledged",
    "won't fix",
    "expected",
    "invalid",
    "fixed",
    "backed out",
)
# An alert in these still describes a live change: a new suspect of its cause links to it and
# starts no triage. `invalid` (noise, or not reproduced), `fixed` and `backed out` cover nothing.
COVERING_STATUSES = ("untriaged", "investigating", "acknowledged", "won't fix", "expected")
ALERT_KINDS = ("regression", "improvement")
# who made a change the product made itself (a person's change carries the login's user name)
PRODUCT_USER = "traceladder"


@dataclass(frozen=True, kw_only=True)
class AlertMember(_Part):
    """One suspect rung of one ladder run that the alert covers: the one it triaged (`triaged`) or
    one linked to it (`linked`: a later week, another rung or another ladder), with where its run
    is stored."""

    FILE: ClassVar[str] = "alert member"

    ladder: str = _f("str")
    run_id: str = _f("str")
    rung: str = _f("str")
    good_run_id: str = _f("str")
    reason: str = _f("str")  # the suspect's: change point, prediction bound, manual
    direction: str = _f("str", one_of=("slower", "faster"))
    delta_pct: float = _f("number")
    role: str = _f("str", one_of=("triaged", "linked"))
    bucket: str = _f("str", default="")
    prefix: str = _f("str", default="")
    metric: str | None = _f("str?", default=None, omit_none=True)  # wall or cpu: the figure judged
    added_at: str = _f("str", default="")

    def same_suspect(self, other: AlertMember) -> bool:
        return (self.ladder, self.run_id, self.rung, self.bucket, self.prefix) == (
            other.ladder,
            other.run_id,
            other.rung,
            other.bucket,
            other.prefix,
        )


@dataclass(frozen=True, kw_only=True)
class AlertChange(_Part):
    """One change of an alert, as it was made: what (`status`, `issue`, `note`, `created`, `linked`,
    `triaged`, `recovered`, `merged`), by whom, when, and the value it set."""

    FILE: ClassVar[str] = "alert change"

    what: str = _f("str", one_of=("created", "status", "issue", "note", "linked", "triaged", "recovered", "merged"))
    by: str = _f("str")
    at: str = _f("str")
    value: str | None = _f("str?", default=None)
    previous: str | None = _f("str?", default=None, omit_none=True)


@dataclass(frozen=True, kw_only=True)
class AlertTriage(_Part):
    """The triage that measured the alert's cause: where its triage.json is, its label, the figure
    and level it judged, the confirmed size with its interval, and the culprits with their shares."""

    FILE: ClassVar[str] = "alert triage"

    ladder: str = _f("str")
    run_id: str = _f("str")
    rung: str = _f("str")
    key: str = _f("str")  # triage.json's key, in the member's bucket
    report_key: str = _f("str", default="")
    dag_run_id: str | None = _f("str?", default=None)
    label: str | None = _f("str?", default=None)
    metric: str | None = _f("str?", default=None)  # wall or cpu
    level_pct: float | None = _f("number?", default=None)  # the interval's two-sided level, in %
    delta_pct: float | None = _f("number?", default=None)
    interval_pct: list[float] | None = _f("list?", default=None)
    culprits: list[Culprit] = _f("list", default=[], part=Culprit)
    conclusion: str | None = _f("str?", default=None)
    repro: str | None = _f("str?", default=None)  # the command that reruns the main step's A/B


@dataclass(frozen=True, kw_only=True)
class AlertDoc(Document):
    """An alert (``alerts/<id>.json``): its cause keys, the suspects it covers, its triage, and
    what people and the product said about it."""

    FILE: ClassVar[str] = "alert"
    SCHEMA: ClassVar[int] = 1
    JSON_INDENT: ClassVar[int | None] = 1

    id: str = _f("str")
    kind: str = _f("str", one_of=ALERT_KINDS)
    status: str = _f("str", one_of=ALERT_STATUSES)
    title: str = _f("str")  # e.g. "baseline slower +94% (build nightly-2026-11-22 -> nightly-2026-11-29)"
    causes: list[str] = _f("list")  # its cause keys (triage/alerts.py `cause_keys`)
    change: str = _f("str", default="")  # what differs, in words
    members: list[AlertMember] = _f("list", default=[], part=AlertMember)
    triage: AlertTriage | None = _f("object?", default=None, part=AlertTriage)
    issue_url: str | None = _f("str?", default=None)
    note: str | None = _f("str?", default=None)
    history: list[AlertChange] = _f("list", default=[], part=AlertChange)
    recovered_at: str | None = _f("str?", default=None)
    recovered_run: str | None = _f("str?", default=None)
    notices: list[str] = _f("list", default=[])  # the notices sent: "alert", "outcome", "recovered"
    merged_into: str | None = _f("str?", default=None, omit_none=True)
    created_at: str = _f("str", default="")
    updated_at: str = _f("str", default="")

    @property
    def covering(self) -> bool:
        """Whether a new suspect of this alert's cause links to it (and starts no triage)."""
        return self.status in COVERING_STATUSES and self.recovered_at is None and self.merged_into is None

    @property
    def ladders(self) -> list[str]:
        return list(dict.fromkeys(m.ladder for m in self.members))

    @property
    def rungs(self) -> list[str]:
        return list(dict.fromkeys(f"{m.ladder}/{m.rung}" for m in self.members))

    def size_text(self) -> str:
        """`+54.0% [+31.2%, +80.1%] (CPU time, 95% interval)`, the triage's confirmed size, else
        the suspect's own figure."""
        t = self.triage
        if t is not None and t.delta_pct is not None:
            interval = f" [{t.interval_pct[0]:+.1f}%, {t.interval_pct[1]:+.1f}%]" if t.interval_pct else ""
            figure = {"cpu": "CPU time", "wall": "wall time"}.get(t.metric or "", t.metric or "step time")
            level = f", {t.level_pct:g}% interval" if t.level_pct is not None else ""
            return f"{t.delta_pct:+.1f}%{interval} ({figure}{level})"
        first = self.members[0] if self.members else None
        return f"{first.delta_pct:+.1f}% (the suspect's, {first.reason})" if first else "unknown"
