"""The deployment's alerts (triage/alerts.py): one per cause, links instead of a second triage,
one winner when two triages create at once, a sheriff's changes kept with their user, a merge by
shared culprit and the recovery rule. On the directory store, whose conditional writes refuse what
S3's refuse (an existing id, a stale ETag); the S3 store runs in tests/integration."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from traceladder.core.alerts import AlertDoc
from testkit.triage_docs import triage_doc
from traceladder.core.documents import Culprit, DiffField, TriageDoc, TriageStep, TriageSuspect
from traceladder.triage import alerts
from traceladder.triage.alerts import AlertConflict, DirAlertStore

pytestmark = pytest.mark.triage

BUILD = [DiffField(section="build", field="build", good="n0", bad="n1")]


def _suspect(
    run_id: str, good: str = "w6", reason: str = "prediction bound", diff: list[DiffField] = BUILD
) -> TriageSuspect:
    return TriageSuspect(
        rung="baseline", run_id=run_id, good_run_id=good, reason=reason, direction="slower", delta_pct=90.0, diff=diff
    )


def _group(ladder: str, run_id: str, **kw: object) -> list[tuple[TriageSuspect, alerts.AlertMember]]:
    s = _suspect(run_id, **kw)  # type: ignore[arg-type]
    return [(s, alerts.member_of(s, ladder, "traceladder", "traceladder", "triaged", "cpu"))]


def _key(rung: str) -> str:
    return f"traceladder/l/run/triage/{rung}/triage.json"


def test_the_next_weeks_change_point_and_another_ladders_same_build_link_to_one_alert(tmp_path) -> None:
    store = DirAlertStore(tmp_path)
    first, owns = alerts.assign(store, _group("l", "w7"), _key, "triage__l__w7")
    assert owns and first.status == "untriaged" and first.kind == "regression"
    # week N+1: the change point is called on the same window, against the same last good run
    again, owns = alerts.assign(store, _group("l", "w8", reason="change point"), _key, "triage__l__w8")
    assert not owns and again.id == first.id
    # another ladder, its own window, the same build change
    other, owns = alerts.assign(store, _group("m", "x3", good="x2"), _key, "triage__m__x3")
    assert not owns and other.id == first.id
    assert [(m.ladder, m.run_id, m.role) for m in other.members] == [
        ("l", "w7", "triaged"),
        ("l", "w8", "linked"),
        ("m", "x3", "linked"),
    ]
    assert [c.what for c in other.history] == ["created", "linked", "linked"]
    # a retried owner is still the owner, and adds nothing
    retried, owns = alerts.assign(store, _group("l", "w7"), _key, "triage__l__w7")
    assert owns and retried.members == other.members
    assert alerts.all_alerts(store) == [retried]


def test_force_triages_a_covered_suspect_again_and_a_closed_alert_covers_nothing(tmp_path) -> None:
    store = DirAlertStore(tmp_path)
    first, _ = alerts.assign(store, _group("l", "w7"), _key, "d1")
    forced, owns = alerts.assign(store, _group("l", "w8"), _key, "d2", force=True)
    assert owns and forced.id == first.id and forced.triage is not None and forced.triage.run_id == "w8"
    alerts.set_fields(store, first.id, "sheriff", status="fixed")
    fresh, owns = alerts.assign(store, _group("l", "w9"), _key, "d3")
    assert owns and fresh.id == f"{first.id}-2"


def test_two_triages_of_one_cause_at_once_create_one_alert(tmp_path) -> None:
    store = DirAlertStore(tmp_path)
    results: list[tuple[str, bool]] = []
    barrier = threading.Barrier(2)

    def run(ladder: str, run_id: str, good: str) -> None:
        barrier.wait()
        doc, owns = alerts.assign(store, _group(ladder, run_id, good=good), _key, f"d-{ladder}")
        results.append((doc.id, owns))

    threads = [threading.Thread(target=run, args=a) for a in (("l", "w7", "w6"), ("m", "x3", "x2"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({i for i, _ in results}) == 1 and sorted(o for _, o in results) == [False, True]
    (alert,) = alerts.all_alerts(store)
    assert {m.ladder for m in alert.members} == {"l", "m"}


def test_a_stale_etag_is_refused_as_s3_refuses_it(tmp_path) -> None:
    store = DirAlertStore(tmp_path)
    doc, _ = alerts.assign(store, _group("l", "w7"), _key, "d1")
    _, etag = store.read(doc.id) or (None, "")
    alerts.set_fields(store, doc.id, "ann", note="looking")
    with pytest.raises(AlertConflict):
        store.replace(replace(doc, note="stale"), etag)
    assert not store.create(doc)


def test_a_sheriffs_changes_are_kept_with_user_and_previous_value(tmp_path) -> None:
    store = DirAlertStore(tmp_path)
    doc, _ = alerts.assign(store, _group("l", "w7"), _key, "d1")
    alerts.set_fields(store, doc.id, "ann", status="investigating")
    after = alerts.set_fields(store, doc.id, "bob", status="investigating", issue_url="https://bugs.example/1")
    changes = [(c.what, c.by, c.value, c.previous) for c in after.history[1:]]
    assert changes == [
        ("status", "ann", "investigating", "untriaged"),
        ("issue", "bob", "https://bugs.example/1", None),
    ]
    assert after.status == "investigating" and after.issue_url == "https://bugs.example/1"


def _triage(run_id: str, label: str, culprit: str | None) -> TriageDoc:
    step = TriageStep(
        kind="confirm",
        rung="baseline",
        good="w6",
        candidate=run_id,
        verdict="confirmed",
        delta_pct=54.0,
        interval_pct=[30.0, 80.0],
        blocks=3,
    )
    culprits = (
        [Culprit(name=culprit, last_good="n0", delta_pct=54.0, share_pct=100.0, share_interval_pct=[70.0, 130.0])]
        if culprit
        else []
    )
    return triage_doc(_suspect(run_id), ladder="l", label=label, steps=[step], culprits=culprits, metric="cpu")


def test_not_reproduced_makes_the_alert_invalid_and_it_covers_nothing(tmp_path) -> None:
    store = DirAlertStore(tmp_path)
    doc, _ = alerts.assign(store, _group("l", "w7"), _key, "d1")
    after = alerts.record_triage(store, doc.id, _triage("w7", "not reproduced", None), "r.html", None)
    assert after.status == "invalid" and after.history[-1].by == alerts.PRODUCT_USER
    assert not alerts.covering(after)


def test_rungs_that_share_a_culprit_are_merged_into_the_older_alert(tmp_path) -> None:
    store = DirAlertStore(tmp_path)
    older, _ = alerts.assign(store, _group("l", "w7"), _key, "d1")
    alerts.record_triage(store, older.id, _triage("w7", "confirmed regression", "n1"), "r.html", None)
    other_change = [DiffField(section="spec", field="model_args.x", good=1, bad=2)]
    newer, owns = alerts.assign(store, _group("m", "x3", good="x2", diff=other_change), _key, "d2")
    assert owns and newer.id != older.id
    merged = alerts.record_triage(store, newer.id, _triage("x3", "confirmed regression", "n1"), "r.html", None)
    assert merged.id == older.id and {m.ladder for m in merged.members} == {"l", "m"}
    gone = store.read(newer.id)
    assert gone is not None and gone[0].merged_into == older.id and not alerts.covering(gone[0])


def test_recovered_after_n_runs_in_a_row_inside_the_good_segments_bound_and_marked_once(tmp_path) -> None:
    good = [20.0, 21.0, 19.5, 20.5, 20.2]
    ids = [f"g{i}" for i in range(5)] + ["bad1", "bad2", "r1", "r2", "r3"]
    values = good + [60.0, 61.0, 20.4, 61.0, 20.1]
    member = alerts.AlertMember(
        ladder="l",
        run_id="bad2",
        rung="baseline",
        good_run_id="g4",
        reason="change point",
        direction="slower",
        delta_pct=200.0,
        role="triaged",
    )
    assert alerts.recovered_run(ids, values, member, 3) is None  # r2 is still slow
    values = good + [60.0, 61.0, 20.4, 19.9, 20.1]
    assert alerts.recovered_run(ids, values, member, 3) == "r3"
    assert alerts.recovered_run(ids[:-1], values[:-1], member, 3) is None  # two runs are not three
    store = DirAlertStore(tmp_path)
    doc, _ = alerts.assign(store, _group("l", "w7"), _key, "d1")
    marked = alerts.mark_recovered(store, doc.id, "r3", 3)
    assert marked is not None and marked.recovered_run == "r3" and not alerts.covering(marked)
    assert alerts.mark_recovered(store, doc.id, "r4", 3) is None
    assert alerts.mark_notice(store, doc.id, "recovered") and not alerts.mark_notice(store, doc.id, "recovered")


def test_a_bad_alert_file_is_one_line_naming_it(tmp_path) -> None:
    store = DirAlertStore(tmp_path)
    path = tmp_path / "traceladder-alerts" / "alerts" / "a-x.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": 1, "id": "a-x", "kind": "regression", "status": "lost", "title": "t", "causes": []}')
    with pytest.raises(alerts.AlertStoreError, match=r"a-x.json: status: .*lost"):
        store.read("a-x")


def test_an_alert_round_trips_and_says_its_size(tmp_path) -> None:
    store = DirAlertStore(tmp_path)
    doc, _ = alerts.assign(store, _group("l", "w7"), _key, "d1")
    triage = _triage("w7", "confirmed regression", "n1")
    after = alerts.record_triage(store, doc.id, triage, "r.html", "traceladder triage repro ...")
    assert AlertDoc.from_json(after.to_json()) == after
    assert after.size_text() == "+54.0% [+30.0%, +80.0%] (CPU time, 95% interval)"
