"""Scaled-dot-product attention perf model (the aten SDPA ops), forward and backward.

Provenance: TraceLens v1.0.0 ``PerfModel/perf_model.py`` ``SDPA`` and
``aten__scaled_dot_product_{flash,efficient,cudnn}_attention``: Q/K/V are BHND;
FLOPs = 4 B H_Q N_Q N_KV d (QK^T + PV, softmax ignored), halved when causal; bytes =
(Q + K + V reads + O write) elements at 2 bytes each (TraceLens's fixed bpe).
"""

from __future__ import annotations

from typing import Any

from .common import spec

#: op name -> (index of dropout_p in Concrete Inputs, flash implementation)
SDPA_OPS = {
    "aten::_scaled_dot_product_flash_attention": (3, True),
    "aten::_scaled_dot_product_efficient_attention": (5, False),
    "aten::_scaled_dot_product_cudnn_attention": (5, False),
    # aiter's forward ops: Q/K/V are BNHD, (q, k, v, dropout_p, softmax_scale, is_causal, ...);
    # their params carry no dtype, so their Compute Spec is empty
    "aiter::mha_fwd": (3, True),
    "aiter::fmha_v3_fwd": (3, True),
}
#: the ops whose Q/K/V are (B, N, H, d) rather than (B, H, N, d)
BNHD_OPS = frozenset({"aiter::mha_fwd", "aiter::fmha_v3_fwd"})


def _float(v: Any) -> float:
    if v in ("", "None", None):
        return 0.0
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0.0


def params(name: str, args: dict) -> dict[str, Any]:
    drop_i, flash = SDPA_OPS[name]
    dims, ci = args["Input Dims"], args["Concrete Inputs"]
    axes = (0, 2, 1, 3) if name in BNHD_OPS else (0, 1, 2, 3)  # each of Q/K/V read as (B, H, N, d)
    (bq, hq, nq, dq), (bk, hk, nk, dk), (bv, hv, nv, dv) = (tuple(d[i] for i in axes) for d in dims[:3])
    if bq != bk or bq != bv:
        raise ValueError("batch sizes differ")
    if hk != hv or nk != nv or dq != dk:
        raise ValueError("K/V shapes differ")
    c = ci[drop_i + 2] if name in BNHD_OPS else ci[drop_i + 1]  # aiter's: after the softmax scale
    causal = c.lower() == "true" if c not in ("", "None") else False
    got = {
        "B": bq,
        "N_Q": nq,
        "H_Q": hq,
        "N_KV": nk,
        "H_KV": hk,
        "d_h_qk": dq,
        "d_h_v": dv,
        "dropout": _float(ci[drop_i]),
        "causal": causal,
        "flash_impl": flash,
    }
    if name not in BNHD_OPS:
        got["dtype_A_B"] = tuple(args["Input type"][:2])
    return got


def _causal(p: dict, flops: float) -> float:
    if p["causal"]:
        if p["N_Q"] != p["N_KV"]:
            raise ValueError("causal with N_Q != N_KV")
        return flops / 2
    return flops


def metrics(p: dict) -> tuple[float, float | None, str]:
    B, nq, hq, nk, hk, dqk, dv = (p[k] for k in ("B", "N_Q", "H_Q", "N_KV", "H_KV", "d_h_qk", "d_h_v"))
    flops = _causal(p, B * hq * (2 * nq * nk * dqk) + B * hq * (2 * nq * dv * nk))
    elems = B * nq * hq * dqk + B * nk * hk * dqk + B * nk * hk * dv + B * nq * hq * dv
    return flops, elems * 2, spec("matrix", p.get("dtype_A_B", (None,))[0])


def metrics_bwd(p: dict) -> tuple[float, float | None, str]:
    B, nq, hq, nk, hk, dqk, dv = (p[k] for k in ("B", "N_Q", "H_Q", "N_KV", "H_KV", "d_h_qk", "d_h_v"))
    flops = B * hq * (2 * nq * nk * dqk) if p["flash_impl"] else 0
    flops += B * hq * (2 * nk * nq * dv) + B * nk * dv * (hq // hk - 1)
    flops += B * hq * (2 * nq * nk * dv)
    flops += B * hq * (2 * nq * nk * dqk)
    flops += B * hq * (2 * nk * nq * dqk) + B * nk * dqk * (hq // hk - 1)
    flops = _causal(p, flops)
    elems = (
        B * nq * hq * dqk
        + B * nk * hk * dqk
        + B * nk * hk * dv
        + B * nq * hq * dv
        + B * nq * hq * dqk
        + B * nk * hk * dqk
        + B * nk * hk * dv
    )
    return flops, elems * 2, spec("matrix", p.get("dtype_A_B", (None,))[0])
