"""Shared by the fault tests and the integration tests (test_docker_spool, test_slurm): a tiny
real rung (the CPU proxy, one layer, 4 iterations, rank-0 torch trace) and the check that
everything a rung stored is in S3 and matches its manifest."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def tiny_spec(ladder: str, **env: str):
    from traceladder.config import find_ladder, load_ladder
    from traceladder.plan.build import build_plan

    spec = build_plan(load_ladder(find_ladder("proxy-local")), rungs=["baseline"], lens="torch_rank0", repeats=1)[0]
    from testkit.tiny_proxy import TINY_MODEL

    args = {
        **spec.model_args,
        **TINY_MODEL,
        "profile_step_start": 2,
        "profile_step_end": 4,
    }
    return spec.model_copy(
        update={
            "ladder": ladder,
            "model_args": args,
            "warmup_iters": 1,
            "train_iters": 4,
            "profile_window": (2, 4),
            "docker_env_vars": {**spec.docker_env_vars, **env},
        }
    )


def verified_objects(client: Any, bucket: str, rung_prefix: str) -> dict[str, str]:
    """Every object under the rung's prefix, checked against its manifest: {relative key: sha256}."""
    listed = {o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=rung_prefix + "/").get("Contents", [])}
    manifest = json.loads(client.get_object(Bucket=bucket, Key=f"{rung_prefix}/manifest.json")["Body"].read())
    out = {}
    for obj in manifest["objects"]:
        body = client.get_object(Bucket=bucket, Key=obj["key"])["Body"].read()
        assert len(body) == obj["size"] and hashlib.sha256(body).hexdigest() == obj["sha256"], obj["key"]
        out[obj["key"][len(rung_prefix) + 1 :]] = obj["sha256"]
    rungs_own = {k for k in listed if not k.startswith(f"{rung_prefix}/analysis/")}  # analysis has its own manifest
    assert rungs_own == {o["key"] for o in manifest["objects"]} | {f"{rung_prefix}/manifest.json"}, rungs_own
    return out
