"""Docker rungs keep their spool on the host (issue 19): the mount RungDockerOperator adds."""

from __future__ import annotations

import pytest

from traceladder.airflow.operators.docker import SPOOL_IN_VOLUME, SPOOL_VOLUME, spool_mount


def test_the_workers_spool_dir_is_bind_mounted_at_the_same_path() -> None:
    mount, path = spool_mount({"TRACELADDER_SPOOL_DIR": "/srv/traceladder/spool"})
    assert path == "/srv/traceladder/spool"
    assert (mount["Type"], mount["Source"], mount["Target"]) == ("bind", path, path)


def test_without_it_a_named_volume_of_the_daemon_holds_the_spool() -> None:
    mount, path = spool_mount({})
    assert (mount["Type"], mount["Source"], mount["Target"]) == ("volume", SPOOL_VOLUME, SPOOL_IN_VOLUME)
    assert path == SPOOL_IN_VOLUME


def test_a_relative_spool_dir_is_refused_with_one_line() -> None:
    with pytest.raises(ValueError, match=r"^TRACELADDER_SPOOL_DIR: 'spool' is not an absolute path"):
        spool_mount({"TRACELADDER_SPOOL_DIR": "spool"})


def test_the_rung_operator_is_the_plain_call_with_its_own_parameters(monkeypatch) -> None:
    """RungDockerOperator's work is `run_rung_container` (the triage's too): its container settings
    go in as ContainerOptions, the task owns the container, and the result decides the task."""
    import json
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from traceladder.airflow.operators import docker as ops
    from traceladder.config import find_ladder, load_ladder
    from traceladder.plan.build import build_plan

    (rung,) = build_plan(
        load_ladder(find_ladder("deepseek-v4-flash-mi350x")), rungs=["baseline"], lens="none", repeats=1
    )
    seen: list[tuple] = []
    outcomes = iter(
        [
            {"rung_id": rung.rung_id, "status": "ok", "step_ms": 5.0, "step_ms_values": [5.0]},
            ops.RungRefused("host h: x"),
        ]
        + [{"rung_id": rung.rung_id, "status": "timeout", "error": "deadline"}]
    )

    def fake_run(hook, spec, run_id, owner, is_running, options, **kw):
        seen.append((spec.rung_id, run_id, owner, options, kw))
        out = next(outcomes)
        if isinstance(out, Exception):
            raise out
        return out

    monkeypatch.setattr(ops, "run_rung_container", fake_run)
    op = ops.RungDockerOperator(
        spec=[json.loads(rung.to_json())], task_id="slot", run_id="w1", docker_url="tcp://h:2376", host_name="h"
    )
    ti = SimpleNamespace(map_index=3, xcom_push=lambda **kw: None, get_ti_count=lambda **kw: 0)
    context = {"ti": ti, "dag": SimpleNamespace(dag_id="traceladder-l")}
    op.spec = op.spec[0]  # what execute's slot_spec does
    result = op._execute_with_daemon(context)
    assert result["status"] == "ok" and "step_ms_values" not in result  # the XCom's keys only
    _rung_id, run_id, owner, options, kw = seen[0]
    assert (run_id, owner) == ("w1", ("traceladder-l", "w1", "slot", 3))
    assert options.host_name == "h" and options.ipc_mode == "host" and "SYS_PTRACE" in options.cap_add
    assert options.labels == {"traceladder.managed": "true", "traceladder.host": "h"}
    assert options.ulimits[0]["Name"] == "nofile" and kw["preflight"] is True
    with pytest.raises(AirflowException, match=r"^host h: x$"):
        op._execute_with_daemon(context)
    with pytest.raises(AirflowFailException, match=r"timeout: deadline$"):
        op._execute_with_daemon(context)
