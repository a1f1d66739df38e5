"""The slurm backend's task (issue 27): a deferrable operator.

``SlurmRungOperator`` renders the rung's batch script (airflow/hooks/slurm.py), submits it with
``sbatch`` over SSH, and defers to ``SlurmJobTrigger`` (airflow/triggers/slurm.py), so no worker
slot is held while the rung runs. It resumes in ``execute_complete`` to collect: the final state is
the runner's own ``metrics.json`` in the store (which the nodes upload through the spool, as on the
docker path); the Slurm state only explains a rung that stored nothing (``NODE_FAIL`` names its
nodes).

Re-attaching after a dead worker: the job's name is a hash of (dag, run, task, map index), the
same for every try, and it goes to the controller in the same ``sbatch`` call that creates the job.
A retry first asks ``squeue --name`` for it and re-attaches to a job it finds (queued, running, or
finished within MinJobAge) instead of submitting a second one. Nothing has to be written between
``sbatch`` and the deferral, so there is no window in which a worker's death loses the id (Airflow
3.3's ``ResumableJobMixin`` keeps the id in the task state store *after* the submit call returns,
which leaves exactly that window, and it is built for the synchronous path).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from traceladder.airflow.hooks.slurm import (
    JobOwner,
    JobState,
    SlurmError,
    SlurmHook,
    job_name,
    sbatch_script,
    time_limit_minutes,
)
from traceladder.airflow.triggers.slurm import SlurmJobTrigger
from traceladder.core.documents import JSONObject, RungResult
from traceladder.core.errors import first_line
from traceladder.runner.rung import RESULT_KEYS
from traceladder.core import layout
from traceladder.core.env_vars import SHARED_DIR
from traceladder.storage.spool import ENV_SPOOL

if TYPE_CHECKING:
    from airflow.sdk import Context

# Task-instance states after which the task's job has no reason to run: its job is an orphan.
# (None, a cleared task instance, is not here: its next try re-attaches to the job by name.)
FINISHED_TI_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


class SlurmRungOperator(BaseOperator):
    """One rung of a ``backend: slurm`` ladder: a batch job on the cluster's nodes, deferred while it runs.

    :param spec: The rung spec (``RungSpec`` as a dict), or a block-grid slot's list of zero or one
        spec (empty = skip). Its ``ladder`` finds the cluster (``slurm:`` settings, storage), its
        ``timeout_s`` gives the job's ``--time`` (rounded up to minutes, plus the upload grace).
    :param ssh_conn_id: The Airflow SSH connection of the cluster's login node (the host's
        ``ssh_conn_id`` in clusters.yaml).
    :param nnodes: Nodes of the job (``#SBATCH -N``); default: the ladder's ``nnodes``.
    :param run_id: The ladder run's id (the artifact key part; default: Airflow's run id). (templated)
    :param preflight: Refuse the rung, with one line naming them, when the partition lacks
        ``nnodes`` usable nodes (drained, down); a refused rung stores a metrics.json with status
        ``preflight``. Default on.
    :param poll_s: Seconds between the trigger's polls (default: the cluster's ``slurm.poll_s``).
    :param down_grace_s: How long the trigger keeps polling an unreachable controller.

    The task's XCom is the runner's result (``rung_id, status, step_ms, ...``); XCom ``slurm`` holds
    the job's id, nodes, final state and exit code. The runner records the job id and node list in
    metrics.json's provenance itself (from ``SLURM_JOB_ID``/``SLURM_JOB_NODELIST``).
    """

    template_fields: Sequence[str] = ("run_id", "spec")

    def __init__(
        self,
        *,
        spec: JSONObject | list[JSONObject],
        ssh_conn_id: str,
        nnodes: int | None = None,
        run_id: str = "{{ run_id }}",
        preflight: bool = True,
        poll_s: float | None = None,
        down_grace_s: float = 600.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.ssh_conn_id = ssh_conn_id
        self.nnodes = nnodes
        self.run_id = run_id
        self.preflight = preflight
        self.poll_s = poll_s
        self.down_grace_s = down_grace_s
        self._job_id: str | None = None

    def _spec(self) -> Any:
        from traceladder.plan.build import RungSpec

        if isinstance(self.spec, list):  # a slot of the block grid: skip an empty one first
            from traceladder.airflow.blocks import slot_spec

            self.spec = slot_spec(self.spec)
        return RungSpec.model_validate(self.spec)

    def execute(self, context: Context) -> Any:
        from airflow.sdk.exceptions import AirflowException

        from traceladder.airflow.ladders import open_ladder

        spec = self._spec()
        loaded = open_ladder(spec.ladder)
        cluster = loaded.cluster
        nnodes = self.nnodes if self.nnodes is not None else loaded.ladder.nnodes
        settings = cluster.slurm
        if settings is None:
            raise AirflowException(f"cluster of ladder {spec.ladder} has no slurm: settings")
        ti = context["ti"]
        map_index = ti.map_index if ti.map_index is not None else -1
        name = job_name(ti.dag_id, self.run_id, ti.task_id, map_index)
        owner = JobOwner(ti.dag_id, getattr(ti, "run_id", None) or self.run_id, ti.task_id, map_index)
        try:
            with SlurmHook(self.ssh_conn_id) as hook:
                job_id = self._find_or_submit(hook, spec, cluster, ti, name, owner, nnodes)
        except SlurmError as exc:
            raise AirflowException(f"rung {spec.rung_id}: {exc}") from None
        self._job_id = job_id
        self.defer(
            trigger=SlurmJobTrigger(
                job_id, self.ssh_conn_id, self.poll_s if self.poll_s is not None else settings.poll_s, self.down_grace_s
            ),
            method_name="execute_complete",
        )

    def _find_or_submit(
        self, hook: SlurmHook, spec: Any, cluster: Any, ti: Any, name: str, owner: JobOwner, nnodes: int
    ) -> str:
        """Re-attach to this task instance's job if an earlier try submitted it, else preflight and submit."""
        self._cancel_orphans(hook, ti, name)
        job_id = hook.find_job(name)
        if job_id is not None:
            self.log.info("re-attaching to Slurm job %s (%s), which an earlier try submitted", job_id, name)
            return job_id
        if self.preflight:
            self._preflight(hook, spec, cluster.slurm.partition, nnodes)
        job_id = self._submit(hook, spec, cluster, name, nnodes, owner)
        self._job_id = job_id  # from here on the operator's on_kill cancels it
        self.log.info("submitted Slurm job %s (%s) for rung %s", job_id, name, spec.rung_id)
        return job_id

    def _preflight(self, hook: SlurmHook, spec: Any, partition: str | None, nnodes: int) -> None:
        from airflow.sdk.exceptions import AirflowException

        message = preflight_refusal(hook, spec.rung_id, partition, nnodes)
        if message is None:
            return
        self._record_refused(spec, message)
        raise AirflowException(message)

    def _cancel_orphans(self, hook: SlurmHook, ti: Any, own_name: str) -> None:
        """Cancel the queued or running jobs whose task instance has finished or is gone: a deferred
        rung marked failed before a triggerer started its trigger gets no trigger ``on_kill``, and
        a worker killed while submitting or collecting may leave its job behind. The same rule as
        the docker preflight's: a managed workload whose task instance no longer runs is stopped."""
        for job_id, job, owner in hook.owned_jobs():
            if job == own_name:  # this task instance's own job: re-attached to below
                continue
            key = owner.task_id if owner.map_index < 0 else f"{owner.task_id}_{owner.map_index}"
            try:
                states = ti.get_task_states(
                    dag_id=owner.dag_id,
                    run_ids=[owner.run_id],
                    task_ids=[owner.task_id],
                    map_index=owner.map_index if owner.map_index >= 0 else None,
                )
            except Exception as exc:  # noqa: BLE001 - an unknown DAG, an API error: leave the job alone
                self.log.warning("Slurm job %s: could not ask the state of %s: %s", job_id, owner, exc)
                continue
            found = (states or {}).get(owner.run_id, {})
            if key in found and found[key] not in FINISHED_TI_STATES:
                continue
            why = f"is {found[key]}" if key in found else "no longer exists"
            self.log.warning("cancelling orphaned Slurm job %s: its task %s %s", job_id, owner, why)
            hook.cancel(job_id)

    def _submit(self, hook: SlurmHook, spec: Any, cluster: Any, name: str, nnodes: int, owner: JobOwner) -> str:
        return submit_rung(hook, spec, cluster, self.run_id, name, nnodes, owner)

    def execute_complete(self, context: Context, event: JSONObject) -> Any:
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        spec = self._spec()
        self._job_id = str(event.get("job_id") or "") or None
        context["ti"].xcom_push(key="slurm", value=event)
        result = self._stored_result(spec)
        if result is None:
            state = event.get("state") or event.get("status")
            if state == "NODE_FAIL":
                raise AirflowFailException(
                    f"rung {spec.rung_id}: Slurm job {event.get('job_id')} ended NODE_FAIL: "
                    f"{self._failed_nodes(str(event.get('nodes') or ''))}; the rung stored no result"
                )
            detail = event.get("error") or f"ended {state} (exit {event.get('exit_code')}, {event.get('reason')})"
            raise AirflowException(f"rung {spec.rung_id}: Slurm job {event.get('job_id')} {detail}; no result stored")
        if not result.ok:  # the workload failed: no retry (only infrastructure retries)
            extra = f" (Slurm: {event.get('state')} on {event.get('nodes')})" if event.get("state") else ""
            raise AirflowFailException(f"rung {spec.rung_id} {result.status}: {result.error}{extra}")
        stored = result.to_dict()  # XCom carries JSON
        return {k: stored.get(k) for k in RESULT_KEYS}

    def _failed_nodes(self, nodelist: str) -> str:
        try:
            with SlurmHook(self.ssh_conn_id) as hook:
                return failed_nodes(hook, nodelist)
        except SlurmError as exc:
            self.log.warning("could not ask which node failed: %s", exc)
            return f"one of node(s) {nodelist}"

    def _stored_result(self, spec: Any) -> RungResult | None:
        return stored_result(spec, self.run_id)

    def _record_refused(self, spec: Any, message: str) -> None:
        from traceladder.airflow.ladders import ladder_store
        from traceladder.runner.rung import record_refused

        try:
            record_refused(spec, self.run_id, ladder_store(spec.ladder)[1], "preflight", message)
        except Exception as exc:  # noqa: BLE001 - the task fails with the preflight's line either way
            self.log.warning("could not store the preflight failure of %s: %s", spec.rung_id, exc)

    def on_kill(self) -> None:
        """The worker-side windows (submitting, collecting); while deferred the trigger's on_kill cancels."""
        if self._job_id:
            try:
                with SlurmHook(self.ssh_conn_id) as hook:
                    hook.cancel(self._job_id)
            except Exception as exc:  # noqa: BLE001 - best effort on the way down
                self.log.warning("could not cancel Slurm job %s: %s", self._job_id, exc)


# ---- the rung's job, shared by the deferred operator above and the triage's synchronous runs


def preflight_refusal(hook: SlurmHook, rung_id: str, partition: str | None, nnodes: int) -> str | None:
    """One line when the partition lacks `nnodes` usable nodes (naming the drained/down ones), else None."""
    usable = hook.usable_node_count(partition)
    if usable >= nnodes:
        return None
    bad = hook.unusable_nodes(partition)
    where = ", ".join(f"{n} {why}" for n, why in sorted(bad.items())) or "none listed"
    return (
        f"preflight: rung {rung_id} needs {nnodes} node(s) of partition {partition or '(default)'}, "
        f"{usable} usable; not taking jobs: {where}"
    )


def submit_rung(
    hook: SlurmHook, spec: Any, cluster: Any, run_id: str, name: str, nnodes: int, owner: JobOwner | None
) -> str:
    """Write the rung's secrets file and batch script into its job folder on the shared
    filesystem and `sbatch` it; returns the job id."""
    from traceladder.airflow.operators.docker import storage_environment

    settings = cluster.slurm
    work = settings.work_dir
    if work.startswith("~"):
        work = hook.home() + work[1:]
    job_dir = f"{work}/jobs/{name}"
    env, private = storage_environment(cluster.storage)
    env[ENV_SPOOL] = f"{work}/spool"
    env[SHARED_DIR.name] = work  # a container per node mounts it (job folders, spool)
    runner_argv = ["run-rung", "--spec-json", spec.to_json(), "--run-id", run_id]
    secrets = f"{job_dir}/secrets.env"
    hook.put_file(secrets, "".join(f"{k}={shlex.quote(v)}\n" for k, v in private.items()))
    script = sbatch_script(
        settings,
        name=name,
        nnodes=nnodes,
        timeout_s=spec.timeout_s,
        job_dir=job_dir,
        node_argv=runner_argv,
        environment=env,
        gpus_per_node=cluster.gpus_per_node,
        image=spec.image,
        secrets_file=secrets,
        owner=owner,
    )
    hook.put_file(f"{job_dir}/job.sh", script, mode="700")
    return hook.submit(f"{job_dir}/job.sh")


def failed_nodes(hook: SlurmHook, nodelist: str) -> str:
    """Which of the job's nodes is down or drained now (`node n2 down (reason)`), else the list."""
    bad = hook.unusable_nodes(None, nodes=nodelist)
    if not bad:
        return f"one of node(s) {nodelist}"
    return ", ".join(f"node {name} {why}" for name, why in sorted(bad.items()))


def stored_result(spec: Any, run_id: str) -> RungResult | None:
    """The runner's own result: metrics.json under the rung's prefix (None if it stored none)."""
    from traceladder.airflow.ladders import ladder_store
    from traceladder.storage.artifacts import ArtifactIntegrityError, rung_prefix, safe_key_part

    store = ladder_store(spec.ladder)[1]
    key = (
        f"{rung_prefix(spec.storage_prefix, spec.ladder, safe_key_part(run_id), spec.rung_id)}/{layout.METRICS_OBJECT}"
    )
    if not store.exists(key):
        return None
    try:
        raw = store.get_verified(key)
    except ArtifactIntegrityError:
        raw = store.get_bytes(key)
    return RungResult.from_json(raw, key)


def job_of(result: RungResult | None) -> str | None:
    """The Slurm job that stored `result` (the runner's provenance.slurm.job_id)."""
    slurm = (result.provenance or {}).get("slurm") if result is not None else None
    job = slurm.get("job_id") if isinstance(slurm, dict) else None
    return str(job) if job else None


def job_outcome(
    rung_id: str, where: str, state: JobState, result: RungResult | None, nodes_detail: str | None = None
) -> JSONObject:
    """A finished job's rung result for a synchronous caller: the stored result when this job stored
    it (a failed workload's own status and error, with the job named), else `failed` with one line
    naming the job, its login node and its state (NODE_FAIL names the down nodes)."""
    job: JSONObject = {"job_id": state.job_id, "state": state.state, "nodes": state.nodes, "login": where}
    if result is not None and job_of(result) == state.job_id:
        stored = result.to_dict()  # the run block's result is JSON
        if result.ok:
            return {**stored, "slurm": job}
        error = f"Slurm job {state.job_id} on {state.nodes} ({where}) ended {state.state}: {result.error}"
        return {**stored, "error": error, "slurm": job}
    if state.state == "NODE_FAIL":
        detail = f"ended NODE_FAIL: {nodes_detail or f'one of node(s) {state.nodes}'}"
    else:
        detail = f"ended {state.state} on {state.nodes or '(no node)'} (exit {state.exit_code}, {state.reason})"
    error = f"Slurm job {state.job_id} ({where}) {detail}; rung {rung_id} stored no result"
    return {"rung_id": rung_id, "status": "failed", "error": error, "slurm": job}


def run_rung_job(
    spec: Any,
    loaded: Any,
    ssh_conn_id: str,
    run_id: str,
    name: str,
    owner: JobOwner | None = None,
    down_grace_s: float = 600.0,
) -> JSONObject:
    """One rung as a Slurm job on the ladder's cluster, waited for here (a plain call: the triage's
    runs, inside its own task), and its stored metrics.json read back. Same partition, script and
    storage as the ladder's own rungs (`submit_rung`). A job that runs and ends is its outcome
    (`job_outcome`); a refusal (preflight, sbatch) or a lost login node raises SlurmError in one
    line; the job is cancelled if the wait itself is cut off."""
    settings = loaded.cluster.slurm
    nnodes = loaded.ladder.nnodes
    with SlurmHook(ssh_conn_id) as hook:
        refusal = preflight_refusal(hook, spec.rung_id, settings.partition, nnodes)
        if refusal is not None:
            raise SlurmError(f"{ssh_conn_id}: {refusal}")
        job_id = submit_rung(hook, spec, loaded.cluster, run_id, name, nnodes, owner)
        try:
            state = hook.wait(job_id, settings.poll_s, down_grace_s, time_limit_minutes(spec.timeout_s) * 60 + 300)
        except BaseException:
            hook.cancel(job_id)  # a wait cut off (task killed, login node lost): no job left running
            raise
        detail = None
        if state.state == "NODE_FAIL":
            try:
                detail = failed_nodes(hook, state.nodes)
            except SlurmError:
                detail = None  # the outcome names the job's node list instead
    try:
        result = stored_result(spec, run_id)
    except Exception as exc:  # noqa: BLE001 - the store unreachable, a torn document: the job is named
        raise SlurmError(
            f"Slurm job {job_id} ({ssh_conn_id}) ended {state.state}; its stored result could not be read: "
            f"{first_line(exc)}"
        ) from None
    return job_outcome(spec.rung_id, ssh_conn_id, state, result, detail)
