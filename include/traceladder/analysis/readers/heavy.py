"""Format detection and shared helpers for the "heavy lens" traces.

The heavy lenses are rocprofv3 (JSON and CSV output) and the RPD-style SQLite
databases (rocm-trace-lite's ``trace.db``, rpd's ``trace.rpd``).  Each reader fills the
same :class:`~traceladder.analysis.model.events.EventTable` as the PyTorch reader:

* ``cat``: ``kernel`` (kernel dispatches), ``gpu_memcpy`` (memory copies),
  ``gpu_memset`` (RPD ``FillBuffer`` ops), ``hip_api`` / ``hsa_api`` (host API calls);
* ``name``: for kernels, TraceLens's name (rocprofiler-sdk's ``truncated_kernel_name``,
  see :func:`tracelens_kernel_names`);
* ``ts`` / ``dur``: float microseconds, as for every trace; the exact integer
  nanoseconds of the source stay in ``metadata["ns_start"]`` / ``metadata["ns_end"]``
  (int64 arrays aligned with the rows), since TraceLens's rocprof report computes on
  the raw nanoseconds;
* ``tid``: the stream (GPU work) or thread (API calls); ``pid``: the process / GPU.

``metadata["heavy"]`` describes the source (``source``, ``init_time``/``fini_time`` in
ns when the trace has them, ``lite``, ``notes``).

The shared kernel-name and table helpers live in :mod:`.rocm_common`; this module only
detects the format and dispatches to a reader.

Detection is by content, never only by name (:func:`sniff`):
  * SQLite magic ``SQLite format 3\\0`` -> rocprofv3's rocpd database when it has
    ``rocpd_kernel_dispatch`` (:mod:`.rocpd_db`), else an RPD-style database (tables decide,
    see :mod:`.rpd_sqlite`);
  * a JSON object whose first key is ``"rocprofiler-sdk-tool"`` -> rocprofv3 JSON;
  * text whose header line has ``Start_Timestamp`` and ``End_Timestamp`` -> rocprofv3 CSV;
  * a directory -> a folder of rocprofv3 CSV files.
A file named ``*.csv`` / ``*.db`` / ``*.rpd`` whose content is none of these raises
TraceError (a broken CSV, a database of another schema); anything else goes on to the
PyTorch JSON reader.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..model.events import EventTable, TraceError

__all__ = ["HEAVY_FORMATS", "sniff", "read_heavy"]

#: EventTable.fmt values of the heavy-lens readers
HEAVY_FORMATS = ("rocprofv3_json", "rocprofv3_csv", "rpd_sqlite", "rocpd_sqlite")

_SQLITE_MAGIC = b"SQLite format 3\x00"
_ROCPROF_JSON_RE = re.compile(rb'^\s*\{\s*"rocprofiler-sdk-tool"\s*:')
_CSV_SUFFIXES = (".csv", ".csv.gz")
_DB_SUFFIXES = (".db", ".db.gz", ".rpd", ".rpd.gz")


def _first_line(data: bytes) -> bytes:
    head = data[:65536]
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    return head.split(b"\n", 1)[0]


def sniff(path: Path, data: bytes | None) -> str | None:
    """``rocprofv3_json`` | ``rocprofv3_csv`` | ``sqlite`` | ``dir`` | None (not heavy)."""
    if data is None:
        return "dir"
    if data[:16] == _SQLITE_MAGIC:
        return "sqlite"
    if _ROCPROF_JSON_RE.match(data[:4096]):
        return "rocprofv3_json"
    line = _first_line(data)
    if b"Start_Timestamp" in line and b"End_Timestamp" in line:
        return "rocprofv3_csv"
    return None


def read_heavy(path: Path, data: bytes | None, split: bool = False) -> EventTable | None:
    """Read a rocprofv3 / RPD trace (``data`` = the file's bytes, gunzipped; None for a
    directory).  Returns None when the content is not a heavy-lens trace (the caller
    then tries the PyTorch reader); bad heavy-lens input raises TraceError.  ``split``: a
    big rocprofv3 JSON is decoded by two processes (a caller with no threads only)."""
    path = Path(path)
    kind = sniff(path, data)
    low = path.name.lower()
    if kind is None:
        if low.endswith(_CSV_SUFFIXES):
            raise TraceError(
                path,
                "unrecognised CSV: expected a rocprofv3 kernel_trace.csv "
                "(header with Kernel_Name, Start_Timestamp, End_Timestamp)",
            )
        if low.endswith(_DB_SUFFIXES):
            raise TraceError(path, "not an SQLite database (expected a rocm-trace-lite trace.db or rpd trace.rpd)")
        return None
    if kind == "dir":
        from .rocprof_csv import read_rocprof_csv_dir

        return read_rocprof_csv_dir(path)
    if kind == "sqlite":
        from .rocpd_db import is_rocpd, read_rocpd, sqlite_names
        from .rpd_sqlite import read_rpd

        if is_rocpd(sqlite_names(data)):  # rocprofv3's own database (ROCm 7's default)
            return read_rocpd(path, data)

        return read_rpd(path, data)
    if kind == "rocprofv3_json":
        from .rocprof_json import read_rocprof_json

        return read_rocprof_json(path, data, split=split)
    from .rocprof_csv import read_rocprof_csv

    return read_rocprof_csv(path, data)
