"""The local backend's triage runs, on this host with the real runner (runner/rung.py): a confirm's
block runs (`local_run_block`) and the explanation's profiled runs (`local_run_profiled`), each in a
scratch folder, or a repro's block runs stored through its scratch sink (`store_run_block`); and
which of a run's traces the explanation reads (`rank0_trace`), for every backend.

The triage's steps (confirm, bisect, explain, engine) take these as injected callables and import no
runner themselves; the docker and Slurm backends' runs are in workflows/triage_backends.py."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from traceladder.core.documents import JSONObject, JSONValue, as_list
from traceladder.storage.artifacts import ArtifactSink
from traceladder.triage.confirm import RunBlock
from traceladder.triage.explain import RunProfiled


def rank0_trace(result: JSONObject) -> str | None:
    """The trace key (or path) the explanation reads from a run's result: rank 0's, else the first
    one; None when the run did not end `ok` or wrote none."""
    keys: Sequence[JSONValue] = as_list(result.get("traces") or [])
    names = [str(k) for k in keys]
    if result.get("status") != "ok" or not names:
        return None
    rank0 = [k for k in names if k.rsplit("/", 1)[-1].startswith("rank0.")]
    return (rank0 or names)[0]


def _runner(root: Path, run_id: str) -> Callable[[JSONObject], JSONObject]:
    """spec -> the real runner's result, its artifacts under `root` (imported when a run starts)."""
    from traceladder.storage.artifacts import DirArtifactSink

    return _runner_into(DirArtifactSink(root), run_id)


def _runner_into(sink: ArtifactSink, run_id: str) -> Callable[[JSONObject], JSONObject]:
    """spec -> the real runner's result, its artifacts stored through `sink`."""
    from traceladder.runner.rung import run_rung
    from traceladder.rung_spec import RunnerSpec

    def run(spec: JSONObject) -> JSONObject:
        import json

        return run_rung(RunnerSpec.from_json(json.dumps(spec)), run_id, sink, echo=None)

    return run


def store_run_block(sink: ArtifactSink, run_id: str) -> RunBlock:
    """A confirm's runs on this host, stored through `sink` under each spec's storage prefix (a
    repro's scratch prefix, cli/triage.py), as run `run_id`."""
    run = _runner_into(sink, run_id)
    return lambda spec, side, block: run(spec)


def local_run_block(workdir: Path | None = None, run_id: str = "triage") -> RunBlock:
    """A confirm's runs on this host, artifacts in a scratch folder (the confirm keeps each run's
    metrics in triage.json)."""
    run = _runner(workdir or Path(tempfile.mkdtemp(prefix="traceladder-triage-")), run_id)
    return lambda spec, side, block: run(spec)


def local_run_profiled(workdir: Path | None = None, run_id: str = "triage") -> RunProfiled:
    """The explanation's profiled run on this host: its rank-0 trace file, or None."""
    run = _runner(workdir or Path(tempfile.mkdtemp(prefix="traceladder-explain-runs-")), run_id)

    def profiled(spec: JSONObject, side: str) -> Path | None:
        chosen = rank0_trace(run(spec))
        return Path(chosen) if chosen else None

    return profiled
