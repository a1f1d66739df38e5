"""The figures tables in the docs, rendered from the benchmarks' figures files, not retyped.

A doc marks a generated block with the figures file it comes from (under ``docs/figures/``) and
what to take from it:

    <!-- figures: 2026-12-05-proxy_paired.md table 1 -->
    (generated: do not edit)
    <!-- /figures -->

- ``table N``: the Nth markdown table of the file, as it stands (a section's own file,
  ``<date>-<section>.md``, written by ``benchmarks.common.write_figures``);
- ``rows REGEX``: from a bench run's file (``<date>-bench-<time>-<sections>.md``, the table
  ``python -m benchmarks`` prints), the rows whose metric matches REGEX, as a markdown table.

Each block ends with a link to its file. ``python -m testkit.docs_figures`` (``make docs-figures``)
renders every block again; ``--check`` lists the blocks that differ from their files and exits 1
(tests/unit/testkit/test_docs_figures.py runs it); ``--newest`` first points each block at the newest file
of its kind (the same name after the date and time), so a new ``make bench`` run reaches the docs
in one command. The prose around a block still quotes figures: reread it after ``--newest``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from testkit.paths import REPO

DOCS = REPO / "docs"
FIGURES = DOCS / "figures"
BLOCK = re.compile(r"<!-- figures: (?P<spec>[^\n]*?) -->\n(?P<body>.*?)<!-- /figures -->", re.DOTALL)
_SPEC = re.compile(r"(?P<file>\S+\.md) (?:table (?P<table>\d+)|rows (?P<rows>.+))")
_KIND = re.compile(r"\d{4}-\d{2}-\d{2}-(?:bench-\d{4}-)?(?P<name>.+)\.md")
BENCH_COLUMNS = ("metric", "value", "target", "ok", "detail")  # testkit.bench_table less the section


class FiguresError(ValueError):
    """A block that cannot be rendered: its doc, its marker and why, in one line."""


@dataclass(frozen=True)
class Block:
    doc: Path
    spec: str
    body: str

    def where(self) -> str:
        return f"{_shown(self.doc)}: <!-- figures: {self.spec} -->"


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def blocks(doc: Path) -> list[Block]:
    return [Block(doc, m["spec"], m["body"]) for m in BLOCK.finditer(doc.read_text(encoding="utf-8"))]


def _tables(text: str) -> list[list[str]]:
    """The markdown tables of a file (runs of lines starting with ``|``), outside code fences."""
    found: list[list[str]] = []
    current: list[str] = []
    fenced = False
    for line in [*text.splitlines(), ""]:
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("|"):
            current.append(line.rstrip())
            continue
        if current:
            found.append(current)
            current = []
    return found


def bench_rows(text: str) -> list[dict[str, str]]:
    """The rows of a bench run's fixed-width table (testkit.bench_table.format_table): the columns
    start where the dashes under the header start."""
    lines = text.split("```")[1].strip("\n").splitlines() if text.count("```") >= 2 else []
    if len(lines) < 2:
        return []
    header, dashes = lines[0], lines[1]
    starts = [m.start() for m in re.finditer(r"-+", dashes)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None])]
    rows = []
    for line in lines[2:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None])]
        rows.append(dict(zip(names, cells)))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(block: Block, figures: Path = FIGURES) -> str:
    """The block's body as its figures file gives it, ending with a link to that file."""
    spec = _SPEC.fullmatch(block.spec.strip())
    if spec is None:
        raise FiguresError(f"{block.where()}: expected '<file>.md table N' or '<file>.md rows REGEX'")
    source = figures / spec["file"]
    if not source.is_file():
        raise FiguresError(f"{block.where()}: no figures file {_shown(source)}")
    text = source.read_text(encoding="utf-8")
    if spec["table"] is not None:
        tables = _tables(text)
        n = int(spec["table"])
        if not 1 <= n <= len(tables):
            raise FiguresError(f"{block.where()}: {spec['file']} has {len(tables)} table(s)")
        lines = tables[n - 1]
    else:
        try:
            wanted = re.compile(spec["rows"])
        except re.error as exc:
            raise FiguresError(f"{block.where()}: rows: {exc}") from None
        rows = [r for r in bench_rows(text) if wanted.search(r.get("metric", ""))]
        if not rows:
            raise FiguresError(f"{block.where()}: no row of {spec['file']} has a metric matching {spec['rows']!r}")
        lines = ["| " + " | ".join(BENCH_COLUMNS) + " |", "|" + "---|" * len(BENCH_COLUMNS)]
        lines += ["| " + " | ".join(_cell(r.get(c, "")) for c in BENCH_COLUMNS) + " |" for r in rows]
    link = Path(os.path.relpath(source, block.doc.parent)).as_posix()
    # blank lines inside the markers: the table and the link are blocks of their own in markdown
    return "\n".join(["", *lines, "", f"Generated from [{spec['file']}]({link}) (`make docs-figures`).", "", ""])


def newest(spec: str, figures: Path = FIGURES) -> str:
    """The spec pointed at the newest figures file of its file's kind."""
    file, _, what = spec.strip().partition(" ")
    kind = _KIND.fullmatch(file)
    if kind is None:
        return spec
    bench = "-bench-" in file
    same = [
        p.name
        for p in figures.glob(f"*-{kind['name']}.md")
        if (m := _KIND.fullmatch(p.name)) and m["name"] == kind["name"] and ("-bench-" in p.name) == bench
    ]
    return f"{max(same, default=file)} {what}"


def update(doc: Path, figures: Path = FIGURES, to_newest: bool = False) -> tuple[str, list[str]]:
    """The doc with every block rendered again, and the markers of the blocks that changed."""
    text = doc.read_text(encoding="utf-8")
    changed: list[str] = []

    def fill(m: re.Match[str]) -> str:
        spec = newest(m["spec"], figures) if to_newest else m["spec"]
        body = render(Block(doc, spec, m["body"]), figures)
        if spec != m["spec"] or body != m["body"]:
            changed.append(Block(doc, spec, body).where())
        return f"<!-- figures: {spec} -->\n{body}<!-- /figures -->"

    return BLOCK.sub(fill, text), changed


def docs(root: Path = REPO) -> list[Path]:
    return sorted([*(root / "docs").glob("*.md"), root / "README.md"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testkit.docs_figures", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="list the blocks that differ from their files; exit 1 if any")
    ap.add_argument("--newest", action="store_true", help="point each block at the newest figures file of its kind")
    args = ap.parse_args(argv)
    stale: list[str] = []
    try:
        for doc in docs():
            text, changed = update(doc, to_newest=args.newest)
            stale += changed
            if changed and not args.check:
                doc.write_text(text, encoding="utf-8")
    except FiguresError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for where in stale:
        print(("differs from its file: " if args.check else "rendered: ") + where)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
