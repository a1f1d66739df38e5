"""Every report the engine writes goes through here: the one entry point for every trace format.

PyTorch traces: the reports are one table, which kind of trace each runs on, in the order they
are written. The engine (:mod:`..analyzers.trace`) builds one :class:`ReportRun` per trace and
calls :func:`write_reports`; a new report is a new row of :data:`REPORTS`.
``unified_perf_summary.csv`` is written by :func:`write_reports` too, in a forked child beside
the others where the caller allows it (``split``; core/child_process.py), with the same bytes.

rocprofv3 and RPD traces: TraceLens's rocprof report set (:func:`write_rocprof_reports`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..model.autograd_links import bwd_links
from ..model.events import EventTable, beside
from ..model.table import Table
from ..perf_model.device_peaks import device_from_trace
from . import coll_analysis as coll
from . import gemm
from . import gpu_timeline as gt
from . import kernel_summary as ks
from . import ops_summary as ops
from . import ops_unique_args as oua
from . import perf_sheets
from . import shape_rates as sr
from . import short_kernels as sk
from . import unified_perf
from . import whats_left

__all__ = ["TraceKind", "ReportRun", "Report", "REPORTS", "write_reports", "write_rocprof_reports"]

#: "gpu": host ops and GPU events; "gpu_only": GPU events and no cpu_op; "cpu": host ops only
TraceKind = Literal["gpu", "gpu_only", "cpu"]
_ANY: frozenset[TraceKind] = frozenset({"gpu", "gpu_only", "cpu"})
_GPU: frozenset[TraceKind] = frozenset({"gpu", "gpu_only"})
_HOST_AND_GPU: frozenset[TraceKind] = frozenset({"gpu"})
_CPU: frozenset[TraceKind] = frozenset({"cpu"})


@dataclass
class ReportRun:
    """What the reports of one trace read, and what they hand on to later reports and to
    analysis.json (the fields below ``notes``)."""

    t: EventTable
    tl: gt.Timeline
    launchers: ops.Launchers
    out_dir: Path
    kind: TraceKind
    top: int  # rows kept for analysis.json's top lists
    rank: int | None
    steps: int | None
    sel: gt.CpuSelection | None  # the CPU-only trace's selected ops
    share: float  # the roofline's share of peak
    gpu_model: str | None
    notes: list[str] = field(default_factory=list)
    ops_table: Table | None = None
    category_table: Table | None = None
    gemm_rates: list[dict[str, Any]] = field(default_factory=list)
    perf_heads: dict[str, Any] = field(default_factory=dict)
    sheets: dict[str, Table] = field(default_factory=dict)  # the perf-model sheets: GEMM and the rest
    modelled: list[dict[str, Any]] = field(default_factory=list)  # unified_perf_summary.csv's modelled rows
    left: dict[str, Any] = field(default_factory=dict)  # the "what's left" part of analysis.json


@dataclass(frozen=True)
class Report:
    name: str
    kinds: frozenset[TraceKind]
    write: Callable[[ReportRun], object]  # what it returns is not kept
    after_unified: bool = False  # reads unified_perf_summary.csv's modelled rows (waits for them)


def _ops_summary(run: ReportRun) -> None:
    if run.launchers.idx.size:
        run.ops_table, run.category_table = ops.write_csvs(run.launchers, run.out_dir)
    else:  # TraceLens writes no empty ops sheets (none at all on a GPU-only trace)
        run.ops_table = ops.ops_summary_table(run.launchers)
        run.category_table = ops.ops_summary_by_category_table(run.launchers)


def _gemm(run: ReportRun) -> None:
    gemm_table = gemm.write_csv(run.t, run.out_dir)  # GEMM.csv, TraceLens's perf-model sheet
    run.gemm_rates = gemm.gemm_rates(run.t, top=run.top, rows_frame=gemm_table)
    run.sheets["GEMM"] = gemm_table


def _cpu_gemm_rates(run: ReportRun) -> None:
    run.gemm_rates = gemm.gemm_rates(run.t, cpu_time=True, top=run.top)
    if run.gemm_rates:
        run.notes.append(
            "CPU-only trace: GEMM rates use each op's own duration (no GEMM.csv: TraceLens needs GPU kernels)"
        )


def _perf_sheets(run: ReportRun) -> None:
    others = perf_sheets.write_csvs(run.t, run.out_dir)  # SDPA_fwd.csv, CONV_*.csv, Normalization.csv, ...
    run.sheets.update(others)
    run.perf_heads = perf_sheets.headlines(others)


def _whats_left(run: ReportRun) -> None:
    assert run.ops_table is not None, "ops_summary runs before what's left"
    run.left = whats_left.write_reports(
        run.t,
        run.tl,
        run.launchers,
        run.ops_table,
        run.sheets,
        run.out_dir,
        rank=run.rank,
        steps=run.steps,
        sel=run.sel,
        share=run.share,
        gpu_model=run.gpu_model,
        modelled=run.modelled,
    )


def _shape_rates(run: ReportRun) -> None:
    peak, how = device_from_trace(run.t.metadata, run.gpu_model)
    rates = sr.shape_rates(run.gemm_rates, run.sheets, peak, how, device=run.tl.device, steps=run.steps)
    run.left["shape_rates"] = whats_left.json_safe(rates)


REPORTS: tuple[Report, ...] = (
    Report("gpu_timeline", _ANY, lambda run: gt.write_csv(run.tl, run.out_dir)),
    Report("ops_summary", _ANY, _ops_summary),
    Report("kernel_summary", _GPU, lambda run: ks.write_csv(run.t, run.tl, run.out_dir, run.launchers)),
    Report(  # TraceLens's --short_kernel_study
        "short_kernels",
        _GPU,
        lambda run: sk.write_csvs(run.t, run.tl.metrics_us["total_time"], run.out_dir, run.kind == "gpu_only"),
    ),
    Report("GEMM", _HOST_AND_GPU, _gemm),
    Report("gemm_rates_cpu", _CPU, _cpu_gemm_rates),
    Report("coll_analysis", _HOST_AND_GPU, lambda run: coll.write_csv(run.t, run.out_dir, rank=0)),
    Report("perf_sheets", _HOST_AND_GPU, _perf_sheets),
    Report("ops_unique_args", _HOST_AND_GPU, lambda run: oua.write_csv(run.t, run.launchers, run.out_dir)),
    # reads ops_summary's table, the perf-model sheets and unified_perf_summary.csv's modelled rows
    Report("whats_left", _ANY, _whats_left, after_unified=True),
    Report("shape_rates", _ANY, _shape_rates),  # the gemm list and the SDPA sheets, per shape
)


def write_reports(run: ReportRun, trace: Path, *, split: bool = False) -> None:
    """Write every report of :data:`REPORTS` that runs on this kind of trace, in order, and
    ``unified_perf_summary.csv`` for a trace with host ops and GPU events. ``split`` (only for
    a caller with no threads of its own): that report in a forked child, beside the others."""
    with_unified = run.kind == "gpu"
    split = split and with_unified
    if split:  # the caches both processes read, built once before the fork
        perf_sheets.model_rows(run.t)
        bwd_links(run.t)
    work = functools.partial(_unified_report, run.t, run.launchers, run.out_dir)
    csv_name = unified_perf.CSV_NAME
    try:
        with beside(work, trace, enabled=split) as unified_side:
            unified: dict[str, Any] | None = None
            for report in REPORTS:
                if run.kind not in report.kinds:
                    continue
                if report.after_unified and with_unified and unified is None:
                    unified = unified_side.result()
                    run.modelled = unified["modelled"]
                report.write(run)
            if with_unified:
                written = (unified or unified_side.result())["part"]
                if written:
                    os.replace(written, run.out_dir / csv_name)
    except BaseException:
        for unfinished in run.out_dir.glob(f".{csv_name}.*.part"):  # a stopped child's, or unrenamed
            unfinished.unlink(missing_ok=True)
        raise


def _unified_report(t: EventTable, launchers: ops.Launchers, out_dir: Path) -> dict[str, Any]:
    """``unified_perf_summary.csv``: the report that :func:`beside` can move to a second
    process (it needs only the table, the launchers and the shared caches).  It is written
    under a temporary name, which :func:`write_reports` renames once every report is written,
    so a run that fails leaves no part of it."""
    part = out_dir / f".{unified_perf.CSV_NAME}.{os.getpid()}.part"
    df = unified_perf.write_csv(t, launchers, part)
    return {"part": None if df.empty else str(part), "modelled": unified_perf.modelled_rows(df)}


def write_rocprof_reports(t: EventTable, out_dir: Path, top: int) -> dict[str, Any]:
    """A rocprofv3 or RPD trace's reports (TraceLens's rocprof set); returns analysis.json's
    part of them (device, timeline, top ops, categories, regions, notes)."""
    from . import rocprof_reports  # the heavy formats' reports, imported only for such a trace

    return rocprof_reports.write_reports(t, out_dir, top_n=top)
