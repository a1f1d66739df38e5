"""`traceladder analyze`, `analyze-ranks` and `compare`: the analysis runs, the CLI reports.

The analysis modules return results and raise :class:`TraceladderError`; the progress lines, the
per-trace error lines and the exit codes are written here. A bad input to one of these commands is
one stderr line starting ``error: `` (their contract since the first analysis release)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from traceladder.analysis.api import DEFAULT_SHARE
from traceladder.core.errors import TraceladderError

#: What these commands put before an error line.
ERROR_PREFIX = "error: "


def analyze_paths(
    paths: list[Path],
    out_root: Path,
    jobs: int = 1,
    roofline_share: float = DEFAULT_SHARE,
    gpu_model: str | None = None,
    err: TextIO | None = None,
) -> int:
    """Analyse many traces into out_root/<stem>/, a line on ``err`` per trace; 0 when all were
    good, else 2 (the good ones still get their reports)."""
    from traceladder.analysis.api import analyze_each, worker_count

    if not 0 < roofline_share <= 1:
        raise TraceladderError(f"--roofline-share must be in (0, 1], got {roofline_share}")
    err = sys.stderr if err is None else err
    total = len(paths)
    workers = worker_count(jobs, total)
    if workers:
        print(f"analysing {total} traces with {workers} worker processes", file=err, flush=True)
    bad = 0
    for i, outcome in enumerate(analyze_each(paths, out_root, jobs, roofline_share, gpu_model), 1):
        if outcome.error is None:
            print(f"[{i}/{total}] {outcome.path} -> {outcome.out_dir} ({outcome.seconds:.1f} s)", file=err, flush=True)
        else:
            bad += 1
            print(f"{ERROR_PREFIX}{outcome.error}", file=err, flush=True)
    return 2 if bad else 0


def analyze_ranks(traces: list[str], out: str, gpus_per_node: int | None, jobs: int | None) -> int:
    """One trace per rank -> the multi-rank reports; a summary line on stderr."""
    from traceladder.analysis.api import analyze_ranks as run, default_jobs

    try:
        res = run(
            [Path(p) for p in traces],
            Path(out),
            gpus_per_node,
            jobs=default_jobs(len(traces)) if jobs is None else jobs,
        )
    except OSError as exc:
        raise TraceladderError(f"{out}: cannot write reports ({exc.strerror or exc})") from None
    m = res["matched"]
    print(
        f"{len(res['ranks'])} ranks, {m['collectives']} collectives matched ({m['events']} events) -> {out}",
        file=sys.stderr,
    )
    return 0


def compare(base: str, new: str, out: str) -> int:
    """What moved between two traces: the compare sheets, and their notes and totals on stderr."""
    from traceladder.analysis.api import compare_paths

    doc = compare_paths(Path(base), Path(new), Path(out))
    for note in doc["notes"]:
        print(f"note: {note}", file=sys.stderr)
    print(
        f"{out}: total kernel time {doc['total_kernel_time_delta_us']:+.1f} us/step, "
        f"busy time {doc['busy_time_delta_us']:+.1f} us/step",
        file=sys.stderr,
    )
    return 0
