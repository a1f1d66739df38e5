"""Small report tables without pandas: the text pandas' ``DataFrame.to_csv(index=False)``
writes for the same values, and pandas' sort order where a report depends on it.

pandas costs ~0.3 s of imports, a fifth of analysing a 145 MB trace, and the builtin
reports only need grouping, sorting and CSV text, so the analyze path keeps it out.

A column's text follows the dtype pandas infers for a column of Python values:
missing (None / NaN) cells are empty; all-int columns print as ints; ints mixed with
floats or missing cells become float64 and print as floats (``8.0``); all-bool as
``True`` / ``False``; anything else is an object column printed with ``str``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

__all__ = ["Table", "is_missing", "column_text", "write_csv", "pandas_desc_order"]


def is_missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def _py(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def column_text(values: Sequence[Any], force_float: bool = False) -> list[str]:
    kinds = set(map(type, values))
    if len(kinds) == 1:  # the common columns, without a test per cell
        k = kinds.pop()
        if k is str:
            return list(values)
        if k is float and not any(map(math.isnan, values)):
            return list(map(float.__repr__, values))
        if k is int:
            return list(map(float.__repr__, map(float, values))) if force_float else list(map(int.__repr__, values))
    vals = [_py(v) for v in values]
    present = [v for v in vals if not is_missing(v)]
    nums = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present)
    if present and all(isinstance(v, bool) for v in present) and len(present) == len(vals):
        return [str(v) for v in vals]
    if present and nums:
        if not force_float and len(present) == len(vals) and all(isinstance(v, int) for v in present):
            return [str(v) for v in vals]
        return ["" if is_missing(v) else repr(float(v)) for v in vals]
    if not present and any(isinstance(v, float) for v in vals):
        return [""] * len(vals)
    return ["" if is_missing(v) else str(v) for v in vals]


@dataclass
class Table:
    """Columns and row lists; ``float_columns`` print as float64 whatever their values
    (pandas keeps a column float after the rows with missing cells are dropped)."""

    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    float_columns: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return not self.rows

    def records(self, n: int | None = None) -> list[dict[str, Any]]:
        rows = self.rows if n is None else self.rows[:n]
        return [dict(zip(self.columns, r)) for r in rows]

    def column(self, name: str) -> list[Any]:
        j = self.columns.index(name)
        return [r[j] for r in self.rows]

    @classmethod
    def from_records(cls, records: Iterable[dict[str, Any]], columns: list[str] | None = None) -> "Table":
        """As ``pandas.DataFrame(records)``: columns in order of first appearance."""
        records = list(records)
        if columns is None:
            columns = list(dict.fromkeys(k for r in records for k in r))
        return cls(columns, [[r.get(c) for c in columns] for r in records])

    def write_csv(self, path: Path) -> Path:
        return write_csv(path, self)


def write_csv(path: Path, table: Table) -> Path:
    path = Path(path)
    cols = [column_text([r[j] for r in table.rows], c in table.float_columns) for j, c in enumerate(table.columns)]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        if not table.columns:
            fh.write("\n")
            return path
        w.writerow(table.columns)
        w.writerows(zip(*cols))
    return path


def pandas_desc_order(values: Sequence[float]) -> np.ndarray:
    """The row order of ``DataFrame.sort_values(col, ascending=False)`` (quicksort; ties
    as pandas leaves them, which matters where a cumulative column follows)."""
    v = np.asarray(values, dtype=np.float64)
    n = v.size
    finite = ~np.isnan(v)
    idx = np.flatnonzero(finite)
    vals = v[idx]
    # pandas' nargsort: reverse, argsort ascending (quicksort), reverse back
    vals, idx = vals[::-1], idx[::-1]
    order = idx[vals.argsort(kind="quicksort")][::-1]
    return np.concatenate([order, np.flatnonzero(~finite)]) if order.size < n else order


def fmt_float(x: float) -> str:
    return "" if math.isnan(x) else repr(float(x))


def _desc_key(v: Any) -> tuple[bool, float]:
    return (True, 0.0) if is_missing(v) else (False, -float(v))


def sort_desc_then_asc(table: Table, desc: str, asc: str) -> Table:
    """``sort_values(by=[desc, asc], ascending=[False, True])``: pandas sorts several
    keys with a stable lexsort, missing values last."""
    i, j = table.columns.index(desc), table.columns.index(asc)
    rows = sorted(table.rows, key=lambda r: (_desc_key(r[i]), r[j]))
    return Table(list(table.columns), rows, table.float_columns)


def add_percentages(table: Table, col: str) -> Table:
    """TraceLens's ``Percentage (%)`` and ``Cumulative Percentage (%)`` of ``col``:
    ``s / s.sum() * 100`` and its ``cumsum`` (pandas: NaN skipped in the sum, left NaN
    in the running total, which carries on past it)."""
    v = np.asarray([_py(x) for x in table.column(col)], dtype=np.float64)
    nan = np.isnan(v)
    total = np.sum(np.where(nan, 0.0, v))
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = v / total * 100
    pnan = np.isnan(pct)
    cum = np.cumsum(np.where(pnan, 0.0, pct))
    cum[pnan] = np.nan
    rows = [r + [p, c] for r, p, c in zip(table.rows, pct.tolist(), cum.tolist())]
    return Table(table.columns + ["Percentage (%)", "Cumulative Percentage (%)"], rows, table.float_columns)


def concat(a: Table, b: Table) -> Table:
    """``pd.concat([a, b])``: columns in order of first appearance, a cell a table lacks
    is missing.  (Text columns only may be absent from one side here: pandas would keep
    an int column beside an all-missing object column as object, unlike ``column_text``.)"""
    cols = list(dict.fromkeys(a.columns + b.columns))
    rows = [[dict(zip(t.columns, r)).get(c) for c in cols] for t in (a, b) for r in t.rows]
    return Table(cols, rows, a.float_columns | b.float_columns)
