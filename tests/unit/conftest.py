"""Each reference trace analysed once per test session, for every conformance test that reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest


@pytest.fixture(scope="session")
def produced(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Path]:
    from traceladder.analysis.engine import analyze_trace

    cache: dict[Path, Path] = {}

    def get(trace: Path) -> Path:
        if trace not in cache:
            out = tmp_path_factory.mktemp(trace.name.replace(".", "_"))
            analyze_trace(trace, out)
            cache[trace] = out
        return cache[trace]

    return get
