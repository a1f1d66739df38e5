"""The docker backend through real Airflow (`dag.test()`), a real Docker Engine and a real S3
server: each rung is a RungDockerOperator running the runner image (docker/runner built on the
stand-in Primus image) with `/dev/null` mapped as `/dev/kfd`.

The ladders extend the seed ladder (docker backend, the vendor's flags) and point it at a test
cluster whose hosts are this machine's dockerd: over the unix socket, and over TCP with TLS whose
material comes from an Airflow connection."""

from __future__ import annotations

import gzip
import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from traceladder.config.loader import CONFIG_DIR
from traceladder.storage.artifacts import safe_key_part

from tests.integration.conftest import (
    STANDIN_DEVICES,
    STANDIN_GPUS,
    docker_cli,
    standin_docker_cluster,
)  # tests/integration/conftest.py
from tests.integration.ladder_checks import check_manifests, objects, task_states

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

SEED = CONFIG_DIR / "ladders" / "deepseek-v4-flash-mi350x.yaml"
UNIX_HOST = "dockerd-unix"
TLS_HOST = "dockerd-tls"
TLS_CONN = "docker_tls_test"
NOFILE = 16384
PRIMUS_COMMIT = "fd1eeabb0a5f1e3c2d4b6a8c0e2f4a6b8c0d2e4f"  # testkit/standin/Dockerfile's .git


def managed_containers(label: str) -> list[str]:
    out = docker_cli(
        "ps", "-a", "--filter", "label=traceladder.managed=true", "--filter", f"label={label}", "--format", "{{.Names}}"
    )
    return [line for line in out.stdout.splitlines() if line.strip()]


@pytest.fixture
def docker_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_server, docker_engine, standin_images):
    """A clusters file for this machine's dockerd, a temporary ladders folder, and the TLS
    connection (PEM text in its extra) in the environment, as a deployment would set it."""
    clusters = {
        "schema": 1,
        "clusters": {
            # engine: tracelens runs the (stand-in) TraceLens image on this daemon
            "docker-test": standin_docker_cluster(
                standin_images.runner,
                s3_server,
                [{"name": UNIX_HOST, "pool": f"traceladder-{UNIX_HOST}", "docker_url": docker_engine.unix_url}],
                tracelens={"docker_url": docker_engine.unix_url, "image": standin_images.tracelens},
            ),
            "docker-tls": standin_docker_cluster(
                standin_images.runner,
                s3_server,
                [
                    {
                        "name": TLS_HOST,
                        "pool": f"traceladder-{TLS_HOST}",
                        "docker_url": docker_engine.tls_url,
                        "tls_conn_id": TLS_CONN,
                    }
                ],
            ),
        },
    }
    path = tmp_path / "clusters.yaml"
    path.write_text(yaml.safe_dump(clusters, sort_keys=False))
    monkeypatch.setenv("TRACELADDER_CLUSTERS_FILE", str(path))
    monkeypatch.setenv("TRACELADDER_CONTAINER_NOFILE", str(NOFILE))  # this sandbox's dockerd has a hard limit of 20000
    ladders = tmp_path / "ladders"
    ladders.mkdir()
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(ladders))
    if docker_engine.tls_url:
        extra = {name: p.read_text() for name, p in docker_engine.tls_files().items()}
        monkeypatch.setenv(f"AIRFLOW_CONN_{TLS_CONN.upper()}", json.dumps({"conn_type": "generic", "extra": extra}))
    return ladders


def write_ladder(folder: Path, name: str, cluster: str, extra: dict[str, Any]) -> None:
    doc = {
        "schema": 1,
        "extends": str(SEED),
        "ladder": name,
        "cluster": cluster,
        "repeats": 1,
        "timeout_s": 120,
        "schedule": None,
        "base": {"model_args": {"train_iters": 10}},
        **extra,
    }
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def test_docker_ladder_over_the_unix_socket(airflow_home, s3_server, docker_cluster: Path, standin_images) -> None:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from traceladder.embedded.local_airflow import dag_test
    from traceladder.plan.build import RungSpec

    # the seed's first four rungs (consecutive), one repeat, its every-rung torch_rank0 block
    write_ladder(
        docker_cluster,
        "docker-e2e",
        "docker-test",
        {
            "engine": "tracelens",
            "rungs": [
                {"name": "baseline"},
                {"name": "fusions", "parent": "baseline", "set": {"fusions": True}},
                {"name": "attn_gluon_v3", "parent": "fusions", "set": {"attention": "gluon_v3"}},
                {"name": "attn_turbo", "parent": "attn_gluon_v3", "set": {"attention": "turbo"}},
            ],
            "lenses": {
                "rung": "fusions",
                "use": ["none", "torch_rank0", "rocprofv3", "rocm_trace_lite"],
                "every_rung": "torch_rank0",
            },
        },
    )
    dag_run = dag_test("traceladder-docker-e2e")
    states = task_states(dag_run)
    rung_states = {k: v for k, v in states.items() if k[0].startswith("block_") and not k[0].endswith(".done")}
    # the measure block (4 rungs), the lens block (fusions unprofiled + 3 lenses), the every-rung block
    assert sorted(rung_states) == [
        (f"block_{b:02d}.rungs_{UNIX_HOST}_{j:02d}", -1) for b, n in ((0, 4), (1, 4), (2, 4)) for j in range(n)
    ], states
    assert set(rung_states.values()) == {"success"}, states
    for task in ("plan", "collect_traces", "summary", "publish", "ladder_status"):
        assert states[(task, -1)] == "success", (task, states)

    run_key = safe_key_part(dag_run.run_id)
    run_prefix = f"traceladder/docker-e2e/{run_key}"
    client = s3_server.client()
    stored = objects(client, s3_server.bucket, run_prefix + "/")
    image_id = docker_cli("image", "inspect", "--format", "{{.Id}}", standin_images.runner).stdout.strip()
    rungs = ["baseline", "fusions", "attn_gluon_v3", "attn_turbo"]
    rung_ids = [
        *(f"{rung}.none.r0" for rung in rungs),
        *(f"{rung}.torch_rank0.p0" for rung in rungs),
        "fusions.none.l0",
        "fusions.torch_rank0.l0",
        "fusions.rocprofv3.l0",
        "fusions.rocm_trace_lite.l0",
    ]
    for rung_id in rung_ids:
        base = f"{run_prefix}/{rung_id}"
        for name in ("log.txt.gz", "metrics.json", "spec.json", "manifest.json"):
            assert f"{base}/{name}" in stored, f"{rung_id}/{name}"
        metrics = json.loads(stored[f"{base}/metrics.json"])
        assert metrics["status"] == "ok", metrics
        assert metrics["step_ms"] > 0 and metrics["tokens_per_sec_per_gpu"] > 0
        # provenance: the image as the daemon knows it (a locally built image has no repo digest)
        # and what the tools in the container report
        prov = metrics["provenance"]
        assert prov["backend"] == "docker" and prov["image"] == standin_images.runner
        assert prov["image_id"] == image_id and prov["image_digest"] is None
        assert prov["rocm_version"] == "7.1.0-standin" and prov["primus_commit"] == PRIMUS_COMMIT
        assert prov["gpu"] == {
            "product": "AMD Instinct MI350X",
            "arch": "gfx950",
            "driver_version": "6.14.14",
            "count": STANDIN_GPUS,
        }
        assert prov["tools"]["rtl"] == "rocm-trace-lite 0.3.3" and prov["tools"]["rocprofv3"].startswith(
            "rocprofv3 (rocprofiler-sdk) 1.0.0"
        )
        assert prov["tools"]["python"].startswith("3.") and "torch" not in prov["tools"]  # the stand-in has no torch
        # launched as MAD's run.sh does: from the Primus checkout, primus-cli by absolute path,
        # absolute log file, no `--`, GPUS_PER_NODE/NNODES/MASTER_ADDR from the cluster file
        spec = RungSpec.from_json(stored[f"{base}/spec.json"])
        log = gzip.decompress(stored[f"{base}/log.txt.gz"]).decode()
        argv = json.loads(log.split("[primus-cli standin] cwd=/workspace/Primus argv=", 1)[1].splitlines()[0])
        assert argv[:3] == ["/workspace/Primus/primus-cli", "direct", "--log_file"] and argv[3].startswith("/")
        assert argv[4:8] == ["train", "pretrain", "--config", spec.model_args["config_path"]] and "--" not in argv
        assert (
            f"torchrun GPUS_PER_NODE={STANDIN_GPUS} NNODES=1 NODE_RANK=0 MASTER_ADDR=localhost MASTER_PORT=1234" in log
        )
        # primus-cli got exactly the overrides the plan renders (config_path became --config), and
        # --use_rocm_mem_info True, so `rocm max mem` is the true peak (128 GB, not the stale 115)
        got = json.loads(log.split("[primus-cli standin] overrides: ", 1)[1].splitlines()[0])
        assert got == [
            a for a in spec.primus_args() if a not in ("--config_path", str(spec.model_args["config_path"]))
        ] + ["--use_rocm_mem_info", "True"]
        assert metrics["peak_mem_gb"] > 125
        # every iteration ran: 10 unprofiled, 12 on a torch lens (steps 10-11 recorded), 6 under rocprofv3
        assert f"iteration {spec.train_iters:8d}/{spec.train_iters:8d}" in log
        assert spec.train_iters == {"torch_rank0": 12, "rocprofv3": 6}.get(spec.lens, 10)
    assert json.loads(stored[f"{run_prefix}/baseline.none.r0/metrics.json"])["traces"] == []

    torch = json.loads(stored[f"{run_prefix}/fusions.torch_rank0.l0/metrics.json"])
    assert torch["traces"] == [f"{run_prefix}/fusions.torch_rank0.l0/traces/rank0.pt.trace.json.gz"]
    assert torch["iterations_used"] == [10, 11]  # the profiler window: steps 10-11 of 12, as the write-up
    kineto = json.loads(gzip.decompress(stored[torch["traces"][0]]))
    assert {e["cat"] for e in kineto["traceEvents"]} >= {
        "cpu_op",
        "kernel",
        "cuda_runtime",
        "gpu_memcpy",
        "ac2g",
        "user_annotation",
    }
    assert f"{run_prefix}/fusions.torch_rank0.l0/analysis/rank0/gpu_timeline.csv" in stored
    # engine: tracelens: TraceLens's own CSVs beside the builtin ones, made in the TraceLens image
    # (which fetched the trace from S3 and stored these with a manifest), with the arguments of
    # TraceLens's regression test
    lens_prefix = f"{run_prefix}/fusions.torch_rank0.l0/analysis/tracelens/rank0"
    assert {
        f"{lens_prefix}/{n}" for n in ("kernel_summary.csv", "gpu_timeline.csv", "args.json", "manifest.json")
    } <= set(stored)
    args = json.loads(stored[f"{lens_prefix}/args.json"])
    assert args[1:3] == ["--profile_json_path", args[2]] and args[2].endswith("rank0.pt.trace.json.gz")
    assert args[3:] == ["--output_csvs_dir", args[4], "--enable_kernel_summary", "--short_kernel_study"]
    kernels = [e for e in kineto["traceEvents"] if e.get("cat") == "kernel"]
    assert stored[f"{lens_prefix}/kernel_summary.csv"].decode().count("\n") == 1 + len({k["name"] for k in kernels})

    rocprof = json.loads(stored[f"{run_prefix}/fusions.rocprofv3.l0/metrics.json"])
    assert len(rocprof["traces"]) == 1 and rocprof["traces"][0].endswith("_results.json.gz")
    doc = json.loads(gzip.decompress(stored[rocprof["traces"][0]]))
    assert doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"]

    rtl = json.loads(stored[f"{run_prefix}/fusions.rocm_trace_lite.l0/metrics.json"])
    assert rtl["traces"] == [f"{run_prefix}/fusions.rocm_trace_lite.l0/traces/trace.db.gz"]
    with tempfile.NamedTemporaryFile(suffix=".db") as f:
        f.write(gzip.decompress(stored[rtl["traces"][0]]))
        f.flush()
        tables = {r[0] for r in sqlite3.connect(f.name).execute("SELECT name FROM sqlite_master")}
    assert {"rocpd_op", "rocpd_api", "rocpd_string", "rocpd_kernelapi", "rocpd_metadata", "top", "busy"} <= tables

    entries = check_manifests(stored)
    assert {e["key"] for e in entries} >= {f"{run_prefix}/{r}/log.txt.gz" for r in rung_ids}

    summary = json.loads(stored[f"{run_prefix}/summary/summary.json"])
    assert [r["rung"] for r in summary["rungs"]] == rungs and summary["failed_rungs"] == []
    # every rung run has a "why it moved" line or a stated reason (issue 61, item 2)
    explained = {e["rung"]: e["sentence"] for e in summary["attribution"]}
    reasons = {u["rung"]: u["reason"] for u in summary["unexplained"]}
    assert sorted([*explained, *reasons]) == sorted(rungs) and all([*explained.values(), *reasons.values()])
    assert reasons.get("baseline", "").startswith("the root"), reasons
    assert summary["every_rung"] == {
        "lens": "torch_rank0",
        "runs": 4,
        "ok": 4,
        "wall_s": summary["every_rung"]["wall_s"],
        "rungs": rungs,
    }
    assert summary["every_rung"]["wall_s"] > 0
    # the lens block's rocprofv3 trace against its torch rank-0 window (item 5), end to end
    names = summary["kernel_names"]
    assert names["process_trace"] == rocprof["traces"][0] and names["window_trace"] == torch["traces"][0], names
    assert names["process_steps"] == 6 and names["window_steps"] == 2 and names["kernels"] == len(names["rows"]) > 0
    # a share in %: float rounding may put a whole share a hair above 100 (100.00000000000001 seen)
    assert names["process_us_per_step"] > 0 and 0 <= names["seen_pct"] <= 100 + 1e-9
    md = stored[f"{run_prefix}/summary/summary.md"].decode()
    assert "## Kernel names: the heavy lens against the torch window" in md and "Matching rule:" in md
    assert "Every-rung profile block (torch_rank0): 4 extra runs (4 ok)" in md
    report = stored[f"{run_prefix}/summary/report.html"].decode()
    assert 'id="kernel-names"' in report
    # the seed's caveats (item 7), inherited through `extends`, at the top of summary.md and report.html
    caveats = yaml.safe_load(SEED.read_text())["caveats"]
    assert summary["caveats"] == caveats and len(caveats) == 4, summary.get("caveats")
    head = md.split("\n## Ladder\n", 1)[0]
    assert "**Caveats (from the ladder file):**" in head and all(f"- {c}\n" in head for c in caveats), head
    assert report.index('id="caveats"') < report.index("<h2") and all(f"<li>{c}</li>" in report for c in caveats)
    # the trace gate (item 6): every stored trace judged, each fit (the stand-in's torch windows hold
    # the 2 steps asked with every kernel launched; rocprofv3 and rocm-trace-lite record no ops)
    traces = {t: r for r in rung_ids for t in json.loads(stored[f"{run_prefix}/{r}/metrics.json"])["traces"]}
    gate = {g["trace"]: g for g in summary["trace_gate"]}
    assert sorted(gate) == sorted(traces) and len(traces) == 7, gate
    assert {t: (g["rung_id"], g["fit"], g["reasons"]) for t, g in gate.items()} == {
        t: (r, True, []) for t, r in traces.items()
    }, gate
    assert sorted(g["lens"] for g in gate.values()) == ["rocm_trace_lite", "rocprofv3", *["torch_rank0"] * 5]
    assert "## Trace gate (7 of 7 traces fit; docs/trace-gate.md)" in md
    assert all(f"- {g['rung_id']} `{t.rsplit('/', 1)[-1]}`: fit\n" in md + "\n" for t, g in gate.items()), md
    assert 'id="trace-gate"' in report and report.count(": fit</li>") >= 7 and "UNFIT" not in report
    latest = json.loads(
        client.get_object(Bucket=s3_server.bucket, Key="traceladder/docker-e2e/latest.json")["Body"].read()
    )
    assert latest["summary_json"] == f"{run_prefix}/summary/summary.json"

    # what the daemon applied to each rung container (docker inspect's HostConfig, pushed as XCom)
    with create_session() as session:
        rows = (
            session.query(XComModel)
            .filter(
                XComModel.dag_id == "traceladder-docker-e2e",
                XComModel.run_id == dag_run.run_id,
                XComModel.key == "container",
            )
            .all()
        )
        evidence = {row.task_id: XComModel.deserialize_value(row) for row in rows}
    assert len(evidence) == len(rung_ids) == 12
    for ev in evidence.values():
        assert ev["Devices"] == [
            {"PathOnHost": "/dev/null", "PathInContainer": d.split(":")[1], "CgroupPermissions": "rwm"}
            for d in STANDIN_DEVICES
        ]
        assert (
            ev["GroupAdd"] == ["video"] and "seccomp=unconfined" in ev["SecurityOpt"]
        )  # dockerd adds label=disable for --ipc host
        assert ev["IpcMode"] == "host" and ev["NetworkMode"] == "host" and ev["ShmSize"] == 128 * 2**30
        assert {"Name": "nofile", "Soft": NOFILE, "Hard": NOFILE} in ev["Ulimits"]
        assert ev["Labels"]["traceladder.run"] == run_key and ev["Labels"]["traceladder.host"] == UNIX_HOST
        needs_admin = ev["Labels"]["traceladder.rung"].split(".")[1] in ("rocprofv3", "rocm_trace_lite")
        assert sorted(ev["CapAdd"]) == (["SYS_ADMIN", "SYS_PTRACE"] if needs_admin else ["SYS_PTRACE"]), ev
    assert managed_containers(f"traceladder.run={run_key}") == []  # auto_remove="force" and orphan cleanup


@pytest.mark.faults  # fault 6 of the matrix (issue 19)
def test_docker_ladder_over_tls_with_a_hanging_rung(
    airflow_home, s3_server, docker_cluster: Path, docker_engine, capfd
) -> None:
    """TLS from a connection; a rung that hangs hits the runner's deadline, its task fails, its
    container is gone, its partial artifacts are kept and marked; no secret leaks."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from traceladder.embedded.local_airflow import dag_test

    assert docker_engine.tls_url, "the TLS listener of docker/dockerd/start.sh is needed"
    write_ladder(
        docker_cluster,
        "docker-tls",
        "docker-tls",
        {
            "timeout_s": 15,  # the runner's deadline; the task's execution_timeout is 300 s longer
            "switches": {
                "fault": {
                    "default": "none",
                    "values": {"none": {}, "hang": {"model_args": {"standin_hang_at_iter": 4}}},
                }
            },
            "rungs": [{"name": "baseline"}, {"name": "hangs", "parent": "baseline", "set": {"fault": "hang"}}],
            "lenses": None,
        },
    )
    dag_run = dag_test("traceladder-docker-tls")
    captured = capfd.readouterr()
    states = task_states(dag_run)
    assert str(dag_run.state) == "failed"
    assert states[("summary", -1)] == "success" and states[("publish", -1)] == "success"
    assert states[("ladder_status", -1)] == "failed"

    run_key = safe_key_part(dag_run.run_id)
    run_prefix = f"traceladder/docker-tls/{run_key}"
    stored = objects(s3_server.client(), s3_server.bucket, run_prefix + "/")
    (block,) = json.loads(stored[f"{run_prefix}/plan.json"])["design"]["blocks"]
    slot = {rung_id: (f"block_00.rungs_{TLS_HOST}_{j:02d}", -1) for j, rung_id in enumerate(block)}
    assert states[slot["baseline.none.r0"]] == "success" and states[slot["hangs.none.r0"]] == "failed", states
    hung = json.loads(stored[f"{run_prefix}/hangs.none.r0/metrics.json"])
    assert hung["status"] == "timeout" and "deadline" in hung["error"]
    log = gzip.decompress(stored[f"{run_prefix}/hangs.none.r0/log.txt.gz"]).decode()
    assert "iteration        3/      10" in log and "never completes" in log and "deadline of 15 s reached" in log
    assert f"{run_prefix}/hangs.none.r0/manifest.json" in stored
    check_manifests(stored)
    summary = json.loads(stored[f"{run_prefix}/summary/summary.json"])
    assert summary["failed_rungs"] == ["hangs.none.r0"]
    assert managed_containers(f"traceladder.run={run_key}") == []
    assert "rung hangs.none.r0 timeout" in captured.out + captured.err

    # secrets: the TLS key and the S3 secret are nowhere in task logs, rendered templates or XCom
    secrets = [docker_engine.tls_files()["client_key"].read_text().strip().splitlines()[1], s3_server.secret_key]
    with create_session() as session:
        rtif = (
            session.query(RenderedTaskInstanceFields)
            .filter(RenderedTaskInstanceFields.dag_id == "traceladder-docker-tls")
            .all()
        )
        rendered = json.dumps([r.rendered_fields for r in rtif], default=str)
        xcoms = json.dumps(
            [
                XComModel.deserialize_value(x)
                for x in session.query(XComModel).filter(
                    XComModel.dag_id == "traceladder-docker-tls", XComModel.run_id == dag_run.run_id
                )
            ],
            default=str,
        )
    logs = (
        captured.out
        + captured.err
        + "".join(p.read_text(errors="replace") for p in Path(airflow_home, "logs").rglob("*") if p.is_file())
    )
    assert (
        any(r.task_id.startswith(f"block_00.rungs_{TLS_HOST}_") for r in rtif) and dag_run.run_id in rendered
    )  # the rung's templated run_id
    assert "host dockerd-tls ok" in logs and "--spec-json" not in xcoms
    for secret in secrets:
        assert secret and secret not in logs and secret not in rendered and secret not in xcoms
