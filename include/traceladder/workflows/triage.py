"""Build the triage DAG (`traceladder-triage`, one for all ladders; docs/triage.md, "The triage
DAG"): suspects (the group, and whether another DAG run already triages it) → gate → confirm
(each suspect's A/B confirm) → ask → approval (only when the ladder's `triage.approve` is true and
a suspect was confirmed) → triage (bisect, explain: one engine call that reuses the recorded
confirms, stores every step and resumes on a retry) → record (whatever happened) → notify.

The approval gates the bisection and the explanation only, the GPU hours the issue means: the
confirm, one step, runs first, so a person approves a confirmed change, and a refusal still
records the confirm's verdict (label `not approved`). A weekly run with suspects starts it
(`start_triage`, dags.py).

**Pools.** A docker ladder's confirm and bisection run the rung's container on its docker host
(`docker_host`, triage_backends.py), so the task that runs them holds that host's Airflow pool, as
the ladder's rung slots do (`pool=host.pool`, `queue=host.name`, workflows/ladder.py): a triage
and a ladder run on one host take turns instead of meeting at the GPU-busy preflight. A task's
pool is fixed when the DAG is parsed, and this one DAG serves every ladder, so `confirm` and
`triage` come once per docker host that a ladder's triage runs on (`confirm_on_<host>`,
`triage_on_<host>`, that host's pool and queue), and a branch picks the ladder's own: `gate` the
confirm, `route` (after the approval) the triage. Local and Slurm ladders keep `confirm` and
`triage` (default pool and queue; a Slurm job waits in its partition's queue, as before). Why not
one task whose pool is chosen at run time: Airflow takes a task instance's pool from the parsed
task (a mapped task cannot map `pool`), and a task that skips itself when it is not its ladder's
would still wait for a slot of a busy pool first. The extra tasks cost nothing at parse (the
ladders are discovered once for the Params form) and a skipped branch starts no process."""

from __future__ import annotations

from datetime import timedelta
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG, Param, TriggerRule, get_current_context, task

from traceladder.workflows.triage_tasks import TRIAGE_DAG_ID, TriageParams
from traceladder.core.documents import JSONObject
from traceladder.workflows.triage_backends import docker_host

if TYPE_CHECKING:
    from traceladder.config.loader import LoadedLadder

APPROVAL_TIMEOUT = timedelta(hours=24)
# the confirm task's result in words (triage_tasks._brief's `confirm`), one rung after another
APPROVAL_BODY = (
    "{{ (ti.xcom_pull(task_ids='ask', key='confirms') or []) | map(attribute='confirm') | join('; ') }}. "
    "The bisection and the explanation will spend {{ ti.xcom_pull(task_ids='ask', key='estimate') }}. "
    "Reject, or no answer in 24 h, ends the "
    "triage `not approved`; the confirm's verdict stays recorded."
)
TRIAGE_RETRIES = 2


def triage_params(ladder_names: list[str]) -> dict[str, Param]:
    """The Params form: ladder, bad run (required), rung and good run (optional), `force` (start
    a finished, refused or failed triage again); `suspects` is what a weekly run passes (the rungs
    its summary names), for the reader."""
    return {
        "ladder": Param(
            ladder_names[0] if ladder_names else "",
            type="string",
            enum=ladder_names or [""],
            description="The ladder whose run is triaged",
        ),
        "bad_run": Param("", type="string", minLength=1, description="The run with the suspect (its run id)"),
        "rung": Param(None, type=["null", "string"], description="One suspect rung (empty: the run's whole group)"),
        "good_run": Param(None, type=["null", "string"], description="The last good run (empty: the history's)"),
        "suspects": Param([], type="array", description="Set by the weekly run: the rungs its summary names"),
        "force": Param(
            False,
            type="boolean",
            description="Start again a triage that is finished, not approved or failed: its recorded "
            "steps are reused, a skipped step runs again, and the approval is asked again",
        ),
    }


def on_host(ladders: Sequence[LoadedLadder]) -> dict[str, tuple[str, str]]:
    """Ladder -> (its triage's docker host, that host's pool), for the docker ladders."""
    out = {}
    for loaded in ladders:
        host = docker_host(loaded)
        if host is not None:
            out[loaded.ladder.ladder] = (host.name, host.pool)
    return out


def task_ids_for(ladder: str, hosts: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """The (confirm, triage) task ids that run a ladder's triage: its docker host's, else the plain ones."""
    host = hosts.get(ladder)
    return ("confirm", "triage") if host is None else (f"confirm_on_{host[0]}", f"triage_on_{host[0]}")


def _params() -> TriageParams:
    p = get_current_context()["params"]
    return TriageParams(
        ladder=str(p["ladder"]),
        bad_run=str(p["bad_run"]),
        rung=p.get("rung") or None,
        good_run=p.get("good_run") or None,
        force=bool(p.get("force")),
    )


def build_triage_dag(ladders: Sequence[LoadedLadder]) -> DAG:
    ladder_names = [loaded.ladder.ladder for loaded in ladders]
    hosts = on_host(ladders)
    pools = {name: pool for name, pool in hosts.values()}  # host -> pool, each host once
    with DAG(
        dag_id=TRIAGE_DAG_ID,
        description="Confirm, localize and explain a ladder run's suspects (issue 51)",
        schedule=None,
        catchup=False,
        default_args={"owner": "traceladder", "retries": 0},
        params=triage_params(ladder_names),
        tags=["traceladder", "triage"],
        doc_md=__doc__,
    ) as dag:

        @task
        def suspects() -> JSONObject:
            from traceladder.workflows.triage_tasks import LIVE_STATES, claim

            context = get_current_context()
            ti: Any = context["ti"]

            def is_live(run_id: str) -> bool:
                return str(ti.get_dagrun_state(dag_id=TRIAGE_DAG_ID, run_id=run_id)) in LIVE_STATES

            found = claim(_params(), str(context["run_id"]), is_live)
            print(f"traceladder triage: {found['reason']}")
            return found

        @task.branch
        def gate(found: JSONObject) -> list[str]:
            # nothing started: the rest skips; else the confirm task of the ladder's host (its pool)
            return [task_ids_for(str(found["ladder"]), hosts)[0]] if found["start"] else []

        @task(retries=TRIAGE_RETRIES)
        def confirm() -> list[JSONObject]:
            from traceladder.workflows.triage_tasks import run_confirms

            return run_confirms(_params(), get_current_context())

        @task(retries=TRIAGE_RETRIES)
        def triage() -> list[JSONObject]:
            from traceladder.workflows.triage_tasks import run_triage

            return run_triage(_params(), get_current_context(), approved=True)

        confirms: list[Any] = [confirm()]
        triages: list[Any] = [triage()]
        for host, pool in sorted(pools.items()):
            # the ladder's docker runs hold the host's pool, on its queue, as its rung slots do
            on = {"pool": pool, "queue": host}
            confirms.append(confirm.override(task_id=f"confirm_on_{host}", **on)())
            triages.append(triage.override(task_id=f"triage_on_{host}", **on)())

        @task.branch(trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
        def ask() -> list[str]:
            ti: Any = get_current_context()["ti"]
            found = ti.xcom_pull(task_ids="suspects") or {}
            confirmed = ti.xcom_pull(task_ids=task_ids_for(str(found.get("ladder")), hosts)[0]) or []
            ti.xcom_push(key="confirms", value=confirmed)  # the approval's body
            if not any(r["state"] == "running" for r in confirmed):
                return []  # none confirmed: each rung is finished with its label, nothing to bisect
            if found["approve"]:
                from traceladder.workflows.triage_tasks import bisection_estimate

                ti.xcom_push(key="estimate", value=bisection_estimate(_params(), confirmed))
            return ["approval"] if found["approve"] else ["no_approval"]

        approval = ApprovalOperator(
            task_id="approval",
            subject="traceladder triage of {{ params.ladder }} run {{ params.bad_run }}: run the bisection?",
            body=APPROVAL_BODY,
            defaults="Reject",  # a timeout takes Reject: it does not raise
            response_timeout=APPROVAL_TIMEOUT,
        )

        no_approval = EmptyOperator(task_id="no_approval")

        @task.branch(trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
        def route() -> list[str]:
            return [task_ids_for(_params()["ladder"], hosts)[1]]  # the ladder's host's triage task (its pool)

        @task(trigger_rule=TriggerRule.ALL_DONE)
        def record(found: JSONObject | None) -> JSONObject:
            from traceladder.workflows.triage_tasks import record_outcome

            if not found or not found.get("start"):
                reason = (found or {}).get("reason") or "the suspects task did not finish"
                print(f"traceladder triage: nothing recorded: {reason}")
                return {"recorded": [], "reason": reason}
            context = get_current_context()
            answer: Any = context["ti"].xcom_pull(task_ids="approval")
            chosen = (answer or {}).get("chosen_options") or []
            triage_id = task_ids_for(str(found["ladder"]), hosts)[1]
            triage_state = context["ti"].xcom_pull(task_ids=triage_id, key="return_value")
            recorded = record_outcome(
                _params(),
                [str(r) for r in found["rungs"]],  # type: ignore[union-attr]
                str(chosen[0]) if chosen else None,
                "done" if triage_state is not None else "without a result (failed, skipped or cut off)",
                str(context["run_id"]),
            )
            return {"recorded": list(recorded)}

        @task(trigger_rule=TriggerRule.ALL_DONE)
        def notify(found: JSONObject | None, recorded: JSONObject | None) -> int:
            from traceladder.workflows.triage_tasks import notify_outcome

            if not found or not found.get("start") or not recorded:
                return 0
            return notify_outcome(_params(), [str(r) for r in found["rungs"]])  # type: ignore[union-attr]

        found: Any = suspects()
        gate(found) >> confirms
        asked = ask()  # reads the suspects' XCom; only the confirms upstream, so no confirm run skips it
        confirms >> asked
        # a branch skips every direct downstream task it does not follow, and a rejected approval
        # every direct downstream task of its own (route, so the triage tasks too): the triage
        # waits on either path (the approval, or the empty no_approval) through route, and record
        # hangs off neither the branches nor the approval (it waits on the triage tasks, which end
        # only after the approval), so it runs whatever happened
        asked >> [approval, no_approval] >> route() >> triages
        recorded: Any = record(found)
        [*confirms, *triages] >> recorded
        notify(found, recorded)
    return dag
