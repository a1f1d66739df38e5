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

import numpy as np
import pandas as pd

from ..events import MISSING, EventTable

__all__ = [
    "METADATA_FIELDS",
    "EVENT_COLUMNS",
    "SUMMARY_COLUMNS",
    "DTYPE_BYTES",
    "collective_events",
    "coll_analysis_frame",
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
    "Float": 4, "Int": 4, "Long": 8, "BFloat16": 2, "Bool": 1, "Byte": 1, "Double": 8, "Half": 2, "Short": 2,
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


def _tupled(v: Any) -> Any:
    return tuple(_tupled(x) for x in v) if isinstance(v, list) else v


def collective_events(t: EventTable, rank: int = 0) -> pd.DataFrame:
    """One row per collective kernel of one trace (one rank), in file order.

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
        return pd.DataFrame(columns=EVENT_COLUMNS)
    mask = (t.cat == kcode) & np.isin(t.name, np.asarray(codes, dtype=np.int32))
    mask &= (t.corr != MISSING) | (t.ext != MISSING)
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return pd.DataFrame(columns=EVENT_COLUMNS)
    args = t.decode_args(idx)
    names = t.names_of(idx)
    recs = []
    for i, a, nm, ts, dur in zip(idx.tolist(), args, names, t.ts[idx].tolist(), t.dur[idx].tolist()):
        rec: dict[str, Any] = {"rank": rank, "ts": ts, "dur": dur}
        for f in METADATA_FIELDS:
            rec[f] = _tupled(a.get(f))
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
    return pd.DataFrame(recs, columns=EVENT_COLUMNS)


def coll_analysis_frame(events: pd.DataFrame) -> pd.DataFrame:
    """TraceLens's ``build_df_summary_long`` over :func:`collective_events` rows.

    Grouped by rank, process group, collective, sizes, split sizes and stream (a
    collective missing any of them is left out, as pandas' groupby drops null keys);
    per group the first message sizes, the duration sum / mean / std (n-1) / min / max
    (us) and ``operation_count``; sorted by ``dur_sum`` descending.
    """
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
        {"In msg size (MB)": "first", "Out msg size (MB)": "first", "dur": ["sum", "mean", "std", "min", "max"], "ts": "count"}
    )
    g.columns = ["_".join(c).strip() for c in g.columns.values]
    g = g.rename(columns={"ts_count": "operation_count"})
    g = g.sort_values(by="dur_sum", ascending=False, kind="stable").reset_index()
    return g[SUMMARY_COLUMNS]


def write_csv(t: EventTable, out_dir: Path, rank: int = 0) -> pd.DataFrame:
    """Write coll_analysis.csv when the trace has collectives; return the frame."""
    df = coll_analysis_frame(collective_events(t, rank))
    if not df.empty:
        df.to_csv(Path(out_dir) / "coll_analysis.csv", index=False)
    return df
