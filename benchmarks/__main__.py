"""`python -m benchmarks` (`make bench`): every section of every `benchmarks/bench_*.py`, or those
named with `--only`. A benchmark reports; it does not gate (exit 0 whatever it finds).

Each run also writes its table to `docs/figures/<date>-bench-<time>-<sections>.md` (with the command,
the CPUs and the load average), so measured figures are read from a generated file, not copied
into prose by hand; `--no-figures` skips it."""

from __future__ import annotations

import argparse
import compileall
import importlib
import datetime
import json
import os
import sys
import time
from pathlib import Path

from benchmarks.common import FIGURES, REPO, Context
from testkit.bench_table import Row, format_table, write_run_figures


def sections() -> list:
    found = []
    for path in sorted(Path(__file__).parent.glob("bench_*.py")):
        found += importlib.import_module(f"benchmarks.{path.stem}").SECTIONS
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="run only this section (function name less 'bench_')")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller sizes where a section has them")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    ap.add_argument("--no-figures", action="store_true", help="do not write docs/figures/<date>-bench-....md")
    args = ap.parse_args(argv)
    ctx = Context(repeats=args.repeats, quick=args.quick)
    # the package's bytecode, as an installed package has it (pip compiles at install): a
    # process measured here must not compile traceladder's sources on every start, as it
    # does where PYTHONDONTWRITEBYTECODE is set
    compileall.compile_dir(str(REPO / "include" / "traceladder"), quiet=1)
    rows: list[Row] = []
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = os.getloadavg()
    for fn in sections():
        name = fn.__name__.removeprefix("bench_")
        if args.only and name not in args.only:
            continue
        if not args.only and getattr(fn, "explicit_only", False):  # needs what CI lacks (a mirror)
            continue
        t0 = time.perf_counter()
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        rows.extend(fn(ctx))
        print(f"bench: {name} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    table = format_table(rows)
    print(table)
    if not args.no_figures and rows:
        argv_used = argv if argv is not None else sys.argv[1:]
        path = write_run_figures(FIGURES, argv_used, args.only, table, started, load_before)
        print(f"bench: figures written to {path.relative_to(REPO)}", file=sys.stderr)
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], indent=1))
    missed = [f"{r.section}: {r.metric}" for r in rows if r.ok is False]
    print(f"{len(missed)} target(s) missed" + (": " + "; ".join(missed) if missed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
