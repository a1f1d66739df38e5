"""Hand-made rung results (metrics.json as the runner writes it) as the stages take them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from traceladder.core.documents import IndexEntry, RungResult


def typed(results: Mapping[str, Mapping[str, Any]]) -> dict[str, RungResult]:
    """Each result checked as the summary reads a stored metrics.json (``RungResult``)."""
    return {rung_id: RungResult.from_dict(dict(r), f"{rung_id}/metrics.json") for rung_id, r in results.items()}


def typed_run(run: tuple[Any, Mapping[str, Mapping[str, Any]]]) -> tuple[Any, dict[str, RungResult]]:
    """A (plan, results) pair with its results typed."""
    plan, results = run
    return plan, typed(results)


def index_entries(entries: Sequence[Mapping[str, Any]]) -> list[IndexEntry]:
    """Hand-made index entries (``runs/<run_id>.json`` as published) as the history reads them."""
    return [IndexEntry.from_dict(dict(e), f"entry {i}") for i, e in enumerate(entries)]
