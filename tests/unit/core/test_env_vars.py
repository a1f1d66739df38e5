"""core/ (issue 29): the core package imports only the standard library, and every TRACELADDER_*
name is spelled in core/env_vars.py, read over its default and named in docs/configuration.md.
(The one error base: test_errors.py; the run index: tests/unit/summary/test_index.py.)"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import traceladder
from traceladder.core import env_vars

PACKAGE = Path(traceladder.__file__).resolve().parent
# the proxy runs alone in its container, with its own settings and errors (issue 29)
PRODUCT = [p for p in sorted(PACKAGE.rglob("*.py")) if "workload" not in p.relative_to(PACKAGE).parts]


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


def test_the_configuration_doc_names_every_setting() -> None:
    doc = (PACKAGE.parents[1] / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert [s.name for s in env_vars.ALL if f"`{s.name}`" not in doc] == []
