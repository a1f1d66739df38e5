"""The shape args of host ops, decoded once per distinct value.

TraceLens reads ``Input Dims`` / ``Input type`` / ``Input Strides`` / ``Concrete
Inputs`` (and, for reduce ops, ``Output type``) from every op it reports on.  Most ops
repeat a few shapes, so each event's five fields are read as raw JSON (``msgspec.Raw``,
no nested lists built) and only each distinct raw value is decoded.  The result is
cached on the table, so the perf-model sheets, ``ops_unique_args`` and
``unified_perf_summary`` share one pass, which also reads each op's ``Sequence number``
(for :mod:`traceladder.analysis.autograd_links`).
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from .events import EventTable

__all__ = ["FIELDS", "OpArgs", "op_args"]

FIELDS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs", "Output type")
_MISSING = b""


class _Five(msgspec.Struct):
    dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    types: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    strides: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Strides")
    concrete: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")
    out: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Output type")
    seq: int | None = msgspec.field(default=None, name="Sequence number")


class OpArgs:
    """``key(i)``: a hashable id of event i's five fields (equal raw JSON, equal id);
    ``args(key)``: those fields decoded, as a dict holding only the present ones."""

    def __init__(self, t: EventTable):
        self.t = t
        self._key: dict[int, int] = {}
        self._raw: dict[bytes, int] = {}
        self._vals: list[bytes] = []
        self._decoded: dict[int, dict[str, Any]] = {}
        #: ``Sequence number`` of every cpu_op that has one (read in the same pass)
        self.seq: dict[int, int] = {}
        self._all_cpu_done = False
        self._autograd: bool | None = None

    def keys(self, idx: np.ndarray) -> list[int]:
        idx = np.asarray(idx, dtype=np.int64)
        key = self._key
        if not self._all_cpu_done and self._has_autograd():
            # a training trace: the autograd links need every cpu_op's Sequence number,
            # so read every cpu_op now, in one pass
            self._all_cpu_done = True
            cpu = np.flatnonzero(self.t.is_cat("cpu_op") & self.t.has_args)
            todo = sorted(set(cpu.tolist()) | set(idx.tolist()))
        else:
            todo = [i for i in idx.tolist() if i not in key]
        if todo:
            sep = b"\x00"  # never inside raw JSON
            structs = self.t.decode_args(todo, type=_Five)
            raws = self._raw
            codes = [raws.setdefault(sep.join((s.dims, s.types, s.strides, s.concrete, s.out)), len(raws))
                     for s in structs]
            key.update(zip(todo, codes))
            self.seq.update((i, s.seq) for i, s in zip(todo, structs) if s.seq is not None)
        return [key[i] for i in idx.tolist()]

    def _has_autograd(self) -> bool:
        if self._autograd is None:
            self._autograd = any(n.startswith("autograd::engine::evaluate_function:") for n in self.t.names)
        return self._autograd

    def all_cpu_ops(self) -> None:
        """Read every cpu_op (their ``Sequence number`` fills :attr:`seq`)."""
        if not self._all_cpu_done:
            self._all_cpu_done = True
            self.keys(np.flatnonzero(self.t.is_cat("cpu_op") & self.t.has_args))

    def args(self, k: int) -> dict[str, Any]:
        got = self._decoded.get(k)
        if got is None:
            if len(self._vals) < len(self._raw):
                self._vals = list(self._raw)  # insertion order = code order
            parts = self._vals[k].split(b"\x00")
            got = {f: msgspec.json.decode(r) for f, r in zip(FIELDS, parts) if r != _MISSING}
            self._decoded[k] = got
        return got


def op_args(t: EventTable) -> OpArgs:
    """The table's shared :class:`OpArgs` (kept in the table's per-trace cache)."""
    got = t._cat_cache.get(("op_args",))
    if got is None:
        got = t._cat_cache[("op_args",)] = OpArgs(t)
    return got
