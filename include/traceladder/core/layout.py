"""Every key name and path shape of the artifact store, and nothing else (standard library only:
the runner image, the Airflow tasks, the analysis, the summary and the UI all spell keys through it).

    <prefix>/<ladder>/
        runs/<run_id>.json            one index entry per published run (summary/index.py)
        index.json                    the older shared index, still read
        latest.json                   the newest full run
        <run_id>/
            plan.json                 the run's plan (specs, design)
            <rung_id>/
                metrics.json, spec.json, log.txt.gz, manifest.json
                traces/<name>         the rung's traces
                analysis/<stem>/      analysis.json + report CSVs of one trace
                analysis/tracelens/<stem>/   TraceLens's own reports
                analysis/ranks/       collectives.json + the multi-rank reports
            triage/<rung>/
                triage.json, report.html  a suspect rung's triage (issue 51)
            summary/
                summary.json, summary.md, report.html, perf.csv
                charts/<name>.png
                attribution/<rung>/compare.json
"""

from __future__ import annotations

import re

from traceladder.core.errors import ArtifactKeyError

DEFAULT_PREFIX = "traceladder"

# ---- names -------------------------------------------------------------------------------------
MANIFEST_NAME = "manifest.json"
PLAN_OBJECT = "plan.json"
# An adaptive ladder's early stop (<run>/stop.json): the look that stopped it, written by the DAG's check.
STOP_OBJECT = "stop.json"
METRICS_OBJECT = "metrics.json"
SPEC_OBJECT = "spec.json"
LOG_OBJECT = "log.txt.gz"
TRACES_FOLDER = "traces"
ANALYSIS_FOLDER = "analysis"
ANALYSIS_OBJECT = "analysis.json"
TRACELENS_FOLDER = "tracelens"
RANKS_FOLDER = "analysis/ranks"
COLLECTIVES_OBJECT = "collectives.json"
SUMMARY_FOLDER = "summary"
CHARTS_FOLDER = "charts"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
REPORT_HTML = "report.html"
PERF_CSV = "perf.csv"
ATTRIBUTION_FOLDER = "attribution"
COMPARE_OBJECT = "compare.json"
# compare.json's `regions_measure`: a region's direct op time (step_regions, backward included), or
# (analyses from before step_regions) its ranges' wall time
REGION_OP_TIME, REGION_RANGE_TIME = "op time", "range wall time"
RUNS_FOLDER = "runs"
TRIAGE_FOLDER = "triage"
TRIAGE_OBJECT = "triage.json"
LEGACY_INDEX = "index.json"
LATEST_OBJECT = "latest.json"

_UNSAFE_CHARS_RE = re.compile(r"[^A-Za-z0-9._-]")


# ---- shapes ------------------------------------------------------------------------------------
def safe_key_part(s: object) -> str:
    """One key part from any text: characters outside ``[A-Za-z0-9._-]`` become ``-``.

    ``manual__2026-11-29T10:00:00+00:00`` -> ``manual__2026-11-29T10-00-00-00-00``. A part made only
    of dots (``.``, ``..``) becomes dashes, so the result is never a path traversal.
    """
    text = str(s)
    if not text:
        raise ArtifactKeyError("empty key part")
    out = _UNSAFE_CHARS_RE.sub("-", text)
    if set(out) == {"."}:
        out = "-" * len(out)
    return out


def _safe_prefix_parts(prefix: str) -> list[str]:
    parts = [safe_key_part(p) for p in str(prefix).split("/") if p]
    if not parts:
        raise ArtifactKeyError(f"empty key prefix {prefix!r}")
    return parts


def ladder_prefix(prefix: str, ladder: str) -> str:
    """``<prefix>/<ladder>`` (no trailing slash), each part made safe."""
    return "/".join([*_safe_prefix_parts(prefix), safe_key_part(ladder)])


def run_prefix(prefix: str, ladder: str, run_id: str) -> str:
    """``<prefix>/<ladder>/<run_id>``: everything one ladder run stored."""
    return f"{ladder_prefix(prefix, ladder)}/{safe_key_part(run_id)}"


def rung_prefix(prefix: str, ladder: str, run_id: str, rung_id: str) -> str:
    """``<prefix>/<ladder>/<run_id>/<rung_id>`` (no trailing slash), each part made safe."""
    return f"{run_prefix(prefix, ladder, run_id)}/{safe_key_part(rung_id)}"


def join(*parts: str) -> str:
    """``a/b/c`` from key parts that are already safe (a prefix and a name)."""
    return "/".join(p.strip("/") for p in parts if p)


def rung_of(key: str) -> str:
    """The rung folder of a key under it (``.../<rung_id>/traces/x`` -> ``.../<rung_id>``)."""
    head, sep, _ = key.rpartition(f"/{TRACES_FOLDER}/")
    if not sep:
        raise ArtifactKeyError(f"not a trace key (no /{TRACES_FOLDER}/ part): {key!r}", key)
    return head


def trace_key(rung: str, artifact_name: str) -> str:
    return f"{rung}/{TRACES_FOLDER}/{artifact_name}"


def analysis_prefix(rung: str, stem: str) -> str:
    return f"{rung}/{ANALYSIS_FOLDER}/{stem}"


def tracelens_prefix(rung: str, stem: str) -> str:
    return f"{rung}/{ANALYSIS_FOLDER}/{TRACELENS_FOLDER}/{stem}"


def ranks_prefix(rung: str) -> str:
    return f"{rung}/{RANKS_FOLDER}"


def summary_prefix(run: str) -> str:
    return f"{run}/{SUMMARY_FOLDER}"


def chart_key(run: str, name: str) -> str:
    return f"{summary_prefix(run)}/{CHARTS_FOLDER}/{name}"


def entry_key(ladder: str, run_id: str) -> str:
    """``<ladder prefix>/runs/<run_id>.json``."""
    return f"{ladder}/{RUNS_FOLDER}/{safe_key_part(run_id)}.json"


def triage_prefix(run: str, rung: str) -> str:
    """``<run>/triage/<rung>``: a suspect rung's triage, beside the run it triages (`run` is
    ``run_prefix``'s)."""
    return f"{run}/{TRIAGE_FOLDER}/{safe_key_part(rung)}"


def triage_key(run: str, rung: str) -> str:
    """``<run>/triage/<rung>/triage.json``."""
    return f"{triage_prefix(run, rung)}/{TRIAGE_OBJECT}"


def triage_report_key(run: str, rung: str) -> str:
    """``<run>/triage/<rung>/report.html``."""
    return f"{triage_prefix(run, rung)}/{REPORT_HTML}"
