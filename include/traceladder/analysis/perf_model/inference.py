"""Perf models of inference-library ops (aiter, vLLM, sglang) that TraceLens models through
its pseudo-op extensions: the RMSNorm family, fused RoPE, the gated activations and the
inference attention ops.

Provenance (facts and formats): TraceLens v1.0.0 ``PerfModel/extensions/``
(``rmsnorm_perf_model_extensions.py``, ``perf_model_extensions.py``,
``pseudo_ops_perf_utils.get_pseudo_op_mappings``) and the core ``FusedRoPE`` /
``UnaryElementwise`` of ``PerfModel/perf_model.py``:

* RMSNorm ops go to their own ``RMSNorm_fwd`` sheet (category ``RMSNorm``, no backward
  model).  Their params are the Normalization ones: ``op_shape`` is the input tensor,
  ``num_channels`` the weight's length, affine, no bias, not training.  FLOPs and bytes
  are the core RMSNorm's, plus a residual add and/or a quantization pass for fused ops.
* RoPE ops go to ``RoPE_fwd``: 3 FLOPs per rotated element, each read and written once.
* ``*_and_mul`` gated activations are UnaryElementwise rows whose op shape is the output
  (``Input Dims[0]``); the input (gate and up halves) is read, the output written.
* attention ops go to ``InferenceAttention_fwd``, modelled from the sq/sk aggregates of the
  step label around them (``extensions/attention_perf_model_extensions.py``,
  ``TraceUtils/annotation_utils.py``); without such a label, no estimate.

Each function raises where TraceLens's model raises (a missing arg, a dtype without a
byte size), so the op is dropped from the sheets as TraceLens drops it.
"""

from __future__ import annotations

import re
from typing import Any

from .common import bpe, prod, spec

__all__ = ["RMSNORM_OPS", "ROPE_OPS", "GATED_OPS", "ATTENTION_OPS", "ANNOTATED_PREFIX", "ANNOTATION_KEY", "chunk_stats"]

#: RMSNorm op -> (input index, weight index, variant); the variants' extra work is in
#: :func:`rmsnorm_metrics`
RMSNORM_OPS: dict[str, tuple[int, int, str]] = {
    "aiter::rms_norm": (0, 1, "plain"),
    "aiter::rmsnorm2d_fwd_ck": (0, 1, "plain"),
    "aiter::rmsnorm": (1, 2, "plain"),
    "aiter::rmsnorm2d_fwd_with_add_ck": (1, 4, "add"),
    "aiter::add_rmsnorm": (1, 4, "add"),
    "aiter::rmsnorm2d_fwd_with_dynamicquant_ck": (1, 3, "dynamic_quant"),
    "aiter::rmsnorm_quant": (1, 3, "group_quant@5"),
    "vllm::rocm_aiter_rmsnorm_fp8_group_quant": (0, 1, "group_quant@3"),
    "vllm::rocm_aiter_rmsnorm_with_add_fp8_group_quant": (0, 2, "add_group_quant@4"),
    "vllm::rocm_aiter_triton_add_rmsnorm_pad": (0, 1, "add_pad@4"),
    "aiter::fused_add_rmsnorm_pad_": (0, 1, "add_pad@4"),
    "sglang_profiler::fused_mxfp4_quant_fused_rms_mxfp4_quant": (0, 1, "mxfp4"),
    "aiter::_fuse_rmsnorm_fp4_quant": (0, 1, "mxfp4"),
}


def rmsnorm_params(name: str, args: dict) -> dict[str, Any]:
    i, w, _ = RMSNORM_OPS[name]
    dims = args["Input Dims"]
    return {
        "op_shape": tuple(dims[i]),
        "dtype_in_out": (args["Input type"][i], None),
        "stride_input": tuple(args["Input Strides"][i]),
        "stride_output": None,
        "num_channels": dims[w][0],
        "has_bias": False,
        "is_affine": True,
        "is_training": False,
    }


def _core_rmsnorm(n: int, c: int, b: int) -> tuple[float, float]:
    """The core affine inference RMSNorm: sum of squares, rsqrt, scale and weight."""
    return (n / c) * (2 * c + 2) + 2 * n, 2 * n * b + c * b


def rmsnorm_metrics(name: str, p: dict, args: dict) -> tuple[float, float, str]:
    n, c = prod(p["op_shape"]), p["num_channels"]
    b = bpe(p["dtype_in_out"][0])
    if b is None:
        raise ValueError(f"{name}: no byte size for {p['dtype_in_out'][0]}")
    flops, nbytes = _core_rmsnorm(n, c, b)
    variant = RMSNORM_OPS[name][2]
    kind, _, at = variant.partition("@")
    rows = n // c
    conc = args.get("Concrete Inputs") or []
    if kind == "add":  # residual add; read input, residual, weight; write out, residual
        flops, nbytes = flops + n, 4 * n * b + c * b
    elif kind == "dynamic_quant":  # per-token max-abs + scale; fp8 out, fp32 [M, 1] scales
        flops, nbytes = flops + 2 * n, n * b + c * b + n + rows * 4
    elif kind in ("group_quant", "add_group_quant"):
        group = _group_size(conc, int(at), c, lenient=name == "aiter::rmsnorm_quant")
        groups = (c + group - 1) // group
        scales = rows * groups * 4
        if kind == "group_quant":
            flops, nbytes = flops + 2 * n, n * b + c * b + n + scales
        else:  # residual add too: the residual read and written
            flops, nbytes = flops + 3 * n, 2 * n * b + c * b + n + n * b + scales
    elif kind == "add_pad":  # the output padded to a multiple of Concrete Inputs[4]
        pad = int(conc[int(at)])
        c_out = (c + pad - 1) // pad * pad if pad > 0 else c
        flops, nbytes = flops + n, 2 * n * b + c * b + rows * c_out * b + rows * c * b
    elif kind == "mxfp4":
        flops, nbytes = _mxfp4(args, n, c, b, flops)
    return flops, nbytes, spec("vector", p["dtype_in_out"][0])


def _group_size(conc: list, i: int, c: int, lenient: bool) -> int:
    """The quant group size from ``Concrete Inputs[i]``; aiter's rmsnorm_quant falls back
    to one group per row where it is missing or not positive."""
    if not lenient:
        return int(conc[i])
    try:
        g = int(conc[i])
    except (IndexError, ValueError, TypeError):
        g = 0
    return g if g > 0 else c


def _mxfp4(args: dict, n: int, c: int, b: int, core_flops: float) -> tuple[float, float]:
    """Fused (residual add +) RMSNorm + MXFP4 quant of x1, with an optional second norm on
    x2; x2 and the residual are present when their dims have rank 2."""
    dims = args["Input Dims"]
    rows = n // c
    has_x2 = len(dims) > 3 and len(dims[3]) == 2
    has_res = len(dims) > 6 and len(dims[6]) == 2
    n2 = dims[3][1] if has_x2 else 0
    flops = core_flops + (rows * c if has_res else 0)
    if has_x2:
        flops += int(core_flops * (rows * n2) / max(n, 1))
    flops += 2 * n
    nbytes = n * b + c * b + n * 0.5 + (n // 32)
    if has_res:
        nbytes += 2 * n * b
    if has_x2:
        nbytes += 2 * rows * n2 * b + n2 * b
    return flops, nbytes


#: RoPE op -> how its rotated elements are counted
ROPE_OPS = ("sgl_kernel::rotary_embedding", "aiter::rope_cached_positions_2c_fwd_impl", "FusedRoPEFunc")


def rope_params(name: str, args: dict) -> dict[str, Any]:
    dims = args["Input Dims"]
    if name == "sgl_kernel::rotary_embedding":
        # [positions, query [T, Hq*D], key [T, Hk*D], head_size, cos_sin_cache [P, rot], ...]
        q, k = tuple(dims[1]), tuple(dims[2])
        conc = args.get("Concrete Inputs") or []
        head = int(conc[3]) if len(conc) > 3 and str(conc[3]).strip() else q[-1]
        rot = dims[4][1] if len(dims) > 4 and len(dims[4]) > 1 else head
        return {"num_elements": q[0] * (q[1] // head + k[1] // head) * rot}
    if name == "aiter::rope_cached_positions_2c_fwd_impl":
        x, y = tuple(dims[2]), tuple(dims[3])  # the inputs (after the two outputs)
        return {"x_shape": x, "y_shape": y, "num_elements": prod(x) + prod(y)}
    t = dims[0]  # TransformerEngine's FusedRoPEFunc: (seq, batch, heads, head_dim)
    return {"seq_len": t[0], "batch": t[1], "heads": t[2], "head_dim": t[3], "num_elements": prod(t)}


def _bpe_or_bf16(dtype: str | None) -> int:
    """Bytes per element of ``dtype``; bf16's 2 where it is missing or unknown."""
    b = bpe(dtype) if dtype else None
    return b if b is not None else 2


def rope_metrics(name: str, p: dict, args: dict) -> tuple[float, float, str]:
    types = args.get("Input type") or []
    n = p["num_elements"]
    # sglang's op is sized and typed by the query (input 1), the others by their first input
    dtype = types[1] if name == "sgl_kernel::rotary_embedding" else (types[0] if types else None)
    return 3 * n, 2 * n * _bpe_or_bf16(dtype), spec("vector", dtype) if dtype else ""


#: gated activation -> FLOPs per output element
GATED_OPS: dict[str, int] = {
    "aiter::silu_and_mul": 5,
    "_C::silu_and_mul": 5,
    "sgl_kernel::silu_and_mul": 5,
    "aiter::gelu_and_mul": 8,
    "aiter::gelu_tanh_and_mul": 10,
}


def gated_params(name: str, args: dict) -> dict[str, Any]:
    """``op(out, input)``: out [..., d], input [..., 2d] (gate and up halves)."""
    types, strides = args["Input type"], args["Input Strides"]
    return {
        "op_shape": tuple(args["Input Dims"][0]),
        "dtype_in_out": (types[1], types[0]),
        "stride_input": tuple(strides[1]),
        "stride_output": tuple(strides[0]),
    }


def gated_metrics(name: str, p: dict) -> tuple[float, float, str]:
    n = prod(p["op_shape"])
    din, dout = p["dtype_in_out"]
    b_in, b_out = bpe(din), bpe(dout)
    if b_in is None or b_out is None:
        raise ValueError(f"{name}: no byte size for {p['dtype_in_out']}")
    return GATED_OPS[name] * n, 2 * n * b_in + n * b_out, spec("vector", din)


# ---------------------------------------------------------------------------------
# inference attention (sheet InferenceAttention_fwd)

#: attention ops modelled from the step annotation's chunk statistics -> whether the V head
#: dim comes from the v tensor (``Input Dims[2]``) rather than the key's
ATTENTION_OPS: dict[str, bool] = {
    "vllm::unified_attention_with_output": False,
    "aiter::mha_varlen_fwd": False,
    "aiter::fmha_v3_varlen_fwd": True,
    "aiter::mha_batch_prefill": True,
}
#: the ops TraceLens gives their enclosing user annotation (the vLLM step label)
ANNOTATED_PREFIX = "vllm::unified_attention_with_output"
#: key in an op's args copy where the perf sheets put that annotation
ANNOTATION_KEY = "__annotation__"

_NO_PERF: dict[str, Any] = {
    "B": 1,
    **dict.fromkeys(("N_Q", "H_Q", "N_KV", "H_KV", "d_h_qk", "d_h_v"), 0),
    **dict.fromkeys(("c_sq", "c_sk", "c_sqsq", "c_sqsk", "g_sq", "g_sk", "g_sqsq", "g_sqsk"), 0),
    "dropout": 0.0,
    "causal": False,
    "flash_impl": True,
    "dtype_Q": None,
    "_no_perf": True,
}

# the step labels that carry the sq/sk aggregates (TraceLens's "detailed" iteration
# annotations); a label of any other form has none, and the model gives no estimate
_SQSK = r"\(sq\d+sk\d+sqsq\d+sqsk\d+\)"
_VLLM_STEP = re.compile(rf"execute_\d+_context_\d+{_SQSK}_generation_\d+{_SQSK}")
_VLLM_NATIVE = re.compile(r"execute_context_\d+\(\d+\)_generation_\d+\(\d+\)")
_SGLANG_STEP = re.compile(r"step\[(?:EXTEND|DECODE|MIXED)\b[^\]]*sqsq=\d+[^\]]*\]")
_SGLANG_NATIVE = re.compile(r"step\[(?:EXTEND|DECODE|MIXED)\b.*\]")
_ATOM_STEP = re.compile(r"^(prefill|decode)\[.*sqsq=\d+.*\]")
_ATOM_NATIVE = re.compile(r"^(prefill|decode)\[(.*)\]")
_CHUNK_KEYS = ("c_sq", "c_sk", "c_sqsq", "c_sqsk", "g_sq", "g_sk", "g_sqsq", "g_sqsk")


def _int(v: Any) -> int:
    try:
        return int(v)
    except (ValueError, TypeError):
        return 0


def chunk_stats(label: str) -> dict[str, int]:
    """The context (``c_``) and generation (``g_``) sq/sk aggregates of a step label;
    raises ValueError where the label carries none (the formats are matched in TraceLens's
    order: a vLLM label of the plain form, say, has no aggregates)."""
    if _VLLM_STEP.match(label):
        # the label's numbers in order, with the parens and the s/q/k letters as separators
        p = re.sub(r"[sqk]+", "_", label.replace("(", "_").replace(")", "_")).split("_")
        return dict(zip(_CHUNK_KEYS, (_int(p[i]) for i in (5, 6, 7, 8, 13, 14, 15, 16))))
    if _VLLM_NATIVE.match(label):
        raise ValueError("a vLLM step label without sq/sk aggregates")
    if _SGLANG_STEP.match(label):
        body = label[label.index("[") + 1 : label.rindex("]")]
        kv = dict(re.findall(r"(\w+)=(\d+)", body))
        return {k: _int(kv.get(k, 0)) for k in _CHUNK_KEYS}
    if _SGLANG_NATIVE.match(label):
        raise ValueError("an sglang step label without sq/sk aggregates")
    m = _ATOM_NATIVE.match(label)
    if m:
        kv = dict(re.findall(r"(\w+)=(\[[^\]]*\](?:\.\.\.\+\d+)?|\S+)", m.group(2)))
        tok, sk, sqsq, sqsk = (_int(kv.get(k, 0)) for k in ("tok", "sk", "sqsq", "sqsk"))
        if "sqsq" in kv and "sqsk" in kv:
            pre = "c_" if m.group(1) == "prefill" else "g_"
            got = dict.fromkeys(_CHUNK_KEYS, 0)
            got.update({pre + "sq": tok, pre + "sk": sk, pre + "sqsq": sqsq, pre + "sqsk": sqsk})
            return got
    raise ValueError(f"no sq/sk aggregates in the step label {label!r}")


def attention_params(name: str, args: dict) -> dict[str, Any]:
    """The step's chunk statistics (from the op's enclosing annotation) and the q / k
    shapes; TraceLens's placeholder params (no estimate) where any of them is missing."""
    try:
        stats = chunk_stats(str(args.get(ANNOTATION_KEY)))
        dims, types = args["Input Dims"], args["Input type"]
        n_q, h_q, d_qk = dims[0]
        n_kv, h_kv, d_v = dims[1][-3:]
    except (ValueError, IndexError, KeyError, TypeError):
        return dict(_NO_PERF)
    if ATTENTION_OPS[name] and len(dims) > 2 and len(dims[2]) >= 1:
        d_v = dims[2][-1]
    return {
        "B": 1,
        "N_Q": n_q,
        "H_Q": h_q,
        "H_V": h_kv,
        "H_K": h_kv,
        "N_KV": n_kv,
        "H_KV": h_kv,
        "d_h_qk": d_qk,
        "d_h_v": d_v,
        "dropout": 0.0,
        "causal": False,
        "flash_impl": True,
        **stats,
        "dtype_Q": types[0],
        "dtype_KV": types[1] if len(types) > 1 else types[0],
    }


def attention_metrics(name: str, p: dict, args: dict) -> tuple[float, float, str]:
    """Non-causal attention over the cached context plus causal attention within the chunk,
    for the context and the generation requests; Q, output and the chunk's K/V in Q's
    dtype, the cached K/V in the KV dtype."""
    if p.get("_no_perf"):
        raise ValueError(f"{name}: no chunk statistics, no estimate")
    if p["c_sq"] == 0 and p["g_sq"] == 0:
        raise ValueError(f"{name}: an empty step")
    h_q, h_kv, d_qk, d_v = p["H_Q"], p["H_KV"], p["d_h_qk"], p["d_h_v"]
    flops = h_q * (2 * p["c_sqsk"] * (d_qk + d_v) - p["c_sqsq"] * (d_qk + d_v) + 2 * p["g_sqsk"] * (d_qk + d_v))
    b_q = bpe(p["dtype_Q"]) or 2
    b_kv = (bpe(p["dtype_KV"]) if p["dtype_KV"] else None) or b_q
    b = p["B"]
    chunk = b * (p["c_sq"] + p["g_sq"]) * (h_q * (d_qk + d_v) + h_kv * (d_qk + d_v))
    cached = b * ((p["c_sk"] - p["c_sq"]) + (p["g_sk"] - p["g_sq"])) * h_kv * (d_qk + d_v)
    return flops, chunk * b_q + cached * b_kv, spec("matrix", p["dtype_Q"])


def store_cache_params(name: str, args: dict) -> dict[str, Any]:
    """``sglang::store_cache(k, v, k_cache, v_cache, indices, ...)``."""
    k = tuple(args["Input Dims"][0])
    return {"op_shape": k, "nelems": prod(k), "dtype": args["Input type"][0]}


def store_cache_metrics(name: str, p: dict, args: dict) -> tuple[float, float, str]:
    """A scatter of the new K/V rows into the paged cache: no math; k and v read, their
    rows of both caches written."""
    return 0, 4 * p["nelems"] * _bpe_or_bf16(p["dtype"]), spec("vector", p["dtype"]) if p["dtype"] else ""
