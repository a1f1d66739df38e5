"""Docker backend, inside the runner container on an Instinct host: Primus launched as MAD's
`scripts/primus_train/run.sh` launches it under madengine, wrapped by the lens's collector as
madengine's tools do (the last tool outermost).

What the release image needs (docs/facts.md, "The real rocm/primus image and madengine's launch"):
- the working directory is the Primus checkout (``PRIMUS_PATH``, default ``/workspace/Primus``):
  the training ranks open a relative ``--config`` against it, and ``primus-cli direct`` runs
  ``pip install -r requirements.txt`` from it;
- ``primus-cli`` is not on PATH: it is called by absolute path in the checkout;
- ``PRIMUS_WORKSPACE`` and ``--log_file`` are absolute (the rung's workspace);
- no ``--`` between the launcher options and ``train pretrain``: ``rtl`` strips every ``--`` token
  from the command it wraps, and ``primus-cli-direct.sh`` stops reading launcher options at the
  first token it does not know (``train``), so the command parses the same with or without it;
- ``--use_rocm_mem_info True`` unless the ladder sets it: otherwise ``rocm max mem`` is sampled on
  iterations 1-2 only and a later rise is missed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from traceladder.rung_spec import render_overrides
from traceladder.core.errors import TraceladderError

if TYPE_CHECKING:  # the runner image has no pydantic; this module reads RunnerSpec too
    from traceladder.plan.build import RungSpec as _PlanSpec
    from traceladder.rung_spec import RunnerSpec

    RungSpec = _PlanSpec | RunnerSpec  # the runner image reads RunnerSpec

DEFAULT_PRIMUS_PATH = "/workspace/Primus"
# lens -> (the executable its wrapper needs, the one-line fix when the runner image lacks it)
LENS_TOOLS = {
    "rocprofv3": (
        "rocprofv3",
        "rocprofv3 is not on PATH in the runner image (it ships with ROCm in rocm/primus; check BASE_IMAGE)",
    ),
    "rocm_trace_lite": (
        "rtl",
        "rtl is not in the runner image: put the rocm_trace_lite wheel (GitHub release) in docker/wheels/ "
        "or pass --build-arg RTL_WHEEL=<wheel URL>, and rebuild the runner image",
    ),
}


class LensUnavailable(TraceladderError, RuntimeError):
    """The lens's collector is missing in this image; the message is the one-line fix."""


def primus_path(env: dict[str, str] | None = None) -> Path:
    return Path((env or os.environ).get("PRIMUS_PATH") or DEFAULT_PRIMUS_PATH)


def collector_dir(workspace: Path, lens: str) -> Path:
    return workspace / {"rocprofv3": "rocprof_output", "rocm_trace_lite": "rocm_trace_lite_output"}.get(lens, "")


def lens_preflight(spec: RungSpec) -> None:
    """Raise LensUnavailable when the lens's collector is not installed (before Primus starts)."""
    tool = LENS_TOOLS.get(spec.lens)
    if tool and shutil.which(tool[0]) is None:
        raise LensUnavailable(f"lens {spec.lens}: {tool[1]}")


def lens_wrapper(spec: RungSpec, workspace: Path) -> list[str]:
    """The collector prefix: madengine prepends each tool's command (the last tool outermost)."""
    if spec.lens == "rocprofv3":
        return [  # the write-up's lens: kernels and memory copies, no runtime API trace
            "rocprofv3",
            "--kernel-trace",
            "--memory-copy-trace",
            "--output-format",
            "json",
            "-d",
            str(collector_dir(workspace, spec.lens)),
            "--",
        ]
    if spec.lens == "rocm_trace_lite":
        return ["rtl", "trace", "--mode", "lite", "-o", str(collector_dir(workspace, spec.lens) / "trace.db")]
    return []  # torch lenses are Primus's own profiler keys, already in model_args


def workdir(spec: RungSpec, default: Path) -> Path:
    """Primus runs from its checkout, as MAD's run.sh does (`cd $PRIMUS_ROOT`)."""
    return primus_path({**os.environ, **spec.docker_env_vars})


def command(spec: RungSpec, workspace: Path) -> tuple[list[str], dict[str, str]]:
    workspace = workspace.resolve()
    args = spec.primus_overrides()
    config = str(args.pop("config_path", ""))
    args.setdefault("use_rocm_mem_info", True)
    overrides = render_overrides(args)
    log_file = workspace / f"log_mp_pretrain_{Path(config).stem or 'primus'}.txt"
    cli = str(workdir(spec, workspace) / "primus-cli")
    primus = [cli, "direct", "--log_file", str(log_file), "train", "pretrain", "--config", config, *overrides]
    env = {**spec.docker_env_vars, "PRIMUS_WORKSPACE": str(workspace)}
    return [*lens_wrapper(spec, workspace), *primus], env
