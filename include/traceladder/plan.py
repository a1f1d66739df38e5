"""Ladder → plan: one `RungSpec` per (rung, lens, repeat).

A rung spec is the whole contract between the planner and the runner: it is JSON, it names what
madengine's `--additional-context` would be, and the runner executes it the same way on both
backends.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from traceladder.config.loader import LoadedLadder
from traceladder.config.models import LENS_SWITCH, LENSES_BY_BACKEND, ArgValue, Tool
from traceladder.config.validate import (
    LadderConfigError,
    check_profile_window,
    find_value,
    settings_for,
)
from traceladder.rung_spec import render_arg, render_overrides

LADDER_LENSES = "ladder"  # the Params value meaning "the lenses the ladder file names"


class RungSpec(BaseModel):
    """Everything one run of one rung needs; serialises to the JSON the runner reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: int = Field(default=1, alias="schema")
    ladder: str
    rung: str
    parent: str | None
    switch: str | None  # the one switch this rung changed against its parent
    value: bool | int | str | None
    lens: str
    repeat: int
    rung_id: str
    backend: str
    host: str
    pool: str
    image: str
    model_tag: str
    model_args: dict[str, ArgValue]
    docker_env_vars: dict[str, str]
    tools: list[Tool]
    train_iters: int
    warmup_iters: int
    profile_window: tuple[int, int] | None
    timeout_s: int
    config_hash: str
    engine: str
    storage_prefix: str

    @property
    def profiled(self) -> bool:
        return self.lens != "none"

    def primus_args(self) -> list[str]:
        """Primus command-line overrides, `--key value`, as madengine's run.sh passes them."""
        return render_overrides(self.model_args)

    def additional_context(self) -> dict[str, Any]:
        """madengine's `--additional-context` for this rung."""
        context: dict[str, Any] = {
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


def rung_id(rung: str, lens: str, repeat: int) -> str:
    return f"{rung}.{lens}.r{repeat}"


def parse_override(text: str) -> tuple[str, str]:
    switch, sep, value = text.partition("=")
    if not sep or not switch.strip() or not value.strip():
        raise LadderConfigError("override", f"expected SWITCH=VALUE, got {text!r}")
    return switch.strip(), value.strip()


def _coerce_override(loaded: LoadedLadder, switch: str, text: str) -> bool | int | str:
    ladder = loaded.ladder
    if switch not in ladder.switches or switch == LENS_SWITCH:
        raise LadderConfigError("override", f"unknown switch {switch!r}; switches are {sorted(k for k in ladder.switches if k != LENS_SWITCH)}")
    for value in ladder.switches[switch].values:
        if str(value).lower() == text.lower():
            return value
    raise LadderConfigError("override", f"{text!r} is not a value of switch {switch!r} ({list(ladder.switches[switch].values)})")


def build_plan(
    loaded: LoadedLadder,
    *,
    rungs: list[str] | None = None,
    lens: str = LADDER_LENSES,
    repeats: int | None = None,
    override: str | None = None,
) -> list[RungSpec]:
    """Expand a validated ladder into rung specs; the arguments are the trigger form's Params.

    - rungs: a subset of rung names (default all);
    - lens: `ladder` runs every rung unprofiled plus the ladder's lenses on its lens rung; any lens
      name runs each selected rung with that lens only;
    - repeats: replaces the ladder's repeat count;
    - override: `switch=value` applied on top of every rung (a what-if run).
    """
    ladder = loaded.ladder
    names = [r.name for r in ladder.rungs]
    selected = rungs or names
    for name in selected:
        if name not in names:
            raise LadderConfigError("rungs", f"unknown rung {name!r}; rungs are {names}")
    n_repeats = repeats if repeats is not None else ladder.repeats
    if n_repeats < 1:
        raise LadderConfigError("repeats", f"must be at least 1, got {n_repeats}")
    extra = {}
    if override:
        switch, text = parse_override(override)
        extra[switch] = _coerce_override(loaded, switch, text)

    runs: list[tuple[str, str, int]] = []  # (rung, lens, repeats)
    if lens == LADDER_LENSES:
        runs += [(name, "none", n_repeats) for name in selected]
        if ladder.lenses is not None and ladder.lenses.rung in selected:
            lens_repeats = repeats if repeats is not None else (ladder.lenses.repeats or ladder.repeats)
            runs += [(ladder.lenses.rung, lens, lens_repeats) for lens in ladder.lenses.use if lens != "none"]
    else:
        allowed = LENSES_BY_BACKEND[ladder.backend]
        if lens not in allowed:
            raise LadderConfigError("lens", f"{lens!r} cannot run on the {ladder.backend} backend (it runs {list(allowed)})")
        if find_value(ladder.switches[LENS_SWITCH].values, lens) is None:
            raise LadderConfigError("lens", f"lens {lens!r} has no entry under switches.{LENS_SWITCH}.values")
        runs += [(name, lens, n_repeats) for name in selected]

    rung_by_name = {r.name: r for r in ladder.rungs}
    hosts = loaded.cluster.hosts
    specs: list[RungSpec] = []
    for rung_name, lens_name, count in runs:
        rung = rung_by_name[rung_name]
        assignment = {**loaded.assignments[rung_name], **extra, LENS_SWITCH: lens_name}
        settings = settings_for(ladder, assignment)
        window = check_profile_window(ladder, assignment, f"switches.{LENS_SWITCH}.values.{lens_name}")
        changed = next(iter(rung.set.items()), (None, None))
        train_iters = int(settings.model_args.get("train_iters", 10))  # type: ignore[arg-type]
        for k in range(count):
            host = hosts[len(specs) % len(hosts)]
            specs.append(
                RungSpec(
                    ladder=ladder.ladder,
                    rung=rung_name,
                    parent=rung.parent,
                    switch=changed[0],
                    value=changed[1],
                    lens=lens_name,
                    repeat=k,
                    rung_id=rung_id(rung_name, lens_name, k),
                    backend=ladder.backend,
                    host=host.name,
                    pool=host.pool,
                    image=loaded.cluster.runner_image or ladder.image,
                    model_tag=ladder.model_tag,
                    model_args=settings.model_args,
                    docker_env_vars={**settings.docker_env_vars, **loaded.cluster.launch_env()}
                    if ladder.backend == "docker" else settings.docker_env_vars,
                    tools=settings.tools,
                    train_iters=train_iters,
                    warmup_iters=ladder.warmup_iters,
                    profile_window=window,
                    timeout_s=ladder.timeout_s,
                    config_hash=loaded.config_hash,
                    engine=ladder.engine,
                    storage_prefix=loaded.cluster.storage.prefix,
                )
            )
    return specs


def plan_table(specs: list[RungSpec]) -> str:
    """The `traceladder plan` listing: id, parent, switch and the additional-context JSON."""
    lines = []
    for spec in specs:
        change = f"{spec.switch}={render_arg(spec.value)}" if spec.switch else "(root)"
        lines.append(f"{spec.rung_id:<28} parent={spec.parent or '-':<14} {change:<22} host={spec.host}")
        lines.append("    --additional-context " + json.dumps(spec.additional_context(), separators=(",", ":")))
    return "\n".join(lines)
