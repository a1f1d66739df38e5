"""Columnar event model shared by every reader and report.

One :class:`EventTable` holds a whole trace as numpy arrays, one per field (no dict per
event).  Strings (names, categories, pids/tids that are strings) live in small tables
and the arrays hold integer codes into them.  The raw JSON of each event's ``args`` is
kept (as ``msgspec.Raw``, zero-copy into the file buffer) and decoded only for the
events an analysis asks about (:meth:`EventTable.args`).

The host call tree and the CPU->GPU links (the rules of TraceLens v1.0.0's
``TraceToTree``: per-thread stack by start time with its 1 us "bleed" tolerance, runtime
call -> ``ac2g`` flow -> GPU event on the flow end's pid/tid, graph launches by linking
id) are built once, on demand, by :meth:`EventTable.call_tree`.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from .errors import TraceError
from .vec import LastWins, dense_codes
from .host_tree import host_parents
from traceladder.core.child_process import Forked, forked

__all__ = [
    "MISSING",
    "TraceError",
    "EventTable",
    "CallTree",
    "GPU_CATS",
    "RUNTIME_CATS",
]

#: Sentinel for a missing integer field (correlation, External id, flow id, stream).
MISSING = np.iinfo(np.int64).min

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
GRAPH_LAUNCH_NAMES = ("cudaGraphLaunch", "hipGraphLaunch")


def beside(work: Callable[[], Any], trace: Path, enabled: bool) -> AbstractContextManager[Forked]:
    """Part of one trace's analysis in a forked child (core/child_process.py ``forked``): a bad
    trace found in the child is the same TraceError in the caller."""
    return forked(
        work,
        enabled,
        passes=(TraceError,),
        rebuild=lambda reason: TraceError(trace, reason),
        name="second analysis process",
    )


class _Links(msgspec.Struct, gc=False):
    correlation: Any = None
    external_id: Any = msgspec.field(name="External id", default=None)


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def as_int(v: Any) -> int:
    """An id arg as the int the columns hold: MISSING for null, bool, NaN, infinity, non-numeric
    text, or a number outside int64 (the columns' type)."""
    if isinstance(v, bool) or v is None:
        return MISSING
    if isinstance(v, int):
        n = v
    elif isinstance(v, float):
        if not math.isfinite(v):
            return MISSING
        n = int(v)
    elif isinstance(v, str):
        try:
            n = int(v, 0)
        except ValueError:
            return MISSING
    else:
        return MISSING
    return n if _I64_MIN <= n <= _I64_MAX else MISSING


class _CodeDict(dict):
    """value -> code; a missing value gets the next code (one C-level lookup per hit)."""

    __slots__ = ("table",)

    def __missing__(self, value: Any) -> int:
        c = len(self.table)
        self[value] = c
        self.table.append(value)
        return c


class Interner:
    """Maps hashable values to dense int codes, keeping the value table."""

    __slots__ = ("codes", "values")

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.codes: dict[Any, int] = _CodeDict()
        self.codes.table = self.values

    def code(self, value: Any) -> int:
        return self.codes[value]

    def encode(self, seq) -> np.ndarray:
        """Codes for a whole column, in one pass (map over the dict's C-level lookup)."""
        try:
            return np.fromiter(map(self.codes.__getitem__, seq), dtype=np.int32, count=len(seq))
        except TypeError:  # a list or an object where a name or an id belongs (a broken trace): its text
            keys = [v if isinstance(v, Hashable) else str(v) for v in seq]
            return np.fromiter(map(self.codes.__getitem__, keys), dtype=np.int32, count=len(keys))

    def encode_field(self, get, records: list) -> np.ndarray:
        """Codes of one field of every record, in one pass with no list built; a value that
        cannot be a key falls back to `encode` (its text)."""
        try:
            return np.fromiter(map(self.codes.__getitem__, map(get, records)), dtype=np.int32, count=len(records))
        except TypeError:
            return self.encode(list(map(get, records)))


@dataclass
class EventTable:
    """All events of one trace, one numpy array per field.

    ``cat``/``name``/``pid``/``tid``/``ph`` are int32 codes into ``cats``/``names``/
    ``pids``/``tids``/``phs``.  ``ts``/``dur`` are float64 microseconds (NaN when absent).
    ``corr``/``ext``/``stream``/``flow_id`` are int64 with :data:`MISSING` when absent;
    ``corr``/``ext``/``stream`` are decoded from ``args`` only for the categories that
    link CPU and GPU work (``args_decoded`` marks them).
    """

    path: Path
    fmt: str
    cat: np.ndarray
    cats: list[str | None]
    ph: np.ndarray
    phs: list[str]
    name: np.ndarray
    names: list[str]
    pid: np.ndarray
    pids: list[Any]
    tid: np.ndarray
    tids: list[Any]
    ts: np.ndarray
    dur: np.ndarray
    flow_id: np.ndarray
    corr: np.ndarray
    ext: np.ndarray
    stream: np.ndarray
    streams: list[Any]
    has_args: np.ndarray
    raw_args: list
    metadata: dict[str, Any] = field(default_factory=dict)
    #: events whose link args (correlation, External id) the reader left undecoded
    deferred_links: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64), repr=False)
    #: each event's position in the file's event list (TraceLens's UID), where the reader
    #: left events out of the table (python functions); None: the table index is it
    uid: np.ndarray | None = field(default=None, repr=False)
    _tree: "CallTree | None" = field(default=None, repr=False)
    _cat_cache: dict = field(default_factory=dict, repr=False)

    # -- basic helpers -------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.cat.shape[0])

    def cat_code(self, name: str) -> int:
        try:
            return self.cats.index(name)
        except ValueError:
            return -1

    def is_cat(self, *names: str) -> np.ndarray:
        """Boolean mask of the events whose category is one of ``names``."""
        key = names
        m = self._cat_cache.get(key)
        if m is None:
            codes = [self.cat_code(n) for n in names]
            codes = [c for c in codes if c >= 0]
            m = np.isin(self.cat, np.asarray(codes, dtype=np.int32)) if codes else np.zeros(len(self), bool)
            self._cat_cache[key] = m
        return m

    def uid_of(self, i: int) -> int:
        """TraceLens's UID of event ``i``: its index in the file's ``traceEvents``."""
        return int(i) if self.uid is None else int(self.uid[int(i)])

    def name_of(self, i: int) -> str:
        return self.names[int(self.name[i])]

    def names_of(self, idx: np.ndarray) -> list[str]:
        names = self.names
        return [names[c] for c in self.name[idx].tolist()]

    def args(self, i: int) -> dict:
        """Decode one event's args (lazily; {} when absent)."""
        raw = self.raw_args[int(i)]
        if raw is None or len(raw) == 0:
            return {}
        val = msgspec.json.decode(raw)
        return val if isinstance(val, dict) else {}

    def decode_args(self, idx, type=dict) -> list:
        """Decode the args of many events in one call (one JSON array)."""
        raws = [self.raw_args[int(i)] for i in idx]
        if not raws:
            return []
        buf = b"[" + b",".join(r if (r is not None and len(r)) else b"{}" for r in raws) + b"]"
        try:
            return msgspec.json.decode(buf, type=list[type])
        except msgspec.ValidationError:
            # an args value that is no object of that shape (null, a string, a field of another
            # type) in a broken trace: that event counts as having none of those args
            return [_decode_or_empty(r, type) for r in raws]

    def thread_names(self) -> dict[tuple[Any, Any], str]:
        return self.metadata.get("thread_names", {})

    def complete_links(self) -> None:
        """Decode the link args the reader deferred, into ``corr`` / ``ext``."""
        idx = self.deferred_links
        if idx.size == 0:
            return
        self.deferred_links = np.empty(0, np.int64)
        vals = self.decode_args(idx.tolist(), type=_Links)
        self.corr[idx] = [as_int(v.correlation) for v in vals]
        self.ext[idx] = [as_int(v.external_id) for v in vals]

    def call_tree(self) -> "CallTree":
        if self._tree is None:
            self._tree = CallTree(self)
        return self._tree


class CallTree:
    """Host call stacks and CPU->GPU links, by TraceLens v1.0.0's rules.

    Attributes (arrays over all events, -1 where none):
      ``host_parent``: parent of a host event (cpu_op / cuda_runtime / cuda_driver);
      ``gpu_runtime``: the runtime event a GPU event is linked to (last link wins);
      ``linked``: GPU events linked to the host tree (TraceLens's ``event["tree"]``);
      ``pairs_rt``/``pairs_gpu``: every (runtime, GPU event) link, in link order (a GPU
      event reached twice appears twice, as in TraceLens's ``gpu_events`` lists).
    """

    def __init__(self, t: EventTable):
        # a weak reference: table -> tree -> table would be a cycle, and a cycle keeps a
        # whole trace (arrays and its JSON buffer) alive until the cyclic GC runs
        self.t = weakref.proxy(t)
        n = len(t)
        self.host_parent = np.full(n, -1, dtype=np.int64)
        self._build_host_tree()
        self.linking_key = self._choose_linking_key()
        if self.linking_key != "correlation":
            t.complete_links()  # cpu_ops take part in External-id linking
        self.link = t.corr if self.linking_key == "correlation" else t.ext
        self.gpu_runtime = np.full(n, -1, dtype=np.int64)
        self.linked = np.zeros(n, dtype=bool)
        self._link_gpu()

    # TraceLens BaseTraceToTree.build_host_call_stack_tree (add_python_func=False)
    def _build_host_tree(self) -> None:
        t = self.t
        host_mask = t.is_cat("cpu_op", *RUNTIME_CATS) & ~np.isnan(t.ts) & ~np.isnan(t.dur)
        idx = np.flatnonzero(host_mask)
        if idx.size == 0:
            return
        key = t.pid[idx].astype(np.int64) * (1 << 32) + t.tid[idx].astype(np.int64)
        perm = np.lexsort((t.ts[idx], key))  # by thread, then start (ties in file order)
        order = idx[perm]
        ts = t.ts[order]
        parent_out = host_parents(ts, ts + t.dur[order], key[perm])
        has = parent_out >= 0
        self.host_parent[order[has]] = order[parent_out[has]]

    def _choose_linking_key(self) -> str:
        t = self.t
        rt = np.flatnonzero(t.is_cat(*RUNTIME_CATS))
        for i in rt.tolist():
            if "launch" in t.names[t.name[i]].lower():
                return "correlation" if t.corr[i] != MISSING else "External id"
        return "External id"

    # TraceLens TraceToTree.add_gpu_ops_to_tree, for all runtime calls at once
    def _link_gpu(self) -> None:
        t = self.t
        link = self.link
        is_flow = t.is_cat("ac2g")
        flow_idx = np.flatnonzero(is_flow)
        fph, ffid = t.ph[flow_idx], t.flow_id[flow_idx]
        ph_s = t.phs.index("s") if "s" in t.phs else -2
        ph_f = t.phs.index("f") if "f" in t.phs else -2
        starts = LastWins(ffid[fph == ph_s], flow_idx[fph == ph_s])
        ends = LastWins(ffid[fph == ph_f], flow_idx[fph == ph_f])
        gpu_mask = t.is_cat(*GPU_CATS)
        rt_idx = np.flatnonzero(t.is_cat(*RUNTIME_CATS))
        graph_codes = [t.names.index(n) for n in GRAPH_LAUNCH_NAMES if n in t.names]
        is_graph = np.isin(t.name[rt_idx], graph_codes) if graph_codes else np.zeros(rt_idx.size, bool)
        # plain launches: runtime -> flow start/end by link id -> the last event (not a
        # flow) on the flow end's pid/tid whose args carry that id
        rt = rt_idx[~is_graph]
        lid = link[rt]
        ok = (lid != MISSING) & starts.has(lid)
        e = ends.get(lid)
        ok &= e >= 0
        rt, e = rt[ok], e[ok]
        cand = np.flatnonzero(~is_flow & t.has_args & (link != MISSING))
        nc = cand.size
        # (pid, tid, link id) -> one dense code, for the candidates and the queries together
        code = dense_codes(
            np.concatenate([t.pid[cand], t.pid[e]]),
            np.concatenate([t.tid[cand], t.tid[e]]),
            np.concatenate([link[cand], t.flow_id[e]]),
        )
        g = LastWins(code[:nc], cand).get(code[nc:])
        # TraceLens would attach any event found here; only GPU events matter to the
        # reports, and attaching a host event can loop forever there
        ok = g >= 0
        ok[ok] = gpu_mask[g[ok]]
        pairs_rt, pairs_gpu = rt[ok], g[ok]
        if is_graph.any():  # graph launches: every GPU event with the launch's link id
            gi = np.flatnonzero(gpu_mask & (link != MISSING))
            by_link: dict[int, list[int]] = {}
            for k, lk in zip(gi.tolist(), link[gi].tolist()):
                by_link.setdefault(lk, []).append(k)
            grt: list[int] = []
            ggpu: list[int] = []
            for r in rt_idx[is_graph].tolist():
                lk = int(link[r])
                for k in by_link.get(lk, ()) if lk != MISSING else ():
                    grt.append(r)
                    ggpu.append(k)
            # merged in runtime (file) order, a graph launch's events in link order
            pairs_rt = np.concatenate([pairs_rt, np.asarray(grt, dtype=np.int64)])
            pairs_gpu = np.concatenate([pairs_gpu, np.asarray(ggpu, dtype=np.int64)])
            order = np.argsort(pairs_rt, kind="stable")
            pairs_rt, pairs_gpu = pairs_rt[order], pairs_gpu[order]
        self.pairs_rt = pairs_rt.astype(np.int64, copy=False)
        self.pairs_gpu = pairs_gpu.astype(np.int64, copy=False)
        if self.pairs_gpu.size:
            # a GPU event reached twice keeps its last link, as in TraceLens
            rev_gpu = self.pairs_gpu[::-1]
            uniq, first = np.unique(rev_gpu, return_index=True)
            self.gpu_runtime[uniq] = self.pairs_rt[::-1][first]
            self.linked[self.pairs_gpu] = True

    def ancestors(self, i: int):
        p = int(self.host_parent[i])
        while p >= 0:
            yield p
            p = int(self.host_parent[p])


def _decode_or_empty(raw: bytes | None, type: Any) -> Any:
    try:
        return msgspec.json.decode(raw if raw else b"{}", type=type)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return msgspec.json.decode(b"{}", type=type)
