"""Shared parts of the benchmarks: the row type, the run context, fresh-process measurements
and the table. Every figure is a ratio against a reference measured in the same run."""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from testkit.bench_table import Row as Row, format_table as format_table  # the tests check these too
from testkit.paths import REPO, SHARED

CACHE = REPO / ".traceladder" / "bench"
SHARED_REF = SHARED / "reference" / "tracelens-v1.0.0"
FIGURES = REPO / "docs" / "figures"


def write_section_figures(name: str, lines: list[str]) -> Path:
    """``docs/figures/<UTC date>-<name>.md``: a section's own tables, beside the run's bench file
    (a doc shows them through a figures block: testkit/docs_figures.py); returns its path."""
    FIGURES.mkdir(parents=True, exist_ok=True)
    path = FIGURES / f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}-{name}.md"
    text = "\n".join(lines)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return path


@dataclass
class Context:
    python: str = sys.executable
    cache: Path = CACHE
    repeats: int = 3
    quick: bool = False
    scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tl-bench-")))
    single_times: list[float] = field(default_factory=list)


def run_rung(*args: str, out: str) -> dict:
    """One real proxy run, `traceladder run-rung ARGS --out OUT` in a fresh process, as a ladder's
    slot runs it; its result line (status, step_ms, step_ms_values, ...)."""
    proc = subprocess.run(
        [sys.executable, "-m", "traceladder.cli", "run-rung", *args, "--out", out],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO / "include")},
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


@dataclass
class DemoRun:
    """One whole `traceladder demo`: its printed wall time, its local copy of what it published,
    and the epoch seconds at which this process started and saw it end."""

    wall_s: float
    local_copy: Path
    started_at: float
    ended_at: float


def run_demo(ladder: str, cwd: str) -> DemoRun:
    """`traceladder demo --ladder LADDER` in a fresh process, its state under `cwd`."""
    started = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "traceladder.cli", "demo", "--ladder", ladder],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "PYTHONPATH": str(REPO / "include")},
        cwd=cwd,
    )
    ended = time.time()
    copy = re.search(r"\(local copy: (.+?)\)$", proc.stdout, re.M)
    wall = re.search(r"^demo wall time: (\d+) s$", proc.stdout, re.M)
    if proc.returncode != 0 or not copy or not wall:
        raise RuntimeError(f"{ladder} demo exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    return DemoRun(float(wall.group(1)), Path(copy.group(1)), started, ended)


# ---------------------------------------------------------------------------------
# subprocess measurements
_MEASURE = r"""
import json, resource, sys, time
mode, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "orjson":
    import orjson
    data = open(path, "rb").read()
    c0 = time.process_time()
    t0 = time.perf_counter(); doc = orjson.loads(data); t1 = time.perf_counter()
    cpu = time.process_time() - c0
elif mode == "analyze":
    from traceladder.analysis.analyzers.trace import analyze_trace
    t0 = time.perf_counter(); analyze_trace(path, out); t1 = time.perf_counter()
elif mode == "paths":
    from traceladder.cli.analyze import analyze_paths
    paths = path.split(",")
    t0 = time.perf_counter(); rc = analyze_paths(paths, out, jobs=int(sys.argv[4])); t1 = time.perf_counter()
    assert rc == 0, rc
elif mode in ("task", "task-spawn", "task-1proc"):
    # the analysis task's body as it runs (analysis/stored.py: the stored trace read and
    # verified, analysed, its reports stored; a local-folder store in place of S3), in a process
    # with the task runner's imports and a thread of its own; the analysis imports are counted.
    # "task": its own choice (spawned when a CPU is free now); the others force one way
    import threading
    from pathlib import Path
    import airflow.sdk
    from traceladder.storage.artifacts import DirArtifactSink
    store = DirArtifactSink(Path(out) / "store")
    key = "traceladder/bench/run/r0/traces/" + Path(path).name
    store.put_file(key, path)
    store.write_manifest("traceladder/bench/run/r0")
    threading.Thread(target=threading.Event().wait, daemon=True).start()
    t0 = time.perf_counter()
    from traceladder.analysis.stored import analyze_stored
    analyze_stored(store, key, spawn={"task": None, "task-spawn": True, "task-1proc": False}[mode])
    t1 = time.perf_counter()
    import shutil
    shutil.rmtree(Path(out) / "store")  # a copy of the trace each run: gigabytes over a bench
elif mode in ("cli", "cli-1cpu"):
    # the whole `traceladder ...` process as a user runs it (start-up and imports
    # included), timed from here; path = the CLI arguments, comma-separated.
    # cli-1cpu: pinned to one CPU (the CLI then keeps to one process)
    import os, subprocess
    if mode == "cli-1cpu":
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "traceladder.cli", *path.split(",")], capture_output=True, text=True)
    t1 = time.perf_counter()
    assert r.returncode == 0, r.stderr[-2000:]
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru.ru_utime + ru.ru_stime
elif mode == "warm":
    # single-trace times inside one warm process (imports done once, before timing):
    # the per-trace cost that a parallel run spreads over its workers
    from traceladder.analysis.analyzers.trace import analyze_trace
    from traceladder.analysis.readers.collectives import load_rank
    per, per_rank, per_cpu, per_rank_cpu = [], [], [], []
    for i, p in enumerate(path.split(",")):
        c0 = time.process_time(); t0 = time.perf_counter(); analyze_trace(p, f"{out}/{i}")
        per.append(time.perf_counter() - t0); per_cpu.append(time.process_time() - c0)
        c0 = time.process_time(); t0 = time.perf_counter(); load_rank(p, True)
        per_rank.append(time.perf_counter() - t0); per_rank_cpu.append(time.process_time() - c0)
    t0, t1 = 0.0, sum(per)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across fork+exec from the (bigger) parent.
rss_self = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
rss_kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
res = {"secs": t1 - t0, "rss_mb": rss_self, "children_rss_mb": rss_kids, "cpu": globals().get("cpu")}
if mode == "warm":
    res.update(per=per, per_rank=per_rank, per_cpu=per_cpu, per_rank_cpu=per_rank_cpu)
print(json.dumps(res))
"""


def measure(ctx: Context, *args: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "include") + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([ctx.python, "-c", _MEASURE, *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"measurement {args[0]} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


_CHILD = r"""
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": r.returncode, "secs": wall, "peak_mb": ru.ru_maxrss / 1024,
                  "cpu": ru.ru_utime + ru.ru_stime, "err": r.stderr[-2000:]}))
"""


def run_child(ctx: Context, cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """``cmd`` as a child of a small fresh Python: its wall time, and the peak RSS of the
    largest process it ran (``RUSAGE_CHILDREN``: the same measure for any program, taken where
    the parent is small, since Linux carries ru_maxrss across fork+exec)."""
    r = subprocess.run([ctx.python, "-c", _CHILD, *cmd], capture_output=True, text=True, env=env)
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if res["rc"] != 0:
        raise RuntimeError(f"{cmd[0]} failed (exit {res['rc']}):\n{res['err']}")
    return res


def load() -> str:
    """The 1-minute load average, to print beside a figure measured on a shared machine."""
    return f"{os.getloadavg()[0]:.1f}"
