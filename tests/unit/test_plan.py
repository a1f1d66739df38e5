"""Ladder → rung specs, and the commands a spec becomes on each backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceladder.config import LadderConfigError, load_ladder
from traceladder.config.loader import CONFIG_DIR
from traceladder.plan import RungSpec, build_plan
from traceladder.runner.backends import docker as docker_backend
from traceladder.runner.backends import local as local_backend

SEED = load_ladder(CONFIG_DIR / "ladders" / "deepseek-v4-flash-mi350x.yaml")
PROXY = load_ladder(CONFIG_DIR / "ladders" / "proxy-local.yaml")


def by_id(specs: list[RungSpec]) -> dict[str, RungSpec]:
    return {s.rung_id: s for s in specs}


def test_seed_plan_shape() -> None:
    specs = build_plan(SEED)
    ids = [s.rung_id for s in specs]
    assert len(ids) == len(set(ids)) == 10 * 3 + 4 * 3  # unprofiled rungs, then four lenses on recompute_off
    assert ids[:3] == ["baseline.none.r0", "baseline.none.r1", "baseline.none.r2"]
    assert {s.lens for s in specs} == {"none", "torch_rank0", "torch_all_ranks", "rocm_trace_lite", "rocprofv3"}
    assert build_plan(SEED) == specs  # stable


def test_later_switch_overrides_earlier_keys() -> None:
    specs = by_id(build_plan(SEED, repeats=1))
    deepep = specs["deepep.none.r0"]
    assert deepep.model_args["use_turbo_deepep"] is True and deepep.docker_env_vars["PRIMUS_USE_TURBO_DEEPEP"] == "true"
    mega = specs["megamoe.none.r0"]
    assert (mega.switch, mega.value, mega.parent) == ("megamoe", True, "grouped_gemm")
    assert mega.model_args["use_turbo_mega_moe"] is True
    assert mega.model_args["use_turbo_deepep"] is False and mega.model_args["use_turbo_grouped_gemm"] is False
    assert mega.docker_env_vars["PRIMUS_USE_TURBO_DEEPEP"] == "false"
    base = specs["baseline.none.r0"]
    assert base.docker_env_vars["PRIMUS_RMSNORM_TRITON"] == "0" and base.model_args["recompute_num_layers"] == 3
    assert specs["recompute_off.none.r0"].model_args["recompute_num_layers"] == 0
    assert specs["gbs16.none.r0"].model_args["global_batch_size"] == 16


def test_additional_context_is_madengine_shaped() -> None:
    spec = by_id(build_plan(SEED, repeats=1))["recompute_off.rocprofv3.r0"]
    context = spec.additional_context()
    assert context["tools"] == [{"name": "rocprofv3"}]
    assert "--compress_ratios [0,0,4,128,4,128,4,0]" in context["model_args"]
    assert "--use_turbo_mega_moe True" in context["model_args"]
    assert json.loads(json.dumps(context)) == context
    torch_spec = by_id(build_plan(SEED, repeats=1))["recompute_off.torch_rank0.r0"]
    assert torch_spec.profile_window == (6, 9)
    assert "--profile_ranks [0]" in torch_spec.additional_context()["model_args"]


def test_spec_json_round_trip() -> None:
    spec = build_plan(PROXY, rungs=["fusions"], repeats=1)[0]
    assert RungSpec.from_json(spec.to_json()) == spec


def test_params_subset_lens_repeats_override() -> None:
    specs = build_plan(PROXY, rungs=["baseline", "fusions"], lens="torch_rank0", repeats=2, override="global_batch=4")
    assert [s.rung_id for s in specs] == ["baseline.torch_rank0.r0", "baseline.torch_rank0.r1", "fusions.torch_rank0.r0", "fusions.torch_rank0.r1"]
    assert all(s.model_args["global_batch_size"] == 4 and s.model_args["profile"] is True for s in specs)
    with pytest.raises(LadderConfigError, match="rocprofv3' cannot run on the local backend"):
        build_plan(PROXY, lens="rocprofv3")
    with pytest.raises(LadderConfigError, match="unknown rung 'warp'"):
        build_plan(PROXY, rungs=["warp"])
    with pytest.raises(LadderConfigError, match="not a value of switch 'global_batch'"):
        build_plan(PROXY, override="global_batch=7")
    with pytest.raises(LadderConfigError, match="expected SWITCH=VALUE"):
        build_plan(PROXY, override="global_batch")


def test_local_command_runs_the_proxy(tmp_path: Path) -> None:
    spec = build_plan(PROXY, rungs=["fusions"], repeats=1)[0]
    argv, env = local_backend.command(spec, tmp_path)
    assert argv[1:3] == ["-m", "traceladder.workload"]
    assert env["PRIMUS_WORKSPACE"] == str(tmp_path) and env["PRIMUS_RMSNORM_TRITON"] == "1"


@pytest.mark.parametrize(
    ("lens", "prefix"),
    [
        ("rocprofv3", ["rocprofv3", "--runtime-trace", "--output-format", "json", "-d"]),
        ("rocm_trace_lite", ["rtl", "trace", "--mode", "lite", "-o"]),
        ("torch_rank0", ["/workspace/Primus/primus-cli"]),
    ],
)
def test_docker_command_wraps_primus_for_the_lens(tmp_path: Path, lens: str, prefix: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRIMUS_PATH", raising=False)
    spec = by_id(build_plan(SEED, repeats=1))[f"recompute_off.{lens}.r0"]
    argv, env = docker_backend.command(spec, tmp_path)
    assert argv[: len(prefix)] == prefix
    primus = argv[argv.index("/workspace/Primus/primus-cli"):]
    assert primus[:3] == ["/workspace/Primus/primus-cli", "direct", "--log_file"]
    assert primus[4:8] == ["train", "pretrain", "--config", "examples/megatron/configs/MI355X/deepseek_v4_flash-BF16-pretrain.yaml"]
    assert "--config_path" not in primus and "--" not in primus
    assert env["PRIMUS_WORKSPACE"] == str(tmp_path.resolve())
