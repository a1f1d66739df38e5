"""Task bodies of the triage DAG (workflows/triage.py): which suspects to triage and whether
another DAG run already does, the engine's call with the backend's runs (triage_backends.py), the
record whatever happened, and the message. Thin: the engine (triage/engine.py) does the work and stores every step
in triage.json, so a retried task resumes it."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypedDict

from traceladder.airflow.ladders import ladder_store
from traceladder.core import layout
from traceladder.core.documents import JSONObject, TriageDoc

if TYPE_CHECKING:  # the triage engine imports the statistics (numpy, scipy): never at DAG parse
    from traceladder.config.loader import LoadedLadder
    from traceladder.storage.artifacts import ArtifactSink
    from traceladder.triage.suspects import Suspects

TRIAGE_DAG_ID = "traceladder-triage"
CLAIM_OBJECT = "claim.json"
LIVE_STATES = ("queued", "running")


class TriageParams(TypedDict, total=False):
    """The triage DAG's Params (workflows/triage.py)."""

    ladder: str
    bad_run: str
    rung: str | None
    good_run: str | None
    force: bool  # start again a finished, refused or failed triage (the confirm task reopens it)


def triage_run_id(ladder: str, run_id: str) -> str:
    """The triage DAG run a ladder run starts: one per ladder run, so a second trigger is a no-op."""
    return f"triage__{ladder}__{layout.safe_key_part(run_id)}"


def _claim_key(prefix: str, ladder: str, run_id: str) -> str:
    """``<run>/triage/claim.json``: which triage DAG run works on this ladder run's group."""
    return layout.join(layout.run_prefix(prefix, ladder, run_id), layout.TRIAGE_FOLDER, CLAIM_OBJECT)


def claim(params: TriageParams, dag_run_id: str, is_live: Callable[[str], bool]) -> JSONObject:
    """Whether this DAG run triages the group: not when every rung's triage.json is finished
    (`done`, `not approved`), nor while another live DAG run holds the claim. Otherwise it takes
    the claim (a failed earlier run's unfinished triage is resumed) and names the rungs. With
    `force`, a finished or refused triage is claimed too: the confirm task reopens it."""
    from traceladder.triage import record
    from traceladder.triage.from_ladder import selected_suspects

    ladder, run_id = params["ladder"], params["bad_run"]
    loaded, store = ladder_store(ladder)
    rungs = [s.rung for s, _, _ in selected_suspects(loaded, store, run_id, params.get("rung"), params.get("good_run"))]
    prefix = loaded.cluster.storage.prefix
    out: JSONObject = {
        "ladder": ladder,
        "bad_run": run_id,
        "rungs": list(rungs),
        "approve": loaded.ladder.triage.approve,
    }
    states = {}
    for rung in rungs:
        doc = record.load(store, record.keys(prefix, ladder, run_id, rung)[0])
        states[rung] = doc.state if doc else None
    if all(s in ("done", "not approved") for s in states.values()) and not params.get("force"):
        finished = ", ".join(f"{r}: {s}" for r, s in states.items())
        return {**out, "start": False, "reason": f"already triaged ({finished}): nothing started"}
    key = _claim_key(prefix, ladder, run_id)
    if store.exists(key):
        holder = str(json.loads(store.get_bytes(key)).get("dag_run_id") or "")
        if holder and holder != dag_run_id and is_live(holder):
            return {**out, "start": False, "reason": f"being triaged by DAG run {holder}: nothing started"}
    body = {"dag_run_id": dag_run_id, "rungs": rungs, "at": record.now()}
    store.put_bytes(key, json.dumps(body).encode(), "application/json")
    return {**out, "start": True, "reason": f"triaging {', '.join(rungs)}"}


def triage_suspects(
    loaded: LoadedLadder, store: ArtifactSink, run_id: str, suspects: Suspects, context: Any, approved: bool
) -> list[TriageDoc]:
    """The engine on a suspect group (confirm, bisect, explain; recorded confirms reused)."""
    from traceladder.triage.engine import triage_run
    from traceladder.workflows.triage_backends import engine_context

    return triage_run(engine_context(loaded, store, run_id, suspects, context, approved, TRIAGE_DAG_ID), suspects)


def _claimed(params: TriageParams) -> tuple[LoadedLadder, ArtifactSink, str, Suspects]:
    from traceladder.triage.from_ladder import selected_suspects

    ladder, run_id = params["ladder"], params["bad_run"]
    loaded, store = ladder_store(ladder)
    return loaded, store, run_id, selected_suspects(loaded, store, run_id, params.get("rung"), params.get("good_run"))


def run_confirms(params: TriageParams, context: Any) -> list[JSONObject]:
    """Each suspect's confirm, before any approval (a confirm is one step, so it is not gated);
    a retry reuses the recorded ones. Each rung's state, label and its confirm in words: a
    confirmed rung is still `running`, waiting for the bisection."""
    from traceladder.triage.engine import confirm_suspects
    from traceladder.workflows.triage_backends import engine_context

    loaded, store, run_id, suspects = _claimed(params)
    force = bool(params.get("force"))  # reopened here, once: the triage task after it resumes
    ctx = engine_context(loaded, store, run_id, suspects, context, False, TRIAGE_DAG_ID, force=force)
    return [_brief(doc) for doc in confirm_suspects(ctx, suspects)]


def run_triage(params: TriageParams, context: Any, approved: bool) -> list[JSONObject]:
    """The engine on the claimed group (bisect, explain, record each step); a retry resumes it
    from triage.json, and the confirms of the `confirm` task are reused. Returns each rung's
    state and label."""
    loaded, store, run_id, suspects = _claimed(params)
    return [_brief(doc) for doc in triage_suspects(loaded, store, run_id, suspects, context, approved)]


def _brief(doc: TriageDoc) -> JSONObject:
    from traceladder.triage import record

    return {
        "rung": doc.rung,
        "state": doc.state,
        "label": doc.label,
        "first_bad": doc.first_bad,
        "confirm": f"{doc.rung}: {record.confirm_summary(doc)}",
    }


def record_outcome(
    params: TriageParams, rungs: Sequence[str], approval: str | None, triage_state: str | None
) -> list[JSONObject]:
    """triage.json whatever happened: a refused approval (Reject, or its timeout's default) ends
    each unfinished rung `not approved`; a triage task that failed leaves its steps and ends it
    `failed` with the task's state. A finished triage is left as it is."""
    from traceladder.triage import record
    from traceladder.triage.from_ladder import selected_suspects

    ladder, run_id = params["ladder"], params["bad_run"]
    loaded, store = ladder_store(ladder)
    prefix = loaded.cluster.storage.prefix
    pending = {
        s.rung: (s, g, b)
        for s, g, b in selected_suspects(loaded, store, run_id, params.get("rung"), params.get("good_run"))
    }
    out = []
    for rung in rungs:
        key, report_key = record.keys(prefix, ladder, run_id, rung)
        doc = record.load(store, key)
        if doc is None or doc.state == "running":
            suspect = pending[rung][0]
            base = doc or TriageDoc(
                ladder=ladder, run_id=run_id, rung=rung, state="running", suspect=suspect, group=list(rungs)
            )
            reproduce = record.reproduce_commands(base)  # the steps it recorded: the confirm's, if any
            if approval == "Reject":
                doc = replace(
                    base,
                    state="not approved",
                    label=record.NOT_APPROVED,
                    reproduce=reproduce,
                    conclusion="the bisection was not approved (rejected, or its approval timed out); "
                    + record.confirm_summary(base),
                )
            else:
                doc = replace(
                    base,
                    state="failed",
                    reproduce=reproduce,
                    error=f"the triage task ended {triage_state or 'without running'}",
                )
            doc = record.save(store, key, doc)
            record.save_report(store, report_key, doc)
        out.append({**_brief(doc), "key": key, "report": report_key})
    return out


def notify_outcome(params: TriageParams, rungs: Sequence[str]) -> int:
    """One message per finished triage (notifications/triage.py); returns how many were sent."""
    from traceladder.airflow.notifications.triage import TriageNotifier
    from traceladder.triage import record

    ladder, run_id = params["ladder"], params["bad_run"]
    loaded, store = ladder_store(ladder)
    sent = 0
    for rung in rungs:
        key, report_key = record.keys(loaded.cluster.storage.prefix, ladder, run_id, rung)
        doc = record.load(store, key)
        if doc is None or doc.state == "running":
            continue
        TriageNotifier(doc, report_key)({})
        sent += 1
    return sent


def weekly_triage_conf(ladder: str, summary_ref: JSONObject | None, published: JSONObject | None) -> JSONObject | None:
    """The triage DAG's conf after a published ladder run with suspects; None (the trigger is
    skipped) when it has none or nothing was published."""
    from traceladder.core.documents import SummaryRef

    if not summary_ref or not published:
        return None
    ref = SummaryRef.from_dict(summary_ref)
    if not ref.suspects:
        return None
    return {
        "ladder": ladder,
        "bad_run": ref.run_id,
        "rung": None,
        "good_run": None,
        "suspects": [str(s.get("rung")) for s in ref.suspects],
        "trigger_run_id": triage_run_id(ladder, ref.run_id),
    }
