"""Rerun one recorded step of a triage (`traceladder triage repro`, cli/triage.py): its two sides
rebuilt exactly as the engine built them (the suspect's confirm: the two runs' pinned specs; a
bisection step or a rung at a culprit: the good run's pinned spec with each candidate's change,
bisect.candidate_spec), run in interleaved A/B blocks by the confirm (confirm.py) under the step's
own rule, size and block-order seed, and stored under a scratch prefix, never the ladder's own.

Pure like the other steps: the runs come in as a `RunBlock`, the setups and the build catalog as
values (cli/triage.py wires them from the ladder file and its store)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from traceladder.core import layout
from traceladder.core.documents import JSONObject, TriageCandidate, TriageDoc, TriageStep, as_object
from traceladder.core.errors import TraceladderError
from traceladder.stats.decisions import NoiseHistory
from traceladder.triage.bisect import BUILD_VARIABLE, BuildChanges, Candidate, candidate_spec
from traceladder.triage.confirm import Budget, RunBlock, confirm
from traceladder.triage.engine import step_seed
from traceladder.triage.suspects import RunSetup

SCRATCH_SUFFIX = "-scratch"  # the default scratch prefix: the ladder's storage prefix + this
# the steps judged by size (bisect.py: which end a candidate looks like); the others by the confirm's rule
SIZE_RULE_KINDS = ("bisect", "pair", "range")


class ReproError(TraceladderError):
    """A step that cannot be rerun (no such step, a candidate the record does not name, a scratch
    prefix inside the production one): one line naming the field."""


def scratch_prefix(prefix: str, ladder: str, chosen: str | None = None) -> str:
    """Where a repro stores its runs: `chosen` (`--scratch-prefix`), else `<prefix>-scratch`.
    Refused when its keys (`<scratch>/<ladder>/`) could meet the production ones: it equals the
    storage prefix or lies under it (every folder there is read as a ladder), or either ladder
    folder holds the other."""
    scratch = chosen if chosen is not None else f"{prefix}{SCRATCH_SUFFIX}"
    root, scratch_root = _key_prefix(prefix), _key_prefix(scratch)
    if not scratch_root:
        raise ReproError(f"--scratch-prefix: {scratch!r} is not a key prefix")
    production = layout.ladder_prefix(prefix, ladder)
    ours = f"{scratch_root}/{layout.safe_key_part(ladder)}"
    if (
        scratch_root == root
        or scratch_root.startswith(f"{root}/")
        or f"{ours}/".startswith(f"{production}/")
        or f"{production}/".startswith(f"{ours}/")
    ):
        raise ReproError(
            f"--scratch-prefix: {scratch!r} is inside the ladder's production prefix {root}/ "
            f"(its runs are under {production}/); give a prefix outside it, e.g. {root}{SCRATCH_SUFFIX}"
        )
    return scratch_root


def _key_prefix(prefix: str) -> str:
    """A prefix as keys spell it (each part made safe, no empty parts); "" when none is left."""
    return "/".join(layout.safe_key_part(part) for part in prefix.split("/") if part)


def step_at(doc: TriageDoc, index: int, source: str) -> TriageStep:
    """Step `index` of the triage stored at `source`, or a ReproError naming the steps it has."""
    if not 0 <= index < len(doc.steps):
        have = f"steps 0-{len(doc.steps) - 1}" if doc.steps else "no step"
        raise ReproError(f"--step: {index} is not a step of {source} (it has {have})")
    return doc.steps[index]


def candidates_of(listed: Sequence[TriageCandidate]) -> dict[str, Candidate]:
    """triage.json's `candidates` by name, as the bisection ran them."""
    return {c.name: Candidate.of_part(c) for c in listed}


@dataclass(frozen=True)
class StepSides:
    """A recorded step ready to rerun: its A and B specs (as the engine built them), the size it
    was judged against (log scale) and its rule."""

    index: int
    step: TriageStep
    spec_a: JSONObject
    spec_b: JSONObject
    size_log: float
    rule: str

    def side_words(self, side: str) -> str:
        """`A n4: image traceladder/proxy:cpu, build n4`: what one side runs."""
        spec, name = (self.spec_a, self.step.good) if side == "A" else (self.spec_b, self.step.candidate)
        env = as_object(spec.get("docker_env_vars") or {})
        return f"{side} {name}: image {spec.get('image') or 'none'}, build {env.get(BUILD_VARIABLE) or 'none'}"


def step_sides(
    doc: TriageDoc,
    index: int,
    good: RunSetup,
    bad: RunSetup,
    builds: Mapping[str, BuildChanges],
    candidates: Sequence[TriageCandidate],
    source: str,
) -> StepSides:
    """Step `index` of `doc` with both sides rebuilt: the rung's confirm compares the suspect's
    good and bad runs (`good`, `bad`: their stored setups, image digests pinned); every other step
    two candidates of the bisection (`candidates`: the bisected rung's triage.json list), each the
    good run's pinned spec with its change. `source` names the triage.json in errors."""
    step = step_at(doc, index, source)
    size_pct = step.size_pct if step.size_pct is not None else doc.suspect.delta_pct
    rule = "size" if step.kind in SIZE_RULE_KINDS else "confirm"
    if step.kind == "confirm":
        if (step.good, step.candidate) != (good.run_id, bad.run_id):
            raise ReproError(
                f"{source}: steps[{index}]: compares {step.good} with {step.candidate}, "
                f"not the suspect's runs {good.run_id} and {bad.run_id}"
            )
        a, b = good.pinned_spec, bad.pinned_spec
    else:
        by_name = candidates_of(candidates)
        for name in (step.good, step.candidate):
            if name not in by_name:
                raise ReproError(f"{source}: steps[{index}]: candidate {name!r} is not among the recorded candidates")
        a = candidate_spec(good.pinned_spec, by_name[step.good], builds)
        b = candidate_spec(good.pinned_spec, by_name[step.candidate], builds)
    return StepSides(index, step, a, b, math.log1p(size_pct / 100.0), rule)


def rerun(
    doc: TriageDoc,
    sides: StepSides,
    run_block: RunBlock,
    budget: Budget,
    scratch: str,
    *,
    metric: str = "wall",
    history: NoiseHistory | None = None,
) -> TriageStep:
    """The step's A/B again: `budget.blocks` interleaved blocks (the confirm stops early as the
    triage's step would), the same rule, size and block order as the recorded step, each run's
    spec stored under `scratch` (its storage_prefix) and named as the triage named it."""
    step = sides.step
    return confirm(
        {**sides.spec_a, "storage_prefix": scratch},
        {**sides.spec_b, "storage_prefix": scratch},
        sides.size_log,
        run_block,
        budget,
        rung=doc.rung,
        names=(step.good, step.candidate),
        kind=step.kind,
        metric=metric,
        seed=step_seed(doc.run_id, doc.rung, step.kind, step.good, step.candidate),
        step=sides.index,
        rule=sides.rule,
        history=history,
    )
