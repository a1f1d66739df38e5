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

from benchmarks.common import SHARED_REF, Context, Row, measure

ROCPROF_BASE = SHARED_REF / "rocprof" / "908_results.json.gz"
ROCPROF_TARGET_BYTES = 150 * 1000 * 1000


def scale_rocprof_json(base: Path, target_bytes: int, out: Path) -> Path:
    import orjson

    raw = base.read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    tool = doc["rocprofiler-sdk-tool"][0]
    kd = tool["buffer_records"]["kernel_dispatch"]
    meta = tool["metadata"]
    span = meta["fini_time"] - meta["init_time"] + 1_000_000
    base_len = len(orjson.dumps(doc))
    per_copy = len(orjson.dumps(kd))
    copies = max(1, round((target_bytes - base_len) / per_copy) + 1)
    max_corr = max(d["correlation_id"]["internal"] for d in kd) + 1
    max_disp = max(d["dispatch_info"]["dispatch_id"] for d in kd) + 1
    scaled = list(kd)
    for k in range(1, copies):
        dt = k * span
        for d in kd:
            e = dict(d)
            e["start_timestamp"] = d["start_timestamp"] + dt
            e["end_timestamp"] = d["end_timestamp"] + dt
            e["correlation_id"] = {**d["correlation_id"], "internal": d["correlation_id"]["internal"] + k * max_corr}
            e["dispatch_info"] = {**d["dispatch_info"], "dispatch_id": d["dispatch_info"]["dispatch_id"] + k * max_disp}
            scaled.append(e)
    tool["buffer_records"]["kernel_dispatch"] = scaled
    meta["fini_time"] = meta["fini_time"] + (copies - 1) * span
    tmp = out.with_suffix(".part")
    tmp.write_bytes(orjson.dumps(doc))
    tmp.replace(out)
    return out


def bench_rocprof(ctx: Context) -> list[Row]:
    """analyze_trace on a ~150 MB rocprofv3 JSON (traceladder.bench_rocprof) vs orjson.loads."""
    if not ROCPROF_BASE.is_file():
        raise SystemExit(f"bench: reference trace not found: {ROCPROF_BASE}")
    ctx.cache.mkdir(parents=True, exist_ok=True)
    trace = ctx.cache / f"rocprof-{ROCPROF_TARGET_BYTES // 1_000_000}MB_results.json"
    if not trace.is_file() or trace.stat().st_mtime < ROCPROF_BASE.stat().st_mtime:
        print(f"bench: generating {trace} ...", file=sys.stderr, flush=True)
        scale_rocprof_json(ROCPROF_BASE, ROCPROF_TARGET_BYTES, trace)
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


SECTIONS = [bench_rocprof]
