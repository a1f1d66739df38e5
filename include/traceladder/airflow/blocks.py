"""The rung task's side of the slot grid (`plan/grid.py`): a slot's spec, or a skip when the plan
left the slot empty."""

from __future__ import annotations

from typing import Any


def slot_spec(slot: list[dict[str, Any]]) -> dict[str, Any]:
    """The spec of a rung slot, or a skip when the plan left the slot empty."""
    from airflow.sdk.exceptions import AirflowSkipException

    if not slot:
        raise AirflowSkipException("no run in this slot of the plan")
    return slot[0]
