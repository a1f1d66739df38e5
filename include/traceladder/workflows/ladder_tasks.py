"""Task bodies of a ladder DAG. Each one is thin: it finds its inputs in the artifact store,
calls the package, and stores what it made. Heavy imports (pandas, the analysis engine) happen
inside the bodies, never when a DAG file is parsed."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from collections.abc import Mapping
from typing import TypedDict, cast

from traceladder.airflow.blocks import slot_spec  # noqa: F401 - the DAG's rung tasks call tasks.slot_spec
from traceladder.airflow.ladders import ladder_store
from traceladder.core.documents import (
    JSONObject,
    JSONValue,
    PlanDoc,
    RungResult,
    SummaryRef,
)
from traceladder.core.errors import first_line
from traceladder.runner.rung import RESULT_KEYS
from traceladder.core import layout
from traceladder.storage.artifacts import ArtifactSink, run_prefix

PLAN_OBJECT = layout.PLAN_OBJECT
STOP_OBJECT = layout.STOP_OBJECT


class RunParams(TypedDict, total=False):
    """The trigger form's params (workflows/ladder.py); a scheduled run has none."""

    ladder: str
    rungs: list[str] | None
    lens: str | None
    repeats: int | None
    override: str | None
    seed: int | None


def plan_run(ladder: str, run_id: str, grid: dict[str, list[int]], params: RunParams) -> dict[str, list[JSONObject]]:
    """Plan the run in randomised blocks, store plan.json (with its `design`: seed and block
    order), and hand every slot of the DAG's grid its spec (`[spec]`, or `[]` to skip it)."""
    from traceladder.plan.grid import PlanDoesNotFit, fill_slots
    from traceladder.plan.build import adaptive_plan, build_plan, plan_design, resolve_seed

    loaded, store = ladder_store(ladder)
    seed = resolve_seed(loaded, run_id, params.get("seed"))
    lens, repeats = params.get("lens") or "ladder", params.get("repeats") or None
    specs = build_plan(
        loaded,
        rungs=params.get("rungs") or None,
        lens=lens,
        repeats=repeats,
        override=params.get("override") or None,
        seed=seed,
    )
    rule = adaptive_plan(loaded, lens=lens, repeats=repeats)
    adaptive = None
    if rule:  # the stopping rule with its critical values, for the checks and for a reader
        from traceladder.stats.sequential import Design

        adaptive = Design.from_dict(cast(JSONObject, rule)).as_dict()
        # A stop.json belongs to this plan only: a cleared and rerun run id plans afresh (below).
        adaptive["planned_at"] = datetime.now(timezone.utc).isoformat()
    storage = loaded.cluster.storage
    spec_dicts = [s.to_dict() for s in specs]
    try:
        slots = fill_slots(spec_dicts, grid)
    except PlanDoesNotFit as exc:
        from airflow.sdk.exceptions import AirflowException

        raise AirflowException(str(exc)) from None
    plan_doc = PlanDoc(
        ladder=loaded.ladder.ladder,
        run_id=run_id,
        metric=loaded.ladder.metric,
        drift=loaded.ladder.drift,
        correction=loaded.ladder.correction,
        params=cast(JSONObject, dict(params)),  # the form's values are JSON
        design=plan_design(specs, seed),
        adaptive=adaptive,
        specs=spec_dicts,
        caveats=[*loaded.ladder.caveats] or None,  # the summary prints them first
    )
    store.put_bytes(
        f"{run_prefix(storage.prefix, loaded.ladder.ladder, run_id)}/{PLAN_OBJECT}",
        plan_doc.to_json().encode(),
        "application/json",
    )
    return slots


def _spec_store(spec_dict: JSONObject):
    from traceladder.plan.build import RungSpec

    spec = RungSpec.model_validate(spec_dict)
    return spec, ladder_store(spec.ladder)[1]


def run_local_rung(spec_dict: JSONObject, run_id: str) -> JSONObject:
    """The local backend: the shared runner, in this worker, against the S3 store."""
    from airflow.sdk.exceptions import AirflowFailException

    from traceladder.runner.rung import run_rung

    spec, store = _spec_store(spec_dict)
    result = run_rung(
        spec, run_id, store, run_over=_dag_run_over
    )  # an S3 outage past the budget raises: the task retries
    if result["status"] != "ok":  # the workload itself failed: never retried
        raise AirflowFailException(f"rung {spec.rung_id} {result['status']}: {result['error']}")
    return {k: result.get(k) for k in RESULT_KEYS}


def _dag_run_over(dag_id: str, run_id: str) -> bool:
    """Whether Airflow says the DAG run is over (the Task SDK's execution API; no database)."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    state = RuntimeTaskInstance.get_dagrun_state(dag_id, run_id)
    return str(getattr(state, "value", state)) in ("success", "failed")


def keep_warm_launcher(dag_id: str, run_id: str) -> None:
    """Renew the lease of the DAG run's warm launcher on this host, if one serves (a `look` between
    blocks: its pause must not let the launcher lapse)."""
    from traceladder.runner import forkserver_client

    forkserver_client.keep_alive(dag_id, run_id)


def stop_warm_launcher(dag_id: str, run_id: str) -> None:
    """The DAG run's warm launcher on this host (runner/forkserver_client.py) ends with the run."""
    from traceladder.runner import forkserver_client

    forkserver_client.stop_run(dag_id, run_id)


def _stored_plan(ladder: str, run_id: str) -> tuple[ArtifactSink, str, JSONObject]:
    """The ladder's store, the run's key prefix, and the plan.json its `plan` task stored, as it
    ran: after an adaptive ladder's early stop, without the measure blocks it skipped."""
    loaded, store = ladder_store(ladder)
    prefix = run_prefix(loaded.cluster.storage.prefix, loaded.ladder.ladder, run_id)
    stored = PlanDoc.from_json(store.get_bytes(f"{prefix}/{PLAN_OBJECT}"), f"{prefix}/{PLAN_OBJECT}")
    plan = stored.to_dict()  # the stats and summary code take the plan as JSON
    if stored.adaptive and store.exists(f"{prefix}/{STOP_OBJECT}"):
        from traceladder.stats.verdicts import apply_stop

        stop = json.loads(store.get_bytes(f"{prefix}/{STOP_OBJECT}"))
        if stop.get("planned_at") == stored.adaptive.get("planned_at"):  # not a stop of an earlier attempt
            plan = apply_stop(plan, stop)
    return store, prefix, plan


def check_stop(ladder: str, run_id: str, block: int) -> JSONObject:
    """Before measure block `block` of an adaptive ladder: the stopping rule on the finished
    blocks' stored metrics (stats/verdicts.sequential_look), and the ladder's time budget
    (stats/sequential.over_budget). On a stop, stop.json records the look and its `reason`
    (`target` or `budget`), and the caller skips the remaining blocks. Nothing to decide (a fixed
    plan, a lens block, the first `min` blocks) continues."""
    from traceladder.summary.collect import read_results

    store, prefix, plan = _stored_plan(ladder, run_id)
    from traceladder.stats.sequential import over_budget
    from traceladder.stats.verdicts import adaptive_design, measure_block_starts, sequential_look, spec_block

    doc = PlanDoc.from_dict(plan)
    if doc.stop:  # a retried look after its stop: the stop as it was recorded
        return {**doc.stop, "stop": True}
    design = adaptive_design(plan)
    if design is None or not design.min_blocks <= block < design.max_blocks:
        return {"stop": False, "blocks": block}
    planned_at_said = (doc.adaptive or {}).get("planned_at")

    done: JSONObject = {**plan, "specs": [s for s in doc.specs if spec_block(s) < block]}
    results = read_results(store, done)
    look = sequential_look(plan, results, block)
    reason = "target" if look["target_reached"] else None
    if reason is None and design.budget_s is not None:
        planned_at = datetime.fromisoformat(str(planned_at_said)).timestamp()
        if over_budget(planned_at, design.budget_s, measure_block_starts(done, results), time.time()):
            # the clock, not the data, ends the blocks here: this look is the final analysis
            look, reason = sequential_look(plan, results, block, final=True), "budget"
    look = {**look, "planned_at": planned_at_said, "reason": reason}
    if reason:
        store.put_bytes(f"{prefix}/{STOP_OBJECT}", json.dumps(look, indent=1).encode(), "application/json")
    return {"stop": reason is not None, **look}


def collect_traces(ladder: str, run_id: str) -> list[JSONObject]:
    """Every trace the rungs stored, read from their metrics.json (failed rungs may have none)."""
    from traceladder.summary.collect import read_results

    store, _, plan = _stored_plan(ladder, run_id)
    specs = {str(s["rung_id"]): s for s in PlanDoc.from_dict(plan).specs}
    items: list[JSONObject] = []
    for result in read_results(store, plan).values():
        expect = gate_expect(specs.get(result.rung_id) or {"lens": result.lens})
        items += [{"rung_id": result.rung_id, "key": key, "expect": expect} for key in result.traces]
    return items


def gate_expect(spec: Mapping[str, JSONValue]) -> JSONObject:
    """What a run's lens records, for the trace gate (analysis/reports/trace_gate.py): a torch
    lens host ops, GPU activity off the CPU proxy and the steps of its window; the other lenses
    (rocprofv3, rocm-trace-lite) GPU activity and no ops."""
    lens = str(spec.get("lens") or "")
    if not lens.startswith("torch"):
        return {"cpu": False, "gpu": True, "steps": None}
    window = spec.get("profile_window")
    ends = [w for w in window if isinstance(w, int)] if isinstance(window, (list, tuple)) else []
    steps = ends[1] - ends[0] if len(ends) == 2 else None
    return {"cpu": True, "gpu": spec.get("backend") != "local", "steps": steps}


def analyze_stored_trace(ladder: str, item: JSONObject) -> JSONObject:
    """A bad trace (truncated, corrupt gzip, failing its checksum) fails its task with one line
    and no retry: retrying cannot mend it. An S3 outage raises as is, so the task retries."""
    from airflow.sdk.exceptions import AirflowFailException

    from traceladder.analysis.api import TraceError, analyze_stored
    from traceladder.storage.artifacts import ArtifactIntegrityError

    loaded, store = ladder_store(ladder)
    try:
        result = analyze_stored(
            store,
            str(item["key"]),
            roofline_share=loaded.ladder.whats_left.share,
            gpu_model=loaded.ladder.cluster,
            expect=item.get("expect"),  # the trace gate's, from collect_traces (None: by format)
        )
    except (TraceError, ArtifactIntegrityError) as exc:
        raise AirflowFailException(first_line(exc)) from None
    if loaded.ladder.engine == "tracelens":  # TraceLens's own CSVs too, beside the builtin ones
        from traceladder.workflows.tracelens import run_tracelens

        result["tracelens"] = run_tracelens(ladder, str(item["key"]))
    return result


def join_rank_traces(ladder: str, run_id: str) -> list[JSONObject]:
    """Multi-rank collective reports for every run that stored more than one rank's trace."""
    from traceladder.analysis.api import analyze_stored_ranks
    from traceladder.summary.collect import read_results

    store, _, plan = _stored_plan(ladder, run_id)
    joined = []
    for result in read_results(store, plan).values():
        traces = [k for k in result.traces if ".pt.trace.json" in k]
        if len(traces) > 1:
            prefix = str(result.prefix)
            joined.append(analyze_stored_ranks(store, prefix, traces, ranks_per_node(result, len(traces))))
    return joined


def ranks_per_node(result: RungResult, world_size: int) -> int | None:
    """A multi-node rung's ranks per node (its world over the nodes of its Slurm job), given to
    the multi-rank analysis as TraceLens's --gpus_per_node, so that its collectives get node_id and
    node_span (intra_node/inter_node) columns even where traces carry no deviceProperties (the CPU
    proxy). None on one node: TraceLens's own rule (deviceProperties) then decides."""
    slurm = (result.provenance or {}).get("slurm")
    nnodes_value = slurm.get("nnodes") if isinstance(slurm, dict) else None
    nnodes = int(nnodes_value) if isinstance(nnodes_value, (int, str)) and str(nnodes_value).isdigit() else 1
    if nnodes <= 1 or world_size % nnodes:
        return None
    return world_size // nnodes


def summarize_run(ladder: str, run_id: str, logical_date: str | None = None) -> JSONObject:
    """The summary task: summary/publish.py `write_summary` reads in the documented order, collect
    -> build -> attribute -> render -> publish."""
    from traceladder.summary.publish import write_summary

    store, prefix, plan = _stored_plan(ladder, run_id)
    return write_summary(store, prefix, plan, logical_date)


def publish_run(ladder: str, run_id: str, summary_ref: JSONObject) -> JSONObject:
    from traceladder.summary.publish import publish_latest

    loaded, store = ladder_store(ladder)
    storage = loaded.cluster.storage
    entry = publish_latest(store, f"{storage.prefix}/{loaded.ladder.ladder}", summary_ref)
    # The summary is published by now: a failed notice (or alert review) must not make it look
    # unpublished, so it is reported (by ladder_status) as what it is.
    try:
        from traceladder.workflows.triage_tasks import review_alerts

        outcomes = review_alerts(loaded, store, str(summary_ref.get("run_id")))
        if (
            summary_ref.get("regressions")
            or summary_ref.get("provenance_changes")
            or summary_ref.get("suspects")
            or outcomes
        ):
            from traceladder.airflow.notifications.regression import RegressionNotifier

            RegressionNotifier(loaded.ladder.ladder, summary_ref, outcomes=outcomes)({})
    except Exception as exc:  # noqa: BLE001 - any webhook or alert store failure
        return {**entry, "notify_error": first_line(exc, typed=True)}
    return entry


def check_rungs(summary_ref: JSONObject | None, published: JSONObject | None) -> None:
    """Fail the DAG run visibly (it is the only leaf) when a rung failed, a trace went
    unanalysed or nothing was published; the summary is out by then."""
    from airflow.sdk.exceptions import AirflowException

    if not summary_ref:
        raise AirflowException("no summary was written")
    ref = SummaryRef.from_dict(summary_ref)
    problems = []
    if not published:
        problems.append("the summary was not published (latest.json and the index were not updated)")
    elif published.get("notify_error"):
        problems.append(f"the summary was published, but the regression notice failed: {published['notify_error']}")
    if ref.failed_rungs:
        problems.append(f"{len(ref.failed_rungs)} rung run(s) did not finish ok: {', '.join(ref.failed_rungs)}")
    if ref.unanalysed_traces:
        problems.append(f"{len(ref.unanalysed_traces)} trace(s) have no analysis: {', '.join(ref.unanalysed_traces)}")
    if problems:
        raise AirflowException("; ".join(problems))
