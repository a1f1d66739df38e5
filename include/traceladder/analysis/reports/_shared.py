"""pandas' groupby aggregates of one group's values, in plain numpy (no Series per group).

Same definitions as pandas: NaN skipped, ``std`` with n-1 (NaN for one value), ``sum``
of nothing = 0, the rest NaN for an empty group; the median is the middle value or the
mean of the two middle ones, as ``np.median`` computes it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["param_text", "stats"]

_EMPTY = {"mean": math.nan, "median": math.nan, "std": math.nan, "min": math.nan, "max": math.nan, "sum": 0.0}


def stats(values) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    if a.size == 1:  # most groups: the same numbers without six numpy calls
        x = float(a.reshape(-1)[0])
        if x != x:
            return dict(_EMPTY)
        s = x + 0.0  # numpy's sum starts from 0.0, so a lone -0.0 sums (and averages) to 0.0
        return {"mean": s, "median": x, "std": math.nan, "min": x, "max": x, "sum": s}
    return _stats(a)


def _stats(a: np.ndarray) -> dict[str, float]:
    a = a[~np.isnan(a)]
    n = a.size
    if n == 0:
        return dict(_EMPTY)
    s = np.sort(a)
    h = n // 2
    med = float(s[h]) if n % 2 else float((s[h - 1] + s[h]) / 2)
    return {
        "mean": float(a.mean()),
        "median": med,
        "std": float(a.std(ddof=1)) if n > 1 else math.nan,
        "min": float(s[0]),
        "max": float(s[-1]),
        "sum": float(a.sum()),
    }


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def param_text(params: list[dict], key: str) -> list[str | None]:
    """pandas 3 ``Series.astype(str)`` of one param column (None = missing), over the
    model groups in use (a value missing in a group is missing in all its rows)."""
    vals = [p.get(key) for p in params]
    present = [v for v in vals if not _missing(v)]
    numeric = present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present)
    as_float = numeric and (len(present) < len(vals) or any(isinstance(v, float) for v in present))
    out: list[str | None] = []
    for v in vals:
        if v is None or _missing(v):
            out.append(None)
        elif as_float:
            out.append(repr(float(v)))
        else:
            out.append(str(v))
    return out
