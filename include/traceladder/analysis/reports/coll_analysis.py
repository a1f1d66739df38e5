"""``coll_analysis.csv``: TraceLens v1.0.0's one-rank collective summary
(``NcclAnalyser([trace]).build_df_summary_long()``, written when the trace has
collectives and CPU ops).

:func:`collective_events` is the one place collectives are extracted from a trace;
the multi-rank ``nccl_*`` reports use it per rank.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import math

import numpy as np

from ..model.values import tupled
from ..model.events import MISSING, EventTable
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

#: kernel-name patterns of collective kernels (TraceLens: NCCL/RCCL plus its default
#: custom pattern), case-insensitive search
_COLLECTIVE_RE = re.compile(r"nccl|rccl|cross_device_reduce", re.IGNORECASE)
#: collective name inferred from the kernel name when the args carry none
_INFER = [(re.compile(r"cross_device_reduce", re.IGNORECASE), "allreduce")]

#: the kernel ``args`` fields each collective carries (None when absent)
METADATA_FIELDS = [
    "Process Group Name",
    "Process Group Ranks",
    "Collective name",
    "Group size",
    "dtype",
    "In msg nelems",
    "Out msg nelems",
    "In split size",
    "Out split size",
    "stream",
]
DTYPE_BYTES = {
    "Float": 4,
    "Int": 4,
    "Long": 8,
    "BFloat16": 2,
    "Bool": 1,
    "Byte": 1,
    "Double": 8,
    "Half": 2,
    "Short": 2,
}
EVENT_COLUMNS = ["rank", "ts", "dur", *METADATA_FIELDS, "In msg size (MB)", "Out msg size (MB)", "name", "event"]
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


def collective_events(t: EventTable, rank: int = 0):
    """:func:`collective_records` as a pandas DataFrame (columns :data:`EVENT_COLUMNS`)."""
    import pandas as pd

    return pd.DataFrame(collective_records(t, rank), columns=EVENT_COLUMNS)


def collective_records(t: EventTable, rank: int = 0) -> list[dict[str, Any]]:
    """One record per collective kernel of one trace (one rank), in file order.

    A collective is a GPU event of category ``kernel`` whose name matches ``nccl`` /
    ``rccl`` / ``cross_device_reduce`` (case-insensitive) and whose args carry a
    ``correlation`` or ``External id`` (TraceLens's ``NcclAnalyser`` filter; linking to
    the host tree is not required).

    Columns (:data:`EVENT_COLUMNS`):
      * ``rank``: the ``rank`` argument (TraceLens numbers ranks by input order);
      * ``ts``, ``dur``: kernel start and duration, microseconds;
      * the kernel-args fields of :data:`METADATA_FIELDS` as the trace has them
        (``Process Group Name`` / ``Process Group Ranks`` / ``In split size`` /
        ``Out split size`` are usually strings such as ``"0"`` / ``"[0, 1]"`` / ``"[]"``;
        ``Group size`` / ``In msg nelems`` / ``Out msg nelems`` ints; ``dtype`` a
        PyTorch scalar type name such as ``BFloat16``; JSON lists become tuples; None
        when absent -- e.g. kernels of NCCL's internal setup carry no collective args);
        ``Collective name`` is inferred from the kernel name when absent
        (``cross_device_reduce`` -> ``allreduce``);
      * ``In msg size (MB)`` / ``Out msg size (MB)``: nelems x bytes of ``dtype`` /
        1024**2 (MiB), None when the dtype is unknown or nelems absent;
      * ``name``: the kernel name; ``event``: its index in the EventTable.
    """
    kcode = t.cat_code("kernel")
    codes = [i for i, n in enumerate(t.names) if n and _COLLECTIVE_RE.search(n)]
    if kcode < 0 or not codes:
        return []
    mask = (t.cat == kcode) & np.isin(t.name, np.asarray(codes, dtype=np.int32))
    mask &= (t.corr != MISSING) | (t.ext != MISSING)
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return []
    args = t.decode_args(idx)
    names = t.names_of(idx)
    recs = []
    for i, a, nm, ts, dur in zip(idx.tolist(), args, names, t.ts[idx].tolist(), t.dur[idx].tolist()):
        rec: dict[str, Any] = {"rank": rank, "ts": ts, "dur": dur}
        for f in METADATA_FIELDS:
            rec[f] = tupled(a.get(f))
        if rec["Collective name"] is None:
            for rx, coll in _INFER:
                if rx.search(nm):
                    rec["Collective name"] = coll
                    break
        nb = DTYPE_BYTES.get(rec["dtype"]) if isinstance(rec["dtype"], str) else None
        if nb is not None and rec["In msg nelems"] is not None:
            rec["In msg size (MB)"] = rec["In msg nelems"] * nb / 1024**2
            rec["Out msg size (MB)"] = rec["Out msg nelems"] * nb / 1024**2
        else:
            rec["In msg size (MB)"] = None
            rec["Out msg size (MB)"] = None
        rec["name"] = nm
        rec["event"] = i
        recs.append(rec)
    return recs


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
