"""Security: values from the trigger form (rungs, lens, override, and Airflow's run id) never reach
a shell nor a key outside the ladder's prefix. Hostile values are refused with one line naming
the form field; accepted ones only select what the ladder file already holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traceladder.config import LadderConfigError, find_ladder, load_ladder
from traceladder.plan.build import build_plan
from traceladder.runner.backends import docker as docker_backend
from traceladder.runner.backends import local as local_backend
from traceladder.storage.artifacts import check_key, ladder_prefix, rung_prefix, safe_key_part

from .common import assert_one_line, fuzz_settings

pytestmark = [pytest.mark.faults, pytest.mark.fuzz]

HOSTILE = [
    "../../etc/passwd",
    "$(touch /tmp/pwned)",
    "`id`",
    "a;rm -rf /",
    "x\ny",
    "%2e%2e",
    "..",
    "/abs",
    "a b",
    "fusions=true;id",
    "global_batch=4 && id",
    "torch_rank0/../x",
    "\x00",
    "{{ var.value.secret }}",
]
LOADED = {name: load_ladder(find_ladder(name)) for name in ("proxy-local", "deepseek-v4-flash-mi350x")}


def _form(loaded):
    ladder = loaded.ladder
    rung_names = [r.name for r in ladder.rungs]
    lens_names = [str(v) for v in ladder.switches["lens"].values] + ["ladder"]
    overrides = [f"{s}={v}" for s, sw in ladder.switches.items() if s != "lens" for v in sw.values]
    return st.fixed_dictionaries(
        {
            "rungs": st.lists(st.sampled_from(rung_names + HOSTILE) | st.text(max_size=6), max_size=3),
            "lens": st.sampled_from(lens_names + HOSTILE) | st.text(max_size=6),
            "override": st.sampled_from(["", *overrides[:12], *HOSTILE]) | st.text(max_size=8),
            "repeats": st.none() | st.integers(-2, 3),
        }
    )


@fuzz_settings(120)
@given(
    data=st.data(),
    ladder=st.sampled_from(sorted(LOADED)),
    run_id=st.text(min_size=1, max_size=30) | st.sampled_from(HOSTILE),
)
def test_form_values_stay_inside_the_ladder(data: st.DataObject, ladder: str, run_id: str, tmp_path_factory) -> None:
    loaded = LOADED[ladder]
    form = data.draw(_form(loaded))
    try:
        specs = build_plan(
            loaded,
            rungs=form["rungs"] or None,
            lens=form["lens"] or "ladder",
            repeats=form["repeats"],
            override=form["override"] or None,
        )
    except LadderConfigError as exc:
        assert_one_line(str(exc))
        assert exc.field in ("rungs", "lens", "override", "repeats"), str(exc)
        return
    inside = ladder_prefix("traceladder", loaded.ladder.ladder) + "/"
    hostile_used = [h for h in HOSTILE if h in json.dumps(form)]
    workspace = Path("/work/space")
    for spec in specs:
        key = rung_prefix(spec.storage_prefix, spec.ladder, safe_key_part(run_id), spec.rung_id)
        assert check_key(key) == key and key.startswith(inside), key
        backend = local_backend if spec.backend == "local" else docker_backend
        argv, env = backend.command(spec, workspace)
        assert argv[0] not in ("sh", "bash", "/bin/sh", "/bin/bash"), argv  # an argv list, never a shell line
        text = json.dumps([argv, env, json.loads(spec.to_json())])
        for h in hostile_used:
            assert json.dumps(h)[1:-1] not in text, (h, form)
