"""Ladder validation: the seed files pass; every bad case fails with `<file>: <field>: <reason>`."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from traceladder.config import LadderConfigError, load_ladder
from traceladder.config.loader import CONFIG_DIR

LADDERS = sorted((CONFIG_DIR / "ladders").glob("*.yaml"))

MINIMAL: dict[str, Any] = {
    "schema": 1,
    "ladder": "mini",
    "model_tag": "primus_train/x",
    "image": "rocm/primus:v26.7",
    "backend": "local",
    "cluster": "local",
    "schedule": "0 3 * * 1",
    "warmup_iters": 1,
    "base": {"model_args": {"train_iters": 6}},
    "switches": {
        "fusions": {"default": False, "values": {False: {}, True: {"docker_env_vars": {"PRIMUS_RMSNORM_TRITON": "1"}}}},
        "deepep": {"default": False, "values": {False: {}, True: {"model_args": {"use_turbo_deepep": True}}}},
        "lens": {
            "default": "none",
            "values": {
                "none": {},
                "torch_rank0": {
                    "model_args": {
                        "profile": True,
                        "use_pytorch_profiler": True,
                        "profile_ranks": [0],
                        "profile_step_start": 3,
                        "profile_step_end": 5,
                    }
                },
            },
        },
    },
    "rungs": [{"name": "baseline"}, {"name": "fusions", "parent": "baseline", "set": {"fusions": True}}],
    "lenses": {"rung": "fusions", "use": ["none", "torch_rank0"]},
}


def write(tmp_path: Path, data: dict[str, Any], name: str = "ladder.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def error_of(tmp_path: Path, mutate) -> LadderConfigError:
    data = copy.deepcopy(MINIMAL)
    mutate(data)
    with pytest.raises(LadderConfigError) as info:
        load_ladder(write(tmp_path, data))
    return info.value


# the verdicts' A/A and positive controls, and the triage demo's one-rung ladder
CONTROL_LADDERS = {"proxy-aa.yaml", "proxy-aa9.yaml", "proxy-power.yaml", "proxy-regression.yaml"}


@pytest.mark.parametrize("path", [p for p in LADDERS if p.name not in CONTROL_LADDERS], ids=lambda p: p.name)
def test_seed_ladders_validate(path: Path) -> None:
    loaded = load_ladder(path)
    names = [r.name for r in loaded.ladder.rungs]
    assert names == [
        "baseline",
        "fusions",
        "attn_gluon_v3",
        "attn_turbo",
        "deepep",
        "grouped_gemm",
        "megamoe",
        "recompute_off",
        "gbs16",
        "gbs32",
    ]
    assert loaded.ladder.model_tag == "primus_train/megatron_MI355X_deepseek_v4_flash-BF16-pretrain"
    assert loaded.ladder.schedule and loaded.ladder.lenses is not None


def test_aa_ladder_validates_with_a_switch_whose_values_set_the_same() -> None:
    loaded = load_ladder(CONFIG_DIR / "ladders" / "proxy-aa.yaml")
    aa = loaded.ladder.switches["aa"]
    assert aa.values["a"] == aa.values["b"]  # identical settings, yet a valid one-switch rung
    assert [(r.name, r.parent, r.set) for r in loaded.ladder.rungs] == [
        ("baseline", None, {}),
        ("aa", "baseline", {"aa": "b"}),
    ]
    assert loaded.ladder.schedule is None and loaded.ladder.lenses is None


def test_aa9_ladder_is_nine_comparisons_that_cannot_move() -> None:
    loaded = load_ladder(CONFIG_DIR / "ladders" / "proxy-aa9.yaml")
    rungs = loaded.ladder.rungs
    assert [r.name for r in rungs] == ["baseline", *(f"aa{i}" for i in range(1, 10))]
    assert all(r.parent == p.name and list(r.set) == ["aa"] for p, r in zip(rungs, rungs[1:]))
    aa = loaded.ladder.switches["aa"]
    assert aa.values["a"] == aa.values["b"]  # every rung runs its parent's settings
    assert loaded.ladder.adaptive == load_ladder(CONFIG_DIR / "ladders" / "proxy-local.yaml").ladder.adaptive
    assert loaded.ladder.correction == "holm" and loaded.ladder.lenses is None


def test_the_ladder_wide_rule_is_read_and_checked(tmp_path: Path) -> None:
    """`correction:` names the ladder-wide rule (docs/statistics.md, "Calls over the whole ladder")."""
    from traceladder.stats.sequential import CORRECTIONS, DEFAULT_CORRECTION

    assert load_ladder(write(tmp_path, MINIMAL)).ladder.correction == DEFAULT_CORRECTION
    for i, rule in enumerate(CORRECTIONS):  # the config's names are the statistics' names
        data = {**copy.deepcopy(MINIMAL), "correction": rule}
        assert load_ladder(write(tmp_path, data, f"c{i}.yaml")).ladder.correction == rule
    err = error_of(tmp_path, lambda d: d.update(correction="bonferroni"))
    assert err.field == "correction", err.one_line()
    assert "benjamini_hochberg" in str(err) and len(str(err).splitlines()) == 1


def test_power_ladder_adds_known_work_to_the_root_and_nothing_else() -> None:
    loaded = load_ladder(CONFIG_DIR / "ladders" / "proxy-power.yaml")
    assert [(r.name, r.parent, r.set) for r in loaded.ladder.rungs] == [
        ("baseline", None, {}),
        ("extra5", "baseline", {"extra_work": 5}),
        ("extra10", "baseline", {"extra_work": 10}),
    ]
    extra = loaded.ladder.switches["extra_work"].values
    assert extra[5].model_args == {"extra_work_pct": 5} and extra[10].model_args == {"extra_work_pct": 10}
    assert loaded.ladder.schedule is None and loaded.ladder.lenses is None


def test_every_rung_lens_and_seed_are_read(tmp_path: Path) -> None:
    data = copy.deepcopy(MINIMAL)
    data["lenses"]["every_rung"] = "torch_rank0"
    data["seed"] = 42
    loaded = load_ladder(write(tmp_path, data))
    assert loaded.ladder.lenses.every_rung == "torch_rank0" and loaded.ladder.seed == 42
    only_every = copy.deepcopy(MINIMAL)
    only_every["lenses"] = {"every_rung": "torch_rank0"}  # no lens rung: only the every-rung block
    assert load_ladder(write(tmp_path, only_every, "b.yaml")).ladder.lenses.rung is None


def test_minimal_ladder_is_valid(tmp_path: Path) -> None:
    loaded = load_ladder(write(tmp_path, MINIMAL))
    assert loaded.assignments["fusions"]["fusions"] is True
    assert loaded.assignments["baseline"] == {"fusions": False, "deepep": False, "lens": "none"}


@pytest.mark.parametrize(
    ("mutate", "field", "reason"),
    [
        (
            lambda d: d["rungs"][1]["set"].update(deepep=True),
            "rungs[fusions].set",
            "changes 2 switches (fusions, deepep)",
        ),
        (lambda d: d["rungs"][1].update(set={"fusions": False}), "rungs[fusions].set", "changes 0 switches"),
        (lambda d: d["rungs"][1].update(set={}), "rungs[fusions].set", "changes 0 switches"),
        (lambda d: d.update(colour="blue"), "colour", "unknown key"),
        (lambda d: d["rungs"][1].update(sett={}), "rungs[1].sett", "unknown key"),
        (lambda d: d["rungs"][1].update(parent="nowhere"), "rungs[fusions].parent", "unknown parent 'nowhere'"),
        (
            lambda d: d["rungs"].extend(
                [
                    {"name": "a", "parent": "b", "set": {"deepep": True}},
                    {"name": "b", "parent": "a", "set": {"deepep": True}},
                ]
            ),
            "rungs[b].parent",
            "cycle: a -> b -> a",
        ),
        (
            lambda d: d["rungs"].append({"name": "fusions", "parent": "baseline", "set": {"deepep": True}}),
            "rungs[2].name",
            "duplicate rung name",
        ),
        (lambda d: d["lenses"]["use"].append("perfetto"), "lenses.use[2]", "unknown lens 'perfetto'"),
        (lambda d: d["lenses"]["use"].append("rocprofv3"), "lenses.use[2]", "cannot run on the local backend"),
        (
            lambda d: d["switches"]["lens"]["values"]["torch_rank0"]["model_args"].update(profile_step_end=9),
            "switches.lens.values.torch_rank0.model_args.profile_step_end",
            "9 is beyond train_iters 6",
        ),
        (lambda d: d.update(schedule="every monday"), "schedule", "not a cron expression"),
        (lambda d: d.update(schema=2), "schema", "Input should be 1"),
        (
            lambda d: d["rungs"][1]["set"].update(fusions="maybe"),
            "rungs[fusions].set.fusions",
            "'maybe' is not a value of switch",
        ),
        (lambda d: d["rungs"][1].update(set={"speed": True}), "rungs[fusions].set.speed", "unknown switch"),
        (lambda d: d.update(cluster="mars"), "cluster", "unknown cluster 'mars'"),
        (lambda d: d["lenses"].update(every_rung="none"), "lenses.every_rung", "expected a profiling lens"),
        (lambda d: d["lenses"].update(every_rung="rocprofv3"), "lenses.every_rung", "cannot run on the local backend"),
        (
            lambda d: d["lenses"].update(every_rung="torch_all_ranks"),
            "lenses.every_rung",
            "has no entry under switches.lens.values",
        ),
        (lambda d: d.update(lenses={"use": ["torch_rank0"]}), "lenses.rung", "no rung to run them on"),
        (lambda d: d.update(seed=-1), "seed", "greater than or equal to 0"),
        (
            lambda d: d["base"]["model_args"].update(log_avg_skip_iterations=2),
            "base.model_args.log_avg_skip_iterations",
            "is set from the ladder's warmup_iters",
        ),
        (
            lambda d: d.update(
                builds=[
                    {
                        "name": "b",
                        "created": "2026-11-01T00:00:00Z",
                        "changes": {"model_args": {"log_avg_skip_iterations": 3}},
                    }
                ]
            ),
            "builds[0].changes.model_args.log_avg_skip_iterations",
            "set that instead",
        ),
        (
            lambda d: d["switches"]["fusions"]["values"][True].update(model_args={"log_avg_skip_iterations": 1}),
            "switches.fusions.values.True.model_args.log_avg_skip_iterations",
            "is set from the ladder's warmup_iters",
        ),
    ],
)
def test_bad_ladders_name_the_field(tmp_path: Path, mutate, field: str, reason: str) -> None:
    err = error_of(tmp_path, mutate)
    assert err.field == field, err.one_line()
    assert reason in err.reason, err.one_line()
    assert err.one_line().startswith(f"{tmp_path / 'ladder.yaml'}: {field}: ")


def test_yaml_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("schema: 1\nladder: x\n  bad: [\n")
    with pytest.raises(LadderConfigError) as info:
        load_ladder(path)
    assert info.value.field == "line 3:6"
    assert "YAML syntax error" in info.value.reason


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traceladder.cli", *args], capture_output=True, text=True, timeout=60)


def test_cli_validate_ok_and_bad(tmp_path: Path) -> None:
    ok = run_cli("validate", str(LADDERS[0]))
    assert ok.returncode == 0 and "ok: ladder" in ok.stdout

    data = copy.deepcopy(MINIMAL)
    data["rungs"][1]["colour"] = "red"
    bad = run_cli("validate", str(write(tmp_path, data)))
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [f"{tmp_path / 'ladder.yaml'}: rungs[1].colour: unknown key"]

    missing = run_cli("validate", str(tmp_path / "absent.yaml"))
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"{tmp_path / 'absent.yaml'}: (file): no such file"

    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [\n")
    syntax = run_cli("validate", str(broken))
    assert syntax.returncode == 2 and "Traceback" not in syntax.stderr
    assert len(syntax.stderr.strip().splitlines()) == 1 and "line 2:1" in syntax.stderr


def test_cli_help() -> None:
    assert run_cli("--help").returncode == 0


def test_headroom_share_is_read_and_checked(tmp_path: Path) -> None:
    """`headroom: {share}`: the roofline share behind the summary's recoverable time (docs/whats-left.md)."""
    assert load_ladder(write(tmp_path, MINIMAL)).ladder.whats_left.share == 0.7
    data = copy.deepcopy(MINIMAL)
    data["headroom"] = {"share": 0.5}
    assert load_ladder(write(tmp_path, data, "b.yaml")).ladder.whats_left.share == 0.5
    err = error_of(tmp_path, lambda d: d.update(headroom={"share": 1.5}))
    assert "headroom" in str(err) and "share" in str(err) and len(str(err).splitlines()) == 1
