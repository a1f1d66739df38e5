#!/usr/bin/env python3
"""Regenerate the table of upstream facts, ``include/traceladder/config/upstream/facts.csv``, and
the generated part of ``docs/upstream.md``, from git mirrors of the upstream repositories.

Every fact is read from a named file at a pinned commit (the pins are the constants in
``tools/upstream/pins.py``: the one place to move one). The mirrors are bare git repositories named by
environment variables::

    TRACELADDER_MIRROR_PRIMUS      AMD-AGI/Primus
    TRACELADDER_MIRROR_MEGATRON    NVIDIA/Megatron-LM (Primus's third_party/Megatron-LM submodule)
    TRACELADDER_MIRROR_MADENGINE   ROCm/madengine
    TRACELADDER_MIRROR_RTL         sunway513/rocm-trace-lite
    TRACELADDER_MIRROR_ROCPROFILER ROCm/rocm-systems (projects/rocprofiler-sdk)

``python tools/upstream_facts.py`` writes the CSV; ``--docs`` also rewrites the generated section of
docs/upstream.md; ``--check`` writes nothing and exits 1, printing a unified diff, when either
committed file differs from what the mirrors give. Exit 2: a mirror is not named, or a pin or a
precedence rule no longer holds (nothing is written). A file that cannot be read (a missing blob) leaves
its rows out and is named on stderr. Standard library and PyYAML only; it does not import traceladder.
"""

from __future__ import annotations

import argparse
import sys

from upstream.mirror import PROBLEMS
from upstream.pins import CSV_PATH, DOCS_PATH
from upstream.render import KIND_TITLES, build_rows, diff, render_csv, render_docs_section, splice_docs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--docs", action="store_true", help="also rewrite the generated section of docs/upstream.md")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff when stale")
    opts = parser.parse_args(argv)
    rows = build_rows()
    for line in PROBLEMS.left_out:
        print(f"upstream_facts: left out: {line}", file=sys.stderr)
    if PROBLEMS.fatal:
        for line in PROBLEMS.fatal:
            print(f"upstream_facts: error: {line}", file=sys.stderr)
        return 2
    csv_text = render_csv(rows)
    docs_old = DOCS_PATH.read_text() if DOCS_PATH.exists() else ""
    docs_new = splice_docs(docs_old, render_docs_section(rows)) if (opts.docs or opts.check) else docs_old
    counts: dict[str, int] = {}
    for row in rows:
        counts[row[0]] = counts.get(row[0], 0) + 1
    summary = ", ".join(f"{kind} {counts.get(kind, 0)}" for kind in KIND_TITLES)
    if opts.check:
        csv_old = CSV_PATH.read_text() if CSV_PATH.exists() else ""
        diffs = [d for d in (diff(CSV_PATH, csv_old, csv_text), diff(DOCS_PATH, docs_old, docs_new)) if d]
        if diffs:
            sys.stdout.write("".join(diffs))
            print(f"upstream_facts: stale: {len(rows)} rows ({summary}); run tools/upstream_facts.py --docs")
            return 1
        print(f"upstream_facts: up to date: {len(rows)} rows ({summary})")
        return 0
    CSV_PATH.parent.mkdir(parents=True, exist_ok=True)
    CSV_PATH.write_text(csv_text)
    if opts.docs:
        DOCS_PATH.write_text(docs_new)
    print(f"upstream_facts: wrote {len(rows)} rows ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
