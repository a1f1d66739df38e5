"""The MI350X ladder renders the write-up's own context and lens flags (include/traceladder/config/
upstream/writeup.yaml): the torch lenses' shapes, stack and windows, and the rocprofv3 lens's trace
kinds in both renderings (madengine's `tools` entry and the runner's own collector prefix)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from traceladder import config
from traceladder.config import load_ladder
from traceladder.config.loader import CONFIG_DIR
from traceladder.plan.build import RungSpec, build_plan
from traceladder.runner.backends import docker as docker_backend

WRITEUP = yaml.safe_load((Path(config.__file__).parent / "upstream" / "writeup.yaml").read_text())
SEED = load_ladder(CONFIG_DIR / "ladders" / "deepseek-v4-flash-mi350x.yaml")
# The ladder's deliberate departures from the rung-7 context, each with its reason (docs/upstream.md):
# the indexer is frozen by the key primus-cli reads, not the variable only an example script reads.
ADDED_KEYS = {"v4_indexer_distill_loss_coeff": 0.0}
DROPPED_ENV = {"PRIMUS_V4_INDEXER_DISTILL_LOSS_COEFF"}


def _spec(rung: str, lens: str) -> RungSpec:
    specs = build_plan(SEED, repeats=1)
    suffix = "r0" if lens == "none" else "l0"
    return next(s for s in specs if s.rung_id == f"{rung}.{lens}.{suffix}")


def test_the_last_rung_runs_the_writeups_context() -> None:
    spec = _spec("recompute_off", "none")
    assert dict(spec.model_args) == {**WRITEUP["model_args"], **ADDED_KEYS}
    env = {k: v for k, v in WRITEUP["docker_env_vars"].items() if k not in DROPPED_ENV}
    assert {k: spec.docker_env_vars[k] for k in env} == env
    assert not DROPPED_ENV & set(spec.docker_env_vars)
    assert (SEED.ladder.image, SEED.ladder.model_tag) == (WRITEUP["image"], WRITEUP["model_tag"])


@pytest.mark.parametrize("lens", ["torch_rank0", "torch_all_ranks"])
def test_a_torch_lens_records_the_writeups_window_shapes_and_stack(lens: str) -> None:
    spec = _spec("recompute_off", lens)
    want = WRITEUP["lenses"][lens]
    assert {k: spec.model_args[k] for k in want["model_args"]} == want["model_args"]
    first, last = want["recorded_steps"]
    assert spec.profile_window == (first, last + 1) and spec.train_iters == want["model_args"]["train_iters"]
    rendered = spec.additional_context()["model_args"]
    shapes = want["model_args"]["torch_profiler_record_shapes"]
    assert f"--torch_profiler_record_shapes {shapes}" in rendered and "--torch_profiler_with_stack False" in rendered


def _trace_flags(argv: list[str]) -> set[str]:
    return {a for a in argv if a.endswith("-trace")}


def test_the_rocprofv3_lens_traces_kernels_and_copies_in_both_renderings(tmp_path: Path) -> None:
    spec = _spec("recompute_off", "rocprofv3")
    want = WRITEUP["lenses"]["rocprofv3"]
    assert spec.train_iters == want["model_args"]["train_iters"]
    (tool,) = spec.additional_context()["tools"]
    (theirs,) = want["tools"]
    assert tool["name"] == theirs["name"]
    ours_cmd, their_cmd = shlex.split(tool["cmd"]), shlex.split(theirs["cmd"])
    assert _trace_flags(ours_cmd) == _trace_flags(their_cmd) == set(want["trace_flags"])
    assert ours_cmd[2:] == their_cmd[2:]  # the wrapper's arguments; its path is the deployment's
    argv, _env = docker_backend.command(spec, tmp_path)
    prefix = argv[: argv.index("--") + 1]
    assert prefix[0] == "rocprofv3" and _trace_flags(prefix) == set(want["trace_flags"])
    assert not set(want["left_off"]) & set(prefix)
    assert prefix[prefix.index("--output-format") + 1] == "json"


def test_the_trace_lite_lens_adds_the_writeups_tool() -> None:
    spec = _spec("recompute_off", "rocm_trace_lite")
    assert spec.additional_context()["tools"] == WRITEUP["lenses"]["rocm_trace_lite"]["tools"]
    assert spec.train_iters == WRITEUP["model_args"]["train_iters"]
