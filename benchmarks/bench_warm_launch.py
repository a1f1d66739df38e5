"""Start-up of a local rung, cold against warm (``python -m benchmarks --only warm_launch``).

The proxy-local ladder's baseline, measure run (lens none) and profiled run (torch_rank0), each
run the way run_rung runs it: cold (rung.execute: `python -m traceladder.workload`, ranks
spawned) and warm (runner/warm.py: forked from the DAG run's launcher, ranks forked), in
alternating pairs. Per run: the seconds from the request to the workload's exit, the sum of the
measured iterations (the iterations metrics.json keeps) and their share of that time. The
launcher's own start (once per DAG run) is reported apart.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import Context, Row, load

SHARE_TARGET = 0.5  # #25: measured iterations >= 50% of the demo's wall time


def _spec(lens: str):
    from traceladder.config.loader import CONFIG_DIR, load_ladder
    from traceladder.plan.build import build_plan

    loaded = load_ladder(CONFIG_DIR / "ladders" / "proxy-local.yaml")
    return build_plan(loaded, rungs=["baseline"], lens=lens, repeats=1)[0]


def _once(spec, warm_mode: bool) -> dict[str, float]:
    from traceladder.runner import warm
    from traceladder.runner.backends import local
    from traceladder.runner.primus_log import parse_iterations, summarize
    from traceladder.runner.rung import execute

    root = Path(tempfile.mkdtemp(prefix="bench-warm-"))
    workspace = root / "output"
    workspace.mkdir()
    argv, env = local.command(spec, workspace)
    t0 = time.perf_counter()
    if warm_mode:
        outcome = warm.run(argv[3:], env, root, root / "log.txt", spec.timeout_s, None)
        assert outcome is not None, "the launcher did not take the run"
        code = outcome[0]
    else:
        code = execute(argv, env, root, root / "log.txt", spec.timeout_s, None)[0]
    secs = time.perf_counter() - t0
    assert code == 0, (root / "log.txt").read_text()[-2000:]
    records = parse_iterations((root / "log.txt").read_text().splitlines())
    metrics = summarize(records, skip_iterations=spec.warmup_iters, window=spec.profile_window)
    measured = sum(metrics.step_ms_values) / 1000.0
    return {"secs": secs, "measured": measured, "share": measured / secs}


def bench_warm_launch(ctx: Context) -> list[Row]:
    from traceladder.runner import warm

    os.environ["AIRFLOW_CTX_DAG_ID"] = "bench-warm"
    os.environ["AIRFLOW_CTX_DAG_RUN_ID"] = f"bench-{os.getpid()}"
    rows: list[Row] = []
    l0 = load()
    t0 = time.perf_counter()
    conn, why = warm._launcher(warm.run_key() or "")
    assert conn is not None, why
    conn.close()
    rows.append(Row("warm_launch", "launcher start (once per DAG run)", round(time.perf_counter() - t0, 2), "s"))
    try:
        for lens in ("none", "torch_rank0"):
            spec = _spec(lens)
            runs: dict[str, list[dict[str, float]]] = {"cold": [], "warm": []}
            for _ in range(ctx.repeats):
                for mode in ("cold", "warm"):
                    runs[mode].append(_once(spec, mode == "warm"))
            for mode, got in runs.items():
                secs = statistics.median(r["secs"] for r in got)
                measured = statistics.median(r["measured"] for r in got)
                share = statistics.median(r["share"] for r in got)
                detail = ", ".join(f"{r['secs']:.2f}/{r['measured']:.2f}" for r in got)
                rows.append(Row("warm_launch", f"{lens} {mode}: request to exit", round(secs, 2), "s", detail=detail))
                rows.append(
                    Row(
                        "warm_launch",
                        f"{lens} {mode}: measured iterations",
                        round(measured, 2),
                        "s",
                        detail=f"share {share:.0%} of request to exit",
                    )
                )
            cold = statistics.median(r["secs"] - r["measured"] for r in runs["cold"])
            hot = statistics.median(r["secs"] - r["measured"] for r in runs["warm"])
            rows.append(
                Row(
                    "warm_launch",
                    f"{lens}: time outside the measured iterations, cold -> warm",
                    round(cold - hot, 2),
                    "s saved",
                    detail=f"{cold:.2f} s -> {hot:.2f} s, load {l0}-{load()}",
                )
            )
    finally:
        warm.stop_run("bench-warm", os.environ["AIRFLOW_CTX_DAG_RUN_ID"])
    return rows


SECTIONS = [bench_warm_launch]
