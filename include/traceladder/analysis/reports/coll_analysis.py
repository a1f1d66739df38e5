"""``coll_analysis.csv``: TraceLens v1.0.0's one-rank collective summary
(``NcclAnalyser([trace]).build_df_summary_long()``, written when the trace has
collectives and CPU ops).

The collectives themselves come from :mod:`..model.collectives` (re-exported here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import math

import numpy as np

from ..model.collectives import (
    DTYPE_BYTES,
    EVENT_COLUMNS,
    METADATA_FIELDS,
    collective_events,
    collective_records,
)
from ..model.events import EventTable
from ..model.table import Table, is_missing

__all__ = [
    "METADATA_FIELDS",
    "EVENT_COLUMNS",
    "SUMMARY_COLUMNS",
    "DTYPE_BYTES",
    "collective_records",
    "collective_events",
    "coll_analysis_frame",
    "coll_analysis_table",
    "write_csv",
]

#: one rank's collectives grouped by what identifies them (rank, then every metadata field)
_GROUP = ["rank", *METADATA_FIELDS]
SUMMARY_COLUMNS = _GROUP + [
    "In msg size (MB)_first",
    "Out msg size (MB)_first",
    "dur_sum",
    "dur_mean",
    "dur_std",
    "dur_min",
    "dur_max",
    "operation_count",
]


def coll_analysis_frame(events):
    """TraceLens's ``build_df_summary_long`` over :func:`collective_events` rows.

    Grouped by rank, process group, collective, sizes, split sizes and stream (a
    collective missing any of them is left out, as pandas' groupby drops null keys);
    per group the first message sizes, the duration sum / mean / std (n-1) / min / max
    (us) and ``operation_count``; sorted by ``dur_sum`` descending.
    """
    import pandas as pd

    if events.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    df = events.drop(columns=["name", "event"]).copy()
    # TraceLens's long table labels collectives with no process group
    pg = df["Process Group Name"]
    pg_missing = bool(pg.isna().all() or (pg.fillna("Unknown_Group") == "Unknown_Group").all())
    one_stream = all(n <= 1 for n in df.groupby("rank", sort=False)["stream"].nunique().tolist())
    # TraceLens's long table: "all" in its simplified mode (no process groups, one
    # stream per rank), else "Unknown_Group" for a collective with no process group
    df["Process Group Name"] = "all" if (pg_missing and one_stream) else pg.where(pg.notna(), "Unknown_Group")
    df = df.infer_objects()
    g = df.groupby(_GROUP).agg(
        {
            "In msg size (MB)": "first",
            "Out msg size (MB)": "first",
            "dur": ["sum", "mean", "std", "min", "max"],
            "ts": "count",
        }
    )
    g.columns = ["_".join(c).strip() for c in g.columns.values]
    g = g.rename(columns={"ts_count": "operation_count"})
    g = g.sort_values(by="dur_sum", ascending=False, kind="stable").reset_index()
    return g[SUMMARY_COLUMNS]


def _sort_key(v: Any) -> tuple:
    # group keys sort as pandas sorts an object column: numbers, then strings, then the rest
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (0, v, "")
    return (1, 0, v) if isinstance(v, str) else (2, 0, repr(v))


def coll_analysis_table(records: list[dict[str, Any]]) -> Table:
    """:func:`coll_analysis_frame` without pandas, over :func:`collective_records`."""
    if not records:
        return Table(list(SUMMARY_COLUMNS))
    pg = [r["Process Group Name"] for r in records]
    pg_missing = all(is_missing(v) or v == "Unknown_Group" for v in pg)
    streams: dict[Any, set] = {}
    for r in records:
        if not is_missing(r["stream"]):
            streams.setdefault(r["rank"], set()).add(r["stream"])
    one_stream = all(len(v) <= 1 for v in streams.values())
    label = "all" if (pg_missing and one_stream) else None
    # a key column holding numbers and missing cells is float64 in pandas: it stays so
    float_cols = frozenset(
        c
        for c in _GROUP
        if any(is_missing(r[c]) for r in records)
        and all(isinstance(r[c], (int, float)) and not isinstance(r[c], bool) for r in records if not is_missing(r[c]))
        and any(not is_missing(r[c]) for r in records)
    )
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        key = tuple(
            (label or (r[c] if not is_missing(r[c]) else "Unknown_Group")) if c == "Process Group Name" else r[c]
            for c in _GROUP
        )
        if any(is_missing(k) for k in key):  # pandas' groupby drops null keys
            continue
        groups.setdefault(key, []).append(r)
    rows = []
    for key in sorted(groups, key=lambda k: tuple(_sort_key(v) for v in k)):
        rs = groups[key]
        d = np.asarray([r["dur"] for r in rs], dtype=np.float64)
        first = []
        for c in ("In msg size (MB)", "Out msg size (MB)"):
            vals = [r[c] for r in rs if not is_missing(r[c])]
            first.append(vals[0] if vals else math.nan)
        std = float(d.std(ddof=1)) if d.size > 1 else math.nan
        sm = math.fsum(d.tolist())  # pandas' group sums are compensated (Kahan)
        rows.append([*key, *first, sm, sm / d.size, std, float(d.min()), float(d.max()), len(rs)])
    s_idx = len(_GROUP) + 2
    rows.sort(key=lambda r: -r[s_idx])  # stable, as sort_values(kind="stable")
    return Table(list(SUMMARY_COLUMNS), rows, float_cols)


def write_csv(t: EventTable, out_dir: Path, rank: int = 0) -> Table:
    """Write coll_analysis.csv when the trace has collectives; return the table."""
    table = coll_analysis_table(collective_records(t, rank))
    if not table.empty:
        table.write_csv(Path(out_dir) / "coll_analysis.csv")
    return table
