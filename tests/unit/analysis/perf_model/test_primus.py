"""The Primus perf models on the argument layouts of TraceLens v1.0.0's own tests
(``tests/test_primus_turbo_grouped_gemm.py``, ``test_primus_fp8_gemm_quantize.py``,
``test_primus_mxfp4_gemm_quantize.py``, ``test_primus_op_categorization.py``), with the FLOPs and
bytes those tests expect. The fixture ``tests/fixtures/tracelens/primus_ops`` checks the sheets."""

from __future__ import annotations

import pytest

from traceladder.analysis.perf_model import MODELS, primus
from traceladder.analysis.reports import gemm

BF16 = "c10::BFloat16"


def _model(name: str, args: dict) -> tuple[float, float | None, str]:
    m = MODELS[name]
    p = m.params(name, args)
    return m.metrics(name, p, False, args) if m.wants_args else m.metrics(name, p, False)


@pytest.mark.parametrize(
    "name,dims,flops,nbytes",
    [
        ("primus_turbo::grouped_gemm_impl", [[24576, 2048], [8, 2048, 2816]], None, None),
        ("primus_turbo::grouped_gemm_impl", [[24576, 2048], [8, 1408, 2048]], None, None),
        (
            "primus_turbo::grouped_gemm",
            [[[4, 8], [5, 8]], [[8, 16], [8, 16]]],
            2 * 9 * 8 * 16,
            (9 * 8 + 2 * 8 * 16) * 2 + 9 * 16 * 2,
        ),
        ("primus_turbo::grouped_gemm_variable_k", [[[4, 8], [5, 6]], [[8, 16], [6, 12]]], 1744, 448 + 324),
        ("primus_turbo::grouped_gemm_variable_k_impl", [[24576, 1408], [24576, 2048]], 2 * 24576 * 1408 * 2048, None),
    ],
)
def test_grouped_gemm(name, dims, flops, nbytes):
    f, b, cs = _model(name, {"Input Dims": dims, "Input type": [BF16, BF16]})
    m, k = dims[0] if isinstance(dims[0][0], int) else (None, None)
    if name.endswith("grouped_gemm_impl"):
        g, n = dims[1][0], dims[1][2] if dims[1][1] == k else dims[1][1]
        flops, nbytes = 2 * m * k * n, (m * k + g * k * n) * 2 + m * n * 2
    if nbytes is None:
        nbytes = (24576 * 1408 + 1408 * 2048) * 2 + 24576 * 2048 * 2
    assert (f, b, cs) == (flops, nbytes, "matrix_bf16")


def test_grouped_gemm_tensorlist_types():
    """The profiler types tensor lists 'TensorList': no byte size, so the fixed-K model fails
    (TraceLens drops the op) and the variable-K one has no bytes."""
    args = {"Input Dims": [[[4, 8], [5, 8]], [[8, 16], [8, 16]]], "Input type": ["TensorList", "TensorList"]}
    with pytest.raises(TypeError):
        _model("primus_turbo::grouped_gemm", args)
    assert _model("primus_turbo::grouped_gemm_variable_k", args)[1:] == (None, "")


def _fp8_args(a, b, ta, tb, tc, dtype="c10::Float8_e4m3fnuz", scale="float", conc=True):
    args = {
        "Input Dims": [a, [], b, [], [], [], [], [], []],
        "Input type": [dtype, scale, dtype, scale, "Scalar", "Scalar", "Scalar", "Scalar", ""],
    }
    if conc:
        args["Concrete Inputs"] = ["", "", "", "", "8", str(ta), str(tb), str(tc), ""]
    return args


def test_hipblaslt_fp8_layouts():
    m, n, k = 20480, 3072, 12288
    # A (M, K), B stored (N, K): transB
    p = gemm._params("primus_turbo_cpp_extension::hipblaslt_gemm_fp8", _fp8_args([m, k], [n, k], False, True, False))
    assert (p["M"], p["N"], p["K"]) == (m, n, k)
    flops, nbytes = gemm._flops_bytes("primus_turbo_cpp_extension::hipblaslt_gemm_fp8", {**p, "B": 1})
    assert (flops, nbytes) == (2 * m * n * k, m * k + k * n + m * n * 2)
    # transC: the binding computes C^T, swapping A and B and flipping their transposes
    p = gemm._params("primus_turbo::hipblaslt_gemm_fp8", _fp8_args([k, n], [k, m], True, False, True))
    assert (p["M"], p["N"], p["K"]) == (m, n, k)
    # no Concrete Inputs (older traces), or None: no transposes
    for args in (
        _fp8_args([m, k], [k, n], 0, 0, 0, conc=False),
        {**_fp8_args([m, k], [k, n], 0, 0, 0, conc=False), "Concrete Inputs": None},
    ):
        assert (gemm._params("primus_turbo::hipblaslt_gemm_fp8", args)["N"]) == n


def test_hipblaslt_fp4_unpacks_k_and_adds_scales():
    m, n, k = 16384, 12288, 3072
    args = _fp8_args([m, k // 2], [n, k // 2], False, True, False, "c10::Float4_e2m1fn_x2", "c10::Float8_e8m0fnu")
    args["Input Dims"][1], args["Input Dims"][3] = [m, k // 32], [n, k // 32]
    p = gemm._params("primus_turbo::hipblaslt_gemm_fp4", args)
    assert (p["M"], p["N"], p["K"]) == (m, n, k)
    flops, nbytes = gemm._flops_bytes("primus_turbo::hipblaslt_gemm_fp4", {**p, "B": 1})
    assert flops == 2 * m * n * k
    assert nbytes == m * (k // 2) + n * (k // 2) + m * (k // 32) + n * (k // 32) + m * n * 2


def test_tev2_pseudo_gemm():
    args = {"Input Dims": [[16, 32], [32, 48]], "Input type": [BF16, BF16]}
    p = gemm._params("_Linear_yfwd_mm", args)
    assert (p["M"], p["N"], p["K"], p["stride_A"]) == (16, 48, 32, None)
    assert gemm._flops_bytes("_Linear_yfwd_mm", {**p, "B": 1}) == (
        2 * 16 * 48 * 32,
        (16 * 32 + 32 * 48) * 2 + 16 * 48 * 2,
    )
    with pytest.raises(ValueError):  # TraceLens refuses mixed A / B dtypes
        gemm._flops_bytes("_Linear_yfwd_mm", {**p, "dtype_A_B": (BF16, "float")})


def test_quantize_ops():
    m, n = 20480, 12288
    fp8 = {"Input Dims": [[m, n], [], []], "Input type": [BF16, "Scalar", ""]}
    assert _model("primus_turbo_cpp_extension::quantize_fp8_tensorwise", fp8) == (m * n, 3 * m * n, "vector_bf16")
    m = 16384
    mx = {"Input Dims": [[m, n]] + [[]] * 11, "Input type": [BF16] + ["Scalar"] * 11}
    want = m * n * 2 + 2 * (m * n // 2) + m * (n // 32) + n * (m // 32)
    assert _model("primus_turbo::quantize_mxfp4_dual", mx) == (m * n, want, "vector_bf16")


def test_moe_comm_and_cross_entropy():
    dispatch = {
        "Input Dims": [[4096, 7168], [4096, 8], [4096, 8], [], [], [], []],
        "Input type": [BF16, "long int", "float", "Scalar", "Scalar", "Scalar", "Scalar"],
    }
    assert _model("MoEDispatch", dispatch) == (0, 4096 * 7168 * 2, "")
    m = MODELS["MoECombine"]
    p = m.params("MoECombine", {"Input Dims": [[], [], []], "Input type": [BF16, "Scalar", "Scalar"]})
    assert m.metrics("MoECombine", p, True) == (0, None, "")  # the backward model: the same bytes
    ce = {"Input Dims": [[4096, 1, 163840], [4096, 1], [], []], "Input type": [BF16, "long int", "Scalar", "Scalar"]}
    assert _model("CrossEntropyFunction", ce) == (
        5 * 4096 * 163840,
        4096 * 163840 * 2 + 4096 * 8 + 4096 * 4,
        "vector_bf16",
    )


def test_every_mapped_primus_op_is_modelled():
    assert set(primus.GEMM_KINDS) <= set(gemm.GEMM_OPS)
    for op in primus.GROUPED_OPS + primus.VARIABLE_K_OPS + tuple(primus.QUANT_OPS):
        assert op in MODELS
