"""The Ladders page: a FastAPI app that Airflow's api-server mounts at ``/traceladder``.

Routes (relative to the mount):

``GET  /``                                      every ladder file, its runs, its latest summary, a trigger form
``GET  /ladders/{file}``                        one ladder, the same
``GET  /ladders/{file}/runs/{run_id}``          one run: ladder table, lenses, findings, charts, artifacts
``GET  /ladders/{file}/compare?a=RUN&b=RUN``    two runs side by side, rung by rung
``GET  /ladders/{file}/artifacts/{key:path}``   an object under ``<prefix>/<ladder>/`` (streamed from S3)
``POST /trigger``                               trigger ``traceladder-trigger`` through Airflow's REST API
``/alerts``, ``/api/alerts``                    the deployment's alerts (ui/alerts.py)

Auth: every route needs an authenticated Airflow user (the app-wide dependency; no token is 401,
a bad token 403). Reading needs permission to read DAG runs, and each ladder is listed and
served only to users whom the auth manager lets read its own DAG's runs (``ui/access.py``: per
DAG, a direct URL for another ladder is 403); triggering needs permission to create runs of
``traceladder-trigger``; the trigger is then made by Airflow's own ``POST
/api/v2/dags/traceladder-trigger/dagRuns`` with the caller's token, so Airflow validates the
Params and checks the permission again. A form POST authenticated by the session cookie must
carry the page's CSRF field (an HMAC of the caller's token with the api secret key).

Types: the JSON answers (the trigger's, an error's) are documents of the house's codec
(ui/responses.py); what the templates show is ui/views.py's classes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import mimetypes
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag, requires_authenticated
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from traceladder.core import layout
from traceladder.core.codec import JSONObject, JSONValue
from traceladder.storage.artifacts import ArtifactKeyError, ArtifactNotFoundError, ArtifactStoreError
from traceladder.ui import TRIGGER_DAG_ID, access, alerts, data
from traceladder.ui.responses import ErrorBody, TriggerConf, TriggerResult
from traceladder.ui.views import ComparePage, LaddersPage, LadderView, RunView, TriageRow, page_templates
from traceladder.ui.web import STALE_FORM, artifact_href, csrf_token
from traceladder.ui.web import api_root as _api_root
from traceladder.ui.web import base as _base
from traceladder.ui.web import caller_token as _caller_token
from traceladder.ui.web import render as _render

if TYPE_CHECKING:
    from markupsafe import Markup

RUNS_SHOWN = 20
SELF_CALL_TIMEOUT_S = 30

_SANDBOX_CSP = "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"
_INLINE_TYPES = {
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".html": "text/html; charset=utf-8",
    ".json": "application/json",
    ".md": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".log": "text/plain; charset=utf-8",
    ".csv": "text/plain; charset=utf-8",
}


# What retention never changes (issue 30: summary/ with its charts, analysis/) is served as
# immutable when the link names the run's version (`?v=`, its index entry's ETag): a cleared and
# rerun summary rewrites the same keys, and its new entry gives its links a new URL. Without a
# version, and for what depends on the manifest (traces, logs, a run's files): ETag revalidation.
IMMUTABLE_FOLDERS = (layout.SUMMARY_FOLDER, layout.ANALYSIS_FOLDER)
IMMUTABLE_CACHE = "private, max-age=31536000, immutable"
REVALIDATE_CACHE = "private, no-cache"


def immutable_key(rel_key: str) -> bool:
    """A key under a run's summary/ or a rung's analysis/ (``<run>/summary/...``,
    ``<run>/<rung>/analysis/...``)."""
    parts = rel_key.split("/")
    return (len(parts) > 2 and parts[1] in IMMUTABLE_FOLDERS) or (len(parts) > 3 and parts[2] in IMMUTABLE_FOLDERS)


def _etag_matches(request: Request, etag: str) -> bool:
    sent = request.headers.get("if-none-match", "")
    return bool(etag) and any(t.strip().removeprefix("W/") in (etag, "*") for t in sent.split(","))


# ---- auth helpers ------------------------------------------------------------------------------
def _can_trigger(user: Any) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    try:
        return bool(
            get_auth_manager().is_authorized_dag(
                method="POST", access_entity=DagAccessEntity.RUN, details=DagDetails(id=TRIGGER_DAG_ID), user=user
            )
        )
    except Exception:  # noqa: BLE001 - an auth manager that cannot tell: no form
        return False


# ---- page data ---------------------------------------------------------------------------------
def _entry_or_404(file: str, user: Any) -> data.LadderEntry:
    """The ladder file, if the user may read its DAG (404 when there is no such file, else 403)."""
    entry = data.find_entry(file)
    if entry is None:
        raise HTTPException(404, f"no ladder file {file[:80]!r}")
    if not access.can_read(entry, user):
        raise HTTPException(
            403, f"you may not read ladder {entry.file}: no read access to DAG {access.ladder_dag_id(entry)}"
        )
    return entry


def _valid_key(check: Callable[[str], object], value: str, detail: str) -> None:
    """400 with ``detail`` where ``check`` (data.clean_run_id, data.relative_key) refuses the value."""
    try:
        check(value)
    except ArtifactKeyError:
        raise HTTPException(400, detail) from None


def _loaded(entry: data.LadderEntry, say_why: bool = True) -> None:
    """404 where the ladder file does not load (``say_why``: with its error)."""
    if entry.error:
        raise HTTPException(404, f"ladder file {entry.file} does not load" + (f": {entry.error}" if say_why else ""))


def _storage_status(entries: list[data.LadderEntry]) -> dict[tuple[str, str], str | None]:
    """One bucket check per (connection, bucket): None when it answers, else the one-line reason."""
    status: dict[tuple[str, str], str | None] = {}
    for entry in entries:
        key = entry.storage_key
        if key is None or key in status:
            continue
        try:
            data.LadderStore(entry).check()
            status[key] = None
        except ArtifactStoreError as exc:
            status[key] = data.scrub(exc)
    return status


def _removed_line(record: JSONObject) -> str:
    """A retention record (its rung manifest's ``removed`` entry) as the 410's one line."""
    when = str(record.get("removed_at", "?"))[:10]
    return f"removed by retention on {when} (policy {record.get('policy', '?')}, {record.get('bytes', '?')} bytes)"


def _run_view(store: data.LadderStore, run_id: str, with_files: bool, version: str = "", base: str = "") -> RunView:
    """A run's summary, its summary folder (charts first) and, on the run page, every artifact
    (from one listing of the run, which also gives the summary folder and each manifest's ETag)."""
    view = RunView(run_id=run_id, version=version)
    try:
        view.summary = store.summary(run_id, version)
    except ArtifactStoreError as exc:
        view.error = data.scrub(exc)
    except ArtifactKeyError as exc:
        view.error = data.scrub(exc)
    view.triages = _triages(store, run_id, view.summary, base)
    try:
        listed: list[tuple[str, str]] = []
        truncated = False
        if with_files:
            listed, truncated = store.run_listing(run_id)
        summary_folder = f"{run_id}/{layout.SUMMARY_FOLDER}/"
        if with_files and not truncated:
            files = [k for k, _ in listed if k.startswith(summary_folder)]
        else:
            files = store.summary_files(run_id, version)
        view.summary_files = files
        charts_folder = f"{summary_folder}{layout.CHARTS_FOLDER}/"
        view.charts = [k for k in files if k.startswith(charts_folder) and k.lower().endswith(".png")]
        if with_files:
            groups: dict[str, list[str]] = {}
            for key, _ in listed:
                rest = key[len(run_id) + 1 :]
                folder = rest.split("/", 1)[0] if "/" in rest else "(run)"
                groups.setdefault(folder, []).append(key)
            view.artifacts = groups
            view.artifact_links = {
                folder: [(artifact_href(base, store.entry.file, key, version), key[len(run_id) + 1 :]) for key in keys]
                for folder, keys in groups.items()
            }
            view.artifacts_truncated = truncated
            # what retention removed, from each rung's manifest (kept at its listed ETag): shown as
            # removed, not as missing
            etags = dict(listed)
            manifests = [
                (f"{run_id}/{folder}", etags[manifest])
                for folder, keys in groups.items()
                if (manifest := f"{run_id}/{folder}/{layout.MANIFEST_NAME}") in etags
                and _may_have_removals(folder, keys, f"{run_id}/{folder}/")
            ]
            view.removed = {
                rung.split("/", 1)[1]: sorted(removed.items())
                for rung, removed in store.removed_many(manifests).items()
                if removed
            }
    except ArtifactStoreError as exc:
        view.error = view.error or data.scrub(exc)
    return view


def _triages(store: data.LadderStore, run_id: str, summary: JSONObject | None, base: str) -> list[TriageRow]:
    """Each suspect rung's triage (its triage.json by its layout key): state, label, first bad,
    conclusion and a link to its report.html; `not started` while no triage.json is stored."""
    history = summary.get("history") if summary is not None else None
    suspects = history.get("suspects") if isinstance(history, dict) else None
    out: list[TriageRow] = []
    suspect_rows = suspects if isinstance(suspects, list) else []
    for rung in dict.fromkeys(str(s.get("rung")) for s in suspect_rows if isinstance(s, dict)):
        folder = f"{run_id}/{layout.TRIAGE_FOLDER}/{rung}"
        try:
            doc = store.get_json(f"{folder}/{layout.TRIAGE_OBJECT}")
        except (ArtifactStoreError, ArtifactKeyError):
            doc = None
        if isinstance(doc, dict):
            report = artifact_href(base, store.entry.file, f"{folder}/{layout.REPORT_HTML}")
            out.append(TriageRow.stored(rung, doc, report))
        else:
            out.append(TriageRow(rung))
    return out


def _may_have_removals(folder: str, keys: list[str], rung_prefix: str) -> bool:
    """Whether retention may have removed something from this rung folder, judged from its
    listing: retention removes only ``log.txt.gz`` and the whole of ``traces/`` (a rung has one
    lens, so one policy covers all its traces). A rung that still has its log and, unless its
    lens (``<rung>.<lens>.<r|l><n>``) is ``none``, a trace, has lost nothing, and its manifest
    need not be read: the run page of a run retention never touched reads no manifest. (A
    retention run killed between a rung's manifest and its deletes shows the objects still there
    as files until the next run finishes the job.)"""
    rels = [k[len(rung_prefix) :] for k in keys if k.startswith(rung_prefix)]
    if layout.LOG_OBJECT not in rels:
        return True
    parts = folder.split(".")
    lens = parts[-2] if len(parts) >= 3 else ""
    return lens != "none" and not any(r.startswith(layout.TRACES_FOLDER + "/") for r in rels)


LATEST_HTML = data._VersionedCache(500)


def _latest_html(view: RunView, base: str, entry: data.LadderEntry) -> Markup:
    """The ladder list's latest-run block (summary tables, charts, files), rendered once per run
    version: it is most of the list's rendering, and the same for every viewer."""
    from markupsafe import Markup

    key = (base, f"{entry.file}\0{view.run_id}")
    version = view.version if view.summary is not None and not view.error else ""
    cached = LATEST_HTML.get(key, version)
    if isinstance(cached, Markup):
        return cached
    rendered = page_templates().get_template("_latest.html").render(run=view, base=base, entry=entry)
    html = Markup(rendered)  # noqa: S704 - the output of an autoescaping template, not raw input
    LATEST_HTML.put(key, version, html)
    return html


def _ladder_view(entry: data.LadderEntry, s3_error: str | None, runs_shown: int | None, base: str = "") -> LadderView:
    view = LadderView(entry)
    if entry.error or s3_error:
        return view
    store = data.LadderStore(entry)
    try:
        runs = store.runs()
    except ArtifactStoreError as exc:
        view.error = data.scrub(exc)
        return view
    view.runs_total = len(runs)
    view.runs = runs if runs_shown is None else runs[:runs_shown]
    if runs:
        view.latest = _run_view(store, runs[0]["run_id"], with_files=False, version=runs[0]["version"])
        view.latest_html = _latest_html(view.latest, base, entry)
    return view


def _page_context(request: Request, user: Any, entries: list[data.LadderEntry], runs_shown: int | None) -> LaddersPage:
    status = _storage_status(entries)
    s3_errors = sorted({f"S3 is unreachable: {msg}" for msg in status.values() if msg})
    base = _base(request)
    ladders = [_ladder_view(e, status.get(e.storage_key) if e.storage_key else None, runs_shown, base) for e in entries]
    token, _ = _caller_token(request)
    can_trigger = _can_trigger(user)
    return LaddersPage(
        base=base,
        user=user.get_name(),
        ladders=ladders,
        s3_errors=s3_errors,
        can_trigger=can_trigger,
        csrf=csrf_token(token) if can_trigger and token else "",
        trigger_dag_id=TRIGGER_DAG_ID,
    )


# ---- trigger -----------------------------------------------------------------------------------
_LIST_SPLIT = re.compile(r"[\s,]+")


def _trigger_conf(form: JSONObject, entries: list[data.LadderEntry]) -> TriggerConf:
    """The DAG run's conf from the form; ``HTTPException(400)`` for what is plainly wrong (Airflow
    validates the Params again)."""
    from traceladder.config.models import LENS_NAMES

    names = {e.name: e for e in entries if e.name}
    ladder = str(form.get("ladder") or "")
    entry = names.get(ladder) or next((e for e in entries if e.file == ladder and e.name), None)
    if entry is None or not entry.name:
        raise HTTPException(400, f"unknown ladder {ladder[:80]!r}; known: {', '.join(sorted(names)) or '(none)'}")
    rungs_in = form.get("rungs") or []
    if isinstance(rungs_in, str):
        rungs_in = [rungs_in]
    if not isinstance(rungs_in, list):
        raise HTTPException(400, "rungs must be a list of rung names")
    rungs: list[str] = []
    for item in rungs_in:
        rungs += [r for r in _LIST_SPLIT.split(str(item)) if r]
    unknown = [r for r in rungs if r not in entry.rungs]
    if unknown:
        raise HTTPException(
            400, f"ladder {entry.name} has no rung(s) {', '.join(unknown)}; it has {', '.join(entry.rungs)}"
        )
    lens = str(form.get("lens") or "ladder")
    if lens not in ("ladder", *LENS_NAMES):
        raise HTTPException(400, f"unknown lens {lens[:40]!r}")
    if lens != "ladder" and lens not in entry.lenses:
        raise HTTPException(
            400, f"ladder {entry.name} runs on a backend without lens {lens!r}; it runs {', '.join(entry.lenses)}"
        )
    repeats_raw = form.get("repeats")
    repeats: int | None = None
    if repeats_raw not in (None, ""):
        try:
            repeats = int(str(repeats_raw))
        except ValueError:
            raise HTTPException(400, f"repeats must be a whole number, not {str(repeats_raw)[:20]!r}") from None
        from traceladder.plan.trigger_form import REPEATS_MAX, REPEATS_MIN  # the trigger DAG's block grid

        if not REPEATS_MIN <= repeats <= REPEATS_MAX:
            raise HTTPException(400, f"repeats must be between {REPEATS_MIN} and {REPEATS_MAX}")
    override = str(form.get("override") or "").strip()
    return TriggerConf(
        ladder=entry.name, rungs=list(dict.fromkeys(rungs)), lens=lens, repeats=repeats, override=override
    )


async def _read_form(request: Request) -> tuple[JSONObject, bool]:
    """The request's fields (JSON or urlencoded form) and whether it was JSON."""
    body = await request.body()
    if len(body) > 64 * 1024:
        raise HTTPException(413, "request too large")
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "application/json":
        try:
            doc = json.loads(body or b"{}")
        except ValueError:
            raise HTTPException(400, "body is not valid JSON") from None
        if not isinstance(doc, dict):
            raise HTTPException(400, "body must be a JSON object")
        return doc, True
    if ctype in ("application/x-www-form-urlencoded", ""):
        parsed = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        form: JSONObject = {k: ([*v] if k == "rungs" else v[-1]) for k, v in parsed.items()}
        return form, False
    raise HTTPException(415, f"unsupported content type {ctype[:60]!r}")


async def _post_dag_run(request: Request, token: str, conf: TriggerConf) -> tuple[int, JSONValue]:
    """``POST /api/v2/dags/traceladder-trigger/dagRuns`` on this same api-server, as the caller."""
    import httpx
    from airflow.configuration import conf as airflow_conf

    server = request.scope.get("server")
    path = f"{_api_root(request)}/api/v2/dags/{TRIGGER_DAG_ID}/dagRuns"
    if server and server[0]:
        host, port = server[0], server[1]
        if host in ("0.0.0.0", "::"):  # noqa: S104 - mapping a wildcard bind to a reachable address
            host = "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        # The socket this request came in on: TLS exactly when the api-server terminates TLS.
        scheme = "https" if airflow_conf.get("api", "ssl_cert", fallback="") else "http"
        url = f"{scheme}://{host}:{port}{path}"
        verify: Any = False if scheme == "https" else True  # our own socket; its name may not match the cert
    else:
        base = airflow_conf.get("api", "base_url", fallback="").rstrip("/")
        if not base:
            raise HTTPException(500, "cannot reach Airflow's REST API: no local socket and no [api] base_url")
        url = f"{base}/api/v2/dags/{TRIGGER_DAG_ID}/dagRuns"
        verify = True
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Accept": "application/json"}
    if request.headers.get("referer"):
        headers["Referer"] = request.headers["referer"]  # Airflow records a UI trigger as such
    body = {"logical_date": None, "conf": conf.to_dict(), "note": "triggered from the traceladder Ladders page"}
    try:
        async with httpx.AsyncClient(timeout=SELF_CALL_TIMEOUT_S, verify=verify) as client:
            resp = await client.post(url, json=body, headers=headers)
    except httpx.HTTPError as exc:
        raise HTTPException(502, f"Airflow's REST API did not answer: {type(exc).__name__}") from None
    try:
        payload: JSONValue = resp.json()
    except ValueError:
        payload = {"detail": resp.text[:300]}
    return resp.status_code, payload


def _detail(payload: JSONValue) -> str:
    if isinstance(payload, dict) and "detail" in payload:
        detail = payload["detail"]
        return detail if isinstance(detail, str) else json.dumps(detail)[:600]
    return json.dumps(payload)[:600]


# ---- the app -----------------------------------------------------------------------------------
def create_app() -> FastAPI:
    app = FastAPI(
        title="traceladder Ladders",
        dependencies=[Depends(requires_authenticated())],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    can_read_runs = Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.RUN))
    can_trigger = Depends(
        requires_access_dag(method="POST", access_entity=DagAccessEntity.RUN, param_dag_id=TRIGGER_DAG_ID)
    )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        detail = data.scrub(exc.detail)
        if "text/html" in request.headers.get("accept", ""):
            return _render(
                "error.html",
                exc.status_code,
                base=_base(request),
                api_root=_api_root(request),
                status=exc.status_code,
                detail=detail,
            )
        body = ErrorBody(detail=detail).to_dict()
        return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    alerts.add_routes(app, can_read_runs)

    @app.get("/", response_class=HTMLResponse, dependencies=[can_read_runs])
    def index(request: Request, user: GetUserDep) -> HTMLResponse:
        entries = access.readable(data.list_ladders(), user)
        untriaged, alerts_error = alerts.untriaged_count(user)
        return _render(
            "ladders.html",
            **_page_context(request, user, entries, RUNS_SHOWN),
            single=None,
            untriaged=untriaged,
            alerts_error=alerts_error,
        )

    @app.get("/ladders/{file}", response_class=HTMLResponse, dependencies=[can_read_runs])
    def ladder_page(file: str, request: Request, user: GetUserDep) -> HTMLResponse:
        entry = _entry_or_404(file, user)
        return _render("ladders.html", **_page_context(request, user, [entry], None), single=entry.file)

    @app.get("/ladders/{file}/runs/{run_id}", response_class=HTMLResponse, dependencies=[can_read_runs])
    def run_page(file: str, run_id: str, request: Request, user: GetUserDep) -> Response:
        entry = _entry_or_404(file, user)
        _valid_key(data.clean_run_id, run_id, "invalid run id")
        _loaded(entry)
        store = data.LadderStore(entry)
        try:
            store.check()
        except ArtifactStoreError as exc:
            return _render(
                "run.html",
                503,
                base=_base(request),
                user=user.get_name(),
                entry=entry,
                run=None,
                s3_error=f"S3 is unreachable: {data.scrub(exc)}",
            )
        try:  # the run's index entry version, so its checked summary can be kept (the listing is cached)
            version = next((r["version"] for r in store.runs() if r["run_id"] == run_id), "")
        except ArtifactStoreError:
            version = ""
        run = _run_view(store, run_id, with_files=True, version=version, base=_base(request))
        if run.summary is None and not run.summary_files and not run.artifacts:
            raise HTTPException(404, f"no run {run_id} of ladder {entry.file} in S3")
        run.triages, run.alerts_error = alerts.with_alert_links(run.triages, entry, run_id, _base(request), user)
        page = _render("run.html", base=_base(request), user=user.get_name(), entry=entry, run=run, s3_error=None)
        # The run's files change when retention removes traces: revalidate, 304 while unchanged.
        etag = '"' + hashlib.sha256(bytes(page.body)).hexdigest()[:32] + '"'
        headers = {"ETag": etag, "Cache-Control": REVALIDATE_CACHE}
        if _etag_matches(request, etag):
            return Response(status_code=304, headers=headers)
        page.headers.update(headers)
        return page

    @app.get("/ladders/{file}/compare", response_class=HTMLResponse, dependencies=[can_read_runs])
    def compare_page(file: str, request: Request, user: GetUserDep, a: str = "", b: str = "") -> HTMLResponse:
        from traceladder.ui.compare import compare_rows, provenance_diff

        entry = _entry_or_404(file, user)
        _loaded(entry)
        for run_id in (a, b):
            if run_id:
                _valid_key(data.clean_run_id, run_id, "invalid run id")
        store = data.LadderStore(entry)
        context = ComparePage(
            base=_base(request),
            user=user.get_name(),
            entry=entry,
            runs=[],
            a=a,
            b=b,
            rows=[],
            provenance=[],
            errors=[],
            s3_error=None,
        )
        try:
            context["runs"] = store.runs()
        except ArtifactStoreError as exc:
            context["s3_error"] = f"S3 is unreachable: {data.scrub(exc)}"
            return _render("compare.html", 503, **context)
        ids = [r["run_id"] for r in context["runs"]]
        a = context["a"] = a or (ids[1] if len(ids) > 1 else ids[0] if ids else "")
        b = context["b"] = b or (ids[0] if ids else "")
        summaries = {}
        for run_id in {a, b} - {""}:
            try:
                summaries[run_id] = store.summary(run_id)
            except ArtifactNotFoundError:
                context["errors"].append(f"run {run_id} has no published summary")
            except ArtifactStoreError as exc:
                context["errors"].append(data.scrub(exc))
        if a in summaries and b in summaries:
            context["rows"] = compare_rows(summaries[a], summaries[b])
            context["provenance"] = provenance_diff(summaries[a], summaries[b])
        return _render("compare.html", 404 if context["errors"] else 200, **context)

    @app.get("/ladders/{file}/artifacts/{key:path}", dependencies=[can_read_runs])
    def artifact(file: str, key: str, request: Request, user: GetUserDep) -> Response:
        entry = _entry_or_404(file, user)
        raw = request.scope.get("raw_path", b"") or b""
        if b"%25" in raw or b"\\" in raw:  # double-encoded or backslash: never a key this app wrote
            raise HTTPException(400, "invalid artifact path")
        _valid_key(data.relative_key, key, "invalid artifact path")
        _loaded(entry, say_why=False)
        store = data.LadderStore(entry)
        immutable = immutable_key(key) and bool(request.query_params.get("v"))
        etag = ""
        try:
            if not immutable:
                etag = store.etag(key)
                if _etag_matches(request, etag):
                    return Response(status_code=304, headers={"ETag": etag, "Cache-Control": REVALIDATE_CACHE})
            chunks, length = store.open(key)
        except ArtifactNotFoundError:
            removal = store.removal_of(key)
            if removal:  # retention removed it: gone on purpose, as its rung's manifest records
                raise HTTPException(410, _removed_line(removal)) from None
            raise HTTPException(404, "no such artifact") from None
        except ArtifactStoreError as exc:
            raise HTTPException(502, data.scrub(exc)) from None
        name = key.rsplit("/", 1)[-1]
        ext = ("." + name.rsplit(".", 1)[-1].lower()) if "." in name else ""
        headers = {
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": IMMUTABLE_CACHE if immutable else REVALIDATE_CACHE,
        }
        if etag:
            headers["ETag"] = etag
        if length is not None:
            headers["Content-Length"] = str(length)
        if ext in _INLINE_TYPES:
            media_type = _INLINE_TYPES[ext]
            if ext in (".html", ".svg"):
                headers["Content-Security-Policy"] = _SANDBOX_CSP  # a stored page runs no script here
            headers["Content-Disposition"] = f'inline; filename="{name}"'
        else:
            media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
            if ext == ".gz":
                media_type = "application/gzip"
            headers["Content-Disposition"] = f'attachment; filename="{name}"'
        return StreamingResponse(chunks, media_type=media_type, headers=headers)

    @app.post("/trigger", dependencies=[can_trigger])
    async def trigger(request: Request, user: GetUserDep) -> Response:
        form, is_json = await _read_form(request)
        token, from_cookie = _caller_token(request)
        if not token:
            raise HTTPException(401, "Not authenticated")
        if from_cookie and not hmac.compare_digest(str(form.get("csrf") or "").encode(), csrf_token(token).encode()):
            raise HTTPException(403, STALE_FORM)
        import anyio

        # only the ladders the caller may read can be triggered from here
        entries = await anyio.to_thread.run_sync(lambda: access.readable(data.list_ladders(), user))
        conf = _trigger_conf(form, entries)
        status_code, payload = await _post_dag_run(request, token, conf)
        if status_code >= 400:
            raise HTTPException(status_code, f"Airflow refused the run: {_detail(payload)}")
        answer = payload if isinstance(payload, dict) else {}
        run_id, state = answer.get("dag_run_id"), answer.get("state")
        result = TriggerResult(
            dag_id=TRIGGER_DAG_ID,
            dag_run_id=run_id if isinstance(run_id, str) else None,
            state=state if isinstance(state, str) else None,
            conf=conf,
        )
        if is_json or "text/html" not in request.headers.get("accept", ""):
            return JSONResponse(result.to_dict(), status_code=200)
        return _render(
            "triggered.html", base=_base(request), api_root=_api_root(request), user=user.get_name(), result=result
        )

    return app
