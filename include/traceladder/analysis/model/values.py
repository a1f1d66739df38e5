"""Value helpers the reports share (one definition each)."""

from __future__ import annotations

import math
from typing import Any


def tupled(v: Any) -> Any:
    """Lists (from JSON) as tuples, recursively, so a value can be a dict key or a group key."""
    return tuple(tupled(x) for x in v) if isinstance(v, list) else v


def finite(x: Any) -> float | None:
    """A JSON-safe float: None for NaN, infinity, or anything that is not a number."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
