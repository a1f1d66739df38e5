"""What the Ladders page's route modules share (ui/app.py, ui/alerts.py): the app's own URL path,
a page rendered from its template, the caller's token and the CSRF field a cookie-authenticated
POST must carry (an HMAC of the caller's token with the api secret key)."""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Any
from urllib.parse import quote

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse

from traceladder.ui import URL_PREFIX
from traceladder.ui.views import page_templates

STALE_FORM = "the form is stale or did not come from the Ladders page; reload the page and submit again"


def render(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    html = page_templates().get_template(name).render(**context)
    return HTMLResponse(html, status_code=status_code, headers={"Cache-Control": "no-store"})


def base(request: Request) -> str:
    """The app's own URL path (the api-server's base path + the mount prefix)."""
    return str(request.scope.get("root_path") or URL_PREFIX).rstrip("/")


def api_root(request: Request) -> str:
    prefix = base(request)
    return prefix[: -len(URL_PREFIX)] if prefix.endswith(URL_PREFIX) else ""


def wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def caller_token(request: Request) -> tuple[str, bool]:
    """The caller's JWT and whether it came from the session cookie (the same precedence as
    Airflow's ``get_user``: an ``Authorization: Bearer`` header wins over the cookie)."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip(), False
    return request.cookies.get(COOKIE_NAME_JWT_TOKEN, ""), True


def _csrf_key() -> bytes:
    from airflow.configuration import conf

    secret = conf.get("api", "secret_key", fallback="") or conf.get("api_auth", "jwt_secret", fallback="")
    if not secret:
        raise HTTPException(500, "the api-server has no [api] secret_key; the page's forms need one")
    return secret.encode()


def csrf_token(token: str) -> str:
    return hmac.new(_csrf_key(), b"traceladder-trigger\0" + token.encode(), hashlib.sha256).hexdigest()


def page_csrf(request: Request) -> str:
    """The CSRF field of a page shown to this caller ("" without a token)."""
    token, _ = caller_token(request)
    return csrf_token(token) if token else ""


def check_csrf(request: Request, sent: str) -> str:
    """The caller's token, after checking that a cookie-authenticated request carries the page's
    CSRF value (`sent`: the form field or the X-CSRF-Token header): 401 without a token, 403 with a
    wrong or missing value. A bearer token is not sent by a browser on its own: no CSRF needed."""
    token, from_cookie = caller_token(request)
    if not token:
        raise HTTPException(401, "Not authenticated")
    if from_cookie and not hmac.compare_digest(sent.encode(), csrf_token(token).encode()):
        raise HTTPException(403, STALE_FORM)
    return token


_URL_SAFE_KEY = re.compile(r"[A-Za-z0-9_.~/-]*")


def artifact_href(base: str, file: str, key: str, version: str = "") -> str:
    """A stored object's link on the page (``_macros.html``'s ``artifact_url``, spelled in Python
    for the run page's hundreds of links)."""
    path = key if _URL_SAFE_KEY.fullmatch(key) else quote(key, safe="/")  # most keys need no quoting
    href = f"{base}/ladders/{quote(file, safe='')}/artifacts/{path}"
    return f"{href}?v={quote(version, safe='')}" if version else href
