"""The Ladders page's JSON answers, typed as the stage documents are (core/codec.py's ``Document``:
declared fields, ``to_dict``/``from_dict``/``to_json``), so the house has one way of typing a JSON
document. No schema key: these are answers, not stored files (their shape is the page's API).

- ``TriggerConf``: the ``traceladder-trigger`` run's conf that ``POST /trigger`` makes from the form
  (the DAG's Params: plan/trigger_form.py);
- ``TriggerResult``: ``POST /trigger``'s JSON answer (and the ``triggered.html`` page's data);
- ``ErrorBody``: every error's JSON answer (``{"detail": ...}``, as FastAPI's own errors);
- ``AlertUpdate``: ``POST /api/alerts/{id}``'s body, checked field by field; ``AlertList``:
  ``GET /api/alerts``'s answer (one alert's answer is its ``AlertDoc`` as stored).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import urlsplit

from traceladder.core.alerts import ALERT_STATUSES, AlertDoc
from traceladder.core.codec import Document, DocumentError, Part, doc_field


@dataclass(frozen=True, kw_only=True)
class TriggerConf(Part):
    """The trigger DAG run's conf: the ladder's name, the rungs (empty: all), the lens (``ladder``:
    the ladder's own), the repeats (None: the ladder's) and one ``SWITCH=VALUE`` override."""

    FILE: ClassVar[str] = "trigger conf"

    ladder: str = doc_field("str")
    rungs: list[str] = doc_field("list", default=[])
    lens: str = doc_field("str", default="ladder")
    repeats: int | None = doc_field("int?", default=None)
    override: str = doc_field("str", default="")


@dataclass(frozen=True, kw_only=True)
class TriggerResult(Document):
    """The run ``POST /trigger`` queued: Airflow's run id and state for it, and the conf it got."""

    FILE: ClassVar[str] = "trigger result"
    WRITES_SCHEMA: ClassVar[bool] = False
    UNVERSIONED: ClassVar[int | None] = 1

    dag_id: str = doc_field("str")
    dag_run_id: str | None = doc_field("str?")
    state: str | None = doc_field("str?")
    conf: TriggerConf = doc_field("object", part=TriggerConf)


@dataclass(frozen=True, kw_only=True)
class ErrorBody(Document):
    """An error's JSON answer: one line, credentials scrubbed (``data.scrub``)."""

    FILE: ClassVar[str] = "error"
    WRITES_SCHEMA: ClassVar[bool] = False
    UNVERSIONED: ClassVar[int | None] = 1

    detail: str = doc_field("str")


NOTE_MAX_CHARS = 2000
URL_MAX_CHARS = 2000


@dataclass(frozen=True, kw_only=True)
class AlertUpdate(Part):
    """``POST /api/alerts/{id}``'s body (and the alert page's form): a sheriff's change; a field
    left out (or None) is not changed. ``from_dict`` refuses a bad value with one line naming its
    field: a status outside ``ALERT_STATUSES``, an issue link that is not http(s), a note over
    ``NOTE_MAX_CHARS``, a field it does not know."""

    FILE: ClassVar[str] = "request"

    status: str | None = doc_field("str?", default=None, one_of=ALERT_STATUSES)
    issue_url: str | None = doc_field("str?", default=None)
    note: str | None = doc_field("str?", default=None)

    @classmethod
    def from_dict(cls, data: object, source: str | None = None) -> AlertUpdate:
        where = source or cls.FILE
        doc = super().from_dict(data, where)
        if doc.extra:
            raise DocumentError(f"{where}: {sorted(doc.extra)[0][:40]}: not a field (status, issue_url, note)")
        if doc.issue_url is not None:
            parsed = urlsplit(doc.issue_url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc or len(doc.issue_url) > URL_MAX_CHARS:
                raise DocumentError(f"{where}: issue_url: expected an http(s) URL of at most {URL_MAX_CHARS} chars")
        if doc.note is not None and len(doc.note) > NOTE_MAX_CHARS:
            raise DocumentError(f"{where}: note: {len(doc.note)} chars, at most {NOTE_MAX_CHARS}")
        return doc


@dataclass(frozen=True, kw_only=True)
class AlertList(Document):
    """``GET /api/alerts``'s answer: the alerts the caller may read, newest first, as stored."""

    FILE: ClassVar[str] = "alert list"
    WRITES_SCHEMA: ClassVar[bool] = False
    UNVERSIONED: ClassVar[int | None] = 1

    alerts: list[AlertDoc] = doc_field("list", default=[], part=AlertDoc)
