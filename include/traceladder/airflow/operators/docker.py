"""Operators of the docker backend: a rung is a container of the runner image on a ROCm host.

* ``RocmDockerOperator``: ``DockerOperator`` plus what a ROCm container needs and DockerOperator
  has no parameters for (devices, ``group_add``, ``security_opt``; madengine's ROCm docker options,
  docs/facts.md, "The real rocm/primus image and madengine's launch"), TLS material from an Airflow
  connection, and traceladder's container labels.
* ``RungDockerOperator``: one rung spec → ``traceladder run-rung --spec-json <json> --run-id <id>``
  in the runner image, S3 credentials through ``private_environment``, a pre-flight check of the
  host, orphan cleanup, and the task fails unless the runner's result says ``ok``. Its work is
  ``run_rung_container``, a plain call that the triage's task makes too (as the Slurm triage
  calls ``run_rung_job``): an operator's ``execute`` never runs inside another task.

The daemon side lives in ``RocmDockerHook`` (airflow/hooks/rocm.py): TLS from a connection, the CA
fix, a client whose host configs add devices, ``group_add`` and ``security_opt``, the preflight,
the image lookup, the orphan clean-up and a container run to its end (``run_streamed``). The
operators hold only the task's parameters; ``RocmDockerOperator`` uses DockerOperator's own
container code, the rung's run goes through the hook's ``run_streamed``; written against
apache-airflow-providers-docker 4.6.1 (pinned in pyproject.toml; ``PROVIDER_VERSION`` is checked by
the tests).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.docker.hooks.docker import DockerHook
from airflow.providers.docker.operators.docker import DockerOperator
from docker.types import Mount, Ulimit

from traceladder.airflow.hooks import docker_hygiene as hygiene
from traceladder.airflow.hooks.rocm import RocmDockerHook
from traceladder.runner.rung import RESULT_KEYS
from traceladder.core import env_vars
from traceladder.core.codec import JSONObject
from traceladder.core.errors import TraceladderError
from traceladder.storage.spool import ENV_BUDGET, ENV_SPOOL

if TYPE_CHECKING:
    from airflow.sdk import Context

    from traceladder.config.models import Host
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


def ti_running(context: Context) -> Any:
    """``(dag_id, run_id, task_id, map_index) -> bool``: is that task instance running, per Airflow
    (the Task SDK's execution API; no database access from the worker)."""
    ti = context["ti"]

    def running(dag_id: str, run_id: str, task_id: str, map_index: int) -> bool:
        count = ti.get_ti_count(
            dag_id=dag_id, task_ids=[task_id], run_ids=[run_id], map_index=map_index, states=["running"]
        )
        return bool(count)

    return running


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


class RungRefused(TraceladderError, RuntimeError):
    """The host refused the rung (preflight, unreachable daemon): one line naming the host; the
    rung's metrics.json already says `preflight`."""


class RungNoResult(TraceladderError, RuntimeError):
    """The container ended without the runner's result line: one line naming the rung and host."""


@dataclass
class ContainerOptions:
    """A rung container's settings besides its spec: RocmDockerOperator's defaults (the triage's
    containers), or the operator's own parameters. The spec adds its image, command, labels,
    storage environment and spool mount (`run_rung_container`)."""

    host_name: str
    docker_url: str
    cap_add: list[str] = field(default_factory=lambda: ["SYS_PTRACE"])
    ipc_mode: str | None = "host"
    network_mode: str | None = "host"
    shm_size: int | None = DEFAULT_SHM_SIZE
    ulimits: list[Any] | None = None  # None: nofile at default_nofile()
    environment: dict[str, str] = field(default_factory=dict)
    private_environment: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    mounts: list[Any] = field(default_factory=list)
    extra_host_config: dict[str, Any] = field(default_factory=dict)  # the operator's other DockerOperator settings


def rung_hook(host: Host) -> RocmDockerHook:
    """A clusters.yaml docker host's hook as the rung slots make it (ROCm's group and seccomp)."""
    return RocmDockerHook(
        docker_conn_id=None,  # as DockerOperator's default: no registry login (the preflight pulls)
        base_url=host.docker_url,
        host_name=host.name,
        tls_conn_id=host.tls_conn_id,
        devices=list(host.devices),
        group_add=["video"],
        security_opt=["seccomp=unconfined"],
    )


def container_name(dag_id: str, run_id: str, rung_id: str) -> str:
    """The rung's container: one per DAG, run and rung, so a retry's first act removes its try's."""
    from traceladder.storage.artifacts import safe_key_part

    run_hash = hashlib.sha1(f"{dag_id}/{run_id}".encode(), usedforsecurity=False).hexdigest()[:10]
    return f"traceladder-{safe_key_part(rung_id)}-{run_hash}"


def run_rung_container(
    hook: RocmDockerHook,
    spec: RungSpec,
    run_id: str,
    owner: tuple[str, str, str, int],
    is_running: Callable[[str, str, str, int], bool],
    options: ContainerOptions,
    *,
    preflight: bool = True,
    gpu_preflight: bool = True,
    min_free_gb: float | None = None,
    log: Any,
) -> JSONObject:
    """One rung's container on a docker host, run to its end as a plain call: RungDockerOperator's
    work, and the triage's runs inside its own task (no operator inside another task). Host
    hygiene first (orphans, containers of task instances Airflow no longer runs, old spools, a
    previous try's container), the preflight, then ``traceladder run-rung`` in the runner image
    labelled with ``owner`` (the task instance that runs it, for ``stop_dead_tasks``), and the
    orphan clean-up after. Returns the runner's whole result, whatever its status; raises
    RungRefused (recorded as `preflight`) or RungNoResult, each one line."""
    from traceladder.airflow.ladders import open_ladder
    from traceladder.storage.artifacts import safe_key_part

    host = options.host_name
    env, private = storage_environment(open_ladder(spec.ladder).cluster.storage)
    run_key = safe_key_part(run_id)
    name = container_name(owner[0], run_id, spec.rung_id)
    labels = {
        hygiene.MANAGED_LABEL: "true",
        hygiene.HOST_LABEL: host,
        **options.labels,
        hygiene.LADDER_LABEL: spec.ladder,
        hygiene.RUN_LABEL: run_key,
        hygiene.RUNG_LABEL: spec.rung_id,
        # the task instance: a later preflight stops this container once Airflow no longer runs it
        **hygiene.ti_labels(*owner),
    }
    caps = {*options.cap_add, "SYS_PTRACE"} | ({"SYS_ADMIN"} if spec.lens in SYS_ADMIN_LENSES else set())
    environment = {**options.environment, **env}
    mount, spool = spool_mount()
    if mount["Type"] == "bind":
        os.makedirs(spool, exist_ok=True)  # a bind source must exist (the daemon is on this host)
    environment[ENV_SPOOL] = spool
    if env_vars.S3_RETRY_BUDGET_S.is_set():
        environment[ENV_BUDGET] = str(env_vars.S3_RETRY_BUDGET_S.get())
    min_free = float(min_free_gb if min_free_gb is not None else str(env_vars.MIN_FREE_GB.get()))
    try:
        hook.remove_orphans(running_too={hygiene.RUN_LABEL: run_key, hygiene.RUNG_LABEL: spec.rung_id}, log=log)
        hygiene.stop_dead_tasks(hook.api_client, host, is_running, log=log)
        try:
            _spool_housekeeping(spec, host, log)
        except Exception as exc:  # noqa: BLE001 - housekeeping never refuses a rung
            log.warning("host %s: spool housekeeping failed: %s", host, exc)
        try:
            hook.api_client.remove_container(name, force=True)  # a previous try's container
        except Exception:  # noqa: BLE001, S110 - usually "no such container"
            pass
        found: hygiene.ImageProvenance
        if preflight:
            found = hook.preflight(
                url=options.docker_url,
                image=spec.image,
                min_free_gb=min_free,
                labels=labels,
                gpus_per_node=gpus_per_node(spec.docker_env_vars) if gpu_preflight else None,
                environment=dict(spec.docker_env_vars),
            )
            log.info("host %s ok: %s", host, found.to_json())
        else:
            found = hook.image_provenance(spec.image)
    except hygiene.HostCheckError as exc:
        _record_refused(spec, run_id, str(exc), log)
        raise RungRefused(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - the daemon is unreachable before the check ran
        message = str(hygiene.HostCheckError(host, f"Docker daemon at {options.docker_url} unreachable", str(exc)))
        _record_refused(spec, run_id, message, log)
        raise RungRefused(message) from None
    # what ran, from the daemon: the runner records these in metrics.json (provenance)
    environment[env_vars.IMAGE_ID.name] = found.image_id
    if found.image_digest:
        environment[env_vars.IMAGE_DIGEST.name] = found.image_digest
    nofile = default_nofile()
    host_config = {
        **options.extra_host_config,
        "mounts": [*options.mounts, mount],
        "network_mode": options.network_mode,
        "shm_size": options.shm_size,
        "cap_add": sorted(caps),
        "ipc_mode": options.ipc_mode,
        "ulimits": options.ulimits
        if options.ulimits is not None
        else [Ulimit(name="nofile", soft=nofile, hard=nofile)],
    }
    try:
        _code, lines = hook.run_streamed(
            spec.image,
            name=name,
            command=["traceladder", "run-rung", "--spec-json", spec.to_json(), "--run-id", run_id],
            environment={**environment, **options.private_environment, **private},
            labels=labels,
            host_config=host_config,
            log=log,
        )
    finally:
        try:
            hook.remove_orphans(log=log)
        except Exception as exc:  # noqa: BLE001 - cleanup never hides the rung's outcome
            log.warning("host %s: orphan cleanup failed: %s", host, exc)
    result = result_from_lines(lines)
    if result is None:
        tail = lines[-1] if lines else "(no output)"  # the runner's one-line error (it names the spool)
        raise RungNoResult(f"rung {spec.rung_id} on host {host}: the runner printed no result ({tail[:1000]})")
    return result


def _spool_housekeeping(spec: Any, host: str, log: Any) -> None:
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
        return SpoolingSink(ladder_store(ladder)[1], Path(root), log=log.info).flush(rung_prefix)

    hygiene.housekeep_spool(Path(root), max_age, upload, host=host, log=log)


def _record_refused(spec: Any, run_id: str, message: str, log: Any) -> None:
    """A refused rung still gets a metrics.json (status "preflight"), so the summary marks it."""
    from traceladder.airflow.ladders import ladder_store
    from traceladder.runner.rung import record_refused

    try:
        record_refused(spec, run_id, ladder_store(spec.ladder)[1], "preflight", message)
    except Exception as exc:  # noqa: BLE001 - the task fails with the preflight's line either way
        log.warning("could not store the preflight failure of %s: %s", spec.rung_id, exc)


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
        None returns the runner's whole result.

    Everything else is a :class:`RocmDockerOperator` parameter (``docker_url``, ``tls_conn_id``,
    ``devices``, ``host_name``, ``pool``, ...). The run itself is ``run_rung_container``, a plain
    call the triage makes too (inside its own task: no operator ``execute`` in another task); it
    sets the image, command and environment from the spec:

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
        **kwargs: Any,
    ) -> None:
        super().__init__(image=image, **kwargs)
        self.spec = spec
        self.result_keys = tuple(result_keys) if result_keys is not None else None
        self.run_id = run_id
        self.min_free_gb = min_free_gb
        self.preflight = preflight
        self.gpu_preflight = gpu_preflight
        self.container_name: str | None = None

    def execute(self, context: Context) -> Any:
        if isinstance(self.spec, list):  # a slot of the block grid: skip an empty one before any host contact
            from traceladder.airflow.blocks import slot_spec

            self.spec = slot_spec(self.spec)
        return super().execute(context)

    def _execute_with_daemon(self, context: Context) -> Any:
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        from traceladder.plan.build import RungSpec

        spec = RungSpec.model_validate(self.spec)
        context["rung_id"] = spec.rung_id  # type: ignore[typeddict-unknown-key]  # map_index_template
        owner = (context["dag"].dag_id, self.run_id, self.task_id, _map_index(context))
        self.container_name = container_name(owner[0], self.run_id, spec.rung_id)
        options = ContainerOptions(
            host_name=self.host_name,
            docker_url=str(self.docker_url),
            cap_add=list(self.cap_add or []),
            ipc_mode=self.ipc_mode,
            network_mode=self.network_mode,
            shm_size=self.shm_size,
            ulimits=list(self.ulimits),
            environment=dict(self.environment or {}),
            private_environment=dict(self._private_environment),
            labels=dict(self.labels) if isinstance(self.labels, dict) else {},
            mounts=list(self.mounts or []),
            extra_host_config={
                "dns": self.dns,
                "dns_search": self.dns_search,
                "mem_limit": self.mem_limit,
                "extra_hosts": self.extra_hosts,
                "privileged": self.privileged,
                "device_requests": self.device_requests,
            },
        )
        try:
            result = run_rung_container(
                self.hook,
                spec,
                self.run_id,
                owner,
                ti_running(context),
                options,
                preflight=self.preflight,
                gpu_preflight=self.gpu_preflight,
                min_free_gb=self.min_free_gb,
                log=self.log,
            )
        except (RungRefused, RungNoResult) as exc:
            raise AirflowException(str(exc)) from None
        finally:
            if self.container_evidence is not None:
                context["ti"].xcom_push(key="container", value=self.container_evidence)
        if result.get("status") != "ok":  # the workload failed: no retry (only infrastructure retries)
            raise AirflowFailException(f"rung {spec.rung_id} {result.get('status')}: {result.get('error')}")
        return result if self.result_keys is None else {k: result.get(k) for k in self.result_keys}

    def on_kill(self) -> None:
        """The task is killed: its container goes (the run's finally removes it too, if it runs)."""
        if self.container_name and "hook" in self.__dict__:
            try:
                self.hook.api_client.remove_container(self.container_name, force=True)
            except Exception as exc:  # noqa: BLE001 - usually already gone
                self.log.info("container %s not removed on kill: %s", self.container_name, exc)


def gpus_per_node(env: dict[str, str]) -> int | None:
    """GPUS_PER_NODE as the rung's container gets it (the cluster's gpus_per_node, else the ladder's)."""
    value = env.get("GPUS_PER_NODE")
    return int(value) if value and value.isdigit() else None
