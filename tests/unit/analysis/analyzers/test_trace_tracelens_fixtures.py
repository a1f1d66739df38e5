"""The TraceLens rules found by the differential harness (issue 28), one fixture each.

Every fixture under tests/fixtures/tracelens/ is a generated trace with the CSVs the real
TraceLens v1.0.0 wrote for it (regenerated through the oracle by the folder's
``regenerate.py``). Our reports must match every CSV by the conformance rule
(tests/conformance.py), and we must write no sheet TraceLens did not. A second test per
fixture checks that the fixture still shows its rule, so that it keeps testing something.
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from tests import conformance
from traceladder.analysis import perf_model
from traceladder.analysis.reports import whats_left
from tests.conftest import REPO_ROOT

_TESTS = REPO_ROOT / "tests"
FIXTURES = _TESTS / "fixtures" / "tracelens"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


regenerate = _load("tl_fixtures_regenerate", FIXTURES / "regenerate.py")
DIRS = sorted(p for p in FIXTURES.iterdir() if p.is_dir())
CSVS = [(d, p.name) for d in DIRS for p in sorted(d.glob("*.csv"))]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_fixture_is_listed_and_small():
    assert {d.name for d in DIRS} == set(regenerate.FIXTURES)
    sizes = {d.name: sum(p.stat().st_size for p in d.iterdir()) for d in DIRS}
    assert all(s <= regenerate.MAX_BYTES for s in sizes.values()), sizes
    assert sum(sizes.values()) <= 5_000_000


@pytest.mark.parametrize("fixture", DIRS, ids=lambda d: d.name)
def test_same_sheets_as_tracelens(fixture, produced):
    out = produced(fixture / "trace.json.gz")
    want = {p.name for p in fixture.glob("*.csv")}
    got = {p.name for p in out.glob("*.csv")} - whats_left.CSV_NAMES  # ours, not TraceLens's sheets
    assert got == want, f"missing {sorted(want - got)}, extra {sorted(got - want)}"


@pytest.mark.parametrize("fixture,sheet", CSVS, ids=lambda v: v.name if isinstance(v, Path) else v)
def test_sheet_conforms(fixture, sheet, produced):
    diffs = conformance.compare_csv(produced(fixture / "trace.json.gz") / sheet, fixture / sheet)
    assert not diffs, "\n".join(diffs)


def test_fixtures_show_their_rules():
    """What each fixture's TraceLens output holds that the rule is about."""
    f = FIXTURES
    # short kernels, no shapes: pandas' empty aggregate, two header lines
    lines = (f / "short_kernels_no_shapes" / "short_kernels_summary.csv").read_text().splitlines()
    assert lines == ["Kernel duration (µs),Kernel duration (µs),Kernel duration (µs)", "sum,count,mean"]
    # GEMM: transpose given for some rows, empty for others
    tr = [r["param: transpose"] for r in _rows(f / "gemm_transpose_partial" / "GEMM.csv")]
    assert "" in tr and any(t.startswith("(") for t in tr), tr
    # pad / upsample: their own param columns in UnaryElementwise
    un = _rows(f / "resize_unary_params" / "UnaryElementwise.csv")
    names = {r["name"] for r in un}
    assert {"aten::replication_pad2d", "aten::upsample_nearest2d"} <= names, names
    assert {"param: input_shape", "param: output_shape", "param: padding"} <= set(un[0])
    # aiter's group norm: a Normalization row and a unified_perf_summary row
    g = f / "groupnorm_aiter"
    assert any(r["name"] == "aiter::_groupnorm_run" for r in _rows(g / "Normalization.csv"))
    assert any(r["name"] == "aiter::_groupnorm_run" for r in _rows(g / "unified_perf_summary.csv"))
    # library GEMM ops in GEMM.csv, their own params leading the columns
    for fx, op, lead in (
        ("gemm_vllm_unquantized", "vllm::rocm_unquantized_gemm", "param: M"),
        ("gemm_aiter_a16w16", "aiter::gemm_a16w16", "param: B"),
    ):
        rows = _rows(f / fx / "GEMM.csv")
        assert any(r["name"] == op for r in rows) and list(rows[0])[1] == lead, fx
    # UIDs: TraceLens's ex_UID is the index in the file's event list; python functions
    # (which our table leaves out) come before some of them
    u = f / "uid_file_order"
    cats = [e.get("cat") for e in json.loads(gzip.decompress((u / "trace.json.gz").read_bytes()))["traceEvents"]]
    ex = [int(r["ex_UID"]) for r in _rows(u / "ops_unique_args.csv")]
    assert any(cats[:x].count("python_function") for x in ex), ex
    # inference-library ops of TraceLens's extensions: RMSNorm_fwd / RoPE_fwd sheets of
    # their own, the gated activations in UnaryElementwise
    lib = f / "inference_library_ops"
    rms = {r["name"] for r in _rows(lib / "RMSNorm_fwd.csv")}
    assert {
        "aiter::rms_norm",
        "aiter::rmsnorm",
        "aiter::add_rmsnorm",
        "vllm::rocm_aiter_rmsnorm_fp8_group_quant",
    } <= rms
    assert {r["name"] for r in _rows(lib / "RoPE_fwd.csv")} == {
        "sgl_kernel::rotary_embedding",
        "aiter::rope_cached_positions_2c_fwd_impl",
    }
    un = {r["name"]: r for r in _rows(lib / "UnaryElementwise.csv")}
    assert "sgl_kernel::silu_and_mul" in un and "aiter::gelu_tanh_and_mul" in un
    assert float(un["sgl_kernel::silu_and_mul"]["GFLOPS_first"]) > 0
    # attention: vLLM's op has an estimate under step labels with sq/sk aggregates (vLLM's
    # or sglang's), none under vLLM's plain label; aiter's get no label, so no estimate
    att = _rows(lib / "InferenceAttention_fwd.csv")
    vllm = [r for r in att if r["name"] == "vllm::unified_attention_with_output"]
    assert {r["param: c_sq"] for r in vllm} >= {"6.0", "5.0"} and all(float(r["GFLOPS_first"]) > 0 for r in vllm)
    assert "sglang::store_cache" in {r["name"] for r in att}
    assert not {"aiter::mha_batch_prefill", "aiter::fmha_v3_varlen_fwd"} & {r["name"] for r in att}
    uni = {r["name"]: r for r in _rows(lib / "unified_perf_summary.csv")}
    assert (
        uni["aiter::mha_batch_prefill"]["has_perf_model"] == "True" and uni["aiter::mha_batch_prefill"]["GFLOPS"] == ""
    )
    # aiter's fixed-length attention in SDPA_fwd: Q/K/V read as (B, N, H, d), no dtype
    sd = {r["name"]: r for r in _rows(lib / "SDPA_fwd.csv")}
    assert sd["aiter::fmha_v3_fwd"]["param: H_Q"] == "4" and sd["aiter::fmha_v3_fwd"]["Compute Spec"] == ""
    assert sd["aiter::mha_fwd"]["param: causal"] == "True"
    # torch.compile's Triton kernel ops: modelled in unified_perf_summary where their args
    # carry the element counts, not modelled where they do not
    tri = [r for r in _rows(f / "triton_compiled_ops" / "unified_perf_summary.csv") if r["name"].startswith("triton_")]
    assert any(r["has_perf_model"] == "True" and float(r["GFLOPS"]) > 0 for r in tri)
    assert any(r["has_perf_model"] == "False" for r in tri)
    assert any(r["Compute Spec"].startswith("vector_") for r in tri)
    # Primus's ops: each in the sheet TraceLens's mapping gives it
    pr = f / "primus_ops"
    gg = _rows(pr / "GroupedGEMM_fwd.csv")
    assert {r["name"] for r in gg} == set(perf_model.primus.GROUPED_OPS + perf_model.primus.VARIABLE_K_OPS)
    assert any(r["param: group_pairs"].startswith("[((") for r in gg)
    # a tensor list typed 'TensorList' has no byte size: the fixed-K model fails (its zipped
    # op keeps only the rows with element dtypes), the variable-K model keeps the op, no bytes
    zipped = [r for r in gg if r["name"] == "primus_turbo::grouped_gemm"]
    assert zipped and all("TensorList" not in r["Input type_first"] for r in zipped)
    vk = [
        r for r in gg if r["name"] == "primus_turbo::grouped_gemm_variable_k" and "TensorList" in r["Input type_first"]
    ]
    assert vk and all(r["Data Moved (MB)_first"] == "" for r in vk)
    gemm_names = {r["name"] for r in _rows(pr / "GEMM.csv")}
    assert set(perf_model.primus.GEMM_KINDS) <= gemm_names
    assert set(perf_model.primus.QUANT_OPS) <= {r["name"] for r in _rows(pr / "UnaryElementwise.csv")}
    assert {r["name"] for r in _rows(pr / "MoE_comm_fwd.csv")} == {"MoEDispatch", "MoECombine"}
    assert {r["name"] for r in _rows(pr / "RoPE_fwd.csv")} == {"FusedRoPEFunc"}
    assert {r["name"] for r in _rows(pr / "CrossEntropy_fwd.csv")} == {"CrossEntropyFunction"}
    # the backward runs on the forward's thread in a CPU recording: TraceLens links no
    # backward event, so there is no MoE_comm_bwd sheet
    assert not (pr / "MoE_comm_bwd.csv").exists()
