"""The shape args of host ops, decoded once per distinct value.

TraceLens reads ``Input Dims`` / ``Input type`` / ``Input Strides`` / ``Concrete
Inputs`` (and, for reduce ops, ``Output type``) from every op it reports on.  Most ops
repeat a few shapes, so each event's five fields are read as raw JSON (``msgspec.Raw``,
no nested lists built) and only each distinct raw value is decoded.  The result is
cached on the table, so the perf-model sheets, ``ops_unique_args`` and
``unified_perf_summary`` share one pass over the ops they report on (a few thousand of a
trace's cpu_ops).  The autograd links (:mod:`traceladder.analysis.model.autograd_links`) need
every cpu_op's ``Sequence number``: that is read alone, by a one-field Struct decoded
straight into a numpy column, not through the five fields.
"""

from __future__ import annotations

from operator import attrgetter, itemgetter
from typing import Any

import msgspec
import numpy as np

from .events import MISSING, EventTable

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


class _Seq(msgspec.Struct, gc=False):
    """The common case: an integer ``Sequence number`` or none (anything else: :class:`_SeqAny`)."""

    seq: int = msgspec.field(default=MISSING, name="Sequence number")


class _SeqAny(msgspec.Struct, gc=False):
    seq: int | None = msgspec.field(default=None, name="Sequence number")


_G_SEQ = attrgetter("seq")
_SEQ = msgspec.json.Decoder(list[_Seq])
#: events per decode of the Sequence numbers
_BLOCK = 4096


def _joined(raw_args: list, idx: list[int]) -> bytes:
    """``[args, args, ...]`` of the events ``idx`` (all with args) as one JSON array."""
    if len(idx) == 1:
        return b"[" + bytes(raw_args[idx[0]]) + b"]"
    return b"[" + b",".join(itemgetter(*idx)(raw_args)) + b"]"


class OpArgs:
    """``key(i)``: a hashable id of event i's five fields (equal raw JSON, equal id);
    ``args(key)``: those fields decoded, as a dict holding only the present ones."""

    def __init__(self, t: EventTable):
        self.t = t
        self._key = np.full(len(t), -1, dtype=np.int64)  # per event; -1: not read yet
        self._raw: dict[bytes, int] = {}
        self._vals: list[bytes] = []
        self._decoded: dict[int, dict[str, Any]] = {}
        #: the cpu_ops that have an int64 ``Sequence number``, and those numbers
        #: (filled by :meth:`all_cpu_ops`); :attr:`seq_slow`: any other int ones
        self.seq_events = np.empty(0, dtype=np.int64)
        self.seq_values = np.empty(0, dtype=np.int64)
        self.seq_slow: dict[int, int] = {}
        self._all_cpu_done = False

    def keys(self, idx: np.ndarray) -> np.ndarray:
        """The key of each event in ``idx`` (events not seen before are read now)."""
        idx = np.asarray(idx, dtype=np.int64)
        key = self._key
        todo = np.unique(idx[key[idx] < 0])
        if todo.size:
            sep = b"\x00"  # never inside raw JSON
            structs = self.t.decode_args(todo.tolist(), type=_Five)
            raws = self._raw
            key[todo] = [
                raws.setdefault(sep.join((s.dims, s.types, s.strides, s.concrete, s.out)), len(raws)) for s in structs
            ]
        return key[idx]

    def all_cpu_ops(self) -> None:
        """Read every cpu_op's ``Sequence number`` into :attr:`seq_events` (event
        indices, ascending) and :attr:`seq_values`."""
        if self._all_cpu_done:
            return
        self._all_cpu_done = True
        cpu = np.flatnonzero(self.t.is_cat("cpu_op") & self.t.has_args)
        if not cpu.size:
            return
        # in blocks: a few MB of joined args at a time stay in reused memory (one ~20 MB
        # buffer costs more in fresh pages than its decode)
        raw, idx = self.t.raw_args, cpu.tolist()
        vals = np.empty(cpu.size, dtype=np.int64)
        slow: dict[int, int] = {}
        for lo in range(0, len(idx), _BLOCK):
            part = idx[lo : lo + _BLOCK]
            buf = _joined(raw, part)
            try:
                vals[lo : lo + len(part)] = np.fromiter(map(_G_SEQ, _SEQ.decode(buf)), dtype=np.int64, count=len(part))
            except (msgspec.ValidationError, OverflowError):  # an explicit null, or a huge number
                got = [s.seq for s in self.t.decode_args(part, type=_SeqAny)]
                vals[lo : lo + len(part)] = MISSING
                slow.update((i, v) for i, v in zip(part, got) if v is not None)
        has = vals != MISSING
        self.seq_events, self.seq_values = cpu[has], vals[has]
        if slow:  # values beyond int64 (or MISSING itself): Python ints, in event order
            self.seq_slow = slow

    def raw_parts(self, k: int) -> list[bytes]:
        """Key k's five fields as raw JSON, in :data:`FIELDS` order (b"": absent)."""
        if len(self._vals) < len(self._raw):
            self._vals = list(self._raw)  # insertion order = code order
        return self._vals[k].split(b"\x00")

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
