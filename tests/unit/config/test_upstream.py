"""The upstream-facts table (docs/upstream.md): it loads, covers every kind with pinned commits, and
holds what the shipped MI350X ladder and the runner pass to Primus, rocprofv3, rtl and madengine."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from traceladder.config import load_ladder, upstream
from traceladder.config.loader import CONFIG_DIR
from traceladder.rung_spec import WARMUP_ARG
from traceladder.runner.backends.docker import lens_wrapper

MI350X = CONFIG_DIR / "ladders" / "deepseek-v4-flash-mi350x.yaml"
# The runner's own key, not Primus's: MAD's run.sh takes `--config_path` as the experiment YAML, and
# the docker backend pops it and passes it as `primus-cli ... --config` (runner/backends/docker.py).
RUNNER_SIDE_KEYS = {"config_path"}


def _ladder_parts() -> tuple[set[str], set[str], set[str]]:
    """The MI350X ladder's model_args keys, docker_env_vars names and tool names (base and every
    switch value)."""
    ladder = load_ladder(MI350X).ladder
    overrides = [ladder.base] + [o for s in ladder.switches.values() for o in s.values.values()]
    args = {k for o in overrides for k in o.model_args}
    env = {k for o in overrides for k in o.docker_env_vars}
    tools = {t.name for o in overrides for t in o.tools}
    return args, env, tools


def _names(kind: str) -> set[str]:
    return {f.name for f in upstream.facts(kind)}


def _spellings(kind: str) -> set[str]:
    """Each row's name and the aliases its detail lists (`aliases -d, ...;`)."""
    out = set()
    for fact in upstream.facts(kind):
        out.add(fact.name)
        aliases = re.match(r"(?:accepted by [^;]*; )?aliases ([^;]+);", fact.detail)
        if aliases:
            out.update(a.strip() for a in aliases.group(1).split(","))
    return out


def test_the_table_loads_with_every_kind_and_full_commits() -> None:
    rows = upstream.facts()
    assert len(rows) > 100
    assert {f.kind for f in rows} == set(upstream.KINDS)
    for kind in upstream.KINDS:
        assert upstream.facts(kind), kind
    for fact in rows:
        assert re.fullmatch(r"[0-9a-f]{40}", fact.ref), fact
        assert fact.repo.count("/") == 1 and fact.path and fact.name, fact
    keys = [(f.kind, f.name, f.repo, f.path, f.ref) for f in rows]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)  # the script writes it sorted, one row a key


def test_the_csv_is_package_data_beside_the_loader() -> None:
    csv_path = Path(upstream.__file__).parent / "upstream" / "facts.csv"
    assert csv_path.read_text().splitlines()[0] == ",".join(upstream.COLUMNS)


def test_an_unknown_kind_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown kind"):
        upstream.facts("primus_keys")


def test_primus_keys_hold_the_mi350x_ladders_model_args() -> None:
    args, _, _ = _ladder_parts()
    keys = upstream.primus_keys()
    missing = sorted(k for k in args - RUNNER_SIDE_KEYS if k not in keys)
    assert not missing, missing
    assert RUNNER_SIDE_KEYS <= args and not RUNNER_SIDE_KEYS & keys
    # what the runner adds on its own: the warm-up window and the per-iteration ROCm memory
    assert {WARMUP_ARG, "use_rocm_mem_info"} <= keys


def test_the_profiler_and_v4_keys_are_where_primus_defines_them() -> None:
    by_name = {f.name: f for f in upstream.facts("primus_key")}
    module = "primus/configs/modules/megatron/"
    assert by_name["profile_step_start"].path == module + "trainer_base.yaml"
    assert by_name["torch_profiler_record_shapes"].path == module + "primus_megatron_module.yaml"
    assert by_name["torch_profiler_record_shapes"].default == "true"
    assert by_name["use_rocm_mem_info"].default == "false"
    assert by_name["v4_indexer_distill_loss_coeff"].path == "primus/configs/models/megatron/deepseek_v4_base.yaml"


def test_every_ladder_env_var_has_a_reader() -> None:
    _, env, _ = _ladder_parts()
    readers: dict[str, list[Any]] = {}
    for fact in upstream.facts("primus_env"):
        readers.setdefault(fact.name, []).append(fact)
    assert sorted(env - set(readers)) == []
    coeff = readers["PRIMUS_V4_INDEXER_DISTILL_LOSS_COEFF"]
    assert all("v4_indexer_distill_loss_coeff" in f.detail for f in coeff)


def test_the_runners_collector_arguments_are_in_the_table() -> None:
    workspace = Path("/ws")
    rocprof = lens_wrapper(SimpleNamespace(lens="rocprofv3"), workspace)  # type: ignore[arg-type]
    assert rocprof[0] == "rocprofv3"
    assert {a for a in rocprof[1:] if a.startswith("-")} <= _spellings("rocprofv3_flag")
    rtl = lens_wrapper(SimpleNamespace(lens="rocm_trace_lite"), workspace)  # type: ignore[arg-type]
    assert rtl[:2] == ["rtl", "trace"]
    assert {"trace", *(a for a in rtl if a.startswith("-"))} <= _spellings("rtl_flag")
    mode = rtl[rtl.index("--mode") + 1]
    (row,) = [f for f in upstream.facts("rtl_mode") if f.name == mode]
    assert "v0.3.3" in row.detail.split(";")[0]  # the release madengine installs takes it


def test_madengine_knows_what_the_plan_renders() -> None:
    _, _, tools = _ladder_parts()
    assert {"docker_env_vars", "model_args", "tools", "tools.name", "tools.cmd"} <= _names("madengine_field")
    assert tools and tools <= _names("madengine_tool")


def test_log_segments_carry_their_format_strings() -> None:
    rows = upstream.facts("log_segment")
    assert all(f.default.strip() for f in rows)
    assert {"iteration", "elapsed_time_per_iteration", "throughput_per_gpu", "tokens_per_gpu_harmonic"} <= {
        f.name for f in rows
    }
    assert {"tokens_per_gpu_arith", "hip_mem", "rocm_mem", "rocm_max_mem", "global_batch_size", "lm_loss"} <= {
        f.name for f in rows
    }


def test_closest_suggests_the_meant_key() -> None:
    keys = upstream.primus_keys()
    assert upstream.closest("use_rocm_mem_inf", keys) == "use_rocm_mem_info"
    assert upstream.closest("profile_step_begin", keys) in {"profile_step_start", "profile_step_end"}
    assert upstream.closest("qqqqqqqq", keys) is None
