"""The traceladder Ladders page in the Airflow UI (Browse > Ladders), as an Airflow plugin.

Installed with the package: pyproject.toml registers ``TraceladderUIPlugin`` under the
``airflow.plugins`` entry point (and the provider info names it), so an Airflow that has the
package needs no plugins folder. ``plugins/traceladder_ui.py`` defers to this entry point.

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

PLUGIN_NAME = "traceladder_ui"
ENTRY_POINT = "traceladder.ui.plugin:TraceladderUIPlugin"  # pyproject.toml, [project.entry-points."airflow.plugins"]


class TraceladderUIPlugin(AirflowPlugin):
    name = PLUGIN_NAME
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
