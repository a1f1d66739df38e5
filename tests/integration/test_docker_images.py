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
from needs import unavailable

from conftest import REPO, docker_cli  # tests/integration/conftest.py

NOFILE = 16384  # this sandbox's dockerd has a hard nofile limit of 20000


def test_runner_spec_reader_matches_rungspec_on_every_shipped_spec() -> None:
    from traceladder.config import find_ladder, load_ladder
    from traceladder.plan import build_plan
    from traceladder.runner.spec import RunnerSpec, SpecError

    count = 0
    for name in ("deepseek-v4-flash-mi350x", "proxy-local"):
        for spec in build_plan(load_ladder(find_ladder(name))):
            lite = RunnerSpec.from_json(spec.to_json())
            assert lite.to_json() == spec.to_json() and lite.primus_args() == spec.primus_args()
            assert (lite.rung_id, lite.profile_window, lite.profiled) == (spec.rung_id, spec.profile_window, spec.profiled)
            count += 1
    assert count > 20
    doc = json.loads(spec.to_json())
    with pytest.raises(SpecError, match="^bogus: unknown key"):
        RunnerSpec.from_json(json.dumps({**doc, "bogus": 1}))
    with pytest.raises(SpecError, match="^timeout_s: wrong type"):
        RunnerSpec.from_json(json.dumps({**doc, "timeout_s": "10"}))


def test_operator_is_written_against_the_pinned_provider() -> None:
    from traceladder.airflow.operators import PROVIDER_VERSION, RocmDockerOperator, RungDockerOperator

    assert importlib.metadata.version("apache-airflow-providers-docker") == PROVIDER_VERSION
    assert {"devices", "tls_conn_id", "image", "environment", "command"} <= set(RocmDockerOperator.template_fields)
    assert "private_environment" not in RungDockerOperator.template_fields and "run_id" in RungDockerOperator.template_fields
    for name in ("devices", "group_add", "security_opt", "tls_conn_id", "host_name", "spec", "run_id", "min_free_gb", "preflight"):
        assert f":param {name}:" in (RocmDockerOperator.__doc__ or "") + (RungDockerOperator.__doc__ or ""), name


def test_tracelens_image_runs_tracelens_like_its_regression_test() -> None:
    script = REPO / "docker" / "tracelens" / "tracelens-report"
    out = subprocess.run(["sh", str(script), "--dry-run", "/data/rank0.pt.trace.json.gz", "/data/out"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["TraceLens_generate_perf_report_pytorch", "--profile_json_path", "/data/rank0.pt.trace.json.gz",
                                  "--output_csvs_dir", "/data/out", "--enable_kernel_summary", "--short_kernel_study"]
    bad = subprocess.run(["sh", str(script), "/data/trace.db", "/data/out"], capture_output=True, text=True)
    assert bad.returncode == 2 and "not a PyTorch profiler trace" in bad.stderr
    dockerfile = (REPO / "docker" / "tracelens" / "Dockerfile").read_text()
    assert "git+https://github.com/AMD-AGI/TraceLens@${TRACELENS_REF}" in dockerfile and "ARG TRACELENS_REF=v1.0.0" in dockerfile


def test_runner_dockerfile_defaults_to_primus() -> None:
    lines = (REPO / "docker" / "runner" / "Dockerfile").read_text().splitlines()
    assert lines[0] == "ARG BASE_IMAGE=rocm/primus:v26.7" and lines[1] == "FROM ${BASE_IMAGE}"


@pytest.mark.docker
def test_compose_file_is_valid_for_docker_compose() -> None:
    if not shutil.which("docker-compose"):
        unavailable("docker-compose (apt-get install -y docker-compose)")
    compose = REPO / "docker" / "airflow" / "docker-compose.yaml"
    env = {**os.environ, **{k: "test-value" for k in ("POSTGRES_PASSWORD", "AIRFLOW_JWT_SECRET", "AIRFLOW_API_SECRET_KEY",
                                                      "AIRFLOW_FERNET_KEY", "S3_ACCESS_KEY", "S3_SECRET_KEY")}}
    out = subprocess.run(["docker-compose", "-f", str(compose), "config", "--services"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert set(out.stdout.split()) == {"postgres", "s3", "airflow-init", "api-server", "scheduler", "dag-processor", "triggerer",
                                       "redis", "worker-default", "worker-mi350x-01"}  # the last three: profile celery
    # secrets are required from the environment, never defaulted in the file
    no_env = {k: v for k, v in os.environ.items() if k != "POSTGRES_PASSWORD"}
    missing = subprocess.run(["docker-compose", "-f", str(compose), "config"], capture_output=True, text=True, env=no_env)
    assert missing.returncode != 0 and "POSTGRES_PASSWORD" in missing.stderr


@pytest.mark.docker
def test_runner_image_imports_only_stdlib_and_boto3(standin_images) -> None:
    out = docker_cli("run", "--rm", "--network", "none", standin_images.runner, "python3", "-c",
                     "import sys, traceladder.cli, traceladder.runner.rung; "
                     "print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'yaml', 'numpy', 'airflow'}))")
    assert out.stdout.strip() == "[]"
    bad = docker_cli("run", "--rm", "--network", "none", standin_images.runner, "traceladder", "run-rung", "--spec-json", '{"rung": 1}', check=False)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("--spec-json: ")


@pytest.mark.docker
def test_docker_inspect_shows_the_rocm_host_config(docker_engine, standin_images, monkeypatch: pytest.MonkeyPatch) -> None:
    from traceladder.airflow.operators import RocmDockerOperator

    monkeypatch.setenv("TRACELADDER_CONTAINER_NOFILE", str(NOFILE))
    op = RocmDockerOperator(
        task_id="inspect_me", image=standin_images.runner, docker_url=docker_engine.unix_url, devices=["/dev/null:/dev/kfd"],
        host_name="inspect-host", auto_remove="never", shm_size=2 * 2**30,
        command=["python3", "-c", "import os, stat; print(stat.S_ISCHR(os.stat('/dev/kfd').st_mode), sorted(os.getgroups()))"],
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
    assert inspect["Config"]["Labels"]["traceladder.managed"] == "true" and inspect["Config"]["Labels"]["traceladder.host"] == "inspect-host"


class _TI:
    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = value


def _rung_operator(spec: dict, url: str, **kw):
    from traceladder.airflow.operators import RungDockerOperator

    return RungDockerOperator(task_id="rung", spec=spec, run_id="retry-check", docker_url=url, devices=["/dev/null:/dev/kfd"],
                              host_name="retry-host", **kw)


@pytest.fixture
def docker_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, airflow_home, s3_server, standin_images) -> dict:
    """One rung spec of a docker ladder on this machine's daemon (clusters + ladders in tmp)."""
    import yaml

    from traceladder.config import find_ladder, load_ladder
    from traceladder.config.loader import CONFIG_DIR
    from traceladder.plan import build_plan

    clusters = {"schema": 1, "clusters": {"retry": {
        "backend": "docker", "runner_image": standin_images.runner,
        "storage": {"conn_id": "traceladder_s3", "bucket": s3_server.bucket, "prefix": "traceladder", "worker_endpoint_url": s3_server.endpoint_url},
        "hosts": [{"name": "retry-host", "pool": "traceladder-retry-host", "docker_url": "unix:///var/run/docker.sock", "devices": ["/dev/null:/dev/kfd"]}],
    }}}
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump(clusters))
    (tmp_path / "ladders").mkdir()
    (tmp_path / "ladders" / "docker-retry.yaml").write_text(yaml.safe_dump({
        "schema": 1, "extends": str(CONFIG_DIR / "ladders" / "deepseek-v4-flash-mi350x.yaml"), "ladder": "docker-retry",
        "cluster": "retry", "repeats": 1, "timeout_s": 60, "rungs": [{"name": "baseline"}], "lenses": None}))
    monkeypatch.setenv("TRACELADDER_CLUSTERS_FILE", str(tmp_path / "clusters.yaml"))
    monkeypatch.setenv("TRACELADDER_LADDERS_DIR", str(tmp_path / "ladders"))
    monkeypatch.setenv("TRACELADDER_CONTAINER_NOFILE", str(NOFILE))
    return json.loads(build_plan(load_ladder(find_ladder("docker-retry")))[0].to_json())


@pytest.mark.docker
def test_a_retry_writes_the_same_keys_and_manifest(docker_engine, docker_spec: dict, s3_server) -> None:
    client = s3_server.client()
    prefix = "traceladder/docker-retry/retry-check/baseline.none.r0/"

    def run_once() -> tuple[list[str], list[str]]:
        ti = _TI()
        result = _rung_operator(docker_spec, docker_engine.unix_url).execute({"dag": SimpleNamespace(dag_id="retry-dag"), "ti": ti})
        assert result["status"] == "ok" and ti.pushed["container"]["Devices"][0]["PathInContainer"] == "/dev/kfd"
        keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix).get("Contents", []))
        manifest = json.loads(client.get_object(Bucket=s3_server.bucket, Key=prefix + "manifest.json")["Body"].read())
        return keys, [e["key"] for e in manifest["objects"]]

    first = run_once()
    # a container left behind by a killed try (same rung, same run) is an orphan: the retry removes it
    docker_cli("run", "-d", "--label", "traceladder.managed=true", "--label", "traceladder.host=retry-host",
               "--label", "traceladder.run=retry-check", "--label", "traceladder.rung=baseline.none.r0",
               "--network", "none", docker_spec["image"], "sleep", "600")
    second = run_once()
    assert first == second and len(first[0]) == 4 and first[1] == [k for k in first[0] if not k.endswith("manifest.json")]
    left = docker_cli("ps", "-a", "--filter", "label=traceladder.host=retry-host", "--format", "{{.Names}}").stdout.split()
    assert left == []


@pytest.mark.docker
def test_preflight_errors_name_the_host(docker_engine, docker_spec: dict) -> None:
    from airflow.sdk.exceptions import AirflowException

    context = {"dag": SimpleNamespace(dag_id="preflight-dag"), "ti": _TI()}
    with pytest.raises(AirflowException, match=r"^host retry-host: Docker daemon at tcp://127.0.0.1:9 unreachable"):
        _rung_operator(docker_spec, "tcp://127.0.0.1:9").execute(context)
    op = _rung_operator(docker_spec, docker_engine.unix_url)
    op.devices = ["/dev/definitely-not-a-gpu"]
    with pytest.raises(AirflowException, match=r"^host retry-host: a device of \['/dev/definitely-not-a-gpu'\] is missing"):
        op.execute(context)
    with pytest.raises(AirflowException, match=r"^host retry-host: image traceladder/no-such-runner:0 is not present and could not be pulled"):
        _rung_operator({**docker_spec, "image": "traceladder/no-such-runner:0"}, docker_engine.unix_url).execute(context)
    with pytest.raises(AirflowException, match=r"^host retry-host: only [0-9.]+ GiB free on the Docker data root, need 100000"):
        _rung_operator(docker_spec, docker_engine.unix_url, min_free_gb=100000).execute(context)
