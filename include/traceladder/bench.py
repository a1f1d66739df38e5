"""Benchmarks: ``python -m traceladder.bench`` (``make bench``).

Every figure is a ratio against a reference measured in the same run, on the same
machine, so the table means the same thing on a laptop and on CI:

* ``analyze``: :func:`traceladder.analysis.engine.analyze_trace` on a ~145 MB PyTorch
  trace, wall time over a bare ``orjson.loads`` of the same (uncompressed) file, and
  the peak RSS of the analysing process.  Each measurement runs in a fresh
  subprocess (its VmHWM).
* ``analyze_paths``: 8 such traces with ``jobs=2``, wall time over the ideal parallel
  time (sum of the single-trace times / 2), and the peak RSS of one worker.
* ``dag_parse``: the time to run each DAG file (``runpy.run_path``) in a fresh
  interpreter, over a bare ``python -c "import airflow.sdk"``.

The scaled traces are made from a reference trace (``../shared/reference``) by
repeating its events with shifted timestamps and offset ids (``External id``,
``correlation``, flow ids, ``Python id``), so CPU->GPU linking still works; they are
cached under ``.traceladder/bench/`` (git-ignored).

To add a section, write ``def bench_xxx(ctx: Context) -> list[Row]`` and append it to
:data:`BENCHES`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".traceladder" / "bench"
SHARED_REF = REPO.parent / "shared" / "reference" / "tracelens-v1.0.0"
BASE_TRACE = SHARED_REF / "mi300" / "resnet_act_checkpoint.json.gz"
TARGET_BYTES = 145 * 1000 * 1000

# targets (ratios), from the issue
ANALYZE_OVER_ORJSON_MAX = 0.55
PEAK_RSS_MB_MAX = 450.0
JOBS2_OVER_IDEAL_MAX = 1.2


@dataclass
class Row:
    section: str
    metric: str
    value: float
    unit: str = ""
    target: str = ""
    ok: bool | None = None
    detail: str = ""


@dataclass
class Context:
    python: str = sys.executable
    cache: Path = CACHE
    repeats: int = 3
    quick: bool = False
    scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tl-bench-")))
    single_times: list[float] = field(default_factory=list)


# ---------------------------------------------------------------------------------
# scaled traces
_ID_ARGS = ("External id", "correlation", "Python id", "Python parent id", "Ev Idx")


def scale_trace(base: Path, target_bytes: int, out: Path) -> Path:
    """Write ``out``: ``base``'s events repeated until the file reaches target_bytes.

    The last copy may be cut short (whole events), so a few of its launches may
    lack their kernels.
    Copy k shifts every timestamp by k * (span + 1 ms) and offsets every id that links
    events (flow ``id``, args ``External id`` / ``correlation`` / ``Python id`` /
    ``Python parent id``) by k * (max id + 1), so each copy links only to itself.
    Metadata (``ph: M``) events are written once.
    """
    import orjson

    raw = gzip.decompress(base.read_bytes()) if base.read_bytes()[:2] == b"\x1f\x8b" else base.read_bytes()
    doc = orjson.loads(raw)
    events = doc["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    t0 = min(e["ts"] for e in body if "ts" in e)
    t1 = max(e["ts"] + e.get("dur", 0) for e in body if "ts" in e)
    shift = (t1 - t0) + 1000.0
    max_id = 0
    for e in body:
        if isinstance(e.get("id"), int):
            max_id = max(max_id, e["id"])
        a = e.get("args")
        if a:
            for k in _ID_ARGS:
                v = a.get(k)
                if isinstance(v, int):
                    max_id = max(max_id, v)
    id_step = max_id + 1
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    tmp = out.with_suffix(".part")
    with open(tmp, "wb") as fh:
        fh.write(b'{"traceEvents":[')
        fh.write(b",".join(orjson.dumps(e) for e in meta))
        sep = b"," if meta else b""
        k = -1
        done = False
        while not done:
            k += 1
            dt = k * shift
            di = k * id_step
            for e in body:
                e2 = dict(e)
                if "ts" in e2:
                    e2["ts"] = e2["ts"] + dt
                if isinstance(e2.get("id"), int):
                    e2["id"] = e2["id"] + di
                a = e2.get("args")
                if a:
                    a2 = None
                    for key in _ID_ARGS:
                        v = a.get(key)
                        if isinstance(v, int) and v >= 0:
                            if a2 is None:
                                a2 = dict(a)
                            a2[key] = v + di
                    if a2 is not None:
                        e2["args"] = a2
                fh.write(sep)
                fh.write(orjson.dumps(e2))
                sep = b","
                if k > 0 and fh.tell() >= target_bytes:
                    done = True  # the last copy may be partial
                    break
            if fh.tell() >= target_bytes:
                done = True
        fh.write(b"]")
        for k, v in head.items():
            fh.write(b"," + orjson.dumps(k) + b":" + orjson.dumps(v))
        fh.write(b"}")
    tmp.replace(out)
    return out


def scaled_trace(ctx: Context, n: int = 0) -> Path:
    """The n-th cached ~145 MB trace (copies of trace 0, so they parse identically)."""
    if not BASE_TRACE.is_file():
        raise SystemExit(f"bench: reference trace not found: {BASE_TRACE}")
    ctx.cache.mkdir(parents=True, exist_ok=True)
    first = ctx.cache / f"scaled-{TARGET_BYTES // 1_000_000}MB-0.json"
    if not first.is_file() or first.stat().st_mtime < BASE_TRACE.stat().st_mtime:
        print(f"bench: generating {first} ...", file=sys.stderr, flush=True)
        scale_trace(BASE_TRACE, TARGET_BYTES, first)
    if n == 0:
        return first
    p = ctx.cache / f"scaled-{TARGET_BYTES // 1_000_000}MB-{n}.json"
    if not p.is_file() or p.stat().st_size != first.stat().st_size:
        try:
            os.link(first, p)
        except OSError:
            import shutil

            shutil.copyfile(first, p)
    return p


# ---------------------------------------------------------------------------------
# subprocess measurements
_MEASURE = r"""
import json, resource, sys, time
mode, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "orjson":
    import orjson
    data = open(path, "rb").read()
    t0 = time.perf_counter(); doc = orjson.loads(data); t1 = time.perf_counter()
elif mode == "analyze":
    from traceladder.analysis.engine import analyze_trace
    t0 = time.perf_counter(); analyze_trace(path, out); t1 = time.perf_counter()
elif mode == "paths":
    from traceladder.analysis.engine import analyze_paths
    paths = path.split(",")
    t0 = time.perf_counter(); rc = analyze_paths(paths, out, jobs=int(sys.argv[4])); t1 = time.perf_counter()
    assert rc == 0, rc
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across fork+exec from the (bigger) parent.
rss_self = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
rss_kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"secs": t1 - t0, "rss_mb": rss_self, "children_rss_mb": rss_kids}))
"""


def _measure(ctx: Context, *args: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "include") + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([ctx.python, "-c", _MEASURE, *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"measurement {args[0]} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def bench_analyze(ctx: Context) -> list[Row]:
    trace = scaled_trace(ctx, 0)
    size_mb = trace.stat().st_size / 1e6
    orj, ana, rss = [], [], []
    for i in range(ctx.repeats):
        orj.append(_measure(ctx, "orjson", str(trace), "-")["secs"])
        m = _measure(ctx, "analyze", str(trace), str(ctx.scratch / f"single-{i}"))
        ana.append(m["secs"])
        rss.append(m["rss_mb"])
    ctx.single_times = ana
    o, a = statistics.median(orj), statistics.median(ana)
    ratio = a / o
    peak = max(rss)
    detail = f"{size_mb:.0f} MB trace; orjson.loads {o:.2f} s, analyze_trace {a:.2f} s (median of {ctx.repeats})"
    return [
        Row("analyze", "analyze_trace / orjson.loads", ratio, "x", f"<= {ANALYZE_OVER_ORJSON_MAX}", ratio <= ANALYZE_OVER_ORJSON_MAX, detail),
        Row("analyze", "peak RSS", peak, "MB", f"<= {PEAK_RSS_MB_MAX:.0f}", peak <= PEAK_RSS_MB_MAX, "fresh process, VmHWM"),
    ]


def bench_analyze_paths(ctx: Context) -> list[Row]:
    n = 4 if ctx.quick else 8
    traces = [scaled_trace(ctx, i) for i in range(n)]
    if not ctx.single_times:
        ctx.single_times = [_measure(ctx, "analyze", str(traces[0]), str(ctx.scratch / "single-x"))["secs"]]
    single = statistics.median(ctx.single_times)
    ideal = single * n / 2
    m = _measure(ctx, "paths", ",".join(map(str, traces)), str(ctx.scratch / "many"), "2")
    ratio = m["secs"] / ideal
    return [
        Row("analyze_paths", f"jobs=2 over {n} traces / ideal", ratio, "x", f"<= {JOBS2_OVER_IDEAL_MAX}", ratio <= JOBS2_OVER_IDEAL_MAX,
            f"{m['secs']:.2f} s vs ideal {ideal:.2f} s ({n} x {single:.2f} s / 2)"),
        Row("analyze_paths", "peak RSS of one worker", m["children_rss_mb"], "MB", f"<= {PEAK_RSS_MB_MAX:.0f}",
            m["children_rss_mb"] <= PEAK_RSS_MB_MAX, f"parent {m['rss_mb']:.0f} MB"),
    ]


def _time_cmd(ctx: Context, code: str, env: dict) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([ctx.python, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    t1 = time.perf_counter()
    if r.returncode != 0:
        raise RuntimeError(f"{code!r} failed:\n{r.stderr[-2000:]}")
    return t1 - t0


def bench_dag_parse(ctx: Context) -> list[Row]:
    home = Path(tempfile.mkdtemp(prefix="tl-bench-airflow-"))
    env = dict(os.environ)
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
        PYTHONPATH=str(REPO / "include") + os.pathsep + env.get("PYTHONPATH", ""),
    )
    reps = max(2, ctx.repeats)
    try:
        _time_cmd(ctx, "import airflow.sdk", env)  # warm the file cache
    except RuntimeError as exc:
        return [Row("dag_parse", "airflow import", float("nan"), "", "", False, str(exc).splitlines()[0])]
    base = statistics.median(_time_cmd(ctx, "import airflow.sdk", env) for _ in range(reps))
    rows = []
    for dag in ("dags/ladder_weekly.py", "dags/ladder_trigger.py"):
        if not (REPO / dag).is_file():
            rows.append(Row("dag_parse", dag, float("nan"), "", "", False, "missing"))
            continue
        code = f"import runpy; runpy.run_path({dag!r})"
        try:
            secs = statistics.median(_time_cmd(ctx, code, env) for _ in range(reps))
        except RuntimeError as exc:
            rows.append(Row("dag_parse", dag, float("nan"), "", "", False, str(exc).strip().splitlines()[-1]))
            continue
        rows.append(Row("dag_parse", f"{dag} / import airflow.sdk", secs / base, "x", "", None,
                        f"{secs:.2f} s vs {base:.2f} s (median of {reps})"))
    return rows


def bench_rocprof(ctx: Context) -> list[Row]:
    """analyze_trace on a ~150 MB rocprofv3 JSON (traceladder.bench_rocprof) vs orjson.loads."""
    from traceladder.bench_rocprof import ROCPROF_BASE, ROCPROF_TARGET_BYTES, scale_rocprof_json

    if not ROCPROF_BASE.is_file():
        raise SystemExit(f"bench: reference trace not found: {ROCPROF_BASE}")
    ctx.cache.mkdir(parents=True, exist_ok=True)
    trace = ctx.cache / f"rocprof-{ROCPROF_TARGET_BYTES // 1_000_000}MB_results.json"
    if not trace.is_file() or trace.stat().st_mtime < ROCPROF_BASE.stat().st_mtime:
        print(f"bench: generating {trace} ...", file=sys.stderr, flush=True)
        scale_rocprof_json(ROCPROF_BASE, ROCPROF_TARGET_BYTES, trace)
    orj, ana, rss, orss = [], [], [], []
    for i in range(ctx.repeats):
        m0 = _measure(ctx, "orjson", str(trace), "-")
        orj.append(m0["secs"])
        orss.append(m0["rss_mb"])
        m = _measure(ctx, "analyze", str(trace), str(ctx.scratch / f"rocprof-{i}"))
        ana.append(m["secs"])
        rss.append(m["rss_mb"])
    o, a = statistics.median(orj), statistics.median(ana)
    detail = f"{trace.stat().st_size / 1e6:.0f} MB rocprofv3 JSON; orjson.loads {o:.2f} s, analyze_trace {a:.2f} s (median of {ctx.repeats})"
    return [
        Row("rocprof", "analyze_trace / orjson.loads", a / o, "x", "", None, detail),
        Row("rocprof", "peak RSS", max(rss), "MB", "", None, f"fresh process, VmHWM; orjson.loads alone {max(orss):.0f} MB"),
    ]


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


BENCHES: list[Callable[[Context], list[Row]]] = [bench_analyze, bench_analyze_paths, bench_dag_parse, bench_rocprof, bench_aa]


def format_table(rows: list[Row]) -> str:
    head = ("section", "metric", "value", "target", "ok", "detail")
    body = []
    for r in rows:
        val = "n/a" if r.value != r.value else (f"{r.value:.3f}{r.unit}" if r.unit == "x" else f"{r.value:.0f} {r.unit}".strip())
        ok = "" if r.ok is None else ("yes" if r.ok else "NO")
        body.append((r.section, r.metric, val, r.target, ok, r.detail))
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(head), line(tuple("-" * w for w in widths))] + [line(b) for b in body])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m traceladder.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="run only this section (bench function name less 'bench_')")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="fewer traces for analyze_paths")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = ap.parse_args(argv)
    ctx = Context(repeats=args.repeats, quick=args.quick)
    rows: list[Row] = []
    for fn in BENCHES:
        name = fn.__name__.removeprefix("bench_")
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        got = fn(ctx)
        rows.extend(got)
        print(f"bench: {name} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print(format_table(rows))
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], indent=1))
    missed = [f"{r.section}: {r.metric}" for r in rows if r.ok is False]
    print(f"{len(missed)} target(s) missed" + (": " + "; ".join(missed) if missed else ""))
    return 0  # a benchmark reports; it does not gate


if __name__ == "__main__":
    sys.exit(main())
