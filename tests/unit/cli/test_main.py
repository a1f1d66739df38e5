"""Every user error exits 2 with one stderr line (issue 29): the one mapping of TraceladderError in
`cli/main.py`, on real bad inputs (a ladder file, a trace, a parameter, a spec, a CSV), in process
and once through the console module in its own process."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from traceladder.cli.main import main
from tests.conftest import REPO_ROOT

INCLUDE = REPO_ROOT / "include"


def _bad_ladder(tmp: Path) -> list[str]:
    path = tmp / "ladder.yaml"
    path.write_text("schema: 1\nladder: x\n")  # no model_tag, no rungs
    return ["validate", str(path)]


def _bad_trace(tmp: Path) -> list[str]:
    path = tmp / "trace.json"
    path.write_text('{"traceEvents": [')  # truncated
    return ["analyze", str(path), "--out", str(tmp / "out")]


def _bad_compare(tmp: Path) -> list[str]:
    path = tmp / "empty.json"
    path.write_text("")
    return ["compare", str(path), str(path), "--out", str(tmp / "out")]


def _bad_csv(tmp: Path) -> list[str]:
    path = tmp / "steps.csv"
    path.write_text("run_id,rung,step_ms\na,base,-3\n")
    return ["changes", str(path)]


CASES = {
    "bad ladder file": (_bad_ladder, "{tmp}/ladder.yaml: "),
    "unknown ladder name": (lambda tmp: ["validate", "no-such-ladder"], "ladder: no ladder named"),
    "bad trace": (_bad_trace, "error: {tmp}/trace.json: "),
    "bad trace pair": (_bad_compare, "error: {tmp}/empty.json: "),
    "bad param: override": (lambda tmp: ["plan", "proxy-local", "--override", "bogus=1"], "override: "),
    "bad param: repeats": (lambda tmp: ["plan", "proxy-local", "--repeats", "0"], "repeats: "),
    "bad param: roofline share": (
        lambda tmp: ["analyze", str(tmp / "t.json"), "--out", str(tmp), "--roofline-share", "2"],
        "error: --roofline-share",
    ),
    "bad spec": (lambda tmp: ["run-rung", "--spec-json", "{}", "--out", str(tmp)], "--spec-json: "),
    "missing spec file": (lambda tmp: ["run-rung", "--spec", str(tmp / "none.json")], "traceladder: "),
    "bad csv": (_bad_csv, "{tmp}/steps.csv: step_ms: line 2: "),
}


@pytest.mark.parametrize("case", list(CASES))
def test_user_error_exits_2_with_one_line(case: str, tmp_path: Path) -> None:
    argv_of, starts = CASES[case]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv_of(tmp_path))
    lines = err.getvalue().splitlines()
    assert code == 2, (code, err.getvalue())
    assert len(lines) == 1 and lines[0].startswith(starts.format(tmp=tmp_path)), lines
    assert "Traceback" not in err.getvalue()


def test_console_module_exits_2_with_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(INCLUDE)}
    proc = subprocess.run(
        [sys.executable, "-m", "traceladder.cli", *_bad_ladder(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"{tmp_path / 'ladder.yaml'}: model_tag: Field required"]
