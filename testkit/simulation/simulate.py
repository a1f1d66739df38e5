"""Simulated ladders under the execution-order noise model: the A/A false-call rate and the power
of the block model's verdicts, on the schedules plan/build.py really makes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any
from dataclasses import dataclass

import numpy as np

from traceladder.core.documents import JSONObject, JSONValue
from testkit.simulation.noise import NoiseModel, Slot, blocked_schedule, schedule_from_plan, simulate_runs
from traceladder.stats.model import DRIFT_DEGREES, BlockFit, Run, fit_blocks, verdict
from traceladder.stats.sequential import Design, target_reached


@dataclass(frozen=True)
class LadderShape:
    """The rungs and their parents, schedules (one per simulated run id) in execution order, and
    the degree of the drift terms the ladder's verdicts fit (its `drift`)."""

    pairs: tuple[tuple[str, str], ...]  # (rung, parent)
    schedules: tuple[tuple[Slot, ...], ...]
    from_plan: bool  # False: plan/build.py records no block design yet, so the schedules are our own shuffle
    drift: int = 0


def ladder_shape(ladder: str, repeats: int | None = None, schedules: int = 50) -> LadderShape:
    """`schedules` plans of `ladder` (run ids sim0, sim1, ...), as plan/build.py builds them."""
    import inspect

    from traceladder.config.loader import find_ladder, load_ladder
    from traceladder.plan.build import build_plan

    loaded = load_ladder(find_ladder(ladder))
    pairs = tuple((r.name, r.parent) for r in loaded.ladder.rungs if r.parent)
    takes_run_id = "run_id" in inspect.signature(build_plan).parameters
    out, from_plan = [], True
    for i in range(schedules):
        kwargs: dict[str, Any] = {"run_id": f"sim{i}"} if takes_run_id else {}  # build_plan keyword arguments
        specs: list[JSONValue] = [s.to_dict() for s in build_plan(loaded, repeats=repeats, **kwargs)]
        slots, randomised = schedule_from_plan({"specs": specs})
        if not randomised:
            n = max(s.block for s in slots) + 1
            slots, from_plan = blocked_schedule([r.name for r in loaded.ladder.rungs], n, seed=i), False
        out.append(tuple(slots))
        if not takes_run_id and from_plan:
            break  # one fixed design: the same schedule every time
    return LadderShape(pairs, tuple(out), from_plan, DRIFT_DEGREES[loaded.ladder.drift])


def simulate_verdicts(
    model: NoiseModel,
    shape: LadderShape,
    ladders: int,
    seed: int,
    effects: dict[str, float] | None = None,
    drop: float = 0.0,
    pairs: Sequence[tuple[str, str]] | None = None,
) -> list[dict[str, JSONObject]]:
    """Per simulated ladder, rung → its vs_parent (on log step time; delta in units of the parent's
    level). `effects` maps a rung to its true log shift; `drop` fails each run with that
    probability (missing cells)."""
    rng = np.random.default_rng(seed)
    judged = tuple(pairs or shape.pairs)
    out = []
    for i in range(ladders):
        schedule = shape.schedules[i % len(shape.schedules)]
        runs: list[Run] = simulate_runs(model, schedule, effects or {}, rng)
        if drop:
            runs = [r for r in runs if rng.random() >= drop]
        fit = fit_blocks(runs, shape.drift)
        out.append({rung: verdict(fit.contrast(rung, parent), 1.0, "step_ms", False) for rung, parent in judged})
    return out


def blocked_shape(
    rungs: Sequence[str], pairs: Sequence[tuple[str, str]], blocks: int, schedules: int = 20, drift: int = 0
) -> LadderShape:
    """A ladder shape from rung names alone: `schedules` seeded randomised complete block orders."""
    return LadderShape(
        tuple(pairs),
        tuple(tuple(blocked_schedule(list(rungs), blocks, seed=i)) for i in range(schedules)),
        False,
        drift,
    )


@dataclass(frozen=True)
class AdaptiveOutcome:
    """One simulated adaptive ladder: the blocks it ran and its verdicts at that look."""

    blocks: int
    target_reached: bool
    verdicts: dict[str, JSONObject]


def _verdicts_at(fit: BlockFit, judged: Sequence[tuple[str, str]], critical_z: float) -> dict[str, JSONObject]:
    return {rung: verdict(fit.contrast(rung, parent), 1.0, "step_ms", False, critical_z) for rung, parent in judged}


def simulate_adaptive(
    model: NoiseModel,
    shape: LadderShape,
    design: Design,
    ladders: int,
    seed: int,
    effects: dict[str, float] | None = None,
    pairs: Sequence[tuple[str, str]] | None = None,
    budget_blocks: Sequence[int] = (),
) -> list[AdaptiveOutcome]:
    """Simulated ladders under adaptive repeats: each simulates its `max` blocks, then looks after
    block n = min, ..., max as the DAG does (the block model on blocks < n, every judged rung's
    MDE at that look's critical value) and stops at the first look where all are <= the target.
    `budget_blocks`: the time budget, as the block count where it stops a ladder, drawn per
    ladder from these (the clock, not the contrasts, decides it); that look is then the final
    analysis, at `design.final_z_at`. The shape's schedules need `design.max_blocks` measure blocks."""
    rng = np.random.default_rng(seed)
    judged = tuple(pairs or shape.pairs)
    out = []
    for i in range(ladders):
        schedule = shape.schedules[i % len(shape.schedules)]
        runs: list[Run] = simulate_runs(model, schedule, effects or {}, rng)
        budget = int(rng.choice(budget_blocks)) if budget_blocks else design.max_blocks
        for n in design.looks:
            fit = fit_blocks([r for r in runs if int(r.block) < n], shape.drift)  # type: ignore[call-overload]
            verdicts = _verdicts_at(fit, judged, design.z_at(n))
            reached = target_reached({r: v["mde_pct"] for r, v in verdicts.items()}, design.target_mde_pct)  # type: ignore[misc]
            if reached or n >= min(budget, design.max_blocks):
                final = verdicts if reached else _verdicts_at(fit, judged, design.final_z_at(n))
                out.append(AdaptiveOutcome(n, reached, final))
                break
    return out


def call_rate(
    verdicts: list[dict[str, JSONObject]], rung: str, calls: tuple[str, ...] = ("faster", "slower")
) -> tuple[int, int]:
    """(ladders whose `rung` got one of `calls`, ladders)."""
    return sum(v[rung]["verdict"] in calls for v in verdicts), len(verdicts)


def one_per_ladder(verdicts: list[dict[str, JSONObject]], seed: int) -> tuple[int, int]:
    """(calls, ladders) judging one rung per ladder, drawn at random: independent trials, so a
    Clopper-Pearson interval applies (the rungs of one ladder share its blocks and residual)."""
    rng = np.random.default_rng(seed)
    picks = [v[list(v)[int(rng.integers(len(v)))]] for v in verdicts]
    return sum(p["verdict"] in ("faster", "slower") for p in picks), len(picks)


def every_call(verdicts: list[dict[str, JSONObject]]) -> tuple[int, int]:
    """(faster/slower calls over every judged rung, comparisons): not independent within a ladder."""
    return sum(x["verdict"] in ("faster", "slower") for v in verdicts for x in v.values()), sum(
        len(v) for v in verdicts
    )


def log_shift(pct: float) -> float:
    return math.log1p(pct / 100)
