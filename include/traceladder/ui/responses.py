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

from traceladder.core.codec import Document, _f, _Part


@dataclass(frozen=True, kw_only=True)
class TriggerConf(_Part):
    """The trigger DAG run's conf: the ladder's name, the rungs (empty: all), the lens (``ladder``:
    the ladder's own), the repeats (None: the ladder's) and one ``SWITCH=VALUE`` override."""

    FILE: ClassVar[str] = "trigger conf"

    ladder: str = _f("str")
    rungs: list[str] = _f("list", default=[])
    lens: str = _f("str", default="ladder")
    repeats: int | None = _f("int?", default=None)
    override: str = _f("str", default="")


@dataclass(frozen=True, kw_only=True)
class TriggerResult(Document):
    """The run ``POST /trigger`` queued: Airflow's run id and state for it, and the conf it got."""

    FILE: ClassVar[str] = "trigger result"
    WRITES_SCHEMA: ClassVar[bool] = False
    UNVERSIONED: ClassVar[int | None] = 1

    dag_id: str = _f("str")
    dag_run_id: str | None = _f("str?")
    state: str | None = _f("str?")
    conf: TriggerConf = _f("object", part=TriggerConf)


@dataclass(frozen=True, kw_only=True)
class ErrorBody(Document):
    """An error's JSON answer: one line, credentials scrubbed (``data.scrub``)."""

    FILE: ClassVar[str] = "error"
    WRITES_SCHEMA: ClassVar[bool] = False
    UNVERSIONED: ClassVar[int | None] = 1

    detail: str = _f("str")
