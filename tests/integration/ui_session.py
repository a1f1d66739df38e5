"""What the UI tests share: an api-server of their own for a module, and a chromium signed in to
it through Airflow's login form (playwright)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.integration.airflow_server import AirflowApiServer
from testkit.needs import unavailable

CHROMIUM = "/usr/bin/chromium"


@contextmanager
def api_server(
    name: str,
    s3_conn_json: str,
    server_class: type[AirflowApiServer] = AirflowApiServer,
    extra_env: dict[str, str] | None = None,
) -> Iterator[AirflowApiServer]:
    """A started api-server (``server_class``) in a temporary AIRFLOW_HOME (removed afterwards),
    whose ``traceladder_s3`` connection is ``s3_conn_json``; ``extra_env`` adds to its environment."""
    home = Path(tempfile.mkdtemp(prefix=f"traceladder-{name}-"))
    srv = server_class(home, extra_env={"AIRFLOW_CONN_TRACELADDER_S3": s3_conn_json, **(extra_env or {})})
    try:
        srv.start()
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(home, ignore_errors=True)


def browser_or_skip() -> None:
    missing = []
    try:
        from playwright.sync_api import sync_playwright  # noqa: F401 - only: is playwright installed
    except ImportError:
        missing.append("playwright (pip install playwright==1.65.*)")
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"{CHROMIUM} (apt-get install -y chromium)")
    if missing:
        unavailable("browser test needs " + " and ".join(missing))


@contextmanager
def signed_in_page(server: AirflowApiServer, user: str, next_path: str, profile: Path) -> Iterator[Any]:
    """A chromium page (a fresh profile in ``profile``) signed in as ``user`` and at ``next_path``."""
    browser_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # playwright takes the profile folder as user_data_dir, not as an argument
        browser = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
            viewport={"width": 1400, "height": 1000},
        )
        try:
            page = browser.new_page()
            page.goto(f"{server.url}/auth/login?next={next_path}")
            page.fill("input[name=username]", user)
            page.fill("input[name=password]", server.passwords[user])
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(f"{server.url}{next_path}", timeout=30_000)
            yield page
        finally:
            browser.close()
