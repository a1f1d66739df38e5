"""``headroom.csv`` (its stored name): every finding of one trace as a ranked What's-left target,
with a sentence for the summary.

Kinds: ``op`` (roofline rows on a GPU trace; top ops by self time on a CPU trace), ``region``
(step regions), ``idle`` (the idle breakdown's categories, summed over streams; on a CPU trace
``host_gap`` only, as ``collective_wait`` is the ``comm`` row's time there), ``comm`` (the
timeline's exposed communication) and ``origin`` (an op's AccumulateGrad share, and each top op's
largest origin when the op has more than one).

* ``ms_per_step``: the time over the profiled window divided by its number of ``ProfilerStep``s;
* ``pct_of_step``: ``ms_per_step`` over the mean profiled step (the mean ``ProfilerStep`` range);
* ``recoverable_ms``: per step, only for ops with a model on a device with a known peak; empty
  otherwise (never 0 for "unknown");
* order: rows with ``recoverable_ms`` first, by it, then the rest by ``ms_per_step``.

The kinds are views of the same window, so their rows overlap (an op sits inside a region): they
are ranked side by side, never added up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..model.table import Table

__all__ = ["CSV_NAME", "COLUMNS", "ranked_targets", "write_csv", "sentence"]

CSV_NAME = "headroom.csv"
COLUMNS = ["kind", "target", "ms_per_step", "pct_of_step", "why", "recoverable_ms"]
_ORIGIN_ROWS = 5
_ACCUMULATE_OP = "torch::autograd::AccumulateGrad"


def _pct(ms: float, step_ms: float | None) -> float | None:
    return ms / step_ms * 100 if step_ms else None


def ranked_targets(
    *,
    steps: int,
    step_ms: float | None,
    device: str,
    roofline_rows: list[dict[str, Any]],
    top_ops: list[tuple[str, float]],
    regions: list[dict[str, Any]],
    idle_rows: list[list[Any]],
    exposed_comm_ms: float | None,
    origins: list[dict[str, Any]],
    device_name: str | None,
    share: float,
) -> list[dict[str, Any]]:
    """The ranked rows (dicts with :data:`COLUMNS` and ``sentence``, ``window_ms``)."""
    steps = max(steps, 1)
    rows: list[dict[str, Any]] = []

    def add(kind: str, target: str, ms: float, why: str, rec: float | None = None) -> None:
        if ms > 0:
            rows.append(
                {
                    "kind": kind,
                    "target": target,
                    "ms_per_step": ms,
                    "pct_of_step": _pct(ms, step_ms),
                    "why": why,
                    "recoverable_ms": rec,
                }
            )

    if device == "gpu":
        for r in roofline_rows:
            if r["bound"] == "no model":
                why = str(r.get("model") or "").removeprefix("none: ") or "no perf model for this op"
                add("op", r["op"], r["ms_per_step"], f"{why}: its time, no recoverable estimate")
            elif r["bound"]:
                add(
                    "op",
                    r["op"],
                    r["ms_per_step"],
                    f"{r['category']}, {r['bound']}-bound at {r['pct_of_bound']:.0f}% of the {device_name} roofline "
                    f"(recoverable: to {share:.0%} of the bound)",
                    r["recoverable_ms"],
                )
            else:
                add("op", r["op"], r["ms_per_step"], f"{r['category']}: unknown device, no peak to compare with")
    else:
        for name, us in top_ops:
            add("op", name, us / 1e3 / steps, "self time on the compute thread (CPU trace: no device peak)")
    for r in regions:
        add(
            "region",
            r["region"],
            r["ms_per_step"],
            f"{r['pct_of_direct_kernel_time']:.1f}% of direct {'kernel' if device == 'gpu' else 'op'} time",
        )
    idle: dict[str, float] = {}
    for _, _stream, cat, us, _ in idle_rows:
        if us == us:
            idle[cat] = idle.get(cat, 0.0) + us
    what = {
        "host_wait": "a stream waited for the host to launch its next kernel",
        "kernel_wait": "gaps under 30 µs between kernels (launch overhead)",
        "other": "longer gaps with the next kernel already launched (waits on events, syncs)",
        "collective_wait": "the compute thread idle while a gloo collective of its rank ran",
        "host_gap": "the compute thread idle with no collective running",
    }
    for cat, us in idle.items():
        if device != "gpu" and cat == "collective_wait":
            continue  # the same time as the comm row below on a CPU trace: one row, not two
        scope = "summed over GPU streams, HTA's rules" if device == "gpu" else "compute thread"
        add("idle", cat, us / 1e3 / steps, f"{what.get(cat, cat)} ({scope})")
    if exposed_comm_ms:
        why = "communication not overlapped by computation" + (
            "" if device == "gpu" else " (the compute thread's collective_wait in idle_breakdown.csv)"
        )
        add("comm", "exposed communication", exposed_comm_ms / steps, why)
    shown = 0
    for r in sorted(origins, key=lambda r: r["link"] != "accumulate_grad"):  # the seed's leftover first
        lone = r["pct_of_op"] >= 99.95
        if r["op"] == _ACCUMULATE_OP:
            continue  # AccumulateGrad's own op under its own node says nothing
        if shown < _ORIGIN_ROWS and (r["link"] == "accumulate_grad" or not lone):
            add(
                "origin",
                f"{r['op']} under {r['parent']}",
                r["ms_per_step"],
                f"{r['pct_of_op']:.0f}% of {r['op']} ({r['link']}), shapes {r['shapes'] or '-'}",
            )
            shown += 1
    with_rec = sorted((r for r in rows if r["recoverable_ms"] is not None), key=lambda r: -r["recoverable_ms"])
    rest = sorted((r for r in rows if r["recoverable_ms"] is None), key=lambda r: -r["ms_per_step"])
    ranked = with_rec + rest
    for r in ranked:
        r["window_ms"] = r["ms_per_step"] * steps
        r["sentence"] = sentence(r, steps)
    return ranked


def is_accumulate_origin(row: dict[str, Any]) -> bool:
    """A row for an op's time under AccumulateGrad (Megatron's main_grad add: the seed's leftover)."""
    return row["kind"] == "origin" and str(row["target"]).endswith(" under AccumulateGrad")


def sentence(r: dict[str, Any], steps: int) -> str:
    """One sentence from the row's numbers, per step and over the profiled window."""
    pct = f", {r['pct_of_step']:.1f}% of the mean step" if r.get("pct_of_step") is not None else ""
    window = f"{r['ms_per_step'] * steps:.1f} ms over the {steps}-step window{pct}"
    head = f"{r['target']} ({r['kind']}): {r['ms_per_step']:.2f} ms per step ({window})"
    rec = r.get("recoverable_ms")
    tail = f"; {rec:.2f} ms per step ({rec * steps:.1f} ms per window) recoverable" if rec is not None else ""
    return f"{head}; {r['why']}{tail}."


def write_csv(rows: list[dict[str, Any]], out_dir: Path) -> Table:
    table = Table.from_records(rows, list(COLUMNS))
    table.write_csv(Path(out_dir) / CSV_NAME)
    return table
