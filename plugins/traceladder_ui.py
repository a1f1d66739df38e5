"""The Ladders page for an Airflow that reads this repository's ``plugins/`` folder.

The plugin itself is ``traceladder.ui.plugin.TraceladderUIPlugin``. Where the package is installed
with its entry points (``pip install``, ``make setup``), Airflow loads it through the
``airflow.plugins`` entry point, and this file defines nothing: Airflow registers each plugin once
by name, and a second registration from this folder would be reported as an import error. Without
that entry point (the package only on ``PYTHONPATH``), this file exposes the same class.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from traceladder.ui.plugin import ENTRY_POINT

if not any(ep.value == ENTRY_POINT for ep in entry_points(group="airflow.plugins")):
    from traceladder.ui.plugin import TraceladderUIPlugin

    __all__ = ["TraceladderUIPlugin"]
