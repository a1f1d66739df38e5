"""The reader half of the multi-rank analysis: each rank's collectives out of its trace (NCCL/RCCL
``record_param_comms`` on GPU traces, gloo's ``gloo:*`` annotations on CPU traces), the rank and
GPUs per node a trace belongs to, and the parallel load of every rank's trace.
:mod:`traceladder.analysis.analyzers.ranks` joins what this returns into the reports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np


from ..model.events import EventTable, TraceError
from .pytorch_json import load_bytes, read_pytorch_json
from traceladder.core.errors import TraceladderError

from ..model.collectives import METADATA_FIELDS
from ..model.collectives import collective_events as kernel_collectives


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


class MultiRankError(TraceladderError):
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
    """NCCL/RCCL kernels, through the shared extractor of ``model.collectives`` (one place
    for TraceLens's collective-kernel filter and args reading)."""
    df = kernel_collectives(t)
    if df.empty:
        return []
    keep = ["ts", "dur", *METADATA_FIELDS, "name", "event"]
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


def load_rank(path: str, want_gpn: bool) -> dict:
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
        "steps": profiler_steps(t),
    }


def profiler_steps(t: Any) -> list[tuple[str, float, float]]:
    """The host's ``ProfilerStep#N`` ranges (name, start, end), by start: which step a
    collective ran in (reports/stragglers_per_step.py)."""
    import numpy as np

    codes = [c for c, n in enumerate(t.names) if n.startswith("ProfilerStep#")]
    idx = np.flatnonzero(np.isin(t.name, codes) & t.is_cat("cpu_op", "user_annotation") & ~np.isnan(t.dur))
    idx = idx[np.argsort(t.ts[idx], kind="stable")]
    return [(t.names[t.name[i]], float(t.ts[i]), float(t.ts[i] + t.dur[i])) for i in idx.tolist()]


def _load_rank_packed(args: tuple[str, bool]) -> dict:
    return load_rank(*args)


def _read_all(paths: list[Path], want_gpn: bool, jobs: int) -> list[dict]:
    """Read the ranks, ``jobs`` at a time in worker processes (one trace per worker at a
    time, so a worker's memory is one trace's), in input order."""
    work = [(str(p), want_gpn) for p in paths]
    jobs = min(jobs, len(work))
    if jobs <= 1:
        return [load_rank(*w) for w in work]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as ex:
        return list(ex.map(_load_rank_packed, work))


def default_jobs(n: int) -> int:
    import os

    return max(1, min(n, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)))


def load_ranks(paths: list[Path], want_gpn: bool, jobs: int = 1) -> tuple[dict[int, dict], int, int | None]:
    by_rank: dict[int, dict] = {}
    world_sizes: list[tuple[int, int, Path]] = []
    gpn_data: dict[int, int | None] = {}
    for res in _read_all(paths, want_gpn, jobs):
        p = res["path"]
        if "error" in res:
            raise MultiRankError(res["error"], rank_from_name(p), p)
        r = res["rank"]
        if r is None:
            raise MultiRankError(
                "no distributedInfo.rank and no rank in the file name (rank[R], rank-R, rank_R, rankR)", None, p
            )
        if r in by_rank:
            raise MultiRankError(f"duplicated rank: {by_rank[r]['path']} is rank {r} too", r, p)
        if res["world_size"] is not None:
            world_sizes.append((res["world_size"], r, p))
        if want_gpn:
            gpn_data[r] = res["gpn"]
        by_rank[r] = {"path": p, "rows": res["rows"], "device": res["device"], "steps": res.get("steps", [])}
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
