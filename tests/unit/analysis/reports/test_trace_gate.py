"""The trace gate (analysis/reports/trace_gate.py) on the shared real traces, on altered copies of
one (each alteration flagged with its reason), and on the CPU proxy's real 2-rank traces (a missing
rank, summary/trace_gate.py)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from traceladder.analysis.api import analyze_trace
from traceladder.core.documents import RungResult, TraceAnalysis
from traceladder.summary.trace_gate import gate_rows
from tests.conftest import REFERENCE_DIR, REPO_ROOT

REF = REFERENCE_DIR / "tracelens-v1.0.0"
ALL = sorted(REF.glob("*/*.json.gz")) if REF.is_dir() else []
DERIVED = sorted((REFERENCE_DIR / "derived").glob("*.json.gz")) if REFERENCE_DIR.is_dir() else []
BERT = REF / "mi300" / "gaunernst_bert-small-uncased__1016001.json.gz"


def _gate(trace: Path, tmp: Path, expect: dict | None = None) -> dict:
    return analyze_trace(trace, tmp / trace.name.split(".")[0], expect=expect)["gate"]


def test_reference_set_is_there(reference_dir: Path) -> None:
    assert len(ALL) == 7 and len(DERIVED) == 3


@pytest.mark.parametrize("trace", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_reference_trace_passes(trace: Path, tmp_path: Path) -> None:
    gate = _gate(trace, tmp_path)
    assert gate["fit"] is True and gate["reasons"] == []
    # the analysis.json written holds the same verdict, typed
    stored = TraceAnalysis.from_json((tmp_path / trace.name.split(".")[0] / "analysis.json").read_text())
    assert stored.gate is not None and stored.gate.fit


def test_passing_traces_that_look_misleading(tmp_path: Path) -> None:
    resnet = _gate(REF / "mi300" / "resnet_act_checkpoint.json.gz", tmp_path)
    assert 20 < resnet["comm_unlaunched_pct"] < 30  # collectives with no launch, set apart
    assert resnet["unlaunched_pct"] < resnet["unlaunched_max_pct"]
    qwen = _gate(REF / "mi300" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", tmp_path)
    assert 29 < qwen["before_host_pct"] < 33  # before the host span: queued before the window
    rocprof = _gate(REF / "rocprof" / "908_results.json.gz", tmp_path)
    assert rocprof["expect_cpu"] is False and rocprof["host_ops"] == 0 and rocprof["fit"]


@pytest.mark.parametrize("trace", DERIVED, ids=lambda p: p.name)
def test_gpu_only_captures_lack_the_cpu_side(trace: Path, tmp_path: Path) -> None:
    gate = _gate(trace, tmp_path)
    assert gate["fit"] is False and gate["reasons"] == ["CPU side missing (no host ops)"]


def _altered(tmp: Path, change) -> Path:
    doc = json.loads(gzip.decompress(BERT.read_bytes()))
    doc["traceEvents"] = change(doc["traceEvents"])
    out = tmp / "altered.json"
    out.write_text(json.dumps(doc))
    return out


def _launch(e: dict) -> bool:
    return e.get("cat") == "cuda_runtime" and "LaunchKernel" in e.get("name", "")


def test_graph_replays_are_flagged(tmp_path: Path) -> None:
    def to_graph(events: list[dict]) -> list[dict]:
        return [{**e, "name": "hipGraphLaunch"} if _launch(e) else e for e in events]

    gate = _gate(_altered(tmp_path, to_graph), tmp_path)
    assert gate["fit"] is False and gate["graph_pct"] > 90
    assert [r for r in gate["reasons"] if "graph replays" in r] == gate["reasons"]


def test_kernels_with_no_launching_op_are_flagged(tmp_path: Path) -> None:
    def drop_half(events: list[dict]) -> list[dict]:
        launches = [i for i, e in enumerate(events) if _launch(e)]
        gone = set(launches[1::2])
        return [e for i, e in enumerate(events) if i not in gone]

    gate = _gate(_altered(tmp_path, drop_half), tmp_path)
    assert gate["fit"] is False and gate["unlaunched_pct"] > 10
    assert len(gate["reasons"]) == 1 and "no launching op" in gate["reasons"][0]
    assert "collectives apart" in gate["reasons"][0] and "host span" in gate["measure"]


def test_fewer_steps_than_asked_and_no_gpu_events(tmp_path: Path) -> None:
    gate = _gate(BERT, tmp_path, {"cpu": True, "gpu": True, "steps": 3})
    assert gate["reasons"] == ["window has 1 of the 3 steps asked"]

    def cpu_only(events: list[dict]) -> list[dict]:
        return [e for e in events if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]

    gate = _gate(_altered(tmp_path, cpu_only), tmp_path, {"cpu": True, "gpu": True, "steps": 1})
    assert gate["reasons"] == ["no GPU events"]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The CPU proxy's real 2-rank traces (its torch_all_ranks lens: profile_ranks [0, 1])."""
    ws = tmp_path_factory.mktemp("proxy2")
    args = "--num_layers 1 --hidden_size 32 --num_attention_heads 2 --num_experts 4 --moe_router_topk 2 "
    args += "--moe_ffn_hidden_size 8 --seq_length 32 --vocab_size 64 --train_iters 3 --profile True "
    args += "--use_pytorch_profiler True --profile_step_start 2 --profile_step_end 3 --profile_ranks [0,1] "
    args += "--expert_model_parallel_size 2 --global_batch_size 2 --exp_name t"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "include"), "PRIMUS_WORKSPACE": str(ws)}
    proc = subprocess.run(
        [sys.executable, "-m", "traceladder.workload", *args.split()], env=env, capture_output=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    traces = sorted(ws.rglob("*.pt.trace.json.gz"))
    assert len(traces) == 2
    return traces


@pytest.mark.slow
def test_a_missing_rank_is_flagged(two_ranks: list[Path], tmp_path: Path) -> None:
    expect = {"cpu": True, "gpu": False, "steps": 1}  # the local backend's torch lens
    analyses = {}
    for p in two_ranks:
        out = tmp_path / p.name
        analyze_trace(p, out, expect=expect)
        analyses[p.name] = TraceAnalysis.from_json((out / "analysis.json").read_text())
    assert all(a.gate and a.gate.fit and a.gate.world_size == 2 for a in analyses.values())
    spec = {"rung_id": "r.torch_all_ranks.l0", "model_args": {"profile_ranks": [0, 1]}}

    def rows(keys: list[str]) -> list:
        run = RungResult.from_dict(
            {"rung": "r", "rung_id": "r.torch_all_ranks.l0", "lens": "torch_all_ranks", "repeat": 0, "status": "ok"}
            | {"traces": keys}
        )
        return gate_rows([spec], {run.rung_id: run}, analyses)

    both = rows([p.name for p in two_ranks])
    assert [r["fit"] for r in both] == [True, True]
    rank0 = next(p.name for p in two_ranks if "rank[0]" in p.name)
    (only,) = rows([rank0])
    assert only["fit"] is False and only["reasons"] == ["ranks missing: 1 of 2 (rank 1)"]
