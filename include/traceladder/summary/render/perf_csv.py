"""madengine's ``perf.csv`` for a ladder run, so dashboards that chart madengine's output chart the
ladder too.

The header is madengine's (``reporting/update_perf_csv.py``); there is one row per rung and
metric, ``tokens_per_second`` and ``tflops``, as MAD's Primus extractor writes them (per GPU,
from Primus's log). ``model`` is ``<model_tag>/<rung>`` so the rungs of one model stay apart.
The numbers are the means over the rung's unprofiled runs that finished ok; a rung with none is
one ``FAILURE`` row per metric with an empty ``performance``. Provenance columns come from the
runs' metrics.json: ``docker_sha`` is the image's repo digest (else its image id),
``git_commit`` the Primus commit, ``gpu_architecture`` what amd-smi reported.
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from collections.abc import Mapping

from traceladder.core.documents import JSONObject, JSONValue, PlanDoc, RungResult, as_int, as_object

HEADER = [
    "model",
    "n_gpus",
    "nnodes",
    "gpus_per_node",
    "training_precision",
    "pipeline",
    "args",
    "tags",
    "docker_file",
    "base_docker",
    "docker_sha",
    "docker_image",
    "git_commit",
    "machine_name",
    "deployment_type",
    "launcher",
    "gpu_architecture",
    "performance",
    "metric",
    "relative_change",
    "status",
    "build_duration",
    "test_duration",
    "dataname",
    "data_provider_type",
    "data_size",
    "data_download_duration",
    "build_number",
    "additional_docker_run_options",
]
METRICS = (("tokens_per_second", "tokens_per_sec_per_gpu"), ("tflops", "tflops"))
_PRECISION = re.compile(r"(?:^|[-_/])(BF16|FP8|FP16|FP32|MXFP8|MXFP4)(?:[-_/]|$)", re.I)


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def perf_csv(plan: Mapping[str, JSONValue], results: Mapping[str, RungResult]) -> str:
    all_specs = PlanDoc.from_dict(plan).specs
    specs = [s for s in all_specs if s.get("lens") == "none"] or all_specs
    rungs: dict[str, list[JSONObject]] = {}
    for spec in specs:
        rungs.setdefault(str(spec["rung"]), []).append(spec)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=HEADER, lineterminator="\n")
    writer.writeheader()
    for rung, rung_specs in rungs.items():
        first = rung_specs[0]
        runs = [results[str(s["rung_id"])] for s in rung_specs if str(s["rung_id"]) in results]
        ok = [r for r in runs if r.ok]
        prov = next((r.provenance for r in runs if r.provenance), None) or {}
        env = as_object(first.get("docker_env_vars") or {})
        gpus, nnodes = as_int(env.get("GPUS_PER_NODE") or 1), as_int(env.get("NNODES") or 1)
        model_tag, backend, image = (
            str(first.get("model_tag") or plan["ladder"]),
            first.get("backend", ""),
            first.get("image", ""),
        )
        precision = _PRECISION.search(model_tag)
        walls = [float(r.wall_s) for r in ok if r.wall_s is not None]
        base = {
            "model": f"{model_tag}/{rung}",
            "n_gpus": gpus * nnodes,
            "nnodes": nnodes,
            "gpus_per_node": gpus,
            "training_precision": precision.group(1).upper() if precision else "",
            "pipeline": "traceladder",
            "args": " ".join(_args(first)),
            "tags": plan["ladder"],
            "docker_file": "docker/runner/Dockerfile" if backend == "docker" else "",
            "base_docker": image,
            "docker_sha": prov.get("image_digest") or prov.get("image_id") or "",
            "docker_image": image,
            "git_commit": prov.get("primus_commit") or "",
            "machine_name": prov.get("host") or first.get("host", ""),
            "deployment_type": backend,
            "launcher": "primus-cli direct" if backend == "docker" else "cpu-proxy",
            "gpu_architecture": as_object(prov.get("gpu") or {}).get("arch") or "",
            "relative_change": "",
            "test_duration": f"{_mean(walls):.3f}" if walls else "",
            "build_number": plan["run_id"],
        }
        for metric, field in METRICS:
            value = _mean([float(n) for r in ok if (n := r.figure(field)) is not None])
            writer.writerow(
                {
                    **base,
                    "performance": f"{value:.6g}" if value is not None else "",
                    "metric": metric,
                    "status": "SUCCESS" if value is not None else "FAILURE",
                }
            )
    return out.getvalue()


def _args(spec: Mapping[str, JSONValue]) -> list[str]:
    from traceladder.rung_spec import render_overrides

    return render_overrides(as_object(spec.get("model_args") or {}))
