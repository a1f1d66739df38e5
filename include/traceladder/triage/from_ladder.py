"""A triage wired from its ladder file: the build catalog, the lens overlay of the ladder's cheapest
torch lens, the `triage:` budget and candidates (`context_for`), and the suspects a triage DAG run
was asked for (`selected_suspects`). The only triage module besides runs.py that reads a ladder's
config or plan: the steps (suspects, confirm, bisect, explain, record, engine) take what this
module builds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache

from traceladder.config.loader import LoadedLadder
from traceladder.core.documents import JSONObject
from traceladder.core.errors import TraceladderError
from traceladder.stats.decisions import NoiseHistory
from traceladder.storage.artifacts import ArtifactSink
from traceladder.triage.bisect import BuildChanges
from traceladder.triage.confirm import Budget, RunBlock
from traceladder.triage.engine import TriageContext
from traceladder.triage.explain import RunProfiled, cheapest_torch_lens, lens_overlay
from traceladder.triage.record import Basis
from traceladder.triage.suspects import Suspects, diff, history_noise, run_setup, stored_suspects, summary_key


class TriageError(TraceladderError):
    """A triage that cannot start (a backend it cannot run on, no such suspect): one line."""


def catalog(loaded: LoadedLadder) -> dict[str, BuildChanges]:
    """The ladder file's build catalog as the triage applies it."""
    return {
        b.name: BuildChanges(
            b.name,
            b.created.isoformat(),
            {k: v for k, v in b.changes.model_args.items()},  # type: ignore[misc]
            dict(b.changes.docker_env_vars),
        )
        for b in loaded.ladder.builds
    }


def lens_overlays(loaded: LoadedLadder) -> Callable[[str], JSONObject | None]:
    """rung -> what the ladder's cheapest torch lens changes in that rung's spec (None: no torch lens)."""
    from traceladder.config.models import LENS_SWITCH
    from traceladder.plan.build import build_plan

    lens = cheapest_torch_lens({str(k): v for k, v in loaded.ladder.switches[LENS_SWITCH].values.items()})

    def overlay(rung: str) -> JSONObject | None:
        if lens is None:
            return None
        measure = build_plan(loaded, rungs=[rung], lens="none", repeats=1)[0]
        profiled = build_plan(loaded, rungs=[rung], lens=lens, repeats=1)[0]
        return lens_overlay(measure.to_dict(), profiled.to_dict())

    return overlay


def devices_per_run(loaded: LoadedLadder) -> int:
    """The devices one of the ladder's runs holds: its nodes times the cluster's GPUs per node (1
    where the cluster names none: the CPU proxy, whose device-hours are CPU-hours)."""
    return loaded.ladder.nnodes * (loaded.cluster.gpus_per_node or 1)


def basis(loaded: LoadedLadder, dag_run_id: str | None = None) -> Basis:
    """What the ladder's triage judges by and runs on (triage.json's metric, level and devices)."""
    return Basis(loaded.ladder.metric, loaded.ladder.triage.alpha, devices_per_run(loaded), dag_run_id)


def context_for(
    loaded: LoadedLadder,
    store: ArtifactSink,
    run_id: str,
    run_block: RunBlock,
    *,
    run_profiled: RunProfiled | None = None,
    approve: Callable[[], bool] | None = None,
    image_tags: Sequence[tuple[str, str | None, str | None]] = (),
    image_tags_reason: str | None = None,
    force: bool = False,
    dag_run_id: str | None = None,
) -> TriageContext:
    """A triage's context from the ladder file: its catalog, `triage:` budgets and candidates, the
    retries of a run the infrastructure failed (`retries.rung_infra`), metric, lenses and each
    suspect's noise history; the backend's runners, the approval gate, `force` and the triage DAG
    run (None outside Airflow) from the caller."""
    t = loaded.ladder.triage
    prefix, metric = loaded.cluster.storage.prefix, loaded.ladder.metric

    @lru_cache(maxsize=None)
    def noise(good_run_id: str) -> NoiseHistory | None:
        return history_noise(store, prefix, loaded.ladder.ladder, good_run_id, metric)

    return TriageContext(
        store=store,
        prefix=loaded.cluster.storage.prefix,
        ladder=loaded.ladder.ladder,
        run_id=run_id,
        run_block=run_block,
        budget=Budget(
            t.budget_blocks,
            t.budget_s,
            t.alpha,
            retries=loaded.ladder.retries.rung_infra,
            runs=t.budget_runs,
            device_hours=t.budget_device_hours,
            devices=devices_per_run(loaded),
        ),
        metric=loaded.ladder.metric,
        builds=catalog(loaded),
        image_tags=image_tags,
        image_tags_reason=image_tags_reason,
        explicit_candidates=list(t.candidates),
        run_profiled=run_profiled,
        lens_overlay=lens_overlays(loaded),
        approve=approve if t.approve else None,
        history=lambda suspect: noise(suspect.good_run_id),
        force=force,
        max_culprits=t.max_culprits,
        dag_run_id=dag_run_id,
    )


def selected_suspects(
    loaded: LoadedLadder, store: ArtifactSink, run_id: str, rung: str | None = None, good_run: str | None = None
) -> Suspects:
    """The run's suspects (its summary's `history.suspects`), cut to `rung`; `good_run` replaces
    the last good run the history chose. No suspect left is a TriageError naming the run."""
    prefix, ladder = loaded.cluster.storage.prefix, loaded.ladder.ladder
    key = summary_key(prefix, ladder, run_id)
    if not store.exists(key):
        raise TriageError(f"ladder {ladder}: run {run_id} has no summary ({key})")
    found = stored_suspects(store, prefix, ladder, run_id)
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
