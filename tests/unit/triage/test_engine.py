"""The triage engine (issue 51) with a deterministic in-test runner: the document and its keys, the
`builds:`/`build:`/`triage:` validation, the bisection search, the candidates' specs, and a whole
suspect group recorded, resumed and left alone once done."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testkit.results import store_measured_run
from testkit.triage_docs import build_change, build_group, step, suspect, suspect_between, triage_doc
from tests.conftest import REPO_ROOT
from traceladder.config import LadderConfigError, load_ladder
from traceladder.core import layout
from traceladder.core.documents import DiffField, DocumentError, TriageDoc, TriageLook, TriageStep, TriageSuspect
from traceladder.plan.build import build_plan
from traceladder.runner import provenance
from traceladder.storage.artifacts import DirArtifactSink
from traceladder.triage import record
from traceladder.triage.bisect import (
    BuildChanges,
    Candidate,
    CandidateUnavailable,
    Outcome,
    apply_build,
    build_candidates,
    find_culprits,
    candidate_spec,
    setting_candidates,
)
from traceladder.stats.decisions import size_llr, size_stop
from traceladder.triage.confirm import Budget
from traceladder.triage.engine import TriageContext, confirm_suspects, triage_run
from traceladder.triage.suspects import RunSetup, diff, spec_changes

from tests.unit.config.test_validate import MINIMAL

pytestmark = pytest.mark.triage
REPO = REPO_ROOT


def _suspect() -> TriageSuspect:
    return suspect(diff=build_change("nightly-0", "nightly-7"))


# ---- the document and its keys


def test_triage_doc_round_trips_with_its_parts() -> None:
    looks = [TriageLook(blocks=3, delta_pct=14.2, interval_pct=[6.0, 23.0], df=2, critical_z=3.28, stop=None)]
    bisected = step(
        "bisect", good="n0", candidate="n3", delta_pct=14.2, interval_pct=[6.0, 23.0], blocks=7, looks=looks
    )
    doc = triage_doc(
        _suspect(),
        group=["fusions"],
        steps=[bisected],
        first_bad="n3",
        last_good="n2",
        conclusion="first bad: n3 (last good: n2)",
        reproduce={"good": "traceladder run-rung ..."},
    )
    back = TriageDoc.from_json(doc.to_json())
    assert back == doc
    assert isinstance(back.suspect, TriageSuspect) and isinstance(back.steps[0], TriageStep)
    assert isinstance(back.suspect.diff[0], DiffField)
    assert isinstance(back.steps[0].looks[0], TriageLook) and back.steps[0].looks[0].rule == "confirm"
    assert json.loads(back.to_json())["schema"] == 2


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("suspect"), "triage.json: suspect: missing"),
        (lambda d: d.update(state="paused"), "triage.json: state: 'paused' is not one of"),
        (lambda d: d.update(label="regression"), "triage.json: label: 'regression' is not one of"),
        (lambda d: d["suspect"].pop("good_run_id"), "triage.json: suspect: good_run_id: missing"),
        (lambda d: d["suspect"].update(direction="up"), "triage.json: suspect: direction: 'up' is not one of"),
        (lambda d: d["suspect"]["diff"][0].update(section="disk"), "triage.json: suspect: diff[0]: section: 'disk'"),
        (lambda d: d["steps"][0].update(verdict="maybe"), "triage.json: steps[0]: verdict: 'maybe' is not one of"),
        (lambda d: d["steps"][0].update(blocks="7"), "triage.json: steps[0]: blocks: expected int, got str"),
        (
            lambda d: d["steps"][0].update(interval_pct=[1.0]),
            "triage.json: steps[0]: interval_pct: expected [low, high]",
        ),
    ],
)
def test_triage_doc_errors_name_the_field(mutate, message: str) -> None:
    doc = triage_doc(_suspect(), state="running", label=None, steps=[step()]).to_dict()
    mutate(doc)
    with pytest.raises(DocumentError) as info:
        TriageDoc.from_json(json.dumps(doc))
    assert str(info.value).startswith(message)


def test_triage_keys_lie_beside_the_run() -> None:
    run = layout.run_prefix("traceladder", "mini", "scheduled__2026-12-07T03:00:00+00:00")
    assert layout.triage_key(run, "fusions") == (
        "traceladder/mini/scheduled__2026-12-07T03-00-00-00-00/triage/fusions/triage.json"
    )
    assert layout.triage_report_key(run, "fusions").endswith("/triage/fusions/report.html")
    assert record.keys("traceladder", "mini", "w5", "fusions")[0] == "traceladder/mini/w5/triage/fusions/triage.json"


# ---- the ladder file: builds, build, triage


def _ladder(tmp_path: Path, change) -> Path:
    data = copy.deepcopy(MINIMAL)
    change(data)
    path = tmp_path / "ladder.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


CATALOG = [{"name": f"nightly-{i}", "created": f"2026-11-{20 + i:02d}T02:00:00Z"} for i in range(8)]
CATALOG[5]["changes"] = {"model_args": {"extra_work_pct": 15, "extra_work_region": "moe_router"}}


def test_builds_and_triage_are_read_and_applied(tmp_path: Path) -> None:
    def change(d: dict) -> None:
        d.update(builds=CATALOG, build="nightly-5", triage={"budget_blocks": 10, "budget_s": 600, "approve": True})

    loaded = load_ladder(_ladder(tmp_path, change))
    assert loaded.ladder.triage.budget_blocks == 10 and loaded.ladder.triage.approve is True
    assert loaded.ladder.triage.alpha == 0.05 and loaded.ladder.triage.candidates == []
    spec = build_plan(loaded, rungs=["baseline"], lens="none", repeats=1)[0]
    assert spec.model_args["extra_work_pct"] == 15 and spec.model_args["extra_work_region"] == "moe_router"
    assert spec.docker_env_vars["TRACELADDER_BUILD"] == "nightly-5"
    # the runner's provenance records the build from the rung's environment
    assert provenance.collect("local", dict(spec.docker_env_vars), None)["build"] == "nightly-5"


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (lambda d: d.update(triage={"budget_blocks": 2}), "triage.budget_blocks", "greater than or equal to 3"),
        (lambda d: d.update(triage={"budget_s": -1}), "triage.budget_s", "greater than 0"),
        (lambda d: d.update(triage={"approve": "maybe"}), "triage.approve", "valid boolean"),
        (lambda d: d.update(triage={"alpha": 0.7}), "triage.alpha", "less than 0.5"),
        (lambda d: d.update(triage={"candidates": "tag1"}), "triage.candidates", "valid list"),
        (lambda d: d.update(triage={"blocks": 4}), "triage.blocks", "unknown key"),
        (lambda d: d.update(builds=[{"name": "n1"}]), "builds[0].created", "Field required"),
        (lambda d: d.update(builds=[{"name": "n1", "created": "yesterday"}]), "builds[0].created", "datetime"),
        (lambda d: d.update(builds=CATALOG + [CATALOG[0]]), "builds[8].name", "duplicate build name"),
        (lambda d: d.update(builds=CATALOG, build="nightly-9"), "build", "not in the build catalog"),
    ],
)
def test_bad_triage_and_catalog_name_the_field(tmp_path: Path, change, field: str, reason: str) -> None:
    with pytest.raises(LadderConfigError) as info:
        load_ladder(_ladder(tmp_path, change))
    assert info.value.field == field and reason in info.value.reason


# ---- the bisection search, with a deterministic step


def _builds(n: int = 8) -> list[Candidate]:
    return [Candidate(f"n{i}", "build", {"build": f"n{i}"}) for i in range(n)]


def _stepper(levels: list[float], skip: dict[str, str] | None = None, unsure: set[str] | None = None):
    """compare() over builds whose true log levels are `levels`: each step's estimate is the true
    difference with se 0.005 (a +-0.01 interval), decided by the size rule (stats/decisions.py)."""
    calls: list[tuple[str, str, str]] = []

    def compare(good: Candidate, cand: Candidate, size: float, kind: str) -> Outcome:
        calls.append((kind, good.name, cand.name))
        if skip and cand.name in skip:
            return Outcome("skipped", reason=skip[cand.name])
        diff = levels[int(cand.name[1:])] - levels[int(good.name[1:])]
        interval = (diff - 0.01, diff + 0.01)
        if unsure and cand.name in unsure:
            return Outcome("insufficient", diff, interval, "the step's budget of 16 blocks ran out")
        return Outcome(str(size_stop(size_llr(diff, 0.005, size), last=True)), diff, interval)

    return compare, calls


def _levels(**culprits: float) -> list[float]:
    """Log levels of n0..n7 with a culprit of +x% at each named build (`n5=15`), carried onward."""
    out, level = [], 0.0
    for i in range(8):
        level += math.log1p(culprits.get(f"n{i}", 0.0) / 100)
        out.append(level)
    return out


@pytest.mark.parametrize("bad_at", range(1, 8))
def test_bisection_finds_the_one_culprit_with_its_share(bad_at: int) -> None:
    levels = _levels(**{f"n{bad_at}": 15.0})
    compare, calls = _stepper(levels)
    result = find_culprits(_builds(), compare, levels[-1])
    assert result.first_bad == f"n{bad_at}" and result.last_good == f"n{bad_at - 1}"
    (culprit,) = result.culprits
    assert culprit.share.share == pytest.approx(1.0) and culprit.share.low < 1 < culprit.share.high
    searched = [s for s in result.steps if s.kind == "bisect"]
    assert len(searched) <= 3 and len(calls) == len(result.steps)
    # each step judges a candidate against the range's own good end, n0 (decisions by size)
    assert {s.good for s in searched} <= {"n0"}
    # the pair is compared directly (neighbours), unless a step already compared it with n0
    pairs = [(s.good, s.candidate) for s in result.steps if s.kind == "pair"]
    assert pairs == ([] if bad_at == 1 else [(f"n{bad_at - 1}", f"n{bad_at}")])


def test_a_small_culprit_is_left_when_the_pair_carries_most_of_the_change() -> None:
    levels = _levels(n2=2.0, n5=15.0)  # the pair carries 88% [81%, 95%]: not surely under 90%
    compare, calls = _stepper(levels)
    result = find_culprits(_builds(), compare, levels[-1])
    assert [c.name for c in result.culprits] == ["n5"]  # +2% is under s/3 (5.6%) and not searched
    assert result.culprits[0].share.share == pytest.approx(math.log(1.15) / levels[-1])
    assert not any(kind == "range" for kind, _, _ in calls)
    # +3% beside +12%: the pair carries 79% [72%, 86%], surely under 90%, so the other ranges'
    # ends are compared, and +3% looks nearer s/3 than 0 there: named second
    levels = _levels(n2=3.0, n5=12.0)
    compare, _ = _stepper(levels)
    assert [c.name for c in find_culprits(_builds(), compare, levels[-1]).culprits] == ["n5", "n2"]


@pytest.mark.parametrize("first, second", [("n2", "n6"), ("n6", "n2")])
def test_two_culprits_over_s_over_3_are_both_named_largest_first(first: str, second: str) -> None:
    levels = _levels(**{first: 12.0, second: 8.0})
    compare, calls = _stepper(levels)
    result = find_culprits(_builds(), compare, levels[-1])
    assert [c.name for c in result.culprits] == [first, second]
    shares = [c.share.share for c in result.culprits]
    assert shares == pytest.approx([math.log(1.12) / levels[-1], math.log(1.08) / levels[-1]])
    assert any(kind == "range" for kind, _, _ in calls)  # the second range's ends were compared first


def test_bisection_skips_a_candidate_that_cannot_run() -> None:
    compare, _ = _stepper(_levels(n6=15.0), skip={"n3": "image gone from the registry"})
    result = find_culprits(_builds(), compare, math.log(1.15))
    assert result.first_bad == "n6" and result.last_good == "n5"
    assert ("n3", "image gone from the registry") in result.skipped
    assert any(
        s.outcome.verdict == "skipped" and s.outcome.reason == "image gone from the registry" for s in result.steps
    )
    # when only skipped candidates are left next to the first bad one, it cannot be told apart
    compare, _ = _stepper(_levels(n4=15.0), skip={"n3": "fails to start"})
    cut = find_culprits(_builds(5), compare, math.log(1.15))
    assert cut.first_bad is None and cut.unresolved == (("n2", "n4", "only skipped candidates are left between them"),)
    assert cut.conclusion == "between n2 and n4 (only skipped candidates are left between them); skipped: n3"


def test_only_an_exhausted_budget_leaves_a_range_between_x_and_y() -> None:
    compare, calls = _stepper(_levels(n6=15.0), unsure={"n5"})
    result = find_culprits(_builds(), compare, math.log(1.15))
    assert result.first_bad is None and result.unresolved == (("n3", "n7", "the step's budget of 16 blocks ran out"),)
    assert len(calls) == 2


# ---- candidates and their specs

BUILDS = {
    f"n{i}": BuildChanges(f"n{i}", f"2026-11-{20 + i:02d}T02:00:00+00:00", {"extra_work_pct": 15} if i >= 5 else {}, {})
    for i in range(8)
}


def test_builds_are_ordered_by_creation_and_swapped_in_the_spec() -> None:
    shuffled = [BUILDS[n] for n in ("n3", "n0", "n7", "n5", "n1")]
    assert [c.name for c in build_candidates(shuffled, "n1", "n5")] == ["n1", "n3", "n5"]
    spec = {"model_args": {"train_iters": 4, "extra_work_pct": 15}, "docker_env_vars": {"TRACELADDER_BUILD": "n5"}}
    swapped = apply_build(spec, BUILDS, "n2")
    assert swapped["model_args"] == {"train_iters": 4} and swapped["docker_env_vars"] == {"TRACELADDER_BUILD": "n2"}
    with pytest.raises(CandidateUnavailable, match="'n9' is not in the ladder's build catalog"):
        apply_build(spec, BUILDS, "n9")


def test_settings_are_applied_one_at_a_time() -> None:
    good = {"model_args": {"a": 1, "b": 2}, "image": "x:1", "rung_id": "r.none.m0"}
    bad = {"model_args": {"a": 1, "b": 3, "c": True}, "image": "x:2", "rung_id": "r.none.m1"}
    changes = spec_changes(good, bad)
    assert changes == [("model_args.b", 2, 3), ("image", "x:1", "x:2"), ("model_args.c", None, True)]
    cands = setting_candidates(changes)
    assert [c.name for c in cands][0] == "good settings" and len(cands) == 4
    last = candidate_spec(good, cands[-1], {})
    assert last["model_args"] == bad["model_args"] and last["image"] == "x:2"


def test_the_diff_names_each_field_and_what_cannot_be_bisected() -> None:
    g = RunSetup("w4", {"model_args": {"a": 1}, "image": "x"}, {"build": "n1", "host": "h1", "image_digest": None})
    b = RunSetup("w5", {"model_args": {"a": 2}, "image": "x"}, {"build": "n2", "host": "h2", "image_digest": None})
    fields = {(d.section, d.field): d for d in diff(g, b)}
    assert set(fields) == {("build", "build"), ("spec", "model_args.a"), ("provenance", "host")}
    assert fields[("provenance", "host")].bisectable is False


# ---- a whole group with a deterministic runner

BASE_SPEC = {
    "ladder": "mini",
    "rung": "fusions",
    "lens": "none",
    "purpose": "measure",
    "rung_id": "fusions.none.m0",
    "model_args": {"train_iters": 4},
    "docker_env_vars": {"TRACELADDER_BUILD": "n0"},
}


class Runner:
    """Step time 100 ms, x1.15 from build n5 on (rung `fusions`) and x1.10 (rung `other`); a small
    deterministic wobble per block and side, iterations around it. `fail_after`: raise after that
    many runs (a worker killed mid-triage)."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.runs = 0
        self.fail_after = fail_after

    def __call__(self, spec: dict, side: str, block: int) -> dict:
        if self.fail_after is not None and self.runs >= self.fail_after:
            raise KeyboardInterrupt("worker killed")
        self.runs += 1
        build = spec["docker_env_vars"]["TRACELADDER_BUILD"]
        slow = {"fusions": 1.15, "other": 1.10}[spec["rung"]] if BUILDS[build].model_args else 1.0
        wobble = 1 + 0.004 * math.sin(3 * block + (side == "B"))
        step = 100 * slow * wobble
        return {"status": "ok", "step_ms": step, "step_ms_values": [step * (1 + 0.002 * k) for k in (-2, -1, 0, 1, 2)]}


def _group() -> list[tuple[TriageSuspect, RunSetup, RunSetup]]:
    out = []
    for rung, delta in (("fusions", 15.0), ("other", 10.0)):
        good = {**BASE_SPEC, "rung": rung, "model_args": {"train_iters": 4}}
        out.append(build_group(good, apply_build(good, BUILDS, "n7"), "n0", "n7", rung, delta_pct=delta))
    return out


def _ctx(tmp_path: Path, runner, **kw) -> TriageContext:
    return TriageContext(
        store=DirArtifactSink(tmp_path),
        prefix="traceladder",
        ladder="mini",
        run_id="w5",
        run_block=runner,
        builds=BUILDS,
        **{"budget": Budget(blocks=8), **kw},
    )


def test_a_group_confirms_bisects_once_and_confirms_the_other_at_the_first_bad(tmp_path: Path) -> None:
    docs = {d.rung: d for d in triage_run(_ctx(tmp_path, Runner()), _group())}
    main, other = docs["fusions"], docs["other"]
    assert main.label == "confirmed regression" and main.state == "done"
    assert main.first_bad == "n5" and main.last_good == "n4" and main.bisected_on == "fusions"
    kinds = [s.kind for s in main.steps]
    assert kinds[0] == "confirm" and kinds[-1] == "pair" and kinds.count("bisect") == len(main.steps) - 2 >= 2
    assert all(s.interval_pct is not None for s in main.steps)
    assert [(c.name, c.last_good) for c in main.culprits] == [("n5", "n4")]
    assert 50 < main.culprits[0].share_pct < 150 and main.culprits[0].share_interval_pct[0] > 0
    assert other.bisected_on == "fusions" and [s.kind for s in other.steps] == ["confirm", "at first bad"]
    assert other.steps[1].verdict == "confirmed" and other.label == "confirmed regression"
    assert other.first_bad == "n5"
    assert all(s.runs == 2 * s.blocks for s in main.steps)  # counted for the triage's budget
    # the commands that rerun the confirm and each culprit's pair (its step's index)
    pair = len(main.steps) - 1
    repro = "traceladder triage repro --ladder mini --run w5 --rung"
    assert main.reproduce == {"confirm": f"{repro} fusions --step 0", "pair n5": f"{repro} fusions --step {pair}"}
    assert other.reproduce == {"confirm": f"{repro} other --step 0", "at first bad n5": f"{repro} other --step 1"}
    # the other rung's step at the culprit reruns on its own good spec with the bisected rung's candidates
    from traceladder.triage.repro import ReproError, step_sides

    _suspect, good, bad = _group()[1]
    at = step_sides(other, 1, good, bad, BUILDS, main.candidates, "triage.json")
    builds = [side["docker_env_vars"]["TRACELADDER_BUILD"] for side in (at.spec_a, at.spec_b)]
    assert builds == ["n4", "n5"] and at.spec_a["rung"] == "other" and at.rule == "confirm"
    with pytest.raises(ReproError, match=r"^triage.json: steps\[1\]: candidate 'n4' is not among the recorded"):
        step_sides(other, 1, good, bad, BUILDS, other.candidates, "triage.json")
    stored = TriageDoc.from_json((tmp_path / "traceladder/mini/w5/triage/fusions/triage.json").read_bytes())
    assert stored.first_bad == "n5" and (tmp_path / "traceladder/mini/w5/triage/fusions/report.html").is_file()


class ElsewhereRunner(Runner):
    """`other` slows down from n2 on, not at fusions' n5: its change has another cause."""

    def __call__(self, spec: dict, side: str, block: int) -> dict:
        out = super().__call__(spec, side, block)
        if spec["rung"] == "other":
            n = int(spec["docker_env_vars"]["TRACELADDER_BUILD"][1:])
            step = 100 * (1.10 if n >= 2 else 1.0) * (1 + 0.004 * math.sin(3 * block + (side == "B")))
            out = {**out, "step_ms": step, "step_ms_values": [step * (1 + 0.002 * k) for k in (-2, -1, 0, 1, 2)]}
        return out


def test_another_rung_gets_its_own_first_bad_not_the_main_rungs(tmp_path: Path) -> None:
    """Bug 1: a rung whose own step at the main rung's culprit says `not reproduced` is not given
    that culprit as its first bad."""
    docs = {d.rung: d for d in triage_run(_ctx(tmp_path, ElsewhereRunner()), _group())}
    other = docs["other"]
    assert docs["fusions"].first_bad == "n5"
    assert [(s.kind, s.verdict) for s in other.steps] == [("confirm", "confirmed"), ("at first bad", "not reproduced")]
    assert other.first_bad is None and other.last_good is None and other.culprits == []
    assert other.conclusion is not None and "not at fusions's culprits (at n5: not reproduced)" in other.conclusion


class TwoCulpritRunner(Runner):
    """`fusions` +30% from n2 on and x1.54 more from n5 on (issue 58's demo sizes)."""

    def __call__(self, spec: dict, side: str, block: int) -> dict:
        self.runs += 1
        n = int(spec["docker_env_vars"]["TRACELADDER_BUILD"][1:])
        step = 100 * (1.3 if n >= 2 else 1.0) * (1.54 if n >= 5 else 1.0)
        step *= 1 + 0.004 * math.sin(3 * block + (side == "B"))
        return {"status": "ok", "step_ms": step, "step_ms_values": [step * (1 + 0.002 * k) for k in (-2, 0, 2)]}


def test_two_culprits_are_named_largest_first_with_their_shares(tmp_path: Path) -> None:
    (main,) = triage_run(_ctx(tmp_path, TwoCulpritRunner()), _group()[:1])
    assert [(c.name, c.last_good) for c in main.culprits] == [("n5", "n4"), ("n2", "n1")]
    total = math.log(1.3 * 1.54)
    shares = [c.share_pct / 100 for c in main.culprits]
    assert shares == pytest.approx([math.log(1.54) / total, math.log(1.3) / total], abs=0.03)
    assert main.first_bad == "n5" and main.conclusion is not None and main.conclusion.count("culprit: ") == 2
    # the second range's steps judge against its own size (+30%), the first's against the whole (+100%)
    sizes = sorted({round(s.size_pct or 0) for s in main.steps if s.kind == "bisect"})
    assert sizes == [30, 100], sizes
    assert {s.kind for s in main.steps} == {"confirm", "bisect", "pair", "range"}
    page = record.report_html(main)
    assert "<h2>Culprits</h2>" in page and page.index("<td>n5</td>") < page.index("<td>n2</td>")
    from traceladder.airflow.notifications.triage import alert_message
    from traceladder.core.alerts import AlertDoc

    alert = AlertDoc(id="a-1", kind="regression", status="untriaged", title="t", causes=[])
    lines = [line.split(" share ")[0] for line in alert_message(alert, main, "u").splitlines()]
    assert [line for line in lines if line in ("culprit: n5", "culprit: n2")] == ["culprit: n5", "culprit: n2"]


class FlakyRunner(Runner):
    """The first run of candidate n3's side fails for the infrastructure once (a preflight)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: list[str] = []

    def __call__(self, spec: dict, side: str, block: int) -> dict:
        build = spec["docker_env_vars"]["TRACELADDER_BUILD"]
        if build == "n3" and side == "B" and not self.failed:
            self.failed.append(build)
            return {"status": "preflight", "error": "gpu busy on h1"}
        return super().__call__(spec, side, block)


def test_a_run_failed_by_the_infrastructure_is_retried_before_a_skip(tmp_path: Path) -> None:
    """Bug 3: one failed run in a step's first block no longer marks the candidate skipped."""
    runner = FlakyRunner()
    main = triage_run(_ctx(tmp_path, runner), _group())[0]
    assert runner.failed == ["n3"] and main.first_bad == "n5"
    assert all(s.verdict != "skipped" for s in main.steps)
    n3 = next(s for s in main.steps if s.candidate == "n3")
    assert n3.runs == 2 * n3.blocks + 1  # the retry counted
    # a workload that fails is not retried: the candidate is skipped, and a resumed triage tries it again
    calls: list[str] = []

    def broken(spec: dict, side: str, block: int) -> dict:
        calls.append(spec["docker_env_vars"]["TRACELADDER_BUILD"])
        return {"status": "failed", "error": "exit 1"}

    ctx = _ctx(tmp_path / "w", broken, budget=Budget(blocks=8, retries=2))
    assert [s.verdict for s in confirm_suspects(ctx, _group()[:1])[0].steps] == ["skipped"]
    assert len(calls) == 1
    confirm_suspects(_ctx(tmp_path / "w", broken), _group()[:1])
    assert len(calls) == 1  # finished (`insufficient data`): a plain retry starts nothing
    doc = confirm_suspects(_ctx(tmp_path / "w", broken, force=True), _group()[:1])[0]
    assert len(calls) == 2 and [s.verdict for s in doc.steps] == ["skipped"]  # forced: run again, not reused


def test_a_moved_tag_is_named_as_a_digest_change_and_every_command_pins_digests(tmp_path: Path) -> None:
    """Bug 2: the same tag on a new digest is a digest change, not "nothing changed"."""
    tag = "registry.example:5000/rocm/primus:v26.7"
    old, new = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    spec = {**BASE_SPEC, "image": tag}
    good = RunSetup("w4", spec, {"build": "n0", "image_digest": f"{tag.rsplit(':', 1)[0]}@{old}"})
    bad = RunSetup("w5", spec, {"build": "n0", "image_digest": f"{tag.rsplit(':', 1)[0]}@{new}"})
    found = suspect_between(good, bad, delta_pct=15.0)
    assert [(d.field, d.good, d.bad) for d in found.diff if d.field == "image_digest"] == [
        ("image_digest", good.image_digest, bad.image_digest)
    ]

    def runner(spec: dict, side: str, block: int) -> dict:
        slow = 1.15 if spec["image"].endswith(new) else 1.0
        step_ms = 100 * slow * (1 + 0.004 * math.sin(3 * block + (side == "B")))
        return {"status": "ok", "step_ms": step_ms, "step_ms_values": [step_ms * (1 + 0.002 * k) for k in (-2, 0, 2)]}

    (doc,) = triage_run(_ctx(tmp_path, runner), [(found, good, bad)])
    assert doc.label == "confirmed regression" and doc.first_bad == f"{tag} at {new}"
    assert doc.last_good == f"{tag} at {old}"
    assert doc.conclusion is not None and "the tag moved to a new digest" in doc.conclusion
    assert "no image, build or setting changed" not in doc.conclusion
    # its repro reruns the confirm on the two digests, never the moving tag alone
    from traceladder.triage.repro import step_sides

    sides = step_sides(doc, 0, good, bad, BUILDS, doc.candidates, "triage.json")
    assert sides.spec_a["image"].endswith(f"@{old}") and sides.spec_b["image"].endswith(f"@{new}")
    assert doc.reproduce == {"confirm": "traceladder triage repro --ladder mini --run w5 --rung fusions --step 0"}


def test_a_failed_triage_resumes_without_force(tmp_path: Path) -> None:
    """Bug 3: a triage recorded `failed` (its task failed) is resumed, as claim and the docs say."""
    with pytest.raises(KeyboardInterrupt):
        triage_run(_ctx(tmp_path, Runner(fail_after=20)), _group())
    key = tmp_path / "traceladder/mini/w5/triage/fusions/triage.json"
    kept = TriageDoc.from_json(key.read_bytes())
    key.write_bytes(replace(kept, state="failed", error="the triage task ended failed").to_json().encode())
    resumed = Runner()
    docs = {d.rung: d for d in triage_run(_ctx(tmp_path, resumed), _group())}
    assert docs["fusions"].state == "done" and docs["fusions"].first_bad == "n5" and docs["fusions"].error is None
    assert [s.candidate for s in docs["fusions"].steps][: len(kept.steps)] == [s.candidate for s in kept.steps]


def test_a_finished_or_refused_triage_starts_again_when_forced(tmp_path: Path) -> None:
    """Bug 3: `force` (the Params form) reopens a `not approved` triage, and approving it then
    bisects with the recorded confirms."""
    refused = triage_run(_ctx(tmp_path, Runner(), approve=lambda: False), _group())
    assert {d.state for d in refused} == {"not approved"}
    again = Runner()
    assert triage_run(_ctx(tmp_path, again, approve=lambda: True), _group())[0].state == "not approved"
    assert again.runs == 0  # not forced: left as it is
    docs = triage_run(_ctx(tmp_path, again, approve=lambda: True, force=True), _group())
    assert docs[0].state == "done" and docs[0].first_bad == "n5" and docs[0].label == "confirmed regression"
    assert [s.kind for s in docs[0].steps][0] == "confirm" and again.runs > 0
    assert sum(s.kind == "confirm" for s in docs[0].steps) == 1  # the recorded confirm was reused


def test_a_killed_triage_resumes_and_a_finished_one_starts_nothing(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        triage_run(_ctx(tmp_path, Runner(fail_after=20)), _group())
    key = tmp_path / "traceladder/mini/w5/triage/fusions/triage.json"
    kept = TriageDoc.from_json(key.read_bytes())
    assert kept.state == "running" and len(kept.steps) >= 1  # what finished is stored
    fresh = Runner()
    docs = {d.rung: d for d in triage_run(_ctx(tmp_path, fresh), _group())}
    assert docs["fusions"].first_bad == "n5"
    assert [s.candidate for s in docs["fusions"].steps][: len(kept.steps)] == [s.candidate for s in kept.steps]
    full = Runner()
    triage_run(_ctx(tmp_path / "full", full), _group())
    assert fresh.runs < full.runs  # the recorded steps were not run again
    again = Runner()
    assert triage_run(_ctx(tmp_path, again), _group())[0].first_bad == "n5" and again.runs == 0


def test_a_rejected_approval_ends_not_approved_after_the_confirms(tmp_path: Path) -> None:
    docs = triage_run(_ctx(tmp_path, Runner(), approve=lambda: False), _group())
    assert {d.label for d in docs} == {"not approved"} and {d.state for d in docs} == {"not approved"}
    assert all([s.kind for s in d.steps] == ["confirm"] for d in docs)


def test_the_confirms_run_before_the_approval_and_the_bisection_reuses_them(tmp_path: Path) -> None:
    """The triage DAG's `confirm` task (engine.confirm_suspects) records each suspect's confirm
    and leaves a confirmed rung `running`; the `triage` task after the approval reuses them."""
    first = Runner()
    docs = confirm_suspects(_ctx(tmp_path, first), _group())
    assert [(d.rung, d.state, [s.kind for s in d.steps]) for d in docs] == [
        ("fusions", "running", ["confirm"]),
        ("other", "running", ["confirm"]),
    ]
    assert first.runs == sum(2 * d.steps[0].blocks for d in docs)  # one A and one B run a block
    assert record.confirm_summary(docs[0]).startswith("the confirm: confirmed +")
    then, full = Runner(), Runner()
    assert triage_run(_ctx(tmp_path, then), _group())[0].first_bad == "n5"
    triage_run(_ctx(tmp_path / "full", full), _group())
    assert then.runs == full.runs - first.runs  # no confirm ran twice


def test_a_refused_approval_after_the_confirms_keeps_their_verdicts(tmp_path: Path) -> None:
    confirm_suspects(_ctx(tmp_path, Runner()), _group())
    refused = Runner()
    docs = triage_run(_ctx(tmp_path, refused, approve=lambda: False), _group())
    assert refused.runs == 0 and {(d.state, d.label) for d in docs} == {("not approved", "not approved")}
    for d in docs:
        assert [(s.kind, s.verdict) for s in d.steps] == [("confirm", "confirmed")]
        assert d.conclusion is not None and d.conclusion.startswith(
            "the bisection was not approved; the confirm: confirmed"
        )


def test_a_worker_killed_mid_search_reruns_only_the_step_it_was_in(tmp_path: Path) -> None:
    """The triage's process SIGKILLed in the middle of a bisection step (no handler runs, as when
    a worker dies): the retry reuses every step triage.json recorded and runs the cut-off step
    again, never the whole search."""
    full = Runner()
    done = {d.rung: d for d in triage_run(_ctx(tmp_path / "full", full), _group())}
    main, other = done["fusions"], done["other"]
    bisects = [s for s in main.steps if s.kind == "bisect"]
    assert len(bisects) >= 2
    # in run order: each rung's confirm, then the bisection on fusions; die one run into bisect 2
    before = 2 * (main.steps[0].blocks + other.steps[0].blocks + bisects[0].blocks)
    kill_at = before + 1
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from tests.unit.triage.test_engine import Runner, _ctx, _group\n"
        "from traceladder.triage.engine import triage_run\n"
        "class Dying(Runner):\n"
        "    def __call__(self, spec, side, block):\n"
        f"        if self.runs == {kill_at}:\n"
        "            os.kill(os.getpid(), signal.SIGKILL)\n"
        "        return super().__call__(spec, side, block)\n"
        "triage_run(_ctx(Path(sys.argv[1]), Dying()), _group())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "include"), str(REPO)])}
    killed = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=REPO, env=env, capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    kept = {
        rung: TriageDoc.from_json((tmp_path / f"traceladder/mini/w5/triage/{rung}/triage.json").read_bytes())
        for rung in ("fusions", "other")
    }
    assert kept["fusions"].state == "running"
    assert [s.kind for s in kept["fusions"].steps] == ["confirm", "bisect"]  # the cut-off step left no record
    recorded_runs = sum(2 * s.blocks for d in kept.values() for s in d.steps)
    assert recorded_runs == before
    retry = Runner()
    resumed = {d.rung: d for d in triage_run(_ctx(tmp_path, retry), _group())}
    assert retry.runs == full.runs - recorded_runs  # the recorded steps were not run again
    untimed = [{**s.to_dict(), "run_s": 0} for s in main.steps]  # the runs' seconds differ between processes
    assert [{**s.to_dict(), "run_s": 0} for s in resumed["fusions"].steps] == untimed
    assert resumed["fusions"].first_bad == "n5" and resumed["other"].label == "confirmed regression"


def test_an_unreproduced_suspect_is_labelled_and_not_bisected(tmp_path: Path) -> None:
    group = _group()[:1]
    suspect, good, _ = group[0]
    same = RunSetup("w5", good.spec, {"build": "n0"})
    doc = triage_run(_ctx(tmp_path, Runner()), [(suspect, good, same)])[0]
    assert doc.label == "not reproduced" and [s.kind for s in doc.steps] == ["confirm"]


# ---- from what a ladder run stored: suspects, setups, the reproduce command


def _store_run(store: DirArtifactSink, loaded, run_id: str, build: str, step_ms: float) -> dict:
    spec = apply_build(build_plan(loaded, rungs=["fusions"], lens="none", repeats=1)[0].to_dict(), BUILDS, build)
    store_measured_run(
        store, "traceladder", "mini", run_id, spec, step_ms, {"build": build, "host": "h1", "image_digest": None}
    )
    return spec


def test_a_ladder_run_is_triaged_from_what_it_stored(tmp_path: Path) -> None:
    from traceladder.core.documents import Summary
    from traceladder.triage.engine import triage_ladder_run
    from traceladder.triage.from_ladder import context_for

    def change(d: dict) -> None:
        catalog = [{"name": n, "created": b.created} for n, b in BUILDS.items()]
        catalog[5]["changes"] = catalog[6]["changes"] = catalog[7]["changes"] = {"model_args": {"extra_work_pct": 15}}
        d.update(builds=catalog, build="n7", triage={"budget_blocks": 8})

    loaded = load_ladder(_ladder(tmp_path, change))
    store = DirArtifactSink(tmp_path / "s3")
    good_spec = _store_run(store, loaded, "w4", "n0", 100.0)
    bad_spec = _store_run(store, loaded, "w5", "n7", 115.0)
    history = {
        "suspects": [
            {
                "rung": "fusions",
                "run_id": "w5",
                "good_run_id": "w4",
                "reason": "prediction bound",
                "direction": "slower",
                "delta_pct": 15.0,
            }
        ]
    }
    summary = Summary(ladder="mini", run_id="w5", rungs=[], history=history)
    run = layout.run_prefix("traceladder", "mini", "w5")
    store.put_bytes(layout.join(layout.summary_prefix(run), layout.SUMMARY_JSON), summary.to_json().encode())
    runner = Runner()
    ctx = context_for(loaded, store, "w5", lambda s, side, b: runner({**s, "rung": "fusions"}, side, b))
    assert ctx.budget.blocks == 8 and ctx.metric == "wall" and ctx.approve is None
    (doc,) = triage_ladder_run(ctx)
    assert doc.label == "confirmed regression" and doc.first_bad == "n5" and doc.last_good == "n4"
    assert [(d.section, d.field) for d in doc.suspect.diff] == [
        ("build", "build"),
        ("spec", "model_args.extra_work_pct"),
    ]
    assert {d.field: d.good for d in doc.suspect.diff}["build"] == "n0"
    # each command parses as `traceladder triage repro` of its step, and the repro rebuilds each
    # step's sides as the engine ran them: a rerun with the same budget measures the same step
    from traceladder.cli.main import build_parser
    from traceladder.triage.from_ladder import catalog
    from traceladder.triage.repro import rerun, step_sides
    from traceladder.triage.suspects import run_setup
    import shlex

    pair = len(doc.steps) - 1
    assert set(doc.reproduce) == {"confirm", "pair n5"}
    args = build_parser().parse_args(shlex.split(doc.reproduce["pair n5"])[1:])
    assert (args.command, args.triage_command, args.ladder, args.run, args.rung, args.step) == (
        "triage",
        "repro",
        "mini",
        "w5",
        "fusions",
        pair,
    )
    good, bad = (run_setup(store, "traceladder", "mini", r, "fusions") for r in ("w4", "w5"))
    sides = step_sides(doc, pair, good, bad, catalog(loaded), doc.candidates, "triage.json")
    assert (sides.spec_a, sides.spec_b) == (apply_build(good_spec, BUILDS, "n4"), apply_build(good_spec, BUILDS, "n5"))
    assert sides.rule == "size" and sides.side_words("B").endswith("build n5")
    confirmed = step_sides(doc, 0, good, bad, catalog(loaded), doc.candidates, "triage.json")
    assert (confirmed.spec_a, confirmed.spec_b, confirmed.rule) == (good_spec, bad_spec, "confirm")
    assert bad_spec["docker_env_vars"]["TRACELADDER_BUILD"] == "n7"
    prefixes: set[str] = set()

    def scratch_runner(spec: dict, side: str, block: int) -> dict:
        prefixes.add(spec["storage_prefix"])
        return runner({**spec, "rung": "fusions"}, side, block)

    again = rerun(doc, sides, scratch_runner, Budget(blocks=8), "traceladder-scratch")
    recorded = doc.steps[pair]
    assert prefixes == {"traceladder-scratch"}
    assert (again.kind, again.good, again.candidate, again.verdict) == ("pair", "n4", "n5", recorded.verdict)
    assert again.delta_pct == pytest.approx(recorded.delta_pct) and again.blocks == recorded.blocks


def test_extra_work_can_be_recorded_under_a_named_region() -> None:
    """A build that slows one named region does it with the real extra work (workload/extra.py)."""
    from traceladder.workload.extra import ExtraWork
    from traceladder.workload.proxy_config import ProxyConfigError, parse

    s = parse(["--extra_work_pct", "15", "--extra_work_region", "attention"], env={})
    assert ExtraWork(s).region == "attention" and "extra_work_region=attention" in s.header()
    assert ExtraWork(parse(["--extra_work_pct", "15"], env={})).region == "extra_work"
    with pytest.raises(ProxyConfigError, match="extra_work_region"):
        parse(["--extra_work_region", "two words"], env={})


def test_an_image_is_pinned_by_the_digest_the_run_recorded() -> None:
    setup = RunSetup("w4", {"image": "reg:5000/primus:nightly"}, {"image_digest": "reg:5000/primus@sha256:" + "a" * 64})
    assert setup.pinned_spec["image"] == "reg:5000/primus@sha256:" + "a" * 64
    assert RunSetup("w4", {"image": "traceladder/proxy:cpu"}, {"image_digest": None}).pinned_spec["image"] == (
        "traceladder/proxy:cpu"
    )


def test_each_image_tag_runs_pinned_by_its_digest_whatever_its_reference() -> None:
    from traceladder.triage.bisect import image_candidates

    digest = "sha256:" + "b" * 64
    tags = [("127.0.0.1:5000/triage/runner:n1", digest, None), ("127.0.0.1:5000/triage/runner", digest, None)]
    candidates = image_candidates(tags, tags[0][0], tags[1][0])
    # a reference without a tag keeps its registry's port (a ':' before the last '/')
    assert [c.changes["image"] for c in candidates] == [f"127.0.0.1:5000/triage/runner@{digest}"] * 2


def test_an_image_change_the_registry_cannot_place_is_confirmed_and_not_bisected(tmp_path: Path) -> None:
    gone, new = "reg:5000/r@sha256:" + "a" * 64, "reg:5000/r@sha256:" + "c" * 64
    good = RunSetup("w4", {**BASE_SPEC, "image": "reg:5000/r:n1"}, {"image_digest": gone})
    bad = RunSetup("w5", {**BASE_SPEC, "image": "reg:5000/r:n2"}, {"image_digest": new})
    regressed = suspect_between(good, bad, delta_pct=50.0)

    def runner(spec: dict, side: str, block: int) -> dict:
        step = 100.0 * (1.5 if spec["image"] == new else 1.0) * (1 + 0.004 * math.sin(3 * block + (side == "B")))
        return {"status": "ok", "step_ms": step, "step_ms_values": [step * (1 + 0.002 * k) for k in (-2, -1, 0, 1, 2)]}

    reason = "the good image n1: manifest n1 is gone from the registry (404 MANIFEST_UNKNOWN)"
    (doc,) = triage_run(_ctx(tmp_path, runner, image_tags_reason=reason), [(regressed, good, bad)])
    assert doc.label == "confirmed regression" and doc.first_bad is None
    assert doc.conclusion == f"not bisected: {reason}"
