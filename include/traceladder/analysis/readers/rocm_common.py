"""What the ROCm readers (rocprofv3 JSON/CSV, rocpd, RPD SQLite) share: TraceLens's kernel
names and the construction of their :class:`~traceladder.analysis.model.events.EventTable`.
:mod:`.heavy` only detects the format and dispatches; the readers import from here."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..model.events import MISSING, EventTable, TraceError, Interner

__all__ = ["truncate_name", "tracelens_kernel_names", "build_table"]


# ---------------------------------------------------------------------------------
# kernel names
def truncate_name(name: str) -> str:
    """rocprofiler-sdk's ``truncate_name`` (the rule behind ``truncated_kernel_name``).

    From the end, skip spaces and whole bracket groups ``(...)``, ``<...>``, ``[...]``;
    the name is then the run of characters back to the previous space or ``:``.
    ``void ns::f<int>(int*) [clone .kd]`` -> ``f``; ``Cijk_..._WG32_8_1.kd`` unchanged.
    """
    i = len(name) - 1
    depth = 0
    open_t = close_t = ""
    while i >= 0:
        c = name[i]
        if depth == 0:
            if c == ")":
                depth, open_t, close_t = 1, ")", "("
            elif c == ">":
                depth, open_t, close_t = 1, ">", "<"
            elif c == "]":
                depth, open_t, close_t = 1, "]", "["
            elif c == " ":
                i -= 1
                continue
            if depth == 0:
                break
        else:
            if c == open_t:
                depth += 1
            if c == close_t:
                depth -= 1
        i -= 1
    end = i
    while i >= 0 and name[i] != " " and name[i] != ":":
        i -= 1
    return name[i + 1 : end + 1]


def _has_code_object_suffix(name: str) -> bool:
    s = name.rstrip()
    return s.endswith(".kd") or s.endswith("[clone .kd]")


def _ends_with_group(name: str) -> bool:
    s = name.rstrip()
    return bool(s) and s[-1] in ")>]"


def tracelens_kernel_names(names: list[str]) -> list[str]:
    """Map the kernel names of a CSV / RPD trace to the names TraceLens reports.

    TraceLens's rocprof report names a kernel by rocprofiler-sdk's
    ``truncated_kernel_name`` = ``truncate_name(demangled symbol)``, where the symbol
    carries the code-object suffix (``foo.kd``, or ``... [clone .kd]`` once demangled).
    rocprofv3's CSV ``Kernel_Name`` (the ``formatted_kernel_name``) and the HIP kernel
    names in RPD databases drop that suffix, so a plain (non-C++) kernel such as
    ``__amd_rocclr_copyBuffer`` or a Tensile ``Cijk_...`` kernel would lose its ``.kd``.

    Rule (checked on all 9,889 kernel symbols of the reference rocprofv3 trace):
    ``truncate_name(name)``, plus ``.kd`` on names that do not end in a bracket group,
    when the trace's names are of the suffix-less kind: no name carries ``.kd`` /
    ``[clone .kd]`` and at least one is a full C++ signature (ends in ``)``).  Traces
    already written with truncated or suffixed names are left as they are.
    """
    uniq = list(dict.fromkeys(names))
    add_kd = not any(_has_code_object_suffix(n) for n in uniq) and any(n.rstrip().endswith(")") for n in uniq)
    out: dict[str, str] = {}
    for n in uniq:
        tr = truncate_name(n)
        if add_kd and not _ends_with_group(n) and tr:
            tr += ".kd"
        out[n] = tr
    return [out[n] for n in names]


# ---------------------------------------------------------------------------------
# EventTable construction
def row_part(
    cat: str, rows: list[tuple[Any, ...]], names: list[str], columns: tuple[int, int, int, int]
) -> dict[str, Any]:
    """A build_table part from SQL rows; ``columns`` are the row positions of start ns, end ns,
    the agent (the pid) and the queue (the tid and the stream)."""
    start, end, agent, queue = columns
    return {
        "cat": cat,
        "names": names,
        "start": np.fromiter((r[start] for r in rows), dtype=np.int64, count=len(rows)),
        "end": np.fromiter((r[end] for r in rows), dtype=np.int64, count=len(rows)),
        "pid": [r[agent] for r in rows],
        "tid": [r[queue] for r in rows],
        "stream": [r[queue] for r in rows],
    }


def build_table(
    path: Path,
    fmt: str,
    parts: list[dict[str, Any]],
    heavy_meta: dict[str, Any],
) -> EventTable:
    """One EventTable from parts, each ``{"cat": str, "names": list[str], "start":
    int64 ns, "end": int64 ns, "pid": list, "tid": list, "stream": list | None,
    "corr": int64 | None}`` (all of one length per part)."""
    cat_i, name_i, pid_i, tid_i, stream_i = Interner(), Interner(), Interner(), Interner(), Interner()
    ph_i = Interner()
    ph_i.code("X")
    cats, names, pids, tids, streams, starts, ends, corrs = [], [], [], [], [], [], [], []
    for p in parts:
        n = len(p["start"])
        if n == 0:
            continue
        c = cat_i.code(p["cat"])
        cats.append(np.full(n, c, dtype=np.int32))
        names.append(name_i.encode(list(p["names"])))
        pids.append(pid_i.encode(list(p["pid"])))
        tids.append(tid_i.encode(list(p["tid"])))
        s = p.get("stream")
        if s is None:
            streams.append(np.full(n, -1, dtype=np.int64))
        else:
            streams.append(stream_i.encode(list(s)).astype(np.int64))
        starts.append(np.asarray(p["start"], dtype=np.int64))
        ends.append(np.asarray(p["end"], dtype=np.int64))
        cr = p.get("corr")
        corrs.append(np.full(n, MISSING, dtype=np.int64) if cr is None else np.asarray(cr, dtype=np.int64))
    if not cats:
        raise TraceError(path, "no kernel dispatches or memory copies in trace")
    cat = np.concatenate(cats)
    ns_start = np.concatenate(starts)
    ns_end = np.concatenate(ends)
    n = cat.shape[0]
    meta = {"ns_start": ns_start, "ns_end": ns_end, "heavy": heavy_meta, "thread_names": {}, "process_names": {}}
    return EventTable(
        path=Path(path),
        fmt=fmt,
        cat=cat,
        cats=cat_i.values,
        ph=np.zeros(n, dtype=np.int32),
        phs=ph_i.values,
        name=np.concatenate(names),
        names=[str(v) for v in name_i.values],
        pid=np.concatenate(pids),
        pids=pid_i.values,
        tid=np.concatenate(tids),
        tids=tid_i.values,
        ts=ns_start / 1e3,
        dur=(ns_end - ns_start) / 1e3,
        flow_id=np.full(n, MISSING, dtype=np.int64),
        corr=np.concatenate(corrs),
        ext=np.full(n, MISSING, dtype=np.int64),
        stream=np.concatenate(streams),
        streams=stream_i.values,
        has_args=np.zeros(n, dtype=bool),
        raw_args=[None] * n,
        metadata=meta,
    )


def read_sqlite(
    path: Path, data: bytes, read: Callable[[Path, sqlite3.Connection], EventTable], what: str
) -> EventTable:
    """A SQLite trace (rocpd, RPD) from its bytes in memory: ``read`` over the database. One that
    SQLite cannot read, at open or while read, is a TraceError naming the file: ``unreadable
    <what> (<SQLite's reason>)``."""
    con = sqlite3.connect(":memory:")
    try:
        con.deserialize(data)
        return read(path, con)
    except sqlite3.DatabaseError as exc:
        raise TraceError(path, f"unreadable {what} ({exc})") from None
    finally:
        con.close()
