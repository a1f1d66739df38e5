"""The explanation's lens and spec overlay, from the ladder's own plan (no run: the real profiled
runs of both ends are in tests/integration/test_demo_regression.py and test_triage_scheduler.py)."""

from __future__ import annotations

import pytest

from traceladder.config import find_ladder, load_ladder
from traceladder.plan.build import build_plan
from traceladder.triage.explain import cheapest_torch_lens, lens_overlay, profiled

pytestmark = pytest.mark.triage


def test_the_cheapest_torch_lens_is_rank_0_before_every_rank() -> None:
    assert cheapest_torch_lens({"none": {}, "torch_all_ranks": {}, "torch_rank0": {}}) == "torch_rank0"
    assert cheapest_torch_lens({"none": {}, "torch_all_ranks": {}}) == "torch_all_ranks"
    assert cheapest_torch_lens({"none": {}, "rocprofv3": {}}) is None


def test_the_overlay_is_what_the_lens_changes_in_the_plan_and_profiles_either_end() -> None:
    loaded = load_ladder(find_ladder("proxy-local"))
    lens = cheapest_torch_lens({str(k): v for k, v in loaded.ladder.switches["lens"].values.items()})
    assert lens == "torch_rank0"
    measure = build_plan(loaded, rungs=["baseline"], lens="none", repeats=1)[0].to_dict()
    profile = build_plan(loaded, rungs=["baseline"], lens=lens, repeats=1)[0].to_dict()
    overlay = lens_overlay(measure, profile)
    assert overlay["lens"] == lens and overlay["purpose"] == "profile"
    assert overlay["profile_window"] == profile["profile_window"] is not None
    # only the model args the lens sets, none the measure run already has
    assert overlay["model_args"] and all(measure["model_args"].get(k) != v for k, v in overlay["model_args"].items())
    bad = profiled(measure, overlay, "B")
    assert bad["lens"] == lens and bad["rung_id"] == "triage-baseline.explain-B" and bad["block"] == 0
    assert bad["model_args"] == {**measure["model_args"], **overlay["model_args"]}
