"""``gpu_timeline.csv``: TraceLens v1.0.0's GPU busy/idle breakdown.

GPU traces (TraceLens ``GPUEventAnalyser`` rules):
  * events: category kernel / gpu_memcpy / gpu_memset, only those linked to the host
    call tree (TraceLens's default; ``include_unlinked=True`` is its
    ``--include_unlinked_kernels``);
  * memcpy: gpu_memcpy, plus ROCm legacy copy kernels (``MEMORY_COPY_*``,
    ``__amd_rocclr_copyBuffer*``);
  * computation: gpu_memset, ROCm legacy fill kernels, and every other kernel/memset
    whose name does not match the communication pattern (``nccl``, ``rccl``,
    ``cross_device_reduce``; case-insensitive search) -- those are communication;
  * exposed_comm = comm - compute; exposed_memcpy = (memcpy - compute) - comm;
    busy = union of all; total = last end - first start; idle = total - busy.

CPU-only traces (no GPU events; our extension, not TraceLens): computation is the
time the main (training) thread spends inside ``cpu_op`` events -- the union of every
op's self time, i.e. of the leaf work, except the c10d collective stubs (an op such as
``aten::mm`` has tiny child ops, so "leaf ops only" would drop its own work);
communication is the union of the ``gloo:*`` ``user_annotation``
ranges (on the gloo worker threads); there is no memcpy; total is the span of the
``ProfilerStep#N`` ranges if any (else of those events) and every interval is clipped
to it.  Same rows and columns as the GPU report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..model.intervals import merge_intervals, subtract_intervals
from ..model.intervals import length as _length
from ..model.events import GPU_CATS, EventTable
from ..model.table import Table

__all__ = [
    "COLUMNS",
    "ROWS",
    "merge_intervals",
    "subtract_intervals",
    "timeline_metrics",
    "gpu_event_classes",
    "gpu_timeline",
    "cpu_timeline",
    "Timeline",
    "write_csv",
    "is_comm_name",
]

COLUMNS = ["type", "time ms", "percent"]
ROWS = [
    "computation_time",
    "exposed_comm_time",
    "exposed_memcpy_time",
    "busy_time",
    "idle_time",
    "total_time",
    "total_comm_time",
    "total_memcpy_time",
]

_COMM_RE = re.compile(r"rccl|nccl|cross_device_reduce", re.IGNORECASE)
_LEGACY_MEMCPY_RE = re.compile(
    r"^(MEMORY_COPY_(HOST_TO_DEVICE|DEVICE_TO_HOST|DEVICE_TO_DEVICE)"
    r"|__amd_rocclr_copyBuffer(Rect)?(Aligned)?)(\.kd)?$"
)
_LEGACY_MEMSET_RE = re.compile(r"^__amd_rocclr_fillBuffer(Aligned)?(\.kd)?$")

CPU_COMM_PREFIX = "gloo:"
CPU_COMM_OP_PREFIXES = ("c10d::", "record_param_comms")
STEP_PREFIX = "ProfilerStep#"


def is_comm_name(name: str) -> bool:
    return bool(name) and _COMM_RE.search(name) is not None


def timeline_metrics(comp, comm, memcpy, all_iv) -> dict[str, float]:
    """Each argument is (starts, ends).  Returns the eight metrics in microseconds."""
    comp_u = merge_intervals(*comp)
    comm_u = merge_intervals(*comm)
    mem_u = merge_intervals(*memcpy)
    all_u = merge_intervals(*all_iv)
    if len(all_u[0]) == 0:
        raise ValueError("no events for the timeline")
    total = float(all_u[1][-1] - all_u[0][0])
    comp_t = _length(comp_u)
    comm_t = _length(comm_u)
    exp_comm = _length(subtract_intervals(comp_u, comm_u))
    mem_t = _length(mem_u)
    exp_mem = _length(subtract_intervals(comm_u, subtract_intervals(comp_u, mem_u)))
    busy = _length(all_u)
    return {
        "computation_time": comp_t,
        "exposed_comm_time": exp_comm,
        "exposed_memcpy_time": exp_mem,
        "busy_time": busy,
        "idle_time": total - busy,
        "total_time": total,
        "total_comm_time": comm_t,
        "total_memcpy_time": mem_t,
    }


@dataclass
class Timeline:
    metrics_us: dict[str, float]
    device: str  # "gpu" | "cpu"
    notes: list[str] = field(default_factory=list)

    def table(self) -> Table:
        total = self.metrics_us["total_time"]
        rows = []
        for k in ROWS:
            v = self.metrics_us[k]
            rows.append([k, v / 1e3, (v / total * 100) if total else float("nan")])
        return Table(list(COLUMNS), rows)

    def frame(self):
        import pandas as pd

        t = self.table()
        return pd.DataFrame(t.rows, columns=t.columns)

    def as_ms(self) -> dict[str, float]:
        return {k: self.metrics_us[k] / 1e3 for k in ROWS}

    def as_percent(self) -> dict[str, float]:
        total = self.metrics_us["total_time"]
        return {k: (self.metrics_us[k] / total * 100) if total else 0.0 for k in ROWS}


def gpu_event_classes(t: EventTable) -> dict[str, np.ndarray]:
    """Per-name-id flags: comm, legacy memcpy, legacy memset (one regex per name)."""
    names = t.names
    comm = np.fromiter((is_comm_name(n) for n in names), dtype=bool, count=len(names))
    lmc = np.fromiter((bool(_LEGACY_MEMCPY_RE.match(n)) for n in names), dtype=bool, count=len(names))
    lms = np.fromiter((bool(_LEGACY_MEMSET_RE.match(n)) for n in names), dtype=bool, count=len(names))
    return {"comm": comm, "legacy_memcpy": lmc, "legacy_memset": lms}


def gpu_timeline(t: EventTable, include_unlinked: bool = False) -> Timeline:
    notes: list[str] = []
    gpu = t.is_cat(*GPU_CATS) & ~np.isnan(t.ts) & ~np.isnan(t.dur)
    if not include_unlinked:
        linked = gpu & t.call_tree().linked
        if not linked.any() and gpu.any():
            notes.append(
                "no GPU event is linked to a host launch; the timeline uses every GPU event "
                "(TraceLens --include_unlinked_kernels)"
            )
        else:
            gpu = linked
    idx = np.flatnonzero(gpu)
    cls = gpu_event_classes(t)
    nm = t.name[idx]
    is_kernel = t.cat[idx] == t.cat_code("kernel")
    is_memcpy_cat = t.cat[idx] == t.cat_code("gpu_memcpy")
    memcpy = is_memcpy_cat | (is_kernel & cls["legacy_memcpy"][nm])
    rest = ~memcpy
    legacy_set = is_kernel & cls["legacy_memset"][nm]
    comm = rest & ~legacy_set & cls["comm"][nm]
    comp = rest & ~comm
    s = t.ts[idx]
    e = s + t.dur[idx]
    m = timeline_metrics((s[comp], e[comp]), (s[comm], e[comm]), (s[memcpy], e[memcpy]), (s, e))
    return Timeline(m, "gpu", notes)


# ---------------------------------------------------------------------------------
# CPU-only traces
def _thread_key(t: EventTable, idx: np.ndarray) -> np.ndarray:
    return t.pid[idx].astype(np.int64) * (1 << 32) + t.tid[idx].astype(np.int64)


@dataclass
class CpuSelection:
    main_thread: int  # combined pid/tid key
    compute_idx: np.ndarray  # cpu_ops of the main thread, collective stubs excluded
    comm_idx: np.ndarray  # gloo:* ranges
    span: tuple[float, float]
    step_idx: np.ndarray


def cpu_selection(t: EventTable) -> CpuSelection:
    cpu_op = t.is_cat("cpu_op") & ~np.isnan(t.dur)
    ua = t.is_cat("user_annotation") & ~np.isnan(t.dur)
    ua_idx = np.flatnonzero(ua)
    ua_names = t.names_of(ua_idx)
    step_idx = ua_idx[[i for i, n in enumerate(ua_names) if n.startswith(STEP_PREFIX)]] if ua_idx.size else ua_idx
    comm_idx = ua_idx[[i for i, n in enumerate(ua_names) if n.startswith(CPU_COMM_PREFIX)]] if ua_idx.size else ua_idx
    op_idx = np.flatnonzero(cpu_op)
    if step_idx.size:
        keys, counts = np.unique(_thread_key(t, step_idx), return_counts=True)
        main = int(keys[np.argmax(counts)])
    elif op_idx.size:
        keys = _thread_key(t, op_idx)
        uk, inv = np.unique(keys, return_inverse=True)
        tot = np.bincount(inv, weights=t.dur[op_idx])
        main = int(uk[np.argmax(tot)])
    else:
        main = -1
    on_main = op_idx[_thread_key(t, op_idx) == main]
    op_names = t.names_of(on_main)
    keep = np.fromiter((not n.startswith(CPU_COMM_OP_PREFIXES) for n in op_names), dtype=bool, count=len(op_names))
    compute_idx = on_main[keep]
    if step_idx.size:
        step_main = step_idx[_thread_key(t, step_idx) == main]
        if step_main.size == 0:
            step_main = step_idx
        span = (float(t.ts[step_main].min()), float((t.ts[step_main] + t.dur[step_main]).max()))
    else:
        both = np.concatenate([compute_idx, comm_idx])
        if both.size == 0:
            both = op_idx
        if both.size == 0:
            raise ValueError("no CPU ops in the trace")
        span = (float(t.ts[both].min()), float((t.ts[both] + t.dur[both]).max()))
    return CpuSelection(main, compute_idx, comm_idx, span, step_idx)


def _clip(t: EventTable, idx: np.ndarray, span: tuple[float, float]):
    s = t.ts[idx]
    e = s + t.dur[idx]
    s = np.clip(s, span[0], span[1])
    e = np.clip(e, span[0], span[1])
    keep = e > s
    return s[keep], e[keep]


def cpu_timeline(t: EventTable, sel: CpuSelection | None = None) -> Timeline:
    sel = sel or cpu_selection(t)
    comp = _clip(t, sel.compute_idx, sel.span)
    comm = _clip(t, sel.comm_idx, sel.span)
    empty = (np.empty(0), np.empty(0))
    all_iv = (
        np.concatenate([comp[0], comm[0], [sel.span[0]]]),
        np.concatenate([comp[1], comm[1], [sel.span[0]]]),
    )
    m = timeline_metrics(comp, comm, empty, all_iv)
    # total is the profiled span, not the span of the busy intervals
    total = sel.span[1] - sel.span[0]
    m["total_time"] = total
    m["idle_time"] = total - m["busy_time"]
    notes = [
        "CPU-only trace: the timeline is CPU-based (computation = time in cpu_ops on the main "
        "thread, c10d collective stubs excluded; communication = gloo:* ranges on the gloo threads; "
        "total = span of the " + ("ProfilerStep ranges" if sel.step_idx.size else "profiled ops") + ")"
    ]
    return Timeline(m, "cpu", notes)


def write_csv(tl: Timeline, out_dir: Path) -> Path:
    return tl.table().write_csv(Path(out_dir) / "gpu_timeline.csv")
