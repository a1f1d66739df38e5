"""Why each rung moved, on real CPU-proxy traces in a real SeaweedFS store: four tiny profiled
runs (fusions off + recompute, fusions on + recompute, fusions on without recompute, and that at
twice the global batch) are stored and analysed as the DAG does, then attributed rung to rung
from their stored reports."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape

from testkit.results import typed
from tests.conftest import REFERENCE_DIR, REPO_ROOT
from traceladder.analysis.stored import analysis_prefix, analyze_stored
from traceladder.core.summary_parts import AttributionEntry, SummaryRung, attribution_entries
from traceladder.storage.artifacts import S3ArtifactStore
from traceladder.summary.attribution import ATTRIBUTION_SCOPE, attribute_stored, fmt_abs_us, fmt_us, noise_line
from traceladder.summary.build import build_summary
from traceladder.summary.render.charts import render_charts
from traceladder.summary.render.html import to_html
from traceladder.summary.publish import write_summary
from traceladder.summary.render.markdown import to_markdown
from testkit.tiny_proxy import FUSION_GATES, PROFILE_SECOND_OF_THREE, TWO_LAYER_ARGS

INCLUDE = REPO_ROOT / "include"
# a 2-layer proxy, one profiled iteration (2 of 3)
TINY = [*TWO_LAYER_ARGS, *PROFILE_SECOND_OF_THREE, "--expert_model_parallel_size", "1"]
RECOMPUTE = ["--recompute_granularity", "full", "--recompute_method", "block", "--recompute_num_layers", "1"]
GB1, GB2 = ["--global_batch_size", "1"], ["--global_batch_size", "2"]
RUNGS = {  # rung: (parent, switch, value, args, env)
    "baseline": (None, None, None, [*TINY, *GB1, *RECOMPUTE], {g: "0" for g in FUSION_GATES}),
    "fusions": ("baseline", "fusions", True, [*TINY, *GB1, *RECOMPUTE], {}),
    "recompute_off": ("fusions", "recompute", False, [*TINY, *GB1], {}),
    "gbs2": ("recompute_off", "global_batch", 2, [*TINY, *GB2], {}),  # 2 micro-batches a step
}
TOKENS_PER_STEP = {"gbs2": 128.0}  # the others 64: a step's tokens, as the runner's figures give them
_BATCH = """
import contextlib, json, os, sys
from traceladder.workload.proxy_config import parse
from traceladder.workload.train import run_rank
for item in json.load(sys.stdin):
    with open(os.devnull, "w") as fh, contextlib.redirect_stdout(fh):
        run_rank(0, parse(item["args"], env=item["env"]), 0)
"""


@pytest.fixture(scope="module")
def stored(s3_server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The four runs' traces in S3 under a run of their own, each analysed by analyze_stored."""
    base = tmp_path_factory.mktemp("attr")
    items = [
        {"args": args, "env": {"PRIMUS_WORKSPACE": str(base / rung), **env}}
        for rung, (_, _, _, args, env) in RUNGS.items()
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIMUS_")}
    proc = subprocess.run(
        [sys.executable, "-c", _BATCH],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(INCLUDE)},
        timeout=300,
        cwd=base,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    store = S3ArtifactStore(s3_server.client(), s3_server.bucket, "traceladder", f"attr-{uuid.uuid4().hex[:8]}")
    run_id = "manual__attr"
    specs, results = [], {}
    for rung, (parent, switch, value, _, _) in RUNGS.items():
        for lens in ("none", "torch_rank0"):
            rid = f"{rung}.{lens}.r0"
            # what the spec and its metrics.json both say of the rung
            rung_fields = {
                "rung_id": rid,
                "rung": rung,
                "parent": parent,
                "switch": switch,
                "value": value,
                "lens": lens,
                "repeat": 0,
            }
            specs.append(
                {
                    **rung_fields,
                    "storage_prefix": "traceladder",
                    "purpose": "profile" if lens != "none" else "measure",
                    "model_args": {"global_batch_size": 2 if rung == "gbs2" else 1, "seq_length": 64},
                }
            )
            result = {
                **rung_fields,
                "status": "ok",
                "step_ms": 100.0,
                "tokens_per_sec_per_gpu": TOKENS_PER_STEP.get(rung, 64.0) * 10,
                "peak_mem_gb": 1.0,
                "traces": [],
            }
            prefix = store.rung_prefix(run_id, rid)
            if lens != "none":
                (trace,) = (base / rung / "tensorboard").iterdir()
                key = f"{prefix}/traces/rank0.pt.trace.json.gz"
                store.put_file(key, trace)
                result["traces"] = [key]
            store.put_json(f"{prefix}/metrics.json", {**result, "prefix": prefix})
            store.write_manifest(prefix)
            for key in result["traces"]:
                analyze_stored(store, key)  # what the DAG's mapped analysis task does
            results[rid] = result
    plan = {"ladder": store.ladder, "run_id": run_id, "specs": specs}
    run_prefix = store.rung_prefix(run_id, "x").rsplit("/", 1)[0]
    return {
        "store": store,
        "plan": plan,
        "results": results,
        "run_prefix": run_prefix,
        "summary_prefix": f"{run_prefix}/summary",
    }


def _vs_parent(verdict: str, lo: float, hi: float) -> dict[str, Any]:
    return {
        "metric": "step_ms",
        "delta": (lo + hi) / 2,
        "ci95": [lo, hi],
        "delta_pct": 0.0,
        "verdict": verdict,
        "mde_pct": 5.0,
    }


def _attribute(
    stored: dict[str, Any], verdicts: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    summary = build_summary(stored["plan"], typed(stored["results"]), {})
    for row in summary["rungs"]:
        if row["rung"] in verdicts:
            row["vs_parent"] = verdicts[row["rung"]]
    summary["attribution"] = attribute_stored(
        stored["store"], stored["summary_prefix"], stored["plan"], summary, typed(stored["results"])
    )
    return summary, {e["rung"]: e for e in summary["attribution"]}


def _ladders_page(summary: dict[str, Any]) -> str:
    """The Ladders page's summary block for `summary`."""
    from traceladder.ui.views import page_templates

    return (
        page_templates()
        .from_string('{% import "_macros.html" as m %}{{ m.summary_body(s, "", e) }}')
        .render(s=summary, e={"file": "x.yaml"})
    )


def _stored_csv(store: S3ArtifactStore, key: str) -> dict[str, dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(store.get_bytes(key).decode())))
    return {r.get("name") or r["op category"]: r for r in rows}


def test_fusions_replace_unfused_ops_and_recompute_off_drops_the_replay(stored) -> None:
    summary, by_rung = _attribute(stored, {})
    assert set(by_rung) == {"fusions", "recompute_off", "gbs2"}  # every rung with its own and its parent's trace
    store = stored["store"]
    fus = json.loads(store.get_bytes(by_rung["fusions"]["compare"]))
    # the fused paths' single ops appear; the op-by-op chains they replace vanish
    assert {
        "_FusedRMSNorm",
        "autograd::engine::evaluate_function: _FusedRMSNormBackward",
        "aten::view_as_complex",
    } <= set(fus["appeared"])
    assert {"autograd::engine::evaluate_function: RsqrtBackward0", "aten::amax", "aten::reciprocal"} <= set(
        fus["vanished"]
    )
    cats = _stored_csv(
        store, by_rung["fusions"]["compare"].replace("compare.json", "compare_ops_summary_by_category.csv")
    )
    assert float(cats["elementwise"]["Count__new_diff"]) < 0  # fewer elementwise ops per step
    rec = json.loads(store.get_bytes(by_rung["recompute_off"]["compare"]))
    # recompute off: the checkpointed segment and its backward replay vanish, and so does the
    # recomputed forward's work (fewer GEMMs in the window)
    assert {"_Recompute", "_RecomputeBackward"} <= set(rec["vanished"])
    ops = _stored_csv(store, by_rung["recompute_off"]["compare"].replace("compare.json", "compare_ops_summary.csv"))
    assert float(ops["aten::mm"]["Count__new_diff"]) < 0
    assert (
        float(ops["_RecomputeBackward"]["per_step_us__new_diff"]) < 0
        and ops["_RecomputeBackward"]["status"] == "vanished"
    )
    for e in by_rung.values():  # CPU proxy: ops and named regions, closure per step
        assert e["device"] == "cpu" and e["steps"] == {"base": 1, "new": 1}
        assert sum(e["category_deltas_us"].values()) == pytest.approx(e["kernel_time_delta_us"], rel=1e-9, abs=1e-6)
        assert {r["name"] for r in e["regions"]} & {"attention", "moe_dispatch", "moe_experts", "moe_combine"}
        # regions in op time (step_regions: the ops that start in their ranges, backward included),
        # and the op time in none, as each analysis counted it, per step at each side's speed
        doc = json.loads(store.get_bytes(e["compare"]))
        assert doc["regions_measure"] == e["regions_measure"] == "op time"
        a = {
            side: json.loads(store.get_bytes(f"{analysis_prefix(e[f'{side}_trace'])}/analysis.json"))
            for side in ("base", "new")
        }
        outside = [a[side]["step_regions_outside_ms_per_step"] * 1e3 * e["speed"][side] for side in ("base", "new")]
        assert doc["regions_outside_us"] == pytest.approx(outside[1] / e["work_ratio"] - outside[0], rel=1e-9, abs=1e-6)
        # the proxy nests no region in another, so the regions and the rest add up to the op time
        total = sum(doc["regions"].values()) + doc["regions_outside_us"]
        assert total == pytest.approx(e["kernel_time_delta_us"], rel=1e-6, abs=1e-3)
        assert f"{fmt_abs_us(e['kernel_time_delta_us'])} of op time" in e["sentence"]
        assert e["categories"][0]["name"] in e["sentence"]


def test_indicative_follows_the_verdict_and_the_interval(stored) -> None:
    _, plain = _attribute(stored, {})
    largest = max(abs(v) for v in plain["fusions"]["category_deltas_us"].values()) / 1e3  # ms
    _, by_rung = _attribute(
        stored,
        {
            "fusions": _vs_parent("faster", -largest * 0.6, -largest * 0.4),  # interval narrower than the movement
            "recompute_off": _vs_parent("no_change", -1.0, 1.0),
        },
    )
    assert by_rung["fusions"]["indicative"] is None and "Indicative" not in by_rung["fusions"]["sentence"]
    assert (
        by_rung["recompute_off"]["indicative"] == "no change detected in its measured runs"
        and "Indicative: no change detected in its measured runs." in by_rung["recompute_off"]["sentence"]
    )
    _, wide = _attribute(stored, {"fusions": _vs_parent("faster", -largest * 3, -largest * 0.5)})
    assert "width" in wide["fusions"]["indicative"]


def test_a_profiled_run_counts_at_its_rungs_measured_speed(stored) -> None:
    """fusions' profiled run stepped at 200 ms where its measured runs step at 100 ms (the VM ran
    it at half speed): its op times count half, as its rung's runs measure it, on either side."""
    results = dict(stored["results"])
    results["fusions.torch_rank0.r0"] = {**results["fusions.torch_rank0.r0"], "step_ms": 200.0}
    _, plain = _attribute(stored, {})
    _, slow = _attribute({**stored, "results": results}, {})
    store = stored["store"]
    op = {rung: _op_us(store, plain[rung]["new_trace"]) for rung in ("fusions", "recompute_off")}
    op["baseline"] = _op_us(store, plain["fusions"]["base_trace"])
    assert plain["fusions"]["speed"] == {"base": 1.0, "new": 1.0}
    assert slow["fusions"]["speed"] == {"base": 1.0, "new": 0.5}
    assert slow["fusions"]["kernel_time_delta_us"] == pytest.approx(op["fusions"] / 2 - op["baseline"])
    # fusions as the base of recompute_off: taken at the same speed there, so the deltas add up
    assert slow["recompute_off"]["speed"] == {"base": 0.5, "new": 1.0}
    assert slow["recompute_off"]["kernel_time_delta_us"] == pytest.approx(op["recompute_off"] - op["fusions"] / 2)
    doc = json.loads(store.get_bytes(slow["fusions"]["compare"]))
    assert doc["speed"] == {"base": 1.0, "new": 0.5} and "each side x its speed" in doc["unit"]
    assert not any("speed" in n for n in slow["fusions"]["notes"])
    # no step time for the profiled run: compared as profiled, and said to be indicative
    results["fusions.torch_rank0.r0"] = {**results["fusions.torch_rank0.r0"], "step_ms": None}
    faster = _vs_parent("faster", -1e6, -1e6 + 1)
    _, unknown = _attribute({**stored, "results": results}, {"fusions": faster, "recompute_off": faster})
    assert unknown["fusions"]["speed"] == {"base": 1.0, "new": 1.0}
    assert any("not speed-corrected" in n for n in unknown["fusions"]["notes"])
    for rung in ("fusions", "recompute_off"):  # fusions is a side of both
        assert "no measured or profiled step time for fusions" in unknown[rung]["indicative"]


def _op_us(store: S3ArtifactStore, trace_key: str) -> float:
    """A stored trace's op µs per profiled step, from its ops_summary.csv (one step each here)."""
    ops = _stored_csv(store, f"{analysis_prefix(trace_key)}/ops_summary.csv")
    return sum(float(r["total_direct_kernel_time_ms"]) for r in ops.values()) * 1e3


def test_profile_noise_by_hand() -> None:
    from traceladder.stats.model import t_quantile
    from traceladder.summary.attribution import ProfileNoise

    noise = ProfileNoise.pooled({"a": [100.0, 110.0], "b": [200.0, 180.0, 190.0], "c": [50.0]})
    assert noise is not None and (noise.df, noise.runs, noise.rungs) == (3, 5, ("a", "b"))
    a, b = [math.log(x) for x in (100, 110)], [math.log(x) for x in (200, 180, 190)]
    ss = sum((x - sum(a) / 2) ** 2 for x in a) + sum((x - sum(b) / 3) ** 2 for x in b)
    assert noise.sd_log == pytest.approx(math.sqrt(ss / 3))
    # one run against one run, at their mean level (110 µs): t(0.975, 3) = 3.182
    assert t_quantile(0.975, 3) == pytest.approx(3.1824, abs=1e-4)
    assert noise.half_width_us(100, 120) == pytest.approx(3.1824463 * math.sqrt(2) * noise.sd_log * 110)
    assert ProfileNoise.pooled({"a": [100.0], "b": [5.0]}) is None  # no rung profiled twice: no df


def test_a_change_inside_the_profiles_noise_or_against_the_verdict_is_indicative(stored) -> None:
    """A second profiled run of fusions (here: the baseline's trace, so the two differ by the
    whole fusions effect) makes the noise as large as that effect; every entry's half width is
    t(0.975, 1) × √2 × sd × the mean of its two sides' op time per step."""
    from traceladder.stats.model import t_quantile

    results = dict(stored["results"])
    again = {**results["fusions.torch_rank0.r0"], "rung_id": "fusions.torch_rank0.r1", "repeat": 1}
    again["traces"] = results["baseline.torch_rank0.r0"]["traces"]
    results["fusions.torch_rank0.r1"] = again
    _, plain = _attribute(stored, {})
    delta = plain["fusions"]["kernel_time_delta_us"] / 1e3  # ms; fusions removes op time
    assert delta < 0 and plain["fusions"]["noise"] is None  # one profiled run per rung: no noise figure
    narrow = _vs_parent("faster", delta * 1.1, delta * 0.9)
    summary, by_rung = _attribute({**stored, "results": results}, {"fusions": narrow})
    store = stored["store"]
    op = {e["rung"]: _op_us(store, e["new_trace"]) for e in by_rung.values()}
    op["baseline"] = _op_us(store, by_rung["fusions"]["base_trace"])
    sd = abs(math.log(op["fusions"] / op["baseline"])) / math.sqrt(2)  # two runs, 1 df
    e = by_rung["fusions"]
    assert e["base_trace"] == results["baseline.torch_rank0.r0"]["traces"][0]  # the attributed run: repeat 0
    assert e["noise"]["df"] == 1 and e["noise"]["runs"] == 2 and e["noise"]["rungs"] == ["fusions (torch_rank0)"]
    assert e["noise"]["sd_pct"] == pytest.approx(100 * sd)
    t = t_quantile(0.975, 1)
    assert e["noise"]["t"] == pytest.approx(12.706, abs=1e-3)
    assert e["noise"]["half_width_us"] == pytest.approx(t * math.sqrt(2) * sd * (op["baseline"] + op["fusions"]) / 2)
    # the batch rung: its side per its parent's tokens (gbs2 holds two of recompute_off's steps)
    gbs2 = by_rung["gbs2"]["noise"]["half_width_us"]
    assert gbs2 == pytest.approx(t * math.sqrt(2) * sd * (op["recompute_off"] + op["gbs2"] / 2) / 2)
    assert "that two profiled runs of one rung differ by here (95%)" in e["indicative"]
    line = noise_line(attribution_entries(summary["attribution"]))
    assert (
        line and "pooled over 2 runs of fusions (torch_rank0), 1 df). A change smaller than t(0.975, 1) (12.71)" in line
    )
    # the line states both rules an entry with a verdict is judged by
    assert line.endswith(
        "on a step-time verdict, one whose largest category delta is smaller than the width of its 95% interval."
    )
    assert line in to_markdown(summary)
    assert str(escape(line)) in to_html(summary, {}) and str(escape(line)) in _ladders_page(summary)
    assert render_charts(summary)["attribution.png"].startswith(b"\x89PNG")  # with the noise bars
    _, against = _attribute(stored, {"fusions": _vs_parent("slower", -delta * 0.9, -delta * 1.1)})
    assert "moved the other way" in against["fusions"]["indicative"]
    # a batch rung's `faster` is more tokens per CPU-second: less op time for its parent's tokens
    gbs_delta = plain["gbs2"]["kernel_time_delta_us"]
    wrong_way = {**_vs_parent("faster" if gbs_delta > 0 else "slower", -1e6, 1e6), "metric": "tokens_per_sec_per_gpu"}
    _, batch = _attribute(stored, {"gbs2": wrong_way})
    # said in the word its verdict is shown with: higher or lower tokens/s
    word = "higher" if gbs_delta > 0 else "lower"
    assert f"moved the other way ({fmt_us(gbs_delta)}) from the {word} verdict" in batch["gbs2"]["indicative"]


def test_report_chart_and_markdown_carry_the_attribution(stored) -> None:
    summary, by_rung = _attribute(stored, {})
    charts = render_charts(summary)
    assert charts["attribution.png"].startswith(b"\x89PNG")
    html = to_html(summary, charts)
    assert 'id="attribution"' in html and 'alt="attribution.png"' in html
    md = to_markdown(summary)
    assert "## Why each rung moved" in md
    for rung, e in by_rung.items():
        assert f"**{rung}** vs {e['parent']}" in md and e["sentence"] in md
    page = _ladders_page(summary)
    assert 'class="attribution"' in page
    # one scope line, in each of the three renderings (a missing Jinja global would render empty)
    assert f"## Why each rung moved ({ATTRIBUTION_SCOPE})" in md
    assert str(escape(ATTRIBUTION_SCOPE)) in html and str(escape(ATTRIBUTION_SCOPE)) in page
    for e in by_rung.values():
        assert str(escape(e["sentence"])) in page


def test_the_summary_task_publishes_the_attribution(stored) -> None:
    """write_summary, as the DAG's summary task calls it, reads the stored results and reports."""
    store = stored["store"]
    ref = write_summary(store, stored["run_prefix"], stored["plan"])
    summary = json.loads(store.get_bytes(ref["summary_json"]))
    assert [e["rung"] for e in summary["attribution"]] == ["fusions", "recompute_off", "gbs2"]
    for e in summary["attribution"]:
        assert store.exists(e["compare"])
    assert store.exists(f"{stored['summary_prefix']}/charts/attribution.png")
    assert 'id="attribution"' in store.get_bytes(ref["report_html"]).decode()
    md = store.get_bytes(ref["summary_md"]).decode()
    assert md.count("vs fusions (torch_rank0)") == 1 and md.count("vs baseline (torch_rank0)") == 1
    assert md.count("vs recompute_off (torch_rank0)") == 1


def test_a_batch_rung_is_compared_for_its_parents_tokens(stored) -> None:
    """gbs2's step holds two micro-batches: its per-step figures are halved before the deltas,
    so the optimizer, which runs once a step, shows as time saved per token."""
    _, by_rung = _attribute(stored, {})
    e = by_rung["gbs2"]
    assert e["work_ratio"] == 2.0 and by_rung["recompute_off"]["work_ratio"] == 1.0
    assert e["sentence"].startswith("gbs2 runs 2.00x recompute_off's tokens per step; for recompute_off's tokens it ")
    store = stored["store"]
    doc = json.loads(store.get_bytes(e["compare"]))
    assert doc["work_ratio"] == 2.0 and doc["steps"] == {"base": 1, "new": 1}
    ops = _stored_csv(store, e["compare"].replace("compare.json", "compare_ops_summary.csv"))
    mm = ops["aten::mm"]  # TraceLens's own columns stay per trace; ours are per base step's tokens
    assert float(mm["new::per_step_us"]) == pytest.approx(float(mm["new::total_direct_kernel_time_ms"]) * 1e3 / 2)
    assert float(mm["new::Count"]) == 2 * float(mm["base::Count"])  # the same ops, twice a step
    opt = [  # the optimizer region's op time, µs per step, one profiled step each
        next(
            r["ms_per_step"] * 1e3
            for r in json.loads(store.get_bytes(f"{analysis_prefix(e[side])}/analysis.json"))["step_regions"]
            if r["region"] == "optimizer"
        )
        for side in ("base_trace", "new_trace")
    ]
    assert doc["regions"]["optimizer"] == pytest.approx(opt[1] / 2 - opt[0])


def test_analyses_without_step_regions_compare_the_ranges_wall_time(stored) -> None:
    """An analysis from before `step_regions` has only each region's ranges' wall time: the
    comparison then uses that on both sides (never one of each), says so, and states no op time
    outside the regions; the sentence names the measure."""
    import dataclasses

    from traceladder.analysis.analyzers.diff import compare_reports, load_reports
    from traceladder.summary.attribution import sentence

    _, by_rung = _attribute(stored, {})
    e, store = by_rung["fusions"], stored["store"]

    def reports(key: str):
        prefix = analysis_prefix(key)
        return load_reports(
            lambda name: store.get_bytes(f"{prefix}/{name}") if store.exists(f"{prefix}/{name}") else None, key
        )

    base, new = reports(e["base_trace"]), reports(e["new_trace"])
    old = dataclasses.replace(new, analysis=dataclasses.replace(new.analysis, step_regions=None))
    doc = compare_reports(base, old).doc.to_dict()
    assert doc["regions_measure"] == "range wall time" and doc["regions_outside_us"] is None
    ranges = (old.analysis.regions["optimizer_step"] - base.analysis.regions["optimizer_step"]) * 1e3
    assert doc["regions"]["optimizer_step"] == pytest.approx(ranges)
    assert compare_reports(base, new).doc.regions_measure == "op time"
    legacy = {**e, "regions_measure": None, "regions_outside_us": None}  # an entry from before the field
    said = sentence(AttributionEntry.from_dict(legacy))
    assert "by region's range wall time " in said and "outside the named regions" not in said


def test_work_ratio_from_the_plan_else_the_runs() -> None:
    from traceladder.summary.attribution import step_tokens, work_ratio

    specs = [
        {"rung": "r", "model_args": {"global_batch_size": 2, "seq_length": 512}},
        {"rung": "g", "model_args": {"global_batch_size": 8, "seq_length": 512}},
        {"rung": "x", "model_args": {"seq_length": 512}},  # no global batch: not planned
    ]
    planned = step_tokens(specs)
    assert planned == {"r": 1024.0, "g": 4096.0}
    row = {"rung": "g", "parent": "r", "kind": "batch"}
    batch = SummaryRung.from_dict(row)

    def run(rung: str, **figures: float) -> dict[str, Any]:
        return {"rung": rung, "rung_id": rung, "lens": "none", "repeat": 0, "status": "ok", **figures}

    # the CPU figures give a run's tokens exactly; wall figures are a product of two medians
    results = {
        "r1": run("r", tokens_per_cpu_s_per_gpu=4000.0, step_cpu_ms=128.0),  # 512 tokens
        "g1": run("g", tokens_per_cpu_s_per_gpu=4000.0, step_cpu_ms=512.0),  # 2048
        "g2": run("g", tokens_per_sec_per_gpu=3000.0, step_ms=690.0),  # 2070: a noisy wall figure
        "g3": run("g", tokens_per_cpu_s_per_gpu=4000.0, step_cpu_ms=511.0),  # 2044
        "g4": {**run("g", tokens_per_sec_per_gpu=1.0, step_ms=1.0), "status": "failed"},
    }
    assert work_ratio(batch, typed(results), planned) == 4.0  # the plan's, exact
    assert work_ratio(batch, typed(results), {}) == pytest.approx(2048 / 512)  # the median run's
    assert (
        work_ratio(SummaryRung.from_dict({**row, "kind": "optimisation"}), typed(results), {}) == 1.0
    )  # tokens differ, not a batch rung
    assert (
        work_ratio(SummaryRung.from_dict({**row, "parent": "x"}), typed(results), planned) is None
    )  # neither says for x


def test_gpu_traces_attribute_kernels_and_categories(tmp_path: Path) -> None:
    """bert-small on MI300 as the parent, on H100 as the rung: GPU entries name kernels."""
    from traceladder.analysis.analyzers.diff import reports_from_dir
    from traceladder.analysis.analyzers.trace import analyze_trace
    from traceladder.summary.attribution import attribute

    ref = REFERENCE_DIR / "tracelens-v1.0.0"
    traces = {
        "mi300": ref / "mi300" / "gaunernst_bert-small-uncased__1016001.json.gz",
        "h100": ref / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz",
    }
    for rung, trace in traces.items():
        analyze_trace(trace, tmp_path / rung)
    results = {
        f"{r}.torch_rank0.r0": {
            "rung_id": f"{r}.torch_rank0.r0",
            "rung": r,
            "lens": "torch_rank0",
            "repeat": 0,
            "status": "ok",
            "traces": [f"{r}/traces/rank0.pt.trace.json.gz"],
        }
        for r in traces
    }
    summary = {
        "rungs": [
            {"rung": "mi300", "parent": None},
            {"rung": "h100", "parent": "mi300", "vs_parent": _vs_parent("faster", -2.0, -1.0)},
        ]
    }
    (e,) = attribute(summary, typed(results), {}, lambda key: reports_from_dir(tmp_path / key.split("/")[0], key))
    assert e["device"] == "gpu" and e["regions"] == []
    kernels = {
        r["Kernel name"] for rung in traces for r in csv.DictReader(open(tmp_path / rung / "kernel_summary.csv"))
    }
    assert e["moved"] and all(m["name"] in kernels for m in e["moved"])
    assert set(e["appeared"]) <= kernels and set(e["vanished"]) <= kernels
    assert sum(e["category_deltas_us"].values()) == pytest.approx(e["kernel_time_delta_us"], rel=1e-9, abs=1e-9)
    assert "of kernel time per step against mi300" in e["sentence"] and "kernels vanished" in e["sentence"]
    assert "inside the" in e["indicative"]  # µs-scale category deltas inside a 1 ms-wide interval
