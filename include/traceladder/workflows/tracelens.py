"""``engine: tracelens``: real TraceLens on a stored trace, in the ``docker/tracelens`` image on the
daemon that the cluster's ``tracelens`` entry names (analysis needs no GPU host). A plain call
inside the analyze task, through ``RocmDockerHook.run_container`` (no operator is executed inside
the task): the container fetches the trace from S3, runs ``tracelens-report`` and stores
TraceLens's CSVs and a manifest under ``<rung>/analysis/tracelens/<trace stem>/``, as the runner
stores a rung. S3 credentials reach the container as environment variables, never in a log.

TraceLens's entrypoint here is its PyTorch report, so other formats (rocprofv3, rocm-trace-lite)
are left to the builtin engine, and the result says so.
"""

from __future__ import annotations

import json

from traceladder.core.documents import JSONObject

PYTORCH_MARK = ".pt.trace.json"
HOST_NAME = "tracelens"  # the traceladder.host label of its containers, and the host in errors


def run_tracelens(ladder: str, trace_key: str) -> JSONObject:
    """TraceLens's reports of one stored trace; the container's result (the keys it stored)."""
    from airflow.sdk.exceptions import AirflowException

    from traceladder.airflow.hooks import docker_hygiene as hygiene
    from traceladder.airflow.hooks.rocm import RocmDockerHook
    from traceladder.airflow.ladders import open_ladder
    from traceladder.airflow.operators.docker import default_nofile, storage_environment
    from traceladder.analysis.api import tracelens_prefix

    if PYTORCH_MARK not in trace_key.rsplit("/", 1)[-1]:
        return {
            "trace": trace_key,
            "skipped": "TraceLens's PyTorch report reads PyTorch profiler traces; the builtin engine read this one",
        }
    cluster = open_ladder(ladder).cluster
    if cluster.tracelens is None:
        raise AirflowException(
            f"ladder {ladder}: engine tracelens needs a tracelens entry (docker_url) in its cluster of clusters.yaml"
        )
    env, private = storage_environment(cluster.storage)
    hook = RocmDockerHook(
        docker_conn_id=None,
        base_url=cluster.tracelens.docker_url,
        tls_conn_id=cluster.tracelens.tls_conn_id,
        host_name=HOST_NAME,
    )
    try:
        code, lines = hook.run_container(
            cluster.tracelens.image,
            entrypoint=["python3", "/usr/local/bin/tracelens_s3.py"],
            command=[trace_key, tracelens_prefix(trace_key)],
            environment={**env, **private},
            labels={hygiene.MANAGED_LABEL: "true", hygiene.HOST_LABEL: HOST_NAME},
            nofile=default_nofile(),
        )
    finally:
        hook.close()
    if code != 0:
        tail = [line for line in lines if line.strip()]
        raise AirflowException(
            f"TraceLens on {trace_key} failed: {tail[-1].strip() if tail else f'the container exited {code}'}"
        )
    for line in reversed(lines):
        if line.strip().startswith("{"):
            return json.loads(line)
    raise AirflowException(f"TraceLens on {trace_key}: the container printed no result")
