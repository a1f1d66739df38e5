"""rocprofv3's own rocpd SQLite database (``<host>/<pid>_results.db``, rocprofv3's default output
from ROCm 7.0; madengine's ``rocprofv3`` preset writes it).

Schema as ROCm's rocprofiler-sdk writes it (its ``rocpd`` data-model SQL, schema_version 3):
every table carries the run's uuid as a suffix (``rocpd_kernel_dispatch_<uuid>``) and a view
without the suffix selects from it. This reader takes the views, or the suffixed tables (all of
them, when databases were merged) where a view is missing:

* ``rocpd_kernel_dispatch`` (``agent_id``, ``kernel_id``, ``queue_id``, ``stream_id``, ``start``,
  ``end`` in ns) -> ``kernel`` rows, named through ``rocpd_info_kernel_symbol.display_name``
  (rocprofiler-sdk's ``formatted_kernel_name``; ``kernel_name`` where empty), mapped to TraceLens's
  names as the CSV reader maps the same field (``rocm_common.tracelens_kernel_names``);
* ``rocpd_memory_copy`` (``start``, ``end``, ``name_id`` -> ``rocpd_string``, the copy direction
  such as ``MEMORY_COPY_HOST_TO_DEVICE``, ``dst_agent_id``, ``stream_id``) -> ``gpu_memcpy`` rows;
* ``rocpd_info_process`` ``init`` / ``fini`` -> the rocprof report's total time (as the JSON's
  metadata init/fini), for the first process (a note says so when there are more).

Newer schemas that move the times out of the dispatch rows (``start_id``/``end_id`` into a
``rocpd_timestamp`` table) are refused with one line naming the schema version.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from ..model.events import EventTable, TraceError
from .rocm_common import build_table, read_sqlite, row_part, tracelens_kernel_names

__all__ = ["is_rocpd", "sqlite_names", "read_rocpd"]

_SUFFIXED = re.compile(r"^(rocpd_[a-z_]+?)_([0-9a-fA-F]{8}_[0-9a-fA-F_]+|[0-9a-fA-F]{32})$")


def _names(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")}


def sqlite_names(data: bytes) -> set[str]:
    """Table and view names of an SQLite image (empty when SQLite cannot open it)."""
    con = sqlite3.connect(":memory:")
    try:
        con.deserialize(data)
        return _names(con)
    except sqlite3.DatabaseError:
        return set()
    finally:
        con.close()


def is_rocpd(names: set[str]) -> bool:
    return "rocpd_kernel_dispatch" in names or any(n.startswith("rocpd_kernel_dispatch_") for n in names)


def _source(names: set[str], base: str) -> str | None:
    """SQL for the rows of a rocpd relation: its view, else the union of its suffixed tables."""
    if base in names:
        return f'"{base}"'
    parts = sorted(n for n in names if (m := _SUFFIXED.match(n)) and m.group(1) == base)
    if not parts:
        return None
    return "(" + " UNION ALL ".join(f'SELECT * FROM "{p}"' for p in parts) + ")"


def _columns(con: sqlite3.Connection, source: str) -> set[str]:
    return {d[0] for d in con.execute(f"SELECT * FROM {source} LIMIT 0").description}


def read_rocpd(path: Path, data: bytes) -> EventTable:
    return read_sqlite(Path(path), data, _read, "rocpd database")


def _read(path: Path, con: sqlite3.Connection) -> EventTable:
    names = _names(con)
    meta_src = _source(names, "rocpd_metadata")
    meta = {str(t): str(v) for t, v in con.execute(f"SELECT tag, value FROM {meta_src}")} if meta_src else {}
    version = meta.get("schema_version", "?")
    kd = _source(names, "rocpd_kernel_dispatch")
    syms = _source(names, "rocpd_info_kernel_symbol")
    strings = _source(names, "rocpd_string")
    if kd is None or syms is None or strings is None:
        raise TraceError(path, "rocpd database without rocpd_kernel_dispatch, rocpd_info_kernel_symbol or rocpd_string")
    cols = _columns(con, kd)
    if not {"start", "end", "kernel_id"} <= cols:
        raise TraceError(
            path,
            f"rocpd schema_version {version}: kernel dispatches carry no start/end columns; "
            "rerun rocprofv3 with --output-format json",
        )
    name_col = "COALESCE(NULLIF(s.display_name, ''), s.kernel_name, '')"
    kern = con.execute(
        f'SELECT k.start, k."end", k.agent_id, k.stream_id, {name_col}, k.kernel_id FROM {kd} k '
        f"LEFT JOIN {syms} s ON s.id = k.kernel_id ORDER BY k.start, k.id"
    ).fetchall()
    copies = []
    mc = _source(names, "rocpd_memory_copy")
    if mc is not None:
        copies = con.execute(
            f'SELECT c.start, c."end", c.dst_agent_id, c.stream_id, str.string FROM {mc} c '
            f"LEFT JOIN {strings} str ON str.id = c.name_id ORDER BY c.start, c.id"
        ).fetchall()
    if not kern and not copies:
        raise TraceError(path, "no kernel dispatches or memory copies in the rocpd database (was --kernel-trace on?)")
    notes: list[str] = []
    init = fini = pid = None
    proc = _source(names, "rocpd_info_process")
    if proc is not None:
        rows = con.execute(f"SELECT pid, init, fini FROM {proc} ORDER BY id").fetchall()
        if rows:
            pid, init, fini = rows[0]
        if len(rows) > 1:
            notes.append(f"rocpd database holds {len(rows)} processes; total time is the first one's init..fini")

    columns = (0, 1, 2, 3)  # start, end, agent, queue

    parts = [
        row_part("kernel", kern, tracelens_kernel_names([r[4] or f"unknown_kernel_{r[5]}" for r in kern]), columns),
        row_part("gpu_memcpy", copies, [r[4] or "MEMORY_COPY" for r in copies], columns),
    ]
    heavy = {
        "source": f"rocprofv3 rocpd database (schema v{version})",
        "init_time": int(init) if init is not None else None,
        "fini_time": int(fini) if fini is not None else None,
        "pid": pid,
        "lite": False,
        "notes": notes,
    }
    return build_table(path, "rocpd_sqlite", parts, heavy)
