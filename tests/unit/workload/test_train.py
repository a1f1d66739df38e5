"""The DeepSeek-V4-shaped CPU proxy (traceladder.workload).

Every configuration the tests need runs once in a module fixture: the EP=2 and memory runs through
the real CLI (`python -m traceladder.workload`), the single-rank profiled runs one after another in
one Python process, both streams side by side on the 2 cores. Each test then reads the log lines
and the torch-profiler traces a run left behind.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from traceladder.workload.proxy_config import ProxyConfig, ProxyConfigError, parse, split_overrides
from traceladder.workload.train import RANK_CPU_PREFIX
from testkit.tiny_proxy import FUSION_GATES, PROFILE_SECOND_OF_THREE, TWO_LAYER_ARGS
from tests.conftest import REPO_ROOT

INCLUDE = REPO_ROOT / "include"
# Tiny model, every override syntax Primus takes, and unmodelled keys from the seed ladder.
TINY = [
    *TWO_LAYER_ARGS,
    "--config_path",
    "examples/megatron/configs/MI355X/deepseek_v4_flash-BF16-pretrain.yaml",
    "--mock_data",
    "True",
    "--rope_type",
    "rope",
    "--index_topk",
    "512",
]
UNMODELLED = "[proxy] ignoring unmodelled keys: config_path, mock_data, rope_type, index_topk"
W1 = [*TINY, *PROFILE_SECOND_OF_THREE, "--expert_model_parallel_size", "1", "--global_batch_size", "1"]
W2 = [*TINY, *PROFILE_SECOND_OF_THREE, "--expert_model_parallel_size", "2", "--global_batch_size", "2"]
# Long sequence, full-causal op-by-op attention: the saved [heads, S, S + S/4] scores dominate memory.
MEM = [
    "--expert_model_parallel_size",
    "1",
    "--global_batch_size",
    "1",
    "--num_layers",
    "4",
    "--compress_ratios",
    "[0,4]",
    "--hidden_size",
    "64",
    "--num_attention_heads",
    "4",
    "--num_experts",
    "8",
    "--moe_router_topk",
    "2",
    "--moe_ffn_hidden_size",
    "32",
    "--seq_length",
    "2048",
    "--attn_sliding_window",
    "2048",
    "--vocab_size",
    "256",
    "--train_iters",
    "1",
    "--log_avg_skip_iterations",
    "0",
    "--recompute_granularity",
    "full",
    "--recompute_method",
    "block",
]

# Single-rank profiled runs go through one Python process (run_rank per config, as the CLI does
# for world size 1): it saves ~3 s of torch + profiler import per config on a 2-core box.
IN_PROCESS: dict[str, tuple[list[str], dict[str, str]]] = {
    "base": (W1, {}),
    **{f"gate_off_{g}": (W1, {g: "0"}) for g in FUSION_GATES},
    "all_gates_off": (W1, {g: "0" for g in FUSION_GATES}),
    "gluon_v3": ([*W1, "--use_v4_attention_backend", "gluon_v3"], {}),
    "turbo": ([*W1, "--use_v4_attention_backend", "turbo", "--use_v4_csa_attention_backend", "turbo"], {}),
    "grouped": ([*W1, "--use_turbo_grouped_gemm", "True"], {}),
    "recompute": (
        [
            *W1,
            "--recompute_granularity",
            "full",
            "--recompute_method",
            "block",
            "--recompute_num_layers",
            "1",
            "--torch_profiler_use_gzip",
            "False",
        ],
        {},
    ),
    "gbs2": ([*W1, "--global_batch_size", "2"], {}),  # the single-rank twin of the EP=2 runs
}
# Real CLI runs: every EP=2 run, and the memory runs (max RSS is per process).
CLI: dict[str, tuple[list[str], dict[str, str]]] = {
    "ep_allgather": ([*W2, "--profile_ranks", "[0]"], {}),
    "ep_deepep": ([*W2, "--profile_ranks", "[0,1]", "--use_turbo_deepep", "True"], {}),
    "ep_mega": ([*W2, "--profile_ranks", "[0]", "--use_turbo_mega_moe", "True"], {}),
    "ep_extra": ([*W2, "--profile_ranks", "[0]", "--extra_work_pct", "50", "--log_avg_skip_iterations", "1"], {}),
    "ep_unprofiled": (
        [
            *TINY,
            "--train_iters",
            "3",
            "--expert_model_parallel_size",
            "2",
            "--global_batch_size",
            "2",
            "--log_avg_skip_iterations",
            "1",
        ],
        {"TRACELADDER_PROXY_RANK_CPU": "1"},  # the bench's per-rank noise diagnostic
    ),
    "mem_recompute_off": ([*MEM, "--recompute_num_layers", "0"], {}),
    "mem_recompute_on": ([*MEM, "--recompute_num_layers", "4"], {}),
}
_BATCH = """
import contextlib, json, sys
from traceladder.workload.proxy_config import parse
from traceladder.workload.train import run_rank
for item in json.load(sys.stdin):
    with open(item["out"], "w") as fh, contextlib.redirect_stdout(fh):
        run_rank(0, parse(item["args"], env=item["env"]), 0)
"""

LINE_FULL = re.compile(
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\] iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \| "
    r"elapsed time per iteration \(ms\): ([\d.]+)/([\d.]+) \| step cpu time per iteration \(ms\): (?:[\d.]+) \| "
    r"compute per GPU \(TFLOP/s/GPU\): ([\d.]+) "
    r"\(avg ([\d.]+)\) \| tokens/s/GPU inst/harmonic mean: ([\d.]+)/([\d.]+) \| learning rate: ([\d.E+-]+) \| "
    r"global batch size: +(\d+) \| lm loss: ([\d.E+-]+) \| loss scale: 1\.0 \| grad norm: ([\d.]+) \| "
    r"number of skipped iterations: +0 \| number of nan iterations: +0 \| "
    r"hip mem usage/free/total/usage_ratio: ([\d.]+)GB/([\d.]+)GB/([\d.]+)GB/([\d.]+)%  \| "
    r"rocm mem usage/free/total/usage_ratio: [\d.]+GB/[\d.]+GB/[\d.]+GB/[\d.]+% \| "
    r"rank-(\d+) rocm max mem usage/usage_ratio: ([\d.]+)GB/([\d.]+)%$"
)
LINE_RAW = re.compile(
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\] iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \| "
    r"elapsed time per iteration \(ms\): ([\d.]+) \| step cpu time per iteration \(ms\): (?:[\d.]+) \| "
    r"learning rate: ([\d.E+-]+) \| global batch size: +(\d+) \| "
    r"lm loss: ([\d.E+-]+) \| loss scale: 1\.0 \| grad norm: ([\d.]+) \| number of skipped iterations: +0 \| "
    r"number of nan iterations: +0 \|$"
)
TRACE_NAME = re.compile(r"^primus-megatron-exp\[t\]-rank\[(\d)\]\.(\d{13})\.pt\.trace\.json(\.gz)?$")


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    workspace: Path
    seconds: float
    _ops: dict[int, tuple[Counter, Counter, list]] = field(default_factory=dict)

    @property
    def iteration_lines(self) -> list[str]:
        return [ln for ln in self.stdout.splitlines() if " iteration " in ln and ln.startswith("[20")]

    @property
    def losses(self) -> list[float]:
        return [float(re.search(r"lm loss: ([\d.E+-]+)", ln).group(1)) for ln in self.iteration_lines]

    def traces(self) -> list[Path]:
        tb = self.workspace / "tensorboard"
        return sorted(tb.iterdir()) if tb.is_dir() else []

    def events(self, rank: int = 0) -> list[dict]:
        return self._load(rank)[2]

    def ops(self, rank: int = 0) -> Counter:
        """cpu_op name → count in the recorded window."""
        return self._load(rank)[0]

    def ranges(self, rank: int = 0) -> Counter:
        """user_annotation name → count (record_function ranges, gloo transfers)."""
        return self._load(rank)[1]

    def _load(self, rank: int) -> tuple[Counter, Counter, list]:
        if rank not in self._ops:
            (path,) = [p for p in self.traces() if f"-rank[{rank}]." in p.name]
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt") as fh:
                events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
            ops = Counter(e["name"] for e in events if e.get("cat") == "cpu_op")
            ranges = Counter(e["name"] for e in events if e.get("cat") == "user_annotation")
            self._ops[rank] = (ops, ranges, events)
        return self._ops[rank]

    def detail(self) -> str:
        return f"rc={self.rc}\nstdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}"


def _env(workspace: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIMUS_")}
    return {**env, "PYTHONPATH": str(INCLUDE), "PRIMUS_WORKSPACE": str(workspace), **extra}


def launch(args: list[str], env_extra: dict[str, str], workspace: Path, timeout: float = 120) -> Run:
    t0 = time.monotonic()
    cwd = workspace.parent if workspace.parent.is_dir() else None
    proc = subprocess.run(
        [sys.executable, "-m", "traceladder.workload", *args],
        env=_env(workspace, env_extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr, workspace, time.monotonic() - t0)


def launch_in_process(specs: dict[str, tuple[list[str], dict[str, str]]], base: Path) -> dict[str, Run]:
    items = [
        {"args": args, "env": {"PRIMUS_WORKSPACE": str(base / name), **env}, "out": str(base / f"{name}.out")}
        for name, (args, env) in specs.items()
    ]
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _BATCH],
        input=json.dumps(items),
        env=_env(base, {}),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=base,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {name: Run(0, (base / f"{name}.out").read_text(), "", base / name, time.monotonic() - t0) for name in specs}


@pytest.fixture(scope="module")
def proxy_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    base = tmp_path_factory.mktemp("proxy")
    with ThreadPoolExecutor(max_workers=2) as pool:  # 2 cores: the batch on one, the CLI runs on the other
        batch = pool.submit(launch_in_process, IN_PROCESS, base)
        cli = pool.submit(lambda: {name: launch(args, env, base / name) for name, (args, env) in CLI.items()})
        results = {**batch.result(), **cli.result()}
    for name, run in results.items():
        assert run.rc == 0, f"{name}: {run.detail()}"
    return results


def elementwise(ops: Counter) -> int:
    names = (
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "mean",
        "rsqrt",
        "exp",
        "neg",
        "reciprocal",
        "sigmoid",
        "log1p",
        "relu",
        "abs",
        "sqrt",
        "sum",
        "amax",
        "softplus",
        "softmax",
        "rms_norm",
    )
    return sum(n for op, n in ops.items() if op.removeprefix("aten::").rstrip("_") in names)


def sdpa_key_lengths(run: Run) -> set[int]:
    return {e["args"]["Input Dims"][1][2] for e in run.events() if e["name"] == "aten::scaled_dot_product_attention"}


# ------------------------------------------------------------------ switches change the executed ops


@pytest.mark.parametrize(
    ("gate", "on_sign", "off_sign"),
    [
        (
            "PRIMUS_RMSNORM_TRITON",
            "autograd::engine::evaluate_function: _FusedRMSNormBackward",
            "autograd::engine::evaluate_function: RsqrtBackward0",
        ),
        ("PRIMUS_ROPE_TRITON", "aten::view_as_complex", "aten::stack"),
        ("PRIMUS_SINKHORN_TRITON", "_FusedSinkhorn", "aten::amax"),
        ("PRIMUS_HC_TRITON", "aten::baddbmm", "aten::neg"),
        ("PRIMUS_V4_ROUTER_TRITON", "aten::softplus", "aten::log1p"),
    ],
)
def test_each_fusion_gate_swaps_its_chain(proxy_runs: dict[str, Run], gate: str, on_sign: str, off_sign: str) -> None:
    on, off = proxy_runs["base"].ops(), proxy_runs[f"gate_off_{gate}"].ops()
    assert on[on_sign] > off[on_sign], (gate, on[on_sign], off[on_sign])
    assert off[off_sign] > on[off_sign], (gate, on[off_sign], off[off_sign])
    assert elementwise(off) > elementwise(on), gate
    # the other gates' chains are untouched
    assert off["aten::view_as_complex"] == (0 if gate == "PRIMUS_ROPE_TRITON" else on["aten::view_as_complex"])
    assert off["aten::softplus"] == (0 if gate == "PRIMUS_V4_ROUTER_TRITON" else on["aten::softplus"])


def test_all_fusions_off_is_many_more_small_ops(proxy_runs: dict[str, Run]) -> None:
    on, off = proxy_runs["base"].ops(), proxy_runs["all_gates_off"].ops()
    assert elementwise(off) > 1.25 * elementwise(on)
    assert sum(off.values()) > sum(on.values())


def test_attention_backends_take_different_paths(proxy_runs: dict[str, Run]) -> None:
    v1, g3, tb = proxy_runs["base"], proxy_runs["gluon_v3"], proxy_runs["turbo"]
    # triton_v1: op by op, no fused attention op
    assert v1.ops()["aten::masked_fill"] >= 2 and v1.ops()["aten::scaled_dot_product_attention"] == 0
    # gluon_v3 and turbo: one SDPA per layer with a mask, no op-by-op masking
    for fused in (g3, tb):
        assert fused.ops()["aten::masked_fill"] == 0 and fused.ops()["aten::scaled_dot_product_attention"] == 2
        # every backend is sparse, as V4's are: window-sized chunks see only [S/r | previous | own chunk]
        assert sdpa_key_lengths(fused) == {2 * 16, 64 // 4 + 2 * 16}
        assert fused.ops()["aten::constant_pad_nd"] > 0
    assert v1.ops()["aten::constant_pad_nd"] == g3.ops()["aten::constant_pad_nd"]


def test_grouped_gemm_replaces_the_per_expert_loop(proxy_runs: dict[str, Run]) -> None:
    loop, grouped = proxy_runs["base"].ops(), proxy_runs["grouped"].ops()
    # loop: 2 mm per expert per layer forward, and their dgrad/wgrad in backward
    assert loop["aten::mm"] - grouped["aten::mm"] >= 3 * 2 * 8 * 2
    assert grouped["aten::bmm"] >= loop["aten::bmm"] + 2 * 2


def test_deepep_swaps_allgather_for_exact_split_all_to_all(proxy_runs: dict[str, Run]) -> None:
    ag, a2a = proxy_runs["ep_allgather"], proxy_runs["ep_deepep"]
    layers = 2
    # baseline: per layer one all-gather forward and one in backward, + 1 for the log stats
    assert ag.ops()["c10d::allgather_"] == 2 * layers + 1
    assert a2a.ops()["c10d::allgather_"] == 1
    assert a2a.ops()["c10d::alltoall_base_"] >= 5 * layers > ag.ops()["c10d::alltoall_base_"]
    # the transfer itself runs on gloo's thread as a user annotation
    assert a2a.ranges()["gloo:all_to_all"] == a2a.ops()["c10d::alltoall_base_"]
    all_to_all_splits = [e["args"]["Input Dims"] for e in a2a.events() if e["name"] == "c10d::alltoall_base_"]
    assert all_to_all_splits, "record_shapes should expose the collective sizes"


def test_mega_moe_is_a_chunked_fused_op_with_hand_written_backward(proxy_runs: dict[str, Run]) -> None:
    mega, deepep = proxy_runs["ep_mega"], proxy_runs["ep_deepep"]
    ops = mega.ops()
    assert ops["autograd::engine::evaluate_function: _MegaMoEBackward"] == 2
    # 2 chunks: per layer 1 count exchange + 2 dispatch + 2 combine forward, 2 + 2 backward
    assert ops["c10d::alltoall_base_"] == 2 * 9
    assert ops["c10d::alltoall_base_"] > deepep.ops()["c10d::alltoall_base_"]
    assert ops["aten::mm"] < proxy_runs["base"].ops()["aten::mm"]  # no per-expert loop
    # the chunked stages are visible as separate ranges
    # 2 layers x 2 chunks, forward and (hand-written) backward
    assert mega.ranges()["moe_experts"] == 2 * 2 * 2 and mega.ranges()["moe_dispatch"] > 2


def test_recompute_replays_the_first_n_layers(proxy_runs: dict[str, Run]) -> None:
    plain, rec = proxy_runs["base"], proxy_runs["recompute"]
    assert plain.ranges()["attention"] == 2
    assert rec.ranges()["attention"] == 3  # 2 layers forward + layer 0 again in backward
    assert rec.ops()["aten::mm"] > plain.ops()["aten::mm"]


def test_global_batch_size_accumulates_micro_batches(proxy_runs: dict[str, Run]) -> None:
    one, two = proxy_runs["base"], proxy_runs["gbs2"]
    assert two.ranges()["attention"] == 2 * one.ranges()["attention"]
    assert two.ranges()["optimizer_step"] == one.ranges()["optimizer_step"] == 1
    assert "micro_batches_per_rank=2" in two.stdout


def test_profiled_window_carries_the_named_ranges(proxy_runs: dict[str, Run]) -> None:
    ranges = proxy_runs["ep_allgather"].ranges()
    for name in ("attention", "moe_router", "moe_dispatch", "moe_experts", "moe_combine"):
        assert ranges[name] == 2, name
    assert ranges["optimizer_step"] == 1
    assert ranges["ProfilerStep#1"] == 1  # only iteration 2 of 3 recorded


def _adds_under_accumulate_grad(run: Run) -> tuple[list[dict], list[dict]]:
    events = run.events()
    nodes = [e for e in events if e["name"] == "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"]
    adds = [
        e
        for e in events
        if e["name"] == "aten::add_"
        and any(n["tid"] == e["tid"] and n["ts"] <= e["ts"] <= n["ts"] + n["dur"] for n in nodes)
    ]
    return nodes, adds


def test_grads_are_added_to_main_grad_under_accumulate_grad(proxy_runs: dict[str, Run]) -> None:
    # Megatron's DDP hook: each micro-batch's grad is added into the parameter's main_grad inside
    # the AccumulateGrad node, so aten::add_ shows there, the stacked expert weights (3-D) included.
    nodes, adds = _adds_under_accumulate_grad(proxy_runs["ep_deepep"])
    assert nodes and len(adds) == len(nodes)  # one add per parameter per micro-batch
    assert any(len(e["args"]["Input Dims"][0]) == 3 for e in adds)


def test_mega_moe_accumulates_its_expert_wgrads_in_place(proxy_runs: dict[str, Run]) -> None:
    # The fused op writes the expert weight grads straight into main_grad (baddbmm_ inside its
    # backward): no per-micro-batch expert grad tensor, so no 3-D add under AccumulateGrad.
    mega = proxy_runs["ep_mega"]
    nodes, adds = _adds_under_accumulate_grad(mega)
    assert nodes and adds and not any(len(e["args"]["Input Dims"][0]) == 3 for e in adds)
    backward = [e for e in mega.events() if e["name"] == "_MegaMoEBackward"]
    inside = [
        e
        for e in mega.events()
        if e["name"] == "aten::baddbmm_" and any(b["ts"] <= e["ts"] <= b["ts"] + b["dur"] for b in backward)
    ]
    assert backward and len(inside) == 2 * 2 * len(backward)  # w1 and w2, per chunk (2 chunks)


def test_extra_work_is_real_matmul_work_in_every_iteration(proxy_runs: dict[str, Run]) -> None:
    # the positive control: one `extra_work` range per iteration, made of matmuls, not a sleep
    run = proxy_runs["ep_extra"]
    assert run.ranges()["extra_work"] == 1
    assert proxy_runs["ep_allgather"].ranges()["extra_work"] == 0
    inside = [e for e in run.events() if e["name"] == "extra_work"]
    start, end = inside[0]["ts"], inside[0]["ts"] + inside[0]["dur"]
    assert any(e["name"] == "aten::mm" and start <= e["ts"] <= end for e in run.events())
    assert "extra_work_pct=50" in run.stdout
    assert re.search(
        r"^\[proxy\] extra_work: [\d.]+ GFLOP per iteration \(50% of the [\d.]+ ms warm-up step, wall\)$",
        run.stdout,
        re.M,
    )


def test_extra_work_is_sized_from_the_warm_up_step() -> None:
    from traceladder.workload.comm import Comm
    from traceladder.workload.extra import ExtraWork

    work = ExtraWork(parse([*TINY, "--extra_work_pct", "40"], env={}))
    assert work.enabled and work.rows == 0  # nothing before the calibration
    work()
    work.calibrate(0.5, Comm(0, 1), row_seconds=2e-6)  # 40% of a 0.5 s step at 2 us per row
    assert work.rows == 100_000 and work.flops == 2.0 * 100_000 * 256 * 256
    assert work.row_seconds() > 0
    off = ExtraWork(parse(TINY, env={}))
    off.calibrate(0.5, Comm(0, 1))
    assert not off.enabled and off.flops == 0
    with pytest.raises(ProxyConfigError, match="extra_work_pct"):
        parse(["--extra_work_pct", "-5"], env={})
    # sized on the step's CPU time for a `metric: cpu` ladder; anything else is named
    assert parse([*TINY, "--extra_work_basis", "cpu"], env={}).extra_work_basis == "cpu"
    with pytest.raises(ProxyConfigError, match="extra_work_basis"):
        parse([*TINY, "--extra_work_basis", "gpu"], env={})


def test_ranks_pin_their_compute_thread(proxy_runs: dict[str, Run], monkeypatch: pytest.MonkeyPatch) -> None:
    from traceladder.workload import quiet

    assert re.search(
        r"^\[proxy\] rank 1: compute thread on core \d+, 1 intra-op thread\(s\)$",
        proxy_runs["ep_unprofiled"].stdout,
        re.M,
    )
    assert quiet.rank_core(0, {4, 5}) == 4 and quiet.rank_core(1, {4, 5}) == 5 and quiet.rank_core(2, {4, 5}) == 4
    monkeypatch.setenv(quiet.PIN_ENV, "0")
    assert quiet.pin_rank(0) == "unpinned" and not quiet.pinning_enabled()


# ------------------------------------------------------------------ numerics and memory


def test_expert_parallel_matches_single_rank_loss(proxy_runs: dict[str, Run]) -> None:
    # Same seed and global batch: EP=2 (each rank 1 micro-batch, half the experts) against EP=1
    # (2 micro-batches, all experts), for every dispatcher path.
    ref = proxy_runs["gbs2"].losses
    assert len(ref) == 3 and ref[-1] < ref[0]
    for name in ("ep_allgather", "ep_deepep", "ep_mega", "ep_unprofiled"):
        assert proxy_runs[name].losses == pytest.approx(ref, rel=2e-5), name


def test_switches_change_the_path_not_the_math(proxy_runs: dict[str, Run]) -> None:
    ref = proxy_runs["base"].losses
    for name in IN_PROCESS:
        if name != "gbs2":
            assert proxy_runs[name].losses == pytest.approx(ref, rel=1e-4), name


def test_recompute_off_raises_peak_memory(proxy_runs: dict[str, Run]) -> None:
    def peak(run: Run) -> float:
        m = LINE_FULL.match(run.iteration_lines[-1])
        assert m, run.iteration_lines[-1]
        return float(m.group(19))

    off, on = peak(proxy_runs["mem_recompute_off"]), peak(proxy_runs["mem_recompute_on"])
    assert off - on >= 0.1, (off, on)


# ------------------------------------------------------------------ lenses and logs


def test_lenses_write_the_traces_primus_would(proxy_runs: dict[str, Run]) -> None:
    def names(run: Run) -> list[re.Match]:
        found = [TRACE_NAME.match(p.name) for p in run.traces()]
        assert all(found), [p.name for p in run.traces()]
        return found

    rank0 = names(proxy_runs["ep_allgather"])
    assert [(m.group(1), m.group(3)) for m in rank0] == [("0", ".gz")]
    assert abs(int(rank0[0].group(2)) / 1000 - time.time()) < 3600  # unix milliseconds
    assert sorted(m.group(1) for m in names(proxy_runs["ep_deepep"])) == ["0", "1"]
    plain = names(proxy_runs["recompute"])
    assert [m.group(3) for m in plain] == [None]  # torch_profiler_use_gzip False
    for unprofiled in ("ep_unprofiled", "mem_recompute_on"):
        assert proxy_runs[unprofiled].traces() == [], unprofiled


def test_log_lines_have_primus_shapes(proxy_runs: dict[str, Run]) -> None:
    run = proxy_runs["ep_unprofiled"]
    out = run.stdout.splitlines()
    assert sum(ln.startswith("[proxy] world_size=2 layers=2 experts=8 topk=2") for ln in out) == 1
    header = next(ln for ln in out if ln.startswith("[proxy]"))
    for part in (
        "fusions=on",
        "attention=triton_v1",
        "dispatcher=allgather",
        "grouped_gemm=False",
        "mega_moe=False",
        "recompute_num_layers=0",
    ):
        assert part in header
    lines = run.iteration_lines  # only the last rank prints: one line per iteration
    assert [int(re.search(r"iteration +(\d+)/", ln).group(1)) for ln in lines] == [1, 2, 3]
    raw = LINE_RAW.match(lines[0])
    assert raw and raw.group(3) == "2" and raw.group(6) == "2", lines[0]
    full = [LINE_FULL.match(ln) for ln in lines[1:]]
    assert all(full), lines[1:]
    last = full[-1]
    assert last.group(1) == "3" and last.group(3) == "6"
    times = [float(m.group(4)) for m in full]
    assert float(last.group(5)) == pytest.approx(sum(times) / len(times), abs=0.2)
    tokens = 2 * 64 / 2  # global batch x seq / ranks
    assert float(last.group(8)) == pytest.approx(tokens / (times[-1] / 1000), rel=0.01)
    assert float(last.group(9)) == pytest.approx(tokens * len(times) / (sum(times) / 1000), rel=0.01)
    assert float(last.group(6)) > 0 and int(last.group(18)) in (0, 1)
    assert 0 < float(last.group(14)) <= float(last.group(16))  # current RSS within host memory
    lrs = [float(re.search(r"learning rate: ([\d.E+-]+)", ln).group(1)) for ln in lines]
    assert lrs == sorted(lrs, reverse=True) and lrs[-1] == 0.0  # cosine to min_lr 0 at train_iters
    # TRACELADDER_PROXY_RANK_CPU=1: each rank's CPU ms per iteration, the slowest being the line's figure
    by_rank = [ln.removeprefix(RANK_CPU_PREFIX).split() for ln in out if ln.startswith(RANK_CPU_PREFIX)]
    assert [len(r) for r in by_rank] == [2, 2, 2], by_rank
    logged = [float(re.search(r"step cpu time per iteration \(ms\): ([\d.]+)", ln).group(1)) for ln in lines]
    # the rank line has 2 decimals, the log line 1: each within half its last digit of the same value
    assert [max(map(float, r)) for r in by_rank] == pytest.approx(logged, abs=0.055 + 1e-9)
    assert RANK_CPU_PREFIX not in proxy_runs["ep_allgather"].stdout  # off unless asked for


def test_unmodelled_keys_are_named_once(proxy_runs: dict[str, Run]) -> None:
    lines = proxy_runs["ep_unprofiled"].stderr.splitlines()
    assert lines.count(UNMODELLED) == 1


# ------------------------------------------------------------------ errors


def test_malformed_argument_exits_2_with_one_line(tmp_path: Path) -> None:
    run = launch(["--num_layers", "abc"], {}, tmp_path / "ws", timeout=30)
    assert run.rc == 2
    assert len(run.stderr.strip().splitlines()) == 1 and "--num_layers" in run.stderr
    assert run.stdout == ""


def test_profile_window_past_train_iters_exits_2(tmp_path: Path) -> None:
    run = launch([*PROFILE_SECOND_OF_THREE, "--train_iters", "2"], {}, tmp_path / "ws", timeout=30)
    assert run.rc == 2
    assert len(run.stderr.strip().splitlines()) == 1 and "profile_step_end" in run.stderr


def test_a_failing_rank_stops_the_run(tmp_path: Path) -> None:
    # Rank 1 cannot write its trace (the workspace sits under a plain file); rank 0 would wait
    # for it in the next collective forever if the launcher did not stop it.
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    args = [
        *TINY,
        "--expert_model_parallel_size",
        "2",
        "--global_batch_size",
        "2",
        "--train_iters",
        "6",
        "--profile",
        "True",
        "--use_pytorch_profiler",
        "True",
        "--profile_ranks",
        "[1]",
        "--profile_step_start",
        "1",
        "--profile_step_end",
        "2",
    ]
    run = launch(args, {}, blocker / "ws", timeout=60)
    assert run.rc != 0
    assert "rank 1 failed" in run.stderr
    assert run.seconds < 30


# ------------------------------------------------------------------ settings (no torch)


def test_override_syntaxes_and_types() -> None:
    raw = split_overrides(["train", "pretrain", "--a", "1", "--b=[0,1]", "c=True", "--flag", "--d", "x", "--a", "2"])
    assert raw == {"a": "2", "b": "[0,1]", "c": "True", "flag": "true", "d": "x"}
    s = parse(
        [
            "--num_layers=3",
            "compress_ratios=[0,4,128]",
            "--profile_ranks",
            "[0,1]",
            "--profile",
            "true",
            "--use_turbo_deepep",
            "False",
            "--moe_grouped_gemm",
            "True",
            "--recompute_granularity",
            "null",
        ],
        env={},
    )
    assert (s.num_layers, s.compress_ratios, s.profile_ranks, s.profile) == (3, (0, 4, 128), (0, 1), True)
    assert s.grouped_gemm and not s.use_turbo_deepep and s.recompute_granularity is None
    assert s.ignored_keys == ()


def test_settings_defaults_and_environment() -> None:
    s = parse([], env={})
    assert isinstance(s, ProxyConfig)
    assert (s.num_layers, s.num_experts, s.moe_router_topk, s.world_size, s.train_iters) == (8, 256, 6, 2, 10)
    assert s.compress_ratios == (0, 0, 4, 128, 4, 128, 4, 0) and s.fusions.describe() == "on"
    assert s.workspace == "./output" and s.exp_name == "proxy" and s.torch_profiler_use_gzip
    env = {
        "PRIMUS_RMSNORM_TRITON": "0",
        "PRIMUS_HC_TRITON": "1",
        "PRIMUS_WORKSPACE": "/w",
        "PRIMUS_USE_V4_ATTENTION_BACKEND": "gluon_v3",
        "PRIMUS_USE_TURBO_DEEPEP": "true",
    }
    s = parse(["--use_v4_csa_attention_backend", "turbo"], env=env)
    assert not s.fusions.rmsnorm and s.fusions.hc and s.workspace == "/w"
    assert (s.attention_backend, s.csa_attention_backend, s.dispatcher) == ("gluon_v3", "turbo", "alltoall")
    # the command line beats the YAML's ${PRIMUS_*} placeholders; csa follows the main backend
    s = parse(["--use_turbo_deepep", "False", "--use_v4_attention_backend", "turbo"], env=env)
    assert (s.dispatcher, s.csa_attention_backend) == ("allgather", "turbo")
    assert parse(["--use_turbo_mega_moe", "True", "--use_turbo_deepep", "True"], env={}).dispatcher == "mega_moe"
    # Megatron's --manual-gc / --manual-gc-interval (off by default, as in Megatron)
    s = parse(["--manual_gc", "True", "--manual_gc_interval", "5"], env={})
    assert (s.manual_gc, s.manual_gc_interval) == (True, 5) and not parse([], env={}).manual_gc


@pytest.mark.parametrize(
    "argv",
    [
        ["--num_layers", "abc"],
        ["--compress_ratios", "[0,x]"],
        ["--use_turbo_deepep", "maybe"],
        ["--use_v4_attention_backend", "flash"],
        ["--global_batch_size", "3"],
        ["--tensor_model_parallel_size", "2"],
        ["--num_experts", "7"],
        ["--manual_gc_interval", "-1"],
        ["stray"],
    ],
)
def test_bad_settings_name_the_key(argv: list[str]) -> None:
    with pytest.raises(ProxyConfigError) as err:
        parse(argv, env={})
    assert "\n" not in str(err.value) and str(err.value).startswith("[proxy] error: --")


# ------------------------------------------------------------------ the fused chains: same math, fewer ops


# Dispatches that move no data: views, aliases, allocations, same-dtype casts, and the
# detach/resolve pair behind each Tensor.numpy() that hands a tensor to a compiled kernel.
_METADATA_OPS = {
    "aten::" + name
    for name in (
        "to detach resolve_conj resolve_neg view reshape _reshape_alias as_strided expand empty "
        "empty_like empty_strided new_empty contiguous result_type alias lift_fresh"
    ).split()
}


def _op_calls(fn: Callable[[], object]) -> int:
    """aten calls that do work in one forward + backward (nested calls included)."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::") and e.key not in _METADATA_OPS)


def _graph_nodes(out: object) -> int:
    seen, todo = set(), [getattr(out, "grad_fn", None)]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(fn for fn, _ in node.next_functions)
    return len(seen)


def test_fused_sinkhorn_is_one_autograd_node_in_fewer_ops() -> None:
    import torch

    from traceladder.workload import ops

    logits = torch.randn(64, 4, 4, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(64, 4, 4, dtype=torch.float64)
    fused, plain = ops.sinkhorn(logits, 20, fused=True), ops.sinkhorn(logits, 20, fused=False)
    assert torch.allclose(fused, plain, atol=1e-5)
    # doubly stochastic: rows and columns each sum to one
    assert torch.allclose(fused.sum(-1), torch.ones(64, 4, dtype=torch.float64), atol=1e-6)
    (g_fused,) = torch.autograd.grad(fused, logits, grad)
    (g_plain,) = torch.autograd.grad(plain, logits, grad)
    assert torch.allclose(g_fused, g_plain, atol=1e-5)
    x = logits.detach().float().requires_grad_()
    n_fused = _op_calls(lambda: ops.sinkhorn(x, 20, fused=True).sum().backward())
    n_plain = _op_calls(lambda: ops.sinkhorn(x, 20, fused=False).sum().backward())
    assert n_fused < 0.8 * n_plain, (n_fused, n_plain)
    # 20 iterations x 2 normalisations x 4 ops unfused, each its own autograd node; fused: one node
    # (plus the leaf's AccumulateGrad)
    assert _graph_nodes(ops.sinkhorn(x, 20, fused=True)) == 2
    assert _graph_nodes(ops.sinkhorn(x, 20, fused=False)) > 20 * 2 * 3


def test_fused_rms_norm_is_one_autograd_node_with_the_unfused_math() -> None:
    import torch

    from traceladder.workload import ops

    x = torch.randn(3, 64, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(16, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(3, 64, 16, dtype=torch.float64)
    fused, plain = ops.rms_norm(x, weight, 1e-6, fused=True), ops.rms_norm(x, weight, 1e-6, fused=False)
    assert fused.shape == plain.shape and fused.dtype == plain.dtype
    assert torch.allclose(fused, plain, atol=1e-5)
    for g_fused, g_plain in zip(
        torch.autograd.grad(fused, (x, weight), grad), torch.autograd.grad(plain, (x, weight), grad), strict=True
    ):
        assert torch.allclose(g_fused, g_plain, atol=1e-4), (g_fused - g_plain).abs().max()
    xf = x.detach().float().requires_grad_()
    n_fused = _op_calls(lambda: ops.rms_norm(xf, weight.detach().float(), 1e-6, fused=True).sum().backward())
    n_plain = _op_calls(lambda: ops.rms_norm(xf, weight.detach().float(), 1e-6, fused=False).sum().backward())
    assert n_fused < n_plain, (n_fused, n_plain)
    assert _graph_nodes(ops.rms_norm(xf, weight.detach().float(), 1e-6, fused=True)) == 2  # the node + x's leaf


def test_fused_swiglu_kernels_match_float64_over_the_whole_float32_range() -> None:
    """MegaMoE's SwiGLU kernels write exp out (Cephes' expf, so the loops vectorise): within 1e-6
    of float64 torch forward and 1e-5 backward, with and without V4's clamp. Gates beyond exp's clamp (|x| > 87) give
    outputs below 1e-30 where torch's underflow to zero: the absolute floor below."""
    import numpy as np
    import torch

    from traceladder.workload import kernels

    rng = np.random.default_rng(0)
    h = (rng.standard_normal((257, 2 * 24)) * 30).astype(np.float32)
    h[0, :6] = [-100.0, 100.0, 87.5, -88.5, 0.0, -1e-30]  # beyond the clamp of exp's argument, and zero
    dact = rng.standard_normal((257, 24)).astype(np.float32)
    for limit in (0.0, 7.0):
        act, dh, act_again = np.empty_like(dact), np.empty_like(h), np.empty_like(dact)
        kernels.swiglu_forward(h, limit, act)
        kernels.swiglu_backward(dact, h, limit, dh, act_again)
        x = torch.from_numpy(h).double().requires_grad_()
        gate, up = x[:, :24], x[:, 24:]
        if limit:
            gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
        ref = gate * torch.sigmoid(gate) * up
        (ref * torch.from_numpy(dact).double()).sum().backward()
        assert x.grad is not None
        ref_np, grad_np = ref.detach().numpy(), x.grad.numpy()
        assert np.all(np.abs(act - ref_np) <= 1e-6 * np.abs(ref_np) + 1e-30), limit
        # the backward writes act again for the wgrad; fastmath may round it differently by an ulp
        assert np.allclose(act_again, act, rtol=1e-6, atol=0.0)
        # float32 throughout, fastmath: the grads are within 5e-6 of their scale (1e-5 allowed)
        assert np.abs(dh - grad_np).max() <= 1e-5 * np.abs(grad_np).max(), limit


def test_the_log_line_carries_the_slowest_ranks_compute_thread_cpu_time(proxy_runs: dict[str, Run]) -> None:
    lines = [ln for ln in proxy_runs["base"].stdout.splitlines() if "elapsed time per iteration" in ln]
    assert lines and all(re.search(r"step cpu time per iteration \(ms\): \d+\.\d \|", ln) for ln in lines)


def test_recompute_replays_under_the_forwards_autocast() -> None:
    """The replay in backward runs in the forward's autocast (as torch.utils.checkpoint does): the
    same grads as no recompute, and no dtype clash in an op that autocast does not cast (bmm)."""
    import torch

    from traceladder.workload.recompute import recompute

    w = torch.randn(8, 8, requires_grad=True)

    def run(x: torch.Tensor) -> torch.Tensor:
        h = x @ w  # bf16 under autocast
        return torch.bmm(h.unsqueeze(0), x.to(h.dtype).unsqueeze(0).transpose(1, 2)).float().sum(0)

    x = torch.randn(8, 8, requires_grad=True)
    grads = []
    for fn in (run, lambda t: recompute(run, t)):
        w.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fn(x)
        out.sum().backward()  # the replay's weight grads reach .grad inside the recompute's backward
        grads.append(w.grad)
    assert torch.equal(grads[0], grads[1])


def test_mega_moe_layout_and_movement_kernels_match_torch() -> None:
    """MegaMoE's compiled layout, bucketing and scatter kernels against the torch ops they replace,
    on unbalanced routing (some experts get no rows, so buckets are padded) and 3 chunks."""
    import torch

    from traceladder.workload import kernels
    from traceladder.workload.experts import bucket_slots

    gen = torch.Generator().manual_seed(7)
    n_tok, k, n_local, world, chunks = 50, 3, 4, 2, 3
    idx = torch.randint(0, n_local * world - 2, (n_tok, k), generator=gen)  # experts 6 and 7 get none
    per_chunk = -(-n_tok // chunks)
    order, token, local_id = (torch.empty(n_tok * k, dtype=torch.int64) for _ in range(3))
    send = torch.empty(chunks, world, dtype=torch.int64)
    kernels.moe_plan(
        idx.reshape(-1).numpy(), k, per_chunk, n_local, order.numpy(), token.numpy(), local_id.numpy(), send.numpy()
    )
    flat = idx.reshape(-1)
    chunk_of = torch.arange(n_tok * k) // k // per_chunk
    ref = torch.argsort(chunk_of * (n_local * world) + flat, stable=True)
    assert torch.equal(order, ref) and torch.equal(token, ref // k) and torch.equal(local_id, flat[ref] % n_local)
    ref_send = torch.bincount(chunk_of[ref] * world + flat[ref] // n_local, minlength=chunks * world).view(
        chunks, world
    )
    assert torch.equal(send, ref_send)

    for dtype in (torch.float32, torch.float64):
        x = torch.randn(n_tok, 5, generator=gen, dtype=dtype)
        payload = torch.empty(n_tok * k, 6, dtype=dtype)
        kernels.gather_payload(x.numpy(), token.numpy(), local_id.numpy(), payload.numpy())
        assert torch.equal(payload[:, :5], x[token]) and torch.equal(payload[:, 5].long(), local_id)
        slot = torch.empty(n_tok * k, dtype=torch.int64)
        cap = kernels.payload_slots(payload.numpy(), n_local, slot.numpy())
        ref_slot, ref_cap, _ = bucket_slots(local_id, n_local)
        assert cap == ref_cap and torch.equal(slot, ref_slot)
        buckets = torch.zeros(n_local * cap, 5, dtype=dtype)
        kernels.scatter_rows(payload.numpy(), slot.numpy(), buckets.numpy())
        assert torch.equal(buckets, torch.zeros_like(buckets).index_copy(0, slot, payload[:, :5]))

        rows, weight = (
            torch.randn(n_tok * k, 5, generator=gen, dtype=dtype),
            torch.rand(n_tok * k, generator=gen, dtype=dtype),
        )
        out = torch.full((n_tok, 5), float("nan"), dtype=dtype)  # the kernel zeroes it first
        kernels.scatter_add_rows(rows.numpy(), weight.numpy(), token.numpy(), out.numpy())
        assert torch.allclose(out, torch.zeros_like(out).index_add_(0, token, rows * weight[:, None]))
        kernels.scatter_add_rows(rows.numpy(), weight[:0].numpy(), token.numpy(), out.numpy())
        assert torch.allclose(out, torch.zeros_like(out).index_add_(0, token, rows))
        grad = torch.randn(n_tok, 5, generator=gen, dtype=dtype)
        grad_rows, grad_weight = torch.empty_like(rows), torch.empty_like(weight)
        kernels.gather_scale_dot(
            grad.numpy(), token.numpy(), weight.numpy(), rows.numpy(), grad_rows.numpy(), grad_weight.numpy()
        )
        assert torch.allclose(grad_rows, grad[token] * weight[:, None])
        assert torch.allclose(grad_weight, (grad[token] * rows).sum(1))


@pytest.mark.parametrize("balanced", [True, False], ids=["forced-balance", "top-k"])
def test_clamped_swiglu_is_the_same_math_on_every_expert_path(balanced: bool) -> None:
    """V4's clamped SwiGLU (v4_grouped_experts_support_clamped_swiglu): the expert loop, the grouped
    GEMM and MegaMoE's hand-written backward give the same outputs and grads where the clamp bites;
    under top-k routing too, whose uneven experts pad the buckets (MegaMoE then in 2 chunks)."""
    import torch

    from traceladder.workload.comm import Comm
    from traceladder.workload.moe import MoE

    base = [
        *("--expert_model_parallel_size", "1", "--num_experts", "4", "--moe_ffn_hidden_size", "8"),
        *("--hidden_size", "16", "--seq_length", "32", "--moe_router_topk", "2"),
        *("--v4_grouped_experts_support_clamped_swiglu", "True"),
        *("--moe_router_force_load_balancing", str(balanced)),
    ]
    paths = {
        "loop": [],
        "grouped": ["--use_turbo_grouped_gemm", "True"],
        "mega": ["--use_turbo_mega_moe", "True", "--mega_moe_chunks", "1" if balanced else "2"],
    }
    results = {}
    for name, flags in paths.items():
        s = parse(base + flags, env={})
        assert s.swiglu_limit == 7.0
        torch.manual_seed(0)
        moe = MoE(s, Comm(0, 1)).double()
        with torch.no_grad():
            for p in moe.parameters():
                p.normal_(0.0, 1.5)
        torch.manual_seed(1)
        x = torch.randn(32, 16, dtype=torch.float64, requires_grad=True)
        y = moe(x, torch.arange(32))
        y.pow(2).sum().backward()
        results[name] = (y.detach(), x.grad, moe.experts.w1.grad, moe.experts.w2.grad)
        if name == "loop" and not balanced:  # uneven experts: the buckets are padded
            counts = torch.bincount(moe.router(x, torch.arange(32))[0].reshape(-1), minlength=4)
            assert counts.min() < counts.max()
        if name == "loop":  # the clamp bites on this input
            with torch.no_grad():
                h = x @ moe.experts.w1[0]
            assert (h.abs() > 7.0).any()
    for name in ("grouped", "mega"):
        for ref, got in zip(results["loop"], results[name]):
            # MegaMoE's dispatch payload is fp32 (ids ride in it): equal to 1e-6 of the tensor's scale
            assert torch.allclose(ref, got, rtol=0.0, atol=1e-6 * float(ref.abs().max())), name


def test_two_trainers_stepped_alternately_keep_their_own_state() -> None:
    """The paired calibration bench (benchmarks/proxy_paired.py) steps a rung and its parent in one
    process: each model's losses and grad norms are those it has when stepped alone."""
    from traceladder.workload.comm import Comm
    from traceladder.workload.metrics import PeakMemory
    from traceladder.workload.train import Trainer

    tiny = [*TINY, "--expert_model_parallel_size", "1", "--global_batch_size", "1", "--train_iters", "3"]
    settings = [parse(tiny, env={}), parse([*tiny, "--use_turbo_grouped_gemm", "True", "--seed", "11"], env={})]
    memory = PeakMemory()
    alone = []
    for s in settings:
        trainer = Trainer(s, Comm(0, 1), 0)
        alone.append([trainer.step(it, memory) for it in (1, 2, 3)])
    trainers = [Trainer(s, Comm(0, 1), 0) for s in settings]
    paired: list[list[tuple[float, float]]] = [[], []]
    for it, order in zip((1, 2, 3), ((0, 1), (1, 0), (0, 1))):
        for v in order:
            paired[v].append(trainers[v].step(it, memory))
    assert paired == alone
    assert alone[0] != alone[1]  # the two models differ, so a mix-up would show
