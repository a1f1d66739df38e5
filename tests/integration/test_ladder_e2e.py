"""A ladder through real Airflow (`dag.test()`), on the local backend, against a real S3 server.

The ladders here extend the shipped proxy-local ladder and shrink it: two rungs and one lens, one
repeat each, few iterations. They live in a temporary ladders folder that the DAG files read."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from traceladder.config.loader import CONFIG_DIR
from traceladder.storage.artifacts import safe_key_part
from traceladder.runner.primus_log import parse_iterations

from tests.integration.ladder_checks import check_manifests, objects, task_states
from testkit.tiny_proxy import TINY_LENS

pytestmark = pytest.mark.e2e

SMALL = {
    "extends": str(CONFIG_DIR / "ladders" / "proxy-local.yaml"),
    "repeats": 1,
    "warmup_iters": 1,
    "timeout_s": 240,
    "base": {"model_args": {"train_iters": 5}},
    "switches": {
        "lens": {
            "values": {
                "torch_rank0": TINY_LENS,
                "torch_all_ranks": TINY_LENS,
            }
        }
    },
}


def write_ladder(folder: Path, name: str, extra: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump({**SMALL, "ladder": name, **extra}, sort_keys=False))


@pytest.fixture
def ladders_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "ladders"
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(folder))
    return folder


def slot_task(block: int, position: int) -> tuple[str, int]:
    return (f"block_{block:02d}.rungs_localhost_{position:02d}", -1)


def ran_in_order(stored: dict[str, bytes], run_prefix: str, design: dict[str, Any]) -> list[str]:
    """The rung ids in the order they really ran (from the runner's wall-clock stamps), checked
    against the plan's design: same order, and no run overlapping the next."""
    metrics = [json.loads(body) for key, body in stored.items() if key.endswith("/metrics.json")]
    metrics.sort(key=lambda m: m["started_at"])
    for before, after in zip(metrics, metrics[1:]):
        assert before["ended_at"] <= after["started_at"], (before["rung_id"], after["rung_id"])
    for m in metrics:
        assert design["blocks"][m["block"]][m["position"]] == m["rung_id"]
    return [m["rung_id"] for m in metrics]


def test_two_rung_one_lens_ladder_end_to_end(airflow_home, s3_server, ladders_dir: Path) -> None:
    from traceladder.embedded.local_airflow import dag_test

    write_ladder(
        ladders_dir,
        "e2e-local",
        {
            "rungs": [{"name": "baseline"}, {"name": "fusions", "parent": "baseline", "set": {"fusions": True}}],
            "lenses": {"rung": "fusions", "use": ["none", "torch_rank0"], "every_rung": "torch_rank0"},
        },
    )
    dag_run = dag_test("traceladder-e2e-local")
    states = task_states(dag_run)
    assert str(dag_run.state) == "success", states
    # a first run has no history, so no suspects: the triage is not started (skipped, not failed)
    assert states[("start_triage", -1)] == "skipped", states
    assert all(state == "success" for k, state in states.items() if k != ("start_triage", -1)), states
    # three blocks of two: the measure block, the lens block, the every-rung lens block
    assert {k for k in states if k[0].startswith("block_") and not k[0].endswith(".done")} == {
        slot_task(b, p) for b in range(3) for p in range(2)
    }
    assert ("analyze", 0) in states

    client = s3_server.client()
    run_prefix = f"traceladder/e2e-local/{safe_key_part(dag_run.run_id)}"
    stored = objects(client, s3_server.bucket, run_prefix + "/")
    plan = json.loads(stored[f"{run_prefix}/plan.json"])
    design = plan["design"]
    assert isinstance(design["seed"], int)
    assert [sorted(b) for b in design["blocks"]] == [
        ["baseline.none.r0", "fusions.none.r0"],
        ["fusions.none.l0", "fusions.torch_rank0.l0"],
        ["baseline.torch_rank0.p0", "fusions.torch_rank0.p0"],
    ]
    # the order the rungs actually ran in is the plan's design
    assert ran_in_order(stored, run_prefix, design) == [i for block in design["blocks"] for i in block]

    for rung_id in (
        "baseline.none.r0",
        "fusions.none.r0",
        "fusions.none.l0",
        "fusions.torch_rank0.l0",
        "baseline.torch_rank0.p0",
    ):
        for name in ("log.txt.gz", "metrics.json", "spec.json", "manifest.json"):
            assert f"{run_prefix}/{rung_id}/{name}" in stored, f"{rung_id}/{name}"
        metrics = json.loads(stored[f"{run_prefix}/{rung_id}/metrics.json"])
        assert metrics["status"] == "ok" and metrics["step_ms"] > 0 and metrics["tokens_per_sec_per_gpu"] > 0
        # metric: cpu's figures from a real proxy log: the run's mean CPU time per step, and its
        # tokens per CPU-second, a step's tokens over that mean (though Primus's first kept line
        # has no tokens/s): the same tokens a step as its tokens/s/GPU times its step time
        cpu_values = metrics["step_cpu_ms_values"]
        assert cpu_values and metrics["step_cpu_ms"] == pytest.approx(sum(cpu_values) / len(cpu_values))
        assert metrics["step_cpu_statistic"] == "mean"
        tokens_a_step = metrics["tokens_per_cpu_s_per_gpu"] * metrics["step_cpu_ms"] / 1000
        logged = parse_iterations(gzip.decompress(stored[f"{run_prefix}/{rung_id}/log.txt.gz"]).decode().splitlines())
        each = [r.tokens_per_sec_per_gpu * r.elapsed_ms / 1000 for r in logged if r.tokens_per_sec_per_gpu]
        assert each and tokens_a_step == pytest.approx(each[-1], rel=0.005)  # the log's rounding
        assert metrics["provenance"]["config_hash"] and metrics["provenance"]["tools"]["torch"]
        assert b"iteration" in gzip.decompress(stored[f"{run_prefix}/{rung_id}/log.txt.gz"])
    assert {json.loads(stored[f"{run_prefix}/{i}/metrics.json"])["purpose"] for i in design["blocks"][2]} == {"profile"}
    lens_metrics = json.loads(stored[f"{run_prefix}/fusions.torch_rank0.l0/metrics.json"])
    assert lens_metrics["iterations_used"] == [2, 3]  # the profiler window, like with like
    assert lens_metrics["traces"] == [f"{run_prefix}/fusions.torch_rank0.l0/traces/rank0.pt.trace.json.gz"]
    for rung_id in ("fusions.torch_rank0.l0", "baseline.torch_rank0.p0", "fusions.torch_rank0.p0"):
        for report in ("gpu_timeline.csv", "ops_summary.csv", "analysis.json"):  # every-rung traces are analysed too
            assert f"{run_prefix}/{rung_id}/analysis/rank0/{report}" in stored
    assert json.loads(stored[f"{run_prefix}/baseline.none.r0/metrics.json"])["traces"] == []
    assert len(check_manifests(stored)) >= 6 * 5

    summary = json.loads(stored[f"{run_prefix}/summary/summary.json"])
    assert [r["rung"] for r in summary["rungs"]] == ["baseline", "fusions"]
    assert summary["failed_rungs"] == []
    assert summary["lenses"][0]["lens"] == "torch_rank0" and summary["lenses"][0]["overhead_ratio"]["mean"] > 0
    assert summary["profile"]["device"] == "cpu" and summary["profile"]["timeline"]["total_time"] > 0
    latest = json.loads(
        client.get_object(Bucket=s3_server.bucket, Key="traceladder/e2e-local/latest.json")["Body"].read()
    )
    assert latest["summary_json"] == f"{run_prefix}/summary/summary.json"


@pytest.mark.faults  # fault 6 of the matrix (issue 19)
def test_crashing_rung_fails_its_task_and_the_summary_marks_it(airflow_home, s3_server, ladders_dir: Path) -> None:
    from traceladder.embedded.local_airflow import dag_test

    write_ladder(
        ladders_dir,
        "e2e-faults",
        {
            "switches": {
                **SMALL["switches"],
                "fault": {
                    "default": "none",
                    "values": {"none": {}, "crash": {"docker_env_vars": {"TRACELADDER_PROXY_FAIL_AT_ITER": "3"}}},
                },
            },
            "rungs": [{"name": "baseline"}, {"name": "crashes", "parent": "baseline", "set": {"fault": "crash"}}],
            "lenses": None,
        },
    )
    dag_run = dag_test("traceladder-e2e-faults")
    states = task_states(dag_run)
    assert str(dag_run.state) == "failed"
    client = s3_server.client()
    run_prefix = f"traceladder/e2e-faults/{safe_key_part(dag_run.run_id)}"
    stored = objects(client, s3_server.bucket, run_prefix + "/")
    (block,) = json.loads(stored[f"{run_prefix}/plan.json"])["design"]["blocks"]
    # whichever position the crash drew, the other rung of its block still ran (ALL_DONE)
    assert states[slot_task(0, block.index("baseline.none.r0"))] == "success"
    assert states[slot_task(0, block.index("crashes.none.r0"))] == "failed"
    assert states[("summary", -1)] == "success" and states[("publish", -1)] == "success"
    assert states[("ladder_status", -1)] == "failed"
    assert states[("analyze", -1)] == "skipped"  # no lens, no traces: an empty expansion
    assert ran_in_order(stored, run_prefix, {"blocks": [block]}) == block

    assert json.loads(stored[f"{run_prefix}/baseline.none.r0/metrics.json"])["status"] == "ok"
    crashed = json.loads(stored[f"{run_prefix}/crashes.none.r0/metrics.json"])
    assert crashed["status"] == "failed" and "exited" in crashed["error"]
    assert f"{run_prefix}/crashes.none.r0/log.txt.gz" in stored
    summary = json.loads(stored[f"{run_prefix}/summary/summary.json"])
    assert summary["failed_rungs"] == ["crashes.none.r0"]
    assert "FAILED" in stored[f"{run_prefix}/summary/summary.md"].decode()
