"""The Ladders page's JSON answers, typed as the stage documents are (core/codec.py's ``Document``:
declared fields, ``to_dict``/``from_dict``/``to_json``), so the house has one way of typing a JSON
document. No schema key: these are answers, not stored files (their shape is the page's API).

- ``TriggerConf``: the ``traceladder-trigger`` run's conf that ``POST /trigger`` makes from the form
  (the DAG's Params: plan/trigger_form.py);
- ``TriggerResult``: ``POST /trigger``'s JSON answer (and the ``triggered.html`` page's data);
- ``ErrorBody``: every error's JSON answer (``{"detail": ...}``, as FastAPI's own errors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from traceladder.core.codec import Document, Part, doc_field


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
