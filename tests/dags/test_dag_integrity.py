"""Every DAG file imports cleanly, without heavy imports, and every rung task is in its host's
pool on the serialized DAG (what the scheduler sees)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from traceladder.config import load_clusters

DAGS = Path(__file__).resolve().parents[2] / "dags"
HEAVY = ("torch", "pandas", "matplotlib", "scipy", "numpy")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_dag_files_import_without_errors(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert {
        "traceladder-proxy-local",
        "traceladder-deepseek-v4-flash-mi350x",
        "traceladder-trigger",
        "traceladder-retention",
    } <= set(dagbag.dag_ids)


@pytest.mark.parametrize("dag_file", sorted(DAGS.glob("*.py")), ids=lambda p: p.name)
def test_dag_file_has_no_heavy_imports(dag_file: Path) -> None:
    code = (
        "import runpy, sys; runpy.run_path(sys.argv[1]); "
        f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(dag_file)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1:] in ([], [""]), f"{dag_file.name} imports {proc.stdout.strip()}"


def test_weekly_dags_follow_their_ladder(dagbag) -> None:
    dag = dagbag.dags["traceladder-deepseek-v4-flash-mi350x"]
    assert dag.catchup is False and dag.max_active_runs == 1
    assert dag.schedule == "0 3 * * 1"
    assert {t.task_id for t in dag.tasks} >= {
        "plan",
        "collect_traces",
        "analyze",
        "summary",
        "publish",
        "ladder_status",
    }
    summary = dag.get_task("summary")
    assert summary.trigger_rule == "all_done" and dag.get_task("collect_traces").trigger_rule == "all_done"


SLOT = re.compile(r"^block_(\d+)\.rungs_(.+)_(\d+)$")


def test_rung_tasks_use_their_hosts_pool_when_serialized(dagbag) -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    pools = {h.name: h.pool for c in load_clusters().clusters.values() for h in c.hosts}
    checked = 0
    for dag_id, dag in dagbag.dags.items():
        restored = DagSerialization.from_dict(DagSerialization.to_dict(dag))
        for task in restored.tasks:
            if match := SLOT.match(task.task_id):
                assert task.pool == pools[match.group(2)], f"{dag_id}.{task.task_id} in pool {task.pool}"
                checked += 1
    assert checked >= 3


def slots_by_block(dag) -> dict[int, list]:
    blocks: dict[int, list] = {}
    for task in dag.tasks:
        if match := SLOT.match(task.task_id):
            blocks.setdefault(int(match.group(1)), []).append((int(match.group(3)), task))
    return {k: [t for _, t in sorted(v, key=lambda x: x[0])] for k, v in sorted(blocks.items())}


def test_blocks_run_one_after_the_other_in_a_fixed_order(dagbag) -> None:
    """The order is structural: slot j+1 of a block waits for slot j (after a success or a failure
    alike; an empty slot skips the rest of its chain), each block ends in a `done` join that waits
    for all of its chains whatever happened, and every first slot of block k+1 waits for it."""
    from traceladder.plan.grid import weekly_grid
    from traceladder.config import find_ladder, load_ladder

    dag = dagbag.dags["traceladder-proxy-local"]
    blocks = slots_by_block(dag)
    ladder = load_ladder(find_ladder("proxy-local")).ladder
    grid = weekly_grid(load_ladder(find_ladder("proxy-local")))
    planned = ladder.planned_blocks
    assert [len(b) for b in blocks.values()] == grid["localhost"] == [10] * planned + [3, 3, 3, 10]
    previous_join = None
    for k, slots in blocks.items():
        # Blocks min..max-1 of proxy-local's adaptive repeats may be skipped: their slots also
        # wait on the block's look (docs/statistics-adaptive.md).
        look = f"block_{k:02d}.look"
        gate = {look} if look in dag.task_dict else set()
        for j, slot in enumerate(slots):
            upstream = set(slot.upstream_task_ids) - {"plan"}
            if j:
                assert upstream == {slots[j - 1].task_id} | gate and slot.trigger_rule == "none_skipped"
            else:
                assert upstream == ({previous_join} if previous_join else set()) | gate
                assert slot.trigger_rule == "all_success"
            assert "plan" in slot.upstream_task_ids  # its spec is the plan's XCom for the slot
        join = dag.get_task(f"block_{k:02d}.done")
        assert join.upstream_task_ids == {slots[-1].task_id} and join.trigger_rule == "all_done"
        previous_join = join.task_id
    assert dag.get_task("collect_traces").upstream_task_ids == {previous_join}
    adaptive = ladder.adaptive
    assert adaptive is not None
    looks = [f"block_{k:02d}.look" for k in range(adaptive.min, adaptive.max)]
    assert sorted(t for t in dag.task_dict if t.endswith(".look")) == looks


def test_trigger_dag_has_room_for_the_largest_form_plan(dagbag) -> None:
    from traceladder.plan.grid import TRIGGER_MAX_REPEATS, fill_slots, trigger_grid
    from traceladder.workflows.discovery import discover
    from traceladder.config import find_ladder, load_ladder
    from traceladder.plan.build import build_plan

    found = discover()
    grid = trigger_grid(found.ladders, [h.name for h in found.all_hosts])
    blocks = slots_by_block(dagbag.dags["traceladder-trigger"])
    most = max([TRIGGER_MAX_REPEATS] + [loaded.ladder.planned_blocks for loaded in found.ladders])
    assert len(blocks) == len(grid["localhost"]) == 2 * most + 1
    for name in ("proxy-local", "deepseek-v4-flash-mi350x"):
        specs = build_plan(load_ladder(find_ladder(name)), repeats=TRIGGER_MAX_REPEATS, seed=1)
        slots = fill_slots([json.loads(s.to_json()) for s in specs], grid)
        assert sum(len(v) for v in slots.values()) == len(specs)


def test_trigger_dag_params_form(dagbag) -> None:
    dag = dagbag.dags["traceladder-trigger"]
    params = dag.params
    assert set(params.keys()) == {"ladder", "rungs", "lens", "repeats", "override", "seed"}
    assert "proxy-local" in params.get_param("ladder").schema["enum"]
    assert "rocprofv3" in params.get_param("lens").schema["enum"]
    assert dag.schedule is None


def test_every_trigger_task_gets_the_forms_params_at_run_time(dagbag) -> None:
    """The Params are set on the DAG after its tasks (parse time, #53): what a task sees at run
    time is still the form's defaults under the run's conf, validated, for the plan task and a slot."""
    from airflow.sdk.definitions.param import process_params
    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.dags["traceladder-trigger"]
    conf = {"ladder": "proxy-aa", "repeats": 2}
    for task_id in ("plan", "block_00.rungs_localhost_00"):
        seen = process_params(dag, dag.get_task(task_id), conf, suppress_exception=False)
        assert seen == {"ladder": "proxy-aa", "rungs": [], "lens": "ladder", "repeats": 2, "override": "", "seed": None}
    with pytest.raises(ParamValidationError):
        process_params(dag, dag.get_task("plan"), {"repeats": 0}, suppress_exception=False)
