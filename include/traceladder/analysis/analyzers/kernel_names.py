"""The heavy lens confirms kernel names: a rocprofv3 trace of the whole process against the
PyTorch profiler window of the same lens block.

rocprofv3 records every dispatch of the process; the torch window records its steps only, and
only names a kernel's launching op where the runtime launch links to a cpu_op. This table lists
the process's kernels by GPU time and says, for each, whether the window names it, misses it
(outside the window; or inside it with no launching op) or names it differently, and which share
of the process's kernel time per step the window sees. rocm-trace-lite is not used: its lite
mode skips dispatches that already carry a completion signal, so its kernel time is not the
process's.

**Matching rule** (docs/analysis.md, "Kernel names"), for each process kernel in turn:

1. *named*: a window kernel has exactly its name;
2. *named differently*: a window kernel has the same formatted name once both lose a leading
   ``void ``, their argument list (from the first ``(`` outside template brackets) and
   ``(anonymous namespace)::``; template arguments stay, so two instantiations never match;
3. *named differently*: the process name carries no template arguments (a mangled ``_Z...`` name,
   read to the qualified name its Itanium nested name spells, ``_ZN2at6native6kernelI...`` ->
   ``at::native::kernel``; or rocprofv3's truncated name, ``kernel``) and equals a window
   kernel's qualified name without template arguments, or its last ``::`` part when it has no
   ``::`` itself;
4. a kernel matched whose window rows all lack a launching op (no cpu_op above the launch) is
   *missed: no launching op*; one matched by none is *missed: outside the window*.

Both sides are read from the reports stored beside each trace: the rocprofv3 trace's
``kernel_summary.csv`` (TraceLens's legacy rocprof report: ``Total Kernel Time (ms)`` holds µs,
its unit quirk) and the torch trace's ``kernel_summary.csv`` (``Parent op category``, ``Parent
cpu_op``). Standard library only: importing this module costs no pandas."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from traceladder.core.errors import TraceladderError
from traceladder.core.codec import Part, doc_field

__all__ = [
    "MISSED_LIMIT_PCT",
    "KernelNameRow",
    "KernelNames",
    "formatted_key",
    "kernel_key",
    "kernel_names_table",
]

#: a finding is raised when the window misses more than this share of the process's kernel time per step
MISSED_LIMIT_PCT = 10.0
#: rows kept in the table (largest first); the shares count every kernel
TOP_ROWS = 25
STATUSES = ("named", "named differently", "missed: outside the window", "missed: no launching op")
RULE = (
    "exact name; else the same name without return type and argument list (template arguments kept); else, "
    "for a name without template arguments (mangled, read to its qualified name, or truncated), the window "
    "name without template arguments, or its last :: part"
)
# a parent that is no op: the launch call itself (runtime) or a graph launch
_NO_OP_CATEGORIES = {"", "runtime", "graph"}


@dataclass(frozen=True, kw_only=True)
class KernelNameRow(Part):
    """One process kernel: its time per step and share, and how the torch window names it."""

    FILE: ClassVar[str] = "kernel name row"

    kernel: str = doc_field("str")
    process_us_per_step: float = doc_field("number")
    share_pct: float = doc_field("number")  # of the process's kernel time per step
    status: str = doc_field("str", one_of=STATUSES)
    window_names: list[str] = doc_field("list", default=[])
    window_us_per_step: float | None = doc_field("number?", default=None)


@dataclass(frozen=True, kw_only=True)
class KernelNames(Part):
    """The lens block's kernel-names table (a summary's ``kernel_names``)."""

    FILE: ClassVar[str] = "kernel_names"

    rung: str | None = doc_field("str?", default=None)
    process_trace: str = doc_field("str")
    window_trace: str = doc_field("str")
    process_steps: int = doc_field("int")
    window_steps: int = doc_field("int")
    process_us_per_step: float = doc_field("number")
    window_us_per_step: float = doc_field("number")
    seen_pct: float = doc_field("number")  # of the process's kernel time per step, named either way
    missed_pct: float = doc_field("number")
    limit_pct: float = doc_field("number", default=MISSED_LIMIT_PCT)
    kernels: int = doc_field("int")
    counts: dict[str, int] = doc_field("object", default={})
    rows: list[KernelNameRow] = doc_field("list", default=[], part=KernelNameRow)
    rule: str = doc_field("str", default=RULE)

    @property
    def missed(self) -> list[str]:
        """The listed kernels the window misses, either way."""
        return [r.kernel for r in self.rows if r.status.startswith("missed")]

    def finding(self) -> str | None:
        """A sentence when the window misses more than the stated share, else None."""
        if self.missed_pct <= self.limit_pct:
            return None
        return (
            f"The torch window of {self.rung or 'the lens rung'} misses {self.missed_pct:.1f}% of the full process's "
            f"kernel time per step (rocprofv3; above the {self.limit_pct:g}% limit): "
            f"{self.counts.get(STATUSES[2], 0)} kernel(s) outside the window, "
            f"{self.counts.get(STATUSES[3], 0)} with no launching op."
        )


class KernelNamesError(TraceladderError, ValueError):
    """A report that cannot be read as this table needs it."""


_SOURCE = re.compile(r"(\d+)")


def _demangle_nested(name: str) -> str | None:
    """The qualified name an Itanium mangled symbol spells up to its first template or end:
    ``_ZN2at6native6kernelI...`` -> ``at::native::kernel``; ``_Z8mykernelPf`` -> ``mykernel``.
    None where it is not such a name (only what a kernel symbol needs: source names)."""
    if not name.startswith("_Z"):
        return None
    i = 2
    nested = name.startswith("N", i)
    i += nested
    while i < len(name) and name[i] in "rVKL":  # cv-qualifiers of a nested name
        i += 1
    parts: list[str] = []
    while i < len(name):
        if name.startswith("St", i):  # std::
            parts.append("std")
            i += 2
            continue
        m = _SOURCE.match(name, i)
        if not m:
            break
        n, i = int(m.group(1)), m.end()
        parts.append(name[i : i + n])
        i += n
        if not nested:
            break
    return "::".join(parts) or None


def _strip_brackets(name: str) -> str:
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def formatted_key(name: str) -> str:
    """Rule 2's name: no ``void``, no argument list, no ``(anonymous namespace)::``."""
    # the anonymous namespace goes first: its "(" is no argument list
    name = name.strip().removesuffix(".kd").removeprefix("void ").replace("(anonymous namespace)::", "")
    depth = 0
    for i, ch in enumerate(name):  # the first "(" outside template brackets starts the arguments
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0 and i > 0:
            name = name[:i]
            break
    return name.strip()


def kernel_key(name: str) -> str:
    """Rule 3's name: a mangled name's qualified name, else the formatted name without template
    arguments."""
    mangled = _demangle_nested(name.strip().removesuffix(".kd"))
    return mangled if mangled is not None else _strip_brackets(formatted_key(name)).strip()


def _rows(data: bytes | None, what: str) -> list[dict[str, str]]:
    if data is None:
        raise KernelNamesError(f"{what}: no kernel_summary.csv in its analysis reports")
    return list(csv.DictReader(io.StringIO(data.decode("utf-8"))))


def _number(row: dict[str, str], col: str, what: str) -> float:
    try:
        return float(row[col])
    except (KeyError, ValueError):
        raise KernelNamesError(f"{what}: kernel_summary.csv lacks a number in {col!r}") from None


def _process(data: bytes | None, what: str) -> dict[str, float]:
    """rocprofv3 kernel name -> µs over the whole process (the legacy report's `ms` column holds µs)."""
    out: dict[str, float] = {}
    for row in _rows(data, what):
        if "name" not in row:
            raise KernelNamesError(f"{what}: not a rocprof kernel_summary.csv (no `name` column)")
        out[row["name"]] = out.get(row["name"], 0.0) + _number(row, "Total Kernel Time (ms)", what)
    return out


def _window(data: bytes | None, what: str) -> dict[str, tuple[float, bool]]:
    """torch kernel name -> (µs in the window, whether some row has a launching op)."""
    out: dict[str, tuple[float, bool]] = {}
    for row in _rows(data, what):
        if "Kernel name" not in row:
            raise KernelNamesError(f"{what}: not a PyTorch kernel_summary.csv (no `Kernel name` column)")
        name = row["Kernel name"]
        launched = bool(row.get("Parent cpu_op")) and (row.get("Parent op category") or "") not in _NO_OP_CATEGORIES
        us, had = out.get(name, (0.0, False))
        out[name] = (us + _number(row, "Kernel duration (µs)_sum", what), had or launched)
    return out


def kernel_names_table(
    read_process: Callable[[str], bytes | None],
    read_window: Callable[[str], bytes | None],
    process_steps: int,
    window_steps: int,
    *,
    process_trace: str,
    window_trace: str,
    rung: str | None = None,
    limit_pct: float = MISSED_LIMIT_PCT,
    top: int = TOP_ROWS,
) -> KernelNames:
    """The table from the two traces' stored reports (``read_*(file name)``, as
    ``load_reports`` reads them). ``process_steps``: the training steps the rocprofv3 run made
    (its whole process is divided by them); ``window_steps``: the window's ProfilerStep count."""
    process = _process(read_process("kernel_summary.csv"), process_trace)
    window = _window(read_window("kernel_summary.csv"), window_trace)
    psteps, wsteps = max(process_steps, 1), max(window_steps, 1)
    by_formatted: dict[str, list[str]] = {}
    by_key: dict[str, list[str]] = {}
    by_last: dict[str, list[str]] = {}
    for name in window:
        key = kernel_key(name)
        by_formatted.setdefault(formatted_key(name), []).append(name)
        by_key.setdefault(key, []).append(name)
        by_last.setdefault(key.rsplit("::", 1)[-1], []).append(name)
    total = sum(process.values()) / psteps
    rows: list[KernelNameRow] = []
    seen = 0.0
    counts = dict.fromkeys(STATUSES, 0)
    for name, us in sorted(process.items(), key=lambda kv: (-kv[1], kv[0])):
        per_step = us / psteps
        if name in window:
            matched, status = [name], "named"
        else:
            matched = by_formatted.get(formatted_key(name), [])
            if not matched and (_demangle_nested(name) is not None or "<" not in name):  # rule 3
                key = kernel_key(name)
                matched = by_key.get(key) or (by_last.get(key, []) if "::" not in key else [])
            status = "named differently" if matched else "missed: outside the window"
        if matched and not any(window[m][1] for m in matched):
            status = "missed: no launching op"
        seen += per_step if not status.startswith("missed") else 0.0
        counts[status] += 1
        rows.append(
            KernelNameRow(
                kernel=name,
                process_us_per_step=per_step,
                share_pct=100.0 * per_step / total if total else 0.0,
                status=status,
                window_names=sorted(matched),
                window_us_per_step=sum(window[m][0] for m in matched) / wsteps if matched else None,
            )
        )
    seen_pct = 100.0 * seen / total if total else 0.0
    return KernelNames(
        rung=rung,
        process_trace=process_trace,
        window_trace=window_trace,
        process_steps=psteps,
        window_steps=wsteps,
        process_us_per_step=total,
        window_us_per_step=sum(us for us, _ in window.values()) / wsteps,
        seen_pct=seen_pct,
        missed_pct=100.0 - seen_pct if total else 0.0,
        limit_pct=limit_pct,
        kernels=len(process),
        counts=counts,
        rows=rows[:top],
    )
