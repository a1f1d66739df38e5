"""Operators of the docker backend: a rung is a container of the runner image on a ROCm host.

* ``RocmDockerOperator``: ``DockerOperator`` plus what a ROCm container needs and DockerOperator
  has no parameters for (devices, ``group_add``, ``security_opt``; madengine's ROCm docker options,
  FACTS.md), TLS material from an Airflow connection, and traceladder's container labels.
* ``RungDockerOperator``: one rung spec → ``traceladder run-rung --spec-json <json> --run-id <id>``
  in the runner image, S3 credentials through ``private_environment``, a pre-flight check of the
  host, orphan cleanup, and the task fails unless the runner's result says ``ok``.

The host config is built inside ``DockerOperator._run_image_with_mounts`` with no hook to extend it,
so ``RocmDockerOperator`` overrides that private method; it is written against
apache-airflow-providers-docker 4.6.1 (pinned in pyproject.toml; ``PROVIDER_VERSION`` is checked by
the tests).

TLS connection (``tls_conn_id``): any connection type (``generic`` is fine) whose extra holds the PEM
text of the client material::

    {"ca_cert": "-----BEGIN CERTIFICATE-----...", "client_cert": "-----BEGIN CERTIFICATE-----...",
     "client_key": "-----BEGIN PRIVATE KEY-----...", "verify": true}

At run time the three PEMs are written to a fresh temporary folder (mode 0700, files 0600), handed
to DockerOperator's ``tls_ca_cert``/``tls_client_cert``/``tls_client_key`` and removed when the
task ends, whatever happened. The key is registered with Airflow's secrets masker first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.docker.exceptions import DockerContainerFailedException
from airflow.providers.docker.hooks.docker import DockerHook
from airflow.providers.docker.operators.docker import DockerOperator, fetch_logs
from docker.types import LogConfig, Ulimit

from traceladder.airflow import docker_hygiene as hygiene
from traceladder.runner.rung import RESULT_KEYS

if TYPE_CHECKING:
    from airflow.sdk import Context

PROVIDER_VERSION = "4.6.1"  # the provider whose private _run_image_with_mounts is overridden
ROCM_DEVICES = ("/dev/kfd", "/dev/dri")
DEFAULT_SHM_SIZE = 128 * 2**30  # Primus's docs: --shm-size 128G
DEFAULT_NOFILE = 1048576
# Lenses whose collector needs SYS_ADMIN (HSA tool libraries, perf counters); madengine adds it for all.
SYS_ADMIN_LENSES = frozenset({"rocprofv3", "rocm_trace_lite"})


_CA_ENV = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


class _TlsDockerHook(DockerHook):
    """DockerHook whose client keeps the daemon's CA: requests lets REQUESTS_CA_BUNDLE /
    CURL_CA_BUNDLE replace a session's ``verify`` (the CA path docker-py sets), so with those set
    (common on CI images) every TLS call to the daemon fails with "unable to get local issuer
    certificate". The client is created without them and then ignores the environment."""

    @cached_property
    def api_client(self):  # type: ignore[override]
        saved = {k: os.environ.pop(k) for k in _CA_ENV if k in os.environ}
        try:
            client = DockerHook.api_client.func(self)  # type: ignore[attr-defined]
        finally:
            os.environ.update(saved)
        client.trust_env = False
        return client


def default_nofile() -> int:
    """The containers' nofile limit: 1048576 (Primus's docs), or TRACELADDER_CONTAINER_NOFILE where
    the daemon's own hard limit is lower (a sandboxed CI runner)."""
    return int(os.environ.get("TRACELADDER_CONTAINER_NOFILE", DEFAULT_NOFILE))


class RocmDockerOperator(DockerOperator):
    """Run a command in a container on a ROCm host (AMD Instinct), as madengine's ROCm runs do.

    On top of every :class:`~airflow.providers.docker.operators.docker.DockerOperator` parameter
    (passed through unchanged), it adds:

    :param devices: Host devices to map, ``HOST[:CONTAINER[:PERMS]]``; typically ``/dev/kfd`` and
        the host's ``/dev/dri/renderD<N>`` nodes (a directory such as ``/dev/dri`` maps every node
        in it). ``/dev/null:/dev/kfd`` lets a machine without a GPU prove the mapping. (templated)
    :param group_add: Extra groups for the container's user; ``video`` grants the GPU nodes.
    :param security_opt: Docker security options; ``seccomp=unconfined`` as madengine and ROCm's
        docs run training containers.
    :param tls_conn_id: Airflow connection holding the daemon's TLS material as PEM text in its
        extra (``ca_cert``, ``client_cert``, ``client_key``; optional ``verify``); the files are
        written to a private temporary folder for the run and removed afterwards. When given, it
        replaces ``tls_ca_cert``/``tls_client_cert``/``tls_client_key``. (templated)
    :param host_name: The worker host's name (clusters.yaml); it names the host in errors and in
        the ``traceladder.host`` label used by the orphan cleanup.
    :param extra_labels: Labels added to ``traceladder.managed=true`` and ``traceladder.host``.

    Defaults that differ from DockerOperator's, all overridable through its own parameters:
    ``cap_add=["SYS_PTRACE"]``, ``ipc_mode="host"``, ``network_mode="host"`` (madengine's
    ``--network host``; also how containers reach S3 with ``--bridge=none``),
    ``shm_size=128 GiB``, ``ulimits=[nofile 1048576]`` (``TRACELADDER_CONTAINER_NOFILE``), ``mount_tmp_dir=False`` (the daemon is
    remote), ``auto_remove="force"`` (the container is removed whatever happened, also on
    ``execution_timeout``).

    Secrets go through ``private_environment`` only: ``environment`` is a template field and is
    rendered into the UI.
    """

    template_fields: Sequence[str] = (*DockerOperator.template_fields, "devices", "tls_conn_id", "docker_url")

    def __init__(
        self,
        *,
        devices: Sequence[str] | None = None,
        group_add: Sequence[str] | None = ("video",),
        security_opt: Sequence[str] | None = ("seccomp=unconfined",),
        tls_conn_id: str | None = None,
        host_name: str | None = None,
        extra_labels: dict[str, str] | None = None,
        cap_add: Sequence[str] | None = ("SYS_PTRACE",),
        ipc_mode: str | None = "host",
        network_mode: str | None = "host",
        shm_size: int | None = DEFAULT_SHM_SIZE,
        ulimits: list[Ulimit] | None = None,
        mount_tmp_dir: bool = False,
        auto_remove: str = "force",
        **kwargs: Any,
    ) -> None:
        self.host_name = host_name or "docker-host"
        labels = {hygiene.MANAGED_LABEL: "true", hygiene.HOST_LABEL: self.host_name, **(extra_labels or {})}
        super().__init__(
            cap_add=list(cap_add) if cap_add else None,
            ipc_mode=ipc_mode,
            network_mode=network_mode,
            shm_size=shm_size,
            ulimits=ulimits if ulimits is not None else [Ulimit(name="nofile", soft=default_nofile(), hard=default_nofile())],
            mount_tmp_dir=mount_tmp_dir,
            auto_remove=auto_remove,  # type: ignore[arg-type]
            labels={**labels, **(kwargs.pop("labels", None) or {})},
            **kwargs,
        )
        self.devices = list(devices or [])
        self.group_add = list(group_add or [])
        self.security_opt = list(security_opt or [])
        self.tls_conn_id = tls_conn_id
        self.container_evidence: dict[str, Any] | None = None

    # ---- TLS from a connection -------------------------------------------------------------
    @contextlib.contextmanager
    def _tls_material(self) -> Iterator[None]:
        if not self.tls_conn_id:
            yield
            return
        from airflow.sdk import BaseHook
        from airflow.sdk.log import mask_secret

        conn = BaseHook.get_connection(self.tls_conn_id)
        extra = conn.extra_dejson
        missing = [k for k in ("ca_cert", "client_cert", "client_key") if not extra.get(k)]
        if missing:
            raise ValueError(f"connection {self.tls_conn_id!r}: extra lacks {missing} (PEM text of the CA, client cert and key)")
        mask_secret(extra["client_key"])
        folder = tempfile.mkdtemp(prefix="traceladder-docker-tls-")
        os.chmod(folder, stat.S_IRWXU)
        try:
            paths = {}
            for name in ("ca_cert", "client_cert", "client_key"):
                path = os.path.join(folder, f"{name}.pem")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(str(extra[name]).strip() + "\n")
                paths[name] = path
            self.tls_ca_cert, self.tls_client_cert, self.tls_client_key = paths["ca_cert"], paths["client_cert"], paths["client_key"]
            self.tls_verify = bool(extra.get("verify", True))
            self.__dict__.pop("hook", None)  # the cached hook (if any) was made without TLS
            yield
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            self.tls_ca_cert = self.tls_client_cert = self.tls_client_key = None

    @cached_property
    def hook(self) -> DockerHook:
        """DockerOperator's hook; with TLS material, one that keeps the daemon's CA (_TlsDockerHook)."""
        tls_config = DockerHook.construct_tls_config(
            ca_cert=self.tls_ca_cert, client_cert=self.tls_client_cert, client_key=self.tls_client_key, verify=self.tls_verify,
        )
        hook_class = _TlsDockerHook if tls_config else DockerHook
        return hook_class(docker_conn_id=self.docker_conn_id, base_url=self.docker_url, version=self.api_version, tls=tls_config, timeout=self.timeout)

    def execute(self, context: Context) -> Any:
        with self._tls_material():
            return self._execute_with_daemon(context)

    def _execute_with_daemon(self, context: Context) -> Any:
        return super().execute(context)

    # ---- the host config (provider 4.6.1's method, plus devices, group_add, security_opt) ----
    def _host_config(self, target_mounts: list) -> dict[str, Any]:
        docker_log_config = {}
        if self.log_opts_max_size is not None:
            docker_log_config["max-size"] = self.log_opts_max_size
        if self.log_opts_max_file is not None:
            docker_log_config["max-file"] = self.log_opts_max_file
        return self.cli.create_host_config(
            auto_remove=False,
            mounts=target_mounts,
            network_mode=self.network_mode,
            shm_size=self.shm_size,
            dns=self.dns,
            dns_search=self.dns_search,
            cpu_shares=round(self.cpus * 1024),
            port_bindings=self.port_bindings,
            mem_limit=self.mem_limit,
            cap_add=self.cap_add,
            extra_hosts=self.extra_hosts,
            privileged=self.privileged,
            device_requests=self.device_requests,
            log_config=LogConfig(config=docker_log_config),
            ipc_mode=self.ipc_mode,
            ulimits=self.ulimits,
            devices=self.devices or None,
            group_add=self.group_add or None,
            security_opt=self.security_opt or None,
        )

    def _run_image_with_mounts(self, target_mounts, add_tmp_variable: bool) -> list[str] | str | None:
        if add_tmp_variable:
            self.environment["AIRFLOW_TMP_DIR"] = self.tmp_dir
        else:
            self.environment.pop("AIRFLOW_TMP_DIR", None)
        env_file_vars = self.unpack_environment_variables(self.env_file) if self.env_file is not None else {}
        self.container = self.cli.create_container(
            command=self.format_command(self.command),
            name=self.container_name,
            environment={**env_file_vars, **self.environment, **self._private_environment},
            ports=list(self.port_bindings),
            host_config=self._host_config(target_mounts),
            image=self.image,
            user=self.user,
            entrypoint=self.format_command(self.entrypoint),
            working_dir=self.working_dir,
            tty=self.tty,
            hostname=self.hostname,
            labels=self.labels,
        )
        log_stream = self.cli.attach(container=self.container["Id"], stdout=True, stderr=True, stream=True)
        try:
            self.cli.start(self.container["Id"])
            self.container_evidence = self._evidence()
            log_lines = fetch_logs(log_stream, self.log)
            result = self.cli.wait(self.container["Id"])
            self.log_lines = log_lines
            if result["StatusCode"] in self.skip_on_exit_code:
                from airflow.providers.docker.exceptions import DockerContainerFailedSkipException

                raise DockerContainerFailedSkipException(f"Docker container returned exit code {self.skip_on_exit_code}. Skipping.", logs=log_lines)
            if result["StatusCode"] != 0:
                raise DockerContainerFailedException(f"Docker container failed: {result!r}", logs=log_lines)
            if self.retrieve_output:
                return self._attempt_to_retrieve_result()
            if self.do_xcom_push:
                if not log_lines:
                    return None
                return log_lines if self.xcom_all else log_lines[-1]
            return None
        finally:
            if self.auto_remove == "success":
                self.cli.remove_container(self.container["Id"])
            elif self.auto_remove == "force":
                self.cli.remove_container(self.container["Id"], force=True)

    def _evidence(self) -> dict[str, Any]:
        """What the daemon says it applied (``docker inspect``'s HostConfig; never the env)."""
        try:
            info = self.cli.inspect_container(self.container["Id"])
        except Exception as exc:  # noqa: BLE001 - evidence is best effort
            return {"error": str(exc)}
        hc = info.get("HostConfig") or {}
        keep = ("Devices", "GroupAdd", "SecurityOpt", "IpcMode", "ShmSize", "NetworkMode", "CapAdd", "Ulimits", "AutoRemove")
        evidence = {k: hc.get(k) for k in keep}
        evidence["Name"] = info.get("Name", "").lstrip("/")
        evidence["Image"] = (info.get("Config") or {}).get("Image")
        evidence["Labels"] = (info.get("Config") or {}).get("Labels")
        self.log.info("container %s host config: %s", evidence["Name"], json.dumps(evidence, sort_keys=True))
        return evidence


def result_from_lines(lines: list[str]) -> dict[str, Any] | None:
    """The runner's result: the last stdout line that is a JSON object with a rung_id."""
    for line in reversed(lines or []):
        text = line.strip()
        if text.startswith("{") and text.endswith("}"):
            try:
                doc = json.loads(text)
            except ValueError:
                continue
            if isinstance(doc, dict) and "rung_id" in doc and "status" in doc:
                return doc
    return None


class RungDockerOperator(RocmDockerOperator):
    """One rung of a docker-backend ladder: the runner image runs
    ``traceladder run-rung --spec-json '<spec>' --run-id <run_id>`` on the rung's worker host.

    :param spec: The rung spec (``RungSpec`` as a dict; what ``plan`` hands each host's mapped
        group). Its ``image`` is the runner image (the cluster's ``runner_image``), its ``ladder``
        finds the cluster's storage settings, and its ``timeout_s`` is the runner's own deadline.
    :param run_id: The ladder run's id (the artifact key part; default: Airflow's run id). (templated)
    :param min_free_gb: Free space the host's Docker data root needs before a rung starts
        (default 20 GiB, or ``TRACELADDER_MIN_FREE_GB``).
    :param preflight: Check the host before the rung (daemon, image, devices, disk). Default on.

    Everything else is a :class:`RocmDockerOperator` parameter (``docker_url``, ``tls_conn_id``,
    ``devices``, ``host_name``, ``pool``, ...). ``command``, ``image``, ``environment`` and
    ``private_environment`` are set from the spec at run time:

    * ``environment``: ``TRACELADDER_S3_ENDPOINT`` (the cluster's ``storage.worker_endpoint_url``,
      or the S3 connection's ``endpoint_url``), ``TRACELADDER_S3_BUCKET``, ``AWS_DEFAULT_REGION``;
    * ``private_environment``: ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` from the
      cluster's S3 connection (``storage.conn_id``), masked in logs;
    * ``cap_add``: ``SYS_PTRACE``, plus ``SYS_ADMIN`` for the rocprofv3 and rocm_trace_lite lenses.

    The task fails unless the runner's result (the last stdout line, a JSON object) has status
    ``ok``; its XCom is the result's ``rung_id, status, step_ms, tokens_per_sec_per_gpu,
    peak_mem_gb, traces, error``. The container's applied host config is pushed as XCom
    ``container``. Before the rung, leftover traceladder containers on the host (exited ones, and
    a previous try of this rung) are removed; after it, exited ones again. A retry writes the same
    keys and the same manifest layout (keys depend on the run and rung ids only).
    """

    template_fields: Sequence[str] = (*RocmDockerOperator.template_fields, "run_id")

    def __init__(
        self,
        *,
        spec: dict[str, Any],
        run_id: str = "{{ run_id }}",
        min_free_gb: float | None = None,
        preflight: bool = True,
        image: str = "traceladder/runner",
        **kwargs: Any,
    ) -> None:
        super().__init__(image=image, **kwargs)
        self.spec = spec
        self.run_id = run_id
        self.min_free_gb = float(min_free_gb if min_free_gb is not None else os.environ.get("TRACELADDER_MIN_FREE_GB", 20))
        self.preflight = preflight

    def _configure(self, context: Context) -> dict[str, Any]:
        from airflow.sdk import BaseHook
        from airflow.sdk.log import mask_secret

        from traceladder.airflow.tasks import open_ladder
        from traceladder.plan import RungSpec
        from traceladder.storage.artifacts import safe_key_part

        spec = RungSpec.model_validate(self.spec)
        context["rung_id"] = spec.rung_id  # type: ignore[typeddict-unknown-key]  # map_index_template
        storage = open_ladder(spec.ladder).cluster.storage
        conn = BaseHook.get_connection(storage.conn_id)
        extra = conn.extra_dejson
        endpoint = storage.worker_endpoint_url or extra.get("endpoint_url")
        if conn.password:
            mask_secret(conn.password)
        self.image = spec.image
        run_key = safe_key_part(self.run_id)
        run_hash = hashlib.sha1(f"{context['dag'].dag_id}/{self.run_id}".encode()).hexdigest()[:10]
        self.container_name = f"traceladder-{safe_key_part(spec.rung_id)}-{run_hash}"
        self.labels = {
            **(self.labels or {}),
            hygiene.LADDER_LABEL: spec.ladder,
            hygiene.RUN_LABEL: run_key,
            hygiene.RUNG_LABEL: spec.rung_id,
        }
        caps = {*(self.cap_add or []), "SYS_PTRACE"}
        if spec.lens in SYS_ADMIN_LENSES:
            caps.add("SYS_ADMIN")
        self.cap_add = sorted(caps)
        self.environment = {
            **(self.environment or {}),
            "TRACELADDER_S3_BUCKET": storage.effective_bucket,
            "AWS_DEFAULT_REGION": str(extra.get("region_name") or "us-east-1"),
            **({"TRACELADDER_S3_ENDPOINT": str(endpoint)} if endpoint else {}),
        }
        self._private_environment = {
            **self._private_environment,
            **({"AWS_ACCESS_KEY_ID": conn.login, "AWS_SECRET_ACCESS_KEY": conn.password} if conn.login and conn.password else {}),
        }
        self.command = ["traceladder", "run-rung", "--spec-json", spec.to_json(), "--run-id", self.run_id]
        return {"spec": spec, "run_key": run_key}

    def _execute_with_daemon(self, context: Context) -> Any:
        from airflow.sdk.exceptions import AirflowException

        conf = self._configure(context)
        spec = conf["spec"]
        rung_labels = {hygiene.RUN_LABEL: conf["run_key"], hygiene.RUNG_LABEL: spec.rung_id}
        try:
            hygiene.remove_orphans(self.cli, self.host_name, running_too=rung_labels, log=self.log)
            try:
                self.cli.remove_container(self.container_name, force=True)  # a previous try's container
            except Exception:  # noqa: BLE001 - usually "no such container"
                pass
            if self.preflight:
                found = hygiene.preflight(
                    self.cli, host=self.host_name, url=str(self.docker_url), image=self.image, devices=self.devices,
                    min_free_gb=self.min_free_gb, labels=dict(self.labels or {}),
                )
                self.log.info("host %s ok: %s", self.host_name, json.dumps(found))
        except hygiene.HostCheckError as exc:
            raise AirflowException(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - the daemon is unreachable before the check ran
            raise AirflowException(str(hygiene.HostCheckError(self.host_name, f"Docker daemon at {self.docker_url} unreachable", str(exc)))) from None
        lines: list[str] = []
        try:
            super()._execute_with_daemon(context)
            lines = getattr(self, "log_lines", [])
        except DockerContainerFailedException as exc:
            lines = list(exc.logs or [])
        finally:
            if self.container_evidence is not None:
                context["ti"].xcom_push(key="container", value=self.container_evidence)
            try:
                hygiene.remove_orphans(self.cli, self.host_name, log=self.log)
            except Exception as exc:  # noqa: BLE001 - cleanup never hides the rung's outcome
                self.log.warning("host %s: orphan cleanup failed: %s", self.host_name, exc)
        result = result_from_lines(lines)
        if result is None:
            tail = lines[-1] if lines else "(no output)"
            raise AirflowException(f"rung {spec.rung_id} on host {self.host_name}: the runner printed no result ({tail[:300]})")
        if result.get("status") != "ok":  # the workload failed: no retry (only infrastructure retries)
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(f"rung {spec.rung_id} {result.get('status')}: {result.get('error')}")
        return {k: result.get(k) for k in RESULT_KEYS}
