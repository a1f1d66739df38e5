"""Reduce perf model (sum, mean, max, ...), forward and backward.

Provenance: TraceLens v1.0.0 ``PerfModel/perf_model.py`` ``Reduce`` / ``aten_reduce``.
FLOPs = input elements (both directions); bytes = input * bpe_in + output * bpe_out.
The reduced dims come from ``Concrete Inputs``; TraceLens only reads them when they
are real lists/ints, and the profiler writes strings, so in practice the output is one
element (or the input size for cumsum/cumprod) -- reproduced as is.
"""

from __future__ import annotations

from typing import Any

from .common import bpe, prod, spec


def params(name: str, args: dict) -> dict[str, Any]:
    dims = args.get("Input Dims", [])
    if not dims or dims[0] is None:
        return {"num_input_elems": 0, "num_output_elems": 0, "dtype_in_out": (None, None)}
    shape = tuple(dims[0])
    n_in = prod(shape)
    types = args.get("Input type", [])
    d_in = types[0] if types else None
    d_out = args.get("Output type", [None])
    d_out = d_out[0] if isinstance(d_out, list) and d_out else None
    conc = args.get("Concrete Inputs", [])
    dim = None
    keepdim = False
    if len(conc) >= 2:
        rest = conc[1:]
        kidx = None
        for i in range(len(rest) - 1, -1, -1):
            if isinstance(rest[i], bool):
                keepdim, kidx = rest[i], i
                break
        for i in range(len(rest) - 1, -1, -1):
            v = rest[i]
            if i == kidx or v is None or isinstance(v, str):
                continue
            if isinstance(v, (list, tuple)):
                dim = [int(d) for d in v]
                break
            if isinstance(v, int) and not isinstance(v, bool):
                dim = [v]
                break
    if "cumsum" in name or "cumprod" in name:
        n_out = n_in
    elif dim:
        out = list(shape)
        for d in sorted((d if d >= 0 else len(shape) + d for d in dim), reverse=True):
            if 0 <= d < len(out):
                if keepdim:
                    out[d] = 1
                else:
                    out.pop(d)
        n_out = prod(out) if out else 1
    else:
        n_out = 1
    kind = "sum"
    for k in ("mean", "max", "min", "norm"):
        if k in name:
            kind = k
            break
    return {"num_input_elems": n_in, "num_output_elems": n_out, "dtype_in_out": (d_in, d_out), "reduce_type": kind}


def _bpes(p: dict) -> tuple[int | None, int | None]:
    d_in, d_out = p["dtype_in_out"]
    b_in = bpe(d_in) if isinstance(d_in, str) and d_in else None
    if d_out is None:
        return b_in, b_in
    return b_in, (bpe(d_out) if isinstance(d_out, str) and d_out else None)


def metrics(p: dict) -> tuple[float, float | None, str]:
    b_in, b_out = _bpes(p)
    nbytes = None if None in (b_in, b_out) else p["num_input_elems"] * b_in + p["num_output_elems"] * b_out
    return p["num_input_elems"], nbytes, spec("vector", p["dtype_in_out"][0])


def metrics_bwd(p: dict) -> tuple[float, float | None, str]:
    b_in, b_out = _bpes(p)
    nbytes = None if None in (b_in, b_out) else p["num_output_elems"] * b_out + p["num_input_elems"] * b_in
    return p["num_input_elems"], nbytes, spec("vector", p["dtype_in_out"][0])
