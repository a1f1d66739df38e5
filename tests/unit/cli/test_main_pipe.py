"""`traceladder ... | head`: a reader that leaves early is no error of ours (issue 19, noticed):
no BrokenPipe traceback, the shell's SIGPIPE status, for every command (one fix in cli.main)."""

from __future__ import annotations

import os
import subprocess
import sys
from tests.conftest import REPO_ROOT

INCLUDE = REPO_ROOT / "include"


def test_plan_into_a_closed_pipe_prints_no_traceback() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte: the first write fails with EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "traceladder.cli", "plan", "--json", "proxy-local"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(INCLUDE)},
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr.decode()
    assert proc.stderr.decode() == "", proc.stderr.decode()


def test_plan_into_head_gives_heads_lines() -> None:
    shell = f"PYTHONPATH={INCLUDE} {sys.executable} -m traceladder.cli plan --json proxy-local | head -n 3"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", shell], capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines() == ["[", "  {", proc.stdout.splitlines()[2]] and '"' in proc.stdout.splitlines()[2]
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 141), proc.returncode  # 0 when the whole plan fit in the pipe's buffer
