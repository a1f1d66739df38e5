"""Issue 61, items 3 and 4 on real traces: the roofline takes every op that
``unified_perf_summary.csv`` models, and the GEMM and attention rates per shape equal the
sheets' (``GEMM.csv``, ``SDPA_fwd.csv``) with their share of the device the trace names."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from tests.conformance import TRACES, ref_dir
from traceladder.analysis.analyzers.trace import analyze_trace
from traceladder.analysis.perf_model.device_peaks import PEAKS
from traceladder.analysis.reports.roofline import no_model_reason

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "tracelens"
TRITON = FIXTURES / "triton_compiled_ops" / "trace.json.gz"
# the device each reference trace names (deviceProperties); the MI250's "AMD Radeon Graphics"
# is in no peak table
DEVICE = {"mi300": "MI300X", "h100": "H100", "mi250": None}


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: f"{p.parent.name}/{p.name[:30]}")
def test_rates_per_shape_equal_the_sheets_on_the_reference_traces(trace: Path, tmp_path: Path) -> None:
    res = analyze_trace(trace, tmp_path)
    rates = res["shape_rates"]
    want = DEVICE[trace.parent.name]
    assert rates["device"] == want
    assert rates["device_from"] == ("trace" if want else "unknown")
    ref = ref_dir(trace)
    gemm = _rows(ref / "GEMM.csv")
    # every GEMM shape (top 10 by time) is a GEMM.csv row, with its rates within 1e-6 relative
    assert len(rates["gemm"]) == min(10, len(gemm)) > 0
    for g in rates["gemm"]:
        match = [
            r
            for r in gemm
            if r["name"] == g["op"] and f"M={r['param: M']} N={r['param: N']} K={r['param: K']}" in g["shape"]
        ]
        assert match, g
        r = match[0]
        assert _rel(g["tflops"], float(r["TFLOPS/s_mean"])) <= 1e-6
        assert _rel(g["tbps"], float(r["TB/s_mean"])) <= 1e-6
        assert g["calls"] == int(r["name_count"])
        if want:
            peak = PEAKS[want].fp8_tflops if "fp8" in r["Compute Spec"] else PEAKS[want].bf16_tflops
            assert g["pct_of_peak_tflops"] == pytest.approx(float(r["TFLOPS/s_mean"]) / peak * 100, rel=1e-6)
            assert g["pct_of_peak_tbps"] == pytest.approx(float(r["TB/s_mean"]) / PEAKS[want].hbm_tbps * 100, rel=1e-6)
        else:
            assert g["pct_of_peak_tflops"] is None and g["pct_of_peak_tbps"] is None
    times = [g["time_ms"] for g in rates["gemm"]]
    assert times == sorted(times, reverse=True)
    # the attention calls: the SDPA sheet's rows
    sdpa = ref / "SDPA_fwd.csv"
    if sdpa.exists():
        ref_sdpa = _rows(sdpa)
        assert len(rates["attention"]) == len(ref_sdpa)
        for a, r in zip(rates["attention"], sorted(ref_sdpa, key=lambda r: -float(r["Kernel Time (µs)_sum"]))):
            assert a["op"] == r["name"] and f"N_Q={r['param: N_Q']}" in a["shape"]
            assert _rel(a["tflops"], float(r["TFLOPS/s_mean"])) <= 1e-6
    else:
        assert rates["attention"] == []


def test_an_unnamed_device_falls_back_to_the_cluster(tmp_path: Path) -> None:
    mi250 = next(t for t in TRACES if t.parent.name == "mi250")
    rates = analyze_trace(mi250, tmp_path, gpu_model="mi350x")["shape_rates"]
    assert rates["device"] == "MI350X" and rates["device_from"] == "cluster" and "mi350x" in rates["device_note"]
    g = rates["gemm"][0]
    assert g["pct_of_peak_tflops"] == pytest.approx(g["tflops"] / PEAKS["MI350X"].bf16_tflops * 100)


def _modelled(unified: Path) -> set[str]:
    """The ops a unified_perf_summary.csv models with figures (kernel time, finite GFLOPS)."""
    out = set()
    for r in _rows(unified):
        if r["has_perf_model"] == "True" and r["GFLOPS"] and float(r["Kernel Time (µs)_sum"] or 0) > 0:
            if math.isfinite(float(r["GFLOPS"])):
                out.add(r["name"])
    return out


@pytest.mark.parametrize("trace", [*TRACES, TRITON], ids=lambda p: f"{p.parent.name}/{p.name[:30]}")
def test_the_roofline_takes_every_op_the_unified_summary_models(trace: Path, tmp_path: Path) -> None:
    # the Triton trace with unified_perf_summary.csv in the forked second process: its modelled
    # rows come back from there
    analyze_trace(trace, tmp_path, split=trace == TRITON, gpu_model="mi300x")
    assert (tmp_path / "unified_perf_summary.csv").exists()
    roof = {r["op"]: r for r in _rows(tmp_path / "roofline.csv")}
    ref = ref_dir(trace) if trace != TRITON else trace.parent
    want = _modelled(ref / "unified_perf_summary.csv")  # TraceLens's own file
    assert want and want <= set(roof), sorted(want - set(roof))
    for name in want:
        r = roof[name]
        assert r["bound"] in ("compute", "memory") and float(r["pct_of_bound"]) >= 0 and r["model"], r
    if trace == TRITON:  # the torch.compile Triton ops: from unified_perf_summary.csv, with figures
        triton = [n for n in want if n.startswith("triton_")]
        assert len(triton) >= 10
        for name in triton:
            assert roof[name]["model"] == "unified_perf_summary.csv" and roof[name]["category"] == "triton"
            assert float(roof[name]["ms_per_step"]) > 0
    # what's left's op rows carry the same figures: no Triton op is "no perf model"
    headroom = {r["target"]: r for r in _rows(tmp_path / "headroom.csv") if r["kind"] == "op"}
    assert not [n for n in want if n in headroom and "no perf model" in headroom[n]["why"]]


def test_no_model_reasons() -> None:
    assert "attention backend" in no_model_reason("primus::v4_attention_triton_v1")
    assert "triton_v1, gluon_v3 and turbo" in no_model_reason("GluonAttentionFunction")
    assert "hand-written Triton kernel" in no_model_reason("_fused_moe_triton_kernel")
    assert "no element counts" in no_model_reason("triton_poi_fused_add_mul_3")
    assert no_model_reason("aten::abs") == "no perf model for this op"


def test_the_summary_shows_the_rates_in_markdown_report_and_page(tmp_path: Path) -> None:
    """A real trace's analysis.json, read back as the summary reads it: its rates reach the
    What's-left entry, summary.md, report.html and the Ladders page, with the device named."""
    from traceladder.ui.views import page_templates

    from testkit.results import typed
    from tests.unit.analysis.reports.test_whats_left import FUSIONS_LENS_RESULT, SPECS
    from traceladder.core.documents import TraceAnalysis
    from traceladder.summary.render.html import to_html
    from traceladder.summary.render.markdown import to_markdown
    from traceladder.summary.whats_left import whats_left_section

    bert = next(t for t in TRACES if t.parent.name == "mi300" and "bert" in t.name)
    res = analyze_trace(bert, tmp_path)
    doc = TraceAnalysis.from_json((tmp_path / "analysis.json").read_text(), "analysis.json")
    section = whats_left_section({"specs": SPECS}, typed(FUSIONS_LENS_RESULT), {"k/rank0.json.gz": doc}, "fusions")
    rates = section[0]["rates"]
    assert rates["device"] == "MI300X" and len(rates["gemm"]) == 4 and len(rates["attention"]) == 1
    top = res["shape_rates"]["gemm"][0]
    cells = f"| {top['op']} | {top['shape']} | c10::BFloat16 | {top['calls']} | {top['ms_per_step']:.3f} | "
    cells += f"{top['tflops']:.2f} | {top['pct_of_peak_tflops']:.1f}% of BF16 |"
    summary = {
        "schema": 2,
        "ladder": "l",
        "run_id": "r",
        "rungs": [],
        "lenses": [],
        "findings": [],
        "failures": [],
        "failed_rungs": [],
        "headroom": section,
    }
    md = to_markdown(summary)
    assert "Top GEMM shapes by time:" in md and cells in md and "Top attention calls by time:" in md
    assert "Peak share of the MI300X, named by the trace's device properties" in md
    html = to_html(summary, {})
    assert "Top GEMM shapes by time:" in html and f"<td>{top['shape']}</td>" in html
    page = str(page_templates().get_template("_macros.html").module.summary_body(summary, "", {}))
    assert "Top attention calls by time:" in page and "MI300X" in page
    # the MI250 trace: the rates, and "unknown device" in place of a peak share
    mi250 = next(t for t in TRACES if t.parent.name == "mi250")
    analyze_trace(mi250, tmp_path / "mi250")
    doc = TraceAnalysis.from_json((tmp_path / "mi250" / "analysis.json").read_text(), "analysis.json")
    section = whats_left_section({"specs": SPECS}, typed(FUSIONS_LENS_RESULT), {"k/rank0.json.gz": doc}, "fusions")
    md = to_markdown({**summary, "headroom": section})
    assert "Peak share: unknown device" in md and "Top GEMM shapes by time:" in md
