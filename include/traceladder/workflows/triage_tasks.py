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
    from traceladder.core.alerts import AlertDoc
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
    found_suspects = selected_suspects(loaded, store, run_id, params.get("rung"), params.get("good_run"))
    rungs = [s.rung for s, _, _ in found_suspects]
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
    alert, owns = _assign_alert(loaded, store, found_suspects, dag_run_id, bool(params.get("force")))
    out["alert"] = alert.id
    if not owns:
        return {**out, "start": False, "reason": f"covered by alert {alert.id} ({alert.status}): nothing started"}
    key = _claim_key(prefix, ladder, run_id)
    if store.exists(key):
        holder = str(json.loads(store.get_bytes(key)).get("dag_run_id") or "")
        if holder and holder != dag_run_id and is_live(holder):
            return {**out, "start": False, "reason": f"being triaged by DAG run {holder}: nothing started"}
    body = {"dag_run_id": dag_run_id, "rungs": rungs, "at": record.now()}
    store.put_bytes(key, json.dumps(body).encode(), "application/json")
    return {**out, "start": True, "reason": f"triaging {', '.join(rungs)}"}


def _assign_alert(
    loaded: LoadedLadder, store: ArtifactSink, found: Suspects, dag_run_id: str, force: bool
) -> tuple[AlertDoc, bool]:
    """The group's alert (triage/alerts.py `assign`): a covering alert of its cause, linked, or a
    new one this DAG run owns."""
    from traceladder.airflow.ladders import alert_store
    from traceladder.triage import alerts, record

    storage, ladder = loaded.cluster.storage, loaded.ladder.ladder
    _, alert_store_ = alert_store()
    group = [
        (s, alerts.member_of(s, ladder, storage.effective_bucket, storage.prefix, "triaged", loaded.ladder.metric))
        for s, _, _ in found
    ]

    def triage_key(rung: str) -> str:
        return record.keys(storage.prefix, ladder, group[0][0].run_id, rung)[0]

    return alerts.assign(alert_store_, group, triage_key, dag_run_id, force)


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


def bisection_estimate(params: TriageParams, confirmed: Sequence[JSONObject]) -> str:
    """The approval's estimate of what the bisection and the explanation will spend: about
    log2(candidates) search steps, one pair step per culprit and one step per other confirmed
    rung, each as many A/B blocks as the suspect's own confirm took, at its mean run time, times
    the run's devices, plus the explanation's two profiled runs; capped by the triage's budget."""
    import math

    from traceladder.triage import record
    from traceladder.triage.bisect import build_candidates
    from traceladder.triage.from_ladder import catalog, selected_suspects

    loaded, store = ladder_store(params["ladder"])
    prefix, ladder, t = loaded.cluster.storage.prefix, loaded.ladder.ladder, loaded.ladder.triage
    running = [str(r["rung"]) for r in confirmed if r.get("state") == "running"]
    steps = [
        step
        for rung in running
        for doc in [record.load(store, record.keys(prefix, ladder, params["bad_run"], rung)[0])]
        if doc is not None
        for step in [record.confirm_step(doc)]
        if step is not None and step.runs
    ]
    if not steps:
        return "an unknown number of device-hours (no confirm recorded its runs)"
    run_s = sum(s.run_s for s in steps) / sum(s.runs for s in steps)
    blocks = max(3, min(t.budget_blocks, max(s.blocks for s in steps)))
    found = selected_suspects(loaded, store, params["bad_run"], params.get("rung"), params.get("good_run"))
    _, good, bad = found[0]
    builds = catalog(loaded)
    if t.candidates:
        count, source = len(t.candidates), "triage.candidates"
    elif good.build and bad.build and good.build != bad.build and builds:
        count, source = len(build_candidates(list(builds.values()), good.build, bad.build)), "the build catalog"
    else:
        count, source = 8, "assumed: the registry is asked when the search starts"
    search = math.ceil(math.log2(max(count, 2))) + 1 + max(len(running) - 1, 0)
    runs = search * 2 * blocks + 2
    devices = loaded.ladder.nnodes * (loaded.cluster.gpus_per_node or 1)
    hours = runs * run_s * devices / 3600
    capped = ([f"{t.budget_runs} runs"] if t.budget_runs else []) + (
        [f"{t.budget_device_hours:g} device-hours"] if t.budget_device_hours else []
    )
    return (
        f"about {hours:.2f} device-hours ({search} steps of {blocks} A/B blocks over {count} candidates "
        f"({source}) and 2 profiled runs: {runs} runs of ~{run_s:.0f} s on {devices} device(s))"
        + (f", at most its budget of {' and '.join(capped)}" if capped else "")
    )


def record_outcome(
    params: TriageParams,
    rungs: Sequence[str],
    approval: str | None,
    triage_state: str | None,
    dag_run_id: str | None = None,
) -> list[JSONObject]:
    """triage.json whatever happened: a refused approval (Reject, or its timeout's default) ends
    each unfinished rung `not approved`; a triage task that failed leaves its steps and ends it
    `failed` with the task's state. A finished triage is left as it is. `dag_run_id`: this triage
    DAG run, recorded in each unfinished rung's triage.json."""
    from traceladder.triage import record
    from traceladder.triage.from_ladder import basis, selected_suspects

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
            suspect, good, bad = pending[rung]
            judged = basis(loaded, dag_run_id)
            base = (
                record.resumed(doc, (good, bad), judged)
                if doc
                else record.started(ladder, run_id, suspect, rungs, (good, bad), judged)
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
    """The finished triage on its alert (triage/alerts.py `record_triage`), then one notice per
    alert (notifications/triage.py), once: a confirmed change always, `not reproduced` and
    `insufficient data` only when the ladder asks (`triage.notices: all`; else they are one line in
    the ladder's next weekly notice). Returns how many notices were sent."""
    from traceladder.airflow.ladders import alert_store
    from traceladder.airflow.notifications.triage import AlertNotifier, alert_url
    from traceladder.triage import alerts, record

    ladder, run_id = params["ladder"], params["bad_run"]
    loaded, store = ladder_store(ladder)
    docs = []
    for rung in rungs:
        key, report_key = record.keys(loaded.cluster.storage.prefix, ladder, run_id, rung)
        doc = record.load(store, key)
        if doc is not None and doc.state != "running":
            docs.append((doc, report_key))
    if not docs:
        return 0
    settings, alert_store_ = alert_store()
    owned = alerts.owned_by(alert_store_, ladder, run_id)
    if owned is None:  # a triage from before alerts, or its alert went away: nothing to attach to
        return 0
    main, report_key = next(((d, k) for d, k in docs if d.rung == (d.bisected_on or d.rung)), docs[0])
    for doc, report in docs:  # each rung's triage.json names its alert
        if doc.alert != owned.id:
            key = record.keys(loaded.cluster.storage.prefix, ladder, run_id, doc.rung)[0]
            record.save_report(store, report, record.save(store, key, replace(doc, alert=owned.id)))
    confirm = main.reproduce.get("confirm")
    alert = alerts.record_triage(
        alert_store_, owned.id, main, report_key, confirm if isinstance(confirm, str) else None
    )
    quiet = main.label in alerts.QUIET_LABELS and loaded.ladder.triage.notices != "all"
    if quiet or not alerts.mark_notice(alert_store_, alert.id, "alert"):
        return 0
    AlertNotifier(alert, main, alert_url(settings, alert.id))({})
    return 1


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


def review_alerts(loaded: LoadedLadder, store: ArtifactSink, run_id: str) -> list[str]:
    """After a ladder run is published: its ladder's alerts that recovered (N runs in a row back
    inside the good segment's bound, the clusters file's `alerts.recover_after`) get their one
    notice; the quiet triages' outcomes (`not reproduced`, `insufficient data`) not yet told come
    back as lines for the weekly notice, each once."""
    from traceladder.airflow.ladders import alert_store
    from traceladder.airflow.notifications.regression import DEFAULT_CONN_ID, post_webhook
    from traceladder.airflow.notifications.triage import alert_url, outcome_line, recovered_message
    from traceladder.stats.history import rung_histories
    from traceladder.summary.collect import list_entries
    from traceladder.triage import alerts

    ladder, storage = loaded.ladder.ladder, loaded.cluster.storage
    settings, alert_store_ = alert_store()
    mine = [
        a
        for a in alerts.all_alerts(alert_store_)
        if a.merged_into is None
        and any((m.ladder, m.bucket, m.prefix) == (ladder, storage.effective_bucket, storage.prefix) for m in a.members)
    ]
    lines = []
    for alert in mine:
        if alert.triage and alert.triage.label in alerts.QUIET_LABELS and loaded.ladder.triage.notices != "all":
            if alerts.mark_notice(alert_store_, alert.id, "outcome"):
                lines.append(outcome_line(alert, alert_url(settings, alert.id)))
    live = [a for a in mine if alert_recoverable(a)]
    if not live:
        return lines
    entries = [e for e in list_entries(store, layout.join(storage.prefix, ladder)) if not e.is_what_if and e.points]
    histories = rung_histories(entries) if entries else {}
    for alert in live:
        for member in (m for m in alert.members if m.ladder == ladder):
            h = histories.get(member.rung)
            back = h and alerts.recovered_run(h.run_ids, [e.mean for e in h.judged], member, settings.recover_after)
            if not back:
                continue
            marked = alerts.mark_recovered(alert_store_, alert.id, back, settings.recover_after)
            if marked is not None and alerts.mark_notice(alert_store_, alert.id, "recovered"):
                url = alert_url(settings, alert.id)
                post_webhook(
                    recovered_message(marked, settings.recover_after, url), DEFAULT_CONN_ID, "recovered notice"
                )
            break
    return lines


def alert_recoverable(alert: AlertDoc) -> bool:
    """An alert the numbers can still bring back: not recovered yet, its change confirmed."""
    label = alert.triage.label if alert.triage else None
    return alert.recovered_at is None and label in ("confirmed regression", "confirmed improvement")
