"""Real A/A repeats of one proxy rung (the verdicts issue replaces this with the block model)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

from benchmarks.common import Context, Row

AA_RUNS = 10
AA_REPEATS = 3


def bench_aa(ctx: Context) -> list[Row]:
    """Real A/A: one proxy rung run AA_RUNS times; every pair of disjoint triples of those runs is
    an A/A comparison, judged by the summary's regression and change rules."""
    import itertools

    from traceladder.summary.compare import is_regression
    from traceladder.summary.stats import estimate, separated

    steps = []
    with tempfile.TemporaryDirectory(prefix="traceladder-aa-") as tmp:
        for k in range(AA_RUNS):
            proc = subprocess.run(
                [sys.executable, "-m", "traceladder.cli", "run-rung", "--ladder", "proxy-local", "--rung", "recompute_off",
                 "--run-id", f"aa{k}", "--out", tmp], capture_output=True, text=True, timeout=600,
            )
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            if result["status"] == "ok":
                steps.append(result["step_ms"])
    pairs = regressions = changes = 0
    for a in itertools.combinations(range(len(steps)), AA_REPEATS):
        rest = [i for i in range(len(steps)) if i not in a]
        for b in itertools.combinations(rest, AA_REPEATS):
            ea, eb = estimate([steps[i] for i in a]), estimate([steps[i] for i in b])
            pairs += 1
            regressions += is_regression(ea, eb)
            changes += separated(ea, eb)
    if not pairs:
        return [Row("aa", "proxy A/A false alarms", float("nan"), "", "", False, f"only {len(steps)} runs finished")]
    spread = f"{len(steps)} runs of proxy-local recompute_off, step {min(steps):.1f}-{max(steps):.1f} ms; {pairs} A/A pairs of {AA_REPEATS} repeats"
    return [
        Row("aa", "regression flagged (A/A)", 100 * regressions / pairs, "%", "<= 5", regressions / pairs <= 0.05, spread),
        Row("aa", "change claimed (A/A)", 100 * changes / pairs, "%", "<= 5", changes / pairs <= 0.05, "intervals separate, either way"),
    ]


SECTIONS = [bench_aa]
