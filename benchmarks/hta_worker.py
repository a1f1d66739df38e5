"""HTA's idle split for the HTA harness (benchmarks/bench_hta_diff.py), run by the HTA oracle's
python (../shared/tools/hta_oracle.sh), never the product's.

Reads ``trace<TAB>out_stem`` lines on stdin. For each trace: HTA 0.5.0's
``TraceAnalysis(trace_dir=D, include_last_profiler_step=X).get_idle_time_breakdown(visualize=False)[0]``
with X = False and True, written to ``out_stem.last_false.csv`` and ``out_stem.last_true.csv``;
or, where HTA fails or finds no GPU stream, ``out_stem.error`` with one line saying why. HTA
finds a trace in D only as ``rank-0.json.gz``, so the trace is linked there under that name.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
from pathlib import Path


def idle_split(analysis_class: type, trace: Path, stem: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="hta-") as d:
        os.symlink(trace.resolve(), Path(d) / "rank-0.json.gz")
        for include_last in (False, True):
            quiet = io.StringIO()
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                analysis = analysis_class(trace_dir=d, include_last_profiler_step=include_last)
                frame = analysis.get_idle_time_breakdown(visualize=False)[0]
            if frame is None or frame.empty:
                raise ValueError("no GPU stream to split")
            frame.to_csv(f"{stem}.last_{str(include_last).lower()}.csv", index=False)


def main() -> int:
    # HTA is imported once, before any trace: a broken venv fails the worker (its exit code and
    # stderr reach the harness), and is never cached as every trace's outcome
    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.CRITICAL)
    for line in sys.stdin:
        trace, stem = line.rstrip("\n").split("\t")
        try:
            idle_split(TraceAnalysis, Path(trace), Path(stem))
        except Exception as exc:  # noqa: BLE001 - whatever HTA raises is the oracle's outcome
            text = " ".join(f"{type(exc).__name__}: {exc}".split())
            Path(f"{stem}.error").write_text(text[:300])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
