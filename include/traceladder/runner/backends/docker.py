"""Docker backend, inside the runner container on an Instinct host: Primus as madengine's
`primus_train/run.sh` launches it, wrapped by the lens's collector as madengine's tools do."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from traceladder.runner.spec import render_overrides

if TYPE_CHECKING:  # the runner image has no pydantic; this module reads RunnerSpec too
    from traceladder.plan import RungSpec

PRIMUS_DIR = Path(os.environ.get("PRIMUS_PATH", "/workspace/Primus"))


def collector_dir(workspace: Path, lens: str) -> Path:
    return workspace / {"rocprofv3": "rocprof_output", "rocm_trace_lite": "rocm_trace_lite_output"}.get(lens, "")


def lens_wrapper(spec: RungSpec, workspace: Path) -> list[str]:
    """The collector prefix: madengine prepends each tool's command (the last tool outermost)."""
    if spec.lens == "rocprofv3":
        return ["rocprofv3", "--runtime-trace", "--output-format", "json", "-d", str(collector_dir(workspace, spec.lens)), "--"]
    if spec.lens == "rocm_trace_lite":
        return ["rtl", "trace", "--mode", "lite", "-o", str(collector_dir(workspace, spec.lens) / "trace.db")]
    return []  # torch lenses are Primus's own profiler keys, already in model_args


def command(spec: RungSpec, workspace: Path) -> tuple[list[str], dict[str, str]]:
    args = dict(spec.model_args)
    config = str(args.pop("config_path", ""))
    overrides = render_overrides(args)
    log_file = workspace / f"log_mp_pretrain_{Path(config).stem or 'primus'}.txt"
    primus = ["primus-cli", "direct", "--log_file", str(log_file), "--", "train", "pretrain", "--config", config, *overrides]
    env = {**spec.docker_env_vars, "PRIMUS_WORKSPACE": str(workspace)}
    return [*lens_wrapper(spec, workspace), *primus], env
