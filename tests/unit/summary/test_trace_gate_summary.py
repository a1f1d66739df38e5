"""The trace gate and the caveats in the summary: the gate's rows (summary/trace_gate.py), an
unfit trace's attribution entry (no figures), summary.md, report.html and the Ladders page's
macro; the ladder file's `caveats:` (config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.results import typed
from tests.unit.summary.test_build import make_run
from traceladder.config.loader import LadderConfigError, ladders_dir, load_ladder
from traceladder.core.documents import Summary, TraceAnalysis
from traceladder.core.summary_parts import SummaryRung
from traceladder.summary.attribution import gate_unfit, unfit_entry
from traceladder.summary.build import build_summary
from traceladder.summary.render.html import to_html
from traceladder.summary.render.markdown import to_markdown

UNFIT = {"fit": False, "reasons": ["CPU side missing (no host ops)"]}


def _summary(gate: dict | None, caveats: list[str] | None = None) -> dict:
    plan, results = make_run()
    if caveats:
        plan["caveats"] = caveats
    key = "t/deepep.torch_rank0.r0/traces/rank0.pt.trace.json.gz"
    analysis = {"schema": 1, "trace": "rank0.pt.trace.json.gz", "device": "gpu", **({"gate": gate} if gate else {})}
    return build_summary(plan, typed(results), {key: TraceAnalysis.from_dict(analysis)})


def test_unfit_trace_is_named_in_the_summary_md_and_html() -> None:
    summary = _summary(UNFIT, ["Mock data, not full-model figures."])
    (row,) = summary["trace_gate"]
    assert row["fit"] is False and row["rung_id"] == "deepep.torch_rank0.r0"
    md, html = to_markdown(summary), to_html(summary, {})
    assert "## Trace gate (0 of 1 traces fit" in md
    assert "deepep.torch_rank0.r0 `rank0.pt.trace.json.gz`: UNFIT: CPU side missing (no host ops)" in md
    assert "UNFIT: CPU side missing (no host ops)" in html
    # caveats come first: before the ladder table
    assert md.index("Mock data, not full-model figures.") < md.index("## Ladder")
    assert html.index("Mock data, not full-model figures.") < html.index("ladder-table")
    assert Summary.from_dict(summary).caveats == ["Mock data, not full-model figures."]


def test_fit_and_unjudged_traces() -> None:
    (row,) = _summary({"fit": True, "reasons": []})["trace_gate"]
    assert row["fit"] is True
    (row,) = _summary(None)["trace_gate"]  # analysed before the gate: said, not failed
    assert row["fit"] is None and row["reasons"] == ["analysed before the trace gate"]
    assert "caveats" not in _summary(None)  # nothing written where a ladder has none


class _Reports:
    def __init__(self, gate: dict) -> None:
        self.analysis = TraceAnalysis.from_dict({"schema": 1, "trace": "x", "gate": gate})


def test_unfit_attribution_entry_has_no_figures() -> None:
    fit = _Reports({"fit": True})
    assert gate_unfit({}, ("base", "a", fit), ("new", "b", fit)) is None  # type: ignore[arg-type]
    why = gate_unfit({"b": "ranks missing: 1 of 2 (rank 1)"}, ("base", "a", fit), ("new", "b", fit))  # type: ignore[arg-type]
    assert why == "new's trace: ranks missing: 1 of 2 (rank 1)"
    why = gate_unfit({}, ("base", "a", _Reports(UNFIT)), ("new", "b", fit))  # type: ignore[arg-type]
    e = unfit_entry(SummaryRung(rung="new", parent="base"), "torch_rank0", "a", "b", str(why))
    assert e["sentence"] == "trace unfit: base's trace: CPU side missing (no host ops)."
    assert e["kernel_time_delta_us"] is None and e["busy_time_delta_us"] is None and not e["categories"]
    summary = {**_summary(None), "attribution": [e]}
    md, html = to_markdown(summary), to_html(summary, {})
    assert "- **new** vs base (torch_rank0): trace unfit: base's trace: CPU side missing" in md
    assert "trace unfit: base&#39;s trace: CPU side missing (no host ops)</td>" in html


def test_the_ladders_page_macro_prints_caveats_and_the_gate() -> None:
    from traceladder.ui.views import page_templates

    macro = page_templates().from_string("{% import '_macros.html' as m %}{{ m.summary_body(s, '', {}) }}")
    summary = _summary(UNFIT, ["Not official AMD benchmarks."])
    html = macro.render(s=summary)
    assert "Not official AMD benchmarks." in html and "UNFIT: CPU side missing (no host ops)" in html


def test_the_mi350x_ladder_carries_the_writeups_limits() -> None:
    caveats = load_ladder(ladders_dir() / "deepseek-v4-flash-mi350x.yaml").ladder.caveats
    text = " ".join(caveats)
    for words in (
        "single node",
        "eight-layer",
        "not full-model",
        "not official AMD benchmarks",
        "Mock data",
        "forced uniform router load balancing",
        "frozen indexer parameters",
        "BF16 AdamW (not Muon)",
    ):
        assert words in text


def test_a_bad_caveat_is_named(tmp_path: Path) -> None:
    src = (ladders_dir() / "proxy-aa.yaml").read_text()
    path = tmp_path / "proxy-aa.yaml"
    for f in ladders_dir().glob("*.yaml"):
        (tmp_path / f.name).write_text(f.read_text())
    path.write_text(src + "\ncaveats: [' ']\n")
    with pytest.raises(LadderConfigError, match="caveats"):
        load_ladder(path)
