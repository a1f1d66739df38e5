"""One schema for the rung spec (rung_spec.SpecFields): the planner's pydantic RungSpec and the
runner's standard-library RunnerSpec take their fields from it, write the same JSON and refuse the
same specs."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

import pytest
from pydantic import ValidationError

from traceladder.config import find_ladder, load_ladder
from traceladder.core.documents import spec_purpose
from traceladder.plan.build import RungSpec, build_plan
from traceladder.rung_spec import RunnerSpec, SpecError, SpecFields, json_name


def _doc() -> dict[str, Any]:
    spec = next(s for s in build_plan(load_ladder(find_ladder("proxy-local"))) if s.profile_window)
    return json.loads(spec.to_json())


def test_both_classes_have_the_schemas_fields_in_its_order() -> None:
    names = [f.name for f in fields(SpecFields)]
    assert list(RungSpec.model_fields) == names
    assert [f.name for f in fields(RunnerSpec)] == names
    doc = _doc()
    assert list(doc) == [json_name(n) for n in names] and "schema" in doc  # the JSON key order


def test_both_read_and_write_the_same_bytes() -> None:
    text = json.dumps(_doc(), separators=(",", ":"), ensure_ascii=False)
    assert RungSpec.from_json(text).to_json() == RunnerSpec.from_json(text).to_json() == text


BAD: dict[str, Any] = {
    "extra_key": {"extra_key": 1},
    "timeout_s": {"timeout_s": 0},
    "backend": {"backend": "k8s"},
    "purpose": {"purpose": "warmup"},
    "rung_id": {"rung_id": "/"},
    "warmup_iters": {"warmup_iters": -1},
    "repeat": {"repeat": [0]},
    "docker_env_vars": {"docker_env_vars": {"A=B": "1"}},
    "model_args": {"model_args": {"": 1}},
    "lens": {"lens": "x\x00"},
    "ladder": None,  # missing
}


@pytest.mark.parametrize("field", sorted(BAD))
def test_both_refuse_the_same_specs_naming_the_field(field: str) -> None:
    doc = _doc()
    if BAD[field] is None:
        del doc[field]
    else:
        doc.update(BAD[field])
    text = json.dumps(doc)
    with pytest.raises(SpecError) as runner_err:
        RunnerSpec.from_json(text)
    assert str(runner_err.value).startswith(f"{field}"), runner_err.value
    with pytest.raises(ValidationError) as plan_err:
        RungSpec.from_json(text)
    assert field in str(plan_err.value), plan_err.value


def test_specs_written_before_blocks_read_as_block_zero_with_the_purpose_their_lens_implies() -> None:
    # one rule for a spec without a purpose (core.documents.spec_purpose): measure unprofiled, else lens
    profiled = {k: v for k, v in _doc().items() if k not in ("block", "position", "purpose")}
    plain = {**profiled, "lens": "none", "profile_window": None}
    for doc, purpose in ((plain, "measure"), (profiled, "lens")):
        assert spec_purpose(doc) == purpose
        text = json.dumps(doc)
        for spec in (RunnerSpec.from_json(text), RungSpec.from_json(text), RungSpec.model_validate(doc)):
            assert (spec.block, spec.position, spec.purpose, spec.schema_) == (0, 0, purpose, 1)


def test_to_dict_is_the_json_to_json_writes() -> None:
    spec = next(s for s in build_plan(load_ladder(find_ladder("proxy-local"))) if s.profile_window)
    runner = RunnerSpec.from_json(spec.to_json())
    assert spec.to_dict() == runner.to_dict() == json.loads(spec.to_json())
    assert json.dumps(spec.to_dict(), separators=(",", ":"), ensure_ascii=False) == spec.to_json()
