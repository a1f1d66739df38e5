"""core/layout.py owns every key name and path shape: the shapes compose as the artifact tree in
docs/user-guide.md says, and no other module spells a key name (a literal or a path part of one)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from traceladder.core import layout
from traceladder.storage.artifacts import ArtifactKeyError, run_prefix, rung_prefix

PACKAGE = Path(layout.__file__).resolve().parents[1]
NAMES = {v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str) and k != "DEFAULT_PREFIX"}
NOT_KEYS = {"/ladders/{file}/runs/{run_id}"}  # the UI's URL route, not a key


def test_shapes_compose_under_one_rung() -> None:
    rung = rung_prefix("tl/x", "proxy local", "manual__2026-11-29T10:00:00+00:00", "r0")
    assert rung == "tl/x/proxy-local/manual__2026-11-29T10-00-00-00-00/r0"
    trace = layout.trace_key(rung, "rank0.pt.trace.json.gz")
    assert layout.rung_of(trace) == rung
    assert layout.analysis_prefix(rung, "rank0") == f"{rung}/analysis/rank0"
    assert layout.tracelens_prefix(rung, "rank0") == f"{rung}/analysis/tracelens/rank0"
    assert layout.ranks_prefix(rung) == f"{rung}/analysis/ranks"
    run = run_prefix("tl/x", "proxy local", "run 1")
    assert layout.chart_key(run, "trend.png") == f"{run}/summary/charts/trend.png"
    assert layout.entry_key("tl/x/proxy-local", "a:b") == "tl/x/proxy-local/runs/a-b.json"
    with pytest.raises(ArtifactKeyError, match="no /traces/ part"):
        layout.rung_of(f"{rung}/metrics.json")


def _spelled(path: Path) -> list[str]:
    """String constants that are a key name, or a path part of one (``/summary/``, ``x/metrics.json``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docstrings:
            continue
        text = node.value
        if text in NOT_KEYS:
            continue
        for name in NAMES:
            if "." in name:  # an object's name: the literal itself, or the last part of a key
                hit = text == name or text.endswith(f"/{name}")
            else:  # a folder's name: only as a path part (a dict key "runs" is no key name)
                hit = (
                    f"/{name}/" in text
                    or text.startswith(f"{name}/")
                    or (text.startswith("/") and text.endswith(f"/{name}"))
                )
            if hit:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {text!r}")
    return found


def test_no_module_but_layout_spells_a_key_name() -> None:
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path.name != "layout.py" for hit in _spelled(path)]
    assert found == []
