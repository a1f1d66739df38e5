"""The alerts pages' pure parts (issue 59): the bisection chart (ui/alert_chart.py), read back as
XML, and the change request's checks (ui/responses.py `AlertUpdate`, ui/alerts.py's 422)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
from fastapi import HTTPException

from traceladder.core.alerts import ALERT_STATUSES
from traceladder.core.codec import DocumentError
from traceladder.core.documents import Culprit, TriageStep
from traceladder.ui.alert_chart import Scale, bisection_svg, slots
from traceladder.ui.responses import NOTE_MAX_CHARS, AlertUpdate

pytestmark = pytest.mark.triage

SVG = "{http://www.w3.org/2000/svg}"
CANDIDATES = ["n0", "n1", "n2", "n3", "n4", "n5"]


def _step(kind: str, good: str, candidate: str, verdict: str, delta: float | None, interval=None) -> TriageStep:
    return TriageStep(
        kind=kind,
        rung="fusions",
        good=good,
        candidate=candidate,
        verdict=verdict,
        delta_pct=delta,
        interval_pct=interval,
    )


# two culprits: n2 carries about 55% of the confirmed +40%, n5 the rest; n3 was skipped
STEPS = [
    _step("confirm", "w4", "w5", "confirmed", 40.0, [31.0, 49.0]),
    _step("bisect", "n0", "n3", "skipped", None),
    _step("bisect", "n0", "n2", "confirmed", 22.0, [14.0, 30.0]),
    _step("bisect", "n0", "n1", "not reproduced", 0.5, [-3.0, 4.0]),
    _step("pair", "n1", "n2", "confirmed", 21.0, [15.0, 27.5]),
    _step("range", "n2", "n5", "confirmed", 15.0, [9.0, 21.0]),
    _step("pair", "n4", "n5", "confirmed", -2.5, [-6.0, 1.0]),
]
CULPRITS = [
    Culprit(name="n2", last_good="n1", delta_pct=21.0, share_pct=55.0, share_interval_pct=[35.0, 74.0]),
    Culprit(name="n5", last_good="n4", delta_pct=15.0, share_pct=38.0, share_interval_pct=[20.0, 56.0]),
]


def _chart(candidates=CANDIDATES, steps=STEPS, culprits=CULPRITS) -> ET.Element:
    return ET.fromstring(bisection_svg(candidates, steps, culprits, "CPU time"))  # noqa: S314 - our own output


def _label_x(root: ET.Element) -> dict[str, float]:
    return {t.get("data-name"): float(t.get("x")) for t in root.iter(f"{SVG}text") if t.get("class") == "candidate"}


def test_the_x_axis_is_the_candidates_in_order_then_the_confirmed_run() -> None:
    root = _chart()
    assert list(_label_x(root)) == [*CANDIDATES, "w5"]
    xs = list(_label_x(root).values())
    assert xs == sorted(xs) and len(set(xs)) == len(xs)
    assert slots(["a", "b", "a"], [_step("confirm", "w4", "w5", "confirmed", 1.0)]) == ["a", "b", "w5"]


def test_each_step_sits_at_its_candidate_with_its_interval() -> None:
    root = _chart()
    label_x = _label_x(root)
    groups = [g for g in root.iter(f"{SVG}g") if g.get("class") == "step"]
    assert [(g.get("data-kind"), g.get("data-candidate")) for g in groups] == [(s.kind, s.candidate) for s in STEPS]
    zero = next(line for line in root.iter(f"{SVG}line") if line.get("class") == "zero")
    zero_y = float(zero.get("y1"))
    effects: dict[float, float] = {}
    for group, step in zip(groups, STEPS):
        assert group.find(f"{SVG}title").text.startswith(f"{step.kind} on fusions: {step.candidate} vs {step.good}")
        dot = group.find(f"{SVG}circle")
        if step.delta_pct is None:  # skipped: a cross on the zero line, no dot, no whisker
            assert dot is None and group.find(f"{SVG}path") is not None
            continue
        x, y = float(dot.get("cx")), float(dot.get("cy"))
        assert abs(x - label_x[step.candidate]) <= 10  # two steps on n2: side by side within its slot
        whisker = next(line for line in group.iter(f"{SVG}line") if line.get("class") == "whisker")
        low_y, high_y = float(whisker.get("y1")), float(whisker.get("y2"))
        assert high_y < y < low_y  # y grows downwards: the interval's high end is above the dot
        assert (dot.get("fill") == "none") == (step.verdict != "confirmed")
        assert (y < zero_y) == (step.delta_pct > 0)
        effects[step.delta_pct] = y
    ordered = [effects[d] for d in sorted(effects)]
    assert ordered == sorted(ordered, reverse=True)  # a larger change is drawn higher


def test_the_culprits_are_marked_with_their_shares() -> None:
    root = _chart()
    label_x = _label_x(root)
    marks = [g for g in root.iter(f"{SVG}g") if g.get("class") == "culprit"]
    assert [g.get("data-name") for g in marks] == ["n2", "n5"]
    for mark, culprit in zip(marks, CULPRITS):
        rect = mark.find(f"{SVG}rect")
        left = float(rect.get("x"))
        assert left < label_x[culprit.name] < left + float(rect.get("width"))
        low, high = culprit.share_interval_pct
        assert mark.find(f"{SVG}text").text == f"culprit {culprit.share_pct:.0f}% [{low:.0f}%, {high:.0f}%]"
    bold = [t.get("data-name") for t in root.iter(f"{SVG}text") if t.get("font-weight") == "bold"]
    assert bold == ["n2", "n5"]


def test_names_are_escaped_and_the_chart_stays_well_formed() -> None:
    odd = 'n<2>&"x"'
    steps = [_step("bisect", "n0", odd, "confirmed", 5.0, [1.0, 9.0])]
    culprit = Culprit(name=odd, last_good="n0", delta_pct=5.0, share_pct=100.0, share_interval_pct=[90.0, 100.0])
    svg = bisection_svg(["n0", odd], steps, [culprit], "<metric>")
    assert "<2>" not in svg and "<metric>" not in svg
    root = ET.fromstring(svg)  # noqa: S314 - our own output
    assert list(_label_x(root)) == ["n0", odd]
    assert root.find(f"{SVG}title").text.endswith("of the <metric>, B against A, with its interval")


def test_a_triage_without_steps_still_draws_an_axis() -> None:
    root = _chart(candidates=[], steps=[], culprits=[])
    assert root.get("class") == "bisection" and int(root.get("width")) > 300
    assert any(line.get("class") == "zero" for line in root.iter(f"{SVG}line"))


def test_the_scale_has_round_ticks_through_zero() -> None:
    scale = Scale.over([-6.0, 49.0])
    ticks = scale.ticks()
    assert 0 in ticks and ticks == sorted(ticks)
    gaps = {round(b - a, 6) for a, b in zip(ticks, ticks[1:])}
    assert gaps == {10.0} and 4 <= len(ticks) <= 8  # 64 points of range: ticks at 1, 2 or 5 x 10^k
    assert Scale.over([0.4, 2.2]).ticks() == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert scale.low <= -6.0 and scale.high >= 49.0
    assert scale.y(scale.high) < scale.y(0) < scale.y(scale.low)


# ---- the change request --------------------------------------------------------------------------
def test_a_change_request_reads_its_three_fields() -> None:
    update = AlertUpdate.from_dict({"status": "investigating", "issue_url": "https://issues.example/59", "note": "n"})
    assert (update.status, update.issue_url, update.note) == ("investigating", "https://issues.example/59", "n")
    assert AlertUpdate.from_dict({}) == AlertUpdate()
    for status in ALERT_STATUSES:
        assert AlertUpdate.from_dict({"status": status}).status == status
    assert AlertUpdate.from_dict({"note": "x" * NOTE_MAX_CHARS}).note == "x" * NOTE_MAX_CHARS


@pytest.mark.parametrize(
    "body,field",
    [
        ({"status": "closed"}, "status"),
        ({"status": 3}, "status"),
        ({"issue_url": "javascript:alert(1)"}, "issue_url"),
        ({"issue_url": "ftp://example.org/x"}, "issue_url"),
        ({"issue_url": "https://"}, "issue_url"),
        ({"issue_url": "https://e.org/" + "x" * 2000}, "issue_url"),
        ({"note": "x" * (NOTE_MAX_CHARS + 1)}, "note"),
        ({"note": ["a"]}, "note"),
        ({"owner": "me"}, "owner"),
    ],
)
def test_a_bad_change_request_names_its_field(body, field) -> None:
    from traceladder.ui.alerts import _update

    with pytest.raises(DocumentError) as caught:
        AlertUpdate.from_dict(body)
    assert str(caught.value).startswith(f"request: {field}: ")
    with pytest.raises(HTTPException) as answered:
        _update(body)
    assert answered.value.status_code == 422
    assert answered.value.detail == str(caught.value) and "\n" not in answered.value.detail


def test_candidates_are_read_by_name() -> None:
    from testkit.triage_docs import suspect, triage_doc
    from traceladder.ui.alerts import candidate_names

    doc = triage_doc(suspect(), candidates=[{"name": "n0", "built_at": "x"}, {"name": "n1"}, {"no": "name"}])
    assert candidate_names(doc) == ["n0", "n1"]


# ---- who sees an alert, and the run page's links ------------------------------------------------
def _alert(alert_id: str, *ladders: str, triage_ladder: str | None = None):
    from traceladder.core.alerts import AlertDoc, AlertMember, AlertTriage

    members = [
        AlertMember(
            ladder=ladder,
            run_id="w5",
            rung="fusions",
            good_run_id="w4",
            reason="change point",
            direction="slower",
            delta_pct=12.0,
            role="triaged",
        )
        for ladder in ladders
    ]
    triage = (
        AlertTriage(ladder=triage_ladder, run_id="w5", rung="fusions", key="k") if triage_ladder is not None else None
    )
    return AlertDoc(
        id=alert_id, kind="regression", status="untriaged", title="t", causes=[], members=members, triage=triage
    )


def test_an_alert_is_shown_only_to_who_may_read_every_ladder_it_covers(monkeypatch) -> None:
    from traceladder.ui import access, alerts

    asked: list[tuple[list[str], str]] = []

    def allowed(ladders: list[str], user: object, method: str) -> dict[str, bool]:
        asked.append((sorted(set(ladders)), method))
        return {n: n in {"a", "b"} or (method == "GET" and n == "c") for n in ladders}

    monkeypatch.setattr(access, "ladders_allowed", allowed)
    every = [_alert("x", "a"), _alert("y", "a", "d"), _alert("z", "b", triage_ladder="d"), _alert("w", "c")]
    assert [a.id for a in alerts.readable_alerts(every, user=None)] == ["x", "w"]
    assert asked == [(["a", "b", "c", "d"], "GET")]  # one question per ladder, not per alert
    assert alerts.can_edit(_alert("x", "a", "b"), user=None)
    assert not alerts.can_edit(_alert("w", "a", "c"), user=None)  # read access to c is not enough


def test_the_run_page_links_a_triage_row_to_its_alerts(monkeypatch) -> None:
    from pathlib import Path

    from traceladder.ui import access, alerts, data
    from traceladder.ui.views import AlertLink, TriageRow

    merged = replace(_alert("m", "mini"), merged_into="x")
    monkeypatch.setattr(alerts, "recent_alerts", lambda: [_alert("x", "mini"), _alert("o", "other"), merged])
    monkeypatch.setattr(access, "ladders_allowed", lambda ladders, user, method: dict.fromkeys(ladders, True))
    entry = data.LadderEntry(file="mini-file", path=Path("mini.yaml"), name="mini")
    rows, error = alerts.with_alert_links([TriageRow("fusions"), TriageRow("attn")], entry, "w5", "/tl", None)
    assert error is None
    assert rows[0].alerts == (
        AlertLink("x", "untriaged", "/tl/alerts/x"),
        AlertLink("m", "merged into x", "/tl/alerts/m"),
    )
    assert rows[1] == TriageRow("attn")
    assert alerts.with_alert_links([TriageRow("fusions")], entry, "w6", "/tl", None)[0] == [TriageRow("fusions")]

    def down() -> list:
        raise alerts.AlertsUnavailable("alerts: listing s3://traceladder/traceladder-alerts/alerts/: timed out")

    monkeypatch.setattr(alerts, "recent_alerts", down)
    rows, error = alerts.with_alert_links([TriageRow("fusions")], entry, "w5", "/tl", None)
    assert rows == [TriageRow("fusions")] and error == (
        "alerts could not be read: alerts: listing s3://traceladder/traceladder-alerts/alerts/: timed out"
    )


def test_the_alert_page_reads_a_schema_1_triage_through_the_ladders_store(monkeypatch) -> None:
    from pathlib import Path

    from tests.integration import ui_alerts
    from traceladder.ui import alerts, data

    entry = data.LadderEntry(
        file="mini-file", path=Path("mini.yaml"), name="mini", conn_id="c", bucket="b", prefix="traceladder"
    )
    stored = ui_alerts.schema1_triage("mini", "w5", "w4")
    key = "traceladder/mini/w5/triage/attn_turbo/triage.json"
    read: list[str] = []

    class Store(data.LadderStore):
        def get_json(self, rel: str) -> object:
            read.append(rel)
            return stored

    monkeypatch.setattr(data, "LadderStore", Store)
    monkeypatch.setattr(alerts, "_files_by_name", lambda: {"mini": entry})
    monkeypatch.setattr(alerts, "can_edit", lambda alert, user: True)
    alert, _ = ui_alerts.alerts("mini", "traceladder", "b", "w5", "w4", key)
    view = alerts.alert_view(alert, "/tl", user=None, csrf="c" * 64)
    assert read == ["w5/triage/attn_turbo/triage.json"] and view.triage_error is None
    assert view.members[0].href == "/tl/ladders/mini-file/runs/w5" and view.csrf == "c" * 64
    assert [s.effect for s in view.steps][:2] == ["+38.0% [+29.4%, +47.1%]", "+22.3% [+14.0%, +31.2%]"]
    assert view.sentence == ui_alerts.SENTENCE
    assert view.repro == [f"{side}: {cmd}" for side, cmd in ui_alerts.REPRO.items()]
    assert view.report == "/tl/ladders/mini-file/artifacts/w5/triage/attn_turbo/report.html"
    assert 'data-name="nightly-3"' in view.chart and 'class="culprit"' in view.chart
    # the alert's own repro command wins; a ladder no file names is one line, not an error
    own = replace(alert, triage=replace(alert.triage, repro="traceladder ab --pair n2 n3"))
    assert alerts.alert_view(own, "/tl", None, "").repro == ["traceladder ab --pair n2 n3"]
    monkeypatch.setattr(alerts, "_files_by_name", lambda: {})
    gone = alerts.alert_view(alert, "/tl", None, "")
    assert gone.triage_error == "no ladder file names ladder mini" and gone.chart == "" and gone.members[0].href is None
