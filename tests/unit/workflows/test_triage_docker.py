"""The docker triage's runs without a daemon (issue 58, bug 4): each run is the rung's own plain
call (`run_rung_container`, airflow/operators/docker.py), never an operator's `execute` inside the
triage task; its containers are labelled with the triage's task instance; and the plain call
itself (hygiene, preflight, labels, the container run, its result) on a stand-in hook. The runs
on a real Docker Engine are in tests/integration/test_triage_docker.py."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from traceladder.airflow.hooks import docker_hygiene as hygiene
from traceladder.airflow.operators import docker as docker_ops
from traceladder.config import find_ladder, load_ladder
from traceladder.plan.build import build_plan
from traceladder.triage.from_ladder import TriageError
from traceladder.workflows.triage_backends import _docker_run_block

pytestmark = pytest.mark.triage

LADDER = "deepseek-v4-flash-mi350x"  # include/configs: the docker ladder on mi350x-01
OWNER = ("traceladder-triage", "manual__t", "confirm_on_mi350x-01", -1)


@pytest.fixture
def loaded() -> Any:
    return load_ladder(find_ladder(LADDER))


@pytest.fixture
def spec(loaded: Any) -> dict[str, Any]:
    (rung,) = build_plan(loaded, rungs=["baseline"], lens="none", repeats=1)
    return dict(json.loads(rung.to_json()), rung_id="triage-baseline.s0-A.b0")


def _context(pool: str | None = None) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id=OWNER[0], run_id=OWNER[1], task_id=OWNER[2], map_index=None)
    if pool is not None:
        ti.task = SimpleNamespace(pool=pool)
    ti.get_ti_count = lambda **_: 1
    return {"ti": ti, "dag": SimpleNamespace(dag_id=OWNER[0])}


class _Hook:
    """The host's RocmDockerHook as the plain call uses it: a preflight, the container run, the
    orphan clean-up; each call recorded."""

    def __init__(self, refuse: str | None = None, lines: list[str] | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.refuse, self.lines = refuse, lines
        self.api_client = SimpleNamespace(remove_container=lambda name, force: self.calls.append(("remove", name)))
        self.closed = False

    def remove_orphans(self, running_too: Any = None, log: Any = None) -> list[str]:
        self.calls.append(("orphans", running_too))
        return []

    def preflight(self, **kwargs: Any) -> Any:
        self.calls.append(("preflight", kwargs))
        if self.refuse:
            raise hygiene.HostCheckError("mi350x-01", self.refuse)
        return hygiene.ImageProvenance(image="sha256:1", image_id="sha256:1", image_digest="r/x@sha256:2")

    def run_streamed(self, image: str, **kwargs: Any) -> tuple[int, list[str]]:
        self.calls.append(("run", {"image": image, **kwargs}))
        result = {"rung_id": "triage-baseline.s0-A.b0", "status": "ok", "step_ms_values": [10.0, 11.0]}
        return 0, self.lines if self.lines is not None else ["starting", json.dumps(result)]

    def close(self) -> None:
        self.closed = True


def test_the_docker_triage_runs_the_plain_call_and_no_operator_execute(
    monkeypatch: pytest.MonkeyPatch, loaded: Any, spec: dict[str, Any]
) -> None:
    """On the main commit before this fix, the block built a RungDockerOperator and called its
    `execute` inside the triage task (Airflow: "cannot be called outside the task runner")."""
    executed: list[str] = []
    for cls in (docker_ops.RungDockerOperator, docker_ops.RocmDockerOperator, docker_ops.DockerOperator):
        monkeypatch.setattr(cls, "execute", lambda self, context, _c=cls: executed.append(_c.__name__))
    calls: list[dict[str, Any]] = []
    hooks: list[_Hook] = []

    def fake_run(hook: Any, rung: Any, run_id: str, owner: Any, is_running: Any, options: Any, **kw: Any) -> Any:
        calls.append({"rung": rung.rung_id, "run_id": run_id, "owner": owner, "options": options, "alive": is_running})
        return {"rung_id": rung.rung_id, "status": "ok", "step_ms_values": [10.0]}

    # raising=False: before the fix these did not exist, and the spies above say what ran instead
    monkeypatch.setattr(docker_ops, "run_rung_container", fake_run, raising=False)
    monkeypatch.setattr(docker_ops, "rung_hook", lambda host: hooks.append(_Hook()) or hooks[-1], raising=False)
    block = _docker_run_block(loaded, "w5", _context(pool="traceladder-mi350x-01"))
    result = block(spec, "A", 0)
    assert executed == []
    assert result == {"rung_id": "triage-baseline.s0-A.b0", "status": "ok", "step_ms_values": [10.0]}
    (call,) = calls
    # the triage's task instance owns the container (the orphan sweep asks Airflow about it)
    assert call["owner"] == OWNER and call["run_id"] == "w5-triage"
    assert call["alive"](*OWNER) is True
    from traceladder.workflows.triage_backends import docker_host

    host = docker_host(loaded)
    assert host is not None and call["options"].host_name == host.name == "mi350x-01"
    assert call["options"].docker_url == host.docker_url
    assert len(hooks) == 1 and hooks[0].closed  # the TLS material goes with each run's client


def test_outside_a_task_the_repro_names_its_containers_and_stops_no_other(
    monkeypatch: pytest.MonkeyPatch, loaded: Any, spec: dict[str, Any]
) -> None:
    """`traceladder triage repro` runs the same plain call with no task instance (no `ti`): its
    containers are labelled by the repro's DAG id and run, and every other container is taken as
    running (Airflow cannot be asked from outside a worker, so none is stopped)."""
    calls: list[dict[str, Any]] = []

    def fake_run(hook: Any, rung: Any, run_id: str, owner: Any, alive: Any, options: Any, **_k: Any) -> Any:
        calls.append({"run_id": run_id, "owner": owner, "alive": alive})
        return {"rung_id": rung.rung_id, "status": "ok"}

    monkeypatch.setattr(docker_ops, "run_rung_container", fake_run)
    monkeypatch.setattr(docker_ops, "rung_hook", lambda host: _Hook())
    block = _docker_run_block(loaded, "w5-repro-s1", {}, "traceladder-triage-repro")
    assert block(spec, "A", 0)["status"] == "ok"
    (call,) = calls
    assert call["owner"] == ("traceladder-triage-repro", "w5-repro-s1", "repro", -1)
    assert call["run_id"] == "w5-repro-s1-triage" and call["alive"](*OWNER) is True


def test_a_triage_task_outside_the_hosts_pool_refuses_in_one_line(loaded: Any) -> None:
    with pytest.raises(TriageError) as info:
        _docker_run_block(loaded, "w5", _context(pool="default_pool"))
    message = str(info.value)
    assert "\n" not in message
    assert "pool default_pool" in message and "mi350x-01" in message and "traceladder-mi350x-01" in message


def test_a_refused_or_failed_run_is_a_failed_cell_with_its_line(
    monkeypatch: pytest.MonkeyPatch, loaded: Any, spec: dict[str, Any]
) -> None:
    outcomes = iter(
        [
            docker_ops.RungRefused("host mi350x-01: GPU busy (pid 7)"),
            {"rung_id": "r", "status": "failed", "error": "boom"},
        ]
    )

    def fake_run(*_a: Any, **_k: Any) -> Any:
        out = next(outcomes)
        if isinstance(out, Exception):
            raise out
        return out

    monkeypatch.setattr(docker_ops, "run_rung_container", fake_run)
    monkeypatch.setattr(docker_ops, "rung_hook", lambda host: _Hook())
    block = _docker_run_block(loaded, "w5", _context())
    # a refusal is the preflight's status (the confirm retries it), with the host's one line
    assert block(spec, "A", 0) == {"status": "preflight", "error": "host mi350x-01: GPU busy (pid 7)"}
    failed = block(spec, "B", 0)
    assert failed["status"] == "failed" and failed["error"] == "rung triage-baseline.s0-A.b0 failed: boom"


@pytest.fixture
def plain(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """`run_rung_container` without S3 or a daemon: the storage settings and the refused record
    stubbed, the dead-task sweep recorded."""
    swept: list[tuple[Any, ...]] = []
    monkeypatch.setattr(docker_ops, "storage_environment", lambda storage: ({"TRACELADDER_S3_BUCKET": "b"}, {"K": "s"}))
    monkeypatch.setattr(hygiene, "stop_dead_tasks", lambda client, host, alive, log=None: swept.append((host, alive)))
    monkeypatch.setattr("traceladder.airflow.ladders.ladder_store", lambda ladder: (None, None))
    monkeypatch.setattr("traceladder.runner.rung.record_refused", lambda *a: swept.append(("refused", *a[3:])))
    monkeypatch.delenv("TRACELADDER_SPOOL_DIR", raising=False)
    return swept


def test_the_plain_call_labels_runs_and_returns_the_runners_result(plain: Any, spec: dict[str, Any]) -> None:
    from traceladder.plan.build import RungSpec

    hook = _Hook()
    options = docker_ops.ContainerOptions(host_name="mi350x-01", docker_url="tcp://h:2376")
    rung = RungSpec.model_validate(spec)
    log = SimpleNamespace(info=lambda *a: None, warning=lambda *a: None)
    result = docker_ops.run_rung_container(hook, rung, "w5-triage", OWNER, lambda *a: True, options, log=log)
    assert result["status"] == "ok" and result["step_ms_values"] == [10.0, 11.0]
    kinds = [k for k, _ in hook.calls]
    assert kinds == ["orphans", "remove", "preflight", "run", "orphans"]
    run = dict(hook.calls)["run"]
    labels = run["labels"]
    assert labels[hygiene.MANAGED_LABEL] == "true" and labels[hygiene.HOST_LABEL] == "mi350x-01"
    assert labels[hygiene.RUNG_LABEL] == rung.rung_id and labels[hygiene.LADDER_LABEL] == LADDER
    assert {k: labels[k] for k in hygiene.TI_LABELS} == hygiene.ti_labels(*OWNER)
    assert run["name"] == docker_ops.container_name(OWNER[0], "w5-triage", rung.rung_id)
    assert run["command"][:3] == ["traceladder", "run-rung", "--spec-json"] and run["command"][-1] == "w5-triage"
    assert run["environment"]["TRACELADDER_IMAGE_DIGEST"] == "r/x@sha256:2" and run["environment"]["K"] == "s"
    config = run["host_config"]
    assert (config["ipc_mode"], config["network_mode"]) == ("host", "host") and "SYS_PTRACE" in config["cap_add"]
    assert config["mounts"][-1]["Target"] == docker_ops.SPOOL_IN_VOLUME
    assert plain[0][0] == "mi350x-01"


def test_the_plain_call_refuses_and_records_a_busy_host(plain: Any, spec: dict[str, Any]) -> None:
    from traceladder.plan.build import RungSpec

    hook = _Hook(refuse="GPU busy")
    options = docker_ops.ContainerOptions(host_name="mi350x-01", docker_url="tcp://h:2376")
    log = SimpleNamespace(info=lambda *a: None, warning=lambda *a: None)
    with pytest.raises(docker_ops.RungRefused, match=r"^host mi350x-01: GPU busy$"):
        docker_ops.run_rung_container(
            hook, RungSpec.model_validate(spec), "w5-triage", OWNER, lambda *a: True, options, log=log
        )
    assert "run" not in [k for k, _ in hook.calls]
    assert ("refused", "preflight", "host mi350x-01: GPU busy") in plain


def test_a_container_without_the_runners_line_is_one_line_naming_rung_and_host(
    plain: Any, spec: dict[str, Any]
) -> None:
    from traceladder.plan.build import RungSpec

    hook = _Hook(lines=["Traceback ...", "OSError: spool full"])
    options = docker_ops.ContainerOptions(host_name="mi350x-01", docker_url="tcp://h:2376")
    log = SimpleNamespace(info=lambda *a: None, warning=lambda *a: None)
    with pytest.raises(docker_ops.RungNoResult) as info:
        docker_ops.run_rung_container(
            hook, RungSpec.model_validate(spec), "w5-triage", OWNER, lambda *a: True, options, log=log
        )
    assert str(info.value) == (
        "rung triage-baseline.s0-A.b0 on host mi350x-01: the runner printed no result (OSError: spool full)"
    )
    assert [k for k, _ in hook.calls][-1] == "orphans"  # cleaned up after it all the same


def test_the_triages_client_is_the_rung_slots(loaded: Any, spec: dict[str, Any]) -> None:
    """The triage's hook for the host is the one the ladder's RungDockerOperator makes: no registry
    login connection, the host's devices, ROCm's group and seccomp."""
    from traceladder.workflows.triage_backends import docker_host

    host = docker_host(loaded)
    assert host is not None
    host = host.model_copy(update={"tls_conn_id": None})  # the example's TLS connection is not defined here
    op = docker_ops.RungDockerOperator(
        spec=spec,
        task_id="slot",
        docker_url=host.docker_url,
        tls_conn_id=None,
        devices=list(host.devices),
        host_name=host.name,
    )
    ours = docker_ops.rung_hook(host)
    assert ours.docker_conn_id is None and op.hook.docker_conn_id is None
    assert (ours.host_name, ours._rocm) == (op.hook.host_name, op.hook._rocm)
    assert ours._rocm["devices"] == list(host.devices) and ours._rocm["group_add"] == ["video"]


def test_a_docker_repro_without_the_workers_connections_says_which_in_one_line(
    monkeypatch: pytest.MonkeyPatch, loaded: Any
) -> None:
    """`traceladder triage repro` on a docker ladder reads S3 and the daemon's TLS connection as
    the workers do (AIRFLOW_CONN_*); outside a worker without them it names the missing ones."""
    from traceladder.cli.triage import ReproInputError, _run_block

    for name in ("AIRFLOW_CONN_TRACELADDER_S3", "AIRFLOW_CONN_DOCKER_TLS_MI350X_01", "AIRFLOW__SECRETS__BACKEND"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ReproInputError) as info:
        _run_block(loaded, None, "w5-repro")  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"ladder {LADDER} (docker): ")
    assert "set AIRFLOW_CONN_TRACELADDER_S3, AIRFLOW_CONN_DOCKER_TLS_MI350X_01" in message
