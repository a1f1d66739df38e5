"""analysis/api.py, the one door into analysis: importing it loads no numpy, pandas or msgspec;
each name it offers is its module's own object; .importlinter protects every other module."""

from __future__ import annotations

import configparser
import importlib
import os
import pkgutil
import subprocess
import sys

import pytest

import traceladder.analysis
from traceladder.analysis import api
from tests.conftest import REPO_ROOT


def test_import_loads_no_numpy_pandas_or_msgspec():
    code = (
        "import sys, traceladder.analysis.api as api; api.TraceError; "
        "print(sorted(m for m in ('numpy', 'pandas', 'msgspec') if m in sys.modules))"
    )
    path = os.pathsep.join([str(REPO_ROOT / "include"), str(REPO_ROOT)])
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_every_name_is_its_modules_own():
    assert sorted(api.__all__) == sorted(["TraceError", *api._EXPORTS])
    for name, module in api._EXPORTS.items():
        assert getattr(api, name) is getattr(importlib.import_module(f"traceladder.analysis.{module}"), name)
    assert dir(api) == sorted(api.__all__)
    with pytest.raises(AttributeError, match="no attribute 'read_trace'"):
        api.read_trace  # noqa: B018 (inside analysis only)


def test_one_trace_error_class():
    from traceladder.analysis.analyzers.trace import TraceError as from_trace
    from traceladder.analysis.model.events import TraceError as from_events

    assert api.TraceError is from_events is from_trace


def test_the_contract_protects_every_other_module():
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / ".importlinter")
    protected = set(config["importlinter:contract:analysis-api"]["protected_modules"].split())
    inside = {f"traceladder.analysis.{m.name}" for m in pkgutil.iter_modules(traceladder.analysis.__path__)}
    assert protected == inside - {"traceladder.analysis.api"}
