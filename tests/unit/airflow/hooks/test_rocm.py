"""RocmDockerHook.run_streamed, the rung's container run (the rung operator's and the triage's),
on a stand-in docker-py client: the output streamed line by line, the host's ROCm settings in its
host config, the container removed whatever happens. The real daemon runs it in
tests/integration/test_triage_docker.py and the docker ladder tests."""

from __future__ import annotations

from typing import Any

import pytest

from traceladder.airflow.hooks.rocm import RocmClient, RocmDockerHook


class _Client:
    def __init__(self, chunks: list[Any], fail_wait: bool = False) -> None:
        self.chunks, self.fail_wait = chunks, fail_wait
        self.calls: list[tuple[str, Any]] = []

    def images(self, name: str) -> list[str]:
        return []  # missing: pulled

    def pull(self, image: str) -> None:
        self.calls.append(("pull", image))

    def create_host_config(self, **kwargs: Any) -> dict[str, Any]:
        return kwargs

    def create_container(self, **kwargs: Any) -> dict[str, str]:
        self.calls.append(("create", kwargs))
        return {"Id": "c1"}

    def attach(self, **kwargs: Any) -> Any:
        return iter(self.chunks)

    def start(self, container: str) -> None:
        self.calls.append(("start", container))

    def inspect_container(self, container: str) -> dict[str, Any]:
        return {"Name": "/n", "HostConfig": {"Devices": [{"PathInContainer": "/dev/kfd"}]}, "Config": {}}

    def wait(self, container: str) -> dict[str, int]:
        if self.fail_wait:
            raise RuntimeError("daemon gone")
        return {"StatusCode": 3}

    def remove_container(self, container: str, force: bool = False) -> None:
        self.calls.append(("remove", (container, force)))


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, fmt: str, *args: Any) -> None:
        self.lines.append(fmt % args)


def _hook(client: _Client) -> RocmDockerHook:
    hook = RocmDockerHook(docker_conn_id=None, base_url="unix:///nowhere", host_name="h", devices=["/dev/kfd"])
    hook.__dict__["api_client"] = RocmClient(
        client, devices=["/dev/kfd"], group_add=["video"], security_opt=["seccomp=unconfined"], log=_Log()
    )
    return hook


def _run(hook: RocmDockerHook, log: _Log) -> tuple[int, list[str]]:
    return hook.run_streamed(
        "img",
        name="n",
        command=["c"],
        environment={"A": "1"},
        labels={"l": "v"},
        host_config={"ipc_mode": "host"},
        log=log,
    )


def test_the_output_is_logged_line_by_line_and_the_container_removed() -> None:
    client = _Client([b"one\ntw", b"o\n", '{"status": "ok"}'])
    hook, log = _hook(client), _Log()
    code, lines = _run(hook, log)
    assert (code, lines) == (3, ["one", "two", '{"status": "ok"}'])
    assert log.lines == ["one", "two"]  # the unterminated last line is kept, not logged twice
    created = dict(client.calls)["create"]
    assert created["name"] == "n" and created["labels"] == {"l": "v"}
    config = created["host_config"]
    assert config["devices"] == ["/dev/kfd"] and config["group_add"] == ["video"] and config["ipc_mode"] == "host"
    assert config["auto_remove"] is False
    assert [k for k, _ in client.calls] == ["pull", "create", "start", "remove"]
    assert dict(client.calls)["remove"] == ("c1", True)
    assert (
        hook.container_evidence is not None and hook.container_evidence["Devices"][0]["PathInContainer"] == "/dev/kfd"
    )


def test_a_run_cut_off_still_removes_its_container() -> None:
    client = _Client([b"x\n"], fail_wait=True)
    with pytest.raises(RuntimeError, match="daemon gone"):
        _run(_hook(client), _Log())
    assert client.calls[-1] == ("remove", ("c1", True))
