"""Convolution perf models: ``aten::convolution`` and ``aten::convolution_backward``.

Provenance: TraceLens v1.0.0 ``PerfModel/perf_model.py`` ``CONV`` / ``aten_conv`` /
``aten_conv_bwd`` (after ``torch.utils.flop_counter``): FLOPs = 2 * prod(filter[1:])
per output element (+ bias); bytes = (input + weight (+ bias) + output) elements at
the input dtype's size.  The backward op is modelled as input-grad + weight-grad
(+ bias-grad) convolutions.  ``param: bias`` of the backward op is the value of
TraceLens's ``len(d) > 3 and d[3] and len(d[3]) > 0`` as is (``[]`` when empty).
"""

from __future__ import annotations

from typing import Any

from .common import bpe, prod, spec

CONV_OPS = {"aten::convolution": 0, "aten::convolution_backward": 1}


def _tuple(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s[1:-1].split(","))


def params(name: str, args: dict) -> dict[str, Any]:
    o = CONV_OPS[name]  # the backward op has grad_output first
    d, ci, ty = args["Input Dims"], args["Concrete Inputs"], args["Input type"]
    x = tuple(d[o])
    nd = len(x) - 2
    w = tuple(d[o + 1])
    bias = (len(d) == 3) if o == 0 else (len(d) > 3 and d[3] and len(d[3]) > 0)
    c = 3 + o

    def arg(i: int, default: int) -> tuple[int, ...]:
        v = _tuple(ci[c + i]) if ci[c + i] != "" else (default,) * nd
        return v * nd if len(v) == 1 else v

    stride, padding, dilation = arg(0, 1), arg(1, 0), arg(2, 1)
    transposed = {"True": True, "False": False}[ci[c + 3].strip()]
    out_pad = arg(4, 0)
    groups = int(ci[c + 5])
    dt = tuple(ty[o : o + 2])
    if dt[0] != dt[1]:
        raise ValueError(f"input and weight dtypes differ: {dt}")
    xs: tuple[Any, ...] | None
    ws: tuple[Any, ...] | None
    try:
        xs, ws = tuple(args["Input Strides"][o]), tuple(args["Input Strides"][o + 1])
    except KeyError:
        xs = ws = None
    conv = {3: "conv1d", 4: "conv2d", 5: "conv3d"}.get(len(x))
    if conv is None:
        raise ValueError(f"unknown convolution dimension {len(x)}")
    return {
        "convNd": conv,
        "input_shape": x,
        "filter_shape": w,
        "dtype_input_weight": dt,
        "input_stride": xs,
        "weight_stride": ws,
        "bias": bias,
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "transposed_conv": transposed,
        "output_padding": out_pad,
        "groups": groups,
    }


def _out_shape(p: dict) -> tuple[int, ...]:
    x, w = p["input_shape"], p["filter_shape"]
    tr = p["transposed_conv"]
    sp = []
    for i in range(len(x) - 2):
        s, pad, dil, k = p["stride"][i], p["padding"][i], p["dilation"][i], w[2 + i]
        if tr:
            sp.append((x[2 + i] - 1) * s - 2 * pad + dil * (k - 1) + p["output_padding"][i] + 1)
        else:
            sp.append(int(((x[2 + i] + 2 * pad - dil * (k - 1) - 1) / s) + 1))
    return (x[0], w[1] if tr else w[0]) + tuple(sp)


def _t(s: tuple) -> tuple:
    return (s[1], s[0]) + s[2:]


def _flops(x, w, out, bias, tr=False) -> int:
    per = 2 * prod(w[1:])
    return (prod(x) if tr else prod(out)) * per + (prod(out) if bias else 0)


def _bytes(x, w, out, bias, b) -> int:
    return (prod(x) + prod(w) + (out[1] if bias else 0) + prod(out)) * b


def _fwd(p: dict, out) -> tuple[float, float | None]:
    b = bpe(p["dtype_input_weight"][0])
    x, w = p["input_shape"], p["filter_shape"]
    nbytes = None if b is None else _bytes(x, w, out, p["bias"], b)
    return _flops(x, w, out, p["bias"], p["transposed_conv"]), nbytes


def _bwd(p: dict, out) -> tuple[float, float | None]:
    x, w, bias, tr = p["input_shape"], p["filter_shape"], p["bias"], p["transposed_conv"]
    fl = _flops(out, w, x, False, not tr)
    fl += _flops(_t(x), _t(out), _t(w), False) if not tr else _flops(_t(out), _t(x), _t(w), False)
    fl += prod(out) if bias else 0
    b = bpe(p["dtype_input_weight"][0])
    if b is None:
        return fl, None
    nbytes = _bytes(out, w, x, False, b) + _bytes(out, x, w, False, b) + ((prod(out) + out[1]) if bias else 0)
    return fl, nbytes


def metrics(name: str, p: dict, bwd: bool = False) -> tuple[float, float | None, str]:
    """``aten::convolution`` forward (or its autograd backward when ``bwd``); the
    ``aten::convolution_backward`` op itself is always the backward model."""
    out = _out_shape(p)
    fl, nb = _bwd(p, out) if (bwd or CONV_OPS[name] == 1) else _fwd(p, out)
    return fl, nb, spec("matrix", p["dtype_input_weight"][0])
