"""A ladder's keys are held to what its workload takes: Primus's (the upstream table) when the runner
starts Primus, the CPU proxy's own list otherwise; a variable no file of primus-cli's path reads is a
warning naming the config key to set instead (config/validate.py `check_workload_keys`)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.config.test_validate import LADDERS, MINIMAL
from traceladder.config import LadderConfigError, load_ladder
from traceladder.config.loader import CONFIG_DIR

SEED = yaml.safe_load((CONFIG_DIR / "ladders" / "deepseek-v4-flash-mi350x.yaml").read_text())


def _write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "ladder.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_every_shipped_ladder_validates_with_no_warning() -> None:
    for path in LADDERS:
        assert load_ladder(path).warnings == (), path.name


def test_a_misspelt_primus_key_names_the_key_the_rung_and_the_closest_key(tmp_path: Path) -> None:
    doc = copy.deepcopy(SEED)
    doc["switches"]["fusions"]["values"][True]["model_args"]["moe_permute_fusoin"] = True
    with pytest.raises(LadderConfigError) as err:
        load_ladder(_write(tmp_path, doc))
    message = str(err.value)
    assert "switches.fusions.values.True.model_args.moe_permute_fusoin" in message
    assert "(rung fusions)" in message and "closest known key: moe_permute_fusion" in message


def test_an_example_only_variable_is_a_warning_naming_the_config_key(tmp_path: Path) -> None:
    doc = copy.deepcopy(SEED)
    doc["base"]["docker_env_vars"]["PRIMUS_V4_INDEXER_DISTILL_LOSS_COEFF"] = "0"
    path = _write(tmp_path, doc)
    (warning,) = load_ladder(path).warnings
    assert "base.docker_env_vars.PRIMUS_V4_INDEXER_DISTILL_LOSS_COEFF" in warning
    assert "examples/deepseek-v4/run_deepseek_v4.sh" in warning and "v4_indexer_distill_loss_coeff" in warning
    cli = subprocess.run(
        [sys.executable, "-m", "traceladder.cli", "validate", str(path)], capture_output=True, text=True, check=False
    )
    assert cli.returncode == 0 and cli.stderr.startswith("warning: ") and ": ok: ladder" in cli.stdout


def test_a_proxy_ladder_is_held_to_the_proxys_own_keys(tmp_path: Path) -> None:
    doc = copy.deepcopy(MINIMAL)
    doc["base"]["model_args"]["use_turbo_deepepp"] = True
    with pytest.raises(LadderConfigError, match=r"not a key of the CPU proxy .*closest known key: use_turbo_deepep"):
        load_ladder(_write(tmp_path, doc))
    doc = copy.deepcopy(MINIMAL)
    doc["base"]["model_args"]["standin_extra_work_kernel"] = 1  # the stand-ins' own keys stay accepted
    assert load_ladder(_write(tmp_path, doc)).warnings == ()
