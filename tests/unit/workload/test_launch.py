"""The proxy's multi-node launch (issue 27): torchrun's NNODES/NODE_RANK/GPUS_PER_NODE/MASTER_ADDR/
MASTER_PORT contract, read by `NodeLaunch.from_env`. One node keeps the single-node launch (no
multi-node environment, or NNODES=1 as the docker path sets it). Two real nodes, each starting
only its global rank, run in tests/integration/test_slurm.py (the 2-node proxy rung)."""

from __future__ import annotations

import pytest

from traceladder.workload.launch import NodeLaunch


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
