"""The Triton perf model (issue 28): Triton kernel names to fused ops, and the model from a launch's
args. The expected values are what the real TraceLens v1.0.0 wrote for the same names (its own
test traces' ``perf_params``)."""

from __future__ import annotations

import pytest

from traceladder.analysis.perf_model import MODELS, can_model, triton


@pytest.mark.parametrize(
    "name,ops",
    [
        ("triton_poi_fused__unsafe_view_mul_silu_2", ["_unsafe_view", "mul", "silu"]),
        (
            "triton_red_fused__unsafe_view_add_mean_mul_pow_rsqrt_1",
            ["_unsafe_view", "add", "mean", "mul", "pow", "rsqrt"],
        ),
        (
            "triton_red_fused_add_addmm_mul_native_layer_norm_split_unsqueeze_view_16",
            ["add", "addmm", "mul", "native_layer_norm", "split", "unsqueeze", "view"],
        ),
        (
            "triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10",
            ["_scaled_dot_product_flash_attention", "cat", "transpose", "view"],
        ),
        ("triton_poi_fused_frobnicate_3", []),
        ("some_kernel", []),
    ],
)
def test_triton_fused_ops(name, ops):
    assert triton.fused_ops(name) == ops


def test_triton_model_from_args():
    # TraceLens: 1.34217728 GFLOPS, 1536 MB, vector_bfloat16 for this launch
    name = "triton_poi_fused__unsafe_view_mul_silu_2"
    args = {
        "Input Dims": [[8, 4096, 8192], [32768, 8192], []],
        "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"],
        "Concrete Inputs": ["", "", "268435456"],
    }
    assert name in MODELS and can_model(name, args)
    p = MODELS[name].params(name, args)
    flops, nbytes, cspec = MODELS[name].metrics(name, p, False, args)
    assert (flops / 1e9, nbytes / 2**20, cspec) == (pytest.approx(1.34217728), pytest.approx(1536.0), "vector_bfloat16")
    assert not can_model(name, {**args, "Concrete Inputs": ["", "", ""]})
