"""Primus training logs -> per-iteration records -> step metrics.

Takes every per-iteration line shape Primus has printed (docs/facts.md, "Primus"):

* current: ``elapsed time per iteration (ms): X/AVG | compute per GPU (TFLOP/s/GPU): X (avg A) |
  tokens/s/GPU inst/harmonic mean: I/H | ... | hip mem usage/free/total/usage_ratio: 121.37GB/... |
  rocm mem usage/free/total/usage_ratio: ... | rank-3 rocm max mem usage/usage_ratio: 128.10GB/44.48%``
* v26.5.1: ``throughput per GPU (TFLOP/s/GPU): X/AVG`` then ``tokens/s/GPU inst/harmonic mean``
* v26.4 and older: ``tokens per GPU (tokens/s/GPU): X/AVG`` (arithmetic mean); v26.4.0's legacy
  trainer (``PRIMUS_TRAIN_RUNTIME=legacy``) prints its memory in GiB before the throughput, and
  ``rank-N max mem usage/usage_ratio`` without ``rocm``
* Megatron's raw shape during the first ``log_avg_skip_iterations``: one number per field and no
  tokens segment
* any logger prefix (``INFO [...][rank-7/8][DEBUG] [...] : ``) and lines repeated per rank.

Each line is scanned once by one compiled regex (an alternation of the known segments, walked with
``finditer``); lines without the word ``iteration`` are skipped before any regex runs.
"""

from __future__ import annotations

from traceladder.core.documents import JSONObject

import gzip
import io
import math
import os
import re
import statistics
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Iterable

from traceladder.core.errors import TraceladderError

__all__ = [
    "IterationRecord",
    "PrimusLogError",
    "StepMetrics",
    "parse_iterations",
    "parse_log_file",
    "summarize",
]


class PrimusLogError(TraceladderError, ValueError):
    """The log holds no usable iteration (the message is one line)."""


@dataclass(frozen=True)
class IterationRecord:
    iteration: int
    train_iters: int
    elapsed_ms: float
    tflops: float | None = None  # per GPU, instantaneous
    tokens_per_sec_per_gpu: float | None = None  # instantaneous
    hip_mem_gb: float | None = None  # the printing rank's current memory
    max_mem_gb: float | None = None  # from "rank-N rocm max mem usage" ("rank-N max mem usage": legacy)
    lm_loss: float | None = None
    global_batch_size: int | None = None
    # the running averages Primus prints beside the instantaneous values
    elapsed_ms_avg: float | None = None
    tflops_avg: float | None = None
    tokens_per_sec_per_gpu_avg: float | None = None  # harmonic mean (current), arithmetic (<=v26.4)
    rocm_mem_gb: float | None = None  # "rocm mem usage" (current)
    max_mem_rank: int | None = None  # the N of "rank-N rocm max mem"
    # the CPU proxy's "step cpu time per iteration (ms)": the slowest rank's compute-thread CPU
    # time (CLOCK_THREAD_CPUTIME_ID; not in Primus's own line)
    step_cpu_ms: float | None = None

    def to_dict(self) -> JSONObject:
        return asdict(self)


@dataclass(frozen=True)
class StepMetrics:
    iterations_used: list[int]
    step_ms: float  # median elapsed time over iterations_used
    step_ms_values: list[float]
    tokens_per_sec_per_gpu: float | None  # median instantaneous tokens/s/GPU; None without tokens
    tflops: float | None  # median TFLOP/s/GPU
    peak_mem_gb: float | None  # max "rocm max mem" over all records, else max "hip mem usage"
    lm_loss_last: float | None  # loss of the last iteration that printed one
    train_iters: int | None
    iterations_parsed: int = 0
    skip_iterations: int = 0
    window: tuple[int, int] | None = None
    peak_mem_source: str | None = None  # "rocm_max_mem" | "hip_mem" | None
    # over the same iterations as step_ms, where every one of them logged it (the CPU proxy):
    # their mean, the run's CPU cost per step (CPU time's spread is skewed by the VM's slow
    # spells, and a mean of all iterations scatters less between runs than their median;
    # docs/statistics.md, "The run's CPU figure")
    step_cpu_ms: float | None = None
    step_cpu_ms_values: list[float] | None = None
    # tokens per rank per CPU-second over the same iterations: their tokens over their CPU time
    tokens_per_cpu_s_per_gpu: float | None = None
    # what step_cpu_ms is over its values (stats.model.RUN_STATISTICS), so a fit knows its floor
    step_cpu_statistic: str | None = None

    def to_dict(self) -> JSONObject:
        out = asdict(self)
        out["window"] = list(self.window) if self.window is not None else None
        return out


_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"

# Integers are at most 18 digits: int() of a longer run of digits raises ValueError (found by
# fuzzing, issue 19), and no iteration count or batch size is that long.
_LINE_RE = re.compile(
    rf"""
      (?<![\w-])iteration\s+(?P<it>\d{{1,18}})\s*/\s*(?P<iters>\d{{1,18}})(?!\d)
    | elapsed\ time\ per\ iteration\ \(ms\):\s*(?P<el>{_NUM})(?:\s*/\s*(?P<el_avg>{_NUM}))?
    | step\ cpu\ time\ per\ iteration\ \(ms\):\s*(?P<cpu>{_NUM})
    | (?:compute|throughput)\ per\ GPU\ \(TFLOP/s/GPU\):\s*(?P<tf>{_NUM})
          (?:\s*/\s*(?P<tf_avg>{_NUM})|\s*\(\s*avg\s+(?P<tf_avg2>{_NUM})\s*\))?
    | tokens/s/GPU\ inst/harmonic\ mean:\s*(?P<tok>{_NUM})(?:\s*/\s*(?P<tok_avg>{_NUM}))?
    | tokens\ per\ GPU\ \(tokens/s/GPU\):\s*(?P<tok_old>{_NUM})(?:\s*/\s*(?P<tok_old_avg>{_NUM}))?
    | global\ batch\ size:\s*(?P<gbs>\d{{1,18}})(?!\d)
    | lm\ loss:\s*(?P<loss>{_NUM})
    | rank-(?P<max_rank>\d{{1,18}})\ (?:rocm\ )?max\ mem\ usage/usage_ratio:
          \s*(?P<max_mem>{_NUM})\s*(?P<max_unit>[KMGT]i?B)?
    | (?<![\w-])rocm\ mem\ usage/free/total/usage_ratio:\s*(?P<rocm_mem>{_NUM})\s*(?P<rocm_unit>[KMGT]i?B)?
    | hip\ mem\ usage/free/total/usage_ratio:\s*(?P<hip_mem>{_NUM})\s*(?P<hip_unit>[KMGT]i?B)?
    """,
    re.VERBOSE | re.IGNORECASE,
)

_UNIT_TO_GB = {
    None: 1.0,
    "B": 1.0 / 1024**3,
    "KB": 1.0 / 1024**2,
    "KIB": 1.0 / 1024**2,
    "MB": 1.0 / 1024,
    "MIB": 1.0 / 1024,
    "GB": 1.0,
    "GIB": 1.0,
    "TB": 1024.0,
    "TIB": 1024.0,
}


def _gb(value: str, unit: str | None) -> float:
    return float(value) * _UNIT_TO_GB.get(unit.upper() if unit else None, 1.0)


#: regex group -> the IterationRecord field it gives and how its text reads; one line's groups are
#: one alternative's (tok and tok_old never both), and a field's first value on the line wins
_VALUE_GROUPS: dict[str, tuple[str, type[float] | type[int]]] = {
    "el": ("elapsed_ms", float),
    "el_avg": ("elapsed_ms_avg", float),
    "cpu": ("step_cpu_ms", float),
    "tf": ("tflops", float),
    "tf_avg": ("tflops_avg", float),
    "tf_avg2": ("tflops_avg", float),
    "tok": ("tokens_per_sec_per_gpu", float),
    "tok_avg": ("tokens_per_sec_per_gpu_avg", float),
    "tok_old": ("tokens_per_sec_per_gpu", float),
    "tok_old_avg": ("tokens_per_sec_per_gpu_avg", float),
    "gbs": ("global_batch_size", int),
    "loss": ("lm_loss", float),
    "max_rank": ("max_mem_rank", int),
}
#: memory group -> (IterationRecord field in GB, the group holding its unit)
_MEMORY_GROUPS = {
    "max_mem": ("max_mem_gb", "max_unit"),
    "rocm_mem": ("rocm_mem_gb", "rocm_unit"),
    "hip_mem": ("hip_mem_gb", "hip_unit"),
}


def _parse_line(line: str) -> IterationRecord | None:
    it = iters = None
    vals: dict[str, Any] = {}  # IterationRecord keyword arguments
    for m in _LINE_RE.finditer(line):
        g = m.groupdict()
        if g["it"] is not None:
            if it is None:  # the first "iteration N/M" is the header
                it, iters = int(g["it"]), int(g["iters"])
            continue
        for group, text in g.items():
            if text is None:
                continue
            if group in _VALUE_GROUPS:
                name, read = _VALUE_GROUPS[group]
                vals.setdefault(name, read(text))
            elif group in _MEMORY_GROUPS:
                name, unit = _MEMORY_GROUPS[group]
                vals.setdefault(name, _gb(text, g[unit]))
    if it is None or iters is None or "elapsed_ms" not in vals:
        return None  # not a per-iteration step line
    return IterationRecord(iteration=it, train_iters=iters, **vals)


_MERGE_MAX = ("hip_mem_gb", "max_mem_gb", "rocm_mem_gb")


def _merge(first: IterationRecord, other: IterationRecord) -> IterationRecord:
    """The same iteration printed by another rank: keep the first line's values, fill its gaps,
    and keep the largest memory figure (each rank prints its own)."""
    changes: dict[str, Any] = {}  # dataclasses.replace keyword arguments
    for f in fields(IterationRecord):
        a, b = getattr(first, f.name), getattr(other, f.name)
        if b is None:
            continue
        if a is None:
            changes[f.name] = b
        elif f.name in _MERGE_MAX and b > a:
            changes[f.name] = b
            if f.name == "max_mem_gb":
                changes["max_mem_rank"] = other.max_mem_rank
    if not changes:
        return first
    return replace(first, **changes)


def parse_iterations(lines: Iterable[str]) -> list[IterationRecord]:
    """One record per iteration (lines repeated per rank are merged), sorted by iteration."""
    by_it: dict[int, IterationRecord] = {}
    for line in lines:
        if "teration" not in line:  # cheap reject before the regex ("iteration"/"Iteration")
            continue
        rec = _parse_line(line)
        if rec is None:
            continue
        seen = by_it.get(rec.iteration)
        by_it[rec.iteration] = rec if seen is None else _merge(seen, rec)
    return [by_it[k] for k in sorted(by_it)]


def parse_log_file(path: str | os.PathLike[str]) -> list[IterationRecord]:
    """``parse_iterations`` over a log file (plain or ``.gz``; undecodable bytes are replaced)."""
    with open(path, "rb") as raw:
        magic = raw.read(2)
    if magic == b"\x1f\x8b":
        stream: Any = gzip.open(path, "rb")
    else:
        stream = open(path, "rb")
    with stream, io.TextIOWrapper(stream, encoding="utf-8", errors="replace") as text:
        return parse_iterations(text)


def _median(values: list[float]) -> float | None:
    finite = [v for v in values if not math.isnan(v)]
    return float(statistics.median(finite)) if finite else None


def summarize(
    records: Iterable[IterationRecord],
    skip_iterations: int,
    window: tuple[int, int] | None = None,
) -> StepMetrics:
    """Step metrics over the iterations after ``skip_iterations`` (and, with ``window=(start,
    end)``, only ``start <= iteration < end``, the profiler window)."""
    recs = sorted(records, key=lambda r: r.iteration)
    if skip_iterations < 0:
        raise PrimusLogError(f"skip_iterations must be >= 0, got {skip_iterations}")
    if window is not None:
        start, end = int(window[0]), int(window[1])
        if end <= start:
            raise PrimusLogError(f"empty iteration window [{start}, {end})")
        window = (start, end)
    used = [
        r for r in recs if r.iteration > skip_iterations and (window is None or window[0] <= r.iteration < window[1])
    ]
    if not used:
        seen = (
            f"{len(recs)} iterations parsed ({recs[0].iteration}..{recs[-1].iteration})"
            if recs
            else "no iteration lines parsed"
        )
        want = f"iteration > {skip_iterations}"
        if window is not None:
            want += f" and {window[0]} <= iteration < {window[1]}"
        raise PrimusLogError(f"no usable Primus iterations: {seen}; need {want}")

    step_values = [r.elapsed_ms for r in used]
    step_ms = _median(step_values)
    if step_ms is None:
        raise PrimusLogError("no usable Primus iterations: every elapsed time is NaN")
    cpu_values = [r.step_cpu_ms for r in used if r.step_cpu_ms is not None]
    if len(cpu_values) < len(used):
        cpu_values = []  # a figure over other iterations than step_ms's would not compare
    step_cpu_ms = _mean(cpu_values)
    tokens = _median([r.tokens_per_sec_per_gpu for r in used if r.tokens_per_sec_per_gpu is not None])
    tflops = _median([r.tflops for r in used if r.tflops is not None])

    max_mems = [r.max_mem_gb for r in recs if r.max_mem_gb is not None]
    hip_mems = [r.hip_mem_gb for r in recs if r.hip_mem_gb is not None]
    if max_mems:
        peak, source = max(max_mems), "rocm_max_mem"
    elif hip_mems:
        peak, source = max(hip_mems), "hip_mem"
    else:
        peak, source = None, None

    loss_last = next((r.lm_loss for r in reversed(recs) if r.lm_loss is not None), None)
    train_iters = max((r.train_iters for r in recs), default=None)
    return StepMetrics(
        iterations_used=[r.iteration for r in used],
        step_ms=step_ms,
        step_ms_values=step_values,
        tokens_per_sec_per_gpu=tokens,
        tflops=tflops,
        peak_mem_gb=peak,
        lm_loss_last=loss_last,
        train_iters=train_iters,
        iterations_parsed=len(recs),
        skip_iterations=skip_iterations,
        window=window,
        peak_mem_source=source,
        step_cpu_ms=step_cpu_ms,
        step_cpu_ms_values=cpu_values or None,
        tokens_per_cpu_s_per_gpu=_tokens_per_cpu_s(used, step_cpu_ms),
        step_cpu_statistic="mean" if cpu_values else None,
    )


def _mean(values: list[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return float(statistics.fmean(finite)) if finite else None


def _tokens_per_cpu_s(used: list[IterationRecord], step_cpu_ms: float | None) -> float | None:
    """Tokens per rank per second of `step_cpu_ms`, the iterations' mean step CPU time. A step's
    tokens (its tokens/s/GPU times its elapsed time) are the same every step; they come from the
    iterations that log tokens/s (Primus leaves them out of the lines up to log_avg_skip_iterations)."""
    per_step = _median(
        [r.tokens_per_sec_per_gpu * r.elapsed_ms / 1000 for r in used if r.tokens_per_sec_per_gpu is not None]
    )
    if per_step is None or not step_cpu_ms or step_cpu_ms <= 0:
        return None
    return per_step / (step_cpu_ms / 1000)
