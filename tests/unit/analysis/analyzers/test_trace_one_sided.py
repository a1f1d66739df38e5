"""Traces with one side only: device events without host ones (GPU-only), and host events
without device ones (CPU-only), both cut from a real reference trace here.

GPU-only conformance with TraceLens's own outputs is in test_trace_conformance.py; this
file checks what those CSVs cannot: the CPU-only case, where TraceLens v1.0.0 stops ("No
GPU events found in the trace") and the engine goes beyond it with a CPU timeline.
"""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import REFERENCE_DIR
from traceladder.analysis.analyzers.trace import analyze_trace
from traceladder.analysis.reports.gpu_timeline import COLUMNS, ROWS

RESNET = REFERENCE_DIR / "tracelens-v1.0.0" / "mi300" / "resnet_act_checkpoint.json.gz"
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "ac2g"}


@pytest.fixture(scope="module")
def cpu_only(tmp_path_factory) -> tuple[Path, dict]:
    assert RESNET.is_file(), f"reference trace not found: {RESNET}"
    doc = json.loads(gzip.decompress(RESNET.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in DEVICE_CATS]
    p = tmp_path_factory.mktemp("cpu_only") / "resnet__cpu_only.json"
    p.write_text(json.dumps(doc))
    return p, doc


def _timeline(out: Path) -> dict[str, float]:
    with open(out / "gpu_timeline.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == COLUMNS
    assert [r[0] for r in rows[1:]] == ROWS
    return {r[0]: float(r[1]) for r in rows[1:]}


def test_cpu_only_trace_gets_a_cpu_timeline(cpu_only, tmp_path):
    trace, doc = cpu_only
    res = analyze_trace(trace, tmp_path)
    assert res["device"] == "cpu"
    assert any("CPU-only trace" in n for n in res["notes"])
    tl = _timeline(tmp_path)
    # total is the span of the ProfilerStep ranges, read here from the JSON itself
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#") and "dur" in e]
    assert steps
    span_ms = (max(e["ts"] + e["dur"] for e in steps) - min(e["ts"] for e in steps)) / 1e3
    assert tl["total_time"] == pytest.approx(span_ms, rel=1e-9)
    assert 0 < tl["computation_time"] <= tl["total_time"]
    assert tl["busy_time"] + tl["idle_time"] == pytest.approx(tl["total_time"], rel=1e-9)
    assert tl["total_memcpy_time"] == 0  # no device copies on a CPU timeline
    # the main thread's longest op (collective stubs aside, clipped to the span) is
    # covered by the computation time
    lo = min(e["ts"] for e in steps)
    hi = max(e["ts"] + e["dur"] for e in steps)
    counts: dict = {}
    for e in steps:
        counts[(e["pid"], e["tid"])] = counts.get((e["pid"], e["tid"]), 0) + 1
    main = max(counts, key=counts.get)
    main_ops = [
        e
        for e in doc["traceEvents"]
        if e.get("cat") == "cpu_op"
        and "dur" in e
        and (e["pid"], e["tid"]) == main
        and not e["name"].startswith(("c10d::", "record_param_comms"))
    ]
    longest = max(min(e["ts"] + e["dur"], hi) - max(e["ts"], lo) for e in main_ops) / 1e3
    assert longest > 0
    assert tl["computation_time"] >= longest * (1 - 1e-9)
    # ops come from the host side; no device-side report is written
    names = {p.name for p in tmp_path.glob("*.csv")}
    assert {"gpu_timeline.csv", "ops_summary.csv", "ops_summary_by_category.csv"} <= names
    assert not names & {"kernel_summary.csv", "short_kernels_summary.csv", "short_kernel_histogram.csv", "GEMM.csv"}
    with open(tmp_path / "ops_summary.csv", newline="") as fh:
        ops = {r["name"] for r in csv.DictReader(fh)}
    assert ops and ops <= {e["name"] for e in main_ops}
    assert json.loads((tmp_path / "analysis.json").read_text())["timeline"]["total_time"] == pytest.approx(
        span_ms, rel=1e-9
    )
