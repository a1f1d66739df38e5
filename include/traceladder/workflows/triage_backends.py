"""The triage's runs on each backend, for the triage DAG's tasks (triage_tasks.py): a confirm's
block runs and the explanation's profiled runs on the local host (triage/runs.py), on the
ladder's first docker host (`run_rung_container`, the rung operator's plain call, inside the
triage task that holds that host's pool), or as Slurm jobs on its cluster; the registry's
image tags between two images; and the engine's context built from them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceladder.core.documents import JSONObject

if TYPE_CHECKING:
    from traceladder.config.loader import LoadedLadder
    from traceladder.config.models import Host
    from traceladder.storage.artifacts import ArtifactSink
    from traceladder.triage.confirm import RunBlock
    from traceladder.triage.engine import TriageContext
    from traceladder.triage.explain import RunProfiled
    from traceladder.triage.suspects import Suspects

ImageTag = tuple[str, str | None, str | None]  # (image reference, manifest digest, created)


def run_block_for(loaded: LoadedLadder, run_id: str, context: Any, dag_id: str) -> RunBlock:
    """The backend's runs of a confirm: local, the real runner on this worker; docker, the rung's
    container (`run_rung_container`) on the ladder's first docker host (the one the ladder's
    rungs run on; the task holds its pool); slurm, a batch job per run on the ladder's cluster and
    partition, waited for in this task (`slurm_run_block`; `dag_id` names its jobs outside a task)."""
    from traceladder.triage.from_ladder import TriageError

    backend = loaded.ladder.backend
    if backend == "local":
        from traceladder.triage.runs import local_run_block

        return local_run_block(run_id=f"{run_id}-triage")
    if backend == "docker":
        return _docker_run_block(loaded, run_id, context, dag_id)
    if backend == "slurm":
        return slurm_run_block(loaded, run_id, dag_id, context)
    raise TriageError(f"ladder {loaded.ladder.ladder}: triage on the {backend} backend is not wired yet")


def docker_host(loaded: LoadedLadder) -> Host | None:
    """The docker host a docker ladder's triage runs on (its cluster's first with a daemon), else
    None. The triage DAG gives its docker-running tasks this host's pool (workflows/triage.py)."""
    if loaded.ladder.backend != "docker":
        return None
    return next((h for h in loaded.cluster.hosts if h.docker_url), None)


def _docker_runner(
    loaded: LoadedLadder, run_id: str, context: Any, dag_id: str = "traceladder-triage"
) -> Callable[[JSONObject, str], JSONObject]:
    """(spec, name) -> the runner's whole result: the rung's container on the ladder's docker host,
    run here by `run_rung_container` (the ladder rungs' own run, a plain call: no operator inside
    this task), labelled with this task instance (a preflight elsewhere stops it only once Airflow
    no longer runs this task; outside a task, `dag_id` and the run label it). A run the host
    refused is {"status": "preflight", "error"} (the confirm retries it), one that failed
    {"status": "failed", "error"}."""
    from traceladder.airflow.operators.docker import (
        ContainerOptions,
        RungRefused,
        ti_running,
        run_rung_container,
        rung_hook,
    )
    from traceladder.core.errors import first_line
    from traceladder.plan.build import RungSpec
    from traceladder.triage.from_ladder import TriageError

    host = docker_host(loaded)
    if host is None or not host.docker_url:
        raise TriageError(
            f"ladder {loaded.ladder.ladder}: cluster {loaded.ladder.cluster} has no docker host for the triage"
        )
    ti = (context or {}).get("ti")
    log = logging.getLogger("traceladder.triage.docker")
    if ti is not None:
        pool = getattr(getattr(ti, "task", None), "pool", None)
        if isinstance(pool, str) and pool != host.pool:  # a DAG parsed before the ladder's hosts changed
            raise TriageError(
                f"ladder {loaded.ladder.ladder}: the triage task holds pool {pool}, not docker host {host.name}'s "
                f"pool {host.pool}; the triage DAG must be parsed again"
            )
        index = getattr(ti, "map_index", None)
        owner = (str(ti.dag_id), str(ti.run_id), str(ti.task_id), -1 if index is None else int(index))
        running = ti_running(context)
    else:  # outside a task (`traceladder triage repro`): no Airflow to ask which task instances run,
        # so the host's other containers are all taken as running (none is stopped)
        owner = (dag_id, run_id, "repro", -1)

        def running(*_task_instance: object) -> bool:
            return True

    def run(spec: JSONObject, name: str) -> JSONObject:
        hook = rung_hook(host)
        try:
            rung = RungSpec.model_validate(dict(spec))
            options = ContainerOptions(host_name=host.name, docker_url=host.docker_url or "")
            log.info("triage run %s: %s on host %s", name, rung.rung_id, host.name)
            result = run_rung_container(hook, rung, f"{run_id}-triage", owner, running, options, log=log)
        except RungRefused as exc:  # the host refused it: an infrastructure failure, retried
            return {"status": "preflight", "error": first_line(exc)}
        except Exception as exc:  # noqa: BLE001 - a run that fails is a missing cell (or a skipped candidate)
            return {"status": "failed", "error": first_line(exc)}
        finally:
            hook.close()
        if result.get("status") != "ok":  # the operator's own line for a workload that failed
            return {**result, "error": f"rung {rung.rung_id} {result.get('status')}: {result.get('error')}"}
        return dict(result)

    return run


def _docker_run_block(loaded: LoadedLadder, run_id: str, context: Any, dag_id: str = "traceladder-triage") -> RunBlock:
    run = _docker_runner(loaded, run_id, context, dag_id)
    return lambda spec, side, block: run(spec, f"triage_{side}_{block}")


def docker_run_profiled(loaded: LoadedLadder, store: ArtifactSink, run_id: str, context: Any) -> RunProfiled:
    """The docker backend's profiled run for the explanation: the rung's container as a confirm
    runs it; its rank-0 trace, which the runner stored, read back into a scratch folder."""
    import tempfile

    from traceladder.triage.runs import rank0_trace

    run = _docker_runner(loaded, run_id, context)
    work = Path(tempfile.mkdtemp(prefix="traceladder-explain-traces-"))

    def profiled(spec: JSONObject, side: str) -> Path | None:
        key = rank0_trace(run(spec, f"triage_explain_{side}"))
        if key is None:
            return None
        path = work / side / key.rsplit("/", 1)[-1]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.get_bytes(key))
        return path

    return profiled


def slurm_run_block(
    loaded: LoadedLadder, run_id: str, dag_id: str, context: Any = None, down_grace_s: float = 600.0
) -> RunBlock:
    """Each confirm run as a Slurm job through the cluster's login node (the SSH connection of its
    first host, as the ladder's rungs use), on the ladder's partition and node count, submitted,
    waited for and read back in this task (operators/slurm.py `run_rung_job`: a plain call, not
    the deferred operator). The jobs' comment names the triage's task instance, so the ladder
    rungs' orphan sweep leaves them alone while it runs; this task's first run cancels the jobs an
    earlier try of it left. A run that cannot run or fails is `failed` with one line naming the
    login node and the job; in a confirm's first block that makes the candidate skipped. Outside a
    task (no `ti` in `context`) the jobs are named by `dag_id` and the run."""
    import uuid

    from traceladder.airflow.hooks.slurm import JobOwner, SlurmError, SlurmHook, job_name
    from traceladder.airflow.operators.slurm import run_rung_job
    from traceladder.core.errors import first_line
    from traceladder.plan.build import RungSpec
    from traceladder.triage.from_ladder import TriageError

    ssh_conn_id = loaded.cluster.hosts[0].ssh_conn_id
    if not ssh_conn_id or loaded.cluster.slurm is None:
        raise TriageError(
            f"ladder {loaded.ladder.ladder}: cluster {loaded.ladder.cluster} has no slurm: settings "
            "and login node ssh_conn_id for the triage"
        )
    ti = (context or {}).get("ti")
    owner = JobOwner(ti.dag_id, ti.run_id, ti.task_id, ti.map_index if ti.map_index is not None else -1) if ti else None
    swept: list[bool] = []

    def sweep(hook: SlurmHook) -> None:
        """Cancel the jobs this task instance owns before its first run: an earlier try's."""
        for job_id, _name, job_owner in hook.owned_jobs():
            if job_owner == owner:
                hook.cancel(job_id)

    def run(spec: JSONObject, side: str, block: int) -> JSONObject:
        rung_id = str(spec.get("rung_id"))
        key = f"{owner.task_id if owner else 'triage'}/{side}.b{block}/{uuid.uuid4().hex[:8]}"
        name = job_name(owner.dag_id if owner else dag_id, owner.run_id if owner else run_id, key)
        try:
            rung = RungSpec.model_validate(spec)
            if owner is not None and not swept:
                with SlurmHook(ssh_conn_id) as hook:
                    sweep(hook)
                swept.append(True)
            return run_rung_job(rung, loaded, ssh_conn_id, f"{run_id}-triage", name, owner, down_grace_s)
        except SlurmError as exc:  # its line names the login node (and the job, once there is one)
            return {"rung_id": rung_id, "status": "failed", "error": first_line(exc)}
        except Exception as exc:  # noqa: BLE001 - a run that fails is a missing cell (or a skipped candidate)
            return {"rung_id": rung_id, "status": "failed", "error": f"Slurm on {ssh_conn_id}: {first_line(exc)}"}

    return run


def image_tags_for(suspects: Suspects, conn_id: str | None = None) -> tuple[list[ImageTag], str | None]:
    """The image candidates of the largest suspect, from the registry (RegistryHook): each as
    (image reference, manifest digest, created), ends named as the runs named their images; and
    the registry's reason when it cannot place an end (its image is gone), else None."""
    from traceladder.airflow.hooks.registry import DEFAULT_CONN_ID, RegistryHook
    from traceladder.airflow.hooks.docker_registry import ImageRef

    _suspect, good, bad = suspects[0]
    good_image, bad_image = str(good.spec.get("image") or ""), str(bad.spec.get("image") or "")
    if not good_image or good_image == bad_image:
        return [], None
    g, b = ImageRef.parse(good_image), ImageRef.parse(bad_image)
    found = RegistryHook(conn_id or DEFAULT_CONN_ID).client(g.registry)
    span = found.tags_between(g.repository, g.reference, b.reference)
    out: list[ImageTag] = []
    for i, image in enumerate(span.candidates):
        ref = (
            good_image
            if i == 0
            else bad_image
            if i == len(span.candidates) - 1
            else f"{g.registry}/{g.repository}:{image.name}"
        )
        out.append((ref, image.digest, image.created.isoformat() if image.created else None))
    return out, span.reason


def engine_context(
    loaded: LoadedLadder,
    store: ArtifactSink,
    run_id: str,
    suspects: Suspects,
    context: Any,
    approved: bool,
    dag_id: str,
    force: bool = False,
) -> TriageContext:
    """The engine's context for a suspect group with the ladder's backend: its runs, its profiled
    runs for the explanation, and (docker) the registry's tags between the two images."""
    from traceladder.triage.from_ladder import context_for
    from traceladder.triage.runs import local_run_profiled

    backend = loaded.ladder.backend
    tags, reason = image_tags_for(suspects) if backend == "docker" else ([], None)
    profiled = (
        local_run_profiled(run_id=f"{run_id}-triage")
        if backend == "local"
        else docker_run_profiled(loaded, store, run_id, context)
        if backend == "docker"
        else None
    )
    return context_for(
        loaded,
        store,
        run_id,
        run_block_for(loaded, run_id, context, dag_id),
        run_profiled=profiled,
        approve=lambda: approved,
        image_tags=tags,
        image_tags_reason=reason,
        force=force,
        dag_run_id=dag_run_id(context),
    )


def dag_run_id(context: Any) -> str | None:
    """The DAG run of a task's Airflow context (its `run_id`); None outside Airflow."""
    run_id = context.get("run_id") if isinstance(context, Mapping) else None
    return str(run_id) if run_id else None
