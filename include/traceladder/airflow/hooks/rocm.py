"""``RocmDockerHook``: the Docker daemon of one ROCm worker host, as the docker path needs it.

It is ``DockerHook`` (providers-docker) plus:

* **TLS from a connection** (``tls_conn_id``): any connection type (``generic`` is fine) whose extra
  holds the PEM text of the client material::

      {"ca_cert": "-----BEGIN CERTIFICATE-----...", "client_cert": "-----BEGIN CERTIFICATE-----...",
       "client_key": "-----BEGIN PRIVATE KEY-----...", "verify": true}

  The three PEMs are written to a fresh private folder (0700, files 0600) when the hook is made and
  removed by ``close()``; the key is registered with Airflow's secrets masker first;
* **the CA fix**: requests lets ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` replace a session's
  ``verify`` (the CA path docker-py sets), so with those set (common on CI images) every TLS call to
  the daemon fails with "unable to get local issuer certificate"; the client is created without
  them and then ignores the environment;
* **a client whose host configs add ROCm's needs**: ``devices``, ``group_add`` and
  ``security_opt`` go into every ``create_host_config`` (DockerOperator has no parameters for
  them), and what the daemon applied to a started container (``docker inspect``'s HostConfig) is
  kept as ``container_evidence``;
* ``preflight``: the host check that runs first thing in a rung's slot, before the container
  starts Primus: the daemon answers, the image is there (pulled if not), the devices exist, the
  data root has room, and the GPUs are visible (amd-smi or rocm-smi in a throw-away container of
  the rung's image with the rung's devices), as many as ``GPUS_PER_NODE``, and idle;
* ``image_provenance``: the image as the daemon knows it (``Id``, ``RepoDigests[0]``);
* ``remove_orphans``: traceladder's leftover containers on the host (labels, docker_hygiene);
* ``run_streamed``: one container run to its end as a plain call (a rung's: its output logged as
  it comes, the container removed whatever happens), for the rung operator and the triage alike.

Failures of the checks are ``HostCheckError``: one line that names the host. The operators
(airflow/operators/docker.py) hold only the task's parameters.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from functools import cached_property
from typing import Any

from airflow.providers.docker.hooks.docker import DockerHook

from traceladder.core.documents import JSONObject
from traceladder.airflow.hooks import docker_hygiene as hygiene

_CA_ENV = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
_EVIDENCE_KEYS = (
    "Devices",
    "GroupAdd",
    "SecurityOpt",
    "IpcMode",
    "ShmSize",
    "NetworkMode",
    "CapAdd",
    "Ulimits",
    "AutoRemove",
)


class RocmClient:
    """The docker-py ``APIClient`` of a ROCm host: every host config gets the host's devices,
    ``group_add`` and ``security_opt`` (unless the caller gives its own), and each container it
    starts is inspected once, so the daemon's word on what it applied is kept."""

    def __init__(
        self, client: Any, *, devices: list[str], group_add: list[str], security_opt: list[str], log: Any
    ) -> None:
        self._client = client
        self._extra = {"devices": devices or None, "group_add": group_add or None, "security_opt": security_opt or None}
        self._log = log
        self.container_evidence: JSONObject | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def create_host_config(self, *args: Any, **kwargs: Any) -> Any:
        for key, value in self._extra.items():
            if kwargs.get(key) is None and value is not None:
                kwargs[key] = list(value)
        return self._client.create_host_config(*args, **kwargs)

    def start(self, container: Any, *args: Any, **kwargs: Any) -> Any:
        out = self._client.start(container, *args, **kwargs)
        self.container_evidence = self._evidence(container)
        return out

    def _evidence(self, container: Any) -> JSONObject:
        try:
            info = self._client.inspect_container(container)
        except Exception as exc:  # noqa: BLE001 - evidence is best effort
            return {"error": str(exc)}
        hc = info.get("HostConfig") or {}
        config = info.get("Config") or {}
        evidence = {k: hc.get(k) for k in _EVIDENCE_KEYS}
        evidence.update(Name=info.get("Name", "").lstrip("/"), Image=config.get("Image"), Labels=config.get("Labels"))
        self._log.info("container %s host config: %s", evidence["Name"], json.dumps(evidence, sort_keys=True))
        return evidence


class RocmDockerHook(DockerHook):
    """DockerHook for a ROCm worker host (see the module docstring). DockerHook's arguments, plus
    ``tls_conn_id`` (replaces ``tls``), ``devices``, ``group_add``, ``security_opt`` and
    ``host_name`` (clusters.yaml; names the host in every error). Call ``close()`` when done."""

    def __init__(
        self,
        *args: Any,
        host_name: str = "docker-host",
        tls_conn_id: str | None = None,
        devices: list[str] | None = None,
        group_add: list[str] | None = None,
        security_opt: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self._tls_dir: str | None = None
        if tls_conn_id:
            kwargs["tls"] = self._tls_from_connection(tls_conn_id)
        self._uses_tls = bool(kwargs.get("tls"))
        super().__init__(*args, **kwargs)
        self.host_name = host_name
        self._rocm = {
            "devices": list(devices or []),
            "group_add": list(group_add or []),
            "security_opt": list(security_opt or []),
        }

    def _tls_from_connection(self, conn_id: str) -> Any:
        from airflow.sdk import BaseHook
        from airflow.sdk.log import mask_secret

        extra = BaseHook.get_connection(conn_id).extra_dejson
        missing = [k for k in ("ca_cert", "client_cert", "client_key") if not extra.get(k)]
        if missing:
            raise ValueError(f"connection {conn_id!r}: extra lacks {missing} (PEM text of the CA, client cert and key)")
        mask_secret(extra["client_key"])
        folder = tempfile.mkdtemp(prefix="traceladder-docker-tls-")
        os.chmod(folder, stat.S_IRWXU)
        self._tls_dir = folder
        paths = {}
        for name in ("ca_cert", "client_cert", "client_key"):
            path = os.path.join(folder, f"{name}.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(str(extra[name]).strip() + "\n")
            paths[name] = path
        return DockerHook.construct_tls_config(
            ca_cert=paths["ca_cert"],
            client_cert=paths["client_cert"],
            client_key=paths["client_key"],
            verify=bool(extra.get("verify", True)),
        )

    def close(self) -> None:
        """Remove the TLS material written for this hook (the client cannot reconnect after)."""
        if self._tls_dir:
            shutil.rmtree(self._tls_dir, ignore_errors=True)
            self._tls_dir = None

    @cached_property
    def api_client(self):
        saved = {k: os.environ.pop(k) for k in _CA_ENV if k in os.environ} if self._uses_tls else {}
        try:
            client = DockerHook.api_client.func(self)  # type: ignore[attr-defined]  # the provider's cached_property, called unwrapped
        finally:
            os.environ.update(saved)
        if self._uses_tls:
            client.trust_env = False
        return RocmClient(client, log=self.log, **self._rocm)

    @property
    def container_evidence(self) -> JSONObject | None:
        return self.api_client.container_evidence if "api_client" in self.__dict__ else None

    def image_provenance(self, image: str) -> hygiene.ImageProvenance:
        """The image's ``Id`` and ``RepoDigests[0]`` (or None), from the daemon."""
        return hygiene.image_provenance(self.api_client.inspect_image(image))

    def preflight(
        self,
        *,
        url: str,
        image: str,
        min_free_gb: float,
        labels: dict[str, str],
        gpus_per_node: int | None,
        environment: dict[str, str] | None = None,
    ) -> hygiene.HostCheck:
        """The host and GPU check with this host's devices; raises ``HostCheckError``."""
        return hygiene.preflight(
            self.api_client,
            host=self.host_name,
            url=url,
            image=image,
            devices=self._rocm["devices"],
            min_free_gb=min_free_gb,
            labels=labels,
            gpus_per_node=gpus_per_node,
            environment=environment,
            group_add=self._rocm["group_add"],
        )

    def remove_orphans(self, *, running_too: dict[str, str] | None = None, log: Any = None) -> list[str]:
        return hygiene.remove_orphans(self.api_client, self.host_name, running_too=running_too, log=log)

    def run_streamed(
        self,
        image: str,
        *,
        name: str,
        command: list[str],
        environment: dict[str, str],
        labels: dict[str, str],
        host_config: dict[str, Any],
        log: Any = None,
    ) -> tuple[int, list[str]]:
        """Run a named container to its end: pulled if missing, ``host_config`` (plus the host's
        devices, group_add and security_opt), its output logged line by line as it comes. Returns
        the exit code and the output lines; the container is removed whatever happens (also when
        the task is killed mid-run). What the daemon applied is kept as ``container_evidence``."""
        client = self.api_client
        if not client.images(name=image):
            client.pull(image)
        container = client.create_container(
            image=image,
            name=name,
            command=command,
            environment=environment,
            labels=labels,
            host_config=client.create_host_config(auto_remove=False, **host_config),
        )
        lines: list[str] = []
        try:
            stream = client.attach(container=container["Id"], stdout=True, stderr=True, stream=True)
            client.start(container["Id"])
            pending = ""
            for chunk in stream:
                pending += chunk.decode(errors="replace") if isinstance(chunk, bytes) else str(chunk)
                *done, pending = pending.split("\n")
                for line in done:
                    (log or self.log).info("%s", line.rstrip())
                    lines.append(line.rstrip())
            if pending.strip():
                lines.append(pending.rstrip())
            status = client.wait(container["Id"])
            return int(status["StatusCode"]), lines
        finally:
            client.remove_container(container["Id"], force=True)

    def run_container(
        self,
        image: str,
        *,
        entrypoint: list[str],
        command: list[str],
        environment: dict[str, str],
        labels: dict[str, str],
        nofile: int,
        log: Any = None,
    ) -> tuple[int, list[str]]:
        """Run one short container to its end as a plain call: pulled if missing, host network
        (as the rungs reach S3), the containers' ``nofile`` limit, traceladder's labels (so that a
        container left by a killed task is an orphan ``remove_orphans`` finds). Returns the exit
        code and the output lines (stdout and stderr, in order); the container is removed
        whatever happens."""
        client = self.api_client
        if not client.images(name=image):
            client.pull(image)
        host_config = client.create_host_config(
            network_mode="host", ulimits=[{"Name": "nofile", "Soft": nofile, "Hard": nofile}]
        )
        container = client.create_container(
            image=image,
            entrypoint=entrypoint,
            command=command,
            environment=environment,
            labels=labels,
            host_config=host_config,
        )
        try:
            client.start(container["Id"])
            status = client.wait(container["Id"])
            raw = client.logs(container["Id"], stdout=True, stderr=True)
            lines = raw.decode(errors="replace").splitlines()
            for line in lines:
                (log or self.log).info("%s", line)
            return int(status["StatusCode"]), lines
        finally:
            client.remove_container(container["Id"], force=True)
