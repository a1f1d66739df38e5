"""The limits a ladder and a trigger must stay within, in one place (standard library only: the
config schema, the trigger DAG, the UI's form and the docs all read them from here)."""

from __future__ import annotations

#: A ladder file's `repeats` and `lenses.repeats` (blocks per rung).
MAX_REPEATS = 50

#: The trigger form's largest `repeats`: the trigger DAG has slots for this many blocks per kind.
TRIGGER_MAX_REPEATS = 5
