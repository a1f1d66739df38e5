"""The proxy's multi-node launch (issue 27): torchrun's NNODES/NODE_RANK/GPUS_PER_NODE/MASTER_ADDR/
MASTER_PORT contract. Two "nodes" (two launchers on this host) each start only their ranks, with
global rank numbers; the last rank, on the last node, prints the Primus line. One node keeps the
single-node launch (no multi-node environment, or NNODES=1 as the docker path sets it)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from traceladder.workload.launch import NodeLaunch

INCLUDE = Path(__file__).resolve().parents[2] / "include"
# 2 EP ranks of a tiny model, every rank profiled at iteration 2 of 3
ARGS = [
    "--num_layers", "1", "--compress_ratios=[0]", "hidden_size=32", "--num_attention_heads", "2",
    "--num_experts", "4", "--moe_router_topk", "2", "--moe_ffn_hidden_size", "8", "--seq_length", "32",
    "--vocab_size", "64", "--seed", "7", "--train_iters", "3", "--profile", "True",
    "--use_pytorch_profiler", "True", "--profile_step_start", "2", "--profile_step_end", "3",
    "--profile_ranks", "[0,1]", "--exp_name", "n", "--expert_model_parallel_size", "2",
    "--global_batch_size", "2",
]  # fmt: skip
ITERATION = re.compile(r"iteration\s+\d+/\s*\d+ \|")


def test_one_node_keeps_the_single_node_launch() -> None:
    assert NodeLaunch.from_env(2, {}) is None
    assert NodeLaunch.from_env(2, {"NNODES": "1", "NODE_RANK": "0", "MASTER_ADDR": "localhost"}) is None


def test_a_node_starts_its_own_global_ranks() -> None:
    env = {"NNODES": "2", "NODE_RANK": "1", "GPUS_PER_NODE": "4", "MASTER_ADDR": "n1", "MASTER_PORT": "29500"}
    node = NodeLaunch.from_env(8, env)
    assert node is not None and list(node.ranks) == [4, 5, 6, 7] and node.master_addr == "n1"


@pytest.mark.parametrize(
    "env,needle",
    [
        (
            {"NNODES": "2", "NODE_RANK": "0", "GPUS_PER_NODE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"},
            "world size 2",
        ),
        (
            {"NNODES": "2", "NODE_RANK": "2", "GPUS_PER_NODE": "1", "MASTER_ADDR": "a", "MASTER_PORT": "1"},
            "NODE_RANK=2",
        ),
        ({"NNODES": "2", "NODE_RANK": "0", "GPUS_PER_NODE": "1", "MASTER_PORT": "1"}, "MASTER_ADDR"),
        ({"NNODES": "two"}, "bad multi-node environment"),
    ],
)
def test_a_bad_multi_node_environment_is_one_line(env: dict[str, str], needle: str) -> None:
    with pytest.raises(SystemExit) as err:
        NodeLaunch.from_env(2, env)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_two_nodes_run_one_rank_each(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PRIMUS_", "NNODES", "NODE_RANK", "MASTER_"))}
    procs = []
    for node in (0, 1):
        env = {
            **base,
            "PYTHONPATH": str(INCLUDE),
            "PRIMUS_WORKSPACE": str(tmp_path / f"node{node}"),
            "NNODES": "2",
            "NODE_RANK": str(node),
            "GPUS_PER_NODE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "traceladder.workload", *ARGS],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    # only the last rank, on the last node, prints the header and the Primus lines
    assert "[proxy] rank" not in outs[0] and not ITERATION.search(outs[0])
    assert "[proxy] rank 1:" in outs[1] and len(ITERATION.findall(outs[1])) == 3
    # each node ran only its own global rank: its profiler wrote that rank's trace
    traces = {node: sorted(p.name for p in (tmp_path / f"node{node}").rglob("*.pt.trace.json*")) for node in (0, 1)}
    assert len(traces[0]) == 1 and "-rank[0]." in traces[0][0], traces
    assert len(traces[1]) == 1 and "-rank[1]." in traces[1][0], traces
