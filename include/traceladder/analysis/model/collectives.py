"""The collective kernels of one trace (one rank): TraceLens's ``NcclAnalyser`` filter
and args reading, in one place.  The one-rank ``coll_analysis.csv`` report and the
multi-rank reader both start from :func:`collective_records`."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .events import MISSING, EventTable
from .values import tupled

__all__ = [
    "METADATA_FIELDS",
    "IDENTITY_FIELDS",
    "COLLECTIVE_FIELDS",
    "EVENT_COLUMNS",
    "DTYPE_BYTES",
    "add_message_sizes",
    "collective_records",
    "collective_events",
]

#: kernel-name patterns of collective kernels (TraceLens: NCCL/RCCL plus its default
#: custom pattern), case-insensitive search
_COLLECTIVE_RE = re.compile(r"nccl|rccl|cross_device_reduce", re.IGNORECASE)
#: collective name inferred from the kernel name when the args carry none
_INFER = [(re.compile(r"cross_device_reduce", re.IGNORECASE), "allreduce")]

#: what names a collective (its group, kind and dtype), before its message's element counts
COLLECTIVE_FIELDS = ["Process Group Name", "Process Group Ranks", "Collective name", "Group size", "dtype"]
#: what names a collective and its message: the first kernel ``args`` fields, and the first
#: columns of TraceLens's implicit-sync tables (reports/nccl_reports.py)
IDENTITY_FIELDS = [*COLLECTIVE_FIELDS, "In msg nelems", "Out msg nelems"]
#: the kernel ``args`` fields each collective carries (None when absent)
METADATA_FIELDS = [*IDENTITY_FIELDS, "In split size", "Out split size", "stream"]
#: bytes per element, TraceLens's ``dtype2bytes`` (a dtype not here gives no sizes)
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


def add_message_sizes(rec: dict[str, Any]) -> None:
    """A collective record's ``In``/``Out msg size (MB)``: its element counts times its dtype's
    bytes (None where the dtype or the count is unknown)."""
    nb = DTYPE_BYTES.get(rec["dtype"]) if isinstance(rec["dtype"], str) else None
    if nb is not None and rec["In msg nelems"] is not None:
        rec["In msg size (MB)"] = rec["In msg nelems"] * nb / 1024**2
        rec["Out msg size (MB)"] = rec["Out msg nelems"] * nb / 1024**2
    else:
        rec["In msg size (MB)"] = None
        rec["Out msg size (MB)"] = None


EVENT_COLUMNS = ["rank", "ts", "dur", *METADATA_FIELDS, "In msg size (MB)", "Out msg size (MB)", "name", "event"]


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
        add_message_sizes(rec)
        rec["name"] = nm
        rec["event"] = i
        recs.append(rec)
    return recs
