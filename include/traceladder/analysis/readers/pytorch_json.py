"""PyTorch profiler (kineto) Chrome-trace JSON reader: ``.json`` and ``.json.gz``.

Decodes with msgspec typed Structs; ``python_function`` events (:data:`SKIP_CATS`) are
dropped at once, as no report uses them; each event's ``args`` stays a ``msgspec.Raw`` and
only the link fields (``correlation``, ``External id``, ``stream``) are decoded, in one
batch, for the categories that take part in CPU->GPU linking.  Everything else in
``args`` is decoded later, per event, only where a report needs it.
"""

from __future__ import annotations

import gc
import gzip
import io
import math
import mmap
import os
import re
import zlib
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, TypeVar, Union

import msgspec
import numpy as np

from ..model.events import beside
from ..model.events import MISSING, EventTable, TraceError, Interner, as_int

__all__ = ["read_pytorch_json", "load_bytes", "looks_like_pytorch_json", "trace_buffer"]


class _Fields(msgspec.Struct, gc=False):
    """The fields of an event that the table keeps (its category aside)."""

    ph: str = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    # absent -> NaN / MISSING, so a column is one np.fromiter (an explicit null or a
    # non-int id takes the slow path)
    ts: float | None = math.nan
    dur: float | None = math.nan
    id: Any = MISSING
    args: msgspec.Raw = msgspec.Raw(b"")


class _Event(_Fields, gc=False):
    """An event of any category, or of none (the plain decode)."""

    cat: str | None = None


class _Tagged(_Fields, gc=False, tag_field="cat"):
    """An event of a known category, decoded as its own Struct type (the tag is ``cat``):
    the category comes from the type, with no string made or hashed per event."""


class _Skipped(msgspec.Struct, gc=False, tag_field="cat", tag="python_function"):
    """A :data:`SKIP_CATS` event: only the fields that :class:`_Event` type-checks (a broken
    one fails as it does there); msgspec skips the rest of its body without making objects."""

    ph: str = ""
    ts: float | None = None
    dur: float | None = None


#: kineto's categories (``ActivityType`` names and its flow / trace events); an event of
#: any other category, or with none, makes its chunk take the plain :class:`_Event` decode
KNOWN_CATS = (
    "cpu_op",
    "user_annotation",
    "gpu_user_annotation",
    "gpu_memcpy",
    "gpu_memset",
    "kernel",
    "external_correlation",
    "cuda_runtime",
    "cuda_driver",
    "cpu_instant_event",
    "overhead",
    "cuda_sync",
    "cuda_profiler_range",
    "privateuse1_runtime",
    "privateuse1_driver",
    "mtia_runtime",
    "mtia_ccp_events",
    "hpu_op",
    "xpu_runtime",
    "collective_comm",
    "gpu_pm_counter",
    "ac2g",
    "fwdbwd",
    "Trace",
)
_TAGGED_TYPES: dict[type, str] = {_Skipped: "python_function"}
for _cat in KNOWN_CATS:
    _TAGGED_TYPES[type(f"_Tagged_{_cat}", (_Tagged,), {"__module__": __name__}, tag=_cat)] = _cat
_TAGGED_LIST: Any = list[Union[tuple(_TAGGED_TYPES)]]  # type: ignore[misc]
#: the tagged decode is no longer tried once more than this many slices, and more than
#: half of those tried, fell back to the plain one (metadata and instant events have no
#: category; a trace of another tool's categories would miss every time)
_TAGGED_MISSES = 4
#: False: every slice takes the plain decode (the tests compare the two)
TAGGED_DECODE = True


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] | None = None
    distributedInfo: msgspec.Raw = msgspec.Raw(b"")
    deviceProperties: msgspec.Raw = msgspec.Raw(b"")
    schemaVersion: Any = None
    rocprofiler_sdk_tool: msgspec.Raw = msgspec.field(name="rocprofiler-sdk-tool", default=msgspec.Raw(b""))


class _LinkArgs(msgspec.Struct, gc=False):
    correlation: Any = None
    external_id: Any = msgspec.field(name="External id", default=None)
    stream: Any = None


class _LinkArgsFast(msgspec.Struct, gc=False):
    """The common case: integer link fields (anything else: :class:`_LinkArgs`)."""

    correlation: int = MISSING
    external_id: int = msgspec.field(name="External id", default=MISSING)
    stream: int = -1


#: categories dropped at read time: no report uses them (TraceLens builds its call tree
#: without them, ``add_python_func=False``), and they are most of a with-stack trace
SKIP_CATS = frozenset({"python_function"})

# categories whose args are never needed for linking
_NO_LINK_ARGS = {"python_function", "cpu_instant_event", "ac2g", "fwdbwd", "Trace", None}

_GZIP_MAGIC = b"\x1f\x8b"
_NON_WS = re.compile(rb"\S")
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[\s*')
_EVENT_SEP = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")
#: bytes of events decoded at a time (the Structs of one chunk are alive at once)
CHUNK_BYTES = 4 << 20
#: the smallest trace that :func:`read_pytorch_json` splits over two processes
SPLIT_MIN_BYTES = 32 << 20
#: the share of the events' bytes the parent decodes: a little over half, as the child
#: also packs its part up for the parent
SPLIT_FIRST_SHARE = 0.6
_MAX_RETRIES = 64
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: deflate's best ratio is 1032:1, so a larger ISIZE is not the real size
_DEFLATE_MAX_RATIO = 1032


def _gunzip_into(path: Path, raw: bytes) -> bytearray:
    """Gunzip into one preallocated buffer (the trailer's ISIZE), not a growing one."""
    size = int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else 0
    if size > _DEFLATE_MAX_RATIO * len(raw):  # a truncated file's "ISIZE" is any 4 bytes: up to 4 GiB
        size = 0
    out = bytearray(size)
    with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
        got = gz.readinto(out) if size else 0
        if got < size:
            del out[got:]
        rest = gz.read()  # > 4 GiB (ISIZE is mod 2**32) or several members
        if rest:
            out += rest
    return out


_Buffer = TypeVar("_Buffer", bound=bytearray | mmap.mmap)


def load_bytes(path: Path, mapped: bool = False) -> bytearray | mmap.mmap:
    """Read a file, gunzipping if it is gzip; bad input raises TraceError.

    Returns a ``bytearray`` (one copy of the file, writable: the chunked decoder marks
    chunk bounds in place and puts them back).  ``mapped=True``: a plain (not gzip)
    file is mapped copy-on-write instead (``mmap.ACCESS_COPY``): no copy and no read
    pass; the few bytes the decoder marks become private pages.
    """
    path = Path(path)
    if not path.exists():
        raise TraceError(path, "no such file")
    if not path.is_file():
        raise TraceError(path, "not a regular file")
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            if head == _GZIP_MAGIC:
                data = _gunzip(path, head + fh.read())
            else:
                size = os.fstat(fh.fileno()).st_size
                if mapped and size > 2:
                    return mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_COPY)
                data = bytearray(size)
                data[: len(head)] = head
                n = fh.readinto(memoryview(data)[len(head) :]) if size > len(head) else 0
                del data[len(head) + (n or 0) :]
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    return _checked(path, data, gzipped=head == _GZIP_MAGIC)


def trace_buffer(path: Path, raw: bytearray) -> bytearray:
    """What :func:`load_bytes` makes of a file, from bytes already in memory (a verified
    download): ``raw`` itself when it is plain, else a gunzipped copy.  ``path`` names the
    trace in errors and its suffix counts as the file's would."""
    path = Path(path)
    gzipped = bytes(raw[:2]) == _GZIP_MAGIC
    return _checked(path, _gunzip(path, bytes(raw)) if gzipped else raw, gzipped)


def _gunzip(path: Path, raw: bytes) -> bytearray:
    try:
        return _gunzip_into(path, raw)
    except EOFError:
        raise TraceError(path, "truncated gzip stream") from None
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(path, f"corrupt gzip data ({exc})") from None


def _checked(path: Path, data: _Buffer, gzipped: bool) -> _Buffer:
    if not len(data):
        raise TraceError(path, "empty file")
    if gzipped:
        if _NON_WS.search(data) is None:
            raise TraceError(path, "empty file (after gunzip)")
    elif path.name.endswith(".gz"):
        raise TraceError(path, "corrupt gzip data (no gzip header)")
    return data


def looks_like_pytorch_json(data: bytes) -> bool:
    head = data[:4096].lstrip()
    return head.startswith(b"{") and b"traceEvents" in data[: 1 << 20] if head else False


def _floats(evs: list, get, n: int) -> np.ndarray:
    try:
        return np.fromiter(map(get, evs), dtype=np.float64, count=n)
    except (TypeError, ValueError):  # an explicit null (or a string) somewhere
        return np.array([v if isinstance(v, (int, float)) else math.nan for v in map(get, evs)], dtype=np.float64)


class _TypeCodes(dict):
    """Tagged Struct type -> category code, coded on first sight (first-appearance order,
    as the plain decode codes the category strings)."""

    __slots__ = ("cat_i",)

    def __init__(self, cat_i: Interner) -> None:
        super().__init__()
        self.cat_i = cat_i

    def __missing__(self, typ: type) -> int:
        code = self[typ] = self.cat_i.code(_TAGGED_TYPES[typ])
        return code


class _Columns:
    """Accumulates the columns of successive chunks of decoded events."""

    def __init__(self) -> None:
        self.cat_i = Interner()
        self.ph_i = Interner()
        self.name_i = Interner()
        self.pid_i = Interner()
        self.tid_i = Interner()
        self.stream_i = Interner()
        self.parts: dict[str, list[np.ndarray]] = {
            k: []
            for k in (
                "cat",
                "ph",
                "name",
                "pid",
                "tid",
                "ts",
                "dur",
                "flow_id",
                "corr",
                "ext",
                "stream",
                "has_args",
                "uid",
            )
        }
        self.raw_args: list = []
        self.no_link_codes: set[int] = set()
        self.meta_idx: list[int] = []
        self.n = 0
        self.skipped = 0
        self.deferred: list[np.ndarray] = []
        #: Struct type of a tagged decode -> its category code
        self.type_codes = _TypeCodes(self.cat_i)

    def add(self, path: Path, evs: list) -> None:
        """Append decoded events: all :class:`_Event`, or all tagged (:data:`_TAGGED_LIST`)."""
        n = len(evs)
        if n == 0:
            return
        P = self.parts
        if type(evs[0]) is _Event:
            cat = self.cat_i.encode_field(_G_CAT, evs)
        else:
            cat = np.fromiter(map(self.type_codes.__getitem__, map(type, evs)), dtype=np.int32, count=n)
        base = self.n + self.skipped  # events of the file before this chunk
        uid = None
        skip = [c for c, v in enumerate(self.cat_i.values) if v in SKIP_CATS]
        if skip:
            drop = np.isin(cat, skip) if len(skip) > 1 else cat == skip[0]
            nd = int(np.count_nonzero(drop))
            if nd:
                self.skipped += nd
                keep = np.flatnonzero(~drop)
                uid = keep + base
                n = keep.size
                if n == 0:
                    return
                evs = [evs[keep[0]]] if n == 1 else list(itemgetter(*keep.tolist())(evs))
                cat = cat[keep]
        for c in range(len(self.cat_i.values)):
            if self.cat_i.values[c] in _NO_LINK_ARGS:
                self.no_link_codes.add(c)
        ph = self.ph_i.encode_field(_G_PH, evs)
        P["cat"].append(cat)
        P["ph"].append(ph)
        P["name"].append(self.name_i.encode_field(_G_NAME, evs))
        P["pid"].append(self.pid_i.encode_field(_G_PID, evs))
        P["tid"].append(self.tid_i.encode_field(_G_TID, evs))
        P["ts"].append(_floats(evs, _G_TS, n))
        P["dur"].append(_floats(evs, _G_DUR, n))
        try:
            flow = np.fromiter(map(_G_ID, evs), dtype=np.int64, count=n)
        except (TypeError, ValueError, OverflowError):
            flow = np.fromiter(map(as_int, map(_G_ID, evs)), dtype=np.int64, count=n)
        P["flow_id"].append(flow)
        raws = list(map(_G_ARGS, evs))
        has_args = np.fromiter(map(len, raws), dtype=np.int64, count=n) > 0
        P["has_args"].append(has_args)
        self.raw_args.extend(raws)
        m_code = self.ph_i.codes.get("M")
        if m_code is not None:
            self.meta_idx.extend((np.flatnonzero(ph == m_code) + self.n).tolist())

        corr = np.full(n, MISSING, dtype=np.int64)
        ext = np.full(n, MISSING, dtype=np.int64)
        stream = np.full(n, -1, dtype=np.int64)
        want = has_args & ~np.isin(cat, np.fromiter(self.no_link_codes, dtype=np.int32, count=len(self.no_link_codes)))
        cpu_code = self.cat_i.codes.get("cpu_op")
        if cpu_code is not None:
            # a cpu_op's External id matters only to traces linked by External id (old
            # kineto): decoded on demand then (EventTable.deferred_links), its args are big
            is_cpu = want & (cat == cpu_code)
            self.deferred.append(np.flatnonzero(is_cpu) + self.n)
            want &= ~is_cpu
        idx = np.flatnonzero(want)
        if idx.size:
            buf = b"[" + b",".join([raws[i] for i in idx.tolist()]) + b"]"
            try:
                fast = msgspec.json.decode(buf, type=list[_LinkArgsFast])
            except msgspec.ValidationError:
                fast = None
            except msgspec.DecodeError as exc:
                raise TraceError(path, f"malformed event args ({exc})") from None
            if fast is not None:
                try:
                    f_corr = np.fromiter(map(_G_CORR, fast), dtype=np.int64, count=idx.size)
                    f_ext = np.fromiter(map(_G_EXT, fast), dtype=np.int64, count=idx.size)
                    s_raw = np.fromiter(map(_G_STREAM, fast), dtype=np.int64, count=idx.size)
                except OverflowError:  # an id past int64 (msgspec's int goes to uint64): the slow path
                    fast = None
            if fast is not None:
                corr[idx], ext[idx] = f_corr, f_ext
                has_s = s_raw != -1
                if has_s.any():
                    sv = s_raw[has_s]
                    uniq, first, inv = np.unique(sv, return_index=True, return_inverse=True)
                    codes = np.empty(uniq.size, dtype=np.int64)
                    for u in np.argsort(first).tolist():  # new streams coded in order of first appearance
                        codes[u] = self.stream_i.code(int(uniq[u]))
                    s_raw[has_s] = codes[inv.reshape(-1)]
                stream[idx] = s_raw
            else:
                try:
                    link = msgspec.json.decode(buf, type=list[_LinkArgs])
                except msgspec.ValidationError:  # an args that is no object (null, a string): no links
                    link = [_link_args_or_none(raws[i]) for i in idx.tolist()]
                corr[idx] = list(map(as_int, map(_G_CORR, link)))
                ext[idx] = list(map(as_int, map(_G_EXT, link)))
                stream[idx] = [
                    -1 if s is None else self.stream_i.code(str(s) if isinstance(s, (list, dict)) else s)
                    for s in map(_G_STREAM, link)
                ]
        P["corr"].append(corr)
        P["ext"].append(ext)
        P["stream"].append(stream)
        P["uid"].append(np.arange(base, base + n, dtype=np.int64) if uid is None else uid.astype(np.int64))
        self.n += n

    def export(self, shm: mmap.mmap) -> dict[str, Any]:
        """Everything read so far, for :meth:`absorb` in another process: the columns, the
        value tables and the raw args, which go into ``shm`` (shared memory) as one JSON
        array of the non-empty ones (msgspec makes ``Raw`` views of it far faster than
        Python slices it)."""
        columns = {k: self.column(k, _COLUMN_TYPES[k]) for k in _COLUMN_TYPES}
        raws = self.raw_args
        full = np.flatnonzero(columns["has_args"]).tolist()  # has_args: a non-empty raw args
        if full:
            shm.write(b"[" + b",".join([raws[full[0]]] if len(full) == 1 else itemgetter(*full)(raws)) + b"]")
        return {
            "args_bytes": shm.tell(),
            "columns": columns,
            "tables": {f: getattr(self, f"{f}_i").values for f in _CODED},
            "meta_idx": self.meta_idx,
            "deferred": np.concatenate(self.deferred) if self.deferred else np.empty(0, np.int64),
            "n": self.n,
            "skipped": self.skipped,
        }

    def absorb(self, part: dict[str, Any], raw: memoryview) -> None:
        """Append what :meth:`export` sent (events after this one's), recoding its values
        into this one's tables: the codes come out as one process would have made them."""
        cols = part["columns"]
        for f in _CODED:
            interner: Interner = getattr(self, f"{f}_i")
            recode = np.asarray([interner.code(v) for v in part["tables"][f]], dtype=np.int32)
            codes = cols[f]
            if f == "stream":
                has = codes >= 0
                codes[has] = recode[codes[has]]
            elif codes.size:
                codes = recode[codes]
            self.parts[f].append(codes)
        for k in _COLUMN_TYPES:
            if k not in _CODED:
                # uid: the part counts from its own first event, which follows ours
                self.parts[k].append(cols[k] + (self.n + self.skipped) if k == "uid" else cols[k])
        has = cols["has_args"]
        if has.any():
            views = iter(msgspec.json.decode(raw[: part["args_bytes"]], type=list[msgspec.Raw]))
            self.raw_args.extend([next(views) if h else _NO_ARGS for h in has.tolist()])
        else:
            self.raw_args.extend([_NO_ARGS] * has.size)
        self.meta_idx.extend(i + self.n for i in part["meta_idx"])
        self.deferred.append(part["deferred"] + self.n)
        self.skipped += part["skipped"]
        self.n += part["n"]

    def column(self, key: str, dtype) -> np.ndarray:
        parts = self.parts[key]
        out = np.concatenate(parts) if parts else np.empty(0, dtype=dtype)
        parts.clear()
        return out.astype(dtype, copy=False)


_NO_ARGS = msgspec.Raw(b"")
#: every column, with its type; :data:`_CODED`: those holding codes into a value table
_COLUMN_TYPES = {
    "cat": np.int32,
    "ph": np.int32,
    "name": np.int32,
    "pid": np.int32,
    "tid": np.int32,
    "ts": np.float64,
    "dur": np.float64,
    "flow_id": np.int64,
    "corr": np.int64,
    "ext": np.int64,
    "stream": np.int64,
    "has_args": bool,
    "uid": np.int64,
}
_CODED = ("cat", "ph", "name", "pid", "tid", "stream")

_G_CAT, _G_PH, _G_NAME, _G_PID, _G_TID = (attrgetter(k) for k in ("cat", "ph", "name", "pid", "tid"))
_G_TS, _G_DUR, _G_ID, _G_ARGS = (attrgetter(k) for k in ("ts", "dur", "id", "args"))
_G_CORR, _G_EXT, _G_STREAM = (attrgetter(k) for k in ("correlation", "external_id", "stream"))


def _decode_error(path: Path, exc: Exception) -> TraceError:
    if isinstance(exc, msgspec.ValidationError):
        return TraceError(path, f"unexpected trace structure ({exc})")
    msg = str(exc)
    if "truncated" in msg.lower():
        return TraceError(path, "truncated JSON (file ends early)")
    return TraceError(path, f"invalid JSON ({msg})")


class _Slicer:
    """Decodes slices of the traceEvents array, tagged by category while that works."""

    def __init__(self, buf: bytearray) -> None:
        self.buf = buf
        self.hits = 0
        self.misses = 0

    def decode(self, start: int, end: int) -> list:
        """Decode the events buf[start:end] (``{...}, ... {...}``) as one JSON array.

        The byte before ``start`` and the byte at ``end`` lie between events (a comma,
        whitespace or the array's own brackets): they become ``[`` and ``]`` for the
        decode and are put back after.  Raw args stay views into ``buf``.  The tagged
        decode is tried first; a slice it refuses (an unknown or missing category) is
        decoded plainly (see :data:`_TAGGED_MISSES`).  A slice that is no JSON array of
        events raises msgspec's error.
        """
        buf = self.buf
        b0, b1 = buf[start - 1], buf[end]
        buf[start - 1] = 0x5B  # [
        buf[end] = 0x5D  # ]
        view = memoryview(buf)[start - 1 : end + 1]
        try:
            if TAGGED_DECODE and self.misses <= max(_TAGGED_MISSES, self.hits):
                try:
                    evs = msgspec.json.decode(view, type=_TAGGED_LIST)
                    self.hits += 1
                    return evs
                except (msgspec.ValidationError, msgspec.DecodeError):
                    pass
                evs = msgspec.json.decode(view, type=list[_Event])
                self.misses += 1  # only a slice that decodes plainly counts
                return evs
            return msgspec.json.decode(view, type=list[_Event])
        finally:
            buf[start - 1] = b0
            buf[end] = b1


def _array_start(buf) -> tuple[int, int] | None:
    """(where the ``"traceEvents"`` key starts, where its first event's ``{`` is, or the
    ``]`` of an empty array); None when the layout is not the plain one."""
    m = _ARRAY_START.search(buf)
    if m is None or (m.start() > 0 and buf[m.start() - 1] == 0x5C):
        return None
    pos = m.end()
    if pos >= len(buf) or buf[pos] not in (0x5D, 0x7B):
        return None
    return m.start(), pos


def _decode_range(path: Path, slicer: _Slicer, cols: _Columns, pos: int, stop: int | None) -> int | None:
    """Decode the events from ``pos`` (an event's ``{``) up to ``stop`` (just past an
    event's ``}``; None: to the end of the array), chunk by chunk, into ``cols``.

    Returns ``stop``, or the index of the array's ``]``; None when the layout is not the
    plain one (the caller then decodes the whole document at once).
    """
    buf = slicer.buf
    limit = len(buf) if stop is None else stop
    while True:
        evs = None
        tries = 0
        target = pos + CHUNK_BYTES
        sep = _EVENT_SEP.search(buf, target, limit) if target < limit else None
        while sep is not None and tries < _MAX_RETRIES:
            try:
                evs = slicer.decode(pos, sep.start() + 1)
                nxt = sep.end() - 1
                break
            except (msgspec.DecodeError, msgspec.ValidationError):
                tries += 1
                sep = _EVENT_SEP.search(buf, sep.end() - 1, limit)
        if evs is None and tries >= _MAX_RETRIES:
            return None
        if evs is not None:
            cols.add(path, evs)
            pos = nxt
            continue
        # the last chunk: up to stop, or to the array's closing bracket
        if stop is not None:
            try:
                cols.add(path, slicer.decode(pos, stop))
            except (msgspec.DecodeError, msgspec.ValidationError):
                return None
            return stop
        end = _ARRAY_END.search(buf, pos)
        tries = 0
        while end is not None and tries < _MAX_RETRIES:
            try:
                evs = slicer.decode(pos, end.start() + 1)
                cols.add(path, evs)
                return end.end() - 1
            except (msgspec.DecodeError, msgspec.ValidationError):
                tries += 1
                end = _ARRAY_END.search(buf, end.end() - 1)
        return None


def _rest_of_document(buf, key_start: int, array_end: int) -> _Trace | None:
    """The document less its events (distributedInfo, deviceProperties, ...)."""
    try:
        rest = bytes(buf[:key_start]) + b'"traceEvents":[]' + bytes(buf[array_end + 1 :])
        return msgspec.json.decode(rest, type=_Trace)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _read_split(path: Path, buf, cols: _Columns) -> _Trace | None:
    """:func:`_read_chunked` in two processes: a forked child decodes the second half of
    the events (its raw args go through shared memory, the rest through a pipe) while
    this one decodes the first; None when either half is not the plain layout."""
    start = _array_start(buf)
    if start is None or buf[start[1]] != 0x7B:
        return None
    key_start, pos = start
    mid = _EVENT_SEP.search(buf, pos + int((len(buf) - pos) * SPLIT_FIRST_SHARE))
    if mid is None:
        return None
    stop, second = mid.start() + 1, mid.end() - 1
    shm = mmap.mmap(-1, len(buf) - second)  # the second half's args fit in its bytes

    def second_half() -> dict[str, Any] | None:
        part_cols = _Columns()
        array_end = _decode_range(path, _Slicer(buf), part_cols, second, None)
        return None if array_end is None else {"array_end": array_end, **part_cols.export(shm)}

    try:
        with beside(second_half, path, enabled=True) as side:
            first_end = _decode_range(path, _Slicer(buf), cols, pos, stop)
            part = side.result()
    except Exception:  # noqa: BLE001 - bad input, or a child that died (out of memory): the
        return None  # one-process read raises the error again, or reads what the split could not
    if first_end is None or part is None:
        return None
    cols.absorb(part, memoryview(shm))
    return _rest_of_document(buf, key_start, part["array_end"])


def _read_chunked(path: Path, buf: bytearray, cols: _Columns) -> _Trace | None:
    """Decode traceEvents chunk by chunk; None when the layout is not the plain one
    (the caller then decodes the whole document at once)."""
    start = _array_start(buf)
    if start is None:
        return None
    key_start, pos = start
    array_end = pos if buf[pos] == 0x5D else _decode_range(path, _Slicer(buf), cols, pos, None)
    return None if array_end is None else _rest_of_document(buf, key_start, array_end)


def read_pytorch_json(path: Path, data: bytes | bytearray | None = None, split: bool = False) -> EventTable:
    """Read a PyTorch profiler trace.  ``split=True``: a trace of :data:`SPLIT_MIN_BYTES` or
    more is decoded by two processes (:func:`_read_split`); the table is the same.  Only
    for a caller with no threads of its own (it forks)."""
    path = Path(path)
    if data is None:
        data = load_bytes(path)
    head = bytes(data[:64]).lstrip()
    if head.startswith(_SQLITE_MAGIC):
        raise TraceError(path, "unsupported format: SQLite database (rpd / rocpd), not a PyTorch JSON trace")
    if not head.startswith(b"{"):
        raise TraceError(path, "unknown format: not a JSON object (expected a PyTorch profiler trace)")
    buf = data if isinstance(data, (bytearray, mmap.mmap)) else bytearray(data)
    # no cyclic GC passes while ~10^5-10^6 objects are made (none of them cyclic)
    gc_on = gc.isenabled()
    gc.disable()
    try:
        return _read(path, buf, split and len(buf) >= SPLIT_MIN_BYTES)
    finally:
        if gc_on:
            gc.enable()


def _read(path: Path, buf, split: bool) -> EventTable:
    cols = _Columns()
    doc = _read_split(path, buf, cols) if split else None
    if doc is None:
        cols = _Columns()
        doc = _read_chunked(path, buf, cols)
    if doc is None:  # unusual layout, or bad JSON: one whole-document decode
        cols = _Columns()
        try:
            doc = msgspec.json.decode(buf, type=_Trace)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise _decode_error(path, exc) from None
        if doc.traceEvents is None:
            if len(doc.rocprofiler_sdk_tool):
                raise TraceError(path, "unsupported format: rocprofv3 JSON (no PyTorch traceEvents)")
            raise TraceError(path, "unknown format: JSON without traceEvents")
        evs = doc.traceEvents
        doc.traceEvents = []
        cols.add(path, evs)
        del evs
    if cols.n == 0:
        raise TraceError(path, "no events in trace")
    return _table(path, doc, cols)


def _table(path: Path, doc: _Trace, cols: _Columns) -> EventTable:
    cat = cols.column("cat", np.int32)
    ph = cols.column("ph", np.int32)
    name = cols.column("name", np.int32)
    pid = cols.column("pid", np.int32)
    tid = cols.column("tid", np.int32)
    name_i = cols.name_i
    if not all(type(v) is str for v in name_i.values):
        name_i.values[:] = [v if isinstance(v, str) else str(v) for v in name_i.values]
        canon: dict[str, int] = {}
        remap = np.asarray([canon.setdefault(v, len(canon)) for v in name_i.values], dtype=np.int32)
        if len(canon) < len(name_i.values):  # 5 and "5": one name (reports group by name codes)
            name = remap[name]
            name_i.values[:] = list(canon)
    raw_args = cols.raw_args
    uid = cols.column("uid", np.int64)

    # metadata ("M" events): process / thread names and labels, per (pid, tid)
    meta: dict[str, Any] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    process_names: dict[Any, str] = {}
    by_pid_tid: dict[Any, dict[Any, dict[str, Any]]] = {}
    _ARG_OF = {
        "process_name": "name",
        "thread_name": "name",
        "process_labels": "labels",
        "process_sort_index": "sort_index",
        "thread_sort_index": "sort_index",
    }
    for i in cols.meta_idx:
        nm = name_i.values[name[i]]
        key = _ARG_OF.get(nm)
        if key is None:
            continue
        try:
            a = msgspec.json.decode(raw_args[i]) if len(raw_args[i]) else {}
        except msgspec.DecodeError:
            continue
        if not isinstance(a, dict) or key not in a:
            continue
        p, q = cols.pid_i.values[pid[i]], cols.tid_i.values[tid[i]]
        by_pid_tid.setdefault(p, {}).setdefault(q, {})[nm] = a[key]
        if nm == "thread_name":
            thread_names[(p, q)] = str(a[key])
        elif nm == "process_name":
            process_names[p] = str(a[key])
    meta["thread_names"] = thread_names
    meta["process_names"] = process_names
    #: TraceLens's ``tree.metadata``: {pid: {tid: {"process_name" | "process_labels" |
    #: "thread_name" | ...: value}}} (process-level entries sit under their M event's tid)
    meta["by_pid_tid"] = by_pid_tid
    if len(doc.distributedInfo):
        try:
            meta["distributedInfo"] = msgspec.json.decode(doc.distributedInfo)
        except msgspec.DecodeError:
            pass
    if len(doc.deviceProperties):  # the device names the roofline looks up (reports/roofline.py)
        try:
            meta["deviceProperties"] = msgspec.json.decode(doc.deviceProperties)
        except msgspec.DecodeError:
            pass
    meta["schemaVersion"] = doc.schemaVersion
    meta["skipped_events"] = cols.skipped  # SKIP_CATS events, not in the table

    return EventTable(
        path=path,
        fmt="pytorch_json",
        cat=cat,
        cats=cols.cat_i.values,
        ph=ph,
        phs=cols.ph_i.values,
        name=name,
        names=name_i.values,
        pid=pid,
        pids=cols.pid_i.values,
        tid=tid,
        tids=cols.tid_i.values,
        ts=cols.column("ts", np.float64),
        dur=cols.column("dur", np.float64),
        flow_id=cols.column("flow_id", np.int64),
        corr=cols.column("corr", np.int64),
        ext=cols.column("ext", np.int64),
        stream=cols.column("stream", np.int64),
        streams=cols.stream_i.values,
        has_args=cols.column("has_args", bool),
        raw_args=raw_args,
        metadata=meta,
        deferred_links=np.concatenate(cols.deferred) if cols.deferred else np.empty(0, np.int64),
        uid=uid if cols.skipped else None,  # with nothing left out, the index is the UID
    )


def _link_args_or_none(raw: bytes) -> _LinkArgs:
    """One event's link args; an args value of another shape links nothing."""
    try:
        return msgspec.json.decode(raw, type=_LinkArgs)
    except msgspec.ValidationError:
        return msgspec.json.decode(b"{}", type=_LinkArgs)
