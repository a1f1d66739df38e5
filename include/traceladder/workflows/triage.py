"""Build the triage DAG (`traceladder-triage`, one for all ladders; docs/triage.md, "The triage
DAG"): suspects (the group, and whether another DAG run already triages it) → gate → confirm
(each suspect's A/B confirm) → ask → approval (only when the ladder's `triage.approve` is true and
a suspect was confirmed) → triage (bisect, explain: one engine call that reuses the recorded
confirms, stores every step and resumes on a retry) → record (whatever happened) → notify.

The approval gates the bisection and the explanation only, the GPU hours the issue means: the
confirm, one step, runs first, so a person approves a confirmed change, and a refusal still
records the confirm's verdict (label `not approved`). A weekly run with suspects starts it
(`start_triage`, dags.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG, Param, TriggerRule, get_current_context, task

from traceladder.workflows.triage_tasks import TRIAGE_DAG_ID, TriageParams
from traceladder.core.documents import JSONObject

APPROVAL_TIMEOUT = timedelta(hours=24)
# the confirm task's result in words (triage_tasks._brief's `confirm`), one rung after another
APPROVAL_BODY = (
    "{{ (ti.xcom_pull(task_ids='confirm') or []) | map(attribute='confirm') | join('; ') }}. "
    "The bisection and the explanation take GPU hours. Reject, or no answer in 24 h, ends the "
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


def _params() -> TriageParams:
    p = get_current_context()["params"]
    return TriageParams(
        ladder=str(p["ladder"]),
        bad_run=str(p["bad_run"]),
        rung=p.get("rung") or None,
        good_run=p.get("good_run") or None,
        force=bool(p.get("force")),
    )


def build_triage_dag(ladder_names: list[str]) -> DAG:
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
            return ["confirm"] if found["start"] else []  # nothing started: the rest skips

        @task(retries=TRIAGE_RETRIES)
        def confirm() -> list[JSONObject]:
            from traceladder.workflows.triage_tasks import run_confirms

            return run_confirms(_params(), get_current_context())

        @task.branch
        def ask(found: JSONObject, confirmed: list[JSONObject]) -> list[str]:
            if not any(r["state"] == "running" for r in confirmed):
                return []  # none confirmed: each rung is finished with its label, nothing to bisect
            return ["approval"] if found["approve"] else ["no_approval"]

        approval = ApprovalOperator(
            task_id="approval",
            subject="traceladder triage of {{ params.ladder }} run {{ params.bad_run }}: run the bisection?",
            body=APPROVAL_BODY,
            defaults="Reject",  # a timeout takes Reject: it does not raise
            response_timeout=APPROVAL_TIMEOUT,
        )

        no_approval = EmptyOperator(task_id="no_approval")

        @task(trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS, retries=TRIAGE_RETRIES)
        def triage() -> list[JSONObject]:
            from traceladder.workflows.triage_tasks import run_triage

            return run_triage(_params(), get_current_context(), approved=True)

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
            triage_state = context["ti"].xcom_pull(task_ids="triage", key="return_value")
            recorded = record_outcome(
                _params(),
                [str(r) for r in found["rungs"]],  # type: ignore[union-attr]
                str(chosen[0]) if chosen else None,
                "done" if triage_state is not None else "without a result (failed, skipped or cut off)",
            )
            return {"recorded": list(recorded)}

        @task(trigger_rule=TriggerRule.ALL_DONE)
        def notify(found: JSONObject | None, recorded: JSONObject | None) -> int:
            from traceladder.workflows.triage_tasks import notify_outcome

            if not found or not found.get("start") or not recorded:
                return 0
            return notify_outcome(_params(), [str(r) for r in found["rungs"]])  # type: ignore[union-attr]

        found: Any = suspects()
        confirmed: Any = confirm()
        gate(found) >> confirmed
        run = triage()
        # a branch skips every direct downstream task it does not follow, and a rejected approval
        # every direct downstream task of its own: the triage waits on either path (the approval,
        # or the empty no_approval), and record hangs off neither the branches nor the approval
        # (it waits on the triage, which ends only after the approval), so it runs whatever happened
        ask(found, confirmed) >> [approval, no_approval] >> run
        recorded: Any = record(found)
        [confirmed, run] >> recorded
        notify(found, recorded)
    return dag
