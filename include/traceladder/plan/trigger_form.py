"""The trigger form, defined once: the `traceladder-trigger` DAG's Params (`workflows/ladder.py`), the
Ladders page's form (`ui/templates/_macros.html`) and its checks (`ui/app.py`) all read it.

Each field is a JSON schema (what Airflow's `Param` takes and validates) with its `default` and
`description`. Standard library only."""

from __future__ import annotations

from typing import Any

from traceladder.core.env_vars import TRIGGER_MAX_REPEATS

#: One switch override, SWITCH=VALUE: a Python and an HTML (JavaScript, `v` flag) pattern alike.
SWITCH_VALUE = r"[A-Za-z0-9_.\-]+=[A-Za-z0-9_.\-]+"

#: The form's `repeats` bounds (blocks per rung; the trigger DAG has slots for the largest).
REPEATS_MIN, REPEATS_MAX = 1, TRIGGER_MAX_REPEATS


def trigger_fields(ladder_names: list[str], lens_names: list[str]) -> dict[str, dict[str, Any]]:
    """Field name -> its schema, with `default` and `description` (the Params, in form order)."""
    return {
        "ladder": {
            "default": ladder_names[0] if ladder_names else "",
            "enum": ladder_names or [""],
            "description": "Ladder file (include/configs/ladders)",
        },
        "rungs": {
            "default": [],
            "type": "array",
            "items": {"type": "string"},
            "description": "Rung names to run; empty runs every rung",
        },
        "lens": {
            "default": "ladder",
            "enum": ["ladder", *lens_names],
            "description": "'ladder' runs the ladder's own lenses; a lens name profiles every selected rung with it",
        },
        "repeats": {
            "default": None,
            "type": ["null", "integer"],
            "minimum": REPEATS_MIN,
            "maximum": REPEATS_MAX,
            "description": "Repeats (blocks) per rung; empty keeps the ladder's (an adaptive ladder's "
            "min to max blocks, stopping by its rule); a number runs exactly that many, no early stop",
        },
        "override": {
            "default": "",
            "type": "string",
            "pattern": f"^$|^{SWITCH_VALUE}$",
            "description": "One switch override SWITCH=VALUE for every rung, e.g. global_batch=16",
        },
        "seed": {
            "default": None,
            "type": ["null", "integer"],
            "minimum": 0,
            "description": "Seed of the block order; empty derives one from the ladder and the run id",
        },
    }
