"""Local backend: the rung runs the DeepSeek-V4-shaped CPU proxy in a subprocess, with the same
Primus overrides and environment a container would get."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traceladder.plan.build import RungSpec as _PlanSpec
    from traceladder.rung_spec import RunnerSpec

    RungSpec = _PlanSpec | RunnerSpec  # the runner image reads RunnerSpec


def command(spec: RungSpec, workspace: Path) -> tuple[list[str], dict[str, str]]:
    env = {**spec.docker_env_vars, "PRIMUS_WORKSPACE": str(workspace)}
    argv = [sys.executable, "-m", "traceladder.workload", *spec.primus_args()]
    return argv, env


def workdir(spec: RungSpec, default: Path) -> Path:
    return default


def lens_preflight(spec: RungSpec) -> None:
    """The CPU proxy's lenses are torch.profiler's: nothing to install."""
