"""The looks of an adaptive ladder's DAG (docs/statistics-adaptive.md), on the built DAG: a look
before each block the rule may skip, which the block's first slots and the next look wait on with
`all_success` (so one skip reaches every later measure block), while blocks after the last look
wait on the join only (lens blocks run whatever the rule decided)."""

from __future__ import annotations

from traceladder.workflows.ladder import build_weekly_dag
from traceladder.config.models import Host


def test_looks_gate_the_blocks_the_rule_may_skip() -> None:
    host = Host(name="localhost", pool="localhost")
    # 4 measure blocks (min 2, max 4: looks before blocks 2 and 3), then a lens block
    dag = build_weekly_dag("looks", None, [host], "", 60, {"localhost": [2, 2, 2, 2, 3]}, checks=[2, 3])
    looks = sorted(t.task_id for t in dag.tasks if t.task_id.endswith(".look"))
    assert looks == ["block_02.look", "block_03.look"]
    first = dag.get_task("block_02.look")
    assert first.upstream_task_ids == {"block_01.done"} and first.trigger_rule == "all_success"
    second = dag.get_task("block_03.look")
    assert second.upstream_task_ids == {"block_02.done", "block_02.look"} and second.trigger_rule == "all_success"
    for k in (2, 3):
        head = dag.get_task(f"block_{k:02d}.rungs_localhost_00")
        assert head.upstream_task_ids >= {f"block_{k:02d}.look", f"block_{k - 1:02d}.done"}
        assert head.trigger_rule == "all_success"  # a skipped look skips it, and its chain after it
        tail = dag.get_task(f"block_{k:02d}.rungs_localhost_01")
        # the look too: a stop skips the whole chain at once (none_skipped), not a slot a pass
        assert tail.upstream_task_ids - {"plan"} == {f"block_{k:02d}.rungs_localhost_00", f"block_{k:02d}.look"}
        assert tail.trigger_rule == "none_skipped"
        assert dag.get_task(f"block_{k:02d}.done").trigger_rule == "all_done"  # the block ends, skipped or not
    lens_head = dag.get_task("block_04.rungs_localhost_00")
    assert "block_03.look" not in lens_head.upstream_task_ids and "block_03.done" in lens_head.upstream_task_ids
    assert "block_01.look" not in {t.task_id for t in dag.tasks}  # no look before min


def test_fixed_ladders_get_no_looks() -> None:
    dag = build_weekly_dag("fixed", None, [Host(name="localhost", pool="localhost")], "", 60, {"localhost": [2, 2]})
    assert not [t for t in dag.tasks if t.task_id.endswith(".look")]
