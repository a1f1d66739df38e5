"""RPD-style SQLite reader: rocm-trace-lite's ``trace.db`` and rpd's ``trace.rpd``
(schema v2 and v3), plain or gzipped.

Keyed on the tables and columns present, never on the tool's name:
  * required: ``rocpd_string(id, string)`` and ``rocpd_op`` with ``start``, ``end``,
    ``description_id``, ``opType_id`` (ns times); ``gpuId`` when present (ops with
    ``gpuId < 0`` are host markers and are skipped);
  * ``opType`` ``KernelExecution`` (any type containing ``Kernel``) -> ``kernel`` row named
    by ``description`` (falling back to ``rocpd_kernelapi.kernelName_id`` through
    ``rocpd_api_ops`` when the description is empty; that table is keyed by ``api_id``
    in v2 / rocm-trace-lite and by ``api_ptr_id`` in v3); ``Copy*`` -> ``gpu_memcpy``;
    ``FillBuffer`` -> ``gpu_memset``; markers and barriers are skipped;
  * ``rocpd_metadata(tag, value)`` when present: ``schema_version`` (rpd v3 writes it).
A database that lacks the required tables/columns (e.g. rocprofv3's own ``rocpd``
database of ROCm 7) raises TraceError, as does a file that SQLite cannot open.

rocm-trace-lite lite mode (our rule, documented in analysis.json's notes): a
``rocpd_metadata`` tag ``mode`` (also ``rtl_mode`` / ``trace_mode``) decides when
present (``lite`` -> lite); without one, the database is taken as rocm-trace-lite lite
mode when its file name is ``trace.db`` (rtl's default output, less ``.gz``) and it
has no rpd schema marks (``schema_version`` tag, ``rocpd_kernelop`` /
``rocpd_copyop`` / ``rocpd_barrierop`` tables).  Lite mode skips packets that already
carry a completion signal, so RCCL kernels are likely missing.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ..model.events import EventTable, TraceError
from .rocm_common import build_table, read_sqlite, row_part, tracelens_kernel_names

__all__ = ["read_rpd", "is_lite"]

_RPD_MARK_TABLES = ("rocpd_kernelop", "rocpd_copyop", "rocpd_barrierop")
_MODE_TAGS = ("mode", "rtl_mode", "trace_mode")


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def is_lite(path: Path, tables: set[str], meta: dict[str, str]) -> bool:
    for tag in _MODE_TAGS:
        if tag in meta:
            return meta[tag].strip().lower() == "lite"
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    rpd_marks = "schema_version" in meta or any(t in tables for t in _RPD_MARK_TABLES)
    return name == "trace.db" and not rpd_marks


def read_rpd(path: Path, data: bytes) -> EventTable:
    return read_sqlite(Path(path), data, _read, "SQLite database")


def _read(path: Path, con: sqlite3.Connection) -> EventTable:
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")}
    need = {"rocpd_op", "rocpd_string"}
    if not need <= tables:
        hint = ""
        if any(t.startswith("rocpd_info") or t.startswith("rocpd_kernel_dispatch") for t in tables):
            hint = " (this looks like a rocprofv3 rocpd database: rerun rocprofv3 with --output-format json or csv)"
        raise TraceError(
            path,
            "SQLite database is neither rocm-trace-lite nor rpd schema: "
            f"no {', '.join(sorted(need - tables))} table{hint}",
        )
    op_cols = _columns(con, "rocpd_op")
    missing = [c for c in ("start", "end", "description_id", "opType_id") if c not in op_cols]
    if missing or not {"id", "string"} <= _columns(con, "rocpd_string"):
        raise TraceError(
            path,
            "SQLite database is neither rocm-trace-lite nor rpd schema: "
            f"rocpd_op lacks {', '.join(missing) or 'nothing'}",
        )
    meta: dict[str, str] = {}
    if "rocpd_metadata" in tables and {"tag", "value"} <= _columns(con, "rocpd_metadata"):
        meta = {str(t): str(v) for t, v in con.execute("SELECT tag, value FROM rocpd_metadata")}
    schema = meta.get("schema_version") or ("3" if "rocpd_ustring" in tables else "2")

    gpu = "o.gpuId" if "gpuId" in op_cols else "0"
    queue = "o.queueId" if "queueId" in op_cols else "0"
    rows = con.execute(
        f"SELECT o.id, {gpu}, {queue}, o.start, o.end, d.string, t.string FROM rocpd_op o "
        "LEFT JOIN rocpd_string d ON d.id = o.description_id "
        "LEFT JOIN rocpd_string t ON t.id = o.opType_id "
        "ORDER BY o.id"
    ).fetchall()
    kern, copy, fill = [], [], []
    for r in rows:
        if r[1] is not None and r[1] < 0:
            continue
        op = r[6] or ""
        if "Kernel" in op:
            kern.append(r)
        elif op.startswith("Copy"):
            copy.append(r)
        elif op.startswith("Fill"):
            fill.append(r)
    # empty kernel descriptions: the launch's kernel name (rocpd_kernelapi)
    if any(not r[5] for r in kern) and {"rocpd_kernelapi", "rocpd_api_ops"} <= tables:
        kcols = _columns(con, "rocpd_kernelapi")
        key = "api_id" if "api_id" in kcols else ("api_ptr_id" if "api_ptr_id" in kcols else None)
        if key and "kernelName_id" in kcols:
            names = dict(
                con.execute(
                    f"SELECT ao.op_id, s.string FROM rocpd_api_ops ao JOIN rocpd_kernelapi k ON k.{key} = ao.api_id "
                    "JOIN rocpd_string s ON s.id = k.kernelName_id"
                ).fetchall()
            )
            kern = [r if r[5] else r[:5] + (names.get(r[0], ""),) + r[6:] for r in kern]
    if not kern and not copy and not fill:
        raise TraceError(path, "no kernel executions or copies in rocpd_op")
    for r in kern + copy + fill:
        if not isinstance(r[3], int) or not isinstance(r[4], int):
            raise TraceError(path, f"rocpd_op row {r[0]}: start/end are not integer ns")

    columns = (3, 4, 1, 2)  # start, end, agent, queue

    lite = is_lite(path, tables, meta)
    parts = [
        row_part("kernel", kern, tracelens_kernel_names([r[5] or "" for r in kern]), columns),
        row_part("gpu_memcpy", copy, [r[6] for r in copy], columns),
        row_part("gpu_memset", fill, [r[6] for r in fill], columns),
    ]
    source = "rocm-trace-lite trace.db (lite mode)" if lite else f"RPD-style SQLite (schema v{schema})"
    heavy: dict[str, Any] = {
        "source": source,
        "init_time": None,
        "fini_time": None,
        "lite": lite,
        "schema_version": schema,
        "notes": [],
    }
    return build_table(path, "rpd_sqlite", parts, heavy)
