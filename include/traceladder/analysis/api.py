"""The one door into analysis: what the rest of traceladder (CLI, summary, triage, Airflow) uses.

Analyse traces (files):
    analyze_trace(trace, out_dir)             one trace -> its report folder (CSVs + analysis.json)
    analyze_each(paths, out_root, jobs, ...)  many traces, one TraceOutcome each, in worker processes
    worker_count(jobs, total)                 the worker processes analyze_each would start
    analyze_ranks(paths, out_dir, ...)        one trace per rank -> the multi-rank collective reports
    default_jobs(n)                           the reading processes analyze_ranks uses by default
    DEFAULT_SHARE                             the roofline's default share of peak

Compare two runs' reports (the attribution, `traceladder compare`):
    reports_from_dir(folder)                  read a report folder -> Reports
    load_reports(read, label)                 read one stored through a reader of its files
    compare_reports(base, new, ...)           -> Comparison;  write_comparison(c, out_dir)
    compare_paths(base, new, out_dir)         two traces or report folders -> the compare sheets
    Reports, Comparison, CompareError

Analyse traces in the artifact store (the Airflow tasks), and where their reports lie:
    analyze_stored(store, trace_key, ...)     one stored trace -> its reports stored beside it
    analyze_stored_ranks(store, rung, keys)   a rung's per-rank traces -> collectives.json
    analysis_prefix, analysis_key, collectives_key, tracelens_prefix

The heavy lens's kernel names against the torch window (rocprofv3's kernel_summary.csv against the
torch trace's): kernel_names_table(read_process, read_window, ...) -> KernelNames; KernelNamesError.

The What's left rows: is_accumulate_origin(row).
Errors: TraceError (a trace that cannot be analysed), MultiRankError (ranks that do not join).

Importing this module is cheap: no numpy, pandas or msgspec until a name other than TraceError is
first used (PEP 562: each name is looked up in its module on every access, so it is always the
module's own object). Code outside ``traceladder.analysis`` imports analysis only from here
(``.importlinter``: "Only analysis/api.py is imported from outside analysis")."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .model.errors import TraceError

if TYPE_CHECKING:  # what mypy sees; at run time each name is looked up in _EXPORTS' module
    from .analyzers.diff import (
        CompareError,
        Comparison,
        Reports,
        compare_paths,
        compare_reports,
        load_reports,
        reports_from_dir,
        write_comparison,
    )
    from .analyzers.kernel_names import KernelNames, KernelNamesError, kernel_names_table
    from .analyzers.ranks import analyze_ranks
    from .analyzers.trace import TraceOutcome, analyze_each, analyze_trace, worker_count
    from .readers.collectives import MultiRankError, default_jobs
    from .reports.roofline import DEFAULT_SHARE
    from .reports.whats_left_targets import is_accumulate_origin
    from .stored import (
        analysis_key,
        analysis_prefix,
        analyze_stored,
        analyze_stored_ranks,
        collectives_key,
        tracelens_prefix,
    )

__all__ = [
    "TraceError",
    "MultiRankError",
    "analyze_trace",
    "analyze_each",
    "worker_count",
    "TraceOutcome",
    "analyze_ranks",
    "default_jobs",
    "DEFAULT_SHARE",
    "Reports",
    "Comparison",
    "CompareError",
    "reports_from_dir",
    "load_reports",
    "compare_reports",
    "write_comparison",
    "compare_paths",
    "analyze_stored",
    "analyze_stored_ranks",
    "analysis_prefix",
    "analysis_key",
    "collectives_key",
    "tracelens_prefix",
    "is_accumulate_origin",
    "KernelNames",
    "KernelNamesError",
    "kernel_names_table",
]

#: Each lazily loaded name -> the analysis module that defines it.
_EXPORTS: dict[str, str] = {
    "MultiRankError": "readers.collectives",
    "analyze_trace": "analyzers.trace",
    "analyze_each": "analyzers.trace",
    "worker_count": "analyzers.trace",
    "TraceOutcome": "analyzers.trace",
    "analyze_ranks": "analyzers.ranks",
    "default_jobs": "readers.collectives",
    "DEFAULT_SHARE": "reports.roofline",
    "Reports": "analyzers.diff",
    "Comparison": "analyzers.diff",
    "CompareError": "analyzers.diff",
    "reports_from_dir": "analyzers.diff",
    "load_reports": "analyzers.diff",
    "compare_reports": "analyzers.diff",
    "write_comparison": "analyzers.diff",
    "compare_paths": "analyzers.diff",
    "analyze_stored": "stored",
    "analyze_stored_ranks": "stored",
    "analysis_prefix": "stored",
    "analysis_key": "stored",
    "collectives_key": "stored",
    "tracelens_prefix": "stored",
    "is_accumulate_origin": "reports.whats_left_targets",
    "KernelNames": "analyzers.kernel_names",
    "KernelNamesError": "analyzers.kernel_names",
    "kernel_names_table": "analyzers.kernel_names",
}


def __getattr__(name: str) -> Any:
    """A lazily loaded name, from its module (not cached here: a test's monkeypatch of the module
    is what callers get)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__package__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
