"""Hand-made triage documents (issue 51) as the triage's stages and readers take them: a suspect
(``TriageSuspect``, or its summary.json form), a step (``TriageStep``), a triage.json
(``TriageDoc``), a suspect with the two runs' setups (``RunSetup``) that ``triage_run`` takes; the
bad run's summary naming a suspect, stored; and a triage's steps as one assertion message.

The builders fill what the tests do not care about with one small story: rung ``fusions`` of run
``w5`` is 15% slower than ``w4`` by the prediction bound (``mini`` ladder), confirmed; a test names
what it checks."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from traceladder.core.codec import JSONValue
from traceladder.core.documents import DiffField, TriageDoc, TriageSpent, TriageStep, TriageSuspect
from traceladder.triage.suspects import RunSetup
from traceladder.triage.suspects import diff as diff_of


def suspect_fields(
    rung: str = "fusions",
    *,
    run_id: str = "w5",
    good_run_id: str = "w4",
    reason: str = "prediction bound",
    direction: str = "slower",
    delta_pct: float = 15.0,
) -> dict[str, Any]:
    """A suspect as summary.json's ``history.suspects`` lists it (stats/history.py `suspect`)."""
    return {
        "rung": rung,
        "run_id": run_id,
        "good_run_id": good_run_id,
        "reason": reason,
        "direction": direction,
        "delta_pct": delta_pct,
    }


def suspect(rung: str = "fusions", *, diff: Sequence[DiffField] = (), **fields: Any) -> TriageSuspect:
    """A triage.json's suspect: `suspect_fields` and what differs from the good run (`diff`)."""
    return TriageSuspect(**suspect_fields(rung, **fields), diff=list(diff))


def build_change(good: JSONValue, bad: JSONValue) -> list[DiffField]:
    """The diff of two runs that differ only in their build (the build catalog's names)."""
    return [DiffField(section="build", field="build", good=good, bad=bad)]


def suspect_between(good: RunSetup, bad: RunSetup, rung: str = "fusions", **fields: Any) -> TriageSuspect:
    """The suspect of `bad`'s run against `good`'s, its diff read from the two setups
    (triage/suspects.py `diff`), as the weekly run would record it."""
    return suspect(rung, run_id=bad.run_id, good_run_id=good.run_id, diff=diff_of(good, bad), **fields)


def build_group(
    good_spec: dict[str, Any],
    bad_spec: dict[str, Any],
    good_build: str,
    bad_build: str,
    rung: str = "fusions",
    **fields: Any,
) -> tuple[TriageSuspect, RunSetup, RunSetup]:
    """One member of a suspect group as ``triage_run`` takes it: the suspect of run w5 (build
    `bad_build`, spec `bad_spec`) against w4 (`good_build`, `good_spec`), and the two setups."""
    return (
        suspect(rung, diff=build_change(good_build, bad_build), **fields),
        RunSetup("w4", good_spec, {"build": good_build}),
        RunSetup("w5", bad_spec, {"build": bad_build}),
    )


def step(
    kind: str = "confirm",
    *,
    rung: str = "fusions",
    good: str = "w4",
    candidate: str = "w5",
    verdict: str = "confirmed",
    **fields: Any,
) -> TriageStep:
    """One step of a triage (a confirm of w5 against w4 unless told otherwise)."""
    return TriageStep(kind=kind, rung=rung, good=good, candidate=candidate, verdict=verdict, **fields)


def triage_doc(
    of: TriageSuspect,
    *,
    ladder: str = "mini",
    state: str = "done",
    label: str | None = "confirmed regression",
    **fields: Any,
) -> TriageDoc:
    """The triage.json of suspect `of` (its run and rung), done and confirmed unless told otherwise:
    judged on wall time at alpha 0.05 outside Airflow, neither end with a digest or a build, its
    spent counted from its steps on one device."""
    basis: dict[str, Any] = {"metric": "wall", "alpha": 0.05, "dag_run_id": None, "digests": None, "builds": None}
    basis["spent"] = TriageSpent.of(fields.get("steps", []), devices=1)
    return TriageDoc(
        ladder=ladder, run_id=of.run_id, rung=of.rung, state=state, label=label, suspect=of, **(basis | fields)
    )


def store_suspect_summary(store: Any, prefix: str, ladder: str, suspect: Mapping[str, Any]) -> None:
    """The bad run's summary.json naming one suspect (`history.suspects`), as a weekly run's does."""
    from traceladder.core import layout
    from traceladder.core.documents import Summary

    run_id = str(suspect["run_id"])
    summary = Summary(ladder=ladder, run_id=run_id, rungs=[], history={"suspects": [dict(suspect)]})
    run = layout.run_prefix(prefix, ladder, run_id)
    store.put_bytes(layout.join(layout.summary_prefix(run), layout.SUMMARY_JSON), summary.to_json().encode())


def describe_steps(steps: Sequence[Any]) -> str:
    """A triage's steps, one line each with every look (an assertion message pytest does not cut)."""
    return "\n".join(
        f"{s.kind} {s.good} -> {s.candidate}: {s.verdict} {s.delta_pct} {s.interval_pct} after {s.blocks} blocks"
        f" ({s.reason}); looks: {json.dumps([look.to_dict() for look in s.looks])}"
        for s in steps
    )
