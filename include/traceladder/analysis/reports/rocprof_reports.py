"""All reports for a heavy-lens trace (rocprofv3 JSON / CSV, RPD-style SQLite).

:func:`write_reports` writes TraceLens v1.0.0's rocprof report set --
``gpu_timeline.csv`` (:mod:`.rocprof_timeline`), ``kernel_summary.csv``
(:mod:`.rocprof_kernel_summary`) and ``kernel_summary_by_category.csv``
(:mod:`.rocprof_kernel_category`) -- and returns the parts of ``analysis.json`` that
``engine.analyze_trace`` writes, in the same schema as for PyTorch traces:

* ``timeline`` / ``timeline_percent``: the eight PyTorch-report keys, by TraceLens's
  PyTorch rules applied to every GPU event (there is no host tree to link to):
  communication = kernels whose name matches the NCCL/RCCL pattern, memcpy = memory
  copies plus ROCm's legacy copy kernels, computation = the other kernels and fills.
  ``total_time`` is the rocprof report's total (``fini - init`` for rocprofv3 JSON, the
  span of the GPU work otherwise) and ``idle_time = max(0, total - busy)``;
* ``top_ops``: the top kernels by total time and ``categories``: the kernel categories,
  both with **real** milliseconds (``time_ms``), unlike the CSVs' quirky units;
* ``notes``: the source, its caveats (rocm-trace-lite lite mode: collectives may be
  missing), and the unit quirk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..model.events import EventTable
from . import gpu_timeline as gt
from . import rocprof_kernel_category as kc
from . import rocprof_kernel_summary as ks
from . import rocprof_timeline as rt

__all__ = ["write_reports", "LITE_NOTE"]

LITE_NOTE = (
    "rocm-trace-lite lite mode: packets that already carry a completion signal are not "
    "traced, so collectives (RCCL kernels) may be missing from this trace; communication "
    "time is a lower bound"
)
QUIRK_NOTE = (
    "kernel_summary*.csv follow TraceLens's rocprof report: the columns labelled µs hold ns "
    "and the column labelled ms holds µs; analysis.json gives real ms"
)


def _pytorch_style(t: EventTable, tl: rt.RocprofTimeline) -> dict[str, float]:
    km, mm = rt.gpu_masks(t)
    idx = np.flatnonzero(km | mm)
    cls = gt.gpu_event_classes(t)
    nm = t.name[idx]
    is_k = km[idx]
    memcpy = t.is_cat("gpu_memcpy")[idx] | (is_k & cls["legacy_memcpy"][nm])
    rest = ~memcpy
    comm = rest & is_k & ~cls["legacy_memset"][nm] & cls["comm"][nm]
    comp = rest & ~comm
    s = t.ts[idx]
    e = s + t.dur[idx]
    m = gt.timeline_metrics((s[comp], e[comp]), (s[comm], e[comm]), (s[memcpy], e[memcpy]), (s, e))
    m["total_time"] = tl.total_us
    m["idle_time"] = max(0.0, tl.total_us - m["busy_time"])
    return m


def _f(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def write_reports(t: EventTable, out_dir: Path, top_n: int = 10) -> dict[str, Any]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    heavy = t.metadata.get("heavy", {})
    tl = rt.rocprof_timeline(t)
    rt.write_csv(tl, out_dir)
    kf = ks.kernel_frame(t)
    kdf = ks.write_csv(kf, out_dir)
    cdf = kc.write_csv(kf, out_dir)

    m = _pytorch_style(t, tl)
    total = m["total_time"]
    notes = [f"source: {heavy.get('source', t.fmt)}"]
    notes.extend(heavy.get("notes", []))
    if heavy.get("lite"):
        notes.append(LITE_NOTE)
    if not tl.has_init_fini:
        notes.append("no profiler init/fini times in this format: total_time is the span of the GPU work")
    notes.append(QUIRK_NOTE)
    top = [
        {
            "name": str(r["name"]),
            "time_ms": _f(r["Total Kernel Time (ms)"] / 1000.0),
            "percent": _f(r["Percentage (%)"]),
            "count": int(r["Count"]),
        }
        for r in kdf.records(top_n)
    ]
    cats = [
        {
            "name": str(r["op category"]),
            "time_ms": _f(r["total_direct_kernel_time_ms"] / 1000.0),
            "percent": _f(r["Percentage (%)"]),
            "count": int(r["Count"]),
        }
        for r in cdf.records()
    ]
    return {
        "device": "gpu",
        "timeline": {k: _f(m[k] / 1e3) for k in gt.ROWS},
        "timeline_percent": {k: _f((m[k] / total * 100) if total else 0.0) for k in gt.ROWS},
        "top_ops": top,
        "categories": cats,
        "regions": {},
        "notes": notes,
    }
