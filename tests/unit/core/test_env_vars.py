"""core/ (issue 29): standard library only, every TRACELADDER_* name spelled in core/env_vars.py,
every error of the package under one TraceladderError base with a one-line str(), and the shared
run index the summary and the UI both read."""

from __future__ import annotations

import ast
import builtins
import functools
import json
import sys
from pathlib import Path

import pytest

import traceladder
from traceladder.core import env_vars
from traceladder.core.documents import SummaryRef
from traceladder.core.errors import ArtifactKeyError, ArtifactStoreError, TraceladderError, first_line
from traceladder.storage.artifacts import DirArtifactSink, ladder_prefix
from traceladder.summary import index

PACKAGE = Path(traceladder.__file__).resolve().parent
# the proxy runs alone in its container, with its own settings and errors (issue 29)
PRODUCT = [p for p in sorted(PACKAGE.rglob("*.py")) if "workload" not in p.relative_to(PACKAGE).parts]
BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def test_core_imports_only_the_standard_library_and_itself() -> None:
    found = []
    for path in sorted((PACKAGE / "core").glob("*.py")):
        for node in ast.walk(_tree(path)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and not name.startswith("traceladder.core"):
                    found.append(f"{path.name}:{node.lineno}: {name}")
    assert found == []


def test_no_module_but_env_vars_spells_a_traceladder_variable() -> None:
    """What the issue's grep checks, on the syntax tree: no string literal starting TRACELADDER_."""
    found = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}"
        for path in PRODUCT
        if path != PACKAGE / "core" / "env_vars.py"
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(env_vars.PREFIX)
    ]
    assert found == []


def test_env_vars_read_the_environment_over_their_default() -> None:
    names = [s.name for s in env_vars.ALL]
    assert len(names) == len(set(names)) and all(n.startswith(env_vars.PREFIX) for n in names)
    assert env_vars.S3_BUCKET.get({}) == env_vars.DEFAULT_BUCKET == "traceladder"
    assert env_vars.S3_BUCKET.get({"TRACELADDER_S3_BUCKET": "mine"}) == "mine"
    assert env_vars.S3_BUCKET.get({"TRACELADDER_S3_BUCKET": ""}) == env_vars.DEFAULT_BUCKET  # empty is unset
    assert env_vars.S3_BUCKET.over("the-files", {}) == "the-files"
    assert env_vars.S3_BUCKET.over("the-files", {"TRACELADDER_S3_BUCKET": "mine"}) == "mine"
    assert env_vars.SPOOL_DIR.get({}) is None and not env_vars.SPOOL_DIR.is_set({"TRACELADDER_SPOOL_DIR": ""})


def test_every_error_class_derives_from_the_one_base() -> None:
    """Every class that subclasses a builtin exception also subclasses TraceladderError, directly or
    through another class of the package (resolved by name, to a fixed point)."""
    classes = {
        node.name: ([b.id for b in node.bases if isinstance(b, ast.Name)], f"{path.relative_to(PACKAGE)}:{node.lineno}")
        for path in PRODUCT
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.ClassDef)
    }
    ours = {"TraceladderError"}
    while True:
        more = {name for name, (bases, _) in classes.items() if set(bases) & ours} - ours
        if not more:
            break
        ours |= more
    found = [
        f"{where}: {name}{tuple(bases)}"
        for name, (bases, where) in classes.items()
        if name not in ours and set(bases) & BUILTIN_EXCEPTIONS
    ]
    assert found == []
    assert len(ours) > 21  # the base, the ~21 classes the issue counted, and what derives from them


def test_error_str_is_one_line_and_old_bases_still_catch() -> None:
    from traceladder.config.validate import LadderConfigError
    from traceladder.rung_spec import SpecError

    assert str(TraceladderError("first\n  second\n\n")) == "first | second"
    assert str(TraceladderError()) == "TraceladderError"
    with pytest.raises(ValueError):  # callers that caught ValueError still do
        raise SpecError("ladder: missing")
    assert isinstance(LadderConfigError("repeats", "must be at least 1", "x.yaml"), TraceladderError)
    assert isinstance(ArtifactKeyError("bad key"), ValueError)


def test_first_line_of_any_exception() -> None:
    """What a task or the CLI shows for a foreign exception: never an IndexError on an empty one."""
    assert first_line(ValueError("\n  broken CSV at row 3\nTraceback follows")) == "broken CSV at row 3"
    assert first_line(ValueError("")) == "ValueError"
    assert first_line(OSError("disk full\nmore"), typed=True) == "OSError: disk full"
    assert first_line(KeyError(), typed=True) == "KeyError"
    assert first_line(TraceladderError("a\nb")) == "a | b"  # ours is one line already


def _write(store: DirArtifactSink, key: str, doc: object) -> None:
    store.put_bytes(key, json.dumps(doc).encode(), "application/json")


def test_run_index_reads_legacy_and_per_run_entries_and_skips_strays(tmp_path: Path) -> None:
    store = DirArtifactSink(tmp_path, "tl", "lad")
    base = ladder_prefix("tl", "lad")
    _write(store, f"{base}/index.json", {"runs": [{"run_id": "old", "published_at": "2026-01-01"}, "stray"]})
    index.put_entry(store, base, SummaryRef(run_id="new", logical_date="2026-02-01"))
    index.put_entry(store, base, SummaryRef(run_id="whatif", logical_date="2026-03-01", params={"rungs": ["a"]}))
    _write(store, f"{base}/runs/junk.json", ["not", "an", "entry"])
    entries = index.list_entries(store, base)
    assert [e.run_id for e in entries] == ["old", "new", "whatif"]
    assert [e.is_what_if for e in entries] == [False, False, True]
    newest = index.newest_full(entries)
    assert newest is not None and newest.run_id == "new"


def test_run_index_refuses_a_legacy_index_without_runs(tmp_path: Path) -> None:
    store = DirArtifactSink(tmp_path, "tl", "lad")
    base = ladder_prefix("tl", "lad")
    _write(store, f"{base}/index.json", {"runs": "nope"})
    with pytest.raises(ArtifactStoreError, match="has no runs list"):
        index.list_entries(store, base)


def test_the_index_rule_leaves_out_rows_without_a_run_id_and_skips_bad_ones_only_when_asked() -> None:
    from traceladder.core.documents import DocumentError, entries_from, legacy_rows

    rows = legacy_rows({"runs": [{"run_id": "a", "published_at": "1"}, {"run_id": ""}, {"run_id": 3}]}, "i.json")
    rows += [({"run_id": "b", "logical_date": 5}, "runs/b.json"), ({"run_id": "a", "published_at": "2"}, "runs/a.json")]
    # an empty or non-string run_id is a stray object; a later row of the same run wins
    assert [(e.run_id, e.published_at) for e in entries_from(rows, skip_bad=True)] == [("a", "2")]
    with pytest.raises(DocumentError, match=r"^runs/b.json: logical_date: expected str, got int$"):
        entries_from(rows)
    assert legacy_rows(None, "i.json") == []  # no older index: nothing to read


def test_the_configuration_doc_names_every_setting() -> None:
    doc = (PACKAGE.parents[1] / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert [s.name for s in env_vars.ALL if f"`{s.name}`" not in doc] == []
