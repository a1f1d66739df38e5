"""``stragglers_per_step.csv`` (multi-rank): the straggler of each profiled step, not only overall.

Each collective instance (one ``collective_id`` of ``nccl_long``: the same collective on every
rank) is placed in the ``ProfilerStep#N`` range of rank 0 (else of the lowest rank) that holds its
start on that rank. In the instance, each rank's wait is the latest start minus its own start
(TraceLens's rule); the rank that started last is the straggler of that instance. Per step, the row
is the instance where the others waited longest (the largest single wait): ``collective`` and its
``seq`` (its position among all instances, first seen first), ``last_rank``, ``wait_ms_max`` and
every rank's wait there (``wait_ms_per_rank``, ``r<rank>:<ms>``). ``step_wait_ms`` sums every
rank's waits over all the step's collectives.

HTA's ``get_potential_stragglers`` answers a different question: over the selected steps it
ranks ranks by the normalised start time of their significant communication kernels and returns
the top candidates, with no per-step row, no collective and no wait. Here each step names its
collective, the late rank and the time the others lost to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CSV_NAME", "COLUMNS", "stragglers_per_step", "write_csv"]

CSV_NAME = "stragglers_per_step.csv"
COLUMNS = ["step", "collective", "seq", "last_rank", "wait_ms_max", "wait_ms_per_rank", "step_wait_ms"]


def _step_of(ts: float, steps: list[tuple[str, float, float]]) -> str:
    for name, lo, hi in steps:
        if lo <= ts < hi:
            return name
    return "(outside the profiled steps)"


def stragglers_per_step(df_long: Any, by_rank: dict[int, dict]) -> list[dict[str, Any]]:
    """One row per step, steps in time order. ``df_long``: nccl_long (``collective_id``,
    ``rank``, ``ts``, ``Collective name``); ``by_rank[r]["steps"]``: (name, start, end)."""
    if df_long is None or df_long.empty:
        return []
    ids = df_long["collective_id"].to_numpy()
    uniq, first, inv = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # instances, first seen first
    seq_of = np.empty(uniq.size, dtype=np.int64)
    seq_of[order] = np.arange(uniq.size)
    ranks = df_long["rank"].to_numpy().astype(np.int64)
    ts = df_long["ts"].to_numpy(dtype=np.float64)
    names = df_long["Collective name"].to_numpy()
    best: dict[str, dict[str, Any]] = {}
    step_start: dict[str, float] = {}
    inv = inv.reshape(-1)
    by_instance = np.argsort(inv, kind="stable")  # each instance's rows together
    bounds = np.searchsorted(inv[by_instance], np.arange(uniq.size + 1))
    for g in order.tolist():
        rows = by_instance[bounds[g] : bounds[g + 1]]
        r, s = ranks[rows], ts[rows]
        waits = s.max() - s
        anchor = int(np.argmin(r))  # rank 0, else the lowest rank
        steps = by_rank.get(int(r[anchor]), {}).get("steps") or []
        step = _step_of(float(s[anchor]), steps)
        step_start.setdefault(step, next((lo for n, lo, _ in steps if n == step), float(s[anchor])))
        cur = best.get(step)
        total = float(waits.sum()) / 1e3
        if cur is None or waits.max() / 1e3 > cur["wait_ms_max"]:
            keep_total = (cur["step_wait_ms"] if cur else 0.0) + total
            by = sorted(zip(r.tolist(), (waits / 1e3).tolist()))
            best[step] = {
                "step": step,
                "collective": str(names[rows[0]]),
                "seq": int(seq_of[g]),
                "last_rank": int(r[int(np.argmax(s))]),
                "wait_ms_max": float(waits.max()) / 1e3,
                "wait_ms_per_rank": "; ".join(f"r{rk}:{w:.3f}" for rk, w in by),
                "step_wait_ms": keep_total,
            }
        else:
            cur["step_wait_ms"] += total
    return [best[k] for k in sorted(best, key=lambda k: step_start[k])]


def write_csv(rows: list[dict[str, Any]], out_dir: Path) -> None:
    from ..model.table import Table

    Table.from_records(rows, list(COLUMNS)).write_csv(Path(out_dir) / CSV_NAME)
