"""``gpu_timeline.csv`` for rocprofv3 / RPD traces: TraceLens v1.0.0's rocprof rows.

Rules of TraceLens's ``RocprofAnalyzer.get_df_gpu_timeline`` (``rocprof_analysis.py``):
  * rows ``total_time, kernel, memory, busy_time, idle``; columns ``type,time ms,percent``;
  * ``kernel``: the union of every kernel dispatch interval; ``memory``: the union of
    every memory-copy interval; ``busy_time``: the union of both; intervals are
    ``(start_ns / 1000.0, end_ns / 1000.0)`` us, touching ones merge;
  * ``total_time``: ``fini_time / 1000.0 - init_time / 1000.0`` from the rocprofv3
    metadata (not the kernel span); ``idle = max(0, total - busy)``;
  * percent = row / total * 100 (0 when total is 0).
These times are real ms (the unit quirk is only in the kernel summaries).

Traces without init/fini times (rocprofv3 CSV, RPD databases): total_time is the span of
their GPU work (first start to last end of the kernels, copies and fills) -- our rule,
so total and idle differ from the JSON of the same run while kernel/memory/busy agree.
RPD ``FillBuffer`` ops count as memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..model.events import EventTable
from ..model.table import Table

__all__ = ["ROWS", "COLUMNS", "RocprofTimeline", "rocprof_timeline", "write_csv", "merged_length_us"]

ROWS = ["total_time", "kernel", "memory", "busy_time", "idle"]
COLUMNS = ["type", "time ms", "percent"]


def merged_length_us(start_ns: np.ndarray, end_ns: np.ndarray) -> float:
    """Length (us) of the union of [start, end) intervals given in integer ns, summed in
    order as TraceLens's ``_merge_intervals`` + ``sum`` does."""
    if len(start_ns) == 0:
        return 0.0
    s = np.asarray(start_ns, dtype=np.int64).astype(np.float64) / 1000.0
    e = np.asarray(end_ns, dtype=np.int64).astype(np.float64) / 1000.0
    order = np.argsort(s, kind="stable")
    s = s[order]
    e = e[order]
    run = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run[:-1]
    b = np.flatnonzero(new)
    seg_e = np.maximum.reduceat(e, b)
    return float(sum((seg_e - s[b]).tolist()))


@dataclass
class RocprofTimeline:
    total_us: float
    kernel_us: float
    memory_us: float
    busy_us: float
    idle_us: float
    has_init_fini: bool

    def frame(self) -> Table:
        tot = self.total_us

        def pct(v: float) -> float:
            return (v / tot * 100.0) if tot > 0 else 0

        rows = [
            ("total_time", tot / 1000.0, 100.0),
            ("kernel", self.kernel_us / 1000.0, pct(self.kernel_us)),
            ("memory", self.memory_us / 1000.0, pct(self.memory_us)),
            ("busy_time", self.busy_us / 1000.0, pct(self.busy_us)),
            ("idle", self.idle_us / 1000.0, pct(self.idle_us)),
        ]
        return Table(list(COLUMNS), [list(r) for r in rows])


def gpu_masks(t: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """(kernel rows, memory rows) of a heavy-lens table."""
    return t.is_cat("kernel"), t.is_cat("gpu_memcpy", "gpu_memset")


def rocprof_timeline(t: EventTable) -> RocprofTimeline:
    heavy = t.metadata.get("heavy", {})
    s_ns, e_ns = t.metadata["ns_start"], t.metadata["ns_end"]
    km, mm = gpu_masks(t)
    kernel = merged_length_us(s_ns[km], e_ns[km])
    memory = merged_length_us(s_ns[mm], e_ns[mm])
    both = km | mm
    busy = merged_length_us(s_ns[both], e_ns[both])
    init, fini = heavy.get("init_time"), heavy.get("fini_time")
    has = init is not None and fini is not None and (init or fini)
    if has:
        total = fini / 1000.0 - init / 1000.0
    elif both.any():
        total = float(e_ns[both].max()) / 1000.0 - float(s_ns[both].min()) / 1000.0
    else:
        total = 0.0
    idle = max(0, total - busy)
    return RocprofTimeline(total, kernel, memory, busy, idle, bool(has))


def write_csv(tl: RocprofTimeline, out_dir: Path) -> Table:
    table = tl.frame()
    table.write_csv(Path(out_dir) / "gpu_timeline.csv")
    return table
