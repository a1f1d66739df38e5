"""Collectives across ranks: TraceLens v1.0.0's multi-rank collective report, plus skew
and stragglers, for ``traceladder analyze-ranks`` and the DAG.

``analyze_ranks(paths, out_dir, gpus_per_node=None)`` reads one trace per rank and writes,
directly into ``out_dir``, TraceLens's CSVs (``nccl_summary_long``,
``nccl_summary_implicit_sync``, ``straggler_summary``, ``nccl_long``,
``nccl_implicit_sync``, and ``nccl_all2allv`` / ``nccl_summary_all2allv`` when the traces
have ``all_to_allv``), with ``node_id`` / ``node_span`` columns when GPUs per node is
known (given, or as TraceLens finds it: the length of rank 0's ``deviceProperties``),
and ``collectives.json`` (returned too).

Where the collectives come from (:func:`collective_events`):

* GPU traces (through ``reports.coll_analysis.collective_events``, shared with the
  one-rank ``coll_analysis.csv``): as TraceLens's ``NcclAnalyser`` reads them, the ``kernel`` events whose
  name matches ``nccl`` / ``rccl`` / ``cross_device_reduce`` (case-insensitive) and whose
  args carry ``correlation`` or ``External id``; their args (copied by PyTorch from
  ``record_param_comms``) give ``Process Group Name``, ``Collective name``, ``dtype``,
  ``In msg nelems``, ... .  A kernel without ``Collective name`` matching
  ``cross_device_reduce`` is an ``allreduce``.
* CPU traces (gloo; the CPU proxy): each ``gloo:*`` ``user_annotation`` on a gloo worker
  thread is one collective, its duration the collective's duration.  It is paired, per
  kind and in order, with the ``c10d::*`` ``cpu_op`` that issued it (the next unpaired
  one, if it started before the range), whose ``record_shapes`` Input Dims / Concrete Inputs give
  the output size and all-to-all split sizes; the range's own Input Dims and Input type
  give the input size and dtype.  Names follow what PyTorch's NCCL backend records for
  the same call (``allreduce``, ``allgather``, ``_allgather_base``, ``all_to_all``, or
  ``all_to_allv`` when split sizes are given, ...).  The process group comes from
  ``distributedInfo`` when the trace has a single one.

Matching is by process group and order on each rank (TraceLens's ``collective_id``);
every rank must have recorded the same sequence, else :class:`MultiRankError` names the
first rank that differs and its first mismatch.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceladder.storage.layout import COLLECTIVES_OBJECT

from .events import EventTable, TraceError
from .readers.pytorch_json import load_bytes, read_pytorch_json
from .reports import coll_analysis as ca
from .common.values import finite
from .reports import nccl_reports as nr

__all__ = [
    "SCHEMA",
    "REPORT_FILES",
    "MultiRankError",
    "collective_events",
    "rank_of",
    "analyze_ranks",
    "main",
]

SCHEMA = 1
#: the CSVs always written (header-only when empty); the all2allv pair only when present
REPORT_FILES = (
    "nccl_summary_long.csv",
    "nccl_summary_implicit_sync.csv",
    "straggler_summary.csv",
    "nccl_long.csv",
    "nccl_implicit_sync.csv",
)
_RANK_NAME_RE = re.compile(r"rank[\[\-_]?(\d+)", re.IGNORECASE)

# c10d op -> the gloo:* range kind it runs as, and the Collective name NCCL would record
_C10D = {
    "c10d::allreduce_": ("all_reduce", "allreduce"),
    "c10d::allreduce_coalesced_": ("all_reduce", "allreduce_coalesced"),
    "c10d::allgather_": ("all_gather", "allgather"),
    "c10d::_allgather_base_": ("all_gather", "_allgather_base"),
    "c10d::allgather_coalesced_": ("all_gather", "allgather_coalesced"),
    "c10d::allgather_into_tensor_coalesced_": ("all_gather", "allgather_into_tensor_coalesced"),
    "c10d::alltoall_base_": ("all_to_all", "all_to_all"),
    "c10d::alltoall_": ("all_to_all", "all_to_all"),
    "c10d::reduce_scatter_": ("reduce_scatter", "reduce_scatter"),
    "c10d::_reduce_scatter_base_": ("reduce_scatter", "_reduce_scatter_base"),
    "c10d::reduce_scatter_tensor_coalesced_": ("reduce_scatter", "reduce_scatter_tensor_coalesced"),
    "c10d::broadcast_": ("broadcast", "broadcast"),
    "c10d::reduce_": ("reduce", "reduce"),
    "c10d::gather_": ("gather", "gather"),
    "c10d::scatter_": ("scatter", "scatter"),
    "c10d::barrier": ("barrier", "barrier"),
    "c10d::send": ("send", "send"),
    "c10d::recv_": ("recv", "recv"),
}
# a gloo:* range with no c10d op found for it
_GLOO_NAME = {"all_reduce": "allreduce", "all_gather": "allgather", "all_to_all": "all_to_all"}
# record_shapes "Input type" -> the dtype names record_param_comms writes
_DTYPE = {
    "float": "Float",
    "double": "Double",
    "c10::Half": "Half",
    "c10::BFloat16": "BFloat16",
    "long int": "Long",
    "long": "Long",
    "int": "Int",
    "short int": "Short",
    "short": "Short",
    "signed char": "Char",
    "unsigned char": "Byte",
    "bool": "Bool",
    "c10::Float8_e4m3fn": "Float8_e4m3fn",
    "c10::Float8_e5m2": "Float8_e5m2",
}


class MultiRankError(Exception):
    """Bad multi-rank input; ``str()`` is one line naming the rank and the file."""

    def __init__(self, message: str, rank: int | None = None, path: Path | str | None = None):
        self.rank = rank
        self.path = Path(path) if path is not None else None
        who = f"rank {rank}" if rank is not None else "rank unknown"
        where = f" ({self.path})" if self.path is not None else ""
        super().__init__(f"{who}{where}: {message}")


class _Shapes(msgspec.Struct):
    input_dims: Any = msgspec.field(name="Input Dims", default=None)
    input_type: Any = msgspec.field(name="Input type", default=None)
    concrete: Any = msgspec.field(name="Concrete Inputs", default=None)


class _DevProps(msgspec.Struct):
    deviceProperties: Any = None


# -- ranks ---------------------------------------------------------------------------
def rank_from_name(path: Path | str) -> int | None:
    m = _RANK_NAME_RE.search(Path(path).name)
    return int(m.group(1)) if m else None


def rank_of(t: EventTable) -> int | None:
    """``distributedInfo.rank``, else ``rank[R]`` / ``rank-R`` / ``rank_R`` / ``rankR`` in the name."""
    di = t.metadata.get("distributedInfo")
    if isinstance(di, dict) and isinstance(di.get("rank"), int) and not isinstance(di.get("rank"), bool):
        return di["rank"]
    return rank_from_name(t.path)


# -- collective extraction -------------------------------------------------------------
def _numel(d: Any) -> int | None:
    """Elements of one tensor's dims ([a, b]) or of a tensor list's ([[a], [b, c]])."""
    if not isinstance(d, list):
        return None
    if d and all(isinstance(x, list) for x in d):
        parts = [_numel(x) for x in d]
        return sum(p for p in parts if p is not None)
    if all(isinstance(x, int) and not isinstance(x, bool) for x in d):
        return int(np.prod(d, dtype=np.int64)) if d else None
    return None


def _dims(s: _Shapes | None, i: int) -> int | None:
    if s is None or not isinstance(s.input_dims, list) or i >= len(s.input_dims):
        return None
    return _numel(s.input_dims[i])


def _dtype(s: _Shapes | None) -> str | None:
    if s is None or not isinstance(s.input_type, list):
        return None
    for ty in s.input_type:
        if isinstance(ty, str) and ty and ty not in ("TensorList", "Scalar", "ScalarList", "GenericList"):
            return _DTYPE.get(ty, ty)
    return None


def _split(s: _Shapes | None, i: int) -> str:
    if s is None or not isinstance(s.concrete, list) or i >= len(s.concrete):
        return "[]"
    v = s.concrete[i]
    return v if isinstance(v, str) and v.startswith("[") else "[]"


def _single_pg(t: EventTable) -> tuple[Any, Any, Any]:
    """(name, ranks string, size) of the trace's process group when it has exactly one."""
    di = t.metadata.get("distributedInfo")
    if not isinstance(di, dict):
        return None, None, None
    cfg = di.get("pg_config")
    if isinstance(cfg, list) and len(cfg) == 1 and isinstance(cfg[0], dict):
        pg = cfg[0]
        ranks = pg.get("ranks")
        ranks_s = "[" + ", ".join(str(r) for r in ranks) + "]" if isinstance(ranks, list) else None
        size = pg.get("pg_size", len(ranks) if isinstance(ranks, list) else None)
        return pg.get("pg_name"), ranks_s, size
    if cfg is None and isinstance(di.get("world_size"), int) and di.get("pg_count") in (None, 1):
        ws = di["world_size"]
        return "0", "[" + ", ".join(str(r) for r in range(ws)) + "]", ws
    return None, None, None


def _gpu_events(t: EventTable) -> list[dict]:
    """NCCL/RCCL kernels, through the shared extractor of ``coll_analysis`` (one place
    for TraceLens's collective-kernel filter and args reading)."""
    df = ca.collective_events(t)
    if df.empty:
        return []
    keep = ["ts", "dur", *nr.METADATA_FIELDS, "name", "event"]
    rows = df[keep].to_dict("records")
    for row in rows:
        row["device"] = "gpu"
    return rows


def _cpu_events(t: EventTable) -> list[dict]:
    ua = np.flatnonzero(t.is_cat("user_annotation") & ~np.isnan(t.ts) & ~np.isnan(t.dur))
    g_idx = [i for i, n in zip(ua.tolist(), t.names_of(ua)) if n.startswith("gloo:")]
    if not g_idx:
        return []
    g_idx_a = np.asarray(g_idx, dtype=np.int64)
    ops = np.flatnonzero(t.is_cat("cpu_op") & ~np.isnan(t.ts))
    c_idx = [i for i, n in zip(ops.tolist(), t.names_of(ops)) if n in _C10D]
    c_idx_a = np.asarray(c_idx, dtype=np.int64)
    g_shapes = t.decode_args(g_idx_a, _Shapes)
    c_shapes = t.decode_args(c_idx_a, _Shapes) if c_idx else []
    # per kind: the c10d ops in start order, paired in order with the ranges
    queues: dict[str, list[int]] = {}
    for j in sorted(range(len(c_idx)), key=lambda j: t.ts[c_idx[j]]):
        queues.setdefault(_C10D[t.name_of(c_idx[j])][0], []).append(j)
    heads = {k: 0 for k in queues}
    pair: dict[int, int] = {}
    for gi in sorted(range(len(g_idx)), key=lambda k: t.ts[g_idx[k]]):
        kind = t.name_of(g_idx[gi])[len("gloo:") :]
        q = queues.get(kind)
        if not q:
            continue
        h = heads[kind]
        # gloo runs a process group's work in issue order: the next unpaired op of this
        # kind, if it was issued before the range started (a range whose op fell before
        # the profiling window stays unpaired and keeps its own sizes)
        if h < len(q) and t.ts[c_idx[q[h]]] <= t.ts[g_idx[gi]] + 1.0:
            pair[gi] = q[h]
            heads[kind] = h + 1
    pg_name, pg_ranks, pg_size = _single_pg(t)
    rows = []
    for gi, i in enumerate(g_idx):
        nm = t.name_of(i)
        kind = nm[len("gloo:") :]
        gs = g_shapes[gi]
        cj = pair.get(gi)
        cs = c_shapes[cj] if cj is not None else None
        op = t.name_of(c_idx[cj]) if cj is not None else None
        coll = _C10D[op][1] if op else _GLOO_NAME.get(kind, kind)
        dtype = _dtype(gs) or _dtype(cs)
        in_n = _dims(gs, 0)
        out_n = in_n
        in_split = out_split = "[]"
        if op in ("c10d::_allgather_base_", "c10d::alltoall_base_", "c10d::alltoall_", "c10d::_reduce_scatter_base_"):
            out_n = _dims(cs, 0)
            in_n = _dims(cs, 1) if _dims(cs, 1) is not None else in_n
        elif op in ("c10d::allgather_", "c10d::allgather_coalesced_", "c10d::allgather_into_tensor_coalesced_"):
            in_n = _dims(cs, 1) if _dims(cs, 1) is not None else in_n
            out_n = in_n * pg_size if (in_n is not None and isinstance(pg_size, int)) else None
        elif op in ("c10d::reduce_scatter_", "c10d::reduce_scatter_tensor_coalesced_"):
            out_n = _dims(cs, 0)
            in_n = out_n * pg_size if (out_n is not None and isinstance(pg_size, int)) else in_n
        elif op is not None and in_n is None:
            in_n = out_n = _dims(cs, 0)
        elif op is None and kind == "all_gather":
            out_n = in_n * pg_size if (in_n is not None and isinstance(pg_size, int)) else None
        if op == "c10d::alltoall_base_":
            out_split, in_split = _split(cs, 3), _split(cs, 4)
            if in_split != "[]" or out_split != "[]":
                coll = "all_to_allv"
        if op == "c10d::barrier":
            dtype = dtype or "Byte"
        rows.append(
            {
                "ts": float(t.ts[i]),
                "dur": float(t.dur[i]),
                "Process Group Name": pg_name,
                "Process Group Ranks": pg_ranks,
                "Collective name": coll,
                "Group size": pg_size,
                "dtype": dtype,
                "In msg nelems": in_n,
                "Out msg nelems": out_n,
                "In split size": in_split,
                "Out split size": out_split,
                "stream": "gloo",
                "device": "cpu",
                "name": nm,
                "op": op,
                "event": i,
            }
        )
    return rows


def collective_events(t: EventTable) -> list[dict]:
    """The collectives of one trace, in trace order, as TraceLens's per-rank rows.

    Each dict has ``ts``, ``dur`` (us), TraceLens's metadata fields (``Process Group
    Name``, ``Process Group Ranks``, ``Collective name``, ``Group size``, ``dtype``, ``In
    msg nelems``, ``Out msg nelems``, ``In split size``, ``Out split size``, ``stream``;
    None where the trace does not say), plus ``device`` ("gpu" | "cpu"), ``name`` (the
    kernel or ``gloo:*`` range name) and ``event`` (its index in the table); CPU rows also
    have ``op`` (the ``c10d::*`` op paired with the range, or None).  GPU collectives
    (NCCL/RCCL kernels) win when a trace has both.
    """
    rows = _gpu_events(t)
    return rows if rows else _cpu_events(t)


# -- loading ---------------------------------------------------------------------------
def _gpus_per_node(path: Path, data: bytes) -> int | None:
    try:
        props = msgspec.json.decode(data, type=_DevProps).deviceProperties
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return len(props) if isinstance(props, list) and props else None


def _load_one(path: str, want_gpn: bool) -> dict:
    """One rank's trace -> its collectives and what the checks need (small, picklable:
    a worker process returns it). A bad trace gives ``{"error": reason}``."""
    p = Path(path)
    try:
        data = load_bytes(p, mapped=True)
        t = read_pytorch_json(p, data)
    except TraceError as exc:
        return {"path": p, "error": exc.reason}
    di = t.metadata.get("distributedInfo")
    rows = collective_events(t)
    return {
        "path": p,
        "rank": rank_of(t),
        "world_size": di["world_size"] if isinstance(di, dict) and isinstance(di.get("world_size"), int) else None,
        "gpn": _gpus_per_node(p, data) if want_gpn else None,
        "rows": rows,
        "device": rows[0]["device"] if rows else ("gpu" if t.is_cat("kernel").any() else "cpu"),
    }


def _load_one_packed(args: tuple[str, bool]) -> dict:
    return _load_one(*args)


def _read_all(paths: list[Path], want_gpn: bool, jobs: int) -> list[dict]:
    """Read the ranks, ``jobs`` at a time in worker processes (one trace per worker at a
    time, so a worker's memory is one trace's), in input order."""
    work = [(str(p), want_gpn) for p in paths]
    jobs = min(jobs, len(work))
    if jobs <= 1:
        return [_load_one(*w) for w in work]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as ex:
        return list(ex.map(_load_one_packed, work))


def default_jobs(n: int) -> int:
    import os

    return max(1, min(n, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)))


def _load(paths: list[Path], want_gpn: bool, jobs: int = 1) -> tuple[dict[int, dict], int, int | None]:
    by_rank: dict[int, dict] = {}
    world_sizes: list[tuple[int, int, Path]] = []
    gpn_data: dict[int, int | None] = {}
    for res in _read_all(paths, want_gpn, jobs):
        p = res["path"]
        if "error" in res:
            raise MultiRankError(res["error"], rank_from_name(p), p)
        r = res["rank"]
        if r is None:
            raise MultiRankError("no distributedInfo.rank and no rank in the file name (rank[R], rank-R, rank_R, rankR)", None, p)
        if r in by_rank:
            raise MultiRankError(f"duplicated rank: {by_rank[r]['path']} is rank {r} too", r, p)
        if res["world_size"] is not None:
            world_sizes.append((res["world_size"], r, p))
        if want_gpn:
            gpn_data[r] = res["gpn"]
        by_rank[r] = {"path": p, "rows": res["rows"], "device": res["device"]}
    if not by_rank:
        raise MultiRankError("no traces given")
    ws = max(by_rank) + 1
    if world_sizes:
        w0, r0, p0 = world_sizes[0]
        for w, r, p in world_sizes[1:]:
            if w != w0:
                raise MultiRankError(f"distributedInfo.world_size is {w}, but {w0} in rank {r0}'s trace {p0}", r, p)
        ws = max(ws, w0)
    missing = [r for r in range(ws) if r not in by_rank]
    if missing:
        have = ", ".join(f"{r}={by_rank[r]['path'].name}" for r in sorted(by_rank))
        src = "distributedInfo.world_size" if world_sizes and world_sizes[0][0] == ws else "the highest rank given"
        raise MultiRankError(f"missing: no trace for it (world size {ws} from {src}; got {have})", missing[0], None)
    gpn = gpn_data.get(0) if want_gpn else None
    return by_rank, ws, gpn


# -- validation ------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "none"
    return repr(v.item() if hasattr(v, "item") else v)


def _check_sequences(df: pd.DataFrame, by_rank: dict[int, dict], simplified: bool) -> None:
    ranks_all = sorted(by_rank)
    for pg, sub in df.groupby("Process Group Name", sort=True):
        seqs: dict[int, list] = {}
        for r, g in sub.groupby("rank", sort=True):
            g = g.sort_values("index_in_group")
            seqs[int(r)] = list(zip(g["Collective name"].tolist(), g["collective_id"].tolist()))
        expected = set(seqs)
        if simplified:
            expected = set(ranks_all)
        else:
            members = [v for v in sub["Process Group Ranks"].tolist() if v is not None and not (isinstance(v, float) and v != v)]
            if members:
                expected |= {r for r in nr.parse_pg_ranks(members[0]) if r in by_rank}
        names = {r: tuple(n for n, _ in seqs.get(r, [])) for r in expected}
        common = Counter(names.values()).most_common()
        top = common[0][1]
        ref_seq = min((s for s, c in common if c == top), key=lambda s: min(r for r in expected if names[r] == s))
        ref = min(r for r in expected if names[r] == ref_seq)
        for r in sorted(expected):
            s = names[r]
            if s == ref_seq:
                continue
            k = next((i for i, (a, b) in enumerate(zip(s, ref_seq)) if a != b), min(len(s), len(ref_seq)))
            mine = _fmt(s[k]) if k < len(s) else "nothing"
            theirs = _fmt(ref_seq[k]) if k < len(ref_seq) else "nothing"
            raise MultiRankError(
                f"collective sequence differs from rank {ref}'s in process group {pg!r}: "
                f"{len(s)} collectives against {len(ref_seq)}; first mismatch at #{k}: {mine}, rank {ref} has {theirs}",
                r,
                by_rank[r]["path"],
            )
    if simplified:
        return
    # metadata must agree across ranks for the collectives TraceLens compares
    fields = ["Process Group Ranks", "Group size", "dtype", "In msg nelems", "Out msg nelems"]
    for cid, g in df.groupby("collective_id", sort=False):
        name = g["Collective name"].iloc[0]
        ctype = nr.COLLECTIVE_TYPE.get(name) if isinstance(name, str) else None
        if ctype not in nr.IMPLICIT_SYNC and ctype != "alltoallv":
            continue
        g = g.sort_values("rank")
        for f in fields if ctype != "alltoallv" else fields[:3]:
            vals = g[f].tolist()
            cnt = Counter(_fmt(v) for v in vals).most_common()
            ref_v = cnt[0][0]
            for r, v in zip(g["rank"].tolist(), vals):
                if _fmt(v) != ref_v:
                    ref_r = next(rr for rr, vv in zip(g["rank"].tolist(), vals) if _fmt(vv) == ref_v)
                    raise MultiRankError(
                        f"collective sequence differs from rank {ref_r}'s: {cid} ({name}) has {f} {_fmt(v)}, rank {ref_r} has {ref_v}",
                        int(r),
                        by_rank[int(r)]["path"],
                    )


# -- collectives.json --------------------------------------------------------------------
def _stats(vals: list[float], total: bool = False) -> dict[str, float | None]:
    v = [x for x in vals if x is not None and math.isfinite(x)]
    if not v:
        out: dict[str, float | None] = {"mean": None, "min": None, "max": None}
    else:
        out = {"mean": sum(v) / len(v), "min": min(v), "max": max(v)}
    if total:
        out = {"total": sum(v) if v else None, **out}
    return out


def _summary(df_long: pd.DataFrame, by_rank: dict[int, dict], sync: pd.DataFrame) -> dict[str, Any]:
    """Per Collective name: count, latency, bandwidth, skews, waits and the straggler."""
    bw: dict[str, tuple[Any, Any, Any]] = {}
    if not sync.empty:
        for cid, full, a, b in zip(sync["collective_id"], sync["Full msg size (MB)"], sync["algo bw (GB/s)"], sync["bus bw (GB/s)"]):
            bw[cid] = (finite(full), finite(a), finite(b))
    types: dict[str, dict[str, Any]] = {}
    for cid, g in df_long.groupby("collective_id", sort=False):
        name = g["Collective name"].iloc[0]
        key = str(name) if isinstance(name, str) else "unknown"
        ranks = [int(r) for r in g["rank"].tolist()]
        ts = g["ts"].to_numpy(float)
        te = ts + g["dur"].to_numpy(float)
        waits = ts.max() - ts
        st = types.setdefault(
            key,
            {
                "rows": [],
                "device": by_rank[ranks[0]]["device"],
                "pg": set(),
                "dtype": set(),
            },
        )
        st["pg"].add(str(g["Process Group Name"].iloc[0]))
        d = g["dtype"].iloc[0]
        if isinstance(d, str):
            st["dtype"].add(d)
        last = ranks[int(np.argmin(waits))]
        st["rows"].append(
            {
                "latency": float(g["dur"].min()),
                "start_skew": float(waits.max()),
                "end_skew": float(te.max() - te.min()),
                "waits": dict(zip(ranks, waits.tolist())),
                "last": last,
                "first": ranks[int(np.argmax(waits))] if len(ranks) else None,
                "size": bw.get(cid, (None, None, None))[0],
                "algo": bw.get(cid, (None, None, None))[1],
                "bus": bw.get(cid, (None, None, None))[2],
                "wall": float(te.max() - ts.min()),
            }
        )
    out: dict[str, Any] = {}
    for key, st in sorted(types.items(), key=lambda kv: -sum(r["latency"] for r in kv[1]["rows"])):
        rows = st["rows"]
        ctype = nr.COLLECTIVE_TYPE.get(key)
        ranks = sorted({r for row in rows for r in row["waits"]})
        wait = {r: sum(row["waits"].get(r, 0.0) for row in rows) for r in ranks}
        straggler = min(ranks, key=lambda r: (wait[r], r))
        lasts = [row for row in rows if row["last"] == straggler]
        others = {r: sum(row["waits"][r] for row in lasts if r in row["waits"]) for r in ranks if r != straggler}
        lat = [row["latency"] for row in rows]
        out[key] = {
            "device": st["device"],
            "type": ctype,
            "implicit_sync": ctype in nr.IMPLICIT_SYNC,
            "process_groups": sorted(st["pg"]),
            "dtypes": sorted(st["dtype"]),
            "count": len(rows),
            "latency_us": _stats(lat, total=True),
            "wall_time_us": _stats([row["wall"] for row in rows], total=True),
            "msg_size_mb": _stats([row["size"] for row in rows], total=True),
            "algo_bw_gbs": _stats([row["algo"] for row in rows]),
            "bus_bw_gbs": _stats([row["bus"] for row in rows]),
            "start_skew_us": _stats([row["start_skew"] for row in rows], total=True),
            "end_skew_us": _stats([row["end_skew"] for row in rows], total=True),
            "wait_us": {str(r): wait[r] for r in ranks},
            "mean_wait_us": {str(r): wait[r] / len(rows) for r in ranks},
            "straggler": {
                "rank": straggler,
                "total_wait_us": wait[straggler],
                "times_arrived_last": len(lasts),
                "others_waited_us": {str(r): v for r, v in others.items()},
                "others_waited_total_us": sum(others.values()),
                "others_waited_max_us": max(others.values()) if others else 0.0,
            },
        }
    return out


# -- the API -----------------------------------------------------------------------------
def _write(df: pd.DataFrame, path: Path, columns: list[str] | None = None) -> None:
    """Write a report; one with no columns at all (nothing to report) gets a header."""
    if df is None or (df.empty and len(df.columns) == 0):
        df = pd.DataFrame(columns=columns or [])
    df.to_csv(path, index=False)


def analyze_ranks(paths: list[Path], out_dir: Path, gpus_per_node: int | None = None, jobs: int | None = None) -> dict:
    """Analyse one trace per rank; write the reports into out_dir; return collectives.json.

    collectives.json (schema 1)::

      {"schema": 1, "world_size": n, "gpus_per_node": int | null,
       "gpus_per_node_source": "given" | "deviceProperties" | null,
       "device": "gpu" | "cpu" | "mixed",
       "ranks": [{"rank", "file", "device", "collectives"}],
       "process_groups": [name], "matched": {"collectives", "events", "all_matched"},
       "collectives": {<Collective name>: {
           "device", "type" (TraceLens's collective type or null), "implicit_sync",
           "process_groups", "dtypes", "count",
           "latency_us", "wall_time_us", "msg_size_mb", "start_skew_us", "end_skew_us":
               {"total", "mean", "min", "max"},
           "algo_bw_gbs", "bus_bw_gbs": {"mean", "min", "max"}   # GiB/s, implicit-sync only
           "wait_us", "mean_wait_us": {<rank>: us},
           "straggler": {"rank" (least total wait), "total_wait_us", "times_arrived_last",
                         "others_waited_us": {<rank>: us waited in the collectives it
                         arrived last at}, "others_waited_total_us", "others_waited_max_us"}}},
       "straggler": first row of straggler_summary (implicit-sync collectives) or null,
       "files": [csv names], "notes": [str]}

    latency = the smallest duration across ranks (TraceLens's comm_latency); wall time =
    latest end - earliest start; wait = latest start - the rank's start.

    Raises :class:`MultiRankError` (one line naming the rank and the file) for a missing,
    duplicated or unreadable rank, or a rank whose collective sequence differs.
    """
    if gpus_per_node is not None and (not isinstance(gpus_per_node, int) or gpus_per_node <= 0):
        raise MultiRankError(f"--gpus-per-node must be a positive integer, got {gpus_per_node}")
    paths = [Path(p) for p in paths]
    out_dir = Path(out_dir)
    # ``jobs`` > 1: ranks are read in parallel, in forked worker processes, as TraceLens's
    # multi-rank loader does since its PR #427 (the CLI's default: one per CPU; a caller
    # inside a threaded process, such as an Airflow task, keeps the serial default)
    jobs = 1 if jobs is None else jobs
    by_rank, world, detected = _load(paths, want_gpn=gpus_per_node is None, jobs=jobs)
    gpn = gpus_per_node if gpus_per_node is not None else detected
    rows = []
    for r in sorted(by_rank):
        for row in by_rank[r]["rows"]:
            rows.append({**row, "rank": r})
    df_long, simplified = nr.build_long(rows)
    notes: list[str] = []
    if not df_long.empty:
        _check_sequences(df_long, by_rank, simplified)
    try:
        sync_d, sync = nr.implicit_sync(df_long, simplified)
        a2av = nr.all2allv(df_long)
    except ValueError as exc:  # the checks above should have caught it
        raise MultiRankError(f"inconsistent collectives: {exc}") from None
    reports = {
        "nccl_summary_implicit_sync": nr.summary_implicit_sync(sync),
        "nccl_summary_long": nr.summary_long(df_long),
        "nccl_long": df_long,
        "nccl_implicit_sync": sync_d,
        "straggler_summary": nr.straggler_summary(sync_d, df_long),
    }
    if not a2av.empty:
        reports["nccl_summary_all2allv"] = nr.summary_all2allv(a2av)
        reports["nccl_all2allv"] = a2av
    if gpn is not None:
        reports = {k: nr.add_node_columns(v, gpn) for k, v in reports.items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, df in reports.items():
        _write(df, out_dir / f"{name}.csv", nr.EMPTY_COLUMNS.get(name))

    devices = sorted({by_rank[r]["device"] for r in by_rank})
    if df_long.empty:
        notes.append("no collectives found (no NCCL/RCCL kernels with args, no gloo:* ranges)")
    if "cpu" in devices:
        notes.append(
            "CPU (gloo) collectives: duration = the gloo:* range on the gloo worker thread; sizes and dtypes from "
            "record_shapes (Input Dims / Input type); names as PyTorch's NCCL backend records the same call"
        )
    if simplified:
        notes.append("no process-group metadata: collectives matched by their order on each rank (TraceLens simplified mode)")
    strag = reports["straggler_summary"]
    overall = None
    if strag is not None and not strag.empty:
        top = strag.iloc[0]
        overall = {
            "rank": int(top["rank"]),
            "total_wait_us": finite(top["total_wait_time_us"]),
            "times_arrived_last": int(top["times_arrived_last"]),
            "pct_arrived_last": finite(top["pct_arrived_last"]),
            "num_collectives": int(top["num_collectives"]),
        }
    counts = df_long.groupby("rank").size().to_dict() if not df_long.empty else {}
    n_coll = int(df_long["collective_id"].nunique()) if not df_long.empty else 0
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "world_size": world,
        "gpus_per_node": gpn,
        "gpus_per_node_source": None if gpn is None else ("given" if gpus_per_node is not None else "deviceProperties"),
        "device": devices[0] if len(devices) == 1 else "mixed",
        "ranks": [
            {"rank": r, "file": str(by_rank[r]["path"]), "device": by_rank[r]["device"], "collectives": int(counts.get(r, 0))}
            for r in sorted(by_rank)
        ],
        "process_groups": sorted(str(x) for x in pd.unique(df_long["Process Group Name"])) if n_coll else [],
        "matched": {
            "collectives": n_coll,
            "events": int(len(df_long)),
            "all_matched": bool(n_coll == 0 or _complete(df_long, by_rank, simplified)),
        },
        "collectives": _summary(df_long, by_rank, sync) if n_coll else {},
        "straggler": overall,
        "files": sorted(f"{k}.csv" for k in reports),
        "notes": notes,
    }
    (out_dir / COLLECTIVES_OBJECT).write_text(json.dumps(result, indent=2) + "\n")
    return result


def _complete(df_long: pd.DataFrame, by_rank: dict[int, dict], simplified: bool) -> bool:
    """Every collective seen on every rank of its process group."""
    for _, g in df_long.groupby("collective_id", sort=False):
        if simplified:
            want = set(by_rank)
        else:
            v = g["Process Group Ranks"].iloc[0]
            want = {r for r in nr.parse_pg_ranks(v) if r in by_rank} or set(g["rank"].tolist())
        if set(int(r) for r in g["rank"].tolist()) != want or len(g) != len(want):
            return False
    return True


def main(traces: list[str], out: str, gpus_per_node: int | None = None, jobs: int | None = None) -> int:
    """The ``analyze-ranks`` command: 0, or 2 with one ``error: ...`` line on stderr."""
    try:
        res = analyze_ranks([Path(p) for p in traces], Path(out), gpus_per_node,
                            jobs=default_jobs(len(traces)) if jobs is None else jobs)
    except MultiRankError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {out}: cannot write reports ({exc.strerror or exc})", file=sys.stderr)
        return 2
    m = res["matched"]
    print(
        f"{len(res['ranks'])} ranks, {m['collectives']} collectives matched "
        f"({m['events']} events) -> {out}",
        file=sys.stderr,
    )
    return 0
