"""HTA as a live oracle too (issue 28, item 2): ``python -m benchmarks --only hta_diff``.

The GPU idle split that ``traceladder analyze`` writes (``idle_breakdown.csv``,
docs/whats-left.md) against HTA 0.5.0's ``get_idle_time_breakdown`` on the traces of the
TraceLens harness (bench_tracelens_diff.trace_groups): the shared PyTorch references, TraceLens's
own ``tests/traces`` (when the mirror is there), the generated traces and their mutations.

Both of HTA's ``include_last_profiler_step`` settings are compared: True (the product's) against
the ``idle_breakdown.csv`` that analyze wrote, and False (HTA's default) against
``gpu_idle(..., include_last=False)``. The rule is tests/unit/analysis/reports/test_idle_breakdown.py's
(tests/conformance.compare_idle): the same (stream, category) rows, each idle time within 1 µs, each
ratio within HTA's 2-place rounding. A trace where HTA fails or finds no GPU stream is counted
apart, with what traceladder did on it.

HTA runs in a venv of its own (``../shared/tools/hta_oracle.sh``, or ``HTA_ORACLE_PY``), in two
worker processes (benchmarks/hta_worker.py); its CSVs are cached by trace content under
.traceladder/bench/hta_diff/. Details land in ``report.txt`` there. Only runs when named with
``--only``: CI has no HTA.
"""

from __future__ import annotations

import csv
import hashlib
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.bench_tracelens_diff import _conformance, _ours_dir, stage_and_analyze, trace_groups
from benchmarks.common import CACHE, REPO, SHARED, Context, Row

WORK = CACHE / "hta_diff"
HTA_VERSION = "0.5.0"  # what ../shared/tools/hta_oracle.sh installs; part of the cache path
SETTINGS = (False, True)  # include_last_profiler_step


@dataclass
class Outcome:
    source: str
    name: str
    tables: int = 0
    differ: list[str] = field(default_factory=list)
    oracle_failed: str = ""  # HTA's error line
    ours: str = ""  # what traceladder did on a trace HTA failed on, or its own error


def oracle_python() -> str:
    """The HTA venv's python: HTA_ORACLE_PY, else the one the shared script builds (or finds)."""
    if os.environ.get("HTA_ORACLE_PY"):
        return os.environ["HTA_ORACLE_PY"]
    r = subprocess.run(["bash", str(SHARED / "tools" / "hta_oracle.sh")], capture_output=True, text=True)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"hta_diff: the HTA oracle did not build: {r.stderr.strip()[-300:]}")
    return lines[-1]


def _stem(trace: Path) -> Path:
    digest = hashlib.sha1(trace.read_bytes(), usedforsecurity=False).hexdigest()[:16]
    return WORK / f"hta-{HTA_VERSION}" / digest


def run_oracle(python: str, traces: list[Path]) -> dict[Path, Path]:
    """HTA's CSVs for every trace not yet cached, in two workers; trace -> its output stem. A
    worker that dies or times out is said in one line; its traces are left uncached."""
    stems = {t: _stem(t) for t in traces}
    (WORK / f"hta-{HTA_VERSION}").mkdir(parents=True, exist_ok=True)
    pending = {
        s: t for t, s in stems.items() if not Path(f"{s}.error").exists() and not Path(f"{s}.last_true.csv").exists()
    }
    todo = list(pending.values())  # one trace per stem: equal contents never race in two workers
    worker = str(REPO / "benchmarks" / "hta_worker.py")

    def batch(part: list[Path]) -> None:
        lines = "".join(f"{t.resolve()}\t{stems[t]}\n" for t in part)
        try:
            r = subprocess.run(
                ["nice", "-n", "19", python, worker], input=lines, text=True, capture_output=True, timeout=3600
            )
        except subprocess.TimeoutExpired:
            print(f"hta_diff: an HTA worker ran past 3600 s on {len(part)} traces", file=sys.stderr)
            return
        if r.returncode != 0:
            tail = r.stderr.strip().splitlines()[-1:] or [f"exit {r.returncode}"]
            print(f"hta_diff: an HTA worker failed ({tail[0][:200]})", file=sys.stderr)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(batch, [todo[0::2], todo[1::2]]))
    return stems


def compare_all(groups: dict[str, list[Path]], python: str) -> list[Outcome]:
    from traceladder.analysis.analyzers.trace import read_trace
    from traceladder.analysis.reports.idle_breakdown import CSV_NAME, gpu_idle
    from traceladder.core.errors import TraceladderError

    conf = _conformance()
    everything = [t for ts in groups.values() for t in ts]
    stems = run_oracle(python, everything)
    staged, errors, ours_root = stage_and_analyze(groups, WORK)
    outcomes = []
    for source, traces in groups.items():
        for t in traces:
            o, stem = Outcome(source, t.name), stems[t]
            ours = _ours_dir(ours_root, staged[t]) / CSV_NAME
            failed = Path(f"{stem}.error")
            if failed.exists() or not Path(f"{stem}.last_true.csv").exists():
                o.oracle_failed = failed.read_text() if failed.exists() else "wrote nothing"
                o.ours = errors.get(t) or ("wrote idle_breakdown.csv" if ours.exists() else "wrote no idle split")
                outcomes.append(o)
                continue
            if t in errors:  # both settings differ: HTA split a trace that traceladder refused
                o.ours, o.tables = errors[t], len(SETTINGS)
                o.differ += [f"include_last_profiler_step={x}: traceladder failed: {errors[t]}" for x in SETTINGS]
                outcomes.append(o)
                continue
            for include_last in SETTINGS:
                hta = Path(f"{stem}.last_{str(include_last).lower()}.csv")
                try:
                    if include_last:  # what the product writes
                        rows = _csv_rows(ours) if ours.exists() else []
                    else:
                        rows = gpu_idle(read_trace(staged[t]), 0, include_last=False)
                    diffs = conf.compare_idle(rows, hta, max_report=3)
                except (OSError, ValueError, TraceladderError) as exc:
                    diffs = [f"{hta.name}: not comparable: {exc}"]
                o.tables += 1
                if diffs:
                    o.differ.append(f"include_last_profiler_step={include_last}: " + " | ".join(diffs))
            outcomes.append(o)
    return outcomes


def _csv_rows(path: Path) -> list[list[str]]:
    """A CSV's rows below its header."""
    with path.open(newline="") as fh:
        return list(csv.reader(fh))[1:]


def summary_line(outcomes: list[Outcome]) -> str:
    ok = [o for o in outcomes if not o.oracle_failed]
    m, k = sum(o.tables for o in ok), sum(len(o.differ) for o in ok)
    apart = len(outcomes) - len(ok)
    return (
        f"{len(ok)} traces, {m} idle splits compared, {k} differ ({apart} more where HTA failed or found no GPU stream)"
    )


def _report(outcomes: list[Outcome], skipped: list[str]) -> str:
    lines = []
    for o in outcomes:
        if o.oracle_failed:
            lines.append(f"[{o.source}] {o.name}: HTA {o.oracle_failed}; traceladder: {o.ours}")
        lines += [f"[{o.source}] {o.name}: {d}" for d in o.differ]
    lines += [f"[tl-tests] skipped {s}" for s in skipped]
    return "\n".join(lines) + "\n"


def bench_hta_diff(ctx: Context) -> list[Row]:
    python = oracle_python()
    n_gen = int(os.environ.get("TRACELENS_DIFF_GENERATED", "20" if ctx.quick else "200"))
    groups, skipped = trace_groups(n_gen, int(os.environ.get("TRACELENS_DIFF_SEED", "1")))
    outcomes = compare_all(groups, python)
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "report.txt").write_text(_report(outcomes, skipped))
    rows = []
    for source in groups:
        mine = [o for o in outcomes if o.source == source]
        ok = [o for o in mine if not o.oracle_failed]
        m, k = sum(o.tables for o in ok), sum(len(o.differ) for o in ok)
        rows.append(
            Row(
                "hta_diff",
                f"{source}: idle splits that differ",
                k,
                "splits",
                "0",
                k == 0 and bool(ok),
                f"{len(ok)} traces, {m} idle splits compared (both include_last_profiler_step settings); "
                f"{len(mine) - len(ok)} where HTA failed or found no GPU stream"
                + (f"; {len(skipped)} mirror paths skipped" if source == "tl-tests" else ""),
            )
        )
    line = summary_line(outcomes)
    print(f"hta_diff: {line}; details in {WORK / 'report.txt'}", file=sys.stderr)
    rows.append(Row("hta_diff", "all sources", sum(r.value for r in rows), "splits", "0", None, line))
    return rows


bench_hta_diff.explicit_only = True  # type: ignore[attr-defined]

SECTIONS = [bench_hta_diff]
