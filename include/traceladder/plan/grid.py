"""The structural run order of a ladder DAG: a grid of rung slots.

The scheduler's order among mapped task instances is no contract, so the DAG does not map over
the runs of a block. It has one task per slot instead: slot j of host h in block k runs the j-th
run (by position) that the plan put on h in block k, or is skipped when there is none. Slots of a
host inside a block are chained, and every last slot of block k is upstream of every first slot
of block k+1, all with trigger rule ALL_DONE: a block starts when the one before it has finished,
whatever its outcome, and the order inside it is the plan's. One host still runs one rung at a
time, through its pool.

A weekly DAG knows its ladder at parse time, so its grid is the default plan's exact shape. The
trigger DAG does not (the ladder is a Param), so its grid is sized, host by host, for the largest
plan any offered ladder on that host can make from the form: every block as wide as the widest
block, and as many blocks as `repeats` = `TRIGGER_MAX_REPEATS` (or the ladder's own default, an
adaptive ladder's `max`) needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceladder.config.loader import LoadedLadder
    from traceladder.plan.build import RungSpec

from traceladder.core.env_vars import TRIGGER_MAX_REPEATS
from traceladder.core.errors import TraceladderError

# host -> number of slots in each block (block k has grid[host][k] slots on that host)
Grid = dict[str, list[int]]


class PlanDoesNotFit(TraceladderError, ValueError):
    """The plan needs more blocks or slots than the DAG was built with (one line)."""


def slot_key(host: str, block: int, slot: int) -> str:
    """The plan task's XCom key for one slot (a list of zero or one spec)."""
    return f"{host}/b{block:02d}/s{slot:02d}"


def slot_task_ids(host: str, block: int, slot: int) -> tuple[str, str]:
    """(task group id, task id inside it) of one slot."""
    return f"block_{block:02d}", f"rungs_{host}_{slot:02d}"


def host_counts(specs: list[RungSpec]) -> Grid:
    """How many runs each host has in each block of a plan."""
    n_blocks = 1 + max((s.block for s in specs), default=-1)
    counts: Grid = {}
    for spec in specs:
        counts.setdefault(spec.host, [0] * n_blocks)[spec.block] += 1
    return counts


# (id of the LoadedLadder, repeats) -> (that LoadedLadder, kept so that its id is not reused; shape)
_shapes: dict[tuple[int, int | None], tuple[LoadedLadder, Grid]] = {}


def _plan_shape(loaded: LoadedLadder, repeats: int | None) -> Grid:
    """host_counts of the ladder's plan at `repeats` (seed 0: the shape does not depend on it),
    once per loaded ladder: both DAG files ask for the default plan's of the ladders that
    `airflow.discovery.discover()` read once."""
    from traceladder.plan.build import build_plan

    key = (id(loaded), repeats)
    if key not in _shapes:
        _shapes[key] = (loaded, host_counts(build_plan(loaded, repeats=repeats, seed=0)))
    return {host: list(sizes) for host, sizes in _shapes[key][1].items()}


def weekly_grid(loaded: LoadedLadder) -> Grid:
    """The exact shape of the ladder's default plan (the shape does not depend on the seed)."""
    grid = _plan_shape(loaded, None)
    for host in loaded.cluster.hosts:
        grid.setdefault(host.name, [0] * max((len(v) for v in grid.values()), default=0))
    return grid


def trigger_grid(ladders: list[LoadedLadder], hosts: list[str]) -> Grid:
    """A rectangle per host: the most blocks and the widest block that any offered ladder on that
    host can plan from the form (lens `ladder` at its default or at TRIGGER_MAX_REPEATS repeats; a
    single lens makes no more blocks than that). A host's slots only ever take its own ladders'
    runs, so a host no ladder uses has none, and one that runs only short ladders has few blocks."""
    n_blocks: dict[str, int] = {h: 0 for h in hosts}
    width: dict[str, int] = {h: 0 for h in hosts}
    for loaded in ladders:
        for repeats in (None, max(TRIGGER_MAX_REPEATS, loaded.ladder.planned_blocks)):
            counts = _plan_shape(loaded, repeats)
            for host, per_block in counts.items():
                n_blocks[host] = max(n_blocks.get(host, 0), len(per_block))
                width[host] = max(width.get(host, 0), *per_block)
    return {host: [w] * n_blocks[host] for host, w in width.items()}


def check_blocks(ladders: list[LoadedLadder]) -> list[int]:
    """The blocks that an adaptive ladder's stopping rule may skip, so the DAG checks before each:
    blocks min..max-1 (0-based) of every adaptive ladder offered."""
    blocks: set[int] = set()
    for loaded in ladders:
        adaptive = loaded.ladder.adaptive
        if adaptive is not None:
            blocks.update(range(adaptive.min, adaptive.max))
    return sorted(blocks)


def fill_slots(specs: list[dict[str, Any]], grid: Grid) -> dict[str, list[dict[str, Any]]]:
    """Every slot's XCom value: `[spec]` or `[]` (an empty expansion, skipped). Raises
    PlanDoesNotFit when the plan needs a slot the DAG does not have."""
    slots: dict[str, list[dict[str, Any]]] = {
        slot_key(host, k, j): [] for host, sizes in grid.items() for k, n in enumerate(sizes) for j in range(n)
    }
    taken: dict[tuple[str, int], int] = {}
    for spec in sorted(specs, key=lambda s: (s["block"], s["position"])):
        host, block = spec["host"], spec["block"]
        j = taken.get((host, block), 0)
        taken[(host, block)] = j + 1
        key = slot_key(host, block, j)
        if key not in slots:
            sizes = grid.get(host, [])
            have = sizes[block] if block < len(sizes) else 0
            raise PlanDoesNotFit(
                f"plan: block {block} needs {j + 1}+ slots on host {host!r} but this DAG has {have} "
                f"(and {len(sizes)} blocks); ask for fewer repeats or rungs"
            )
        slots[key] = [spec]
    return slots
