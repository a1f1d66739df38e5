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

from traceladder.core.documents import JSONObject, JSONValue, TriageStep, as_float, as_list
from traceladder.stats.model import Run, fit_blocks
from traceladder.stats.sequential import CONFIRM_ALPHA, INSUFFICIENT, ConfirmLook, confirm_look
from traceladder.triage.bisect import CandidateUnavailable

# run_block(spec, side, block) -> the run's metrics.json data (RungResult.to_dict())
RunBlock = Callable[[JSONObject, str, int], JSONObject]


@dataclass(frozen=True)
class Budget:
    """The ladder's `triage:` budget: blocks, seconds (None: no time rule) and the two-sided level."""

    blocks: int = 16
    seconds: float | None = None
    alpha: float = CONFIRM_ALPHA


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
) -> ConfirmLook:
    """Look at a confirm's runs (treatments "A" and "B"): the block model of stats/model.py, its B
    minus A contrast, and stats/sequential.py's stops at this look."""
    blocks = len({r.block for r in runs})
    contrast = fit_blocks(list(runs), statistic=statistic).contrast("B", "A")
    return confirm_look(contrast.diff, contrast.se, contrast.df, blocks, suspect_log, max_blocks, alpha, final)


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
) -> TriageStep:
    """Run blocks of one A and one B run (each block's order drawn from `seed`) until a stop, the
    block budget or the time budget; the step with its verdict, interval and every look. `step`:
    the step's place in its triage, which names its runs (`side_spec`)."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible run order, not a secret
    statistic = "mean" if metric == "cpu" else "median"
    runs: list[Run] = []
    looks: list[JSONObject] = []
    started = clock()
    longest = 0.0
    look: ConfirmLook | None = None
    for block in range(budget.blocks):
        if budget.seconds is not None and block and clock() + longest > started + budget.seconds:
            look = look_at(runs, suspect_log, budget.blocks, budget.alpha, final=True, statistic=statistic)
            looks.append(look.as_dict())
            break
        t0 = clock()
        order = ["A", "B"] if rng.random() < 0.5 else ["B", "A"]
        for at, side in enumerate(order):
            metrics = run_block(side_spec(spec_a if side == "A" else spec_b, side, block, step), side, block)
            value, values = _figure(metrics, metric)
            if metrics.get("status") != "ok" or value is None:
                if block == 0:
                    name = names[0] if side == "A" else names[1]
                    raise CandidateUnavailable(f"{name} did not run: {metrics.get('error') or metrics.get('status')}")
                continue
            runs.append(Run(block, side, math.log(value), tuple(math.log(v) for v in values if v > 0), at=float(at)))
        longest = max(longest, clock() - t0)
        look = look_at(runs, suspect_log, budget.blocks, budget.alpha, statistic=statistic)
        looks.append(look.as_dict())
        if look.stop is not None:
            break
    assert look is not None  # budget.blocks >= 1
    verdict = look.stop or INSUFFICIENT
    final = look.as_dict()
    reason = None
    if verdict == INSUFFICIENT:
        reason = f"the budget ran out after {look.blocks} blocks with neither stop"
    return TriageStep(
        kind=kind,
        rung=rung,
        good=names[0],
        candidate=names[1],
        verdict=verdict,
        delta_pct=final["delta_pct"],  # type: ignore[arg-type]
        interval_pct=final["interval_pct"],  # type: ignore[arg-type]
        blocks=look.blocks,
        looks=looks,
        reason=reason,
    )
