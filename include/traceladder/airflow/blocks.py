"""The rung task's side of the slot grid (`plan/grid.py`): a slot's spec, or a skip when the plan
left the slot empty; and an adaptive ladder's check before a block, which skips it (and, through
the trigger rules, every later measure block) once the stopping rule says stop."""

from __future__ import annotations

import logging
from collections.abc import Callable

from traceladder.core.documents import JSONObject
from traceladder.core.errors import first_line

log = logging.getLogger(__name__)


def slot_spec(slot: list[JSONObject]) -> JSONObject:
    """The spec of a rung slot, or a skip when the plan left the slot empty."""
    from airflow.sdk.exceptions import AirflowSkipException

    if not slot:
        raise AirflowSkipException("no run in this slot of the plan")
    return slot[0]


def continue_or_skip(look: JSONObject) -> JSONObject:
    """The check's result when the ladder goes on; a skip (Airflow's) when it stops here."""
    from airflow.sdk.exceptions import AirflowSkipException

    if look.get("stop"):
        worst = look.get("worst_mde_pct")
        if look.get("reason") == "budget":
            why = " (the time budget: another block would end past it" + (
                f"; the largest MDE {worst:.2f}%)" if worst is not None else ")"
            )
        else:
            why = f" (every MDE <= {look['target_mde_pct']:g}%, the largest {worst:.2f}%)" if worst is not None else ""
        raise AirflowSkipException(f"adaptive repeats: stop after {look['blocks']} blocks{why}")
    return look


def look_or_go_on(check: Callable[[], JSONObject], block: int) -> JSONObject:
    """The look's decision, or "go on" when the look itself fails (the store unreadable, a plan it
    cannot parse): a failed look would leave its block's first slot, and every later block's,
    upstream_failed. Going on is always safe: a stop is optional, and the summary judges at the
    look where the blocks really ended."""
    try:
        return check()
    except Exception as exc:  # noqa: BLE001 - any failure of the optional look: one line, and go on
        error = first_line(exc, typed=True)  # as tasks.publish_run's notify_error
        log.warning("adaptive repeats: the look before block %d failed (%s); the ladder goes on", block, error)
        return {"stop": False, "blocks": block, "error": error}
