"""Build ladder DAGs: plan → rungs (one mapped group per host, in the host's pool) → collect
traces → analysis (mapped per trace) → summary → publish → status.

The summary and everything after it run whatever happened to the rungs (trigger rules), so a
failed rung or an empty expansion (a lens with no traces) still gets a published summary that
marks it. The DAG files call these builders and stay a few lines long.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Asset, Param, TriggerRule, get_current_context, task

from traceladder.airflow import tasks
from traceladder.config.models import Host

DEFAULT_ARGS = {"owner": "traceladder", "retries": 0}
START = datetime(2026, 1, 1)


def ladder_asset(ladder: str) -> Asset:
    """Emitted when a ladder's summary is published; downstream DAGs can schedule on it."""
    return Asset(f"traceladder://{ladder}/latest", extra={"ladder": ladder})


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


def _build_tasks(fixed_ladder: str | None, hosts: list[Host], rung_timeout_s: int) -> None:
    """The task graph, inside an open DAG context. `fixed_ladder` is None for the trigger DAG
    (the ladder comes from its Params)."""

    @task
    def plan() -> dict[str, list[dict[str, Any]]]:
        context = get_current_context()
        params = dict(context["params"]) if fixed_ladder is None else {}
        return tasks.plan_run(_ladder_arg(fixed_ladder), _run_id(), [h.name for h in hosts], params)

    @task
    def host_specs(by_host: dict[str, list[dict[str, Any]]], host: str) -> list[dict[str, Any]]:
        return by_host.get(host, [])

    @task(map_index_template="{{ rung_id }}", execution_timeout=timedelta(seconds=rung_timeout_s + 300))
    def run_rung(spec: dict[str, Any]) -> dict[str, Any]:
        get_current_context()["rung_id"] = spec["rung_id"]  # type: ignore[typeddict-unknown-key]
        return tasks.run_local_rung(spec, _run_id())

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def collect_traces() -> list[dict[str, str]]:
        return tasks.collect_traces(_ladder_arg(fixed_ladder), _run_id())

    @task(map_index_template="{{ trace_key }}")
    def analyze(item: dict[str, str]) -> dict[str, Any]:
        get_current_context()["trace_key"] = f"{item['rung_id']}/{item['key'].rsplit('/', 1)[-1]}"  # type: ignore[typeddict-unknown-key]
        return tasks.analyze_stored_trace(_ladder_arg(fixed_ladder), item)

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def join_ranks() -> list[dict[str, Any]]:
        return tasks.join_rank_traces(_ladder_arg(fixed_ladder), _run_id())

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def summary() -> dict[str, Any]:
        return tasks.summarize_run(_ladder_arg(fixed_ladder), _run_id(), _logical_date())

    @task(outlets=[ladder_asset(fixed_ladder)] if fixed_ladder else [])
    def publish(summary_ref: dict[str, Any]) -> dict[str, Any]:
        return tasks.publish_run(_ladder_arg(fixed_ladder), _run_id(), summary_ref)

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def ladder_status(summary_ref: dict[str, Any] | None, published: dict[str, Any] | None) -> None:
        tasks.check_rungs(summary_ref, published)

    planned = plan()
    rung_groups = []
    for host in hosts:
        # The pool belongs to the mapped group (not to expand()): one host, one rung at a time.
        group = _docker_rungs(host, rung_timeout_s) if host.docker_url else run_rung.override(task_id=f"rungs_{host.name}", pool=host.pool)
        rung_groups.append(group.expand(spec=host_specs.override(task_id=f"specs_{host.name}")(planned, host.name)))
    traces = collect_traces()
    rung_groups >> traces
    analyses = analyze.expand(item=traces)
    joined = join_ranks()
    traces >> joined
    summary_ref = summary()
    [analyses, joined] >> summary_ref
    ladder_status(summary_ref, publish(summary_ref))


def _docker_rungs(host: Host, rung_timeout_s: int):
    """A docker host's mapped rung group: the runner image on the host's daemon, in its pool. The
    task's execution_timeout leaves the runner (deadline = the spec's timeout_s) time to upload
    partial artifacts before Airflow removes the container."""
    from traceladder.airflow.operators import RungDockerOperator

    return RungDockerOperator.partial(
        task_id=f"rungs_{host.name}",
        pool=host.pool,
        docker_url=host.docker_url,
        tls_conn_id=host.tls_conn_id,
        devices=list(host.devices),
        host_name=host.name,
        map_index_template="{{ rung_id }}",
        execution_timeout=timedelta(seconds=rung_timeout_s + 300),
    )


def build_weekly_dag(ladder_name: str, schedule: str | None, hosts: list[Host], description: str, rung_timeout_s: int) -> DAG:
    """One DAG per ladder file, on the ladder's own schedule."""
    with DAG(
        dag_id=f"traceladder-{ladder_name}",
        description=description or f"traceladder ladder {ladder_name}",
        schedule=schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        tags=["traceladder", "ladder", ladder_name],
    ) as dag:
        _build_tasks(ladder_name, hosts, rung_timeout_s)
    return dag


def build_trigger_dag(ladder_names: list[str], lens_names: list[str], hosts: list[Host], rung_timeout_s: int) -> DAG:
    """A manual DAG with a Params form: ladder, rungs, lens, repeats and one switch override."""
    params = {
        "ladder": Param(ladder_names[0] if ladder_names else "", enum=ladder_names or [""], description="Ladder file (include/configs/ladders)"),
        "rungs": Param([], type="array", items={"type": "string"}, description="Rung names to run; empty runs every rung"),
        "lens": Param("ladder", enum=["ladder", *lens_names], description="'ladder' runs the ladder's own lenses; a lens name profiles every selected rung with it"),
        "repeats": Param(None, type=["null", "integer"], minimum=1, maximum=50, description="Repeats per rung; empty keeps the ladder's"),
        "override": Param("", type="string", pattern=r"^$|^[A-Za-z0-9_.-]+=[A-Za-z0-9_.-]+$", description="One switch override SWITCH=VALUE for every rung, e.g. global_batch=16"),
    }
    with DAG(
        dag_id="traceladder-trigger",
        description="Run a ladder (or part of one) now, from the Params form",
        schedule=None,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        params=params,
        tags=["traceladder", "trigger"],
    ) as dag:
        _build_tasks(None, hosts, rung_timeout_s)
    return dag
