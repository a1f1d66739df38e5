"""A real confirm on the local backend: the real runner (runner/rung.py) runs the tiny CPU proxy,
A at a build that changes nothing and B at a build that injects real extra work into a named
region (workload/extra.py, `extra_work_region`); the confirm calls it `confirmed`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.tiny_proxy import TINY_MODEL
from traceladder.config import find_ladder, load_ladder
from traceladder.plan.build import build_plan
from traceladder.triage.bisect import BuildChanges, apply_build
from traceladder.triage.confirm import Budget, confirm, local_run_block

pytestmark = pytest.mark.triage

BUILDS = {
    "nightly-0": BuildChanges("nightly-0", "2026-11-30T02:00:00+00:00", {}, {}),
    # much more than the bench's +15%, so a tiny proxy's few blocks resolve it
    "nightly-1": BuildChanges(
        "nightly-1", "2026-12-01T02:00:00+00:00", {"extra_work_pct": 100, "extra_work_region": "moe_router"}, {}
    ),
}


def test_a_real_confirm_on_the_local_backend_confirms_injected_work(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRACELADDER_WARM_LAUNCHER", "0")  # a cold subprocess per run: nothing left behind
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
