"""A real confirm on the local backend: the real runner (runner/rung.py) runs the tiny CPU proxy,
A at a build that changes nothing and B at a build that injects real extra work into a named
region (workload/extra.py, `extra_work_region`); the confirm calls it `confirmed`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.tiny_proxy import TINY_MODEL
from tests.conftest import REPO_ROOT
from traceladder.config import find_ladder, load_ladder
from traceladder.plan.build import build_plan
from traceladder.triage.bisect import BuildChanges, apply_build
from traceladder.triage.confirm import Budget, confirm, local_run_block
from traceladder.triage.explain import cheapest_torch_lens, explain, lens_overlay, local_run_profiled

pytestmark = [pytest.mark.triage, pytest.mark.slow]
# the workload subprocesses import this checkout's package (extra_work_region is new here)
INCLUDE = str(REPO_ROOT / "include")

BUILDS = {
    "nightly-0": BuildChanges("nightly-0", "2026-11-30T02:00:00+00:00", {}, {}),
    # much more than the bench's +15%, so a tiny proxy's few blocks resolve it
    "nightly-1": BuildChanges(
        "nightly-1", "2026-12-01T02:00:00+00:00", {"extra_work_pct": 100, "extra_work_region": "attention"}, {}
    ),
}


def test_a_real_confirm_on_the_local_backend_confirms_injected_work(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRACELADDER_WARM_LAUNCHER", "0")  # a cold subprocess per run: nothing left behind
    monkeypatch.setenv("PYTHONPATH", INCLUDE)
    loaded = load_ladder(find_ladder("proxy-local"))
    spec = build_plan(loaded, rungs=["baseline"], lens="none", repeats=1)[0]
    base = spec.model_copy(
        update={"model_args": {**spec.model_args, **TINY_MODEL, "train_iters": 6}, "train_iters": 6, "warmup_iters": 1}
    ).to_dict()
    good, bad = apply_build(base, BUILDS, "nightly-0"), apply_build(base, BUILDS, "nightly-1")
    ran: list[tuple[str, int, str, float]] = []
    run_block = local_run_block(tmp_path / "runs", run_id="triage-test")

    def recording(s: dict, side: str, block: int) -> dict:
        metrics = run_block(s, side, block)
        ran.append((side, block, str(metrics["status"]), float(metrics.get("step_cpu_ms") or math.nan)))
        assert metrics["provenance"]["build"] == s["docker_env_vars"]["TRACELADDER_BUILD"]
        return metrics

    step = confirm(
        good,
        bad,
        math.log1p(1.0),
        recording,
        Budget(blocks=6),
        rung="baseline",
        names=("nightly-0", "nightly-1"),
        metric="cpu",
        seed=1,
    )
    assert all(status == "ok" for _, _, status, _ in ran), ran
    assert step.verdict == "confirmed", (step, ran)
    assert step.interval_pct is not None and step.interval_pct[0] > 0
    assert step.blocks == len({b for _, b, _, _ in ran}) and 3 <= step.blocks <= 6


def test_a_real_explanation_names_the_region_the_build_slowed(tmp_path: Path, monkeypatch) -> None:
    """One profiled run of each end with the ladder's cheapest torch lens, then the attribution."""
    monkeypatch.setenv("TRACELADDER_WARM_LAUNCHER", "0")
    monkeypatch.setenv("PYTHONPATH", INCLUDE)
    loaded = load_ladder(find_ladder("proxy-local"))
    lens = cheapest_torch_lens({str(k): v for k, v in loaded.ladder.switches["lens"].values.items()})
    assert lens == "torch_rank0"
    tiny = {**TINY_MODEL, "train_iters": 5}
    measure = build_plan(loaded, rungs=["baseline"], lens="none", repeats=1)[0]
    measure = measure.model_copy(update={"model_args": {**measure.model_args, **tiny}, "train_iters": 5})
    profiled = build_plan(loaded, rungs=["baseline"], lens=lens, repeats=1)[0]
    window = {"profile_step_start": 3, "profile_step_end": 5}
    profiled = profiled.model_copy(
        update={"model_args": {**profiled.model_args, **tiny, **window}, "train_iters": 5, "profile_window": (3, 5)}
    )
    overlay = lens_overlay(measure.to_dict(), profiled.to_dict())
    assert overlay["lens"] == lens and overlay["model_args"]["profile_step_start"] == 3
    base = {**measure.to_dict(), "warmup_iters": 1}
    good, bad = apply_build(base, BUILDS, "nightly-0"), apply_build(base, BUILDS, "nightly-1")
    out = explain(good, bad, overlay, local_run_profiled(tmp_path / "runs"), ("nightly-0", "nightly-1"), "slower")
    assert out.error is None, out.error
    # the analysis's region registry (analysis/reports/step_regions.py) names it `attention`
    assert out.sentence and "by region attention +" in out.sentence, out.sentence
    top = max(out.regions, key=lambda r: abs(float(r["delta_us"])))
    assert top["name"] == "attention" and float(top["delta_us"]) > 0, out.regions
    assert out.top_ops and out.top_ops[0]["name"] == "aten::mm"
