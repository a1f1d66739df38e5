"""The analysis as the Airflow task runs it (``python -m benchmarks --only task_path``).

``analysis/stored.py`` analyses a stored trace in a spawned interpreter (``analysis/spawned.py``)
that uses the second CPU as the CLI does, when a CPU is free at the time; else it stays in the
task's process. Its whole body (store read and check, analysis, reports stored) is measured on
the 145 MB bench trace (bench_analysis.scaled_trace), as it chooses and forced each way, each in
a fresh process that first does what the task runner has done (``import airflow.sdk``, a thread
of its own); the analysis imports are counted. Each
is paired with a bare ``orjson.loads`` of the same bytes right before it (the machine's speed
drifts by a third within minutes); the figure is the median of the pairs' ratios. The "What's
left" reports are part of every analysis, so they count. Writes docs/figures/<date>-task_path.md.
"""

from __future__ import annotations

import statistics

from benchmarks.bench_analysis import scaled_trace
from benchmarks.common import REPO, Context, Row, load, measure, write_section_figures

TASK_OVER_ORJSON_MAX = 0.5
MIN_PAIRS = 5


def bench_task_path(ctx: Context) -> list[Row]:
    trace = scaled_trace(ctx)
    pairs: dict[str, list[dict]] = {"task": [], "task-spawn": [], "task-1proc": []}
    for i in range(max(ctx.repeats, MIN_PAIRS)):
        for mode in pairs:
            l0 = load()
            o = measure(ctx, "orjson", str(trace), "-")
            m = measure(ctx, mode, str(trace), str(ctx.scratch / f"{mode}-{i}"))
            pairs[mode].append(
                {
                    "orjson": o["secs"],
                    "secs": m["secs"],
                    "rss": m["rss_mb"],
                    "kids": m["children_rss_mb"],
                    "load": f"{l0}-{load()}",
                }
            )
    ratio = {mode: statistics.median(p["secs"] / p["orjson"] for p in ps) for mode, ps in pairs.items()}
    lines = [
        "# The analysis task's path (`python -m benchmarks --only task_path`)",
        "",
        f"Trace: `{trace.name}` ({trace.stat().st_size / 1e6:.0f} MB). Each run is the analysis task's body, "
        "`analysis/stored.py`'s `analyze_stored` (the stored trace read and its sha256 checked, analysed, "
        "its reports stored; a local-folder store in place of S3), timed in a fresh process that has "
        "imported airflow.sdk and runs a thread of its own (the analysis imports counted), right after a "
        "bare `orjson.loads` of the same bytes. `task`: as it runs, its own choice (a spawned interpreter "
        "with the second CPU when a CPU is free now, else its own process); `task-spawn` and `task-1proc` "
        "force one or the other.",
        "",
        "| pair | path | orjson.loads s | analysis s | ratio | peak RSS MB (task process / largest child) "
        "| load (1 min) |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {i + 1} | {mode} | {p['orjson']:.2f} | {p['secs']:.2f} | {p['secs'] / p['orjson']:.3f} | "
            f"{p['rss']:.0f} / {p['kids']:.0f} | {p['load']} |"
            for mode, ps in pairs.items()
            for i, p in enumerate(ps)
        ),
        "",
        *(
            f"- `{mode}`: median ratio **{r:.3f}x** over {len(pairs[mode])} pairs"
            + (
                f" (target ≤ {TASK_OVER_ORJSON_MAX}x: {'met' if r <= TASK_OVER_ORJSON_MAX else 'NOT met'})"
                if mode == "task"
                else ""
            )
            for mode, r in ratio.items()
        ),
        "",
    ]
    path = write_section_figures("task_path", lines)
    return [
        Row(
            "task_path",
            "task analysis / orjson.loads",
            ratio["task"],
            "x",
            f"<= {TASK_OVER_ORJSON_MAX}x",
            ratio["task"] <= TASK_OVER_ORJSON_MAX,
            f"median of {len(pairs['task'])} pairs; {path.relative_to(REPO)}",
        ),
        Row("task_path", "one process / orjson.loads", ratio["task-1proc"], "x", "", None, "for information"),
    ]


SECTIONS = [bench_task_path]
