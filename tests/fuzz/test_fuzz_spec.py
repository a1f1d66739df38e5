"""Rung spec JSON (what the runner container gets) fuzzed from the shipped ladders' real specs.

A spec either parses into one the runner can start (its key prefix and command build, with no NUL
byte or ``=`` where the OS refuses them), or `traceladder run-rung --spec FILE` exits 2 with one
line `<file>: <field>: <reason>` before anything runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traceladder.rung_spec import RunnerSpec, SpecError

from .common import cli_contract, fuzz_settings

pytestmark = [pytest.mark.faults, pytest.mark.fuzz]


def _real_specs() -> list[dict[str, Any]]:
    from traceladder.config import find_ladder, load_ladder
    from traceladder.plan.build import build_plan

    out = []
    for name in ("proxy-local", "deepseek-v4-flash-mi350x"):
        specs = build_plan(load_ladder(find_ladder(name)))
        out += [json.loads(s.to_json()) for s in specs[:: max(1, len(specs) // 6)]]
    return out


REAL = _real_specs()
JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=False)
    | st.text(max_size=10)
    | st.sampled_from(
        ["", "..", "a/b", "x\x00y", "K=V", "docker", "local", "none", "rocprofv3", "$(touch /tmp/pwned)"]
    ),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=5,
)


@st.composite
def mutated_spec(draw: st.DrawFn) -> dict[str, Any]:
    spec = json.loads(json.dumps(draw(st.sampled_from(REAL))))
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(sorted(spec) + ["extra_key"]))
        op = draw(st.sampled_from(["delete", "replace", "inner"]))
        if op == "delete":
            spec.pop(key, None)
        elif op == "inner" and isinstance(spec.get(key), dict) and spec[key]:
            inner = draw(st.sampled_from(sorted(spec[key])))
            spec[key][draw(st.sampled_from([inner, "", "A=B", "x\x00"]))] = draw(JSONISH)
        else:
            spec[key] = draw(JSONISH)
    return spec


def _runnable(spec: RunnerSpec, tmp: Path) -> None:
    """What run_rung does with a spec before the workload starts, without starting it."""
    from traceladder.runner.rung import _BACKENDS
    from traceladder.storage.artifacts import rung_prefix

    rung_prefix(spec.storage_prefix, spec.ladder, "manual", spec.rung_id)
    argv, env = _BACKENDS[spec.backend].command(spec, tmp)
    assert all("\x00" not in a for a in argv), argv
    assert all(k and "=" not in k and "\x00" not in k + v for k, v in env.items()), env


def _contract(tmp: Path, text: str) -> None:
    path = tmp / "spec.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        spec = RunnerSpec.from_json(path.read_bytes())
    except SpecError:
        assert cli_contract(["run-rung", "--spec", str(path), "--out", str(tmp / "out")], str(path)) == 2
        assert not (tmp / "out").exists(), "a refused spec must not start anything"
        return
    _runnable(spec, tmp)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-spec")


@fuzz_settings(150)
@given(spec=mutated_spec())
def test_mutated_specs(tmp: Path, spec: dict[str, Any]) -> None:
    _contract(tmp, json.dumps(spec))


@fuzz_settings(60)
@given(text=st.text(max_size=40) | st.sampled_from(["[]", "null", "{", '{"schema": 1}', "1e999", '"x"']))
def test_not_a_spec(tmp: Path, text: str) -> None:
    _contract(tmp, text)


# Cases the fuzzer found (each crashed the runner after it had started, or got past the parser):
# an unknown backend was a KeyError, an empty rung_id an error mid-run, a NUL byte or `=` in an
# environment name a ValueError from Popen.
FOUND = {
    "backend": {"backend": "0"},
    "rung_id": {"rung_id": ""},
    "storage_prefix": {"storage_prefix": "//"},
    "docker_env_vars": {"docker_env_vars": {"A=B": "1"}},
    "model_args.": {"model_args": {"seq_length": "5\x00"}},
    "warmup_iters": {"warmup_iters": -1},
}


@pytest.mark.parametrize("field", sorted(FOUND))
def test_found_cases_exit_2_naming_the_field(tmp: Path, field: str) -> None:
    path = tmp / f"found-{len(field)}.json"
    path.write_text(json.dumps({**REAL[0], **FOUND[field]}))
    from .common import run_cli

    code, _out, err = run_cli(["run-rung", "--spec", str(path), "--out", str(tmp / "never")])
    assert code == 2 and err.startswith(f"{path}: {field}"), err
    assert not (tmp / "never").exists()
