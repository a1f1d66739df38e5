"""Build ladder DAGs: plan → rung slots, block after block (`plan/grid.py`: one task per slot, in
the host's pool) → collect traces → analysis (mapped per trace) → summary → publish → status.

The summary and everything after it run whatever happened to the rungs (trigger rules), so a
failed rung or an empty expansion (a lens with no traces) still gets a published summary that
marks it. The DAG files call these builders and stay a few lines long.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, Param, TaskGroup, TriggerRule, get_current_context, task
from airflow.sdk.definitions.param import ParamsDict

from traceladder.core.documents import JSONObject
from traceladder.airflow import blocks
from traceladder.workflows import ladder_tasks as tasks
from traceladder.plan.grid import Grid, slot_key, slot_task_ids
from traceladder.plan.trigger_form import trigger_fields
from traceladder.workflows.retries import RetryArgs, rung_task_args, safe_task_args
from traceladder.config.models import Host, RetryPolicy

DEFAULT_ARGS = {"owner": "traceladder", "retries": 0}
START = datetime(2026, 1, 1)


def ladder_asset(ladder: str) -> Asset:
    """Emitted when a ladder's summary is published; downstream DAGs can schedule on it. The
    scheme is `x-`: Airflow normalizes no such URI, so the first Asset of a parse does not load
    every provider's URI handlers (about 0.1 s of each DAG parse)."""
    return Asset(f"x-traceladder://{ladder}/latest", extra={"ladder": ladder})


def _run_id() -> str:
    """Airflow's run id made key-safe once, so keys, summaries, the index and the UI agree."""
    from traceladder.storage.artifacts import safe_key_part

    return safe_key_part(str(get_current_context()["run_id"]))


def _logical_date() -> str:
    """The run's logical date (a manual run may have none: its run_after), for the history order."""
    context = get_current_context()
    when = context.get("logical_date") or context["dag_run"].run_after
    return when.isoformat(timespec="seconds")


def _ladder_arg(fixed_ladder: str | None) -> str:
    if fixed_ladder is not None:
        return fixed_ladder
    return str(get_current_context()["params"]["ladder"])


def _build_tasks(
    fixed_ladder: str | None,
    hosts: list[Host],
    rung_timeout_s: int,
    grid: Grid,
    retry: RetryPolicy | None = None,
    checks: list[int] | None = None,
) -> None:
    """The task graph, inside an open DAG context. `fixed_ladder` is None for the trigger DAG
    (the ladder comes from its Params); `grid` gives each host's slots per block; `retry` the ladder's
    retry policy (workflows/retries.py); `checks` the blocks an adaptive ladder's stopping rule may
    skip (`plan.grid.check_blocks`): a `look` task before each decides."""
    safe, rung_retry = safe_task_args(retry), rung_task_args(retry)

    @task(multiple_outputs=True, **safe)
    def plan() -> dict[str, list[JSONObject]]:
        context = get_current_context()
        params = dict(context["params"]) if fixed_ladder is None else {}
        return tasks.plan_run(_ladder_arg(fixed_ladder), _run_id(), grid, params)

    @task(execution_timeout=timedelta(seconds=rung_timeout_s + 300), **rung_retry)
    def run_rung(slot: list[JSONObject]) -> JSONObject:
        return tasks.run_local_rung(tasks.slot_spec(slot), _run_id())

    @task(**safe)
    def look(block: int) -> JSONObject:
        # A skip here skips this block's slots (all_success, none_skipped) and the next block's
        # look (all_success), so every later measure block: Airflow's own skip.
        dag_run = get_current_context()["dag_run"]
        tasks.keep_warm_launcher(dag_run.dag_id, dag_run.run_id)  # its lease spans the look (forkserver_client)
        decision = blocks.look_or_go_on(lambda: tasks.check_stop(_ladder_arg(fixed_ladder), _run_id(), block), block)
        tasks.keep_warm_launcher(dag_run.dag_id, dag_run.run_id)
        return blocks.continue_or_skip(decision)

    @task(trigger_rule=TriggerRule.ALL_DONE, **safe)
    def collect_traces() -> list[JSONObject]:
        return tasks.collect_traces(_ladder_arg(fixed_ladder), _run_id())

    @task(map_index_template="{{ trace_key }}", **safe)
    def analyze(item: JSONObject) -> JSONObject:
        get_current_context()["trace_key"] = f"{item['rung_id']}/{str(item['key']).rsplit('/', 1)[-1]}"  # type: ignore[typeddict-unknown-key]  # read by map_index_template
        return tasks.analyze_stored_trace(_ladder_arg(fixed_ladder), item)

    @task(trigger_rule=TriggerRule.ALL_DONE, **safe)
    def join_ranks() -> list[JSONObject]:
        return tasks.join_rank_traces(_ladder_arg(fixed_ladder), _run_id())

    @task(trigger_rule=TriggerRule.ALL_DONE, **safe)
    def summary() -> JSONObject:
        return tasks.summarize_run(_ladder_arg(fixed_ladder), _run_id(), _logical_date())

    @task(outlets=[ladder_asset(fixed_ladder)] if fixed_ladder else [], **safe)
    def publish(summary_ref: JSONObject) -> JSONObject:
        return tasks.publish_run(_ladder_arg(fixed_ladder), _run_id(), summary_ref)

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def ladder_status(summary_ref: JSONObject | None, published: JSONObject | None) -> None:
        context = get_current_context()  # the run's last task: its warm launcher goes now
        tasks.stop_warm_launcher(context["dag_run"].dag_id, str(context["run_id"]))
        tasks.check_rungs(summary_ref, published)

    planned = plan()
    before: Any = None  # the previous block's join
    check: Any = None  # the previous block's look, while the looks run back to back
    for k in range(max((len(sizes) for sizes in grid.values()), default=0)):
        with TaskGroup(group_id=f"block_{k:02d}"):
            lasts = []
            if k in (checks or []):
                upstream = [t for t in (before, check) if t is not None]
                check = look.override(task_id="look")(k)
                upstream >> check
            else:
                check = None
            for host in hosts:
                sizes = grid.get(host.name, [])
                previous = None
                for j in range(sizes[k] if k < len(sizes) else 0):
                    # A slot gets a list of zero or one spec from the plan: an empty slot skips itself.
                    # NONE_SKIPPED: the next run starts after a success or a failure alike, while an
                    # empty slot (a block's tail) skips the rest of the chain in the scheduler, with no
                    # task process each (the trigger DAG's grid is mostly empty slots).
                    rule = TriggerRule.NONE_SKIPPED if previous is not None else TriggerRule.ALL_SUCCESS
                    task_id = slot_task_ids(host.name, k, j)[1]
                    spec = planned[slot_key(host.name, k, j)]
                    if host.ssh_conn_id or host.docker_url:
                        op = _operator_slot(host, spec, task_id, rule, rung_timeout_s, rung_retry)
                    else:
                        # queue=<host>: under CeleryExecutor only that host's worker takes its rungs
                        # (docs/deployment.md)
                        op = run_rung.override(task_id=task_id, pool=host.pool, queue=host.name, trigger_rule=rule)(
                            spec
                        )
                    if previous is None and before is not None:
                        before >> op
                    elif previous is not None:
                        previous >> op
                    if check is not None:
                        # every slot waits on the look, so a stop skips the whole chain in one
                        # scheduler pass, not one slot a pass (dag.test: ~1 s each)
                        check >> op
                    previous = op
                if previous is not None:
                    lasts.append(previous)
            # The block ends when every host's chain is done, whatever happened in it: an empty
            # operator (no task process) that the next block's first slots wait for.
            join = EmptyOperator(task_id="done", trigger_rule=TriggerRule.ALL_DONE)
            (lasts or [before or planned]) >> join
        before = join
    traces = collect_traces()
    (before or planned) >> traces
    analyses = analyze.expand(item=traces)
    joined = join_ranks()
    traces >> joined
    summary_ref = summary()
    [analyses, joined] >> summary_ref
    published = publish(summary_ref)
    ladder_status(summary_ref, published)
    _start_triage(fixed_ladder, summary_ref, published)


def _start_triage(fixed_ladder: str | None, summary_ref: Any, published: Any) -> None:
    """After publish: start the triage DAG when the summary names suspects (a skip, not a failure,
    when it names none). A TriggerDagRunOperator, not an Asset event: its conf carries the
    ladder, run and suspects, and its deterministic run id makes a second trigger for the same
    ladder run start nothing (docs/triage.md)."""
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

    from traceladder.workflows.triage_tasks import TRIAGE_DAG_ID

    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def triage_conf(summary_ref: JSONObject | None, published: JSONObject | None) -> JSONObject | None:
        from traceladder.workflows.triage_tasks import weekly_triage_conf

        return weekly_triage_conf(_ladder_arg(fixed_ladder), summary_ref, published)

    conf = triage_conf(summary_ref, published)
    TriggerDagRunOperator(  # conf (an XComArg) makes it wait on triage_conf
        task_id="start_triage",
        trigger_dag_id=TRIAGE_DAG_ID,
        trigger_run_id="{{ ti.xcom_pull(task_ids='triage_conf')['trigger_run_id'] }}",
        conf=conf,
        skip_when_already_exists=True,
        wait_for_completion=False,
    )


def _operator_slot(
    host: Host,
    spec: Any,
    task_id: str,
    trigger_rule: TriggerRule,
    rung_timeout_s: int,
    rung_retry: RetryArgs | None,
) -> Any:
    """A docker host's or a Slurm cluster's rung slot (a local host's is the run_rung task), in
    the host's pool and on its queue (under Celery: the worker(s) that reach its daemon or hold
    the login node's SSH key)."""
    slot: dict[str, Any] = {
        "spec": spec,
        "task_id": task_id,
        "trigger_rule": trigger_rule,
        "pool": host.pool,
        "queue": host.name,
        **(rung_retry or {}),
    }
    if host.ssh_conn_id:
        from traceladder.airflow.operators.slurm import SlurmRungOperator

        # A batch job submitted over the login node's SSH connection, deferred while it runs. The
        # pool (include_deferred) keeps one rung per cluster at a time; the job's own --time ends
        # it before the task's execution_timeout.
        timeout = timedelta(seconds=rung_timeout_s + 600)
        return SlurmRungOperator(ssh_conn_id=host.ssh_conn_id, execution_timeout=timeout, **slot)
    from traceladder.airflow.operators.docker import RungDockerOperator

    # The runner image on the host's daemon. The execution_timeout leaves the runner (deadline =
    # the spec's timeout_s) time to upload partial artifacts before Airflow removes the container.
    return RungDockerOperator(
        docker_url=host.docker_url,
        tls_conn_id=host.tls_conn_id,
        devices=list(host.devices),
        host_name=host.name,
        execution_timeout=timedelta(seconds=rung_timeout_s + 300),
        **slot,
    )


def _ladder_dag(dag_id: str, description: str, schedule: str | None, tags: list[str]) -> DAG:
    """A DAG that runs ladders: no catch-up, one run at a time (a ladder's runs share its hosts)."""
    return DAG(
        dag_id=dag_id,
        description=description,
        schedule=schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        tags=tags,
    )


def build_weekly_dag(
    ladder_name: str,
    schedule: str | None,
    hosts: list[Host],
    description: str,
    rung_timeout_s: int,
    grid: Grid,
    retry: RetryPolicy | None = None,
    checks: list[int] | None = None,
) -> DAG:
    """One DAG per ladder file, on the ladder's own schedule; `grid` is its default plan's shape
    (`plan.grid.weekly_grid`), `retry` the ladder's retry policy, `checks` the blocks an adaptive
    ladder may skip (`plan.grid.check_blocks`)."""
    with _ladder_dag(
        f"traceladder-{ladder_name}",
        description or f"traceladder ladder {ladder_name}",
        schedule,
        ["traceladder", "ladder", ladder_name],
    ) as dag:
        _build_tasks(ladder_name, hosts, rung_timeout_s, grid, retry, checks)
    return dag


def build_trigger_dag(
    ladder_names: list[str],
    lens_names: list[str],
    hosts: list[Host],
    rung_timeout_s: int,
    grid: Grid,
    checks: list[int] | None = None,
) -> DAG:
    """A manual DAG with a Params form: ladder, rungs, lens, repeats, one switch override and the
    block-order seed. `grid` (`plan.grid.trigger_grid`) fits the largest plan the form can ask for;
    `checks` are the blocks any offered adaptive ladder may skip. `repeats` stays a number: empty
    runs an adaptive ladder adaptively (min to max blocks, its stopping rule); a number runs
    exactly that many blocks with no early stop."""
    params = {
        name: Param(field.pop("default"), **field) for name, field in trigger_fields(ladder_names, lens_names).items()
    }
    with _ladder_dag(
        "traceladder-trigger",
        "Run a ladder (or part of one) now, from the Params form",
        None,
        ["traceladder", "trigger"],
    ) as dag:
        _build_tasks(None, hosts, rung_timeout_s, grid, checks=checks)
    # The form's Params go on the DAG once its ~600 tasks exist: a task built inside a DAG with
    # Params deep-copies them (a third of this DAG's parse time, #53). A task's params at run time
    # are the DAG's, then its own, then the run's conf (`process_params`), so every task still
    # gets the form's values; the form and the trigger's validation read the DAG's.
    dag.params = ParamsDict(params)
    return dag
