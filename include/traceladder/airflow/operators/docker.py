"""Operators of the docker backend: a rung is a container of the runner image on a ROCm host.

* ``RocmDockerOperator``: ``DockerOperator`` plus what a ROCm container needs and DockerOperator
  has no parameters for (devices, ``group_add``, ``security_opt``; madengine's ROCm docker options,
  docs/facts.md, "The real rocm/primus image and madengine's launch"), TLS material from an Airflow
  connection, and traceladder's container labels.
* ``RungDockerOperator``: one rung spec → ``traceladder run-rung --spec-json <json> --run-id <id>``
  in the runner image, S3 credentials through ``private_environment``, a pre-flight check of the
  host, orphan cleanup, and the task fails unless the runner's result says ``ok``.

The daemon side lives in ``RocmDockerHook`` (airflow/hooks/rocm.py): TLS from a connection, the CA
fix, a client whose host configs add devices, ``group_add`` and ``security_opt``, the preflight,
the image lookup and the orphan clean-up. The operators hold only the task's parameters and use
DockerOperator's own container code (no provider method is copied); written against
apache-airflow-providers-docker 4.6.1 (pinned in pyproject.toml; ``PROVIDER_VERSION`` is checked by
the tests).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.docker.exceptions import DockerContainerFailedException
from airflow.providers.docker.hooks.docker import DockerHook
from airflow.providers.docker.operators.docker import DockerOperator
from docker.types import Mount, Ulimit

from traceladder.airflow.hooks import docker_hygiene as hygiene
from traceladder.airflow.hooks.rocm import RocmDockerHook
from traceladder.runner.rung import RESULT_KEYS
from traceladder.core import env_vars
from traceladder.core.codec import JSONObject
from traceladder.storage.spool import ENV_BUDGET, ENV_SPOOL

if TYPE_CHECKING:
    from airflow.sdk import Context

    from traceladder.plan.build import RungSpec

PROVIDER_VERSION = "4.6.1"  # the pinned provider the operators are tested against
DEFAULT_SHM_SIZE = 128 * 2**30  # Primus's docs: --shm-size 128G
DEFAULT_NOFILE = int(str(env_vars.CONTAINER_NOFILE.default))
# Lenses whose collector needs SYS_ADMIN (HSA tool libraries, perf counters); madengine adds it for all.
SYS_ADMIN_LENSES = frozenset({"rocprofv3", "rocm_trace_lite"})


def default_nofile() -> int:
    """The containers' nofile limit: 1048576 (Primus's docs), or TRACELADDER_CONTAINER_NOFILE where
    the daemon's own hard limit is lower (a sandboxed CI runner)."""
    return int(env_vars.CONTAINER_NOFILE.get() or DEFAULT_NOFILE)


# Without TRACELADDER_SPOOL_DIR on the worker, docker rungs spool in this named volume of the daemon
SPOOL_VOLUME, SPOOL_IN_VOLUME = "traceladder-spool", "/var/lib/traceladder/spool"


def spool_mount(env: dict[str, str] | None = None) -> tuple[Mount, str]:
    """The mount that keeps a docker rung's spool on the host, and its path in the container.

    Artifacts that S3 refused past the retry budget must outlive the container (removed when the
    rung ends) so that the task's retry, a new container, uploads them (storage/spool.py). The
    worker's ``TRACELADDER_SPOOL_DIR`` (an absolute path on the Docker host: the worker's own host
    under a per-host queue) is bind-mounted at the same path; without it, the daemon's named
    volume ``traceladder-spool`` is. Either way the runner gets the path as TRACELADDER_SPOOL_DIR."""
    path = env_vars.SPOOL_DIR.get(env) or ""
    if not path:
        return Mount(target=SPOOL_IN_VOLUME, source=SPOOL_VOLUME, type="volume"), SPOOL_IN_VOLUME
    if not os.path.isabs(path):
        raise ValueError(f"{ENV_SPOOL}: {path!r} is not an absolute path (it is bind-mounted into rung containers)")
    return Mount(target=path, source=path, type="bind"), path


def _map_index(context: Context) -> int:
    index = getattr(context["ti"], "map_index", None)
    return -1 if index is None else index  # -1: Airflow's "not mapped"


def _ti_running(context: Context) -> Any:
    """``(dag_id, run_id, task_id, map_index) -> bool``: is that task instance running, per Airflow
    (the Task SDK's execution API; no database access from the worker)."""
    ti = context["ti"]

    def running(dag_id: str, run_id: str, task_id: str, map_index: int) -> bool:
        count = ti.get_ti_count(
            dag_id=dag_id, task_ids=[task_id], run_ids=[run_id], map_index=map_index, states=["running"]
        )
        return bool(count)

    return running


def _text_lines(logs: Sequence[str | bytes] | None) -> list[str]:
    """The provider's log lines (str, or bytes from some docker-py paths) as text."""
    return [x.decode(errors="replace") if isinstance(x, bytes) else x for x in logs or []]


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
    ``shm_size=128 GiB``, ``ulimits=[nofile 1048576]`` (``TRACELADDER_CONTAINER_NOFILE``),
    ``mount_tmp_dir=False`` (the daemon is remote), ``auto_remove="force"`` (the container is
    removed whatever happened, also on ``execution_timeout``).

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
            ulimits=ulimits
            if ulimits is not None
            else [Ulimit(name="nofile", soft=default_nofile(), hard=default_nofile())],
            mount_tmp_dir=mount_tmp_dir,
            auto_remove=auto_remove,  # type: ignore[arg-type]  # the provider types it as a Literal; ours is a checked str
            labels={**labels, **(kwargs.pop("labels", None) or {})},
            **kwargs,
        )
        self.devices = list(devices or [])
        self.group_add = list(group_add or [])
        self.security_opt = list(security_opt or [])
        self.tls_conn_id = tls_conn_id

    @cached_property
    def hook(self) -> RocmDockerHook:
        """The host's RocmDockerHook: the client (devices, group_add, security_opt in its host
        configs), TLS from ``tls_conn_id``, the preflight and the image lookup."""
        tls_config = (
            None
            if self.tls_conn_id
            else DockerHook.construct_tls_config(
                ca_cert=self.tls_ca_cert,
                client_cert=self.tls_client_cert,
                client_key=self.tls_client_key,
                verify=self.tls_verify,
            )
        )
        return RocmDockerHook(
            docker_conn_id=self.docker_conn_id,
            base_url=self.docker_url,
            version=self.api_version,
            tls=tls_config,
            timeout=self.timeout,
            host_name=self.host_name,
            tls_conn_id=self.tls_conn_id,
            devices=self.devices,
            group_add=self.group_add,
            security_opt=self.security_opt,
        )

    @property
    def container_evidence(self) -> JSONObject | None:
        """What the daemon applied to the started container (``docker inspect``'s HostConfig)."""
        return self.hook.container_evidence if "hook" in self.__dict__ else None

    def execute(self, context: Context) -> Any:
        try:
            return self._execute_with_daemon(context)
        finally:
            if "hook" in self.__dict__:  # the TLS material lives as long as the task's client
                self.hook.close()

    def _execute_with_daemon(self, context: Context) -> Any:
        return super().execute(context)


def storage_environment(storage: Any) -> tuple[dict[str, str], dict[str, str]]:
    """The S3 settings a container gets (the runner, the TraceLens image): the endpoint, bucket and
    region in ``environment``; the cluster's S3 connection's keys for ``private_environment``
    (masked in logs)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.log import mask_secret

    conn = BaseHook.get_connection(storage.conn_id)
    extra = conn.extra_dejson
    endpoint = storage.worker_endpoint_url or extra.get("endpoint_url")
    if conn.password:
        mask_secret(conn.password)
    env = {
        env_vars.S3_BUCKET.name: storage.effective_bucket,
        "AWS_DEFAULT_REGION": str(extra.get("region_name") or "us-east-1"),
        **({env_vars.S3_ENDPOINT.name: str(endpoint)} if endpoint else {}),
    }
    private = (
        {"AWS_ACCESS_KEY_ID": conn.login, "AWS_SECRET_ACCESS_KEY": conn.password}
        if conn.login and conn.password
        else {}
    )
    return env, private


def result_from_lines(lines: list[str]) -> JSONObject | None:
    """The runner's result (metrics.json's data, passed on as the task's XCom as it came): the
    last stdout line that is a JSON object with a rung_id and a status."""
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

    :param spec: The rung spec (``RungSpec`` as a dict), or a block-grid slot's list of zero or
        one spec (``plan``'s XCom for the slot; empty = skip). Its ``image`` is the runner image
        (the cluster's ``runner_image``), its ``ladder`` finds the cluster's storage settings, and
        its ``timeout_s`` is the runner's own deadline.
    :param run_id: The ladder run's id (the artifact key part; default: Airflow's run id). (templated)
    :param min_free_gb: Free space the host's Docker data root needs before a rung starts
        (default 20 GiB, or ``TRACELADDER_MIN_FREE_GB``).
    :param preflight: Check the host before the rung, first thing in its slot (daemon, image,
        devices, disk and GPUs; ``RocmDockerHook.preflight``). Default on. A failed check fails the
        rung with one line and stores a metrics.json with status ``preflight``, so the summary marks it.
    :param gpu_preflight: Within the preflight, check that amd-smi (or rocm-smi) sees exactly
        ``GPUS_PER_NODE`` GPUs and that no process holds one. Default on.
    :param result_keys: The result's keys the task returns (default ``RESULT_KEYS``, the XCom's);
        None returns the runner's whole result (metrics.json's data: the triage's confirm reads
        ``step_ms_values`` from it).
    :param owner_ti: The task instance that owns the container, as ``(dag_id, run_id, task_id,
        map_index)`` in its labels, for ``stop_dead_tasks`` to ask Airflow about. Default: this
        task, under ``run_id``. A task that runs several rungs itself (the triage) names its own.

    Everything else is a :class:`RocmDockerOperator` parameter (``docker_url``, ``tls_conn_id``,
    ``devices``, ``host_name``, ``pool``, ...). ``command``, ``image``, ``environment`` and
    ``private_environment`` are set from the spec at run time:

    * ``environment``: ``TRACELADDER_S3_ENDPOINT`` (the cluster's ``storage.worker_endpoint_url``,
      or the S3 connection's ``endpoint_url``), ``TRACELADDER_S3_BUCKET``, ``AWS_DEFAULT_REGION``,
      ``TRACELADDER_SPOOL_DIR`` (and the worker's ``TRACELADDER_S3_RETRY_BUDGET_S`` if set);
    * ``mounts``: the spool on the host (``spool_mount``): the worker's ``TRACELADDER_SPOOL_DIR``
      bind-mounted at the same path, else the daemon's named volume ``traceladder-spool``, so
      artifacts S3 refused outlive the container and the task's retry uploads them;
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

    # `spec` is the plan's XCom for this slot (resolved, not Jinja-rendered): [spec] or [] (skip).
    template_fields: Sequence[str] = (*RocmDockerOperator.template_fields, "run_id", "spec")

    def __init__(
        self,
        *,
        spec: JSONObject | list[JSONObject],
        run_id: str = "{{ run_id }}",
        min_free_gb: float | None = None,
        preflight: bool = True,
        gpu_preflight: bool = True,
        image: str = "traceladder/runner",
        result_keys: Sequence[str] | None = RESULT_KEYS,
        owner_ti: tuple[str, str, str, int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(image=image, **kwargs)
        self.spec = spec
        self.result_keys = tuple(result_keys) if result_keys is not None else None
        self.owner_ti = owner_ti
        self.run_id = run_id
        self.min_free_gb = float(min_free_gb if min_free_gb is not None else str(env_vars.MIN_FREE_GB.get()))
        self.preflight = preflight
        self.gpu_preflight = gpu_preflight

    def execute(self, context: Context) -> Any:
        if isinstance(self.spec, list):  # a slot of the block grid: skip an empty one before any host contact
            from traceladder.airflow.blocks import slot_spec

            self.spec = slot_spec(self.spec)
        return super().execute(context)

    def _configure(self, context: Context) -> tuple[RungSpec, str]:
        """The rung's container settings from its spec; returns the spec and the run's key part."""
        from traceladder.airflow.ladders import open_ladder
        from traceladder.plan.build import RungSpec
        from traceladder.storage.artifacts import safe_key_part

        spec = RungSpec.model_validate(self.spec)
        context["rung_id"] = spec.rung_id  # type: ignore[typeddict-unknown-key]  # map_index_template
        env, private = storage_environment(open_ladder(spec.ladder).cluster.storage)
        self.image = spec.image
        run_key = safe_key_part(self.run_id)
        run_hash = hashlib.sha1(f"{context['dag'].dag_id}/{self.run_id}".encode(), usedforsecurity=False).hexdigest()[
            :10
        ]
        self.container_name = f"traceladder-{safe_key_part(spec.rung_id)}-{run_hash}"
        self.labels = {
            **(self.labels if isinstance(self.labels, dict) else {}),
            hygiene.LADDER_LABEL: spec.ladder,
            hygiene.RUN_LABEL: run_key,
            hygiene.RUNG_LABEL: spec.rung_id,
            # the task instance: a later preflight stops this container once Airflow no longer runs it
            **hygiene.ti_labels(
                *(self.owner_ti or (context["dag"].dag_id, self.run_id, self.task_id, _map_index(context)))
            ),
        }
        caps = {*(self.cap_add or []), "SYS_PTRACE"}
        if spec.lens in SYS_ADMIN_LENSES:
            caps.add("SYS_ADMIN")
        self.cap_add = sorted(caps)
        self.environment = {**(self.environment or {}), **env}
        mount, spool = spool_mount()
        if mount["Type"] == "bind":
            os.makedirs(spool, exist_ok=True)  # a bind source must exist (the daemon is on this host)
        self.mounts = [*(self.mounts or []), mount]
        self.environment[ENV_SPOOL] = spool
        if env_vars.S3_RETRY_BUDGET_S.is_set():
            self.environment[ENV_BUDGET] = str(env_vars.S3_RETRY_BUDGET_S.get())
        self._private_environment = {**self._private_environment, **private}
        self.command = ["traceladder", "run-rung", "--spec-json", spec.to_json(), "--run-id", self.run_id]
        self.do_xcom_push, self.xcom_all = True, True  # DockerOperator returns the lines; the task returns the result
        return spec, run_key

    def _spool_housekeeping(self, spec: Any) -> None:
        """Old sealed spools of this host (a bind-mounted TRACELADDER_SPOOL_DIR the worker can read):
        reported, uploaded and removed; empty folders dropped (docs/operations.md)."""
        from traceladder.airflow.ladders import ladder_store
        from traceladder.storage.retention import parse_duration
        from traceladder.storage.spool import SpoolingSink

        mount, root = spool_mount()
        if mount["Type"] != "bind":  # the daemon's named volume: not readable from the worker
            return
        loaded, _store = ladder_store(spec.ladder)
        max_age = parse_duration(loaded.cluster.spool.max_age, "spool.max_age")
        prefix = loaded.cluster.storage.prefix

        def upload(rung_prefix: str) -> int:
            # <prefix>/<ladder>/<run>/<rung>: the spool may hold another ladder's rung
            ladder = rung_prefix[len(prefix) + 1 :].split("/", 1)[0] if rung_prefix.startswith(prefix + "/") else ""
            return SpoolingSink(ladder_store(ladder)[1], Path(root), log=self.log.info).flush(rung_prefix)

        hygiene.housekeep_spool(Path(root), max_age, upload, host=self.host_name, log=self.log)

    def _execute_with_daemon(self, context: Context) -> Any:
        from airflow.sdk.exceptions import AirflowException

        spec, run_key = self._configure(context)
        rung_labels = {hygiene.RUN_LABEL: run_key, hygiene.RUNG_LABEL: spec.rung_id}
        try:
            self.hook.remove_orphans(running_too=rung_labels, log=self.log)
            hygiene.stop_dead_tasks(self.hook.api_client, self.host_name, _ti_running(context), log=self.log)
            try:
                self._spool_housekeeping(spec)
            except Exception as exc:  # noqa: BLE001 - housekeeping never refuses a rung
                self.log.warning("host %s: spool housekeeping failed: %s", self.host_name, exc)
            try:
                self.cli.remove_container(self.container_name, force=True)  # a previous try's container
            except Exception:  # noqa: BLE001, S110 - usually "no such container"
                pass
            found: hygiene.ImageProvenance
            if self.preflight:
                found = self.hook.preflight(
                    url=str(self.docker_url),
                    image=self.image,
                    min_free_gb=self.min_free_gb,
                    labels=dict(self.labels) if isinstance(self.labels, dict) else {},
                    gpus_per_node=gpus_per_node(spec.docker_env_vars) if self.gpu_preflight else None,
                    environment=dict(spec.docker_env_vars),
                )
                self.log.info("host %s ok: %s", self.host_name, found.to_json())
            else:
                found = self.hook.image_provenance(self.image)
        except hygiene.HostCheckError as exc:
            self._record_refused(spec, str(exc))
            raise AirflowException(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - the daemon is unreachable before the check ran
            message = str(
                hygiene.HostCheckError(self.host_name, f"Docker daemon at {self.docker_url} unreachable", str(exc))
            )
            self._record_refused(spec, message)
            raise AirflowException(message) from None
        # what ran, from the daemon: the runner records these in metrics.json (provenance)
        self.environment = {
            **self.environment,
            env_vars.IMAGE_ID.name: found.image_id,
            **({env_vars.IMAGE_DIGEST.name: found.image_digest} if found.image_digest else {}),
        }
        lines: list[str] = []
        try:
            lines = list(super()._execute_with_daemon(context) or [])  # xcom_all: every output line
        except DockerContainerFailedException as exc:
            lines = _text_lines(exc.logs)
        finally:
            if self.container_evidence is not None:
                context["ti"].xcom_push(key="container", value=self.container_evidence)
            try:
                self.hook.remove_orphans(log=self.log)
            except Exception as exc:  # noqa: BLE001 - cleanup never hides the rung's outcome
                self.log.warning("host %s: orphan cleanup failed: %s", self.host_name, exc)
        result = result_from_lines(lines)
        if result is None:
            tail = lines[-1] if lines else "(no output)"  # the runner's one-line error (it names the spool)
            raise AirflowException(
                f"rung {spec.rung_id} on host {self.host_name}: the runner printed no result ({tail[:1000]})"
            )
        if result.get("status") != "ok":  # the workload failed: no retry (only infrastructure retries)
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(f"rung {spec.rung_id} {result.get('status')}: {result.get('error')}")
        return result if self.result_keys is None else {k: result.get(k) for k in self.result_keys}

    def _record_refused(self, spec: Any, message: str) -> None:
        """A refused rung still gets a metrics.json (status "preflight"), so the summary marks it."""
        from traceladder.airflow.ladders import ladder_store
        from traceladder.runner.rung import record_refused

        try:
            record_refused(spec, self.run_id, ladder_store(spec.ladder)[1], "preflight", message)
        except Exception as exc:  # noqa: BLE001 - the task fails with the preflight's line either way
            self.log.warning("could not store the preflight failure of %s: %s", spec.rung_id, exc)


def gpus_per_node(env: dict[str, str]) -> int | None:
    """GPUS_PER_NODE as the rung's container gets it (the cluster's gpus_per_node, else the ladder's)."""
    value = env.get("GPUS_PER_NODE")
    return int(value) if value and value.isdigit() else None
