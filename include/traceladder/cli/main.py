"""`traceladder` console script, the one `main` of the package.

Every user error is a :class:`TraceladderError` (core/errors.py): `main` maps it, and only it, to
exit 2 with one stderr line, never a traceback. A command whose error lines have a prefix
(`error: ` for the analysis commands) sets it as its parser's `error_prefix` default."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, cast

from traceladder import __version__
from traceladder.core.errors import TraceladderError, first_line
from traceladder.core.env_vars import DEFAULT_BUCKET

EXIT_USAGE = 2


class UserError(TraceladderError):
    """A one-line error of the command line itself (exit 2), shown as ``traceladder: <message>``."""

    def __str__(self) -> str:
        return f"traceladder: {super().__str__()}"


def _load(path: str):  # -> LoadedLadder
    from traceladder.config import find_ladder, load_ladder

    candidate = Path(path)
    return load_ladder(candidate if candidate.suffix in (".yaml", ".yml") or candidate.exists() else find_ladder(path))


def cmd_validate(args: argparse.Namespace) -> int:
    loaded = _load(args.file)
    ladder = loaded.ladder
    for warning in loaded.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(
        f"{loaded.path}: ok: ladder {ladder.ladder}, {len(ladder.rungs)} rungs, "
        f"{len(ladder.switches)} switches, backend {ladder.backend}"
    )
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from traceladder.plan.build import adaptive_plan, build_plan, plan_table

    loaded = _load(args.file)
    specs = build_plan(
        loaded,
        rungs=args.rung or None,
        lens=args.lens,
        repeats=args.repeats,
        override=args.override,
        seed=args.seed,
        run_id=args.run_id,
    )
    if args.json:
        print(json.dumps([s.to_dict() for s in specs], indent=2))
    else:
        print(plan_table(specs))
        print(f"{len(specs)} runs")
        adaptive = adaptive_plan(loaded, lens=args.lens, repeats=args.repeats)
        if adaptive:  # the runs above are the most it makes: the rule may skip the last measure blocks
            from traceladder.core.documents import JSONObject
            from traceladder.stats.sequential import Design

            design = Design.from_dict(cast(JSONObject, adaptive))
            critical = ", ".join(f"{c:.3f}" for c in design.critical_z)
            print(f"adaptive repeats: {design.as_dict()['rule']} (critical z by look: {critical})")
    return 0


def cmd_run_rung(args: argparse.Namespace) -> int:
    # --spec/--spec-json is the runner image's path: standard library + boto3 only (rung_spec.py).
    from traceladder.runner.requirements import missing_import

    problem = missing_import(needs_s3=not args.out)
    if problem:
        raise UserError(problem)
    from traceladder.runner.rung import run_rung
    from traceladder.rung_spec import RunnerSpec, SpecError

    if args.spec or args.spec_json:
        source = args.spec or "--spec-json"
        try:
            text = (
                sys.stdin.read()
                if args.spec_json == "-"
                else args.spec_json
                if args.spec_json
                else Path(args.spec).read_bytes()
            )
            spec = RunnerSpec.from_json(text)
        except FileNotFoundError:
            raise UserError(f"{args.spec}: no such file") from None
        except OSError as exc:
            raise UserError(f"{args.spec}: {exc.strerror or exc}") from None
        except ValueError as exc:  # SpecError: `<file>: <field>: <reason>`, no "traceladder:" prefix
            raise SpecError(f"{source}: {first_line(exc)}") from None
    elif args.ladder and args.rung:
        from traceladder.plan.build import build_plan

        loaded = _load(args.ladder)
        specs = build_plan(loaded, rungs=[args.rung], lens=args.lens or "none", repeats=args.repeat + 1)
        spec = specs[args.repeat]
    else:
        raise UserError("run-rung: give --spec FILE, --spec-json JSON, or --ladder FILE --rung NAME")
    run_id = args.run_id or "manual"
    sink = _sink(args.out, spec.ladder, spec.storage_prefix)
    result = run_rung(spec, run_id, sink)
    print(json.dumps(result, separators=(",", ":"), sort_keys=True))
    return 0 if result["status"] == "ok" else 1


def _sink(out: str | None, ladder: str, prefix: str):
    from traceladder.storage.artifacts import DirArtifactSink, S3ArtifactStore, s3_client_from_env

    if out:
        return DirArtifactSink(Path(out).resolve())
    from traceladder.core.env_vars import S3_BUCKET

    return S3ArtifactStore(s3_client_from_env(), str(S3_BUCKET.get()), prefix, ladder)


def cmd_s3_server(args: argparse.Namespace) -> int:
    from traceladder.embedded.embedded_s3 import serve

    return serve(args.dir, args.bucket, port=args.port, host=args.host)


def cmd_analyze(args: argparse.Namespace) -> int:
    from traceladder.cli.analyze import analyze_paths

    return analyze_paths(
        [Path(p) for p in args.traces],
        Path(args.out),
        jobs=args.jobs,
        roofline_share=args.roofline_share,
        gpu_model=args.gpu_model,
    )


def cmd_analyze_ranks(args: argparse.Namespace) -> int:
    from traceladder.cli.analyze import analyze_ranks

    return analyze_ranks(args.traces, args.out, gpus_per_node=args.gpus_per_node, jobs=args.jobs)


def cmd_compare(args: argparse.Namespace) -> int:
    from traceladder.cli.analyze import compare

    return compare(args.base, args.new, args.out)


def cmd_demo(args: argparse.Namespace) -> int:
    from traceladder.embedded.demo import run_demo

    return run_demo(ladder=args.ladder, list_keys=args.list_keys)


def cmd_demo_regression(args: argparse.Namespace) -> int:
    from traceladder.embedded.demo_regression import run_demo_regression

    return run_demo_regression(repeats=args.repeats)


def cmd_keys(args: argparse.Namespace) -> int:
    from traceladder.embedded.demo import list_run_keys

    return list_run_keys(ladder=args.ladder, run_id=args.run)


def cmd_changes(args: argparse.Namespace) -> int:
    from traceladder.cli.changes import report

    return report(args.file, args.seed, args.test)


def cmd_retention(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from traceladder.workflows.retention import run_retention
    from traceladder.storage.artifacts import s3_client_from_env

    now = None
    if args.now:
        try:
            now = datetime.fromisoformat(args.now)
        except ValueError:
            raise UserError(f"--now: {args.now!r} is not an ISO date") from None
        now = now if now.tzinfo else now.replace(tzinfo=timezone.utc)
    # the S3 endpoint and keys come from the environment (TRACELADDER_S3_ENDPOINT, AWS_*), as for run-rung
    run_retention(lambda _conn_id: s3_client_from_env(), dry_run=args.dry_run, only_ladder=args.ladder, now=now)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from traceladder.embedded.up import STATE_DIR, run_up

    return run_up(Path(args.dir) if args.dir else STATE_DIR, port=args.port)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="traceladder", description="Profiling ladders for Primus training on AMD Instinct."
    )
    parser.add_argument("--version", action="version", version=f"traceladder {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check a ladder file")
    p.add_argument("file")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("plan", help="list the rung specs a ladder implies")
    p.add_argument("file")
    p.add_argument("--rung", action="append", help="only this rung (repeatable)")
    p.add_argument("--lens", default="ladder", help="'ladder' (default) or one lens for every rung")
    p.add_argument("--repeats", type=int)
    p.add_argument("--override", help="SWITCH=VALUE applied to every rung")
    p.add_argument(
        "--seed", type=int, help="block-order seed (default: the ladder's, else derived from ladder and --run-id)"
    )
    p.add_argument("--run-id", default="", help="the run id a derived seed comes from (a DAG run's order)")
    p.add_argument("--json", action="store_true", help="print the rung specs as JSON")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("run-rung", help="run one rung and store its artifacts")
    p.add_argument("--spec", help="a rung spec JSON file")
    p.add_argument("--spec-json", help="the rung spec as JSON text ('-' reads stdin); what the runner container gets")
    p.add_argument("--ladder")
    p.add_argument("--rung")
    p.add_argument("--lens")
    p.add_argument("--repeat", type=int, default=0, help="0-based repeat index")
    p.add_argument("--run-id")
    p.add_argument("--out", help="write artifacts to this folder instead of S3")
    p.set_defaults(func=cmd_run_rung)

    p = sub.add_parser("s3-server", help="run the embedded S3 server (SeaweedFS)")
    p.add_argument("--dir", default=".traceladder/s3")
    p.add_argument("--bucket", default=DEFAULT_BUCKET)
    p.add_argument("--port", type=int, help="S3 port (default: a free one)")
    p.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_s3_server, error_prefix="traceladder s3-server: error: ")

    p = sub.add_parser("analyze", help="TraceLens-compatible reports for trace files")
    p.add_argument("traces", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument(
        "--roofline-share",
        type=float,
        default=0.7,
        help="recoverable time: what an op would save at this share of its roofline bound (docs/whats-left.md)",
    )
    p.add_argument("--gpu-model", help="the GPU (e.g. MI350X) when the trace's deviceProperties name none we know")
    p.set_defaults(func=cmd_analyze, error_prefix="error: ")

    p = sub.add_parser("analyze-ranks", help="TraceLens multi-rank collective reports (one trace per rank)")
    p.add_argument("traces", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--gpus-per-node", type=int)
    p.add_argument("--jobs", type=int, help="ranks read at once (default: one per CPU)")
    p.set_defaults(func=cmd_analyze_ranks, error_prefix="error: ")

    p = sub.add_parser("compare", help="what moved between two traces (TraceLens compare sheets, per step)")
    p.add_argument("base", metavar="BASE_TRACE")
    p.add_argument("new", metavar="NEW_TRACE")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_compare, error_prefix="error: ")

    p = sub.add_parser("changes", help="change points of step times over runs (CSV run_id,rung,step_ms)")
    p.add_argument("file")
    p.add_argument("--seed", type=int, default=0, help="seed of the permutation test (default 0)")
    p.add_argument(
        "--test", choices=["t", "permutation"], default="t", help="significance test per change point (default t)"
    )
    p.set_defaults(func=cmd_changes)

    p = sub.add_parser("demo", help="run a whole ladder through Airflow on the embedded default")
    p.add_argument("--ladder", default="proxy-local")
    p.add_argument("--list-keys", action="store_true", help="also list every S3 key of the run (before the summary)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "demo-regression", help="weekly runs of a small ladder until a build regresses, then its triage (issue 51)"
    )
    p.add_argument("--repeats", type=int, help="runs per weekly ladder run (default: the ladder file's)")
    p.set_defaults(func=cmd_demo_regression)

    p = sub.add_parser("keys", help="list the S3 keys of a run the demo stored (in .traceladder/s3)")
    p.add_argument("--ladder", default="proxy-local")
    p.add_argument("--run", help="a run id (default: the ladder's latest published run)")
    p.set_defaults(func=cmd_keys)

    p = sub.add_parser("retention", help="remove old traces and logs per each cluster's storage.retention")
    p.add_argument("--dry-run", action="store_true", help="list what would go (a line per key, then a JSON total)")
    p.add_argument("--ladder", help="only this ladder")
    p.add_argument("--now", help="judge ages from this ISO date instead of the clock")
    p.set_defaults(func=cmd_retention)

    from traceladder.cli.triage import add_parser as add_triage

    add_triage(sub)

    p = sub.add_parser("up", help="start S3 and a local Airflow (UI, scheduler, ...) until Ctrl-C")
    p.add_argument("--dir", help="state folder (default .traceladder/ in the repo)")
    p.add_argument("--port", type=int, help="api-server port (default 8080, or a free one)")
    p.set_defaults(func=cmd_up)
    return parser


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush cannot raise again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is no real file (captured in tests)
        pass


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        code = func(args)
        sys.stdout.flush()  # a closed pipe shows here, not as a traceback at interpreter exit
        return code
    except BrokenPipeError:  # `traceladder plan --json | head`: the reader left; not an error of ours
        _silence_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by it
    except KeyboardInterrupt:
        print("traceladder: interrupted", file=sys.stderr)
        return 130
    except TraceladderError as exc:  # the one mapping: a user's error is one line and exit 2
        print(f"{getattr(args, 'error_prefix', '')}{exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
