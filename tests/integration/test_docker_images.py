"""The images and the operator against a real Docker Engine: what `docker inspect` shows of a
RocmDockerOperator container, the pre-flight errors, a retry writing the same keys, the runner
image's pydantic-free path, and the compose file and TraceLens command (which cannot be built or
run here: no registry, no network)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from traceladder.core.env_vars import COMPOSE_SECRETS
from testkit.needs import unavailable

from tests.integration.conftest import (
    REPO,
    STANDIN_DEVICES,
    STANDIN_GPUS,
    docker_cli,
    standin_docker_cluster,
)  # tests/integration/conftest.py

NOFILE = 16384  # this sandbox's dockerd has a hard nofile limit of 20000


def test_runner_spec_reader_matches_rungspec_on_every_shipped_spec() -> None:
    from traceladder.config import find_ladder, load_ladder
    from traceladder.plan.build import build_plan
    from traceladder.rung_spec import RunnerSpec, SpecError

    count = 0
    for name in ("deepseek-v4-flash-mi350x", "proxy-local"):
        for spec in build_plan(load_ladder(find_ladder(name))):
            lite = RunnerSpec.from_json(spec.to_json())
            assert lite.to_json() == spec.to_json() and lite.primus_args() == spec.primus_args()
            assert (lite.rung_id, lite.profile_window, lite.profiled) == (
                spec.rung_id,
                spec.profile_window,
                spec.profiled,
            )
            count += 1
    assert count > 20
    doc = json.loads(spec.to_json())
    with pytest.raises(SpecError, match="^bogus: unknown key"):
        RunnerSpec.from_json(json.dumps({**doc, "bogus": 1}))
    with pytest.raises(SpecError, match="^timeout_s: wrong type"):
        RunnerSpec.from_json(json.dumps({**doc, "timeout_s": "10"}))
    # a spec written before randomised blocks still reads, as block 0 with the purpose its lens implies
    old = RunnerSpec.from_json(json.dumps({k: v for k, v in doc.items() if k not in ("block", "position", "purpose")}))
    assert (old.block, old.position, old.purpose) == (0, 0, "measure" if doc["lens"] == "none" else "lens")


def test_operator_is_written_against_the_pinned_provider() -> None:
    from traceladder.airflow.operators.docker import PROVIDER_VERSION, RocmDockerOperator, RungDockerOperator

    # `make test-provider-next` runs this on the newest provider the Airflow pin allows
    expected = os.environ.get("TRACELADDER_PROVIDER_DOCKER", PROVIDER_VERSION)
    assert importlib.metadata.version("apache-airflow-providers-docker") == expected
    assert {"devices", "tls_conn_id", "image", "environment", "command"} <= set(RocmDockerOperator.template_fields)
    assert (
        "private_environment" not in RungDockerOperator.template_fields
        and "run_id" in RungDockerOperator.template_fields
    )
    for name in (
        "devices",
        "group_add",
        "security_opt",
        "tls_conn_id",
        "host_name",
        "spec",
        "run_id",
        "min_free_gb",
        "preflight",
    ):
        assert f":param {name}:" in (RocmDockerOperator.__doc__ or "") + (RungDockerOperator.__doc__ or ""), name


def test_tracelens_image_runs_tracelens_like_its_regression_test() -> None:
    script = REPO / "docker" / "tracelens" / "tracelens-report"
    out = subprocess.run(
        ["sh", str(script), "--dry-run", "/data/rank0.pt.trace.json.gz", "/data/out"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "TraceLens_generate_perf_report_pytorch",
        "--profile_json_path",
        "/data/rank0.pt.trace.json.gz",
        "--output_csvs_dir",
        "/data/out",
        "--enable_kernel_summary",
        "--short_kernel_study",
    ]
    bad = subprocess.run(["sh", str(script), "/data/trace.db", "/data/out"], capture_output=True, text=True)
    assert bad.returncode == 2 and "not a PyTorch profiler trace" in bad.stderr
    dockerfile = (REPO / "docker" / "tracelens" / "Dockerfile").read_text()
    assert (
        "git+https://github.com/AMD-AGI/TraceLens@${TRACELENS_REF}" in dockerfile
        and "ARG TRACELENS_REF=v1.0.0" in dockerfile
    )


def test_runner_dockerfile_defaults_to_primus() -> None:
    lines = (REPO / "docker" / "runner" / "Dockerfile").read_text().splitlines()
    assert lines[0] == "ARG BASE_IMAGE=rocm/primus:v26.7" and lines[1] == "FROM ${BASE_IMAGE}"


@pytest.mark.docker
def test_compose_file_is_valid_for_docker_compose() -> None:
    if not shutil.which("docker-compose"):
        unavailable("docker-compose (apt-get install -y docker-compose)")
    compose = REPO / "docker" / "airflow" / "docker-compose.yaml"
    env = {
        **os.environ,
        **{k: "test-value" for k in COMPOSE_SECRETS},
    }
    out = subprocess.run(
        ["docker-compose", "-f", str(compose), "config", "--services"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    assert set(out.stdout.split()) == {
        "postgres",
        "s3",
        "s3-init",
        "airflow-init",
        "api-server",
        "scheduler",
        "dag-processor",
        "triggerer",
        "redis",
        "worker-default",
        "worker-mi350x-01",
    }  # the last three: profile celery
    # Secrets are never defaulted in the file: from the environment, or from the files the secrets
    # override names (a missing one stops its container at start, not `config`: it may come as a file).
    secret_names = COMPOSE_SECRETS
    no_env = {k: v for k, v in os.environ.items() if k not in secret_names}
    rendered = subprocess.run(
        ["docker-compose", "-f", str(compose), "config"], capture_output=True, text=True, env=no_env
    )
    assert rendered.returncode == 0, rendered.stderr
    for name, service in yaml.safe_load(rendered.stdout)["services"].items():
        environment = service.get("environment") or {}
        assert not any(environment.get(k) for k in secret_names), (name, environment)
    override = compose.with_name("docker-compose.secrets.yaml")
    with_files = subprocess.run(
        ["docker-compose", "-f", str(compose), "-f", str(override), "config"],
        capture_output=True,
        text=True,
        env={**no_env, "TRACELADDER_SECRETS_DIR": "/nonexistent-secrets"},
    )
    assert with_files.returncode == 0, with_files.stderr
    files = {
        k: v
        for service in yaml.safe_load(with_files.stdout)["services"].values()
        for k, v in (service.get("environment") or {}).items()
        if k.endswith("_FILE")
    }
    assert files and all(str(v).startswith("/run/secrets/") for v in files.values()), files


@pytest.mark.docker
def test_runner_image_imports_only_stdlib_and_boto3(standin_images) -> None:
    out = docker_cli(
        "run",
        "--rm",
        "--network",
        "none",
        standin_images.runner,
        "python3",
        "-c",
        "import sys, traceladder.cli.main, traceladder.runner.rung; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'yaml', 'numpy', 'airflow'}))",
    )
    assert out.stdout.strip() == "[]"
    bad = docker_cli(
        "run",
        "--rm",
        "--network",
        "none",
        standin_images.runner,
        "traceladder",
        "run-rung",
        "--spec-json",
        '{"rung": 1}',
        check=False,
    )
    assert bad.returncode == 2 and bad.stderr.strip().startswith("--spec-json: ")


@pytest.mark.docker
def test_docker_inspect_shows_the_rocm_host_config(
    docker_engine, standin_images, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceladder.airflow.operators.docker import RocmDockerOperator

    monkeypatch.setenv("TRACELADDER_CONTAINER_NOFILE", str(NOFILE))
    op = RocmDockerOperator(
        task_id="inspect_me",
        image=standin_images.runner,
        docker_url=docker_engine.unix_url,
        devices=["/dev/null:/dev/kfd"],
        host_name="inspect-host",
        auto_remove="never",
        shm_size=2 * 2**30,
        command=[
            "python3",
            "-c",
            "import os, stat; print(stat.S_ISCHR(os.stat('/dev/kfd').st_mode), sorted(os.getgroups()))",
        ],
    )
    op.do_xcom_push = True
    try:
        last = op.execute({})
        assert last.startswith("True") and "44" in last  # /dev/kfd is a char device; gid 44 = video
        inspect = json.loads(docker_cli("inspect", op.container["Id"]).stdout)[0]
    finally:
        docker_cli("rm", "-f", op.container["Id"], check=False) if op.container else None
    hc = inspect["HostConfig"]
    assert hc["Devices"] == [{"PathOnHost": "/dev/null", "PathInContainer": "/dev/kfd", "CgroupPermissions": "rwm"}]
    assert hc["GroupAdd"] == ["video"] and "seccomp=unconfined" in hc["SecurityOpt"]
    assert hc["IpcMode"] == "host" and hc["NetworkMode"] == "host" and hc["ShmSize"] == 2 * 2**30
    assert hc["CapAdd"] == ["SYS_PTRACE"] and {"Name": "nofile", "Soft": NOFILE, "Hard": NOFILE} in hc["Ulimits"]
    assert (
        inspect["Config"]["Labels"]["traceladder.managed"] == "true"
        and inspect["Config"]["Labels"]["traceladder.host"] == "inspect-host"
    )


class _TI:
    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = value


def _rung_operator(spec: dict, url: str, **kw):
    from traceladder.airflow.operators.docker import RungDockerOperator

    return RungDockerOperator(
        task_id="rung",
        spec=spec,
        run_id=kw.pop("run_id", "retry-check"),
        docker_url=url,
        devices=list(STANDIN_DEVICES),
        host_name="retry-host",
        **kw,
    )


@pytest.fixture
def docker_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, airflow_home, s3_server, standin_images) -> dict:
    """One rung spec of a docker ladder on this machine's daemon (clusters + ladders in tmp)."""
    import yaml

    from traceladder.config import find_ladder, load_ladder
    from traceladder.config.loader import CONFIG_DIR
    from traceladder.plan.build import build_plan

    clusters = {
        "schema": 1,
        "clusters": {
            "retry": standin_docker_cluster(
                standin_images.runner,
                s3_server,
                [{"name": "retry-host", "pool": "traceladder-retry-host", "docker_url": "unix:///var/run/docker.sock"}],
            )
        },
    }
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump(clusters))
    (tmp_path / "ladders").mkdir()
    (tmp_path / "ladders" / "docker-retry.yaml").write_text(
        yaml.safe_dump(
            {
                "schema": 1,
                "extends": str(CONFIG_DIR / "ladders" / "deepseek-v4-flash-mi350x.yaml"),
                "ladder": "docker-retry",
                "cluster": "retry",
                "repeats": 1,
                "timeout_s": 60,
                "rungs": [{"name": "baseline"}],
                "lenses": {"rung": "baseline", "use": ["none", "rocm_trace_lite"]},
            }
        )
    )
    monkeypatch.setenv("TRACELADDER_CLUSTERS_FILE", str(tmp_path / "clusters.yaml"))
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(tmp_path / "ladders"))
    monkeypatch.setenv("TRACELADDER_CONTAINER_NOFILE", str(NOFILE))
    specs = {(s.purpose, s.lens): json.loads(s.to_json()) for s in build_plan(load_ladder(find_ladder("docker-retry")))}
    # the measure block's unprofiled run, and the lens block's rocm_trace_lite run
    return {**specs[("measure", "none")], "_rtl": specs[("lens", "rocm_trace_lite")]}


def _plain(spec: dict) -> dict:
    return {k: v for k, v in spec.items() if not k.startswith("_")}


@pytest.mark.docker
def test_a_retry_writes_the_same_keys_and_manifest(docker_engine, docker_spec: dict, s3_server) -> None:
    client = s3_server.client()
    prefix = "traceladder/docker-retry/retry-check/baseline.none.r0/"

    def run_once() -> tuple[list[str], list[str]]:
        ti = _TI()
        result = _rung_operator(_plain(docker_spec), docker_engine.unix_url).execute(
            {"dag": SimpleNamespace(dag_id="retry-dag"), "ti": ti}
        )
        assert result["status"] == "ok" and ti.pushed["container"]["Devices"][0]["PathInContainer"] == "/dev/kfd"
        keys = sorted(
            o["Key"] for o in client.list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix).get("Contents", [])
        )
        manifest = json.loads(client.get_object(Bucket=s3_server.bucket, Key=prefix + "manifest.json")["Body"].read())
        return keys, [e["key"] for e in manifest["objects"]]

    first = run_once()
    # a container left behind by a killed try (same rung, same run) is an orphan: the retry removes it
    docker_cli(
        "run",
        "-d",
        "--label",
        "traceladder.managed=true",
        "--label",
        "traceladder.host=retry-host",
        "--label",
        "traceladder.run=retry-check",
        "--label",
        "traceladder.rung=baseline.none.r0",
        "--network",
        "none",
        docker_spec["image"],
        "sleep",
        "600",
    )
    second = run_once()
    assert (
        first == second and len(first[0]) == 4 and first[1] == [k for k in first[0] if not k.endswith("manifest.json")]
    )
    left = docker_cli(
        "ps", "-a", "--filter", "label=traceladder.host=retry-host", "--format", "{{.Names}}"
    ).stdout.split()
    assert left == []


@pytest.mark.docker
def test_preflight_errors_name_the_host(docker_engine, docker_spec: dict, s3_server) -> None:
    from airflow.sdk.exceptions import AirflowException

    spec = _plain(docker_spec)
    context = {"dag": SimpleNamespace(dag_id="preflight-dag"), "ti": _TI()}
    with pytest.raises(AirflowException, match=r"^host retry-host: Docker daemon at tcp://127.0.0.1:9 unreachable"):
        _rung_operator(spec, "tcp://127.0.0.1:9").execute(context)
    op = _rung_operator(spec, docker_engine.unix_url)
    op.devices = ["/dev/definitely-not-a-gpu"]
    with pytest.raises(
        AirflowException, match=r"^host retry-host: a device of \['/dev/definitely-not-a-gpu'\] is missing"
    ):
        op.execute(context)
    with pytest.raises(
        AirflowException,
        match=r"^host retry-host: image traceladder/no-such-runner:0 is not present and could not be pulled",
    ):
        _rung_operator({**spec, "image": "traceladder/no-such-runner:0"}, docker_engine.unix_url).execute(context)
    with pytest.raises(
        AirflowException, match=r"^host retry-host: only [0-9.]+ GiB free on the Docker data root, need 100000"
    ):
        _rung_operator(spec, docker_engine.unix_url, min_free_gb=100000).execute(context)


@pytest.mark.docker
def test_gpu_preflight_refuses_a_busy_or_short_host_and_the_summary_marks_it(
    docker_engine, docker_spec: dict, s3_server
) -> None:
    """amd-smi (the stand-in's, with the real JSON shape) runs first thing in the rung's slot in a
    throw-away container of the rung's image with the rung's devices; a process on a GPU, or a
    GPU count other than GPUS_PER_NODE, fails the rung with one line before Primus starts, and the
    refused rung's metrics.json says so (status "preflight")."""
    from airflow.sdk.exceptions import AirflowException

    from traceladder.summary.collect import read_results

    spec = _plain(docker_spec)
    assert spec["docker_env_vars"]["GPUS_PER_NODE"] == str(
        STANDIN_GPUS
    )  # the cluster's gpus_per_node beats the seed's 8
    context = {"dag": SimpleNamespace(dag_id="gpu-dag"), "ti": _TI()}
    busy = {**spec, "docker_env_vars": {**spec["docker_env_vars"], "STANDIN_GPU_BUSY": "python3:4242"}}
    with pytest.raises(
        AirflowException, match=r"^host retry-host: GPU preflight: GPUs are busy: python3 \(pid 4242\) on GPU 0$"
    ):
        _rung_operator(busy, docker_engine.unix_url, run_id="gpu-busy").execute(context)
    short = _rung_operator(spec, docker_engine.unix_url, run_id="gpu-short")
    short.devices = STANDIN_DEVICES[:2]
    with pytest.raises(
        AirflowException,
        match=rf"^host retry-host: GPU preflight: amd-smi sees 1 GPU\(s\), GPUS_PER_NODE is {STANDIN_GPUS}$",
    ):
        short.execute(context)
    store = _store(s3_server)
    for run_id, needle in (("gpu-busy", "GPUs are busy"), ("gpu-short", "sees 1 GPU(s)")):
        results = read_results(store, {"ladder": "docker-retry", "run_id": run_id, "specs": [spec]})
        result = results[spec["rung_id"]]
        assert result.status == "preflight" and needle in (result.error or "") and result.traces == []
    left = docker_cli(
        "ps", "-a", "--filter", "label=traceladder.host=retry-host", "--format", "{{.Names}}"
    ).stdout.split()
    assert left == []  # the check containers are gone too


def _store(s3_server):
    from traceladder.storage.artifacts import S3ArtifactStore

    return S3ArtifactStore(s3_server.client(), s3_server.bucket, "traceladder", "docker-retry")


@pytest.mark.docker
def test_rocm_trace_lite_lens_with_and_without_the_wheel(
    docker_engine, docker_spec: dict, standin_images, s3_server
) -> None:
    """rtl is in no Primus image: the runner image built with the stand-in rocm_trace_lite wheel
    runs the lens (rtl strips `--` and primus-cli still parses); without it the rung fails before
    Primus starts, with one line that says how to provide the wheel."""
    from airflow.sdk.exceptions import AirflowException

    rtl_spec = _plain(docker_spec["_rtl"])
    context = {"dag": SimpleNamespace(dag_id="rtl-dag"), "ti": _TI()}
    result = _rung_operator(rtl_spec, docker_engine.unix_url, run_id="rtl-wheel").execute(context)
    assert result["status"] == "ok" and result["traces"][0].endswith("/traces/trace.db.gz"), result
    no_wheel = {**rtl_spec, "image": standin_images.runner_no_rtl}
    with pytest.raises(
        AirflowException,
        match=r"^rung baseline\.rocm_trace_lite\.l0 failed: lens rocm_trace_lite: rtl is not in the runner "
        r"image: put the rocm_trace_lite wheel \(GitHub release\) in docker/wheels/ or pass "
        r"--build-arg RTL_WHEEL=<wheel URL>, and rebuild the runner image$",
    ):
        _rung_operator(no_wheel, docker_engine.unix_url, run_id="rtl-none").execute(context)
    stored = s3_server.client().get_object(
        Bucket=s3_server.bucket, Key="traceladder/docker-retry/rtl-none/baseline.rocm_trace_lite.l0/log.txt.gz"
    )
    import gzip

    log = gzip.decompress(stored["Body"].read()).decode()
    assert "rtl is not in the runner image" in log and "primus-cli standin" not in log  # Primus never started


@pytest.mark.docker
def test_standin_is_as_strict_as_the_release_image(standin_images) -> None:
    """No primus-cli on PATH; a relative --config passes the hooks but fails in the ranks unless
    the cwd is the Primus root; a missing --config fails as Primus's argparse does; rtl strips
    `--` and primus-cli parses `direct --log_file F train pretrain ...` without it."""
    cfg = "examples/megatron/configs/MI355X/deepseek_v4_flash-BF16-pretrain.yaml"
    script = f"""
set -u
command -v primus-cli >/dev/null && echo ON_PATH
export PRIMUS_WORKSPACE=/tmp/ws
cd / && /workspace/Primus/primus-cli direct --log_file /tmp/a.txt train pretrain --config {cfg} --train_iters 3 \
>/dev/null 2>/tmp/e0; echo "root:$?"
grep -c "requirements.txt" /tmp/e0 || true
mkdir -p /tmp/x && touch /tmp/x/requirements.txt && cd /tmp/x
/workspace/Primus/primus-cli direct --log_file /tmp/a.txt train pretrain --config {cfg} --train_iters 3 >/dev/null \
2>/tmp/e1; echo "other:$?"
grep -c FileNotFoundError /tmp/e1 || true
cd /workspace/Primus && ./primus-cli direct --log_file /tmp/b.txt train pretrain --train_iters 3 >/dev/null \
2>/tmp/e2; echo "noconfig:$?"
grep -c "the following arguments are required: --config" /tmp/e2 || true
rtl trace --mode lite -o /tmp/rtl/trace.db /workspace/Primus/primus-cli direct --log_file /tmp/c.txt -- train \
pretrain --config {cfg} --train_iters 3 > /tmp/o3 2>&1; echo "rtl:$?"
grep -o 'argv=.*' /tmp/o3 | head -1
"""
    out = docker_cli(
        "run",
        "--rm",
        "--network",
        "none",
        "--device",
        "/dev/null:/dev/kfd",
        "--entrypoint",
        "sh",
        standin_images.runner,
        "-c",
        script,
        check=False,
    )
    lines = out.stdout.split("\n")
    assert "ON_PATH" not in lines, out.stdout
    assert lines[0:4] == ["root:1", "1", "other:1", "1"], out.stdout + out.stderr
    assert lines[4:6] == ["noconfig:2", "1"] and lines[6] == "rtl:0", out.stdout + out.stderr
    argv = json.loads(lines[7][len("argv=") :])
    assert "--" not in argv and argv[1:6] == ["direct", "--log_file", "/tmp/c.txt", "train", "pretrain"]


@pytest.mark.docker
def test_runner_says_what_to_do_when_its_base_lacks_boto3(standin_images) -> None:
    out = docker_cli(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "sh",
        standin_images.runner,
        "-c",
        "rm -rf /usr/lib/python3/dist-packages/boto3 && traceladder run-rung --spec-json '{}'",
        check=False,
    )
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "traceladder: runner image: Python package 'boto3' is missing: put boto3 and its dependencies in "
        "docker/wheels/ (pip download boto3 -d docker/wheels) and rebuild the runner image, or use a "
        "BASE_IMAGE that has boto3"
    )
