"""`traceladder changes FILE.csv`: the history detector on a plain CSV, a contract for checks
outside the test suite. Columns run_id,rung,step_ms; one row per repeat; runs in time order (a
run's place is where it first appears). Each rung's series is the mean step time of each run's
repeats, as in a published summary."""

from __future__ import annotations

import csv
import json
import math
from typing import TypedDict

from traceladder.stats.history import DEFAULT_TEST, detect
from traceladder.core.errors import TraceladderError

COLUMNS = ("run_id", "rung", "step_ms")


class ChangesInputError(TraceladderError, ValueError):
    """A bad CSV: the message is the whole line, `<file>: <field>: <reason>`."""


def read_series(path: str) -> dict[str, tuple[list[str], list[float]]]:
    """rung -> (run ids in time order, mean step_ms per run)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except FileNotFoundError:
        raise ChangesInputError(f"{path}: file: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ChangesInputError(f"{path}: file: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    except csv.Error as exc:
        raise ChangesInputError(f"{path}: file: not CSV ({exc})") from None
    if not rows:
        raise ChangesInputError(f"{path}: header: empty file, expected columns {','.join(COLUMNS)}")
    header = [h.strip() for h in rows[0]]
    for column in COLUMNS:
        if column not in header:
            raise ChangesInputError(f"{path}: {column}: missing column (header has {','.join(header) or 'nothing'})")
    at = {c: header.index(c) for c in COLUMNS}
    order: dict[str, int] = {}
    values: dict[str, dict[str, list[float]]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise ChangesInputError(f"{path}: row: line {line} has {len(row)} fields, the header {len(header)}")
        run_id, rung, raw = (row[at[c]].strip() for c in COLUMNS)
        for field, value in (("run_id", run_id), ("rung", rung)):
            if not value:
                raise ChangesInputError(f"{path}: {field}: line {line}: empty")
        try:
            step = float(raw)
        except ValueError:
            step = math.nan
        if not (math.isfinite(step) and step > 0):
            raise ChangesInputError(f"{path}: step_ms: line {line}: {raw!r} is not a positive number")
        order.setdefault(run_id, len(order))
        values.setdefault(rung, {}).setdefault(run_id, []).append(step)
    if not values:
        raise ChangesInputError(f"{path}: row: no data rows")
    series = {}
    for rung, by_run in values.items():
        runs = sorted(by_run, key=order.__getitem__)
        series[rung] = (runs, [sum(by_run[r]) / len(by_run[r]) for r in runs])
    return series


class ChangeRow(TypedDict):
    """One change point as `changes` reports it; the underscored keys are printed, not in the JSON."""

    rung: str
    run_id: str
    direction: str
    delta_pct: float
    _ci: tuple[float, float]
    _p: float
    _runs: int


def changes(path: str, seed: int = 0, test: str = DEFAULT_TEST) -> dict[str, list[ChangeRow]]:
    out: list[ChangeRow] = []
    for rung, (runs, means) in read_series(path).items():
        for c in detect(means, test=test, seed=seed):
            out.append(
                {
                    "rung": rung,
                    "run_id": runs[c.index],
                    "direction": c.direction,
                    "delta_pct": round(c.delta_pct, 3),
                    "_ci": c.ci95_pct,
                    "_p": c.p_value,
                    "_runs": len(runs),
                }
            )
    return {"change_points": out}


def report(path: str, seed: int, test: str) -> int:
    """Print the change points (a line each, then the JSON); a bad CSV raises ChangesInputError."""
    result = changes(path, seed, test)
    for c in result["change_points"]:
        lo, hi = c["_ci"]
        print(
            f"{c['rung']}: {c['direction']} from run {c['run_id']}: {c['delta_pct']:+.1f}% "
            f"(95% CI {lo:+.1f}% to {hi:+.1f}%), p={c['_p']:.2g}, {c['_runs']} runs"
        )
    if not result["change_points"]:
        print("no change point")
    print(
        json.dumps(
            {"change_points": [{k: v for k, v in c.items() if not k.startswith("_")} for c in result["change_points"]]}
        )
    )
    return 0
