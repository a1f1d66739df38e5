"""Ladder YAML fuzzed as structured mutations of the shipped ladder files (and raw byte edits):
`traceladder validate` and `traceladder plan` either work or exit 2 with `<file>: <field>: <reason>`."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from traceladder.config.loader import CONFIG_DIR, Replace, _LadderLoader

from .common import cli_contract, fuzz_settings

pytestmark = [pytest.mark.faults, pytest.mark.fuzz]

LADDERS = CONFIG_DIR / "ladders"
SEED = LADDERS / "deepseek-v4-flash-mi350x.yaml"
CHILD = LADDERS / "proxy-local.yaml"


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(Replace, lambda d, data: d.represent_mapping("!replace", dict(data)))


def _load(path: Path) -> Any:
    return yaml.load(path.read_bytes(), Loader=_LadderLoader)  # noqa: S506 - the loader's own SafeLoader


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["baseline", "lens", "none", "torch_rank0", "0 3 * * 1", "..", "a/../b", "$(id)", "", "local"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3),
        st.dictionaries(st.text(max_size=8) | st.booleans() | st.integers(0, 9), kids, max_size=3),
    ),
    max_leaves=6,
)


def _paths(node: Any, here: tuple = ()) -> list[tuple]:
    out = [here]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, here + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, here + (i,))
    return out


def _parent(tree: Any, path: tuple) -> Any:
    for part in path[:-1]:
        tree = tree[part]
    return tree


@st.composite
def mutated(draw: st.DrawFn, original: Any) -> Any:
    tree = copy.deepcopy(original)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(tree) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        holder, last = _parent(tree, path), path[-1]
        op = draw(st.sampled_from(["delete", "replace", "rename", "duplicate", "swap_type"]))
        if op == "delete":
            del holder[last]
        elif op == "replace":
            holder[last] = draw(VALUES)
        elif op == "rename" and isinstance(holder, dict):
            new = draw(
                st.text(max_size=10) | st.sampled_from(["parent", "set", "name", "default", "values", "rung", "use"])
            )
            holder[new] = holder.pop(last)
        elif op == "duplicate":
            if isinstance(holder, list):
                holder.append(copy.deepcopy(holder[last]))
            else:
                holder[f"{last}_2"] = copy.deepcopy(holder[last])
        else:  # the same value as another YAML type: 1 -> "1", true -> "true", [x] -> x
            v = holder[last]
            holder[last] = str(v) if not isinstance(v, (dict, list)) else (v[0] if isinstance(v, list) and v else [v])
    return tree


def _check(tmp: Path, name: str, text: bytes | str) -> None:
    path = tmp / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    if cli_contract(["validate", str(path)], str(path)) == 0:
        cli_contract(["plan", str(path), "--json"], str(path))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("fuzz-ladder")
    shutil.copy(SEED, tmp / SEED.name)  # the child's `extends` target, unmutated
    return tmp


@fuzz_settings(30)
@given(tree=mutated(_load(SEED)))
def test_seed_ladder_mutations(workdir: Path, tree: Any) -> None:
    _check(workdir, "mutant-seed.yaml", yaml.dump(tree, Dumper=_Dumper, allow_unicode=True))


@fuzz_settings(30)
@given(tree=mutated(_load(CHILD)))
def test_extending_ladder_mutations(workdir: Path, tree: Any) -> None:
    _check(workdir, "mutant-child.yaml", yaml.dump(tree, Dumper=_Dumper, allow_unicode=True))


@fuzz_settings(30)
@given(data=st.data())
def test_raw_byte_edits(workdir: Path, data: st.DataObject) -> None:
    raw = bytearray(CHILD.read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw)))
        edit = data.draw(st.sampled_from(["insert", "delete", "flip"]))
        if edit == "insert":
            raw[at:at] = data.draw(
                st.binary(min_size=1, max_size=4)
                | st.sampled_from([b":", b"- ", b"\t", b"{", b"!!python/object ", b"&a ", b"*a", b"\n  "])
            )
        elif edit == "delete":
            del raw[at : at + data.draw(st.integers(1, 40))]
        elif at < len(raw):
            raw[at] ^= data.draw(st.integers(1, 255))
    _check(workdir, "mutant-bytes.yaml", bytes(raw))
