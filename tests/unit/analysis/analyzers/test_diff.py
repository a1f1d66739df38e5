"""`traceladder compare` on the reference traces: bert-small on MI300 vs H100, and resnet with
activation checkpointing (kernels on two streams, collectives). Checked against TraceLens's own
per-trace reports in ../shared/reference: the categories close to the total direct kernel time, the
gap to busy time is its own row, and a trace compared with itself gives zero everywhere."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from traceladder.core.documents import TraceComparison

from tests.conftest import REFERENCE_DIR
from traceladder.analysis.analyzers.diff import GAP_ROW
from traceladder.cli.main import main

REF = REFERENCE_DIR / "tracelens-v1.0.0"
BERT_MI300 = REF / "mi300" / "gaunernst_bert-small-uncased__1016001.json.gz"
BERT_H100 = REF / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
RESNET = REF / "mi300" / "resnet_act_checkpoint.json.gz"
ROCPROF = REF / "rocprof" / "908_results.json.gz"


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _reference(trace: Path, name: str) -> list[dict[str, str]]:
    stem = trace.name.removesuffix(".json.gz")
    return _csv(trace.parent / f"{stem}_perf_report_csvs" / name)


def _steps(trace: Path) -> int:
    import gzip

    with gzip.open(trace, "rt") as fh:
        names = {e.get("name", "") for e in json.load(fh)["traceEvents"]}
    return max(1, sum(n.startswith("ProfilerStep#") for n in names))


def _compare(base: Path, new: Path, out: Path) -> dict:
    assert main(["compare", str(base), str(new), "--out", str(out)]) == 0
    stored = (out / "compare.json").read_text()
    typed = TraceComparison.from_json(stored)  # every key is its class's, and it writes the same bytes
    assert typed.extra == {} and typed.to_json() == stored
    return json.loads(stored)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    out = {}
    for name, (base, new) in {"bert": (BERT_MI300, BERT_H100), "resnet": (RESNET, BERT_MI300)}.items():
        folder = tmp_path_factory.mktemp(name)
        out[name] = (folder, _compare(base, new, folder))
    return out


def _close(a: float, b: float, scale: float) -> bool:
    """Equal to float rounding of sums around `scale` µs."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9 * max(1.0, abs(scale)))


@pytest.mark.parametrize(("pair", "base", "new"), [("bert", BERT_MI300, BERT_H100), ("resnet", RESNET, BERT_MI300)])
def test_categories_close_and_match_each_trace(pairs, pair: str, base: Path, new: Path) -> None:
    folder, doc = pairs[pair]
    steps = {"base": _steps(base), "new": _steps(new)}
    assert doc["steps"] == steps
    # the closure: categories add up to the direct-kernel-time delta; the gap to busy time is the rest
    scale = max(abs(v) for v in doc["categories"].values())
    assert _close(sum(doc["categories"].values()), doc["total_kernel_time_delta_us"], scale)
    assert _close(doc["residual_us"], doc["busy_time_delta_us"] - doc["total_kernel_time_delta_us"], scale)
    rows = {r["op category"]: r for r in _csv(folder / "compare_ops_summary_by_category.csv")}
    assert _close(sum(float(r["per_step_us__new_diff"]) for r in rows.values()), doc["busy_time_delta_us"], scale)
    assert _close(float(rows[GAP_ROW]["per_step_us__new_diff"]), doc["residual_us"], scale)
    # every category's time on each side is TraceLens's own ops_summary_by_category.csv, per step
    for tag, trace in (("base", base), ("new", new)):
        ref = {
            r["op category"]: float(r["total_direct_kernel_time_ms"])
            for r in _reference(trace, "ops_summary_by_category.csv")
        }
        mine = {
            k: float(r[f"{tag}::per_step_us"])
            for k, r in rows.items()
            if k != GAP_ROW and float(r[f"{tag}::per_step_us"])
        }
        assert mine.keys() == ref.keys()
        for k, ms in ref.items():
            assert mine[k] == pytest.approx(ms * 1e3 / steps[tag], rel=1e-6)
        busy = next(float(r["time ms"]) for r in _reference(trace, "gpu_timeline.csv") if r["type"] == "busy_time")
        gap = float(rows[GAP_ROW][f"{tag}::per_step_us"])
        assert gap == pytest.approx((busy - sum(ref.values())) * 1e3 / steps[tag], rel=1e-6, abs=1e-6)
    # appeared / vanished ops are exactly the names on one side of TraceLens's ops_summary.csv
    ops_b = {r["name"] for r in _reference(base, "ops_summary.csv")}
    ops_n = {r["name"] for r in _reference(new, "ops_summary.csv")}
    kern_b = {r["Kernel name"] for r in _reference(base, "kernel_summary.csv")}
    kern_n = {r["Kernel name"] for r in _reference(new, "kernel_summary.csv")}
    assert set(doc["appeared"]) == (ops_n - ops_b) | (kern_n - kern_b)
    assert set(doc["vanished"]) == (ops_b - ops_n) | (kern_b - kern_n)
    status = {r["name"]: r["status"] for r in _csv(folder / "compare_ops_summary.csv")}
    assert {n for n, s in status.items() if s == "appeared"} == ops_n - ops_b


def test_tracelens_column_order(pairs) -> None:
    folder, _ = pairs["bert"]
    with open(folder / "compare_ops_summary.csv", newline="") as fh:
        head = next(csv.reader(fh))
    assert head[:5] == [
        "name",
        "total_direct_kernel_time_ms__new_diff",
        "total_direct_kernel_time_ms__new_pct",
        "Count__new_diff",
        "Count__new_pct",
    ]
    assert "base::total_direct_kernel_time_sum" not in head and "new::Cumulative Percentage (%)" not in head
    assert head[-4:] == ["status", "base::per_step_us", "new::per_step_us", "per_step_us__new_diff"]
    with open(folder / "compare_kernel_summary.csv", newline="") as fh:
        head = next(csv.reader(fh))
    assert head[0] == "Kernel name" and head[1] == "Kernel duration (µs)_sum__new_diff"
    with open(folder / "compare_gpu_timeline.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][:5] == ["type", "time ms__new_diff", "time ms__new_pct", "base::time ms", "base::percent"]
    assert [r[0] for r in rows[1:]] == [r["type"] for r in _reference(BERT_MI300, "gpu_timeline.csv")]


@pytest.mark.parametrize("pair", ["bert", "resnet"])
def test_self_compare_is_zero_everywhere(pairs, pair: str, tmp_path: Path) -> None:
    folder, _ = pairs[pair]
    analysed = folder / "base"  # compare takes an analysis folder as well as a trace
    doc = _compare(analysed, analysed, tmp_path)
    assert doc["total_kernel_time_delta_us"] == 0 and doc["busy_time_delta_us"] == 0 and doc["residual_us"] == 0
    assert set(doc["categories"].values()) == {0.0} and set(doc["timeline"].values()) == {0.0}
    assert doc["appeared"] == [] and doc["vanished"] == [] and doc["top_ops"] == [] and doc["top_kernels"] == []
    for name in (
        "compare_ops_summary_by_category.csv",
        "compare_ops_summary.csv",
        "compare_kernel_summary.csv",
        "compare_gpu_timeline.csv",
    ):
        rows = _csv(tmp_path / name)
        assert rows and all(float(r["per_step_us__new_diff"]) == 0.0 for r in rows)
        assert all(r.get("status", "both") == "both" for r in rows)


def test_rocprof_self_compare(tmp_path: Path) -> None:
    doc = _compare(ROCPROF, ROCPROF, tmp_path)
    assert doc["steps"] == {"base": 1, "new": 1}
    assert any("no ProfilerStep" in n for n in doc["notes"])
    assert doc["total_kernel_time_delta_us"] == 0 and doc["appeared"] == [] and doc["vanished"] == []
    head = _csv(tmp_path / "compare_kernel_summary.csv")[0]
    assert list(head)[:3] == ["name", "Total Kernel Time (ms)__new_diff", "Total Kernel Time (ms)__new_pct"]


def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    for base, new in ((tmp_path / "missing.json", BERT_MI300), (BERT_MI300, junk)):
        assert main(["compare", str(base), str(new), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err
