"""`traceladder triage repro --ladder L --run RUN --rung RUNG --step K`: rerun one recorded step of
a triage (its A/B, triage/repro.py) on the ladder's own backend, into a scratch prefix.

- local: the real runner on this host (as the triage's `local_run_block`, through one warm launcher
  as in the triage task), each run stored through an S3 store whose prefix is the scratch prefix;
- docker: the rung's container on the ladder's docker host (`run_rung_container`, as the triage
  task runs it), outside any Airflow task: it holds no pool, and stops no other container;
- slurm: a batch job per run on the ladder's cluster (`run_rung_job`, as the triage task).

S3 and the backends' Airflow connections are read as the hooks read them, from AIRFLOW_CONN_<ID>
(S3 falls back to TRACELADDER_S3_ENDPOINT and AWS_*, as `run-rung`). Every failure of the user's
input (no such ladder, triage.json or step, a scratch prefix inside the production one, S3) is one
line and exit 2 (cli/main.py)."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from traceladder.core.errors import TraceladderError, first_line

if TYPE_CHECKING:
    from traceladder.config.loader import LoadedLadder
    from traceladder.storage.artifacts import S3ArtifactStore
    from traceladder.triage.confirm import RunBlock

REPRO_DAG_ID = "traceladder-triage-repro"  # names a repro's containers and Slurm jobs
DEFAULT_BLOCKS = 3

REPRO_HELP = """\
Rerun one recorded step of a triage: its A side and its B side (triage.json's steps[K]: `good` and
`candidate`; the confirm compares the suspect's good run with its bad run) in interleaved A/B blocks,
on the ladder's backend (local, docker or slurm), each side's spec rebuilt as the triage built it
(image digests pinned, builds applied). Runs are stored under a scratch prefix, never under the
ladder's own `<prefix>/<ladder>/`. Prints each side's image and build, the verdict, B against A with
its interval, and where the runs were stored. triage.json's `reproduce` and the triage message give
this command for the confirm and each culprit's pair (docs/triage.md, "Reproduce a step")."""


class ReproInputError(TraceladderError):
    """A repro that cannot start (no ladder file, no triage.json, no connection): one line."""


def add_parser(sub: Any) -> None:
    """`triage` and its `repro` subcommand on the main parser's subparsers."""
    p = sub.add_parser("triage", help="a triage's recorded steps (docs/triage.md)")
    commands = p.add_subparsers(dest="triage_command", required=True)
    r = commands.add_parser(
        "repro",
        help="rerun a recorded triage step's A/B on the ladder's backend, into a scratch prefix",
        description=REPRO_HELP,
    )
    r.add_argument("--ladder", required=True, help="the ladder: its name (as in triage.json) or its file")
    r.add_argument("--run", required=True, help="the triaged ladder run's id")
    r.add_argument("--rung", required=True, help="the triaged rung")
    r.add_argument("--step", type=int, required=True, help="the step's index in triage.json's `steps` (0-based)")
    r.add_argument("--blocks", type=int, default=DEFAULT_BLOCKS, help=f"most A/B blocks (default {DEFAULT_BLOCKS})")
    r.add_argument(
        "--scratch-prefix",
        help="where the runs are stored (default: the ladder's storage prefix + '-scratch'); "
        "refused inside the ladder's storage prefix",
    )
    r.set_defaults(func=cmd_repro)


def _loaded(name: str) -> LoadedLadder:
    from traceladder.config import find_ladder, load_ladder

    path = Path(name)
    return load_ladder(path if path.suffix in (".yaml", ".yml") or path.exists() else find_ladder(name))


def _conn_var(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


@contextlib.contextmanager
def _logs_to_stderr() -> Iterator[TextIO]:
    """The command's own output (the stream yielded) apart from the log lines Airflow's hooks and
    the runner print meanwhile: file descriptor 1 points at standard error until the end."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    out = os.fdopen(saved, "w", buffering=1)
    try:
        yield out
    finally:
        sys.stdout.flush()
        out.flush()
        os.dup2(saved, 1)
        out.close()


def _s3_client(conn_id: str) -> Any:
    """The cluster's S3 connection through the Amazon provider's hook when AIRFLOW_CONN_<ID> holds
    it (as a worker reads it), else TRACELADDER_S3_ENDPOINT / AWS_* (as `run-rung`)."""
    from traceladder.storage.artifacts import s3_client_from_env

    try:
        if os.environ.get(_conn_var(conn_id)):
            from traceladder.airflow.ladders import s3_client

            return s3_client(conn_id)
        return s3_client_from_env()
    except Exception as exc:  # noqa: BLE001 - a malformed connection or missing boto3: one line
        raise ReproInputError(f"S3 connection {conn_id}: {first_line(exc)}") from None


def _store(loaded: LoadedLadder, client: Any, prefix: str) -> S3ArtifactStore:
    from traceladder.storage.artifacts import S3ArtifactStore

    return S3ArtifactStore(client, loaded.cluster.storage.effective_bucket, prefix, loaded.ladder.ladder)


def _needed_connections(loaded: LoadedLadder) -> list[str]:
    """The Airflow connections a docker or Slurm repro reads (S3, the daemon's TLS, the login node)."""
    from traceladder.workflows.triage_backends import docker_host

    needed = [loaded.cluster.storage.conn_id]
    host = docker_host(loaded)
    if loaded.ladder.backend == "docker" and host is not None and host.tls_conn_id:
        needed.append(host.tls_conn_id)
    if loaded.ladder.backend == "slurm" and loaded.cluster.hosts and loaded.cluster.hosts[0].ssh_conn_id:
        needed.append(loaded.cluster.hosts[0].ssh_conn_id)
    return needed


def _run_block(loaded: LoadedLadder, scratch_store: S3ArtifactStore, run_id: str) -> RunBlock:
    """The backend's runs of the repro, as run `<run_id>-triage` (the triage tasks' naming)."""
    backend = loaded.ladder.backend
    if backend == "local":
        from traceladder.triage.runs import store_run_block

        return store_run_block(scratch_store, f"{run_id}-triage")
    missing = [c for c in _needed_connections(loaded) if not os.environ.get(_conn_var(c))]
    if missing and not os.environ.get("AIRFLOW__SECRETS__BACKEND"):
        names = ", ".join(_conn_var(c) for c in missing)
        raise ReproInputError(
            f"ladder {loaded.ladder.ladder} ({backend}): the repro reads the workers' Airflow connections "
            f"from the environment; set {names} (outside a worker it cannot run without them)"
        )
    from traceladder.workflows.triage_backends import run_block_for

    return run_block_for(loaded, run_id, {}, REPRO_DAG_ID)


def _warm(backend: str, run_id: str) -> contextlib.AbstractContextManager[None]:
    """Local runs through one warm launcher, as the triage task's runs went (the DAG run's), keyed
    by the repro; nothing for the other backends."""
    if backend != "local":
        return contextlib.nullcontext()
    from traceladder.runner.forkserver_client import warm_runs

    return warm_runs(REPRO_DAG_ID, run_id)


def cmd_repro(args: argparse.Namespace) -> int:
    if args.blocks < 1:
        raise ReproInputError(f"--blocks: {args.blocks} is not a positive number of blocks")
    with _logs_to_stderr() as out:
        return _repro(args, out)


def _repro(args: argparse.Namespace, out: TextIO) -> int:
    """The repro itself: its lines to `out`, every log line to standard error."""
    from traceladder.core import layout
    from traceladder.triage import record
    from traceladder.triage.confirm import Budget
    from traceladder.triage.from_ladder import catalog
    from traceladder.triage.repro import rerun, scratch_prefix, step_at, step_sides
    from traceladder.triage.suspects import history_noise, run_setup
    from traceladder.workflows.triage_backends import docker_host

    loaded = _loaded(args.ladder)
    ladder, storage = loaded.ladder.ladder, loaded.cluster.storage
    scratch = scratch_prefix(storage.prefix, ladder, args.scratch_prefix)
    client = _s3_client(storage.conn_id)
    store = _store(loaded, client, storage.prefix)
    key = record.keys(storage.prefix, ladder, args.run, args.rung)[0]
    doc = record.load(store, key)
    if doc is None:
        raise ReproInputError(
            f"--run/--rung: no triage.json at {store.describe(key)}: run {args.run} rung {args.rung} was not triaged"
        )
    step = step_at(doc, args.step, key)
    good = run_setup(store, storage.prefix, ladder, doc.suspect.good_run_id, doc.rung)
    bad = run_setup(store, storage.prefix, ladder, doc.run_id, doc.rung)
    candidates = doc.candidates
    if step.kind != "confirm" and doc.bisected_on and doc.bisected_on != doc.rung:  # bisected on another rung
        main = record.load(store, record.keys(storage.prefix, ladder, doc.run_id, doc.bisected_on)[0])
        candidates = main.candidates if main is not None else []
    sides = step_sides(doc, args.step, good, bad, catalog(loaded), candidates, key)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    run_id = f"{layout.safe_key_part(doc.run_id)}-repro-s{args.step}-{stamp}"
    scratch_store = _store(loaded, client, scratch)
    run_block = _run_block(loaded, scratch_store, run_id)
    backend = loaded.ladder.backend
    print(
        f"triage repro: ladder {ladder} run {doc.run_id} rung {doc.rung} step {args.step} "
        f"({step.kind} {step.good} -> {step.candidate}): up to {args.blocks} A/B blocks on the {backend} backend",
        file=out,
    )
    host = docker_host(loaded)
    if host is not None:
        print(
            f"docker host {host.name}: the repro holds no pool ({host.pool}); a rung there meanwhile slows both",
            file=out,
        )
    print(sides.side_words("A"), file=out)
    print(sides.side_words("B"), file=out)
    t = loaded.ladder.triage
    budget = Budget(args.blocks, None, t.alpha, retries=loaded.ladder.retries.rung_infra)
    history = history_noise(store, storage.prefix, ladder, doc.suspect.good_run_id, loaded.ladder.metric)
    with _warm(backend, run_id):
        again = rerun(doc, sides, run_block, budget, scratch, metric=loaded.ladder.metric, history=history)
    print(f"recorded: {record.step_words(step)}", file=out)
    print(f"rerun:    {record.step_words(again)}" + (f"; {again.reason}" if again.reason else ""), file=out)
    stored, production = (
        layout.run_prefix(scratch, ladder, f"{run_id}-triage"),
        layout.ladder_prefix(storage.prefix, ladder),
    )
    print(f"stored under {scratch_store.describe(stored + '/')} (nothing under {production}/)", file=out)
    return 0
