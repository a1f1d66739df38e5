"""Summary figures: intervals, the block model's vs_parent (checked against the recipe in docs/statistics.md by
hand), renderers (week over week: tests/unit/stats/test_history.py)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats as scipy_stats

from testkit.results import plan_spec, typed, typed_run
from traceladder.core.documents import TraceAnalysis
from traceladder.stats.model import mad_factor
from traceladder.summary.build import build_summary
from traceladder.summary.render.charts import render_charts
from traceladder.summary.render.html import to_html
from traceladder.summary.render.markdown import to_markdown
from traceladder.stats.model import estimate, ratio

T_975_2 = 4.302652729749464  # Student t, 97.5th percentile, 2 degrees of freedom


def test_estimate_is_a_student_t_interval() -> None:
    e = estimate([10.0, 12.0, 14.0])
    assert e is not None and e.n == 3 and e.mean == pytest.approx(12.0)
    assert e.half_width == pytest.approx(T_975_2 * 2.0 / math.sqrt(3))
    single = estimate([7.0])
    assert single is not None and single.half_width is None and single.n == 1
    assert estimate([]) is None


def test_ratio() -> None:
    a, b = estimate([10.0, 10.1, 9.9]), estimate([12.0, 12.1, 11.9])
    assert a and b
    r = ratio(b, a)
    assert r.mean == pytest.approx(1.2) and r.half_width is not None and r.half_width > 0


# Run-to-run wobble of each (rung, repeat), not additive in block and rung, so the residual is real.
WOBBLE = {
    ("baseline", 0): -3.0,
    ("baseline", 1): 1.0,
    ("baseline", 2): 2.5,
    ("fusions", 0): 1.5,
    ("fusions", 1): -2.0,
    ("fusions", 2): 0.0,
    ("deepep", 0): -1.0,
    ("deepep", 1): 2.0,
    ("deepep", 2): -0.5,
    ("gbs16", 0): 2.0,
    ("gbs16", 1): -1.5,
    ("gbs16", 2): 0.5,
}


def _result(
    rung: str,
    lens: str,
    k: int,
    step: float,
    tokens: float,
    status: str = "ok",
    parent: str | None = None,
    switch: str | None = None,
    value: Any = None,
    traces: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "rung_id": f"{rung}.{lens}.r{k}",
        "rung": rung,
        "lens": lens,
        "repeat": k,
        "status": status,
        "parent": parent,
        "switch": switch,
        "value": value,
        "step_ms": step if status == "ok" else None,
        "step_ms_values": [step * f for f in (0.99, 1.0, 1.01, 1.0)] if status == "ok" else [],
        "tokens_per_sec_per_gpu": tokens if status == "ok" else None,
        "peak_mem_gb": 1.0 + k / 10,
        "traces": traces or [],
        "error": None if status == "ok" else "workload exited 1",
        "provenance": {"config_hash": "abc", "image": "img", "tools": {"torch": "2.13.0"}},
    }


RUNGS = [
    ("baseline", None, None, None, 500.0),
    ("fusions", "baseline", "fusions", True, 340.0),
    ("deepep", "fusions", "deepep", True, 341.0),
    ("gbs16", "deepep", "global_batch", 16, 600.0),
]


def make_run(
    run_id: str = "r1", scale: float = 1.0, fail_fusions: bool = False, repeats: int = 3
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    specs, results = [], {}
    for rung, parent, switch, value, step in RUNGS:
        for k in range(repeats):
            spec = plan_spec(rung, parent, switch, value, k, "traceladder")
            specs.append(spec)
            ms = step * scale + k * 2.0 - 2.0 + WOBBLE[(rung, k)]
            tokens = 4096 * (16 if rung == "gbs16" else 8) / 8 / (ms / 1000)
            status = "failed" if fail_fusions and rung == "fusions" and k == 1 else "ok"
            results[spec["rung_id"]] = _result(rung, "none", k, ms, tokens, status, parent, switch, value)
    for k in range(repeats):
        specs.append(plan_spec("deepep", "fusions", "deepep", True, k, "traceladder", lens="torch_rank0"))
        results[f"deepep.torch_rank0.r{k}"] = _result(
            "deepep",
            "torch_rank0",
            k,
            372.0 + k,
            100.0,
            parent="fusions",
            switch="deepep",
            value=True,
            traces=[f"t/deepep.torch_rank0.r{k}/traces/rank0.pt.trace.json.gz"],
        )
    return {"ladder": "mini", "run_id": run_id, "specs": specs}, results


def test_change_reads_in_percent_of_the_parent() -> None:
    """A summary from before `ci95_pct` gets the same % interval from its absolute one; a batch
    rung's call reads higher/lower; a quiet rung's cell gives the interval in %, then the MDE."""
    from traceladder.core.summary_parts import RungChange
    from traceladder.stats.verdicts import change_pct_interval, change_word
    from traceladder.summary.render.fmt import fmt_change

    level = 250.0  # the parent's level: delta = level * expm1(d), ci95 likewise
    d, lo, hi = -0.2, -0.25, -0.15
    new = {
        "metric": "step_cpu_ms",
        "delta": level * math.expm1(d),
        "ci95": [level * math.expm1(lo), level * math.expm1(hi)],
        "ci95_pct": [100 * math.expm1(lo), 100 * math.expm1(hi)],
        "delta_pct": 100 * math.expm1(d),
        "verdict": "faster",
        "mde_pct": 4.0,
    }
    old = {k: v for k, v in new.items() if k != "ci95_pct"}
    assert change_pct_interval(RungChange.from_dict(new)) == tuple(new["ci95_pct"])
    assert change_pct_interval(RungChange.from_dict(old)) == pytest.approx(tuple(new["ci95_pct"]))
    assert change_pct_interval(RungChange.from_dict({**old, "ci95": [None, 1.0]})) is None
    assert fmt_change(new) == "faster: -45.3 CPU ms, -18.1% [-22.1%, -13.9%]"
    tokens = {**new, "metric": "tokens_per_cpu_s_per_gpu", "verdict": "slower"}
    assert change_word(RungChange.from_dict(tokens)) == "lower" and change_word(RungChange.from_dict(new)) == "faster"
    assert fmt_change(tokens).startswith("lower: -45.3 tok/CPU-s, -18.1% [-22.1%, -13.9%]")
    quiet = {**new, "verdict": "no_change", "ci95_pct": [-3.0, 2.5]}
    assert fmt_change(quiet) == "no change detected [-3.0%, +2.5%], MDE 4.0%"


def by_hand(
    results: dict[str, dict[str, Any]], rung: str, parent: str, field: str = "step_ms", statistic: str = "median"
) -> dict[str, float]:
    """The recipe in docs/statistics.md for a complete design, written out: log figures, two-way residuals,
    pooled MSE with (B-1)(R-1) df, floored by (pi/2) (c_n MAD)^2 / n of the runs' log iterations
    (every run here has the same four) for a median figure, by their squared coefficient of
    variation / n for a mean, se = sqrt(2 max(MSE, floor) / B)."""
    names = [r[0] for r in RUNGS]
    y = np.array([[math.log(results[f"{n}.none.r{k}"][field]) for n in names] for k in range(3)])  # blocks x rungs
    resid = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
    df = (y.shape[0] - 1) * (y.shape[1] - 1)
    mse = float((resid**2).sum() / df)
    iters = np.log([0.99, 1.0, 1.01, 1.0])
    mad = float(np.median(np.abs(iters - np.median(iters))))
    raw = np.exp(iters)
    cv2 = np.var(raw, ddof=1) / np.mean(raw) ** 2  # a mean's floor: the iterations' CV^2 (delta method)
    floor = math.pi / 2 * (mad_factor(4) * mad) ** 2 / 4 if statistic == "median" else cv2 / 4
    d = float(y[:, names.index(rung)].mean() - y[:, names.index(parent)].mean())
    se = math.sqrt(2 * max(mse, floor) / y.shape[0])
    t975, t80 = scipy_stats.t.ppf(0.975, df), scipy_stats.t.ppf(0.80, df)
    level = math.exp(y[:, names.index(parent)].mean())
    return {
        "delta": level * math.expm1(d),
        "lo": level * math.expm1(d - t975 * se),
        "hi": level * math.expm1(d + t975 * se),
        "delta_pct": 100 * math.expm1(d),
        "lo_pct": 100 * math.expm1(d - t975 * se),
        "hi_pct": 100 * math.expm1(d + t975 * se),
        "mde_pct": 100 * math.expm1((t975 + t80) * se),
        "df": df,
    }


def test_ladder_table_block_model_verdicts() -> None:
    plan, results = make_run()
    analysis = {
        "schema": 1,
        "trace": "rank0.pt.trace.json.gz",
        "rank": 0,
        "device": "cpu",
        "timeline": {"computation_time": 80.0, "exposed_comm_time": 5.0, "idle_time": 15.0, "total_time": 100.0},
        "timeline_percent": {
            "computation_time": 80.0,
            "exposed_comm_time": 5.0,
            "idle_time": 15.0,
            "total_time": 100.0,
        },
        "top_ops": [{"name": "aten::mm", "time_ms": 30.0, "percent": 37.5, "count": 12}],
        "categories": [],
        "regions": {"moe_experts": 20.0},
    }
    analyses = {"t/deepep.torch_rank0.r0/traces/rank0.pt.trace.json.gz": TraceAnalysis.from_dict(analysis)}
    summary = build_summary(plan, typed(results), analyses)
    rows = {r["rung"]: r for r in summary["rungs"]}
    assert "vs_parent" not in rows["baseline"]
    for name in ("fusions", "deepep", "gbs16"):
        assert set(rows[name]["vs_parent"]) == {
            "metric",
            "delta",
            "ci95",
            "ci95_pct",
            "delta_pct",
            "verdict",
            "mde_pct",
            "per_rung",  # the call of the rung tested alone; this plan names no rule, so it is per rung
        }
        assert summary["calls"]["rule"] == "per_rung"
        assert rows[name]["vs_parent"]["per_rung"]["verdict"] == rows[name]["vs_parent"]["verdict"]
    fus, dee, gbs = rows["fusions"]["vs_parent"], rows["deepep"]["vs_parent"], rows["gbs16"]["vs_parent"]
    hand = by_hand(results, "fusions", "baseline")
    assert summary["model"]["step_ms"]["df"] == hand["df"] == 6
    assert fus["metric"] == "step_ms" and fus["verdict"] == "faster"
    assert fus["delta"] == pytest.approx(hand["delta"]) and fus["ci95"] == pytest.approx([hand["lo"], hand["hi"]])
    assert fus["delta_pct"] == pytest.approx(hand["delta_pct"]) and fus["mde_pct"] == pytest.approx(hand["mde_pct"])
    assert fus["ci95_pct"] == pytest.approx([hand["lo_pct"], hand["hi_pct"]])
    assert dee["verdict"] == "no_change" and dee["ci95"][0] < 0 < dee["ci95"][1]  # 341 vs 340: nothing to see
    assert dee["mde_pct"] == pytest.approx(by_hand(results, "deepep", "fusions")["mde_pct"])
    tok = by_hand(results, "gbs16", "deepep", "tokens_per_sec_per_gpu")
    assert (
        gbs["metric"] == "tokens_per_sec_per_gpu"
        and gbs["verdict"] == "faster"
        and gbs["delta"] == pytest.approx(tok["delta"])
    )
    assert rows["baseline"]["step_ms"]["ci95"] is not None and rows["baseline"]["step_ms"]["n"] == 3
    lens = summary["lenses"][0]
    ratios = [
        results[f"deepep.torch_rank0.r{k}"]["step_ms"] / results[f"deepep.none.r{k}"]["step_ms"] for k in range(3)
    ]
    assert lens["lens"] == "torch_rank0"  # paired by repeat in a plan without lens blocks
    assert lens["overhead_ratio"]["mean"] == pytest.approx(math.exp(np.mean(np.log(ratios))))
    assert lens["overhead_ratio"]["ci95"][0] < lens["overhead_ratio"]["mean"] < lens["overhead_ratio"]["ci95"][1]
    assert summary["profile"]["timeline_percent"]["exposed_comm_time"] == 5.0
    # the window's figures say what they are, beside What's left's per-step ones
    units = "Times in ms over the whole profiled window (every step in it); a region is its ranges' wall time"
    assert units in to_markdown(summary) and units.replace("'", "&#39;") in to_html(summary, {})
    text = "\n".join(summary["findings"])
    # the interval in % of the parent (the verdict's scale), the absolute delta after it
    assert (
        f"fusions (fusions=True) is faster than baseline: step time {hand['delta_pct']:+.1f}% "
        f"(95% CI {hand['lo_pct']:+.1f}% to {hand['hi_pct']:+.1f}%; {hand['delta']:+.1f} ms/step)." in text
    )
    # a batch rung's throughput is higher, not faster
    assert (
        f"gbs16 (global_batch=16) has higher tokens/s/GPU than deepep: {tok['delta_pct']:+.1f}% "
        f"(95% CI {tok['lo_pct']:+.1f}% to {tok['hi_pct']:+.1f}%; {tok['delta']:+.1f} tokens/s/GPU)." in text
    )
    assert (
        "fusions (fusions=True) is faster than baseline" in text
        and "No change detected" in text
        and "deepep (MDE" in text
    )
    assert "exposed communication 5.0%" in text

    md = to_markdown(summary)
    assert (
        "| fusions | fusions=True | " in md
        and f"faster: {fus['delta']:+.1f} ms, {fus['delta_pct']:+.1f}% [{hand['lo_pct']:+.1f}%, {hand['hi_pct']:+.1f}%]"
        in md
        and f"higher: {gbs['delta']:+.1f} tok/s, {gbs['delta_pct']:+.1f}%" in md
        and f"MDE {dee['mde_pct']:.1f}%" in md
    )
    charts = render_charts(summary)
    assert set(charts) == {"waterfall.png", "lens_overhead.png"} and all(
        p[:8] == b"\x89PNG\r\n\x1a\n" for p in charts.values()
    )
    html = to_html(summary, charts)
    assert 'id="ladder-table"' in html and html.count("data:image/png;base64,") == 2
    assert f"MDE {dee['mde_pct']:.1f}%" in html


def test_single_run_gets_no_verdict() -> None:
    plan, results = make_run(repeats=1)
    summary = build_summary(plan, typed(results), {})
    for row in summary["rungs"][1:]:
        vs = row["vs_parent"]
        assert (
            vs["verdict"] == "single_run" and vs["mde_pct"] is None and vs["ci95"] is None and vs["delta"] is not None
        )
    assert "single run: no verdict" in to_markdown(summary)


def test_rungs_on_different_slurm_nodes_name_the_node_as_a_confounder() -> None:
    plan, results = make_run(repeats=2)
    summary = build_summary(plan, typed(results), {})
    assert "nodes" not in summary  # not a Slurm ladder: no node record, no sentence
    for result in results.values():  # each run's metrics.json, as a Slurm rung's runner records it
        nodes = "n2" if result["rung"] == "gbs16" and result["repeat"] == 1 else "n1"
        result["provenance"] = {**result["provenance"], "slurm": {"job_id": "7", "nodes": nodes, "nnodes": 1}}
    summary = build_summary(plan, typed(results), {})
    assert summary["nodes"] == {
        "rungs_by_nodes": {"n1": ["baseline", "deepep", "fusions", "gbs16"], "n2": ["gbs16"]},
        "confounder": True,
    }
    line = "Runs ran on different Slurm nodes (n1: baseline, deepep, fusions, gbs16; n2: gbs16)"
    assert any(f.startswith(line) and "possible confounder" in f for f in summary["findings"])
    assert line in to_markdown(summary) and line in to_html(summary, {})
    for result in results.values():  # all on one node: recorded, not a confounder
        result["provenance"]["slurm"]["nodes"] = "n[1-2]"
    summary = build_summary(plan, typed(results), {})
    assert summary["nodes"]["confounder"] is False and not any("Slurm nodes" in f for f in summary["findings"])


def test_failed_rung_is_marked_not_hidden() -> None:
    plan, results = make_run(fail_fusions=True)
    summary = build_summary(plan, typed(results), {})
    assert summary["failed_rungs"] == ["fusions.none.r1"]
    row = next(r for r in summary["rungs"] if r["rung"] == "fusions")
    assert row["ok"] == 2 and row["runs"] == 3 and row["step_ms"]["n"] == 2
    # The failed run is a missing cell: one fewer residual df, and fusions still gets a verdict.
    assert summary["model"]["step_ms"]["df"] == 5 and summary["model"]["step_ms"]["missing_cells"] == 1
    assert row["vs_parent"]["verdict"] == "faster" and row["vs_parent"]["mde_pct"] > 0
    assert "FAILED" in to_markdown(summary) and "did not finish ok: fusions.none.r1" in "\n".join(summary["findings"])


def test_blocked_plan_purposes_lens_blocks_and_profile_runs() -> None:
    """A plan with the block design: measure blocks make the model, lens blocks pair each lens with
    their own unprofiled run, profile runs (every-rung lens) stay out of every step figure."""
    plan, results = make_run()
    specs = [
        dict(s, block=s["repeat"], position=i % 4, purpose="measure")
        for i, s in enumerate(plan["specs"])
        if s["lens"] == "none"
    ]
    for k in range(2):  # two lens blocks: deepep unprofiled (+ wobble) and under torch_rank0
        for lens, ms in (("none", 345.0 + 3 * k), ("torch_rank0", 380.0 + 3 * k + k * k)):
            rid = f"deepep.{lens}.l{k}"
            specs.append(
                {
                    "rung": "deepep",
                    "parent": "fusions",
                    "switch": "deepep",
                    "value": True,
                    "lens": lens,
                    "repeat": k,
                    "rung_id": rid,
                    "block": 3 + k,
                    "position": 0 if lens == "none" else 1,
                    "purpose": "lens",
                    "storage_prefix": "traceladder",
                }
            )
            results[rid] = dict(
                _result("deepep", lens, k, ms, 100.0, parent="fusions", switch="deepep", value=True), rung_id=rid
            )
    for rung, parent, switch, value, _ in RUNGS:  # profile block: ten times slower, must change nothing
        rid = f"{rung}.torch_rank0.p0"
        specs.append(
            {
                "rung": rung,
                "parent": parent,
                "switch": switch,
                "value": value,
                "lens": "torch_rank0",
                "repeat": 0,
                "rung_id": rid,
                "block": 5,
                "position": 0,
                "purpose": "profile",
                "storage_prefix": "traceladder",
            }
        )
        results[rid] = dict(
            _result(rung, "torch_rank0", 0, 5000.0, 1.0, parent=parent, switch=switch, value=value), rung_id=rid
        )
    plan = {**plan, "specs": specs, "design": {"seed": 1, "blocks": []}}
    for k in range(3):  # the old-style lens runs are gone from this plan
        results.pop(f"deepep.torch_rank0.r{k}")
    summary = build_summary(plan, typed(results), {})
    rows = {r["rung"]: r for r in summary["rungs"]}
    assert rows["deepep"]["runs"] == 3 and rows["deepep"]["step_ms"]["mean"] < 400
    assert summary["model"]["step_ms"]["runs"] == 12 and summary["model"]["step_ms"]["df"] == 6
    assert rows["fusions"]["vs_parent"] == build_summary(*typed_run(make_run()), {})["rungs"][1]["vs_parent"]
    lens = summary["lenses"][0]
    assert summary["lens_rung"] == "deepep" and lens["lens"] == "torch_rank0" and lens["runs"] == 2
    expected = math.exp(np.mean([math.log((380.0 + 3 * k + k * k) / (345.0 + 3 * k)) for k in range(2)]))
    assert lens["overhead_ratio"]["mean"] == pytest.approx(expected) and lens["overhead_ratio"]["df"] == 1


def test_metric_cpu_judges_the_compute_thread_cpu_time_and_keeps_the_wall_figures() -> None:
    # Wall time says fusions changed nothing (a noisy machine); the CPU time says it is 30% faster.
    plan, results = make_run()
    plan["metric"] = "cpu"
    for r in results.values():
        cpu = r["step_ms"] * (0.7 if r["rung"] != "baseline" else 1.0) * 0.8
        r["step_cpu_ms"], r["step_cpu_ms_values"] = cpu, [cpu * f for f in (0.99, 1.0, 1.01, 1.0)]
        per_rank_tokens = r["tokens_per_sec_per_gpu"] * r["step_ms"] / 1000
        r["tokens_per_cpu_s_per_gpu"] = per_rank_tokens / (cpu / 1000)
        r["step_cpu_statistic"] = "mean"  # as runner/primus_log.summarize records it
    summary = build_summary(plan, typed(results), {})
    rows = {r["rung"]: r for r in summary["rungs"]}
    fus, gbs = rows["fusions"]["vs_parent"], rows["gbs16"]["vs_parent"]
    hand = by_hand(results, "fusions", "baseline", "step_cpu_ms", statistic="mean")
    assert summary["metric"] == "cpu" and set(summary["model"]) == {"step_cpu_ms", "tokens_per_cpu_s_per_gpu"}
    assert summary["model"]["step_cpu_ms"]["run_statistic"] == "mean"  # a run's CPU figure is its mean
    assert fus["metric"] == "step_cpu_ms" and fus["delta_pct"] == pytest.approx(hand["delta_pct"])
    assert fus["mde_pct"] == pytest.approx(hand["mde_pct"]) and fus["verdict"] == "faster"
    assert gbs["metric"] == "tokens_per_cpu_s_per_gpu"
    # the wall figures stay beside the verdict
    assert rows["fusions"]["step_ms"]["mean"] == pytest.approx(
        np.mean([results[f"fusions.none.r{k}"]["step_ms"] for k in range(3)])
    )
    assert rows["fusions"]["step_cpu_ms"]["n"] == 3
    text = "\n".join(summary["findings"])
    assert "step CPU time" in text and "blind to communication" in text
    md = to_markdown(summary)
    assert "step CPU ms (95% CI)" in md and "vs parent on CPU time" in md and "CPU ms (" in md
    html = to_html(summary, {})
    assert "metric: cpu" in html and "step CPU ms (95% CI)" in html
    assert "on the log of each run's mean over its iterations" in html and "each run's mean over its" in md
    # Runs from before the mean (no step_cpu_statistic) hold medians: judged and floored as medians
    for r in results.values():
        del r["step_cpu_statistic"]
    older = build_summary(plan, typed(results), {})
    assert older["model"]["step_cpu_ms"]["run_statistic"] == "median"
    older_fus = {r["rung"]: r for r in older["rungs"]}["fusions"]["vs_parent"]
    assert older_fus["mde_pct"] == pytest.approx(by_hand(results, "fusions", "baseline", "step_cpu_ms")["mde_pct"])


def test_a_plan_without_a_metric_is_judged_on_wall_time() -> None:
    plan, results = make_run()
    summary = build_summary(plan, typed(results), {})
    assert summary["metric"] == "wall" and set(summary["model"]) == {"step_ms", "tokens_per_sec_per_gpu"}
    assert "blind to communication" not in "\n".join(summary["findings"])
    assert "step CPU ms" not in to_markdown(summary)


def test_a_plan_with_drift_terms_fits_them_and_says_so() -> None:
    plan, results = make_run()
    plan["drift"] = "linear"
    for r in results.values():  # each block of 4 runs takes 40 s, its order rotated block to block
        at = 100.0 * r["repeat"] + 10.0 * (([n for n, *_ in RUNGS].index(r["rung"]) + r["repeat"]) % 4)
        r["started_at"], r["ended_at"] = at, at + 8.0
    summary = build_summary(plan, typed(results), {})
    model = summary["model"]["step_ms"]
    assert model["drift"] == "linear" and model["drift_terms"] == 3 and model["df"] == 6 - 3
    md = to_markdown(summary)
    assert (
        "block model with a linear time trend inside each block (3 terms) on the log of each run's median step time"
        in md
    )
    assert "12 runs in 3 blocks, 3 residual df" in md
    html = to_html(summary, {})
    assert (
        "with a linear time trend inside each block (3 terms) on the log of each run's median over its "
        "iterations: 12 runs in 3 blocks, 3 residual df"
    ) in html
    # what the 5% level means over the ladder: 3 judged comparisons (the root has none), 3/20 calls
    assert sum(bool(r.get("vs_parent")) and r["vs_parent"]["verdict"] != "single_run" for r in summary["rungs"]) == 3
    expected = "up to 1 time in 20, so over these 3 comparisons up to 0.15 such calls are expected."
    assert expected in md and expected in html
    # the table's plain means and the model's verdicts can disagree, and the summary says why
    assert "The step columns are plain means of each rung's runs; a verdict compares the model's" in md
    assert "The step columns are plain means of each rung&#39;s runs" in html
    # the summary ends by defining the words it uses undefined above
    assert md.rstrip().split("## Terms\n")[1].startswith("- **block**: one run of every rung in a random order")
    assert '<h2 id="terms">Terms</h2><dl><dt>block</dt>' in html and "<dt>MDE</dt><dd>minimum detectable effect" in html
    plain = build_summary(make_run()[0], typed(results), {})
    assert plain["model"]["step_ms"]["drift"] == "none" and "time trend" not in to_markdown(plain)
    assert "time trend" not in to_html(plain, {})
    assert "Randomised block model on the log of each run's median over its iterations: 12 runs" in to_html(plain, {})


def test_peak_memory_moves_against_the_parent_are_stated_largest_first() -> None:
    plan, results = make_run()
    peaks = {"baseline": 0.0837, "fusions": 0.0769, "deepep": 0.0780, "gbs16": 0.1052}  # GB
    for r in results.values():
        r["peak_mem_gb"] = peaks[r["rung"]] * (1.0 + r["repeat"] / 1000)
    summary = build_summary(plan, typed(results), {})
    moved = [f for f in summary["findings"] if f.startswith("Peak memory moved")]
    # gbs16 vs deepep +35.0%, fusions vs baseline -8.1%; deepep's +1.4% is within the runs' spread
    largest = {name: peak * 1.002 for name, peak in peaks.items()}
    gbs, fus = 100 * (largest["gbs16"] / largest["deepep"] - 1), 100 * (largest["fusions"] / largest["baseline"] - 1)
    assert moved == [
        f"Peak memory moved (the largest of each rung's runs): gbs16 {gbs:+.1f}% against deepep "
        f"(0.078 → 0.105 GB); fusions {fus:+.1f}% against baseline (0.084 → 0.077 GB)."
    ]
    # the table gives the proxy's sub-GB peaks three decimals, as it gives a GPU's 128.1 GB one
    md = to_markdown(summary)
    assert "| 0.105 | 3/3 |" in md and "| 0.084 | 3/3 |" in md
    assert "<td>0.105</td>" in to_html(summary, {})


@pytest.mark.parametrize(
    "gb, shown",
    [(128.14, "128.1"), (9.996, "10.0"), (9.94, "9.94"), (0.9996, "1.00"), (0.0644, "0.064"), (None, "-")],
)
def test_memory_figures_keep_three_significant_digits_after_rounding(gb: float | None, shown: str) -> None:
    from traceladder.summary.render.fmt import fmt_gb

    assert fmt_gb(gb) == shown
