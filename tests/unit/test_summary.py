"""Summary figures: intervals, the "intervals separate" rule, renderers (week over week: test_history.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from traceladder.summary.build import build_summary
from traceladder.summary.charts import render_charts
from traceladder.summary.html import to_html
from traceladder.summary.render import to_markdown
from traceladder.summary.stats import estimate, ratio, separated

T_975_2 = 4.302652729749464  # Student t, 97.5th percentile, 2 degrees of freedom


def test_estimate_is_a_student_t_interval() -> None:
    e = estimate([10.0, 12.0, 14.0])
    assert e is not None and e.n == 3 and e.mean == pytest.approx(12.0)
    assert e.half_width == pytest.approx(T_975_2 * 2.0 / math.sqrt(3))
    single = estimate([7.0])
    assert single is not None and single.half_width is None and single.n == 1
    assert estimate([]) is None


def test_separation_and_ratio() -> None:
    a, b, c = estimate([10.0, 10.1, 9.9]), estimate([12.0, 12.1, 11.9]), estimate([10.0, 11.0, 12.0])
    assert a and b and c
    assert separated(a, b) and not separated(a, c)
    r = ratio(b, a)
    assert r.mean == pytest.approx(1.2) and r.half_width is not None and r.half_width > 0


def _result(rung: str, lens: str, k: int, step: float, tokens: float, status: str = "ok", parent: str | None = None,
            switch: str | None = None, value: Any = None, traces: list[str] | None = None) -> dict[str, Any]:
    return {"rung_id": f"{rung}.{lens}.r{k}", "rung": rung, "lens": lens, "repeat": k, "status": status, "parent": parent,
            "switch": switch, "value": value, "step_ms": step if status == "ok" else None,
            "tokens_per_sec_per_gpu": tokens if status == "ok" else None, "peak_mem_gb": 1.0 + k / 10,
            "traces": traces or [], "error": None if status == "ok" else "workload exited 1",
            "provenance": {"config_hash": "abc", "image": "img", "tools": {"torch": "2.13.0"}}}


def make_run(run_id: str = "r1", scale: float = 1.0, fail_fusions: bool = False) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    rungs = [("baseline", None, None, None, 500.0), ("fusions", "baseline", "fusions", True, 340.0),
             ("deepep", "fusions", "deepep", True, 341.0), ("gbs16", "deepep", "global_batch", 16, 600.0)]
    specs, results = [], {}
    for rung, parent, switch, value, step in rungs:
        for k in range(3):
            spec = {"rung": rung, "parent": parent, "switch": switch, "value": value, "lens": "none", "repeat": k,
                    "rung_id": f"{rung}.none.r{k}", "storage_prefix": "traceladder"}
            specs.append(spec)
            tokens = 4096 * (16 if rung == "gbs16" else 8) / 8 / (step * scale / 1000)
            status = "failed" if fail_fusions and rung == "fusions" and k == 1 else "ok"
            results[spec["rung_id"]] = _result(rung, "none", k, step * scale + k * 2.0 - 2.0, tokens, status, parent, switch, value)
    for k in range(3):
        specs.append({"rung": "deepep", "parent": "fusions", "switch": "deepep", "value": True, "lens": "torch_rank0",
                      "repeat": k, "rung_id": f"deepep.torch_rank0.r{k}", "storage_prefix": "traceladder"})
        results[f"deepep.torch_rank0.r{k}"] = _result("deepep", "torch_rank0", k, 372.0 + k, 100.0, parent="fusions",
                                                      switch="deepep", value=True, traces=[f"t/deepep.torch_rank0.r{k}/traces/rank0.pt.trace.json.gz"])
    return {"ladder": "mini", "run_id": run_id, "specs": specs}, results


def test_ladder_table_intervals_and_noise() -> None:
    plan, results = make_run()
    analysis = {"rank": 0, "device": "cpu", "timeline": {"computation_time": 80.0, "exposed_comm_time": 5.0, "idle_time": 15.0, "total_time": 100.0},
                "timeline_percent": {"computation_time": 80.0, "exposed_comm_time": 5.0, "idle_time": 15.0, "total_time": 100.0},
                "top_ops": [{"name": "aten::mm", "time_ms": 30.0, "percent": 37.5, "count": 12}], "categories": [], "regions": {"moe_experts": 20.0}}
    summary = build_summary(plan, results, {"t/deepep.torch_rank0.r0/traces/rank0.pt.trace.json.gz": analysis})
    rows = {r["rung"]: r for r in summary["rungs"]}
    assert rows["fusions"]["ms_removed"]["value"] == pytest.approx(160.0) and rows["fusions"]["ms_removed"]["significant"]
    assert rows["deepep"]["ms_removed"]["significant"] is False  # 340 vs 341, spread ±2: within noise
    assert rows["gbs16"]["kind"] == "batch" and rows["gbs16"]["ms_removed"] is None and rows["gbs16"]["tokens_gained"]["value"] > 0
    assert rows["baseline"]["step_ms"]["ci95"] == pytest.approx(T_975_2 * 2.0 / math.sqrt(3))
    lens = summary["lenses"][0]
    assert lens["lens"] == "torch_rank0" and lens["overhead_ratio"]["mean"] == pytest.approx(373.0 / 341.0)
    assert summary["profile"]["timeline_percent"]["exposed_comm_time"] == 5.0
    text = "\n".join(summary["findings"])
    assert "fusions (fusions=True) removed 160.0 ms/step" in text and "Within noise against their parent: deepep" in text
    assert "exposed communication 5.0%" in text

    md = to_markdown(summary)
    assert "| fusions | fusions=True | 340.0 ± " in md and "within noise" in md
    charts = render_charts(summary)
    assert set(charts) == {"waterfall.png", "lens_overhead.png"} and all(p[:8] == b"\x89PNG\r\n\x1a\n" for p in charts.values())
    html = to_html(summary, charts)
    assert 'id="ladder-table"' in html and html.count("data:image/png;base64,") == 2


def test_failed_rung_is_marked_not_hidden() -> None:
    plan, results = make_run(fail_fusions=True)
    summary = build_summary(plan, results, {})
    assert summary["failed_rungs"] == ["fusions.none.r1"]
    row = next(r for r in summary["rungs"] if r["rung"] == "fusions")
    assert row["ok"] == 2 and row["runs"] == 3 and row["step_ms"]["n"] == 2
    assert "FAILED" in to_markdown(summary) and "did not finish ok: fusions.none.r1" in "\n".join(summary["findings"])
