"""The triage's runs on the slurm backend (workflows/triage_backends.py `slurm_run_block`), their error
paths without a cluster: a finished job's outcome in one line naming the job, its login node and
nodes (`job_outcome`), and a login node that cannot be reached, which makes the candidate a skipped
step of the bisection with that line as its reason. The runs on a real two-node cluster are in
tests/integration/test_triage_slurm.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from traceladder.airflow.hooks.slurm import JobState
from traceladder.airflow.operators.slurm import job_outcome
from testkit.results import rung_result
from testkit.triage_docs import build_group
from traceladder.core.documents import RungResult
from traceladder.config.loader import CONFIG_DIR, load_clusters, load_ladder
from traceladder.core.ports import free_port
from traceladder.plan.build import build_plan
from traceladder.storage.artifacts import DirArtifactSink
from traceladder.triage.bisect import BuildChanges, apply_build
from traceladder.triage.confirm import Budget
from traceladder.triage.engine import TriageContext, triage_run

pytestmark = pytest.mark.triage

CONN = "tl_slurm_unreachable"


def _result(status: str, job_id: str | None, error: str | None = None) -> RungResult:
    """metrics.json as the job's runner stores it, read back as the triage reads it."""
    provenance = {"slurm": {"job_id": job_id, "nodes": "n1", "node": "n1", "nnodes": 1}} if job_id else {}
    spec = {"ladder": "l", "rung": "baseline", "rung_id": "triage-B.b0"}
    return rung_result(spec, "w5-triage", status=status, step_ms=12.5, error=error, provenance=provenance)


def test_a_completed_jobs_stored_result_is_the_runs_metrics_with_the_job_named() -> None:
    state = JobState("41", "COMPLETED", "n1", "0:0", "None")
    out = job_outcome("triage-B.b0", CONN, state, _result("ok", "41"))
    assert out["status"] == "ok" and out["step_ms"] == 12.5
    assert out["slurm"] == {"job_id": "41", "state": "COMPLETED", "nodes": "n1", "login": CONN}


def test_a_failed_workload_keeps_its_own_status_and_names_the_job() -> None:
    state = JobState("42", "FAILED", "n2", "1:0", "NonZeroExitCode")
    out = job_outcome("triage-B.b0", CONN, state, _result("timeout", "42", "the rung passed its deadline of 2 s"))
    assert out["status"] == "timeout"
    assert out["error"] == f"Slurm job 42 on n2 ({CONN}) ended FAILED: the rung passed its deadline of 2 s"


@pytest.mark.parametrize(
    "state,detail,expected",
    [
        (
            JobState("43", "FAILED", "n1", "127:0", "NonZeroExitCode"),
            None,
            f"Slurm job 43 ({CONN}) ended FAILED on n1 (exit 127:0, NonZeroExitCode); rung triage-B.b0 stored"
            " no result",
        ),
        (
            JobState("44", "TIMEOUT", "n2", "0:15", "TimeLimit"),
            None,
            f"Slurm job 44 ({CONN}) ended TIMEOUT on n2 (exit 0:15, TimeLimit); rung triage-B.b0 stored no result",
        ),
        (
            JobState("45", "NODE_FAIL", "n2", "0:0", "None"),
            "node n2 down (Not responding)",
            f"Slurm job 45 ({CONN}) ended NODE_FAIL: node n2 down (Not responding); rung triage-B.b0 stored no result",
        ),
    ],
)
def test_a_job_that_stored_nothing_fails_in_one_line_naming_job_and_login_node(
    state: JobState, detail: str | None, expected: str
) -> None:
    out = job_outcome("triage-B.b0", CONN, state, None, detail)
    assert out["status"] == "failed" and out["error"] == expected and "\n" not in expected


def test_an_earlier_jobs_metrics_under_the_same_key_are_not_taken_for_this_jobs() -> None:
    """A retried task's confirm runs reuse their rung ids (`triage-baseline.s0-B.b0`): a job that
    stored nothing must not read back the earlier try's metrics.json."""
    state = JobState("47", "FAILED", "n1", "1:0", "NonZeroExitCode")
    out = job_outcome("triage-baseline.s0-B.b0", CONN, state, _result("ok", "46"))
    assert out["status"] == "failed" and "Slurm job 47" in out["error"] and "stored no result" in out["error"]


# ---- a login node that cannot be reached: the candidate is skipped in the bisection, with the line

BUILDS = {
    f"n{i}": BuildChanges(
        f"n{i}", f"2026-11-{20 + i:02d}T02:00:00+00:00", {"extra_work_pct": 300} if i >= 3 else {}, {}
    )
    for i in range(5)
}


def _slurm_ladder(tmp_path: Path):
    clusters = {
        "schema": 1,
        "clusters": {
            "hpc": {
                "backend": "slurm",
                "hosts": [{"name": "hpc-login", "pool": "traceladder-hpc", "ssh_conn_id": CONN}],
                "slurm": {"partition": "p", "container_runtime": "direct", "workload": "proxy", "poll_s": 1},
            }
        },
    }
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump(clusters))
    doc = {
        "schema": 1,
        "extends": str(CONFIG_DIR / "ladders" / "proxy-local.yaml"),
        "ladder": "tslurm",
        "backend": "slurm",
        "cluster": "hpc",
        "schedule": None,
    }
    (tmp_path / "l.yaml").write_text(yaml.safe_dump(doc))
    return load_ladder(tmp_path / "l.yaml", load_clusters(tmp_path / "clusters.yaml"))


def test_an_unreachable_login_node_skips_the_candidate_naming_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceladder.workflows.triage_backends import slurm_run_block

    port = free_port()  # nothing listens there: the login node is down
    conn = {"conn_type": "ssh", "host": "127.0.0.1", "port": port, "login": "root", "extra": {"conn_timeout": 2}}
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps(conn))
    loaded = _slurm_ladder(tmp_path)
    base = build_plan(loaded, rungs=["baseline"], lens="none", repeats=1)[0].to_dict()
    on_slurm = slurm_run_block(loaded, "w5", "traceladder-triage")
    slurm_runs: list[dict] = []

    def run_block(spec: dict, side: str, block: int) -> dict:
        """Build n2's runs go to the (unreachable) cluster; the others are measured figures of a
        build without (100 ms) and with (400 ms) the injected work."""
        build = spec["docker_env_vars"]["TRACELADDER_BUILD"]
        if build == "n2":
            slurm_runs.append(out := on_slurm(spec, side, block))
            return out
        step = 400.0 if BUILDS[build].model_args else 100.0
        values = [step * (1 + 0.001 * k + 0.002 * block) for k in range(-2, 3)]
        return {"status": "ok", "step_ms": step * (1 + 0.002 * block), "step_ms_values": values}

    good = apply_build(base, BUILDS, "n0")
    bad = apply_build(base, BUILDS, "n4")
    ctx = TriageContext(
        store=DirArtifactSink(tmp_path / "s3"),
        prefix="traceladder",
        ladder="tslurm",
        run_id="w5",
        run_block=run_block,
        budget=Budget(blocks=4),
        builds=BUILDS,
    )
    (doc,) = triage_run(ctx, [build_group(good, bad, "n0", "n4", "baseline", delta_pct=300.0)])
    (failed,) = slurm_runs  # n2 was tried once, in its first block, and then skipped
    assert failed["status"] == "failed" and f"Slurm on {CONN}:" in failed["error"]
    assert f"port {port} on 127.0.0.1" in failed["error"] and "\n" not in failed["error"]
    (skipped,) = [s for s in doc.steps if s.verdict == "skipped"]
    assert (skipped.kind, skipped.candidate) == ("bisect", "n2")
    assert skipped.reason == f"n2 did not run: {failed['error']}"
    # as `git bisect skip`: with n2 unknown, the cause is n2 or n3
    assert doc.label == "confirmed regression" and doc.first_bad is None
    assert doc.conclusion == "between n1 and n3 (only skipped candidates are left between them); skipped: n2"
