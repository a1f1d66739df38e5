"""Ladder → plan: randomised complete blocks of `RungSpec`s.

Repeat k of the ladder is block k: every selected rung once (purpose `measure`), in an order
shuffled by the run's seed. Each lens repeat is a block of its own holding an unprofiled run of
the lens rung and one run per lens (purpose `lens`), so every lens overhead is paired inside its
block. The ladder's `lenses.every_rung` adds one block with a profiled run of every rung (purpose
`profile`), which the step-time estimates leave out. Blocks run one after the other (the DAG
makes that structural); `plan_design` records the seed and the order for plan.json.

A rung spec is the whole contract between the planner and the runner: it is JSON, it names what
madengine's `--additional-context` would be, and the runner executes it the same way on both
backends.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from typing import Any, Literal, TypedDict, get_args

from pydantic import BaseModel, ConfigDict, model_validator

from traceladder.core.documents import JSONObject
from traceladder.config.loader import LoadedLadder
from traceladder.config.models import LENS_SWITCH, LENSES_BY_BACKEND, ArgValue, Build, RungOverrides, Tool
from traceladder.core import env_vars
from traceladder.config.validate import (
    LadderConfigError,
    check_profile_window,
    find_value,
    overrides_for,
)
from traceladder.rung_spec import Purpose, SpecFields, check_spec, json_name, render_arg, with_read_defaults

LADDER_LENSES = "ladder"  # the Params value meaning "the lenses the ladder file names"
PURPOSES: tuple[str, ...] = get_args(Purpose)


class RungSpec(BaseModel, SpecFields, frozen=True):
    """Everything one run of one rung needs; serialises to the JSON the runner reads.

    The fields, their order, defaults and limits are `rung_spec.SpecFields` (the one schema, which
    the runner image reads without pydantic); this model narrows `model_args` and `tools` to the
    config's types and runs the schema's checks (`check_spec`)."""

    model_config = ConfigDict(extra="forbid", alias_generator=json_name)  # frozen: a class argument, for mypy

    model_args: dict[str, ArgValue]
    tools: list[Tool]

    @model_validator(mode="before")
    @classmethod
    def _read_defaults(cls, data: Any) -> Any:
        return with_read_defaults(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _runnable(self) -> RungSpec:
        check_spec(self)
        return self

    def additional_context(self) -> JSONObject:
        """madengine's `--additional-context` for this rung."""
        context: JSONObject = {
            "docker_env_vars": dict(self.docker_env_vars),
            "model_args": " ".join(self.primus_args()),
        }
        if self.tools:
            context["tools"] = [t.model_dump(exclude_none=True) for t in self.tools]
        return context

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> RungSpec:
        return cls.model_validate_json(text)


# The rung id's repeat suffix says which kind of block the run belongs to, so ids never collide.
_SUFFIX = {"measure": "r", "lens": "l", "profile": "p"}


def rung_id(rung: str, lens: str, repeat: int, purpose: Purpose = "measure") -> str:
    return f"{rung}.{lens}.{_SUFFIX[purpose]}{repeat}"


def design_seed(ladder: str, run_id: str) -> int:
    """The default block-order seed: fixed by the ladder and the run id, so a rerun of the same
    run id reproduces the order and two runs do not share one."""
    return int.from_bytes(hashlib.sha256(f"{ladder}/{run_id}".encode()).digest()[:4], "big")


def resolve_seed(loaded: LoadedLadder, run_id: str, seed: object = None) -> int:
    """Params seed, else the ladder file's `seed`, else one derived from ladder and run id."""
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise LadderConfigError("seed", f"expected a non-negative integer, got {seed!r}")
        return seed
    if loaded.ladder.seed is not None:
        return loaded.ladder.seed
    return design_seed(loaded.ladder.ladder, run_id)


def execution_order(specs: list[RungSpec]) -> list[RungSpec]:
    """The order the runs execute in: block after block, by position inside a block."""
    return sorted(specs, key=lambda s: (s.block, s.position))


def plan_design(specs: list[RungSpec], seed: int) -> JSONObject:
    """plan.json's `design`: the seed and every block's rung ids in execution order."""
    blocks: list[list[str]] = []
    for spec in execution_order(specs):
        while len(blocks) <= spec.block:
            blocks.append([])
        blocks[spec.block].append(spec.rung_id)
    return {"seed": seed, "blocks": [[*block] for block in blocks]}


def parse_override(text: str) -> tuple[str, str]:
    switch, sep, value = text.partition("=")
    if not sep or not switch.strip() or not value.strip():
        raise LadderConfigError("override", f"expected SWITCH=VALUE, got {text!r}")
    return switch.strip(), value.strip()


def _coerce_override(loaded: LoadedLadder, switch: str, text: str) -> bool | int | str:
    ladder = loaded.ladder
    if switch not in ladder.switches or switch == LENS_SWITCH:
        raise LadderConfigError(
            "override",
            f"unknown switch {switch!r}; switches are {sorted(k for k in ladder.switches if k != LENS_SWITCH)}",
        )
    for value in ladder.switches[switch].values:
        if str(value).lower() == text.lower():
            return value
    raise LadderConfigError(
        "override", f"{text!r} is not a value of switch {switch!r} ({list(ladder.switches[switch].values)})"
    )


def build_plan(
    loaded: LoadedLadder,
    *,
    rungs: list[str] | None = None,
    lens: str = LADDER_LENSES,
    repeats: int | None = None,
    override: str | None = None,
    seed: int | None = None,
    run_id: str = "",
) -> list[RungSpec]:
    """Expand a validated ladder into rung specs; the arguments are the trigger form's Params.

    - rungs: a subset of rung names (default all);
    - lens: `ladder` runs every rung unprofiled plus the ladder's lenses on its lens rung; any lens
      name runs each selected rung with that lens only;
    - repeats: replaces the ladder's repeat count (a plain number of blocks, no early stop);
    - override: `switch=value` applied on top of every rung (a what-if run);
    - seed: the block-order seed (default: `resolve_seed(loaded, run_id)`).

    `lens` = a lens name makes `repeats` blocks of every selected rung under that lens (purpose
    `profile`, or `measure` for `none`). The specs come back in ladder order; `block` and
    `position` give the execution order (`execution_order`).

    An adaptive ladder (`repeats: {min, max, target_mde_pct}`) plans `max` measure blocks (the
    stopping rule may skip the last ones: `adaptive_plan`); its lens blocks default to `min`, and
    a single profiling lens runs `min` blocks, since neither makes verdicts.
    """
    ladder = loaded.ladder
    names = [r.name for r in ladder.rungs]
    for name in rungs or []:
        if name not in names:
            raise LadderConfigError("rungs", f"unknown rung {name!r}; rungs are {names}")
    selected = [name for name in names if not rungs or name in rungs]  # ladder order, no duplicates
    if repeats is not None:
        n_repeats = repeats
    elif lens in (LADDER_LENSES, "none"):
        n_repeats = ladder.planned_blocks
    else:
        n_repeats = ladder.adaptive.min if ladder.adaptive else ladder.planned_blocks
    if n_repeats < 1:
        raise LadderConfigError("repeats", f"must be at least 1, got {n_repeats}")
    extra = {}
    if override:
        switch, text = parse_override(override)
        extra[switch] = _coerce_override(loaded, switch, text)

    # Blocks in execution order, each a list of (rung, lens, purpose, repeat) before shuffling.
    blocks: list[list[tuple[str, str, Purpose, int]]] = []
    if lens == LADDER_LENSES:
        blocks += [[(name, "none", "measure", k) for name in selected] for k in range(n_repeats)]
        lenses = ladder.lenses
        if lenses is not None and lenses.rung in selected and any(lens_name != "none" for lens_name in lenses.use):
            lens_repeats = repeats if repeats is not None else (lenses.repeats or ladder.lens_repeats)
            in_block = ["none", *[lens_name for lens_name in lenses.use if lens_name != "none"]]
            blocks += [[(lenses.rung, lens_name, "lens", k) for lens_name in in_block] for k in range(lens_repeats)]
        if lenses is not None and lenses.every_rung:
            blocks.append([(name, lenses.every_rung, "profile", 0) for name in selected])
    else:
        allowed = LENSES_BY_BACKEND[ladder.backend]
        if lens not in allowed:
            raise LadderConfigError(
                "lens", f"{lens!r} cannot run on the {ladder.backend} backend (it runs {list(allowed)})"
            )
        if find_value(ladder.switches[LENS_SWITCH].values, lens) is None:
            raise LadderConfigError("lens", f"lens {lens!r} has no entry under switches.{LENS_SWITCH}.values")
        purpose: Purpose = "measure" if lens == "none" else "profile"
        blocks += [[(name, lens, purpose, k) for name in selected] for k in range(n_repeats)]

    rng = random.Random(seed if seed is not None else resolve_seed(loaded, run_id))  # noqa: S311 - a seeded, reproducible run order, not a secret
    for block in blocks:
        rng.shuffle(block)

    rung_by_name = {r.name: r for r in ladder.rungs}
    hosts = loaded.cluster.hosts
    runner_backend = _runner_backend(loaded)
    cache: dict[str, tuple[Any, tuple[int, int] | None]] = {}
    specs: list[RungSpec] = []
    for b, block in enumerate(blocks):
        for position, (rung_name, lens_name, purpose, k) in enumerate(block):
            rung = rung_by_name[rung_name]
            key = f"{rung_name}/{lens_name}/{purpose}"
            if key not in cache:
                assignment = {**loaded.assignments[rung_name], **extra, LENS_SWITCH: lens_name}
                window = check_profile_window(ladder, assignment, f"switches.{LENS_SWITCH}.values.{lens_name}")
                overrides = with_build(overrides_for(ladder, assignment), ladder.catalog_build(ladder.build))
                every_steps = ladder.lenses.every_rung_steps if ladder.lenses is not None else None
                if purpose == "profile" and lens == LADDER_LENSES and every_steps and window:
                    window = (max(window[0], window[1] - every_steps), window[1])
                    overrides = overrides.model_copy(
                        update={"model_args": {**overrides.model_args, "profile_step_start": window[0]}}
                    )
                cache[key] = (overrides, window)
            overrides, window = cache[key]
            changed = next(iter(rung.set.items()), (None, None))
            # One host runs one rung at a time; a block's positions are dealt over the hosts.
            host = hosts[position % len(hosts)]
            specs.append(
                RungSpec(
                    ladder=ladder.ladder,
                    rung=rung_name,
                    parent=rung.parent,
                    switch=changed[0],
                    value=changed[1],
                    lens=lens_name,
                    repeat=k,
                    block=b,
                    position=position,
                    purpose=purpose,
                    rung_id=rung_id(rung_name, lens_name, k, purpose),
                    backend=runner_backend,
                    host=host.name,
                    pool=host.pool,
                    image=loaded.cluster.runner_image or ladder.image,
                    model_tag=ladder.model_tag,
                    model_args=overrides.model_args,
                    docker_env_vars={**overrides.docker_env_vars, **loaded.cluster.launch_env()}
                    if ladder.backend == "docker"
                    else _slurm_launch_env(loaded, overrides.docker_env_vars, overrides.model_args)
                    if ladder.backend == "slurm"
                    else overrides.docker_env_vars,
                    tools=overrides.tools,
                    train_iters=int(overrides.model_args.get("train_iters", 10)),
                    warmup_iters=ladder.warmup_iters,
                    profile_window=window,
                    timeout_s=ladder.timeout_s,
                    config_hash=loaded.config_hash,
                    engine=ladder.engine,
                    storage_prefix=loaded.cluster.storage.prefix,
                )
            )
    return sorted(specs, key=_listing_key(selected, blocks))


def with_build(overrides: RungOverrides, build: Build | None) -> RungOverrides:
    """A rung's overrides with a catalog build's changes on top, and the build's name in the rung's
    environment (TRACELADDER_BUILD), so its provenance records the build."""
    if build is None:
        return overrides
    env = {**overrides.docker_env_vars, **build.changes.docker_env_vars, env_vars.BUILD.name: build.name}
    return overrides.model_copy(
        update={
            "model_args": {**overrides.model_args, **build.changes.model_args},
            "docker_env_vars": env,
            "tools": [*overrides.tools, *build.changes.tools],
        }
    )


class AdaptiveRepeats(TypedDict):
    """A ladder's adaptive repeats as the plan runs them (``repeats: {min, max, target_mde_pct,
    budget_s}``; ``budget_s`` None: no time rule)."""

    min_blocks: int
    max_blocks: int
    target_mde_pct: float
    budget_s: float | None


def adaptive_plan(
    loaded: LoadedLadder, *, lens: str = LADDER_LENSES, repeats: int | None = None
) -> AdaptiveRepeats | None:
    """plan.json's `adaptive` parameters when this run stops early by the ladder's rule: an
    adaptive ladder, its own repeats (a number from the form runs exactly that many blocks) and
    measure blocks (lens `ladder` or `none`). The measure blocks are the plan's first `max_blocks`
    blocks. The critical values are added where the statistics are (stats/sequential.py)."""
    adaptive = loaded.ladder.adaptive
    if adaptive is None or repeats is not None or lens not in (LADDER_LENSES, "none"):
        return None
    return AdaptiveRepeats(
        min_blocks=adaptive.min,
        max_blocks=adaptive.max,
        target_mde_pct=adaptive.target_mde_pct,
        budget_s=adaptive.budget_s,
    )


# What the Slurm job sets on each node (airflow/hooks/slurm.py); a ladder's value would beat it.
_PER_NODE_KEYS = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")


def _slurm_launch_env(loaded: LoadedLadder, env: dict[str, str], model_args: dict[str, ArgValue]) -> dict[str, str]:
    """A Slurm rung's environment: the job gives each node NNODES, NODE_RANK and MASTER_*; the
    ranks per node are the cluster's GPUs per node, or (the CPU proxy) its EP ranks over the nodes."""
    out = {k: v for k, v in env.items() if k not in _PER_NODE_KEYS}
    slurm = loaded.cluster.slurm
    if loaded.cluster.gpus_per_node is not None:
        out["GPUS_PER_NODE"] = str(loaded.cluster.gpus_per_node)
    elif slurm is not None and slurm.workload == "proxy":
        world = int(str(model_args.get("expert_model_parallel_size", 1)))
        out["GPUS_PER_NODE"] = str(max(1, world // loaded.ladder.nnodes))
    return out


def _runner_backend(loaded: LoadedLadder) -> Literal["local", "docker"]:
    """What the runner starts, which the spec's `backend` names: on Slurm the job only dispatches
    it, so the nodes run Primus as the docker path does, or the CPU proxy as the local one does."""
    if loaded.ladder.backend != "slurm":
        return loaded.ladder.backend
    slurm = loaded.cluster.slurm
    return "local" if slurm is not None and slurm.workload == "proxy" else "docker"


def _listing_key(
    selected: list[str], blocks: list[list[tuple[str, str, Purpose, int]]]
) -> Callable[[RungSpec], tuple[int, int, int]]:
    """The plan's listing (and plan.json's `specs`) stays in ladder order, whatever the shuffle:
    measure runs rung by rung, then the lens blocks lens by lens, then the every-rung lens."""
    lenses = ["none"]
    for block in blocks:
        lenses += [lens_name for _, lens_name, p, _ in block if p == "lens" and lens_name not in lenses]

    def key(spec: RungSpec) -> tuple[int, int, int]:
        group = lenses.index(spec.lens) if spec.purpose == "lens" else selected.index(spec.rung)
        return PURPOSES.index(spec.purpose), group, spec.repeat

    return key


def plan_table(specs: list[RungSpec]) -> str:
    """The `traceladder plan` listing in execution order: id, block.position, purpose, parent,
    switch and the additional-context JSON."""
    lines = []
    for spec in execution_order(specs):
        change = f"{spec.switch}={render_arg(spec.value)}" if spec.switch else "(root)"
        lines.append(
            f"{spec.rung_id:<34} block={spec.block}.{spec.position:<3} {spec.purpose:<8} "
            f"parent={spec.parent or '-':<14} {change:<22} host={spec.host}"
        )
        lines.append("    --additional-context " + json.dumps(spec.additional_context(), separators=(",", ":")))
    return "\n".join(lines)
