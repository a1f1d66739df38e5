"""``idle_breakdown.csv``: why each GPU stream (or the CPU proxy's compute thread) was idle.

GPU traces follow HTA 0.5.0's ``get_idle_time_breakdown`` (``hta/analyzers/breakdown_analysis.py``,
with the loading rules of ``hta/common/trace.py`` and ``trace_parser.py``):

* every event's start is rounded up and its end down to whole µs (HTA's ns-rounding);
* events: kernel / gpu_memcpy / gpu_memset with a stream other than -1;
* with two or more ``ProfilerStep`` names in the trace, only the GPU events whose correlation id
  matches a host event that starts before the last step's start (``include_last=False``, HTA's
  default) or by the last step's end (``include_last=True``, what the product uses: every other
  figure of the window counts the last step too);
* per stream, in start order, each gap is the start minus the previous event's end; the gap is
  ``host_wait`` when the launching runtime call (same correlation id) started after that end,
  else ``kernel_wait`` when it is under 30 (µs, the trace's unit), else ``other``; the stream's
  first event opens an ``other`` row of 0 (HTA's NaN gap);
* ``idle_time_ratio``: the category's share of the stream's idle time.

This per-stream idle time is not the timeline's idle (span less the union of all streams' busy
time): the two are never added or compared.

CPU traces (the proxy): the compute thread's idle time (the profiled span less the union of its
cpu_ops) is split into ``collective_wait`` (while a ``gloo:*`` range of the same process runs)
and ``host_gap`` (the rest); ``stream`` is the compute thread's tid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..model.events import GPU_CATS, MISSING, EventTable
from ..model.intervals import length, merge_intervals, subtract_intervals
from ..model.table import Table
from ..model.vec import LastWins
from .gpu_timeline import CpuSelection

__all__ = ["COLUMNS", "CSV_NAME", "KERNEL_WAIT_US", "gpu_idle", "cpu_idle", "write_csv"]

CSV_NAME = "idle_breakdown.csv"
COLUMNS = ["rank", "stream", "idle_category", "idle_time", "idle_time_ratio"]
KERNEL_WAIT_US = 30.0  # HTA's consecutive_kernel_delay default, in the trace's unit (µs)
_STEP_MARK = "ProfilerStep"


def _stream_values(t: EventTable, idx: np.ndarray) -> np.ndarray:
    """HTA's ``int(stream)``, -1 where there is none or it is no integer."""
    table = np.full(len(t.streams) + 1, -1, dtype=np.int64)  # code -1 -> the last slot (-1)
    for code, value in enumerate(t.streams):
        try:
            table[code] = int(value)
        except (TypeError, ValueError, OverflowError):  # past int64: no stream HTA could group
            table[code] = -1
    codes = t.stream[idx]
    return table[np.where(codes >= 0, codes, len(t.streams))]


def gpu_idle(t: EventTable, rank: int, include_last: bool = True) -> list[list[Any]]:
    """HTA's rows, one per (stream, category present), streams in order of first event."""
    timed = ~np.isnan(t.ts) & ~np.isnan(t.dur)
    start = np.ceil(np.where(timed, t.ts, 0.0))
    end = np.floor(np.where(timed, t.ts + t.dur, 0.0))
    gpu = np.flatnonzero(t.is_cat(*GPU_CATS) & timed)
    stream = _stream_values(t, gpu)
    keep = stream != -1
    gpu, stream = gpu[keep], stream[keep]
    host = np.flatnonzero(~t.is_cat(*GPU_CATS) & timed & (t.corr != MISSING) & (t.corr >= 0))
    step_codes = [c for c, n in enumerate(t.names) if _STEP_MARK in n]
    if len(step_codes) >= 2:  # HTA trims to the profiled steps only with two or more of them
        steps = np.flatnonzero(np.isin(t.name, step_codes) & timed & ~t.is_cat(*GPU_CATS))
        if include_last:
            host = host[start[host] <= end[steps].max()]
        else:
            host = host[start[host] < start[steps].max()]
        on_host = np.isin(t.corr[gpu], t.corr[host]) & (t.corr[gpu] >= 0)
        gpu, stream = gpu[on_host], stream[on_host]
    launch = LastWins(t.corr[host], host).get(t.corr[gpu])  # last host event with that id
    # HTA maps an unmatched id >= 0 to row 0 (its ``index_correlation`` fallback of
    # min(correlation, 0)) and joins on it: the trace's first event stands in as the launch
    first_timed = bool(len(t)) and bool(timed[0])
    launch = np.where((launch < 0) & (t.corr[gpu] >= 0) & first_timed & (t.corr[gpu] != MISSING), 0, launch)
    launch_start = np.where(launch >= 0, start[np.maximum(launch, 0)], np.nan)
    rows: list[list[Any]] = []
    _, first = np.unique(stream, return_index=True)
    for s in stream[np.sort(first)].tolist():
        mine = np.flatnonzero(stream == s)
        order = mine[np.argsort(start[gpu[mine]], kind="quicksort")]  # pandas sort_values' sort
        ev = gpu[order]
        gap = start[ev[1:]] - end[ev[:-1]]
        waited_host = launch_start[order[1:]] > end[ev[:-1]]
        kernel_wait = ~waited_host & (gap < KERNEL_WAIT_US)
        sums = {
            "host_wait": float(gap[waited_host].sum()) if waited_host.any() else None,
            "kernel_wait": float(gap[kernel_wait].sum()) if kernel_wait.any() else None,
            "other": float(gap[~waited_host & ~kernel_wait].sum()),  # the first event's row
        }
        total = sum(v for v in sums.values() if v is not None)
        for cat, v in sums.items():
            if v is not None:
                rows.append([rank, s, cat, v, v / total if total else float("nan")])
    return rows


def cpu_idle(t: EventTable, sel: CpuSelection, rank: int) -> list[list[Any]]:
    """The compute thread's idle time, split by whether a gloo range of its process ran."""
    lo, hi = sel.span
    s, e = t.ts[sel.compute_idx], t.ts[sel.compute_idx] + t.dur[sel.compute_idx]
    busy = merge_intervals(np.clip(s, lo, hi), np.clip(e, lo, hi))
    idle = subtract_intervals(busy, (np.array([lo]), np.array([hi])))
    pid = (sel.main_thread >> 32) if sel.main_thread >= 0 else -1
    comm = sel.comm_idx[t.pid[sel.comm_idx] == pid]
    order = np.argsort(t.ts[comm], kind="stable")
    comm_u = merge_intervals(t.ts[comm][order], (t.ts[comm] + t.dur[comm])[order])
    idle_total = length(idle)
    host_gap = length(subtract_intervals(comm_u, idle))
    waits = idle_total - host_gap
    tid = t.tids[int(sel.main_thread & 0xFFFFFFFF)] if sel.main_thread >= 0 else None
    rows = []
    for cat, v in (("collective_wait", waits), ("host_gap", host_gap)):
        rows.append([rank, tid, cat, v, v / idle_total if idle_total else float("nan")])
    return rows


def write_csv(rows: list[list[Any]], out_dir: Path) -> Table:
    table = Table(list(COLUMNS), rows, float_columns=frozenset({"idle_time", "idle_time_ratio"}))
    table.write_csv(Path(out_dir) / CSV_NAME)
    return table
