"""Perf model of torch.compile's Triton kernel ops (``triton_poi_*``, ``triton_red_*``,
``triton_per_*``), from the launch's own args.

Provenance (facts and formats): TraceLens v1.0.0 ``PerfModel/triton_compiled_perf_model.py``
(its trace-args path; the Inductor cache files it falls back to are not read here):

* the fused ops come from the kernel name, ``triton_<kind>_fused_<ops>_<n>``: the
  underscore-joined tokens are split into known op names (:mod:`.triton_op_names`), taking
  from the end the longest name that ends each split;
* element counts are the integer ``Concrete Inputs``: a reduction's last two are
  (xnumel, rnumel), a pointwise kernel's last one is xnumel (rnumel 1);
* FLOPs = (the fused ops' FLOPs per element, summed) x xnumel x rnumel;
* bytes = every tensor arg's elements x its dtype's size (c10 dtype names only; others
  count 0), plus one more write of the first tensor's xnumel elements for pointwise kernels;
* Compute Spec ``vector_<dtype>``, the first sized tensor's c10 dtype lowercased.

The op has a model only where these args are present (TraceLens's ``can_model``): no
shapes, types or integer inputs, no model, and no ``has_perf_model`` in
``unified_perf_summary.csv``. The ops have no sheet of their own.
"""

from __future__ import annotations

import re
from math import prod
from typing import Any

from .triton_op_names import NAMES

__all__ = ["PREFIXES", "can_model", "fused_ops", "params", "metrics"]

PREFIXES = ("triton_poi_", "triton_red_", "triton_per_")

#: FLOPs per element of the ops that commonly appear fused; others (views, copies) count 0
_FLOPS_PER_ELEM = {
    "add": 1,
    "sub": 1,
    "mul": 1,
    "div": 1,
    "pow": 2,
    "sqrt": 2,
    "rsqrt": 2,
    "exp": 4,
    "log": 4,
    "sigmoid": 4,
    "tanh": 4,
    "relu": 1,
    "silu": 4,
    "gelu": 8,
    "mean": 1,
    "sum": 1,
    "var": 2,
    "abs": 1,
    "neg": 1,
    "reciprocal": 2,
    "ne": 1,
    "eq": 1,
    "lt": 1,
    "gt": 1,
}
_C10_BYTES = {
    "c10::BFloat16": 2,
    "c10::Half": 2,
    "c10::Float": 4,
    "c10::Double": 8,
    "c10::Byte": 1,
    "c10::Char": 1,
    "c10::Int": 4,
    "c10::Long": 8,
}
_KERNEL = re.compile(r"triton_(?:poi|red|per)_fused_(.+)_(\d+)$")


def fused_ops(name: str) -> list[str]:
    """The ops fused into a kernel, from its name (empty when it does not split)."""
    m = _KERNEL.match(name)
    if not m:
        return []
    tokens = m.group(1).split("_")
    n = len(tokens)
    # ends[i]: (op, start) for each known op covering tokens[start:i] after a valid split
    ends: list[list[tuple[str, int]] | None] = [None] * (n + 1)
    ends[0] = []
    for i in range(1, n + 1):
        for j in range(i):
            if ends[j] is None:
                continue
            op = "_".join(tokens[j:i])
            if op in NAMES:
                ends[i] = (ends[i] or []) + [(op, j)]
    if not ends[n]:
        return []
    ops: list[str] = []
    pos = n
    while pos > 0:
        best = ends[pos]
        assert best
        op, pos = max(best, key=lambda c: len(c[0]))  # the first longest
        ops.append(op)
    return ops[::-1]


def _meta(name: str, args: dict) -> dict[str, Any] | None:
    conc, dims, types = args.get("Concrete Inputs"), args.get("Input Dims"), args.get("Input type")
    if not conc or not dims or not types:
        return None
    ints = []
    for v in conc:
        try:
            ints.append(int(v))
        except (ValueError, TypeError):
            continue
    if name.startswith(("triton_red_", "triton_per_")) and len(ints) >= 2:
        xnumel, rnumel = ints[-2], ints[-1]
    elif ints:
        xnumel, rnumel = ints[-1], 1
    else:
        return None
    sizes: list[int] = []
    nbytes = 0.0
    dtype = None
    for shape, dt in zip(dims, types):
        if dt == "Scalar" or not shape:
            continue
        b = _C10_BYTES.get(dt, 0)
        sizes.append(b)
        nbytes += prod(shape) * b
        if dtype is None and b > 0:
            dtype = dt.split("::")[-1].lower()
    if name.startswith("triton_poi_") and sizes:
        nbytes += sizes[0] * xnumel  # the output written over the first input
    return {"ops": fused_ops(name), "xnumel": xnumel, "rnumel": rnumel, "bytes": nbytes, "dtype": dtype}


def can_model(name: str, args: dict) -> bool:
    return _meta(name, args) is not None


def params(name: str, args: dict) -> dict[str, Any]:
    meta = _meta(name, args)
    if meta is None:
        raise ValueError(f"{name}: no element counts in its args")
    return {
        "fused_ops": ", ".join(f"aten.{op}" for op in meta["ops"]),
        "xnumel": meta["xnumel"],
        "rnumel": meta["rnumel"],
    }


def metrics(name: str, p: dict, bwd: bool, args: dict) -> tuple[float, float, str]:
    meta = _meta(name, args)
    if bwd or meta is None:
        raise NotImplementedError(f"{name}: no backward model" if bwd else f"{name}: no element counts")
    per_elem = sum(_FLOPS_PER_ELEM.get(op, 0) for op in meta["ops"])
    flops = float(per_elem * meta["xnumel"] * meta["rnumel"])
    return flops, meta["bytes"], f"vector_{meta['dtype']}" if meta["dtype"] else ""
