"""core/errors.py (issue 29): every error of the package derives from the one TraceladderError base,
whose str() is one line; first_line gives one line of any exception."""

from __future__ import annotations

import ast
import builtins

import pytest

from tests.unit.core.test_env_vars import PACKAGE, PRODUCT, _tree
from traceladder.core.errors import ArtifactKeyError, TraceladderError, first_line

BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}


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
