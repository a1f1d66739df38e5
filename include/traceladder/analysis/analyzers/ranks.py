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

* GPU traces (through ``model.collectives.collective_events``, shared with the
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

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from traceladder.core.documents import RankCollectives

from ..storage_adapter import COLLECTIVES_OBJECT

from ..model.values import finite
from ..reports import nccl_reports as nr
from ..reports import stragglers_per_step as sps
from ..readers.collectives import (
    MultiRankError,
    load_ranks,
    collective_events,
    rank_of,
)

__all__ = [
    "SCHEMA",
    "REPORT_FILES",
    "MultiRankError",
    "collective_events",
    "rank_of",
    "analyze_ranks",
]

SCHEMA = 1
#: the CSVs always written (header-only when empty); the all2allv pair only when present
REPORT_FILES = (
    "nccl_summary_long.csv",
    "nccl_summary_implicit_sync.csv",
    "straggler_summary.csv",
    "nccl_long.csv",
    "nccl_implicit_sync.csv",
    "stragglers_per_step.csv",
)


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
            members = [
                v
                for v in sub["Process Group Ranks"].tolist()
                if v is not None and not (isinstance(v, float) and v != v)
            ]
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
                        f"collective sequence differs from rank {ref_r}'s: "
                        f"{cid} ({name}) has {f} {_fmt(v)}, rank {ref_r} has {ref_v}",
                        int(r),
                        by_rank[int(r)]["path"],
                    )


# -- collectives.json --------------------------------------------------------------------
def _stats(vals: Sequence[float | None], total: bool = False) -> dict[str, float | None]:
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
        for cid, full, a, b in zip(
            sync["collective_id"], sync["Full msg size (MB)"], sync["algo bw (GB/s)"], sync["bus bw (GB/s)"]
        ):
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
       "stragglers_per_step": [{"step", "collective", "seq", "last_rank", "wait_ms_max",
                                "wait_ms_per_rank", "step_wait_ms"}],  # stragglers_per_step.csv
       "files": [csv names], "notes": [str]}

    latency = the smallest duration across ranks (TraceLens's comm_latency); wall time =
    latest end - earliest start; wait = latest start - the rank's start.

    Raises :class:`MultiRankError` (one line naming the rank and the file) for a missing,
    duplicated or unreadable rank, or a rank whose collective sequence differs.
    """
    if gpus_per_node is not None and (type(gpus_per_node) is not int or gpus_per_node <= 0):
        raise MultiRankError(f"--gpus-per-node must be a positive integer, got {gpus_per_node}")
    paths = [Path(p) for p in paths]
    out_dir = Path(out_dir)
    # ``jobs`` > 1: ranks are read in parallel, in forked worker processes, as TraceLens's
    # multi-rank loader does since its PR #427 (the CLI's default: one per CPU; a caller
    # inside a threaded process, such as an Airflow task, keeps the serial default)
    jobs = 1 if jobs is None else jobs
    by_rank, world, detected = load_ranks(paths, want_gpn=gpus_per_node is None, jobs=jobs)
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
    per_step = sps.stragglers_per_step(df_long, by_rank)  # the straggler of each step (issue 26)
    sps.write_csv(per_step, out_dir)

    devices = sorted({by_rank[r]["device"] for r in by_rank})
    if df_long.empty:
        notes.append("no collectives found (no NCCL/RCCL kernels with args, no gloo:* ranges)")
    if "cpu" in devices:
        notes.append(
            "CPU (gloo) collectives: duration = the gloo:* range on the gloo worker thread; sizes and dtypes from "
            "record_shapes (Input Dims / Input type); names as PyTorch's NCCL backend records the same call"
        )
    if simplified:
        notes.append(
            "no process-group metadata: collectives matched by their order on each rank (TraceLens simplified mode)"
        )
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
            {
                "rank": r,
                "file": str(by_rank[r]["path"]),
                "device": by_rank[r]["device"],
                "collectives": int(counts.get(r, 0)),
            }
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
        "stragglers_per_step": per_step,
        "files": sorted([f"{k}.csv" for k in reports] + [sps.CSV_NAME]),  # in REPORT_FILES
        "notes": notes,
    }
    (out_dir / COLLECTIVES_OBJECT).write_text(RankCollectives.from_dict(result, str(out_dir)).to_json())
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
