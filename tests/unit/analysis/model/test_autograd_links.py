"""Forward -> backward links (TraceLens ``link_all_fwd_bwd_events``), built with numpy,
against the rule walked group by group, on random traces: several threads, equal start
times, groups without a backward event, backward events on the forward thread, ops
without a ``Sequence number``, and odd values (null, beyond int64) that take the slow path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from traceladder.analysis.model import autograd_links as al
from traceladder.analysis.analyzers.trace import read_trace
from traceladder.analysis.model.op_args import op_args

EVAL = "autograd::engine::evaluate_function: MulBackward0"


def _trace(path: Path, seed: int, odd: bool) -> Path:
    rng = np.random.default_rng(seed)
    ev = []
    for i in range(300):
        is_bwd = rng.random() < 0.25
        args: dict = {"External id": i}
        r = rng.random()
        if r < 0.85:
            args["Sequence number"] = int(rng.integers(0, 40))
        elif odd and r < 0.9:
            args["Sequence number"] = None if r < 0.87 else 2**70
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": EVAL if is_bwd else str(rng.choice(["aten::mul", "aten::add", "aten::mm"])),
                "pid": 1,
                "tid": int(rng.choice([1, 2, 3])) if not is_bwd else int(rng.choice([2, 3])),
                "ts": float(rng.integers(0, 60)),  # many equal starts
                "dur": 1.0,
                "args": args,
            }
        )
    p = path / f"t{seed}{'odd' if odd else ''}.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("odd", [False, True])
def test_links_follow_the_rule(tmp_path, seed, odd):
    t = read_trace(_trace(tmp_path, seed, odd))
    got = al._build(t)
    oa = op_args(t)
    assert bool(oa.seq_slow) == odd
    seq = dict(zip(oa.seq_events.tolist(), oa.seq_values.tolist()))
    seq.update(oa.seq_slow)
    is_eval = np.asarray([n == EVAL for n in t.names])[t.name]
    want = al._by_rule(t, is_eval, sorted(seq.items()))
    assert len(want) > 5  # a real set of links
    assert got == want
    assert list(got) == list(want)  # same order too
