"""Adaptive repeats through real Airflow (`dag.test()`), the local backend and a real S3 server:
the look before each block past `min` reads the finished runs' metrics from S3 and, once every
rung's MDE is at or below the target, skips the remaining blocks as Airflow skips tasks; the
summary still runs and says how many blocks ran of how many planned, and why.

The ladders extend proxy-local with the tiny proxy (testkit/tiny_proxy.py), two rungs, no lenses.
- Early stop: min 6, max 7, a target of 99%. The look after six blocks has 5 residual df and
  z 2.16, so its MDE is (t_crit + t.80) * sqrt(2/6) sd = 2.25 sd: at or below 99% while the
  run-level sd stays under 30.6%. The tiny proxy's step is ~13 ms of CPU, and this VM's vCPU
  speed swings up to 2x within seconds: with 15 iterations a run (0.2 s measured) the run-level
  sd reached 24% in two CI runs (at min 4 the limit was 18.7%), so runs now measure 63
  iterations, and the look comes after six blocks.
- Max: min 2, max 3, a target of 0.01%, which no look reaches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from traceladder.config.loader import CONFIG_DIR
from traceladder.storage.artifacts import safe_key_part

from tests.integration.ladder_checks import objects, task_states
from testkit.tiny_proxy import TINY_MODEL

pytestmark = pytest.mark.e2e

RUNGS = [
    {"name": "baseline"},
    {"name": "fusions", "parent": "baseline", "set": {"fusions": True}},
]


def write_ladder(folder: Path, name: str, repeats: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    body = {
        "extends": str(CONFIG_DIR / "ladders" / "proxy-local.yaml"),
        "ladder": name,
        "schedule": None,
        "repeats": repeats,
        "warmup_iters": 1,
        "timeout_s": 240,
        # 64 iterations (63 measured, ~0.8 s): a run spans more of this VM's slow and fast
        # spells, so one spell cannot push the run-level sd past the look's limit (docstring)
        "base": {"model_args": {**TINY_MODEL, "train_iters": 64}},
        "rungs": RUNGS,
        "lenses": None,
    }
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(body, sort_keys=False))


@pytest.fixture
def ladders_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "ladders"
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(folder))
    return folder


def _run(ladders_dir: Path, s3_server, name: str, repeats: dict[str, Any]):
    from traceladder.embedded.local_airflow import dag_test

    write_ladder(ladders_dir, name, repeats)
    dag_run = dag_test(f"traceladder-{name}")
    prefix = f"traceladder/{name}/{safe_key_part(dag_run.run_id)}"
    stored = objects(s3_server.client(), s3_server.bucket, prefix + "/")
    return dag_run, task_states(dag_run), prefix, stored


def _slots(states: dict[tuple[str, int], str], block: int) -> set[str]:
    return {s for (t, _), s in states.items() if t.startswith(f"block_{block:02d}.rungs_")}


def test_early_stop_skips_the_remaining_blocks(airflow_home, s3_server, ladders_dir: Path) -> None:
    repeats = {"min": 6, "max": 7, "target_mde_pct": 99.0}
    dag_run, states, prefix, stored = _run(ladders_dir, s3_server, "adaptive-stop", repeats)
    assert str(dag_run.state) == "success", states
    assert all(_slots(states, k) == {"success"} for k in range(6))
    summary = json.loads(stored[f"{prefix}/summary/summary.json"])
    looks = summary["repeats"]["looks"]
    # the look before block 6 found every MDE <= 99%: it and the whole block are skipped
    assert states[("block_06.look", -1)] == "skipped", f"no stop: {looks}, model {summary['model']}"
    assert _slots(states, 6) == {"skipped"} and states[("block_06.done", -1)] == "success"
    assert states[("summary", -1)] == states[("publish", -1)] == states[("ladder_status", -1)] == "success"

    plan = json.loads(stored[f"{prefix}/plan.json"])
    assert plan["adaptive"]["looks"] == [6, 7] and len(plan["adaptive"]["critical_z"]) == 2
    stop = json.loads(stored[f"{prefix}/stop.json"])
    assert stop["blocks"] == 6 and stop["target_reached"] and stop["worst_mde_pct"] <= 99.0
    assert stop["critical_z"] == pytest.approx(plan["adaptive"]["critical_z"][0])
    ran = {key.split("/")[-2] for key in stored if key.endswith("/metrics.json")}
    assert ran == {f"{r['name']}.none.r{k}" for r in RUNGS for k in range(6)}  # no run of block 6

    repeats_doc = summary["repeats"]
    assert (repeats_doc["blocks_run"], repeats_doc["blocks_planned"], repeats_doc["stopped"]) == (
        6,
        7,
        "target_reached",
    )
    assert repeats_doc["critical_z_used"] == pytest.approx(stop["critical_z"])
    assert summary["failed_rungs"] == [] and all(r["runs"] == 6 for r in summary["rungs"])
    mdes = {r["rung"]: r["vs_parent"]["mde_pct"] for r in summary["rungs"] if r.get("vs_parent")}
    assert mdes == pytest.approx(stop["mde_pct"])  # the summary judges at the look that stopped
    assert "6 of 7 planned blocks ran: stopped" in stored[f"{prefix}/summary/summary.md"].decode()
    assert 'id="adaptive-repeats"' in stored[f"{prefix}/summary/report.html"].decode()


def test_unreached_target_runs_to_max(airflow_home, s3_server, ladders_dir: Path) -> None:
    repeats = {"min": 2, "max": 3, "target_mde_pct": 0.01}
    dag_run, states, prefix, stored = _run(ladders_dir, s3_server, "adaptive-max", repeats)
    assert str(dag_run.state) == "success", states
    assert states[("block_02.look", -1)] == "success"  # looked, and went on
    assert all(_slots(states, k) == {"success"} for k in range(3))
    assert f"{prefix}/stop.json" not in stored
    summary = json.loads(stored[f"{prefix}/summary/summary.json"])
    repeats_doc = summary["repeats"]
    assert (repeats_doc["blocks_run"], repeats_doc["blocks_planned"], repeats_doc["stopped"]) == (3, 3, "max_reached")
    assert [look["blocks"] for look in repeats_doc["looks"]] == [2, 3]
    assert summary["failed_rungs"] == [] and all(r["runs"] == 3 for r in summary["rungs"])


def test_time_budget_ends_the_blocks_at_a_final_look(airflow_home, s3_server, ladders_dir: Path) -> None:
    """A budget no block fits: the look before block 2 (min) stops the ladder by the clock, and
    that look, made the final analysis, judges at the critical value that spends all of alpha."""
    from traceladder.stats.sequential import Design

    repeats = {"min": 2, "max": 4, "target_mde_pct": 0.01, "budget_s": 1.0}
    dag_run, states, prefix, stored = _run(ladders_dir, s3_server, "adaptive-budget", repeats)
    assert str(dag_run.state) == "success", states
    assert all(_slots(states, k) == {"success"} for k in range(2))
    assert states[("block_02.look", -1)] == "skipped" and _slots(states, 2) == _slots(states, 3) == {"skipped"}
    stop = json.loads(stored[f"{prefix}/stop.json"])
    final = Design(2, 4, 0.01).final_z_at(2)
    assert (stop["blocks"], stop["reason"], stop["target_reached"]) == (2, "budget", False)
    assert stop["critical_z"] == pytest.approx(final)
    summary = json.loads(stored[f"{prefix}/summary/summary.json"])
    repeats_doc = summary["repeats"]
    assert (repeats_doc["blocks_run"], repeats_doc["stopped"], repeats_doc["budget_s"]) == (2, "budget", 1.0)
    assert repeats_doc["critical_z_used"] == pytest.approx(final)
    assert all(r["runs"] == 2 for r in summary["rungs"])
    assert "more than 1 s after the plan (the time budget)" in stored[f"{prefix}/summary/summary.md"].decode()
