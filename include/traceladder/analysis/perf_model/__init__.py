"""Perf models for TraceLens v1.0.0's per-op-family sheets (GEMM lives in reports/gemm.py).

Each :class:`Model` turns one op's ``args`` into TraceLens's ``param:`` values
(``params``) and those into (FLOPs, bytes or None, Compute Spec) (``metrics``).  The op
name lists and the sheet each family goes to are TraceLens's ``PerfModel/
torch_op_mapping.py`` at v1.0.0; the formulas live in one module per family.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from . import conv, elementwise, inference, norm, primus, reduce, sdpa, triton

__all__ = ["Model", "MODELS", "SHEETS", "SPLIT_SHEETS"]


@dataclass(frozen=True)
class Model:
    sheet: str  # TraceLens's sheet category
    params: Callable[[str, dict], dict[str, Any]]
    metrics: Callable[..., tuple[float, float | None, str]]  # (name, params, bwd[, args])
    has_bwd: bool = False  # an autograd backward model exists (bwd=True rows)
    wants_args: bool = False  # metrics also reads the op's raw args (a 4th argument)


def _plain(fn):
    return lambda name, p, bwd=False: fn(p)


_UNARY = Model("UnaryElementwise", elementwise.unary_params, _plain(elementwise.unary_metrics))
_BINARY = Model("BinaryElementwise", elementwise.binary_params, _plain(elementwise.binary_metrics))
_RESIZE_PAD = Model("UnaryElementwise", elementwise.pad_params, _plain(elementwise.resize_metrics))
_RESIZE_UP = Model("UnaryElementwise", elementwise.upsample_params, _plain(elementwise.resize_metrics))
_NORM = Model("Normalization", norm.params, lambda name, p, bwd=False: norm.metrics(name, p))
_REDUCE = Model(
    "Reduce", reduce.params, lambda name, p, bwd=False: (reduce.metrics_bwd if bwd else reduce.metrics)(p), True
)
_SDPA = Model("SDPA", sdpa.params, lambda name, p, bwd=False: (sdpa.metrics_bwd if bwd else sdpa.metrics)(p), True)
_CONV = Model("CONV", conv.params, conv.metrics, True)


def _fwd_only(metrics):
    """An extension model with no backward: TraceLens's backward pass fails on it (no
    ``flops_bwd``) and drops the op."""

    def run(name: str, p: dict, bwd: bool, args: dict):
        if bwd:
            raise NotImplementedError(f"{name}: no backward model")
        return metrics(name, p, args)

    return run


_RMSNORM = Model("RMSNorm", inference.rmsnorm_params, _fwd_only(inference.rmsnorm_metrics), wants_args=True)
_ROPE = Model("RoPE", inference.rope_params, _fwd_only(inference.rope_metrics), wants_args=True)
_ATTENTION = Model(
    "InferenceAttention", inference.attention_params, _fwd_only(inference.attention_metrics), wants_args=True
)
_STORE_CACHE = Model(
    "InferenceAttention", inference.store_cache_params, _fwd_only(inference.store_cache_metrics), wants_args=True
)
_GATED = Model("UnaryElementwise", inference.gated_params, lambda name, p, bwd=False: inference.gated_metrics(name, p))

# Primus's ops (the hipBLASLt and TransformerEngine GEMMs are GEMM.csv's: reports/gemm.py)
_GROUPED = Model("GroupedGEMM", primus.grouped_params, _fwd_only(primus.grouped_metrics), wants_args=True)
_MOE_COMM = Model("MoE_comm", primus.moe_params, lambda name, p, bwd=False: primus.moe_metrics(p), True)
_XENT = Model("CrossEntropy", primus.xent_params, _fwd_only(primus.xent_metrics), wants_args=True)
_QUANT = Model("UnaryElementwise", primus.quant_params, lambda name, p, bwd=False: primus.quant_metrics(name, p))

_TRITON = Model("triton", triton.params, triton.metrics, wants_args=True)  # no sheet of its own


class _ModelTable(dict):
    """Models by op name; torch.compile's Triton kernel ops, whose names are the kernels',
    by their prefix (TraceLens's model matcher)."""

    def __missing__(self, name: str) -> Model:
        if name.startswith(triton.PREFIXES):
            return _TRITON
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or (isinstance(name, str) and name.startswith(triton.PREFIXES))

    def get(self, name: str, default: Model | None = None) -> Model | None:  # type: ignore[override]
        return self[name] if name in self else default


def can_model(name: str, args: dict) -> bool:
    """Whether the op has a model on these args: every named model does; a Triton kernel
    op only with its element counts in the args."""
    return not name.startswith(triton.PREFIXES) or triton.can_model(name, args)


MODELS: dict[str, Model] = _ModelTable()
for _op in (
    "aten::copy",
    "aten::copy_",
    "aten::clamp_min",
    "aten::clamp_min_",
    "aten::clamp_max",
    "aten::clamp_max_",
    "aten::sigmoid",
    "aten::rsqrt",
    "aten::silu",
    "aten::neg",
    "aten::pow",
):
    MODELS[_op] = _UNARY
for _d in (1, 2, 3):
    MODELS[f"aten::replication_pad{_d}d"] = _RESIZE_PAD
    MODELS[f"aten::upsample_nearest{_d}d"] = _RESIZE_UP
for _op in (
    "aten::div",
    "aten::div_",
    "aten::mul",
    "aten::mul_",
    "aten::add",
    "aten::add_",
    "aten::sigmoid_backward",
    "aten::threshold_backward",
):
    MODELS[_op] = _BINARY
for _kind in ("batch_norm", "layer_norm", "group_norm", "instance_norm"):
    for _pre in ("", "native_", "miopen_", "cudnn_"):
        MODELS[f"aten::{_pre}{_kind}"] = _NORM
        if _kind != "instance_norm":  # TraceLens's InstanceNormBwd always fails
            MODELS[f"aten::{_pre}{_kind}_backward"] = _NORM
MODELS["aiter::_groupnorm_run"] = _NORM  # TraceLens's pseudo-op mapping: the core GroupNorm
for _op in (
    "aten::_fused_rms_norm",
    "aten::rms_norm_backward",
    "aten::native_rms_norm_backward",
    "aten::miopen_rms_norm_backward",
    "aten::cudnn_rms_norm_backward",
    "aten::_fused_rms_norm_backward",
):
    MODELS[_op] = _NORM
for _op in (
    "aten::sum",
    "aten::mean",
    "aten::max",
    "aten::min",
    "aten::norm",
    "aten::linalg_norm",
    "aten::std",
    "aten::var",
    "aten::logsumexp",
    "aten::cumsum",
    "aten::cumprod",
    "aten::amin",
    "aten::amax",
):
    MODELS[_op] = _REDUCE
# inference-library ops of TraceLens's pseudo-op extensions
for _op in inference.RMSNORM_OPS:
    MODELS[_op] = _RMSNORM
for _op in inference.ROPE_OPS:
    MODELS[_op] = _ROPE
for _op in inference.GATED_OPS:
    MODELS[_op] = _GATED
for _op in inference.ATTENTION_OPS:
    MODELS[_op] = _ATTENTION
MODELS["sglang::store_cache"] = _STORE_CACHE
for _op in primus.GROUPED_OPS + primus.VARIABLE_K_OPS:
    MODELS[_op] = _GROUPED
for _op in ("MoEDispatch", "MoECombine"):
    MODELS[_op] = _MOE_COMM
MODELS["CrossEntropyFunction"] = _XENT
for _op in primus.QUANT_OPS:
    MODELS[_op] = _QUANT
for _op in sdpa.SDPA_OPS:
    MODELS[_op] = _SDPA
for _op in conv.CONV_OPS:
    MODELS[_op] = _CONV

#: sheets written as one table (fwd and bwd ops together), as TraceLens does
SHEETS = ("UnaryElementwise", "BinaryElementwise", "Normalization")
#: sheets split into ``<sheet>_fwd`` / ``<sheet>_bwd``
SPLIT_SHEETS = (
    "Reduce",
    "SDPA",
    "CONV",
    "RMSNorm",
    "RoPE",
    "InferenceAttention",
    "GroupedGEMM",
    "MoE_comm",
    "CrossEntropy",
)
#: ops whose own rows go to the ``_bwd`` sheet; ops dropped from ``_bwd``
BWD_OPS = frozenset({"aten::convolution_backward"})
FWD_ONLY_OPS = frozenset({"aten::convolution", "aten::miopen_convolution", "aten::cudnn_convolution"})
