"""Confirm a suspect: its last good setup (A) and its newest (B) in interleaved A/B blocks on the
same host or queue and backend as the ladder, looked at after each block with the efficacy and
futility stops of stats/sequential.py (docs/statistics-adaptive.md, "Confirming a suspect").

Runs go through an injected `RunBlock` (a spec in, its metrics.json out), so each backend plugs
in: triage/runs.py's `local_run_block` runs the real runner on this host; the docker and Slurm
backends pass theirs (workflows/triage_backends.py). A side that cannot run in the first block is a
candidate that cannot run (bisect.CandidateUnavailable); a later failed run is a missing cell,
which the block model leaves out."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from traceladder.core.documents import JSONObject, JSONValue, TriageLook, TriageStep, as_float, as_list
from traceladder.core.errors import TraceladderError
from traceladder.stats.decisions import (
    CONFIRM_ALPHA,
    INSUFFICIENT,
    ConfirmLook,
    NoiseHistory,
    blocks_to_decide,
    confirm_look,
    pooled_variance,
)
from traceladder.stats.model import Run, fit_blocks
from traceladder.triage.bisect import CandidateUnavailable

# run_block(spec, side, block) -> the run's metrics.json data (RungResult.to_dict())
RunBlock = Callable[[JSONObject, str, int], JSONObject]


# Run statuses that a retry can cure (the host was not ready); a workload that failed, timed out
# or wrote part of its output fails the same way again, so it is not retried (as a ladder's rung).
RETRIED_STATUSES = ("preflight",)


@dataclass(frozen=True)
class Budget:
    """The ladder's `triage:` budget: blocks per step, seconds per step (None: no time rule), the
    two-sided level, the retries of a run that failed for the infrastructure (`retries.rung_infra`),
    and the whole triage's runs and device-hours (None: no limit; `Spent` counts them)."""

    blocks: int = 16
    seconds: float | None = None
    alpha: float = CONFIRM_ALPHA
    retries: int = 2
    runs: int | None = None
    device_hours: float | None = None
    devices: int = 1  # per run: device-hours are run hours times this


@dataclass
class Spent:
    """What a triage has spent so far, over all its steps: runs started and their seconds."""

    runs: int = 0
    run_s: float = 0.0

    def device_hours(self, devices: int) -> float:
        return self.run_s * devices / 3600

    def exhausted(self, budget: Budget) -> str | None:
        """Why no further block may start (the triage budget is spent), else None."""
        if budget.runs is not None and self.runs + 2 > budget.runs:
            return f"the triage's budget of {budget.runs} runs is spent ({self.runs} run)"
        if budget.device_hours is not None and self.device_hours(budget.devices) >= budget.device_hours:
            return (
                f"the triage's budget of {budget.device_hours:g} device-hours is spent "
                f"({self.device_hours(budget.devices):.2f})"
            )
        return None


def _figure(metrics: Mapping[str, JSONValue], metric: str) -> tuple[float | None, list[float]]:
    """The run's judged figure and its iterations: step time, or step CPU time on `metric: cpu`."""
    key = "step_cpu_ms" if metric == "cpu" else "step_ms"
    value = metrics.get(key)
    values = [as_float(v) for v in as_list(metrics.get(f"{key}_values") or [])]
    return (as_float(value) if value else None), values


def look_at(
    runs: Sequence[Run],
    suspect_log: float,
    max_blocks: int,
    alpha: float = CONFIRM_ALPHA,
    final: bool = False,
    statistic: str = "median",
    rule: str = "confirm",
    history: NoiseHistory | None = None,
) -> ConfirmLook:
    """Look at a confirm's runs (treatments "A" and "B"): the block model of stats/model.py, its B
    minus A contrast with the variance pooled with the rung's history (stats/decisions.py), and
    the stop `rule` makes at this look."""
    blocks = len({r.block for r in runs})
    fit = fit_blocks(list(runs), statistic=statistic)
    contrast = fit.contrast("B", "A")
    se, df, source = contrast.se, contrast.df, "confirm"
    if se is not None and fit.run_var:
        var, df, source = pooled_variance(fit.run_var, contrast.df, history)
        se = se * math.sqrt((var or fit.run_var) / fit.run_var)
    return confirm_look(contrast.diff, se, df, blocks, suspect_log, max_blocks, alpha, final, rule, source)


def side_spec(spec: Mapping[str, JSONValue], side: str, block: int, step: int = 0) -> JSONObject:
    """A confirm run's spec: the side's resolved spec as a measure run, named by its rung, the
    triage step, side and block (`triage-baseline.s1-B.b0`), so its artifacts overwrite neither the
    ladder run's nor an earlier step's."""
    out: JSONObject = dict(spec)
    out.update(
        lens="none",
        purpose="measure",
        profile_window=None,
        repeat=block,
        block=block,
        position=0,
        rung_id=f"triage-{spec.get('rung')}.s{step}-{side}.b{block}",
    )
    return out


def confirm(
    spec_a: Mapping[str, JSONValue],
    spec_b: Mapping[str, JSONValue],
    suspect_log: float,
    run_block: RunBlock,
    budget: Budget,
    *,
    rung: str,
    names: tuple[str, str] = ("A", "B"),
    kind: str = "confirm",
    metric: str = "wall",
    seed: int = 0,
    step: int = 0,
    clock: Callable[[], float] = time.monotonic,
    rule: str = "confirm",
    history: NoiseHistory | None = None,
    spent: Spent | None = None,
) -> TriageStep:
    """Run blocks of one A and one B run (each block's order drawn from `seed`) until `rule`
    stops (stats/decisions.py), or the step's block or time budget or the triage's budget
    (`spent` against `budget`) runs out; the step with its verdict, interval, every look, its runs
    and seconds. `step`: the step's place in its triage, which names its runs (`side_spec`)."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible run order, not a secret
    statistic = "mean" if metric == "cpu" else "median"
    spent = spent if spent is not None else Spent()
    runs: list[Run] = []
    looks: list[TriageLook] = []
    started, before = clock(), (spent.runs, spent.run_s)
    longest = 0.0
    look: ConfirmLook | None = None
    out_of: str | None = None

    def at_look(final: bool = False) -> ConfirmLook:
        return look_at(runs, suspect_log, budget.blocks, budget.alpha, final, statistic, rule, history)

    for block in range(budget.blocks):
        out_of = spent.exhausted(budget)
        if out_of is None and budget.seconds is not None and block and clock() + longest > started + budget.seconds:
            out_of = f"the step's budget of {budget.seconds:g} s ran out"
        if out_of is not None:
            if block:
                look = at_look(final=True)
                looks.append(look.as_look())
            break
        t0 = clock()
        order = ["A", "B"] if rng.random() < 0.5 else ["B", "A"]
        for at, side in enumerate(order):
            name = names[0] if side == "A" else names[1]
            metrics = _run_with_retries(
                run_block, side_spec(spec_a if side == "A" else spec_b, side, block, step), side, block, budget, spent
            )
            value, values = _figure(metrics, metric)
            if metrics.get("status") != "ok" or value is None:
                if block == 0:
                    raise CandidateUnavailable(f"{name} did not run: {metrics.get('error') or metrics.get('status')}")
                continue
            runs.append(Run(block, side, math.log(value), tuple(math.log(v) for v in values if v > 0), at=float(at)))
        longest = max(longest, clock() - t0)
        look = at_look()
        looks.append(look.as_look())
        if look.stop is not None:
            break
    if look is None:  # the triage's budget was spent before this step's first block
        return TriageStep(kind=kind, rung=rung, good=names[0], candidate=names[1], verdict=INSUFFICIENT, reason=out_of)
    verdict = look.stop or INSUFFICIENT
    final = looks[-1]  # `look` as recorded
    reason = more = None
    if verdict == INSUFFICIENT:
        more = blocks_to_decide(look, suspect_log)
        reason = (out_of or f"the step's budget of {budget.blocks} blocks ran out") + " with neither stop"
        if more is not None:
            reason += f"; about {more} more blocks would likely have decided it"
    return TriageStep(
        kind=kind,
        rung=rung,
        good=names[0],
        candidate=names[1],
        verdict=verdict,
        delta_pct=final.delta_pct,
        interval_pct=final.interval_pct,
        blocks=look.blocks,
        looks=looks,
        reason=reason,
        runs=spent.runs - before[0],
        size_pct=100 * math.expm1(suspect_log),
        run_s=round(spent.run_s - before[1], 3),
        more_blocks=more,
    )


def _run_with_retries(
    run_block: RunBlock, spec: JSONObject, side: str, block: int, budget: Budget, spent: Spent
) -> JSONObject:
    """One run, retried up to `budget.retries` times when the infrastructure failed it (an error
    raised by the backend, or a RETRIED_STATUSES status); a workload failure is returned at once.
    The last failure is returned as a run that did not end `ok`, or raised when it was an error."""
    for attempt in range(budget.retries + 1):
        spent.runs += 1
        started = time.monotonic()
        try:
            metrics = run_block(spec, side, block)
        except CandidateUnavailable:
            raise
        except TraceladderError as exc:  # a backend's one-line error (Docker, Slurm, S3)
            if attempt == budget.retries:
                return {"status": "failed", "error": f"{exc} (after {attempt + 1} tries)"}
            continue
        finally:
            spent.run_s += time.monotonic() - started
        if metrics.get("status") not in RETRIED_STATUSES or attempt == budget.retries:
            return metrics
    raise AssertionError("unreachable: the last attempt returns")
