"""Fixtures of the SQLite readers' tests (test_rocpd_db.py, test_rpd_sqlite.py): the reference
rocprofv3 JSON with copies added, and its analysis, which each SQLite format must match."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from traceladder.analysis.analyzers.trace import analyze_trace

from tests.unit.analysis.readers.test_rocprof_json import add_copies, load_reference


@pytest.fixture(scope="module")
def doc() -> dict:
    """The reference rocprofv3 JSON with a copy every 97 dispatches (test_rocprof_json.add_copies)."""
    return add_copies(load_reference())


@pytest.fixture(scope="module")
def json_out(tmp_path_factory: pytest.TempPathFactory, doc: dict) -> Path:
    """`doc` analysed as rocprofv3 JSON: its analysis folder (test_rocprof_json.py has its own,
    of the reference without copies)."""
    d = tmp_path_factory.mktemp("copies_json")
    p = d / "host.908_results.json.gz"
    p.write_bytes(gzip.compress(orjson.dumps(doc)))
    analyze_trace(p, d / "out")
    return d / "out"
