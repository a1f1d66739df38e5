"""Analysis speed and memory (DAG parse time: bench_dag_parse.py).

* ``analyze`` (P1): ``traceladder analyze`` on a ~145 MB PyTorch trace, the whole
  process as a user runs it (start-up and imports included), over a bare
  ``orjson.loads`` of the same (uncompressed) bytes, and the process's peak RSS.  Each
  measurement runs in a fresh subprocess; the two alternate, ``--repeats`` times.  The
  CLI uses a second process where a second CPU is free (``core/child_process.py``); the
  same CLI pinned to one CPU is measured beside it, for information.
* ``analyze_paths`` (P2): 8 rank copies of that trace through ``traceladder analyze
  --jobs N`` and ``traceladder analyze-ranks --jobs N`` (N = CPUs, at most 8), each over
  its ideal: the sum of the single-trace times inside one warm process, divided by N
  (start-up counted once); and the peak RSS of a worker.

The scaled traces are made from a reference trace by repeating its events with shifted
timestamps and offset ids (``External id``, ``correlation``, flow ids, ``Python id``), so
CPU->GPU linking still works; they are cached under ``.traceladder/bench/`` (git-ignored).
"""

from __future__ import annotations

import gzip
import os
import statistics
import sys
from pathlib import Path

from benchmarks.common import SHARED_REF, Context, Row, measure

BASE_TRACE = SHARED_REF / "mi300" / "resnet_act_checkpoint.json.gz"
TARGET_BYTES = 145 * 1000 * 1000

# targets (ratios), from the issues
ANALYZE_OVER_ORJSON_MAX = 0.55
PEAK_RSS_MB_MAX = 450.0
JOBS2_OVER_IDEAL_MAX = 1.2

#: bumped when scale_trace's output changes, so cached traces are made again
SCALED_VERSION = "v2"
_ID_ARGS = ("External id", "correlation", "Python id", "Python parent id", "Ev Idx")


def scale_trace(base: Path, target_bytes: int, out: Path) -> Path:
    """Write ``out``: ``base``'s events repeated until the file reaches target_bytes.

    The last copy may be cut short (whole events), so a few of its launches may
    lack their kernels.
    Copy k shifts every timestamp by k * (span + 1 ms) and offsets every id that links
    events (flow ``id``, args ``External id`` / ``correlation`` / ``Python id`` /
    ``Python parent id``) by k * (max id + 1), so each copy links only to itself.
    Metadata (``ph: M``) events are written once, first, and the category-less trailer
    events (kineto's ``Iteration Start`` / ``Record Window End`` instants) once, last, as
    in one long capture.
    """
    import orjson

    raw = gzip.decompress(base.read_bytes()) if base.read_bytes()[:2] == b"\x1f\x8b" else base.read_bytes()
    doc = orjson.loads(raw)
    events = doc["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M" and "cat" in e]
    trailer = [e for e in events if e.get("ph") != "M" and "cat" not in e]
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
        for e in trailer:
            e2 = dict(e)
            if "ts" in e2:
                e2["ts"] = e2["ts"] + k * shift
            fh.write(sep + orjson.dumps(e2))
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
    first = ctx.cache / f"scaled-{TARGET_BYTES // 1_000_000}MB-{SCALED_VERSION}-0.json"
    if not first.is_file() or first.stat().st_mtime < BASE_TRACE.stat().st_mtime:
        print(f"bench: generating {first} ...", file=sys.stderr, flush=True)
        scale_trace(BASE_TRACE, TARGET_BYTES, first)
    if n == 0:
        return first
    p = ctx.cache / f"scaled-{TARGET_BYTES // 1_000_000}MB-{SCALED_VERSION}-{n}.json"
    if not p.is_file() or p.stat().st_size != first.stat().st_size:
        try:
            os.link(first, p)
        except OSError:
            import shutil

            shutil.copyfile(first, p)
    return p


def rank_trace(ctx: Context, rank: int) -> Path:
    """A copy of the scaled trace that says it is ``rank`` (its distributedInfo.rank),
    so that ``analyze-ranks`` takes the copies as one job's ranks."""
    first = scaled_trace(ctx, 0)
    p = ctx.cache / f"scaled-{TARGET_BYTES // 1_000_000}MB-{SCALED_VERSION}-rank{rank}.json"
    if p.is_file() and p.stat().st_size == first.stat().st_size and p.stat().st_mtime >= first.stat().st_mtime:
        return p
    data = bytearray(first.read_bytes())
    tail = len(data) - 4096
    at = data.find(b'"rank":0,', tail)
    if at < 0 or rank > 9:
        raise SystemExit(f"bench: no distributedInfo rank to set in {first}")
    data[at + 7 : at + 8] = str(rank).encode()
    tmp = p.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.replace(p)
    return p


def _spread(xs: list[float]) -> str:
    return "/".join(f"{x:.2f}" for x in xs)


def bench_analyze(ctx: Context) -> list[Row]:
    """P1: ``traceladder analyze`` on one ~145 MB trace, the whole process (start-up and
    imports included), over a bare ``orjson.loads`` of the same bytes, measured
    alternately in the same run."""
    trace = scaled_trace(ctx, 0)
    size_mb = trace.stat().st_size / 1e6
    orj, ana, one, rss, cpu_ratios = [], [], [], [], []
    for i in range(ctx.repeats):
        mo = measure(ctx, "orjson", str(trace), "-")
        orj.append(mo["secs"])
        m = measure(ctx, "cli", f"analyze,{trace},--out,{ctx.scratch / f'single-{i}'}", "-")
        ana.append(m["secs"])
        rss.append(m["children_rss_mb"])
        cpu_ratios.append(m["cpu"] / mo["cpu"])
        one.append(measure(ctx, "cli-1cpu", f"analyze,{trace},--out,{ctx.scratch / f'one-{i}'}", "-")["secs"])
    o, a = statistics.median(orj), statistics.median(ana)
    ratio = a / o
    peak = max(rss)
    ratios = sorted(x / y for x, y in zip(ana, orj))
    detail = (
        f"{size_mb:.0f} MB trace; orjson.loads {o:.2f} s, `traceladder analyze` {a:.2f} s whole process "
        f"(medians of {ctx.repeats}; runs {_spread(orj)} / {_spread(ana)} s; pairwise ratios {_spread(ratios)}; "
        f"CPU-time ratios {_spread(sorted(cpu_ratios))}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )
    return [
        Row(
            "analyze",
            "traceladder analyze (whole process) / orjson.loads",
            ratio,
            "x",
            f"<= {ANALYZE_OVER_ORJSON_MAX}",
            ratio <= ANALYZE_OVER_ORJSON_MAX,
            detail,
        ),
        Row(
            "analyze",
            "the same on one CPU (one process) / orjson.loads",
            statistics.median(one) / o,
            "x",
            "",
            None,
            f"pinned to one CPU, the CLI reads and reports in one process; runs {_spread(one)} s",
        ),
        Row(
            "analyze",
            "peak RSS",
            peak,
            "MB",
            f"<= {PEAK_RSS_MB_MAX:.0f}",
            peak <= PEAK_RSS_MB_MAX,
            "the CLI process (VmHWM via wait4)",
        ),
    ]


def bench_analyze_paths(ctx: Context) -> list[Row]:
    """P2: ``analyze --jobs N`` and ``analyze-ranks --jobs N`` over 8 rank traces, each
    over its ideal: (sum of the single-trace times inside one warm process) / N, so
    start-up is counted once (in the measured run), not once per trace."""
    n = 4 if ctx.quick else 8
    jobs = min(n, os.cpu_count() or 1)
    traces = [rank_trace(ctx, i) for i in range(n)]
    csv_paths = ",".join(map(str, traces))
    warm = measure(ctx, "warm", csv_paths, str(ctx.scratch / "warm"))
    ideal = sum(warm["per"]) / jobs
    ideal_ranks = sum(warm["per_rank"]) / jobs
    m = measure(ctx, "cli", f"analyze,{csv_paths},--out,{ctx.scratch / 'many'},--jobs,{jobs}", "-")
    r = measure(ctx, "cli", f"analyze-ranks,{csv_paths},--out,{ctx.scratch / 'ranks'},--jobs,{jobs}", "-")
    ratio, ratio_r = m["secs"] / ideal, r["secs"] / ideal_ranks
    # where a gap comes from: the CPU the parallel run used over the single-trace CPU
    # (parallel overhead), and the CPUs it got (CPU / wall) against the warm run's
    cpu_w, cpu_wr = sum(warm["per_cpu"]), sum(warm["per_rank_cpu"])
    share_w = cpu_w / sum(warm["per"])
    why = (
        f"CPU {m['cpu']:.1f} s vs single-trace CPU {cpu_w:.1f} s ({m['cpu'] / cpu_w:.2f}x); CPUs held "
        f"{m['cpu'] / m['secs']:.2f} vs {share_w:.2f} in the warm run (ideal {jobs * share_w:.2f}); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    why_r = (
        f"CPU {r['cpu']:.1f} s vs single-rank CPU {cpu_wr:.1f} s ({r['cpu'] / cpu_wr:.2f}x); CPUs held "
        f"{r['cpu'] / r['secs']:.2f} vs {cpu_wr / sum(warm['per_rank']):.2f} in the warm run"
    )
    return [
        Row(
            "analyze_paths",
            f"analyze --jobs {jobs} over {n} traces / ideal",
            ratio,
            "x",
            f"<= {JOBS2_OVER_IDEAL_MAX}",
            ratio <= JOBS2_OVER_IDEAL_MAX,
            f"{m['secs']:.2f} s whole process vs ideal {ideal:.2f} s "
            f"(warm single-trace times {_spread(warm['per'])} s, sum / {jobs}); {why}",
        ),
        Row(
            "analyze_paths",
            f"analyze-ranks --jobs {jobs} over {n} ranks / ideal",
            ratio_r,
            "x",
            f"<= {JOBS2_OVER_IDEAL_MAX}",
            ratio_r <= JOBS2_OVER_IDEAL_MAX,
            f"{r['secs']:.2f} s whole process vs ideal {ideal_ranks:.2f} s "
            f"(warm per-rank reads {_spread(warm['per_rank'])} s, sum / {jobs}); {why_r}",
        ),
        Row(
            "analyze_paths",
            "peak RSS per worker (analyze --jobs)",
            m["children_rss_mb"],
            "MB",
            f"<= {PEAK_RSS_MB_MAX:.0f}",
            m["children_rss_mb"] <= PEAK_RSS_MB_MAX,
            "largest process of the run: a worker, one trace at a time",
        ),
        Row(
            "analyze_paths",
            "peak RSS per worker (analyze-ranks --jobs)",
            r["children_rss_mb"],
            "MB",
            f"<= {PEAK_RSS_MB_MAX:.0f}",
            r["children_rss_mb"] <= PEAK_RSS_MB_MAX,
            f"warm single process: {warm['rss_mb']:.0f} MB",
        ),
    ]


SECTIONS = [bench_analyze, bench_analyze_paths]  # dag_parse: bench_dag_parse.py
