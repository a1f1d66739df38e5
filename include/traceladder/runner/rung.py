"""The rung runner: one code path for both backends.

It starts the rung's command (the CPU proxy, or Primus inside the runner container), keeps its
own deadline, parses the Primus log into step metrics, gathers the lens's trace files, uploads
everything with a manifest, and returns the result that the CLI prints as its last line (XCom).
Artifacts are uploaded whatever happened, so a failed or timed-out rung keeps its log.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TextIO

from traceladder import __version__
from traceladder.core.documents import JSONObject, RungResult
from traceladder.core.process_group import end_group
from traceladder.runner.backends import docker as docker_backend
from traceladder.runner.backends import local as local_backend
from traceladder.runner import forkserver_client, nodes, orphans
from traceladder.runner.forkserver_client import WorkloadRun
from traceladder.runner.disk import disk_full
from traceladder.runner.primus_log import PrimusLogError, parse_iterations, summarize
from traceladder.runner.traces import find_traces
from traceladder.core import layout
from traceladder.storage.artifacts import ArtifactSink, S3ArtifactStore, rung_prefix, safe_key_part
from traceladder.storage.spool import SpoolingSink

if TYPE_CHECKING:  # the runner image has no pydantic: specs may be RunnerSpec (rung_spec.py)
    from traceladder.plan.build import RungSpec as _PlanSpec
    from traceladder.rung_spec import RunnerSpec

    RungSpec = _PlanSpec | RunnerSpec


def _echo_line(echo: TextIO | None) -> Callable[[str], None] | None:
    """A line logger onto the rung's echo stream (the task log), or None without one."""
    if echo is None:
        return None
    stream = echo

    def write(line: str) -> None:
        stream.write(line + "\n")

    return write


# What a rung task returns as XCom (the full result stays in metrics.json).
RESULT_KEYS = ("rung_id", "status", "step_ms", "tokens_per_sec_per_gpu", "peak_mem_gb", "traces", "error")
_BACKENDS = {"local": local_backend, "docker": docker_backend}


def _end_workload(proc: subprocess.Popen[str]) -> None:
    """The deadline: SIGTERM to the workload's group, 5 s, SIGKILL, 5 s (forkserver.py's sequence too)."""

    def reaped(timeout_s: float) -> bool:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    end_group(proc.pid, reaped)


def execute(work: WorkloadRun) -> tuple[int | None, bool]:
    """Run the command cold, teeing its output to the log (and echo); returns (exit code, timed
    out). A log write that fails (a full disk) goes to work.write_errors; the output is still drained."""
    argv, errors, deadline_s = work.argv, work.write_errors, work.deadline_s
    log = work.log_path.open(
        "w", encoding="utf-8", errors="replace", buffering=1
    )  # line-buffered: ENOSPC shows per line
    proc: subprocess.Popen[str] | None = None
    running: Path | None = None
    try:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=work.cwd,
                env={**os.environ, **work.env},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,
            )
        except OSError as exc:
            log.write(f"[traceladder] cannot start {argv[0]}: {exc}\n")
            return 127, False
        running = orphans.record(proc.pid)  # the next rung's preflight stops it if this runner dies

        assert proc.stdout is not None
        reader = forkserver_client.start_tee(proc.stdout, log, work.echo, errors)
        try:
            proc.wait(timeout=deadline_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            _end_workload(proc)
        reader.join(timeout=10)
        if timed_out and not errors:
            log.write(f"[traceladder] deadline of {deadline_s:.0f} s reached; the rung was stopped\n")
        return proc.returncode, timed_out
    except OSError as exc:
        errors.append(exc)
        return (proc.returncode if proc is not None else 127), False
    finally:
        if proc is not None and proc.returncode is not None:
            orphans.forget(running)
        try:
            log.close()
        except OSError as exc:
            errors.append(exc)


def _execute_workload(spec: RungSpec, work: WorkloadRun) -> tuple[int | None, bool]:
    """A local rung through this DAG run's warm launcher (runner/forkserver_client.py) when it can; else, and
    for every other backend and inside a Slurm job (one rung per job: nothing to keep warm),
    execute() as a cold subprocess."""
    in_slurm = bool(os.environ.get("SLURM_JOB_ID"))
    if spec.backend == "local" and not in_slurm and forkserver_client.enabled() and work.workload_args is not None:
        outcome = forkserver_client.run(work, say=_echo_line(work.echo))
        if outcome is not None:
            return outcome
    return execute(work)


def provenance(spec: RungSpec) -> JSONObject:
    from traceladder.runner import provenance as prov

    primus = docker_backend.workdir(spec, Path(".")) if spec.backend == "docker" else None
    return {
        "traceladder_version": __version__,
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "image": spec.image,
        "model_tag": spec.model_tag,
        "config_hash": spec.config_hash,
        "backend": spec.backend,
        **prov.collect(spec.backend, {**os.environ, **spec.docker_env_vars}, primus),
        **_slurm_record(),
    }


def _slurm_record() -> JSONObject:
    """The Slurm job this runner runs in (backend: slurm), from the environment srun gives it."""
    if not os.environ.get("SLURM_JOB_ID"):
        return {}
    return {
        "slurm": {
            "job_id": os.environ["SLURM_JOB_ID"],
            "nodes": os.environ.get("SLURM_JOB_NODELIST", ""),
            "node": os.environ.get("SLURMD_NODENAME", ""),
            "nnodes": int(os.environ.get("SLURM_JOB_NUM_NODES") or 1),
        }
    }


def run_rung(
    spec: RungSpec,
    run_id: str,
    sink: ArtifactSink,
    *,
    workdir: Path | None = None,
    deadline_s: float | None = None,
    echo: TextIO | None = sys.stderr,
    run_over: orphans.RunOver | None = None,
) -> JSONObject:
    """Run one rung spec and store its artifacts; returns metrics.json's data (never raises for a
    failing workload: the status says what happened). ``run_over`` (an Airflow task's lookup of
    a DAG run's state) lets the preflight stop the warm launcher of a run that is over."""
    run_id = safe_key_part(run_id)
    prefix = rung_prefix(spec.storage_prefix, spec.ladder, run_id, spec.rung_id)
    role = nodes.NodeRole.from_env()  # a node of a multi-node rung (runner/nodes.py), else None
    if role is not None and not role.leader:
        return _run_peer_node(spec, role, deadline_s, echo)
    # S3 artifacts go through the host's spool, so an S3 outage loses nothing (storage/spool.py)
    if isinstance(sink, S3ArtifactStore):
        spool = SpoolingSink(sink, log=_echo_line(echo))
        done = spool.pending(prefix)
        if done is not None:  # the rung finished before; only its upload failed: upload, never rerun
            count = spool.flush(prefix)
            if echo is not None:
                echo.write(
                    f"[traceladder] {spec.rung_id}: uploaded {count} spooled artifacts; the rung was not run again\n"
                )
            return done.to_dict()
        spool.discard(prefix)
        sink = spool
    started = time.monotonic()
    # Wall-clock start and end: the order the runs really ran in, checked against plan.json's design.
    started_at = time.time()
    if role is not None and workdir is None:  # the last node: on the shared filesystem, beside its peers
        workdir = role.workdir()
    own_tmp = workdir is None
    root = Path(tempfile.mkdtemp(prefix=f"traceladder-{spec.rung_id}-")) if own_tmp else workdir
    assert root is not None
    workspace = root / "output"
    workspace.mkdir(parents=True, exist_ok=True)
    log_path = root / "log.txt"
    try:
        backend = _BACKENDS[spec.backend]
        if spec.backend == "local":  # a workload whose runner was killed would share this host's cores
            orphans.stop_orphans(_echo_line(echo), run_over)
        argv, env = backend.command(spec, workspace)
        cwd = backend.workdir(spec, root)
        lens_error = None
        write_errors: list[OSError] = []
        try:
            backend.lens_preflight(spec)
        except docker_backend.LensUnavailable as exc:
            lens_error = str(exc)
        if lens_error is not None:  # the rung fails before Primus starts; its log says why
            log_path.write_text(f"[traceladder] {lens_error}\n", encoding="utf-8")
            if echo is not None:
                echo.write(f"[traceladder] {lens_error}\n")
            code, timed_out = None, False
        else:
            if echo is not None:
                echo.write(f"[traceladder] {spec.rung_id}: (cd {cwd} && {' '.join(argv[:6])} ...) ({len(argv)} args)\n")
            code, timed_out = _execute_workload(
                spec, WorkloadRun(argv, env, cwd, log_path, deadline_s or spec.timeout_s, echo, write_errors)
            )
        peer_error = None
        if role is not None:  # the other nodes' traces and logs join this node's (runner/nodes.py)
            remaining = (deadline_s or spec.timeout_s) - (time.monotonic() - started)
            peers = role.wait_for_peers(max(30.0, remaining))
            role.gather(workspace, log_path)
            peer_error = nodes.peer_failure(peers)
        full = disk_full(root, write_errors) if (code is not None and code != 0) or write_errors else None

        figures: dict[str, float | str | list[float] | list[int] | None] = {}
        log_error = None
        try:
            records = parse_iterations(log_path.read_text(encoding="utf-8", errors="replace").splitlines())
            metrics = summarize(records, skip_iterations=spec.warmup_iters, window=spec.profile_window)
            figures = {
                "step_ms": metrics.step_ms,
                "step_ms_values": metrics.step_ms_values,
                "step_cpu_ms": metrics.step_cpu_ms,
                "step_cpu_ms_values": metrics.step_cpu_ms_values or [],
                "step_cpu_statistic": metrics.step_cpu_statistic,
                "tokens_per_sec_per_gpu": metrics.tokens_per_sec_per_gpu,
                "tokens_per_cpu_s_per_gpu": metrics.tokens_per_cpu_s_per_gpu,
                "tflops": metrics.tflops,
                "peak_mem_gb": metrics.peak_mem_gb,
                "iterations_used": metrics.iterations_used,
            }
        except PrimusLogError as exc:
            log_error = f"log: {exc}"

        status, error = "ok", log_error
        if lens_error is not None:
            status, error = "failed", lens_error
        elif timed_out:
            status, error = "timeout", f"deadline of {deadline_s or spec.timeout_s} s reached"
        elif full:
            status, error = "failed", full
        elif code != 0:
            status, error = "failed", f"workload exited {code}: {_last_error_line(log_path)}"
        elif peer_error is not None:
            status, error = "failed", peer_error
        elif log_error is not None:
            status = "failed"

        trace_keys = _upload(spec, sink, prefix, log_path, workspace)
        if status == "ok" and spec.profiled and not trace_keys:
            status, error = "partial", f"lens {spec.lens} wrote no trace files"
        result = rung_result(
            spec,
            run_id,
            prefix,
            status=status,
            error=error,
            exit_code=code,
            traces=trace_keys,
            wall_s=round(time.monotonic() - started, 3),
            started_at=round(started_at, 6),
            ended_at=round(time.time(), 6),
            provenance=provenance(spec),
            **figures,
        )
        _store_result(spec, sink, prefix, result)
        if isinstance(sink, SpoolingSink):
            sink.seal(prefix)
            sink.flush(prefix)
        return result.to_dict()
    finally:
        if own_tmp:
            shutil.rmtree(root, ignore_errors=True)


#: the RungSpec fields a rung's metrics.json repeats: its identity and place in the design
SPEC_IDENTITY = (
    "ladder",
    "rung",
    "rung_id",
    "lens",
    "repeat",
    "block",
    "position",
    "purpose",
    "switch",
    "value",
    "parent",
)


def rung_result(spec: RungSpec, run_id: str, prefix: str | None, *, status: str, **outcome: Any) -> RungResult:
    """The one builder of a rung's metrics.json: the spec's identity and place in the design,
    then what the run gave (``outcome``: the RungResult fields past ``status``)."""
    identity = {name: getattr(spec, name) for name in SPEC_IDENTITY}
    return RungResult(run_id=run_id, **identity, status=status, prefix=prefix, **outcome)


def _store_result(spec: RungSpec, sink: ArtifactSink, prefix: str, result: RungResult) -> None:
    sink.put_bytes(f"{prefix}/{layout.METRICS_OBJECT}", result.to_json().encode(), "application/json")
    sink.put_bytes(f"{prefix}/{layout.SPEC_OBJECT}", spec.to_json().encode(), "application/json")
    sink.write_manifest(prefix)


def record_refused(spec: RungSpec, run_id: str, sink: ArtifactSink, status: str, error: str) -> JSONObject:
    """Store the result of a rung that never started (e.g. its GPU preflight failed), so the
    summary marks it with its status and one-line reason instead of "stored no result"."""
    run_id = safe_key_part(run_id)
    prefix = rung_prefix(spec.storage_prefix, spec.ladder, run_id, spec.rung_id)
    result = rung_result(spec, run_id, prefix, status=status, error=error)
    _store_result(spec, sink, prefix, result)
    return result.to_dict()


def _run_peer_node(spec: RungSpec, role: nodes.NodeRole, deadline_s: float | None, echo: TextIO | None) -> JSONObject:
    """A node of a multi-node rung other than the last: run this node's ranks in its folder on
    the shared filesystem, say it is done, upload nothing (the last node gathers and stores)."""
    root = role.workdir()
    workspace = root / "output"
    workspace.mkdir(parents=True, exist_ok=True)
    backend = _BACKENDS[spec.backend]
    argv, env = backend.command(spec, workspace)
    code, timed_out = execute(
        WorkloadRun(argv, env, backend.workdir(spec, root), root / "log.txt", deadline_s or spec.timeout_s, echo)
    )
    role.mark_done(code, timed_out)
    status = "timeout" if timed_out else "ok" if code == 0 else "failed"
    return {
        "rung_id": spec.rung_id,
        "node_rank": role.node_rank,
        "status": status,
        "exit_code": code,
        "error": None if status == "ok" else f"node {role.node_rank}: workload {status} (exit {code})",
    }


def _upload(spec: RungSpec, sink: ArtifactSink, prefix: str, log_path: Path, workspace: Path) -> list[str]:
    sink.put_file(f"{prefix}/{layout.LOG_OBJECT}", log_path, gzip=True)
    keys = []
    for trace in find_traces(spec.lens, workspace):
        key = layout.trace_key(prefix, trace.artifact_name)
        sink.put_file(key, trace.path, gzip=not trace.already_gzipped)
        keys.append(sink.locate(key))
    return keys


def _last_error_line(log_path: Path) -> str:
    lines = [
        line.strip() for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()
    ]
    for line in reversed(lines):
        if "Error" in line or "error" in line:
            return line[:300]
    return lines[-1][:300] if lines else "(no output)"
