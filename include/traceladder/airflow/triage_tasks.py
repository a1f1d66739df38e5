"""Task bodies of the triage DAG (airflow/triage_dag.py): which suspects to triage and whether
another DAG run already does, the engine's call with the backend's runs, the record whatever
happened, and the message. Thin: the engine (triage/engine.py) does the work and stores every step
in triage.json, so a retried task resumes it."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypedDict

from traceladder.airflow.ladders import ladder_store
from traceladder.core import layout
from traceladder.core.documents import JSONObject, Summary, TriageDoc, TriageSuspect
from traceladder.core.errors import TraceladderError

if TYPE_CHECKING:  # the triage engine imports the statistics (numpy, scipy): never at DAG parse
    from traceladder.config.loader import LoadedLadder
    from traceladder.storage.artifacts import ArtifactSink
    from traceladder.triage.confirm import RunBlock
    from traceladder.triage.engine import TriageContext
    from traceladder.triage.explain import RunProfiled
    from traceladder.triage.suspects import RunSetup

TRIAGE_DAG_ID = "traceladder-triage"
CLAIM_OBJECT = "claim.json"
LIVE_STATES = ("queued", "running")
Suspects = list[tuple[TriageSuspect, "RunSetup", "RunSetup"]]
ImageTag = tuple[str, str | None, str | None]  # (image reference, manifest digest, created)


class TriageError(TraceladderError):
    """A triage that cannot start (a backend it cannot run on, no such suspect): one line."""


class TriageParams(TypedDict, total=False):
    """The triage DAG's Params (airflow/triage_dag.py)."""

    ladder: str
    bad_run: str
    rung: str | None
    good_run: str | None


def triage_run_id(ladder: str, run_id: str) -> str:
    """The triage DAG run a ladder run starts: one per ladder run, so a second trigger is a no-op."""
    return f"triage__{ladder}__{layout.safe_key_part(run_id)}"


def _claim_key(prefix: str, ladder: str, run_id: str) -> str:
    """``<run>/triage/claim.json``: which triage DAG run works on this ladder run's group."""
    return layout.join(layout.run_prefix(prefix, ladder, run_id), layout.TRIAGE_FOLDER, CLAIM_OBJECT)


def selected_suspects(
    loaded: LoadedLadder, store: ArtifactSink, run_id: str, rung: str | None = None, good_run: str | None = None
) -> Suspects:
    """The run's suspects (its summary's `history.suspects`), cut to `rung`; `good_run` replaces
    the last good run the history chose. No suspect left is a TriageError naming the run."""
    from traceladder.triage.suspects import diff, find_suspects, run_setup

    prefix, ladder = loaded.cluster.storage.prefix, loaded.ladder.ladder
    key = layout.join(layout.summary_prefix(layout.run_prefix(prefix, ladder, run_id)), layout.SUMMARY_JSON)
    if not store.exists(key):
        raise TriageError(f"ladder {ladder}: run {run_id} has no summary ({key})")
    summary = Summary.from_json(store.get_bytes(key), key)
    found = find_suspects(store, prefix, ladder, run_id, summary.history or {})
    if rung:
        found = [s for s in found if s[0].rung == rung]
    if not found:
        named = f" for rung {rung}" if rung else ""
        raise TriageError(f"ladder {ladder}: run {run_id} has no suspect{named} in its summary ({key})")
    if good_run:
        out: Suspects = []
        for suspect, _good, bad in found:
            good = run_setup(store, prefix, ladder, good_run, suspect.rung)
            out.append((replace(suspect, good_run_id=good_run, diff=diff(good, bad)), good, bad))
        found = out
    return found


def claim(params: TriageParams, dag_run_id: str, is_live: Callable[[str], bool]) -> JSONObject:
    """Whether this DAG run triages the group: not when every rung's triage.json is finished
    (`done`, `not approved`), nor while another live DAG run holds the claim. Otherwise it takes
    the claim (a failed earlier run's unfinished triage is resumed) and names the rungs."""
    from traceladder.triage import record

    ladder, run_id = params["ladder"], params["bad_run"]
    loaded, store = ladder_store(ladder)
    rungs = [s.rung for s, _, _ in selected_suspects(loaded, store, run_id, params.get("rung"), params.get("good_run"))]
    prefix = loaded.cluster.storage.prefix
    out: JSONObject = {
        "ladder": ladder,
        "bad_run": run_id,
        "rungs": list(rungs),
        "approve": loaded.ladder.triage.approve,
    }
    states = {}
    for rung in rungs:
        doc = record.load(store, record.keys(prefix, ladder, run_id, rung)[0])
        states[rung] = doc.state if doc else None
    if all(s in ("done", "not approved") for s in states.values()):
        finished = ", ".join(f"{r}: {s}" for r, s in states.items())
        return {**out, "start": False, "reason": f"already triaged ({finished}): nothing started"}
    key = _claim_key(prefix, ladder, run_id)
    if store.exists(key):
        holder = str(json.loads(store.get_bytes(key)).get("dag_run_id") or "")
        if holder and holder != dag_run_id and is_live(holder):
            return {**out, "start": False, "reason": f"being triaged by DAG run {holder}: nothing started"}
    body = {"dag_run_id": dag_run_id, "rungs": rungs, "at": record.now()}
    store.put_bytes(key, json.dumps(body).encode(), "application/json")
    return {**out, "start": True, "reason": f"triaging {', '.join(rungs)}"}


def run_block_for(loaded: LoadedLadder, run_id: str, context: Any) -> RunBlock:
    """The backend's runs of a confirm: local, the real runner on this worker; docker, the rung's
    container through RungDockerOperator on the ladder's first docker host (the one the ladder's
    rungs run on); slurm, a batch job per run on the ladder's cluster and partition, waited for in
    this task (`slurm_run_block`)."""
    backend = loaded.ladder.backend
    if backend == "local":
        from traceladder.triage.confirm import local_run_block

        return local_run_block(run_id=f"{run_id}-triage")
    if backend == "docker":
        return _docker_run_block(loaded, run_id, context)
    if backend == "slurm":
        return slurm_run_block(loaded, run_id, context)
    raise TriageError(f"ladder {loaded.ladder.ladder}: triage on the {backend} backend is not wired yet")


def _docker_runner(loaded: LoadedLadder, run_id: str, context: Any) -> Callable[[JSONObject, str], JSONObject]:
    """(spec, name) -> the runner's whole result: one RungDockerOperator run on the ladder's first
    docker host, its container labelled with this task instance (a preflight elsewhere stops it
    only once Airflow no longer runs this task). A run that fails is {"status": "failed", "error"}."""
    from traceladder.airflow.operators.docker import RungDockerOperator
    from traceladder.core.errors import first_line

    hosts = [h for h in loaded.cluster.hosts if h.docker_url]
    if not hosts:
        raise TriageError(
            f"ladder {loaded.ladder.ladder}: cluster {loaded.ladder.cluster} has no docker host for the triage"
        )
    host = hosts[0]
    ti = context["ti"]
    index = getattr(ti, "map_index", None)
    owner = (str(ti.dag_id), str(ti.run_id), str(ti.task_id), -1 if index is None else int(index))

    def run(spec: JSONObject, name: str) -> JSONObject:
        op = RungDockerOperator(
            spec=dict(spec),
            run_id=f"{run_id}-triage",
            task_id=name,
            docker_url=host.docker_url,
            tls_conn_id=host.tls_conn_id,
            devices=list(host.devices),
            host_name=host.name,
            result_keys=None,
            owner_ti=owner,
        )
        try:
            return dict(op.execute(context))
        except Exception as exc:  # noqa: BLE001 - a run that fails is a missing cell (or a skipped candidate)
            return {"status": "failed", "error": first_line(exc)}

    return run


def _docker_run_block(loaded: LoadedLadder, run_id: str, context: Any) -> RunBlock:
    run = _docker_runner(loaded, run_id, context)
    return lambda spec, side, block: run(spec, f"triage_{side}_{block}")


def docker_run_profiled(loaded: LoadedLadder, store: ArtifactSink, run_id: str, context: Any) -> RunProfiled:
    """The docker backend's profiled run for the explanation: the rung's container as a confirm
    runs it; its rank-0 trace, which the runner stored, read back into a scratch folder."""
    import tempfile
    from pathlib import Path

    from traceladder.core.documents import as_list

    run = _docker_runner(loaded, run_id, context)
    work = Path(tempfile.mkdtemp(prefix="traceladder-explain-traces-"))

    def profiled(spec: JSONObject, side: str) -> Path | None:
        result = run(spec, f"triage_explain_{side}")
        keys = [str(k) for k in as_list(result.get("traces") or [])]
        rank0 = [k for k in keys if k.rsplit("/", 1)[-1].startswith("rank0.")]
        if result.get("status") != "ok" or not keys:
            return None
        key = (rank0 or keys)[0]
        path = work / side / key.rsplit("/", 1)[-1]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.get_bytes(key))
        return path

    return profiled


def slurm_run_block(loaded: LoadedLadder, run_id: str, context: Any = None, down_grace_s: float = 600.0) -> RunBlock:
    """Each confirm run as a Slurm job through the cluster's login node (the SSH connection of its
    first host, as the ladder's rungs use), on the ladder's partition and node count, submitted,
    waited for and read back in this task (operators/slurm.py `run_rung_job`: a plain call, not
    the deferred operator). The jobs' comment names the triage's task instance, so the ladder
    rungs' orphan sweep leaves them alone while it runs; this task's first run cancels the jobs an
    earlier try of it left. A run that cannot run or fails is `failed` with one line naming the
    login node and the job; in a confirm's first block that makes the candidate skipped."""
    import uuid

    from traceladder.airflow.hooks.slurm import JobOwner, SlurmError, SlurmHook, job_name
    from traceladder.airflow.operators.slurm import run_rung_job
    from traceladder.core.errors import first_line
    from traceladder.plan.build import RungSpec

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
        name = job_name(owner.dag_id if owner else TRIAGE_DAG_ID, owner.run_id if owner else run_id, key)
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
    from traceladder.triage.registry import ImageRef

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
    loaded: LoadedLadder, store: ArtifactSink, run_id: str, suspects: Suspects, context: Any, approved: bool
) -> TriageContext:
    """The engine's context for a suspect group with the ladder's backend: its runs, its profiled
    runs for the explanation, and (docker) the registry's tags between the two images."""
    from traceladder.triage.engine import context_for
    from traceladder.triage.explain import local_run_profiled

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
        run_block_for(loaded, run_id, context),
        run_profiled=profiled,
        approve=lambda: approved,
        image_tags=tags,
        image_tags_reason=reason,
    )


def triage_suspects(
    loaded: LoadedLadder, store: ArtifactSink, run_id: str, suspects: Suspects, context: Any, approved: bool
) -> list[TriageDoc]:
    """The engine on a suspect group (confirm, bisect, explain; recorded confirms reused)."""
    from traceladder.triage.engine import triage_run

    return triage_run(engine_context(loaded, store, run_id, suspects, context, approved), suspects)


def _claimed(params: TriageParams) -> tuple[LoadedLadder, ArtifactSink, str, Suspects]:
    ladder, run_id = params["ladder"], params["bad_run"]
    loaded, store = ladder_store(ladder)
    return loaded, store, run_id, selected_suspects(loaded, store, run_id, params.get("rung"), params.get("good_run"))


def run_confirms(params: TriageParams, context: Any) -> list[JSONObject]:
    """Each suspect's confirm, before any approval (a confirm is one step, so it is not gated);
    a retry reuses the recorded ones. Each rung's state, label and its confirm in words: a
    confirmed rung is still `running`, waiting for the bisection."""
    from traceladder.triage.engine import confirm_suspects

    loaded, store, run_id, suspects = _claimed(params)
    ctx = engine_context(loaded, store, run_id, suspects, context, approved=False)
    return [_brief(doc) for doc in confirm_suspects(ctx, suspects)]


def run_triage(params: TriageParams, context: Any, approved: bool) -> list[JSONObject]:
    """The engine on the claimed group (bisect, explain, record each step); a retry resumes it
    from triage.json, and the confirms of the `confirm` task are reused. Returns each rung's
    state and label."""
    loaded, store, run_id, suspects = _claimed(params)
    return [_brief(doc) for doc in triage_suspects(loaded, store, run_id, suspects, context, approved)]


def _brief(doc: TriageDoc) -> JSONObject:
    from traceladder.triage import record

    return {
        "rung": doc.rung,
        "state": doc.state,
        "label": doc.label,
        "first_bad": doc.first_bad,
        "confirm": f"{doc.rung}: {record.confirm_summary(doc)}",
    }


def record_outcome(
    params: TriageParams, rungs: Sequence[str], approval: str | None, triage_state: str | None
) -> list[JSONObject]:
    """triage.json whatever happened: a refused approval (Reject, or its timeout's default) ends
    each unfinished rung `not approved`; a triage task that failed leaves its steps and ends it
    `failed` with the task's state. A finished triage is left as it is."""
    from traceladder.triage import record

    ladder, run_id = params["ladder"], params["bad_run"]
    loaded, store = ladder_store(ladder)
    prefix = loaded.cluster.storage.prefix
    pending = {
        s.rung: (s, g, b)
        for s, g, b in selected_suspects(loaded, store, run_id, params.get("rung"), params.get("good_run"))
    }
    out = []
    for rung in rungs:
        key, report_key = record.keys(prefix, ladder, run_id, rung)
        doc = record.load(store, key)
        if doc is None or doc.state == "running":
            suspect, good, bad = pending[rung]
            base = doc or TriageDoc(
                ladder=ladder, run_id=run_id, rung=rung, state="running", suspect=suspect, group=list(rungs)
            )
            reproduce: JSONObject = {
                "good": record.reproduce_command(good.pinned_spec, f"{run_id}-triage-good"),
                "bad": record.reproduce_command(bad.pinned_spec, f"{run_id}-triage-bad"),
            }
            if approval == "Reject":
                doc = replace(
                    base,
                    state="not approved",
                    label=record.NOT_APPROVED,
                    reproduce=reproduce,
                    conclusion="the bisection was not approved (rejected, or its approval timed out); "
                    + record.confirm_summary(base),
                )
            else:
                doc = replace(
                    base,
                    state="failed",
                    reproduce=reproduce,
                    error=f"the triage task ended {triage_state or 'without running'}",
                )
            doc = record.save(store, key, doc)
            record.save_report(store, report_key, doc)
        out.append({**_brief(doc), "key": key, "report": report_key})
    return out


def notify_outcome(params: TriageParams, rungs: Sequence[str]) -> int:
    """One message per finished triage (notifications/triage.py); returns how many were sent."""
    from traceladder.triage import record

    from traceladder.airflow.notifications.triage import TriageNotifier

    ladder, run_id = params["ladder"], params["bad_run"]
    loaded, store = ladder_store(ladder)
    sent = 0
    for rung in rungs:
        key, report_key = record.keys(loaded.cluster.storage.prefix, ladder, run_id, rung)
        doc = record.load(store, key)
        if doc is None or doc.state == "running":
            continue
        TriageNotifier(doc, report_key)({})
        sent += 1
    return sent


def weekly_triage_conf(ladder: str, summary_ref: JSONObject | None, published: JSONObject | None) -> JSONObject | None:
    """The triage DAG's conf after a published ladder run with suspects; None (the trigger is
    skipped) when it has none or nothing was published."""
    from traceladder.core.documents import SummaryRef

    if not summary_ref or not published:
        return None
    ref = SummaryRef.from_dict(summary_ref)
    if not ref.suspects:
        return None
    return {
        "ladder": ladder,
        "bad_run": ref.run_id,
        "rung": None,
        "good_run": None,
        "suspects": [str(s.get("rung")) for s in ref.suspects],
        "trigger_run_id": triage_run_id(ladder, ref.run_id),
    }
