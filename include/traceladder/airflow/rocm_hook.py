"""``RocmDockerHook``: the Docker daemon of one ROCm worker host, as the docker path needs it.

It is ``DockerHook`` (providers-docker) plus:

* the client keeps the daemon's CA under TLS: requests lets ``REQUESTS_CA_BUNDLE`` /
  ``CURL_CA_BUNDLE`` replace a session's ``verify`` (the CA path docker-py sets), so with those set
  (common on CI images) every TLS call to the daemon fails with "unable to get local issuer
  certificate"; the client is created without them and then ignores the environment;
* ``preflight``: the host check that runs first thing in a rung's slot, before the container
  starts Primus: the daemon answers, the image is there (pulled if not), the devices exist, the
  data root has room, and the GPUs are visible (amd-smi or rocm-smi in a throw-away container of
  the rung's image with the rung's devices), as many as ``GPUS_PER_NODE``, and idle;
* ``image_provenance``: the image as the daemon knows it (``Id``, ``RepoDigests[0]``);
* ``remove_orphans``: traceladder's leftover containers on the host (labels, docker_hygiene).

Failures are ``HostCheckError``: one line that names the host. The operator (airflow/operators.py)
holds only the task's parameters and asks this hook for the client and the checks.
"""

from __future__ import annotations

import os
from functools import cached_property
from typing import Any

from airflow.providers.docker.hooks.docker import DockerHook

from traceladder.airflow import docker_hygiene as hygiene

_CA_ENV = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


class RocmDockerHook(DockerHook):
    """DockerHook for a ROCm worker host (see the module docstring). Same arguments as DockerHook,
    plus ``host_name`` (clusters.yaml), which names the host in every error."""

    def __init__(self, *args: Any, host_name: str = "docker-host", **kwargs: Any) -> None:
        self._uses_tls = bool(kwargs.get("tls"))
        super().__init__(*args, **kwargs)
        self.host_name = host_name

    @cached_property
    def api_client(self):  # type: ignore[override]
        if not self._uses_tls:
            return DockerHook.api_client.func(self)  # type: ignore[attr-defined]
        saved = {k: os.environ.pop(k) for k in _CA_ENV if k in os.environ}
        try:
            client = DockerHook.api_client.func(self)  # type: ignore[attr-defined]
        finally:
            os.environ.update(saved)
        client.trust_env = False
        return client

    def image_provenance(self, image: str) -> dict[str, Any]:
        """``{"image_id": Id, "image_digest": RepoDigests[0] or None}`` from the daemon."""
        return hygiene.image_provenance(self.api_client.inspect_image(image))

    def preflight(self, *, url: str, image: str, devices: list[str], min_free_gb: float, labels: dict[str, str],
                  gpus_per_node: int | None, environment: dict[str, str] | None = None,
                  group_add: list[str] | None = None) -> dict[str, Any]:
        """The host and GPU check; raises ``HostCheckError`` (one line naming the host)."""
        return hygiene.preflight(self.api_client, host=self.host_name, url=url, image=image, devices=devices,
                                 min_free_gb=min_free_gb, labels=labels, gpus_per_node=gpus_per_node,
                                 environment=environment, group_add=group_add)

    def remove_orphans(self, *, running_too: dict[str, str] | None = None, log: Any = None) -> list[str]:
        return hygiene.remove_orphans(self.api_client, self.host_name, running_too=running_too, log=log)
