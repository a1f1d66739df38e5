"""Find the trace files each lens's collector writes, and name them for the artifact store."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_RANK = re.compile(r"rank[\[_-]?(\d+)\]?")


@dataclass(frozen=True)
class TraceFile:
    path: Path
    # Name under the rung's `traces/` folder; always gzipped there.
    artifact_name: str

    @property
    def already_gzipped(self) -> bool:
        return self.path.suffix == ".gz"


def _rank_of(name: str) -> int | None:
    match = _RANK.search(name)
    return int(match.group(1)) if match else None


def find_traces(lens: str, workspace: Path) -> list[TraceFile]:
    """Trace files under the rung's workspace, by where each collector writes them (docs/facts.md, "Primus")."""
    if lens in ("torch_rank0", "torch_all_ranks"):
        # Primus: {workspace}/.../tensorboard/primus-megatron-exp[NAME]-rank[R].*.pt.trace.json(.gz)
        found: list[TraceFile] = []
        for path in sorted(workspace.rglob("*.pt.trace.json*")):
            rank = _rank_of(path.name)
            found.append(TraceFile(path, f"rank{rank if rank is not None else len(found)}.pt.trace.json.gz"))
        return found
    if lens == "rocprofv3":
        # rocprofv3 -d DIR: DIR/<hostname>/<pid>_results.json
        return [
            TraceFile(p, f"{p.parent.name}.{p.name}.gz")
            for p in sorted((workspace / "rocprof_output").rglob("*_results.json"))
        ]
    if lens == "rocm_trace_lite":
        db = workspace / "rocm_trace_lite_output" / "trace.db"
        return [TraceFile(db, "trace.db.gz")] if db.exists() else []
    return []
