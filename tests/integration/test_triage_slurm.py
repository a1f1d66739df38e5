"""A triage's confirm on the real two-node Slurm cluster of the Slurm tests (issue 51, "confirm on
the real two-node Slurm"; tests/integration/slurm_cluster.py: slurmctld, slurmd n1 and n2, munge
and a login sshd), through the triage task's own body (workflows/triage_tasks.py `run_triage`).

A good run (build n0) and a bad run (build n1, which injects real extra work into the tiny proxy)
are seeded in S3 as a published ladder run stores them (plan, specs, metrics, the summary naming the
suspect). Every A and B run of the confirm is then a batch job on the ladder's partition, submitted
through the login node's SSH connection, waited for in the task and read back from the metrics.json
the job stored: the test finds each block's job in the controller (COMPLETED, on partition `p`, its
comment naming the triage's task instance) and the job id in the stored result's provenance.

A Slurm that takes no job (both nodes drained) ends the triage `insufficient data`, with the one
line naming the login node and the drained nodes as the skipped confirm's reason.

In CI (CI=true) a cluster that cannot start fails these tests; elsewhere they skip with the reason."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from testkit.triage_docs import describe_steps

from tests.integration.test_slurm import SSH_CONN, slurm_conn, slurm_ladders, write_ladder  # noqa: F401 - fixtures, requested by name
from traceladder.core.documents import TriageDoc

pytestmark = [pytest.mark.slurm, pytest.mark.triage]

BUILDS = [
    {"name": "n0", "created": "2026-11-20T02:00:00Z"},
    # far more than the bench's +15%, so the 3-block confirm (its first look) resolves it
    {"name": "n1", "created": "2026-11-21T02:00:00Z", "changes": {"model_args": {"extra_work_pct": 300}}},
]
TRIAGE = {"budget_blocks": 3}


class _TI:
    """The triage task instance the run block names in its jobs' comment."""

    def __init__(self, ladder: str) -> None:
        from traceladder.workflows.triage_tasks import TRIAGE_DAG_ID, triage_run_id

        self.dag_id, self.run_id, self.task_id, self.map_index = (
            TRIAGE_DAG_ID,
            triage_run_id(ladder, "w5"),
            "triage",
            -1,
        )


def _seed(ladder: str) -> None:
    """Runs w4 (build n0) and w5 (build n1) of rung baseline, and w5's summary naming the suspect."""
    from traceladder.airflow.ladders import ladder_store
    from testkit.results import store_measured_run
    from testkit.triage_docs import store_suspect_summary, suspect_fields
    from traceladder.plan.build import build_plan
    from traceladder.triage.bisect import apply_build
    from traceladder.triage.from_ladder import catalog

    loaded, store = ladder_store(ladder)
    base = build_plan(loaded, rungs=["baseline"], lens="none", repeats=1)[0].to_dict()
    for run_id, build, step_ms in (("w4", "n0", 100.0), ("w5", "n1", 400.0)):
        spec = apply_build(base, catalog(loaded), build)
        store_measured_run(store, "traceladder", ladder, run_id, spec, step_ms, {"build": build, "host": "slurm-test"})
    store_suspect_summary(store, "traceladder", ladder, suspect_fields("baseline", delta_pct=300.0))


def _triage_doc(s3_server: Any, ladder: str) -> TriageDoc:
    key = f"traceladder/{ladder}/w5/triage/baseline/triage.json"
    return TriageDoc.from_json(s3_server.client().get_object(Bucket=s3_server.bucket, Key=key)["Body"].read(), key)


def _stored_metrics(s3_server: Any, ladder: str, side: str, block: int) -> dict[str, Any]:
    key = f"traceladder/{ladder}/w5-triage/triage-baseline.s0-{side}.b{block}/metrics.json"
    return json.loads(s3_server.client().get_object(Bucket=s3_server.bucket, Key=key)["Body"].read())


def test_a_confirm_runs_its_blocks_as_slurm_jobs_and_confirms_the_injected_work(
    slurm_ladders: Path,  # noqa: F811 - the fixture
    slurm_conn,  # noqa: F811 - the fixture
    s3_server,
) -> None:
    from traceladder.airflow.hooks.slurm import JobOwner, owner_comment, parse_fields
    from traceladder.workflows.triage_tasks import run_triage

    # timeout_s: a run's Python and torch start-up took ~27 s at load 12 on 2 CPUs, and one run of
    # the first try passed the Slurm tests' 120 s: in block 0 that would skip the candidate
    ladder = write_ladder(
        slurm_ladders, "slurm-triage", builds=BUILDS, build="n1", triage=TRIAGE, metric="cpu", timeout_s=300
    )
    _seed(ladder)
    ti = _TI(ladder)
    started = time.monotonic()
    briefs = run_triage({"ladder": ladder, "bad_run": "w5"}, {"ti": ti}, approved=True)
    wall_s = time.monotonic() - started
    print(f"[triage-slurm] the confirm's {TRIAGE['budget_blocks']} blocks on Slurm took {wall_s:.1f} s")
    doc = _triage_doc(s3_server, ladder)
    (brief,) = briefs
    assert {k: brief[k] for k in ("rung", "state", "label", "first_bad")} == {
        "rung": "baseline",
        "state": "done",
        "label": "confirmed regression",
        "first_bad": "n1",
    }, describe_steps(doc.steps)
    assert str(brief["confirm"]).startswith("baseline: the confirm: confirmed +"), brief
    (step,) = doc.steps  # two builds: the confirm itself compared them
    assert (step.kind, step.good, step.candidate, step.verdict) == ("confirm", "w4", "w5", "confirmed"), step
    assert step.delta_pct is not None and step.delta_pct > 20 and step.blocks == TRIAGE["budget_blocks"]
    jobs: set[str] = set()
    comment = owner_comment(JobOwner(ti.dag_id, ti.run_id, ti.task_id, -1))
    for block in range(step.blocks):
        figures = {}
        for side, build in (("A", "n0"), ("B", "n1")):
            metrics = _stored_metrics(s3_server, ladder, side, block)
            slurm = metrics["provenance"]["slurm"]
            assert metrics["status"] == "ok" and metrics["provenance"]["build"] == build, metrics
            assert slurm["node"] in ("n1", "n2") and slurm["nnodes"] == 1
            job = parse_fields(slurm_conn.scontrol("show", "job", "-o", slurm["job_id"]).stdout)
            assert (job["JobState"], job["Partition"], job["Comment"]) == ("COMPLETED", "p", comment), job
            jobs.add(slurm["job_id"])
            figures[side] = metrics["step_cpu_ms"]
        assert figures["B"] > figures["A"], figures
    assert len(jobs) == 2 * step.blocks  # one job per run, none re-used
    left = slurm_conn.run("squeue", "-h", "-t", "PD,R,CG", "-o", "%i").stdout.split()
    assert not jobs & set(left)


def test_a_slurm_that_takes_no_job_ends_insufficient_naming_the_nodes(
    slurm_ladders: Path,  # noqa: F811 - the fixture
    slurm_conn,  # noqa: F811 - the fixture
    s3_server,
) -> None:
    from traceladder.workflows.triage_tasks import run_triage

    ladder = write_ladder(slurm_ladders, "slurm-triage-drained", builds=BUILDS, build="n1", triage=TRIAGE)
    _seed(ladder)
    for node in ("n1", "n2"):
        slurm_conn.scontrol("update", f"nodename={node}", "state=drain", "reason=tl-triage-maint")
    try:
        briefs = run_triage({"ladder": ladder, "bad_run": "w5"}, {"ti": _TI(ladder)}, approved=True)
    finally:
        for node in ("n1", "n2"):
            slurm_conn.scontrol("update", f"nodename={node}", "state=resume")
        slurm_conn.wait_idle(60)
    (brief,) = briefs
    assert {k: brief[k] for k in ("rung", "state", "label", "first_bad")} == {
        "rung": "baseline",
        "state": "done",
        "label": "insufficient data",
        "first_bad": None,
    }, brief
    (step,) = _triage_doc(s3_server, ladder).steps
    assert step.verdict == "skipped" and step.reason is not None and "\n" not in step.reason
    # block 0's first side (its order is drawn) is the one that could not run
    assert re.match(
        rf"(w4|w5) did not run: {SSH_CONN}: preflight: rung triage-baseline\.s0-[AB]\.b0 needs 1 node\(s\)", step.reason
    )
    assert "n1 drained (tl-triage-maint)" in step.reason and "n2 drained (tl-triage-maint)" in step.reason
