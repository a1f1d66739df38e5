"""rocprofv3 CSV reader (``--output-format csv``; also ``.csv.gz``).

* ``kernel_trace.csv`` or ``<pid>_kernel_trace.csv`` is a complete input: one ``kernel``
  row per line (``Kernel_Name``, ``Start_Timestamp``, ``End_Timestamp`` in ns; ``Stream_Id``,
  ``Agent_Id``, ``Correlation_Id`` when present).  Kernel names are mapped to
  TraceLens's truncated names (:func:`.rocm_common.tracelens_kernel_names`).
* The matching ``memory_copy_trace.csv`` / ``<pid>_memory_copy_trace.csv`` beside it (same
  prefix, plain or ``.gz``) is read too: one ``gpu_memcpy`` row per copy.
* A folder: every ``*kernel_trace.csv[.gz]`` in it (or one level down, rocprofv3's
  ``<dir>/<hostname>/``) with its memory-copy file; several processes are combined (a
  note says so).
* A lone ``memory_copy_trace.csv`` is not an input (no kernels): TraceError.
A header without the needed columns, non-integer timestamps, a truncated row or a file
with no rows raise TraceError.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from traceladder.core.errors import first_line

from ..model.events import EventTable, TraceError
from .rocm_common import build_table, tracelens_kernel_names

__all__ = ["read_rocprof_csv", "read_rocprof_csv_dir"]

_K = "kernel_trace.csv"
_M = "memory_copy_trace.csv"


def _load(path: Path) -> bytes:
    from .pytorch_json import load_bytes

    return load_bytes(path)


def _frame(path: Path, data: bytes, need: tuple[str, ...], want: tuple[str, ...]) -> pd.DataFrame:
    text = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    header = text.split(b"\n", 1)[0].decode("utf-8", "replace")
    cols = [c.strip().strip('"') for c in header.split(",")]
    missing = [c for c in need if c not in cols]
    if missing:
        raise TraceError(path, f"broken rocprofv3 CSV: header lacks {', '.join(missing)}")
    use = [c for c in need + want if c in cols]
    try:
        df = pd.read_csv(
            io.BytesIO(text),
            usecols=use,
            dtype={c: str for c in use if c not in ("Start_Timestamp", "End_Timestamp")},
            keep_default_na=False,
            engine="c",
        )
    except (pd.errors.ParserError, ValueError, UnicodeDecodeError) as exc:
        raise TraceError(path, f"broken rocprofv3 CSV ({first_line(exc)})") from None
    for c in ("Start_Timestamp", "End_Timestamp"):
        col = df[c]
        if not pd.api.types.is_integer_dtype(col):
            num = pd.to_numeric(col, errors="coerce")
            bad = num.isna() | (num != num.round())
            if bad.any():
                row = int(np.flatnonzero(bad.to_numpy())[0]) + 2
                raise TraceError(path, f"broken rocprofv3 CSV: {c} is not an integer on line {row}")
            df[c] = num.astype(np.int64)
    return df


def _memcpy_sibling(kpath: Path) -> Path | None:
    name = kpath.name
    low = name.lower()
    for suf in (_K + ".gz", _K):
        if low.endswith(suf):
            prefix = name[: len(name) - len(suf)]
            for msuf in (_M, _M + ".gz"):
                cand = kpath.with_name(prefix + msuf)
                if cand.is_file():
                    return cand
    return None


def _kernel_part(path: Path, data: bytes) -> dict:
    df = _frame(
        path,
        data,
        ("Kernel_Name", "Start_Timestamp", "End_Timestamp"),
        ("Stream_Id", "Agent_Id", "Correlation_Id", "Queue_Id"),
    )
    n = len(df)
    stream = (
        df["Stream_Id"].tolist() if "Stream_Id" in df else (df["Queue_Id"].tolist() if "Queue_Id" in df else [0] * n)
    )
    return {
        "cat": "kernel",
        "names": df["Kernel_Name"].tolist(),
        "start": df["Start_Timestamp"].to_numpy(np.int64),
        "end": df["End_Timestamp"].to_numpy(np.int64),
        "pid": df["Agent_Id"].tolist() if "Agent_Id" in df else [0] * n,
        "tid": stream,
        "stream": stream,
    }


def _copy_part(path: Path, data: bytes) -> dict:
    df = _frame(
        path, data, ("Start_Timestamp", "End_Timestamp"), ("Direction", "Kind", "Stream_Id", "Destination_Agent_Id")
    )
    n = len(df)
    names = df["Direction"].tolist() if "Direction" in df else ["MEMORY_COPY"] * n
    stream = df["Stream_Id"].tolist() if "Stream_Id" in df else [0] * n
    return {
        "cat": "gpu_memcpy",
        "names": names,
        "start": df["Start_Timestamp"].to_numpy(np.int64),
        "end": df["End_Timestamp"].to_numpy(np.int64),
        "pid": df["Destination_Agent_Id"].tolist() if "Destination_Agent_Id" in df else [0] * n,
        "tid": stream,
        "stream": stream,
    }


def _is_kernel_csv(data: bytes) -> bool:
    line = data[:65536].split(b"\n", 1)[0]
    return b"Kernel_Name" in line


def _table(path: Path, kernel_files: list[tuple[Path, bytes]], notes: list[str]) -> EventTable:
    kparts, cparts, used = [], [], []
    for kp, kdata in kernel_files:
        kparts.append(_kernel_part(kp, kdata))
        used.append(kp.name)
        mp = _memcpy_sibling(kp)
        if mp is not None:
            cparts.append(_copy_part(mp, _load(mp)))
            used.append(mp.name)
    if len(kernel_files) > 1:
        notes.append(f"{len(kernel_files)} rocprofv3 kernel traces combined: {', '.join(used)}")
    else:
        notes.append("files read: " + ", ".join(used))
    if not kparts:
        raise TraceError(path, "no rocprofv3 kernel trace")
    if sum(len(p["start"]) for p in kparts) == 0:
        raise TraceError(path, "no kernel dispatches in rocprofv3 CSV (header only)")
    # one truncation decision over all names of the run
    all_names = [n for p in kparts for n in p["names"]]
    mapped = tracelens_kernel_names(all_names)
    i = 0
    for p in kparts:
        k = len(p["names"])
        p["names"] = mapped[i : i + k]
        i += k
    heavy = {"source": "rocprofv3 CSV", "init_time": None, "fini_time": None, "lite": False, "notes": notes}
    return build_table(path, "rocprofv3_csv", kparts + cparts, heavy)


def read_rocprof_csv(path: Path, data: bytes) -> EventTable:
    path = Path(path)
    if not _is_kernel_csv(data):
        if b"Direction" in data[:65536].split(b"\n", 1)[0] or path.name.lower().endswith((_M, _M + ".gz")):
            raise TraceError(
                path, "a rocprofv3 memory copy trace alone has no kernels: pass its kernel_trace.csv or the folder"
            )
        raise TraceError(path, "unrecognised rocprofv3 CSV (no Kernel_Name column): only kernel_trace.csv is an input")
    return _table(path, [(path, data)], [])


def read_rocprof_csv_dir(path: Path) -> EventTable:
    path = Path(path)
    found: list[Path] = []
    for d in [path] + sorted(p for p in path.iterdir() if p.is_dir()):
        found.extend(sorted(p for p in d.iterdir() if p.is_file() and p.name.lower().endswith((_K, _K + ".gz"))))
        if found:
            break
    if not found:
        raise TraceError(path, "directory without a rocprofv3 kernel_trace.csv")
    files = []
    for p in found:
        data = _load(p)
        if not _is_kernel_csv(data):
            raise TraceError(p, "broken rocprofv3 CSV: header lacks Kernel_Name")
        files.append((p, data))
    return _table(path, files, [])
