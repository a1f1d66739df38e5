"""Analyse one trace that lives in the artifact store, and store its reports beside it:
`<rung>/traces/rank0.pt.trace.json.gz` → `<rung>/analysis/rank0/{gpu_timeline.csv, ..., analysis.json}`."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from . import storage_adapter as layout
from .storage_adapter import ArtifactSink


def analysis_prefix(trace_key: str) -> str:
    from traceladder.analysis.analyzers.trace import output_stem

    rung, _, name = trace_key.rpartition(f"/{layout.TRACES_FOLDER}/")
    return layout.analysis_prefix(rung, output_stem(Path(name)))


def tracelens_prefix(trace_key: str) -> str:
    """Where `engine: tracelens` stores TraceLens's own CSVs: beside the builtin ones."""
    from traceladder.analysis.analyzers.trace import output_stem

    rung, _, name = trace_key.rpartition(f"/{layout.TRACES_FOLDER}/")
    return layout.tracelens_prefix(rung, output_stem(Path(name)))


def analysis_key(trace_key: str) -> str:
    return f"{analysis_prefix(trace_key)}/{layout.ANALYSIS_OBJECT}"


def analyze_stored(
    store: ArtifactSink,
    trace_key: str,
    roofline_share: float | None = None,
    gpu_model: str | None = None,
    spawn: bool | None = None,
    expect: Any = None,
) -> dict[str, Any]:
    """``expect``: what the run's lens records, for the trace gate (reports/trace_gate.py).
    ``roofline_share`` (the ladder's ``headroom.share``) and ``gpu_model`` (the cluster's name,
    for a trace that names no known device) feed the roofline; None keeps the defaults.
    ``spawn``: analyse in a spawned interpreter (None: when a second CPU is free)."""
    from traceladder.analysis.model.events import TraceError
    from traceladder.analysis.spawned import analysis_runner

    out_prefix = analysis_prefix(trace_key)
    # the caller (an Airflow task) has threads, so no fork here: a spawned interpreter, started
    # before the download so its imports overlap it, uses the second CPU (analysis/spawned.py)
    with tempfile.TemporaryDirectory(prefix="traceladder-analysis-") as tmp, analysis_runner(spawn) as runner:
        local = Path(tmp) / trace_key.rsplit("/", 1)[-1]
        data = store.get_verified_buffer(trace_key)
        out_dir = Path(tmp) / "reports"
        try:
            extra: dict[str, Any] = {"gpu_model": gpu_model, "expect": expect if isinstance(expect, dict) else None}
            if roofline_share is not None:
                extra["roofline_share"] = roofline_share
            analysis = runner.run(local, out_dir, data, **extra)
        except TraceError as exc:  # name the stored object, not the temporary copy
            err = TraceError(trace_key, exc.reason)
            err.args = (f"{store.describe(trace_key)}: {exc.reason}",)  # Path() would fold "s3://"
            raise err from None
        for path in sorted(out_dir.iterdir()):
            store.put_file(f"{out_prefix}/{path.name}", path)
    store.write_manifest(out_prefix)
    return {"trace": trace_key, "analysis": f"{out_prefix}/{layout.ANALYSIS_OBJECT}", "device": analysis.get("device")}


def collectives_key(rung_prefix: str) -> str:
    return f"{layout.ranks_prefix(rung_prefix)}/{layout.COLLECTIVES_OBJECT}"


def analyze_stored_ranks(
    store: ArtifactSink, rung_prefix: str, trace_keys: list[str], gpus_per_node: int | None = None
) -> dict[str, Any]:
    """Join one rung's per-rank traces into TraceLens's multi-rank collective reports; with
    ``gpus_per_node`` (TraceLens's ``--gpus_per_node``) they get its node_id/node_span columns."""
    from traceladder.analysis.analyzers.ranks import analyze_ranks

    out_prefix = layout.ranks_prefix(rung_prefix)
    with tempfile.TemporaryDirectory(prefix="traceladder-ranks-") as tmp:
        paths = []
        for key in trace_keys:
            local = Path(tmp) / key.rsplit("/", 1)[-1]
            local.write_bytes(store.get_verified(key))
            paths.append(local)
        out_dir = Path(tmp) / "reports"
        collectives = analyze_ranks(paths, out_dir, gpus_per_node=gpus_per_node)
        for path in sorted(out_dir.iterdir()):
            store.put_file(f"{out_prefix}/{path.name}", path)
    store.write_manifest(out_prefix)
    return {
        "rung_prefix": rung_prefix,
        "collectives": collectives_key(rung_prefix),
        "world_size": collectives.get("world_size"),
    }
