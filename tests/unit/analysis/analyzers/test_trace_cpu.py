"""CPU-only traces (the project's CPU proxy): torch.profiler CPU activity, gloo collectives.

The trace is generated here: 2 gloo ranks (torch.multiprocessing spawn, run in a
subprocess), all_to_all_single + all_reduce, record_shapes=True, record_function ranges.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from traceladder.core.documents import TraceAnalysis

from tests.conftest import REFERENCE_DIR
from traceladder.cli.analyze import analyze_paths
from traceladder.analysis.analyzers.trace import analyze_trace
from traceladder.analysis.reports.gpu_timeline import COLUMNS as TIMELINE_COLUMNS
from traceladder.analysis.reports.gpu_timeline import ROWS as TIMELINE_ROWS
from traceladder.analysis.reports.ops_summary import BY_CATEGORY_COLUMNS, OPS_SUMMARY_COLUMNS
from traceladder.core.ports import free_port

import torch  # noqa: F401  - the CPU traces come from a real torch.profiler run

REF = REFERENCE_DIR / "tracelens-v1.0.0"
REGIONS = ("attention", "moe_router", "moe_dispatch", "moe_experts", "moe_combine", "optimizer_step")

GEN = r"""
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.profiler import profile, ProfilerActivity, record_function, schedule

def worker(rank, world, out, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    w = torch.randn(128, 128, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.01)

    def step():
        x = torch.randn(64, 128)
        with record_function("attention"):
            y = torch.softmax(x @ w, dim=-1)
        with record_function("moe_router"):
            torch.topk(y, 2, dim=-1)
        with record_function("moe_dispatch"):
            inp = y.detach().contiguous()
            got = torch.empty_like(inp)
            dist.all_to_all_single(got, inp)
        with record_function("moe_experts"):
            z = (got @ w).relu()
        with record_function("moe_combine"):
            back = torch.empty_like(z.detach())
            dist.all_to_all_single(back, z.detach().contiguous())
        loss = (y * back).sum()
        loss.backward()
        dist.all_reduce(w.grad)
        with record_function("optimizer_step"):
            opt.step()
            opt.zero_grad()

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=2, repeat=1)) as prof:
        for _ in range(3):
            step()
            prof.step()
    prof.export_chrome_trace(os.path.join(out, f"cpu_proxy-rank[{rank}].pt.trace.json"))
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(worker, args=(2, sys.argv[1], int(sys.argv[2])), nprocs=2, join=True)
"""


@pytest.fixture(scope="module")
def cpu_traces(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("cpu_traces")
    script = d / "gen.py"
    script.write_text(GEN)
    proc = subprocess.run(
        [sys.executable, str(script), str(d), str(free_port())], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    traces = sorted(d.glob("*.pt.trace.json"))
    assert len(traces) == 2
    return traces


def _header(p: Path) -> list[str]:
    with open(p, newline="") as fh:
        return next(csv.reader(fh))


def _rows(p: Path) -> list[dict]:
    with open(p, newline="") as fh:
        return list(csv.DictReader(fh))


def test_cpu_trace_reports(cpu_traces, tmp_path):
    out = tmp_path / "r0"
    res = analyze_trace(cpu_traces[0], out)
    assert res["schema"] == 2 and res["device"] == "cpu"
    assert res["rank"] == 0
    assert any("CPU" in n for n in res["notes"])
    stored = (out / "analysis.json").read_text()  # every key typed: none rides untyped, bytes kept
    typed = TraceAnalysis.from_json(stored)
    assert typed.extra == {} and typed.to_json() == stored and typed.headroom is not None
    for f in ("gpu_timeline.csv", "ops_summary.csv", "ops_summary_by_category.csv", "analysis.json"):
        assert (out / f).is_file(), f
    assert not (out / "kernel_summary.csv").exists()
    # TraceLens's exact columns; no CPU-only columns or notes in the CSVs
    assert _header(out / "gpu_timeline.csv") == TIMELINE_COLUMNS == ["type", "time ms", "percent"]
    assert _header(out / "ops_summary.csv") == OPS_SUMMARY_COLUMNS
    assert _header(out / "ops_summary_by_category.csv") == BY_CATEGORY_COLUMNS
    if REF.is_dir():
        ref = REF / "mi300" / "resnet_act_checkpoint_perf_report_csvs"
        for f in ("gpu_timeline.csv", "ops_summary.csv", "ops_summary_by_category.csv"):
            assert _header(out / f) == _header(ref / f), f
    rows = _rows(out / "gpu_timeline.csv")
    assert [r["type"] for r in rows] == TIMELINE_ROWS
    ms = {r["type"]: float(r["time ms"]) for r in rows}
    assert ms == pytest.approx(res["timeline"])
    assert ms["total_comm_time"] > 0  # the gloo:* ranges
    assert ms["computation_time"] > 0
    assert 0 <= ms["exposed_comm_time"] <= ms["total_comm_time"] + 1e-9
    assert ms["total_memcpy_time"] == 0 and ms["exposed_memcpy_time"] == 0
    assert ms["computation_time"] + ms["exposed_comm_time"] + ms["idle_time"] == pytest.approx(ms["total_time"])
    assert ms["busy_time"] <= ms["total_time"]
    assert float(rows[TIMELINE_ROWS.index("total_time")]["percent"]) == 100.0
    # ops: real compute ops, not the collective stubs
    ops = _rows(out / "ops_summary.csv")
    names = {r["name"] for r in ops}
    assert "aten::mm" in names
    assert not any(n.startswith("c10d::") for n in names)
    mm = next(r for r in ops if r["name"] == "aten::mm")
    assert mm["Categories"] == "['GEMM']"
    assert float(ops[-1]["Cumulative Percentage (%)"]) == pytest.approx(100.0)
    cats = {r["op category"] for r in _rows(out / "ops_summary_by_category.csv")}
    assert "GEMM" in cats
    # analysis.json
    on_disk = json.loads((out / "analysis.json").read_text())
    assert on_disk == res
    assert on_disk.pop("perf_sheets") == {}  # perf-model sheets need GPU kernels
    assert set(on_disk) == {
        "schema",
        "trace",
        "device",
        "rank",
        "steps",
        "timeline",
        "timeline_percent",
        "top_ops",
        "categories",
        "regions",
        "gemm",
        "notes",
        # the "what's left" keys (issue 26)
        "step_regions",
        "step_regions_outside_ms_per_step",
        "idle_breakdown",
        "op_origins",
        "headroom",
        "mean_step_ms",
        "roofline_share",
        "roofline_device",
        "shape_rates",  # issue 61: the GEMM list's rates per shape, no device peak on a CPU trace
        "gate",  # the trace gate (issue 61): a PyTorch trace, judged by format: fit
    }
    rates = on_disk["shape_rates"]
    assert rates["device"] is None and rates["device_from"] == "cpu" and rates["attention"] == []
    assert [g["time_ms"] for g in rates["gemm"]] == [g["time_ms"] for g in on_disk["gemm"]]
    assert all(g["tflops"] > 0 and g["pct_of_peak_tflops"] is None for g in rates["gemm"])
    assert on_disk["gate"]["fit"] is True and on_disk["gate"]["host_ops"] > 0
    # GEMM rates: CPU-only traces time each GEMM op by its own duration; no GEMM.csv
    # (TraceLens does not run on traces without GPU kernels)
    assert not (out / "GEMM.csv").exists()
    mm_rates = [g for g in on_disk["gemm"] if g["name"] == "aten::mm"]
    assert mm_rates, on_disk["gemm"]
    for g in mm_rates:
        assert g["M"] > 0 and g["N"] > 0 and g["K"] > 0 and g["count"] >= 1
        assert g["time_ms"] > 0 and g["tflops_mean"] > 0
        assert g["dtype"] == "float"
    assert any("GEMM rates" in n for n in on_disk["notes"])
    assert set(res["timeline"]) == set(TIMELINE_ROWS) == set(res["timeline_percent"])
    assert res["timeline_percent"]["total_time"] == pytest.approx(100.0)
    for r in REGIONS:
        assert res["regions"].get(r, 0) > 0, r
    assert not any(k.startswith(("ProfilerStep#", "gloo:")) for k in res["regions"])
    assert 0 < len(res["top_ops"]) <= 10
    assert {"name", "time_ms", "percent", "count"} == set(res["top_ops"][0])
    assert res["top_ops"][0]["time_ms"] >= res["top_ops"][-1]["time_ms"]


def test_cpu_traces_via_analyze_paths(cpu_traces, tmp_path, capsys):
    assert analyze_paths(cpu_traces, tmp_path, jobs=2) == 0
    for rank in (0, 1):
        d = tmp_path / f"cpu_proxy-rank[{rank}]"
        res = json.loads((d / "analysis.json").read_text())
        assert res["rank"] == rank and res["device"] == "cpu"
    assert "error" not in capsys.readouterr().err
