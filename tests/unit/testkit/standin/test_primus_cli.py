"""The stand-in primus-cli's `slurm` mode (issue 27) parses as strictly as Primus's
runner/primus-cli-slurm.sh (read at Primus fd1eeabb): launcher, Slurm flags, `--`, the entry, its
args, `--`, Primus's arguments; a missing entry exits 2 with Primus's message; the entry sets
torchrun's variables from the Slurm job, as primus-cli-slurm-entry.sh does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tests.conftest import REPO_ROOT

STANDIN = REPO_ROOT / "testkit" / "standin" / "primus-cli"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "NNODES", "NODE_RANK"))}
    return subprocess.run(
        [sys.executable, str(STANDIN), *args], capture_output=True, text=True, timeout=30, env={**base, **(env or {})}
    )


def test_a_missing_entry_exits_2_with_primus_message() -> None:
    for args in (["slurm", "srun", "-N", "2"], ["slurm", "sbatch", "-N", "2", "--"]):
        proc = cli(*args)
        assert proc.returncode == 2 and "Missing Primus entry (container|direct)" in proc.stderr


def test_the_launch_it_would_exec() -> None:
    proc = cli(
        "slurm", "--dry-run", "sbatch", "-N", "2", "--partition", "p", "--exclusive", "--time=5",
        "--", "direct", "--log_file", "/w/log.txt",
        "--", "train", "pretrain", "--config", "c.yaml", "--train_iters", "3",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert line == (
        f"[slurm] [DRY RUN] Would execute: sbatch -N 2 --partition p --exclusive --time=5 {STANDIN} slurm-entry "
        "--dry-run direct --log_file /w/log.txt -- train pretrain --config c.yaml --train_iters 3"
    )
    # srun is the default launcher
    assert cli("slurm", "--dry-run", "-N", "1", "--", "direct", "--", "train", "pretrain").stdout.split()[5] == "srun"


@pytest.mark.parametrize(
    "args,needle",
    [
        (["slurm", "srun", "oops", "--", "direct", "--", "train", "pretrain"], "unexpected argument 'oops'"),
        (["slurm", "srun", "-N", "2", "--", "container", "--", "train", "pretrain"], "only 'direct'"),
        (["slurm", "srun", "-N", "2", "--", "direct", "--", "benchmark", "gemm"], "expected 'train pretrain'"),
    ],
)
def test_what_it_refuses(args: list[str], needle: str) -> None:
    proc = cli(*args)
    assert proc.returncode == 2 and needle in proc.stderr


def test_the_entry_needs_a_slurm_job() -> None:
    proc = cli("slurm-entry", "direct", "--log_file", "/w/l.txt", "--", "train", "pretrain", "--config", "c.yaml")
    assert proc.returncode == 2 and "SLURM_NODELIST not set" in proc.stderr


# ---- issue 60: the keys it takes are the upstream table's --------------------------------------
def _direct(tmp_path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """`primus-cli direct` from a Primus checkout stub (requirements.txt, the config) in tmp_path."""
    (tmp_path / "requirements.txt").write_text("")
    (tmp_path / "c.yaml").write_text("work_group: amd\n")
    env = {"PRIMUS_PATH": str(tmp_path), "PRIMUS_WORKSPACE": str(tmp_path / "ws"), "STANDIN_KFD": "/dev/null"}
    return subprocess.run(
        [sys.executable, str(STANDIN), "direct", "--log_file", str(tmp_path / "log.txt"), "--", "train", "pretrain",
         "--config", "c.yaml", *overrides],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "STANDIN_STEP_SLEEP_S": "0", **env},
    )  # fmt: skip


def test_it_takes_every_key_of_the_table(tmp_path) -> None:
    from traceladder.config.upstream import primus_keys
    from traceladder.runner.primus_log import parse_iterations, summarize

    runs = {"train_iters": "4", "log_avg_skip_iterations": "1", "global_batch_size": "8", "seq_length": "4096"}
    args = [a for key in sorted(primus_keys()) for a in (f"--{key}", runs.get(key, "1"))]
    assert len(args) > 1500 and "--torch_compile.enable" in args and "--torch_compile" in args
    proc = _direct(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    # what it printed, from the table's segment formats, is what the runner parses
    metrics = summarize(parse_iterations(proc.stdout.splitlines()), 1)
    assert metrics.iterations_used == [2, 3, 4] and metrics.tokens_per_sec_per_gpu and metrics.peak_mem_gb


def test_a_key_the_table_lacks_exits_2_naming_it(tmp_path) -> None:
    proc = _direct(tmp_path, "--train_iters", "2", "--use_rocm_mem_inf", "True")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "primus-cli: error: unknown override key 'use_rocm_mem_inf'"
    assert _direct(tmp_path, "--train_iters", "2", "--standin_fail_at_iter", "0").returncode == 0  # the tests' own
