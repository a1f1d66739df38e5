"""TraceLens v1.0.0's perf-model sheets (other than GEMM) ops_unique_args.csv and
unified_perf_summary.csv on the reference traces.

Every sheet TraceLens wrote for a reference PyTorch trace must be written and match
it by the reference README's rule (tests/conformance.py); every sheet it did not write
must not exist.  analysis.json carries a headline per sheet written.
"""

from __future__ import annotations

import csv
import json

import pytest


from tests import conformance

REF, TRACES, _ref_dir = conformance.REF, conformance.TRACES, conformance.ref_dir

SHEETS = [
    "SDPA_fwd.csv",
    "SDPA_bwd.csv",
    "CONV_fwd.csv",
    "CONV_bwd.csv",
    "BinaryElementwise.csv",
    "UnaryElementwise.csv",
    "Normalization.csv",
    "Reduce_fwd.csv",
    "Reduce_bwd.csv",
    "ops_unique_args.csv",
    "unified_perf_summary.csv",
]


def test_reference_sheets_present():
    """The fixtures hold 36 of these sheets over 6 traces: the test below is not vacuous."""
    assert len(TRACES) == 6, TRACES
    have = [(t.name, s) for t in TRACES for s in SHEETS if (_ref_dir(t) / s).exists()]
    assert len(have) == 36, have


@pytest.mark.parametrize("sheet", SHEETS)
@pytest.mark.parametrize("trace", TRACES, ids=lambda p: f"{p.parent.name}/{p.name[:40]}")
def test_sheet_conforms(trace, sheet, produced):
    out = produced(trace)
    ref = _ref_dir(trace) / sheet
    if not ref.exists():  # TraceLens wrote none: neither do we
        assert not (out / sheet).exists(), f"{sheet} written, TraceLens writes none for {trace.name}"
        return
    diffs = conformance.compare_csv(out / sheet, ref)
    assert not diffs, "\n".join(diffs)


def test_wrong_sheet_is_caught(produced):
    """Ours for one trace against another trace's reference must differ."""
    mi300 = REF / "mi300" / "gaunernst_bert-small-uncased__1016001.json.gz"
    h100 = REF / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
    out = produced(mi300)
    for sheet in (
        "SDPA_fwd.csv",
        "BinaryElementwise.csv",
        "Normalization.csv",
        "ops_unique_args.csv",
        "unified_perf_summary.csv",
    ):
        assert conformance.compare_csv(out / sheet, _ref_dir(h100) / sheet), sheet


def test_headlines_match_the_sheets(produced):
    """analysis.json's perf_sheets: one entry per sheet written, totals from its rows."""
    trace = REF / "mi300" / "resnet_act_checkpoint.json.gz"
    out = produced(trace)
    heads = json.loads((out / "analysis.json").read_text())["perf_sheets"]
    written = {p.stem for p in out.glob("*.csv") if p.name in SHEETS and not p.name.startswith(("ops_", "unified_"))}
    assert set(heads) == written and "CONV_fwd" in written
    for sheet, h in heads.items():
        with open(out / f"{sheet}.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert h["shapes"] == len(rows)
        assert h["ops"] == sum(int(r["name_count"]) for r in rows)
        ms = sum(float(r["Kernel Time (µs)_sum"]) for r in rows) / 1e3
        assert h["kernel_time_ms"] == pytest.approx(ms, rel=1e-9)
        gflop = sum(float(r["GFLOPS_first"]) * int(r["name_count"]) for r in rows)
        assert h["tflops_per_s"] == pytest.approx(gflop / 1e3 / (ms / 1e3), rel=1e-9)
    conv = heads["CONV_fwd"]
    assert conv["tflops_per_s"] > 0 and conv["tb_per_s"] > 0


DERIVED = conformance.DERIVED


@pytest.mark.parametrize(
    "trace", sorted(DERIVED.glob("*.json.gz")) if DERIVED.is_dir() else [], ids=lambda p: p.name[:40]
)
def test_gpu_only_traces_get_none(trace, produced):
    """TraceLens writes none of these for a GPU-only trace (no host ops): neither do we."""
    out = produced(trace)
    ref = trace.parent / (trace.name[: -len(".json.gz")] + "_perf_report_csvs")
    assert ref.is_dir() and not any((ref / s).exists() for s in SHEETS)
    assert not [s for s in SHEETS if (out / s).exists()]
    assert json.loads((out / "analysis.json").read_text())["perf_sheets"] == {}
