"""``step_regions.csv`` (and ``step_regions`` in analysis.json): the named blocks of a training step.

A region is the union of the host ranges whose name matches one of its patterns (substring,
case-sensitive), on their own thread: ``user_annotation`` ranges (``record_function``) and
``python_function`` frames (``nn.Module: <Class>_<n>`` and ``file.py(line): func``, in traces taken
with_stack / with_modules). A backward node (``autograd::engine::evaluate_function: ...``) whose
forward op ran inside a region belongs to it too, so a region covers its backward work (the pair
by ``Sequence number``: :func:`..model.autograd_links.seq_pairs`).

An op (a GPU launcher, or a main-thread cpu_op on a CPU trace) counts in a region when it starts
inside one of the region's ranges; its direct kernel time (its self time on a CPU trace) is added
to the region's. A region's ``ms_per_step`` is that time over the profiled window divided by the
number of ``ProfilerStep``s; ``pct_of_direct_kernel_time`` is its share of all ops' direct time.
Nested ranges of two regions count in both (the proxy nests none).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..model.autograd_links import seq_pairs
from ..model.events import EventTable
from ..model.intervals import merge_intervals
from ..model.table import Table
from .ops_summary import Launchers

__all__ = ["REGIONS", "CSV_NAME", "COLUMNS", "step_regions", "write_csv"]

CSV_NAME = "step_regions.csv"
COLUMNS = ["region", "ms_per_step", "pct_of_direct_kernel_time", "matched_names"]

#: region id -> the name patterns it matches. The proxy's own ranges first (workload/), then
#: PyTorch's optimizer record_function names (``Optimizer.step#<Class>.step``, ``Optimizer.zero_grad#...``),
#: then Megatron-core's module classes and MoE layer stages as they show in python_function events.
REGIONS: dict[str, tuple[str, ...]] = {
    "optimizer": ("optimizer_step", "Optimizer.step#", "Optimizer.zero_grad#"),
    "moe_dispatch": (
        "moe_router",  # the proxy's router runs ahead of the dispatch: counted with it
        "moe_dispatch",
        "TopKRouter",
        "token_dispatch",
        "dispatch_preprocess",
        "dispatch_postprocess",
        "fused_dispatch",
    ),
    "moe_experts": ("moe_experts", "GroupedMLP", "SequentialMLP", "MegaMoE", "mega_moe"),
    "moe_combine": ("moe_combine", "token_combine", "combine_preprocess", "combine_postprocess", "fused_combine"),
    "attention": ("attention", "SelfAttention", "DotProductAttention"),
    "embedding": ("embedding", "LanguageModelEmbedding", "VocabParallelEmbedding"),
    "output_head": ("output_head", "output_layer"),
}
_RANGE_CATS = ("user_annotation", "python_function")


def _thread(t: EventTable, idx: np.ndarray) -> np.ndarray:
    return t.pid[idx].astype(np.int64) * (1 << 32) + t.tid[idx].astype(np.int64)


def _inside(thread: np.ndarray, ts: np.ndarray, r_thread: np.ndarray, r_s: np.ndarray, r_e: np.ndarray) -> np.ndarray:
    """Whether each (thread, ts) falls in one of the ranges on that thread."""
    out = np.zeros(ts.size, dtype=bool)
    for th in np.unique(r_thread).tolist():
        s, e = merge_intervals(r_s[r_thread == th], r_e[r_thread == th])
        q = np.flatnonzero(thread == th)
        at = np.searchsorted(s, ts[q], side="right") - 1
        ok = at >= 0
        ok[ok] = ts[q][ok] < e[at[ok]]
        out[q] = ok
    return out


def region_ranges(t: EventTable) -> dict[str, tuple[np.ndarray, list[str]]]:
    """region -> (indices of its matching range events, the distinct names matched)."""
    cand = np.flatnonzero(t.is_cat(*_RANGE_CATS) & ~np.isnan(t.dur))
    codes, inv = np.unique(t.name[cand], return_inverse=True)
    out: dict[str, tuple[np.ndarray, list[str]]] = {}
    for region, pats in REGIONS.items():
        hit_codes = [i for i, c in enumerate(codes.tolist()) if any(p in t.names[c] for p in pats)]
        sel = cand[np.isin(inv, hit_codes)]
        out[region] = (sel, sorted({t.names[codes[i]] for i in hit_codes}))
    return out


def step_regions(t: EventTable, launchers: Launchers, steps: int) -> list[dict[str, Any]]:
    """One row per region, in :data:`REGIONS` order."""
    return regions_and_outside(t, launchers, steps)[0]


def regions_and_outside(t: EventTable, launchers: Launchers, steps: int) -> tuple[list[dict[str, Any]], float]:
    """The region rows, and the direct time per step (ms) of the ops that fall in no region
    (fused ops whose stages the ranges name from inside, unnamed chains): a region can nest in
    another, so the rows need not add up, and this is counted, not taken as a remainder."""
    direct = np.asarray(launchers.direct_us, dtype=np.float64)
    total = float(direct.sum())
    l_thread, l_ts = _thread(t, launchers.idx), t.ts[launchers.idx]
    fwd, bwd_of = seq_pairs(t) if launchers.idx.size else (np.empty(0, np.int64), np.empty(0, np.int64))
    rows = []
    in_any = np.zeros(direct.size, dtype=bool)
    for region, (rng, names) in region_ranges(t).items():
        r_thread, r_s = _thread(t, rng), t.ts[rng]
        r_e = r_s + t.dur[rng]
        if rng.size and fwd.size:  # the backward nodes of the forward ops inside the region
            bwd = bwd_of[_inside(_thread(t, fwd), t.ts[fwd], r_thread, r_s, r_e)]
            if bwd.size:
                r_thread = np.concatenate([r_thread, _thread(t, bwd)])
                r_s = np.concatenate([r_s, t.ts[bwd]])
                r_e = np.concatenate([r_e, t.ts[bwd] + t.dur[bwd]])
        hit = _inside(l_thread, l_ts, r_thread, r_s, r_e) if rng.size else np.zeros(l_ts.size, bool)
        in_any |= hit
        us = float(direct[hit].sum())
        rows.append(
            {
                "region": region,
                "ms_per_step": us / 1e3 / max(steps, 1),
                "pct_of_direct_kernel_time": us / total * 100 if total else 0.0,
                "matched_names": "; ".join(names),
            }
        )
    return rows, float(direct[~in_any].sum()) / 1e3 / max(steps, 1)


def write_csv(rows: list[dict[str, Any]], out_dir: Path) -> Table:
    table = Table.from_records(rows, list(COLUMNS))
    table.write_csv(Path(out_dir) / CSV_NAME)
    return table
