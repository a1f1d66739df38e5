"""``engine: tracelens``: real TraceLens on a stored trace, in the ``docker/tracelens`` image on the
daemon that the cluster's ``tracelens`` entry names, through ``TracelensDockerOperator`` (the same
operator code as a rung's container). Its CSVs land under ``<rung>/analysis/tracelens/<stem>/``.

TraceLens's entrypoint here is its PyTorch report, so other formats (rocprofv3, rocm-trace-lite)
are left to the builtin engine, and the result says so.
"""

from __future__ import annotations

from traceladder.core.documents import JSONObject


PYTORCH_MARK = ".pt.trace.json"


def run_tracelens(ladder: str, trace_key: str) -> JSONObject:
    from traceladder.airflow.operators.docker import TracelensDockerOperator
    from traceladder.analysis.stored import tracelens_prefix

    if PYTORCH_MARK not in trace_key.rsplit("/", 1)[-1]:
        return {
            "trace": trace_key,
            "skipped": "TraceLens's PyTorch report reads PyTorch profiler traces; the builtin engine read this one",
        }
    op = TracelensDockerOperator(
        task_id="tracelens", ladder=ladder, trace_key=trace_key, out_prefix=tracelens_prefix(trace_key)
    )
    from airflow.sdk import get_current_context

    return op.execute(get_current_context())  # the same operator class, run inside the analyze task
