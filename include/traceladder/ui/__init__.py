"""The Ladders page in the Airflow UI: a FastAPI app that the plugin in ``traceladder.ui.plugin``
(installed through the ``airflow.plugins`` entry point) mounts at ``/traceladder`` and links from
the nav (Browse > Ladders).

It lists every ladder file, each ladder's published runs (``runs/`` index objects), a run's summary (ladder
table, lenses, findings, the charts in ``summary/charts/``) and its artifacts (streamed from S3
through the app, confined to ``<prefix>/<ladder>/``), and triggers ``traceladder-trigger`` through
Airflow's REST API as the signed-in user.

This module stays light: every Airflow component imports plugins (task processes too, for macros),
so the plugin mounts ``LazyApp``, which builds the FastAPI app (``traceladder.ui.app``, which
imports Airflow's API security code) on the first request the api-server hands it.
"""

from __future__ import annotations

from typing import Any

URL_PREFIX = "/traceladder"
TRIGGER_DAG_ID = "traceladder-trigger"


def create_app() -> Any:
    """The FastAPI app (imports ``airflow.api_fastapi``)."""
    from traceladder.ui.app import create_app as _create_app

    return _create_app()


class LazyApp:
    """An ASGI app that builds ``create_app()`` on its first call and then delegates to it."""

    def __init__(self) -> None:
        self._app: Any = None

    @property
    def app(self) -> Any:
        if self._app is None:  # no await between the check and the set: one event loop, one build
            self._app = create_app()
        return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


__all__ = ["TRIGGER_DAG_ID", "URL_PREFIX", "LazyApp", "create_app"]
