"""The "what's left" reports (issue 26), every figure redone by hand on small synthetic traces:
the idle split (GPU by HTA's rules, CPU by collective), step regions, op origins (AccumulateGrad),
the roofline and recoverable time, and the ranked headroom rows."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from testkit.results import typed
from traceladder.analysis.analyzers.trace import analyze_trace, read_trace
from traceladder.core.documents import TraceAnalysis
from traceladder.analysis.model.table import Table
from traceladder.analysis.perf_model.device_peaks import PEAKS, device_from_trace, find_device
from traceladder.analysis.reports import whats_left_targets as targets
from traceladder.analysis.reports import ops_summary as ops
from traceladder.analysis.reports.gpu_timeline import cpu_selection
from traceladder.analysis.reports.idle_breakdown import cpu_idle, gpu_idle
from traceladder.analysis.reports.op_origins import op_origins
from traceladder.analysis.reports.roofline import roofline
from traceladder.analysis.reports.step_regions import step_regions

ACC = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"


def _x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def _write(path: Path, events: list[dict], **top) -> Path:
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, **top}))
    return path


def _gpu_trace(tmp_path: Path) -> Path:
    """Stream 7: K1 [101,110] after rounding, K2 [112,117] launched at 111 (after K1's end:
    host_wait 2), K3 [130,135] launched early (kernel_wait 13), K4 [200,210] (other 65), and K7
    [400,405], launched at 260 in the last step (host_wait 190 only with the last step kept).
    Stream 9: K5 [300,305], K6 [306,307] (kernel_wait 1)."""
    steps = [
        _x("user_annotation", "ProfilerStep#1", 90, 60),
        _x("user_annotation", "ProfilerStep#2", 150, 100),
        _x("user_annotation", "ProfilerStep#3", 250, 200),
    ]
    launches = [(1, 95), (2, 111), (3, 100), (4, 101), (5, 102), (6, 103), (7, 260)]
    kernels = [  # (corr, stream, ts, dur)
        (1, 7, 100.4, 10.2),
        (2, 7, 112, 5),
        (3, 7, 130, 5),
        (4, 7, 200, 10),
        (5, 9, 300, 5),
        (6, 9, 305.5, 1),
        (7, 7, 400, 5),
    ]
    ev = steps + [_x("cuda_runtime", "cudaLaunchKernel", ts, 0.5, correlation=c) for c, ts in launches]
    ev += [_x("kernel", f"k{c}", ts, d, pid=2, tid=s, correlation=c, stream=s) for c, s, ts, d in kernels]
    return _write(tmp_path / "gpu.json", ev, deviceProperties=[{"id": 0, "name": "AMD Instinct MI300X VF"}])


@pytest.mark.parametrize("include_last", [False, True])
def test_gpu_idle_split_by_hand(tmp_path: Path, include_last: bool) -> None:
    rows = gpu_idle(read_trace(_gpu_trace(tmp_path)), 0, include_last)
    got = {(r[1], r[2]): (r[3], r[4]) for r in rows}
    host = 2 + (190 if include_last else 0)
    total7 = host + 13 + 65
    assert got == {
        (7, "host_wait"): (host, pytest.approx(host / total7)),
        (7, "kernel_wait"): (13, pytest.approx(13 / total7)),
        (7, "other"): (65, pytest.approx(65 / total7)),
        (9, "kernel_wait"): (1, 1.0),
        (9, "other"): (0, 0.0),
    }
    assert [r[1] for r in rows] == [7, 7, 7, 9, 9]  # streams in order of first event, categories sorted


def _cpu_trace(tmp_path: Path) -> Path:
    """Main thread (pid 1, tid 1), one step [0,100]: ops [0,20] mm, [30,50] mul > add_ [35,40],
    AccumulateGrad [60,75] > its op [61,74] > add_ [62,72], [80,100] div. gloo ranges of pid 1
    on tid 2: [25,40], [55,70]; pid 2's gloo range [20,30] is another rank's and does not count.
    Ranges: moe_experts [29,51], optimizer_step [79,101]."""
    dims = [[4, 64, 32], [4, 64, 32], []]
    ev = [
        _x("user_annotation", "ProfilerStep#1", 0, 100),
        _x("cpu_op", "aten::mm", 0, 20),
        _x("user_annotation", "moe_experts", 29, 22),
        _x("cpu_op", "aten::mul", 30, 20),
        _x("cpu_op", "aten::add_", 35, 5, **{"Input Dims": [[8, 8], [8, 8], []]}),
        _x("cpu_op", ACC, 60, 15),
        _x("cpu_op", "torch::autograd::AccumulateGrad", 61, 13),
        _x("cpu_op", "aten::add_", 62, 10, **{"Input Dims": dims}),
        _x("user_annotation", "optimizer_step", 79, 22),
        _x("cpu_op", "aten::div", 80, 20),
        _x("user_annotation", "gloo:all_reduce", 25, 15, tid=2),
        _x("user_annotation", "gloo:all_to_all", 55, 15, tid=2),
        _x("user_annotation", "gloo:all_reduce", 20, 10, pid=2, tid=3),
    ]
    return _write(tmp_path / "cpu.json", ev)


def test_cpu_idle_regions_and_origins_by_hand(tmp_path: Path) -> None:
    t = read_trace(_cpu_trace(tmp_path))
    sel = cpu_selection(t)
    # idle: [20,30] [50,60] [75,80] = 25; under pid 1's gloo ranges: [25,30] + [55,60] = 10
    idle = {r[2]: (r[1], r[3], r[4]) for r in cpu_idle(t, sel, 0)}
    assert idle == {"collective_wait": (1, 10.0, 0.4), "host_gap": (1, 15.0, 0.6)}

    launchers = ops.cpu_launchers(t, sel)
    # self times: mm 20, mul 15, add_ 5, AccumulateGrad node 2, its op 3, add_ 10, div 20 = 75
    regions = {r["region"]: r for r in step_regions(t, launchers, 1)}
    assert regions["moe_experts"]["ms_per_step"] == pytest.approx(0.020)  # mul 15 + add_ 5
    assert regions["moe_experts"]["pct_of_direct_kernel_time"] == pytest.approx(20 / 75 * 100)
    assert regions["optimizer"]["ms_per_step"] == pytest.approx(0.020)
    assert regions["optimizer"]["matched_names"] == "optimizer_step"
    assert regions["attention"]["ms_per_step"] == 0 and regions["attention"]["matched_names"] == ""

    rows = op_origins(t, launchers, ["aten::add_"], 1)
    by_link = {r["link"]: r for r in rows if r["op"] == "aten::add_"}
    assert by_link["accumulate_grad"]["parent"] == "AccumulateGrad"
    assert by_link["accumulate_grad"]["pct_of_op"] == pytest.approx(10 / 15 * 100)
    assert by_link["accumulate_grad"]["shapes"] == "[4, 64, 32] x1/step"
    assert by_link["host"]["parent"] == "aten::mul" and by_link["host"]["ms_per_step"] == pytest.approx(0.005)
    # ops under an AccumulateGrad node join the top ops on their own
    assert {r["op"] for r in op_origins(t, launchers, ["aten::mm"], 1)} >= {"aten::mm", "aten::add_"}


def _gemm_sheet() -> Table:
    cols = ["name", "GFLOPS_first", "Data Moved (MB)_first", "name_count", "Kernel Time (µs)_sum", "Compute Spec"]
    return Table(
        cols, [["aten::mm", 2.0, 1.0, 10, 100.0, "matrix_bf16"], ["aten::mul", 0.001, 8.0, 4, 20.0, "vector_bf16"]]
    )


def test_roofline_and_recoverable_by_hand() -> None:
    peak = PEAKS["MI300X"]
    rows = roofline({"GEMM": _gemm_sheet()}, [("aten::mm", 100.0), ("flash_fwd", 50.0)], peak, steps=2, share=0.7)
    mm, mul, flash = rows  # ordered by kernel time; GEMM sheet row "aten::mul" is a second op
    t_f = 2e10 / (1307.4e12) * 1e6  # µs at peak for 10 calls of 2 GFLOP
    t_b = 10 * 2**20 / 5.3e12 * 1e6
    assert mm["achieved_tflops"] == pytest.approx(2e10 / 100e-6 / 1e12)
    assert mm["achieved_tbps"] == pytest.approx(10 * 2**20 / 100e-6 / 1e12)
    assert mm["bound"] == "compute" and mm["pct_of_bound"] == pytest.approx(max(t_f, t_b))
    assert mm["recoverable_ms"] == pytest.approx((100 - t_f / 0.7) / 1e3 / 2)
    mul_b = 4 * 8 * 2**20 / 5.3e12 * 1e6
    assert mul["bound"] == "memory" and mul["pct_of_bound"] == pytest.approx(mul_b / 20 * 100)
    assert mul["recoverable_ms"] == pytest.approx(max(0.0, 20 - mul_b / 0.7) / 1e3 / 2)
    assert flash["bound"] == "no model" and flash["recoverable_ms"] is None
    assert flash["ms_per_step"] == pytest.approx(0.025)
    unknown = roofline({"GEMM": _gemm_sheet()}, [], None, steps=2)
    assert all(r["bound"] is None and r["recoverable_ms"] is None for r in unknown)


def test_headroom_ranks_recoverable_first() -> None:
    roof = roofline({"GEMM": _gemm_sheet()}, [("aten::mm", 100.0), ("flash_fwd", 500.0)], PEAKS["MI300X"], 2)
    regions = [{"region": "optimizer", "ms_per_step": 0.3, "pct_of_direct_kernel_time": 10.0, "matched_names": "x"}]
    idle_rows = [[0, 7, "host_wait", 100.0, 0.5], [0, 9, "host_wait", 60.0, 1.0], [0, 7, "other", 100.0, 0.5]]
    rows = targets.ranked_targets(
        steps=2,
        step_ms=1.0,
        device="gpu",
        roofline_rows=roof,
        top_ops=[],
        regions=regions,
        idle_rows=idle_rows,
        exposed_comm_ms=0.1,
        origins=[],
        device_name="MI300X",
        share=0.7,
    )
    assert [r["target"] for r in rows[:2]] == ["aten::mm", "aten::mul"]  # recoverable, by size
    rest = rows[2:]
    assert all(r["recoverable_ms"] is None for r in rest)
    assert [r["ms_per_step"] for r in rest] == sorted((r["ms_per_step"] for r in rest), reverse=True)
    idle = {r["target"]: r for r in rows if r["kind"] == "idle"}
    assert idle["host_wait"]["ms_per_step"] == pytest.approx(0.08)  # 160 µs over 2 steps
    assert idle["host_wait"]["pct_of_step"] == pytest.approx(8.0)
    flash = next(r for r in rows if r["target"] == "flash_fwd")
    assert flash["recoverable_ms"] is None and "no perf model" in flash["why"]
    assert "ms per step" in flash["sentence"] and "over the 2-step window" in flash["sentence"]


def test_device_lookup() -> None:
    assert find_device("AMD Instinct MI300X VF").name == "MI300X"
    assert find_device("AMD Instinct MI325X").name == "MI325X"
    assert find_device("NVIDIA H100 80GB HBM3").name == "H100"
    peak, how = device_from_trace({"deviceProperties": [{"name": "AMD Instinct MI250X"}]}, "mi350x")
    assert peak is PEAKS["MI350X"] and "cluster" in how
    peak, how = device_from_trace({}, None)
    assert peak is None and how.startswith("unknown: no peak")
    for p in PEAKS.values():
        assert p.source.count("https://") == 1 and len(p.source_date) == 7


def test_analyze_writes_the_reports(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = analyze_trace(_gpu_trace(tmp_path), out)
    for name in ("idle_breakdown", "step_regions", "op_origins", "roofline", "headroom"):
        with open(out / f"{name}.csv", newline="") as fh:
            assert next(csv.reader(fh))  # a header at least
    assert res["roofline_device"] == "MI300X"
    assert {r["idle_category"] for r in res["idle_breakdown"]} == {"host_wait", "kernel_wait", "other"}
    assert [r["region"] for r in res["step_regions"]][0] == "optimizer"
    cpu = analyze_trace(_cpu_trace(tmp_path), tmp_path / "cpu")
    assert not (tmp_path / "cpu" / "roofline.csv").exists()
    kinds = {r["kind"] for r in cpu["headroom"]}
    assert kinds == {"op", "region", "idle", "comm", "origin"}
    # on a CPU trace collective_wait is the comm row's time: one row, not two
    assert [r["target"] for r in cpu["headroom"] if r["kind"] == "idle"] == ["host_gap"]
    assert any("no device peak" in n for n in cpu["notes"])


# ---- the summary's "What's left" section -------------------------------------------------------
def _spec(rung: str, parent: str | None, switch: str | None, lens: str = "none", purpose: str = "measure") -> dict:
    return {"rung": rung, "parent": parent, "switch": switch, "lens": lens, "purpose": purpose, "repeat": 0}


SPECS = [
    _spec("baseline", None, None),
    _spec("fusions", "baseline", "fusions"),
    _spec("recompute_off", "fusions", "recompute"),
    _spec("gbs16", "recompute_off", "global_batch"),
    _spec("gbs32", "gbs16", "global_batch"),  # a longer chain, but of batch rungs
    _spec("fusions", "baseline", "fusions", "torch_rank0", "lens"),
]


def _doc(analysis: dict) -> TraceAnalysis:
    """A hand-built analysis as the summary reads it (analysis.json's class)."""
    return TraceAnalysis.from_dict({"schema": 1, "trace": "rank0.pt.trace.json.gz", **analysis})


def _analysis(device: str = "cpu") -> dict:
    rows = [
        {
            "kind": "op",
            "target": f"op{i}",
            "ms_per_step": 10.0 - i,
            "pct_of_step": 5.0,
            "why": "w",
            "recoverable_ms": None,
            "sentence": f"s{i}.",
        }
        for i in range(7)
    ]
    rows[6]["kind"] = "region"  # a kind the top 5 lacks
    return {"rank": 0, "device": device, "steps": 2, "mean_step_ms": 200.0, "headroom": rows, "roofline_device": None}


FUSIONS_LENS_RESULT = {
    "fusions.torch_rank0.p0": {
        "rung_id": "fusions.torch_rank0.p0",
        "rung": "fusions",
        "lens": "torch_rank0",
        "repeat": 0,
        "status": "ok",
        "traces": ["k/rank0.json.gz"],
    }
}


def test_final_rung_is_the_end_of_the_longest_non_batch_chain() -> None:
    from traceladder.summary.whats_left import final_rung

    assert final_rung(SPECS) == "recompute_off"
    assert final_rung([_spec("a", None, None), _spec("b", "a", "x"), _spec("c", "a", "y")]) == "b"


def test_section_covers_lens_and_final_rung() -> None:
    from traceladder.summary.render.html import to_html
    from traceladder.summary.render.markdown import to_markdown
    from traceladder.summary.whats_left import OTHER_KINDS_HEADING, whats_left_section, markdown

    results = FUSIONS_LENS_RESULT
    section = whats_left_section({"specs": SPECS}, typed(results), {"k/rank0.json.gz": _doc(_analysis())}, "fusions")
    assert [(e["rung"], e["role"]) for e in section] == [("fusions", "lens rung"), ("recompute_off", "final rung")]
    lens, final = section
    assert [t["target"] for t in lens["targets"]] == ["op0", "op1", "op2", "op3", "op4"]  # the top 5
    assert set(lens["targets"][0]) == {
        "kind",
        "target",
        "ms_per_step",
        "pct_of_step",
        "why",
        "recoverable_ms",
        "sentence",
    }
    assert "no device peak" in lens["note"]
    assert final["targets"] == [] and "no analysed rank-0 torch trace" in final["note"]
    assert [t["target"] for t in lens["other_kinds"]] == ["op6"]  # the region row, beyond the top 5
    md = "\n".join(markdown(section))
    assert "## What's left" in md and "| 1 | op | op0 | 10.00 | 5.0 | - |" in md and "5. s4." in md
    assert f"{OTHER_KINDS_HEADING}\n- s6." in md
    # the lens rung is the final rung: one entry
    one = whats_left_section({"specs": SPECS}, typed(results), {"k/rank0.json.gz": _doc(_analysis())}, "recompute_off")
    assert [(e["rung"], e["role"]) for e in one] == [("recompute_off", "lens rung and final rung")]
    summary = {
        "schema": 2,  # as build_summary writes it
        "ladder": "l",
        "run_id": "r",
        "rungs": [],
        "lenses": [],
        "findings": [],
        "failures": [],
        "failed_rungs": [],
        "headroom": section,
    }
    assert "## What's left" in to_markdown(summary)
    html = to_html(summary, {})
    assert 'id="whats-left"' in html and "s4." in html and "no analysed rank-0 torch trace" in html
    # the Ladders page's macro, in the page's own environment
    from traceladder.ui.views import page_templates

    page = page_templates().get_template("_macros.html").module.summary_body(summary, "", {})
    assert 'id="whats-left"' in str(page) and "s4." in str(page) and "s6." in str(page)


def test_stragglers_per_step_by_hand() -> None:
    import pandas as pd

    from traceladder.analysis.reports.stragglers_per_step import stragglers_per_step

    # step 1 [0,100): c0 ranks start 10 / 14 (rank 1 late, rank 0 waits 4); c1 at 50 / 40 (rank 0
    # late by 10: the step's worst). step 2 [100,200): c2 at 120 / 120.5.
    rows = [
        ("0", 0, 10.0, "allreduce"),
        ("0", 1, 14.0, "allreduce"),
        ("1", 0, 50.0, "all_to_all"),
        ("1", 1, 40.0, "all_to_all"),
        ("2", 0, 120.0, "allreduce"),
        ("2", 1, 120.5, "allreduce"),
    ]
    df = pd.DataFrame(rows, columns=["collective_id", "rank", "ts", "Collective name"])
    steps = [("ProfilerStep#1", 0.0, 100.0), ("ProfilerStep#2", 100.0, 200.0)]
    got = stragglers_per_step(df, {0: {"steps": steps}, 1: {"steps": steps}})
    assert got == [
        {
            "step": "ProfilerStep#1",
            "collective": "all_to_all",
            "seq": 1,
            "last_rank": 0,
            "wait_ms_max": pytest.approx(0.010),
            "wait_ms_per_rank": "r0:0.000; r1:0.010",
            "step_wait_ms": pytest.approx(0.014),
        },
        {
            "step": "ProfilerStep#2",
            "collective": "allreduce",
            "seq": 2,
            "last_rank": 1,
            "wait_ms_max": pytest.approx(0.0005),
            "wait_ms_per_rank": "r0:0.001; r1:0.000",
            "step_wait_ms": pytest.approx(0.0005),
        },
    ]


def test_cli_roofline_share_and_gpu_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from traceladder.cli.main import main

    trace = _gpu_trace(tmp_path)
    assert main(["analyze", str(trace), "--out", str(tmp_path / "o"), "--roofline-share", "1.5"]) == 2
    assert capsys.readouterr().err.strip() == "error: --roofline-share must be in (0, 1], got 1.5"
    assert (
        main(["analyze", str(trace), "--out", str(tmp_path / "o"), "--roofline-share", "0.5", "--gpu-model", "mi355x"])
        == 0
    )
    res = json.loads((tmp_path / "o" / "gpu" / "analysis.json").read_text())
    assert res["roofline_share"] == 0.5 and res["roofline_device"] == "MI300X"  # the trace's own name wins


def test_section_prefers_the_lens_run_over_the_one_step_profile_run() -> None:
    from traceladder.summary.whats_left import whats_left_section

    specs = [
        {**_spec("a", None, None, "torch_rank0", "profile"), "rung_id": "a.torch_rank0.p0"},
        {**_spec("a", None, None, "torch_rank0", "lens"), "rung_id": "a.torch_rank0.l1", "repeat": 1},
    ]
    results = {
        s["rung_id"]: {**s, "status": "ok", "traces": [s["rung_id"] + "/t.json.gz"]}
        for s in specs  # the profile run comes first by repeat
    }
    analyses = {
        k: _doc({**_analysis(), "steps": 1 if ".p0" in k else 2}) for r in results.values() for k in r["traces"]
    }
    (entry,) = whats_left_section({"specs": specs}, typed(results), analyses, "a")
    assert entry["trace"] == "a.torch_rank0.l1/t.json.gz" and entry["steps"] == 2


def test_backward_work_joins_its_forward_region_on_one_thread(tmp_path: Path) -> None:
    """CPU autograd runs on the calling thread: the backward node of a forward op inside
    ``attention`` (same Sequence number) counts in ``attention``, and its op's origin names both."""
    ev = [
        _x("user_annotation", "ProfilerStep#1", 0, 100),
        _x("user_annotation", "attention", 0, 10),
        _x("cpu_op", "aten::bmm", 1, 5, **{"Sequence number": 7}),
        _x("cpu_op", "aten::mm", 12, 4, **{"Sequence number": 8}),  # outside the range
        _x("cpu_op", "autograd::engine::evaluate_function: BmmBackward0", 20, 10, **{"Sequence number": 7}),
        _x("cpu_op", "aten::bmm", 21, 8),
        _x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 40, 5, **{"Sequence number": 8}),
        _x("cpu_op", "aten::mm", 41, 3),
    ]
    t = read_trace(_write(tmp_path / "bwd.json", ev))
    launchers = ops.cpu_launchers(t, cpu_selection(t))
    # self times: bmm 5, mm 4, BmmBackward0 node 2, its bmm 8, MmBackward0 node 2, its mm 3 = 24
    attention = next(r for r in step_regions(t, launchers, 1) if r["region"] == "attention")
    assert attention["ms_per_step"] == pytest.approx((5 + 2 + 8) / 1e3)
    assert attention["pct_of_direct_kernel_time"] == pytest.approx(15 / 24 * 100)
    rows = {(r["parent"], r["link"]): r for r in op_origins(t, launchers, ["aten::bmm"], 1)}
    assert rows[("BmmBackward0 (of aten::bmm)", "backward")]["ms_per_step"] == pytest.approx(0.008)
    assert rows[("(top level)", "forward")]["ms_per_step"] == pytest.approx(0.005)


def test_top_rows_keep_one_row_of_every_kind() -> None:
    from traceladder.analysis.reports.whats_left import top_rows

    rows = [{"kind": k, "i": i, "target": "t"} for i, k in enumerate(["op", "op", "op", "idle", "origin", "op"])]
    assert [r["i"] for r in top_rows(rows, 2)] == [0, 1, 3, 4]
    # and the first AccumulateGrad origin, though another origin row already stands for the kind
    rows += [
        {"kind": "origin", "i": 6, "target": "aten::add_ under AccumulateGrad"},
        {"kind": "origin", "i": 7, "target": "detach under AccumulateGrad"},
    ]
    assert [r["i"] for r in top_rows(rows, 2)] == [0, 1, 3, 4, 6]


def test_the_accumulate_grad_origin_shows_wherever_it_ranks() -> None:
    # The seed's largest leftover is aten::add_ under AccumulateGrad: the summary names it even
    # when a larger origin row already stands for the kind.
    from traceladder.summary.whats_left import whats_left_section

    analysis = _analysis()
    row = dict(analysis["headroom"][0], kind="origin", recoverable_ms=None)
    analysis["headroom"] += [
        dict(row, target="aten::bmm under BmmBackward0 (of aten::bmm)", ms_per_step=3.0, sentence="bmm."),
        dict(row, target="aten::mm under MmBackward0 (of aten::mm)", ms_per_step=2.0, sentence="mm."),
        dict(row, target="aten::add_ under AccumulateGrad", ms_per_step=0.7, sentence="add."),
    ]
    results = FUSIONS_LENS_RESULT
    lens = whats_left_section({"specs": SPECS}, typed(results), {"k/rank0.json.gz": _doc(analysis)}, "fusions")[0]
    assert [t["target"] for t in lens["other_kinds"]] == [
        "op6",
        "aten::bmm under BmmBackward0 (of aten::bmm)",
        "aten::add_ under AccumulateGrad",
    ]
