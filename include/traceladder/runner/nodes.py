"""One rung over several nodes (backend: slurm, `nnodes` > 1; issue 27).

Every node of the job runs `traceladder run-rung` with the same spec, and each starts its own
node's ranks (NNODES, NODE_RANK, GPUS_PER_NODE, MASTER_ADDR, MASTER_PORT, as torchrun and Primus
read them). The nodes share a filesystem (the cluster's `slurm.work_dir`), and the job script points
`TRACELADDER_NODE_DIR` at a folder of the job's in it. Who writes what:

* a **peer node** (every node but the last) runs the workload in `<node dir>/node<R>/`, then writes
  `node<R>/done` (its exit code) and uploads nothing;
* the **last node** (whose last rank prints the Primus line, as on one node) runs the workload too,
  waits for every peer's `done`, copies their trace files into its own workspace (under
  `node<R>/`: the files already carry their global rank) and appends their logs to its own. Then it
  is the single-node runner again: one `log.txt.gz`, `traces/rank<R>...` with global ranks, one
  `metrics.json` and one `manifest.json` under the rung's prefix, through its spool.

Standard library only: the runner image imports this.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from traceladder.core import env_vars
from traceladder.core.documents import JSONObject, JSONValue

ENV_NODE_DIR = env_vars.NODE_DIR.name
DONE = "done"


@dataclass(frozen=True)
class NodeRole:
    nnodes: int
    node_rank: int
    folder: Path  # the job's shared node folder

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> NodeRole | None:
        """This runner's place in a multi-node rung; None on one node (or without a shared folder)."""
        env = os.environ if env is None else env
        try:
            nnodes = int(env.get("NNODES") or 1)
            node_rank = int(env.get("NODE_RANK") or 0)
        except ValueError:
            return None
        folder = env_vars.NODE_DIR.get(env)
        if nnodes <= 1 or not folder:
            return None
        return cls(nnodes, node_rank, Path(folder))

    @property
    def leader(self) -> bool:
        return self.node_rank == self.nnodes - 1

    def workdir(self, rank: int | None = None) -> Path:
        path = self.folder / f"node{self.node_rank if rank is None else rank}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def mark_done(self, code: int | None, timed_out: bool) -> None:
        tmp = self.workdir() / f"{DONE}.tmp"
        tmp.write_text(json.dumps({"exit_code": code, "timed_out": timed_out}))
        tmp.replace(self.workdir() / DONE)  # atomic: the leader never reads half a file

    def wait_for_peers(self, timeout_s: float) -> dict[int, JSONObject]:
        """Each peer's `done` record, waiting up to timeout_s; a peer that never finished is
        `{"exit_code": None, "missing": True}`."""
        deadline = time.monotonic() + timeout_s
        peers = [r for r in range(self.nnodes) if r != self.node_rank]
        out: dict[int, JSONObject] = {}
        while True:
            for rank in peers:
                done = self.folder / f"node{rank}" / DONE
                if rank not in out and done.exists():
                    out[rank] = json.loads(done.read_text())
            if len(out) == len(peers) or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        for rank in peers:
            out.setdefault(rank, {"exit_code": None, "missing": True})
        return out

    def gather(self, workspace: Path, log_path: Path) -> None:
        """The peers' trace files into this workspace and their logs onto this log."""
        with log_path.open("a", encoding="utf-8") as log:
            for rank in range(self.nnodes):
                if rank == self.node_rank:
                    continue
                peer = self.folder / f"node{rank}"
                if (peer / "output").is_dir():
                    shutil.copytree(peer / "output", workspace / f"node{rank}", dirs_exist_ok=True)
                peer_log = peer / "log.txt"
                text = peer_log.read_text(encoding="utf-8", errors="replace") if peer_log.exists() else "(no log)\n"
                log.write(f"[traceladder] ---- node {rank} of {self.nnodes} ----\n{text}")


def peer_failure(peers: Mapping[int, Mapping[str, JSONValue]]) -> str | None:
    """One line for the first peer node that failed or never finished; None if all went well."""
    for rank, record in sorted(peers.items()):
        if record.get("missing"):
            return f"node {rank} never finished"
        if record.get("timed_out"):
            return f"node {rank} reached its deadline"
        if record.get("exit_code") != 0:
            return f"node {rank}'s workload exited {record.get('exit_code')}"
    return None
