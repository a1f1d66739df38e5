"""The analysis engine: the one interface the rest of traceladder calls.

``analyze_trace(trace, out_dir)`` reads one trace and writes, into ``out_dir``:
  * ``gpu_timeline.csv`` (``type,time ms,percent``),
  * ``ops_summary.csv`` and ``ops_summary_by_category.csv`` (TraceLens columns),
  * ``kernel_summary.csv``, ``short_kernels_summary.csv`` and ``short_kernel_histogram.csv``
    (GPU traces only; on a GPU-only trace, with no cpu_op, these and gpu_timeline are all),
  * with host ops and GPU events: ``GEMM.csv``, ``coll_analysis.csv`` and the other
    perf-model sheets (``SDPA_fwd.csv``, ``CONV_bwd.csv``, ``Normalization.csv``, ...,
    :mod:`.reports.perf_sheets`), ``ops_unique_args.csv`` and ``unified_perf_summary.csv``,
    each only when it has rows,
  * ``analysis.json`` (schema 2, see :func:`analyze_trace`),
and returns the analysis.json content.

``analyze_each(paths, out_root, jobs)`` backs ``traceladder analyze TRACE... --out DIR
[--jobs N]``.  Each trace gets ``out_root/<stem>/``, where ``<stem>`` is the file name
less the first matching suffix of :data:`TRACE_SUFFIXES` (longest first: a Primus
``x-rank[0].12.pt.trace.json.gz`` becomes ``x-rank[0].12``); when two inputs give the
same stem, the later ones get ``-2``, ``-3``, ... appended in input order.  Bad inputs
(missing, empty, truncated, corrupt gzip, unknown format, no events) give an outcome with a
one-line reason, ``<path>: <reason>`` (the CLI prints ``error: `` before it and exits 2); the
good inputs in the same call still get their reports.
"""

from __future__ import annotations

import gc
import math
import mmap
import re
import time
from pathlib import Path
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from traceladder.core.documents import TraceAnalysis

from ..storage_adapter import ANALYSIS_OBJECT
from traceladder.core.child_process import spare_cpu

from ..model.events import GPU_CATS, EventTable, TraceError
from ..readers.heavy import HEAVY_FORMATS, read_heavy, sniff
from ..readers.pytorch_json import load_bytes, read_pytorch_json, trace_buffer
from ..reports import gpu_timeline as gt
from ..reports import ops_summary as ops
from ..reports import registry
from ..reports import short_kernels as sk
from ..reports import trace_gate
from ..reports.roofline import DEFAULT_SHARE

__all__ = [
    "SCHEMA",
    "TRACE_SUFFIXES",
    "TraceError",
    "read_trace",
    "analyze_trace",
    "analyze_each",
    "TraceOutcome",
    "output_stem",
]

SCHEMA = 2  # 2: shape_rates
TOP_OPS = 10
TRACE_SUFFIXES = (
    ".pt.trace.json.gz",
    ".pt.trace.json",
    ".json.gz",
    ".json",
    ".csv.gz",
    ".csv",
    ".db.gz",
    ".db",
    ".rpd.gz",
    ".rpd",
)
_UNSUPPORTED = {".csv": "CSV", ".db": "SQLite database", ".db.gz": "SQLite database", ".rpd": "rpd database"}
_RANK_RES = (re.compile(r"rank\[(\d+)\]"), re.compile(r"rank[_-]?(\d+)", re.IGNORECASE))
# user_annotation names that are not user regions
_NOT_REGIONS = ("ProfilerStep#", gt.CPU_COMM_PREFIX)


def output_stem(path: Path) -> str:
    name = Path(path).name
    low = name.lower()
    for suf in TRACE_SUFFIXES:
        if low.endswith(suf) and len(name) > len(suf):
            return name[: -len(suf)]
    return name


def read_trace(path: Path, split: bool = False, data: bytearray | None = None) -> EventTable:
    """Read any supported trace into an EventTable; bad input raises TraceError only.
    ``split``: a big PyTorch or rocprofv3 JSON trace is decoded by two processes (a caller with
    no threads of its own only: the CLI, or the interpreter an Airflow task spawns).
    ``data``: the file's bytes, already in memory (a verified download; not an SQLite trace,
    which is read from its file): ``path`` then only names it."""
    path = Path(path)
    # rocprofv3 JSON/CSV (a CSV folder too) and RPD-style SQLite, detected from content
    buf: bytearray | mmap.mmap | None = None
    if data is not None:
        buf = trace_buffer(path, data)
    elif not path.is_dir():
        buf = load_bytes(path, mapped=True)
    if buf is not None and not isinstance(buf, bytearray) and sniff(path, buf) not in (None, "rocprofv3_json"):
        buf = bytearray(buf)  # the other heavy readers take bytes; PyTorch and rocprofv3 JSON are mapped
    t = read_heavy(path, buf, split)
    if t is not None:
        return t
    low = path.name.lower()
    for suf, what in _UNSUPPORTED.items():
        if low.endswith(suf) and not bytes(buf[:4096]).lstrip()[:1] == b"{":
            raise TraceError(path, f"unsupported format: {what} ({suf}); only PyTorch profiler JSON is read")
    t = read_pytorch_json(path, buf, split=split)
    timed = ~np.isnan(t.ts) & ~np.isnan(t.dur)
    if not timed.any():
        raise TraceError(path, "no events with a start time and duration")
    return t


def _rank(t: EventTable) -> int | None:
    di = t.metadata.get("distributedInfo")
    if isinstance(di, dict) and isinstance(di.get("rank"), int):
        return di["rank"]
    for rx in _RANK_RES:
        m = rx.search(t.path.name)
        if m:
            return int(m.group(1))
    return None


def _regions(t: EventTable) -> dict[str, float]:
    idx = np.flatnonzero(t.is_cat("user_annotation") & ~np.isnan(t.dur))
    out: dict[str, float] = {}
    for nm, d in zip(t.names_of(idx), t.dur[idx].tolist()):
        if nm.startswith(_NOT_REGIONS):
            continue
        out[nm] = out.get(nm, 0.0) + d / 1e3
    return out


def _steps(t: EventTable) -> int | None:
    """Distinct ``ProfilerStep#N`` markers (any category); None when the trace has none."""
    n = len({nm for nm in t.names if nm.startswith(gt.STEP_PREFIX)})
    return n or None


def _clean(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def analyze_trace(
    trace_path: Path,
    out_dir: Path,
    split: bool = False,
    *,
    roofline_share: float = DEFAULT_SHARE,
    gpu_model: str | None = None,
    data: bytearray | None = None,
    expect: dict[str, Any] | None = None,
) -> dict:
    """Analyse one trace; write the CSVs and analysis.json into out_dir; return the JSON.
    ``data``: the trace's bytes already in memory (see :func:`read_trace`). ``expect``: what the
    run's lens records, ``{"cpu", "gpu", "steps"}``, for the trace gate (None: judged by format).

    ``split=True``: a forked child decodes part of a big trace's events, and another
    writes ``unified_perf_summary.csv`` while this process writes the rest
    (``beside``, :mod:`traceladder.core.child_process`); the files are the same either way.
    Only for a caller with no threads of its own.

    analysis.json (schema 2)::

      {"schema": 2, "trace": <file name>, "device": "gpu" | "cpu",
       "rank": <int | null>,            # distributedInfo.rank, else rank[R] in the name
       "steps": <int | null>,           # distinct ProfilerStep#N markers (null: none)
       "timeline": {computation_time, exposed_comm_time, exposed_memcpy_time,
                    busy_time, idle_time, total_time, total_comm_time,
                    total_memcpy_time}  # ms
       "timeline_percent": {same keys}, # percent of total_time
       "top_ops": [{"name", "time_ms", "percent", "count"}],     # top 10, direct time
       "categories": [{"name", "time_ms", "percent", "count"}],  # ops_summary_by_category
       "regions": {<record_function name>: total ms},  # user_annotation ranges, less
                                                       # ProfilerStep#N and gloo:*
       "gemm": [{"name", "M", "N", "K", "B", "dtype", "count", "time_ms",
                 "tflops_mean", "tbps_mean", "compute_spec"}],  # top 10 GEMM shapes by kernel time (GEMM.csv rows;
                                   # CPU-only traces: by op duration)
       "perf_sheets": {<sheet>: {"ops", "shapes", "kernel_time_ms", "tflops_per_s",
                       "tb_per_s", "top": {"name", "count", "kernel_time_ms"}}},
                      # one per perf-model sheet written (SDPA_fwd, CONV_bwd, ...);
                      # rates = the sheet's modelled work / its kernel time
       "step_regions": [{"region", "ms_per_step", "pct_of_direct_kernel_time", "matched_names"}],
       "idle_breakdown": [{"rank", "stream", "idle_category", "idle_time", "idle_time_ratio"}],
       "op_origins": [{"op", "parent", "link", "ms_per_step", "pct_of_op", "count", "shapes"}],
       "headroom": [{"kind", "target", "ms_per_step", "pct_of_step", "why", "recoverable_ms",
                     "window_ms", "sentence"}],   # the top 20 rows of headroom.csv
       "mean_step_ms", "roofline_share", "roofline_device",
       "shape_rates": {"device", "device_from", "device_note", "gemm": [...], "attention": [...]},
                      # GEMM and attention rates per shape (reports/shape_rates.py)
       "notes": [str],
       "gate": {"fit", "reasons", ...}}  # the trace gate (reports/trace_gate.py)

    The "what's left" reports (idle_breakdown.csv, step_regions.csv, op_origins.csv,
    roofline.csv on GPU traces, headroom.csv; docs/whats-left.md) are written for PyTorch
    traces with host ops or GPU events; ``roofline_share`` and ``gpu_model`` (the cluster's
    GPU, used when the trace names no known device) feed the roofline.

    Raises TraceError for bad input.
    """
    # no cyclic GC passes during one trace (~10^5-10^6 objects made, none cyclic): 4% here
    gc_on = gc.isenabled()
    gc.disable()
    try:
        return _analyze(Path(trace_path), Path(out_dir), split, roofline_share, gpu_model, data, expect)
    finally:
        if gc_on:
            gc.enable()


def _analyze(
    trace_path: Path,
    out_dir: Path,
    split: bool,
    share: float,
    gpu_model: str | None,
    data: bytearray | None,
    expect: dict[str, Any] | None = None,
) -> dict:
    t = read_trace(trace_path, split, data)
    if t.fmt in HEAVY_FORMATS:  # rocprofv3 / RPD: TraceLens's rocprof report set
        part = registry.write_rocprof_reports(t, out_dir, TOP_OPS)
        result = {
            "schema": SCHEMA,
            "trace": trace_path.name,
            "device": part["device"],
            "rank": _rank(t),
            "steps": _steps(t),
        }
        result.update(
            (k, part[k]) for k in ("timeline", "timeline_percent", "top_ops", "categories", "regions", "notes")
        )
        result["gate"] = trace_gate.judge(t, result["steps"], result["rank"], False, expect).to_dict()
        (out_dir / ANALYSIS_OBJECT).write_text(TraceAnalysis.from_dict(result, str(trace_path)).to_json())
        return result
    notes: list[str] = []
    has_gpu = bool(t.is_cat(*GPU_CATS).any())
    gpu_only = has_gpu and sk.is_gpu_only(t)
    sel = None
    try:
        if has_gpu:
            tl = gt.gpu_timeline(t)
            if gpu_only:
                launchers = None
                notes.append("GPU-only trace (no cpu_op events): no ops summaries, GEMM or collectives, as TraceLens")
            else:
                launchers = ops.gpu_launchers(t)
        else:
            if not t.is_cat("cpu_op").any():
                raise TraceError(trace_path, "no GPU events and no cpu_op events to analyse")
            sel = gt.cpu_selection(t)
            tl = gt.cpu_timeline(t, sel)
            launchers = ops.cpu_launchers(t, sel)
    except ValueError as exc:
        raise TraceError(trace_path, f"cannot analyse: {exc}") from None
    notes.extend(tl.notes)

    if launchers is None:
        launchers = ops.Launchers(np.empty(0, np.int64), np.empty(0), np.empty(0), np.empty(0, np.int64), [], [])
    out_dir.mkdir(parents=True, exist_ok=True)
    kind: registry.TraceKind = "cpu" if not has_gpu else ("gpu_only" if gpu_only else "gpu")
    run = registry.ReportRun(
        t, tl, launchers, out_dir, kind, TOP_OPS, _rank(t), _steps(t), sel, share, gpu_model, notes=notes
    )
    registry.write_reports(run, trace_path, split=split)
    assert run.ops_table is not None and run.category_table is not None
    ops_df, cat_df, left = run.ops_table, run.category_table, run.left

    top = [
        {
            "name": str(r["name"]),
            "time_ms": _clean(r["total_direct_kernel_time_ms"]),
            "percent": _clean(r["Percentage (%)"]),
            "count": int(r["Count"]),
        }
        for r in ops_df.records(TOP_OPS)
    ]
    cats = [
        {
            "name": str(r["op category"]),
            "time_ms": _clean(r["total_direct_kernel_time_ms"]),
            "percent": _clean(r["Percentage (%)"]),
            "count": int(r["Count"]),
        }
        for r in cat_df.records()
    ]
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "trace": trace_path.name,
        "device": tl.device,
        "rank": run.rank,
        "steps": run.steps,
        "timeline": {k: _clean(v) for k, v in tl.as_ms().items()},
        "timeline_percent": {k: _clean(v) for k, v in tl.as_percent().items()},
        "top_ops": top,
        "categories": cats,
        "regions": _regions(t),
        "gemm": run.gemm_rates,
        "perf_sheets": run.perf_heads,
        **{k: v for k, v in left.items() if k != "notes"},
        "notes": notes + left["notes"],
        "gate": trace_gate.judge(t, run.steps, run.rank, True, expect).to_dict(),
    }
    (out_dir / ANALYSIS_OBJECT).write_text(TraceAnalysis.from_dict(result, str(trace_path)).to_json())
    return result


def _unique_dirs(paths: list[Path], out_root: Path) -> list[Path]:
    seen: dict[str, int] = {}
    out = []
    for p in paths:
        stem = output_stem(p)
        n = seen.get(stem, 0) + 1
        seen[stem] = n
        d = stem if n == 1 else f"{stem}-{n}"
        while n > 1 and d in seen:  # "-2" collides with a real stem
            n += 1
            d = f"{stem}-{n}"
        seen.setdefault(d, 1)
        out.append(out_root / d)
    return out


def _one(args: tuple[str, str, float, str | None], split: bool = False) -> tuple[str, str | None, float]:
    path, out, share, gpu_model = args
    t0 = time.perf_counter()
    try:
        analyze_trace(Path(path), Path(out), split=split, roofline_share=share, gpu_model=gpu_model)
        return path, None, time.perf_counter() - t0
    except TraceError as exc:
        return path, str(exc), time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - an engine bug must not become a traceback for the user
        return path, f"{path}: internal error while analysing ({type(exc).__name__}: {exc})", time.perf_counter() - t0


@dataclass(frozen=True)
class TraceOutcome:
    """One trace of :func:`analyze_each`: its reports' folder, and the one-line reason when it could
    not be analysed (None when it was)."""

    path: str
    out_dir: str
    error: str | None
    seconds: float


def worker_count(jobs: int, total: int) -> int:
    """The worker processes :func:`analyze_each` starts: 0 (in this process) or ``min(jobs, total)``."""
    return 0 if jobs <= 1 or total <= 1 else min(jobs, total)


def analyze_each(
    paths: list[Path],
    out_root: Path,
    jobs: int = 1,
    roofline_share: float = DEFAULT_SHARE,
    gpu_model: str | None = None,
) -> Iterator[TraceOutcome]:
    """Analyse many traces into out_root/<stem>/, one :class:`TraceOutcome` per trace as each
    finishes; the caller reports them (``traceladder analyze`` prints a line each).

    ``jobs`` > 1: that many worker processes, a trace each at a time.  One at a time (the
    default), each trace's reports are split over two processes when a second CPU is free
    (:mod:`traceladder.core.child_process`).  For the CLI only: it forks, so the caller must have no threads.
    """
    paths = [Path(p) for p in paths]
    dirs = _unique_dirs(paths, Path(out_root))
    work = [(str(p), str(d), roofline_share, gpu_model) for p, d in zip(paths, dirs)]
    workers = worker_count(jobs, len(work))
    if not workers:
        split = spare_cpu()
        for w in work:
            path, error, secs = _one(w, split)
            yield TraceOutcome(path, w[1], error, secs)
        return
    # one trace per worker at a time (memory per worker = one trace's peak, about 2.4x its JSON size)
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
        futs = {ex.submit(_one, w): w for w in work}
        for f in as_completed(futs):
            path, error, secs = f.result()
            yield TraceOutcome(path, futs[f][1], error, secs)
