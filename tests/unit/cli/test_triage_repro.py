"""`traceladder triage repro` (issue 59, item 4): the command text triage.json records, the
scratch prefix (never the ladder's own), and its one-line errors (exit 2) for a step that is not
there and a triage.json that is not there. The run itself is tests/integration/test_triage_repro.py."""

from __future__ import annotations

import contextlib
import copy
import io
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.triage_docs import step, suspect, triage_doc
from tests.unit.config.test_validate import MINIMAL
from traceladder.cli import triage as cli_triage
from traceladder.cli.main import build_parser, main
from traceladder.core.documents import Culprit
from traceladder.storage.artifacts import DirArtifactSink
from traceladder.triage import record
from traceladder.triage.repro import ReproError, scratch_prefix

pytestmark = pytest.mark.triage

CULPRIT = Culprit(name="n5", last_good="n4", delta_pct=15.0, share_pct=100.0, share_interval_pct=[80.0, 120.0])


def _doc(**fields: Any):
    steps = [step(), step("bisect", good="n0", candidate="n4"), step("pair", good="n4", candidate="n5")]
    return triage_doc(suspect(), steps=steps, culprits=[CULPRIT], **fields)


def test_the_command_names_the_step_and_parses_back() -> None:
    doc = _doc()
    assert record.repro_command(doc, 2) == "traceladder triage repro --ladder mini --run w5 --rung fusions --step 2"
    odd = replace(doc, run_id="manual__2026-12-07T03:00:00+00:00 again")
    argv = shlex.split(record.repro_command(odd, 0))
    args = build_parser().parse_args(argv[1:])
    assert argv[0] == "traceladder" and (args.run, args.step, args.blocks) == (odd.run_id, 0, cli_triage.DEFAULT_BLOCKS)
    with pytest.raises(IndexError, match="step 3 is not one of the triage's 3 steps"):
        record.repro_command(doc, 3)


def test_reproduce_holds_the_confirm_and_each_culprits_pair() -> None:
    assert record.reproduce_commands(_doc()) == {
        "confirm": "traceladder triage repro --ladder mini --run w5 --rung fusions --step 0",
        "pair n5": "traceladder triage repro --ladder mini --run w5 --rung fusions --step 2",
    }
    # the confirm named the culprit (two candidates): no step of its own; no confirm, no command
    only = triage_doc(suspect(), steps=[step()], culprits=[CULPRIT])
    assert set(record.reproduce_commands(only)) == {"confirm"}
    assert record.reproduce_commands(triage_doc(suspect())) == {}


def test_the_report_gives_every_step_its_command() -> None:
    page = record.report_html(replace(_doc(), reproduce=record.reproduce_commands(_doc())))
    for k in range(3):
        assert f"--rung fusions --step {k}</code>" in page
    assert "run-rung" not in page


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [(None, "traceladder-scratch"), ("scratch/me", "scratch/me"), ("/tl-scratch/", "tl-scratch")],
)
def test_the_scratch_prefix_lies_outside_the_production_one(chosen: str | None, expected: str) -> None:
    assert scratch_prefix("traceladder", "mini", chosen) == expected


@pytest.mark.parametrize(
    "chosen", ["traceladder", "traceladder/", "traceladder/mini", "traceladder/mini/tmp", "traceladder/other", ""]
)
def test_a_scratch_prefix_inside_the_production_one_is_refused(chosen: str) -> None:
    with pytest.raises(ReproError, match="^--scratch-prefix: "):
        scratch_prefix("traceladder", "mini", chosen)


def test_a_scratch_prefix_whose_ladder_folder_holds_the_production_one_is_refused() -> None:
    # prefix a/b, ladder b: the production runs are under a/b/b/; scratch `a` would write a/b/...
    with pytest.raises(ReproError, match="inside the ladder's production prefix"):
        scratch_prefix("a/b", "b", "a")


# ---- the command line: one line, exit 2


@pytest.fixture
def ladder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DirArtifactSink:
    """The `mini` ladder (local backend) in its own folder; the command's S3 store is a folder."""
    folder = tmp_path / "ladders"
    folder.mkdir()
    data = copy.deepcopy(MINIMAL)
    data["builds"] = [{"name": f"n{i}", "created": f"2026-11-2{i}T02:00:00Z"} for i in range(6)]
    (folder / "mini.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(folder))
    root = tmp_path / "s3"
    monkeypatch.setattr(cli_triage, "_s3_client", lambda conn_id: None)
    monkeypatch.setattr(cli_triage, "_store", lambda loaded, client, prefix: DirArtifactSink(root, prefix, "mini"))
    return DirArtifactSink(root, "traceladder", "mini")


def _run(*extra: str) -> tuple[int, str]:
    argv = ["triage", "repro", "--ladder", "mini", "--run", "w5", "--rung", "fusions", *extra]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def test_a_scratch_prefix_inside_the_ladders_is_refused_before_s3_is_read(ladder, monkeypatch) -> None:
    def never(*_args: object) -> None:
        raise AssertionError("S3 was reached")

    monkeypatch.setattr(cli_triage, "_s3_client", never)
    code, err = _run("--step", "0", "--scratch-prefix", "traceladder/mini/scratch")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("--scratch-prefix: 'traceladder/mini/scratch' is inside the ladder's production prefix")


def test_a_missing_triage_json_is_one_line(ladder) -> None:
    code, err = _run("--step", "0")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert (
        err.startswith("--run/--rung: no triage.json at ") and "traceladder/mini/w5/triage/fusions/triage.json" in err
    )


@pytest.mark.parametrize("index", ["3", "-1"])
def test_an_unknown_step_is_one_line_naming_the_steps(ladder, index: str) -> None:
    record.save(ladder, record.keys("traceladder", "mini", "w5", "fusions")[0], _doc())
    code, err = _run("--step", index)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert (
        err == f"--step: {index} is not a step of traceladder/mini/w5/triage/fusions/triage.json (it has steps 0-2)\n"
    )


def test_blocks_must_be_positive(ladder) -> None:
    code, err = _run("--step", "0", "--blocks", "0")
    assert (code, err) == (2, "--blocks: 0 is not a positive number of blocks\n")
