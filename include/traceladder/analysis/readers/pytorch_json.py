"""PyTorch profiler (kineto) Chrome-trace JSON reader: ``.json`` and ``.json.gz``.

Decodes with msgspec typed Structs; each event's ``args`` stays a ``msgspec.Raw`` and
only the link fields (``correlation``, ``External id``, ``stream``) are decoded, in one
batch, for the categories that take part in CPU->GPU linking.  Everything else in
``args`` is decoded later, per event, only where a report needs it.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ..events import MISSING, EventTable, TraceError, _Interner

__all__ = ["read_pytorch_json", "load_bytes", "looks_like_pytorch_json"]


class _Event(msgspec.Struct):
    ph: str = ""
    cat: str | None = None
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: float | None = None
    dur: float | None = None
    id: Any = None
    args: msgspec.Raw = msgspec.Raw(b"")


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] | None = None
    distributedInfo: msgspec.Raw = msgspec.Raw(b"")
    deviceProperties: msgspec.Raw = msgspec.Raw(b"")
    schemaVersion: Any = None
    rocprofiler_sdk_tool: msgspec.Raw = msgspec.field(name="rocprofiler-sdk-tool", default=msgspec.Raw(b""))


class _LinkArgs(msgspec.Struct):
    correlation: Any = None
    external_id: Any = msgspec.field(name="External id", default=None)
    stream: Any = None


# categories whose args are never needed for linking
_NO_LINK_ARGS = {"python_function", "cpu_instant_event", "ac2g", "fwdbwd", "Trace", None}

_GZIP_MAGIC = b"\x1f\x8b"
_SQLITE_MAGIC = b"SQLite format 3\x00"


def load_bytes(path: Path) -> bytes:
    """Read a file, gunzipping if it is gzip; bad input raises TraceError."""
    path = Path(path)
    if not path.exists():
        raise TraceError(path, "no such file")
    if not path.is_file():
        raise TraceError(path, "not a regular file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if not data:
        raise TraceError(path, "empty file")
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except EOFError:
            raise TraceError(path, "truncated gzip stream") from None
        except (OSError, zlib.error) as exc:
            raise TraceError(path, f"corrupt gzip data ({exc})") from None
        if not data.strip():
            raise TraceError(path, "empty file (after gunzip)")
    elif path.name.endswith(".gz"):
        raise TraceError(path, "corrupt gzip data (no gzip header)")
    return data


def looks_like_pytorch_json(data: bytes) -> bool:
    head = data[:4096].lstrip()
    return head.startswith(b"{") and b"traceEvents" in data[:1 << 20] if head else False


def _to_int(v: Any) -> int:
    if v is None or isinstance(v, bool):
        return MISSING
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if v == v else MISSING
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return MISSING
    return MISSING


def read_pytorch_json(path: Path, data: bytes | None = None) -> EventTable:
    path = Path(path)
    if data is None:
        data = load_bytes(path)
    head = data[:64].lstrip()
    if head.startswith(_SQLITE_MAGIC):
        raise TraceError(path, "unsupported format: SQLite database (rpd / rocpd), not a PyTorch JSON trace")
    if not head.startswith(b"{"):
        raise TraceError(path, "unknown format: not a JSON object (expected a PyTorch profiler trace)")
    try:
        doc = msgspec.json.decode(data, type=_Trace)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"unexpected trace structure ({exc})") from None
    except msgspec.DecodeError as exc:
        msg = str(exc)
        if "truncated" in msg.lower():
            raise TraceError(path, "truncated JSON (file ends early)") from None
        raise TraceError(path, f"invalid JSON ({msg})") from None
    if doc.traceEvents is None:
        if len(doc.rocprofiler_sdk_tool):
            raise TraceError(path, "unsupported format: rocprofv3 JSON (no PyTorch traceEvents)")
        raise TraceError(path, "unknown format: JSON without traceEvents")
    evs = doc.traceEvents
    if not evs:
        raise TraceError(path, "no events in trace")

    n = len(evs)
    cat_i = _Interner()
    ph_i = _Interner()
    name_i = _Interner()
    pid_i = _Interner()
    tid_i = _Interner()
    cat_list = [e.cat for e in evs]
    cat = cat_i.encode(cat_list)
    ph = ph_i.encode([e.ph for e in evs])
    name = name_i.encode([e.name for e in evs])
    if not all(type(v) is str for v in name_i.values):
        name_i.values[:] = [v if isinstance(v, str) else str(v) for v in name_i.values]
    pid = pid_i.encode([e.pid for e in evs])
    tid = tid_i.encode([e.tid for e in evs])
    ts = np.array([e.ts for e in evs], dtype=np.float64)
    dur = np.array([e.dur for e in evs], dtype=np.float64)
    raw_args = [e.args for e in evs]
    has_args = np.fromiter(map(len, raw_args), dtype=np.int64, count=n) > 0

    flow_id = np.full(n, MISSING, dtype=np.int64)
    ids = [e.id for e in evs]
    has_id = [i for i, v in enumerate(ids) if v is not None]
    if has_id:
        flow_id[has_id] = [v if type(v) is int else _to_int(v) for v in (ids[i] for i in has_id)]

    corr = np.full(n, MISSING, dtype=np.int64)
    ext = np.full(n, MISSING, dtype=np.int64)
    stream = np.full(n, -1, dtype=np.int64)
    stream_i = _Interner()
    no_link_codes = [c for c, v in enumerate(cat_i.values) if v in _NO_LINK_ARGS]
    want = has_args & ~np.isin(cat, np.asarray(no_link_codes, dtype=np.int32))
    idx = np.flatnonzero(want)
    if idx.size:
        buf = b"[" + b",".join([raw_args[i] for i in idx.tolist()]) + b"]"
        try:
            link = msgspec.json.decode(buf, type=list[_LinkArgs])
        except msgspec.DecodeError as exc:
            raise TraceError(path, f"malformed event args ({exc})") from None
        c_list = [c if type(c) is int else _to_int(c) for c in (a.correlation for a in link)]
        e_list = [c if type(c) is int else _to_int(c) for c in (a.external_id for a in link)]
        corr[idx] = np.asarray(c_list, dtype=np.int64)
        ext[idx] = np.asarray(e_list, dtype=np.int64)
        s_vals = [a.stream for a in link]
        s_codes = np.fromiter(
            (-1 if s is None else stream_i.code(s if not isinstance(s, list) else str(s)) for s in s_vals),
            dtype=np.int64,
            count=len(s_vals),
        )
        stream[idx] = s_codes

    # metadata: thread / process names ("M" events), distributed info
    meta: dict[str, Any] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    process_names: dict[Any, str] = {}
    if "M" in ph_i.codes:
        m_idx = np.flatnonzero(ph == ph_i.codes["M"])
        for i in m_idx.tolist():
            nm = name_i.values[name[i]]
            if nm not in ("thread_name", "process_name"):
                continue
            try:
                a = msgspec.json.decode(raw_args[i]) if len(raw_args[i]) else {}
            except msgspec.DecodeError:
                continue
            if not isinstance(a, dict) or "name" not in a:
                continue
            if nm == "thread_name":
                thread_names[(evs[i].pid, evs[i].tid)] = str(a["name"])
            else:
                process_names[evs[i].pid] = str(a["name"])
    meta["thread_names"] = thread_names
    meta["process_names"] = process_names
    if len(doc.distributedInfo):
        try:
            meta["distributedInfo"] = msgspec.json.decode(doc.distributedInfo)
        except msgspec.DecodeError:
            pass
    meta["schemaVersion"] = doc.schemaVersion
    del evs, doc

    return EventTable(
        path=path,
        fmt="pytorch_json",
        cat=cat,
        cats=cat_i.values,
        ph=ph,
        phs=ph_i.values,
        name=name,
        names=name_i.values,
        pid=pid,
        pids=pid_i.values,
        tid=tid,
        tids=tid_i.values,
        ts=ts,
        dur=dur,
        flow_id=flow_id,
        corr=corr,
        ext=ext,
        stream=stream,
        streams=stream_i.values,
        has_args=has_args,
        raw_args=raw_args,
        metadata=meta,
    )
