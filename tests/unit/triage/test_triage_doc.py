"""triage.json typed end to end (issue 59, item 5): a schema-1 file as the engine wrote it before
(tests/fixtures/triage/triage-schema1.json) reads and renders; schema 2's typed candidates, looks
and explanation, its bad input named in one line; and the engine records what it judged by, where
it ran and what it spent."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from testkit.triage_docs import build_change, step, suspect, triage_doc
from tests.conftest import REPO_ROOT
from traceladder.core.documents import (
    DocumentError,
    Mover,
    TriageCandidate,
    TriageDoc,
    TriageEnds,
    TriageLook,
    TriageSpent,
)
from traceladder.core.summary_parts import DeltaRow
from traceladder.core.triage_doc import DECISION_RULES, LOOK_STOPS, TRIAGE_METRICS
from traceladder.stats.decisions import CONFIRM_VERDICTS, RULES
from traceladder.storage.artifacts import DirArtifactSink
from traceladder.triage import record
from traceladder.triage.bisect import BuildChanges, Candidate, apply_build, image_candidates, setting_candidates
from traceladder.triage.confirm import Budget
from traceladder.triage.engine import TriageContext, triage_run
from traceladder.triage.suspects import RunSetup
from traceladder.workflows.triage_backends import dag_run_id

pytestmark = pytest.mark.triage

SCHEMA1 = REPO_ROOT / "tests/fixtures/triage/triage-schema1.json"


def _raw() -> dict:
    return json.loads(SCHEMA1.read_text())


# ---- a schema-1 file from before the change


def test_a_schema1_file_reads_with_its_parts_typed() -> None:
    raw = _raw()
    assert raw["schema"] == 1 and "metric" not in raw  # the fixture is the old shape
    doc = TriageDoc.from_json(SCHEMA1.read_bytes(), "triage-schema1.json")
    # what schema 1 did not record reads as None
    assert (doc.metric, doc.alpha, doc.dag_run_id, doc.digests, doc.builds, doc.spent, doc.alert) == (None,) * 7
    # each candidate's `changes` as its typed fields: a catalog build, named as the build it runs
    assert [c.name for c in doc.candidates] == [c["name"] for c in raw["candidates"]]
    assert all(isinstance(c, TriageCandidate) and c.kind == "build" for c in doc.candidates)
    assert [c.build for c in doc.candidates] == [c["changes"]["build"] for c in raw["candidates"]]
    assert [c.created for c in doc.candidates] == [c["created"] for c in raw["candidates"]]
    assert all(c.image is None and c.digest is None and c.settings is None for c in doc.candidates)
    # every step's looks typed, the step's figures its last look's
    for recorded, old in zip(doc.steps, raw["steps"]):
        assert all(isinstance(look, TriageLook) for look in recorded.looks)
        assert [look.to_dict() for look in recorded.looks] == old["looks"]
        last = recorded.looks[-1]
        assert (last.blocks, last.delta_pct, last.interval_pct) == (
            recorded.blocks,
            recorded.delta_pct,
            recorded.interval_pct,
        )
        assert (last.llr is not None) == (last.rule == "size")
    # the explanation's movers and regions typed, as the real profiled runs gave them
    ex = doc.explanation
    assert ex is not None and ex.error is None and ex.sentence
    assert all(isinstance(m, Mover) for m in ex.top_ops) and ex.top_kernels == []  # CPU traces: ops
    assert [m.to_dict() for m in ex.top_ops] == raw["explanation"]["top_ops"]
    assert all(math.isclose(m.new_us - m.base_us, m.delta_us, rel_tol=1e-9) for m in ex.top_ops)
    assert [r.to_dict() for r in ex.regions] == raw["explanation"]["regions"]
    assert all(isinstance(r, DeltaRow) for r in ex.regions) and ex.regions[0].name == "attention"
    # what it spent, counted from its steps (its devices were not recorded)
    spent = doc.spending()
    assert spent.runs == sum(s["runs"] for s in raw["steps"]) > 0 and spent.devices is None
    assert spent.run_hours == pytest.approx(sum(s["run_s"] for s in raw["steps"]) / 3600)
    assert spent.device_hours is None


def test_a_schema1_file_renders_and_is_written_back_as_schema2() -> None:
    doc = TriageDoc.from_json(SCHEMA1.read_bytes())
    page = record.report_html(doc)
    assert page.startswith("<!doctype html>") and "<h1>confirmed regression: baseline</h1>" in page
    for culprit in doc.culprits:
        assert f"<td>{culprit.name}</td>" in page
    assert "Metric: not recorded; level: not recorded." in page and "(devices not recorded)" in page
    assert f"Spent: {doc.spending().runs} runs" in page
    assert "<h2>Candidates</h2>" in page
    assert all(
        f"<td>{c.name}</td><td>build</td><td>{c.created}</td><td>build {c.build}</td>" in page for c in doc.candidates
    )
    assert doc.explanation is not None and f"{doc.explanation.top_ops[0].name} (both)" in page
    assert "region attention: +" in page
    again = json.loads(doc.to_json())
    assert again["schema"] == 2 and again["metric"] is None and again["spent"] is None
    assert "changes" not in again["candidates"][0] and again["candidates"][0]["build"] == doc.candidates[0].name
    assert TriageDoc.from_json(doc.to_json()) == doc


def test_schema1_image_and_setting_candidates_read_as_typed_fields() -> None:
    """Candidates as bisect.Candidate.as_dict wrote them at 126ec09: an image pinned by its digest,
    one without a digest, a moved tag's digest, and settings applied one at a time."""
    digest = "sha256:" + "c" * 64
    old = [
        {"name": "reg:5000/primus:n1", "kind": "image", "changes": {"image": f"reg:5000/primus@{digest}"}},
        {"name": "reg:5000/primus:n2", "kind": "image", "changes": {"image": "reg:5000/primus:n2"}, "created": None},
        {"name": "good settings", "kind": "setting", "changes": {}, "created": None},
        {"name": "+model_args.x=2", "kind": "setting", "changes": {"model_args.x": 2}, "created": None},
    ]
    raw = _raw() | {"candidates": old}
    pinned, tagged, none, one = TriageDoc.from_dict(raw).candidates
    assert (pinned.image, pinned.digest) == (f"reg:5000/primus@{digest}", digest)
    assert (tagged.image, tagged.digest) == ("reg:5000/primus:n2", None)
    assert (none.settings, one.settings) == ({}, {"model_args.x": 2}) and one.build is None
    # the bisection's own candidates give the same fields (one rule, TriageCandidate.fields_of)
    tags = [("reg:5000/primus:n1", digest, None), ("reg:5000/primus:n2", None, None)]
    ends = image_candidates(tags, "reg:5000/primus:n1", "reg:5000/primus:n2")
    assert [c.as_part() for c in ends] == [pinned, tagged]
    assert [c.as_part() for c in setting_candidates([("model_args.x", 1, 2)])] == [none, one]
    assert Candidate("n3", "build", {"build": "n3"}, "2026-11-23").as_part().build == "n3"


# ---- schema 2: bad input is one line naming the file and the field


def _doc() -> dict:
    looked = TriageLook(blocks=3, delta_pct=15.0, interval_pct=[5.0, 25.0], df=2, critical_z=3.28, stop="confirmed")
    doc = triage_doc(
        suspect(diff=build_change("n0", "n7")),
        steps=[step(delta_pct=15.0, interval_pct=[5.0, 25.0], blocks=3, looks=[looked], runs=6, run_s=36.0)],
        candidates=[Candidate("n0", "build", {"build": "n0"}).as_part()],
    )
    return doc.to_dict()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("metric"), "triage.json: metric: missing"),
        (lambda d: d.update(metric="gpu"), "triage.json: metric: 'gpu' is not one of wall, cpu"),
        (lambda d: d.update(alpha="0.05"), "triage.json: alpha: expected number, got str"),
        (lambda d: d.update(spent={"runs": 6}), "triage.json: spent: run_hours: missing"),
        (lambda d: d.update(digests={"good": 1, "bad": None}), "triage.json: digests: good: expected str, got int"),
        (lambda d: d["candidates"][0].pop("build"), "triage.json: candidates[0]: build: missing for a build candidate"),
        (lambda d: d["candidates"][0].update(kind="tag"), "triage.json: candidates[0]: kind: 'tag' is not one of"),
        (lambda d: d["steps"][0]["looks"][0].update(stop="maybe"), "triage.json: steps[0]: looks[0]: stop: 'maybe'"),
        (lambda d: d["steps"][0]["looks"][0].update(rule="sprt"), "triage.json: steps[0]: looks[0]: rule: 'sprt'"),
        (
            lambda d: d["steps"][0]["looks"][0].update(interval_pct=[1.0]),
            "triage.json: steps[0]: looks[0]: interval_pct: expected [low, high]",
        ),
        (lambda d: d["steps"][0]["looks"][0].pop("df"), "triage.json: steps[0]: looks[0]: df: missing"),
        (
            lambda d: d.update(explanation={"lens": "t", "good": "a", "bad": "b", "top_ops": [{"name": "mm"}]}),
            "triage.json: explanation: top_ops[0]: base_us: missing",
        ),
        (
            lambda d: d.update(explanation={"lens": "t", "good": "a", "bad": "b", "regions": [{"name": "r"}]}),
            "triage.json: explanation: regions[0]: delta_us: missing",
        ),
    ],
)
def test_bad_schema2_input_names_the_file_and_field(mutate, message: str) -> None:
    doc = _doc()
    mutate(doc)
    with pytest.raises(DocumentError) as info:
        TriageDoc.from_json(json.dumps(doc))
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_schema2_round_trips_and_leaves_out_an_unset_alert() -> None:
    doc = TriageDoc.from_dict(_doc())
    assert "alert" not in doc.to_dict() and doc.alert is None
    alerted = replace(doc, alert="alert-2026-12-07-mini-fusions")
    assert TriageDoc.from_json(alerted.to_json()) == alerted
    assert json.loads(alerted.to_json())["alert"] == "alert-2026-12-07-mini-fusions"
    assert doc.spending() == doc.spent == TriageSpent(runs=6, run_hours=0.01, devices=1, device_hours=0.01)


def test_the_recorded_names_are_the_decisions_names() -> None:
    assert set(LOOK_STOPS) == set(CONFIRM_VERDICTS) and set(DECISION_RULES) == set(RULES)
    assert TRIAGE_METRICS == ("wall", "cpu")


# ---- the engine fills the new fields


BUILDS = {
    f"n{i}": BuildChanges(f"n{i}", f"2026-11-{20 + i:02d}T02:00:00+00:00", {"extra_work_pct": 15} if i >= 5 else {}, {})
    for i in range(8)
}
GOOD_SPEC = {"ladder": "mini", "rung": "fusions", "lens": "none", "purpose": "measure", "rung_id": "fusions.none.m0"}
GOOD_SPEC |= {"model_args": {"train_iters": 4}, "docker_env_vars": {"TRACELADDER_BUILD": "n0"}, "image": "primus:v1"}


def _runner(spec: dict, side: str, block: int) -> dict:
    """Step CPU time 100 ms, x1.15 from build n5 on; a small wobble per block and side."""
    slow = 1.15 if BUILDS[spec["docker_env_vars"]["TRACELADDER_BUILD"]].model_args else 1.0
    cpu = 100 * slow * (1 + 0.004 * math.sin(3 * block + (side == "B")))
    values = [cpu * (1 + 0.002 * k) for k in (-2, 0, 2)]
    return {
        "status": "ok",
        "step_ms": 2 * cpu,
        "step_ms_values": values,
        "step_cpu_ms": cpu,
        "step_cpu_ms_values": values,
    }


def test_the_engine_records_its_metric_level_dag_run_ends_and_spending(tmp_path: Path) -> None:
    digest = {"w4": "sha256:" + "a" * 64, "w5": "sha256:" + "b" * 64}
    good = RunSetup("w4", GOOD_SPEC, {"build": "n0", "image_digest": f"primus@{digest['w4']}"})
    bad = RunSetup(
        "w5", apply_build(GOOD_SPEC, BUILDS, "n7"), {"build": "n7", "image_digest": f"primus@{digest['w5']}"}
    )
    group = [(suspect(diff=build_change("n0", "n7")), good, bad)]
    budget = Budget(blocks=8, alpha=0.02, devices=8)
    ctx = TriageContext(
        store=DirArtifactSink(tmp_path),
        prefix="traceladder",
        ladder="mini",
        run_id="w5",
        run_block=_runner,
        builds=BUILDS,
        budget=budget,
        metric="cpu",
        dag_run_id="triage__mini__w5",
    )
    (doc,) = triage_run(ctx, group)
    assert doc.first_bad == "n5" and (doc.metric, doc.alpha, doc.dag_run_id) == ("cpu", 0.02, "triage__mini__w5")
    assert doc.digests == TriageEnds(good=digest["w4"], bad=digest["w5"])
    assert doc.builds == TriageEnds(good="n0", bad="n7")
    assert [c.build for c in doc.candidates] == [f"n{i}" for i in range(8)]
    assert all(look.rule == ("confirm" if s.kind == "confirm" else "size") for s in doc.steps for look in s.looks)
    assert doc.spent is not None and doc.spent.runs == sum(s.runs for s in doc.steps) == ctx.spent.runs
    assert doc.spent.devices == 8 and doc.spent.run_hours == pytest.approx(ctx.spent.run_s / 3600, abs=1e-6)
    assert doc.spent.device_hours == pytest.approx(8 * doc.spent.run_hours)
    stored = TriageDoc.from_json((tmp_path / "traceladder/mini/w5/triage/fusions/triage.json").read_bytes())
    assert stored == doc and json.loads(stored.to_json())["schema"] == 2
    page = (tmp_path / "traceladder/mini/w5/triage/fusions/report.html").read_text()
    assert "Metric: step CPU time (cpu); level: two-sided alpha 0.02" in page and "at 98%" in page
    assert f"Images: good {digest['w4']}, bad {digest['w5']}." in page and "DAG run: triage__mini__w5." in page
    assert "(8 devices per run)" in page


def test_a_resumed_schema1_triage_gets_what_it_did_not_record(tmp_path: Path) -> None:
    """A running schema-1 triage resumed: its steps are reused, and the fields it lacked come from
    the context it now runs with."""
    key = tmp_path / "traceladder/mini/w5/triage/fusions/triage.json"
    good = RunSetup("w4", GOOD_SPEC, {"build": "n0"})
    bad = RunSetup("w5", apply_build(GOOD_SPEC, BUILDS, "n7"), {"build": "n7"})
    full = TriageContext(DirArtifactSink(tmp_path / "full"), "traceladder", "mini", "w5", _runner, builds=BUILDS)
    (finished,) = triage_run(full, [(suspect(diff=build_change("n0", "n7")), good, bad)])
    # the same triage cut off after its confirm, as schema 1 stored it
    old = finished.to_dict() | {
        "schema": 1,
        "state": "running",
        "label": None,
        "steps": [finished.to_dict()["steps"][0]],
    }
    for field in ("metric", "alpha", "dag_run_id", "digests", "builds", "spent"):
        old.pop(field)  # not in schema 1
    for field in ("candidates", "bisected_on", "first_bad", "last_good", "culprits", "conclusion", "reproduce"):
        old.pop(field)  # not reached yet
    key.parent.mkdir(parents=True)
    key.write_text(json.dumps(old))
    calls: list[int] = []

    def counted(spec: dict, side: str, block: int) -> dict:
        calls.append(block)
        return _runner(spec, side, block)

    ctx = TriageContext(DirArtifactSink(tmp_path), "traceladder", "mini", "w5", counted, builds=BUILDS)
    ctx = replace(ctx, metric="cpu", dag_run_id=dag_run_id({"run_id": "manual__2026-12-07"}))
    (doc,) = triage_run(ctx, [(suspect(diff=build_change("n0", "n7")), good, bad)])
    assert doc.steps[0] == finished.steps[0] and len(calls) == 2 * sum(s.blocks for s in doc.steps[1:])
    assert (doc.metric, doc.alpha, doc.dag_run_id) == ("cpu", 0.05, "manual__2026-12-07")
    assert doc.builds == TriageEnds(good="n0", bad="n7") and doc.digests is None  # the local backend: no digests
    assert doc.spent is not None and doc.spent.devices == 1 and doc.spent.runs == sum(s.runs for s in doc.steps)


def test_the_dag_run_comes_from_the_airflow_context_only() -> None:
    assert dag_run_id({"run_id": "manual__2026-12-07T10:00:00+00:00"}) == "manual__2026-12-07T10:00:00+00:00"
    assert dag_run_id(None) is None and dag_run_id({}) is None


def test_the_ladders_page_and_the_message_read_a_schema1_and_a_schema2_file_alike() -> None:
    from traceladder.airflow.notifications.triage import alert_message
    from traceladder.core.alerts import AlertDoc
    from traceladder.ui.views import TriageRow

    alert = AlertDoc(id="a-1", kind="regression", status="untriaged", title="t", causes=[])

    old = TriageDoc.from_json(SCHEMA1.read_bytes())
    for stored in (_raw(), json.loads(old.to_json())):
        row = TriageRow.stored("baseline", stored, "/r.html")
        assert (row.state, row.label, row.first_bad) == ("done", "confirmed regression", "nightly-2026-11-29")
        doc = TriageDoc.from_dict(stored)
        lines = alert_message(alert, doc, "u").splitlines()
        assert (
            lines[0] == f"traceladder alert a-1: confirmed regression in proxy-regression/baseline (run {doc.run_id})"
        )
        for c in old.culprits:
            assert f"culprit: {c.name} {c.share_text()} of the change (last good: {c.last_good})" in lines
