"""Compare two traces' analysis reports: what moved between a base and a new trace.

Input is what :func:`traceladder.analysis.analyzers.trace.analyze_trace` already wrote for each trace
(``ops_summary.csv``, ``ops_summary_by_category.csv``, ``kernel_summary.csv``,
``gpu_timeline.csv``, ``analysis.json``; for rocprofv3/RPD traces the rocprof set), so a trace
is never parsed twice and the summary can compare the reports stored beside each trace.

Outputs (``write_comparison``), named and ordered like TraceLens v1.0.0's
``compare_perf_reports_pytorch`` sheets with the tags ``base`` and ``new``: key columns, then
``<col>__new_diff`` / ``<col>__new_pct`` for each compared column (new − base, and 100·diff/base;
NaN where the op is on one side only, as in TraceLens), then ``base::<col>`` and ``new::<col>``.
Our additions come last: ``status`` (both | appeared | vanished) and the per-step times
``base::per_step_us``, ``new::per_step_us``, ``per_step_us__new_diff`` (one side missing counts
as 0, so an op that vanished shows its whole time as the delta).

Every delta in ``compare.json`` is µs per profiled step: a trace's totals are divided by its
number of ``ProfilerStep#N`` markers (1, with a note, when it has none). Where a new step holds
more work than a base step (``work_ratio``: a batch rung's tokens per step over its parent's),
the new side's are divided by that too, so a delta is the time for a base step's tokens. Where a
trace's run went faster or slower than its rung's measured runs (``speed``, one factor per side),
that side's are multiplied by its factor, so both count at the speed their rungs were measured at. The category deltas
add up to ``total_kernel_time_delta_us`` (the summed direct kernel time of the ops; a CPU
trace's op self time); ``residual_us`` = busy-time delta − that, the part no category owns
(kernels overlapping on several streams, communication and memcpy, unlinked kernels).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, cast, overload

import pandas as pd

from traceladder.core.documents import DocumentError, JSONObject, TraceAnalysis, TraceComparison
from traceladder.core.errors import TraceladderError
from traceladder.core.layout import REGION_OP_TIME, REGION_RANGE_TIME

from ..storage_adapter import ANALYSIS_OBJECT, COMPARE_OBJECT

__all__ = [
    "CompareError",
    "Reports",
    "Comparison",
    "load_reports",
    "reports_from_dir",
    "compare_reports",
    "write_comparison",
    "compare_paths",
    "GAP_ROW",
    "OUTPUT_FILES",
]

TAGS = ("base", "new")
GAP_ROW = "(gap to busy time)"
TOP = 10
OUTPUT_FILES = (
    "compare_ops_summary_by_category.csv",
    "compare_ops_summary.csv",
    "compare_kernel_summary.csv",
    "compare_gpu_timeline.csv",
    COMPARE_OBJECT,
)
_TIME_MS = "total_direct_kernel_time_ms"
# TraceLens's SHEETS_COMPARE_CONFIG entries we mirror (keys, compared columns, dropped columns)
_OPS = (["name"], [_TIME_MS, "Count"], ["total_direct_kernel_time_sum"])
_Sheet = tuple[list[str], list[str], list[str]]  # keys, compared columns, dropped columns
_CATS: _Sheet = (["op category"], [_TIME_MS, "Count"], [])  # no TraceLens sheet: same convention as ops
_KERNELS = (
    ["Kernel name"],
    ["Kernel duration (µs)_sum", "Kernel duration (µs)_mean", "Kernel duration (µs)_count"],
    ["Kernel duration (µs)_min", "Kernel duration (µs)_max", "Parent op category"],
)
_KERNELS_LEGACY = (
    ["name"],
    ["Total Kernel Time (ms)", "Mean Kernel Time (µs)", "Count"],
    [
        "Total Kernel Time (µs)",
        "Median Kernel Time (µs)",
        "Std Kernel Time (µs)",
        "Min Kernel Time (µs)",
        "Max Kernel Time (µs)",
        "Category",
    ],
)
_TIMELINE: _Sheet = (["type"], ["time ms"], [])


class CompareError(TraceladderError, ValueError):
    """Reports that cannot be compared (missing or malformed); the message is one line."""


@dataclass
class Reports:
    """One trace's analysis outputs. `ops` and `categories` carry real milliseconds in
    `total_direct_kernel_time_ms` (the rocprof reports' µs-labelled-ms quirk is undone here)."""

    label: str
    analysis: TraceAnalysis
    ops: pd.DataFrame
    categories: pd.DataFrame
    timeline: pd.DataFrame
    kernels: pd.DataFrame | None
    kernel_us: pd.Series | None  # real µs per kernel row (index aligned with `kernels`)
    legacy_kernels: bool
    steps: int
    notes: list[str] = field(default_factory=list)

    def timeline_ms(self, row: str) -> float:
        hit = self.timeline.loc[self.timeline["type"] == row, "time ms"]
        return float(hit.iloc[0]) if len(hit) else 0.0

    def op_us(self) -> float:
        """The window's op (or kernel) time in µs, over all its steps."""
        return float(self.ops[_TIME_MS].astype(float).sum()) * 1e3


@overload
def _csv(read: Callable[[str], bytes | None], name: str, label: str) -> pd.DataFrame: ...
@overload
def _csv(read: Callable[[str], bytes | None], name: str, label: str, required: bool) -> pd.DataFrame | None: ...
def _csv(read: Callable[[str], bytes | None], name: str, label: str, required: bool = True) -> pd.DataFrame | None:
    """A report CSV; a missing one is an error unless ``required=False`` (then None)."""
    data = read(name)
    if data is None:
        if required:
            raise CompareError(f"{label}: no {name} in its analysis reports")
        return None
    try:
        return pd.read_csv(io.BytesIO(data))
    except (ValueError, pd.errors.ParserError) as exc:
        raise CompareError(f"{label}: {name} is not a readable CSV ({exc})") from None


def _need(df: pd.DataFrame, cols: list[str], name: str, label: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise CompareError(f"{label}: {name} lacks column(s) {', '.join(missing)}")


def load_reports(read: Callable[[str], bytes | None], label: str) -> Reports:
    """Load one trace's reports through `read(file name) -> bytes | None`."""
    raw = read(ANALYSIS_OBJECT)
    if raw is None:
        raise CompareError(f"{label}: no analysis.json (not an analysis output folder)")
    try:
        analysis = TraceAnalysis.from_json(raw, f"{label}: {ANALYSIS_OBJECT}")
    except DocumentError as exc:  # not JSON, or not an analysis of this version
        raise CompareError(str(exc)) from None
    timeline = _csv(read, "gpu_timeline.csv", label)
    _need(timeline, ["type", "time ms"], "gpu_timeline.csv", label)
    notes: list[str] = []
    steps = analysis.steps
    if steps is None or steps < 1:
        steps = 1
        notes.append(f"{label}: no ProfilerStep#N markers; its totals count as 1 step")
    ops = _csv(read, "ops_summary.csv", label, required=False)
    if ops is not None:  # a PyTorch trace
        _need(ops, ["name", _TIME_MS, "Count"], "ops_summary.csv", label)
        cats = _csv(read, "ops_summary_by_category.csv", label)
        _need(cats, ["op category", _TIME_MS, "Count"], "ops_summary_by_category.csv", label)
        kernels = _csv(read, "kernel_summary.csv", label, required=False)
        kernel_us = None
        if kernels is not None:
            _need(
                kernels,
                ["Kernel name", "Kernel duration (µs)_sum", "Kernel duration (µs)_count"],
                "kernel_summary.csv",
                label,
            )
            kernels = _by_kernel_name(kernels)
            kernel_us = kernels["Kernel duration (µs)_sum"].astype(float)
        return Reports(label, analysis, ops, cats, timeline, kernels, kernel_us, False, steps, notes)
    # rocprof report set: kernels are the ops; "ms" columns hold µs (TraceLens's quirk)
    kernels = _csv(read, "kernel_summary.csv", label)
    _need(kernels, ["name", "Count", "Total Kernel Time (ms)"], "kernel_summary.csv", label)
    cats = _csv(read, "kernel_summary_by_category.csv", label)
    _need(cats, ["op category", _TIME_MS, "Count"], "kernel_summary_by_category.csv", label)
    kernel_us = kernels["Total Kernel Time (ms)"].astype(float)
    ops = pd.DataFrame(
        {
            "name": kernels["name"],
            _TIME_MS: kernel_us / 1e3,
            "Count": kernels["Count"],
            "Categories": kernels.get("Category"),
        }
    )
    cats = cats.assign(**{_TIME_MS: cats[_TIME_MS].astype(float) / 1e3})
    notes.append(f"{label}: rocprof reports: kernels stand in for ops; per-step times undo the µs/ms label quirk")
    return Reports(label, analysis, ops, cats, timeline, kernels, kernel_us, True, steps, notes)


def _by_kernel_name(k: pd.DataFrame) -> pd.DataFrame:
    """kernel_summary.csv has a row per (category, parent op, kernel, stream); TraceLens's compare
    keys on the kernel name alone, so fold the rows of one name first (no cross-product rows)."""
    sums = k.groupby("Kernel name", sort=False).agg(
        **{
            "Parent cpu_op": ("Parent cpu_op", "first") if "Parent cpu_op" in k else ("Kernel name", "first"),
            "Kernel duration (µs)_sum": ("Kernel duration (µs)_sum", "sum"),
            "Kernel duration (µs)_count": ("Kernel duration (µs)_count", "sum"),
        }
    )
    sums["Kernel duration (µs)_mean"] = sums["Kernel duration (µs)_sum"] / sums["Kernel duration (µs)_count"]
    total = sums["Kernel duration (µs)_sum"].sum()
    sums["Percent of kernels time (%)"] = sums["Kernel duration (µs)_sum"] / total * 100 if total else 0.0
    return (
        sums.reset_index()
        .sort_values("Kernel duration (µs)_sum", ascending=False, kind="stable")
        .reset_index(drop=True)
    )


def reports_from_dir(folder: Path, label: str | None = None) -> Reports:
    folder = Path(folder)

    def read(name: str) -> bytes | None:
        p = folder / name
        return p.read_bytes() if p.is_file() else None

    return load_reports(read, label or str(folder))


def _side_by_side(
    base: pd.DataFrame,
    new: pd.DataFrame,
    spec: tuple,
    base_us: pd.Series,
    new_us: pd.Series,
    base_steps: float,
    new_steps: float,
    sort: bool = True,
) -> pd.DataFrame:
    """TraceLens's build_df_dff for two reports, plus status and per-step columns."""
    keys, diff_cols, drop = spec
    b = base.drop(columns=drop, errors="ignore").assign(_us=base_us.values / base_steps)
    n = new.drop(columns=[*drop, "Cumulative Percentage (%)"], errors="ignore").assign(_us=new_us.values / new_steps)
    b = b.assign(_pos=range(len(b)))  # outer merges sort their keys; keep the reports' row order
    n = n.assign(_pos_n=range(len(n)))
    b = b.rename(columns={c: f"base::{c}" for c in b.columns if c not in keys})
    n = n.rename(columns={c: f"new::{c}" for c in n.columns if c not in keys})
    m = pd.merge(b, n, on=keys, how="outer", sort=False, indicator=True)
    diffs: list[str] = []
    for col in diff_cols:
        bc, nc = f"base::{col}", f"new::{col}"
        if bc not in m or nc not in m:
            continue
        m[f"{col}__new_diff"] = m[nc] - m[bc]
        m[f"{col}__new_pct"] = 100 * m[f"{col}__new_diff"] / m[bc].where(m[bc] != 0)
        diffs += [f"{col}__new_diff", f"{col}__new_pct"]
    m["status"] = m["_merge"].map({"both": "both", "left_only": "vanished", "right_only": "appeared"}).astype(str)
    m["base::per_step_us"] = m.pop("base::_us").fillna(0.0)
    m["new::per_step_us"] = m.pop("new::_us").fillna(0.0)
    m["per_step_us__new_diff"] = m["new::per_step_us"] - m["base::per_step_us"]
    m = m.sort_values(["base::_pos", "new::_pos_n"], kind="stable", na_position="last")
    m = m.drop(columns=["_merge", "base::_pos", "new::_pos_n"]).reset_index(drop=True)
    extra = ["status", "base::per_step_us", "new::per_step_us", "per_step_us__new_diff"]
    rest = [c for c in m.columns if c not in keys and c not in diffs and c not in extra]
    m = m[keys + diffs + rest + extra]
    if not sort:  # the timeline sheet keeps the report's row order, as in TraceLens
        return m
    # TraceLens sorts by the base's compared time; ops only in `new` follow, largest first
    first = f"base::{diff_cols[0]}"
    order = m.assign(_b=m[first].fillna(-math.inf), _n=m["new::per_step_us"])
    return m.loc[order.sort_values(["_b", "_n"], ascending=False, kind="stable").index].reset_index(drop=True)


@dataclass
class Comparison:
    ops: pd.DataFrame
    categories: pd.DataFrame
    kernels: pd.DataFrame | None
    timeline: pd.DataFrame
    doc: TraceComparison


def _movers(df: pd.DataFrame, key: str, top: int = TOP) -> list[dict[str, Any]]:
    moved = df.loc[df["per_step_us__new_diff"] != 0]
    moved = moved.reindex(moved["per_step_us__new_diff"].abs().sort_values(ascending=False, kind="stable").index).head(
        top
    )
    return [
        {
            "name": str(r[key]),
            "base_us": float(r["base::per_step_us"]),
            "new_us": float(r["new::per_step_us"]),
            "delta_us": float(r["per_step_us__new_diff"]),
            "status": r["status"],
        }
        for _, r in moved.iterrows()
    ]


def _named(df: pd.DataFrame, key: str, status: str) -> list[str]:
    hit = df.loc[df["status"] == status]
    col = "new::per_step_us" if status == "appeared" else "base::per_step_us"
    return [str(x) for x in hit.sort_values(col, ascending=False, kind="stable")[key]]


def _region_totals(
    base: Reports, new: Reports
) -> tuple[dict[str, float], dict[str, float], str, tuple[float, float] | None]:
    """Each side's ms per region over its window, what they measure, and each side's ms in no
    region (None where unknown): the direct op time of `step_regions` (backward included, the op
    time the comparison is about) where both analyses have it, else the raw `regions` (each
    region's ranges' wall time, waits included: older analyses). The two are never mixed."""
    rows_b, rows_n = base.analysis.step_regions, new.analysis.step_regions

    def op_time(r: Reports, rows: list[JSONObject]) -> dict[str, float]:
        return {str(x["region"]): float(cast(float, x["ms_per_step"])) * r.steps for x in rows}

    def range_time(r: Reports) -> dict[str, float]:
        regions = r.analysis.regions if isinstance(r.analysis.regions, dict) else {}
        return {str(k): float(cast(float, v)) for k, v in regions.items()}

    if rows_b and rows_n:
        out_b, out_n = (r.analysis.step_regions_outside_ms_per_step for r in (base, new))
        known = None if out_b is None or out_n is None else (float(out_b) * base.steps, float(out_n) * new.steps)
        return op_time(base, rows_b), op_time(new, rows_n), REGION_OP_TIME, known
    return range_time(base), range_time(new), REGION_RANGE_TIME, None


def compare_reports(
    base: Reports, new: Reports, work_ratio: float = 1.0, speed: tuple[float, float] = (1.0, 1.0)
) -> Comparison:
    """`new` against `base`, per profiled step. `work_ratio` is how many of the base's steps of
    work one new step holds (a batch rung: its tokens per step over its parent's): the new side's
    per-step figures are divided by it too, so both sides count the time for the same tokens.
    `speed` (base, new) multiplies each side's figures by how fast its run went against its
    rung's measured runs (summary.attribution.run_speed; 1: as profiled)."""
    if base.legacy_kernels != new.legacy_kernels:
        raise CompareError(f"{new.label}: cannot compare a rocprof report set with a PyTorch one ({base.label})")
    for name, ratio in (("work_ratio", work_ratio), ("base speed", speed[0]), ("new speed", speed[1])):
        if not (math.isfinite(ratio) and ratio > 0):
            raise CompareError(f"{new.label}: {name} must be a positive number, got {ratio!r}")
    bs, ns = base.steps / speed[0], new.steps * work_ratio / speed[1]
    ops = _side_by_side(
        base.ops, new.ops, _OPS, base.ops[_TIME_MS].astype(float) * 1e3, new.ops[_TIME_MS].astype(float) * 1e3, bs, ns
    )
    cats = _side_by_side(
        base.categories,
        new.categories,
        _CATS,
        base.categories[_TIME_MS].astype(float) * 1e3,
        new.categories[_TIME_MS].astype(float) * 1e3,
        bs,
        ns,
    )
    tl = _side_by_side(
        base.timeline,
        new.timeline,
        _TIMELINE,
        base.timeline["time ms"].astype(float) * 1e3,
        new.timeline["time ms"].astype(float) * 1e3,
        bs,
        ns,
        sort=False,
    )
    tl = tl.drop(columns="status")
    kernels = None
    if base.kernels is not None and new.kernels is not None:
        spec = _KERNELS_LEGACY if base.legacy_kernels else _KERNELS
        kernels = _side_by_side(base.kernels, new.kernels, spec, base.kernel_us, new.kernel_us, bs, ns)

    def per_step(r: Reports, row: str, steps: float) -> float:
        return r.timeline_ms(row) * 1e3 / steps

    total_base, total_new = base.op_us() / bs, new.op_us() / ns
    kernel_delta = total_new - total_base
    busy_base, busy_new = per_step(base, "busy_time", bs), per_step(new, "busy_time", ns)
    busy_delta = busy_new - busy_base
    gap_base, gap_new = busy_base - total_base, busy_new - total_new
    gap = pd.DataFrame(
        [
            {
                "op category": GAP_ROW,
                "status": "both",
                "base::per_step_us": gap_base,
                "new::per_step_us": gap_new,
                "per_step_us__new_diff": gap_new - gap_base,
            }
        ]
    )
    cats = pd.concat([cats, gap], ignore_index=True)[cats.columns]
    real = cats.loc[cats["op category"] != GAP_ROW]
    key_ops = "name"
    appeared = _named(ops, key_ops, "appeared")
    vanished = _named(ops, key_ops, "vanished")
    if kernels is not None and not base.legacy_kernels:
        appeared += [k for k in _named(kernels, "Kernel name", "appeared") if k not in appeared]
        vanished += [k for k in _named(kernels, "Kernel name", "vanished") if k not in vanished]
    regions_b, regions_n, regions_measure, outside = _region_totals(base, new)
    region_deltas = {
        k: (regions_n.get(k, 0.0) / ns - regions_b.get(k, 0.0) / bs) * 1e3
        for k in list(regions_b) + [k for k in regions_n if k not in regions_b]
    }
    doc = {
        "schema": TraceComparison.SCHEMA,
        "base": base.label,
        "new": new.label,
        "device": {"base": base.analysis.device, "new": new.analysis.device},
        "steps": {"base": bs, "new": new.steps},
        "work_ratio": work_ratio,
        "speed": {"base": speed[0], "new": speed[1]},
        "unit": ("us per profiled step" if work_ratio == 1 else "us per base step's tokens")
        + ("" if speed == (1.0, 1.0) else ", each side x its speed")
        + ("" if work_ratio == 1 else " (new side / (steps x work_ratio))"),
        "total_kernel_time_delta_us": kernel_delta,
        "busy_time_delta_us": busy_delta,
        "residual_us": busy_delta - kernel_delta,
        "categories": {str(r["op category"]): float(r["per_step_us__new_diff"]) for _, r in real.iterrows()},
        "timeline": {str(r["type"]): float(r["per_step_us__new_diff"]) for _, r in tl.iterrows()},
        "regions": region_deltas,
        "regions_measure": regions_measure,
        # the op time in no region's range (a fused op whose stages the ranges name from inside,
        # an unnamed chain), counted by the analysis; None where either analysis predates it
        "regions_outside_us": (outside[1] / ns - outside[0] / bs) * 1e3 if outside else None,
        "appeared": appeared,
        "vanished": vanished,
        "top_ops": _movers(ops, key_ops),
        "top_kernels": _movers(kernels, "name" if base.legacy_kernels else "Kernel name")
        if kernels is not None
        else [],
        "notes": base.notes + new.notes,
    }
    return Comparison(ops, cats, kernels, tl, TraceComparison.from_dict(doc, f"{COMPARE_OBJECT} of {new.label}"))


def write_comparison(c: Comparison, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    frames = {
        "compare_ops_summary_by_category.csv": c.categories,
        "compare_ops_summary.csv": c.ops,
        "compare_kernel_summary.csv": c.kernels,
        "compare_gpu_timeline.csv": c.timeline,
    }
    written = []
    for name, df in frames.items():
        if df is not None:
            df.to_csv(out_dir / name, index=False)
            written.append(out_dir / name)
    (out_dir / COMPARE_OBJECT).write_text(c.doc.to_json())
    return written + [out_dir / COMPARE_OBJECT]


def _reports_for(path: Path, work: Path, tag: str) -> Reports:
    """A trace (analysed into `work/tag`), or a folder the engine already wrote (has analysis.json)."""
    from traceladder.analysis.analyzers.trace import analyze_trace

    if path.is_dir() and (path / ANALYSIS_OBJECT).is_file():
        return reports_from_dir(path, str(path))
    analyze_trace(path, work / tag)
    return reports_from_dir(work / tag, str(path))


def compare_paths(base: Path, new: Path, out_dir: Path) -> dict[str, Any]:
    """`traceladder compare`: each trace's reports go to out_dir/base and out_dir/new, the
    comparison beside them. Raises TraceError / CompareError for bad input."""
    out_dir = Path(out_dir)
    b = _reports_for(Path(base), out_dir, "base")
    n = _reports_for(Path(new), out_dir, "new")
    c = compare_reports(b, n)
    write_comparison(c, out_dir)
    return c.doc.to_dict()
