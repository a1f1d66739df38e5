"""The rocprofv3 section of the benchmark (``python -m traceladder.bench --only rocprof``).

:func:`scale_rocprof_json` makes a ~150 MB rocprofv3 JSON from the reference
``908_results.json.gz``: its kernel dispatches are repeated, copy k shifted by
k * (fini - init + 1 ms) with fresh correlation / dispatch ids, and ``fini_time`` moved
to the end of the last copy.  ``traceladder.bench.bench_rocprof`` times
``analyze_trace`` on it against a bare ``orjson.loads`` of the same file, each in a
fresh subprocess, and records the peak RSS.
"""

from __future__ import annotations

import gzip
from pathlib import Path

__all__ = ["ROCPROF_BASE", "ROCPROF_TARGET_BYTES", "scale_rocprof_json"]

_REPO = Path(__file__).resolve().parents[2]
ROCPROF_BASE = _REPO.parent / "shared" / "reference" / "tracelens-v1.0.0" / "rocprof" / "908_results.json.gz"
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
