"""Unary and binary elementwise perf models.

Provenance: TraceLens v1.0.0 ``PerfModel/perf_model.py`` classes ``UnaryElementwise`` /
``aten_unary_elementwise`` and ``BinaryElementwise`` / ``aten_binary_elementwise``:
FLOPs = one per output element; bytes = every input element read once plus every
output element written once; the output dtype is the third (binary) / second (unary)
input's when that input is a tensor, else inferred.  ``aten_replication_pad`` and
``aten_upsample_nearest`` are unary models whose output shape differs from the input's:
``op_shape`` is the output (padding from ``Concrete Inputs[1]``, innermost dim first;
upsampling's output spatial size likewise), bytes = input read + output written.
"""

from __future__ import annotations

import ast
from typing import Any

from .common import bpe, prod, spec


def _output(args: dict, i: int) -> tuple[str | None, tuple | None]:
    """The dtype and strides of the output passed as input ``i``; (None, None) where that input
    is not a tensor (no dims), and the model infers the output dtype."""
    dims = args["Input Dims"]
    if len(dims) > i and dims[i]:
        return args["Input type"][i], tuple(args["Input Strides"][i])
    return None, None


def unary_params(name: str, args: dict) -> dict[str, Any]:
    dtype_out, stride_out = _output(args, 1)
    return {
        "op_shape": tuple(args["Input Dims"][0]),
        "dtype_in_out": (args["Input type"][0], dtype_out),
        "stride_input": tuple(args["Input Strides"][0]),
        "stride_output": stride_out,
    }


def unary_metrics(p: dict) -> tuple[float, float | None, str]:
    n = prod(p["op_shape"])
    din, dout = p["dtype_in_out"]
    b_in = bpe(din)
    b_out = bpe(dout) if dout is not None else b_in
    nbytes = None if None in (b_in, b_out) else n * b_in + n * b_out
    return n, nbytes, spec("vector", din)


def pad_params(name: str, args: dict) -> dict[str, Any]:
    """``aten::replication_pad{1,2,3}d``."""
    shape_in = tuple(args["Input Dims"][0])
    padding = [int(x) for x in args["Concrete Inputs"][1].strip("[]").replace(" ", "").split(",")]
    shape_out = list(shape_in)
    for i in range(len(padding) // 2):  # pairs innermost-first: W, then H, then D
        shape_out[len(shape_in) - 1 - i] += padding[2 * i] + padding[2 * i + 1]
    return _resize_params(args, shape_in, tuple(shape_out), padding=padding)


def _resize_params(args: dict, shape_in: tuple, shape_out: tuple, **extra: Any) -> dict[str, Any]:
    """A resize's params: its shapes (then ``extra``), the output as op shape, the input's dtype."""
    dtype = args["Input type"][0]
    return {
        "input_shape": shape_in,
        "output_shape": shape_out,
        **extra,
        "op_shape": shape_out,
        "dtype_in_out": (dtype, dtype),
        "stride_input": tuple(args["Input Strides"][0]),
        "stride_output": None,
    }


def upsample_params(name: str, args: dict) -> dict[str, Any]:
    """``aten::upsample_nearest{1,2,3}d``: output (N, C, *Concrete Inputs[1])."""
    shape_in = tuple(args["Input Dims"][0])
    shape_out = shape_in[:2] + tuple(ast.literal_eval(args["Concrete Inputs"][1]))
    return _resize_params(args, shape_in, shape_out)


def resize_metrics(p: dict) -> tuple[float, float | None, str]:
    """Pad / upsample: one FLOP per output element; input read, output written."""
    n_out = prod(p["op_shape"])
    din = p["dtype_in_out"][0]
    b = bpe(din)
    nbytes = None if b is None else prod(p["input_shape"]) * b + n_out * b
    return n_out, nbytes, spec("vector", din)


def binary_params(name: str, args: dict) -> dict[str, Any]:
    dims, types, strides = args["Input Dims"], args["Input type"], args["Input Strides"]
    dtype_out, stride_out = _output(args, 2)
    return {
        "shape_in1": tuple(dims[0]),
        "shape_in2": tuple(dims[1]),
        "dtype_in1_in2_out": (types[0], types[1], dtype_out),
        "stride_input1": tuple(strides[0]),
        "stride_input2": tuple(strides[1]),
        "stride_output": stride_out,
    }


def _broadcast(a: tuple, b: tuple) -> tuple:
    nd = max(len(a), len(b))
    a = (1,) * (nd - len(a)) + a
    b = (1,) * (nd - len(b)) + b
    res = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"shapes not broadcastable: {a} and {b}")
        res.append(max(x, y))
    return tuple(res)


def binary_metrics(p: dict) -> tuple[float, float | None, str]:
    s1, s2 = p["shape_in1"], p["shape_in2"]
    n_out = prod(_broadcast(s1, s2))
    d1, d2, dout = p["dtype_in1_in2_out"]
    b1, b2 = bpe(d1), bpe(d2)
    if dout is not None:
        b_out = bpe(dout)
    elif b1 and b2:
        # two tensors: the wider dtype; a scalar operand keeps the first input's
        b_out = max(b1, b2) if (s1 != () and s2 != ()) else b1
    else:
        b_out = None
    nbytes = None if None in (b1, b2, b_out) else prod(s1) * b1 + prod(s2) * b2 + n_out * b_out
    return n_out, nbytes, spec("vector", d1)
