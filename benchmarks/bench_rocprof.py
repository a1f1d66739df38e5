"""The rocprofv3 section of the benchmark (``python -m benchmarks --only rocprof``).

:func:`scale_rocprof_json` makes a ~150 MB rocprofv3 JSON from the reference
``908_results.json.gz``: its kernel dispatches are repeated, copy k shifted by
k * (fini - init + 1 ms) with fresh correlation / dispatch ids, and ``fini_time`` moved
to the end of the last copy.  :func:`bench_rocprof` times
``analyze_trace`` on it against a bare ``orjson.loads`` of the same file, each in a
fresh subprocess, and records the peak RSS.
"""

from __future__ import annotations

import gzip
import statistics
import sys
from pathlib import Path

import os

from benchmarks.common import REPO, SHARED_REF, Context, Row, load, measure, run_child, write_section_figures

ROCPROF_BASE = SHARED_REF / "rocprof" / "908_results.json.gz"
ROCPROF_TARGET_BYTES = 150 * 1000 * 1000


#: bumped when scale_rocprof_json's output changes, so cached traces are made again
ROCPROF_SCALED_VERSION = "v2"
#: the reference has no memory copies: one H2D/D2H/D2D copy is added per this many dispatches
COPY_EVERY = 97
#: the records whose timestamps and ids a copy shifts (hip/hsa API records too, where a trace has them)
_TIMED_KINDS = ("kernel_dispatch", "memory_copy", "hip_api", "hsa_api", "marker_api", "rccl_api")


def add_memory_copies(doc: dict, every: int = COPY_EVERY) -> int:
    """Give a trace with no memory copies one per ``every`` dispatches, as a real capture has:
    a copy on the dispatch's agent and stream, from 0.1 us after its start to 7 us past its end
    (overlapping it, so the timeline's exposed-memcpy split is exercised), clipped to fini.
    Returns the number added (0 when the trace has copies of its own)."""
    tool = doc["rocprofiler-sdk-tool"][0]
    br = tool["buffer_records"]
    if br.get("memory_copy"):
        return 0
    kinds = [k["kind"] for k in tool["strings"]["buffer_records"]]
    kind = kinds.index("MEMORY_COPY")
    host = next(a["id"]["handle"] for a in tool["agents"] if a["type"] == 1)
    fini = tool["metadata"]["fini_time"]
    corr = max(d["correlation_id"]["internal"] for d in br["kernel_dispatch"]) + 1
    copies = []
    for i, d in enumerate(br["kernel_dispatch"][::every]):
        op = 2 + i % 3  # HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE
        agent = d["dispatch_info"]["agent_id"]["handle"]
        copies.append(
            {
                "size": 96,
                "kind": kind,
                "operation": op,
                "thread_id": d["thread_id"],
                "correlation_id": {"internal": corr + i, "external": 0},
                "start_timestamp": d["start_timestamp"] + 100,
                "end_timestamp": min(d["end_timestamp"] + 7000, fini),
                "dst_agent_id": {"handle": host if op == 3 else agent},
                "src_agent_id": {"handle": agent if op != 2 else host},
                "bytes": 4096 << (i % 8),
                "stream_id": d["stream_id"],
            }
        )
    br["memory_copy"] = copies
    return len(copies)


def check_rocprof_times(doc: dict) -> None:
    """Every timed record inside [init_time, fini_time] (the timeline's total is fini - init)."""
    tool = doc["rocprofiler-sdk-tool"][0]
    init, fini = tool["metadata"]["init_time"], tool["metadata"]["fini_time"]
    for kind in _TIMED_KINDS:
        recs = tool["buffer_records"].get(kind) or []
        if recs:
            lo = min(r["start_timestamp"] for r in recs)
            hi = max(r["end_timestamp"] for r in recs)
            if lo < init or hi > fini:
                raise ValueError(f"scaled rocprof: {kind} spans [{lo}, {hi}], outside [init {init}, fini {fini}]")


def scale_rocprof_json(base: Path, target_bytes: int, out: Path) -> Path:
    """``out``: ``base`` (memory copies added where it has none) with its timed records repeated
    until the file is about ``target_bytes``.  Copy k of every kind is shifted by
    k * (fini - init + 1 ms) with its correlation and dispatch ids offset, and ``fini_time``
    moves to the end of the last copy, so all records stay within [init, fini] (checked)."""
    import orjson

    raw = base.read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    add_memory_copies(doc)
    check_rocprof_times(doc)
    tool = doc["rocprofiler-sdk-tool"][0]
    br = tool["buffer_records"]
    meta = tool["metadata"]
    span = meta["fini_time"] - meta["init_time"] + 1_000_000
    timed = {k: br[k] for k in _TIMED_KINDS if br.get(k)}
    base_len = len(orjson.dumps(doc))
    per_copy = sum(len(orjson.dumps(v)) for v in timed.values())
    copies = max(1, round((target_bytes - base_len) / per_copy) + 1)
    every = [r for recs in timed.values() for r in recs]
    max_corr = max(r["correlation_id"]["internal"] for r in every) + 1
    max_disp = max(d["dispatch_info"]["dispatch_id"] for d in timed.get("kernel_dispatch", [])) + 1
    for kind, recs in timed.items():
        scaled = list(recs)
        for k in range(1, copies):
            dt = k * span
            for r in recs:
                e = dict(r)
                e["start_timestamp"] = r["start_timestamp"] + dt
                e["end_timestamp"] = r["end_timestamp"] + dt
                e["correlation_id"] = {
                    **r["correlation_id"],
                    "internal": r["correlation_id"]["internal"] + k * max_corr,
                }
                if "dispatch_info" in r:
                    di = r["dispatch_info"]
                    e["dispatch_info"] = {**di, "dispatch_id": di["dispatch_id"] + k * max_disp}
                scaled.append(e)
        br[kind] = scaled
    meta["fini_time"] = meta["fini_time"] + (copies - 1) * span
    check_rocprof_times(doc)
    tmp = out.with_suffix(".part")
    tmp.write_bytes(orjson.dumps(doc))
    tmp.replace(out)
    return out


def rocprof_trace(ctx: Context) -> Path:
    """The ~150 MB scaled rocprofv3 JSON, made once and cached."""
    if not ROCPROF_BASE.is_file():
        raise SystemExit(f"bench: reference trace not found: {ROCPROF_BASE}")
    ctx.cache.mkdir(parents=True, exist_ok=True)
    name = f"rocprof-{ROCPROF_TARGET_BYTES // 1_000_000}MB-{ROCPROF_SCALED_VERSION}_results.json"
    trace = ctx.cache / name
    if not trace.is_file() or trace.stat().st_mtime < ROCPROF_BASE.stat().st_mtime:
        print(f"bench: generating {trace} ...", file=sys.stderr, flush=True)
        scale_rocprof_json(ROCPROF_BASE, ROCPROF_TARGET_BYTES, trace)
    return trace


def bench_rocprof(ctx: Context) -> list[Row]:
    """analyze_trace on a ~150 MB rocprofv3 JSON (traceladder.bench_rocprof) vs orjson.loads."""
    trace = rocprof_trace(ctx)
    orj, ana, rss, orss = [], [], [], []
    for i in range(ctx.repeats):
        m0 = measure(ctx, "orjson", str(trace), "-")
        orj.append(m0["secs"])
        orss.append(m0["rss_mb"])
        m = measure(ctx, "analyze", str(trace), str(ctx.scratch / f"rocprof-{i}"))
        ana.append(m["secs"])
        rss.append(m["rss_mb"])
    o, a = statistics.median(orj), statistics.median(ana)
    detail = (
        f"{trace.stat().st_size / 1e6:.0f} MB rocprofv3 JSON; orjson.loads {o:.2f} s, "
        f"analyze_trace {a:.2f} s (median of {ctx.repeats})"
    )
    return [
        Row("rocprof", "analyze_trace / orjson.loads", a / o, "x", "", None, detail),
        Row(
            "rocprof",
            "peak RSS",
            max(rss),
            "MB",
            "",
            None,
            f"fresh process, VmHWM; orjson.loads alone {max(orss):.0f} MB",
        ),
    ]


#: the heavy lens's targets (issue 28): against TraceLens, in the same run
WALL_OVER_TRACELENS_MAX = 0.05
RSS_OVER_TRACELENS_MAX = 0.2
TRACELENS_ROCPROF = "TraceLens_generate_perf_report_rocprof"


def bench_rocprof_vs_tracelens(ctx: Context) -> list[Row]:
    """``traceladder analyze`` (the whole CLI process) on the ~150 MB rocprofv3 JSON against the
    real TraceLens v1.0.0's ``TraceLens_generate_perf_report_rocprof`` (the oracle venv of
    ``--only tracelens_diff``), alternating, each a child of a small fresh Python that reads
    its peak RSS (``RUSAGE_CHILDREN``, the same for both). Both write their CSVs, which must
    conform (tests/conformance.py). Writes docs/figures/<date>-rocprof_vs_tracelens.md."""
    from benchmarks.bench_tracelens_diff import _conformance, oracle_bin

    trace = rocprof_trace(ctx)
    tl_exe = str(oracle_bin() / TRACELENS_ROCPROF)
    env = {**os.environ, "PYTHONPATH": str(REPO / "include")}
    conf = _conformance()
    pairs = []
    for i in range(ctx.repeats):
        tl_out, our_out = ctx.scratch / f"tl-{i}", ctx.scratch / f"ours-{i}"
        l0 = load()
        tl = run_child(ctx, [tl_exe, "--profile_json_path", str(trace), "--output_csvs_dir", str(tl_out)])
        ours = run_child(ctx, [ctx.python, "-m", "traceladder.cli", "analyze", str(trace), "--out", str(our_out)], env)
        differ = [p.name for p in sorted(tl_out.glob("*.csv")) if conf.compare_csv(our_out / trace.stem / p.name, p)]
        pairs.append(
            {
                "tl": tl,
                "ours": ours,
                "load": f"{l0}-{load()}",
                "differ": differ,
                "sheets": len(list(tl_out.glob("*.csv"))),
            }
        )
        print(
            f"bench: rocprof pair {i + 1}: TraceLens {tl['secs']:.1f} s {tl['peak_mb']:.0f} MB, "
            f"traceladder {ours['secs']:.2f} s {ours['peak_mb']:.0f} MB (load {pairs[-1]['load']})",
            file=sys.stderr,
            flush=True,
        )
    wall = statistics.median(p["ours"]["secs"] / p["tl"]["secs"] for p in pairs)
    rss = max(p["ours"]["peak_mb"] for p in pairs) / max(p["tl"]["peak_mb"] for p in pairs)
    differ = sorted({d for p in pairs for d in p["differ"]})
    lines = [
        "# The heavy lens at its real size (`python -m benchmarks --only rocprof_vs_tracelens`)",
        "",
        f"Trace: `{trace.name}`, {trace.stat().st_size / 1e6:.0f} MB: the reference `908_results.json.gz` with "
        f"one memory copy added per {COPY_EVERY} dispatches, its kernel dispatches and memory copies repeated "
        "with shifted times and ids, `fini_time` moved to the last copy's end (benchmarks/bench_rocprof.py).",
        "Each run is the whole process (start-up and imports included), a child of a small fresh Python that "
        "reads its peak RSS with `getrusage(RUSAGE_CHILDREN)` (the largest single process). The two alternate.",
        "",
        "| pair | TraceLens s | TraceLens peak MB | traceladder s | traceladder peak MB | wall ratio | load (1 min) |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {i + 1} | {p['tl']['secs']:.2f} | {p['tl']['peak_mb']:.0f} | {p['ours']['secs']:.2f} | "
            f"{p['ours']['peak_mb']:.0f} | {p['ours']['secs'] / p['tl']['secs']:.3f} | {p['load']} |"
            for i, p in enumerate(pairs)
        ),
        "",
        f"- wall, median of the pairs' ratios: **{wall:.3f}x** (target ≤ {WALL_OVER_TRACELENS_MAX}x: "
        f"{'met' if wall <= WALL_OVER_TRACELENS_MAX else 'NOT met'})",
        f"- peak RSS, max over max: **{rss:.3f}x** (target ≤ {RSS_OVER_TRACELENS_MAX}x: "
        f"{'met' if rss <= RSS_OVER_TRACELENS_MAX else 'NOT met'})",
        f"- sheets: {pairs[0]['sheets']} written by TraceLens, "
        + (f"differing: {', '.join(differ)}" if differ else "all conform (tests/conformance.py)"),
        "",
    ]
    path = write_section_figures("rocprof_vs_tracelens", lines)
    detail = f"{trace.stat().st_size / 1e6:.0f} MB; {ctx.repeats} pairs; {path.relative_to(REPO)}"
    return [
        Row(
            "rocprof_vs_tracelens",
            "analyze / TraceLens wall",
            wall,
            "x",
            f"<= {WALL_OVER_TRACELENS_MAX}x",
            wall <= WALL_OVER_TRACELENS_MAX,
            detail,
        ),
        Row(
            "rocprof_vs_tracelens",
            "analyze / TraceLens peak RSS",
            rss,
            "x",
            f"<= {RSS_OVER_TRACELENS_MAX}x",
            rss <= RSS_OVER_TRACELENS_MAX,
            f"differing sheets: {len(differ)}",
        ),
    ]


bench_rocprof_vs_tracelens.explicit_only = True  # type: ignore[attr-defined]  # needs the oracle; heavy

SECTIONS = [bench_rocprof, bench_rocprof_vs_tracelens]
