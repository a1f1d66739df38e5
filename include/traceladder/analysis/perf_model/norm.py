"""Normalization perf models (batch, layer, group, instance and RMS norm, fwd + bwd ops).

Provenance: TraceLens v1.0.0 ``PerfModel/perf_model.py`` ``Normalization`` and its
subclasses.  Quirks kept on purpose so the numbers match TraceLens:
* ``is_affine`` tests ``Input Dims[k] is not None`` (the profiler writes ``[]``, so it
  is nearly always True);
* batch/instance norm's ``is_training`` is ``bool()`` of the ``Concrete Inputs`` string
  (any non-empty string, ``'False'`` included, is True).
"""

from __future__ import annotations

import ast
from typing import Any

from .common import bpe, prod, spec


#: ops of other libraries that TraceLens models with a core norm model
_ALIASES = {"aiter::_groupnorm_run": "group_norm"}


def _ints(s: str) -> list[int]:
    return [int(x) for x in ast.literal_eval(s)]


def _bools(s: str) -> list[bool]:
    return [bool(x) for x in ast.literal_eval(s)]


def _base(dims, types, strides, i: int, channels, has_bias, affine, training) -> dict[str, Any]:
    return {
        "op_shape": tuple(dims[i]),
        "dtype_in_out": (types[i], None),
        "stride_input": tuple(strides[i]),
        "stride_output": None,
        "num_channels": channels,
        "has_bias": has_bias,
        "is_affine": affine,
        "is_training": training,
    }


def params(name: str, args: dict) -> dict[str, Any]:
    d, ty, st, ci = args["Input Dims"], args["Input type"], args["Input Strides"], args["Concrete Inputs"]
    kind = _ALIASES.get(name) or name.rsplit("::", 1)[-1]
    for pre in ("native_", "miopen_", "cudnn_", "_fused_"):
        if kind.startswith(pre):
            kind = kind[len(pre) :]
            break
    if kind == "batch_norm":
        return _base(d, ty, st, 0, d[0][1], True, d[2] is not None, bool(ci[5]))
    if kind == "batch_norm_backward":
        if name in ("aten::cudnn_batch_norm_backward", "aten::miopen_batch_norm_backward"):
            i, has_out, training = 0, True, False
        else:
            i, has_out, training = 1, d[0] is not None, bool(ci[7])
        p = _base(d, ty, st, i, tuple(d[i])[1], True, d[2] is not None, training)
        p["output_mask"] = [has_out]
        return p
    if kind == "layer_norm":
        return _base(d, ty, st, 0, prod(_ints(ci[1])), d[3] is not None, d[2] is not None, True)
    if kind == "layer_norm_backward":
        mask = _bools(ci[7])
        p = _base(d, ty, st, 1, prod(_ints(ci[2])), mask[2], mask[1], True)
        p["output_mask"] = mask
        return p
    if kind == "group_norm":
        return _base(d, ty, st, 0, tuple(d[0])[1], True, d[2] is not None, True)
    if kind == "group_norm_backward":
        p = _base(d, ty, st, 1, tuple(d[1])[1] / int(ci[8]), True, d[5] is not None, True)
        p["output_mask"] = _bools(ci[9])
        return p
    if kind == "instance_norm":
        return _base(d, ty, st, 0, tuple(d[0])[1], True, d[2] is not None, bool(ci[5]))
    if kind == "rms_norm":
        return _base(d, ty, st, 0, prod(_ints(ci[1])), False, d[2] is not None, False)
    if kind == "rms_norm_backward":
        p = _base(d, ty, st, 1, prod(_ints(ci[2])), False, d[4] is not None, False)
        p["output_mask"] = _bools(ci[5])
        return p
    raise NotImplementedError(name)


def _bpes(p: dict) -> tuple[int | None, int | None]:
    b = bpe(p["dtype_in_out"][0])
    return b, b  # the output dtype is never given: same as the input


def _fwd(p: dict, n: int, c) -> tuple[float, float]:
    flops = c * 3 + (n * 3 if p["is_training"] else 0) + c * 3 + 2 * n
    w = 2 + ((1 + (1 if p["has_bias"] else 0)) if p["is_affine"] else 0) + (2 if p["is_training"] else 0)
    b_in, b_out = _bpes(p)
    return flops, n * b_in + n * b_out + w * c * b_in


def _bwd(p: dict, n: int, c) -> tuple[float, float]:
    mask, training = p["output_mask"], p["is_training"]
    per = (3 if not training else 0) + 4 * (n / c)
    if mask[0]:
        if training:
            per += 5 * (n / c)
    else:
        per += 2 * (n / c)
    b_in, b_out = _bpes(p)
    nbytes = n * b_out + n * b_in * (2 if mask[0] and training else 1)
    if training:
        nbytes += c * b_in
    if p["is_affine"]:
        nbytes += c * b_in
        if training:
            nbytes += c * b_in * (2 if p["has_bias"] else 1)
    return c * per, nbytes


def metrics(name: str, p: dict) -> tuple[float, float | None, str]:
    n, c = prod(p["op_shape"]), p["num_channels"]
    kind = name.rsplit("::", 1)[-1]
    b_in, b_out = _bpes(p)
    if "rms_norm" in kind:
        aff = p["is_affine"]
        if kind.endswith("backward"):
            mask = p["output_mask"]
            flops = (n if aff else 0) + n
            if mask[0]:
                flops += 6 * n
            if mask[1] and aff:
                flops += n + (n if n / c > 1 else 0)
            nbytes = n * b_out + n * b_in * 2 + (c * b_in * 2 if aff else 0)
        else:
            flops = (n / c) * (2 * c + 2) + n * (2 if aff else 1)
            nbytes = n * b_in + n * b_out + (c * b_in if aff else 0)
        return flops, nbytes, spec("vector", p["dtype_in_out"][0])
    flops, nbytes = _bwd(p, n, c) if kind.endswith("backward") else _fwd(p, n, c)
    return flops, nbytes, spec("vector", p["dtype_in_out"][0])
