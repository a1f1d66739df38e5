"""Start-up of a local rung, cold against warm (``python -m benchmarks --only warm_launch``), and
where a whole demo's time goes (``--only demo_split``).

The proxy-local ladder's baseline, measure run (lens none) and profiled run (torch_rank0), each
run the way run_rung runs it: cold (rung.execute: `python -m traceladder.workload`, ranks
spawned) and warm (runner/forkserver_client.py: forked from the DAG run's launcher, ranks forked), in
alternating pairs. Per run: the seconds from the request to the workload's exit, the sum of the
measured iterations (the iterations metrics.json keeps) and their share of that time. The
launcher's own start (once per DAG run) is reported apart.

demo_split (named with --only; one whole `traceladder demo`, ~9 min): #25's measured share, the
kept iterations' time summed over every run's metrics.json over the demo's printed wall time, and
the rest of the wall time in parts: the runs' own time outside those iterations (start-up, warm-up,
profiler and trace export, exit), the gaps between runs (task hand-offs and the uploads between
them), before the first run (set-up) and after the last (analysis, summary, publish). Also, from
every process's CPU time read in /proc every 0.5 s while the demo runs (CpuSampler): the CPU that
processes other than the workload's took during the measure runs, as a share of the cores, and
its correlation with a run's figure centred on its rung (is the noise the demo's own services?).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.common import Context, Row, load, run_demo

SHARE_TARGET = 0.5  # #25: measured iterations >= 50% of the demo's wall time


def _spec(lens: str):
    from traceladder.config.loader import CONFIG_DIR, load_ladder
    from traceladder.plan.build import build_plan

    loaded = load_ladder(CONFIG_DIR / "ladders" / "proxy-local.yaml")
    return build_plan(loaded, rungs=["baseline"], lens=lens, repeats=1)[0]


def _once(spec, warm_mode: bool) -> dict[str, float]:
    from traceladder.runner import forkserver_client as warm
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
    from traceladder.runner import forkserver_client as warm

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


class CpuSampler(threading.Thread):
    """Every SAMPLE_S: each process's CPU seconds since the last look (utime + stime from
    /proc/<pid>/stat), as (time, {pid: (seconds, name)}). A process is named `workload` when its
    command line runs traceladder.workload, or an ancestor's does (the warm launcher, a cold
    rung and their ranks, forked or spawned). A process first seen counts all its CPU (it started
    after the last look); a process's last < SAMPLE_S before it exits is not seen."""

    SAMPLE_S = 0.5

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, dict[int, tuple[float, str]]]] = []
        self.stopped = threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK")

    def _read(self) -> dict[int, tuple[float, str]]:
        found: dict[int, tuple[float, str, int, bool]] = {}  # pid: (cpu s, name, ppid, runs the workload)
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
                cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:  # gone between the listing and the read
                continue
            fields = stat[stat.rindex(")") + 2 :].split()  # fields[0] is the stat line's 3rd field
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            cpu = (int(fields[11]) + int(fields[12])) / self._tick  # utime, stime: fields 14 and 15
            found[int(entry.name)] = (cpu, comm, int(fields[1]), "traceladder.workload" in cmd)

        def workload(pid: int) -> bool:
            for _ in range(16):  # up the parent chain
                if pid not in found:
                    return False
                if found[pid][3]:
                    return True
                pid = found[pid][2]
            return False

        return {pid: (cpu, "workload" if workload(pid) else comm) for pid, (cpu, comm, _, _) in found.items()}

    def run(self) -> None:
        last = self._read()
        while not self.stopped.wait(self.SAMPLE_S):
            now = self._read()
            used = {}
            for pid, (cpu, name) in now.items():
                spent = cpu - (last[pid][0] if pid in last else 0.0)
                if spent > 0:
                    used[pid] = (spent, name)
            self.samples.append((time.time(), used))
            last = now


def others_during(
    samples: list[tuple[float, dict[int, tuple[float, str]]]], runs: list[dict]
) -> tuple[float, float, dict[str, float], list[float]]:
    """CPU seconds used by processes other than the workload while measure runs ran: (their
    seconds, the runs' seconds, seconds by process name, each run's share of a core)."""
    by_name: dict[str, float] = {}
    shares, total, span = [], 0.0, 0.0
    for m in runs:
        start, end = m["started_at"] + CpuSampler.SAMPLE_S, m["ended_at"]  # a sample covers the half-second before it
        mine = 0.0
        for at, used in samples:
            if start <= at <= end:
                for secs, name in used.values():
                    if name != "workload":
                        mine += secs
                        by_name[name] = by_name.get(name, 0.0) + secs
        total, span = total + mine, span + max(end - start, 0.0)
        shares.append(mine / max(end - start, 1e-9))
    return total, span, by_name, shares


def bench_demo_split(ctx: Context) -> list[Row]:
    l0 = load()
    sampler = CpuSampler()
    sampler.start()
    try:
        with tempfile.TemporaryDirectory(prefix="traceladder-demo-split-") as tmp:
            demo = run_demo("proxy-local", tmp)
            runs = sorted(
                (json.loads(p.read_text()) for p in demo.local_copy.glob("*/metrics.json")),
                key=lambda m: m["started_at"],
            )
    finally:
        sampler.stopped.set()
        sampler.join()
    measured = sum(sum(m.get("step_ms_values") or []) for m in runs) / 1000.0
    inside = sum(m["wall_s"] for m in runs) - measured
    gaps = sum(max(0.0, b["started_at"] - a["ended_at"]) for a, b in zip(runs, runs[1:]))
    before, after = runs[0]["started_at"] - demo.started_at, demo.ended_at - runs[-1]["ended_at"]
    share = measured / demo.wall_s
    process_s = demo.ended_at - demo.started_at

    def part(name: str, secs: float, what: str) -> Row:
        return Row("demo_split", name, round(secs, 1), "s", detail=f"{secs / process_s:.1%} of the process; {what}")

    by_purpose: dict[str, list[float]] = {}
    for m in runs:
        by_purpose.setdefault(m["purpose"], []).append(m["wall_s"])
    counts = ", ".join(f"{len(w)} {p} runs {sum(w):.0f} s" for p, w in sorted(by_purpose.items()))
    return [
        Row(
            "demo_split",
            "measured iterations / demo wall time",
            round(100 * share, 1),
            "%",
            f">= {SHARE_TARGET:.0%}",
            share >= SHARE_TARGET,
            f"{measured:.1f} s of the printed {demo.wall_s:.0f} s; {len(runs)} runs ({counts}); load {l0}-{load()}",
        ),
        part("runs outside their measured iterations", inside, "start-up, warm-up, profiler and export, exit"),
        part("gaps between runs", gaps, f"{gaps / max(len(runs) - 1, 1):.2f} s a gap"),
        part("before the first run", before, "process start, S3, Airflow home, DAG parse, launcher"),
        part("after the last run", after, "analysis, summary, publish, S3 stop"),
        *_other_tenants(sampler.samples, [m for m in runs if m["purpose"] == "measure" and m.get("step_cpu_ms")]),
    ]


def _other_tenants(samples: list[tuple[float, dict[int, tuple[float, str]]]], measure: list[dict]) -> list[Row]:
    """How much CPU the demo's other processes took from its measure runs, and whether a run's
    figure (centred on its rung, log) moves with it (docs/statistics.md, the CPU metric's noise)."""
    import math

    if not measure:
        return [
            Row(
                "demo_split", "other processes' CPU during the measure runs", float("nan"), "%", detail="no measure run"
            )
        ]
    other, span, by_name, shares = others_during(samples, measure)
    cores = os.cpu_count() or 1
    share_pct = 100 * other / (span * cores)
    top = ", ".join(f"{n} {v:.1f} s" for n, v in sorted(by_name.items(), key=lambda kv: -kv[1])[:4])
    logs = [math.log(m["step_cpu_ms"]) for m in measure]
    centre = {
        r: statistics.fmean(y for y, m in zip(logs, measure) if m["rung"] == r) for r in {m["rung"] for m in measure}
    }
    centred = [y - centre[m["rung"]] for y, m in zip(logs, measure)]
    varied = len(measure) > 2 and len(set(shares)) > 1 and len(set(centred)) > 1
    corr = statistics.correlation(shares, centred) if varied else float("nan")
    return [
        Row(
            "demo_split",
            "other processes' CPU during the measure runs",
            round(share_pct, 2),
            f"% of {cores} cores",
            detail=f"{share_pct:.2f}%: {other:.1f} CPU-s over {span:.0f} s of "
            f"{len(measure)} runs ({top}); "
            f"correlation with the run's rung-centred log step_cpu_ms {corr:.2f}",
        )
    ]


bench_demo_split.explicit_only = True  # type: ignore[attr-defined]  # one whole demo, ~9 min

SECTIONS = [bench_warm_launch, bench_demo_split]
