"""The reader leaves cpu_ops' link args undecoded (their args are big and only traces
linked by External id need them); such a trace still links, with them decoded on demand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from traceladder.analysis.analyzers.trace import analyze_trace, read_trace
from traceladder.analysis.model.events import MISSING


def _ext_linked_trace(path: Path) -> Path:
    """Old kineto: launch calls carry only ``External id``; flows use it as their id."""
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 9,
            "tid": 9,
            "ts": 100,
            "dur": 20,
            "args": {"External id": 41, "Input Dims": [[4, 4], [4, 4]]},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "hipLaunchKernel",
            "pid": 9,
            "tid": 9,
            "ts": 102,
            "dur": 3,
            "args": {"External id": 41},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::add",
            "pid": 9,
            "tid": 9,
            "ts": 130,
            "dur": 10,
            "args": {"External id": 42},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "hipLaunchKernel",
            "pid": 9,
            "tid": 9,
            "ts": 131,
            "dur": 3,
            "args": {"External id": 42},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "Cijk_gemm",
            "pid": 1,
            "tid": 7,
            "ts": 110,
            "dur": 12,
            "args": {"External id": 41, "stream": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "elementwise_add",
            "pid": 1,
            "tid": 7,
            "ts": 140,
            "dur": 5,
            "args": {"External id": 42, "stream": 7},
        },
    ]
    for fid, ts_cpu, ts_gpu in [(41, 102, 110), (42, 131, 140)]:
        ev.append({"ph": "s", "id": fid, "pid": 9, "tid": 9, "ts": ts_cpu, "cat": "ac2g", "name": "ac2g"})
        ev.append({"ph": "f", "id": fid, "pid": 1, "tid": 7, "ts": ts_gpu, "cat": "ac2g", "name": "ac2g", "bp": "e"})
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path


def test_cpu_op_links_decoded_on_demand(tmp_path):
    t = read_trace(_ext_linked_trace(tmp_path / "old.json"))
    cpu = np.flatnonzero(t.is_cat("cpu_op"))
    assert (t.ext[cpu] == MISSING).all() and t.deferred_links.size == 2
    tree = t.call_tree()
    assert tree.linking_key == "External id"
    assert t.ext[cpu].tolist() == [41, 42] and t.deferred_links.size == 0
    assert int(tree.linked.sum()) == 2


def test_external_id_trace_reports(tmp_path):
    res = analyze_trace(_ext_linked_trace(tmp_path / "old.json"), tmp_path / "out")
    top = {o["name"]: o["time_ms"] for o in res["top_ops"]}
    assert top == {"aten::mm": 0.012, "aten::add": 0.005}
    assert res["timeline"]["total_time"] == (145 - 110) / 1e3
