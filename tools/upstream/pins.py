"""Pins, paths and tables for ``tools/upstream_facts.py``: the pinned commits and tags (the one
place to move one), the upstream files it reads, the rules it checks, and the log segments it looks for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
CSV_PATH = ROOT / "include" / "traceladder" / "config" / "upstream" / "facts.csv"
DOCS_PATH = ROOT / "docs" / "upstream.md"
LADDERS_DIR = ROOT / "include" / "configs" / "ladders"
WRITEUP = ROOT / "include" / "traceladder" / "config" / "upstream" / "writeup.yaml"  # the write-up's own context


# ---------------------------------------------------------------------------------------------
# Pins: move one here, run the script, read the diff.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pin:
    repo: str  # owner/name on GitHub
    env: str  # the environment variable naming the bare mirror
    commit: str  # full 40-hex commit
    label: str  # what the commit is (branch or tag), for people


PRIMUS = Pin(
    "AMD-AGI/Primus", "TRACELADDER_MIRROR_PRIMUS", "fd1eeabbad15135e3702094087e96142b4b4eacb", "main (after v26.5.1)"
)
# Older Primus releases whose iteration-line shapes the runner still parses.
PRIMUS_TAGS = {
    "v26.4.0": "4dbe94f991e07db89d9f105176864280266bc617",
    "v26.5.1": "9a86ba8c99d6d41199442edef6d02a2bfad71c7c",
}
MEGATRON = Pin(
    "NVIDIA/Megatron-LM",
    "TRACELADDER_MIRROR_MEGATRON",
    "d3528a21301db2d12e92912b3ec025dc8a2ed4d6",
    "Primus's third_party/Megatron-LM submodule",
)
MADENGINE = Pin("ROCm/madengine", "TRACELADDER_MIRROR_MADENGINE", "ef87d05efe8849173f1e8e26182456ca346b720b", "develop")
RTL = Pin("sunway513/rocm-trace-lite", "TRACELADDER_MIRROR_RTL", "16f0482364d5fa30a69259c5f5f1703d13b3e85e", "main")
# rocm-trace-lite releases checked for each flag and mode (madengine's pre-script installs v0.3.3).
RTL_TAGS = {
    "v0.3.3": "718470d94baa96177f9a44e6763a61b7ba5959a6",
    "v0.3.4": "a9a7b5bf58c9cd70e37057978944e43bff70bb74",
    "v0.3.5": "8d4db12003663f79505aed4d95cd0cb785ec3398",
    "v0.3.6": "8ddf393b46bd461bdebf67e9ce82862844cd2765",
    "v0.3.7": "bb8792905d8596c68d1491b62dc37cadd8f72ff8",
}
ROCPROFILER = Pin(
    "ROCm/rocm-systems", "TRACELADDER_MIRROR_ROCPROFILER", "1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992", "develop"
)
PINS = (PRIMUS, MEGATRON, MADENGINE, RTL, ROCPROFILER)


# ---------------------------------------------------------------------------------------------
# What to read (named paths only; found once with `git grep` at the pins, see docs/upstream.md)
# ---------------------------------------------------------------------------------------------
EXPERIMENT = "examples/megatron/configs/MI355X/deepseek_v4_flash-BF16-pretrain.yaml"
MEGATRON_ARGUMENTS = "megatron/training/arguments.py"
MEGATRON_TRAINING = "megatron/training/training.py"
TRAINING_LOG_PATCH = "primus/backends/megatron/patches/training_log/print_rank_last_patches.py"
LEGACY_TRAINER = "primus/modules/trainer/megatron/trainer.py"
ROCPROFV3 = "projects/rocprofiler-sdk/source/bin/rocprofv3.py"
RTL_CLI = "rocm_trace_lite/cli.py"
RTL_CMD_TRACE = "rocm_trace_lite/cmd_trace.py"
MADENGINE_TOOLS = "src/madengine/scripts/common/tools.json"
MADENGINE_RUNNER = "src/madengine/execution/container_runner.py"
MADENGINE_RTL_PRE = "src/madengine/scripts/common/pre_scripts/trace.sh"

# The rules that make "the winning definition" what it is; if one of these lines moves, the
# precedence in primus.py (primus_keys) must be re-read before the table is trusted (the script stops).
PRIMUS_RULES = {
    "primus/core/launcher/parser.py": [
        "merge_namespace(module_config, model_config, allow_override=False",
        "yaml_utils.override_namespace(module_config, module.overrides)",
    ],
    "primus/core/config/yaml_loader.py": ["merged = deep_merge(merged, local_cfg)  # current file highest priority"],
    "primus/core/runtime/train_runtime.py": [
        "merged_params_dict = deep_merge(base_params_dict, override_dict)",
        "merge_namespace(backend_args, module_config.params, allow_override=False",
    ],
    "primus/backends/megatron/argument_builder.py": ["if key not in megatron_keys:"],
    "primus/cli/subcommands/train.py": ['runtime.run_train_module(module_name="pre_trainer"'],
}

# Every file under primus/, runner/, primus-cli, examples/deepseek-v4/ and the experiment's config
# chain that names one of the ladders' environment variables (`git grep -lw VAR` at the Primus pin,
# tests and *.md left out). A file is a reader only where the variable is read, not just named in a
# comment; the script decides that per file.
ENV_CANDIDATES = (
    "examples/deepseek-v4/projection/script/deepseek_v4_layer_trace-projection.sh",
    "examples/deepseek-v4/run_deepseek_v4.sh",
    "examples/deepseek-v4/run_deepseek_v4_flash.sh",
    "examples/deepseek-v4/run_deepseek_v4_flash_proxy.sh",
    "examples/deepseek-v4/run_deepseek_v4_pro_muon_1gpu.sh",
    "examples/deepseek-v4/run_dsv4_projection_1gpu.sh",
    EXPERIMENT,
    "primus/agents/tuning_agent/evaluator.py",
    "primus/backends/megatron/core/transformer/compressor.py",
    "primus/backends/megatron/core/transformer/deepseek_v4_attention.py",
    "primus/backends/megatron/core/transformer/dual_rope.py",
    "primus/backends/megatron/core/transformer/hyper_connection.py",
    "primus/backends/megatron/core/transformer/indexer.py",
    "primus/backends/megatron/core/transformer/local_rmsnorm.py",
    "primus/backends/megatron/core/transformer/moe/_triton/v4_router_post.py",
    "primus/backends/megatron/core/transformer/moe/v4_hash_router.py",
    "primus/backends/megatron/core/transformer/moe/v4_topk_router.py",
    "primus/backends/megatron/core/transformer/v4_attention_kernels/_triton_common/compressor_pool.py",
    "primus/backends/megatron/core/transformer/v4_attention_kernels/_triton_common/hc_glue.py",
    "primus/backends/megatron/core/transformer/v4_attention_kernels/_triton_common/indexer_score.py",
    "primus/backends/megatron/core/transformer/v4_attention_kernels/_triton_common/indexer_score_post.py",
    "primus/backends/megatron/core/transformer/v4_attention_kernels/_triton_common/rmsnorm.py",
    "primus/backends/megatron/core/transformer/v4_attention_kernels/_triton_common/rope_interleaved_partial.py",
    "primus/backends/megatron/core/transformer/v4_attention_kernels/_triton_common/sinkhorn.py",
    "primus/cli/subcommands/projection.py",
    "primus/configs/models/megatron/deepseek_v4_base.yaml",
    "primus/configs/platforms/platform_azure.yaml",
    "primus/core/launcher/initialize.py",
    "primus/core/projection/examples/project_dlrm.py",
    "primus/core/projection/memory_projection/benchmark.py",
    "primus/core/projection/memory_projection/extrapolation.py",
    "primus/core/projection/module_profilers/dlrm.py",
    "primus/core/projection/module_profilers/language_model.py",
    "primus/core/projection/module_profilers/sparse_embedding.py",
    "primus/core/projection/module_profilers/transformer_layer.py",
    "primus/core/projection/performance_projection/projection.py",
    "primus/core/projection/training_config.py",
    "primus/tools/preflight/node_smoke/cli.py",
    "primus/tools/preflight/preflight_perf_test.py",
    "runner/.primus.yaml",
    "runner/helpers/envs/base_env.sh",
    "runner/helpers/envs/primus-env.sh",
    "runner/helpers/hooks/train/pretrain/prepare_experiment.sh",
    "runner/lib/validation.sh",
    "runner/primus-cli-direct.sh",
    "runner/primus-cli-slurm-entry.sh",
)
# (variable, file) -> (the line that uses the value, a folder whose files it selects)
ENV_SELECTS = {
    ("PRIMUS_GPU_MODEL", "runner/helpers/envs/primus-env.sh"): (
        'GPU_CONFIG_FILE="${SCRIPT_DIR}/${GPU_MODEL}.sh"',
        "runner/helpers/envs",
    ),
}
# primus/ files that are not on the `train pretrain` path (other primus-cli subcommands or tools).
NOT_TRAIN_PREFIXES = (
    "primus/core/projection/",
    "primus/cli/subcommands/projection.py",
    "primus/tools/preflight/",
    "primus/agents/",
)

# rocprofv3 flags the runner passes (runner/backends/docker.py), the stand-in accepts
# (testkit/standin/rocprofv3) or the vendor write-up uses, plus the output options.
ROCPROFV3_FLAGS = (
    "--",
    "--hip-trace",
    "--kernel-trace",
    "--marker-trace",
    "--memory-copy-trace",
    "--output-directory",
    "--output-file",
    "--output-format",
    "--runtime-trace",
    "--sys-trace",
    "--version",
)
# main() fills a default argparse leaves unset: flag -> (the line that does it, the default)
ROCPROFV3_EFFECTIVE_DEFAULTS = {"--output-format": ('args.output_format = ["rocpd"]', "rocpd")}

# rtl (rocm-trace-lite) arguments the runner passes (runner/backends/docker.py, provenance.py) and
# the stand-in takes (testkit/standin/rtl): subcommand `trace`, its options, and `--version`.
RTL_FLAGS = ("trace", "--mode", "-o", "--version", "--")
RTL_MODE_NOTES = {
    "default": "renamed 'standard' by rocm-trace-lite PR #92 (commit a363f6dc, first in v0.3.6)",
    "standard": "the new name of 'default' (rocm-trace-lite PR #92, first in v0.3.6)",
}

# madengine: the --additional-context fields the plan renders (plan/build.py additional_context)
# -> (the file that reads it, the line that shows it, what madengine does with it, its default)
MADENGINE_FIELDS = {
    "docker_env_vars": (
        MADENGINE_RUNNER,
        'if "docker_env_vars" in self.context.ctx:',
        "each key becomes `--env KEY=VALUE` on `docker run` (ContainerRunner.get_env_arg)",
        "{}",
    ),
    "model_args": (
        MADENGINE_RUNNER,
        'model_args = self.context.ctx.get("model_args", model_info["args"])',
        "replaces the model's `args` from models.json; passed to the model's script (MAD's run.sh)",
        'model_info["args"]',
    ),
    "tools": (
        MADENGINE_RUNNER,
        'for ctx_tool_config in self.context.ctx["tools"]:',
        "list of tools; each one's cmd is prepended to the run command, so the last tool is outermost "
        "(ContainerRunner.apply_tools)",
        "",
    ),
    "tools.name": (
        MADENGINE_RUNNER,
        'tool_config = tool_file["tools"][tool_name]',
        "looked up in scripts/common/tools.json (KeyError for an unknown name)",
        "",
    ),
    "tools.cmd": (
        MADENGINE_RUNNER,
        'tool_config.update({"cmd": ctx_tool_config["cmd"]})',
        "replaces the tool's cmd from tools.json",
        "",
    ),
}
# madengine tools the ladders name (lens switch), the write-up used, and the other rtl preset.
MADENGINE_TOOLS_USED = ("rocm_trace_lite", "rocm_trace_lite_default", "rocprofv3", "rocprofv3_lightweight")


@dataclass(frozen=True)
class Segment:
    name: str  # the stable segment id
    pin: Pin
    commit: str
    path: str
    needle: str  # a literal line fragment of the statement that prints it
    note: str
    span: int = 1  # statements printed together (the legacy trainer builds one segment over several)


def segments() -> list[Segment]:
    m, p = MEGATRON, PRIMUS
    mc, pc = MEGATRON.commit, PRIMUS.commit
    v264, v2651 = PRIMUS_TAGS["v26.4.0"], PRIMUS_TAGS["v26.5.1"]
    mega = "Megatron-LM training_log (the submodule commit of Primus main, v26.5.1 and v26.4.0)"
    head = "Primus main: training_log patch"
    old5 = "Primus v26.5.1: training_log patch"
    old4 = "Primus v26.4.0: training_log patch (the core runtime, the default)"
    leg4 = "Primus v26.4.0: legacy trainer (PRIMUS_TRAIN_RUNTIME=legacy)"
    segs = [
        Segment("iteration", m, mc, MEGATRON_TRAINING, "' iteration {:8d}/{:8d} |'", mega),
        Segment("consumed_samples", m, mc, MEGATRON_TRAINING, "' consumed samples: {:12d} |'", mega),
        Segment(
            "elapsed_time_per_iteration",
            m,
            mc,
            MEGATRON_TRAINING,
            "' elapsed time per iteration (ms): {:.1f} |'",
            mega + "; one number (Primus rewrites it after log_avg_skip_iterations)",
        ),
        Segment(
            "throughput_per_gpu",
            m,
            mc,
            MEGATRON_TRAINING,
            "' throughput per GPU (TFLOP/s/GPU): {throughput:.1f} |'",
            mega + "; only with log_throughput; one number",
        ),
        Segment("learning_rate", m, mc, MEGATRON_TRAINING, "' learning rate: {learning_rate:.6E} |'", mega),
        Segment("global_batch_size", m, mc, MEGATRON_TRAINING, "' global batch size: {batch_size:5d} |'", mega),
        Segment(
            "lm_loss",
            m,
            mc,
            MEGATRON_TRAINING,
            "' {}: {:.6E} |'.format(key, avg)",
            mega + "; one per loss key ('lm loss' for GPT models), only when > 0",
        ),
        Segment("loss_scale", m, mc, MEGATRON_TRAINING, "' loss scale: {loss_scale:.1f} |'", mega),
        Segment("grad_norm", m, mc, MEGATRON_TRAINING, "' grad norm: {grad_norm:.3f} |'", mega),
        Segment("skipped_iterations", m, mc, MEGATRON_TRAINING, "' number of skipped iterations: {:3d} |'", mega),
        Segment("nan_iterations", m, mc, MEGATRON_TRAINING, "' number of nan iterations: {:3d} |'", mega),
        # Primus main
        Segment(
            "elapsed_time_per_iteration",
            p,
            pc,
            TRAINING_LOG_PATCH,
            'f"elapsed time per iteration (ms): " f"{elapsed_value:.1f}/{avg_elapsed_ms:.1f}"',
            head + "; inst/avg after log_avg_skip_iterations",
        ),
        Segment(
            "throughput_per_gpu",
            p,
            pc,
            TRAINING_LOG_PATCH,
            'f"compute per GPU (TFLOP/s/GPU): {tflops_value:.1f} (avg {avg_tflops:.1f})"',
            head + "; renamed from 'throughput per GPU'; after log_avg_skip_iterations",
        ),
        Segment(
            "tokens_per_gpu_harmonic",
            p,
            pc,
            TRAINING_LOG_PATCH,
            'f" | tokens/s/GPU inst/harmonic mean: {token_value:.1f}/{avg_tokens:.1f}"',
            head + "; appended to the TFLOP/s segment; language models only",
        ),
        Segment("hip_mem", p, pc, TRAINING_LOG_PATCH, 'f" hip mem usage/free/total/usage_ratio: "', head),
        Segment(
            "rocm_mem",
            p,
            pc,
            TRAINING_LOG_PATCH,
            'f" | rocm mem usage/free/total/usage_ratio: "',
            head + "; every iteration with use_rocm_mem_info, else on use_rocm_mem_info_iters and repeated",
        ),
        Segment(
            "rocm_max_mem",
            p,
            pc,
            TRAINING_LOG_PATCH,
            'f" | rank-{max_rank} rocm max mem usage/usage_ratio: "',
            head + "; the max over ranks, sampled like rocm_mem",
        ),
        # Primus v26.5.1
        Segment(
            "elapsed_time_per_iteration",
            p,
            v2651,
            TRAINING_LOG_PATCH,
            'f"elapsed time per iteration (ms): " f"{elapsed_value:.1f}/{avg_elapsed_ms:.1f}"',
            old5,
        ),
        Segment(
            "throughput_per_gpu",
            p,
            v2651,
            TRAINING_LOG_PATCH,
            'f"throughput per GPU (TFLOP/s/GPU): {tflops_value:.1f}/{avg_tflops:.1f}"',
            old5 + "; inst/avg",
        ),
        Segment(
            "tokens_per_gpu_harmonic",
            p,
            v2651,
            TRAINING_LOG_PATCH,
            'f" | tokens/s/GPU inst/harmonic mean: {token_value:.1f}/{avg_tokens:.1f}"',
            old5,
        ),
        Segment("hip_mem", p, v2651, TRAINING_LOG_PATCH, 'f" hip mem usage/free/total/usage_ratio: "', old5),
        Segment("rocm_mem", p, v2651, TRAINING_LOG_PATCH, 'f" | rocm mem usage/free/total/usage_ratio: "', old5),
        Segment(
            "rocm_max_mem",
            p,
            v2651,
            TRAINING_LOG_PATCH,
            'f" | rank-{max_rank} rocm max mem usage/usage_ratio: "',
            old5,
        ),
        # Primus v26.4.0, core runtime
        Segment(
            "elapsed_time_per_iteration",
            p,
            v264,
            TRAINING_LOG_PATCH,
            'f"elapsed time per iteration (ms): " f"{elapsed_value:.1f}/{avg_elapsed_ms:.1f}"',
            old4,
        ),
        Segment(
            "throughput_per_gpu",
            p,
            v264,
            TRAINING_LOG_PATCH,
            'f"throughput per GPU (TFLOP/s/GPU): " f"{tflops_value:.1f}/{avg_tflops:.1f}"',
            old4 + "; inst/avg",
        ),
        Segment(
            "tokens_per_gpu_arith",
            p,
            v264,
            TRAINING_LOG_PATCH,
            'f" | tokens per GPU (tokens/s/GPU): {token_value:.1f}/{avg_tokens:.1f}"',
            old4 + "; inst/arithmetic mean",
        ),
        Segment("hip_mem", p, v264, TRAINING_LOG_PATCH, 'f" hip mem usage/free/total/usage_ratio: "', old4),
        Segment("rocm_mem", p, v264, TRAINING_LOG_PATCH, 'f" | rocm mem usage/free/total/usage_ratio: "', old4),
        Segment(
            "rocm_max_mem",
            p,
            v264,
            TRAINING_LOG_PATCH,
            'f" | rank-{max_rank} rocm max mem usage/usage_ratio: "',
            old4,
        ),
        # Primus v26.4.0, legacy trainer
        Segment("iteration", p, v264, LEGACY_TRAINER, '" iteration {:8d}/{:8d} |"', leg4),
        Segment("consumed_samples", p, v264, LEGACY_TRAINER, '" consumed samples: {:12d} |"', leg4),
        Segment(
            "elapsed_time_per_iteration",
            p,
            v264,
            LEGACY_TRAINER,
            '" elapsed time per iteration (ms): {:.1f}/{:.1f} |"',
            leg4 + "; inst/avg",
        ),
        Segment(
            "hip_mem",
            p,
            v264,
            LEGACY_TRAINER,
            'f" hip mem usage/free/total/usage_ratio: {hip_used_mem/1024/1024/1024:.2f}GiB/"',
            leg4 + "; GiB",
            span=3,
        ),
        Segment(
            "rocm_mem",
            p,
            v264,
            LEGACY_TRAINER,
            'f" rocm mem usage/free/total/usage_ratio: {rocm_used_mem/1024/1024/1024:.2f}GiB/"',
            leg4 + "; GiB",
            span=3,
        ),
        Segment(
            "rocm_max_mem",
            p,
            v264,
            LEGACY_TRAINER,
            'log_string += f" rank-{max_rank} max mem usage/usage_ratio: "',
            leg4 + "; 'rank-N max mem usage' (no 'rocm')",
            span=2,
        ),
        Segment(
            "throughput_per_gpu",
            p,
            v264,
            LEGACY_TRAINER,
            'f" throughput per GPU (TFLOP/s/GPU): {throughput:.1f}/"',
            leg4 + "; inst/arithmetic mean",
        ),
        Segment(
            "tokens_per_gpu_arith",
            p,
            v264,
            LEGACY_TRAINER,
            'f" tokens per GPU (tokens/s/GPU): {token_throughput:.1f}/"',
            leg4 + "; inst/arithmetic mean",
        ),
    ]
    return segs
