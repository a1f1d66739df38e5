"""The traceladder Ladders page in the Airflow UI (Browse > Ladders).

Mounts the FastAPI app from ``traceladder.ui`` at ``/traceladder`` and links it from the nav as
an external view that the UI opens at ``/plugin/ladders`` (a same-origin iframe of
``/traceladder/``). ``LazyApp`` builds the FastAPI app on its first request, so the other Airflow
processes that import plugins (task processes, for macros) do not import the API code.

Airflow 3.3: ``fastapi_apps`` entries need ``app``, ``url_prefix`` and ``name``; ``external_views``
need ``name`` and ``href``, and one invalid entry hides the whole plugin from the nav.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from traceladder.ui import URL_PREFIX, LazyApp


class TraceladderUIPlugin(AirflowPlugin):
    name = "traceladder_ui"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "traceladder"}]
    external_views = [
        {
            "name": "Ladders",
            "href": f"{URL_PREFIX}/",
            "url_route": "ladders",
            "destination": "nav",
            "category": "browse",
        }
    ]
