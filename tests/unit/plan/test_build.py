"""Ladder → rung specs, and the commands a spec becomes on each backend."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from traceladder.config import LadderConfigError, load_ladder
from traceladder.config.loader import CONFIG_DIR
from traceladder.plan.build import RungSpec, build_plan, design_seed, execution_order, plan_design, resolve_seed
from traceladder.runner.backends import docker as docker_backend
from traceladder.runner.backends import local as local_backend

SEED = load_ladder(CONFIG_DIR / "ladders" / "deepseek-v4-flash-mi350x.yaml")
PROXY = load_ladder(CONFIG_DIR / "ladders" / "proxy-local.yaml")


def by_id(specs: list[RungSpec]) -> dict[str, RungSpec]:
    return {s.rung_id: s for s in specs}


def test_seed_plan_shape() -> None:
    specs = build_plan(SEED)
    ids = [s.rung_id for s in specs]
    # three blocks of the ten rungs, three lens blocks (recompute_off unprofiled + four lenses), then
    # the every-rung block: one torch_rank0 run of each rung
    assert len(ids) == len(set(ids)) == 10 * 3 + 5 * 3 + 10
    assert [s.rung_id for s in specs if s.purpose == "profile"] == [
        f"{r.name}.torch_rank0.p0" for r in SEED.ladder.rungs
    ]
    assert ids[:3] == ["baseline.none.r0", "baseline.none.r1", "baseline.none.r2"]  # listed in ladder order
    assert {s.lens for s in specs} == {"none", "torch_rank0", "torch_all_ranks", "rocm_trace_lite", "rocprofv3"}
    assert {s.rung_id for s in specs if s.purpose == "lens"} == {
        f"recompute_off.{lens}.l{k}"
        for lens in ("none", "torch_rank0", "torch_all_ranks", "rocm_trace_lite", "rocprofv3")
        for k in range(3)
    }
    assert build_plan(SEED, run_id="weekly-1") == build_plan(SEED, run_id="weekly-1")  # stable for a run id


def blocks_of(specs: list[RungSpec]) -> list[list[RungSpec]]:
    out: list[list[RungSpec]] = []
    for spec in execution_order(specs):
        while len(out) <= spec.block:
            out.append([])
        out[spec.block].append(spec)
    return out


def test_randomised_complete_blocks() -> None:
    specs = build_plan(PROXY, seed=7)
    names = [r.name for r in PROXY.ladder.rungs]
    blocks = blocks_of(specs)
    # measure blocks (adaptive 3-11: all 11 planned), lens blocks (the min, 3), the every-rung block
    planned = PROXY.ladder.planned_blocks
    assert planned == 11
    assert len(blocks) == planned + 3 + 1
    for block in blocks:
        assert [s.position for s in block] == list(range(len(block)))
        assert len({s.purpose for s in block}) == 1
    for k, block in enumerate(blocks[:planned]):  # repeat k is block k: every rung once, unprofiled
        assert sorted(s.rung for s in block) == sorted(names)
        assert {(s.purpose, s.lens, s.repeat) for s in block} == {("measure", "none", k)}
        assert {s.rung_id for s in block} == {f"{n}.none.r{k}" for n in names}
    for k, block in enumerate(blocks[planned : planned + 3]):  # a lens block pairs every lens with an unprofiled run
        assert sorted(s.lens for s in block) == sorted(["none", "torch_rank0", "torch_all_ranks"])
        assert {(s.purpose, s.rung, s.repeat) for s in block} == {("lens", "recompute_off", k)}
    profile = blocks[planned + 3]
    assert sorted(s.rung for s in profile) == sorted(names)
    assert {(s.purpose, s.lens, s.rung_id.rsplit(".", 1)[1]) for s in profile} == {("profile", "torch_rank0", "p0")}
    # every_rung_steps: 2 profiles the lens runs' whole window, so their repeats measure its noise
    lens_blocks = blocks[planned : planned + 3]
    assert all(s.profile_window == (2, 4) for block in lens_blocks for s in block if s.lens != "none")
    assert all(s.profile_window == (2, 4) and s.model_args["profile_step_start"] == 2 for s in profile)
    # every_rung_steps: 1 keeps the lens's window end and profiles one step; the lens blocks keep it whole
    lenses = PROXY.ladder.lenses.model_copy(update={"every_rung_steps": 1})
    one = dataclasses.replace(PROXY, ladder=PROXY.ladder.model_copy(update={"lenses": lenses}))
    trimmed = blocks_of(build_plan(one, seed=7))
    assert all(s.profile_window == (3, 4) and s.model_args["profile_step_start"] == 3 for s in trimmed[planned + 3])
    assert all(s.profile_window == (2, 4) for b in trimmed[planned : planned + 3] for s in b if s.lens != "none")
    # the order inside blocks is shuffled, not the ladder's, and differs between blocks
    orders = [[s.rung for s in block] for block in blocks[:3]]
    assert orders[0] != names or orders[1] != names
    assert len({tuple(o) for o in orders}) > 1


def test_seed_reproduces_the_order_and_design_records_it() -> None:
    a, b = build_plan(PROXY, seed=7), build_plan(PROXY, seed=7)
    assert a == b
    other = build_plan(PROXY, seed=8)
    assert plan_design(a, 7)["blocks"] != plan_design(other, 8)["blocks"]
    design = plan_design(a, 7)
    assert design["seed"] == 7
    assert design["blocks"] == [[s.rung_id for s in block] for block in blocks_of(a)]
    assert sorted(i for block in design["blocks"] for i in block) == sorted(s.rung_id for s in a)
    # the default seed comes from ladder + run id; the ladder file's `seed` or the Params win
    assert resolve_seed(PROXY, "run-a") == design_seed("proxy-local", "run-a") != resolve_seed(PROXY, "run-b")
    assert build_plan(PROXY, run_id="run-a") == build_plan(PROXY, seed=design_seed("proxy-local", "run-a"))
    assert resolve_seed(PROXY, "run-a", 3) == 3
    fixed = dataclasses.replace(PROXY, ladder=PROXY.ladder.model_copy(update={"seed": 11}))
    assert resolve_seed(fixed, "run-a") == 11 and build_plan(fixed, run_id="x") == build_plan(PROXY, seed=11)
    with pytest.raises(LadderConfigError, match="seed: expected a non-negative integer"):
        resolve_seed(PROXY, "run-a", -1)


def test_aa_ladder_rung_differs_from_its_parent_in_name_only() -> None:
    aa = load_ladder(CONFIG_DIR / "ladders" / "proxy-aa.yaml")
    specs = {s.rung_id: s for s in build_plan(aa, seed=1)}
    # proxy-local's adaptive repeats: all `max` blocks are planned
    planned = aa.ladder.planned_blocks
    assert sorted(specs) == sorted(f"{rung}.none.r{k}" for rung in ("aa", "baseline") for k in range(planned))
    base, flipped = specs["baseline.none.r0"], specs["aa.none.r0"]
    assert (flipped.switch, flipped.value, flipped.parent) == ("aa", "b", "baseline")
    assert flipped.additional_context() == base.additional_context()


def test_extra_work_switch_sets_the_positive_control() -> None:
    spec = build_plan(PROXY, rungs=["baseline"], repeats=1, lens="none", override="extra_work=10")[0]
    assert spec.model_args["extra_work_pct"] == 10
    assert "--extra_work_pct 10" in spec.additional_context()["model_args"]
    assert "extra_work_pct" not in build_plan(PROXY, rungs=["baseline"], repeats=1, lens="none")[0].model_args


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
    spec = by_id(build_plan(SEED, repeats=1))["recompute_off.rocprofv3.l0"]
    context = spec.additional_context()
    assert [t["name"] for t in context["tools"]] == ["rocprofv3_lightweight"]
    assert "--compress_ratios [0,0,4,128,4,128,4,0]" in context["model_args"]
    assert "--use_turbo_mega_moe True" in context["model_args"]
    assert json.loads(json.dumps(context)) == context
    # Primus leaves the ladder's warm-up out of its own averages, as the runner does
    assert context["model_args"].startswith(f"--log_avg_skip_iterations {spec.warmup_iters} ")
    torch_spec = by_id(build_plan(SEED, repeats=1))["recompute_off.torch_rank0.l0"]
    assert torch_spec.profile_window == (10, 12)
    assert "--profile_ranks [0]" in torch_spec.additional_context()["model_args"]


def test_spec_json_round_trip() -> None:
    spec = build_plan(PROXY, rungs=["fusions"], repeats=1)[0]
    assert RungSpec.from_json(spec.to_json()) == spec


def test_params_subset_lens_repeats_override() -> None:
    specs = build_plan(
        PROXY, rungs=["fusions", "baseline", "fusions"], lens="torch_rank0", repeats=2, override="global_batch=4"
    )
    # one lens for every selected rung: `repeats` blocks of profiled runs, none of them measure runs
    assert [s.rung_id for s in specs] == [
        "baseline.torch_rank0.p0",
        "baseline.torch_rank0.p1",
        "fusions.torch_rank0.p0",
        "fusions.torch_rank0.p1",
    ]
    assert {(s.purpose, s.block) for s in specs} == {("profile", 0), ("profile", 1)}
    assert all(s.model_args["global_batch_size"] == 4 and s.model_args["profile"] is True for s in specs)
    assert all(s.profile_window == (2, 4) for s in specs)  # a trigger-form lens keeps the lens's whole window
    unprofiled = build_plan(PROXY, rungs=["baseline"], lens="none", repeats=2)
    assert [(s.rung_id, s.purpose, s.block) for s in unprofiled] == [
        ("baseline.none.r0", "measure", 0),
        ("baseline.none.r1", "measure", 1),
    ]
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
        ("rocprofv3", ["rocprofv3", "--kernel-trace", "--memory-copy-trace", "--output-format", "json", "-d"]),
        ("rocm_trace_lite", ["rtl", "trace", "--mode", "lite", "-o"]),
        ("torch_rank0", ["/workspace/Primus/primus-cli"]),
    ],
)
def test_docker_command_wraps_primus_for_the_lens(
    tmp_path: Path, lens: str, prefix: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PRIMUS_PATH", raising=False)
    spec = by_id(build_plan(SEED, repeats=1))[f"recompute_off.{lens}.l0"]
    argv, env = docker_backend.command(spec, tmp_path)
    assert argv[: len(prefix)] == prefix
    primus = argv[argv.index("/workspace/Primus/primus-cli") :]
    assert primus[:3] == ["/workspace/Primus/primus-cli", "direct", "--log_file"]
    assert primus[4:8] == [
        "train",
        "pretrain",
        "--config",
        "examples/megatron/configs/MI355X/deepseek_v4_flash-BF16-pretrain.yaml",
    ]
    assert "--config_path" not in primus and "--" not in primus
    assert env["PRIMUS_WORKSPACE"] == str(tmp_path.resolve())


def test_cli_plan_reproduces_a_runs_order() -> None:
    import subprocess
    import sys

    aa = load_ladder(CONFIG_DIR / "ladders" / "proxy-aa.yaml")
    proc = subprocess.run(
        [sys.executable, "-m", "traceladder.cli", "plan", "proxy-aa", "--run-id", "manual__1", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [json.loads(s.to_json()) for s in build_plan(aa, run_id="manual__1")]
