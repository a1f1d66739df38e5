"""Change points against Apache Otava: the same simulated histories, replayed run by run through
`stats.history.detect` and through Otava's `compute_change_points` (its defaults: window 50,
p < 0.001, no minimum magnitude), both on the same run-level figures.

* ``changes_vs_otava``: histories of ``RUNS`` runs of one rung, log-normal noise of σ per run
  (``NOISE``: 1-13%, the 2-4% of the ladder's CPU verdict metric included). Cells: flat; flat with
  one +3σ run at a random place; a step up of 1-5σ at run 12, 28 or 44 (early, middle, late);
  slow drifts. ``HISTORIES`` per cell (``--quick``: 40), seeded, the same series to both.
  Each history is evaluated as production does, with the runs so far, from ``FIRST`` runs on; a
  call is a new slower change point (``new_regressions``, for both detectors: benchmarks/
  changes_replay.py).
  - false alarms: histories with any call (flat and outlier cells);
  - recall within 2 runs: a call placed within 2 runs of the step, made by an evaluation that has
    seen at most 2 runs after the step's first run; the paired difference (ours − Otava's, per
    history) with its normal 95% interval;
  - delay: runs after the step's first run seen by the calling evaluation (0 = called on the
    step's first run), a miss counting as never; the median over the cell's histories;
  - drifts: how often and when the first call comes, and its size in σ beside the true drift
    then; reported, not scored.
  The table goes to ``docs/figures/<date>-changes_vs_otava.md``.

Otava runs in a venv of its own (benchmarks/otava_venv.sh; it pins an older numpy than the
product's); ``TRACELADDER_OTAVA_PYTHON`` names another interpreter with ``apache-otava``. Its
calls are cached under .traceladder/bench by the digest of the histories.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from benchmarks.changes_replay import MATCH_RUNS, replay
from benchmarks.common import REPO, Context, Row, write_section_figures

RUNS, FIRST = 52, 8  # a year of weekly runs; the first evaluation sees 8
NOISE = (0.01, 0.02, 0.03, 0.04, 0.13)
STEPS_SIGMA = (1, 2, 3, 4, 5)
POSITIONS = {"early": 12, "middle": 28, "late": 44}
OUTLIER_SIGMA = 3.0
DRIFT_START = 16
DRIFTS_SIGMA_PER_RUN = (0.1, 0.25)
WITHIN = 2  # recall within this many runs after the step's first run
HISTORIES = 200
SEED = 20261202
OTAVA = {"window_len": 50, "max_pvalue": 0.001, "min_magnitude": 0.0}  # Otava's defaults
# Otava brought down to about our false-alarm target (5% on flat and single-outlier histories;
# chosen on the 2% cells of this replay; its rate per cell is in the table): the comparison at
# similar false alarms, reported beside the targets
OTAVA_STRICT = {**OTAVA, "max_pvalue": 2e-5}


@dataclass(frozen=True)
class Cell:
    kind: str  # flat | outlier | step | drift
    sigma: float
    size: float = 0.0  # step: σ; drift: σ per run
    position: str = ""

    @property
    def label(self) -> str:
        noise = f"{self.sigma * 100:.0f}%"
        if self.kind == "step":
            return f"step +{self.size:.0f}σ {self.position}, {noise}"
        if self.kind == "drift":
            return f"drift +{self.size:g}σ/run from run {DRIFT_START}, {noise}"
        return f"{'flat + one +3σ run' if self.kind == 'outlier' else 'flat'}, {noise}"

    @property
    def change_at(self) -> int | None:
        return POSITIONS[self.position] if self.kind == "step" else None


def cells() -> list[Cell]:
    out = []
    for sigma in NOISE:
        out += [Cell("flat", sigma), Cell("outlier", sigma)]
        out += [Cell("step", sigma, k, pos) for k in STEPS_SIGMA for pos in POSITIONS]
        out += [Cell("drift", sigma, rate) for rate in DRIFTS_SIGMA_PER_RUN]
    return out


def simulate(cell: Cell, n: int, seed: int) -> list[list[float]]:
    """`n` histories of the cell: step times around 100 with log-normal noise of σ per run."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        z = rng.normal(0.0, cell.sigma, RUNS)
        if cell.kind == "outlier":
            z[int(rng.integers(FIRST - 1, RUNS))] += OUTLIER_SIGMA * cell.sigma
        elif cell.kind == "step":
            z[POSITIONS[cell.position] :] += cell.size * cell.sigma
        elif cell.kind == "drift":
            z[DRIFT_START:] += cell.size * cell.sigma * np.arange(1, RUNS - DRIFT_START + 1)
        out.append([float(v) for v in 100.0 * np.exp(z)])
    return out


def ours(values: Sequence[float]) -> list[tuple[int, bool, float]]:
    from traceladder.stats.history import detect

    return [(c.index, c.direction == "slower", c.delta_pct) for c in detect(values)]


def otava_python() -> str:
    explicit = os.environ.get("TRACELADDER_OTAVA_PYTHON")
    if explicit:
        return explicit
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "otava_venv.sh")], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmarks/otava_venv.sh failed: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout.strip().splitlines()[-1]


def start_otava(ctx: Context, jobs: list[dict], options: dict) -> tuple[Path, subprocess.Popen | None]:
    """Otava's replay of `jobs` in its own process (it runs beside ours on the second CPU);
    the cached answer when the same histories were replayed before."""
    spec = {"otava": options, "first": FIRST, "jobs": jobs}
    blob = json.dumps(spec, sort_keys=True).encode()
    ctx.cache.mkdir(parents=True, exist_ok=True)
    out = ctx.cache / f"otava-calls-{hashlib.sha256(blob).hexdigest()[:16]}.json"
    if out.exists():
        return out, None
    spec_path = ctx.scratch / f"otava-jobs-{out.stem}.json"
    spec_path.write_bytes(blob)
    worker = REPO / "benchmarks" / "changes_replay.py"
    proc = subprocess.Popen([otava_python(), str(worker), str(spec_path), str(out) + ".tmp"])
    return out, proc


def finish_otava(out: Path, proc: subprocess.Popen | None) -> list[list[list[float]]]:
    if proc is not None:
        if proc.wait() != 0:
            raise RuntimeError(f"Otava's replay failed (exit {proc.returncode})")
        Path(str(out) + ".tmp").rename(out)
    return json.loads(out.read_text(encoding="utf-8"))


def first_hit(calls: Sequence[Sequence[float]], change_at: int) -> float:
    """Delay of the first call placed within MATCH_RUNS of the step: runs after its first run
    seen by the calling evaluation; inf when never called."""
    seen = [c[0] for c in calls if c[0] > change_at and abs(c[1] - change_at) <= MATCH_RUNS]
    return min(seen) - 1 - change_at if seen else math.inf


def paired(a: Sequence[bool], b: Sequence[bool]) -> tuple[float, float]:
    """Mean of a − b over paired histories, in %, and the half-width of its normal 95% interval."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    half = 1.96 * float(d.std(ddof=1)) / math.sqrt(len(d)) if len(d) > 1 else math.inf
    return 100 * float(d.mean()), 100 * half


def fmt_delay(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:g}"


def bench_changes_vs_otava(ctx: Context) -> list[Row]:
    from traceladder.stats import history

    assert history.MATCH_RUNS == MATCH_RUNS, "changes_replay.MATCH_RUNS must follow stats.history"
    n = 40 if ctx.quick else HISTORIES
    t0 = time.perf_counter()
    all_cells = cells()
    series = {c: simulate(c, n, SEED + k) for k, c in enumerate(all_cells)}
    jobs = [{"series": s, "change_at": c.change_at} for c in all_cells for s in series[c]]
    out, proc = start_otava(ctx, jobs, OTAVA)
    mine = {c: [replay(s, ours, FIRST, c.change_at) for s in series[c]] for c in all_cells}
    ours_s = time.perf_counter() - t0
    flat_calls = finish_otava(out, proc)
    theirs = {c: flat_calls[k * n : (k + 1) * n] for k, c in enumerate(all_cells)}
    out, proc = start_otava(ctx, jobs, OTAVA_STRICT)  # alone: ours is done
    flat_calls = finish_otava(out, proc)
    strict = {c: flat_calls[k * n : (k + 1) * n] for k, c in enumerate(all_cells)}
    beats_strict = {"recall": 0, "delay": 0, "cells": 0}
    rows: list[Row] = []
    fa_lines, step_lines, drift_lines = [], [], []
    met = {"false alarms": True, "recall": True, "delay": True}
    for c in all_cells:
        if c.kind in ("flat", "outlier"):
            rate_ours = 100 * sum(bool(x) for x in mine[c]) / n
            rate_otava = 100 * sum(bool(x) for x in theirs[c]) / n
            rate_strict = 100 * sum(bool(x) for x in strict[c]) / n
            ok = rate_ours <= 5
            met["false alarms"] &= ok
            rows.append(
                Row(
                    "changes_vs_otava",
                    f"false alarms, {c.label}",
                    rate_ours,
                    "%",
                    "<= 5",
                    ok,
                    f"Otava {rate_otava:.1f}%, at p < {OTAVA_STRICT['max_pvalue']:g} {rate_strict:.1f}%; {n} histories",
                )
            )
            fa_lines.append(
                f"| {c.label} | {rate_otava:.1f}% | {rate_ours:.1f}% | {'yes' if ok else 'NO'} | {rate_strict:.1f}% |"
            )
        elif c.kind == "step":
            at = POSITIONS[c.position]
            d_ours = [first_hit(x, at) for x in mine[c]]
            d_otava = [first_hit(x, at) for x in theirs[c]]
            hit_ours = [d <= WITHIN for d in d_ours]
            hit_otava = [d <= WITHIN for d in d_otava]
            r_ours, r_otava = 100 * float(np.mean(hit_ours)), 100 * float(np.mean(hit_otava))
            diff, half = paired(hit_ours, hit_otava)
            med_ours, med_otava = float(np.median(d_ours)), float(np.median(d_otava))
            recall_ok = r_ours >= r_otava - half - 1e-9
            delay_ok = med_ours <= med_otava
            met["recall"] &= recall_ok
            met["delay"] &= delay_ok
            rows.append(
                Row(
                    "changes_vs_otava",
                    f"recall within {WITHIN}, {c.label}",
                    r_ours,
                    "%",
                    f">= Otava {r_otava:.0f} - {half:.1f}",
                    recall_ok and delay_ok,
                    f"paired diff {diff:+.1f}% ± {half:.1f}; median delay {fmt_delay(med_ours)} "
                    f"(Otava {fmt_delay(med_otava)})",
                )
            )
            d_strict = [first_hit(x, at) for x in strict[c]]
            hit_strict = [d <= WITHIN for d in d_strict]
            s_diff, s_half = paired(hit_ours, hit_strict)
            med_strict = float(np.median(d_strict))
            beats_strict["cells"] += 1
            beats_strict["recall"] += s_diff >= -s_half - 1e-9
            beats_strict["delay"] += med_ours <= med_strict
            step_lines.append(
                f"| {c.label} | {r_otava:.1f}% | {r_ours:.1f}% | {diff:+.1f} [{diff - half:+.1f}, {diff + half:+.1f}] "
                f"| {'yes' if recall_ok else 'NO'} | {fmt_delay(med_otava)} | {fmt_delay(med_ours)} "
                f"| {'yes' if delay_ok else 'NO'} | {100 * float(np.mean(hit_strict)):.1f}% "
                f"| {s_diff:+.1f} [{s_diff - s_half:+.1f}, {s_diff + s_half:+.1f}] | {fmt_delay(med_strict)} |"
            )
        else:
            cols = []
            for calls in (theirs[c], mine[c], strict[c]):
                # the first call of each history once the drift has begun (earlier ones are false alarms)
                firsts = [f for f in (next((y for y in x if y[0] > DRIFT_START), None) for x in calls) if f]
                after = [f[0] - 1 - DRIFT_START for f in firsts]
                sizes = [math.log1p(f[2] / 100) / c.sigma for f in firsts]
                truth = [c.size * (a + 1) for a in after]  # the drift at the newest run of the call
                called = 100 * len(after) / n
                if after:
                    cols.append(
                        f"{called:.0f}% | {np.median(after):g} | {np.median(sizes):.1f}σ (true {np.median(truth):.1f}σ)"
                    )
                else:
                    cols.append(f"{called:.0f}% | – | –")
            drift_lines.append(f"| {c.label} | {' | '.join(cols)} |")
    wall = time.perf_counter() - t0
    rows.append(
        Row(
            "changes_vs_otava",
            "replay time",
            wall,
            "s",
            "",
            None,
            f"ours {ours_s:.0f} s; {n} histories per cell, {len(all_cells)} cells",
        )
    )
    path = write_section_figures(
        "changes_vs_otava",
        [
            "# Change points against Apache Otava (`python -m benchmarks --only changes_vs_otava`)",
            "",
            f"{n} seeded histories per cell of {RUNS} runs, replayed run by run from {FIRST} runs on "
            f"through `stats.history.detect` and Otava {OTAVA} (apache-otava 0.8.0, its defaults), on the same "
            "run-level figures; a call is a new slower change point. σ = the noise sd per run (log scale). "
            "Definitions: benchmarks/bench_changes_vs_otava.py; the detector: docs/statistics-history.md.",
            "",
            f"Targets met: false alarms ≤ 5% {'yes' if met['false alarms'] else 'NO'}; "
            f"recall within {WITHIN} ≥ Otava's − the paired 95% half-width in every step cell "
            f"{'yes' if met['recall'] else 'NO'}; median delay ≤ Otava's in every step cell "
            f"{'yes' if met['delay'] else 'NO'}.",
            "",
            f"At similar false alarms: against Otava at p < {OTAVA_STRICT['max_pvalue']:g} (chosen to bring its "
            "false alarms down to about 5%; its rate per cell is in the last column below), our recall "
            f"within {WITHIN} is at least its own minus the paired 95% half-width in {beats_strict['recall']} "
            f"of {beats_strict['cells']} step cells, and our median delay no longer in "
            f"{beats_strict['delay']} of {beats_strict['cells']}.",
            "",
            "## False alarms (histories with any call)",
            "",
            f"| cell | Otava | ours | ≤ 5% | Otava p < {OTAVA_STRICT['max_pvalue']:g} |",
            "|---|---|---|---|---|",
            *fa_lines,
            "",
            f"## Steps: recall within {WITHIN} runs after the step's first run, and delay",
            "",
            "Delay: runs after the step's first run that the calling evaluation had seen (0 = called on "
            "that run); a miss counts as never. Paired difference: ours − Otava's per history, "
            "with its normal 95% interval.",
            "",
            "| cell | Otava recall | our recall | paired diff, pp [95%] | recall ok | Otava median delay "
            "| our median delay | delay ok | strict Otava recall | ours − strict, pp [95%] "
            "| strict Otava median delay |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *step_lines,
            "",
            f"## Drifts (reported, not scored): linear from run {DRIFT_START}",
            "",
            "Per detector: histories with a call after the drift began; median runs after its start at "
            "the first call; median size of that call in σ, with the true drift at its newest run.",
            "",
            "| cell | Otava called | Otava first call | Otava size | ours called | our first call | our size "
            "| strict Otava called | its first call | its size |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *drift_lines,
            "",
            f"Replay: {wall:.0f} s on {os.cpu_count()} CPUs (ours {ours_s:.0f} s, Otava beside it or cached). "
            f"'Strict Otava': Otava at p < {OTAVA_STRICT['max_pvalue']:g}, otherwise its defaults.",
            "",
        ],
    )
    rows.append(Row("changes_vs_otava", "figures file", float("nan"), "", "", None, str(path.relative_to(REPO))))
    return rows


SECTIONS = [bench_changes_vs_otava]
