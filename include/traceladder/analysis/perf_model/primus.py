"""Perf models of Primus's own ops: primus_turbo's grouped GEMMs, its hipBLASLt FP8 / MXFP4
GEMMs and their quantize ops, TransformerEngine v2's pseudo GEMMs, MoE dispatch / combine and
the fused cross-entropy.

Provenance: TraceLens v1.0.0 ``PerfModel/perf_model.py`` classes ``GroupedGemm``,
``primus_turbo_grouped_gemm(_variable_k)``, ``hipblaslt_gemm_fp8`` / ``_fp4``,
``primus_turbo_quantize_fp8``, ``primus_turbo_quantize_mxfp4_dual``, ``tev2_pseudo_gemm``,
``MoEComm`` and ``CrossEntropy``, mapped in ``torch_op_mapping.py``:

* grouped GEMM (sheet ``GroupedGEMM_fwd``): X [M, K] times G weights [K, N] (or [N, K]), or
  per-group tensor lists (``[[M_i, K], ...], [[K, N], ...]``); FLOPs 2MKN, bytes
  (MK + GKN) * bpe_in + MN * bpe_out.  The variable-K op sums each group with G = 1.  dtypes
  from ``Input type`` [0] / [1]; an unknown one fails the fixed-K model (the op is dropped), the
  variable-K model then has no bytes.  No backward model.
* the GEMM-sheet ops (params, FLOPs and bytes for :mod:`..reports.gemm`): hipBLASLt's
  ``(A, scaleA, B, scaleB, out_dtype, transA, transB, transC, granularity)`` with the C++
  binding's transC swap; FP4 unpacks K (two per byte) and adds the E8M0 scales (one byte per
  32 elements); the output is 2 bytes.  TE v2's pseudo GEMM: A [M, K], B [K, N], 2-byte output.
* the quantize ops (``UnaryElementwise``): one FLOP per element; FP8 reads the input and writes
  a byte per element; MXFP4-dual writes two packed FP4 copies and their row / column scales.
* MoE dispatch / combine (``MoE_comm_fwd/_bwd``): no FLOPs, tokens x hidden x bpe bytes, the
  same backward; no Compute Spec.
* cross-entropy (``CrossEntropy_fwd``): 5 FLOPs per logit row element; bytes the logits, an
  int64 target and an fp32 loss per row.
"""

from __future__ import annotations

from typing import Any

from .common import bpe, prod, spec

__all__ = [
    "grouped_params",
    "grouped_metrics",
    "moe_params",
    "moe_metrics",
    "xent_params",
    "xent_metrics",
    "quant_params",
    "quant_metrics",
    "gemm_params",
    "gemm_flops_bytes",
    "GROUPED_OPS",
    "VARIABLE_K_OPS",
    "QUANT_OPS",
    "GEMM_KINDS",
]

_FIXED_K = "fixed_k"
_VARIABLE_K = "variable_k"


def _turbo_variants(op: str) -> tuple[str, ...]:
    """An op's names in a trace: Primus Turbo's, its ``_impl``, the C++ extension's and its CK kernel's."""
    return (
        f"primus_turbo::{op}",
        f"primus_turbo::{op}_impl",
        f"primus_turbo_cpp_extension::{op}",
        f"primus_turbo_cpp_extension::ck_{op}",
    )


GROUPED_OPS = _turbo_variants("grouped_gemm")
VARIABLE_K_OPS = _turbo_variants("grouped_gemm_variable_k")
_FP8_OUT, _FP4_OUT = "c10::Float8_e4m3fnuz", "c10::Float4_e2m1fn_x2"
#: quantize op -> its output dtype
QUANT_OPS: dict[str, str] = {
    "primus_turbo_cpp_extension::quantize_fp8_tensorwise": _FP8_OUT,
    "primus_turbo::quantize_fp8_tensorwise": _FP8_OUT,
    "primus_turbo_cpp_extension::quantize_mxfp4_dual": _FP4_OUT,
    "primus_turbo::quantize_mxfp4_dual": _FP4_OUT,
    "primus::quantize_mxfp4_dual": _FP4_OUT,
}
HIPBLASLT_FP8, HIPBLASLT_FP4, TEV2 = "hipblaslt_fp8", "hipblaslt_fp4", "tev2"
#: GEMM-sheet op -> its kind
GEMM_KINDS: dict[str, str] = {
    "primus_turbo_cpp_extension::hipblaslt_gemm_fp8": HIPBLASLT_FP8,
    "primus_turbo::hipblaslt_gemm_fp8": HIPBLASLT_FP8,
    "primus_turbo_cpp_extension::hipblaslt_gemm_fp4": HIPBLASLT_FP4,
    "primus_turbo::hipblaslt_gemm_fp4": HIPBLASLT_FP4,
    **{
        op: TEV2
        for op in (
            "_Linear_yfwd_mm",
            "_LinearBackward_xgrad_mm",
            "_LinearBackward_wgrad_mm",
            "_LayerNormLinear_yfwd_mm",
            "_LayerNormLinearBackward_xgrad_mm",
            "_LayerNormLinearBackward_wgrad_mm",
        )
    },
}
_MX_BLOCK = 32


def _is_pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _pairs(obj: Any) -> list[tuple[int, int]]:
    """Every (rows, cols) pair of positive ints in nested lists, depth first."""
    if not isinstance(obj, (list, tuple)):
        return []
    if len(obj) == 2 and all(_is_pos_int(v) for v in obj):
        return [(obj[0], obj[1])]
    return [p for item in obj for p in _pairs(item)]


def _two_lists(dims: Any) -> bool:
    return isinstance(dims, (list, tuple)) and len(dims) >= 2 and all(isinstance(d, (list, tuple)) for d in dims[:2])


def _fixed_k_dims(dims: Any) -> tuple[int, int, int, int] | None:
    """(M, K, N, G) from ``[[M, K], [G, K, N] or [G, N, K]]``, else from the per-group lists
    (uniform K and N)."""
    if _two_lists(dims):
        a, b = dims[0], dims[1]
        if len(a) >= 2 and len(b) == 3 and all(_is_pos_int(v) for v in list(a[:2]) + list(b)):
            m, k, g = a[0], a[1], b[0]
            if b[1] == k:
                return m, k, b[2], g
            if b[2] == k:
                return m, k, b[1], g
        lhs, rhs = _pairs(a), _pairs(b)
        if lhs and rhs and len(lhs) == len(rhs):
            k, n = lhs[0][1], rhs[0][1]
            if all(x[1] == k and w[0] == k and w[1] == n for x, w in zip(lhs, rhs)):
                return sum(x[0] for x in lhs), k, n, len(lhs)
    return None


def _variable_k_pairs(dims: Any) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
    """Per group ((M_i, K_i), (K_i, N_i)): ``[[M, K], [M, N]]`` as one group, else the
    per-group lists."""
    if not _two_lists(dims):
        return None
    a, b = dims[0], dims[1]
    if len(a) == 2 and len(b) == 2 and all(_is_pos_int(v) for v in list(a) + list(b)):
        return [((a[0], a[1]), (a[1], b[1]))]
    lhs, rhs = _pairs(a), _pairs(b)
    if not (lhs and rhs and len(lhs) == len(rhs)) or not all(x[1] == w[0] for x, w in zip(lhs, rhs)):
        return None
    return list(zip(lhs, rhs))


def grouped_params(name: str, args: dict) -> dict[str, Any]:
    dims = args.get("Input Dims", [])
    types = args.get("Input type", [])
    dtype_in = types[0] if types else None
    dtype_out = types[1] if len(types) > 1 else dtype_in
    b_in = bpe(dtype_in)
    b_out = bpe(dtype_out) if dtype_out is not None else b_in
    if name in VARIABLE_K_OPS:
        pairs = _variable_k_pairs(dims)
        if not pairs:
            raise ValueError(f"{name}: could not parse Input Dims {dims}")
        (a0, w0) = pairs[0]
        return {
            "M": sum(a[0] for a, _ in pairs),
            "K": a0[1],
            "N": w0[1],
            "G": len(pairs),
            "bpe_in": b_in,
            "bpe_out": b_out,
            "group_pairs": pairs,
        }
    got = _fixed_k_dims(dims)
    if got is None:
        raise ValueError(f"{name}: could not parse Input Dims {dims}")
    m, k, n, g = got
    return {"M": m, "K": k, "N": n, "G": g, "bpe_in": b_in, "bpe_out": b_out}


def grouped_metrics(name: str, p: dict, args: dict) -> tuple[float, float | None, str]:
    b_in, b_out = p["bpe_in"], p["bpe_out"]
    if "group_pairs" in p:
        flops = sum(2 * a[0] * a[1] * w[1] for a, w in p["group_pairs"])
        nbytes = (
            None
            if b_in is None or b_out is None
            else sum((a[0] * a[1] + a[1] * w[1]) * b_in + a[0] * w[1] * b_out for a, w in p["group_pairs"])
        )
    else:
        m, k, n, g = p["M"], p["K"], p["N"], p["G"]
        flops = 2 * m * k * n
        if b_in is None or b_out is None:  # TraceLens's formula fails on the missing size
            raise TypeError(f"{name}: no byte size for {args.get('Input type')}")
        nbytes = (m * k + g * k * n) * b_in + m * n * b_out
    types = args.get("Input type", [None])
    return flops, nbytes, spec("matrix", types[0]) if types[0] else ""  # IndexError on [], as TraceLens


def moe_params(name: str, args: dict) -> dict[str, Any]:
    dims = args.get("Input Dims", [])
    types = args.get("Input type", [])
    tok = dims[0] if dims else []
    dtype = types[0] if types else ""
    return {
        "num_tokens": tok[0] if len(tok) >= 1 else None,
        "hidden_dim": tok[1] if len(tok) >= 2 else None,
        "bpe": bpe(dtype) if dtype else None,
    }


def moe_metrics(p: dict) -> tuple[float, float | None, str]:
    """The same forward and backward: data moved only, no Compute Spec."""
    vals = (p["num_tokens"], p["hidden_dim"], p["bpe"])
    return 0, None if None in vals else vals[0] * vals[1] * vals[2], ""


def xent_params(name: str, args: dict) -> dict[str, Any]:
    logits = args["Input Dims"][0]
    return {"batch": logits[0], "vocab_size": logits[-1], "logits_shape": logits}


def xent_metrics(name: str, p: dict, args: dict) -> tuple[float, float | None, str]:
    types = args.get("Input type", [])
    dtype = types[0] if types else "c10::BFloat16"
    b = (bpe(dtype) if dtype else None) or 2
    batch = p["batch"]
    nbytes = prod(p["logits_shape"]) * b + batch * 8 + batch * 4  # int64 targets, fp32 loss
    return 5 * batch * p["vocab_size"], nbytes, spec("vector", types[0]) if types and types[0] else ""


def quant_params(name: str, args: dict) -> dict[str, Any]:
    try:
        stride_in: tuple | None = tuple(args["Input Strides"][0])
    except (KeyError, IndexError):
        stride_in = None
    return {
        "op_shape": tuple(args["Input Dims"][0]),
        "dtype_in_out": (args["Input type"][0], QUANT_OPS[name]),
        "stride_input": stride_in,
        "stride_output": None,
    }


def quant_metrics(name: str, p: dict) -> tuple[float, float | None, str]:
    shape = p["op_shape"]
    din, dout = p["dtype_in_out"]
    n = prod(shape)
    b_in = bpe(din)
    if dout == _FP8_OUT:
        b_out = bpe(dout)
        nbytes = None if b_in is None or b_out is None else n * b_in + n * b_out
    else:  # MXFP4 dual: packed rowwise + colwise copies and their E8M0 scales
        m, k = shape  # a 2-D input, else TraceLens's unpacking fails
        nbytes = (
            None
            if b_in is None
            else m * k * b_in + 2 * ((m * k + 1) // 2) + m * (-(-k // _MX_BLOCK)) + k * (-(-m // _MX_BLOCK))
        )
    return n, nbytes, spec("vector", din)


def _flag(v: Any) -> bool:
    """TraceLens's ``parse_bool``."""
    if isinstance(v, bool):
        return v
    if v is None:
        return False
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("true", "1"):
            return True
        if s in ("false", "0", ""):
            return False
    return bool(v)


def gemm_params(name: str, args: dict) -> dict[str, Any]:
    """The GEMM.csv params of the ops in GEMM_KINDS (without ``B``, which the sheet adds)."""
    kind = GEMM_KINDS[name]
    dims, types = args["Input Dims"], args["Input type"]
    if kind == TEV2:
        a, b = dims[0], dims[1]
        try:
            strides = args["Input Strides"]
        except KeyError:
            sa = sb = None
        else:
            sa, sb = tuple(strides[0]), tuple(strides[1])
        return {
            "M": a[0],
            "N": b[1],
            "K": a[1],
            "bias": False,
            "stride_A": sa,
            "stride_B": sb,
            "dtype_A_B": tuple(types[:2]),
        }
    conc = args.get("Concrete Inputs") or []
    a, b = list(dims[0]), list(dims[2])
    ta, tb, tc = (_flag(conc[i]) if len(conc) > i else False for i in (5, 6, 7))
    if tc:  # the C++ binding computes C^T = B^T A^T
        a, b = b, a
        ta, tb = not tb, not ta
    m, k = (a[1], a[0]) if ta else (a[0], a[1])
    n = b[0] if tb else b[1]
    if kind == HIPBLASLT_FP4:
        k *= 2  # two FP4 values per byte
    try:
        sa, sb = tuple(args["Input Strides"][0]), tuple(args["Input Strides"][2])
    except (KeyError, IndexError):
        sa = sb = None
    return {
        "M": m,
        "N": n,
        "K": k,
        "bias": False,
        "stride_A": sa,
        "stride_B": sb,
        "dtype_A_B": (types[0], types[2]),
        "dtype_scaleA": types[1] if len(types) > 1 else None,
        "dtype_scaleB": types[3] if len(types) > 3 else None,
    }


def gemm_flops_bytes(name: str, p: dict) -> tuple[float, float | None]:
    kind = GEMM_KINDS[name]
    m, n, k = p["M"], p["N"], p["K"]
    flops = 2 * m * n * k
    da, db = p["dtype_A_B"]
    if kind == TEV2:
        if da != db:
            raise ValueError(f"{name}: A and B dtypes differ: {p['dtype_A_B']}")
        b = bpe(da)
        return flops, None if b is None else (m * k + k * n) * b + m * n * 2
    ba, bb = bpe(da), bpe(db)
    if ba is None or bb is None:
        raise ValueError(f"{name}: unsupported dtypes {p['dtype_A_B']}")
    if kind == HIPBLASLT_FP8:
        return flops, m * k * ba + k * n * bb + m * n * (2 if ba == 1 else ba)
    rows = -(-k // _MX_BLOCK)
    sa = bpe(p.get("dtype_scaleA")) or 1
    sb = bpe(p.get("dtype_scaleB")) or 1
    return flops, m * (k // 2) * ba + n * (k // 2) * bb + m * rows * sa + n * rows * sb + m * n * 2
