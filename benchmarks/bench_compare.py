"""The compare section (``python -m benchmarks --only compare``): what a rung's attribution costs
the summary task. The summary compares the reports analysis already stored; the alternative is
to re-read both traces. Both are timed here, in this process, on reference traces:
resnet_act_checkpoint (MI300, 3 steps) against bert-small (MI300)."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import SHARED_REF, Context, Row

BASE = SHARED_REF / "mi300" / "resnet_act_checkpoint.json.gz"
NEW = SHARED_REF / "mi300" / "gaunernst_bert-small-uncased__1016001.json.gz"


def _median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_compare(ctx: Context) -> list[Row]:
    """Load two traces' stored reports and compare them, vs analysing the two traces again."""
    from traceladder.analysis.analyzers.diff import compare_reports, reports_from_dir, write_comparison
    from traceladder.analysis.analyzers.trace import analyze_trace

    if not BASE.is_file() or not NEW.is_file():
        raise SystemExit(f"bench: reference traces not found under {SHARED_REF}")
    work = Path(tempfile.mkdtemp(prefix="tl-bench-compare-", dir=ctx.scratch))

    def reanalyse() -> None:
        analyze_trace(BASE, work / "base")
        analyze_trace(NEW, work / "new")

    reanalyse()  # warm imports; leaves the reports the compare reads

    def from_reports() -> None:
        c = compare_reports(reports_from_dir(work / "base"), reports_from_dir(work / "new"))
        write_comparison(c, work / "out")

    t_reports = _median(from_reports, ctx.repeats)
    t_traces = _median(reanalyse, ctx.repeats)
    ratio = t_reports / t_traces
    return [
        Row("compare", "compare from stored reports (resnet vs bert)", t_reports * 1e3, "ms"),
        Row("compare", "re-analysing both traces instead", t_traces * 1e3, "ms"),
        Row(
            "compare",
            "reports / re-analysis time",
            ratio,
            "x",
            "< 1",
            ratio < 1,
            "the summary's attribution reads stored CSVs, never the traces",
        ),
    ]


SECTIONS = [bench_compare]
