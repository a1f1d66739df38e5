"""8 ranks x 150 MB rocprofv3 through the DAG's analysis step as it runs
(``python -m benchmarks --only rocprof_dag``; heavy, never in CI).

A real stack (traceladder.embedded.local_stack: SeaweedFS, api-server, scheduler, dag-processor,
triggerer) with LocalExecutor and ``parallelism`` 2. The 8 traces are stored as one rung's
ranks (with its manifest), and a bench DAG maps the DAG's own analysis task body
(``workflows.ladder_tasks.analyze_stored_trace``, as ``workflows/ladder.py``'s ``analyze`` calls it) over
them, one mapped task per trace. The figure is the span from the first analysis task's start
to the last one's end (the task instances' start/end dates), over the ideal: the sum of the 8
single-trace times in one warm process, divided by 2, plus one process start-up (a fresh
interpreter importing the analysis). Writes docs/figures/<date>-rocprof_dag.md.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
from datetime import datetime

import yaml

from benchmarks.bench_rocprof import rocprof_trace
from benchmarks.common import REPO, Context, Row, load, measure, run_child, write_section_figures

RANKS = 8
PARALLELISM = 2
DAG_OVER_IDEAL_MAX = 1.2
LADDER = "bench-heavy"
DAG_ID = "bench-heavy-analysis"
RUN = "bench"

_DAG = '''"""Bench only: the ladder DAG's analysis step mapped over {n} stored traces."""
from datetime import datetime

from airflow.sdk import dag, task

ITEMS = {items!r}


@dag(dag_id={dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False, max_active_tasks={n})
def bench_heavy_analysis():
    @task
    def analyze(item):
        from traceladder.workflows import ladder_tasks as tasks

        return tasks.analyze_stored_trace({ladder!r}, item)

    analyze.expand(item=ITEMS)


bench_heavy_analysis()
'''


def _when(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def bench_rocprof_dag(ctx: Context) -> list[Row]:
    from traceladder.config.loader import CONFIG_DIR
    from traceladder.embedded.local_stack import LocalStack
    from traceladder.storage.artifacts import S3ArtifactStore

    trace = rocprof_trace(ctx)
    work = ctx.scratch / "dag"
    ladders, dags = work / "ladders", work / "dags"
    ladders.mkdir(parents=True)
    dags.mkdir()
    ladder = {"schema": 1, "extends": str(CONFIG_DIR / "ladders" / "proxy-local.yaml"), "ladder": LADDER}
    (ladders / f"{LADDER}.yaml").write_text(yaml.safe_dump(ladder, sort_keys=False))
    for f in (REPO / "dags").glob("*.py"):  # the trigger DAG, which the stack unpauses at start
        shutil.copy(f, dags / f.name)
    env = {
        "TRACELADDER_LADDERS_DIR": str(ladders),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "PYTHONPATH": str(REPO / "include"),
    }
    stack = LocalStack(work / "stack", extra_env=env, parallelism=PARALLELISM)
    stack.s3.start()
    store = S3ArtifactStore(stack.s3.client(), stack.s3.bucket, "traceladder", LADDER)
    rung = f"traceladder/{LADDER}/{RUN}/heavy.r0"
    items = []
    for r in range(RANKS):
        key = f"{rung}/traces/rank{r}_results.json"
        store.put_file(key, trace)
        items.append({"rung_id": "heavy.r0", "key": key})
    store.write_manifest(rung)
    (dags / "bench_heavy_analysis.py").write_text(_DAG.format(items=items, dag_id=DAG_ID, ladder=LADDER, n=RANKS))
    try:
        stack.start()
        stack.unpause(DAG_ID)
        l0 = load()
        run_id = stack.trigger(DAG_ID, {})
        state = stack.wait_for_run(DAG_ID, run_id, timeout_s=1800)
        l1 = load()
        tis = [t for t in stack.task_instances(DAG_ID, run_id) if t["task_id"] == "analyze"]
    finally:
        stack.stop()  # and its S3
    if state != "success" or len(tis) != RANKS:
        raise RuntimeError(f"bench: the bench DAG run ended {state} with {len(tis)} analysis tasks")
    starts = [_when(t["start_date"]) for t in tis]
    ends = [_when(t["end_date"]) for t in tis]
    span = (max(ends) - min(starts)).total_seconds()
    task_s = sorted((e - s).total_seconds() for s, e in zip(starts, ends))
    # the ideal, measured after the run (nothing else of ours running)
    warm = measure(ctx, "warm", ",".join([str(trace)] * RANKS), str(ctx.scratch / "warm"))
    py_env = {**os.environ, "PYTHONPATH": str(REPO / "include")}
    start_up = statistics.median(
        run_child(ctx, [sys.executable, "-c", "import traceladder.analysis.analyzers.trace"], py_env)["secs"]
        for _ in range(3)
    )
    ideal = sum(warm["per"]) / PARALLELISM + start_up
    ratio = span / ideal
    ok = ratio <= DAG_OVER_IDEAL_MAX
    lines = [
        "# 8 ranks x 150 MB through the DAG's analysis step (`python -m benchmarks --only rocprof_dag`)",
        "",
        f"{RANKS} mapped tasks of `workflows.ladder_tasks.analyze_stored_trace` (the ladder DAG's analysis step) on "
        f"`{trace.name}` ({trace.stat().st_size / 1e6:.0f} MB each, stored in SeaweedFS as one rung's ranks), "
        f"LocalExecutor, parallelism {PARALLELISM}, a real scheduler (traceladder.embedded.local_stack).",
        "",
        f"- span, first analysis task's start to the last one's end: **{span:.1f} s** (load {l0} before, {l1} after)",
        f"- task durations: {', '.join(f'{s:.1f}' for s in task_s)} s",
        f"- ideal: sum of the {RANKS} single-trace times in one warm process "
        f"({' + '.join(f'{x:.2f}' for x in warm['per'])} = {sum(warm['per']):.1f} s) / {PARALLELISM} "
        f"+ one start-up ({start_up:.2f} s) = {ideal:.1f} s",
        f"- span / ideal: **{ratio:.2f}x** (target ≤ {DAG_OVER_IDEAL_MAX}x: {'met' if ok else 'NOT met'})",
        "",
    ]
    path = write_section_figures("rocprof_dag", lines)
    return [
        Row(
            "rocprof_dag",
            "8 x 150 MB analysis tasks / ideal",
            ratio,
            "x",
            f"<= {DAG_OVER_IDEAL_MAX}x",
            ok,
            f"span {span:.1f} s, ideal {ideal:.1f} s; {path.relative_to(REPO)}",
        )
    ]


bench_rocprof_dag.explicit_only = True  # type: ignore[attr-defined]  # a whole stack and 1.2 GB of traces

SECTIONS = [bench_rocprof_dag]
