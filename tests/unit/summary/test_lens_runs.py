"""The summary's lens-run parts (issue 61): the kernel-names table from a lens block's stored
reports, the every-rung block's cost, and a reason for every rung without a "why it moved" line;
shown in summary.md, report.html and the Ladders page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testkit.results import typed
from traceladder.analysis.api import analysis_prefix
from traceladder.storage.artifacts import DirArtifactSink
from traceladder.summary.lens_runs import lens_runs_parts, markdown
from traceladder.summary.render.html import to_html
from traceladder.summary.render.markdown import to_markdown

P = "traceladder/l/run"
ROCPROF = f"{P}/b.rocprofv3.l0/traces/1_results.json.gz"
TORCH = f"{P}/b.torch_rank0.l0/traces/rank0.pt.trace.json.gz"
PROCESS_CSV = b"name,Count,Total Kernel Time (ms)\ngemm,6,600.0\nnccl,6,300.0\ninit,1,100.0\n"
WINDOW_CSV = (
    "Parent op category,Parent cpu_op,Kernel name,Kernel stream,Kernel duration (µs)_sum\n"
    "GEMM,aten::mm,gemm,0,200.0\nruntime,hipLaunchKernel,nccl,0,100.0\n"
).encode()


def _spec(rung: str, lens: str, purpose: str, block: int, parent: str | None, iters: int = 10) -> dict[str, Any]:
    tag = {"measure": "r", "lens": "l", "profile": "p"}[purpose]
    return {
        "rung_id": f"{rung}.{lens}.{tag}0",
        "rung": rung,
        "lens": lens,
        "purpose": purpose,
        "block": block,
        "parent": parent,
        "switch": None if parent is None else "s",
        "value": None,
        "repeat": 0,
        "model_args": {"train_iters": iters},
        "storage_prefix": "traceladder",
    }


def _result(spec: dict[str, Any], traces: list[str] | None = None, wall_s: float = 10.0) -> dict[str, Any]:
    return {
        **{k: spec[k] for k in ("rung_id", "rung", "lens", "purpose", "block", "parent", "switch", "value", "repeat")},
        "run_id": "run",
        "ladder": "l",
        "position": 0,
        "status": "ok",
        "step_ms": 100.0,
        "traces": traces or [],
        "wall_s": wall_s,
        "prefix": f"{P}/{spec['rung_id']}",
    }


def test_kernel_names_cost_and_reasons_reach_every_rendering(tmp_path: Path) -> None:
    from tests.unit.summary.test_attribution import _ladders_page

    specs = [
        _spec("a", "none", "measure", 0, None),
        _spec("b", "none", "measure", 0, "a"),
        _spec("b", "rocprofv3", "lens", 1, "a", iters=6),
        _spec("b", "torch_rank0", "lens", 1, "a", iters=12),
        _spec("a", "torch_rank0", "profile", 2, None, iters=12),
        _spec("b", "torch_rank0", "profile", 2, "a", iters=12),
    ]
    plan = {"ladder": "l", "run_id": "run", "specs": specs}
    traces = {"b.rocprofv3.l0": [ROCPROF], "b.torch_rank0.l0": [TORCH]}
    results = typed({s["rung_id"]: _result(s, traces.get(s["rung_id"]), 10.0 + i) for i, s in enumerate(specs)})
    store = DirArtifactSink(tmp_path)
    store.put_bytes(f"{analysis_prefix(ROCPROF)}/kernel_summary.csv", PROCESS_CSV, "text/csv")
    store.put_bytes(f"{analysis_prefix(TORCH)}/kernel_summary.csv", WINDOW_CSV, "text/csv")
    summary: dict[str, Any] = {
        "ladder": "l",
        "run_id": "run",
        "rungs": [{"rung": "a", "parent": None}, {"rung": "b", "parent": "a"}],
        "attribution": [],
        "findings": ["earlier"],
    }
    parts = lens_runs_parts(store, plan, summary, results, {})
    names = parts["kernel_names"]
    assert isinstance(names, dict)
    # per step: the process over its 6 steps, the window over its 1 (no analysis: no step count)
    assert names["process_steps"] == 6 and names["process_us_per_step"] == 1000.0 / 6
    assert [(r["kernel"], r["status"]) for r in names["rows"]] == [
        ("gemm", "named"),
        ("nccl", "missed: no launching op"),
        ("init", "missed: outside the window"),
    ]
    assert names["seen_pct"] == 60.0 and names["missed_pct"] == 40.0
    assert parts["findings"][0] == "earlier" and "misses 40.0%" in parts["findings"][1]
    assert parts["every_rung"] == {
        "lens": "torch_rank0",
        "runs": 2,
        "ok": 2,
        "wall_s": 14.0 + 15.0,
        "rungs": ["a", "b"],
    }
    # the profile runs stored no trace here: b has its lens run's trace, its parent none
    assert parts["unexplained"] == [
        {"rung": "a", "reason": "the root: it has no parent to compare with"},
        {"rung": "b", "reason": "no ok profiled run (torch_rank0 or torch_all_ranks) of its parent a"},
    ]
    summary |= parts
    lines = "\n".join(markdown(summary))
    assert "| gemm | 0.100 | 60.0 | named |" in lines and "Matching rule: exact name" in lines
    assert "Every-rung profile block (torch_rank0): 2 extra runs (2 ok), 29 s of wall time" in lines
    assert "- **b**: no ok profiled run" in lines and "of its parent a" in lines
    full = {
        "schema": 2,
        "root": "a",
        "metric": "wall",
        "lenses": [],
        "headroom": [],
        "failed_rungs": [],
        "failures": [],
        "provenance": {},
        **summary,
        "rungs": [],
    }
    assert "## Kernel names" in to_markdown(full)
    html = to_html(full, {})
    assert 'id="kernel-names"' in html and "missed: no launching op" in html and "the root: it has" in html
    page = _ladders_page(full)
    assert 'id="kernel-names"' in page and "Every-rung profile block" in page


def test_a_lens_block_without_its_pair_gives_no_table(tmp_path: Path) -> None:
    specs = [_spec("a", "none", "measure", 0, None), _spec("a", "rocprofv3", "lens", 1, None, iters=6)]
    results = typed({s["rung_id"]: _result(s, [ROCPROF]) for s in specs})
    summary: dict[str, Any] = {"rungs": [{"rung": "a", "parent": None}], "attribution": [], "findings": []}
    parts = lens_runs_parts(
        DirArtifactSink(tmp_path), {"ladder": "l", "run_id": "run", "specs": specs}, summary, results, {}
    )
    assert (
        parts["kernel_names"] is None
        and parts["every_rung"] is None
        and markdown({**summary, **parts})
        == [
            "",
            '## Rungs with no "why it moved" line',
            "- **a**: the root: it has no parent to compare with",
        ]
    )
