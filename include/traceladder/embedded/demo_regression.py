"""`traceladder demo-regression` (`make demo-regression`): a regression found, confirmed, bisected
and explained on the embedded default (issue 51), every figure measured in the run.

The `proxy-regression` ladder runs week after week through the path `make demo` uses: the embedded
S3 (SeaweedFS) and the ladder DAG under Airflow's `dag.test()`, each week at its own logical date
on its own build of the ladder's catalog, each published to the index. As few weeks as the suspect
rule needs, plus one (stats/history.py: a prediction bound needs SUSPECT_MIN_RUNS runs in the segment before)
run the oldest builds; the last week runs the newest build, which carries the injected work of two
culprit builds (issue 58: each +25% to +100% in its own A/B, the larger at least 1.5 times the
smaller). Its summary names the rung a suspect, and the triage engine (triage/engine.py
`triage_ladder_run`, the real runner on this host) confirms it, searches the builds between the
last good week's and the newest for their culprits, names each with its share of the change, and
explains the largest with a profiled run of each end.

Which build a week runs is the ladder file's `build:`: each week writes a one-line ladder file that
extends the packaged one with that week's build, in a folder TRACELADDER_LADDERS_DIR points at, as
a deployment would move `build:` to the newest nightly. The demo owns its ladder's history: it
removes the ladder's earlier objects from the demo's S3 data before its first week, so a second
demo starts from an empty history (and its triage is not the first one's, left as it was), and its
local copy under .traceladder/demo/proxy-regression/ with it."""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from traceladder.config.loader import CONFIG_DIR, LoadedLadder
from traceladder.core import env_vars, layout
from traceladder.core.documents import IndexEntry, JSONObject, TriageDoc, as_object
from traceladder.core.summary_parts import RungPoint
from traceladder.core.errors import TraceladderError
from traceladder.embedded.demo import STATE_DIR
from traceladder.stats.history import SUSPECT_MIN_RUNS

# One week more than the suspect rule's minimum: from 3 weeks the 99% prediction bound uses
# t(0.995, 2 df) = 9.9, so one noisy week on a loaded machine can widen it past a 4x jump; from 4
# weeks it uses t(0.995, 3 df) = 5.8.
GOOD_WEEKS = SUSPECT_MIN_RUNS + 1

LADDER = "proxy-regression"
EXTRA_WORK = "extra_work_pct"  # the build change that injects real work (workload/extra.py)


class DemoRegressionError(TraceladderError):
    """A step of the demo failed (a week's DAG run, a missing suspect, a triage that ended
    elsewhere): one line, exit 2."""

    def __str__(self) -> str:
        return f"demo-regression: {super().__str__()}"


def say(message: str) -> None:
    print(f"[demo-regression] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Week:
    logical_date: datetime
    build: str


@dataclass(frozen=True)
class WeekRun:
    week: Week
    run_id: str
    entry: IndexEntry


@dataclass(frozen=True)
class Outcome:
    weeks: list[WeekRun]
    suspects: list[JSONObject]
    docs: list[TriageDoc]
    injected: list[str]  # the culprit builds, in catalog order
    local: Path  # the local copy of what the demo stored
    prefix: str  # the storage prefix of the ladder's keys


def weeks_of(loaded: LoadedLadder) -> list[Week]:
    """GOOD_WEEKS weeks on the catalog's oldest builds, then one on its newest, each the day
    after its build was made (the injected build lies between the last good week's and the newest)."""
    builds = sorted(loaded.ladder.builds, key=lambda b: b.created)
    if len(builds) < GOOD_WEEKS + 2:
        raise DemoRegressionError(
            f"ladder {loaded.ladder.ladder}: builds: needs at least {GOOD_WEEKS + 2} builds "
            f"({GOOD_WEEKS} good weeks, a candidate and the newest), has {len(builds)}"
        )
    chosen = [*builds[:GOOD_WEEKS], builds[-1]]
    return [Week(b.created + timedelta(days=1, hours=1), b.name) for b in chosen]


def _work_steps(loaded: LoadedLadder) -> list[tuple[str, float, float]]:
    """Each catalog build (by creation time) with the extra work of the build before it and its own."""
    steps, before = [], 0.0
    for b in sorted(loaded.ladder.builds, key=lambda b: b.created):
        pct = float(str(b.changes.model_args.get(EXTRA_WORK) or 0))
        steps.append((b.name, before, pct))
        before = pct
    return steps


def injected_builds(loaded: LoadedLadder) -> list[str]:
    """The catalog's builds (by creation time) whose changes add real work over the build before."""
    found = [name for name, before, pct in _work_steps(loaded) if pct > before]
    if not found:
        raise DemoRegressionError(f"ladder {loaded.ladder.ladder}: builds: no build changes {EXTRA_WORK}")
    return found


def largest_first(loaded: LoadedLadder, injected: list[str]) -> list[str]:
    """The injected builds by the size each adds in its own A/B (the work it adds over the build
    before, on the step it is added to: (100 + new) / (100 + old)), largest first."""
    size = {name: (100 + pct) / (100 + before) for name, before, pct in _work_steps(loaded)}
    return sorted(injected, key=lambda name: -size[name])


def write_week_ladder(folder: Path, build: str, repeats: int | None = None) -> Path:
    """The week's ladder file: the packaged one with `build:` (and `repeats:`) set."""
    folder.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"extends": str(CONFIG_DIR / "ladders" / f"{LADDER}.yaml"), "build": build}
    if repeats is not None:
        doc["repeats"] = repeats
    path = folder / f"{LADDER}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def clear_history(client: Any, bucket: str, ladder_prefix: str) -> int:
    """Remove the ladder's earlier objects (the demo's own history); returns how many."""
    removed = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=ladder_prefix + "/"):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        for i in range(0, len(keys), 1000):
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys[i : i + 1000], "Quiet": True})
        removed += len(keys)
    return removed


def keep_local_copy(store: Any, run_prefix: str, local: Path) -> None:
    """The run's summary, each run's metrics and spec, and its triage documents, under `local`."""
    for key in store.list(run_prefix + "/"):
        rel = key[len(run_prefix) + 1 :]
        keep = rel.startswith((layout.SUMMARY_FOLDER + "/", layout.TRIAGE_FOLDER + "/"))
        if keep or key.endswith((layout.METRICS_OBJECT, layout.SPEC_OBJECT)):
            target = local / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(store.get_bytes(key))


def run_weeks_and_triage(
    s3: Any,
    ladders_dir: Path,
    work: Path,
    local_root: Path,
    repeats: int | None = None,
    budget_blocks: int | None = None,
) -> Outcome:
    """The weeks and the triage, on a running S3 (`s3`: EmbeddedS3) and a prepared Airflow whose
    settings are in the environment. `repeats`/`budget_blocks` shrink the weekly runs and the
    confirms (the test's); `local_root`: where the local copy goes (`<ladder>/<run>/...`)."""
    from traceladder.config import find_ladder, load_ladder
    from traceladder.embedded.local_airflow import dag_test
    from traceladder.storage.artifacts import S3ArtifactStore, ladder_prefix, safe_key_part
    from traceladder.summary.index import entry_key
    from traceladder.triage.engine import triage_ladder_run
    from traceladder.triage.from_ladder import context_for
    from traceladder.runner import forkserver_client
    from traceladder.triage.runs import local_run_block, local_run_profiled

    packaged = load_ladder(CONFIG_DIR / "ladders" / f"{LADDER}.yaml")
    weeks, injected = weeks_of(packaged), largest_first(packaged, injected_builds(packaged))
    storage = packaged.cluster.storage
    store = S3ArtifactStore(s3.client(), s3.bucket, storage.prefix, LADDER)
    base = ladder_prefix(storage.prefix, LADDER)
    removed = clear_history(s3.client(), s3.bucket, base)
    local = local_root / LADDER
    if removed:
        say(f"removed the previous demo's history: {removed} objects under s3://{s3.bucket}/{base}/ and {local}")
    shutil.rmtree(local, ignore_errors=True)  # its local copy goes with it
    os.environ[env_vars.LADDERS_DIR.name] = str(ladders_dir)
    runs: list[WeekRun] = []
    for i, week in enumerate(weeks, 1):
        write_week_ladder(ladders_dir, week.build, repeats)
        say(f"week {i}/{len(weeks)}: {week.logical_date:%Y-%m-%d} on build {week.build}: dag.test()")
        dag_run = dag_test(f"traceladder-{LADDER}", logical_date=week.logical_date)
        run_id = safe_key_part(dag_run.run_id)
        key = entry_key(base, run_id)
        if str(dag_run.state) != "success" or not store.exists(key):
            raise DemoRegressionError(f"week {i} ({week.build}): DAG run {dag_run.run_id} ended {dag_run.state}")
        runs.append(WeekRun(week, run_id, IndexEntry.from_json(store.get_bytes(key), key)))
    last = runs[-1]
    suspects = [as_object(s) for s in last.entry.suspects]
    if not suspects:
        raise DemoRegressionError(f"the week on {last.week.build} flagged no suspect: {week_figures(runs)}")
    say(f"week {len(runs)} flagged {', '.join(str(s['rung']) for s in suspects)}: the triage starts")
    loaded = load_ladder(find_ladder(LADDER))  # the last week's file: the catalog and `triage:` block
    ctx = context_for(
        loaded,
        store,
        last.run_id,
        local_run_block(work / "confirm", run_id=f"{last.run_id}-triage"),
        run_profiled=local_run_profiled(work / "explain", run_id=f"{last.run_id}-triage"),
    )
    if budget_blocks is not None:
        ctx = replace(ctx, budget=replace(ctx.budget, blocks=budget_blocks))
    with forkserver_client.warm_runs(f"traceladder-{LADDER}-triage", last.run_id):
        docs = triage_ladder_run(ctx)
    if not docs:
        raise DemoRegressionError(f"run {last.run_id}: the triage found no suspect in its summary")
    for run in runs:
        keep_local_copy(store, layout.run_prefix(storage.prefix, LADDER, run.run_id), local / run.run_id)
    return Outcome(runs, suspects, docs, injected, local, storage.prefix)


def week_figures(runs: list[WeekRun]) -> str:
    out = []
    for run in runs:
        rungs = run.entry.points.rungs if run.entry.points else {}
        figs = [f"{r} {_figure(v)}" for r, v in rungs.items()]
        out.append(f"{run.week.build}: {', '.join(figs)}")
    return "; ".join(out)


def _figure(point: RungPoint) -> str:
    fig = point.step_cpu_ms or point.step_ms
    if fig is None or not fig.mean:
        return "no figure"
    return f"{float(fig.mean):.1f} ± {float(fig.ci95 or 0):.1f} ms ({fig.n} runs)"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1f}%"


def _interval(iv: list[float] | None) -> str:
    return f"[{iv[0]:+.1f}%, {iv[1]:+.1f}%]" if iv else "[not estimable]"


def printout(outcome: Outcome, bucket: str, wall_s: float) -> list[str]:
    """What the demo prints: the weeks, the suspect, every triage step, the explanation, where it
    is kept and what it spent; it ends with the label, `injected: <build>, <build>`, one
    `culprit: <build> share <x>% [<lo>%, <hi>%]` line per culprit (largest first) and the wall time."""
    lines = ["", f"# {LADDER}: {len(outcome.weeks)} weekly runs, then the triage", ""]
    lines.append("| week | build | run | step CPU ms per rung (95% CI) | suspects |")
    lines.append("|---|---|---|---|---|")
    for run in outcome.weeks:
        rungs = run.entry.points.rungs if run.entry.points else {}
        figs = ", ".join(f"{r} {_figure(v)}" for r, v in rungs.items())
        flagged = ", ".join(str(as_object(s)["rung"]) for s in run.entry.suspects) or "-"
        lines.append(f"| {run.week.logical_date:%Y-%m-%d} | {run.week.build} | {run.run_id} | {figs} | {flagged} |")
    lines.append("")
    for s in outcome.suspects:
        lines.append(
            f"suspect: {s['rung']} {s['direction']} {_pct(float(str(s['delta_pct'])))} against the weeks before "
            f"({s['reason']}); last good run {s['good_run_id']}"
        )
    main = _main(outcome)
    for doc in outcome.docs:
        for step in doc.steps:
            lines.append(
                f"  {step.kind} {step.rung}: {step.good} -> {step.candidate}: {step.verdict}, "
                f"{_pct(step.delta_pct)} {_interval(step.interval_pct)} after {step.blocks} A/B blocks"
            )
    runs = sum(d.spending().runs for d in outcome.docs)
    cpu_h = sum(d.spending().run_hours for d in outcome.docs)
    lines.append(f"the triage spent {runs} runs, {cpu_h:.3f} CPU-hours (the proxy's device-hours)")
    confirm = next((s for s in main.steps if s.kind == "confirm"), None)
    if confirm is not None:
        lines.append(
            f"measured size of the change: {_pct(confirm.delta_pct)} {_interval(confirm.interval_pct)} "
            f"(B minus A, {confirm.blocks} blocks of one run each)"
        )
    lines.append(f"bisection over {len(main.candidates)} builds: {main.conclusion or 'none'}")
    ex = main.explanation
    if ex is not None:
        lines.append(f"explanation ({ex.lens}, {ex.good} vs {ex.bad}): {ex.error or ex.sentence}")
    run_id = main.run_id
    triage_key = layout.triage_key(layout.run_prefix(outcome.prefix, LADDER, run_id), main.rung)
    local_doc = outcome.local / run_id / layout.TRIAGE_FOLDER / main.rung
    lines += [
        "",
        f"triage: s3://{bucket}/{triage_key} (local copy: {local_doc / layout.TRIAGE_OBJECT})",
        f"report: {local_doc / layout.REPORT_HTML}",
        f"weekly summaries: {outcome.local}/<run>/{layout.SUMMARY_FOLDER}/",
        "",
        main.label or main.state,
        f"injected: {', '.join(outcome.injected)}",
    ]
    lines += [f"culprit: {c.name} {c.share_text()}" for c in main.culprits] or ["culprit: none"]
    lines.append(f"demo wall time: {wall_s:.0f} s")
    return lines


def _main(outcome: Outcome) -> TriageDoc:
    """The rung the search ran on."""
    return next((d for d in outcome.docs if d.bisected_on == d.rung), outcome.docs[0])


def succeeded(outcome: Outcome) -> bool:
    """Both injected builds named as culprits, the larger first, on a confirmed regression."""
    main = _main(outcome)
    return main.label == "confirmed regression" and [c.name for c in main.culprits] == outcome.injected


def run_demo_regression(repeats: int | None = None) -> int:
    """`make demo-regression`: the embedded S3 and Airflow under .traceladder/, as `make demo`."""
    from traceladder.embedded.embedded_s3 import EmbeddedS3
    from traceladder.embedded.local_airflow import airflow_env, prepare
    from traceladder.config import load_ladder

    started = time.monotonic()
    bucket = load_ladder(CONFIG_DIR / "ladders" / f"{LADDER}.yaml").cluster.storage.bucket
    state = STATE_DIR / "demo-regression"
    say("starting the embedded S3 server (SeaweedFS)")
    with EmbeddedS3(STATE_DIR / "s3", bucket=bucket) as s3:
        env = airflow_env(STATE_DIR / "airflow", s3.env(), s3.airflow_conn_uri_json())
        os.environ.update(env)
        say("preparing Airflow (db migrate, pools)")
        prepare(STATE_DIR / "airflow", env)
        try:
            outcome = run_weeks_and_triage(s3, state / "ladders", state / "work", STATE_DIR / "demo", repeats)
        except OSError as exc:
            raise DemoRegressionError(f"{type(exc).__name__}: {exc}") from None
        print("\n".join(printout(outcome, s3.bucket, time.monotonic() - started)), flush=True)
    if not succeeded(outcome):
        print("demo-regression: the triage did not name the injected builds, largest first", file=sys.stderr)
        return 2
    return 0
