"""The alerts pages of the Ladders page (issue 59): the deployment's alerts (triage/alerts.py),
read and changed through the page.

Routes (relative to the mount):

``GET  /alerts[?status=S]``       the alerts the caller may read, newest first
``GET  /alerts/{id}``             one alert: size, members, the bisection chart, history, the form
``POST /alerts/{id}``             the form: status, issue link, note; 303 back to the alert
``GET  /api/alerts[?status=S]``   the list as JSON (``AlertList``)
``GET  /api/alerts/{id}``         one alert as stored (``AlertDoc``)
``POST /api/alerts/{id}``         a JSON ``AlertUpdate``; answers the alert as stored after

Read: an alert is shown only to a user who may read the runs of every ladder it covers (its
members' and its triage's ladders; ui/access.py), else it is hidden (403 by its URL). Change: a
user who may edit (PUT) the DAG runs of every one of those ladders. A POST authenticated by the
session cookie must carry the page's CSRF value (the form's ``csrf`` field, or the
``X-CSRF-Token`` header for JSON); a bearer token needs none (ui/web.py `check_csrf`). Each change
is made by `set_fields` with the Airflow user's name, so the alert's history says who made it.

The store: the clusters file's ``alerts:`` (bucket, prefix) through an S3 client made from its
``conn_id`` as the ladder pages make theirs (ui/data.py, with its short timeouts); an S3 failure is
one line on the page."""

from __future__ import annotations

import re
import threading
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from markupsafe import Markup

from traceladder.core.errors import TraceladderError
from traceladder.core.alerts import ALERT_STATUSES, AlertDoc
from traceladder.core.codec import DocumentError, JSONObject
from traceladder.core.documents import TriageDoc
from traceladder.storage.artifacts import ArtifactKeyError, ArtifactStoreError
from traceladder.triage.alerts import AlertStore, AlertStoreError, all_alerts, set_fields, store_for
from traceladder.ui import access, data
from traceladder.ui.alert_chart import bisection_svg
from traceladder.ui.responses import AlertList, AlertUpdate
from traceladder.ui.views import AlertLink, AlertRow, AlertView, MemberLink, StepRow, TriageRow
from traceladder.ui.web import artifact_href, base, check_csrf, page_csrf, render, wants_html

ALERT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
BODY_MAX_BYTES = 16 * 1024
# The index's count and the run page's links may be a few seconds late; the alert pages read afresh.
RECENT = data._TtlCache(data.LISTING_TTL_S)


class AlertsUnavailable(TraceladderError):
    """The alert store cannot be reached or read: one line, credentials scrubbed."""


# ---- the store ---------------------------------------------------------------------------------
class _SettingsCache:
    """The clusters file's ``alerts:``, parsed again only when the file changes."""

    def __init__(self) -> None:
        self._value: tuple[Any, Any] | None = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        from traceladder.config import LadderConfigError, load_clusters
        from traceladder.config.loader import clusters_file

        sig = data._stat_sig(clusters_file())
        with self._lock:
            hit = self._value
        if hit is not None and hit[0] == sig and data.CACHE_ENABLED:
            return hit[1]
        try:
            settings = load_clusters().alerts
        except LadderConfigError as exc:
            raise AlertsUnavailable(f"the clusters file does not load: {data.scrub(exc)}") from None
        with self._lock:
            self._value = (sig, settings)
        return settings


SETTINGS = _SettingsCache()


def alert_store() -> AlertStore:
    settings = SETTINGS.get()
    try:
        client = data.CLIENTS.get(settings.conn_id)
    except ArtifactStoreError as exc:
        raise AlertsUnavailable(data.scrub(exc)) from None
    return store_for(settings, client)


def _every_alert(store: AlertStore) -> list[AlertDoc]:
    try:
        found = all_alerts(store)
    except AlertStoreError as exc:
        raise AlertsUnavailable(data.scrub(exc)) from None
    RECENT.put((store.bucket, store.prefix), found)
    return found


def recent_alerts() -> list[AlertDoc]:
    """Every alert, as read at most LISTING_TTL_S ago."""
    store = alert_store()
    cached = RECENT.get((store.bucket, store.prefix))
    return list(cached) if cached is not None else _every_alert(store)


def _read(store: AlertStore, alert_id: str) -> AlertDoc:
    if not ALERT_ID.fullmatch(alert_id):
        raise HTTPException(400, f"invalid alert id {alert_id[:80]!r}")
    try:
        got = store.read(alert_id)
    except AlertStoreError as exc:
        raise AlertsUnavailable(data.scrub(exc)) from None
    if got is None:
        raise HTTPException(404, f"no alert {alert_id}")
    return got[0]


# ---- who may see and change an alert -------------------------------------------------------------
def covered_ladders(alert: AlertDoc) -> list[str]:
    """Every ladder the alert covers: its members' and its triage's."""
    return list(dict.fromkeys([*alert.ladders, *([alert.triage.ladder] if alert.triage else [])]))


def readable_alerts(alerts: list[AlertDoc], user: Any) -> list[AlertDoc]:
    """The alerts whose every ladder the user may read (one auth question per ladder)."""
    allowed = access.ladders_allowed([n for a in alerts for n in covered_ladders(a)], user, "GET")
    return [a for a in alerts if all(allowed[n] for n in covered_ladders(a))]


def _readable_or_403(alert: AlertDoc, user: Any) -> AlertDoc:
    if not readable_alerts([alert], user):
        raise HTTPException(403, f"you may not read alert {alert.id}: it covers a ladder you may not read")
    return alert


def can_edit(alert: AlertDoc, user: Any) -> bool:
    allowed = access.ladders_allowed(covered_ladders(alert), user, "PUT")
    return all(allowed.values())


def _status_filter(status: str) -> str:
    if status and status not in ALERT_STATUSES:
        raise HTTPException(422, f"status: {status[:40]!r} is not one of {', '.join(ALERT_STATUSES)}")
    return status


# ---- what the pages show -------------------------------------------------------------------------
def alert_href(prefix: str, alert_id: str) -> str:
    return f"{prefix}/alerts/{quote(alert_id, safe='')}"


def alert_row(alert: AlertDoc, prefix: str) -> AlertRow:
    culprits = alert.triage.culprits if alert.triage else []
    return AlertRow(
        id=alert.id,
        href=alert_href(prefix, alert.id),
        title=alert.title,
        status=alert.status,
        kind=alert.kind,
        ladders=alert.ladders,
        rungs=alert.rungs,
        size=alert.size_text(),
        culprits=[f"{c.name} ({c.share_text()})" for c in culprits],
        created_at=alert.created_at,
        recovered_at=alert.recovered_at,
        merged_into=alert.merged_into,
    )


def _files_by_name() -> dict[str, data.LadderEntry]:
    return {e.name: e for e in data.list_ladders() if e.name}


def _run_href(prefix: str, entry: data.LadderEntry | None, run_id: str) -> str | None:
    if entry is None:
        return None
    # the run page's route (ui/app.py), not a storage key
    return "/".join((prefix, "ladders", quote(entry.file, safe=""), "runs", quote(run_id, safe="")))


def candidate_names(doc: TriageDoc) -> list[str]:
    """The bisection's candidates in order, by their `name` (a stored dict or a typed candidate)."""
    names = []
    for candidate in doc.candidates:
        item: object = candidate  # a dict as stored at schema 1; a typed candidate later
        name = item.get("name") if isinstance(item, dict) else getattr(item, "name", None)
        if isinstance(name, str):
            names.append(name)
    return names


def _effect(delta: float | None, interval: list[float] | None) -> str:
    if delta is None:
        return "-"
    return f"{delta:+.1f}%" + (f" [{interval[0]:+.1f}%, {interval[1]:+.1f}%]" if interval else "")


def _triage_doc(alert: AlertDoc, entries: dict[str, data.LadderEntry]) -> tuple[TriageDoc, data.LadderStore]:
    """The alert's triage.json, read from its ladder's store (the key confined to that ladder's
    prefix); ValueError with one line when it cannot be."""
    assert alert.triage is not None
    entry = entries.get(alert.triage.ladder)
    if entry is None:
        raise ValueError(f"no ladder file names ladder {alert.triage.ladder}")
    where = f"triage.json of {alert.triage.ladder} run {alert.triage.run_id} rung {alert.triage.rung}"
    try:
        store = data.LadderStore(entry)  # a ladder file that does not load has no store
        key = alert.triage.key
        rel = key[len(store.base) + 1 :] if key.startswith(store.base + "/") else key
        stored = store.get_json(rel)
    except (ArtifactStoreError, ArtifactKeyError) as exc:
        raise ValueError(f"{where}: {data.scrub(exc)}") from None
    try:
        return TriageDoc.from_dict(stored, where), store
    except DocumentError as exc:
        raise ValueError(data.scrub(exc)) from None


def alert_view(alert: AlertDoc, prefix: str, user: Any, csrf: str) -> AlertView:
    entries = _files_by_name()
    members = [
        MemberLink(
            ladder=m.ladder,
            rung=m.rung,
            run_id=m.run_id,
            role=m.role,
            direction=m.direction,
            delta_pct=m.delta_pct,
            href=_run_href(prefix, entries.get(m.ladder), m.run_id),
        )
        for m in alert.members
    ]
    editable = can_edit(alert, user)
    view = AlertView(
        alert=alert,
        size=alert.size_text(),
        members=members,
        statuses=ALERT_STATUSES,
        can_edit=editable,
        csrf=csrf if editable else "",
    )
    if alert.triage is not None and alert.triage.repro:
        view.repro = [alert.triage.repro]
    if alert.triage is None or not alert.triage.key:
        return view
    try:
        doc, store = _triage_doc(alert, entries)
    except ValueError as exc:
        view.triage_error = str(exc)
        return view
    metric = {"cpu": "CPU time", "wall": "wall time"}.get(alert.triage.metric or "", "step time")
    view.chart = Markup(bisection_svg(candidate_names(doc), doc.steps, doc.culprits, metric))  # noqa: S704 - escaped
    view.steps = [
        StepRow(s.kind, s.rung, s.good, s.candidate, s.verdict, _effect(s.delta_pct, s.interval_pct)) for s in doc.steps
    ]
    view.sentence = doc.explanation.sentence if doc.explanation else None
    if not view.repro:
        view.repro = [f"{side}: {cmd}" for side, cmd in doc.reproduce.items() if isinstance(cmd, str)]
    from traceladder.core import layout

    folder = alert.triage.key.rsplit("/", 1)[0]
    if folder.startswith(store.base + "/"):
        view.report = artifact_href(prefix, store.entry.file, f"{folder[len(store.base) + 1 :]}/{layout.REPORT_HTML}")
    return view


def with_alert_links(
    rows: list[TriageRow], entry: data.LadderEntry, run_id: str, prefix: str, user: Any
) -> tuple[list[TriageRow], str | None]:
    """The run page's triage rows with the alerts whose members are this ladder's run and rung;
    and why the alerts could not be read (the rows stay as they were)."""
    if not rows or not entry.name:
        return rows, None
    try:
        alerts = readable_alerts(recent_alerts(), user)
    except AlertsUnavailable as exc:
        return rows, f"alerts could not be read: {exc}"
    out = []
    for row in rows:
        links = tuple(
            AlertLink(
                a.id, a.status if a.merged_into is None else f"merged into {a.merged_into}", alert_href(prefix, a.id)
            )
            for a in alerts
            if any((m.ladder, m.run_id, m.rung) == (entry.name, run_id, row.rung) for m in a.members)
        )
        out.append(replace(row, alerts=links) if links else row)
    return out, None


def untriaged_count(user: Any) -> tuple[int | None, str | None]:
    """The index's `Alerts: N untriaged` (the count, or why there is none)."""
    try:
        alerts = readable_alerts(recent_alerts(), user)
    except AlertsUnavailable as exc:
        return None, str(exc)
    return sum(1 for a in alerts if a.status == "untriaged" and a.merged_into is None), None


# ---- the routes ----------------------------------------------------------------------------------
async def _body(request: Request, as_json: bool) -> JSONObject:
    import json
    from urllib.parse import parse_qs

    raw = await request.body()
    if len(raw) > BODY_MAX_BYTES:
        raise HTTPException(413, "request too large")
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if as_json:
        if ctype != "application/json":
            raise HTTPException(415, f"send application/json, not {ctype[:60]!r}")
        try:
            doc = json.loads(raw or b"{}")
        except ValueError:
            raise HTTPException(400, "body is not valid JSON") from None
        if not isinstance(doc, dict):
            raise HTTPException(422, "request: (top level): expected a JSON object")
        return doc
    if ctype not in ("application/x-www-form-urlencoded", ""):
        raise HTTPException(415, f"unsupported content type {ctype[:60]!r}")
    parsed = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[-1] for k, v in parsed.items()}


def _update(fields: JSONObject) -> AlertUpdate:
    try:
        return AlertUpdate.from_dict(fields)
    except DocumentError as exc:
        raise HTTPException(422, data.scrub(exc)) from None


def _change(alert_id: str, user: Any, update: AlertUpdate | JSONObject) -> AlertDoc:
    """Check the caller may change the alert, then `set_fields` as the caller (the body is checked
    after the permission: who may not change it learns nothing from its errors)."""
    store = alert_store()
    alert = _readable_or_403(_read(store, alert_id), user)
    if not can_edit(alert, user):
        raise HTTPException(
            403, f"you may not change alert {alert.id}: it needs edit access to the runs of every ladder it covers"
        )
    checked = update if isinstance(update, AlertUpdate) else _update(update)
    try:
        return set_fields(
            store,
            alert.id,
            user.get_name(),
            status=checked.status,
            issue_url=checked.issue_url,
            note=checked.note,
        )
    except AlertStoreError as exc:
        raise AlertsUnavailable(data.scrub(exc)) from None


def add_routes(app: FastAPI, can_read_runs: Any) -> None:
    """The alerts' routes on the Ladders app (every one behind the app's login and `can_read_runs`)."""

    @app.exception_handler(AlertsUnavailable)
    async def _unavailable(request: Request, exc: AlertsUnavailable) -> Response:
        line = f"the alerts could not be read: {exc}"
        if wants_html(request):
            return render("alerts.html", 503, base=base(request), user="", rows=[], status="", error=line)
        return JSONResponse({"detail": line}, status_code=503)

    @app.get("/alerts", response_class=HTMLResponse, dependencies=[can_read_runs])
    def alerts_page(request: Request, user: GetUserDep, status: str = "") -> HTMLResponse:
        prefix = base(request)
        status = _status_filter(status)
        alerts = readable_alerts(_every_alert(alert_store()), user)
        rows = [alert_row(a, prefix) for a in alerts if not status or a.status == status]
        return render(
            "alerts.html", base=prefix, user=user.get_name(), rows=rows, status=status, statuses=ALERT_STATUSES
        )

    @app.get("/alerts/{alert_id}", response_class=HTMLResponse, dependencies=[can_read_runs])
    def alert_page(alert_id: str, request: Request, user: GetUserDep) -> HTMLResponse:
        alert = _readable_or_403(_read(alert_store(), alert_id), user)
        view = alert_view(alert, base(request), user, page_csrf(request))
        return render("alert.html", base=base(request), user=user.get_name(), view=view)

    @app.post("/alerts/{alert_id}", dependencies=[can_read_runs])
    async def alert_form(alert_id: str, request: Request, user: GetUserDep) -> Response:
        import anyio

        form = await _body(request, as_json=False)
        check_csrf(request, str(form.pop("csrf", "") or ""))
        # a field the form left empty is not changed
        fields: JSONObject = {k: v for k, v in form.items() if v not in ("", None)}
        await anyio.to_thread.run_sync(lambda: _change(alert_id, user, fields))
        return RedirectResponse(alert_href(base(request), alert_id), status_code=303)

    @app.get("/api/alerts", dependencies=[can_read_runs])
    def alerts_json(user: GetUserDep, status: str = "") -> JSONResponse:
        status = _status_filter(status)
        alerts = readable_alerts(_every_alert(alert_store()), user)
        answer = AlertList(alerts=[a for a in alerts if not status or a.status == status])
        return JSONResponse(answer.to_dict())

    @app.get("/api/alerts/{alert_id}", dependencies=[can_read_runs])
    def alert_json(alert_id: str, user: GetUserDep) -> JSONResponse:
        return JSONResponse(_readable_or_403(_read(alert_store(), alert_id), user).to_dict())

    @app.post("/api/alerts/{alert_id}", dependencies=[can_read_runs])
    async def alert_change(alert_id: str, request: Request, user: GetUserDep) -> JSONResponse:
        import anyio

        check_csrf(request, request.headers.get("x-csrf-token", ""))
        fields = await _body(request, as_json=True)
        changed = await anyio.to_thread.run_sync(lambda: _change(alert_id, user, fields))
        return JSONResponse(changed.to_dict())
