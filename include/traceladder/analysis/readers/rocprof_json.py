"""rocprofv3 JSON reader (``rocprofv3 --output-format json``: ``<pid>_results.json``).

Top level ``{"rocprofiler-sdk-tool": [ {metadata, kernel_symbols, strings,
buffer_records, ...} ]}``; all times are ns.  As TraceLens v1.0.0's ``RocprofParser``
does, only the first entry of the list is read (a note says so when there are more):

* ``buffer_records.kernel_dispatch`` -> ``kernel`` rows, named by the kernel symbol's
  ``truncated_kernel_name`` (else ``formatted_kernel_name``, else ``kernel_name``, else
  ``unknown_kernel_<id>``: TraceLens's order), on ``stream_id.handle``;
* ``buffer_records.memory_copy`` -> ``gpu_memcpy`` rows, named by their operation
  (``MEMORY_COPY_DEVICE_TO_HOST`` ...);
* ``buffer_records.hip_api`` / ``hsa_api`` -> ``hip_api`` / ``hsa_api`` rows, named from
  ``strings.buffer_records[kind].operations[operation]``;
* ``metadata.init_time`` / ``fini_time`` -> ``metadata["heavy"]`` (the rocprof report's
  total time).

Decoding uses msgspec Structs that name only these fields, so the agents, code
objects, counters and all other records are skipped without building Python objects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mmap

import msgspec
import numpy as np

from ..model.events import beside
from ..model.events import EventTable, TraceError
from .rocm_common import build_table

__all__ = ["read_rocprof_json"]


class _Handle(msgspec.Struct, gc=False):
    handle: int = 0


class _Corr(msgspec.Struct, gc=False):
    internal: int = 0


def _h() -> _Handle:
    return _Handle()


class _DispatchInfo(msgspec.Struct, gc=False):
    kernel_id: int | None = None
    agent_id: _Handle = msgspec.field(default_factory=_h)


class _Dispatch(msgspec.Struct, gc=False):
    start_timestamp: int = 0
    end_timestamp: int = 0
    correlation_id: _Corr | None = None
    dispatch_info: _DispatchInfo = msgspec.field(default_factory=_DispatchInfo)
    stream_id: _Handle = msgspec.field(default_factory=_h)


class _Copy(msgspec.Struct, gc=False):
    start_timestamp: int = 0
    end_timestamp: int = 0
    kind: int = 0
    operation: int = 0
    stream_id: _Handle = msgspec.field(default_factory=_h)
    dst_agent_id: _Handle = msgspec.field(default_factory=_h)
    correlation_id: _Corr | None = None


class _Api(msgspec.Struct, gc=False):
    start_timestamp: int = 0
    end_timestamp: int = 0
    kind: int = 0
    operation: int = 0
    thread_id: int = 0
    correlation_id: _Corr | None = None


class _Buffers(msgspec.Struct):
    # left raw (each a view of the file's bytes), decoded later in batches: see _dispatch_columns
    kernel_dispatch: list[msgspec.Raw] = []
    memory_copy: list[_Copy] = []
    hip_api: list[_Api] = []
    hsa_api: list[_Api] = []


class _Symbol(msgspec.Struct):
    kernel_id: int | None = None
    kernel_name: str | None = None
    formatted_kernel_name: str | None = None
    truncated_kernel_name: str | None = None


class _KindOps(msgspec.Struct):
    kind: str = ""
    operations: list[str] = []


class _Strings(msgspec.Struct):
    buffer_records: list[_KindOps] = []


class _Node(msgspec.Struct):
    hostname: str | None = None


class _Meta(msgspec.Struct):
    pid: int | None = None
    init_time: int = 0
    fini_time: int = 0
    node: _Node | None = None


class _Tool(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    kernel_symbols: list[_Symbol] | dict[str, _Symbol] = []
    strings: _Strings = msgspec.field(default_factory=_Strings)
    buffer_records: _Buffers = msgspec.field(default_factory=_Buffers)


class _Doc(msgspec.Struct):
    tool: list[_Tool] = msgspec.field(name="rocprofiler-sdk-tool", default=[])


def _symbol_name(sym: _Symbol | None, kid) -> str:
    if sym is None:
        return f"unknown_kernel_{kid}"
    # TraceLens: truncated or formatted or kernel_name (a missing kernel_name -> unknown)
    name = sym.truncated_kernel_name or sym.formatted_kernel_name
    if name:
        return name
    return sym.kernel_name if sym.kernel_name is not None else f"unknown_kernel_{kid}"


def _op_names(strings: _Strings, kinds: list[int], ops: list[int], fallback: str) -> list[str]:
    table = strings.buffer_records
    out = []
    for k, o in zip(kinds, ops):
        if 0 <= k < len(table) and 0 <= o < len(table[k].operations):
            out.append(table[k].operations[o])
        else:
            out.append(f"{fallback}_{k}_{o}")
    return out


#: dispatches decoded at a time (their Structs are alive at once; ~0.4 KB each)
_DISPATCH_BATCH = 20_000


def _drop_pages(data: object) -> None:
    """Drop a mapped file's resident pages (a private copy-on-write mapping that this reader never
    writes: a page touched again is read back from the file), so they do not count in the peak
    RSS beside the table. In a forked child it drops only the child's own page tables."""
    if isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        data.madvise(mmap.MADV_DONTNEED)


def _dispatch_columns(path: Path, raws: list[msgspec.Raw], data: object) -> dict[str, Any]:
    """The dispatches' columns, decoded a batch at a time from their raw JSON (views of the
    file ``data``), so the Structs of only one batch are alive at once, not ~300k of them,
    and only one batch's pages of a mapped file are resident."""
    decoder = msgspec.json.Decoder(list[_Dispatch])
    n = len(raws)
    start, end, corr = (np.empty(n, dtype=np.int64) for _ in range(3))
    kids: list[int | None] = []
    agents: list[int] = []
    streams: list[int] = []
    for lo in range(0, n, _DISPATCH_BATCH):
        try:
            batch = decoder.decode(b"[" + b",".join(raws[lo : lo + _DISPATCH_BATCH]) + b"]")
        except msgspec.ValidationError as exc:
            raise TraceError(path, f"unexpected rocprofv3 JSON structure in kernel_dispatch ({exc})") from None
        hi = lo + len(batch)
        start[lo:hi] = [d.start_timestamp for d in batch]
        end[lo:hi] = [d.end_timestamp for d in batch]
        corr[lo:hi] = [d.correlation_id.internal if d.correlation_id else 0 for d in batch]
        kids += [d.dispatch_info.kernel_id for d in batch]
        agents += [d.dispatch_info.agent_id.handle for d in batch]
        streams += [d.stream_id.handle for d in batch]
        _drop_pages(data)
    return {"kernel_id": kids, "start": start, "end": end, "pid": agents, "tid": streams, "corr": corr}


#: dispatches from which two processes decode them (a second CPU saves ~0.3 s per 300k)
SPLIT_MIN_DISPATCHES = 4 * _DISPATCH_BATCH
_SPLIT_FIRST_SHARE = 0.55


def _dispatch_columns_split(path: Path, raws: list[msgspec.Raw], data: object) -> dict[str, Any]:
    """:func:`_dispatch_columns` in two processes: a forked child decodes the second half (the
    file is mapped in both; its columns come back through a pipe) while this one decodes the
    first.  The halves meet at a batch boundary, so an error names the same batch index as
    in one process; a child that dies (out of memory) leaves its half to this process."""
    # the child's half is a little smaller: its start touches the shared objects' pages afresh
    mid = round(len(raws) * _SPLIT_FIRST_SHARE / _DISPATCH_BATCH) * _DISPATCH_BATCH
    with beside(lambda: _dispatch_columns(path, raws[mid:], data), path, enabled=True) as side:
        first = _dispatch_columns(path, raws[:mid], data)
        try:
            second = side.result()
        except RuntimeError:  # the child died (or failed other than on the input): its half is decoded here
            second = _dispatch_columns(path, raws[mid:], data)
    return {k: np.concatenate((v, second[k])) if isinstance(v, np.ndarray) else v + second[k] for k, v in first.items()}


def read_rocprof_json(path: Path, data: bytes | bytearray | mmap.mmap, split: bool = False) -> EventTable:
    """``data`` may be the file mapped: it is decoded in place, with only the fields used made
    objects (none tracked by the GC), and the kernel dispatches (most of the file) a batch at
    a time, so their objects never all live at once.  ``split=True``: from
    :data:`SPLIT_MIN_DISPATCHES` on, two processes decode the dispatches (only for a caller
    with no threads of its own: it forks); the table is the same."""
    path = Path(path)
    try:
        doc = msgspec.json.decode(data, type=_Doc)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"unexpected rocprofv3 JSON structure ({exc})") from None
    except msgspec.DecodeError as exc:
        msg = str(exc)
        if "truncated" in msg.lower():
            raise TraceError(path, "truncated JSON (file ends early)") from None
        raise TraceError(path, f"invalid JSON ({msg})") from None
    if not doc.tool:
        raise TraceError(path, "rocprofv3 JSON with an empty rocprofiler-sdk-tool list")
    tool = doc.tool[0]
    notes: list[str] = []
    if len(doc.tool) > 1:
        notes.append(f"rocprofv3 JSON holds {len(doc.tool)} processes; only the first is analysed (as TraceLens does)")
    syms = tool.kernel_symbols.values() if isinstance(tool.kernel_symbols, dict) else tool.kernel_symbols
    by_id = {s.kernel_id: s for s in syms}
    br = tool.buffer_records
    pid = tool.metadata.pid if tool.metadata.pid is not None else 0
    parts = []

    kd = br.kernel_dispatch
    if kd:
        _drop_pages(data)  # the first pass touched all of it
        many = split and len(kd) >= SPLIT_MIN_DISPATCHES
        cols = (_dispatch_columns_split if many else _dispatch_columns)(path, kd, data)
        kids = cols.pop("kernel_id")
        name_of = {k: _symbol_name(by_id.get(k), k) for k in dict.fromkeys(kids)}
        parts.append({"cat": "kernel", "names": [name_of[k] for k in kids], "stream": list(cols["tid"]), **cols})
    mc = br.memory_copy
    if mc:
        parts.append(
            {
                "cat": "gpu_memcpy",
                "names": _op_names(tool.strings, [c.kind for c in mc], [c.operation for c in mc], "MEMORY_COPY"),
                "start": np.fromiter((c.start_timestamp for c in mc), dtype=np.int64, count=len(mc)),
                "end": np.fromiter((c.end_timestamp for c in mc), dtype=np.int64, count=len(mc)),
                "pid": [c.dst_agent_id.handle for c in mc],
                "tid": [c.stream_id.handle for c in mc],
                "stream": [c.stream_id.handle for c in mc],
            }
        )
    for cat, recs in (("hip_api", br.hip_api), ("hsa_api", br.hsa_api)):
        if recs:
            parts.append(
                {
                    "cat": cat,
                    "names": _op_names(tool.strings, [a.kind for a in recs], [a.operation for a in recs], cat),
                    "start": np.fromiter((a.start_timestamp for a in recs), dtype=np.int64, count=len(recs)),
                    "end": np.fromiter((a.end_timestamp for a in recs), dtype=np.int64, count=len(recs)),
                    "pid": [pid] * len(recs),
                    "tid": [a.thread_id for a in recs],
                }
            )
    if not kd and not mc:
        raise TraceError(path, "no kernel dispatches or memory copies in rocprofv3 JSON (was --kernel-trace on?)")
    heavy = {
        "source": "rocprofv3 JSON",
        "init_time": int(tool.metadata.init_time or 0),
        "fini_time": int(tool.metadata.fini_time or 0),
        "pid": pid,
        "hostname": tool.metadata.node.hostname if tool.metadata.node else None,
        "lite": False,
        "notes": notes,
    }
    del doc, tool, br, kd, mc
    return build_table(path, "rocprofv3_json", parts, heavy)
