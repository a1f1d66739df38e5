"""TraceLens v1.0.0's multi-rank collective reports (``NcclAnalyser``), as pandas frames.

Input: the per-rank "long" rows (one dict per collective event per rank, see
:func:`traceladder.analysis.analyzers.ranks.collective_events`).  Output frames carry
TraceLens's sheet names, columns, row order and numbers:

* ``nccl_long``                 -- ``build_df_long``
* ``nccl_summary_long``         -- ``build_df_summary_long`` (sum/mean/std/min/max)
* ``nccl_implicit_sync``        -- ``build_df_nccl_implicit_sync_cat(detailed=True)``
* ``nccl_summary_implicit_sync``-- ``build_df_summary_nccl_implicit_sync_cat`` with the
  multi-rank script's ``agg_metrics`` (mean, median, min, max)
* ``straggler_summary``         -- ``build_df_straggler_summary``
* ``nccl_all2allv`` / ``nccl_summary_all2allv`` -- when the trace has ``all_to_allv``

and :func:`add_node_columns` (``reporting_utils.add_node_span_columns``).

Definitions (TraceLens): a collective is identified by its process group and its order
on each rank (``collective_id = <pg>_<index>``).  ``comm_latency`` is the smallest
duration across ranks; a rank's wait is the latest start minus its own start; the
start skew is the largest wait ("earliest arrival rank" is that rank, ties to the higher
rank); the end skew is latest end minus earliest end; algo bw = message size (output for
allgather, input otherwise; MiB) / 1024 / (comm_latency / 1e6) in GiB/s; bus bw = algo
bw x 2(n-1)/n (allreduce) or (n-1)/n (reduce-scatter, allgather, all-to-all).  The
straggler of a collective is the rank with the least wait (first such rank).
"""

from __future__ import annotations

import ast
import re
from typing import Any

import pandas as pd

# The kernel-args fields a long row carries: the same as the one-rank coll_analysis report's.
from traceladder.analysis.model.values import tupled
from traceladder.analysis.model.collectives import (
    COLLECTIVE_FIELDS,
    DTYPE_BYTES,
    IDENTITY_FIELDS,
    METADATA_FIELDS,
    add_message_sizes,
)

__all__ = [
    "DTYPE_BYTES",
    "COLLECTIVE_TYPE",
    "IMPLICIT_SYNC",
    "BUS_FACTOR",
    "LONG_COLUMNS",
    "METADATA_FIELDS",
    "SUMMARY_AGG",
    "build_long",
    "summary_long",
    "implicit_sync",
    "summary_implicit_sync",
    "straggler_summary",
    "all2allv",
    "summary_all2allv",
    "add_node_columns",
    "parse_pg_ranks",
    "EMPTY_COLUMNS",
]


#: "Collective name" -> collective type (TraceLens's ``collective_type2name``)
COLLECTIVE_TYPE = {
    "allreduce": "allreduce",
    "allreduce_coalesced": "allreduce",
    "reducescatter": "reducescatter",
    "_reduce_scatter_base": "reducescatter",
    "reduce_scatter_tensor_coalesced": "reducescatter",
    "allgather": "allgather",
    "all_gather": "allgather",
    "_allgather_base": "allgather",
    "all_gather_into_tensor_coalesced": "allgather",
    "allgather_into_tensor_coalesced": "allgather",
    "all_to_all": "alltoall",
    "all_to_allv": "alltoallv",
}
IMPLICIT_SYNC = frozenset({"allreduce", "reducescatter", "allgather", "alltoall"})
#: nccl-tests bus-bandwidth factors
BUS_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
}


LONG_COLUMNS = [
    "collective_id",
    "index_in_group",
    "rank",
    *COLLECTIVE_FIELDS,
    "In msg nelems",
    "In msg size (MB)",
    "Out msg nelems",
    "Out msg size (MB)",
    "In split size",
    "Out split size",
    "stream",
    "ts",
    "dur",
]
_SYNC_META = [*IDENTITY_FIELDS, "In msg size (MB)", "Out msg size (MB)"]
_SYNC_GENERAL = [
    "collective_id",
    *_SYNC_META,
    "Full msg size (MB)",
    "comm_latency",
    "skew in start time",
    "earliest arrival rank",
    "avg_wait_time",
    "skew in end time",
    "algo bw (GB/s)",
    "bus bw (GB/s)",
]
#: aggregations of the multi-rank report script (``generate_collective_report``)
SUMMARY_AGG = ["mean", "median", "min", "max"]
_LONG_AGG = ["mean", "std", "min", "max"]
_LONG_GROUP = ["rank", *METADATA_FIELDS]


_STRAGGLER_COLUMNS = [
    "rank",
    "total_wait_time_us",
    "mean_wait_time_us",
    "times_arrived_last",
    "times_arrived_first",
    "pct_arrived_last",
    "num_collectives",
    "total_nccl_dur_us",
]
#: headers for a report with nothing in it (TraceLens writes no file then)
EMPTY_COLUMNS = {
    "nccl_long": LONG_COLUMNS,
    "nccl_summary_long": _LONG_GROUP
    + ["In msg size (MB)_first", "Out msg size (MB)_first", "dur_sum"]
    + [f"dur_{a}" for a in _LONG_AGG]
    + ["operation_count"],
    "nccl_implicit_sync": _SYNC_GENERAL,
    "nccl_summary_implicit_sync": [
        "Collective name",
        "dtype",
        "In msg nelems",
        "Process Group Name",
        "Group size",
        "Full msg size (MB)",
    ]
    + [f"{m}_{a}" for m in ("comm_latency", "skew in start time", "skew in end time") for a in SUMMARY_AGG]
    + ["count", "Total comm latency (ms)"],
    "straggler_summary": _STRAGGLER_COLUMNS,
}


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v)


# -- nccl_long ------------------------------------------------------------------------
def build_long(rows: list[dict]) -> tuple[pd.DataFrame, bool]:
    """The per-rank long table (``nccl_long``) and whether TraceLens's "simplified
    mode" applies (no process-group metadata and one stream per rank: collectives are
    then matched by their order on the rank, in process group ``all``)."""
    recs = []
    for r in rows:
        rec = {"ts": r["ts"], "dur": r["dur"], "rank": r["rank"]}
        for f in METADATA_FIELDS:
            rec[f] = tupled(r.get(f))
        add_message_sizes(rec)
        recs.append(rec)
    df = pd.DataFrame(recs)
    if df.empty:
        return pd.DataFrame(columns=LONG_COLUMNS), False
    pg = df["Process Group Name"]
    pg_missing = bool(pg.isna().all() or (pg.fillna("Unknown_Group") == "Unknown_Group").all())
    one_stream = all(n <= 1 for n in df.groupby("rank", sort=False)["stream"].nunique().tolist())
    simplified = pg_missing and one_stream
    if simplified:
        df["Process Group Name"] = "all"
        df["index_in_group"] = df.groupby(["rank"])["ts"].rank(method="first").astype(int) - 1
        df["collective_id"] = df["index_in_group"].astype(str)
    else:
        df["Process Group Name"] = df["Process Group Name"].fillna("Unknown_Group")
        df["index_in_group"] = df.groupby(["Process Group Name", "rank"])["ts"].rank(method="first").astype(int) - 1
        df["collective_id"] = df["Process Group Name"].astype(str) + "_" + df["index_in_group"].astype(str)
    return df[LONG_COLUMNS], simplified


# -- nccl_summary_long --------------------------------------------------------------------
def summary_long(df_long: pd.DataFrame) -> pd.DataFrame:
    if df_long.empty:
        return pd.DataFrame()
    g = df_long.groupby(_LONG_GROUP).agg(
        {
            "In msg size (MB)": "first",
            "Out msg size (MB)": "first",
            "dur": ["sum"] + _LONG_AGG,
            "collective_id": "count",
        }
    )
    g.columns = ["_".join(c).strip() for c in g.columns.values]
    g = g.rename(columns={"collective_id_count": "operation_count"})
    return g.sort_values(by="dur_sum", ascending=False).reset_index()


# -- nccl_implicit_sync -----------------------------------------------------------------
def _groups(df_long: pd.DataFrame):
    """(collective_id, rows of that collective indexed by rank) in first-seen order."""
    order = pd.unique(df_long["collective_id"])
    grouped = dict(tuple(df_long.groupby("collective_id", sort=False)))
    for cid in order:
        yield cid, grouped[cid].set_index("rank")


def _same(values: list) -> bool:
    first = values[0]
    for v in values[1:]:
        if _missing(first) and _missing(v):
            continue
        if v != first:
            return False
    return True


def implicit_sync(df_long: pd.DataFrame, simplified: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(nccl_implicit_sync detailed, without the per-rank columns)``.

    A metadata mismatch across ranks raises ValueError (TraceLens's strict check); the
    caller validates sequences first, so this only fires on inconsistent traces.
    """
    if df_long.empty:
        return pd.DataFrame(), pd.DataFrame()
    rows = []
    for cid, ev in _groups(df_long):
        name = ev.iloc[0]["Collective name"]
        ctype = COLLECTIVE_TYPE.get(name) if isinstance(name, str) else None
        if simplified:
            if name is not None and ctype is not None and ctype not in IMPLICIT_SYNC:
                continue
        elif ctype not in IMPLICIT_SYNC:
            continue
        row: dict[str, Any] = {"collective_id": cid}
        for f in _SYNC_META:
            row[f] = ev.iloc[0][f]
            if not simplified and not _same(ev[f].tolist()):
                raise ValueError(f"Metadata mismatch in '{f}' for collective {cid}: {pd.unique(ev[f])}")
        ranks = ev.index.tolist()
        ts = dict(zip(ranks, ev["ts"].tolist()))
        dur = dict(zip(ranks, ev["dur"].tolist()))
        for r in ranks:
            row[f"rank_{r}_ts"] = ts[r]
            row[f"rank_{r}_dur"] = dur[r]
        latest_start = max(ts.values())
        earliest_end = min(ts[r] + dur[r] for r in ranks)
        latest_end = max(ts[r] + dur[r] for r in ranks)
        row["comm_latency"] = min(dur.values())
        waits = {r: latest_start - ts[r] for r in ranks}
        for r in ranks:
            row[f"rank_{r}_wait_time"] = waits[r]
        row["skew in start time"], row["earliest arrival rank"] = max((w, r) for r, w in waits.items())
        row["avg_wait_time"] = sum(waits.values()) / len(ranks)
        row["skew in end time"] = latest_end - earliest_end
        has_size = row["In msg size (MB)"] is not None and row["Out msg size (MB)"] is not None
        if has_size and ctype is not None:
            full = row["Out msg size (MB)"] if ctype == "allgather" else row["In msg size (MB)"]
            row["Full msg size (MB)"] = full
            lat = row["comm_latency"]
            row["algo bw (GB/s)"] = (full / 1024) / (lat / 1e6) if lat > 0 else float("nan")
            gs = row["Group size"]
            if gs is not None and ctype in BUS_FACTOR:
                row["bus bw (GB/s)"] = row["algo bw (GB/s)"] * BUS_FACTOR[ctype](gs)
            else:
                row["bus bw (GB/s)"] = float("nan")
        else:
            row["Full msg size (MB)"] = float("nan")
            row["algo bw (GB/s)"] = float("nan")
            row["bus bw (GB/s)"] = float("nan")
        rows.append(row)
    df = pd.DataFrame(rows).reset_index(drop=True)
    if df.empty:
        return df, df
    per_rank = [c for c in df.columns if c.startswith("rank_")]
    detailed = df[_SYNC_GENERAL + per_rank]
    return detailed, detailed.drop(columns=per_rank)


def summary_implicit_sync(df_sync: pd.DataFrame, agg: list[str] = SUMMARY_AGG) -> pd.DataFrame:
    if df_sync.empty:
        return pd.DataFrame()
    logic: dict[str, Any] = {
        "comm_latency": list(agg) + ["size", lambda x: x.sum() / 1000],
        "skew in start time": list(agg),
        "skew in end time": list(agg),
    }
    if not df_sync["algo bw (GB/s)"].isna().all():
        logic["algo bw (GB/s)"] = list(agg)
    if not df_sync["bus bw (GB/s)"].isna().all():
        logic["bus bw (GB/s)"] = list(agg)
    metrics = list(logic)
    meta = ["Process Group Name", "Group size", "Full msg size (MB)"]
    for c in meta:
        logic[c] = "first"
    keys = ["Collective name", "dtype", "In msg nelems"]
    d = df_sync.copy()
    for c in keys:
        d[c] = d[c].fillna("Unknown")
    res = d.groupby(keys).agg(logic)
    res.columns = [f"{a}_{b}" if b != "" else a for a, b in res.columns]
    ren = {"comm_latency_<lambda_0>": "Total comm latency (ms)", "comm_latency_size": "count"}
    ren.update({f"{c}_first": c for c in meta})
    res = res.rename(columns=ren).reset_index().sort_values(by="Total comm latency (ms)", ascending=False)
    order = keys + [c for c in meta if c in res.columns]
    order += [f"{m}_{a}" for m in metrics for a in agg if f"{m}_{a}" in res.columns]
    order += ["count", "Total comm latency (ms)"]
    return res[[c for c in order if c in res.columns]]


# -- straggler_summary ------------------------------------------------------------------
def straggler_summary(df_sync_detailed: pd.DataFrame, df_long: pd.DataFrame) -> pd.DataFrame:
    if df_sync_detailed.empty:
        return pd.DataFrame()
    wait_cols = [c for c in df_sync_detailed.columns if c.startswith("rank_") and c.endswith("_wait_time")]
    if not wait_cols:
        return pd.DataFrame()
    ranks = sorted(int(c[len("rank_") : -len("_wait_time")]) for c in wait_cols)
    n = len(df_sync_detailed)
    last = df_sync_detailed[wait_cols].idxmin(axis=1)
    rows = []
    for r in ranks:
        wc = f"rank_{r}_wait_time"
        times_last = int((last == wc).sum())
        rows.append(
            {
                "rank": r,
                "total_wait_time_us": round(df_sync_detailed[wc].sum(), 1),
                "mean_wait_time_us": round(df_sync_detailed[wc].mean(), 1),
                "times_arrived_last": times_last,
                "times_arrived_first": int((df_sync_detailed["earliest arrival rank"] == r).sum()),
                "pct_arrived_last": round(100.0 * times_last / n, 1),
                "num_collectives": n,
            }
        )
    out = pd.DataFrame(rows)
    if not df_long.empty:
        dur = df_long.groupby("rank")["dur"].sum().reset_index().rename(columns={"dur": "total_nccl_dur_us"})
        out = out.merge(dur, on="rank", how="left")
        out["total_nccl_dur_us"] = out["total_nccl_dur_us"].round(1)
    return out.sort_values("total_wait_time_us", ascending=True).reset_index(drop=True)


# -- all_to_allv ------------------------------------------------------------------------
_A2AV_META = ["Process Group Name", "Process Group Ranks", "Collective name", "Group size", "dtype", "stream"]
_A2AV_PER_RANK = [
    "ts",
    "dur",
    "In msg nelems",
    "Out msg nelems",
    "In msg size (MB)",
    "Out msg size (MB)",
    "In split size",
    "Out split size",
]
_A2AV_GENERAL = [
    "collective_id",
    *_A2AV_META,
    "total data communicated (MB)",
    "total nelems communicated",
    "wall_time (us)",
    "max_rank_dur (us)",
    "min_rank_dur (us)",
    "avg_rank_dur (us)",
    "throughput (GB/s)",
    "max_rank_throughput (GB/s)",
    "min_rank_throughput (GB/s)",
    "size_imbalance",
    "skew in start time",
    "skew in end time",
]


def all2allv(df_long: pd.DataFrame) -> pd.DataFrame:
    """``nccl_all2allv`` (detailed), sorted by data communicated; empty when none."""
    if df_long.empty:
        return pd.DataFrame()
    rows = []
    for cid, ev in _groups(df_long):
        if ev.iloc[0]["Collective name"] != "all_to_allv":
            continue
        row: dict[str, Any] = {"collective_id": cid}
        for f in _A2AV_META:
            row[f] = ev.iloc[0][f]
            if not _same(ev[f].tolist()):
                raise ValueError(f"Metadata mismatch in '{f}' for collective {cid}")
        ranks = ev.index.tolist()
        for r in ranks:
            for c in _A2AV_PER_RANK:
                row[f"rank_{r}_{c}"] = ev.loc[r, c]
        ts = [row[f"rank_{r}_ts"] for r in ranks]
        te = [row[f"rank_{r}_ts"] + row[f"rank_{r}_dur"] for r in ranks]
        durs = [row[f"rank_{r}_dur"] for r in ranks]
        row["skew in start time"] = max(ts) - min(ts)
        row["skew in end time"] = max(te) - min(te)
        for r, s, e in zip(ranks, ts, te):
            row[f"rank_{r}_skew in start time"] = s - min(ts)
            row[f"rank_{r}_skew in end time"] = max(te) - e
        sizes = [row[f"rank_{r}_In msg size (MB)"] for r in ranks]
        row["total data communicated (MB)"] = sum(sizes)
        row["total nelems communicated"] = sum(row[f"rank_{r}_In msg nelems"] for r in ranks)
        wall = max(te) - min(ts)
        row["wall_time (us)"] = wall
        row["max_rank_dur (us)"] = max(durs)
        row["min_rank_dur (us)"] = min(durs)
        row["avg_rank_dur (us)"] = sum(durs) / len(ranks)
        row["throughput (GB/s)"] = (
            (row["total data communicated (MB)"] / 1024) / (wall / 1e6) if wall > 0 else float("nan")
        )
        tps = [(s / 1024) / (d / 1e6) for s, d in zip(sizes, durs) if s > 0 and d > 0]
        row["max_rank_throughput (GB/s)"] = max(tps) if tps else float("nan")
        row["min_rank_throughput (GB/s)"] = min(tps) if tps else float("nan")
        mean_size = sum(sizes) / len(sizes) if sizes else 0
        row["size_imbalance"] = max(sizes) / mean_size if mean_size > 0 else float("nan")
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows).reset_index(drop=True)
    per_rank = [c for c in df.columns if c.startswith("rank_")]
    df = df[_A2AV_GENERAL + per_rank]
    return df.sort_values(by="total data communicated (MB)", ascending=False)


def summary_all2allv(df_a2av: pd.DataFrame, agg: list[str] = SUMMARY_AGG) -> pd.DataFrame:
    if df_a2av.empty:
        return pd.DataFrame()
    df = df_a2av[[c for c in df_a2av.columns if not c.startswith("rank_")]]
    logic: dict[str, Any] = {
        "total data communicated (MB)": list(agg),
        "wall_time (us)": list(agg) + ["sum"],
        "throughput (GB/s)": list(agg),
        "size_imbalance": ["mean", "max"],
        "max_rank_dur (us)": ["mean", "max"],
        "skew in start time": ["mean", "max"],
        "skew in end time": ["mean", "max"],
        "collective_id": "count",
    }
    meta = ["Process Group Ranks", "Collective name", "Group size"]
    for c in meta:
        logic[c] = "first"
    res = df.groupby(["Process Group Name", "dtype"]).agg(logic)
    res.columns = [f"{a}_{b}" if b != "" else a for a, b in res.columns]
    ren = {"collective_id_count": "count", "wall_time (us)_sum": "Total wall_time (us)"}
    ren.update({f"{c}_first": c for c in meta})
    res = res.rename(columns=ren)
    res["Total wall_time (ms)"] = res["Total wall_time (us)"] / 1000
    return res.reset_index().sort_values(by="Total wall_time (ms)", ascending=False)


# -- node columns (reporting_utils.add_node_span_columns) -----------------------------------
def parse_pg_ranks(value: Any) -> list[int]:
    if isinstance(value, (list, tuple)):
        return [int(x) for x in value]
    if isinstance(value, str):
        try:
            parsed = ast.literal_eval(value)
            if isinstance(parsed, (list, tuple)):
                return [int(x) for x in parsed]
        except (ValueError, SyntaxError):
            return [int(s) for s in re.findall(r"\d+", value)]
    return []


def _span(value: Any, gpus_per_node: int) -> str:
    ranks = parse_pg_ranks(value)
    if not ranks:
        return "unknown"
    return "intra_node" if len({r // gpus_per_node for r in ranks}) == 1 else "inter_node"


def add_node_columns(df: pd.DataFrame, gpus_per_node: int) -> pd.DataFrame:
    """``node_id`` (from ``rank``) and ``node_span`` (from ``Process Group Ranks``)."""
    if df is None or df.empty:
        return df
    has_rank = "rank" in df.columns
    has_pg = "Process Group Ranks" in df.columns
    if not has_rank and not has_pg:
        return df
    df = df.copy()
    if has_rank:
        df["node_id"] = df["rank"].map(lambda r: int(r) // gpus_per_node)
    if has_pg:
        spans = {v: _span(v, gpus_per_node) for v in df["Process Group Ranks"].unique()}
        df["node_span"] = df["Process Group Ranks"].map(spans)
    return df
