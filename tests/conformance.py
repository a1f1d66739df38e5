"""Compare a produced CSV report with a TraceLens reference CSV (the reference README's rule).

* same columns, in the same order;
* same rows, as a multiset keyed by the row's text cells (exact strings);
* integer cells (counts) exactly equal; other numbers within 1e-6 relative;
* ``UID_first``, ``kernel_details__summarize_kernel_stats`` and ``trunc_kernel_details``
  must be present but their contents are not compared.

``compare_csv(produced, reference)`` returns a list of human-readable differences
(empty when they conform).  A column is numeric when every non-empty reference cell
parses as a float; text otherwise.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from tests.conftest import REFERENCE_DIR

# TraceLens writes kernel-detail lists of several hundred KB into one cell
csv.field_size_limit(1 << 30)

REF = REFERENCE_DIR / "tracelens-v1.0.0"
DERIVED = REFERENCE_DIR / "derived"  # traces derived from the reference ones (one-sided, GPU-only)
# The reference PyTorch traces (rocprof/ has its own tests)
TRACES = sorted(p for d in ("mi300", "mi250", "h100") for p in (REF / d).glob("*.json.gz")) if REF.is_dir() else []


def ref_dir(trace: Path) -> Path:
    """The folder of TraceLens's CSVs beside a reference trace."""
    return trace.parent / (trace.name[: -len(".json.gz")] + "_perf_report_csvs")


IGNORED_COLUMNS = frozenset({"UID_first", "kernel_details__summarize_kernel_stats", "trunc_kernel_details"})
REL_TOL = 1e-6
# differences of large timestamps leave ~1e-9 us noise where the true value is 0
ABS_TOL = 1e-9


def _read(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return [], []
    return rows[0], rows[1:]


def _num(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _is_int_literal(s: str) -> bool:
    s = s.strip()
    return s.lstrip("-").isdigit()


def _close(a: str, b: str) -> bool:
    """a = produced cell, b = reference cell (numeric column)."""
    if a == b:
        return True
    if b == "" or a == "":
        return False
    fa, fb = _num(a), _num(b)
    if fa is None or fb is None:
        return False
    if math.isnan(fb):
        return math.isnan(fa)
    if _is_int_literal(b):
        return fa == fb  # counts: exact
    return math.isclose(fa, fb, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def compare_csv(produced: Path, reference: Path, max_report: int = 10) -> list[str]:
    produced, reference = Path(produced), Path(reference)
    if not produced.exists():
        return [f"{produced.name}: not produced"]
    ph, prow = _read(produced)
    rh, rrow = _read(reference)
    if ph != rh:
        return [f"{produced.name}: columns differ:\n  produced  {ph}\n  reference {rh}"]
    numeric = []
    for j, col in enumerate(rh):
        cells = [r[j] for r in rrow if j < len(r) and r[j] != ""]
        numeric.append(bool(cells) and all(_num(c) is not None for c in cells) and col not in IGNORED_COLUMNS)
    text_cols = [j for j, c in enumerate(rh) if not numeric[j] and c not in IGNORED_COLUMNS]
    num_cols = [j for j in range(len(rh)) if numeric[j]]
    diffs: list[str] = []
    if len(prow) != len(rrow):
        diffs.append(f"{produced.name}: {len(prow)} rows produced, {len(rrow)} in reference")

    def key(r):
        return tuple(r[j] if j < len(r) else "" for j in text_cols)

    pool: dict[tuple, list[list[str]]] = {}
    for r in prow:
        pool.setdefault(key(r), []).append(r)
    for r in rrow:
        k = key(r)
        cands = pool.get(k)
        if not cands:
            diffs.append(f"{produced.name}: missing row {dict(zip([rh[j] for j in text_cols], k))}")
            continue
        hit = None
        for ci, c in enumerate(cands):
            if all(_close(c[j], r[j]) for j in num_cols):
                hit = ci
                break
        if hit is None:
            c = cands[0]
            bad = {rh[j]: (c[j], r[j]) for j in num_cols if not _close(c[j], r[j])}
            diffs.append(f"{produced.name}: row {k}: numbers differ (produced, reference): {bad}")
            cands.pop(0)
        else:
            cands.pop(hit)
    for k, left in pool.items():
        for _ in left:
            diffs.append(f"{produced.name}: extra row {k}")
    if len(diffs) > max_report:
        diffs = diffs[:max_report] + [f"... and {len(diffs) - max_report} more"]
    return diffs


# HTA's get_idle_time_breakdown against our GPU idle split (idle_breakdown.csv): HTA's times are
# whole µs (it rounds each event in), its ratio is rounded to 2 places.
IDLE_TIME_TOL_US = 1.0
IDLE_RATIO_TOL = 0.005 + 1e-9


def compare_idle(ours: Iterable[Sequence[object]], hta_csv: Path, max_report: int = 10) -> list[str]:
    """Our idle rows (``rank, stream, idle_category, idle_time, idle_time_ratio``, as numbers or
    CSV text) against HTA's CSV: the same (stream, category) rows, as many of them, each time
    within 1 µs and ratio within HTA's rounding; an empty or NaN ratio (0/0) only against another.
    Differences as text (empty when they agree)."""
    with open(hta_csv, newline="") as fh:
        hta_rows = list(csv.DictReader(fh))
    our_rows = list(ours)
    hta = {(int(r["stream"]), r["idle_category"]): r for r in hta_rows}
    mine = {(int(float(str(r[1]))), str(r[2])): r for r in our_rows}
    name = Path(hta_csv).name
    if mine.keys() != hta.keys() or len(our_rows) != len(hta_rows):  # a repeated row counts too
        return [f"{name}: rows differ: ours {len(our_rows)} {sorted(mine)}, HTA {len(hta_rows)} {sorted(hta)}"]

    def number(cell: object) -> float:  # both CSVs leave a NaN (0/0: a stream with no gap) empty
        return float(str(cell) or "nan")

    diffs = []
    for key, row in hta.items():
        time, ratio = number(mine[key][3]), number(mine[key][4])
        want_time, want_ratio = number(row["idle_time"]), number(row["idle_time_ratio"])
        ratio_ok = math.isnan(want_ratio) and math.isnan(ratio) or abs(ratio - want_ratio) <= IDLE_RATIO_TOL
        if not abs(time - want_time) <= IDLE_TIME_TOL_US or not ratio_ok:  # a NaN time differs
            diffs.append(f"{name}: {key}: ours {time:g} µs ({ratio:.4f}), HTA {want_time:g} µs ({want_ratio:.4f})")
    if len(diffs) > max_report:
        diffs = diffs[:max_report] + [f"... and {len(diffs) - max_report} more"]
    return diffs
