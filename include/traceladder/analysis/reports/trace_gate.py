"""The trace gate: before a trace's figures are used, is it fit? Judged once, when the trace is
analysed, and stored in its ``analysis.json`` (``gate``, core/documents.TraceGate); the summary,
the attribution and a triage's explanation read it (docs/trace-gate.md).

A trace is unfit, with the reason, when:
  * its window holds fewer ``ProfilerStep#`` markers than the lens asked (``steps_asked``);
  * the lens records host ops and the trace has none ("CPU side missing");
  * the lens records GPU activity and the trace has none;
  * kernels with no launching op exceed ``UNLAUNCHED_MAX_PCT`` of GPU time, measured inside the
    host span where the host's launches run (per stream, from its first to its last kernel that a
    launch in the trace names), collectives apart: work queued before the window began and
    collectives driven by a communicator's own thread are not the trace's fault;
  * more than ``GRAPH_MAX_PCT`` of GPU time sits behind graph replays (its kernels are charged to
    the replay call, not to the ops that built the graph).
A trace format that records no ops (rocprofv3, rocm-trace-lite, rpd) is not asked for them.
Missing ranks are a rung's matter (several traces): the summary judges them from each trace's
``rank``/``world_size`` here (summary/trace_gate.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from traceladder.core.documents import TraceGate

from ..model.events import GRAPH_LAUNCH_NAMES, GPU_CATS, EventTable
from . import gpu_timeline as gt

UNLAUNCHED_MAX_PCT = 5.0
GRAPH_MAX_PCT = 5.0
MEASURE = (
    "kernels with no launching op, % of non-collective GPU time inside the host span where the host's "
    "launches run (per stream: its first to its last launched kernel); collectives apart"
)


def expectation(records_ops: bool, expect: Mapping[str, Any] | None) -> tuple[bool | None, bool | None, int | None]:
    """What the lens records: (host ops, GPU activity, steps asked). The caller's ``expect``
    (``{"cpu", "gpu", "steps"}``, from the run's lens) wins; without one, a PyTorch trace is
    expected to hold host ops and a heavy format (no ops) GPU activity."""
    e = dict(expect or {})
    cpu = e.get("cpu", True if records_ops else False)
    gpu = e.get("gpu", None if records_ops else True)
    steps = e.get("steps")
    return (
        None if cpu is None else bool(cpu),
        None if gpu is None else bool(gpu),
        int(steps) if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None,
    )


def _world(t: EventTable) -> int | None:
    di = t.metadata.get("distributedInfo")
    ws = di.get("world_size") if isinstance(di, dict) else None
    return ws if isinstance(ws, int) and not isinstance(ws, bool) and ws > 0 else None


def _pct(part: float, whole: float) -> float | None:
    return 100.0 * part / whole if whole > 0 else None


def _launch_shares(t: EventTable) -> dict[str, float | None]:
    """The gate's GPU-time shares (% of GPU time but the rule's own, ``unlaunched_pct``)."""
    gpu = np.flatnonzero(t.is_cat(*GPU_CATS) & ~np.isnan(t.dur) & ~np.isnan(t.ts))
    cpu = np.flatnonzero(t.is_cat("cpu_op") & ~np.isnan(t.dur) & ~np.isnan(t.ts))
    if gpu.size == 0 or cpu.size == 0:
        return {}
    tree = t.call_tree()
    s, d, stream = t.ts[gpu], t.dur[gpu], t.stream[gpu]
    total = float(d.sum())
    comm = gt.gpu_event_classes(t)["comm"][t.name[gpu]]
    rt = tree.gpu_runtime[gpu]
    linked = rt >= 0
    lo, hi = float(t.ts[cpu].min()), float((t.ts[cpu] + t.dur[cpu]).max())
    inside = (s >= lo) & (s <= hi)
    launched_span = np.zeros(gpu.size, bool)
    for x in np.unique(stream).tolist():
        on = stream == x
        mine = on & linked
        if mine.any():
            launched_span |= on & (s >= s[mine].min()) & (s <= (s[mine] + d[mine]).max())
    counted = inside & launched_span & ~comm
    codes = [t.names.index(n) for n in GRAPH_LAUNCH_NAMES if n in t.names]
    graph = np.zeros(gpu.size, bool)
    if codes:
        graph[linked] = np.isin(t.name[rt[linked]], codes)
    return {
        "unlaunched_pct": _pct(float(d[counted & ~linked].sum()), float(d[counted].sum())),
        "comm_unlaunched_pct": _pct(float(d[comm & ~linked].sum()), total),
        "before_host_pct": _pct(float(d[s < lo].sum()), total),
        "after_host_pct": _pct(float(d[s > hi].sum()), total),
        "graph_pct": _pct(float(d[graph].sum()), total),
    }


def judge(
    t: EventTable,
    steps: int | None,
    rank: int | None,
    records_ops: bool,
    expect: Mapping[str, Any] | None = None,
) -> TraceGate:
    """The gate's verdict on one read trace (``records_ops``: the format can hold host ops)."""
    cpu_exp, gpu_exp, asked = expectation(records_ops, expect)
    host_ops = int(t.is_cat("cpu_op").sum()) if records_ops else 0
    gpu_events = int(t.is_cat(*GPU_CATS).sum())
    shares = _launch_shares(t) if records_ops else {}
    unlaunched, graph = shares.get("unlaunched_pct"), shares.get("graph_pct")
    reasons = []
    if asked is not None and (steps or 0) < asked:
        reasons.append(f"window has {steps or 0} of the {asked} steps asked")
    if cpu_exp and host_ops == 0:
        reasons.append("CPU side missing (no host ops)")
    if gpu_exp and gpu_events == 0:
        reasons.append("no GPU events")
    if unlaunched is not None and unlaunched > UNLAUNCHED_MAX_PCT:
        reasons.append(
            f"{unlaunched:.1f}% of GPU time inside the host span, collectives apart, is kernels with no "
            f"launching op (over {UNLAUNCHED_MAX_PCT:g}%)"
        )
    if graph is not None and graph > GRAPH_MAX_PCT:
        reasons.append(f"{graph:.1f}% of GPU time sits behind graph replays (over {GRAPH_MAX_PCT:g}%)")
    return TraceGate(
        fit=not reasons,
        reasons=reasons,
        expect_cpu=cpu_exp,
        expect_gpu=gpu_exp,
        steps=steps,
        steps_asked=asked,
        host_ops=host_ops,
        gpu_events=gpu_events,
        rank=rank,
        world_size=_world(t),
        unlaunched_max_pct=UNLAUNCHED_MAX_PCT if records_ops else None,
        graph_max_pct=GRAPH_MAX_PCT if records_ops else None,
        measure=MEASURE if unlaunched is not None else None,
        unlaunched_pct=unlaunched,
        comm_unlaunched_pct=shares.get("comm_unlaunched_pct"),
        before_host_pct=shares.get("before_host_pct"),
        after_host_pct=shares.get("after_host_pct"),
        graph_pct=graph,
    )
