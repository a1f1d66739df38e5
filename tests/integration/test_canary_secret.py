"""Security (issue 19): a canary secret across a whole ladder run through real Airflow. The S3
secret key (in the Airflow connection and the worker's environment) and a canary token in the
worker's environment appear in no task log, rendered field, XCom value, nor in any object the run
stored (metrics.json, spec.json, plan.json, the summary: all the UI reads). The UI pages
themselves are checked by test_ui_ladders.py::test_no_secret_in_any_page."""

from __future__ import annotations

import gzip
import secrets
from pathlib import Path

import pytest

from traceladder.storage.artifacts import safe_key_part

from tests.integration.ladder_checks import objects, task_states
from tests.integration.test_ladder_e2e import ladders_dir, write_ladder  # noqa: F401 - ladders_dir is a fixture, requested by name
from testkit.tiny_proxy import TINY_MODEL

pytestmark = [pytest.mark.e2e, pytest.mark.faults]


def test_no_secret_anywhere_in_a_ladder_run(
    airflow_home: Path,
    s3_server,
    ladders_dir: Path,  # noqa: F811 - the fixture
    monkeypatch,
    capfd,
) -> None:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from traceladder.embedded.local_airflow import dag_test

    canary = "canary-" + secrets.token_hex(12)
    monkeypatch.setenv("TRACELADDER_CANARY_TOKEN", canary)
    write_ladder(
        ladders_dir,
        "e2e-canary",
        {
            "base": {"model_args": TINY_MODEL},
            "rungs": [{"name": "baseline"}],
            "lenses": {"rung": "baseline", "use": ["none", "torch_rank0"]},
        },
    )
    dag_run = dag_test("traceladder-e2e-canary")
    assert str(dag_run.state) == "success", task_states(dag_run)
    needles = {"canary": canary, "s3 secret": s3_server.secret_key}

    out = capfd.readouterr()
    texts = {"task output": out.out + out.err}
    for log in (airflow_home / "logs").rglob("*"):
        if log.is_file():
            texts[f"log {log.name}"] = log.read_text(errors="replace")
    with create_session() as session:
        for x in session.query(XComModel).filter(
            XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id
        ):
            texts[f"xcom {x.task_id}[{x.map_index}] {x.key}"] = str(x.value)
        for r in session.query(RenderedTaskInstanceFields).filter(RenderedTaskInstanceFields.dag_id == dag_run.dag_id):
            texts[f"rendered {r.task_id}[{r.map_index}]"] = str(r.rendered_fields)
    assert any(k.startswith("xcom ") for k in texts), "no XCom was read: the check would be empty"
    stored = objects(s3_server.client(), s3_server.bucket, f"traceladder/e2e-canary/{safe_key_part(dag_run.run_id)}/")
    assert any(k.endswith("/metrics.json") for k in stored) and any(k.endswith("/spec.json") for k in stored)
    for key, body in stored.items():
        texts[f"s3 {key}"] = (gzip.decompress(body) if key.endswith(".gz") else body).decode(errors="replace")

    leaks = [(where, name) for where, text in texts.items() for name, needle in needles.items() if needle in text]
    assert leaks == [], leaks
