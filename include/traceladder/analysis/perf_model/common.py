"""Shared pieces of the perf models: bytes per element and compute precision by dtype.

Provenance: TraceLens v1.0.0 ``PerfModel/utils.py`` (``name2bpe``, ``torch_dtype_map``).
"""

from __future__ import annotations

from math import prod
from typing import Any

__all__ = ["bpe", "precision", "prod", "spec"]

_BPE: dict[str, int] = {}
for _n, _names in {
    8: ["double", "long int"],
    4: ["float", "scalar", "int"],
    2: ["c10::half", "c10::bfloat16"],
    1: [
        "c10::float8_e4m3fnuz",
        "c10::float8_e4m3fn",
        "c10::float8_e5m2",
        "c10::float8_e8m0fnu",
        "unsigned char",
        "signed char",
        "fp8",
        "c10::float4_e2m1fn_x2",
        "fp4",
    ],
}.items():
    for _d in _names:
        _BPE[_d] = _n

_PRECISION = {
    "float": "fp32",
    "double": "fp64",
    "c10::half": "fp16",
    "c10::bfloat16": "bf16",
    "c10::float8_e4m3fnuz": "fp8",
    "unsigned char": "fp8",
    "fp8": "fp8",
    "fp4": "fp4",
    "mxfp4": "fp4",
    "c10::float4_e2m1fn_x2": "fp4",
    "c10::float8_e4m3fn": "fp8",
}


def bpe(dtype: Any) -> int | None:
    """Bytes per element of a profiler dtype name (None when unknown or absent)."""
    if dtype is None:
        return None
    return _BPE.get(dtype.lower())


def precision(dtype: Any) -> str | None:
    return _PRECISION.get(dtype.lower()) if dtype else None


def spec(maf: str, dtype: Any) -> str:
    """TraceLens's ``Compute Spec``: ``<maf>_<precision>``, '' when the precision is unknown."""
    p = precision(dtype)
    return f"{maf}_{p}" if p else ""
