"""Adaptive repeats through real Airflow (`dag.test()`), the local backend and a real S3 server:
the look before each block past `min` reads the finished runs' metrics from S3 and, once every
rung's MDE is at or below the target, skips the remaining blocks as Airflow skips tasks; the
summary still runs and says how many blocks ran of how many planned, and why.

The ladders extend proxy-local with the tiny proxy (tests/tiny_proxy.py), no lenses, min 2 and
max 3 blocks: a target of 99% stops after two blocks, one of 0.01% runs all three.

Five rungs give the look after two blocks 4 residual df, so its MDE (first look, z 2.51) is
(t_crit + t.80) * se = 5.3 sd: at or below 99% while the run-level sd stays under 13%. The tiny
proxy's sd on its CPU-time metric was 4.6% here, with the machine's load average at 11 on 2 cores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from traceladder.config.loader import CONFIG_DIR
from traceladder.storage.artifacts import safe_key_part

from ladder_checks import objects, task_states
from tiny_proxy import TINY_MODEL

pytestmark = pytest.mark.e2e

RUNGS = [
    {"name": "baseline"},
    {"name": "fusions", "parent": "baseline", "set": {"fusions": True}},
    {"name": "attn_gluon_v3", "parent": "fusions", "set": {"attention": "gluon_v3"}},
    {"name": "attn_turbo", "parent": "attn_gluon_v3", "set": {"attention": "turbo"}},
    {"name": "deepep", "parent": "attn_turbo", "set": {"deepep": True}},
]


def write_ladder(folder: Path, name: str, rungs: list[dict[str, Any]], target: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    body = {
        "extends": str(CONFIG_DIR / "ladders" / "proxy-local.yaml"),
        "ladder": name,
        "schedule": None,
        "repeats": {"min": 2, "max": 3, "target_mde_pct": target},
        "warmup_iters": 1,
        "timeout_s": 240,
        "base": {"model_args": {**TINY_MODEL, "train_iters": 8}},
        "rungs": rungs,
        "lenses": None,
    }
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(body, sort_keys=False))


@pytest.fixture
def ladders_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "ladders"
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(folder))
    return folder


def _run(ladders_dir: Path, s3_server, name: str, rungs: list[dict[str, Any]], target: float):
    from traceladder.dev.local_airflow import dag_test

    write_ladder(ladders_dir, name, rungs, target)
    dag_run = dag_test(f"traceladder-{name}")
    prefix = f"traceladder/{name}/{safe_key_part(dag_run.run_id)}"
    stored = objects(s3_server.client(), s3_server.bucket, prefix + "/")
    return dag_run, task_states(dag_run), prefix, stored


def _slots(states: dict[tuple[str, int], str], block: int) -> set[str]:
    return {s for (t, _), s in states.items() if t.startswith(f"block_{block:02d}.rungs_")}


def test_early_stop_skips_the_remaining_blocks(airflow_home, s3_server, ladders_dir: Path) -> None:
    dag_run, states, prefix, stored = _run(ladders_dir, s3_server, "adaptive-stop", RUNGS, target=99.0)
    assert str(dag_run.state) == "success", states
    assert _slots(states, 0) == _slots(states, 1) == {"success"}
    # the look before block 2 found every MDE <= 99%: it and the whole block are skipped
    assert states[("block_02.look", -1)] == "skipped"
    assert _slots(states, 2) == {"skipped"} and states[("block_02.done", -1)] == "success"
    assert states[("summary", -1)] == states[("publish", -1)] == states[("ladder_status", -1)] == "success"

    plan = json.loads(stored[f"{prefix}/plan.json"])
    assert plan["adaptive"]["looks"] == [2, 3] and len(plan["adaptive"]["critical_z"]) == 2
    stop = json.loads(stored[f"{prefix}/stop.json"])
    assert stop["blocks"] == 2 and stop["target_reached"] and stop["worst_mde_pct"] <= 99.0
    assert stop["critical_z"] == pytest.approx(plan["adaptive"]["critical_z"][0])
    ran = {key.split("/")[-2] for key in stored if key.endswith("/metrics.json")}
    assert ran == {f"{r['name']}.none.r{k}" for r in RUNGS for k in (0, 1)}  # no run of block 2

    summary = json.loads(stored[f"{prefix}/summary/summary.json"])
    repeats = summary["repeats"]
    assert (repeats["blocks_run"], repeats["blocks_planned"], repeats["stopped"]) == (2, 3, "target_reached")
    assert repeats["critical_z_used"] == pytest.approx(stop["critical_z"])
    assert summary["failed_rungs"] == [] and all(r["runs"] == 2 for r in summary["rungs"])
    mdes = {r["rung"]: r["vs_parent"]["mde_pct"] for r in summary["rungs"] if r.get("vs_parent")}
    assert mdes == pytest.approx(stop["mde_pct"])  # the summary judges at the look that stopped
    assert "2 of 3 planned blocks ran" in stored[f"{prefix}/summary/summary.md"].decode()
    assert 'id="adaptive-repeats"' in stored[f"{prefix}/summary/report.html"].decode()


def test_unreached_target_runs_to_max(airflow_home, s3_server, ladders_dir: Path) -> None:
    dag_run, states, prefix, stored = _run(ladders_dir, s3_server, "adaptive-max", RUNGS[:2], target=0.01)
    assert str(dag_run.state) == "success", states
    assert states[("block_02.look", -1)] == "success"  # looked, and went on
    assert all(_slots(states, k) == {"success"} for k in range(3))
    assert f"{prefix}/stop.json" not in stored
    summary = json.loads(stored[f"{prefix}/summary/summary.json"])
    repeats = summary["repeats"]
    assert (repeats["blocks_run"], repeats["blocks_planned"], repeats["stopped"]) == (3, 3, "max_reached")
    assert [look["blocks"] for look in repeats["looks"]] == [2, 3]
    assert summary["failed_rungs"] == [] and all(r["runs"] == 3 for r in summary["rungs"])
