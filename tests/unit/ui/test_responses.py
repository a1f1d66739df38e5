"""The Ladders page's JSON answers are typed documents (ui/responses.py, issue 57): ``POST
/trigger``'s answer and an error's keep the bytes the page answered as plain dicts, and read back
as the same document; the form's conf is a ``TriggerConf``; the triage rows and run views the
templates read are classes (ui/views.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import HTTPException
from fastapi.responses import JSONResponse

from traceladder.ui import TRIGGER_DAG_ID, data
from traceladder.ui.responses import ErrorBody, TriggerConf, TriggerResult
from traceladder.ui.views import TriageRow

CONF = TriggerConf(ladder="proxy-local", rungs=["baseline"], lens="ladder", repeats=None, override="")


def test_the_trigger_answer_keeps_its_bytes_and_reads_back() -> None:
    result = TriggerResult(dag_id=TRIGGER_DAG_ID, dag_run_id="manual__1", state="queued", conf=CONF)
    before = {  # the dict the page answered before the answer had a class
        "dag_id": TRIGGER_DAG_ID,
        "dag_run_id": "manual__1",
        "state": "queued",
        "conf": {"ladder": "proxy-local", "rungs": ["baseline"], "lens": "ladder", "repeats": None, "override": ""},
    }
    assert JSONResponse(result.to_dict()).body == JSONResponse(before).body
    assert TriggerResult.from_dict(before) == result
    assert TriggerResult.from_dict(before).conf.rungs == ["baseline"]


def test_an_error_answer_is_its_detail() -> None:
    assert JSONResponse(ErrorBody(detail="no such artifact").to_dict()).body == b'{"detail":"no such artifact"}'


def _entries() -> list[data.LadderEntry]:
    return [
        data.LadderEntry(
            file="proxy-local", path=Path("proxy-local.yaml"), name="proxy-local", rungs=["baseline", "fusions"]
        )
    ]


def test_the_form_makes_a_trigger_conf() -> None:
    from traceladder.ui.app import _trigger_conf

    form = {"ladder": "proxy-local", "rungs": ["baseline, fusions", "baseline"], "repeats": "2", "override": " a=b "}
    conf = _trigger_conf(form, _entries())
    assert conf == TriggerConf(ladder="proxy-local", rungs=["baseline", "fusions"], repeats=2, override="a=b")
    assert conf.to_dict() == {
        "ladder": "proxy-local",
        "rungs": ["baseline", "fusions"],
        "lens": "ladder",
        "repeats": 2,
        "override": "a=b",
    }


def test_rungs_that_are_no_list_are_a_400() -> None:
    from traceladder.ui.app import _trigger_conf

    with pytest.raises(HTTPException) as caught:
        _trigger_conf({"ladder": "proxy-local", "rungs": {"baseline": 1}}, _entries())
    assert caught.value.status_code == 400


def test_a_triage_row_reads_its_stored_document() -> None:
    assert TriageRow("fusions") == TriageRow("fusions", "not started", None, None, None, None)
    row = TriageRow.stored("fusions", {"state": "done", "label": "not reproduced", "first_bad": None}, "/r.html")
    assert (row.state, row.label, row.first_bad, row.conclusion, row.report) == (
        "done",
        "not reproduced",
        None,
        None,
        "/r.html",
    )
