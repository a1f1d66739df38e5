"""The rules of a ladder that a schema cannot say: the rung tree, the one-switch rule, lenses,
profiler windows, the schedule, and the keys and variables a run passes, held to what its workload
takes (Primus's, from the upstream table; the CPU proxy's own list). Every failure names the field
it is about."""

from __future__ import annotations

from croniter import croniter

from traceladder.config.models import (
    LENS_NAMES,
    LENS_SWITCH,
    LENSES_BY_BACKEND,
    ArgValue,
    Ladder,
    RungOverrides,
    SwitchValue,
)
from traceladder.config import upstream
from traceladder.core.errors import TraceladderError
from traceladder.rung_spec import WARMUP_ARG
from traceladder.workload.proxy_config import PROXY_KEYS

Assignment = dict[str, SwitchValue]
_WARMUP_OWNED = (
    "is set from the ladder's warmup_iters (Primus and the runner skip the same iterations); set that instead"
)
# `config_path` is the runner's (MAD's run.sh takes it as the experiment YAML; the docker backend
# passes it as primus-cli's --config), and `standin_*` keys are the test stand-ins' own.
RUNNER_KEYS = frozenset({"config_path"})
STANDIN_PREFIX = "standin_"
_PRESETS = {"@once", "@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@continuous"}


class LadderConfigError(TraceladderError, ValueError):
    """A ladder or clusters file is wrong; `field` is a dotted path inside the file."""

    def __init__(self, field: str, reason: str, file: str | None = None) -> None:
        self.field, self.reason, self.file = field, reason, file
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = f"{self.file}: " if self.file else ""
        return f"{where}{self.field}: {self.reason}"


def same_value(a: SwitchValue, b: SwitchValue) -> bool:
    # `True == 1` in Python; a switch value keeps its type.
    return type(a) is type(b) and a == b


def find_value(values: dict[SwitchValue, RungOverrides], wanted: SwitchValue) -> SwitchValue | None:
    return next((v for v in values if same_value(v, wanted)), None)


def resolve_assignments(ladder: Ladder) -> dict[str, Assignment]:
    """Each rung's full switch assignment (root = every default), checking the tree as it goes."""
    rungs = {}
    for i, rung in enumerate(ladder.rungs):
        if rung.name in rungs:
            raise LadderConfigError(f"rungs[{i}].name", f"duplicate rung name {rung.name!r}")
        rungs[rung.name] = rung
    roots = [r.name for r in ladder.rungs if r.parent is None]
    if len(roots) != 1:
        raise LadderConfigError("rungs", f"need exactly one root rung (no parent), found {roots or 'none'}")
    root = ladder.rungs[0] if ladder.rungs[0].parent is None else rungs[roots[0]]
    if root.set:
        raise LadderConfigError(f"rungs[{root.name}].set", "the root rung sets no switch")

    defaults: Assignment = {name: sw.default for name, sw in ladder.switches.items()}
    resolved: dict[str, Assignment] = {root.name: defaults}

    def resolve(name: str, path: tuple[str, ...]) -> Assignment:
        if name in resolved:
            return resolved[name]
        rung = rungs[name]
        if rung.parent not in rungs:
            raise LadderConfigError(f"rungs[{name}].parent", f"unknown parent {rung.parent!r}")
        chain = (*path, name)
        if rung.parent in chain:
            cycle = " -> ".join((*chain[chain.index(rung.parent) :], rung.parent))
            raise LadderConfigError(f"rungs[{name}].parent", f"cycle: {cycle}")
        parent = resolve(rung.parent, chain)
        for key in rung.set:
            if key not in ladder.switches:
                raise LadderConfigError(
                    f"rungs[{name}].set.{key}", f"unknown switch; switches are {sorted(ladder.switches)}"
                )
        if LENS_SWITCH in rung.set:
            raise LadderConfigError(f"rungs[{name}].set.{LENS_SWITCH}", "lenses are chosen in `lenses`, not by a rung")
        changed = [k for k, v in rung.set.items() if not same_value(parent[k], v)]
        if len(changed) != 1:
            what = ", ".join(changed) if changed else "none"
            raise LadderConfigError(
                f"rungs[{name}].set",
                f"changes {len(changed)} switches ({what}) against parent {rung.parent!r}; a rung changes exactly one",
            )
        resolved[name] = {**parent, **rung.set}
        return resolved[name]

    for name in rungs:
        resolve(name, ())
    return {name: resolved[name] for name in rungs}


def merge_overrides(base: RungOverrides, layers: list[RungOverrides]) -> RungOverrides:
    """Apply layers in order; a later layer overrides keys an earlier one set."""
    model_args: dict[str, ArgValue] = dict(base.model_args)
    env = dict(base.docker_env_vars)
    tools = list(base.tools)
    for layer in layers:
        model_args.update(layer.model_args)
        env.update(layer.docker_env_vars)
        tools.extend(t for t in layer.tools if t not in tools)
    return RungOverrides(model_args=model_args, docker_env_vars=env, tools=tools)


def overrides_for(ladder: Ladder, assignment: Assignment) -> RungOverrides:
    """Base plus each switch's chosen value, in the order the switches are declared."""
    layers = []
    for name, switch in ladder.switches.items():
        value = find_value(switch.values, assignment[name])
        layers.append(switch.values[value])  # type: ignore[index]  # checked by validate_ladder
    return merge_overrides(ladder.base, layers)


def _as_int(value: ArgValue | None, field: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)  # type: ignore[arg-type]  # a YAML value; TypeError is caught below
    except (TypeError, ValueError):
        raise LadderConfigError(field, f"expected an integer, got {value!r}") from None


def _check_builds(ladder: Ladder) -> None:
    """The build catalog's names are unique and the ladder's `build` is one of them."""
    names = [b.name for b in ladder.builds]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise LadderConfigError(f"builds[{i}].name", f"duplicate build name {name!r}")
    if ladder.build is not None and ladder.build not in names:
        raise LadderConfigError("build", f"{ladder.build!r} is not in the build catalog (builds: {names})")


def _check_warmup_owned(ladder: Ladder) -> None:
    """No overrides the ladder writes (base, a switch value, a build's changes) set Primus's
    warm-up: every run passes it from `warmup_iters` (rung_spec.SpecFields.primus_overrides)."""
    for where, _who, overrides in _override_places(ladder):
        if WARMUP_ARG in overrides.model_args:
            raise LadderConfigError(f"{where}.model_args.{WARMUP_ARG}", _WARMUP_OWNED)


def _override_places(
    ladder: Ladder, assignments: dict[str, Assignment] | None = None
) -> list[tuple[str, str, RungOverrides]]:
    """(field, who runs it, overrides) for every place a ladder writes overrides: its base, each
    switch value (named by the first rung or lens that takes it; "" without `assignments`, before
    they are resolved) and each build's changes."""
    places = [("base", f"rung {ladder.rungs[0].name}", ladder.base)]
    for name, switch in ladder.switches.items():
        for value, overrides in switch.values.items():
            users = [r for r, a in (assignments or {}).items() if same_value(a.get(name, switch.default), value)]
            who = (
                ""
                if assignments is None
                else f"the {value} lens"
                if name == LENS_SWITCH
                else f"rung {users[0]}"
                if users
                else "no rung"
            )
            places.append((f"switches.{name}.values.{value}", who, overrides))
    places += [(f"builds[{i}].changes", f"build {b.name}", b.changes) for i, b in enumerate(ladder.builds)]
    return places


def check_workload_keys(ladder: Ladder, assignments: dict[str, Assignment], runs_primus: bool) -> list[str]:
    """Every `model_args` key a ladder writes is one its workload takes: Primus's (the upstream
    table's `primus_key` rows, docs/upstream.md) when the runner starts Primus, else the CPU
    proxy's own list (workload/proxy_config.py). An unknown key is a LadderConfigError naming the
    key, the rung or lens that runs it and the closest known key. On Primus, an environment variable
    that no file on primus-cli's path reads is a warning naming the config key to set instead; the
    warnings are returned."""
    known = (upstream.primus_keys() if runs_primus else PROXY_KEYS) | RUNNER_KEYS
    workload = "Primus's configs (docs/upstream.md)" if runs_primus else "the CPU proxy (workload/proxy_config.py)"
    warnings = []
    for where, who, overrides in _override_places(ladder, assignments):
        for key in overrides.model_args:
            if key not in known and not key.startswith(STANDIN_PREFIX):
                near = upstream.closest(key, known)
                hint = f"; closest known key: {near}" if near else ""
                raise LadderConfigError(
                    f"{where}.model_args.{key}", f"{key!r} ({who}) is not a key of {workload}{hint}"
                )
        if runs_primus:
            for name in overrides.docker_env_vars:
                advice = upstream.env_advice(name)
                if advice:
                    warnings.append(f"{where}.docker_env_vars.{name}: {advice}")
    return warnings


def validate_ladder(ladder: Ladder) -> dict[str, Assignment]:
    """Check every cross-field rule; returns the rung assignments."""
    _check_builds(ladder)
    _check_warmup_owned(ladder)
    for name, switch in ladder.switches.items():
        if find_value(switch.values, switch.default) is None:
            raise LadderConfigError(
                f"switches.{name}.default", f"{switch.default!r} is not one of its values {list(switch.values)}"
            )
    if ladder.schedule is not None and ladder.schedule not in _PRESETS and not croniter.is_valid(ladder.schedule):
        raise LadderConfigError("schedule", f"not a cron expression or preset: {ladder.schedule!r}")

    assignments = resolve_assignments(ladder)
    for rung in ladder.rungs:
        for key, value in rung.set.items():
            if find_value(ladder.switches[key].values, value) is None:
                raise LadderConfigError(
                    f"rungs[{rung.name}].set.{key}",
                    f"{value!r} is not a value of switch {key!r} ({list(ladder.switches[key].values)})",
                )

    lens_switch = ladder.switches.get(LENS_SWITCH)
    if lens_switch is None:
        raise LadderConfigError(
            f"switches.{LENS_SWITCH}", "a ladder declares the lens switch (at least its `none` value)"
        )
    allowed = LENSES_BY_BACKEND[ladder.backend]
    for value in lens_switch.values:
        if value not in LENS_NAMES:
            raise LadderConfigError(
                f"switches.{LENS_SWITCH}.values.{value}", f"unknown lens; lenses are {list(LENS_NAMES)}"
            )
    if lens_switch.default != "none":
        raise LadderConfigError(f"switches.{LENS_SWITCH}.default", "must be 'none': unprofiled rungs are the reference")
    if ladder.lenses is not None:
        if ladder.lenses.rung is None and [lens_name for lens_name in ladder.lenses.use if lens_name != "none"]:
            raise LadderConfigError("lenses.rung", "lenses.use names lenses but no rung to run them on")
        if ladder.lenses.rung is not None and ladder.lenses.rung not in assignments:
            raise LadderConfigError("lenses.rung", f"unknown rung {ladder.lenses.rung!r}")
        every = ladder.lenses.every_rung
        if every is not None:
            if every == "none" or every not in LENS_NAMES:
                raise LadderConfigError(
                    "lenses.every_rung",
                    "expected a profiling lens, one of "
                    f"{[lens_name for lens_name in LENS_NAMES if lens_name != 'none']}",
                )
            if every not in allowed:
                raise LadderConfigError(
                    "lenses.every_rung",
                    f"lens {every!r} cannot run on the {ladder.backend} backend (it runs {list(allowed)})",
                )
            if find_value(lens_switch.values, every) is None:
                raise LadderConfigError(
                    "lenses.every_rung", f"lens {every!r} has no entry under switches.{LENS_SWITCH}.values"
                )
        for i, lens in enumerate(ladder.lenses.use):
            if lens not in LENS_NAMES:
                raise LadderConfigError(f"lenses.use[{i}]", f"unknown lens {lens!r}; lenses are {list(LENS_NAMES)}")
            if lens not in allowed:
                raise LadderConfigError(
                    f"lenses.use[{i}]",
                    f"lens {lens!r} cannot run on the {ladder.backend} backend (it runs {list(allowed)})",
                )
            if find_value(lens_switch.values, lens) is None:
                raise LadderConfigError(
                    f"lenses.use[{i}]", f"lens {lens!r} has no entry under switches.{LENS_SWITCH}.values"
                )
        if len(set(ladder.lenses.use)) != len(ladder.lenses.use):
            raise LadderConfigError("lenses.use", "duplicate lens")

    for assignment in assignments.values():
        for lens_value in lens_switch.values:
            check_profile_window(
                ladder, {**assignment, LENS_SWITCH: lens_value}, f"switches.{LENS_SWITCH}.values.{lens_value}"
            )
    return assignments


def check_profile_window(ladder: Ladder, assignment: Assignment, field: str) -> tuple[int, int] | None:
    """The torch profiler window must lie inside train_iters (Primus writes the trace when
    iteration `profile_step_end` starts, so train_iters must reach it)."""
    args = overrides_for(ladder, assignment).model_args
    start = _as_int(args.get("profile_step_start"), f"{field}.model_args.profile_step_start")
    end = _as_int(args.get("profile_step_end"), f"{field}.model_args.profile_step_end")
    profiling = bool(args.get("profile")) and str(args.get("profile")).lower() != "false"
    if not profiling:
        return None
    if start is None or end is None:
        raise LadderConfigError(field, "a torch lens sets profile_step_start and profile_step_end")
    train_iters = _as_int(args.get("train_iters"), "base.model_args.train_iters")
    if train_iters is None:
        raise LadderConfigError("base.model_args.train_iters", "required when a lens profiles a window")
    if not 1 <= start < end:
        raise LadderConfigError(f"{field}.model_args", f"profile window [{start}, {end}) is empty or starts before 1")
    if end > train_iters:
        raise LadderConfigError(f"{field}.model_args.profile_step_end", f"{end} is beyond train_iters {train_iters}")
    if start <= ladder.warmup_iters:
        raise LadderConfigError(
            f"{field}.model_args.profile_step_start", f"{start} falls in the {ladder.warmup_iters} warm-up iterations"
        )
    return start, end
